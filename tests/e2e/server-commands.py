# SPDX-License-Identifier: MIT
"""server-commands.py - every NBD command and flag against bionbd, through
libnbd.  Run by test-server-commands.sh with Debian's python3:

  server-commands.py rw    a writable volume: commands, flags, errors,
                           multi-conn; the members are checked at the end
  server-commands.py ro    the same members served with -r: EPERM for
                           every write, nothing changes

Environment: NBD_URI, MEMBERS (member files in stripe order), CHUNK, SIZE.
"""
import errno
import hashlib
import os
import random
import sys
import time

import nbd

from nbd_e2e import (server_error, HOLE_ZERO, blocks, check, check_members, check_volume,
                     connect, env_int, expected_extents, fail,
                     is_hole, log, member_pieces, member_view, merge)

mode = sys.argv[1]
members = os.environ["MEMBERS"].split()
chunk = env_int("CHUNK")
size = env_int("SIZE")
n = len(members)
K, M = 1024, 1 << 20
FUA = nbd.CMD_FLAG_FUA
NO_HOLE = nbd.CMD_FLAG_NO_HOLE
DF = nbd.CMD_FLAG_DF
REQ_ONE = nbd.CMD_FLAG_REQ_ONE
FAST_ZERO = nbd.CMD_FLAG_FAST_ZERO
seed = int(os.environ.get("SEED", "1"))
rng = random.Random(seed)


def rand(nbytes):
    return rng.randbytes(nbytes)


def noop_extents(*args):
    return 0


def members_digest():
    d = hashlib.sha256()
    for m in members:
        with open(m, "rb") as f:
            while b := f.read(1 << 20):
                d.update(b)
    return d.hexdigest()


def block_status_list(h, length, off, flags=0):
    got = []

    def cb(ctx, offset, entries, err):
        if ctx == nbd.CONTEXT_BASE_ALLOCATION:
            got.extend(entries)
        return 0

    h.block_status(length, off, cb, flags)
    return [(got[i], got[i + 1]) for i in range(0, len(got), 2)]


# ============================================================== read-only

if mode == "ro":
    before = members_digest()
    view = member_view(members, chunk, size)
    h = connect(strict=0)
    check(h.is_read_only(), "-r: export not read-only")
    for f in ("can_trim", "can_zero", "can_fast_zero"):
        check(not getattr(h, f)(), f"-r: {f} advertised")
    probe = [(0, 64 * K), (chunk - 4 * K, 8 * K), (size - 4 * K, 4 * K)]
    for off, length in probe:
        server_error(errno.EPERM, f"-r: write {off}+{length}", h.pwrite,
                     b"\xee" * length, off)
        server_error(errno.EPERM, f"-r: write FUA {off}+{length}", h.pwrite,
                     b"\xee" * length, off, FUA)
        server_error(errno.EPERM, f"-r: trim {off}+{length}", h.trim,
                     length, off)
        server_error(errno.EPERM, f"-r: zero {off}+{length}", h.zero,
                     length, off)
        server_error(errno.EPERM, f"-r: zero NO_HOLE {off}+{length}", h.zero,
                     length, off, NO_HOLE)
        check(h.pread(length, off) == view[off:off + length],
              f"-r: data at {off} changed or unreadable after EPERM")
    # What does not write still works.
    h.flush()
    h.cache(M, 0)
    ext = block_status_list(h, M, 0)
    check(ext and ext[0][0] > 0, "-r: block status failed")
    check_volume(h, view, "-r volume")
    h.shutdown()
    check(members_digest() == before, "-r: the member files changed")
    log("ok read-only: EPERM for write/trim/zero, data untouched")
    sys.exit(0)

# ============================================================== read-write

log(f"seed {seed} (SEED={seed} to replay)")
h = connect()
bad = connect(strict=0)  # sends what libnbd would refuse
model = bytearray(size)


def write(hh, data, off, flags=0):
    hh.pwrite(data, off, flags)
    model[off:off + len(data)] = data


def zeroed(off, length):
    model[off:off + length] = bytes(length)


def alive(hh, what):
    """After an error, the connection must still answer a read."""
    try:
        got = hh.pread(4 * K, chunk - 2 * K)
    except nbd.Error as e:
        fail(f"after {what}: the next read failed: {e}")
    check(got == model[chunk - 2 * K:chunk + 2 * K],
          f"after {what}: the next read returned wrong data")


# ---- advertised
check(h.get_size() == size, f"size {h.get_size()}")
for f in ("can_fua", "can_flush", "can_trim", "can_zero", "can_fast_zero",
          "can_multi_conn", "can_cache", "can_df"):
    check(getattr(h, f)(), f"{f} is false")
check(not h.is_read_only(), "read-only")

# ---- WRITE, plain and FUA, across chunk and member boundaries
write(h, rand(256 * K), 0)
write(h, rand(8 * K), 3 * chunk - 4 * K, FUA)
write(h, rand(1536), M + 512)
write(h, rand(32 * M), 8 * M, FUA)  # the advertised maximum payload
write(h, rand(chunk * n + 4 * K), size - chunk * n - 4 * K)
check(h.pread(32 * M, 8 * M) == model[8 * M:40 * M], "32 MiB read back")
h.flush()
bad.flush(FUA)  # FUA is valid on every command
check_members(model, members, chunk, "members after writes")
log("ok WRITE (+FUA, 32 MiB), FLUSH")

# ---- READ: structured chunks
R = 44 * M  # [R, R + 256K): data, 128K of zeroes, data
write(h, rand(64 * K), R)
write(h, rand(64 * K), R + 192 * K)


def read_chunks(hh, length, off, flags=0):
    chunks = []

    def cb(buf, offset, status, err):
        chunks.append((offset, len(buf), status, bytes(buf)))
        return 0

    data = hh.pread_structured(length, off, cb, flags)
    check(data == model[off:off + length],
          f"structured read {off}+{length} flags {flags}: wrong data")
    # Chunks tile the request exactly, data chunks carry the data, hole
    # chunks cover zeroes only.
    spans = sorted((o, ln) for o, ln, _, _ in chunks)
    pos = off
    for o, ln in spans:
        check(o == pos and ln > 0,
              f"read {off}+{length}: chunks {spans} do not tile the request")
        pos += ln
    check(pos == off + length, f"read {off}+{length}: chunks stop at {pos}")
    # The spec: boundaries inside a read on multiples of 512 where possible.
    inner = [o for o, _ in spans if o != off]
    check(all(o % 512 == 0 for o in inner),
          f"read {off}+{length}: chunks start off 512-byte alignment: "
          f"{spans}")
    for o, ln, status, buf in chunks:
        check(status in (nbd.READ_DATA, nbd.READ_HOLE),
              f"chunk status {status}")
        check(buf == model[o:o + ln], f"chunk at {o}: wrong bytes")
    return [(o, ln, s) for o, ln, s, _ in sorted(chunks)]


ch = read_chunks(h, 256 * K, R)
holes = [c for c in ch if c[2] == nbd.READ_HOLE]
datas = [c for c in ch if c[2] == nbd.READ_DATA]
check(any(o <= R + 64 * K and o + ln >= R + 192 * K for o, ln, _ in holes),
      f"no hole chunk for the 128K of zeroes: {ch}")
check(len(datas) >= 2, f"expected data chunks around the hole: {ch}")
ch = read_chunks(h, 256 * K, R, DF)
check(len(ch) == 1 and ch[0][2] == nbd.READ_DATA,
      f"DF read of data and a hole: {len(ch)} chunks {ch}")
ch = read_chunks(h, 128 * K, R + 64 * K, DF)
check(len(ch) == 1, f"DF read of a hole: {ch}")
ch = read_chunks(h, 64 * K, 46 * M)  # never written: all hole
check(all(c[2] == nbd.READ_HOLE for c in ch), f"read of a hole: {ch}")
# Fragmented: 4K data / 4K zero, 16 runs in 128K.
for i in range(0, 128 * K, 8 * K):
    write(h, rand(4 * K), R + 256 * K + i)
read_chunks(h, 128 * K, R + 256 * K)
read_chunks(h, 128 * K, R + 256 * K, DF)
read_chunks(bad, 256 * K - 200, R + 100)  # unaligned: holes on 4K of the export
read_chunks(h, 1536, R + 512)  # shorter than a page
# Reads with FUA are valid (and do nothing special).
check(bad.pread(4 * K, R, FUA) == model[R:R + 4 * K], "read + FUA")
log("ok READ structured: data and hole chunks, DF one chunk")

# ---- READ paths: copied through a buffer, or sent from tmpfs members
# with sendfile (READ_PATH says which the server must take).  Written
# zeroes tell them apart: a copy finds them and sends a hole chunk, sendfile
# never looks at the data and sends them as the data the members hold.
ZR = 42 * M
write(h, bytes(128 * K), ZR)
write(h, rand(4 * K), ZR + 128 * K)
ch = read_chunks(h, 132 * K, ZR)
kinds = [s for _, _, s in ch]
if os.environ["READ_PATH"] == "copy":
    check(kinds[0] == nbd.READ_HOLE, f"copied read of written zeroes: {ch}")
else:
    check(kinds == [nbd.READ_DATA], f"sendfile read of written zeroes: {ch}")
# Simple replies (no structured reply negotiated), both paths: the whole
# written area, the edges of data and holes, a maximum-size read.
simple = nbd.NBD()
simple.set_request_structured_replies(False)
simple.connect_uri(os.environ["NBD_URI"])
check(not simple.get_structured_replies_negotiated(), "structured replies")
for off, length in ((R, 256 * K), (ZR - 4 * K, 136 * K), (R + 1536, 8 * K),
                    (0, 32 * M), (size - 64 * K, 64 * K)):
    check(simple.pread(length, off) == model[off:off + length],
          f"simple-reply read {off}+{length}: wrong data")
simple.shutdown()
log(f"ok READ path {os.environ['READ_PATH']}: written zeroes as "
    f"{'hole' if kinds[0] == nbd.READ_HOLE else 'data'}, simple replies")

# ---- TRIM: the members get holes
T, TL = 20 * chunk * n, 2 * chunk * n  # 2 chunks on every member
write(h, rand(TL + 2 * chunk), T - chunk)  # data on both sides stays
h.flush()
pieces = member_pieces(T, TL, chunk, n)
b0 = sum(blocks(m) for m in members)
h.trim(TL - 2 * chunk, T)
h.trim(2 * chunk, T + TL - 2 * chunk, FUA)
zeroed(T, TL)
for m, moff, ln in pieces:
    check(is_hole(members[m], moff, ln),
          f"trim: member {m} has data in [{moff}, +{ln})")
b1 = sum(blocks(m) for m in members)
check(b0 - b1 >= TL // 1024, f"trim freed {(b0 - b1) * 512} bytes, "
      f"expected {TL}")
check(h.pread(TL, T) == bytes(TL), "trimmed range does not read as zeroes")
log("ok TRIM (+FUA): holes in the members")

# ---- WRITE_ZEROES
Z = 30 * chunk * n
write(h, rand(4 * chunk), Z)
h.zero(4 * chunk, Z)  # may trim: the engine punches holes
zeroed(Z, 4 * chunk)
check(h.pread(4 * chunk, Z) == bytes(4 * chunk), "zero: not zero")
for m, moff, ln in member_pieces(Z, 4 * chunk, chunk, n):
    check(is_hole(members[m], moff, ln),
          f"zero (may trim): member {m} has data in [{moff}, +{ln})")
# NO_HOLE on that hole: the members get blocks again (allocated, perhaps as
# unwritten extents, which SEEK_DATA may call a hole: count blocks).
b0 = sum(blocks(m) for m in members)
h.zero(4 * chunk, Z, NO_HOLE)
b1 = sum(blocks(m) for m in members)
check(b1 - b0 >= 4 * chunk // 512,
      f"zero NO_HOLE allocated {(b1 - b0) * 512} bytes, expected {4 * chunk}")
check(h.pread(4 * chunk, Z) == bytes(4 * chunk), "zero NO_HOLE: not zero")
write(h, rand(2 * chunk), Z + chunk)
h.zero(2 * chunk, Z + chunk, NO_HOLE | FUA)
zeroed(Z + chunk, 2 * chunk)
check(h.pread(4 * chunk, Z) == bytes(4 * chunk), "zero NO_HOLE|FUA on data")
# FAST_ZERO: zeroes, or ENOTSUP leaving the data alone.
for fl in (FAST_ZERO, FAST_ZERO | NO_HOLE, FAST_ZERO | FUA):
    write(h, rand(chunk + 8 * K), Z + 4 * K)
    try:
        h.zero(chunk + 8 * K, Z + 4 * K, fl)
        zeroed(Z + 4 * K, chunk + 8 * K)
    except nbd.Error as e:
        check(e.errnum == errno.ENOTSUP, f"fast zero {fl:#x}: {e}")
    check(h.pread(chunk + 16 * K, Z) == model[Z:Z + chunk + 16 * K],
          f"fast zero {fl:#x}: wrong data after")
log("ok WRITE_ZEROES (+NO_HOLE, FAST_ZERO, FUA)")

# ---- multi-step requests finish promptly.  A FUA trim or zero is two
# steps in the ioq (fallocate, then fdatasync queued from the completion);
# if the second is left unsubmitted the loop sleeps until libev's ~60 s
# timeout.  Each must complete well before that (30 s: a loaded disk may
# make an fdatasync slow, never that slow).

def prompt(what, aio, *args, limit=30.0):
    start = time.monotonic()
    cookie = aio(*args)
    while not h.aio_command_completed(cookie):
        check(time.monotonic() - start < limit,
              f"{what}: not answered after {limit} s (lost wakeup?)")
        h.poll(100)


for i in range(8):
    off = Z + 8 * chunk + i * 2 * chunk
    write(h, rand(2 * chunk), off)
    prompt(f"trim FUA #{i}", h.aio_trim, chunk, off, None, FUA)
    prompt(f"zero FUA #{i}", h.aio_zero, chunk, off + chunk, None, FUA)
    prompt(f"zero NO_HOLE|FUA #{i}", h.aio_zero, chunk, off, None,
           NO_HOLE | FUA)
    zeroed(off, 2 * chunk)
check(h.pread(16 * chunk, Z + 8 * chunk) == model[Z + 8 * chunk:Z + 24 * chunk],
      "after FUA trims and zeroes: wrong data")
log("ok FUA trims and zeroes answered promptly")

# ---- CACHE
h.cache(4 * M, 0)
h.cache(chunk * n * 2, chunk - 4 * K)
bad.cache(4 * K, 0, FUA)
log("ok CACHE")

# ---- BLOCK_STATUS (+REQ_ONE), against the members' own map
h.flush()
want = expected_extents(members, chunk, T - chunk, TL + 2 * chunk)
pos, got = T - chunk, []
while pos < T + TL + chunk:
    e = block_status_list(h, T + TL + chunk - pos, pos)
    check(e and all(ln > 0 for ln, _ in e), f"block status at {pos}: {e}")
    for ln, fl in e:
        got.append((pos, ln, fl))
        pos += ln
got = merge(got)
check(got == want, f"block status:\n  got  {got}\n  want {want}")
check(any(f == HOLE_ZERO for _, _, f in got) and
      any(f == 0 for _, _, f in got), f"expected data and holes: {got}")
for off, length in ((T - 4 * K, 64 * K), (T + 4 * K, TL), (0, size)):
    e = block_status_list(h, length, off, REQ_ONE)
    check(len(e) == 1 and 0 < e[0][0] <= length,
          f"REQ_ONE {off}+{length}: {e}")
log("ok BLOCK_STATUS (+REQ_ONE)")

# ---- errors; the connection stays usable after each
E = size - 4 * K
write(h, rand(4 * K), E)
cases = [
    # past the end: reads, trims, block status, cache -> EINVAL
    (errno.EINVAL, "read past the end", bad.pread, 4 * K, size),
    (errno.EINVAL, "read across the end", bad.pread, 8 * K, E),
    (errno.EINVAL, "read at 2^63", bad.pread, 512, 1 << 63),
    (errno.EINVAL, "read wrapping 2^64", bad.pread, 4 * K, (1 << 64) - 512),
    (errno.EINVAL, "trim across the end", bad.trim, 8 * K, E),
    (errno.EINVAL, "cache past the end", bad.cache, 4 * K, size),
    (errno.EINVAL, "block status past the end", bad.block_status, 4 * K,
     size, noop_extents),
    # past the end: writes -> ENOSPC
    (errno.ENOSPC, "write across the end", bad.pwrite, b"\xee" * 8 * K, E),
    (errno.ENOSPC, "write past the end", bad.pwrite, b"\xee" * 4 * K, size),
    (errno.ENOSPC, "write wrapping 2^64", bad.pwrite, b"\xee" * 4 * K,
     (1 << 64) - 512),
    (errno.ENOSPC, "zero across the end", bad.zero, 8 * K, E),
    (errno.ENOSPC, "zero NO_HOLE past the end", bad.zero, 4 * K, size,
     NO_HOLE),
    # (unaligned requests are served: test-volume-commands.sh)
    # flags not defined for the command
    (errno.EINVAL, "read + NO_HOLE", bad.pread, 4 * K, 0, NO_HOLE),
    (errno.EINVAL, "read + REQ_ONE", bad.pread, 4 * K, 0, REQ_ONE),
    (errno.EINVAL, "read + FAST_ZERO", bad.pread, 4 * K, 0, FAST_ZERO),
    (errno.EINVAL, "read + bit 7", bad.pread, 4 * K, 0, 1 << 7),
    (errno.EINVAL, "write + DF", bad.pwrite, b"\xee" * 4 * K, 0, DF),
    (errno.EINVAL, "write + NO_HOLE", bad.pwrite, b"\xee" * 4 * K, 0,
     NO_HOLE),
    (errno.EINVAL, "write + bit 15", bad.pwrite, b"\xee" * 4 * K, 0, 1 << 15),
    (errno.EINVAL, "trim + DF", bad.trim, 4 * K, E, DF),
    (errno.EINVAL, "trim + NO_HOLE", bad.trim, 4 * K, E, NO_HOLE),
    (errno.EINVAL, "zero + DF", bad.zero, 4 * K, E, DF),
    (errno.EINVAL, "zero + REQ_ONE", bad.zero, 4 * K, E, REQ_ONE),
    (errno.EINVAL, "flush + NO_HOLE", bad.flush, NO_HOLE),
    (errno.EINVAL, "flush + DF", bad.flush, DF),
    (errno.EINVAL, "cache + DF", bad.cache, 4 * K, 0, DF),
    (errno.EINVAL, "cache + REQ_ONE", bad.cache, 4 * K, 0, REQ_ONE),
    (errno.EINVAL, "block status + DF", bad.block_status, 4 * K, 0,
     noop_extents, DF),
    (errno.EINVAL, "block status + NO_HOLE", bad.block_status, 4 * K, 0,
     noop_extents, NO_HOLE),
    # too big for one request
    (errno.EINVAL, "read of 32 MiB + 4K", bad.pread, 32 * M + 4 * K, 0),
    (errno.EOVERFLOW, "read DF of 32 MiB + 4K", bad.pread, 32 * M + 4 * K, 0,
     DF),
]
for err, what, fn, *args in cases:
    server_error(err, what, fn, *args)
    alive(bad, what)
# Nothing at the end of the volume changed.
check(h.pread(4 * K, E) == model[E:E + 4 * K],
      "a refused request changed the last 4K of the volume")
check(h.pread(4 * K, 0) == model[:4 * K],
      "a refused request changed the first 4K of the volume")
log(f"ok {len(cases)} refused requests: EINVAL/ENOSPC/EOVERFLOW, connection "
    f"still up")

# Zero-length requests never disconnect (the result is the server's call).
for what, fn, args in (("read", bad.pread, (0, 0)),
                       ("write", bad.pwrite, (b"", 0)),
                       ("trim", bad.trim, (0, 0)),
                       ("zero", bad.zero, (0, 0)),
                       ("cache", bad.cache, (0, 0)),
                       ("block status", bad.block_status,
                        (0, 0, noop_extents)),
                       ("read at the end", bad.pread, (0, size)),
                       ("write at the end", bad.pwrite, (b"", size))):
    try:
        fn(*args)
    except nbd.Error as e:
        check(e.errnum in (errno.EINVAL, errno.ENOSPC),
              f"zero-length {what}: {e}")
    alive(bad, f"zero-length {what}")
log("ok zero-length requests")

# Block status without a selected context.
nometa = connect(strict=0, meta=False)
server_error(errno.EINVAL, "block status without a meta context",
             nometa.block_status, 4 * K, 0, noop_extents)
alive(nometa, "block status without a meta context")
nometa.shutdown()

# ---- many requests in flight on one connection.  The server may carry
# out requests in flight in any order (the spec), so the writes do not
# overlap: each takes its own 64 KiB slot.
reqs = []
for slot in rng.sample(range(8 * M // (64 * K)), 64):
    off = slot * 64 * K + rng.randrange(0, 16) * 4 * K
    data = rand(rng.choice((4 * K, 16 * K, 64 * K)))
    data = data[:slot * 64 * K + 64 * K - off]
    reqs.append(h.aio_pwrite(data, off))
    model[off:off + len(data)] = data
while h.aio_in_flight() > 0:
    h.poll(-1)
for c in reqs:
    check(h.aio_command_completed(c), f"aio write {c} not completed")
bufs = []
for i in range(0, 8 * M, 256 * K):
    b = nbd.Buffer(256 * K)
    bufs.append((i, b, h.aio_pread(b, i)))
while h.aio_in_flight() > 0:
    h.poll(-1)
for off, b, c in bufs:
    check(h.aio_command_completed(c), "aio read not completed")
    check(b.to_bytearray() == model[off:off + 256 * K],
          f"aio read at {off}: wrong data")
log("ok 64 writes and 32 reads in flight on one connection")

# ---- multi-conn: write on one, flush on another, read on a third
c1, c2, c3 = connect(), connect(), connect()
for hh in (c1, c2, c3):
    check(hh.can_multi_conn(), "multi-conn not advertised")
data = rand(3 * chunk)
MC = 40 * M + chunk // 2
c1.pwrite(data, MC)
model[MC:MC + len(data)] = data
c2.flush()
check(c3.pread(len(data), MC) == data, "multi-conn: third connection "
      "does not read what the first wrote")
check_members(model, members, chunk, "members after multi-conn write")
for hh in (c1, c2, c3):
    hh.shutdown()
log("ok multi-conn write/flush/read")

# ---- everything, through NBD and on the members
h.flush()
check_volume(h, model)
check_members(model, members, chunk)
bad.shutdown()
h.shutdown()
log("ok whole volume and members match the model")
