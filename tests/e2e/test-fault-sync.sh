#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: a member whose writeback fails.  The kernel reports the lost
# pages once to each open file, to whichever sync comes first: here a FUA
# write of an unrelated, already allocated block, which fails.  Every
# flush after it must fail too (the data written before is gone, and a
# flush that succeeded would say it is on storage), and the member says
# why once.  Two members: a loop device over a file on a 4 MiB tmpfs,
# written past what the tmpfs holds (EIO); a file on ext4 on such a loop
# device, like a thin volume that filled up (ENOSPC at writeback).  Both
# backends, through bioio (the engine as the front ends open it), and
# through bionbd (an NBD client's FUA write and two flushes get errors).
# Without /proc (a mount namespace that has none) the flushes' own
# descriptor comes from the member's path, with the same result.
source "$(dirname "$0")/functions.sh"

requires_root
requires_bioio
requires losetup
requires unshare
requires mkfs.ext4 -V
requires_mount
[[ -e /dev/loop-control ]] || skip "no loop devices"
make_tmpdir

# loopdev N SIZE: a fresh loop device in $loopdev over a sparse file of
# SIZE on a new 4M (or 12M) tmpfs.
loopdev() {
    mount_tmpfs "$tmp/small$1" "$3"
    truncate -s "$2" "$tmp/small$1/back"
    loop_setup loopdev "$tmp/small$1/back" || skip "no loop device could be set up"
}

# member N KIND: a member in $member, its first 64K allocated: the loop
# device itself (raw), or a file on ext4 on it (ext4).
n=0
member() {
    n=$((n + 1))
    if [[ $1 == raw ]]; then
        loopdev $n 32M 4M
        member=$loopdev
    else
        loopdev $n 64M 12M
        mkfs.ext4 -q -O ^has_journal "$loopdev" || die "mkfs.ext4 failed"
        mkdir -p "$tmp/fs$n"
        mount -o errors=continue "$loopdev" "$tmp/fs$n" || die "mount ext4 failed"
        on_exit "umount '$tmp/fs$n'"
        member=$tmp/fs$n/member
        truncate -s 32M "$member"
    fi
    dd if=/dev/urandom of="$member" bs=64K count=1 conv=notrunc status=none
    sync
}

for kind in raw ext4 noproc; do
    for be in $BACKENDS; do
        member "${kind/noproc/raw}"
        log "$kind, $be: a FUA write takes the writeback error, then flushes"
        wrap=(timeout -k 5 "$TOOL_TIMEOUT")
        [[ $kind == noproc ]] &&
            wrap+=(unshare -m sh -c 'umount -l /proc && exec "$@"' sh)
        rc=0
        "${wrap[@]}" "$BIOIO" --backend "$be" "$member" -- write 0 64K 0x41 flush \
            write 8M 16M 0x42 sh sync writef 0 4K 0x43 flush flush \
            >"$tmp/out" 2>"$tmp/err" || rc=$?
        [[ $rc -eq 1 ]] || die "$kind, $be: bioio exit status $rc, expected 1"
        grep -v '^bioio: member ' "$tmp/err" >"$tmp/cmds" || :
        # The first two errors are the kernel's (EIO, or ENOSPC on ext4);
        # the last flush fails because one failed before it.
        mapfile -t lines <"$tmp/cmds"
        [[ ${#lines[@]} -eq 3 && ${lines[0]} == "bioio: writef 0 4K: "* &&
            ${lines[1]} == "bioio: flush: "* &&
            ${lines[2]} == "bioio: flush: Input/output error" ]] ||
            die "$kind, $be: expected the FUA write and both flushes to fail: $(cat "$tmp/cmds")"
        [[ $(grep -c "a flush failed" "$tmp/err") -eq 1 ]] ||
            die "$kind, $be: the member did not say once why flushes fail: $(cat "$tmp/err")"
    done
done

member raw
log "bionbd: an NBD client's flushes after the lost writeback"
start_bionbd -t 1 "$member"
NBD_URI=$NBD_URI nbdpy - <<'PY' || die "bionbd: flush after a failed writeback"
import errno, subprocess
import nbd
from nbd_e2e import connect, expect_error
h = connect()
h.pwrite(b"A" * 65536, 0)
h.flush()
h.pwrite(b"B" * (8 << 20), 8 << 20)
subprocess.run(["sync"], check=True)
expect_error(errno.EIO, "FUA write", h.pwrite, b"C" * 4096, 0,
             nbd.CMD_FLAG_FUA)
expect_error(errno.EIO, "flush", h.flush)
expect_error(errno.EIO, "second flush", h.flush)
h.shutdown()
PY
expect_grep "member $member: a flush failed" "$SERVER_LOG"
stop_bionbd
log "ok"
