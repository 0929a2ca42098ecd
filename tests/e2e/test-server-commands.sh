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
# Members on tmpfs with every block allocated: no hole lookup (lseek) for a
# sendfile read until a trim or zero punches one, whose range then reads
# back as a hole chunk.  A sendfile read whose data goes away while it is
# sent (raid1, both members cut short): its data chunk is not the last,
# zeros complete it, an error chunk at the offset ends the reply (its message
# says what the error means, as an ERROR chunk's does), and the
# connection carries on.
source "$(dirname "$0")/functions.sh"

requires_nbdpy
requires strace
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

# Members on tmpfs with no hole at all: a sendfile read looks for none (no
# lseek, strace shows), until the server trims or zeroes: then the holes it
# made read back as hole chunks again.
log "dense members on tmpfs"
rm -f "$shm"/m*
members=("$shm/d0" "$shm/d1" "$shm/d2")
for m in "${members[@]}"; do
    head -c 8M /dev/urandom >"$m"
done
start_bionbd -t 1 --stripe-size $CHUNK "${members[@]}"
strace -f -qq -p "$SERVER_PID" -e trace=lseek,fallocate,sendfile \
    -o "$tmp/dense.strace" 2>"$tmp/strace.err" &
strace_pid=$!
on_exit "kill $strace_pid 2>/dev/null"
# Attached once a traced call shows: poke the server until one does.
for ((n = 0; n < 100; n++)); do
    NBD_URI=$NBD_URI nbdpy -c \
        'from nbd_e2e import connect; connect().pread(1 << 20, 0)'
    [[ -s $tmp/dense.strace ]] && break
    sleep 0.1
done
CHUNK=$(to_bytes $CHUNK) NBD_URI=$NBD_URI nbdpy - <<'EOF' ||
import nbd
from nbd_e2e import check, connect, env_int
chunk = env_int("CHUNK")
h = connect()

def kinds(length, off):
    got = []
    h.pread_structured(length, off,
                       lambda buf, o, st, err: got.append((o - off, st)))
    return sorted(got)

check(kinds(1 << 20, 0) == [(0, nbd.READ_DATA)], "dense: not one data chunk")
h.trim(2 * chunk, 4 * chunk)
ch = kinds(8 * chunk, 0)
check((4 * chunk, nbd.READ_HOLE) in ch, f"trimmed range: no hole chunk: {ch}")
check(h.pread(2 * chunk, 4 * chunk) == bytes(2 * chunk), "trim: not zeroes")
# Chunk 15 is on member 0, which the trim left dense: the zero must undo that.
h.zero(chunk, 15 * chunk)
ch = kinds(3 * chunk, 14 * chunk)
check((chunk, nbd.READ_HOLE) in ch, f"zeroed range: no hole chunk: {ch}")
h.shutdown()
EOF
    die "dense members: hole chunks after trim and zero"
# Detached before the server exits: LeakSanitizer cannot run under ptrace.
kill "$strace_pid" 2>/dev/null || :
wait "$strace_pid" 2>/dev/null || :
stop_bionbd
# Up to the trim, sendfile and no lseek; after it, lseek again.
awk '/fallocate\(/ { t = 1 } /lseek\(/ { if (t) after++; else before++ }
     /sendfile(64)?\(/ && !t { sf++ }
     END { printf "%d %d %d\n", sf, before, after }' "$tmp/dense.strace" \
    >"$tmp/counts"
read -r sf before after <"$tmp/counts"
((sf > 0)) || die "dense members: no sendfile traced ($(head -c 300 "$tmp/dense.strace"))"
((before == 0)) || die "dense members: $before hole lookups (lseek) before the trim"
((after > 0)) || die "dense members: no hole lookup after the trim"

# The spec: a chunk that may still fail must not be marked the last.  The
# reply of a 32 MiB sendfile read fills the socket while the client waits;
# then the members lose the data and the client reads on.
log "sendfile read that fails while it is sent"
rm -f "$shm"/*
members=("$shm/r0" "$shm/r1")
start_bionbd -t 1 --level raid1 --size 40M "${members[@]}"
NBD_SOCK=$NBD_SOCK MEMBERS="${members[*]}" nbdpy - <<'EOF' ||
import os, select, struct, time
import nbd_raw as raw
from nbd_raw import check

N, B = 32 << 20, 4 << 20
data = raw.pattern(7, B)
c = raw.connect_go(os.environ["NBD_SOCK"])
for i in range(N // B):
    check(c.cmd(raw.CMD_WRITE, i * B, B, payload=data) == 0, "write")
c.request(raw.CMD_READ, 77, 0, N)
check(select.select([c.sock], [], [], 10)[0], "no reply within 10 s")
time.sleep(0.3)  # the server fills the socket and waits for room
for m in os.environ["MEMBERS"].split():
    os.truncate(m, 1 << 20)
chunks = c.full_reply(77)
kinds = [(r.type, r.flags) for r in chunks]
check(len(chunks) == 2, f"chunks {kinds}: expected data, then an error")
d, e = chunks
check(d.type == raw.REPLY_TYPE_OFFSET_DATA and not d.done,
      f"first chunk {kinds}: a data chunk marked the last")
check(e.type == raw.REPLY_TYPE_ERROR_OFFSET and e.done and
      e.error == raw.EIO, f"last chunk {kinds}, error {e.error}")
check(e.message == "input/output error",
      f"error chunk's message {e.message!r}: not what EIO means")
where = struct.unpack(">Q", e.payload[-8:])[0]
check(struct.unpack(">Q", d.payload[:8])[0] == 0 and len(d.payload) == N + 8,
      "data chunk: not the whole read")
check(0 < where < N, f"error offset {where} outside the read")
got = d.payload[8:]
check(got[:where] == (data * (N // B))[:where],
      f"data before the error offset {where}: wrong")
check(got[where:] == bytes(N - where), "after the error offset: not zeros")
# The connection is in step: the next request gets its answer.
c.request(raw.CMD_FLUSH, 78)
c.full_reply(78)
c.close()
EOF
    die "sendfile read that fails while it is sent"
grep -q "no copy left to send.*the client gets an error" "$SERVER_LOG" ||
    die "sendfile failure: not logged"
stop_bionbd
log "PASS"
