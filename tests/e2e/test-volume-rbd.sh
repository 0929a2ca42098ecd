#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: RBD members (docs/remote.md): volumes over Ceph RBD images
# of a real single-node cluster this test starts and stops itself
# (ceph-cluster.sh: mon, mgr, one OSD on a file, all on 127.0.0.1).
#  - librbd is loaded only when a member is an RBD image: a volume of
#    files never maps it, one over an image does; without the library an
#    RBD member is refused in one line that names the packages.
#  - Extents from the image's object map (fast-diff): a new image is one
#    hole, a write makes its 4 MiB object data, a trimmed object is a hole
#    again, a snapshot answers from its own map, nbdcopy's copy of a sparse
#    image is sparse; a stripe of images with 16K objects in 32M chunks
#    maps exactly; an image without an object map, or with fancy
#    striping, reads as all data.
#  - One image as the whole export (bionbd as an NBD gateway to Ceph):
#    zero, trim, flush, cache, FUA, multi-conn; a fast zero of whole
#    objects holds (and they read as a hole), one of part of an object, of
#    a fancy-striped image, of a clone or with NO_HOLE is refused
#    (ENOTSUP); over a stripe of images, refused whole before any image
#    zeroes its piece;
#    qemu-io, qemu-img convert
#    and compare, nbdcopy; `rbd export` of the image equals what was
#    written.  Its snapshot (rbd:POOL/IMAGE@SNAP) serves the data of that
#    moment, read-only.
#  - A volume striped over 4 images (both backends) and over 2 files and 2
#    images: fio verify over 4 connections (4K to 4M), qemu-img, nbdcopy,
#    and every chunk on the image and offset the layout rule names (read
#    back with `rbd export`).
#  - A raid1 of two images (bioctl create over rbd: members; superblocks,
#    bitmap and clean flag on the images) served by a daemonized server:
#    data on both images at the data offset, one watcher an image (the
#    superblock calls share the data path's handle); the forked process
#    marks the superblocks clean at exit.  bioctl check --repair and
#    create refuse the images while the server has them open, and so
#    does a second server of the volume; the images are watched from the
#    moment the start returns (the forking parent closes its handles only
#    once the server has its own); a start that fails after opening them
#    (bionbd) leaves them free for the next one.
#  - The pieces of a large request that lie back to back on an image go
#    as one request (the OSD counts one write and one read per image).
#  - conf=, id=, keyring=: a client of its own with only RBD rights; no
#    configuration file, mon_host= in the name instead.
#  - A member whose I/O connection is refused (read-only caps): EIO at
#    once, said once; connected and serving once the caps allow it.
#  - Faults: an OSD that stops answering fails requests with EIO after the
#    timeout, and serves again once it is back; the OSD stopped and
#    restarted under fio: EIO replies, no hang, the other export
#    untouched, service resumes.  A flush over a write the OSD never
#    answered fails, and so does every later flush, on any connection
#    (librbd tells a write-around write's failure to one flush only).
#  - One-line refusals: an image or pool that is not there, a malformed
#    name, an option Ceph does not know, one repeated, key= (a secret
#    for the logs), an image too small, one given twice, a
#    mirror asked of images without superblocks, a wrong key, a cluster
#    that does not answer.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/ceph-cluster.sh"

requires_server
requires_nbdpy
requires_fio_nbd
requires qemu-img
requires qemu-io
requires nbdcopy
# The cluster is part of the suite (tools/install-deps.sh): missing is a
# failure, not a skip.
for t in ceph-mon ceph-mgr ceph-osd ceph rbd monmaptool ceph-authtool; do
    command -v "$t" >/dev/null || die "$t not installed (tools/install-deps.sh)"
done
make_tmpdir
cd "$tmp"

# --- librbd only for RBD members ---------------------------------------------
log "librbd: mapped only when a member is an RBD image"
truncate -s 16M plain0.img plain1.img
start_server "$tmp/plain0.img" "$tmp/plain1.img"
nbdinfo --size "$NBD_URI" >/dev/null || die "the volume of files does not serve"
! grep -E '/lib(rbd|rados)\.so' "/proc/$SERVER_PID/maps" ||
    die "a volume of files mapped librbd or librados"
stop_server
# Without librados (hidden in a private mount namespace), a clear refusal
# before any cluster is needed.
requires unshare --version
# (awk reads to the end: an early exit would be ldconfig's SIGPIPE.)
rados_so=$(ldconfig -p | awk '$1 == "librados.so.2" && !n++ { print $NF }')
rados_so=$(readlink -f "$rados_so")
[[ -f $rados_so ]] || die "librados.so.2 not found by ldconfig"
SERVER_WRAPPER=(unshare -m --propagation private
    bash -c 'mount --bind /dev/null "$0" && exec "$@"' "$rados_so")
server_refuses_once rbd:rbd/single
SERVER_WRAPPER=()
expect_grep "member rbd:rbd/single: RBD members need librbd and librados \(Debian packages librbd1 and librados2\): .*librados\.so\.2: file too short" "$SERVER_ERR"

# BlueStore needs O_DIRECT: /var/tmp, since /tmp may be a tmpfs.
cdir=$(mktemp -d /var/tmp/test-ceph.XXXXXX)
on_exit "rm -rf '$cdir'"
on_exit ceph_stop
t0=$SECONDS
ceph_start "$cdir" 3072 || die "the Ceph cluster did not start"
log "Ceph cluster up in $((SECONDS - t0)) s"
show_log_on_failure "$cdir/log/osd.0.log"
for i in single:64M s0:16M s1:16M s2:16M s3:16M m1:16M m3:16M r0:20M r1:20M; do
    rbd_cmd create --size "${i#*:}" "rbd/${i%:*}" || die "rbd create $i"
done

# export_image IMAGE[@SNAP] FILE: the image's bytes, as Ceph has them.
export_image() {
    rm -f "$2"
    rbd_cmd export --no-progress "rbd/$1" "$2" >/dev/null 2>&1 ||
        die "rbd export $1"
}

# check_layout FILE-OF-THE-VOLUME MEMBER-FILE...: chunk k of the volume
# (64K chunks) is chunk k/N of member k%N.
check_layout() {
    py - "$@" <<'PY' || die "layout: $*"
import sys
C = 64 << 10
vol = open(sys.argv[1], "rb").read()
members = [open(m, "rb").read() for m in sys.argv[2:]]
n = len(members)
for k in range(len(vol) // C):
    m, moff = k % n, (k // n) * C
    if members[m][moff:moff + C] != vol[k * C:(k + 1) * C]:
        sys.exit(f"chunk {k}: not at member {m} offset {moff}")
print(f"layout: {len(vol) // C} chunks where the rule puts them", file=sys.stderr)
PY
}

# snapshot_then_write IMAGE SNAP: snapshot rbd/IMAGE, then write 40K at its
# start through the server: the image and the snapshot differ there.
snapshot_then_write() {
    rbd_cmd snap create "rbd/$1@$2" >/dev/null 2>&1 || die "rbd snap create $1@$2"
    start_server "rbd:rbd/$1"
    NBD_URI=$NBD_URI nbdpy - <<'PY' || die "writing after the snapshot of $1"
from nbd_e2e import connect
connect().pwrite(b"after" * 8192, 0)
PY
    stop_server
}

# --- one image as the export -------------------------------------------------
log "one image as the export"
start_server rbd:rbd/single
grep -q '/librbd\.so' "/proc/$SERVER_PID/maps" ||
    die "serving an RBD image, yet librbd is not mapped"
[[ $(nbdinfo --size "$NBD_URI") -eq $((64 << 20)) ]] || die "size: expected 64M"
NBD_URI=$NBD_URI nbdpy - <<'PY' || die "ops on one image"
import nbd
from nbd_e2e import connect
h = connect()
assert h.can_multi_conn(), "one image handle serves every connection: multi-conn"
assert not h.is_read_only()
h.pwrite(b"\xaa" * (256 << 10), 1 << 20)
h.zero(128 << 10, (1 << 20) + (64 << 10))
assert h.pread(256 << 10, 1 << 20) == b"\xaa" * (64 << 10) + bytes(128 << 10) + b"\xaa" * (64 << 10)
h.zero(64 << 10, 2 << 20, nbd.CMD_FLAG_NO_HOLE)
assert h.pread(64 << 10, 2 << 20) == bytes(64 << 10)
def refused(length, off, flags, why):
    try:
        h.zero(length, off, flags)
        raise SystemExit(f"a fast zero librbd cannot promise succeeded: {why}")
    except nbd.Error as e:
        assert e.errno == "ENOTSUP", e

refused(3 << 20, 64 << 10, nbd.CMD_FLAG_FAST_ZERO, "part of an object")
# Whole objects (4M, the default) are removed without a byte written: a
# fast zero holds, and the object map then calls them a hole.
M = 1 << 20
h.pwrite(b"\x77" * (12 * M), 24 * M)
h.zero(8 * M, 28 * M, nbd.CMD_FLAG_FAST_ZERO)
assert h.pread(12 * M, 24 * M) == b"\x77" * (4 * M) + bytes(8 * M)
seen = []
h.block_status(8 * M, 28 * M, lambda ctx, off, ents, err: seen.extend(ents))
assert seen[0] == 8 * M and seen[1] & 1, f"fast-zeroed objects: {seen[:4]}"
refused(4 * M, 24 * M, nbd.CMD_FLAG_FAST_ZERO | nbd.CMD_FLAG_NO_HOLE,
        "NO_HOLE writes every byte")
h.pwrite(b"f" * 4096, 8 << 20, nbd.CMD_FLAG_FUA)
assert h.pread(4096, 8 << 20) == b"f" * 4096
h.trim(1 << 20, 16 << 20)
h.cache(1 << 20, 0)
h.flush()
seen = []
h.block_status(1 << 20, 0, lambda ctx, off, ents, err: seen.extend(ents))
assert seen and seen[0] == 1 << 20 and seen[1] == 0, f"extents: {seen[:4]}"
PY
qemu-io -f raw -c 'write -P 0x5c 4M 1M' -c 'read -P 0x5c 4M 1M' "$NBD_URI" \
    >qio.out || die "qemu-io"
expect_grep "read 1048576/1048576" qio.out
head -c 20M /dev/urandom >single.raw
truncate -s 64M single.raw
qemu-img convert -n -f raw -O raw single.raw "$NBD_URI" || die "qemu-img convert"
qemu-img compare -f raw -F raw single.raw "$NBD_URI" >/dev/null ||
    die "qemu-img compare: the export differs"
nbdcopy "$NBD_URI" back.raw || die "nbdcopy"
cmp single.raw back.raw || die "nbdcopy: differs"
stop_server
export_image single single.rbd
cmp single.raw single.rbd || die "the image in Ceph differs from what was written"

# A snapshot: that moment's data, read-only.
snapshot_then_write single one
start_server rbd:rbd/single@one
grep -q "snapshot is read-only" "$SERVER_LOG" ||
    [[ $SERVER == plugin ]] || die "no notice that the snapshot is read-only"
NBD_URI=$NBD_URI nbdpy - <<'PY' || die "serving a snapshot"
import nbd
from nbd_e2e import connect
h = connect()
assert h.is_read_only(), "a snapshot must be served read-only"
try:
    h.pwrite(b"x" * 4096, 0)
    raise SystemExit("a write to a snapshot succeeded")
except nbd.Error as e:
    assert e.errno == "EPERM", e
PY
nbdcopy "$NBD_URI" snap.raw || die "nbdcopy of the snapshot"
cmp single.raw snap.raw || die "the snapshot does not hold the data of its moment"
stop_server

# --- extents from the object map ----------------------------------------------
log "extents: holes from the object map; all data without one"
rbd_cmd create --size 64M rbd/sparse || die "rbd create sparse"
rbd_cmd info rbd/sparse >sparse.info || die "rbd info sparse"
grep -q fast-diff sparse.info || die "the default image features lack fast-diff"
start_server rbd:rbd/sparse
NBD_URI=$NBD_URI nbdpy - <<'PY' || die "extents of a sparse image"
import nbd
from nbd_e2e import block_status, check, connect
M = 1 << 20
HZ = nbd.STATE_HOLE | nbd.STATE_ZERO
h = connect()
got = block_status(h, 64 * M, 0)
check(got == [(0, 64 * M, HZ)], f"a new image is one hole: {got}")
# Objects are 4 MiB: a write makes its whole object data.
h.pwrite(b"\x55" * 4096, 20 * M + 4096)
h.pwrite(b"\x66" * 4096, 63 * M)
got = block_status(h, 64 * M, 0)
check(got == [(0, 20 * M, HZ), (20 * M, 4 * M, 0), (24 * M, 36 * M, HZ),
              (60 * M, 4 * M, 0)], f"after two writes: {got}")
got = block_status(h, 10 * M, 22 * M)
check(got == [(22 * M, 2 * M, 0), (24 * M, 8 * M, HZ)], f"a sub-range: {got}")
# A whole object trimmed is gone again.
h.trim(4 * M, 20 * M)
got = block_status(h, 64 * M, 0)
check(got == [(0, 60 * M, HZ), (60 * M, 4 * M, 0)], f"after the trim: {got}")
check(h.pread(4096, 63 * M) == b"\x66" * 4096, "the data where it says data")
check(h.pread(4096, 20 * M + 4096) == bytes(4096), "zeros where it says hole")
PY
# nbdcopy skips what was never written: the copy holds one object's data.
nbdcopy "$NBD_URI" sparse.raw || die "nbdcopy of the sparse image"
[[ $(stat -c %s sparse.raw) -eq $((64 << 20)) ]] || die "nbdcopy: size"
alloc=$(($(stat -c %b sparse.raw) * $(stat -c %B sparse.raw)))
((alloc <= 8 << 20)) || die "nbdcopy wrote $alloc bytes of a 64M image with 4M of data"
stop_server
# A snapshot answers from its own object map.
snapshot_then_write sparse before
start_server rbd:rbd/sparse@before
NBD_URI=$NBD_URI nbdpy - <<'PY' || die "extents of a snapshot"
import nbd
from nbd_e2e import block_status, check, connect
M = 1 << 20
HZ = nbd.STATE_HOLE | nbd.STATE_ZERO
got = block_status(connect(), 64 * M, 0)
check(got == [(0, 60 * M, HZ), (60 * M, 4 * M, 0)], f"the snapshot: {got}")
PY
stop_server
# Chunks of many objects: each piece of a striped request is walked whole
# (a piece that stopped short would leave a gap: EIO).
for i in tiny0 tiny1; do
    rbd_cmd create --size 128M --object-size 16K "rbd/$i" || die "rbd create $i"
done
start_server --stripe-size 32M rbd:rbd/tiny0 rbd:rbd/tiny1
NBD_URI=$NBD_URI nbdpy - <<'PY' || die "extents of a stripe of small objects"
import nbd
from nbd_e2e import block_status, check, connect
M = 1 << 20
HZ = nbd.STATE_HOLE | nbd.STATE_ZERO
h = connect()
h.pwrite(b"\x88" * 4096, 40 * M + 4096)   # member 1, its object at 8M
got = block_status(h, 256 * M, 0)
check(got == [(0, 40 * M, HZ), (40 * M, 16 << 10, 0),
              (40 * M + (16 << 10), 216 * M - (16 << 10), HZ)],
      f"a stripe of 16K objects in 32M chunks: {got}")
PY
stop_server
# Without an object map, or with fancy striping (which librbd before
# 16.2.8 diffed wrongly), nothing but a read would tell: all data.
rbd_cmd create --size 16M --image-feature layering rbd/plain || die "rbd create plain"
rbd_cmd create --size 16M --stripe-unit 64K --stripe-count 4 rbd/fancy ||
    die "rbd create fancy"
# A fast zero of whole objects: kept by the plain image, refused by the
# fancy one, whose objects interleave (4M of it touches 64 objects).
for i in plain fancy; do
    start_server "rbd:rbd/$i"
    IMG=$i NBD_URI=$NBD_URI nbdpy - <<'PY' || die "extents of image $i: not all data"
import nbd, os
from nbd_e2e import block_status, check, connect
h = connect()
h.pwrite(b"x" * 4096, 0)
got = block_status(h, 16 << 20, 0)
check(got == [(0, 16 << 20, 0)], f"all data expected: {got}")
h.pwrite(b"y" * (4 << 20), 4 << 20)
try:
    h.zero(4 << 20, 4 << 20, nbd.CMD_FLAG_FAST_ZERO)
    fast = True
except nbd.Error as e:
    check(e.errno == "ENOTSUP", f"fast zero: {e}")
    fast = False
check(fast == (os.environ["IMG"] == "plain"), f"fast zero of 4M: {fast}")
check(h.pread(4 << 20, 4 << 20) == (bytes(4 << 20) if fast else b"y" * (4 << 20)),
      "after the fast zero")
PY
    stop_server
done

# A clone keeps no fast zero: where it has snapshots librbd copies the
# parent's object up before it can drop it.
rbd_cmd create --size 8M rbd/base || die "rbd create base"
rbd_cmd snap create rbd/base@gold >/dev/null 2>&1 || die "rbd snap create base@gold"
rbd_cmd snap protect rbd/base@gold || die "rbd snap protect base@gold"
rbd_cmd clone rbd/base@gold rbd/child || die "rbd clone"
start_server rbd:rbd/child
NBD_URI=$NBD_URI nbdpy - <<'PY' || die "fast zero of a clone"
import nbd
from nbd_e2e import check, connect
h = connect()
h.pwrite(b"c" * (4 << 20), 0)
try:
    h.zero(4 << 20, 0, nbd.CMD_FLAG_FAST_ZERO)
    raise SystemExit("a fast zero of a clone succeeded")
except nbd.Error as e:
    check(e.errno == "ENOTSUP", f"fast zero: {e}")
h.zero(4 << 20, 0)
check(h.pread(4 << 20, 0) == bytes(4 << 20), "zero of a clone")
PY
stop_server

# --- striped over 4 images; over files and images ----------------------------
imgs=(rbd:rbd/s0 rbd:rbd/s1 rbd:rbd/s2 rbd:rbd/s3)
head -c 64M /dev/urandom >vol.raw
for be in io_uring threads; do
    log "4 images, backend $be"
    start_server --backend "$be" --stripe-size 64K "${imgs[@]}"
    [[ $(nbdinfo --size "$NBD_URI") -eq $((64 << 20)) ]] || die "size: 4 x 16M"
    if [[ $be == io_uring ]]; then
        fio --name=v --ioengine=nbd --uri="$NBD_URI" --rw=randwrite \
            --bssplit=4k/40:64k/30:1m/20:4m/10 --iodepth=8 --numjobs=4 \
            --size=12M --offset_increment=16M --verify=crc32c \
            --verify_fatal=1 --output-format=json --output=fio.json \
            >/dev/null 2>&1 || die "fio verify over 4 connections"
        py -c 'import json,sys
j=json.load(open("fio.json"))
e=sum(x["error"] for x in j["jobs"]); w=sum(x["write"]["io_bytes"] for x in j["jobs"])
sys.exit(e != 0 or w < 4 * (12 << 20))' || die "fio: errors, or not all written"
    fi
    nbdcopy vol.raw "$NBD_URI" || die "nbdcopy to the volume"
    qemu-img compare -f raw -F raw vol.raw "$NBD_URI" >/dev/null ||
        die "qemu-img compare: the volume differs ($be)"
    stop_server
    for i in 0 1 2 3; do export_image "s$i" "s$i.rbd"; done
    check_layout vol.raw s0.rbd s1.rbd s2.rbd s3.rbd
    head -c 64M /dev/urandom >vol.raw
done
# A fast zero over the stripe: whole objects on every image holds; one
# image's piece not whole objects refuses it all before any image zeroes
# (16M + 64K: image 0 gets 4M + 64K, the others whole 4M objects).
start_server --stripe-size 64K "${imgs[@]}"
NBD_URI=$NBD_URI nbdpy - <<'PY' || die "fast zero over 4 images"
import nbd
from nbd_e2e import check, connect
M = 1 << 20
h = connect()
h.pwrite(b"q" * (32 * M), 0)
try:
    h.zero(16 * M + (64 << 10), 0, nbd.CMD_FLAG_FAST_ZERO)
    raise SystemExit("a fast zero image 0 cannot keep succeeded")
except nbd.Error as e:
    check(e.errno == "ENOTSUP", f"fast zero: {e}")
check(h.pread(32 * M, 0) == b"q" * (32 * M), "a refused fast zero changed data")
h.zero(16 * M, 16 * M, nbd.CMD_FLAG_FAST_ZERO)
check(h.pread(32 * M, 0) == b"q" * (16 * M) + bytes(16 * M), "fast zero of whole objects")
PY
stop_server

log "2 files and 2 images"
truncate -s 16M f0.img f2.img
start_server --stripe-size 64K "$tmp/f0.img" rbd:rbd/m1 "$tmp/f2.img" rbd:rbd/m3
nbdcopy vol.raw "$NBD_URI" || die "nbdcopy to the mixed volume"
qemu-img compare -f raw -F raw vol.raw "$NBD_URI" >/dev/null ||
    die "qemu-img compare: the mixed volume differs"
stop_server
export_image m1 m1.rbd
export_image m3 m3.rbd
check_layout vol.raw f0.img m1.rbd f2.img m3.rbd

# --- a mirror of two images: superblocks and bitmap on the images -----------
log "a mirror of two images"
"$BIOCTL" create --level raid1 --size 16M --name rbdmir rbd:rbd/r0 \
    rbd:rbd/r1 >create.txt || die "bioctl create over images: exit $?"
"$BIOCTL" info rbd:rbd/r1 rbd:rbd/r0 >info.txt || die "bioctl info: exit $?"
expect_grep "volume 'rbdmir': complete and consistent" info.txt
head -c 16M /dev/urandom >mir.raw
# Daemonized, as a service runs: the front end forks after the volume is
# open, and the superblock handles must work in the child (librados'
# threads stay with the parent).
pidf=$tmp/mir.pid
# Whatever happens next (a start that fails half-way included), the
# daemon does not outlive the test.
on_exit "[[ -s '$pidf' ]] && kill \$(cat '$pidf') 2>/dev/null"
case $SERVER in
bionbd) mir_cmd=("$BIONBD" -U "$tmp/mir.sock" -P "$pidf" rbd:rbd/r1 rbd:rbd/r0) ;;
plugin) mir_cmd=(nbdkit -U "$tmp/mir.sock" -P "$pidf" "$BIO_PLUGIN"
    file=rbd:rbd/r1 file=rbd:rbd/r0) ;;
esac
# The images are in use from the moment the start returns: the parent
# that opened them may close its handles only once the server has its
# own, or a second server starting in between finds them unwatched.  The
# look comes from a cluster connection made beforehand, so it is quicker
# than any server could connect.
nbdpy - "${mir_cmd[@]}" <<'PY' || die "the daemonized server's start: $(cat mir.log)"
import os, subprocess, sys
import rados, rbd
cluster = rados.Rados(conffile=os.environ["CEPH_CONF"])
cluster.connect(timeout=30)
ioctx = cluster.open_ioctx("rbd")
images = [rbd.Image(ioctx, n, read_only=True) for n in ("r0", "r1")]
with open("mir.log", "w") as log:
    rc = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=log,
                        stderr=subprocess.STDOUT).returncode
unwatched = [n for n, i in zip(("r0", "r1"), images) if not list(i.watchers_list())]
for i in images:
    i.close()
ioctx.close()
cluster.shutdown()
if rc:
    sys.exit(f"exit {rc}")
if unwatched:
    sys.exit(f"{unwatched}: no watcher when the start returned")
PY
for ((n = 0; n < 300; n++)); do [[ -s $pidf && -S mir.sock ]] && break; sleep 0.05; done
mir_pid=$(cat "$pidf") || die "no pid file"
mir_uri="nbd+unix:///?socket=$tmp/mir.sock"
# The process that forked the server wrote the superblocks at open, which
# took the images' exclusive locks: unless it gave them up before leaving,
# the first write waits ~30 s for the cluster to see the owner gone.
NBD_URI=$mir_uri nbdpy - <<'PY' || die "the first write to the daemonized mirror"
import time
from nbd_e2e import connect
h = connect()
t = time.monotonic()
h.pwrite(b"w" * 4096, 0)
took = time.monotonic() - t
assert took < 10, f"the first write took {took:.1f} s: a lock left with the parent?"
PY
nbdcopy mir.raw "$mir_uri" || die "nbdcopy to the mirror of images"
nbdcopy "$mir_uri" back.raw || die "nbdcopy from the mirror of images"
cmp mir.raw back.raw || die "the mirror of images reads back other data"
# The superblock calls and the data path share one image handle: one
# watcher a member (two clients would pass the exclusive lock back and
# forth on every bitmap write).
for i in r0 r1; do
    rbd_cmd status "rbd/$i" >status.txt 2>&1 || die "rbd status $i"
    n=$(grep -c "watcher=" status.txt || :)
    [[ $n -eq 1 ]] || { cat status.txt >&2; die "image $i: $n watchers, expected 1"; }
done
"$BIOCTL" info rbd:rbd/r0 >info.txt || :
expect_grep "role 0 of 2 \(active\).*, not clean" info.txt
# Rewriting images a server has open would race its writes: refused, in
# one line naming the other client.
for cmd in "check --repair" "create --force --level raid1 --size 16M"; do
    rc=0
    "$BIOCTL" $cmd rbd:rbd/r0 rbd:rbd/r1 >claim.out 2>claim.err || rc=$?
    [[ $rc -eq 1 ]] || die "bioctl $cmd under a server: exit $rc"
    [[ $(grep -c . claim.err) -eq 1 ]] || die "bioctl $cmd: $(cat claim.err)"
    expect_grep "^bioctl: member rbd:rbd/r[01]: in use by another client \(client\.[0-9]+ at " claim.err
done
# So would a second server of the volume: its own superblock writes and
# clean flag against the first's.
server_refuses_once rbd:rbd/r1 rbd:rbd/r0
expect_grep "member rbd:rbd/r[01]: in use by another client \(client\.[0-9]+ at " "$SERVER_ERR"
kill "$mir_pid"
wait_gone "$mir_pid" 30 || die "the daemonized server did not stop"
# Marked clean on the way out, by the forked process.
"$BIOCTL" info rbd:rbd/r0 rbd:rbd/r1 >info.txt || die "bioctl info: exit $?"
expect_grep "role 0 of 2 \(active\).*, clean" info.txt
expect_grep "role 1 of 2 \(active\).*, clean" info.txt
for i in r0 r1; do
    export_image "$i" "$i.rbd"
    cmp -n $((16 << 20)) -i $((1 << 20)):0 "$i.rbd" mir.raw ||
        die "image $i does not hold the data at its data offset"
done
# A start that fails once the images are open (here: a trace file that
# cannot be made) closes them: the next start is not refused for the
# ~30 s the cluster would keep their watches.
if [[ $SERVER == bionbd ]]; then
    rc=0
    "$BIONBD" -f -U "$tmp/failed.sock" --trace "$tmp/no/such/dir/t" \
        rbd:rbd/r1 rbd:rbd/r0 >failed.log 2>&1 </dev/null || rc=$?
    [[ $rc -eq 1 ]] || die "a start with a bad trace path: exit $rc"
    expect_grep "^bionbd: trace: " failed.log
    start_server rbd:rbd/r1 rbd:rbd/r0
    stop_server
fi

# --- the pieces of a large request on one image go as one request ------------
log "merged requests"
for i in ma mb; do
    # layering only: no object map, whose updates would be OSD writes too.
    rbd_cmd create --size 16M --image-feature layering "rbd/$i" || die "rbd create $i"
done
# osd_ops: the OSD's count of client writes and reads so far.
osd_ops() {
    ceph --conf "$CEPH_CONF" --admin-daemon "$CEPH_DIR/run/osd.0.asok" \
        perf dump 2>/dev/null |
        py -c 'import json,sys; d=json.load(sys.stdin)["osd"]; print(d["op_w"], d["op_r"])'
}
start_server --stripe-size 64K rbd:rbd/ma rbd:rbd/mb
NBD_URI=$NBD_URI nbdpy - <<'PY' || die "before the merged requests"
from nbd_e2e import connect
h = connect()
for off in (0, 65536):   # both images: connected, exclusive lock taken
    h.pwrite(b"w" * 4096, off)
    h.pread(4096, off)
PY
read -r w0 r0 < <(osd_ops)
NBD_URI=$NBD_URI nbdpy - <<'PY' || die "merged requests"
from nbd_e2e import connect
h = connect()
data = bytes(range(256)) * 2048   # 512K: 4 chunks on each image, back to back
h.pwrite(data, 1 << 20)
assert h.pread(512 << 10, 1 << 20) == data
PY
read -r w1 r1 < <(osd_ops)
stop_server
# One write and one read per image (one RADOS object each), not 4 of each.
[[ $((w1 - w0)) -eq 2 && $((r1 - r0)) -eq 2 ]] ||
    die "a 512K request over 2 images: $((w1 - w0)) OSD writes, $((r1 - r0)) reads (expected 2 and 2)"

# --- a client of its own: conf=, id=, keyring= ------------------------------
log "conf=, id=, keyring="
ceph_cmd auth get-or-create client.bio mon 'profile rbd' \
    osd 'profile rbd pool=rbd' >bio.keyring 2>/dev/null || die "ceph auth"
own="rbd:rbd/s0:conf=$CEPH_CONF:id=bio:keyring=$tmp/bio.keyring"
conf=$CEPH_CONF
unset CEPH_CONF
start_server "$own"
NBD_URI=$NBD_URI nbdpy - <<'PY' || die "I/O as client.bio"
from nbd_e2e import connect
h = connect()
h.pwrite(b"bio!" * 1024, 4096)
assert h.pread(4096, 4096) == b"bio!" * 1024
PY
stop_server
# No configuration file at all: the monitors as a Ceph option in the name
# (qemu's spelling, '\:' for a colon in a value), in another of Ceph's
# spellings (mon-host), and the keyring named through a metavariable,
# joined to the start directory, where Ceph expands it (ceph.keyring).
mon=$(sed -n 's/^mon_host = //p' "$conf")
cp bio.keyring ceph.keyring
noconf="rbd:rbd/s0:mon-host=${mon//:/\\:}:id=bio:keyring=\$cluster.keyring"
[[ ! -e /etc/ceph/ceph.conf ]] || die "/etc/ceph/ceph.conf exists: the case needs none"
start_server "$noconf"
NBD_URI=$NBD_URI nbdpy - <<'PY' || die "I/O with mon_host= and no configuration file"
from nbd_e2e import connect
assert connect().pread(4096, 4096) == b"bio!" * 1024
PY
stop_server
# Another key under the same name: refused, in one line.
sed 's/key = .*/key = AQBgh1FnAAAAABAAq6TMjsJCcVPpTlHaJvb8Kg==/' bio.keyring >wrong.keyring
server_refuses_once --timeout 3 "rbd:rbd/s0:conf=$conf:id=bio:keyring=$tmp/wrong.keyring"
expect_grep "cannot reach the Ceph cluster" "$SERVER_ERR"
# A cluster that does not answer: refused within the timeout.
sed "s/^mon_host = .*/mon_host = 127.0.0.1:$(_ceph_free_port)/" "$conf" >mute.conf
t1=$SECONDS
server_refuses_once --timeout 2 "rbd:rbd/s0:conf=$tmp/mute.conf"
expect_grep "rbd/s0:conf=$tmp/mute.conf: cannot reach the Ceph cluster" "$SERVER_ERR"
(( SECONDS - t1 < 15 )) || die "a mute cluster took $((SECONDS - t1)) s to refuse"
export CEPH_CONF=$conf

# --- refusals ------------------------------------------------------------------
log "refusals"
server_refuses_once rbd:rbd/absent
expect_grep "rbd:rbd/absent: image absent: No such file or directory" "$SERVER_ERR"
server_refuses_once rbd:nopool/s0
expect_grep "rbd:nopool/s0: pool nopool: No such file or directory" "$SERVER_ERR"
server_refuses_once rbd:justaname
expect_grep "expected rbd:POOL\[/NAMESPACE\]/IMAGE" "$SERVER_ERR"
server_refuses_once rbd:rbd/s0:colour=blue
expect_grep "member rbd:rbd/s0:colour=blue: colour: not a Ceph option" "$SERVER_ERR"
server_refuses_once "rbd:rbd/s0:mon_host=a:mon_host=b"
expect_grep "repeated option 'mon_host=b'" "$SERVER_ERR"
server_refuses_once "rbd:rbd/s0:mon_host=a:mon host=b"
expect_grep "repeated option 'mon host=b'" "$SERVER_ERR"
server_refuses_once "rbd:rbd/s0:key=AQBgh1FnAAAAABAAq6TMjsJCcVPpTlHaJvb8Kg=="
expect_grep "key= would show the secret in logs and process lists: give it in a keyring= file" "$SERVER_ERR"
server_refuses_once --size 1G rbd:rbd/s0 rbd:rbd/s1
expect_grep "rbd:rbd/s0: 16777216 bytes, size 1073741824 needs" "$SERVER_ERR"
server_refuses_once rbd:rbd/s0 rbd:rbd/s0
expect_grep "rbd:rbd/s0: given twice$" "$SERVER_ERR"
server_refuses_once --level raid1 --size 16M rbd:rbd/s0 rbd:rbd/s1
expect_grep "has no superblock; make the mirror with bioctl create" "$SERVER_ERR"

# --- a member that cannot be connected for I/O -----------------------------------
# Read-only caps: the probe (a read-only open) passes, the connection for
# I/O (a read-write open) is refused.  Its requests fail at once with EIO,
# said once; given the rights, the next try connects.
log "a member that cannot be connected for I/O"
ceph_cmd auth get-or-create client.ro mon 'profile rbd' \
    osd 'profile rbd-read-only pool=rbd' >ro.keyring 2>/dev/null || die "ceph auth ro"
ro="rbd:rbd/s1:id=ro:keyring=$tmp/ro.keyring"
start_server -v "$ro"
NBD_URI=$NBD_URI nbdpy - <<'PY' || die "a member that cannot be connected"
import time, nbd
from nbd_e2e import connect
h = connect()
for i in range(3):
    for op in (lambda: h.pread(4096, 0), lambda: h.pwrite(b"r" * 4096, 0)):
        t = time.monotonic()
        try:
            op()
            raise SystemExit("I/O to a member that is not connected succeeded")
        except nbd.Error as e:
            assert e.errno == "EIO", e
        assert time.monotonic() - t < 10, "EIO took as long as the timeout"
    time.sleep(0.6)   # past the retry interval (1 s) at least once
PY
n=$(grep -c "rbd/s1:id=ro:.*Operation not permitted; its requests fail with EIO" "$SERVER_LOG" || :)
[[ $n -eq 1 ]] || die "expected the member's failure said once, got $n lines"
# ... and not once per request as well.
expect_no_grep "rbd/s1:id=ro:.* at offset .*Input/output error" "$SERVER_LOG"
ceph_cmd auth caps client.ro mon 'profile rbd' osd 'profile rbd pool=rbd' \
    >/dev/null 2>&1 || die "ceph auth caps"
NBD_URI=$NBD_URI nbdpy - <<'PY' || die "after the rights were given"
import time, nbd
from nbd_e2e import connect
h = connect()
for i in range(40):
    try:
        h.pwrite(b"R" * 4096, 0)
        assert h.pread(4096, 0) == b"R" * 4096
        break
    except nbd.Error:
        time.sleep(0.25)
else:
    raise SystemExit("the member did not connect once it could")
PY
expect_grep "rbd/s1:id=ro:.*: connected" "$SERVER_LOG"
stop_server

# --- faults ----------------------------------------------------------------------
osd_pid() { cat "$cdir/run/osd.0.pid"; }
cat >two.conf <<EOF
[export ceph]
file = rbd:rbd/s0
file = rbd:rbd/s1
timeout = 3

[export local]
file = $tmp/f0.img
EOF
start_server -v --conf two.conf
log "an OSD that stops answering"
NBD_URI=$(nbd_uri ceph) nbdpy - <<'PY' || die "before the stall"
from nbd_e2e import connect
connect().pread(1 << 20, 8 << 20)   # both members connected and serving
PY
kill -STOP "$(osd_pid)"
NBD_URI=$(nbd_uri ceph) nbdpy - <<'PY' || die "a stalled OSD"
import time, nbd
from nbd_e2e import connect
h = connect()
t = time.monotonic()
try:
    h.pread(1 << 20, 8 << 20)
    raise SystemExit("a read from a stalled OSD succeeded")
except nbd.Error as e:
    assert e.errno == "EIO", e
took = time.monotonic() - t
assert 2 < took < 15, f"failed after {took:.1f} s, timeout is 3 s"
PY
kill -CONT "$(osd_pid)"
NBD_URI=$(nbd_uri ceph) nbdpy - <<'PY' || die "after the stall"
import time, nbd
from nbd_e2e import connect
h = connect()
for i in range(60):
    try:
        h.pwrite(b"C" * 65536, 8 << 20)
        assert h.pread(65536, 8 << 20) == b"C" * 65536
        break
    except nbd.Error:
        time.sleep(0.5)
else:
    raise SystemExit("the member did not come back")
PY

log "the OSD stopped and restarted under fio"
fio --name=v --ioengine=nbd --uri="$(nbd_uri ceph)" --rw=randrw \
    --bs=64k --iodepth=8 --size=32M --time_based --runtime=12 \
    --continue_on_error=all --output-format=json --output=kill.json \
    >/dev/null 2>&1 &
fio_pid=$!
sleep 2
kill "$(osd_pid)"
for ((n = 0; n < 100; n++)); do kill -0 "$(osd_pid)" 2>/dev/null || break; sleep 0.1; done
NBD_URI=$(nbd_uri local) nbdpy - <<'PY' || die "the local export during the outage"
from nbd_e2e import connect
h = connect()
h.pwrite(b"L" * 65536, 0)
assert h.pread(65536, 0) == b"L" * 65536
PY
sleep 4
ceph-osd --conf "$CEPH_CONF" -i 0 || die "restarting the OSD"
fio_outage_ok "$fio_pid" kill.json 30
NBD_URI=$(nbd_uri ceph) nbdpy - <<'PY' || die "after the OSD came back"
import time, nbd
from nbd_e2e import connect
h = connect()
for i in range(60):
    try:
        for off in range(0, 4 << 20, 64 << 10):   # both members
            h.pwrite(b"B" * 4096, off)
            assert h.pread(4096, off) == b"B" * 4096
        break
    except nbd.Error:
        time.sleep(0.5)
else:
    raise SystemExit("service did not resume")
PY
stop_server

log "a flush that failed stays failed"
rbd_cmd create --size 16M rbd/fl || die "rbd create fl"
start_server --timeout 3 rbd:rbd/fl
NBD_URI=$NBD_URI OSD_PID=$(osd_pid) nbdpy - <<'PY' || die "a failed flush"
import os, signal, nbd
from nbd_e2e import connect, sigstop

def flush_fails(h, why):
    try:
        h.flush()
    except nbd.Error as e:
        assert e.errno == "EIO", e
        return
    raise SystemExit(why)

osd = int(os.environ["OSD_PID"])
h = connect()
h.pwrite(b"a" * 4096, 0)
h.flush()   # librbd's cache writes through until the first flush
sigstop(osd)
try:
    h.pwrite(b"b" * 4096, 0)   # write-around: acknowledged once sent
    flush_fails(h, "a flush over a write the OSD never answered succeeded")
finally:
    os.kill(osd, signal.SIGCONT)
# librbd told that write's failure to one flush and forgot it: whether it
# reached the OSD is unknown, so no later flush, on any connection, may
# say it did.
h.pread(4096, 0)   # the OSD answers again
flush_fails(h, "a flush after a failed one succeeded")
h2 = connect()
h2.pwrite(b"c" * 4096, 4096)
flush_fails(h2, "another connection's flush after a failed one succeeded")
PY
expect_grep "member rbd:rbd/fl: a flush failed .*every flush fails with EIO from now on" "$SERVER_LOG"
stop_server
log "ok ($((SECONDS - t0)) s)"
