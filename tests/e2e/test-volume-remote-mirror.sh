#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: self-describing volumes over remote members (docs/remote.md,
# "Superblocks and mirrors on remote members"): the superblocks, the
# write-intent bitmap and the role states live on the remote exports.
#  - bioctl create makes a raid1 of two remote NBD exports (nbdkit file
#    over local files, so each member can also be read directly); bioctl
#    info reads the superblocks over NBD and from the files alike; create
#    again is refused (the remotes hold a superblock).  bioctl check over
#    NBD finds the copies equal, finds one changed behind the volume's
#    back, and --repair rewrites it; bioctl rebuild refuses remotes.
#  - The server assembles the mirror from the remotes' superblocks in any
#    order; data written through it lies at the data offset of both files.
#  - A remote member killed while fio writes with verify: fio sees no
#    error, the member is marked faulty once, the surviving member's
#    superblock says so (events bumped); the volume keeps serving with the
#    remote back, and a restart assembles it degraded (stale) with the
#    data intact.  A clean stop leaves the survivor clean.
#  - A mirror of a remote and a local file whose remote is unreachable at
#    start: the volume starts degraded, named in one line, and serves
#    from the file.
#  - A local spare takes over the role of a remote that died, is rebuilt
#    while serving, and then holds the data.
#  - A raid0 with superblocks over remotes serves; with one remote gone it
#    is refused in one line.
#  - A mirror asked of remotes without superblocks: refused, naming bioctl
#    create; a remote spare: refused.
#  - A mirror of a remote with a writeback cache and a file: the remote
#    killed and restarted with writes it had not flushed; every read
#    returns the write (the member is taken out, the file serves), and the
#    flush succeeds.  The same mirror degraded to that remote alone: it
#    keeps serving flushed data and new writes, and flushes fail.
source "$(dirname "$0")/functions.sh"

requires_server
requires_nbdpy
requires nbdkit
requires_fio_nbd
requires nbdcopy
make_tmpdir
cd "$tmp"

declare -A RPID

# start_remote NAME: nbdkit serving $tmp/NAME.img on $tmp/r-NAME.sock.
start_remote() {
    local n
    rm -f "r-$1.sock"
    start_bg nbdkit -f --exit-with-parent -t 4 -U "$tmp/r-$1.sock" \
        file "$tmp/$1.img" </dev/null >"r-$1.log" 2>&1
    RPID[$1]=$BG_PID
    for ((n = 0; n < 200; n++)); do
        [[ -S r-$1.sock ]] && return 0
        sleep 0.05
    done
    die "remote $1 did not start"
}

# SIGKILL: a dead remote.  (nbdkit 1.32 waits on SIGTERM for its idle
# clients to leave, and the server keeps one per member for superblocks.)
stop_remote() {
    kill -KILL "${RPID[$1]}" 2>/dev/null || :
    # Our child: wait reaps it, and quietly (no "Killed" line, which the
    # shell prints when it reaps it by itself).
    wait "${RPID[$1]}" 2>/dev/null || :
    ! kill -0 "${RPID[$1]}" 2>/dev/null || die "remote $1 still running"
    rm -f "r-$1.sock"
}

ruri() { echo "nbd+unix:///?socket=$tmp/r-$1.sock"; }

# same_data FILE OFFSET IMAGE: FILE holds IMAGE at OFFSET.
same_data() {
    cmp -n "$(stat -c %s "$3")" -i "$2:0" "$1" "$3" ||
        die "$1 at $2 differs from $3"
}

DOFF=$((1 << 20)) # bioctl create's default data offset

# --- create and inspect over NBD -------------------------------------------
log "bioctl create over two remotes"
truncate -s 40M m0.img m1.img
start_remote m0
start_remote m1
"$BIOCTL" create --level raid1 --size 32M --name rmir "$(ruri m0)" \
    "$(ruri m1)" >create.txt || die "bioctl create over remotes: exit $?"
expect_grep "created volume 'rmir'.*raid1, 2 members" create.txt
"$BIOCTL" info "$(ruri m0)" "$(ruri m1)" >info.txt ||
    die "bioctl info over remotes: exit $?"
expect_grep "volume 'rmir': complete and consistent" info.txt
expect_grep "r-m1.sock: volume 'rmir'.*role 1 of 2 \(active\)" info.txt
# The superblocks are on the exported files themselves.
"$BIOCTL" info m0.img m1.img >info.txt || die "bioctl info m0.img m1.img: exit $?"
expect_grep "volume 'rmir': complete and consistent" info.txt
"$BIOCTL" create --level raid1 --size 32M "$(ruri m0)" "$(ruri m1)" 2>err.txt &&
    die "bioctl create over members with superblocks succeeded"
expect_grep "r-m0.sock: holds a bionbd superblock" err.txt
"$BIOCTL" create --force --level raid1 --size 32M "$(ruri m0)" "$(ruri m0)" \
    2>err.txt && die "bioctl create with one remote twice succeeded"
expect_grep "r-m0.sock: given twice" err.txt

# --- serve: assembled by role, data on both copies -----------------------------
log "serving the mirror of remotes"
head -c 32M /dev/urandom >img1.raw
start_server --timeout 5 "$(ruri m1)" "$(ruri m0)"
[[ $SERVER == plugin ]] || expect_grep "volume 'rmir'.*raid1" "$SERVER_LOG"
[[ $(nbdinfo --size "$NBD_URI") -eq $((32 << 20)) ]] || die "size: expected 32M"
nbdcopy --flush img1.raw "$NBD_URI" || die "nbdcopy to the mirror"
nbdcopy "$NBD_URI" back.raw || die "nbdcopy from the mirror"
cmp img1.raw back.raw || die "the mirror reads back other data"
# A remote restarted while the volume is idle, everything written flushed
# (writes it had not flushed would count as lost: see docs/remote.md): its
# connections (the data path's, and the one superblock writes keep) see a
# clean close and are made again; the writes after it and the clean stop
# reach it.
stop_remote m1
start_remote m1
sleep 0.3 # past the idle check of the data path's connections
nbdcopy img1.raw "$NBD_URI" || die "nbdcopy after a remote restarted"
stop_server
same_data m0.img $DOFF img1.raw
same_data m1.img $DOFF img1.raw
"$BIOCTL" info m0.img m1.img >info.txt || die "bioctl info after a stop: exit $?"
expect_grep "bitmap regions of .* bytes, clean" info.txt
expect_grep "volume 'rmir': complete and consistent" info.txt
expect_grep "m1.img: volume 'rmir'.*role 1 of 2 \(active\).*, clean" info.txt

log "bioctl check over the remotes"
"$BIOCTL" check "$(ruri m0)" "$(ruri m1)" >check.txt ||
    die "bioctl check over remotes: exit $?"
expect_grep "volume 'rmir': superblocks consistent, .* the live copies agree" check.txt
# A copy that differs (written behind the volume's back) is found, and
# --repair rewrites it from the first live copy, over NBD.
printf 'stale data' | dd of=m1.img bs=1 seek=$((DOFF + 5 * 65536)) conv=notrunc status=none
"$BIOCTL" check "$(ruri m0)" "$(ruri m1)" >check.txt &&
    die "bioctl check missed a copy that differs"
expect_grep "mismatch: volume offset 327680 length 512: role 1 differs from role 0" check.txt
"$BIOCTL" check --repair "$(ruri m0)" "$(ruri m1)" >check.txt ||
    die "bioctl check --repair over remotes: exit $?"
same_data m1.img $DOFF img1.raw
"$BIOCTL" rebuild "$(ruri m0)" --replace "$(ruri m1)" "$tmp/new.img" \
    2>err.txt && die "bioctl rebuild of remote members succeeded"
expect_grep "rebuild takes local files and devices only" err.txt

# --- a remote member dies under fio --------------------------------------------
log "a remote member killed under fio verify"
start_server --timeout 2 "$(ruri m0)" "$(ruri m1)"
fio --name=v --ioengine=nbd --uri="$NBD_URI" --rw=randwrite \
    --bssplit=4k/50:64k/40:1m/10 --iodepth=4 --numjobs=2 --size=12M \
    --offset_increment=14M --verify=crc32c --verify_fatal=1 \
    --output-format=json --output=kill.json >/dev/null 2>&1 &
fio_pid=$!
sleep 0.7
stop_remote m1
# fio ends by itself: it has a fixed amount to write and verify.
wait_gone "$fio_pid" 120 || die "fio still running 120 s after the kill"
wait "$fio_pid" || die "fio saw errors with a copy left (exit $?)"
py -c 'import json,sys
j=json.load(open("kill.json"))
sys.exit(sum(x["error"] for x in j["jobs"]) != 0)' || die "fio: errors"
# However fast fio was, this write reaches the dead member too.
head -c 32M /dev/urandom >img2.raw
nbdcopy img2.raw "$NBD_URI" || die "writing with one copy dead"
nbdcopy "$NBD_URI" back.raw || die "reading with one copy dead"
cmp img2.raw back.raw || die "the degraded mirror reads back other data"
n=$(grep -c "r-m1.sock (role 1) marked faulty" "$SERVER_LOG" || :)
[[ $n -eq 1 ]] || die "expected one 'marked faulty' line for m1, got $n"
# One change recorded since m1 left: m0's counter one past m1's.
"$BIOCTL" info m1.img >info.txt || :
e1=$(sed -En 's/.*role 1 of 2 .*events ([0-9]+).*/\1/p' info.txt)
[[ -n $e1 ]] || { cat info.txt >&2; die "no event counter for m1"; }
"$BIOCTL" info m0.img >info.txt || :
expect_grep "role 0 of 2 \(active\), .*events $((e1 + 1))\b" info.txt
"$BIOCTL" info "$(ruri m0)" m1.img >info.txt || :
expect_grep "role 1: .*m1.img, faulty" info.txt

log "the member back: out of service until rebuilt; restart degraded"
start_remote m1
nbdcopy "$NBD_URI" back.raw || die "reading with the member back"
cmp img2.raw back.raw || die "reads with the faulty member back differ"
stop_server
"$BIOCTL" info m0.img >info.txt || :
expect_grep "role 0 of 2 \(active\).*, clean" info.txt
start_server --timeout 5 "$(ruri m0)" "$(ruri m1)"
[[ $SERVER == plugin ]] || expect_grep "r-m1.sock \(faulty\)" "$SERVER_LOG"
nbdcopy "$NBD_URI" back.raw || die "reading after a restart"
cmp img2.raw back.raw || die "after a restart the mirror reads other data"
stop_server
# The faulty copy was never written again: img2 (written after the kill)
# is on m0 only.
same_data m0.img $DOFF img2.raw
! cmp -s -n $((32 << 20)) -i "$DOFF:0" m1.img img2.raw ||
    die "the faulty member was written after it was marked faulty"

# --- a mirror of a remote and a file; the remote down at start -----------------
log "remote + local file, the remote unreachable at start"
truncate -s 40M m2.img
start_remote m2
"$BIOCTL" create --level raid1 --size 16M --name mixed "$(ruri m2)" \
    "$tmp/l0.img" >/dev/null || die "bioctl create remote + file: exit $?"
head -c 16M /dev/urandom >img3.raw
start_server --timeout 5 "$(ruri m2)" "$tmp/l0.img"
nbdcopy img3.raw "$NBD_URI" || die "nbdcopy to the mixed mirror"
stop_server
same_data m2.img $DOFF img3.raw
same_data l0.img $DOFF img3.raw
stop_remote m2
start_server --timeout 2 "$(ruri m2)" "$tmp/l0.img"
expect_grep "starting degraded, role 0 \(missing\)" "$SERVER_LOG"
nbdcopy "$NBD_URI" back.raw || die "reading the mixed mirror without its remote"
cmp img3.raw back.raw || die "the mixed mirror without its remote differs"
stop_server

# --- a local spare takes over the role of a dead remote ------------------------
log "a local spare takes the role of a dead remote"
truncate -s 40M m3.img m4.img
truncate -s 20M sp.img
start_remote m3
start_remote m4
"$BIOCTL" create --level raid1 --size 16M --name spared "$(ruri m3)" \
    "$(ruri m4)" >/dev/null || die "bioctl create: exit $?"
head -c 16M /dev/urandom >img5.raw
start_server --timeout 2 --spare "$tmp/sp.img" "$(ruri m3)" "$(ruri m4)"
nbdcopy img5.raw "$NBD_URI" || die "nbdcopy to the spared mirror"
stop_remote m4
head -c 16M /dev/urandom >img5.raw
nbdcopy img5.raw "$NBD_URI" || die "writing as the remote dies"
for ((n = 0; n < 600; n++)); do
    "$BIOCTL" info "$(ruri m3)" sp.img >info.txt 2>&1 &&
        grep -Eq "role 1: .*sp.img, active" info.txt && break
    sleep 0.1
done
expect_grep "role 1: .*sp.img, active" info.txt
nbdcopy "$NBD_URI" back.raw || die "reading the spared mirror"
cmp img5.raw back.raw || die "the spared mirror reads back other data"
stop_server
same_data sp.img $DOFF img5.raw
same_data m3.img $DOFF img5.raw

# --- raid0 with superblocks over remotes ------------------------------------------
log "raid0 with superblocks over remotes"
truncate -s 20M s0.img s1.img
start_remote s0
start_remote s1
"$BIOCTL" create --stripe-size 64K "$(ruri s0)" "$(ruri s1)" >create.txt ||
    die "bioctl create raid0 over remotes: exit $?"
start_server --timeout 5 "$(ruri s1)" "$(ruri s0)"
size=$(nbdinfo --size "$NBD_URI")
head -c "$size" /dev/urandom >img4.raw
nbdcopy img4.raw "$NBD_URI" || die "nbdcopy to the raid0"
nbdcopy "$NBD_URI" back.raw || die "nbdcopy from the raid0"
cmp img4.raw back.raw || die "the raid0 reads back other data"
stop_server
# Chunk 1 (the second 64K) is role 1's first chunk.
cmp -n 65536 -i "$DOFF:65536" s1.img img4.raw ||
    die "chunk 1 is not at s1's data offset"
stop_remote s1
server_refuses_once --timeout 2 "$(ruri s0)" "$(ruri s1)"
expect_grep "r-s1.sock" "$SERVER_ERR"

# --- refusals ----------------------------------------------------------------------
log "refusals"
truncate -s 20M h0.img h1.img
start_remote h0
start_remote h1
server_refuses_once --level raid1 --size 16M "$(ruri h0)" "$(ruri h1)"
expect_grep "has no superblock; make the mirror with bioctl create" "$SERVER_ERR"
server_refuses_once --spare "$(ruri h0)" "$(ruri m0)" "$(ruri m1)"
expect_grep "spare .*r-h0.sock: a spare is a local file or block device" "$SERVER_ERR"

# --- a remote that loses writes it had not flushed ----------------------------------
# Its writeback cache (nbdkit's cache filter) goes with it: restarted, it
# would answer a flush as if nothing happened, and serve zeros where the
# lost write was.  The mirror takes it out before reading from it again:
# every read returns the write (from the file's copy), and the flush
# succeeds on the other copy.
log "a mirror member that loses writes it had not flushed"
# wb_mirror NAME FILE: a remote NAME with a writeback cache over NAME.img
# (its arguments in $wbargs) and a raid1 of it and FILE, created.
wb_mirror() {
    local n
    truncate -s 40M "$1.img"
    wbargs=(--filter=cache file "$tmp/$1.img" cache=writeback)
    rm -f "r-$1.sock"
    start_bg nbdkit -f --exit-with-parent -U "$tmp/r-$1.sock" "${wbargs[@]}" \
        </dev/null >"r-$1.log" 2>&1
    RPID[$1]=$BG_PID
    for ((n = 0; n < 200; n++)); do [[ -S r-$1.sock ]] && break; sleep 0.05; done
    "$BIOCTL" create --level raid1 --size 16M --name "$1" "$(ruri "$1")" \
        "$2" >/dev/null || die "bioctl create remote + file: exit $?"
}
wb_mirror w0 "$tmp/l1.img"
start_server --timeout 5 "$(ruri w0)" "$tmp/l1.img"
WBPID=${RPID[w0]} SOCK=$tmp/r-w0.sock WBARGS="${wbargs[*]}" \
    NBD_URI=$NBD_URI nbdpy - <<'PY' || { sed 's/^/    /' r-w0.log >&2; die "a mirror over a remote that lost writes"; }
from nbd_e2e import connect, write_then_lose_cache
h = connect()
write_then_lose_cache(h, b"A" * 65536, b"B" * 65536)
for _ in range(4):  # every read, not every other one
    assert h.pread(65536, 1 << 20) == b"B" * 65536, "a lost write read back"
h.flush()  # the file's copy holds everything
assert h.pread(65536, 0) == b"A" * 65536
h.shutdown()
PY
expect_grep "r-w0.sock \(role 0\) marked faulty after a (read|flush) error" "$SERVER_LOG"
stop_server

# A remote with such a cache as the last copy (the mirror degraded, its
# file gone): nothing to take over, so it keeps serving; only the flushes
# fail.
log "a degraded mirror whose last copy lost writes"
wb_mirror w1 "$tmp/l3.img"
mv "$tmp/l3.img" "$tmp/l3.away"
start_server --timeout 5 --degraded "$(ruri w1)" "$tmp/l3.img"
WBPID=${RPID[w1]} SOCK=$tmp/r-w1.sock WBARGS="${wbargs[*]}" \
    NBD_URI=$NBD_URI nbdpy - <<'PY' || { sed 's/^/    /' r-w1.log >&2; die "a degraded mirror over a remote that lost writes"; }
import errno
from nbd_e2e import connect, expect_error, write_then_lose_cache
h = connect()
write_then_lose_cache(h, b"D" * 65536, b"E" * 65536)
assert h.pread(65536, 0) == b"D" * 65536, "flushed data lost"
h.pwrite(b"F" * 65536, 2 << 20)
assert h.pread(65536, 2 << 20) == b"F" * 65536
expect_error(errno.EIO, "flush", h.flush)
h.shutdown()
PY
stop_server
log "ok"
