#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: a stripe member on a 2 MiB tmpfs runs out of space under the
# engine (a real short write, then ENOSPC).  The bio whose piece hits the
# full member ends with ENOSPC, its pieces on the other members still land,
# and the next bios (reads, writes that miss the full member, and writes to
# it once space is freed) work.  Run on both backends.
source "$(dirname "$0")/functions.sh"

requires_root
requires_bioio
requires findmnt
make_tmpdir
requires_mount

K=1024
CHUNK=$((64 * K))

# Phase 1: the exact moment.  The tmpfs is filled so that member 0 has room
# for 96K: the second chunk it receives gets 32K in (a short write) and
# then ENOSPC, which the engine must report after requeueing the rest.
# With SEGMENTS=5 the data vectors are 40K+40K+40K+40K+32K, so the requeue
# after the short write starts inside a segment and crosses into the next.
phase_exact() {
    local be=$1 segs=$2 d=$tmp/$1/exact-$2
    local small=$d/small m0 m1 m2 filler avail
    mkdir -p "$d"
    mount_tmpfs "$small" 2M huge=never # exact page accounting
    m0=$small/m0 m1=$d/m1 m2=$d/m2 filler=$small/filler
    avail=$((2048 * K - 96 * K))
    dd if=/dev/zero of="$filler" bs=4K count=$((avail / (4 * K))) status=none
    [[ $(($(stat -f -c '%a * %S' "$small"))) -eq $((96 * K)) ]] ||
        die "precondition: tmpfs should have 96K free, has $(($(stat -f -c '%a * %S' "$small")))"

    # Layout (3 members, 64K chunks): chunk k -> member k%3 at (k/3)*64K.
    local rc=0
    bioio --backend "$be" --segments "$segs" --size 3M --stripe-size 64K \
        "$m0" "$m1" "$m2" -- \
        write 0 192K 0x11 \
        write 192K 192K 0x22 \
        sh "dd if='$m0' of='$d/short.bin' bs=32K skip=2 count=1 status=none" \
        check 0 192K 0x11 \
        check 256K 128K 0x22 \
        write 448K 128K 0x33 \
        write 384K 64K 0x44 \
        read 448K 128K \
        sh "rm -f '$filler'" \
        write 192K 64K 0x55 \
        check 192K 64K 0x55 \
        flush \
        >"$d/out" 2>"$d/err" || rc=$?
    [[ $rc -eq 1 ]] || { cat "$d/err" >&2; die "$be: bioio exit status $rc, expected 1"; }

    local sum
    sum=$(head -c $((128 * K)) /dev/zero | tr '\0' '\063' | cksum)
    cat >"$d/out.expected" <<EOF
write 0 192K: ok
sh dd if='$m0' of='$d/short.bin' bs=32K skip=2 count=1 status=none: ok
check 0 192K: ok
check 256K 128K: ok
write 448K 128K: ok
read 448K 128K: cksum $sum
sh rm -f '$filler': ok
write 192K 64K: ok
check 192K 64K: ok
flush: ok
EOF
    expect_same_file "$d/out.expected" "$d/out" "$be exact"
    grep -v '^bioio: member ' "$d/err" >"$d/err.cmds" || :
    cat >"$d/err.expected" <<EOF
bioio: write 192K 192K: No space left on device
bioio: write 384K 64K: No space left on device
EOF
    expect_same_file "$d/err.expected" "$d/err.cmds" "$be exact errors"
    # The engine names the failing member, and only that one.
    expect_grep "^bioio: member $m0: write at offset [0-9]+ length [0-9]+: No space left on device$" "$d/err"
    expect_no_grep "^bioio: member ($m1|$m2):" "$d/err"

    # Precondition: the failed piece really was a short write first.
    check_bytes "$d/short.bin" 0 32K 0x22

    # The member files, read directly.
    check_bytes "$m0" 0 64K 0x11
    check_bytes "$m1" 0 64K 0x11
    check_bytes "$m2" 0 64K 0x11
    check_bytes "$m1" 64K 64K 0x22 # pieces of the failed bio
    check_bytes "$m2" 64K 64K 0x22
    check_bytes "$m1" 128K 64K 0x33
    check_bytes "$m2" 128K 64K 0x33
    check_bytes "$m0" 64K 64K 0x55 # written once space was back
}

# Phase 2: 1 MiB bios until the tmpfs member fills.  Every bio that touches
# it after that fails with ENOSPC; every piece on the other members lands,
# whether its bio failed or not.
phase_fill() {
    local be=$1 d=$tmp/$1/fill
    local small=$d/small m0 m1 m2 nbios=10 i args=()
    mkdir -p "$d"
    mount_tmpfs "$small" 2M huge=never # exact page accounting
    m0=$small/m0 m1=$d/m1 m2=$d/m2

    for ((i = 0; i < nbios; i++)); do
        args+=(write "${i}M" 1M $((0x10 + i)))
    done
    # Chunk 97 (6M + 64K) is on member 1; chunk 98 on member 2.
    args+=(check 0 1M 0x10 write 6208K 128K 0x77 check 6208K 128K 0x77 flush)

    local rc=0
    bioio --backend "$be" --size 24M --stripe-size 64K "$m0" "$m1" "$m2" -- \
        "${args[@]}" >"$d/out" 2>"$d/err" || rc=$?
    [[ $rc -eq 1 ]] || { cat "$d/err" >&2; die "$be: bioio exit status $rc, expected 1"; }

    # Successes form a prefix, ENOSPC failures the rest (member 0 holds 2M:
    # 32 chunks, i.e. up to volume offset 6M, so 6 bios fit).
    local first_fail=-1
    for ((i = 0; i < nbios; i++)); do
        if grep -qx "write ${i}M 1M: ok" "$d/out"; then
            [[ $first_fail -lt 0 ]] || die "$be: write ${i}M succeeded after an ENOSPC"
        else
            grep -qx "bioio: write ${i}M 1M: No space left on device" "$d/err" ||
                { cat "$d/err" >&2; die "$be: write ${i}M 1M neither ok nor ENOSPC"; }
            [[ $first_fail -ge 0 ]] || first_fail=$i
        fi
    done
    [[ $first_fail -ge 5 && $first_fail -le 6 ]] ||
        die "$be: first ENOSPC at bio $first_fail, expected 5 or 6 (2M tmpfs)"
    log "$be: bios 0..$((first_fail - 1)) ok, $first_fail..$((nbios - 1)) ENOSPC"
    expect_grep '^check 0 1M: ok$' "$d/out"
    expect_grep '^write 6208K 128K: ok$' "$d/out"
    expect_grep '^check 6208K 128K: ok$' "$d/out"
    expect_grep '^flush: ok$' "$d/out"
    expect_no_grep "^bioio: member ($m1|$m2):" "$d/err"
    [[ $(grep -vc '^bioio: member ' "$d/err") -eq $((nbios - first_fail)) ]] ||
        { cat "$d/err" >&2; die "$be: unexpected errors"; }

    # Every piece on members 1 and 2, failed bios included.
    local k member moff byte
    for ((k = 0; k < nbios * 16; k++)); do
        read -r member moff < <(stripe_member $((k * CHUNK)) $CHUNK 3)
        byte=$((0x10 + k / 16))
        if ((k == 97 || k == 98)); then
            byte=0x77
        fi
        case $member in
        0)
            # Member 0's pieces of failed bios: nothing to expect.
            if ((k / 16 < first_fail)); then
                check_bytes "$m0" "$moff" $CHUNK "$byte"
            fi
            ;;
        1) check_bytes "$m1" "$moff" $CHUNK "$byte" ;;
        2) check_bytes "$m2" "$moff" $CHUNK "$byte" ;;
        esac
    done
}

for be in $BACKENDS; do
    log "backend $be"
    phase_exact "$be" 1
    phase_exact "$be" 5
    phase_fill "$be"
done
log "ok"
