#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: nbdcopy round trips.  A part-sparse 24 MiB image is copied
# into a 3-member volume (over older data) with 4 connections (multi-conn)
# and --flush, copied back out with 4 connections and with one, both
# byte-identical to the source; the member files hold the image by the
# layout rule; and a sparse copy out (holes found by block status are
# skipped, into a zeroed destination) still gives identical bytes.
source "$(dirname "$0")/functions.sh"

requires_server
requires nbdcopy
requires_nbdpy
make_tmpdir

members="$tmp/m0 $tmp/m1 $tmp/m2"
# shellcheck disable=SC2086
start_server --stripe-size 128K --size 24M $members

src=$tmp/src.raw
truncate -s 24M "$src"
for off in 0 1 5 6 7 13 20 23; do
    dd if=/dev/urandom of="$src" bs=1M seek="$off" count=1 conv=notrunc status=none
done
dd if=/dev/urandom of="$src" bs=512 seek=$((10 * 2048 + 255)) count=5 conv=notrunc status=none

# older data everywhere, so the copy must really write the zero areas
expect_ok nbdcopy -C 4 <(head -c 24M /dev/zero | tr '\0' '\132') "$NBD_URI"
NBD_URI=$NBD_URI nbdpy - <<'EOF'
from nbd_e2e import *
h = connect()
for off in (0, 2 << 20, (24 << 20) - 512):
    check(h.pread(512, off) == b"Z" * 512, f"old data missing at {off}")
EOF

expect_ok nbdcopy -C 4 --flush "$src" "$NBD_URI"
expect_ok nbdcopy -C 4 "$NBD_URI" "$tmp/out4.raw"
cmp "$src" "$tmp/out4.raw" || die "copy out with 4 connections differs"
expect_ok nbdcopy -C 1 --no-extents "$NBD_URI" "$tmp/out1.raw"
cmp "$src" "$tmp/out1.raw" || die "copy out with 1 connection differs"
# sparse copy out: holes found by block status are skipped
rm -f "$tmp/out-sparse.raw"
truncate -s 24M "$tmp/out-sparse.raw"
expect_ok nbdcopy --destination-is-zero "$NBD_URI" "$tmp/out-sparse.raw"
cmp "$src" "$tmp/out-sparse.raw" || die "sparse copy out differs"

MEMBERS=$members CHUNK=$((128 << 10)) SRC=$src nbdpy - <<'EOF'
import os
from nbd_e2e import *

with open(os.environ["SRC"], "rb") as f:
    model = f.read()
check_members(model, members_from_env(), env_int("CHUNK"))
EOF
stop_server
log "ok"
