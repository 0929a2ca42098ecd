#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: no connection makes another on the same worker wait.  bionbd
# -t 1 (every connection on one worker); while client A
#  - has eight 32 MiB reads outstanding and reads none of the replies for
#    3 s, or
#  - trickles a 32 MiB write payload a few bytes at a time for 3 s, or
#  - streams pipelined 1 MiB and 32 MiB writes as fast as it can, or
#  - streams pipelined 32 MiB reads, reading each reply at once, or
#  - sends 256 block status requests over 16384 extents, reading none,
#    (and its turns are cut: the control socket counts them),
#  - pipelines 512 unaligned 1-byte writes over members that take 5 ms a
#    read (--delay): each read-modify-writes its edge sector with bios the
#    worker does not wait for (and its turn is cut, at 4 units each),
# client B's 4 KiB read and write each complete within 1 s (a liveness
# bound, not a speed test), and afterwards A's replies and data are right.
# The same while A's unaligned read, write or write-zeroes waits on a
# stalled member, and while A zeroes and trims a whole tmpfs volume.
# Both backends with the members on disk (page cache), and once on tmpfs,
# where the worker copies itself (a budget per loop turn).
source "$(dirname "$0")/functions.sh"

requires_nbdpy
make_tmpdir

cases=()
for be in $BACKENDS; do cases+=("$be $tmp"); done
if [[ $(stat -f -c %T /dev/shm 2>/dev/null) == tmpfs ]]; then
    shm=$(mktemp -d "/dev/shm/$test_name.XXXXXX")
    on_exit "rm -rf '$shm'"
    cases+=("${BACKENDS%% *} $shm")
else
    log "no tmpfs at /dev/shm: the inline copy path is not covered here"
fi

for c in "${cases[@]}"; do
    read -r be dir <<<"$c"
    log "backend $be, members on $(stat -f -c %T "$dir") ($dir)"
    d=$dir/$be
    mkdir -p "$d"
    start_bionbd -t 1 --backend "$be" --size 512M "$d/m0" "$d/m1" "$d/m2"
    NBD_SOCK=$NBD_SOCK NBD_URI=$NBD_URI BIOCTL=$BIOCTL PIDFILE=$SERVER_PIDFILE \
        nbdpy - <<'PY' || die "$be: fairness cases failed"
import json
import os
import subprocess
import threading
import time

import nbd
import nbd_raw as raw
from nbd_raw import connect_go, pattern
from nbd_e2e import check, log

sock = os.environ["NBD_SOCK"]
MIB = 1 << 20
b = nbd.NBD()
b.connect_uri(os.environ["NBD_URI"])


def neighbour(what, rounds=1):
    worst = 0
    for i in range(rounds):
        t = time.monotonic()
        b.pread(4096, 500 * MIB + 4096 * (i % 64))
        b.pwrite(b"\x5b" * 4096, 500 * MIB + 4096 * (i % 64))
        worst = max(worst, time.monotonic() - t)
    check(worst < 1.0, f"{what}: B's read+write took {worst:.2f} s")
    return worst


# ---- 8 x 32 MiB reads whose replies A does not read for 3 s
a = connect_go(sock, structured=False)
data = pattern(7, 32 * MIB)
a.cmd(raw.CMD_WRITE, 64 * MIB, len(data), payload=data)
for i in range(8):
    a.request(raw.CMD_READ, 100 + i, 64 * MIB, 32 * MIB)
end = time.monotonic() + 3
worst = 0
while time.monotonic() < end:
    worst = max(worst, neighbour("A not reading 8 x 32 MiB"))
    time.sleep(0.1)
for i in range(8):
    r = a.full_reply()
    check(a.error_of(r) == 0 and r[0].data == data,
          f"A's read {i} after the pause")
log(f"ok A not reading 8 x 32 MiB replies: B's worst {worst * 1000:.1f} ms")

# ---- a 32 MiB write payload trickled a few bytes at a time
a.send(a.req_bytes(raw.CMD_WRITE, 200, 128 * MIB, 32 * MIB))
end = time.monotonic() + 3
sent, worst = 0, 0
payload = pattern(9, 32 * MIB)
while time.monotonic() < end:
    a.send(payload[sent:sent + 7])
    sent += 7
    worst = max(worst, neighbour("A trickling a write payload"))
a.send(payload[sent:])
r = a.full_reply(200)
check(a.error_of(r) == 0, "A's trickled write")
check(b.pread(32 * MIB, 128 * MIB) == payload, "A's trickled data")
log(f"ok A trickling a 32 MiB payload: B's worst {worst * 1000:.1f} ms")

def while_a_runs(fn, what):
    """B's worst latency while A runs fn in a thread."""
    t = threading.Thread(target=fn)
    t.start()
    worst = neighbour(what, rounds=1)
    while t.is_alive():
        worst = max(worst, neighbour(what))
    t.join()
    return worst


# ---- pipelined large writes as fast as A can send them
def stream():
    blob = pattern(11, 32 * MIB)
    one = blob[:MIB]
    for i in range(16):
        a.request(raw.CMD_WRITE, 300 + i, 200 * MIB + i * MIB, MIB,
                  payload=one)
    for i in range(6):
        a.request(raw.CMD_WRITE, 400 + i, 256 * MIB + i * 32 * MIB,
                  32 * MIB, payload=blob)


worst = while_a_runs(stream, "A streaming writes")
for _ in range(22):
    r = a.full_reply()
    check(a.error_of(r) == 0, f"A's streamed write {r[0].cookie}")
log(f"ok A streaming 1 and 32 MiB writes: B's worst {worst * 1000:.1f} ms")

# ---- pipelined 32 MiB reads, each reply read as soon as it comes: the
# worker's copies and sends are bounded per loop turn, and B's requests go
# between them; every byte A gets must be right.
want = pattern(11, 32 * MIB)
bad = []


def reads():
    for i in range(8):
        a.request(raw.CMD_READ, 500 + i, 256 * MIB + (i % 6) * 32 * MIB,
                  32 * MIB)
    for i in range(8):
        r = a.full_reply()
        if a.error_of(r) != 0 or r[0].data != want:
            bad.append(r[0].cookie)


worst = while_a_runs(reads, "A streaming 32 MiB reads")
check(not bad, f"A's streamed reads {bad} came back wrong")
log(f"ok A streaming 32 MiB reads: B's worst {worst * 1000:.1f} ms")
a.close()

# ---- block status of a fragmented range: each answer is a bounded
# prefix (its hole lookups and memory).  [0, 64 MiB) gets 4 KiB of
# data every 8 KiB: 16384 extents; A asks for all of it 256 times in one
# send and reads no answer while B works.
import struct
s = raw.Raw(sock)
s.start(True)
s.send_opt(raw.OPT_SET_META_CONTEXT, s.meta_data("", ["base:allocation"]))
check(s.opt_replies(raw.OPT_SET_META_CONTEXT)[-1][0] == raw.REP_ACK,
      "SET_META_CONTEXT base:allocation")
s.go()
s.send(b"".join(s.req_bytes(raw.CMD_WRITE, 600 + i, i * 8192, 4096,
                            payload=b"\x5f" * 4096) for i in range(8192)))
for _ in range(8192):
    check(s.error_of(s.full_reply()) == 0, "a fragmenting write")


def a_yields():
    """Turns A spent its per-turn bound in (the control socket's count)."""
    doc = json.loads(subprocess.run([os.environ["BIOCTL"], "stat", "--json",
                                     os.environ["PIDFILE"]], check=True,
                                    capture_output=True).stdout)
    # A is the newest: B connected first.
    a = max(doc["connections"], key=lambda c: c["id"])
    check(a["ops"]["write"]["requests"] == 8192,
          f"A among the connections: {doc['connections']}")
    return a["yields"]


yields = a_yields()
s.send(b"".join(s.req_bytes(raw.CMD_BLOCK_STATUS, 20000 + i, 0, 64 * MIB)
                for i in range(256)))
worst = 0
end = time.monotonic() + 2
while time.monotonic() < end:
    worst = max(worst, neighbour("A's block status of 16384 extents"))
    time.sleep(0.05)
for _ in range(256):
    chunks = s.full_reply()
    check(s.error_of(chunks) == 0, "A's block status")
    desc = b"".join(c.payload[4:] for c in chunks
                    if c.type == raw.REPLY_TYPE_BLOCK_STATUS)
    ext = [struct.unpack(">II", desc[i:i + 8]) for i in range(0, len(desc), 8)]
    check(0 < len(ext) <= 512,
          f"a block status answer of {len(ext)} extents (at most 512)")
    check(all(n == 4096 and f == (0 if j % 2 == 0 else 3)
              for j, (n, f) in enumerate(ext)),
          f"block status answer {ext[:4]}...: not 4 KiB data, 4 KiB hole")
# 64 units each, 256 a turn: A's requests took some 64 turns, not one.
yields = a_yields() - yields
check(yields >= 32, f"A's 256 block status requests cut its turn {yields} "
      "times (at least 32 expected)")
s.close()
log(f"ok A's 256 block status requests: B's worst {worst * 1000:.1f} ms, "
    f"A's turn cut {yields} times")
b.shutdown()
PY
    stop_bionbd
done

# An unaligned request waits for nothing on the worker (nbdl_split_submit:
# its edge sectors too are bios like any other), so while it is held on a
# stalled member, B on the same worker is served.
log "unaligned requests whose middle is on a stalled member"
hold=$tmp/hold
start_bionbd -t 1 --stripe-size 64K --size 32M \
    --delay "member=1 op=read,write,zero stall file=$hold" \
    "$tmp/u0" "$tmp/u1" "$tmp/u2" "$tmp/u3"
NBD_SOCK=$NBD_SOCK NBD_URI=$NBD_URI HOLD=$hold nbdpy - <<'PY' ||
import os
import select
import threading
import time

import nbd
import nbd_raw as raw
from nbd_raw import connect_go, pattern
from nbd_e2e import check, log

C = 64 << 10
hold = os.environ["HOLD"]
b = nbd.NBD()
b.connect_uri(os.environ["NBD_URI"])
a = connect_go(os.environ["NBD_SOCK"], structured=False)
model = bytearray(pattern(5, 4 * C))
b.pwrite(bytes(model), 0)


def held(cookie, what):
    """A's request stays held while B reads and writes member 3's chunk."""
    # Where B waits behind A, it would wait for good: let go after 5 s.
    let_go = threading.Timer(5, lambda: os.path.exists(hold) and os.unlink(hold))
    let_go.start()
    t = time.monotonic()
    b.pread(4096, 3 * C)
    b.pwrite(b"\x3c" * 4096, 3 * C)
    model[3 * C:3 * C + 4096] = b"\x3c" * 4096
    took = time.monotonic() - t
    let_go.cancel()
    let_go.join()
    check(took < 1.0, f"{what}: B waited {took:.2f} s behind it")
    check(not select.select([a.sock], [], [], 0.2)[0],
          f"{what}: answered with member 1 stalled (the test holds nothing)")
    os.unlink(hold)
    r = a.full_reply(cookie)
    check(a.error_of(r) == 0, f"{what}: error {a.error_of(r)}")
    return r, took


# From inside chunk 0 to inside chunk 2: edges on members 0 and 2, the
# whole sectors between on member 1.
off, n = C - 100, C + 200
open(hold, "w").close()
a.request(raw.CMD_READ, 1, off, n)
r, took = held(1, "unaligned read")
check(r[0].data == bytes(model[off:off + n]), "unaligned read: its data")
log(f"ok unaligned read: B waited {took * 1000:.1f} ms")

data = pattern(6, n)
open(hold, "w").close()
a.request(raw.CMD_WRITE, 2, off, n, payload=data)
r, took = held(2, "unaligned write")
model[off:off + n] = data
log(f"ok unaligned write: B waited {took * 1000:.1f} ms")

off, n = C - 700, C + 1500
open(hold, "w").close()
a.request(raw.CMD_WRITE_ZEROES, 3, off, n)
r, took = held(3, "unaligned write-zeroes")
model[off:off + n] = bytes(n)
log(f"ok unaligned write-zeroes: B waited {took * 1000:.1f} ms")
check(b.pread(4 * C, 0) == bytes(model), "the volume after them")
b.shutdown()
PY
    die "unaligned requests on a stalled member"
stop_bionbd

# ---- trims and zeroes over a whole tmpfs volume: the kernel frees, or
# allocates and clears, every page of the range in the one call, on the
# worker (memory-backed members are done inline); they go in pieces under
# the worker's per-turn budget like its copies (file_inline).
if [[ -n ${shm:-} ]]; then
    log "trims and zeroes over a whole tmpfs volume"
    d=$shm/ranged
    mkdir -p "$d"
    start_bionbd -t 1 --size 512M "$d/m0" "$d/m1" "$d/m2" "$d/m3"
    NBD_SOCK=$NBD_SOCK NBD_URI=$NBD_URI nbdpy - <<'PY' || die "ranged fairness case failed"
import os
import threading
import time

import nbd
import nbd_raw as raw
from nbd_raw import connect_go
from nbd_e2e import check, log

MIB = 1 << 20
SIZE = 512 * MIB
b = nbd.NBD()
b.connect_uri(os.environ["NBD_URI"])
a = connect_go(os.environ["NBD_SOCK"])
cmds = [(raw.CMD_WRITE_ZEROES, raw.CMD_FLAG_NO_HOLE), (raw.CMD_TRIM, 0)] * 6
errors = []


def replies():
    for _ in cmds:
        r = a.full_reply()
        if a.error_of(r):
            errors.append((r[0].cookie, a.error_of(r)))


t = threading.Thread(target=replies)
t.start()
a.send(b"".join(a.req_bytes(cmd, i, 0, SIZE, flags)
                for i, (cmd, flags) in enumerate(cmds)))
worst = 0
while t.is_alive():
    s = time.monotonic()
    b.pread(4096, 0)
    b.pwrite(b"\x5b" * 4096, 256 * MIB)
    worst = max(worst, time.monotonic() - s)
    check(worst < 1.0, f"A's whole-volume zeroes and trims: B's read+write "
          f"took {worst:.2f} s")
    time.sleep(0.02)
t.join()
check(not errors, f"A's zeroes and trims failed: {errors}")
check(b.pread(4096, 64 * MIB) == bytes(4096), "after A's trims: not zeroes")
log(f"ok A's {len(cmds)} whole-volume zeroes and trims: "
    f"B's worst {worst * 1000:.1f} ms")
a.close()
b.shutdown()
PY
    stop_bionbd
    rm -rf "$d"
fi

# ---- unaligned writes over slow members: each read-modify-writes its edge
# sector with bios the worker does not wait for (nbdl_split_submit), and
# costs A a few units of its turn (SRV_COST_UNALIGNED: 4), so B is served
# between them (one backend is enough: the bios are the worker's own
# queue's either way)
log "unaligned writes over members delayed 5 ms a read"
d=$tmp/unaligned
mkdir -p "$d"
start_bionbd -t 1 --backend "${BACKENDS%% *}" --size 64M \
    --delay "op=read ms=5" "$d/m0" "$d/m1"
NBD_SOCK=$NBD_SOCK NBD_URI=$NBD_URI BIOCTL=$BIOCTL PIDFILE=$SERVER_PIDFILE \
    nbdpy - <<'PY' || die "unaligned fairness case failed"
import json
import os
import subprocess
import threading
import time

import nbd
import nbd_raw as raw
from nbd_raw import connect_go, pattern
from nbd_e2e import check, log

sock = os.environ["NBD_SOCK"]
MIB = 1 << 20
N = 512
b = nbd.NBD()
b.connect_uri(os.environ["NBD_URI"])
a = connect_go(sock)
data = bytearray(pattern(13, 4 * MIB))
check(a.cmd(raw.CMD_WRITE, 0, len(data), payload=bytes(data)) == 0,
      "A's write")


def a_yields():
    doc = json.loads(subprocess.run([os.environ["BIOCTL"], "stat", "--json",
                                     os.environ["PIDFILE"]], check=True,
                                    capture_output=True).stdout)
    # A is the newest: B connected first.
    return max(doc["connections"], key=lambda c: c["id"])["yields"]


offs = [i * 4099 + 1 for i in range(N)]  # never on a sector boundary
failed = []


def replies():
    for _ in range(N):
        r = a.full_reply()
        if a.error_of(r):
            failed.append(offs[r[0].cookie])


yields = a_yields()
t = threading.Thread(target=replies)
t.start()
a.send(b"".join(a.req_bytes(raw.CMD_WRITE, i, off, 1,
                            payload=bytes([(i & 0x7F) | 0x80]))
                for i, off in enumerate(offs)))
worst = 0
while t.is_alive():
    s = time.monotonic()
    b.pread(4096, 32 * MIB)
    b.pwrite(b"\x5b" * 4096, 32 * MIB)
    worst = max(worst, time.monotonic() - s)
    check(worst < 1.0, f"A's unaligned writes: B's read+write took {worst:.2f} s")
    time.sleep(0.02)
t.join()
check(not failed, f"A's unaligned writes at {failed[:4]} failed")
for i, off in enumerate(offs):
    data[off] = (i & 0x7F) | 0x80
check(b.pread(len(data), 0) == bytes(data),
      "after A's unaligned writes: not the data (a neighbour's bytes lost?)")
# 4 units each, 256 a turn: 512 of them cut A's turn some 7 times.
yields = a_yields() - yields
check(yields >= 4, f"A's {N} unaligned writes cut its turn {yields} times "
      "(at least 4 expected)")
log(f"ok A's {N} unaligned writes: B's worst {worst * 1000:.1f} ms, "
    f"A's turn cut {yields} times")
a.close()
b.shutdown()
PY
stop_bionbd
log "PASS"
