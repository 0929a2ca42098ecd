#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: a CI-style fault scenario on a file system.  An ext4 image
# (mkfs.ext4, 20 files written with debugfs) is copied onto a 4-member
# bionbd volume with nbdcopy; then a client writes, block by block, what
# 40 more files changed, and a write fault (trigger file, one inode table
# block as its range) is switched on in the middle of it.  Exactly the
# writes to that block fail (EIO), every other one lands: the volume read
# back is byte for byte the new image with that one block still old.
# e2fsck finds that damage (the new files whose inodes were in the block)
# and nothing else: its report on the volume is the report on that
# reference image, while the image the client meant to write is clean.
source "$(dirname "$0")/functions.sh"

requires_nbdpy
requires mkfs.ext4
requires debugfs
requires e2fsck
requires nbdcopy
[[ -x $BIONBD ]] || die "$BIONBD not built"
make_tmpdir
cd "$tmp"

# The file system: A with 20 files, B = A plus 40 more.
truncate -s 64M A
mkfs.ext4 -q -F -b 4096 -I 256 -O ^has_journal A
for i in $(seq 1 60); do head -c $((4096 + i * 512)) /dev/urandom >"src$i"; done
{ for i in $(seq 1 20); do echo "write src$i f$i"; done; } >cmds-a
debugfs -w -f cmds-a A >/dev/null 2>&1 || die "debugfs (A)"
cp A B
{ echo "mkdir d"; for i in $(seq 21 60); do echo "write src$i d/g$i"; done; } >cmds-b
debugfs -w -f cmds-b B >/dev/null 2>&1 || die "debugfs (B)"
e2fsck -fn B >fsck-b.out 2>&1 || { cat fsck-b.out >&2; die "the new image itself is not clean"; }

# The inode table block that holds d/g50: the fault's range.
ino=$(debugfs -R "stat d/g50" B 2>/dev/null | sed -n 's/^Inode: \([0-9]*\).*/\1/p')
blk=$(debugfs -R "imap <$ino>" B 2>/dev/null | sed -n 's/.*located at block \([0-9]*\),.*/\1/p')
[[ -n $ino && -n $blk ]] || die "could not locate the inode of d/g50"
log "d/g50 is inode $ino, in block $blk"

start_bionbd --fault "op=write error=EIO file=$tmp/trigger range=$((blk * 4096))+4096" \
    --size 64M m0 m1 m2 m3
nbdcopy A "$NBD_URI" || die "nbdcopy A onto the volume"

# Write what changed from A to B, block by block; switch the fault on
# just before the first block that falls in its range.
BLK=$blk NBD_URI=$NBD_URI nbdpy - <<'PY' || die "the writes"
import errno, os
import nbd
from nbd_e2e import check, connect, log

blk = int(os.environ["BLK"])
a, b = open("A", "rb").read(), open("B", "rb").read()
changed = [i for i in range(len(b) // 4096)
           if a[i * 4096:(i + 1) * 4096] != b[i * 4096:(i + 1) * 4096]]
check(blk in changed, f"block {blk} is not among the changed ones")
h = connect()
failed = []
for i in changed:
    if i == blk:
        open("trigger", "w").close()   # the fault goes on mid-write
    try:
        h.pwrite(b[i * 4096:(i + 1) * 4096], i * 4096)
    except nbd.Error as e:
        check(e.errnum == errno.EIO, f"block {i}: {e.string}")
        failed.append(i)
h.flush()
log(f"{len(changed)} blocks written, failed: {failed}")
check(failed == [blk], f"expected only block {blk} to fail, got {failed}")
check(changed.index(blk) > 0, "the fault was on from the first write")
# The reference: B with that block as it was in A.
ref = bytearray(b)
ref[blk * 4096:(blk + 1) * 4096] = a[blk * 4096:(blk + 1) * 4096]
open("C", "wb").write(ref)
PY
rm -f trigger
nbdcopy "$NBD_URI" V || die "nbdcopy the volume back"
stop_bionbd

cmp V C || die "the volume holds more (or less) damage than the failed block explains"
rc=0; e2fsck -fn V >fsck-v.out 2>&1 || rc=$?
((rc & 4)) || { cat fsck-v.out >&2; die "e2fsck found no damage (exit $rc)"; }
rc=0; e2fsck -fn C >fsck-c.out 2>&1 || rc=$?
sed 's/\bV\b/IMAGE/g' fsck-v.out >v.norm
sed 's/\bC\b/IMAGE/g' fsck-c.out >c.norm
diff c.norm v.norm >&2 || die "e2fsck says more about the volume than the fault explains"
grep -q "inode" fsck-v.out || { cat fsck-v.out >&2; die "e2fsck reports no inode damage"; }
log "e2fsck: $(grep -c . fsck-v.out) lines, the same on the reference, e.g.:"
grep -m 3 -i "inode" fsck-v.out | sed 's/^/    /' >&2
log "ok"
