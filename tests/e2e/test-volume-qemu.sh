#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: qemu as the client.  qemu-io write/read patterns across
# chunk and member boundaries, sector-aligned and not (qemu does its own
# read-modify-write down to the advertised 512-byte minimum), write -z and
# discard, once writeback with explicit flushes (-t none) and once with
# qemu-io's default writethrough (FUA on every write); every pattern is then
# checked on the member files with the layout rule.  qemu-img convert of a
# part-sparse image into the volume (over older data, so zero areas really
# have to be zeroed) and qemu-img compare back, a compare that must notice
# one changed byte, and a convert out of the volume to qcow2.
source "$(dirname "$0")/functions.sh"

requires_server
requires qemu-io
requires qemu-img
make_tmpdir

K=1024
CHUNK=$((64 * K))
N=4
members=("$tmp/m0" "$tmp/m1" "$tmp/m2" "$tmp/m3")
start_server --stripe-size 64K --size 8M "${members[@]}"

# check_vol OFF LEN BYTE: the volume range holds BYTE, read from the
# member files piece by piece by the layout rule.
check_vol() {
    local off=$1 end=$(($1 + $2)) byte=$3 m moff piece
    while ((off < end)); do
        read -r m moff < <(stripe_member "$off" $CHUNK $N)
        piece=$((CHUNK - off % CHUNK))
        ((piece <= end - off)) || piece=$((end - off))
        check_bytes "${members[m]}" "$moff" "$piece" "$byte"
        off=$((off + piece))
    done
}

# qio CACHE CMD...: run qemu-io commands against the volume.
qio() {
    local cache=$1 out=$tmp/qemu-io.out
    shift
    local args=()
    for c in "$@"; do args+=(-c "$c"); done
    if ! qemu-io -f raw ${cache:+-t "$cache"} "${args[@]}" "$NBD_URI" \
        >"$out" 2>&1 || grep -qiE 'fail|error' "$out"; then
        sed 's/^/    /' "$out" >&2
        die "qemu-io ${*}"
    fi
}

# offset length byte: aligned, then unaligned, each across a chunk edge;
# the last row of each table crosses from member 3 to member 0.
aligned=(
    "$((CHUNK - 4 * K)) $((8 * K)) 0x11"
    "$((5 * CHUNK)) $((2 * CHUNK)) 0x12"
    "$((N * CHUNK - 512)) 1024 0x13"
)
unaligned=(
    "$((9 * CHUNK - 536)) 1000 0x21"
    "$((10 * CHUNK - 1)) 2 0x22"
    "$((11 * CHUNK + 7)) $((3 * CHUNK - 14)) 0x23"
    "$((2 * N * CHUNK - 100)) 300 0x24"
)

run_patterns() { # CACHE BASE
    local cache=$1 base=$2 w=() r=() p off len byte
    for p in "${aligned[@]}" "${unaligned[@]}"; do
        read -r off len byte <<<"$p"
        w+=("write -P $byte $((base + off)) $len")
        r+=("read -P $byte $((base + off)) $len")
    done
    # zeroes and discards over earlier data, unaligned zero too
    w+=("write -P 0x31 $((base + 20 * CHUNK)) $((4 * CHUNK))"
        "write -z $((base + 20 * CHUNK + 100)) $((CHUNK + 5000))"
        "discard $((base + 22 * CHUNK)) $((2 * CHUNK))")
    r+=("read -P 0x31 $((base + 20 * CHUNK)) 100"
        "read -P 0 $((base + 20 * CHUNK + 100)) $((CHUNK + 5000))"
        "read -P 0x31 $((base + 21 * CHUNK + 5100)) $((CHUNK - 5100))")
    [[ $cache != none ]] || w+=(flush)
    qio "$cache" "${w[@]}"
    qio "$cache" "${r[@]}"
    for p in "${aligned[@]}" "${unaligned[@]}"; do
        read -r off len byte <<<"$p"
        check_vol $((base + off)) "$len" "$byte"
    done
    check_vol $((base + 20 * CHUNK)) 100 0x31
    check_vol $((base + 20 * CHUNK + 100)) $((CHUNK + 5000)) 0
    check_vol $((base + 21 * CHUNK + 5100)) $((CHUNK - 5100)) 0x31
}

log "qemu-io, writeback + flush"
run_patterns none 0
log "qemu-io, writethrough (FUA)"
run_patterns "" $((32 * CHUNK))

log "qemu-img convert into the volume, compare back"
vsize=$(qemu-img info -f raw --output=json "$NBD_URI" |
    sed -n 's/.*"virtual-size": *\([0-9]*\).*/\1/p')
[[ $vsize -eq $((8 << 20)) ]] || die "qemu-img info: virtual size $vsize"
src=$tmp/src.raw
truncate -s 8M "$src"
for off in 0 3 5 6 7; do
    dd if=/dev/urandom of="$src" bs=1M seek="$off" count=1 conv=notrunc status=none
done
dd if=/dev/urandom of="$src" bs=512 seek=$((2 * 2048 + 129)) count=3 conv=notrunc status=none
qemu-io -f raw -c 'write -P 0x5a 0 8M' "$NBD_URI" >/dev/null # old data
expect_ok qemu-img convert -n -f raw -O raw "$src" "$NBD_URI"
expect_ok qemu-img compare -q -f raw -F raw "$src" "$NBD_URI"
cmp "$src" <(nbdpy -c "
import nbd, sys
h = nbd.NBD(); h.connect_uri('$NBD_URI')
sys.stdout.buffer.write(h.pread(8 << 20, 0))") || die "volume != source after convert"
# the members, by the layout rule, hold the source
for ((k = 0; k < 128; k++)); do
    read -r m moff < <(stripe_member $((k * CHUNK)) $CHUNK $N)
    cmp -s <(dd if="$src" bs=64K skip=$k count=1 status=none) \
        <(dd if="${members[m]}" iflag=skip_bytes skip="$moff" bs=64K count=1 status=none) ||
        die "chunk $k: member $m at $moff differs from the source"
done

# compare must be able to fail
qemu-io -f raw -c 'write -P 0xa5 4194816 512' "$NBD_URI" >/dev/null
rc=0
qemu-img compare -q -f raw -F raw "$src" "$NBD_URI" || rc=$?
[[ $rc -eq 1 ]] || die "qemu-img compare did not notice a changed sector (exit $rc)"

log "qemu-img convert out of the volume to qcow2"
expect_ok qemu-img convert -f raw -O qcow2 "$NBD_URI" "$tmp/out.qcow2"
expect_ok qemu-img compare -q -f raw -F qcow2 "$NBD_URI" "$tmp/out.qcow2"
stop_server
log "ok"
