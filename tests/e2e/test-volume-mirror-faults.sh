#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: real faults below a mirror.  One member of a raid1 (2
# members) and of a raid10 (4 members, 2 copies) is an nbdfuse file over
# "nbdkit --filter=error memory"; fio verify runs over 4 connections while
# the filter's trigger files switch on EIO for that member's writes and
# reads mid-run: fio passes (every write and read answered from the other
# copies), the log says the member was marked faulty, bioctl info says so
# after the stop (the survivors' superblocks recorded it), and once it is
# faulty no I/O reaches it: with the member gone
# entirely: its nbdfuse killed) a verify-only pass of the same workload passes and the log
# gains no member error.  With a spare (bionbd --spare, plugin spare=),
# the member that fails under load is replaced and rebuilt while fio
# writes; then the member holding the only other copy fails too, and fio's
# data still verifies: the rebuild copied everything, including what
# raced it.  Two failures on raid1 with 2 copies: the first
# failing member is marked faulty; when the last copy fails too, writes
# end with EIO (never a silent loss) and the log says why (the write, or
# the bitmap that must precede it in a clean region, failed on every
# live copy), while data written before still reads back once that
# member answers again.
source "$(dirname "$0")/functions.sh"

requires_server
requires_root
requires findmnt
requires fio
requires nbdfuse --version
requires nbdkit --filter=error memory --version
requires_fuse
fio --enghelp=nbd >/dev/null 2>&1 || skip "fio has no nbd engine"
[[ -x $BIOCTL ]] || die "$BIOCTL not built"
make_tmpdir
cd "$tmp"

# fuse_member NAME: DIR NAME/nbd, 40 MiB, failing writes while NAME.w
# exists and reads while NAME.r exists.
fuse_member() {
    mount_nbdfuse "$tmp/$1" \
        nbdkit -s --exit-with-parent --filter=error memory 40M \
        error-pwrite=EIO error-pwrite-rate=1 error-pwrite-file="$tmp/$1.w" \
        error-pread=EIO error-pread-rate=1 error-pread-file="$tmp/$1.r"
}

# fio_job OUT EXTRA...: 4 connections, random writes verified by reading
# back; throttled so that the fault lands in the middle of the run.
fio_job() {
    local out=$1
    shift
    fio --name=mirror --ioengine=nbd --uri="$NBD_URI" \
        --rw=randwrite --bsrange=4k-64k --iodepth=8 \
        --numjobs=4 --size=4M --offset_increment=6M \
        --verify=crc32c --verify_fatal=1 --randseed=77 \
        --group_reporting "$@" >"$out" 2>&1
}

member_errors() { grep -c "member .*/nbd: " "$SERVER_LOG" || :; }

# make_volume LEVEL COPIES N PREFIX [I=NAME]...: a volume of N members,
# plain files $tmp/PREFIX-i except member I, the nbdfuse member NAME
# (mounted here); its paths in the array $members.
make_volume() {
    local level=$1 copies=$2 n=$3 prefix=$4 i spec
    shift 4
    members=()
    for ((i = 0; i < n; i++)); do members+=("$tmp/$prefix-$i"); done
    for spec in "$@"; do
        fuse_member "${spec#*=}"
        members[${spec%%=*}]=$tmp/${spec#*=}/nbd
    done
    expect_ok "$BIOCTL" create --force --level "$level" --copies "$copies" \
        --size 24M "${members[@]}"
}

scenario() {
    local level=$1 copies=$2 n=$3 fuse=$4 out
    log "$level: member $fuse fails mid-load"
    make_volume "$level" "$copies" "$n" "$level" "$fuse=f-$level"
    start_server "${members[@]}"
    out=$tmp/fio-$level.out
    fio_job "$out" --rate_iops=160 &
    local fio_pid=$!
    sleep 1
    touch "$tmp/f-$level.w" "$tmp/f-$level.r"
    wait "$fio_pid" || { sed 's/^/    /' "$out" >&2; die "$level: fio failed"; }
    grep -q 'READ: bw=' "$out" || die "$level: fio verified nothing"
    expect_grep "member $tmp/f-$level/nbd \(role $fuse\) marked faulty after a (write|read) error" "$SERVER_LOG"
    # Gone entirely: nothing may reach it any more.
    local before
    before=$(member_errors)
    # (The server holds the file open, so no unmount: nbdfuse dies, and
    # whatever reaches the file from now on fails with ENOTCONN.)
    kill -9 "$(cat "$tmp/f-$level.pid")" || die "kill nbdfuse"
    fio_job "$out.2" --verify_only=1 ||
        { sed 's/^/    /' "$out.2" >&2; die "$level: verify after the loss"; }
    [[ $(member_errors) == "$before" ]] ||
        die "$level: I/O reached the faulty member after it was marked"
    stop_server
    "$BIOCTL" info "${members[@]}" >info.txt 2>&1 || :
    expect_grep "degraded \($((n - 1)) of $n members active\)" info.txt
    expect_grep "role $fuse: .*(faulty|missing)" info.txt
}

scenario raid1 2 2 1
scenario raid10 2 4 2

# rebuild LEVEL COPIES N: members FIRST and SECOND (indexes) are nbdfuse
# files; FIRST fails under load, the spare takes its role and is rebuilt
# while fio writes; then SECOND, which held the only other copy of
# FIRST's data, fails too: what fio wrote still verifies, so the rebuild
# copied everything (and every write that raced it).
rebuild() {
    local level=$1 copies=$2 n=$3 first=$4 second=$5 out i
    log "$level: rebuild onto a spare under load, then lose the other copy"
    make_volume "$level" "$copies" "$n" "rb-$level" "$first=r1-$level" \
        "$second=r2-$level"
    truncate -s 40M "$tmp/spare-$level"
    start_server --spare "$tmp/spare-$level" "${members[@]}"
    out=$tmp/fio-rb-$level.out
    fio_job "$out" --rate_iops=160 &
    local fio_pid=$!
    sleep 1
    touch "$tmp/r1-$level.w" "$tmp/r1-$level.r"
    wait "$fio_pid" || { sed 's/^/    /' "$out" >&2; die "$level: fio failed"; }
    # The superblocks say when the spare has its role and is rebuilt
    # (what the log says at info level, nbdkit shows only with -v).
    local state=''
    for ((i = 0; i < 100; i++)); do
        "$BIOCTL" info "${members[@]}" "$tmp/spare-$level" >info.txt 2>&1 || :
        state=$(sed -n "s|^role $first: $tmp/spare-$level, ||p" info.txt)
        [[ $state == active ]] && break
        sleep 0.1
    done
    [[ $state == active ]] || { cat info.txt >&2; die "$level: the spare is not rebuilt ($state)"; }
    if [[ $SERVER == bionbd ]]; then
        expect_grep "spare $tmp/spare-$level takes over role $first" "$SERVER_LOG"
        expect_grep "member $tmp/spare-$level \(role $first\) rebuilt" "$SERVER_LOG"
    fi
    touch "$tmp/r2-$level.w" "$tmp/r2-$level.r"
    fio_job "$out.2" --verify_only=1 ||
        { sed 's/^/    /' "$out.2" >&2; die "$level: verify after the rebuild"; }
    grep -q 'READ: bw=' "$out.2" || die "$level: verified nothing"
    stop_server
}

rebuild raid1 2 2 1 0
rebuild raid10 2 4 2 3

log "raid1: both copies fail"
fuse_member a
fuse_member b
expect_ok "$BIOCTL" create --force --level raid1 --size 24M "$tmp/a/nbd" "$tmp/b/nbd"
start_server "$tmp/a/nbd" "$tmp/b/nbd"
head -c $((1 << 20)) /dev/urandom >one
nbdpy - "$NBD_URI" <<'PY' || die "first write"
import nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
h.pwrite(open("one", "rb").read(), 0)
h.flush()
PY
touch a.w
nbdpy - "$NBD_URI" <<'PY' || die "write with one copy failing"
import nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
h.pwrite(open("one", "rb").read(), 1 << 20)
PY
expect_grep "member $tmp/a/nbd \(role 0\) marked faulty" "$SERVER_LOG"
touch b.w
nbdpy - "$NBD_URI" <<'PY' || die "write with every copy failing"
import errno, nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
# Region 0 was written a moment ago (its bitmap bit is set); region 8
# was not: there even the bitmap cannot be written any more.
for off in (4096, 8 << 20):
    try:
        h.pwrite(b"x" * 4096, off)
    except nbd.Error as e:
        assert e.errno in ("EIO", errno.EIO), (e.errno, e)
    else:
        raise SystemExit(f"a write at {off} that no copy took succeeded")
PY
expect_grep "write at offset 4096 length 4096 failed on every live copy" "$SERVER_LOG"
expect_grep "the write-intent bitmap could not be written" "$SERVER_LOG"
rm -f b.w
nbdpy - "$NBD_URI" <<'PY' || die "data written before"
import nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
one = open("one", "rb").read()
assert h.pread(len(one), 0) == one
assert h.pread(len(one), 1 << 20) == one
PY
stop_server
log ok
