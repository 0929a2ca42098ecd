#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: unaligned writes and write-zeroes (offset or length not a
# multiple of 512), sent raw (nbd_raw.py) to a 4-member volume with 64K
# stripes, against a model of the volume.  Integrity: head-only, tail-only,
# both edges, inside one sector, across chunk and member edges, the first
# and last bytes, with FUA, NO_HOLE and FAST_ZERO; then hundreds of
# byte-disjoint pieces that share sectors, pipelined on one connection and
# spread over four connections (several workers or nbdkit threads) at
# once, plain and with members delayed 0-3 ms a bio so that their
# read-modify-writes overlap; every byte is read back.  An edge read that
# fails (a fault rule on one member's reads) fails the write or zero with
# EIO and leaves both members' files as they were.  Three writes into one
# sector, its edge reads 300 ms slow, sent 100 ms apart: they end in the
# order they came, the last one's bytes stay.  bionbd only: with one
# worker and one member 500 ms slow, a client's unaligned write and zero
# over that member leave a second client's aligned 4 KiB read and write on
# another member answered within 200 ms, while they are still in flight
# (the worker waits for no edge sector).
source "$(dirname "$0")/functions.sh"

requires_server
requires_nbdpy
make_tmpdir

C=$((64 * 1024)) SIZE=$((8 << 20))

# run_model PHASE: the integrity cases on the server just started.
run_model() {
    NBD_SOCK=$NBD_SOCK SIZE=$SIZE C=$C PHASE=$1 SEED=${SEED:-$RANDOM} \
        nbdpy - <<'PY' || die "integrity ($1)"
import os
import random

import nbd_raw as raw
from nbd_raw import connect_go
from nbd_e2e import check, log

sock = os.environ["NBD_SOCK"]
size, C = int(os.environ["SIZE"]), int(os.environ["C"])
phase, seed = os.environ["PHASE"], int(os.environ["SEED"])
log(f"{phase}: seed {seed} (SEED={seed} to replay)")
rng = random.Random(seed)
S = 512
a = connect_go(sock)
model = bytearray(size)  # the members start sparse


def data(n):
    return bytes(rng.randrange(1, 256) for _ in range(n))


def write(off, n, flags=0):
    d = data(n)
    check(a.cmd(raw.CMD_WRITE, off, n, flags, d) == 0,
          f"write {off}+{n} flags {flags:#x}")
    model[off:off + n] = d


def zero(off, n, flags=0):
    err = a.cmd(raw.CMD_WRITE_ZEROES, off, n, flags)
    if flags & raw.CMD_FLAG_FAST_ZERO and err == raw.ENOTSUP:
        return  # a refusal changes nothing
    check(err == 0, f"zero {off}+{n} flags {flags:#x}: error {err}")
    model[off:off + n] = bytes(n)


def verify(off, n, what):
    got = a.read(off, n)
    if got != bytes(model[off:off + n]):
        bad = next(i for i in range(n) if got[i] != model[off + i])
        check(False, f"{what}: byte {off + bad} is {got[bad]}, "
              f"expected {model[off + bad]}")


# Fill the volume first: a lost edge shows as a change to known bytes.
for off in range(0, size, 1 << 20):
    write(off, 1 << 20)

shapes = [
    ("head only", 10 * S + 100, 3 * S - 100),
    ("tail only", 20 * S, 3 * S + 77),
    ("both edges", 30 * S + 5, 5000),
    ("inside one sector", 40 * S + 10, 100),
    ("inside one sector, to its end", 41 * S + 400, 112),
    ("one byte", 42 * S + 511, 1),
    ("across a chunk edge", C - 300, 700),
    ("across three members", 3 * C - 1000, C + 2000),
    ("first byte", 0, 1),
    ("last bytes", size - 10, 10),
    ("edges on two members, none between", 2 * C - 1, 2),
]


def span(off, n):
    """The whole sectors [off, off + n) touches."""
    start = off & ~(S - 1)
    return start, ((off + n + S - 1) & ~(S - 1)) - start


for flags in (0, raw.CMD_FLAG_FUA):
    for what, off, n in shapes:
        write(off, n, flags)
        verify(*span(off, n), f"write {what} (flags {flags:#x})")
for flags in (0, raw.CMD_FLAG_NO_HOLE, raw.CMD_FLAG_FUA,
              raw.CMD_FLAG_FAST_ZERO,
              raw.CMD_FLAG_FAST_ZERO | raw.CMD_FLAG_NO_HOLE):
    for what, off, n in shapes:
        write(*span(off, n))  # data all over the span again
        zero(off, n, flags)
        verify(*span(off, n), f"zero {what} (flags {flags:#x})")
log(f"{phase}: {len(shapes)} shapes written and zeroed, every flag")


def pieces(base, length):
    """[base, base + length) cut into byte-disjoint pieces of 1 to 700
    bytes, which share sectors, in a random order."""
    out, off = [], base
    while off < base + length:
        n = min(rng.randrange(1, 701), base + length - off)
        out.append((off, n))
        off += n
    rng.shuffle(out)
    return out


def send_all(conns, cuts):
    """Each piece a write (or, one in four, a zero), sent pipelined over
    @conns round robin; then every reply."""
    want = {c: {} for c in conns}
    bufs = {c: [] for c in conns}
    for i, (off, n) in enumerate(cuts):
        c = conns[i % len(conns)]
        if rng.randrange(4):
            d = data(n)
            bufs[c].append(c.req_bytes(raw.CMD_WRITE, i, off, n, 0, d))
            model[off:off + n] = d
        else:
            bufs[c].append(c.req_bytes(raw.CMD_WRITE_ZEROES, i, off, n))
            model[off:off + n] = bytes(n)
        want[c][i] = (off, n)
    for c in conns:
        c.send(b"".join(bufs[c]))
    for c in conns:
        for _ in range(len(want[c])):
            r = c.full_reply()
            check(c.error_of(r) == 0,
                  f"piece {want[c][r[0].cookie]}: error {c.error_of(r)}")


# One connection, pipelined: its requests run at once.
base = 5 * C - 40 * S
cuts = pieces(base, 80 * S)
send_all([a], cuts)
verify(base - S, 82 * S, "pipelined pieces on one connection")
log(f"{phase}: {len(cuts)} pipelined pieces on one connection")

# Four connections at once (bionbd gives them to its workers in turn).
conns = [connect_go(sock) for _ in range(4)]
for rnd in range(3):
    base = (9 + 4 * rnd) * C - 60 * S
    cuts = pieces(base, 120 * S)
    send_all(conns, cuts)
    verify(base - S, 122 * S, f"pieces over four connections, round {rnd}")
log(f"{phase}: pieces over four connections")
for c in conns:
    c.close()
for off in range(0, size, 1 << 20):
    verify(off, 1 << 20, "the whole volume at the end")
a.close()
log(f"{phase}: the whole volume is the model")
PY
}

d=$tmp/v
mkdir -p "$d"
members=("$d/m0" "$d/m1" "$d/m2" "$d/m3")

log "integrity"
start_server --threads 4 --stripe-size 64K --size $SIZE "${members[@]}"
run_model plain
stop_server
rm -f "${members[@]}"

log "integrity, members delayed 0-3 ms a bio"
start_server --threads 4 --stripe-size 64K --size $SIZE \
    --delay "op=read,write,zero ms=0-3" "${members[@]}"
run_model delayed
stop_server
rm -f "${members[@]}"

# ---- an edge sector that cannot be read: EIO, nothing written
log "a failing edge read"
start_server --stripe-size 64K --size $SIZE \
    --fault "member=0 op=read error=EIO" "${members[@]}"
NBD_SOCK=$NBD_SOCK C=$C MEMBERS="${members[*]}" nbdpy - <<'PY' ||
import os

import nbd_raw as raw
from nbd_raw import connect_go, pattern
from nbd_e2e import check, log

C = int(os.environ["C"])
S = 512
members = os.environ["MEMBERS"].split()
a = connect_go(os.environ["NBD_SOCK"])
# Chunk 0 is member 0's (its reads fail), chunk 1 member 1's.
check(a.cmd(raw.CMD_WRITE, 0, 2 * C, 0, pattern(3, 2 * C)) == 0,
      "the aligned write before")


def files():
    out = []
    for m in members:
        with open(m, "rb") as f:
            out.append(f.read(C))
    return out


before = files()
# Head sector on member 0; whole sectors and the tail sector on member 1.
off, n = C - 100, 100 + 8 * S + 50
for what, cmd, flags, payload in (
        ("write", raw.CMD_WRITE, 0, pattern(4, n)),
        ("write FUA", raw.CMD_WRITE, raw.CMD_FLAG_FUA, pattern(5, n)),
        ("zero", raw.CMD_WRITE_ZEROES, 0, b""),
        ("zero NO_HOLE", raw.CMD_WRITE_ZEROES, raw.CMD_FLAG_NO_HOLE, b"")):
    err = a.cmd(cmd, off, n, flags, payload)
    check(err == raw.EIO, f"{what} with an unreadable edge: error {err}, "
          "expected EIO")
    check(files() == before, f"{what} with an unreadable edge changed a "
          "member file")
    log(f"ok {what} with an unreadable edge: EIO, nothing written")
# Inside one sector of member 0.
err = a.cmd(raw.CMD_WRITE, 7, 9, 0, pattern(6, 9))
check(err == raw.EIO and files() == before,
      f"a write inside an unreadable sector: error {err}")
# The server goes on: member 1's sectors read-modify-write as ever.
check(a.cmd(raw.CMD_WRITE, C + 3, 10, 0, b"\x77" * 10) == 0,
      "an unaligned write on the healthy member after")
check(a.read(C, S)[3:13] == b"\x77" * 10, "its bytes")
a.close()
PY
    die "a failing edge read"
stop_server

# ---- writers into one sector take it in the order they came
log "three writers into one sector, its reads 300 ms slow"
start_server --stripe-size 64K --size $SIZE \
    --delay "member=0 op=read ms=300" "${members[@]}"
NBD_SOCK=$NBD_SOCK nbdpy - <<'PY' || die "first come, first served"
import os
import time

import nbd_raw as raw
from nbd_raw import connect_go, pattern
from nbd_e2e import check, log

a = connect_go(os.environ["NBD_SOCK"])
# A holds sector 0 through its slow edge read; B, then C, wait for it.
for cookie in (1, 2, 3):
    a.request(raw.CMD_WRITE, cookie, 100, 10, 0, pattern(cookie, 10))
    time.sleep(0.1)
order = []
for _ in range(3):
    r = a.full_reply()
    check(a.error_of(r) == 0, f"write {r[0].cookie}: error {a.error_of(r)}")
    order.append(r[0].cookie)
check(order == [1, 2, 3], f"the writes ended in the order {order}")
check(a.read(0, 512)[100:110] == pattern(3, 10), "the last writer's bytes")
log("ok three writers into one sector: in the order they came")
a.close()
PY
stop_server
rm -f "${members[@]}"

# ---- bionbd: the worker waits for no edge sector
if [[ $SERVER == bionbd ]]; then
    log "one worker, one member 500 ms slow"
    rm -f "${members[@]}"
    start_server --threads 1 --stripe-size 64K --size $SIZE \
        --delay "member=0 op=read,write,zero ms=500" "${members[@]}"
    NBD_SOCK=$NBD_SOCK C=$C nbdpy - <<'PY' || die "liveness"
import os
import select
import time

import nbd_raw as raw
from nbd_raw import connect_go, pattern
from nbd_e2e import check, log

C = int(os.environ["C"])
sock = os.environ["NBD_SOCK"]
a = connect_go(sock)
b = connect_go(sock)
# Chunk 0 is member 0's (slow), chunk 1 member 1's.
for what, cmd, off, n, payload in (
        ("write", raw.CMD_WRITE, 100, 1000, pattern(7, 1000)),
        ("zero", raw.CMD_WRITE_ZEROES, 3000, 2000, b"")):
    a.request(cmd, 1, off, n, 0, payload)
    time.sleep(0.05)  # the worker has it now
    worst = 0
    for i in range(4):
        t = time.monotonic()
        got = b.read(C + 4096 * i, 4096)
        check(b.cmd(raw.CMD_WRITE, C + 4096 * i, 4096, 0,
                    pattern(i, 4096)) == 0, "B's write")
        worst = max(worst, time.monotonic() - t)
    check(worst < 0.2, f"A's unaligned {what} over the slow member: B's "
          f"aligned read+write took {worst * 1000:.0f} ms")
    check(not select.select([a.sock], [], [], 0)[0],
          f"A's unaligned {what} answered already: the test proves nothing")
    r = a.full_reply(1)
    check(a.error_of(r) == 0, f"A's {what}: error {a.error_of(r)}")
    log(f"ok A's unaligned {what} over the slow member in flight: B's "
        f"worst read+write {worst * 1000:.1f} ms")
got = a.read(0, 5000)
check(got[100:1100] == pattern(7, 1000) and got[3000:5000] == bytes(2000),
      "A's bytes")
a.close()
b.close()
PY
    stop_server
fi
log "PASS"
