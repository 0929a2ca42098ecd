#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: fault and delay rules (--fault/--delay, plugin fault=/delay=,
# config fault =/delay =) seen by real clients on a 4-member raid0.
# qemu-io gets EIO on exactly the configured volume range and op (writes
# just outside it and reads inside it work), on exactly the chunks a
# member range covers, and ENOSPC for write-zeroes and discards (not
# writes) in a range; fio with continue_on_error counts a 10 % read rate
# within a binomial tolerance; a 20 ms read delay shows in fio's latency;
# a trigger file turns a rule on and off under one nbdsh connection; a
# torn write leaves exactly its first 3 sectors on the member file; a
# stalled write completes only once its file is removed; a rule without
# seed= announces the seed it drew, and restarting with that seed replays
# the same faults; a fault on one copy of a raid1 marks that member faulty
# and writes go on.  Bad rules are one-line errors naming them (exit 1),
# from flags and from a config file (with its line); so is an empty rule
# (--fault '', fault =), which would otherwise fail every I/O.
source "$(dirname "$0")/functions.sh"

requires_server
requires_nbdpy
requires qemu-io
requires_fio_nbd
make_tmpdir
cd "$tmp"

K=1024 MiB=$((1024 * 1024)) CHUNK=$((64 * 1024)) N=4
members=(m0 m1 m2 m3)

# qio_expect OUTCOME CMD: one qemu-io command; OUTCOME ok or eio.
qio_expect() {
    local want=$1 out=$tmp/qemu-io.out
    qemu-io -f raw -c "$2" "$NBD_URI" >"$out" 2>&1 || :
    case $want in
    ok) ! grep -qiE 'fail|error' "$out" ||
        { sed 's/^/    /' "$out" >&2; die "qemu-io '$2': expected success"; } ;;
    eio) grep -q 'Input/output error' "$out" ||
        { sed 's/^/    /' "$out" >&2; die "qemu-io '$2': expected EIO"; } ;;
    enospc) grep -q 'No space left on device' "$out" ||
        { sed 's/^/    /' "$out" >&2; die "qemu-io '$2': expected ENOSPC"; } ;;
    esac
}

# --- exact ranges and ops, seen by qemu-io ---------------------------------
fresh_members
# Member 2's first two chunks are volume chunks 2 and 6 (chunk k on member
# k mod 4 at (k div 4) x chunk).
start_server --stripe-size 64K \
    --fault "op=write error=EIO range=1M-2M" \
    --fault "member=2 op=read member-range=0-128K" \
    --fault "op=trim,zero error=ENOSPC range=4M-5M" "${members[@]}"
qio_expect ok "write -P 0x11 0 1M"
qio_expect ok "write -P 0x12 $((MiB - 4 * K)) 4K"
qio_expect eio "write -P 0x13 $MiB 4K"
qio_expect eio "write -P 0x14 $((2 * MiB - 512)) 512"
qio_expect eio "write -P 0x14 $((2 * MiB - 512)) 1K"
qio_expect ok "write -P 0x15 $((2 * MiB)) 64K"
qio_expect ok "read 0 $CHUNK"
qio_expect ok "read -P 0x12 $((MiB - 4 * K)) 4K"
qio_expect ok "read $((MiB + 64 * K)) 64K"
qio_expect eio "read $((2 * CHUNK)) 4K"
qio_expect eio "read $((6 * CHUNK + 60 * K)) 4K"
qio_expect ok "read $((10 * CHUNK)) 4K"
qio_expect ok "read $((3 * CHUNK)) $((3 * CHUNK))"
qio_expect eio "read $((3 * CHUNK)) $((4 * CHUNK))"
qio_expect enospc "write -z $((4 * MiB)) 64K"
qio_expect enospc "discard $((5 * MiB - 4 * K)) 8K"
qio_expect ok "write -z $((5 * MiB)) 64K"
qio_expect ok "discard $((6 * MiB)) 64K"
qio_expect ok "write -P 0x16 $((4 * MiB)) 64K"
# Nothing of the failed writes, everything of the others, on the members.
check_bytes m0 0 $CHUNK 0x11
check_bytes m3 $((MiB / 4 - 4 * K)) $((4 * K)) 0x12
check_bytes m0 $((MiB / 4)) 4096 0x00
check_bytes m0 $((MiB / 2)) $CHUNK 0x15
stop_server

# --- a rate, counted by fio -------------------------------------------------
fresh_members
start_server --stripe-size 64K --fault "op=read error=EIO rate=10% seed=11" \
    "${members[@]}"
fio --name=rate --ioengine=nbd --uri="$NBD_URI" --rw=randread --bs=4k \
    --iodepth=8 --number_ios=4000 --size=60M --continue_on_error=all \
    --output-format=json --output=rate.json >/dev/null 2>&1 ||
    die "fio with continue_on_error failed"
errs=$(/usr/bin/python3 -c 'import json,sys; j=json.load(open("rate.json"))["jobs"][0]; print(j["total_err"])')
ios=$(/usr/bin/python3 -c 'import json,sys; j=json.load(open("rate.json"))["jobs"][0]; print(j["read"]["total_ios"])')
log "rate=10%: $errs errors in $ios reads"
# fio counts the failed reads in its total too.  Within 4 standard
# deviations of 10 % (about 19 for 4000 reads).
/usr/bin/python3 -c "import sys; e, n = $errs, $ios; sys.exit(abs(e - n / 10) > 4 * (n * 0.09) ** 0.5)" ||
    die "rate=10%: $errs errors in $ios reads"
stop_server

# --- a delay, in fio's latency ----------------------------------------------
fresh_members
start_server --stripe-size 64K --delay "op=read ms=20" "${members[@]}"
fio --name=delay --ioengine=nbd --uri="$NBD_URI" --rw=randread --bs=4k \
    --iodepth=1 --number_ios=25 --size=60M --output-format=json \
    --output=delay.json >/dev/null 2>&1 || die "fio (delay) failed"
# The exact minimum of the total latency: fio's percentiles are bucket
# values, and its completion latency starts when fio stamps the request
# issued, which can be after libnbd sent it (a loaded CI machine showed a
# read 1.3 ms "faster" than its delay that way).
lat=$(/usr/bin/python3 -c 'import json; j=json.load(open("delay.json"))["jobs"][0]["read"]; print(int(j["lat_ns"]["min"]))')
log "delay ms=20: fastest read ${lat} ns"
((lat >= 20000000)) || die "delay ms=20: a read completed in $lat ns"
stop_server

# --- trigger file, torn write, stall: one nbdsh connection each -------------
fresh_members
start_server --stripe-size 64K \
    --fault "op=read error=EIO file=$tmp/trigger" \
    --fault "member=0 op=write torn=3" \
    --delay "member=1 op=write stall file=$tmp/stall" "${members[@]}"
NBD_URI=$NBD_URI TMP=$tmp nbdpy - <<'PY' || die "trigger, torn, stall"
import errno, os, time
import nbd
from nbd_e2e import connect, check, log, server_error

tmp = os.environ["TMP"]
h = connect()
h.pread(4096, 0)
open(f"{tmp}/trigger", "w").close()
server_error(errno.EIO, "read with the trigger file", h.pread, 4096, 0)
server_error(errno.EIO, "another read", h.pread, 4096, 1 << 20)
os.unlink(f"{tmp}/trigger")
h.pread(4096, 0)

# Chunk 0 is member 0's: 3 sectors of this 64 KiB write reach it.
server_error(errno.EIO, "torn write", h.pwrite, b"\xab" * 65536, 0)
with open(f"{tmp}/m0", "rb") as f:
    got = f.read(65536)
check(got[:1536] == b"\xab" * 1536, "torn write: the first 3 sectors missing")
check(got[1536:] == bytes(65536 - 1536), "torn write: more than 3 sectors written")

# Chunk 1 is member 1's: held while the stall file exists.
open(f"{tmp}/stall", "w").close()
buf = nbd.Buffer.from_bytearray(bytearray(b"\xcd" * 4096))
cookie = h.aio_pwrite(buf, 65536)
# Replies are only read while polling: poll for half a second.
end = time.monotonic() + 0.5
while time.monotonic() < end:
    h.poll(50)
check(not h.aio_command_completed(cookie), "stalled write completed with the file present")
os.unlink(f"{tmp}/stall")
while not h.aio_command_completed(cookie):
    h.poll(-1)
check(h.pread(4096, 65536) == b"\xcd" * 4096, "stalled write not written")
PY
stop_server

# --- a drawn seed replays ---------------------------------------------------
# pattern FILE: which of 300 reads failed, one line of 0s and 1s.
pattern() {
    NBD_URI=$NBD_URI nbdpy - "$1" <<'PY' || die "pattern"
import sys
import nbd
from nbd_e2e import connect
h = connect()
bits = ""
for i in range(300):
    try:
        h.pread(4096, (i % 100) * 4096)
        bits += "0"
    except nbd.Error:
        bits += "1"
open(sys.argv[1], "w").write(bits + "\n")
PY
}
fresh_members
# The plugin logs it as nbdkit debug output: shown with -v.
start_server -v --stripe-size 64K --fault "op=read rate=50%" "${members[@]}"
pattern drawn
seed=$(sed -n 's/.*fault rule 1: op=read rate=50% seed=\([0-9]*\).*/\1/p' "$SERVER_LOG" | head -1)
[[ -n $seed ]] || die "no seed announced in the log"
stop_server
start_server --stripe-size 64K --fault "op=read rate=50% seed=$seed" "${members[@]}"
pattern replay
stop_server
cmp -s drawn replay || die "seed=$seed did not replay: $(cat drawn) vs $(cat replay)"
ones=$(tr -cd 1 <drawn | wc -c)
((ones > 90 && ones < 210)) || die "rate=50%: $ones of 300 failed"

# --- one copy of a mirror -----------------------------------------------------
rm -f r0 r1
start_server --level raid1 --size 16M --fault "member=1 op=write" r0 r1
NBD_URI=$NBD_URI nbdpy - <<'PY' || die "mirror with a failing member"
from nbd_e2e import connect, check
h = connect()
h.pwrite(b"\x5a" * 65536, 4 << 20)
h.flush()
check(h.pread(65536, 4 << 20) == b"\x5a" * 65536, "read back")
PY
grep -q 'marked faulty' "$SERVER_LOG" || die "member 1 not marked faulty"
stop_server
# Once faulty the member takes no more writes: the rule fired once, and
# says so in the singular.
if [[ $SERVER == bionbd ]]; then
    expect_grep "fault rule 1 \(member=1 op=write\): fired 1 time in [0-9]+ matching bios?$" "$SERVER_LOG"
fi

# --- bad rules ----------------------------------------------------------------
fresh_members
server_refuses_once --fault "op=rename" "${members[@]}"
grep -q 'op=rename' "$SERVER_ERR" || die "bad op not named: $(cat "$SERVER_ERR")"
server_refuses_once --fault "member=4" "${members[@]}"
grep -q 'member=4: member 4 does not exist' "$SERVER_ERR" ||
    die "member out of range not named: $(cat "$SERVER_ERR")"
server_refuses_once --delay "op=read" "${members[@]}"
grep -q 'ms=' "$SERVER_ERR" || die "delay without ms: $(cat "$SERVER_ERR")"
server_refuses_once --fault "rate=200%" "${members[@]}"
# An empty rule would fail (or delay) every I/O: an unset variable in
# --fault "$RULE" must not break the volume quietly.
if [[ $SERVER == bionbd ]]; then empty="^bionbd: --fault '': empty rule"; else empty="fault=: empty rule"; fi
server_refuses_line "$empty" --fault "" "${members[@]}"
server_refuses_line "(--fault ' '|fault= ): empty rule" --fault " " "${members[@]}"
server_refuses_line "(--delay ''|delay=): empty rule" --delay "" "${members[@]}"
cat >empty.conf <<EOF
[export scratch]
file = $tmp/m0
file = $tmp/m1
fault =
EOF
server_refuses_line 'empty.conf:4: \[export scratch\] fault=: empty rule' --conf empty.conf
cat >bad.conf <<EOF
[export scratch]
file = $tmp/m0
file = $tmp/m1
fault = op=write error=EWHAT
EOF
server_refuses_once --conf bad.conf
grep -q 'bad.conf:4: \[export scratch\] fault=op=write error=EWHAT: error=EWHAT' "$SERVER_ERR" ||
    die "config: $(cat "$SERVER_ERR")"
log "ok"
