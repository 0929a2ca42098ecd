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
# backends, members on disk.  Then members on tmpfs, where reads from 64K
# up are sent with sendfile (and, with --sendfile-min 0, copied): the same
# commands, simple replies too, and written zeroes read back as data (sendfile
# does not look at them) or as a hole (a copy does), which shows the path;
# a member truncated under the server reads as zeroes past its new end.
source "$(dirname "$0")/functions.sh"

requires_nbdpy
make_tmpdir

SIZE=48M CHUNK=64K

# run_commands WHAT READ_PATH MEMBER...: server-commands.py rw on the
# running server, whose reads of 64K and more must take READ_PATH (copy, or
# sendfile from tmpfs members).
run_commands() {
    local what=$1 path=$2
    shift 2
    MEMBERS="$*" CHUNK=$(to_bytes $CHUNK) SIZE=$(to_bytes $SIZE) \
        NBD_URI=$NBD_URI SEED=${SEED:-$RANDOM} READ_PATH=$path \
        nbdpy "$SRC_DIR/tests/e2e/server-commands.py" rw ||
        die "$what: server-commands.py rw failed"
}

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
    # Reads are copied from disk members (a tmpfs $TMPDIR would send them).
    case $(fstype "$d") in
    tmpfs | ramfs) path=sendfile ;;
    *) path=copy ;;
    esac
    run_commands "$be" $path "${members[@]}"
    stop_bionbd

    log "backend $be, read-only"
    start_bionbd -r -t 2 --backend "$be" --stripe-size $CHUNK "${members[@]}"
    MEMBERS="${members[*]}" CHUNK=$(to_bytes $CHUNK) SIZE=$(to_bytes $SIZE) \
        NBD_URI=$NBD_URI \
        nbdpy "$SRC_DIR/tests/e2e/server-commands.py" ro ||
        die "$be: server-commands.py ro failed"
    stop_bionbd
done

# Members on tmpfs: reads from 64K up leave with sendfile, unless
# --sendfile-min 0 says copy.
make_shmdir $((3 * 16 + 8))M
for sf in 64K 0; do
    path=sendfile
    [[ $sf == 0 ]] && path=copy
    members=("$shm/m0" "$shm/m1" "$shm/m2")
    rm -f "${members[@]}"
    log "members on tmpfs, --sendfile-min $sf"
    start_bionbd -t 2 --sendfile-min $sf --stripe-size $CHUNK --size $SIZE \
        "${members[@]}"
    run_commands "tmpfs, --sendfile-min $sf" $path "${members[@]}"
    # A member cut short behind the server's back reads as zeroes past its
    # new end, on both paths, and the connection carries on.
    truncate -s 8M "${members[1]}"
    CHUNK=$(to_bytes $CHUNK) NBD_URI=$NBD_URI nbdpy - <<'EOF' ||
from nbd_e2e import check, connect, env_int
chunk = env_int("CHUNK")
h = connect()
# Chunk 3k + 1 lies on member 1 at k * chunk: past 8M from k = 128 on.
off = (3 * 200 + 1) * chunk
check(h.pread(2 * chunk, off)[:chunk] == bytes(chunk),
      "member 1 past its new end: not zeroes")
check(len(h.pread(4096, 0)) == 4096, "connection gone")
h.shutdown()
EOF
        die "tmpfs, --sendfile-min $sf: short member"
    stop_bionbd
done
log "PASS"
