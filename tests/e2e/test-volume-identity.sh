#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: two members that are one storage under two names are
# refused, inside one volume and across the exports of one conf file.  The
# names: a hard link, a symlink, /dev/fd/N; where loop devices can be made
# (root, losetup): a loop device over a member file (also once the file's
# name is gone and sysfs shows "(deleted)"), a second device node of one
# loop device (mknod), loop devices over overlapping bytes of one file,
# and a whole disk with one of its partitions (a loop device over an image
# with an MBR).  Each refusal exits non-zero before serving, prints one
# line naming both paths (and both exports across exports), and leaves the
# member directory exactly as it was, even when another member would have
# needed creating.  What is not one storage still serves: loop devices
# over disjoint bytes of one file, two partitions side by side, and
# read-only exports sharing a member.
source "$(dirname "$0")/functions.sh"

requires_server
requires nbdinfo
make_tmpdir

d=$tmp/members
mkdir -p "$d"
truncate -s 1M "$d/m0" "$d/m1"
printf 'precious' | dd of="$d/m0" conv=notrunc status=none
ln "$d/m0" "$d/hardlink"
ln -s m0 "$d/symlink"

snapshot() {
    (cd "$d" && find . -printf '%p %y %s %T@ %l\n' | sort &&
        find . -type f -exec md5sum {} + | sort)
}

# refuse A B OPTIONS...: the server refuses with exactly one line that
# names both paths A and B (and any more fixed strings in $also), and the
# member directory is untouched.
also=()
refuse() {
    local a=$1 b=$2 s
    shift 2
    snapshot >"$tmp/before"
    server_refuses_once "$@"
    for s in "$a" "$b" "${also[@]}"; do
        grep -q -F -- "$s" "$SERVER_ERR" || {
            sed 's/^/    /' "$SERVER_ERR" >&2
            die "the message does not name '$s': $*"
        }
    done
    snapshot >"$tmp/after"
    diff -u "$tmp/before" "$tmp/after" >&2 ||
        die "the member directory changed: $*"
    log "refused: $(cat "$SERVER_ERR")"
}

# serves OPTIONS...: the server starts and serves (then stops).
serves() {
    start_server "$@"
    nbdinfo --size "$NBD_URI" >/dev/null || die "nbdinfo failed: $*"
    stop_server
    log "served: $*"
}

# ---- one volume: aliases that path and inode comparison see

refuse "$d/m0" "$d/hardlink" "$d/m0" "$d/m1" "$d/hardlink"
refuse "$d/symlink" "$d/m0" "$d/symlink" "$d/m0"
exec {fd}<"$d/m0"
refuse "/dev/fd/$fd" "$d/m0" "/dev/fd/$fd" "$d/m1" "$d/m0"
# A size makes new members; the refusal comes before any is created.
refuse "$d/hardlink" "$d/m0" --size 4M "$d/new0" "$d/m0" "$d/hardlink"

# ---- across the exports of one conf file
conf=$tmp/two.conf
two_exports() { # MEMBER-OF-A MEMBER-OF-B [EXTRA LINES FOR B]
    printf '[export a]\nfile = %s\n[export b]\nfile = %s\nfile = %s\n%s' \
        "$1" "$d/m1" "$2" "${3:-}" >"$conf"
}
also=("[export a]" "[export b]")
two_exports "$d/m0" "$d/m0"
refuse "$d/m0" "$d/m0" --conf "$conf"
two_exports "$d/m0" "$d/hardlink"
refuse "$d/m0" "$d/hardlink" --conf "$conf"
two_exports "$d/symlink" "$d/m0"
refuse "$d/symlink" "$d/m0" --conf "$conf"
# Export a alone would create two members; export b shares one with it.
printf '[export a]\nfile = %s\nfile = %s\nsize = 1M\n[export b]\nfile = %s\nsize = 1M\n' \
    "$d/new0" "$d/new1" "$d/new1" >"$conf"
refuse "$d/new1" "$d/new1" --conf "$conf"
# Read-only on one side is not enough: the other still writes.
two_exports "$d/m0" "$d/hardlink" "read-only = true"
refuse "$d/m0" "$d/hardlink" --conf "$conf"
also=()
# Nothing can change under two read-only exports: sharing is allowed.
printf '[export a]\nfile = %s\nread-only = true\n[export b]\nfile = %s\nread-only = true\n' \
    "$d/m0" "$d/hardlink" >"$conf"
serves --conf "$conf"

# ---- loop devices, device nodes and partitions (root and losetup)
can_loop=
if [[ $(id -u) -ne 0 ]]; then
    log "SKIP loop device cases: not root"
elif ! command -v losetup >/dev/null; then
    log "SKIP loop device cases: losetup not found"
elif ! [[ -e /dev/loop-control ]] || ! loop_setup loop "$d/m0"; then
    log "SKIP loop device cases: no loop device could be set up"
else
    can_loop=1
fi

if [[ -n $can_loop ]]; then
    # A loop device over a member file, either order, and across exports.
    refuse "$loop" "$d/m0" "$d/m0" "$loop"
    refuse "$d/hardlink" "$loop" "$loop" "$d/m1" "$d/hardlink"
    also=("[export a]" "[export b]")
    two_exports "$d/m0" "$loop"
    refuse "$d/m0" "$loop" --conf "$conf"
    also=()

    # A second node of the same device (same major:minor).
    read -r maj min < <(stat -L -c '%t %T' "$loop")
    mknod "$tmp/node" b $((16#$maj)) $((16#$min))
    refuse "$loop" "$tmp/node" "$loop" "$tmp/node"

    # The backing file's name is gone (sysfs: "... (deleted)") but its
    # inode lives on under another name.
    truncate -s 1M "$d/gone"
    ln "$d/gone" "$d/still-here"
    loop_setup gone_loop "$d/gone"
    rm "$d/gone"
    grep -q '(deleted)' "/sys/block/${gone_loop#/dev/}/loop/backing_file" ||
        log "note: sysfs does not show the backing file as deleted"
    refuse "$gone_loop" "$d/still-here" "$d/still-here" "$gone_loop"

    # Loop devices over parts of one file: overlapping ones are one
    # storage, disjoint ones are two members.
    truncate -s 3M "$d/big"
    loop_setup part_a --offset 0 --sizelimit 2M "$d/big"
    loop_setup part_b --offset 1M --sizelimit 1M "$d/big"
    loop_setup part_c --offset 2M "$d/big"
    refuse "$part_a" "$part_b" "$part_a" "$part_b"
    refuse "$part_c" "$d/big" "$d/big" "$part_c"
    serves "$part_a" "$part_c"

    # A disk and its partition: an image with an MBR holding two
    # partitions side by side (sectors 2048+2048 and 4096+2048).
    # le32 N: N as 4 little-endian bytes, as \xNN escapes for printf %b.
    le32() { printf '%08x' "$1" | sed -E 's/(..)(..)(..)(..)/\\x\4\\x\3\\x\2\\x\1/'; }
    # mbr_entry START SECTORS: a Linux (0x83) partition table entry.
    mbr_entry() {
        printf '\x00\x00\x00\x00\x83\x00\x00\x00%b%b' "$(le32 "$1")" "$(le32 "$2")"
    }
    truncate -s 4M "$d/disk.img"
    { mbr_entry 2048 2048; mbr_entry 4096 2048; } |
        dd of="$d/disk.img" bs=1 seek=446 conv=notrunc status=none
    printf '\x55\xaa' | dd of="$d/disk.img" bs=1 seek=510 conv=notrunc status=none
    loop_setup disk --partscan "$d/disk.img"
    sys=/sys/block/${disk#/dev/}
    # Some kernels leave the scan to user space (no MSDOS_PARTITION).
    if [[ ! -e $sys/${disk#/dev/}p1 ]] && command -v partx >/dev/null; then
        partx -a "$disk" 2>/dev/null || :
    fi
    if [[ ! -e $sys/${disk#/dev/}p1/dev || ! -e $sys/${disk#/dev/}p2/dev ]]; then
        log "SKIP partition cases: $disk shows no partitions (no partition scan, no partx)"
    else
        for p in 1 2; do
            node=$tmp/part$p
            IFS=: read -r maj min <"$sys/${disk#/dev/}p$p/dev"
            mknod "$node" b "$maj" "$min"
        done
        refuse "$disk" "$tmp/part1" "$disk" "$tmp/part1"
        refuse "$tmp/part2" "$disk" "$tmp/part2" "$d/m1" "$disk"
        refuse "$d/disk.img" "$tmp/part2" "$d/disk.img" "$tmp/part2"
        also=("[export a]" "[export b]")
        two_exports "$disk" "$tmp/part1"
        refuse "$disk" "$tmp/part1" --conf "$conf"
        also=()
        serves "$tmp/part1" "$tmp/part2"
        log "note: overlapping partitions are not tested (the kernel refuses to add them)"
    fi
fi
log "ok"
