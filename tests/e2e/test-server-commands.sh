#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: every NBD command and flag against bionbd with libnbd
# (server-commands.py), on a 3-member volume with 64K stripes: WRITE
# (+FUA, up to the 32 MiB maximum), FLUSH, READ with structured replies
# (data and hole chunks; DF gives one chunk), TRIM (the members get holes),
# WRITE_ZEROES (+NO_HOLE allocates, FAST_ZERO, FUA), CACHE, BLOCK_STATUS
# (+REQ_ONE) against the members' SEEK_DATA map; with libnbd's strict mode
# off: out-of-range (EINVAL for read/trim/cache/block status, ENOSPC for
# write/zero), undefined flags, oversized reads (EINVAL, DF
# EOVERFLOW), zero-length requests and block status without a context,
# each followed by a read on the same connection; requests in flight;
# multi-conn (write, flush and read on three connections).  Then the same
# members with -r: EPERM for write/trim/zero and nothing changes.  Both
# backends.
source "$(dirname "$0")/functions.sh"

requires_nbdpy
make_tmpdir

SIZE=48M CHUNK=64K

for be in $BACKENDS; do
    log "backend $be"
    d=$tmp/$be
    mkdir -p "$d"
    members=("$d/m0" "$d/m1" "$d/m2")
    # One backend sleeps between requests, the other busy-polls (the
    # default): both paths must answer everything the same way.
    poll=()
    [[ $be == threads ]] && poll=(--poll-us 0)
    start_bionbd -t 2 --backend "$be" "${poll[@]}" --stripe-size $CHUNK \
        --size $SIZE "${members[@]}"
    MEMBERS="${members[*]}" CHUNK=$(to_bytes $CHUNK) SIZE=$(to_bytes $SIZE) \
        NBD_URI=$NBD_URI SEED=${SEED:-$RANDOM} \
        nbdpy "$SRC_DIR/tests/e2e/server-commands.py" rw ||
        die "$be: server-commands.py rw failed"
    stop_bionbd

    log "backend $be, read-only"
    start_bionbd -r -t 2 --backend "$be" --stripe-size $CHUNK "${members[@]}"
    MEMBERS="${members[*]}" CHUNK=$(to_bytes $CHUNK) SIZE=$(to_bytes $SIZE) \
        NBD_URI=$NBD_URI \
        nbdpy "$SRC_DIR/tests/e2e/server-commands.py" ro ||
        die "$be: server-commands.py ro failed"
    stop_bionbd
done
log "PASS"
