#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: raid1 and raid10 volumes (bioctl create --level) served by
# the front end.  Data: 32 MiB of random data in and out through nbdcopy on
# raid1 (2 members), raid10 (4 members, 2 copies) and raid10 (3 members, 2
# copies), every copy of every chunk where the placement rule says (copy j
# of chunk k at position kK + j: role p mod N, offset D + (p div N) * C,
# computed here from docs/format.md), and bioctl check finding the copies
# equal.  kill -9: the write-intent bitmap on the members has the bits of
# the regions written in the last seconds set and those written long
# before (cleared by the daemon) not; a copy made to differ inside a dirty
# region is found and rewritten by the resync at restart (the log says
# how much), the data written and flushed before the kill reads back, and
# bioctl check finds every copy identical; the same with raid10 killed
# while fio writes over 4 connections; with one member's bitmap block
# destroyed, the resync covers every region.  Degraded: with a member file
# gone the volume is refused in one line (a typo?), also read-only and from
# a config file; with --degraded it starts degraded (records the role
# faulty), serves, and
# the member brought back is stale: it stays out of service (its old data
# is never read back) until rebuilt, and bioctl info says so.  Split
# brain (each member served once without the other): refused together in
# one line naming both, bioctl info too; bioctl rebuild keeps one.  A
# member put back from an old copy of its file, or from a copy taken while
# the server ran, is stale (bioctl info), and never read.  After a spare took a role over, the command line that
# started the server starts it again (the replaced member left out); the
# replaced member named a spare is refused as a former member.  A member
# file cut short while served (on the page cache, and on tmpfs where reads
# go out with sendfile): every read still returns the data, from the other
# copy, and the member is recorded faulty; started again with it (cut
# below the layout, then below its data offset), the volume serves
# degraded, the short member left out (the log says why).  A rebuild stopped half-way
# (bioctl rebuild interrupted) is finished by the server from its
# checkpoint, and the rebuilt member alone holds all the data (named alone,
# refused in one line unless --degraded / degraded=true); bionbd stopped
# (SIGTERM) in the middle of a rebuild onto a spare stops it there (no
# "rebuilt" line, the role rebuilding) and the next start finishes it,
# the data written before the stop intact.  Spares are
# refused in one line: on a raid0, too small, holding a superblock, a
# member itself, missing (on the command line and in a config file).
# level = raid10 / copies = 2 (config) and --level (command line) over
# members that do not exist yet make a new mirror (layout checked, data
# read back through another member order); a level or copies that
# disagree with the superblocks, a mirror asked of headerless members or
# without a size, and copies on raid0 (--level raid0, headerless members,
# a raid0 with superblocks) are refused in one line.
source "$(dirname "$0")/functions.sh"

requires_server
requires nbdcopy
requires qemu-io
requires_fio_nbd
[[ -x $BIOCTL ]] || die "$BIOCTL not built"
make_tmpdir
cd "$tmp"

MiB=$((1 << 20))
head -c $((32 * MiB)) /dev/urandom >src

# layout N K MEMBER...: every copy of every chunk of src on the members.
layout() {
    /usr/bin/python3 - "$@" <<'PY' || die "layout rule: $*"
import sys
n, k = int(sys.argv[1]), int(sys.argv[2])
m = [open(x, "rb").read() for x in sys.argv[3:]]
src = open("src", "rb").read()
C, D = 64 << 10, 1 << 20
for c in range(len(src) // C):
    for j in range(k):
        p = c * k + j
        at = D + (p // n) * C
        if m[p % n][at:at + C] != src[c * C:(c + 1) * C]:
            raise SystemExit(f"chunk {c} copy {j}: not on role {p % n} at {at}")
PY
}

# bits MEMBER: the regions set in MEMBER's write-intent bitmap, one line.
bits() {
    /usr/bin/python3 - "$1" <<'PY'
import sys
b = open(sys.argv[1], "rb").read(8192)[4096:]
assert b[:8] == b"bionbdBM", b[:8]
n = int.from_bytes(b[8:12], "little")
print(" ".join(str(r) for r in range(n) if b[64 + r // 8] >> (r % 8) & 1))
PY
}

for geo in "raid1 2 2" "raid10 4 2" "raid10 3 2"; do
    read -r level n k <<<"$geo"
    log "$level, $n members, $k copies: data and layout"
    members=()
    for ((i = 0; i < n; i++)); do members+=("$level-$n-$i"); done
    if [[ $level == raid1 ]]; then
        expect_ok "$BIOCTL" create --level raid1 --size 32M "${members[@]}"
    else
        expect_ok "$BIOCTL" create --level raid10 --copies "$k" --size 32M \
            "${members[@]}"
    fi
    start_server "${members[@]}"
    nbdcopy src "$NBD_URI" || die "nbdcopy in"
    nbdcopy "$NBD_URI" back || die "nbdcopy out"
    stop_server
    cmp src back || die "$level: data read back differs"
    layout "$n" "$k" "${members[@]}"
    expect_ok "$BIOCTL" check "${members[@]}"
done

log "kill -9: bitmap, resync, flushed data intact"
set -- raid1-2-0 raid1-2-1
start_server "$@"
nbdcopy src "$NBD_URI" || die "nbdcopy in"
# Long enough for the daemon to clear every region (5 s, twice).
sleep 12
[[ -z $(bits raid1-2-0) ]] || die "idle regions still dirty: $(bits raid1-2-0)"
# Regions 20 and 21 only, then killed with nothing flushed since.
head -c $((2 * MiB)) /dev/urandom >new
nbdpy - "$NBD_URI" <<'PY' || die "write regions 20 and 21"
import nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
h.pwrite(open("new", "rb").read(), 20 << 20)
PY
kill -9 "$SERVER_PID"
wait "$SERVER_PID" 2>/dev/null || :
SERVER_PID=
rm -f "$NBD_SOCK"
[[ $(bits raid1-2-0) == "20 21" ]] || die "bitmap after kill -9: '$(bits raid1-2-0)', expected '20 21'"
[[ $(bits raid1-2-1) == "20 21" ]] || die "bitmap of member 1: '$(bits raid1-2-1)'"
# What a crash between the two copies leaves: one copy of region 21 differs.
dd if=/dev/urandom of=raid1-2-1 bs=4096 count=3 seek=$(((MiB + 21 * MiB) / 4096 + 7)) \
    conv=notrunc status=none
dd if=new of=src bs=1M seek=20 conv=notrunc status=none
if [[ $SERVER == bionbd ]]; then
    # Read-only, it is not resynced, and says which copy it reads.
    start_server -r "$@"
    expect_grep "not clean \(the copies may differ where the last writes went\); read-only, so not resynced: every read comes from the first live copy" "$SERVER_LOG"
    stop_server
    # The command line's spelling in its messages, not the config's.
    server_refuses_once "$1" "$1"
    expect_grep "^bionbd: member (.*/)?$1: given twice$" "$SERVER_ERR"
fi
start_server "$@"
if [[ $SERVER == bionbd ]]; then
    expect_grep "resync after an unclean shutdown \(regions in the write-intent bitmap\): 2 MiB compared, 64 KiB rewritten" "$SERVER_LOG"
fi
nbdcopy "$NBD_URI" back || die "nbdcopy out after the resync"
stop_server
cmp src back || die "data after kill -9 and resync differs"
expect_ok "$BIOCTL" check "$@"
[[ -z $(bits raid1-2-0) ]] || die "bitmap not clear after a clean stop"

log "kill -9 in the middle of writes (raid10): resync, flushed data intact"
set -- raid10-4-0 raid10-4-1 raid10-4-2 raid10-4-3
start_server "$@"
nbdcopy src "$NBD_URI" || die "nbdcopy in"  # flushed when it ends
fio --name=crash --ioengine=nbd --uri="$NBD_URI" --rw=randwrite \
    --bsrange=4k-256k --iodepth=16 --numjobs=4 --offset=16M --size=16M \
    --time_based --runtime=20 >fio-crash.out 2>&1 &
fio_pid=$!
sleep 2
kill -9 "$SERVER_PID"
wait "$SERVER_PID" 2>/dev/null || :
SERVER_PID=
wait "$fio_pid" 2>/dev/null || :
grep -q "WRITE: bw=" fio-crash.out || grep -q "io_u error\|Connection\|Transport" fio-crash.out ||
    { cat fio-crash.out >&2; die "fio wrote nothing before the kill"; }
rm -f "$NBD_SOCK"
start_server "$@"
if [[ $SERVER == bionbd ]]; then
    expect_grep "resync after an unclean shutdown \(regions in the write-intent bitmap\)" "$SERVER_LOG"
fi
nbdcopy "$NBD_URI" back || die "nbdcopy out after the crash"
stop_server
cmp -n $((16 * MiB)) src back || die "data flushed before the kill -9 differs"
expect_ok "$BIOCTL" check "$@"
set -- raid1-2-0 raid1-2-1

log "kill -9 with a destroyed bitmap block: every region resynced"
start_server "$@"
kill -9 "$SERVER_PID"
wait "$SERVER_PID" 2>/dev/null || :
SERVER_PID=
rm -f "$NBD_SOCK"
dd if=/dev/zero of=raid1-2-1 bs=4096 count=1 seek=1 conv=notrunc status=none
dd if=/dev/urandom of=raid1-2-1 bs=4096 count=1 seek=$(((MiB + 3 * MiB) / 4096)) \
    conv=notrunc status=none
start_server "$@"
if [[ $SERVER == bionbd ]]; then
    expect_grep "resync after an unclean shutdown \(every region, no bitmap\): 32 MiB compared, 64 KiB rewritten" "$SERVER_LOG"
fi
stop_server
expect_ok "$BIOCTL" check "$@"

log "degraded: a member gone, then back stale"
mv raid1-2-1 away
# A path that is not there may be a typo: degraded only when asked, in
# the command line and the config (and read-only too: the member there
# may be the stale one).
server_refuses_once "$@"
expect_grep "member (.*/)?raid1-2-1: No such file or directory; a mirror starts without one of its members only when asked \(--degraded, degraded = true\)" "$SERVER_ERR"
server_refuses_once -r "$@"
expect_grep "member (.*/)?raid1-2-1: No such file or directory" "$SERVER_ERR"
printf '[export m]\nfile = raid1-2-0\nfile = raid1-2-1\n' >typo.conf
server_refuses_once --conf typo.conf
expect_grep "member (.*/)?raid1-2-1: No such file or directory" "$SERVER_ERR"
start_server --degraded "$@"
if [[ $SERVER == bionbd ]]; then
    expect_grep "starting degraded, role 1 \(missing\)" "$SERVER_LOG"
fi
head -c $((32 * MiB)) /dev/urandom >src2
nbdcopy src2 "$NBD_URI" || die "nbdcopy in, degraded"
stop_server
mv away raid1-2-1
"$BIOCTL" info "$@" >info.txt || die "bioctl info: exit $?"
expect_grep "degraded \(1 of 2 members active\)" info.txt
expect_grep "role 1: raid1-2-1, (stale|faulty)" info.txt
start_server "$@"
# Member 1 still holds src: any read served from it would show.
for i in 1 2 3; do
    nbdcopy "$NBD_URI" back || die "nbdcopy out, stale member back"
    cmp src2 back || die "read $i returned the stale member's data"
done
stop_server
cmp <(tail -c +$((MiB + 1)) raid1-2-1 | head -c $((32 * MiB))) src ||
    die "the stale member was written to"
# A member file cut short while served (as a disk that starts returning
# short reads): the reads it cannot answer come from the other copy and it
# is marked faulty; on the page cache and on tmpfs (where bionbd sends
# reads with sendfile).
# wait_role_active ROLE MEMBER WHAT PATH...: until bioctl info PATH...
# shows role ROLE played by MEMBER, active (a rebuild done; at most 60 s),
# else fail saying WHAT.
wait_role_active() {
    local role=$1 member=$2 what=$3 state='' i
    shift 3
    for ((i = 0; i < 600; i++)); do
        "$BIOCTL" info "$@" >info.txt 2>&1 || :
        state=$(sed -n "s|^role $role: $member, ||p" info.txt)
        [[ $state == active ]] && return 0
        sleep 0.1
    done
    cat info.txt >&2
    die "$what ($state)"
}

cut_member() {
    local dir=$1
    log "a member cut short while served ($dir)"
    expect_ok "$BIOCTL" create --level raid1 --size 32M "$dir/c0" "$dir/c1"
    start_server "$dir/c0" "$dir/c1"
    nbdcopy src "$NBD_URI" || die "nbdcopy in"
    truncate -s $((2 * MiB)) "$dir/c1"
    for i in 1 2; do
        nbdcopy "$NBD_URI" back || die "nbdcopy out with a member cut"
        cmp src back || die "read $i with a member cut short differs"
    done
    if [[ $SERVER == bionbd ]]; then
        expect_grep "member $dir/c1 \(role 1\) marked faulty after a read error" "$SERVER_LOG"
    fi
    stop_server
    "$BIOCTL" info "$dir/c0" "$dir/c1" >info.txt || die "bioctl info: exit $?"
    expect_grep "role 1: -, missing \(recorded faulty\)" info.txt
    expect_grep "^left out: member $dir/c1: $((2 * MiB)) bytes, the layout needs [0-9]+$" info.txt
    # The same members again: the short one is left out, not the volume
    # (it was refused whole), the more so once cut below its data offset.
    for size in $((2 * MiB)) 8192; do
        truncate -s "$size" "$dir/c1"
        start_server "$dir/c0" "$dir/c1"
        if [[ $SERVER == bionbd ]]; then
            expect_grep "member $dir/c1: $size bytes, (the layout needs [0-9]+|shorter than its data offset): left out" "$SERVER_LOG"
            # The start-up line says what it is: there, but too short.
            expect_grep "members, chunk 64K, data offset 1M: $dir/c0, $dir/c1 \(too short: $size bytes, needs [0-9]+\)$" "$SERVER_LOG"
        fi
        nbdcopy "$NBD_URI" back || die "nbdcopy out, started with c1 $size bytes"
        cmp src back || die "started with c1 $size bytes: the data differs"
        stop_server
    done
}
cut_member "$tmp"
make_shmdir 128M
cut_member "$shm"

# A rebuild stopped half-way (bioctl rebuild --max-rate, interrupted)
# is resumed by the server at the checkpoint the superblocks hold, and the
# rebuilt member alone then holds all the data.
log "a rebuild stopped half-way: the server resumes it at its checkpoint"
expect_ok "$BIOCTL" create --level raid1 --size 32M rs0 rs1
start_server rs0 rs1
nbdcopy src "$NBD_URI" || die "nbdcopy in"
stop_server
rm rs1
"$BIOCTL" rebuild --max-rate 4M rs0 --replace rs1 rs2 >rebuild.out 2>&1 &
rb_pid=$!
cp=0
for ((i = 0; i < 100; i++)); do
    "$BIOCTL" info --json rs0 rs2 >info.json 2>/dev/null || :
    cp=$(/usr/bin/python3 -c '
import json
js = json.load(open("info.json"))
print(max([r.get("checkpoint", 0) or 0 for r in js["volume"].get("roles", [])] + [0]))' 2>/dev/null || echo 0)
    ((cp > 0)) && break
    sleep 0.1
done
kill -INT "$rb_pid"
wait "$rb_pid" && die "bioctl rebuild was not interrupted"
((cp > 0)) || { cat rebuild.out >&2; die "no rebuild checkpoint recorded"; }
start_server rs0 rs2
wait_role_active 1 rs2 "the server did not finish the rebuild" rs0 rs2
if [[ $SERVER == bionbd ]]; then
    expect_grep "rebuilding member (.*/)?rs2 \(role 1\) from [1-9][0-9]* of 32 MiB" "$SERVER_LOG"
fi
stop_server
rm rs0
# Named alone, a member of a complete mirror is most likely a typo: it
# would record the other faulty.  Said in one line; --degraded means it.
server_refuses_once rs2
expect_grep "volume '[^']*': 1 member given, 2 active in its superblocks \(role 0 is not there\): .*--degraded" "$SERVER_ERR"
# Read-only too: the member alone may be the one the other recorded stale.
server_refuses_once -r rs2
expect_grep "volume '[^']*': 1 member given, 2 active in its superblocks \(role 0 is not there\): .*--degraded" "$SERVER_ERR"
start_server --degraded rs2
nbdcopy "$NBD_URI" back || die "nbdcopy out of the rebuilt member alone"
stop_server
cmp src back || die "the member rebuilt in two goes differs"

# A server stopped in the middle of a rebuild stops the rebuild at its next
# step and records where it was, instead of finishing it first: a service
# manager's stop timeout would kill it, and leave the volume unclean.
if [[ $SERVER == bionbd ]]; then # the log says where the rebuild was
log "SIGTERM during a server's rebuild: it stops there, the next start resumes"
expect_ok "$BIOCTL" create --level raid1 --size 1G st0 st1
truncate -s 1100M st2
start_server --spare st2 --fault "member=1 op=write count=1" st0 st1
qemu-io -f raw -c "write -P 0x5a 0 64k" "$NBD_URI" >/dev/null ||
    die "the write that fails member 1"
for ((i = 0; i < 400; i++)); do
    grep -Eq "rebuilding member (.*/)?st2 \(role 1\)" "$SERVER_LOG" && break
    sleep 0.05
done
expect_grep "rebuilding member (.*/)?st2 \(role 1\) from 0 of 1024 MiB" "$SERVER_LOG"
stop_server
expect_no_grep "st2 \(role 1\) rebuilt" "$SERVER_LOG"
"$BIOCTL" info st0 st2 >info.txt 2>&1 || :
expect_grep "role 1: st2, rebuilding" info.txt
start_server st0 st2
# The start-up line says what the role is: rebuilding, not faulty.
expect_grep "raid1, 2 copies, 2 members, .*: (.*/)?st0, (.*/)?st2 \(rebuilding\)$" "$SERVER_LOG"
wait_role_active 1 st2 "the resumed rebuild did not finish" st0 st2
expect_grep "rebuilding member (.*/)?st2 \(role 1\) from [0-9]+ of 1024 MiB" "$SERVER_LOG"
qemu-io -f raw -r -c "read -P 0x5a 0 64k" "$NBD_URI" >/dev/null ||
    die "the write before the stop reads back wrong"
stop_server
rm -f st0 st1 st2
fi

log "spares: what is refused, in one line"
expect_ok "$BIOCTL" create --size 8M r0a r0b
truncate -s 64M big
server_refuses_once --spare big r0a r0b
expect_grep "spare (.*/)?big: only a raid1 or raid10 volume has spares" "$SERVER_ERR"
truncate -s 4M small
server_refuses_once --spare small "$@"
expect_grep "spare (.*/)?small: 4194304 bytes, a member of volume .* needs 34603008" "$SERVER_ERR"
server_refuses_once --spare r0a "$@"
expect_grep "spare (.*/)?r0a: holds a superblock of volume" "$SERVER_ERR"
server_refuses_once --spare raid1-2-0 "$@"
expect_grep "spare (.*/)?raid1-2-0: the same storage as member" "$SERVER_ERR"
server_refuses_once --spare nowhere "$@"
expect_grep "spare (.*/)?nowhere: No such file or directory" "$SERVER_ERR"
cat >spare.conf <<EOF2 || die "spare.conf"
[export m]
file = raid1-2-0
file = raid1-2-1
spare = small
EOF2
server_refuses_once --conf spare.conf
expect_grep "spare (.*/)?small: 4194304 bytes" "$SERVER_ERR"
log "level in the config and on the command line: a new mirror, or agreement"
cat >new.conf <<EOF2 || die "new.conf"
[export fresh]
level = raid10
copies = 2
size = 32M
file = n0
file = n1
file = n2
file = n3
EOF2
# More copies than members: the copies line is at fault, not the level's.
cat >copies.conf <<EOF2 || die "copies.conf"
[export c]
level = raid10
size = 8M
file = cp3a
copies = 3
file = cp3b
EOF2
server_refuses_line "copies\.conf:5: \[export c\] copies=3: more than the 2 members" \
    --conf copies.conf
[[ ! -e cp3a && ! -e cp3b ]] || die "a refused new mirror left files"
start_server --conf new.conf
nbdcopy src "nbd+unix:///fresh?socket=$NBD_SOCK" || die "nbdcopy into the new mirror"
stop_server
"$BIOCTL" info n0 n1 n2 n3 >info.txt || die "bioctl info of the new mirror: exit $?"
expect_grep "level raid10, 2 copies" info.txt
layout 4 2 n0 n1 n2 n3
start_server --level raid10 --copies 2 n3 n2 n1 n0
nbdcopy "$NBD_URI" back || die "nbdcopy out"
stop_server
cmp src back || die "the new mirror read back differs"
start_server --level raid1 --size 16M x0 x1
stop_server
"$BIOCTL" info x0 x1 >info.txt || die "bioctl info x0 x1: exit $?"
expect_grep "level raid1, 2 copies" info.txt
truncate -s 16M h0 h1
server_refuses_once --level raid1 h0 h1
expect_grep "(--level |level=)raid1: member (.*/)?h0 has no superblock; make the mirror with bioctl create" "$SERVER_ERR"
server_refuses_once --level raid1 y0 y1
expect_grep "(--level |level=)raid1: a size is needed" "$SERVER_ERR"
[[ ! -e y0 && ! -e y1 ]] || die "a refused new mirror left files"
server_refuses_once --level raid1 n0 n1 n2 n3
expect_grep "(--level |level=)raid1: volume '[0-9a-f-]{36}' is raid10 in its superblocks" "$SERVER_ERR"
server_refuses_once --copies 3 n0 n1 n2 n3
expect_grep "(--copies |copies=)3: volume .* has 2 in its superblocks" "$SERVER_ERR"
# The size as typed, not in bytes: the user looks for what they wrote.
server_refuses_line "(--stripe-size |stripe-size=)128K: volume .* has 65536 in its superblocks" \
    --stripe-size 128K n0 n1 n2 n3
server_refuses_once --level raid0 --copies 2 --size 16M z0 z1
expect_grep "(--copies |copies=)2: only raid1 and raid10 keep copies" "$SERVER_ERR"
# Copies of a raid0 without --level: headerless members (once served as
# if the copies were not asked for), and a raid0 with superblocks (whose
# "0 copies" was compared).
server_refuses_line "(--copies |copies=)3: only raid1 and raid10 keep copies, and members without superblocks are raid0" \
    --copies 3 h0 h1
expect_ok "$BIOCTL" create --name plain --size 8M p0 p1 >/dev/null
server_refuses_line "(--copies |copies=)2: volume 'plain' is raid0 in its superblocks, and only raid1 and raid10 keep copies" \
    --copies 2 p0 p1

# Split brain: member 1 served alone (0 gone), then member 0 alone (1
# gone): each records the other faulty and holds writes the other lacks.
# Together they are refused in one line naming both (served from the
# newest, or in the order given, one side's writes would vanish), and
# bioctl info says the same; bioctl rebuild copies the one kept over the
# other, and the volume then serves the kept data from either copy.
log "split brain: each member served without the other"
expect_ok "$BIOCTL" create --level raid1 --size 16M --name sbv sb0 sb1 >/dev/null
write_at0() { # BYTE
    NBD_URI=$NBD_URI BYTE=$1 nbdpy -c 'import os
from nbd_e2e import connect
h = connect()
h.pwrite(os.environ["BYTE"].encode() * 65536, 0)
h.flush()' || die "write $1"
}
read_at0() { # BYTE WHAT: eight reads, so that every copy serves some
    NBD_URI=$NBD_URI BYTE=$1 nbdpy -c 'import os
from nbd_e2e import connect
h = connect()
for _ in range(8):
    assert h.pread(65536, 0) == os.environ["BYTE"].encode() * 65536' ||
        die "$2: not the data ($1)"
}
for side in 1 0; do
    other=$((1 - side))
    mv "sb$other" away
    start_server --degraded sb0 sb1
    write_at0 "$side"
    stop_server
    mv away "sb$other"
done
server_refuses_once sb0 sb1
expect_grep "members (.*/)?sb0 and (.*/)?sb1 each record the other as faulty" "$SERVER_ERR"
"$BIOCTL" info sb0 sb1 >info.txt && die "bioctl info: a split brain is a volume"
expect_grep "members sb0 and sb1 each record the other as faulty" info.txt
expect_ok "$BIOCTL" rebuild sb1 --replace sb0 sb0 >/dev/null
start_server sb0 sb1
read_at0 1 "after the rebuild"
stop_server

# A member put back from an old copy of its file (a backup, a snapshot of
# one disk) missed the runs since: its event counter, moved at every clean
# stop, is behind, so it is stale and never read (the old code served its
# data for every other read).  The same with a copy taken while the server
# ran (a backup of a live disk): it carries that run's start mark, and the
# clean stop moves the counter on by two marks, so it is two behind too,
# not one (one behind is a mark cut short by a crash, kept in service: the
# code before the two marks served this copy's data).
put_back() { # PREFIX live|stopped: when PREFIX1 is copied
    local p=$1
    expect_ok "$BIOCTL" create --level raid1 --size 16M "${p}0" "${p}1" \
        >/dev/null
    start_server "${p}0" "${p}1"
    write_at0 1
    if [[ $2 == live ]]; then
        cp --sparse=always "${p}1" "${p}1.old"
    else
        stop_server
        cp --sparse=always "${p}1" "${p}1.old"
        start_server "${p}0" "${p}1"
    fi
    write_at0 2
    stop_server
    cp --sparse=always "${p}1.old" "${p}1"
    "$BIOCTL" info "${p}0" "${p}1" >info.txt 2>&1 || :
    expect_grep "role 1: ${p}1, (stale|faulty)" info.txt
    start_server "${p}0" "${p}1"
    read_at0 2 "a copy of a member put back ($2) was read"
    stop_server
    "$BIOCTL" info "${p}0" "${p}1" >info.txt 2>&1 || :
    expect_grep "role 1: ${p}1, (stale|faulty)" info.txt
    rm -f "${p}0" "${p}1" "${p}1.old"
}
log "a member put back from an old copy: stale, never read"
put_back oc stopped
log "a member put back from a copy taken while it ran: stale, never read"
put_back lc live

# After a spare took a role over, the command line that started the server
# (the spare named a spare, the member it replaced a member) starts the
# volume again: a service restarted after a takeover must not stay down.
# The spare serves in its role; the replaced member is left out, said so.
log "after a spare took over: the same command line starts again"
expect_ok "$BIOCTL" create --level raid1 --size 16M tk0 tk1 >/dev/null
truncate -s 20M tk2
start_server --spare tk2 --fault "member=1 op=write count=1" tk0 tk1
write_at0 7
wait_role_active 1 tk2 "the spare did not take role 1" tk0 tk2
if [[ $SERVER == bionbd ]]; then
    # The live statistics say so too, member by member.
    "$BIOCTL" stat --json "$tmp/server.$_server_seq.pid" >stat.json ||
        die "bioctl stat --json: exit $?"
    /usr/bin/python3 -c 'import json, sys
ms = {m["name"].rsplit("/", 1)[-1]: m.get("state")
      for m in json.load(open("stat.json"))["exports"][0]["members"]}
sys.exit(ms != {"tk0": "active", "tk1": "replaced", "tk2": "active"})' ||
        die "member states in the statistics: $(cat stat.json)"
    "$BIOCTL" stat -n 1 "$tmp/server.$_server_seq.pid" >stat.txt ||
        die "bioctl stat: exit $?"
    expect_grep "^  (.*/)?tk1 .* replaced$" stat.txt
fi
stop_server
start_server --spare tk2 tk0 tk1
if [[ $SERVER == bionbd ]]; then
    expect_grep "member (.*/)?tk1 was replaced in its role and is no longer part of it" "$SERVER_LOG"
fi
read_at0 7 "after the takeover"
stop_server
# The spare fails in its turn (role 1 is the spare's now): the same command
# line still starts, degraded on tk0, as with any member recorded faulty.
start_server --spare tk2 --fault "member=1 op=write count=1" tk0 tk1
write_at0 8
stop_server
start_server --spare tk2 tk0 tk1
read_at0 8 "after the spare failed"
stop_server
"$BIOCTL" info tk0 tk2 >info.txt 2>&1 || :
expect_grep "role 1: tk2, faulty" info.txt
rm -f tk0 tk1 tk2
# Without the spare, role 1 has no member: refused, as a member left off.
expect_ok "$BIOCTL" create --level raid1 --size 16M tk0 tk1 >/dev/null
truncate -s 20M tk2
start_server --spare tk2 --fault "member=1 op=write count=1" tk0 tk1
write_at0 7
wait_role_active 1 tk2 "the spare did not take role 1" tk0 tk2
stop_server
server_refuses_once tk0 tk1
expect_grep "volume '[^']*': 1 member given, 2 active in its superblocks \(role 1 is not there\)" "$SERVER_ERR"
# The replaced member as a spare: its superblock is refused, rightly named.
server_refuses_once --spare tk1 tk0 tk2
expect_grep "spare (.*/)?tk1: a former member of volume '[^']*', replaced in role 1" "$SERVER_ERR"
rm -f tk0 tk1 tk2
# A crash while a start or a clean stop writes its mark, member by member,
# leaves some one event behind, with the same roles: kept in service (the
# volume resynced as unclean), never stale; a raid10 that lost two of a
# pair that way would not start at all.  The same for a member's faulty
# mark cut short.  Two behind (an old copy) is stale.
events_of() { # FILE (alone, not a whole volume: bioctl info exits 1)
    { "$BIOCTL" info "$1" || :; } | sed -En 's/.*, events ([0-9]+), .*/\1/p'
}
log "a crash during a mark: members one event behind stay in service"
expect_ok "$BIOCTL" create --level raid10 --size 16M cm0 cm1 cm2 cm3 >/dev/null
start_server cm0 cm1 cm2 cm3
write_at0 4
stop_server
e=$(events_of cm0)
[[ $e =~ ^[0-9]+$ ]] || die "no event counter for cm0"
# The clean stop's last mark reached cm0 only: cm1-cm3 kept its first.
for m in cm1 cm2 cm3; do sb_edit "$m" events=$((e - 1)) clean=0; done
start_server cm0 cm1 cm2 cm3
if [[ $SERVER == bionbd ]]; then
    expect_no_grep "starting degraded" "$SERVER_LOG"
    expect_grep "resync after an unclean shutdown" "$SERVER_LOG"
fi
read_at0 4 "after a clean stop cut short"
stop_server
"$BIOCTL" info cm0 cm1 cm2 cm3 >info.txt || die "bioctl info: exit $?"
expect_grep "complete and consistent" info.txt
# The start's dirty mark reached cm0 only: the others are clean, one behind.
e=$(events_of cm0)
sb_edit cm0 events=$((e + 1)) clean=0
start_server cm0 cm1 cm2 cm3
if [[ $SERVER == bionbd ]]; then
    expect_no_grep "starting degraded" "$SERVER_LOG"
fi
stop_server
"$BIOCTL" info cm0 cm1 cm2 cm3 >info.txt || die "bioctl info: exit $?"
expect_grep "complete and consistent" info.txt
# cm3 marked faulty, the record written to cm0 only (a crash in between):
# cm1 and cm2, one behind with their own roles unchanged, stay in service;
# with them stale the pair {2, 3} would have no copy and no start.
e=$(events_of cm0)
sb_edit cm0 events=$((e + 1)) role3.state=1
start_server cm0 cm1 cm2 cm3
if [[ $SERVER == bionbd ]]; then
    expect_grep "raid10, 2 copies, 4 members, .*: (.*/)?cm0, (.*/)?cm1, (.*/)?cm2, (.*/)?cm3 \(faulty\)$" "$SERVER_LOG"
fi
read_at0 4 "after a faulty mark cut short"
stop_server
"$BIOCTL" info cm0 cm1 cm2 cm3 >info.txt 2>&1 || :
expect_grep "degraded \(3 of 4 members active\)" info.txt
# Two behind: stale, out of service until rebuilt.
e=$(events_of cm0)
sb_edit cm1 events=$((e - 2)) clean=1
"$BIOCTL" info cm0 cm1 cm2 cm3 >info.txt 2>&1 || :
expect_grep "role 1: cm1, (stale|faulty)" info.txt
rm -f cm0 cm1 cm2 cm3

# A member of another, smaller mirror is refused, not left out as short.
expect_ok "$BIOCTL" create --level raid1 --size 8M ov0 ov1 >/dev/null
expect_ok "$BIOCTL" create --level raid1 --size 16M ow0 ow1 >/dev/null
server_refuses_once ow0 ov1
expect_grep "member (.*/)?ov1: belongs to another volume" "$SERVER_ERR"
rm -f ov0 ov1 ow0 ow1
log ok
