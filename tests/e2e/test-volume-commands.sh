#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: every NBD command and flag through the server, with libnbd
# (nbdsh's Python) on a 4-member volume with 64K stripes: what is advertised
# (flags, block sizes), pread/pwrite plain and FUA across chunk and member
# boundaries up to the 32 MiB maximum, flush, zero with and without NO_HOLE
# (may-trim punches holes in the members; NO_HOLE keeps or creates
# allocation), fast zero (succeeds with zeroes or fails ENOTSUP leaving the
# data), trim (the member files really have holes), block status across
# member boundaries against a hand-written map and against the members'
# own SEEK_DATA map, REQ_ONE, cache, out-of-range requests (EINVAL/ENOSPC,
# the connection stays up, nothing written), unaligned requests (served
# correctly, including block status from inside a sector and concurrent
# read-modify-writes of shared sectors from two connections),
# zero-length requests, and multi-conn flush.  Finally
# the whole volume is read back and the member files are checked against
# the model with the layout rule.  Runs on each backend.
source "$(dirname "$0")/functions.sh"

requires_server
requires_nbdpy
make_tmpdir

for be in $BACKENDS; do
    log "backend $be"
    d=$tmp/$be
    mkdir -p "$d"
    members="$d/m0 $d/m1 $d/m2 $d/m3"
    # shellcheck disable=SC2086
    start_server --backend "$be" --stripe-size 64K --size 40M $members
    MEMBERS=$members CHUNK=65536 SIZE=$((40 << 20)) SEED=${SEED:-$RANDOM} \
        NBD_URI=$NBD_URI nbdpy - <<'EOF'
import errno
import os
import random

import nbd
from nbd_e2e import *

members = members_from_env()
chunk = env_int("CHUNK")
size = env_int("SIZE")
n = len(members)
seed = int(os.environ["SEED"])
log(f"seed {seed} (SEED={seed} to replay)")
rng = random.Random(seed)
FUA = nbd.CMD_FLAG_FUA
K, M = 1024, 1 << 20

h = connect()

# ---- what is advertised
check(h.get_size() == size, f"size {h.get_size()}, expected {size}")
for name in ("can_fua", "can_flush", "can_trim", "can_zero", "can_fast_zero",
             "can_multi_conn", "can_cache", "can_df"):
    check(getattr(h, name)(), f"{name} is false")
check(not h.is_read_only(), "read-only")
check(not h.is_rotational(), "rotational")
check(h.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION), "no base:allocation")
for what, want in ((nbd.SIZE_MINIMUM, 512), (nbd.SIZE_PREFERRED, 4096),
                   (nbd.SIZE_MAXIMUM, 32 * M)):
    got = h.get_block_size(what)
    check(got == want, f"block size {what}: {got}, expected {want}")

model = bytearray(size)  # the members start sparse: all zeroes


def pat(length):
    return rng.randbytes(length)


def write(off, data, flags=0, hh=h):
    hh.pwrite(data, off, flags)
    model[off:off + len(data)] = data


def zero_model(off, length):
    model[off:off + length] = bytes(length)


def expect_same(hh, off, length, what):
    got = hh.pread(length, off)
    if got != model[off:off + length]:
        i = first_difference(got, model[off:off + length])
        fail(f"{what}: byte {off + i} differs")


def pieces(off, length):
    return member_pieces(off, length, chunk, n)


# ---- pread/pwrite, plain and FUA, across chunk and member boundaries
write(chunk - 4 * K, pat(8 * K))                 # chunk 0|1: member 0|1
write(3 * chunk - 512, pat(2 * chunk + 1024), FUA)  # touches 4 chunks
write(n * chunk - 4 * K, pat(8 * K), FUA)          # member 3 -> 0, next row
write(size - M, pat(M))                            # the last MiB
write(5 * M + 512, pat(32 * M - 8 * K))            # near the maximum size
h.flush()
for off, length in ((chunk - 4 * K, 8 * K), (3 * chunk - 1024, 2 * chunk + 4 * K),
                    (n * chunk - 8 * K, 16 * K), (size - M, M),
                    (5 * M, 32 * M)):
    expect_same(h, off, length, f"pread {off}+{length}")

# ---- zero, may trim: zeroes, and the member pieces become holes
zoff, zlen = 8 * chunk, 5 * chunk + 4 * K
write(zoff, pat(zlen))
h.flush()
h.zero(zlen, zoff)
zero_model(zoff, zlen)
expect_same(h, zoff - 4 * K, zlen + 8 * K, "zero (may trim)")
for m, moff, ln in pieces(zoff, zlen):
    check(is_hole(members[m], moff, ln),
          f"zero (may trim): {members[m]} {moff}+{ln} is not a hole")

# ---- zero with NO_HOLE over data: zeroes, allocation kept
zoff = 16 * chunk
write(zoff, pat(4 * chunk))
h.flush()
before = [blocks(m) for m in members]
h.zero(4 * chunk, zoff, nbd.CMD_FLAG_NO_HOLE | FUA)
zero_model(zoff, 4 * chunk)
expect_same(h, zoff, 4 * chunk, "zero NO_HOLE")
for i, m in enumerate(members):
    check(blocks(m) >= before[i],
          f"zero NO_HOLE released blocks of {m}: {before[i]} -> {blocks(m)}")

# ---- zero with NO_HOLE over a hole: allocation created
zoff = 24 * chunk
before = [blocks(m) for m in members]
h.zero(4 * chunk, zoff, nbd.CMD_FLAG_NO_HOLE)
expect_same(h, zoff, 4 * chunk, "zero NO_HOLE over a hole")
for i, m in enumerate(members):
    check(blocks(m) - before[i] >= chunk // 512,
          f"zero NO_HOLE did not allocate {m}: {before[i]} -> {blocks(m)}")

# ---- fast zero: zeroes quickly, or ENOTSUP with the data untouched
for flags in (nbd.CMD_FLAG_FAST_ZERO,
              nbd.CMD_FLAG_FAST_ZERO | nbd.CMD_FLAG_NO_HOLE):
    zoff = 32 * chunk
    write(zoff, pat(3 * chunk))
    try:
        h.zero(3 * chunk, zoff, flags)
        zero_model(zoff, 3 * chunk)
        log(f"fast zero (flags {flags:#x}): done")
    except nbd.Error as e:
        check(e.errnum == errno.ENOTSUP,
              f"fast zero failed with {e.errnum}, not ENOTSUP")
        log(f"fast zero (flags {flags:#x}): ENOTSUP")
    expect_same(h, zoff, 3 * chunk, f"fast zero {flags:#x}")

# ---- trim: the member files get holes
toff, tlen = 40 * chunk, 6 * chunk
write(toff, pat(tlen))
h.flush()
before = [blocks(m) for m in members]
h.trim(tlen, toff)
h.trim(chunk, toff + tlen, FUA)  # never written: a no-op that must succeed
zero_model(toff, tlen)           # punched holes read as zeroes
for m, moff, ln in pieces(toff, tlen):
    check(is_hole(members[m], moff, ln),
          f"trim: {members[m]} {moff}+{ln} is not a hole")
for i, m in enumerate(members):
    check(blocks(m) < before[i], f"trim freed nothing in {m}")
expect_same(h, toff, tlen, "after trim")

# ---- block status across member boundaries
b0 = 64 * chunk  # chunks 64..71, untouched so far
write(b0, pat(chunk))                          # chunk 64
write(b0 + 2 * chunk, pat(2 * chunk))          # chunks 66, 67
write(b0 + 5 * chunk, pat(4 * K))              # start of chunk 69
write(b0 + 7 * chunk - 4 * K, pat(8 * K))      # end of 70, start of 71
D, H = 0, HOLE_ZERO
want = merge([
    (b0, chunk, D), (b0 + chunk, chunk, H), (b0 + 2 * chunk, 2 * chunk, D),
    (b0 + 4 * chunk, chunk, H), (b0 + 5 * chunk, 4 * K, D),
    (b0 + 5 * chunk + 4 * K, 2 * chunk - 8 * K, H),
    (b0 + 7 * chunk - 4 * K, 8 * K, D),
    (b0 + 7 * chunk + 4 * K, chunk - 4 * K, H)])
check(expected_extents(members, chunk, b0, 8 * chunk) == want,
      "precondition: the members' own map differs from the hand-written one")
got = block_status(h, 8 * chunk, b0)
check(got == want, f"block status:\n got  {got}\n want {want}")

one = []
h.block_status(8 * chunk, b0,
               lambda ctx, off, entries, err: one.extend(entries),
               nbd.CMD_FLAG_REQ_ONE)
check(len(one) == 2 and one[1] == D and 0 < one[0] <= chunk,
      f"REQ_ONE: {one}")

# the whole volume: the server's map equals the members' map
got = block_status(h, size, 0)
want = expected_extents(members, chunk, 0, size)
check(got == want, f"whole-volume block status:\n got  {got}\n want {want}")

# ---- cache: a hint, data unchanged
h.cache(4 * M, 0)
h.cache(3 * chunk + 512, chunk - 512)
expect_same(h, 0, 4 * M, "after cache")

# ---- out of range: the right error, the connection stays, nothing written
h2 = connect(strict=0)


def still_up():
    expect_same(h2, size - 4 * K, 4 * K, "after an out-of-range request")


def bs(length, off):
    h2.block_status(length, off, lambda *a: 0)


for err, what, fn, args in (
        (errno.EINVAL, "pread across the end", h2.pread, (1024, size - 512)),
        (errno.EINVAL, "pread at the end", h2.pread, (512, size)),
        (errno.EINVAL, "pread far away", h2.pread, (512, 1 << 62)),
        (errno.ENOSPC, "pwrite across the end", h2.pwrite,
         (b"\xee" * 1024, size - 512)),
        (errno.ENOSPC, "pwrite far away", h2.pwrite, (b"\xee" * 512, 1 << 62)),
        (errno.ENOSPC, "zero across the end", h2.zero, (1024, size - 512)),
        (errno.EINVAL, "trim across the end", h2.trim, (1024, size - 512)),
        (errno.EINVAL, "cache across the end", h2.cache, (1024, size - 512)),
        (errno.EINVAL, "block status past the end", bs, (1024, size + 512))):
    expect_error(err, what, fn, *args)
    still_up()

# ---- zero-length requests: answered either way, never a disconnect
for what, fn in (("pread", lambda: h2.pread(0, 0)),
                 ("pwrite", lambda: h2.pwrite(b"", 0)),
                 ("zero", lambda: h2.zero(0, 0)),
                 ("trim", lambda: h2.trim(0, 0))):
    try:
        fn()
    except nbd.Error as e:
        # nbdkit treats them as out of range: EINVAL, or ENOSPC for writes
        check(e.errnum in (errno.EINVAL, errno.ENOSPC),
              f"zero-length {what}: {e}")
    still_up()

# ---- unaligned requests: both front ends serve them correctly (the NBD
# layer's alignment policy, nbdl.h)
ha, hb = connect(strict=0), connect(strict=0)


def unaligned_served():
    write(1001, pat(100), hh=h2)                       # inside sectors 1..2
    write(5 * chunk - 300, pat(700), hh=h2)            # across a chunk edge
    write(5 * chunk + 10, pat(10), FUA, hh=h2)         # inside one sector
    write(6 * chunk - 5000, pat(12345), FUA, hh=h2)    # many whole sectors
    write(size - 10, pat(10), hh=h2)                   # the last bytes
    for off, length in ((1000, 102), (5 * chunk - 301, 702),
                        (5 * chunk + 9, 12), (6 * chunk - 5001, 12347),
                        (size - 11, 11), (7, 1)):
        expect_same(h2, off, length, f"unaligned pread {off}+{length}")
    write(7 * chunk - 1000, pat(3000), hh=h2)
    h2.zero(3000, 7 * chunk - 1000)                    # edges + whole sectors
    zero_model(7 * chunk - 1000, 3000)
    write(7 * chunk + 3000, pat(100), hh=h2)
    h2.zero(10, 7 * chunk + 3010, nbd.CMD_FLAG_NO_HOLE)  # inside one sector
    zero_model(7 * chunk + 3010, 10)
    expect_same(h2, 7 * chunk - 1024, 4 * K + 1024, "unaligned zero")
    # an unaligned trim may only discard the whole sectors inside it
    write(72 * chunk, pat(8 * K), hh=h2)
    h2.trim(5000, 72 * chunk + 100)
    zero_model(72 * chunk + 512, 4096)                 # sectors 1..8 inside
    expect_same(h2, 72 * chunk, 8 * K, "unaligned trim")
    # block status from inside a sector: the last 100 bytes of chunk 64
    # are data, then chunk 65 is a hole
    got = []
    h2.block_status(chunk + 1000, b0 + chunk - 100,
                    lambda ctx, off, entries, err: got.extend(entries))
    check(got[:4] == [100, D, got[2], H] and got[2] > 0,
          f"unaligned block status {got}")

    # two connections read-modify-writing the same sectors at once
    base = 80 * chunk
    cmds = []
    for i in range(256):
        s = base + i * 512
        a, b = pat(300), pat(212)
        model[s:s + 300] = a
        model[s + 300:s + 512] = b
        cmds.append((ha, ha.aio_pwrite(a, s)))
        cmds.append((hb, hb.aio_pwrite(b, s + 300)))
    while ha.aio_in_flight() or hb.aio_in_flight():
        for hh in (ha, hb):
            if hh.aio_in_flight():
                hh.poll(1)
    for hh, cookie in cmds:
        check(hh.aio_command_completed(cookie), "aio write not retired")
    expect_same(h, base, 256 * 512, "concurrent unaligned writes")


unaligned_served()

# ---- multi-conn: a flush on one connection covers another's writes
hc = connect()
write(90 * chunk, pat(64 * K), hh=hc)
ha.flush()
expect_same(hb, 90 * chunk, 64 * K, "multi-conn")

# ---- the end state, through NBD and on the member files
h.flush()
check_volume(h, model)
for hh in (h, h2, ha, hb, hc):
    hh.shutdown()
check_members(model, members, chunk)
log("ok")
EOF
    expect_no_grep 'member .*: ' "$SERVER_LOG"
    stop_server
done
log "ok"
