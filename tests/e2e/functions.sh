# SPDX-License-Identifier: MIT
# functions.sh - helpers shared by the end-to-end tests (source, don't run).
#
#   source "$(dirname "$0")/functions.sh"
#   requires nbdkit --version        # exit 77 (skip) when a tool is missing
#   make_tmpdir                      # sets $tmp; removed at exit
#   start_bg nbdkit -f ...           # PID in $BG_PID; killed at exit
#   on_exit 'some shell command'     # extra cleanup, run in reverse order
#   expect_fail bioio ... -- ...     # must exit non-zero
#   die "what went wrong"            # fail the test
#
# Environment (ctest sets both): BUILD_DIR, the CMake build tree; SRC_DIR,
# the source tree.  Run by hand: BUILD_DIR=build bash tests/e2e/test-x.sh
#
# Exit codes: 0 pass, 1 fail, 77 skip.  Skip only when an optional tool or
# facility is genuinely missing (no nbdkit, no /dev/fuse, mount not
# permitted), never to hide a failure.

set -e -u -o pipefail

SRC_DIR=${SRC_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
BUILD_DIR=${BUILD_DIR:-$SRC_DIR/build}
BUILD_DIR=$(cd "$BUILD_DIR" && pwd)
BIOIO=$BUILD_DIR/tools/bioio

# Backends every engine-level test runs on; override to narrow a run:
#   BIONBD_BACKENDS=threads bash tests/e2e/test-fault-eio.sh
BACKENDS=${BIONBD_BACKENDS:-io_uring threads}

test_name=$(basename "$0" .sh)

# ------------------------------------------------------------ messages

log() { printf '%s: %s\n' "$test_name" "$*" >&2; }
die() { printf '%s: FAIL: %s\n' "$test_name" "$*" >&2; exit 1; }
skip() { printf '%s: SKIP: %s\n' "$test_name" "$*" >&2; exit 77; }

# ------------------------------------------------------------ cleanup
#
# One EXIT trap does everything, in this order: the on_exit hooks (newest
# first), unmounting what mount_tmpfs/mount_nbdfuse mounted (newest first),
# stopping processes started with start_bg (by PID: TERM, then KILL), and
# removing $tmp.  Each step keeps going when one fails.

_cleanup_hooks=()
_cleanup_mounts=()
_cleanup_pids=()
tmp=

on_exit() { _cleanup_hooks+=("$1"); }

_cleanup() {
    local rc=$? i m pid n
    set +e
    trap '' INT TERM
    for ((i = ${#_cleanup_hooks[@]} - 1; i >= 0; i--)); do
        eval "${_cleanup_hooks[i]}"
    done
    for ((i = ${#_cleanup_mounts[@]} - 1; i >= 0; i--)); do
        _unmount "${_cleanup_mounts[i]}"
    done
    for pid in "${_cleanup_pids[@]}"; do
        kill -0 "$pid" 2>/dev/null || continue
        kill -TERM "$pid" 2>/dev/null
        for ((n = 0; n < 50; n++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null
    done
    for pid in "${_cleanup_pids[@]}"; do
        wait "$pid" 2>/dev/null
    done
    if [[ -n $tmp && -d $tmp ]]; then
        # --one-file-system: never reach into a mount that refused to go.
        rm -rf --one-file-system "$tmp"
    fi
    exit "$rc"
}
trap _cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

is_mounted() { findmnt -M "$1" >/dev/null 2>&1; }

_unmount() {
    local dir=$1 n
    is_mounted "$dir" || return 0
    case $(findmnt -n -o FSTYPE -M "$dir") in
    fuse*)
        # nbdfuse must not be killed: unmounting makes it exit cleanly.
        for ((n = 0; n < 50; n++)); do
            fusermount3 -u "$dir" 2>/dev/null && return 0
            sleep 0.1
        done
        fusermount3 -u -z "$dir"
        ;;
    *)
        umount "$dir" 2>/dev/null || umount -l "$dir"
        ;;
    esac
}

# make_tmpdir: a scratch directory in $tmp, removed at exit.
make_tmpdir() {
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/$test_name.XXXXXX")
}

# start_bg CMD [ARGS...]: run in the background; PID in $BG_PID, stopped
# at exit (after unmounting).  Output goes where the caller redirects it.
start_bg() {
    "$@" &
    BG_PID=$!
    _cleanup_pids+=("$BG_PID")
}

# ------------------------------------------------------------ requirements

# requires CMD [ARGS...]: skip unless CMD exists; with ARGS, unless running
# it succeeds (e.g. "requires nbdkit --filter=error null --dump-plugin").
requires() {
    if [[ $# -eq 1 ]]; then
        command -v "$1" >/dev/null 2>&1 || skip "$1 not found"
    else
        "$@" >/dev/null 2>&1 || skip "'$*' failed"
    fi
}

requires_root() { [[ $(id -u) -eq 0 ]] || skip "needs root"; }

# requires_fuse: /dev/fuse usable and fusermount3 present.
requires_fuse() {
    requires fusermount3
    [[ -c /dev/fuse && -r /dev/fuse && -w /dev/fuse ]] ||
        skip "/dev/fuse not available"
}

# requires_mount: mounting a tmpfs is permitted (root, not blocked by a
# container).  Needs $tmp.
requires_mount() {
    local probe=$tmp/.mount-probe
    mkdir -p "$probe"
    mount -t tmpfs -o size=64k tmpfs "$probe" 2>/dev/null ||
        skip "mount -t tmpfs not permitted"
    umount "$probe"
    rmdir "$probe"
}

# requires_bioio: the tool every engine test drives.  Missing = not built,
# which is a failure, not a skip.
requires_bioio() {
    [[ -x $BIOIO ]] || die "$BIOIO not built"
}

# ------------------------------------------------------------ mounts

# mount_tmpfs DIR SIZE: a small tmpfs at DIR (created), unmounted at exit.
mount_tmpfs() {
    mkdir -p "$1"
    mount -t tmpfs -o "size=$2" tmpfs "$1" || die "mount tmpfs $1 failed"
    _cleanup_mounts+=("$1")
}

# mount_nbdfuse DIR CMD [ARGS...]: serve "nbdkit -s ..." (or any NBD server
# speaking on stdin/stdout) as the file DIR/nbd; waits until it is ready.
# Unmounted at exit, which also ends nbdfuse and the server.
mount_nbdfuse() {
    local dir=$1 pidfile n
    shift
    mkdir -p "$dir"
    pidfile=$dir.pid
    rm -f "$pidfile"
    start_bg nbdfuse -P "$pidfile" "$dir" --command "$@"
    _cleanup_mounts+=("$dir")
    for ((n = 0; n < 100; n++)); do
        [[ -s $pidfile ]] && is_mounted "$dir" && return 0
        kill -0 "$BG_PID" 2>/dev/null || die "nbdfuse $dir exited early"
        sleep 0.1
    done
    die "nbdfuse $dir not ready after 10 s"
}

# ------------------------------------------------------------ assertions

# expect_fail CMD [ARGS...]: CMD must exit non-zero (its output passes
# through).  Use "! cmd" only where set -e semantics are not needed.
expect_fail() {
    local rc=0
    "$@" || rc=$?
    [[ $rc -ne 0 ]] || die "expected failure: $*"
}

# expect_ok CMD [ARGS...]: like running CMD, but says which command failed.
expect_ok() {
    local rc=0
    "$@" || rc=$?
    [[ $rc -eq 0 ]] || die "exit status $rc: $*"
}

# expect_grep PATTERN FILE: FILE has a line matching the (extended) regex.
expect_grep() {
    grep -E -q -- "$1" "$2" || {
        sed 's/^/    /' "$2" >&2
        die "$2: no line matches '$1'"
    }
}

# expect_no_grep PATTERN FILE: no line of FILE matches.
expect_no_grep() {
    ! grep -E -q -- "$1" "$2" || {
        sed 's/^/    /' "$2" >&2
        die "$2: unexpected line matching '$1'"
    }
}

# to_bytes SIZE: "64K" -> 65536 (binary suffixes K M G T, as parse_size).
to_bytes() {
    local s=$1 n m=1
    case $s in
    *K) m=$((1 << 10)) ;;
    *M) m=$((1 << 20)) ;;
    *G) m=$((1 << 30)) ;;
    *T) m=$((1 << 40)) ;;
    esac
    n=${s%[KMGT]}
    echo $((n * m))
}

# check_bytes FILE OFF LEN BYTE: every byte of FILE[OFF, OFF+LEN) is BYTE
# (0..255 or 0xNN).  Reads the file directly with dd, not through the engine.
check_bytes() {
    local file=$1 off len byte oct
    off=$(to_bytes "$2")
    len=$(to_bytes "$3")
    byte=$(($4))
    oct=$(printf '%03o' "$byte")
    if ! cmp -s \
        <(dd if="$file" iflag=skip_bytes,count_bytes skip="$off" \
            count="$len" bs=64K status=none) \
        <(head -c "$len" /dev/zero | tr '\0' "\\$oct"); then
        die "$file: bytes $off+$len are not all $(printf '0x%02x' "$byte")"
    fi
}

# stripe_member OFF CHUNK N: the member (0-based) and member offset of
# volume byte OFF, by the layout rule in DESIGN.md, as "MEMBER MOFF".
stripe_member() {
    local off=$1 chunk=$2 n=$3 k
    k=$((off / chunk))
    echo "$((k % n)) $(((k / n) * chunk + off % chunk))"
}

# ------------------------------------------------------------ NBD servers
#
# The NBD suites (test-plugin-*.sh) run against whichever server SERVER
# names, so one suite serves the nbdkit plugin now and the native server
# later:
#   SERVER=plugin (default)  nbdkit + $BUILD_DIR/plugins/nbdkit-bio-plugin.so
#   SERVER=bionbd            $BUILD_DIR/server/bionbd
# Tests describe volumes in one neutral syntax and never spell a server's
# own flags:
#
#   requires_server          the selected server is built (else FAIL) and
#                            its runtime (nbdkit) is installed (else skip)
#   start_server [-r] [--stripe-size S] [--size S] [--backend B]
#                [--conf FILE] [--export NAME] [--] [MEMBER...]
#                            serve on a unix socket in $tmp, in the
#                            background (stopped at exit); returns once it
#                            accepts connections.  Sets NBD_SOCK, NBD_URI,
#                            SERVER_PID, SERVER_LOG (its stderr).
#   stop_server              TERM by PID and wait, so a test can restart it
#   server_must_fail OPTS... same options; the server must exit non-zero
#                            without serving; its output in $SERVER_ERR
#   nbd_uri [EXPORT]         URI of the running server (for qemu, nbdcopy,
#                            fio, nbdinfo)
#   requires_nbdpy           Debian's python3 with libnbd's module (skip)
#   nbdpy [ARGS...]          run it with tests/e2e on PYTHONPATH, so
#                            scripts can "import nbd_e2e" (see nbd_e2e.py)

SERVER=${SERVER:-plugin}
BIO_PLUGIN=$BUILD_DIR/plugins/nbdkit-bio-plugin.so
BIONBD=$BUILD_DIR/server/bionbd
NBDPY=/usr/bin/python3
_server_seq=0
NBD_SOCK= NBD_URI= SERVER_PID= SERVER_LOG= SERVER_ERR=

requires_server() {
    case $SERVER in
    plugin)
        requires nbdkit
        [[ -f $BIO_PLUGIN ]] || die "$BIO_PLUGIN not built"
        ;;
    bionbd)
        [[ -x $BIONBD ]] || die "$BIONBD not built"
        ;;
    *) die "SERVER=$SERVER: expected plugin or bionbd" ;;
    esac
}

requires_nbdpy() {
    "$NBDPY" -c 'import nbd' >/dev/null 2>&1 ||
        skip "$NBDPY has no libnbd module (python3-libnbd)"
}

# nbdsh and its python must be Debian's: another python3 may come first on
# PATH and lack the nbd module.
nbdpy() {
    PATH=/usr/bin:$PATH PYTHONPATH=$SRC_DIR/tests/e2e${PYTHONPATH:+:$PYTHONPATH} \
        TEST_NAME=$test_name "$NBDPY" "$@"
}

nbd_uri() {
    echo "nbd+unix:///${1:-}?socket=$NBD_SOCK"
}

# _server_cmd SOCK PIDFILE OPTIONS... : the selected server's command line,
# in the array _cmd.
_server_cmd() {
    local sock=$1 pidfile=$2 ro= chunk= size= be= conf= export= arg
    shift 2
    local members=()
    while [[ $# -gt 0 ]]; do
        case $1 in
        -r) ro=1 ;;
        --stripe-size) chunk=$2; shift ;;
        --size) size=$2; shift ;;
        --backend) be=$2; shift ;;
        --conf) conf=$2; shift ;;
        --export) export=$2; shift ;;
        --) shift; members+=("$@"); break ;;
        -*) die "start_server: unknown option $1" ;;
        *) members+=("$1") ;;
        esac
        shift
    done
    case $SERVER in
    plugin)
        _cmd=(nbdkit -f --exit-with-parent -U "$sock" -P "$pidfile")
        [[ -z $ro ]] || _cmd+=(-r)
        _cmd+=("$BIO_PLUGIN")
        for arg in "${members[@]}"; do _cmd+=("file=$arg"); done
        [[ -z $chunk ]] || _cmd+=("stripe-size=$chunk")
        [[ -z $size ]] || _cmd+=("size=$size")
        [[ -z $be ]] || _cmd+=("backend=$be")
        [[ -z $conf ]] || _cmd+=("conf=$conf")
        [[ -z $export ]] || _cmd+=("export=$export")
        ;;
    bionbd)
        _cmd=("$BIONBD" -f -U "$sock" -P "$pidfile")
        [[ -z $ro ]] || _cmd+=(-r)
        [[ -z $chunk ]] || _cmd+=(--stripe-size "$chunk")
        [[ -z $size ]] || _cmd+=(--size "$size")
        [[ -z $be ]] || _cmd+=(--backend "$be")
        [[ -z $conf ]] || _cmd+=(-c "$conf")
        [[ -z $export ]] || _cmd+=(-e "$export")
        _cmd+=("${members[@]}")
        ;;
    esac
}

start_server() {
    local pidfile n
    _server_seq=$((_server_seq + 1))
    NBD_SOCK=$tmp/nbd.$_server_seq.sock
    SERVER_LOG=$tmp/server.$_server_seq.log
    pidfile=$tmp/server.$_server_seq.pid
    _server_cmd "$NBD_SOCK" "$pidfile" "$@"
    start_bg "${_cmd[@]}" </dev/null >"$SERVER_LOG" 2>&1
    SERVER_PID=$BG_PID
    NBD_URI=$(nbd_uri)
    # The pid file is written once the socket listens.
    for ((n = 0; n < 300; n++)); do
        [[ -s $pidfile && -S $NBD_SOCK ]] && return 0
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            sed 's/^/    /' "$SERVER_LOG" >&2
            die "server exited during start-up: ${_cmd[*]}"
        fi
        sleep 0.05
    done
    die "server not ready after 15 s: ${_cmd[*]}"
}

stop_server() {
    local n
    [[ -n $SERVER_PID ]] || return 0
    kill -TERM "$SERVER_PID" 2>/dev/null || :
    for ((n = 0; n < 100; n++)); do
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.05
    done
    kill -0 "$SERVER_PID" 2>/dev/null && die "server $SERVER_PID ignores SIGTERM"
    wait "$SERVER_PID" 2>/dev/null || :
    rm -f "$NBD_SOCK"
    SERVER_PID=
}

server_must_fail() {
    local pidfile rc=0
    _server_seq=$((_server_seq + 1))
    local sock=$tmp/nbd.$_server_seq.sock
    pidfile=$tmp/server.$_server_seq.pid
    SERVER_ERR=$tmp/server.$_server_seq.err
    _server_cmd "$sock" "$pidfile" "$@"
    # A server that starts serving would run until the timeout (124).
    timeout 20 "${_cmd[@]}" </dev/null >"$SERVER_ERR" 2>&1 || rc=$?
    if [[ $rc -eq 0 || $rc -eq 124 ]]; then
        sed 's/^/    /' "$SERVER_ERR" >&2
        die "expected the server to refuse (exit $rc): ${_cmd[*]}"
    fi
    [[ ! -S $sock ]] || die "refused, but created its socket: ${_cmd[*]}"
}

# _server_logs_on_failure: a failing test shows what the servers said.
_server_logs_on_failure() {
    local f
    [[ ${rc:-0} -ne 0 && ${rc:-0} -ne 77 && -n $tmp ]] || return 0
    for f in "$tmp"/server.*.log; do
        [[ -s $f ]] || continue
        printf '%s: --- %s (last 30 lines)\n' "$test_name" "${f##*/}" >&2
        tail -n 30 "$f" | sed 's/^/    /' >&2
    done
}
on_exit _server_logs_on_failure
