#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: plugging (target.h) on members that take the inline path
# (tmpfs): the pieces of one striped bio that lie back to back on a member
# go down as one preadv/pwritev2 per member, counted with strace on the
# member files, and the data is still where the layout rule says (checked
# on the member files with dd) and reads back whole, also with the buffers
# cut into odd segments, with FUA, and for a bio that does not start on a
# chunk boundary.  On a file system where pieces are not merged (the io_uring
# path) the same commands still give the same data.
source "$(dirname "$0")/functions.sh"

requires_bioio
requires strace
make_tmpdir

# Members on tmpfs: /dev/shm when it is one, else a small mount of ours.
if [[ $(stat -f -c %T /dev/shm 2>/dev/null) == tmpfs ]]; then
    shm=$(mktemp -d /dev/shm/test-engine-plug.XXXXXX)
    on_exit "rm -rf '$shm'"
else
    requires_mount
    mount_tmpfs "$tmp/shm" 64M
    shm=$tmp/shm
fi
m=("$shm/m0" "$shm/m1" "$shm/m2" "$shm/m3")

# calls LOG: member reads and writes in an strace -y log, as "reads writes".
calls() {
    local r w
    r=$(grep -cE "^[0-9]+ +preadv2?\\(.*<$shm/m[0-3]>" "$1" || true)
    w=$(grep -cE "^[0-9]+ +pwritev2?\\(.*<$shm/m[0-3]>" "$1" || true)
    echo "$r $w"
}

# traced LOG ARGS...: bioio ARGS under strace, its results in LOG.out.
traced() {
    local log=$1
    shift
    strace -f -y -qq -e trace=preadv,preadv2,pwritev,pwritev2 -o "$log" \
        "$BIOIO" "$@" >"$log.out" || {
        cat "$log.out" >&2
        die "bioio $* failed"
    }
}

# 1 MiB at offset 0 over 4 x 64K: 16 pieces, 4 back to back per member.
log "1 MiB write + read: one call per member"
traced "$tmp/a" --size 4M --stripe-size 64K "${m[@]}" -- \
    write 0 1M 0x5a check 0 1M 0x5a
[[ $(calls "$tmp/a") == "4 4" ]] ||
    die "expected 4 preadv and 4 pwritev2 on members, got $(calls "$tmp/a")"
for i in 0 1 2 3; do
    check_bytes "${m[$i]}" 0 256K 0x5a
    check_bytes "${m[$i]}" 256K 64K 0
done

log "FUA write, buffers in 3 segments"
traced "$tmp/b" --size 4M --stripe-size 64K --segments 3 "${m[@]}" -- \
    writef 1M 1M 0x33 check 1M 1M 0x33 check 0 1M 0x5a
[[ $(calls "$tmp/b") == "8 4" ]] ||
    die "expected 8 preadv and 4 pwritev2 on members, got $(calls "$tmp/b")"
grep -qE "pwritev2\\(.*RWF_DSYNC" "$tmp/b" ||
    die "the merged FUA write was not RWF_DSYNC"
for i in 0 1 2 3; do
    check_bytes "${m[$i]}" 256K 256K 0x33
done

# Starts 4K before a chunk boundary: pieces of 4K, 64K x 15, 60K.  Member 0
# gets the 4K head, three 64K chunks and the 60K tail, back to back.
log "unaligned start: still one call per member, data by the layout rule"
traced "$tmp/c" --size 4M --stripe-size 64K "${m[@]}" -- \
    write 60K 1M 0x77 check 60K 1M 0x77 check 0 60K 0x5a
[[ $(calls "$tmp/c") == "5 4" ]] ||
    die "expected 5 preadv and 4 pwritev2 on members, got $(calls "$tmp/c")"
for off in $((60 * 1024)) $((64 * 1024)) $((500 * 1024)) \
    $((1024 * 1024 + 60 * 1024 - 512)); do
    read -r mem moff <<<"$(stripe_member "$off" 65536 4)"
    check_bytes "${m[$mem]}" "$moff" 512 0x77
done
# cksum of the whole volume through the engine equals that of the flat
# image built from the members by the layout rule.
bioio --size 4M --stripe-size 64K "${m[@]}" -- read 0 4M >"$tmp/sum" ||
    die "read back failed"
for ((k = 0; k < 64; k++)); do
    dd if="${m[$((k % 4))]}" bs=64K skip=$((k / 4)) count=1 status=none
done >"$tmp/flat"
# bioio prints "read OFF LEN: cksum SUM BYTES", cksum(1) "SUM BYTES".
[[ $(sed 's/.*: cksum //' "$tmp/sum") == "$(cksum <"$tmp/flat")" ]] ||
    die "volume read $(cat "$tmp/sum") differs from the members' layout"

# Copies of the members on $tmp (not tmpfs on most machines: the io_uring
# path, nothing merged) read the same.
log "copies of the members off tmpfs read the same"
cp "${m[@]}" "$tmp/"
bioio --size 4M --stripe-size 64K "$tmp/m0" "$tmp/m1" "$tmp/m2" "$tmp/m3" \
    -- check 60K 1M 0x77 check 0 60K 0x5a >/dev/null ||
    die "the io_uring path reads different data"
log "ok"
