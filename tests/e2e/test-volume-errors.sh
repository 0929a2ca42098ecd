#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: member errors reach the NBD client as the right error, with
# a server message naming the member and the offset inside it.  ENOSPC: one
# member lives on a 2 MiB tmpfs; 1 MiB writes through NBD succeed until it
# fills, then fail with ENOSPC, the connection stays up, writes that miss
# that member still work, and data written before reads back.  EIO: one
# member is an nbdfuse file over "nbdkit --filter=error memory"; while the
# filter's control file exists, reads and writes touching that member fail
# with EIO (others do not), and everything works again once it is removed.
# Each backend.
source "$(dirname "$0")/functions.sh"

requires_server
requires_nbdpy
requires_root
requires findmnt
requires nbdfuse --version
requires nbdkit --filter=error memory --version
requires_fuse
make_tmpdir
requires_mount

for be in $BACKENDS; do
    log "backend $be: ENOSPC"
    d=$tmp/$be
    mkdir -p "$d"
    mount_tmpfs "$d/small" 2M
    start_server --backend "$be" --stripe-size 64K --size 24M \
        "$d/small/m0" "$d/m1" "$d/m2"
    NBD_URI=$NBD_URI nbdpy - <<'EOF'
import errno
import nbd
from nbd_e2e import *

M, chunk = 1 << 20, 65536
h = connect()
written = []
for i in range(24):
    data = bytes([0x10 + i]) * M
    try:
        h.pwrite(data, i * M)
        written.append(i)
    except nbd.Error as e:
        check(e.errnum == errno.ENOSPC,
              f"write {i}M failed with {e.string}, not ENOSPC")
        break
else:
    fail("a 2M tmpfs member held 8M")
full = len(written)
log(f"{full} MiB written before ENOSPC")
check(4 <= full <= 6, f"ENOSPC after {full} MiB, expected after 4..6")
# still up: data written before is there
for i in written:
    check(h.pread(512, i * M) == bytes([0x10 + i]) * 512, f"data at {i}M")
# a write that misses member 0 (chunks k, k + 1 on members 1, 2) works
k = next(k for k in range(20 * M // chunk, 24 * M // chunk)
         if layout(k * chunk, chunk, 3)[0] == 1)
h.pwrite(b"\x77" * (2 * chunk), k * chunk)
check(h.pread(2 * chunk, k * chunk) == b"\x77" * (2 * chunk),
      "write missing m0")
expect_error(errno.ENOSPC, "write to m0 again", h.pwrite, b"\x66" * chunk,
             (k + 2) * chunk)
h.flush()
h.shutdown()
EOF
    expect_grep "$d/small/m0.*write.*offset [0-9]+.*No space left on device" "$SERVER_LOG"
    expect_no_grep "member $d/m[12]\\b" "$SERVER_LOG"
    stop_server

    log "backend $be: EIO"
    ctl=$d/fail-now
    mount_nbdfuse "$d/fuse" \
        nbdkit -s --exit-with-parent --filter=error memory 4M \
        error-pread=EIO error-pread-rate=1 error-pread-file="$ctl" \
        error-pwrite=EIO error-pwrite-rate=1 error-pwrite-file="$ctl"
    truncate -s 4M "$d/e0" "$d/e2"
    start_server --backend "$be" --stripe-size 64K \
        "$d/e0" "$d/fuse/nbd" "$d/e2"
    CTL=$ctl NBD_URI=$NBD_URI nbdpy - <<'EOF'
import errno
import os
import nbd
from nbd_e2e import *

chunk = 65536
ctl = os.environ["CTL"]
h = connect()
# chunk 1 of each row (3 chunks) is on the FUSE member
h.pwrite(b"\x42" * (6 * chunk), 0)
h.flush()
open(ctl, "w").close()
# never-read chunks of the FUSE member: the read must reach the filter
expect_error(errno.EIO, "read touching the failing member", h.pread,
             2 * chunk, 30 * chunk)
check(h.pread(chunk, 30 * chunk) == bytes(chunk),
      "read of the member before it (chunk 30, member 0)")
expect_error(errno.EIO, "write touching the failing member", h.pwrite,
             b"\x43" * (3 * chunk), 36 * chunk)
h.pwrite(b"\x44" * chunk, 39 * chunk)  # member 0 only
os.unlink(ctl)
check(h.pread(6 * chunk, 0) == b"\x42" * (6 * chunk), "old data after EIO")
h.pwrite(b"\x45" * (3 * chunk), 36 * chunk)
check(h.pread(3 * chunk, 36 * chunk) == b"\x45" * (3 * chunk), "after EIO")
h.shutdown()
EOF
    expect_grep "$d/fuse/nbd.*read.*offset 655360.*Input/output error" "$SERVER_LOG"
    expect_grep "$d/fuse/nbd.*write.*offset [0-9]+.*Input/output error" "$SERVER_LOG"
    expect_no_grep "member $d/e[02]\\b" "$SERVER_LOG"
    stop_server
done
log "ok"
