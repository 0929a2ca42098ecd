# SPDX-License-Identifier: MIT
# functions.sh - helpers shared by the end-to-end tests (source, don't run).
#
#   source "$(dirname "$0")/functions.sh"
#   requires nbdkit --version        # exit 77 (skip) when a tool is missing
#   make_tmpdir                      # sets $tmp; removed at exit
#   start_bg nbdkit -f ...           # PID in $BG_PID; killed at exit
#   on_exit 'some shell command'     # extra cleanup, run in reverse order
#   bioio --backend threads A B -- write 0 64K 1   # the engine CLI, with a timeout
#   expect_fail bioio ... -- ...     # must exit non-zero
#   die "what went wrong"            # fail the test
#
# Environment (ctest sets both): BUILD_DIR, the CMake build tree; SRC_DIR,
# the source tree.  Run by hand: BUILD_DIR=build bash tests/e2e/test-x.sh
#
# BIONBD_E2E_KEEP=1: a failing test leaves its $tmp (server logs and all)
# in place and says where; a passing or skipped one removes it as ever.
#
# Exit codes: 0 pass, 1 fail, 77 skip.  Skip only when an optional tool or
# facility is genuinely missing (no nbdkit, no /dev/fuse, mount not
# permitted), never to hide a failure.

set -e -u -o pipefail

SRC_DIR=${SRC_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
BUILD_DIR=${BUILD_DIR:-$SRC_DIR/build}
BUILD_DIR=$(cd "$BUILD_DIR" && pwd)
BIOIO=$BUILD_DIR/tools/bioio
BIOCTL=$BUILD_DIR/tools/bioctl

# Seconds any one engine tool run may take before it counts as hung.
TOOL_TIMEOUT=${BIONBD_TOOL_TIMEOUT:-60}

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
_failure_logs=()
tmp=

on_exit() { _cleanup_hooks+=("$1"); }

# show_log_on_failure FILE: print FILE's tail if the test fails (server
# logs that would otherwise be deleted with $tmp).
show_log_on_failure() { _failure_logs+=("$1"); }

_cleanup() {
    local rc=$? i m pid n
    set +e
    trap '' INT TERM
    if [[ $rc -ne 0 && $rc -ne 77 ]]; then
        for m in "${_failure_logs[@]}"; do
            [[ -s $m ]] || continue
            echo "--- $m (last 40 lines)" >&2
            tail -n 40 "$m" >&2
        done
    fi
    for ((i = ${#_cleanup_hooks[@]} - 1; i >= 0; i--)); do
        eval "${_cleanup_hooks[i]}"
    done
    for ((i = ${#_cleanup_mounts[@]} - 1; i >= 0; i--)); do
        _unmount "${_cleanup_mounts[i]}"
    done
    for pid in "${_cleanup_pids[@]}"; do
        kill -0 "$pid" 2>/dev/null || continue
        kill -TERM "$pid" 2>/dev/null
        wait_gone "$pid" 5 || kill -KILL "$pid" 2>/dev/null
    done
    for pid in "${_cleanup_pids[@]}"; do
        wait "$pid" 2>/dev/null
    done
    if [[ -n $tmp && -d $tmp ]]; then
        if [[ $rc -ne 0 && $rc -ne 77 && -n ${BIONBD_E2E_KEEP:-} ]]; then
            echo "$test_name: kept $tmp (BIONBD_E2E_KEEP)" >&2
        else
            # --one-file-system: never reach into a mount that refused to go.
            rm -rf --one-file-system "$tmp"
        fi
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

# mount_tmpfs DIR SIZE [OPTIONS]: a small tmpfs at DIR (created), unmounted
# at exit.  OPTIONS are more -o options, comma separated.
mount_tmpfs() {
    mkdir -p "$1"
    mount -t tmpfs -o "size=$2${3:+,$3}" tmpfs "$1" ||
        die "mount tmpfs $1 failed"
    _cleanup_mounts+=("$1")
}

# loop_setup VAR LOSETUP-ARGS...: a new loop device in $VAR, detached at
# exit (before $tmp goes and before mounts are undone).
loop_setup() {
    local var=$1 dev
    shift
    dev=$(losetup -f --show "$@") || return 1
    on_exit "losetup -d '$dev' 2>/dev/null"
    printf -v "$var" '%s' "$dev"
}

# fstype PATH: the file system type of PATH, as stat -f names it (tmpfs,
# ramfs, ext2/ext3, xfs ...).
fstype() { stat -f -c %T "$1"; }

# make_shmdir SIZE: a directory on tmpfs in $shm (removed at exit), for
# memory-backed members: one under /dev/shm when that is a tmpfs, else a
# tmpfs of SIZE mounted in $tmp (which needs root).
make_shmdir() {
    if [[ $(fstype /dev/shm 2>/dev/null) == tmpfs ]]; then
        shm=$(mktemp -d "/dev/shm/$test_name.XXXXXX")
        on_exit "rm -rf '$shm'"
    else
        requires_mount
        mount_tmpfs "$tmp/shm" "$1"
        shm=$tmp/shm
    fi
}

# mount_nbdfuse DIR CMD [ARGS...]: serve "nbdkit -s ..." (or any NBD server
# speaking on stdin/stdout) as the file DIR/nbd; waits until it is ready.
# Unmounted at exit, which also ends nbdfuse and the server.  Their output
# goes to DIR.log, shown if the test fails.
mount_nbdfuse() {
    local dir=$1 pidfile n
    shift
    mkdir -p "$dir"
    pidfile=$dir.pid
    rm -f "$pidfile"
    start_bg nbdfuse -P "$pidfile" "$dir" --command "$@" >"$dir.log" 2>&1
    show_log_on_failure "$dir.log"
    _cleanup_mounts+=("$dir")
    for ((n = 0; n < 100; n++)); do
        [[ -s $pidfile ]] && is_mounted "$dir" && return 0
        kill -0 "$BG_PID" 2>/dev/null || die "nbdfuse $dir exited early"
        sleep 0.1
    done
    die "nbdfuse $dir not ready after 10 s"
}

# ------------------------------------------------------------ tools

# bioio ARGS...: the engine's command-line tool (tools/bioio.c), killed
# after $TOOL_TIMEOUT seconds so a hung engine fails the test instead of
# hanging it (exit status 124 then).
bioio() {
    timeout -k 5 "$TOOL_TIMEOUT" "$BIOIO" "$@"
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

# expect_same_file EXPECTED ACTUAL [WHAT]: the files are equal; otherwise
# show a diff and fail.
expect_same_file() {
    diff -u "$1" "$2" >&2 || die "${3:-$2}: differs from $1 (diff above)"
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
# volume byte OFF, by the layout rule in docs/design.md, as "MEMBER MOFF".
stripe_member() {
    local off=$1 chunk=$2 n=$3 k
    k=$((off / chunk))
    echo "$((k % n)) $(((k / n) * chunk + off % chunk))"
}

# ------------------------------------------------------------ NBD servers
#
# The NBD suites (test-volume-*.sh) run against whichever server SERVER
# names; ctest runs each twice, as e2e/plugin/* and e2e/bionbd/*:
#   SERVER=plugin (default)  nbdkit + $BUILD_DIR/plugins/nbdkit-bio-plugin.so
#   SERVER=bionbd            $BUILD_DIR/server/bionbd
# Tests describe volumes in one neutral syntax and never spell a server's
# own flags:
#
#   requires_server          the selected server is built (else FAIL) and
#                            its runtime (nbdkit) is installed (else skip)
#   start_server [-r] [--stripe-size S] [--size S] [--backend B]
#                [--conf FILE] [--export NAME] [--threads N]
#                [--async-min SIZE] [--sendfile-min SIZE] [--spare FILE]
#                [--level LEVEL] [--copies K] [--timeout S] [--]
#                [MEMBER...]
#                            serve on a unix socket in $tmp, in the
#                            background (stopped at exit); returns once it
#                            accepts connections.  Sets NBD_SOCK, NBD_URI,
#                            SERVER_PID, SERVER_LOG (its stderr).
#                            --async-min and --sendfile-min are bionbd's
#                            alone (the plugin copies on nbdkit's threads,
#                            and nbdkit owns the socket).
#   stop_server              TERM by PID and wait, so a test can restart it
#   server_must_fail OPTS... same options; the server must exit non-zero
#                            without serving; its output in $SERVER_ERR
#   server_refuses_once OPTS... the same, with exactly one line of output
#   server_refuses_line PATTERN OPTS... and exit status 1, the line
#                            matching PATTERN
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
NBD_SOCK='' NBD_URI='' SERVER_PID='' SERVER_LOG='' SERVER_ERR='' SERVER_RC=''

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

# fresh_members: the files named in the array "members" made anew, empty,
# 16 MiB each (sparse).
fresh_members() {
    rm -f "${members[@]}"
    for m in "${members[@]}"; do truncate -s 16M "$m"; done
}

# py: Debian's python3 (another may come first on PATH).
py() { /usr/bin/python3 "$@"; }

# fio_outage_ok PID JSON SECONDS: fio (PID, --continue_on_error=all,
# --output=JSON) ran while a member was lost: it must end by itself within
# SECONDS (a hang is a failure), with EIO errors and successes both.
fio_outage_ok() {
    local pid=$1 json=$2 n
    for ((n = 0; n < $3 * 10; n++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && die "fio still running $3 s after the member was lost"
    wait "$pid" || :
    py - "$json" <<'PY' || die "fio during the outage"
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
err, first = j["total_err"], j.get("first_error", 0)
done = j["read"]["total_ios"] + j["write"]["total_ios"]
print(f"fio: {done} requests, {err} errors (first errno {first})", file=sys.stderr)
if not err or first != 5 or done <= err:
    sys.exit("expected EIO errors and successes both")
PY
}

# requires_fio_nbd: fio with its nbd engine (libnbd), or skip.
requires_fio_nbd() {
    requires fio
    fio --enghelp=nbd >/dev/null 2>&1 || skip "fio has no nbd engine"
}

# nbdsh and its python must be Debian's: another python3 may come first on
# PATH and lack the nbd module.
nbdpy() {
    PATH=/usr/bin:$PATH PYTHONPATH=$SRC_DIR/tests/e2e${PYTHONPATH:+:$PYTHONPATH} \
        TEST_NAME=$test_name "$NBDPY" "$@"
}

# sb_edit FILE FIELD=VALUE...: rewrite FILE's superblock with those fields
# set (version, flags, events, clean, roleK.state; "+N"/"-N" relative) and
# its checksum made right again: what a crash or an old copy leaves.
sb_edit() {
    nbdpy "$SRC_DIR/tests/e2e/sb_format.py" "$@" || die "sb_edit $*"
}

# shellcheck disable=SC2120 # EXPORT is optional
nbd_uri() {
    echo "nbd+unix:///${1:-}?socket=$NBD_SOCK"
}

# _server_cmd SOCK PIDFILE OPTIONS... : the selected server's command line,
# in the array _cmd.
_server_cmd() {
    local sock=$1 pidfile=$2 ro='' chunk='' size='' be='' conf='' export='' arg
    local threads='' async='' sendfile='' level='' copies='' verbose='' n
    local stats='' nostats='' trace='' tracebuf='' rtimeout='' nolock=''
    local degraded=''
    shift 2
    local mem=() spares=() faults=()
    while [[ $# -gt 0 ]]; do
        case $1 in
        -r) ro=1 ;;
        --stripe-size) chunk=$2; shift ;;
        --size) size=$2; shift ;;
        --backend) be=$2; shift ;;
        --conf) conf=$2; shift ;;
        --export) export=$2; shift ;;
        --threads) threads=$2; shift ;;
        --spare) spares+=("$2"); shift ;;
        --fault | --delay) faults+=("${1#--}" "$2"); shift ;;
        -v) verbose=1 ;;
        --stats) stats=$2; shift ;;
        --no-statistics) nostats=1 ;;
        --no-lock) nolock=1 ;;
        --degraded) degraded=1 ;;
        --trace) trace=$2; shift ;;
        --trace-buffer) tracebuf=$2; shift ;;
        --timeout) rtimeout=$2; shift ;;
        --level) level=$2; shift ;;
        --copies) copies=$2; shift ;;
        --async-min) async=$2; shift ;;
        --sendfile-min) sendfile=$2; shift ;;
        --) shift; mem+=("$@"); break ;;
        -*) die "start_server: unknown option $1" ;;
        *) mem+=("$1") ;;
        esac
        shift
    done
    case $SERVER in
    plugin)
        _cmd=(nbdkit -f --exit-with-parent -U "$sock" -P "$pidfile")
        [[ -z $ro ]] || _cmd+=(-r)
        [[ -z $verbose ]] || _cmd+=(-v)
        [[ -z $threads ]] || _cmd+=(--threads "$threads")
        _cmd+=("$BIO_PLUGIN")
        for arg in "${mem[@]}"; do _cmd+=("file=$arg"); done
        for arg in "${spares[@]}"; do _cmd+=("spare=$arg"); done
        for ((n = 0; n < ${#faults[@]}; n += 2)); do
            _cmd+=("${faults[n]}=${faults[n + 1]}")
        done
        [[ -z $stats ]] || _cmd+=("stats=$stats")
        [[ -z $nostats ]] || _cmd+=("statistics=false")
        [[ -z $nolock ]] || _cmd+=("lock=false")
        [[ -z $degraded ]] || _cmd+=("degraded=true")
        [[ -z $trace ]] || _cmd+=("trace=$trace")
        [[ -z $tracebuf ]] || _cmd+=("trace-buffer=$tracebuf")
        [[ -z $rtimeout ]] || _cmd+=("timeout=$rtimeout")
        [[ -z $level ]] || _cmd+=("level=$level")
        [[ -z $copies ]] || _cmd+=("copies=$copies")
        [[ -z $chunk ]] || _cmd+=("stripe-size=$chunk")
        [[ -z $size ]] || _cmd+=("size=$size")
        [[ -z $be ]] || _cmd+=("backend=$be")
        [[ -z $conf ]] || _cmd+=("conf=$conf")
        [[ -z $export ]] || _cmd+=("export=$export")
        ;;
    bionbd)
        _cmd=("$BIONBD" -f -U "$sock" -P "$pidfile")
        [[ -z $ro ]] || _cmd+=(-r)
        [[ -z $verbose ]] || _cmd+=(-v)
        [[ -z $threads ]] || _cmd+=(-t "$threads")
        [[ -z $chunk ]] || _cmd+=(--stripe-size "$chunk")
        [[ -z $size ]] || _cmd+=(--size "$size")
        [[ -z $be ]] || _cmd+=(--backend "$be")
        [[ -z $conf ]] || _cmd+=(-c "$conf")
        [[ -z $export ]] || _cmd+=(-e "$export")
        [[ -z $async ]] || _cmd+=(--async-min "$async")
        [[ -z $sendfile ]] || _cmd+=(--sendfile-min "$sendfile")
        for arg in "${spares[@]}"; do _cmd+=(--spare "$arg"); done
        for ((n = 0; n < ${#faults[@]}; n += 2)); do
            _cmd+=("--${faults[n]}" "${faults[n + 1]}")
        done
        [[ -z $stats ]] || _cmd+=(--stats "$stats")
        [[ -z $nostats ]] || _cmd+=(--no-statistics)
        [[ -z $nolock ]] || _cmd+=(--no-lock)
        [[ -z $degraded ]] || _cmd+=(--degraded)
        [[ -z $trace ]] || _cmd+=(--trace "$trace")
        [[ -z $tracebuf ]] || _cmd+=(--trace-buffer "$tracebuf")
        [[ -z $rtimeout ]] || _cmd+=(--timeout "$rtimeout")
        [[ -z $level ]] || _cmd+=(--level "$level")
        [[ -z $copies ]] || _cmd+=(--copies "$copies")
        _cmd+=("${mem[@]}")
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
    show_log_on_failure "$SERVER_LOG"
    NBD_URI="nbd+unix:///?socket=$NBD_SOCK"
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

# wait_gone PID SECONDS: true once PID (any process, not only a child) is
# gone, false if it still runs after SECONDS.
wait_gone() {
    local n
    for ((n = 0; n < $2 * 20; n++)); do
        kill -0 "$1" 2>/dev/null || return 0
        sleep 0.05
    done
    ! kill -0 "$1" 2>/dev/null
}

# _term_and_wait SECONDS [SIG]: SIGTERM (or SIG) $SERVER_PID, wait for it
# to exit (die if it outlives SECONDS) and leave its exit status in
# _term_rc.
_term_and_wait() {
    local sig=${2:-TERM}
    _term_rc=0
    kill -"$sig" "$SERVER_PID" 2>/dev/null || :
    wait_gone "$SERVER_PID" "$1" ||
        die "server $SERVER_PID still running $1 s after SIG$sig"
    wait "$SERVER_PID" 2>/dev/null || _term_rc=$?
    SERVER_PID=
}

stop_server() {
    [[ -n $SERVER_PID ]] || return 0
    _term_and_wait 15
    # bionbd promises exit 0 after SIGTERM; under ASan a report fails too.
    if [[ $SERVER == bionbd ]]; then
        [[ $_term_rc -eq 0 ]] || die "bionbd exited $_term_rc after SIGTERM"
        check_sanitizer_log "$SERVER_LOG"
    fi
    rm -f "$NBD_SOCK"
}

# SERVER_WRAPPER: a command (array) that server_must_fail runs the server
# under, e.g. to start it in a namespace of its own; empty by default.
SERVER_WRAPPER=()

server_must_fail() {
    local pidfile rc=0
    _server_seq=$((_server_seq + 1))
    local sock=$tmp/nbd.$_server_seq.sock
    pidfile=$tmp/server.$_server_seq.pid
    SERVER_ERR=$tmp/server.$_server_seq.err
    _server_cmd "$sock" "$pidfile" "$@"
    # A server that starts serving would run until the timeout (124).
    timeout 20 "${SERVER_WRAPPER[@]}" "${_cmd[@]}" </dev/null >"$SERVER_ERR" 2>&1 ||
        rc=$?
    SERVER_RC=$rc
    if [[ $rc -eq 0 || $rc -eq 124 ]]; then
        sed 's/^/    /' "$SERVER_ERR" >&2
        die "expected the server to refuse (exit $rc): ${_cmd[*]}"
    fi
    [[ ! -S $sock ]] || die "refused, but created its socket: ${_cmd[*]}"
}

# server_refuses_once OPTS...: server_must_fail, and what it said is
# exactly one line (in $SERVER_ERR): a config mistake is one line.
server_refuses_once() {
    local lines
    server_must_fail "$@"
    lines=$(grep -c . "$SERVER_ERR" || :)
    if [[ $lines -ne 1 ]]; then
        sed 's/^/    /' "$SERVER_ERR" >&2
        die "expected one line of output, got $lines: $*"
    fi
}

# server_refuses_line PATTERN OPTS...: server_refuses_once, with exit
# status 1 and the one line matching the extended regex PATTERN.
server_refuses_line() {
    local pattern=$1
    shift
    server_refuses_once "$@"
    [[ $SERVER_RC -eq 1 ]] || die "exit status $SERVER_RC, expected 1: $*"
    expect_grep "$pattern" "$SERVER_ERR"
}

# ------------------------------------------------------------ TLS keys
#
# make_tls_keys DIR: keys made here, for this run (gnutls-bin), all valid
# for two days:
#   DIR/server/   ca-cert.pem server-cert.pem server-key.pem (for
#                 --tls-certificates; the server certificate names
#                 localhost and 127.0.0.1)
#   DIR/client/   ca-cert.pem client-cert.pem client-key.pem (libnbd's
#                 tls-certificates= and qemu's tls-creds-x509 dir=)
#   DIR/rogue/    the same for a client whose certificate another CA signed
#   DIR/psk/keys.psk    identity "alice" (qemu's tls-creds-psk dir=)
#   DIR/wrong.psk       "alice" with another key
#   DIR/mallory.psk     "mallory", whom the server does not know
make_tls_keys() {
    local d=$1 ca
    requires certtool
    requires psktool
    mkdir -p "$d/server" "$d/client" "$d/rogue" "$d/psk" "$d/ca"
    # ECDSA: RSA keys take seconds each to make.
    _key() { certtool --generate-privkey --key-type=ecdsa --outfile "$1" 2>/dev/null; }
    _tmpl() { printf '%s\n' "expiration_days = 2" "$@" >"$d/ca/tmpl"; }
    for ca in good rogue; do
        _key "$d/ca/$ca-key.pem"
        _tmpl "cn = bionbd test CA $ca" ca cert_signing_key
        certtool --generate-self-signed --load-privkey "$d/ca/$ca-key.pem" \
            --template "$d/ca/tmpl" --outfile "$d/ca/$ca-cert.pem" 2>/dev/null
    done
    # _cert KEY OUT CA TEMPLATE-LINES...
    _cert() {
        local key=$1 out=$2 ca=$3
        shift 3
        _key "$key"
        _tmpl "$@"
        certtool --generate-certificate --load-privkey "$key" \
            --load-ca-certificate "$d/ca/$ca-cert.pem" \
            --load-ca-privkey "$d/ca/$ca-key.pem" --template "$d/ca/tmpl" \
            --outfile "$out" 2>/dev/null
    }
    _cert "$d/server/server-key.pem" "$d/server/server-cert.pem" good \
        "cn = localhost" "dns_name = localhost" "ip_address = 127.0.0.1" \
        tls_www_server encryption_key signing_key
    _cert "$d/client/client-key.pem" "$d/client/client-cert.pem" good \
        "cn = bionbd test client" tls_www_client encryption_key signing_key
    _cert "$d/rogue/client-key.pem" "$d/rogue/client-cert.pem" rogue \
        "cn = bionbd rogue client" tls_www_client encryption_key signing_key
    cp "$d/ca/good-cert.pem" "$d/server/ca-cert.pem"
    cp "$d/ca/good-cert.pem" "$d/client/ca-cert.pem"
    # The rogue client trusts our server; the server does not trust it.
    cp "$d/ca/good-cert.pem" "$d/rogue/ca-cert.pem"
    psktool -u alice -p "$d/psk/keys.psk" >/dev/null
    psktool -u alice -p "$d/wrong.psk" >/dev/null
    psktool -u mallory -p "$d/mallory.psk" >/dev/null
    [[ -s $d/server/server-cert.pem && -s $d/rogue/client-cert.pem &&
        -s $d/psk/keys.psk ]] || die "make_tls_keys: certtool/psktool failed"
}

# ------------------------------------------------------------ bionbd itself
#
# The native server's own suites (test-server-*.sh) need its real flags
# (-c, -t, -r, --backend, ...), so they start it directly:
#
#   start_bionbd ARGS...     $BIONBD -f -U SOCK -P PIDFILE ARGS... in the
#                            background (stderr in $SERVER_LOG), stopped by
#                            PID at exit; returns once it accepts
#                            connections.  Sets NBD_SOCK, NBD_URI,
#                            SERVER_PID, SERVER_LOG, SERVER_PIDFILE.
#   stop_bionbd [SIG]        SIGTERM (or SIG: INT, QUIT) by PID: the server
#                            must exit 0 within 20 s, remove its socket and
#                            pidfile, and leave no sanitizer report in its
#                            log.
#   check_sanitizer_log FILE FILE holds no AddressSanitizer, LeakSanitizer,
#                            ThreadSanitizer or UBSan report (any build: the
#                            patterns never match a clean run).
SERVER_PIDFILE=

start_bionbd() {
    local n
    _server_seq=$((_server_seq + 1))
    NBD_SOCK=$tmp/nbd.$_server_seq.sock
    SERVER_LOG=$tmp/server.$_server_seq.log
    SERVER_PIDFILE=$tmp/server.$_server_seq.pid
    [[ -x $BIONBD ]] || die "$BIONBD not built"
    start_bg "$BIONBD" -f -U "$NBD_SOCK" -P "$SERVER_PIDFILE" "$@" \
        </dev/null >"$SERVER_LOG" 2>&1
    SERVER_PID=$BG_PID
    show_log_on_failure "$SERVER_LOG"
    NBD_URI=$(nbd_uri)
    # bionbd writes the pidfile after its listeners are set up.
    for ((n = 0; n < 400; n++)); do
        [[ -s $SERVER_PIDFILE && -S $NBD_SOCK ]] && return 0
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            sed 's/^/    /' "$SERVER_LOG" >&2
            die "bionbd exited during start-up: $BIONBD $*"
        fi
        sleep 0.05
    done
    die "bionbd not ready after 20 s: $BIONBD $*"
}

check_sanitizer_log() {
    if grep -E -q 'ERROR: (Address|Leak|Thread)Sanitizer|WARNING: ThreadSanitizer|runtime error:|SUMMARY: (Address|UndefinedBehavior|Leak|Thread)Sanitizer' "$1"; then
        sed 's/^/    /' "$1" >&2
        die "$1: sanitizer report (above)"
    fi
}

stop_bionbd() {
    [[ -n $SERVER_PID ]] || return 0
    _term_and_wait 20 "${1:-TERM}"
    check_sanitizer_log "$SERVER_LOG"
    [[ $_term_rc -eq 0 ]] || {
        sed 's/^/    /' "$SERVER_LOG" >&2
        die "bionbd exited with status $_term_rc after SIG${1:-TERM}"
    }
    [[ ! -e $NBD_SOCK ]] || die "bionbd left its socket $NBD_SOCK behind"
    [[ ! -e $SERVER_PIDFILE ]] || die "bionbd left its pidfile behind"
}
