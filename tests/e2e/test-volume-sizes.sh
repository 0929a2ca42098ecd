#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: the largest sizes and names.  Sizes above INT64_MAX (2^63,
# 2^64-512, 2^64-1), and sizes whose last stripe would need members larger
# than INT64_MAX (2^63-512 on one member), are refused at start with one
# line naming the size, on the command line and in a conf file, before any
# member is created or grown.  On tmpfs, whose files may reach INT64_MAX:
# 2^64-512 over three members is still refused; a volume of 2^63-512 bytes
# over two members serves with exactly that size; members whose whole
# stripes would make more than INT64_MAX bytes (two of 2^62) are refused
# when no size is given, and one stripe less serves.  A size one member's
# file system cannot hold fails when it is extended, and the members grown
# before it are cut back.  A start that fails after the open (socket
# directory missing, TCP port taken, --stats unwritable, a second export's
# member locked) removes the members it created, a new mirror's too, and
# cuts the ones it grew back to their old size and bytes.  A normal size
# still creates and grows members, and a start that served keeps them
# after its exit.  bionbd -e with a 4097-byte name exits 1 with one line;
# 4096 bytes serve under that name.
source "$(dirname "$0")/functions.sh"

requires_server
requires nbdinfo
make_tmpdir

INT64_MAX=9223372036854775807
d=$tmp/members
mkdir -p "$d"
truncate -s 1M "$d/m0" "$d/m1"

snapshot() {
    (cd "$d" && find . -printf '%p %y %s %T@\n' | sort)
}

# refuse PATTERN OPTIONS...: the server refuses with one line matching
# the extended regex PATTERN; the member directory is untouched.
refuse() {
    local pattern=$1
    shift
    snapshot >"$tmp/before"
    server_refuses_once "$@"
    expect_grep "$pattern" "$SERVER_ERR"
    snapshot >"$tmp/after"
    diff -u "$tmp/before" "$tmp/after" >&2 ||
        die "the member directory changed: $*"
    log "refused: $(cat "$SERVER_ERR")"
}

# size_is BYTES: the running server's default export has that size.
size_is() {
    local got
    got=$(nbdinfo --size "$NBD_URI") || die "nbdinfo --size failed"
    [[ $got == "$1" ]] || die "size $got, expected $1"
}

# ---- above INT64_MAX, or members that would have to pass it
for size in 9223372036854775808 18446744073709551104; do
    refuse "(--size |size=)$size: .*$INT64_MAX" --size "$size" "$d/m0"
    refuse "(--size |size=)$size: .*$INT64_MAX" --size "$size" "$d/m0" "$d/m1" "$d/new"
    printf '[export big]\nfile = %s\nsize = %s\n' "$d/m0" "$size" >"$tmp/big.conf"
    refuse "big.conf:3: \[export big\] size=$size: .*$INT64_MAX" \
        --conf "$tmp/big.conf"
done
refuse "size.*18446744073709551615.*512" --size 18446744073709551615 "$d/m0"
# 2^63-512 fits in a volume, but one member would need a whole last chunk.
refuse "(--size |size=)9223372036854775296: .*$INT64_MAX bytes per member" \
    --size 9223372036854775296 "$d/m0"

# ---- a normal size still creates and grows members
start_server --size 4M "$d/m0" "$d/m1" "$d/new"
size_is 4194304
stop_server
for f in m0 m1 new; do
    [[ $(stat -c %s "$d/$f") -ge 1398101 ]] || die "$d/$f was not grown"
done
rm "$d/new"
truncate -s 1M "$d/m0" "$d/m1"

# ---- a start that fails after the volume opened (its socket cannot be
# bound, its port is taken, its statistics file cannot be written, a
# second export's member is locked) leaves the member directory as it
# found it: members the open created are removed, members it grew are cut
# back to their old size with their bytes.  A start that serves keeps
# them, after its normal exit too.
l=$tmp/late
mkdir -p "$l"
printf 'the first bytes of an old member\n' >"$l/old"
truncate -s 1M "$l/old"
cp "$l/old" "$tmp/old.orig"

late_snapshot() {
    (cd "$l" && find . -printf '%p %y %s\n' | sort)
}

# A process of our own holds a port on 127.0.0.1 and a lock on $l/locked
# (as another writer of that member would): the servers are refused both.
truncate -s 1M "$l/locked"
start_bg /usr/bin/python3 -c 'import fcntl, socket, sys, time
f = open(sys.argv[1], "rb")
fcntl.flock(f, fcntl.LOCK_EX)
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(1)
print(s.getsockname()[1], flush=True)
time.sleep(600)' "$l/locked" >"$tmp/busy.port" 2>"$tmp/busy.err"
holder=$BG_PID
for ((n = 0; n < 200; n++)); do
    [[ -s $tmp/busy.port ]] && break
    sleep 0.05
done
busy_port=$(<"$tmp/busy.port")
[[ $busy_port =~ ^[0-9]+$ ]] || {
    cat "$tmp/busy.err" >&2
    die "no port held for the port-in-use cases"
}

# fails_late PATTERN HOW OPTIONS...: the server opens the volume OPTIONS
# describe, then fails: HOW is sock (its unix socket's directory does not
# exist), port (it listens on $busy_port instead) or opts (OPTIONS make
# it fail).  It exits 1 saying PATTERN; $l holds what it held before, and
# $l/old its old bytes.
fails_late() {
    local pattern=$1 how=$2 rc=0 a skip='' sock=$tmp/late.sock cmd=()
    shift 2
    [[ $how != sock ]] || sock=$tmp/no/such/dir/late.sock
    late_snapshot >"$tmp/late.before"
    _server_cmd "$sock" "$tmp/late.pid" "$@"
    for a in "${_cmd[@]}"; do
        if [[ -n $skip ]]; then
            skip=
        elif [[ $how == port && $a == -U ]]; then
            cmd+=(-i 127.0.0.1 -p "$busy_port")
            skip=1
        else
            cmd+=("$a")
        fi
    done
    timeout 20 "${SERVER_WRAPPER[@]}" "${cmd[@]}" </dev/null \
        >"$tmp/late.err" 2>&1 || rc=$?
    [[ $rc -eq 1 ]] || {
        sed 's/^/    /' "$tmp/late.err" >&2
        die "exit status $rc, expected 1: ${cmd[*]}"
    }
    expect_grep "$pattern" "$tmp/late.err"
    late_snapshot >"$tmp/late.after"
    diff -u "$tmp/late.before" "$tmp/late.after" >&2 ||
        die "a start that failed after the open changed $l: ${cmd[*]}"
    cmp "$l/old" "$tmp/old.orig" || die "$l/old: its bytes changed: ${cmd[*]}"
    log "failed after the open: $(grep -E -m1 -- "$pattern" "$tmp/late.err")"
}

no_sock='late\.sock: No such file or directory'
fails_late "$no_sock" sock --size 64M "$l/new0" "$l/new1"
fails_late 'Address already in use' port --size 64M "$l/new0" "$l/new1"
fails_late "$no_sock" sock --size 64M "$l/old" "$l/new0"
fails_late 'Address already in use' port --size 64M "$l/old"
fails_late "$no_sock" sock --level raid1 --size 64M "$l/new0" "$l/new1"
fails_late 'Address already in use' port --level raid1 --size 64M \
    "$l/new0" "$l/new1"
# bionbd tries the statistics file after the open (the plugin before).
fails_late 'stats.*No such file or directory' opts \
    --stats "$tmp/no/such/dir/stats.json" --size 64M "$l/old" "$l/new0"
# bionbd makes its trace file after the open: a failed start removes it.
if [[ $SERVER == bionbd ]]; then
    fails_late "$no_sock" sock --trace "$l/start.trace" --size 64M "$l/new0"
fi
# The first export opens (creating and growing members), the second's
# member is locked by another writer.
printf '[export one]\nfile = %s\nfile = %s\nsize = 8M\n[export two]\nfile = %s\n' \
    "$l/old" "$l/new0" "$l/locked" >"$tmp/late.conf"
fails_late 'locked: in use by another process' opts --conf "$tmp/late.conf"
kill "$holder"
wait "$holder" 2>/dev/null || :

# A start that serves keeps what it made, after its normal exit too.
start_server --size 64M "$l/old" "$l/new0"
stop_server
[[ $(stat -c %s "$l/old") -eq $((32 << 20)) && -f $l/new0 ]] ||
    die "a start that served did not keep $l/old grown and $l/new0"
cmp -n 1048576 "$l/old" "$tmp/old.orig" || die "$l/old: its bytes changed"
start_server --level raid1 --size 64M "$l/r0" "$l/r1"
stop_server
[[ -f $l/r0 && -f $l/r1 ]] || die "a mirror that served was not kept"
rm -rf "$l"

# ---- on tmpfs, files may be as large as INT64_MAX
huge=
if [[ $(stat -f -c %T /dev/shm 2>/dev/null) == tmpfs && -w /dev/shm ]]; then
    huge=$(mktemp -d /dev/shm/"$test_name".XXXXXX)
    on_exit "rm -rf '$huge'"
elif [[ $(id -u) -eq 0 ]] && mkdir -p "$tmp/tmpfs" &&
    mount -t tmpfs -o size=1M tmpfs "$tmp/tmpfs" 2>/dev/null; then
    umount "$tmp/tmpfs"
    mount_tmpfs "$tmp/tmpfs" 1M
    huge=$tmp/tmpfs
fi
if [[ -z $huge ]] || ! truncate -s 4611686018427387904 "$huge/probe" 2>/dev/null; then
    log "SKIP the INT64_MAX-sized volumes: no tmpfs (/dev/shm or mount) that holds 2^62-byte files"
else
    rm -f "$huge/probe"
    # Three members could hold 2^64-512 bytes between them; the volume
    # still cannot have that size.
    refuse "(--size |size=)18446744073709551104: .*$INT64_MAX" \
        --size 18446744073709551104 "$huge/h0" "$huge/h1" "$huge/h2"
    [[ ! -e $huge/h0 ]] || die "$huge/h0 was created"
    start_server --size 9223372036854775296 "$huge/h0" "$huge/h1"
    size_is 9223372036854775296
    stop_server
    rm -f "$huge"/h*

    # No size: whole stripes of the smallest member, times two.
    truncate -s 4611686018427387904 "$huge/h0" "$huge/h1"
    refuse "h0: 4611686018427387904 bytes.*2 members.*$INT64_MAX" \
        "$huge/h0" "$huge/h1"
    truncate -s $((4611686018427387904 - 65536)) "$huge/h1"
    start_server "$huge/h0" "$huge/h1"
    size_is $(((4611686018427387904 - 65536) * 2))
    stop_server
    rm -f "$huge"/h*

    # The first member grows on tmpfs, the second cannot on $tmp's file
    # system: the failure names it and the first is cut back.
    truncate -s 1M "$huge/h0"
    if truncate -s 4611686018427387904 "$d/probe" 2>/dev/null; then
        log "SKIP the cut-back case: $d's file system holds 2^62-byte files too"
    else
        server_must_fail --size 9223372036854775296 "$huge/h0" "$d/m1"
        expect_grep "m1: File too large" "$SERVER_ERR"
        [[ $(stat -c %s "$huge/h0") -eq 1048576 ]] ||
            die "$huge/h0 was left at $(stat -c %s "$huge/h0") bytes"
        [[ $(stat -c %s "$d/m1") -eq 1048576 ]] || die "$d/m1 changed size"
        log "refused: $(cat "$SERVER_ERR")"
    fi
    rm -f "$d/probe"
fi

# ---- names: NBD allows 4096 bytes (bionbd's -e; the plugin's names come
# from conf files, whose lines are far shorter)
if [[ $SERVER == bionbd ]]; then
    long=$(head -c 4097 /dev/zero | tr '\0' n)
    rc=0
    timeout 20 "$BIONBD" -f -U "$tmp/long.sock" -e "$long" "$d/m0" \
        </dev/null >"$tmp/long.err" 2>&1 || rc=$?
    [[ $rc -eq 1 ]] || die "bionbd -e <4097 bytes>: exit $rc, expected 1"
    [[ $(grep -c . "$tmp/long.err") -eq 1 ]] ||
        { cat "$tmp/long.err" >&2; die "bionbd -e <4097 bytes>: not one line"; }
    expect_grep "export name 'n+\.\.\.': 4097 bytes, longer than .*4096" "$tmp/long.err"
    log "refused: $(cut -c1-120 "$tmp/long.err")"
    start_server --export "${long:1}" "$d/m0"
    nbdinfo --list "$(nbd_uri)" >"$tmp/list" || die "nbdinfo --list failed"
    expect_grep "export=\"${long:1}\"|${long:1}" "$tmp/list"
    stop_server
else
    log "SKIP export names on the command line: the plugin takes none (export= selects from conf=)"
fi
log "ok"
