#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: a member whose writeback fails: a loop device over a file on
# a 4 MiB tmpfs, written past what the tmpfs holds.  The kernel reports
# the lost pages once, to whichever sync comes first; here a FUA write of
# an unrelated, already allocated block.  That write fails (EIO), and
# every flush after it must fail too: the data written before is gone, and
# a flush that succeeded would say it is on storage.  The member says why
# once.  Both backends, through bioio (the engine as the front ends open
# it) and through bionbd (an NBD client's FLUSH gets EIO, twice).
source "$(dirname "$0")/functions.sh"

requires_root
requires_bioio
requires losetup
requires_mount
[[ -e /dev/loop-control ]] || skip "no loop devices"
make_tmpdir

# setup N: a fresh 32M loop device in $loopdev over a sparse file on a new 4M
# tmpfs, the first 64K already allocated.
setup() {
    local n=$1
    mount_tmpfs "$tmp/small$n" 4M
    truncate -s 32M "$tmp/small$n/back"
    dd if=/dev/urandom of="$tmp/small$n/back" bs=64K count=1 conv=notrunc \
        status=none
    loop_setup loopdev "$tmp/small$n/back" || skip "no loop device could be set up"
}

n=0
for be in $BACKENDS; do
    n=$((n + 1))
    setup $n
    log "$be: a FUA write takes the writeback error, then flushes"
    rc=0
    bioio --backend "$be" "$loopdev" -- write 0 64K 0x41 flush \
        write 8M 8M 0x42 sh sync writef 0 4K 0x43 flush flush \
        >"$tmp/out.$be" 2>"$tmp/err.$be" || rc=$?
    [[ $rc -eq 1 ]] || die "$be: bioio exit status $rc, expected 1"
    grep -v '^bioio: member ' "$tmp/err.$be" >"$tmp/cmds.$be" || :
    cat >"$tmp/expected" <<EOT
bioio: writef 0 4K: Input/output error
bioio: flush: Input/output error
bioio: flush: Input/output error
EOT
    expect_same_file "$tmp/expected" "$tmp/cmds.$be"
    [[ $(grep -c "a sync failed" "$tmp/err.$be") -eq 1 ]] ||
        die "$be: the member did not say once why flushes fail: $(cat "$tmp/err.$be")"
done

n=$((n + 1))
setup $n
log "bionbd: an NBD client's flushes after the lost writeback"
start_bionbd -t 1 "$loopdev"
NBD_URI=$NBD_URI nbdpy - <<'PY' || die "bionbd: flush after a failed writeback"
import os, subprocess
import nbd
from nbd_e2e import connect
h = connect()
h.pwrite(b"A" * 65536, 0)
h.flush()
h.pwrite(b"B" * (8 << 20), 8 << 20)
subprocess.run(["sync"], check=True)
for what, fn in (("FUA write", lambda: h.pwrite(b"C" * 4096, 0,
                                                nbd.CMD_FLAG_FUA)),
                 ("flush", h.flush), ("second flush", h.flush)):
    try:
        fn()
        raise SystemExit(f"{what} succeeded over lost writes")
    except nbd.Error as e:
        assert e.errno == "EIO", f"{what}: {e}"
h.shutdown()
PY
expect_grep "member $loopdev: a sync failed" "$SERVER_LOG"
stop_bionbd
log "ok"
