#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: fio --ioengine=nbd, 4 jobs = 4 connections at queue depth 16
# (multi-conn), random writes of 512 bytes to 128K on a 4-member volume,
# each job on its own 16 MiB region (so the regions cross every member),
# verified with crc32c after writing; then the server is restarted (the
# volume reopened from the member files) and the same workload is verified
# again without writing (verify_only) over fresh connections; and, so that
# the check is known to bite, one changed sector on a member must make that
# verification fail.
source "$(dirname "$0")/functions.sh"

requires_server
requires_fio_nbd
make_tmpdir

members="$tmp/m0 $tmp/m1 $tmp/m2 $tmp/m3"

# fio_job OUT EXTRA...: the one workload both passes use; fio's status.
fio_job() {
    local out=$1
    shift
    fio --name=bio --ioengine=nbd --uri="$NBD_URI" \
        --rw=randwrite --bsrange=512-128k --iodepth=16 \
        --numjobs=4 --size=16M --offset_increment=16M \
        --verify=crc32c --verify_fatal=1 --randseed=4242 \
        --group_reporting "$@" >"$out" 2>&1
}

run_fio() {
    local out=$tmp/fio.$_server_seq.out
    if ! fio_job "$out" "$@"; then
        sed 's/^/    /' "$out" >&2
        die "fio $*"
    fi
    # the verification phase read data back
    grep -q 'READ: bw=' "$out" ||
        { sed 's/^/    /' "$out" >&2; die "fio verified nothing"; }
}

# shellcheck disable=SC2086
start_server --stripe-size 64K --size 64M $members
log "write + verify"
run_fio
stop_server

# shellcheck disable=SC2086
start_server --stripe-size 64K $members
log "verify only, after reopening the volume"
run_fio --verify_only

log "verify only, after changing one member sector"
printf 'garbage!' | dd of="$tmp/m2" bs=1 seek=$((1 << 20)) conv=notrunc status=none
if fio_job "$tmp/fio.bad.out" --verify_only; then
    die "fio verify did not notice a changed member sector"
fi
expect_grep 'verify|bad' "$tmp/fio.bad.out"
stop_server
log "ok"
