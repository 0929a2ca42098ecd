#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: data integrity on every I/O path: for each backend in
# $BACKENDS, with the members on tmpfs (memory-backed: the plugin copies
# every request on the calling thread; bionbd, run with --async-min 1M,
# copies smaller ones on its worker a budget per loop turn and hands larger
# ones to the backend, and sends reads from 64K up with sendfile, or with
# --sendfile-min 0 copies them too) and on a disk file system (io_uring, with IOSQE_ASYNC
# from 1M, or the thread pool), fio (ioengine=nbd, crc32c,
# verify_fatal) writes random data to a 4-member volume with 64K stripes
# over 4 connections, each job on its own 48 MiB region: random 4K-aligned
# writes of 4 KiB to 8 MiB at queue depth 8, then one 32 MiB write per
# connection (the server's maximum request, at an offset that is not
# stripe-aligned), each verified after writing; then one more connection
# reads the four 32 MiB blocks back at queue depth 4 and verifies them.
# fio's per-request logs must show 1 MiB and 32 MiB requests written and
# read, and every byte written read back.  The server is then restarted on
# the same member files (bionbd: --sendfile-min 0) and the workload
# verified again without writing (the members must stay untouched); after
# each of the two runs, some 300 ranges read through NBD
# (random ones, ones across chunk and member-row boundaries, the ends and
# insides of the 32 MiB blocks, one whole 32 MiB block) must equal what the
# member files hold where the layout rule puts them (chunk k on member
# k % N at (k / N) * stripe), while the same ranges taken from the members
# in the wrong order must not.
source "$(dirname "$0")/functions.sh"

requires_server
requires_fio_nbd
requires_nbdpy
make_tmpdir

K=1024
M=$((1024 * K))
CHUNK=64K
NJOBS=4
# Job j's region starts at j * REGION: MIXED bytes of random-sized random
# writes, then from BIG_OFF (4K- but not 64K-aligned) one 32 MiB write.
REGION=$((48 * M))
MIXED=$((15 * M))
BIG_OFF=$((MIXED + 36 * K))
BIG_BS=$((32 * M))
SIZE=$((NJOBS * REGION)) # 192 MiB: 4 members of 48 MiB
FIO_SEED=${FIO_SEED:-4242}
SEED=${SEED:-$RANDOM}

# clock: now in microseconds; since T0: the time since then, as "1.2 s".
clock() { echo "${EPOCHREALTIME/[.,]/}"; }
since() {
    local d=$(($(clock) - $1))
    printf '%d.%d s' $((d / 1000000)) $((d / 100000 % 10))
}

make_shmdir $((SIZE / M + 16))M
# ... and on a disk file system: $tmp, /var/tmp or the build tree, the
# first that is neither tmpfs nor ramfs.
disk=
for d in "$tmp" /var/tmp "$BUILD_DIR"; do
    case $(fstype "$d" 2>/dev/null) in
    tmpfs | ramfs | '') continue ;;
    esac
    if [[ $d == "$tmp" ]]; then
        disk=$tmp/disk
        mkdir "$disk"
    else
        disk=$(mktemp -d "$d/$test_name.XXXXXX")
        on_exit "rm -rf '$disk'"
    fi
    break
done
[[ -n $disk ]] || skip "no directory on a disk file system (all tmpfs)"

# write_job FILE: the fio job.  [mixed] and [big] write and verify (or only
# verify, with --verify_only); [bigread] reads the 32 MiB blocks [big]
# wrote, queue depth 4 on one connection, and verifies what it reads.
write_job() {
    cat >"$1" <<EOF
[global]
ioengine=nbd
uri=$NBD_URI
verify=crc32c
verify_fatal=1
verify_state_save=0
randseed=$FIO_SEED
write_lat_log=$tmp/lat
log_offset=1

[mixed]
numjobs=$NJOBS
offset_increment=$REGION
rw=randwrite
bssplit=4k/30:8k/5:16k/5:64k/10:192k/5:1m/25:2m/5:4m/10:8m/5
iodepth=8
offset=0
size=$MIXED

[big]
stonewall
numjobs=$NJOBS
offset_increment=$REGION
rw=write
bs=$BIG_BS
offset=$BIG_OFF
size=$BIG_BS

[bigread]
stonewall
numjobs=1
rw=read:$((REGION - BIG_BS))
bs=$BIG_BS
iodepth=$NJOBS
offset=$BIG_OFF
size=$((SIZE - BIG_OFF))
io_size=$((NJOBS * BIG_BS))
EOF
}

# run_fio WHAT BIGREADS FIO-ARGS...: run the job (fio's status); it must
# pass, and fio's logs must show 1 MiB and 32 MiB requests written and
# read back, every byte written read back, and BIGREADS more 32 MiB reads.
run_fio() {
    local what=$1 bigreads=$2 out=$tmp/fio.$_server_seq.out stats t0
    shift 2
    t0=$(clock)
    rm -f "$tmp"/lat_*.log
    write_job "$tmp/job.fio"
    if ! (cd "$tmp" && timeout -k 5 120 fio "$@" job.fio) >"$out" 2>&1; then
        sed 's/^/    /' "$out" >&2
        die "$what: fio failed"
    fi
    # fio's per-request latency logs: time, latency, direction (0 read,
    # 1 write), length, offset[, priority].
    stats=$(cat "$tmp"/lat_clat.*.log | awk -F', *' '
        { n[$3]++; b[$3] += $4; if ($4 == 1048576) m[$3]++
          if ($4 == 33554432) g[$3]++ }
        END { printf "%d %d %d %d %d %d %d %d", n[1], b[1], m[1], g[1],
              n[0], b[0], m[0], g[0] }')
    read -r wn wb w1m w32m rn rb r1m r32m <<<"$stats"
    log "$what ($(since "$t0")): wrote $wn requests, $((wb / M)) MiB" \
        "($w1m of 1 MiB, $w32m of 32 MiB); read $rn, $((rb / M)) MiB" \
        "($r1m of 1 MiB, $r32m of 32 MiB)"
    # (--verify_only logs the writes it skips: the members' mtimes tell.)
    [[ $wb -eq $((NJOBS * (MIXED + BIG_BS))) && $w1m -gt 0 &&
        $w32m -eq $NJOBS ]] ||
        die "$what: wrote $wb bytes, $w1m 1 MiB and $w32m 32 MiB requests"
    [[ $rb -eq $((wb + bigreads * BIG_BS)) && $r1m -eq $w1m &&
        $r32m -eq $((NJOBS + bigreads)) ]] || {
        sed 's/^/    /' "$out" >&2
        die "$what: not everything written was read back"
    }
}

# check_layout: ranges read through NBD equal the member files, mapped by
# the layout rule (nbd_e2e.layout, written independently of the engine).
check_layout() {
    local t0
    t0=$(clock)
    MEMBERS="${members[*]}" CHUNK=$(to_bytes $CHUNK) SIZE=$SIZE \
        REGION=$REGION NJOBS=$NJOBS MIXED=$MIXED BIG_OFF=$BIG_OFF \
        BIG_BS=$BIG_BS SEED=$SEED NBD_URI=$NBD_URI nbdpy - <<'EOF'
import random

from nbd_e2e import *

members = members_from_env()
chunk, size, region = env_int("CHUNK"), env_int("SIZE"), env_int("REGION")
njobs, mixed = env_int("NJOBS"), env_int("MIXED")
big_off, big_bs = env_int("BIG_OFF"), env_int("BIG_BS")
rng = random.Random(env_int("SEED"))
n = len(members)
K = 4096

# What fio wrote, all of it: [start, end) per job.
written = []
for j in range(njobs):
    base = j * region
    written += [(base, base + mixed),
                (base + big_off, base + big_off + big_bs)]

ranges = []
# random 4K-aligned ranges of 4K to 256K inside what was written
for _ in range(200):
    s, e = rng.choice(written)
    length = rng.randrange(1, 65) * K
    off = rng.randrange(s // K, (e - length) // K + 1) * K
    ranges.append((off, length))
# across chunk boundaries (into the next member) and member-row boundaries
for _ in range(60):
    s, e = rng.choice(written)
    k = rng.randrange(s // chunk + 1, e // chunk)
    ranges.append((k * chunk - K, 2 * K))
for _ in range(20):
    s, e = rng.choice(written)
    row = rng.randrange(s // (chunk * n) + 1, e // (chunk * n))
    ranges.append((row * chunk * n - 3 * K, 8 * K))
# the 32 MiB blocks: their first and last 4K, 1 MiB from inside
for j in range(njobs):
    start = j * region + big_off
    ranges += [(start, K), (start + big_bs - K, K)]
    for _ in range(3):
        ranges.append((start + rng.randrange(0, (big_bs >> 20) - 1) *
                       (1 << 20) + rng.randrange(0, 256) * K, 1 << 20))
# one whole 32 MiB block, and the volume's two ends
ranges += [(big_off, big_bs), (0, K), (size - K, K)]

files = [open(m, "rb") for m in members]


def from_members(off, length, order):
    """Volume bytes [off, off + length) as the member files hold them,
    taking member order[m] for member m."""
    out = bytearray()
    for m, moff, piece in member_pieces(off, length, chunk, n):
        f = files[order[m]]
        f.seek(moff)
        data = f.read(piece)
        out += data + bytes(piece - len(data))
    return bytes(out)


h = connect()
check(h.get_size() == size, f"size {h.get_size()} != {size}")
right = list(range(n))
wrong = right[1:] + right[:1]
nonzero = differ = 0
for off, length in ranges:
    got = h.pread(length, off)
    want = from_members(off, length, right)
    if got != want:
        i = first_difference(got, want)
        m, moff = layout(off + i, chunk, n)
        fail(f"volume byte {off + i} (range {off}+{length}): NBD reads "
             f"{got[i]:#04x}, member {m} ({members[m]}) holds {want[i]:#04x} "
             f"at offset {moff}")
    nonzero += got.count(0) != length
    differ += from_members(off, length, wrong) != got
h.shutdown()
log(f"{len(ranges)} ranges (seed {env_int('SEED')}): NBD == members; "
    f"{nonzero} hold data, {differ} differ with the members rotated")
# fio wrote random data everywhere we looked but the volume's last 4K
check(nonzero >= len(ranges) - 1, "ranges read as zeroes: nothing written?")
check(differ >= len(ranges) - 1, "the members in the wrong order match too")
EOF
    log "layout checked in $(since "$t0")"
}

log "volume: 4 members, stripe $CHUNK, $((SIZE / M)) MiB; fio randseed" \
    "$FIO_SEED, layout seed $SEED"
for fs in tmpfs disk; do
    if [[ $fs == tmpfs ]]; then dir=$shm; else dir=$disk; fi
    t=$(fstype "$dir")
    case $fs/$t in
    tmpfs/tmpfs | tmpfs/ramfs) ;;
    tmpfs/*) die "precondition: $dir is $t, not tmpfs" ;;
    disk/tmpfs | disk/ramfs) die "precondition: $dir is $t, not a disk" ;;
    esac
    for be in $BACKENDS; do
        t1=$(clock)
        log "$SERVER, backend $be, members on $t ($dir)"
        members=("$dir/m0" "$dir/m1" "$dir/m2" "$dir/m3")
        rm -f "${members[@]}"
        start_server --backend "$be" --async-min 1M --stripe-size $CHUNK \
            --size $SIZE "${members[@]}"
        run_fio "$be/$fs: write + verify" "$NJOBS"
        check_layout
        stop_server

        # Reopen the volume from the member files: all still there.  On
        # tmpfs, bionbd's reads from 64K up went out with sendfile so far;
        # now they are copied through buffers.
        start_server --backend "$be" --async-min 1M --sendfile-min 0 \
            --stripe-size $CHUNK "${members[@]}"
        mtimes=$(stat -c %y "${members[@]}")
        run_fio "$be/$fs: verify only, reopened" 0 \
            --verify_only --section=mixed --section=big
        [[ $(stat -c %y "${members[@]}") == "$mtimes" ]] ||
            die "$be/$fs: verify_only changed the members"
        check_layout
        stop_server
        rm -f "${members[@]}"
        log "$be/$fs: ok in $(since "$t1")"
    done
done
log "ok"
