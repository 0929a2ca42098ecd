#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: read-only serving, both as the server's -r and as an export
# with read-only = true in a conf file.  The export says read-only; writes,
# FUA writes, zeroes (with and without fast zero) and trims sent anyway
# (libnbd's client-side checks off) fail with EPERM and the connection
# stays up; reads, block status, cache and flush work; the data read is
# what was written before, and the member files are bit-for-bit and
# timestamp-for-timestamp unchanged.
source "$(dirname "$0")/functions.sh"

requires_server
requires_nbdpy
make_tmpdir

members="$tmp/m0 $tmp/m1 $tmp/m2"

# Some data to protect, written through a writable server.
# shellcheck disable=SC2086
start_server --stripe-size 16K --size 3M $members
NBD_URI=$NBD_URI nbdpy - <<'EOF'
from nbd_e2e import *
h = connect()
h.pwrite(bytes(range(256)) * (3 * 4096), 0)
h.flush()
EOF
stop_server

# shellcheck disable=SC2086
snapshot() {
    stat -c '%n %s %Y %b' $members
    md5sum $members
}
snapshot >"$tmp/before"

probe() {
    NBD_URI=$NBD_URI nbdpy - <<'EOF'
import errno
import nbd
from nbd_e2e import *

expected = bytes(range(256)) * (3 * 4096)
h = connect(strict=0)
check(h.is_read_only(), "export not read-only")
check(h.pread(len(expected), 0) == expected, "data differs")
for what, fn in (
        ("pwrite", lambda: h.pwrite(b"x" * 4096, 0)),
        ("pwrite FUA", lambda: h.pwrite(b"x" * 512, 16384, nbd.CMD_FLAG_FUA)),
        ("zero", lambda: h.zero(65536, 0)),
        ("zero NO_HOLE", lambda: h.zero(512, 512, nbd.CMD_FLAG_NO_HOLE)),
        ("fast zero", lambda: h.zero(65536, 0, nbd.CMD_FLAG_FAST_ZERO)),
        ("trim", lambda: h.trim(65536, 65536)),
        ("unaligned pwrite", lambda: h.pwrite(b"y" * 10, 1001))):
    expect_error(errno.EPERM, what, fn)
    check(h.pread(512, 0) == expected[:512], f"after {what}: data differs")
h.flush()
h.cache(1 << 20, 0)
got = block_status(h, len(expected), 0)
check(got == [(0, len(expected), 0)], f"block status {got}")
check(h.pread(len(expected), 0) == expected, "data differs at the end")
h.shutdown()
EOF
}

log "server -r"
# shellcheck disable=SC2086
start_server -r --stripe-size 16K $members
probe
stop_server
snapshot >"$tmp/after"
diff -u "$tmp/before" "$tmp/after" >&2 || die "members changed under -r"

log "read-only = true in a conf file"
cat >"$tmp/ro.conf" <<EOF
[export ro]
file = $tmp/m0
file = $tmp/m1
file = $tmp/m2
stripe-size = 16K
read-only = true
EOF
start_server --conf "$tmp/ro.conf"
probe
stop_server
snapshot >"$tmp/after"
diff -u "$tmp/before" "$tmp/after" >&2 || die "members changed under read-only = true"
log "ok"
