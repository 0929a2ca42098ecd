#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: remote members (docs/remote.md): a volume striped over other
# servers' NBD exports, given as nbd+unix:// URIs.
#  - Over 4 `nbdkit memory` servers, on both backends: random writes of
#    many sizes read back equal, and every chunk is where the layout rule
#    puts it on the remote exports (read there directly); zero, trim,
#    flush, cache, FUA and block status pass through; qemu-img writes an
#    image and compares it, nbdcopy copies it back; fio verify over 4
#    connections (4K to 1M).
#  - Over 4 bionbd servers, and over a mix of local files and remotes: the
#    same layout check.
#  - What a remote lacks degrades honestly: no multi-conn -> the volume
#    does not advertise it; no FUA -> a write with FUA reaches the remote
#    as a write and a flush (its log shows it); no write-zeroes -> zeroes
#    still read back as zeros, a fast zero is refused (ENOTSUP).
#  - Faults: a remote killed while fio runs fails its requests with EIO
#    (fio finishes, no hang), the log says so once, another export keeps
#    working, and once the remote is back the volume serves again; a
#    remote that stops answering fails requests with EIO after the
#    timeout; a remote that never answers at start, one too small for
#    the size asked, one that is not there, one given twice, a mirror
#    asked of remotes without superblocks: one-line refusals (mirrors of
#    remotes with superblocks: test-volume-remote-mirror.sh).  A read-only remote makes the volume
#    read-only (reads work, writes get EPERM).
#  - The pieces of one large request that lie back to back on a remote
#    reach it as one command (the remotes' logs show it).
#  - A server that starts and stops makes one connection to each remote,
#    and flushes a remote only once it wrote to it.
#  - A remote with a writeback cache killed and restarted with writes it
#    had not flushed: the volume's flushes fail with EIO from then on (reads
#    and writes go on), and the log says why once; with everything flushed
#    first, no alarm, and a write and a flush after the restart succeed.
#    A slow zero and a slow block status time out without an alarm; a
#    remote that hangs (a write times out) and is then restarted: flushes
#    fail.
#  - The plugin: a client connecting while another's threads flush a
#    stopped remote at their end is served at once (the flush holds no
#    lock a new connection's threads need).
#  - TLS to the remotes: an nbdkit and a bionbd that require TLS with a
#    pre-shared key, reached as nbds+unix:// with tls-psk-file=: the layout
#    check; the wrong key and a plaintext URI are one-line refusals.
source "$(dirname "$0")/functions.sh"

requires_server
requires_nbdpy
requires nbdkit
requires_fio_nbd
requires qemu-img
requires nbdcopy
make_tmpdir
cd "$tmp"

declare -A RPID

# start_remote NAME NBDKIT-ARGS...: nbdkit serving on $tmp/r-NAME.sock.
start_remote() {
    local name=$1 n
    shift
    rm -f "r-$name.sock"
    # -t 4: with the plugin every nbdkit thread of the volume has its own
    # connection to each remote, and each of those gets nbdkit's threads:
    # its default of 16 makes thousands of threads on a 2-core machine.
    start_bg nbdkit -f --exit-with-parent -t 4 -U "$tmp/r-$name.sock" "$@" \
        </dev/null >"r-$name.log" 2>&1
    RPID[$name]=$BG_PID
    for ((n = 0; n < 200; n++)); do
        [[ -S r-$name.sock ]] && return 0
        sleep 0.05
    done
    die "remote $name did not start"
}

stop_remote() {
    kill "${RPID[$1]}" 2>/dev/null || :
    wait_gone "${RPID[$1]}" 10 || die "remote $1 still running"
    rm -f "r-$1.sock"
}

ruri() { echo "nbd+unix:///?socket=$tmp/r-$1.sock"; }

# check_layout MEMBER-URI-OR-FILE...: random writes through the volume
# read back equal, and each chunk (64K) lies on the member and offset the
# layout rule names, read there directly.
check_layout() {
    NBD_URI=$NBD_URI nbdpy - "$@" <<'PY' || die "layout over $*"
import os, random, sys, nbd
from nbd_e2e import connect

C = 64 << 10
members = sys.argv[1:]
n = len(members)
h = connect()
size = h.get_size()
rng = random.Random(7)
shadow = {}
for _ in range(60):
    length = rng.choice([512, 4096, 60 << 10, 64 << 10, 200 << 10, 1 << 20])
    off = rng.randrange(0, (size - length) // 512) * 512
    data = os.urandom(length)
    h.pwrite(data, off)
    if h.pread(length, off) != data:
        sys.exit(f"read back differs at {off}+{length}")
    for i in range(0, length, 512):
        shadow[off + i] = data[i:i + 512]
h.flush()

# One connection to each remote member for all its reads: one for each
# sector read (hundreds a remote, opened and closed back to back) once
# had nbdkit reset one mid-handshake on a loaded machine, which says
# nothing about the volume's layout.
remotes = {}

def member_read(i, moff, length):
    m = members[i]
    if m.startswith("nbd"):
        if i not in remotes:
            c = nbd.NBD()
            c.set_uri_allow_local_file(True)   # tls-psk-file=
            c.connect_uri(m)
            remotes[i] = c
        return remotes[i].pread(length, moff)
    with open(m, "rb") as f:
        f.seek(moff)
        return f.read(length).ljust(length, b"\0")

checked = 0
for off in sorted(shadow)[::7]:
    k = off // C
    moff = (k // n) * C + off % C
    if member_read(k % n, moff, 512) != shadow[off]:
        sys.exit(f"volume byte {off}: not at member {k % n} offset {moff}")
    checked += 1
for c in remotes.values():
    c.shutdown()
print(f"layout: {checked} sectors where the rule puts them", file=sys.stderr)
PY
}

# --- 4 nbdkit memory servers, both backends ---------------------------------
# Remote 0 logs its commands: block status must go over connections of
# its own (see status_conns in engine/remote.c).
start_remote 0 --filter=log memory 32M logfile="$tmp/r0.log"
for r in 1 2 3; do start_remote "$r" memory 32M; done
uris=("$(ruri 0)" "$(ruri 1)" "$(ruri 2)" "$(ruri 3)")
for be in io_uring threads; do
    log "4 nbdkit-memory remotes, backend $be"
    start_server --timeout 30 --backend "$be" --stripe-size 64K "${uris[@]}"
    [[ $(nbdinfo --size "$NBD_URI") -eq $((128 << 20)) ]] ||
        die "size: expected 4 x 32M"
    check_layout "${uris[@]}"
    NBD_URI=$NBD_URI nbdpy - <<'PY' || die "ops through remotes ($be)"
import nbd
from nbd_e2e import connect
h = connect()
h.pwrite(b"\xaa" * (256 << 10), 1 << 20)
h.zero(128 << 10, (1 << 20) + (64 << 10))
assert h.pread(256 << 10, 1 << 20) == b"\xaa" * (64 << 10) + bytes(128 << 10) + b"\xaa" * (64 << 10)
h.pwrite(b"f" * 4096, 8 << 20, nbd.CMD_FLAG_FUA)
assert h.pread(4096, 8 << 20) == b"f" * 4096
h.trim(4 << 20, 16 << 20)
assert h.pread(4 << 20, 16 << 20) == bytes(4 << 20)
h.cache(1 << 20, 0)
h.flush()
# nbdkit memory reports trimmed ranges as holes: so must the volume.
seen = []
h.block_status(4 << 20, 16 << 20,
               lambda ctx, off, ents, err: seen.extend(ents))
assert seen and seen[1] & 1, f"trimmed range not a hole: {seen[:4]}"
assert h.can_multi_conn(), "nbdkit memory has multi-conn: so has the volume"
PY
    stop_server
done
# conn_cmds LOG: "connection: commands" for each connection of an nbdkit
# log filter's LOG that sent any.
conn_cmds() {
    py - "$1" <<'PY'
import collections, re, sys
cmds = collections.defaultdict(set)
for l in open(sys.argv[1]):
    m = re.search(r"connection=(\d+) (Read|Write|Trim|Zero|Extents|Flush|Cache) id=", l)
    if m:
        cmds[m[1]].add(m[2])
for c, ops in sorted(cmds.items()):
    print(c + ": " + " ".join(sorted(ops)))
PY
}
# A multi-conn remote: block status on connections that carry nothing
# else (structured replies there only; the data connections do without).
conn_cmds "$tmp/r0.log" >r0.conns
grep -q Extents r0.conns || die "no block status reached remote 0: $(cat r0.conns)"
grep -q Read r0.conns || die "no read reached remote 0: $(cat r0.conns)"
! grep Extents r0.conns | grep -qE 'Read|Write|Trim|Zero' ||
    die "block status shared a data connection: $(cat r0.conns)"

# qemu-img, nbdcopy and fio verify (io_uring).  These sections have a
# long --timeout: a loaded 2-core CI machine can stall a remote for
# seconds, and they test data, not timeouts (those have theirs below).
start_server --timeout 30 --stripe-size 64K "${uris[@]}"
# The whole volume: its zero part goes down as write-zeroes.
truncate -s 128M img.raw
head -c 24M /dev/urandom | dd of=img.raw conv=notrunc status=none
qemu-img convert -n -f raw -O raw img.raw "$NBD_URI" || die "qemu-img convert"
qemu-img compare -f raw -F raw img.raw "$NBD_URI" >/dev/null ||
    die "qemu-img compare: the volume differs from the image"
nbdcopy "$NBD_URI" back.raw || die "nbdcopy from the volume"
cmp img.raw back.raw || die "nbdcopy: differs from the image"
fio --name=v --ioengine=nbd --uri="$NBD_URI" --rw=randwrite \
    --bssplit=4k/40:64k/30:1m/30 --iodepth=8 --numjobs=4 --size=24M \
    --offset_increment=28M --verify=crc32c --verify_fatal=1 \
    --output-format=json --output=fio.json >/dev/null 2>&1 ||
    die "fio verify over 4 connections"
py -c 'import json,sys
j=json.load(open("fio.json"))
e=sum(x["error"] for x in j["jobs"]); w=sum(x["write"]["io_bytes"] for x in j["jobs"])
sys.exit(e != 0 or w < 4 * (24 << 20))' || die "fio: errors, or not all written"
stop_server

# --- 4 bionbd servers; a mix of files and remotes ---------------------------
bmembers=()
for r in 0 1 2 3; do
    truncate -s 16M "b$r.img"
    rm -f "rb$r.sock"
    start_bg "$BIONBD" -f -U "$tmp/rb$r.sock" "$tmp/b$r.img" </dev/null \
        >"rb$r.log" 2>&1
    for ((n = 0; n < 200; n++)); do [[ -S rb$r.sock ]] && break; sleep 0.05; done
    bmembers+=("nbd+unix:///?socket=$tmp/rb$r.sock")
done
log "4 bionbd remotes"
start_server --timeout 30 --stripe-size 64K "${bmembers[@]}"
check_layout "${bmembers[@]}"
stop_server
log "2 files and 2 remotes"
truncate -s 32M f0.img f2.img
mix=("$tmp/f0.img" "$(ruri 1)" "$tmp/f2.img" "$(ruri 3)")
start_server --timeout 30 --stripe-size 64K "${mix[@]}"
check_layout "${mix[@]}"
stop_server

# --- what a remote lacks ------------------------------------------------------
start_remote nomc --filter=log --filter=multi-conn memory 32M \
    multi-conn-mode=disable logfile="$tmp/nomc.log"
start_remote nofua --filter=log --filter=fua memory 32M \
    logfile="$tmp/nofua.log"
start_remote nozero --filter=nozero memory 32M
start_server --stripe-size 64K "$(ruri nomc)" "$(ruri nofua)" "$(ruri nozero)"
NBD_URI=$NBD_URI nbdpy - <<'PY' || die "degraded flags"
import nbd
from nbd_e2e import connect
h = connect()
assert not h.can_multi_conn(), "a member without multi-conn: the volume must not promise it"
# chunk 1 is on the member without FUA: a FUA write becomes write + flush
h.pwrite(b"u" * 4096, 64 << 10, nbd.CMD_FLAG_FUA)
# chunk 2 is on the member without write-zeroes
h.pwrite(b"z" * (64 << 10), 128 << 10)
h.zero(64 << 10, 128 << 10)
assert h.pread(64 << 10, 128 << 10) == bytes(64 << 10)
h.pwrite(b"z" * (64 << 10), 128 << 10)
try:
    h.zero(64 << 10, 128 << 10, nbd.CMD_FLAG_FAST_ZERO)
    raise SystemExit("a fast zero the member cannot do succeeded")
except nbd.Error as e:
    assert e.errno == "ENOTSUP", e
assert h.pread(64 << 10, 128 << 10) == b"z" * (64 << 10), "a refused fast zero changed data"
# chunk 0 is on the member without multi-conn: its block status goes over
# the one connection its reads use, and still sees a trimmed range.
h.pwrite(b"m" * (64 << 10), 0)
h.trim(64 << 10, 0)
assert h.pread(4096, 0) == bytes(4096)
seen = []
h.block_status(64 << 10, 0, lambda ctx, off, ents, err: seen.extend(ents))
assert seen and seen[1] & 1, f"trimmed chunk not a hole: {seen[:4]}"
PY
stop_server
conn_cmds "$tmp/nomc.log" >nomc.conns
grep Extents nomc.conns | grep -q Read ||
    die "no multi-conn: block status must share the data connection: $(cat nomc.conns)"
# The log filter: the FUA write arrived without FUA, and a flush after it.
py - "$tmp/nofua.log" <<'PY' || die "FUA emulation on the remote"
import re, sys
lines = [l for l in open(sys.argv[1]) if "...." in l or "Write" in l or "Flush" in l]
w = [i for i, l in enumerate(lines) if re.search(r"Write id=\d+ offset=0x0 count=0x1000 fua=0", l)]
f = [i for i, l in enumerate(lines) if "Flush" in l and "...." not in l]
if not w or not [i for i in f if i > w[0]]:
    sys.exit("no write without FUA followed by a flush:\n" + "".join(lines[:20]))
PY
stop_remote nomc
stop_remote nofua
stop_remote nozero

# --- faults ---------------------------------------------------------------------
cat >two.conf <<EOF
[export remote]
file = $(ruri 0)
file = $(ruri 1)
file = $(ruri 2)
file = $(ruri 3)
timeout = 2

[export local]
file = $tmp/f0.img
file = $tmp/f2.img
EOF
log "a remote killed under fio"
# Remote 2 logs its commands, to tell when fio's requests reach it.
stop_remote 2
start_remote 2 --filter=log memory 32M logfile="$tmp/r2.log"
# r2_writes: the writes remote 2 has been sent so far.
r2_writes() { grep -c "connection=[0-9]* Write id=" "$tmp/r2.log" || :; }
# -v: the plugin logs "connected again" (info) as a debug line.
start_server -v --conf two.conf
w0=$(r2_writes)
fio --name=v --ioengine=nbd --uri="$(nbd_uri remote)" --rw=randrw \
    --bs=64k --iodepth=8 --size=100M --time_based --runtime=4 \
    --continue_on_error=all --output-format=json --output=kill.json \
    >/dev/null 2>&1 &
fio_pid=$!
# The remote goes once fio's writes reach it, not after a fixed sleep: a
# loaded machine can take seconds to start fio, and a remote killed and
# back before fio's first request is no outage at all.
for ((n = 0; n < 300; n++)); do
    [[ $(r2_writes) -gt $w0 ]] && break
    kill -0 "$fio_pid" 2>/dev/null || break
    sleep 0.1
done
[[ $(r2_writes) -gt $w0 ]] || die "fio's writes did not reach remote 2 within 30 s"
sleep 0.5
stop_remote 2
# Meanwhile another export of the same server is untouched.
NBD_URI=$(nbd_uri local) nbdpy - <<'PY' || die "the local export during the outage"
from nbd_e2e import connect
h = connect()
h.pwrite(b"L" * 65536, 0)
assert h.pread(65536, 0) == b"L" * 65536
PY
sleep 1
start_remote 2 memory 32M
# fio must end by itself (runtime 4 s).
fio_outage_ok "$fio_pid" kill.json 20
NBD_URI=$(nbd_uri remote) nbdpy - <<'PY' || die "after the remote came back"
from nbd_e2e import connect
h = connect()
for off in range(0, 8 << 20, 64 << 10):   # every member, member 2 too
    h.pwrite(b"B" * 4096, off)
    assert h.pread(4096, off) == b"B" * 4096
PY
lost=$(grep -c "r-2.sock: connection lost" "$SERVER_LOG" || :)
[[ $lost -eq 1 ]] || die "expected one 'connection lost' line for the member, got $lost"
expect_grep "r-2.sock: connected again" "$SERVER_LOG"

# A remote that stops answering: EIO after the timeout (2 s), then back.
log "a remote that stops answering"
NBD_URI=$(nbd_uri remote) nbdpy - <<'PY' || die "before the stall"
from nbd_e2e import connect
connect().pread(1 << 20, 0)
PY
kill -STOP "${RPID[1]}"
NBD_URI=$(nbd_uri remote) nbdpy - <<'PY' || die "a stalled remote"
import time, nbd
from nbd_e2e import connect
h = connect()
t = time.monotonic()
try:
    h.pread(1 << 20, 0)
    raise SystemExit("a read from a stalled member succeeded")
except nbd.Error as e:
    assert e.errno == "EIO", e
took = time.monotonic() - t
assert 1.5 < took < 10, f"failed after {took:.1f} s, timeout is 2 s"
PY
kill -CONT "${RPID[1]}"
# nbdkit itself once aborted after the stop (its log goes to the test's
# output): what is tested here is bionbd's recovery, so start it again.
if wait_gone "${RPID[1]}" 1; then
    sed 's/^/    /' r-1.log >&2
    log "the stopped nbdkit died; starting it again"
    start_remote 1 memory 32M
fi
expect_grep "r-1.sock: .*no .*within 2000 ms" "$SERVER_LOG"
NBD_URI=$(nbd_uri remote) nbdpy - <<'PY' || die "after the stall"
import time, nbd
from nbd_e2e import connect
h = connect()
for i in range(50):   # past the backoff
    try:
        h.pread(1 << 20, 0)
        break
    except nbd.Error:
        time.sleep(0.2)
else:
    raise SystemExit("the member did not come back")
PY
stop_server

# --- refusals -------------------------------------------------------------------
log "refusals"
py -c 'import socket, time, sys
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(8); time.sleep(30)' \
    "$tmp/mute.sock" &
mute_pid=$!
on_exit "kill $mute_pid 2>/dev/null || :"
for ((n = 0; n < 100; n++)); do [[ -S mute.sock ]] && break; sleep 0.05; done
server_refuses_once --timeout 0.5 "$(ruri 0)" "nbd+unix:///?socket=$tmp/mute.sock"
expect_grep "mute.sock: no answer within 500 ms" "$SERVER_ERR"
server_refuses_once --size 1G "$(ruri 0)" "$(ruri 1)"
expect_grep "r-0.sock: 33554432 bytes, size 1073741824 needs" "$SERVER_ERR"
server_refuses_once "$(ruri 0)" "nbd+unix:///?socket=$tmp/absent.sock"
expect_grep "absent.sock" "$SERVER_ERR"
server_refuses_once "$(ruri 0)" "$(ruri 0)"
expect_grep "r-0.sock: given twice$" "$SERVER_ERR"
# A read-only remote makes the volume read-only: reads work, writes EPERM.
start_remote ro -r memory 32M
start_server "$(ruri 0)" "$(ruri ro)"
NBD_URI=$NBD_URI nbdpy - <<'PY' || die "a volume over a read-only remote"
import nbd
from nbd_e2e import connect
h = connect()
assert h.is_read_only(), "a read-only member: the volume must say read-only"
h.pread(1 << 20, 0)
try:
    h.pwrite(b"x" * 4096, 65536)
    raise SystemExit("a write to a read-only volume succeeded")
except nbd.Error as e:
    assert e.errno == "EPERM", e
PY
stop_server
server_refuses_once --level raid1 --size 16M "$(ruri 0)" "$(ruri 1)"
expect_grep "has no superblock; make the mirror with bioctl create" "$SERVER_ERR"

# --- TLS to the remotes: nbds+unix:// with a pre-shared key ----------------------
log "TLS remotes (PSK)"
make_tls_keys "$tmp/keys"
K=$tmp/keys
start_remote tls1 --tls=require --tls-psk="$K/psk/keys.psk" memory 32M
truncate -s 32M tls2.img
rm -f rtls2.sock
start_bg "$BIONBD" -f -U "$tmp/rtls2.sock" --tls require \
    --tls-psk "$K/psk/keys.psk" "$tmp/tls2.img" </dev/null >rtls2.log 2>&1
for ((n = 0; n < 200; n++)); do [[ -S rtls2.sock ]] && break; sleep 0.05; done
tls_uri() { echo "nbds+unix://alice@/?socket=$tmp/$1&tls-psk-file=$2"; }
tmembers=("$(tls_uri r-tls1.sock "$K/psk/keys.psk")"
          "$(tls_uri rtls2.sock "$K/psk/keys.psk")")
start_server --timeout 30 --stripe-size 64K "${tmembers[@]}"
check_layout "${tmembers[@]}"
stop_server
# The wrong key, and no TLS at all: refused, in one line.
server_refuses_once "$(tls_uri r-tls1.sock "$K/wrong.psk")"
expect_grep "r-tls1.sock" "$SERVER_ERR"
server_refuses_once "nbd+unix:///?socket=$tmp/rtls2.sock"
expect_grep "rtls2.sock" "$SERVER_ERR"

# --- the pieces of a large request on one remote go as one command ---------------
log "merged commands"
start_remote m0 --filter=log memory 32M logfile="$tmp/m0.log"
start_remote m1 --filter=log memory 32M logfile="$tmp/m1.log"
start_server --stripe-size 64K "$(ruri m0)" "$(ruri m1)"
NBD_URI=$NBD_URI nbdpy - <<'PY' || die "merged commands"
from nbd_e2e import connect
h = connect()
h.pread(128 << 10, 0)     # connected to both: a run waits for no connection
data = bytes(range(256)) * 2048          # 512K: chunks 0-7, 4 on each remote
h.pwrite(data, 1 << 20)
assert h.pread(512 << 10, 1 << 20) == data
PY
stop_server
for m in m0 m1; do
    # Member offset 512K (volume 1M = chunk 16, row 8), 4 chunks = 256K.
    expect_grep "Write id=[0-9]* offset=0x80000 count=0x40000 " "$tmp/$m.log"
    expect_grep "Read id=[0-9]* offset=0x80000 count=0x40000 " "$tmp/$m.log"
done
stop_remote m0
stop_remote m1

# --- connections a remote sees from a server that starts and stops -------------
# Opening checks every export, reads superblocks and probes each member
# several times (the plugin once more, for nbdkit's thread model, before
# it opens): all of that goes over one connection a remote.  A volume
# nothing was written to sends no flush at close, so it connects to flush
# nothing.  Then one written to: its flush reaches the remote.
log "connections at start-up and close"
connects() { grep -c "connection=[0-9]* Connect " "$1" || :; }
start_remote c0 --filter=log memory 32M logfile="$tmp/c0.log"
start_remote c1 --filter=log memory 32M logfile="$tmp/c1.log"
want=1
start_server --stripe-size 64K "$(ruri c0)" "$(ruri c1)"
for m in c0 c1; do
    [[ $(connects "$tmp/$m.log") -eq $want ]] ||
        die "remote $m: $(connects "$tmp/$m.log") connections at start-up, expected $want"
done
stop_server
for m in c0 c1; do
    [[ $(connects "$tmp/$m.log") -eq $want ]] ||
        die "remote $m: $(connects "$tmp/$m.log") connections after a close with nothing written, expected $want"
    ! grep -q "Flush id=" "$tmp/$m.log" || die "remote $m: flushed though nothing was written"
done
start_server --stripe-size 64K "$(ruri c0)" "$(ruri c1)"
NBD_URI=$NBD_URI nbdpy - <<'PY' || die "write and flush over two remotes"
from nbd_e2e import connect
h = connect()
h.pwrite(b"w" * (128 << 10), 0)
h.flush()
PY
stop_server
for m in c0 c1; do
    expect_grep "Flush id=" "$tmp/$m.log"
done
stop_remote c0
stop_remote c1

# --- a remote that loses writes it had not flushed ------------------------------
# nbdkit's cache filter in writeback mode holds acknowledged writes until a
# flush; killed, it loses them.  Restarted, it answers a flush on a new
# connection as if nothing happened: the volume's flushes must fail (EIO,
# every one after) and the log say why once; reads and writes resume.
# With every write flushed before the kill: no false alarm, and a write
# and a flush after the restart succeed.
# (With the plugin the flush may go over another nbdkit thread than the
# writes: it looks at their connections.)
log "a remote that loses writes it had not flushed"
for case in lost flushed; do
    rm -f "$tmp/wb.img"
    truncate -s 32M "$tmp/wb.img"
    wbargs=(--filter=cache file "$tmp/wb.img" cache=writeback)
    start_remote wb "${wbargs[@]}"
    start_server "$(ruri wb)"
    CASE=$case WBPID=${RPID[wb]} SOCK=$tmp/r-wb.sock WBARGS="${wbargs[*]}" \
        NBD_URI=$NBD_URI nbdpy - <<'PY' || die "$case: requests after the remote lost writes"
import os
import nbd
from nbd_e2e import connect, restart_remote_from_env
lost = os.environ["CASE"] == "lost"
h = connect()
h.pwrite(b"A" * 65536, 0)
h.flush()
h.pwrite(b"B" * 65536, 1 << 20)
if not lost:
    h.flush()
restart_remote_from_env()  # the new remote goes when this script does
if not lost:
    h.pwrite(b"C" * 65536, 2 << 20)
for what in ("flush", "second flush"):
    try:
        h.flush()
        assert not lost, f"{what} succeeded"
    except nbd.Error as e:
        assert lost, f"{what}: {e}"
        assert e.errno == "EIO", e
assert h.pread(65536, 0) == b"A" * 65536, "flushed data lost"
if not lost:
    assert h.pread(65536, 1 << 20) == b"B" * 65536, "flushed data lost"
h.pwrite(b"D" * 65536, 3 << 20)  # the service goes on
assert h.pread(65536, 3 << 20) == b"D" * 65536
h.shutdown()
PY
    if [[ $case == lost ]]; then
        expect_grep "r-wb.sock: the remote closed a connection that carried writes not yet flushed" "$SERVER_LOG"
    elif grep -q "not yet flushed" "$SERVER_LOG"; then
        die "flushed: a false alarm: $(grep "not yet flushed" "$SERVER_LOG")"
    fi
    stop_server
    stop_remote wb
done

# A request past the timeout closes its connection from this side: the
# remote is still there with what it acknowledged, so that is no loss.  A
# slow write-zeroes (the data connection) and a slow block status (a
# connection of its own) each get EIO; the unflushed write before them
# still reads back, and flushes succeed.
log "a slow remote: timeouts are not lost writes"
start_remote slow --filter=delay memory 32M delay-zero=2 delay-extents=2
start_server --timeout 1 "$(ruri slow)"
NBD_URI=$NBD_URI nbdpy - <<'PY' || die "a slow remote: flush after a timeout"
import errno
from nbd_e2e import connect, expect_error
h = connect()
h.pwrite(b"A" * 65536, 0)
h.flush()
h.pwrite(b"B" * 65536, 1 << 20)
expect_error(errno.EIO, "a slow zero", h.zero, 65536, 4 << 20)
expect_error(errno.EIO, "a slow block status", h.block_status, 65536, 0,
             lambda *a: 0)
h.flush()
assert h.pread(65536, 1 << 20) == b"B" * 65536
h.shutdown()
PY
! grep -q "not yet flushed" "$SERVER_LOG" ||
    die "a slow remote: a false alarm: $(grep "not yet flushed" "$SERVER_LOG")"
stop_server
stop_remote slow

# But a remote that hangs (a request past the timeout, its connection
# closed from this side) and is then restarted has lost what its cache
# held: the socket kept from that connection shows it went, and flushes
# fail.
log "a remote that hangs, then restarts"
rm -f "$tmp/wb.img"
truncate -s 32M "$tmp/wb.img"
start_remote wb "${wbargs[@]}"
start_server --timeout 1 "$(ruri wb)"
WBPID=${RPID[wb]} SOCK=$tmp/r-wb.sock WBARGS="${wbargs[*]}" \
    NBD_URI=$NBD_URI nbdpy - <<'PY' || die "a remote that hung and restarted: flushes"
import errno, os
from nbd_e2e import connect, expect_error, restart_remote_from_env, sigstop
h = connect()
h.pwrite(b"A" * 65536, 0)
h.flush()
h.pwrite(b"B" * 65536, 1 << 20)
sigstop(int(os.environ["WBPID"]))
expect_error(errno.EIO, "a write to the hung remote", h.pwrite,
             b"C" * 4096, 2 << 20)
restart_remote_from_env()
expect_error(errno.EIO, "flush", h.flush)
expect_error(errno.EIO, "second flush", h.flush)
assert h.pread(65536, 0) == b"A" * 65536, "flushed data lost"
h.shutdown()
PY
expect_grep "r-wb.sock: the remote closed a connection that carried writes not yet flushed" "$SERVER_LOG"
stop_server
stop_remote wb

# The plugin: a connection's threads flush what they wrote to a remote as
# they end, which may take up to the timeout.  Another client starting
# meanwhile is served at once (its threads set up their own queues).
if [[ $SERVER == plugin ]]; then
    log "a closing connection's flush holds no other client"
    truncate -s 32M hold0.img
    start_remote hold memory 32M
    start_server --timeout 3 --stripe-size 64K "$tmp/hold0.img" "$(ruri hold)"
    RPID_HOLD=${RPID[hold]} NBD_URI=$NBD_URI nbdpy - <<'PY' ||
import os, signal, threading, time
from nbd_e2e import connect, sigstop
a = connect()
a.pwrite(b"A" * 4096, 65536)  # chunk 1: the remote, not flushed
sigstop(int(os.environ["RPID_HOLD"]))
try:
    # nbdkit answers the disconnect once a's threads have ended, each
    # flushing the stopped remote: wait for that beside b.
    bye = threading.Thread(target=a.shutdown)
    bye.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    b = connect()
    assert b.pread(4096, 0) == bytes(4096)  # chunk 0: the local file
    took = time.monotonic() - t0
    b.shutdown()
finally:
    os.kill(int(os.environ["RPID_HOLD"]), signal.SIGCONT)
    bye.join()
assert took < 1.5, f"a new client waited {took:.1f} s for another's flush"
PY
        die "a closing connection's flush held another client"
    stop_server
    stop_remote hold
fi
log "ok"
