#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: a stripe member that is an nbdfuse file over
# "nbdkit --filter=error memory": EIO (and ENOSPC) on writes, reads, trims
# and zeroes is switched on and off between two bios by creating and
# removing the filter's control files.  The failing bio reports the error,
# its pieces on the other members complete, the next bio works (even while
# the fault is still on, if it misses the member), and data written before
# is intact.  Members are opened with O_DIRECT (--direct): through the page
# cache a FUSE write error would not reach the engine.  Both backends.
source "$(dirname "$0")/functions.sh"

requires_root
requires_bioio
requires findmnt
requires nbdfuse --version
requires nbdkit --filter=error memory --version
requires_fuse
make_tmpdir

K=1024
CHUNK=$((64 * K))
MEMBER_SIZE=4M

# Control files: while one exists, the filter fails that kind of request.
ctl_w=$tmp/ctl-pwrite ctl_r=$tmp/ctl-pread ctl_t=$tmp/ctl-trim
ctl_z=$tmp/ctl-zero ctl_nospc=$tmp/ctl-enospc

# Member 1 of the EIO volume.
mount_nbdfuse "$tmp/fuse-eio" \
    nbdkit -s --exit-with-parent --filter=error memory $MEMBER_SIZE \
    error-pwrite=EIO error-pwrite-rate=1 error-pwrite-file="$ctl_w" \
    error-pread=EIO error-pread-rate=1 error-pread-file="$ctl_r" \
    error-trim=EIO error-trim-rate=1 error-trim-file="$ctl_t" \
    error-zero=EIO error-zero-rate=1 error-zero-file="$ctl_z"
fe=$tmp/fuse-eio/nbd

# Member 1 of the ENOSPC volume.
mount_nbdfuse "$tmp/fuse-enospc" \
    nbdkit -s --exit-with-parent --filter=error memory $MEMBER_SIZE \
    error-pwrite=ENOSPC error-pwrite-rate=1 error-pwrite-file="$ctl_nospc"
fs=$tmp/fuse-enospc/nbd

# Sanity: the fault switch works below the engine at all.
touch "$ctl_w"
if dd if=/dev/zero of="$fe" bs=4K count=1 oflag=direct conv=notrunc status=none 2>/dev/null; then
    die "precondition: the error filter did not fail a direct write"
fi
rm -f "$ctl_w"

# run_bioio DIR BACKEND MEMBER... -- CMDS: run, expect exit status 1 (some
# commands are meant to fail); output in DIR/out, DIR/err, and the command
# errors (without the per-member lines) in DIR/err.cmds.
run_bioio() {
    local d=$1 be=$2 rc=0
    shift 2
    bioio --backend "$be" --direct --size 12M --stripe-size 64K "$@" \
        >"$d/out" 2>"$d/err" || rc=$?
    [[ $rc -eq 1 ]] || { cat "$d/err" >&2; die "$be: bioio exit status $rc, expected 1"; }
    grep -v '^bioio: member ' "$d/err" >"$d/err.cmds" || :
}

# Layout: 3 members, 64K chunks; chunk k -> member k%3 at (k/3)*64K.  The
# 768K range [0, 768K) is chunks 0..11: four on each member.  Chunk 1 is
# member 1 (the FUSE file) at 0, chunk 0 member 0 at 0, chunk 2 member 2 at 0.
scenario_eio() {
    local be=$1 d=$tmp/$1/eio m0 m2
    mkdir -p "$d"
    m0=$d/m0 m2=$d/m2
    rm -f "$ctl_w" "$ctl_r" "$ctl_t" "$ctl_z"

    run_bioio "$d" "$be" "$m0" "$fe" "$m2" -- \
        write 0 768K 0xa1 \
        sh "touch '$ctl_w'" \
        write 0 768K 0xb2 \
        write 128K 64K 0xc3 \
        check 128K 64K 0xc3 \
        writef 64K 64K 0xee \
        sh "rm '$ctl_w'" \
        check 64K 64K 0xa1 \
        check 0 64K 0xb2 \
        write 64K 64K 0xd4 \
        check 64K 64K 0xd4 \
        sh "touch '$ctl_r'" \
        read 0 768K \
        check 0 64K 0xb2 \
        check 192K 64K 0xb2 \
        sh "rm '$ctl_r'" \
        check 64K 64K 0xd4 \
        check 256K 64K 0xa1 \
        sh "touch '$ctl_t'" \
        trim 384K 192K \
        sh "rm '$ctl_t'" \
        check 384K 64K 0 \
        check 448K 64K 0xa1 \
        check 512K 64K 0 \
        trim 448K 64K \
        check 448K 64K 0 \
        sh "touch '$ctl_w' '$ctl_t' '$ctl_z'" \
        zero 576K 192K nounmap \
        sh "rm '$ctl_w' '$ctl_t' '$ctl_z'" \
        check 576K 64K 0 \
        check 640K 64K 0xa1 \
        check 704K 64K 0 \
        flush

    cat >"$d/out.expected" <<EOF
write 0 768K: ok
sh touch '$ctl_w': ok
write 128K 64K: ok
check 128K 64K: ok
sh rm '$ctl_w': ok
check 64K 64K: ok
check 0 64K: ok
write 64K 64K: ok
check 64K 64K: ok
sh touch '$ctl_r': ok
check 0 64K: ok
check 192K 64K: ok
sh rm '$ctl_r': ok
check 64K 64K: ok
check 256K 64K: ok
sh touch '$ctl_t': ok
sh rm '$ctl_t': ok
check 384K 64K: ok
check 448K 64K: ok
check 512K 64K: ok
trim 448K 64K: ok
check 448K 64K: ok
sh touch '$ctl_w' '$ctl_t' '$ctl_z': ok
sh rm '$ctl_w' '$ctl_t' '$ctl_z': ok
check 576K 64K: ok
check 640K 64K: ok
check 704K 64K: ok
flush: ok
EOF
    expect_same_file "$d/out.expected" "$d/out" "$be eio"
    cat >"$d/err.expected" <<EOF
bioio: write 0 768K: Input/output error
bioio: writef 64K 64K: Input/output error
bioio: read 0 768K: Input/output error
bioio: trim 384K 192K: Input/output error
bioio: zero 576K 192K: Input/output error
EOF
    expect_same_file "$d/err.expected" "$d/err.cmds" "$be eio errors"
    # The engine names the failing member, and only that one.
    expect_grep "^bioio: member $fe: write at offset [0-9]+ length [0-9]+: Input/output error$" "$d/err"
    expect_grep "^bioio: member $fe: read at offset [0-9]+ length [0-9]+: Input/output error$" "$d/err"
    expect_no_grep "^bioio: member ($m0|$m2):" "$d/err"

    # The member files, read directly.  Chunks 0,3,6,9 -> m0; 2,5,8,11 -> m2.
    check_bytes "$m0" 0 64K 0xb2 # the failed write's pieces landed
    check_bytes "$m0" 64K 64K 0xb2
    check_bytes "$m2" 0 64K 0xc3 # written while the fault was on
    check_bytes "$m2" 64K 64K 0xb2
    check_bytes "$m0" 128K 64K 0 # trimmed while member 1 failed
    check_bytes "$m2" 128K 64K 0
    check_bytes "$m0" 192K 64K 0 # zeroed while member 1 failed
    check_bytes "$m2" 192K 64K 0
    check_bytes "$fe" 0 64K 0xd4
    check_bytes "$fe" 64K 64K 0xa1 # the failed write did not reach it
    check_bytes "$fe" 128K 64K 0   # trimmed after the fault went away
    check_bytes "$fe" 192K 64K 0xa1
}

# The same with ENOSPC from below (a thin-provisioned server running out).
scenario_enospc() {
    local be=$1 d=$tmp/$1/enospc m0 m2
    mkdir -p "$d"
    m0=$d/m0 m2=$d/m2
    rm -f "$ctl_nospc"

    run_bioio "$d" "$be" "$m0" "$fs" "$m2" -- \
        write 0 768K 0xa1 \
        sh "touch '$ctl_nospc'" \
        write 0 768K 0xb2 \
        write 384K 64K 0xc3 \
        check 0 64K 0xb2 \
        check 128K 64K 0xb2 \
        check 384K 64K 0xc3 \
        sh "rm '$ctl_nospc'" \
        check 64K 64K 0xa1 \
        write 64K 64K 0xd4 \
        check 64K 64K 0xd4 \
        flush

    cat >"$d/out.expected" <<EOF
write 0 768K: ok
sh touch '$ctl_nospc': ok
write 384K 64K: ok
check 0 64K: ok
check 128K 64K: ok
check 384K 64K: ok
sh rm '$ctl_nospc': ok
check 64K 64K: ok
write 64K 64K: ok
check 64K 64K: ok
flush: ok
EOF
    expect_same_file "$d/out.expected" "$d/out" "$be enospc"
    echo "bioio: write 0 768K: No space left on device" >"$d/err.expected"
    expect_same_file "$d/err.expected" "$d/err.cmds" "$be enospc errors"
    expect_grep "^bioio: member $fs: write at offset [0-9]+ length [0-9]+: No space left on device$" "$d/err"
    expect_no_grep "^bioio: member ($m0|$m2):" "$d/err"

    local k member moff
    for ((k = 0; k < 12; k++)); do
        read -r member moff < <(stripe_member $((k * CHUNK)) $CHUNK 3)
        case $k in
        1) check_bytes "$fs" "$moff" $CHUNK 0xd4 ;;
        6) check_bytes "$m0" "$moff" $CHUNK 0xc3 ;;
        *)
            case $member in
            0) check_bytes "$m0" "$moff" $CHUNK 0xb2 ;;
            1) check_bytes "$fs" "$moff" $CHUNK 0xa1 ;; # never overwritten
            2) check_bytes "$m2" "$moff" $CHUNK 0xb2 ;;
            esac
            ;;
        esac
    done
}

for be in $BACKENDS; do
    log "backend $be"
    scenario_eio "$be"
    scenario_enospc "$be"
done
log "ok"
