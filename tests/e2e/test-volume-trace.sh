#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: the bio trace (--trace FILE, the plugin's trace=FILE) and
# bioctl trace.  fio (random 4 KiB reads and writes with flushes) and
# nbdsh (a 192 KiB write across four chunks, a trim) run against a
# 4-member raid0: the trace's replies equal fio's request and byte totals
# per op exactly, every request has its queued and reply events, every
# 4 KiB request went to the member and member offset the stripe layout
# names, the 192 KiB write was split into the four pieces the layout makes
# (X, D and C each), a flush reached every member, and nothing was lost.
# Filters select what they say: by member (only its events), op, range
# and latency.  A trace cut short is read up to the cut with a message
# (exit 0), a damaged one up to the damage (exit 1), a file that is not a
# trace is refused (exit 2).  With the smallest buffer under load, events
# are lost and counted: what the file holds plus what it says it lost is
# exactly what the requests made, and the server reports the loss.
# bionbd only: a bad --trace path or --trace-buffer is a one-line error;
# reads sent with sendfile from tmpfs members are traced per member too,
# their member latency (D2C) from their own D event.
source "$(dirname "$0")/functions.sh"

requires_server
requires_nbdpy
requires_fio_nbd
[[ -x $BIOCTL ]] || die "$BIOCTL not built"
make_tmpdir
cd "$tmp"

members=(m0 m1 m2 m3)

# --- a traced run: fio and nbdsh ---------------------------------------------
fresh_members
start_server --stripe-size 64K --trace "$tmp/t.bin" "${members[@]}"
fio --name=mix --ioengine=nbd --uri="$NBD_URI" --bs=4k --size=60M \
    --rw=randrw --rwmixread=60 --iodepth=4 --number_ios=1500 --fsync=10 \
    --output-format=json --output=mix.json >/dev/null 2>&1 || die "fio mix"
NBD_URI=$NBD_URI nbdpy - <<'PY' || die "nbdsh requests"
from nbd_e2e import connect
h = connect()
h.pwrite(b"w" * (192 << 10), 32 << 10)   # 32K..224K: four pieces
h.trim(4 << 20, 8 << 20)
PY
stop_server
[[ -s t.bin ]] || die "no trace file"
"$BIOCTL" trace --json t.bin >sum.json || die "bioctl trace --json failed"
"$BIOCTL" trace t.bin >all.txt || die "bioctl trace failed"

py - <<'PY' || die "the trace does not match the clients"
import json, sys
mix = json.load(open("mix.json"))["jobs"][0]
s = json.load(open("sum.json"))

def same(what, got, want):
    if got != want:
        sys.exit(f"{what}: the trace says {got}, the clients {want}")

ops = s["ops"]
same("complete", s["complete"], True)
same("lost", s["lost"], 0)
same("end record's lost", s["end_lost"], 0)
same("events written", s["end_written"], s["events"])
same("reads", ops["read"]["count"], mix["read"]["total_ios"])
same("read bytes", ops["read"]["bytes"], mix["read"]["io_bytes"])
same("writes", ops["write"]["count"], mix["write"]["total_ios"] + 1)
same("write bytes", ops["write"]["bytes"], mix["write"]["io_bytes"] + (192 << 10))
same("flushes", ops["flush"]["count"], mix["sync"]["total_ios"])
same("trims", ops["trim"]["count"], 1)
same("trim bytes", ops["trim"]["bytes"], 4 << 20)
nreq = (mix["read"]["total_ios"] + mix["write"]["total_ios"] +
        mix["sync"]["total_ios"] + 2)
same("requests", s["requests"], nreq)
same("queued events", s["actions"]["Q"], nreq)
same("reply events", s["actions"]["R"], nreq)
same("unanswered", s["unanswered"], 0)
same("member issues vs completions", s["actions"]["D"], s["actions"]["C"])
same("members", sorted(m["name"].rsplit("/", 1)[-1] for m in s["members"]),
     ["m0", "m1", "m2", "m3"])
for m in s["members"]:
    same(f"{m['name']} flushes", m["ops"]["flush"]["count"],
         mix["sync"]["total_ios"])
for st in ("Q2D", "D2C", "C2R", "Q2R"):
    if not s["stages"][st]["count"]:
        sys.exit(f"no {st} latencies")
PY

# The layout, from the event lines: request -> (Q, [D...], [X...]).
py - <<'PY' || die "the trace's member events break the stripe layout"
import sys
reqs = {}
for line in open("all.txt"):
    f = line.split()
    if len(f) < 7 or f[3] not in "QXDCR" or len(f[3]) != 1:
        continue
    seq, act, op, rng = f[2], f[3], f[4], f[5]
    off, size = map(int, rng.split("+"))
    r = reqs.setdefault(seq, {"Q": [], "X": [], "D": [], "C": [], "R": []})
    who = int(f[6][1:]) if act in "XDC" else None
    r[act].append((op, off, size, who))
chunk, n = 65536, 4
checked = split = flushes = 0
for seq, r in reqs.items():
    if len(r["Q"]) != 1 or len(r["R"]) != 1:
        sys.exit(f"request {seq}: {len(r['Q'])} Q, {len(r['R'])} R events")
    op, off, size, _ = r["Q"][0]
    if op in "RW" and size == 4096:
        if len(r["D"]) != 1 or r["X"]:
            sys.exit(f"request {seq}: a 4K request in {len(r['D'])} pieces")
        _, moff, msize, m = r["D"][0]
        want = ((off // chunk) % n, (off // chunk // n) * chunk + off % chunk)
        if (m, moff) != want or msize != 4096:
            sys.exit(f"request {seq} at {off}: member {m} offset {moff}, "
                     f"layout says {want}")
        checked += 1
    elif op == "W" and size == 192 << 10:
        want = [(32768, 32768, 0), (65536, 65536, 1), (131072, 65536, 2),
                (196608, 32768, 3)]
        got = sorted((o, s, m) for _, o, s, m in r["X"])
        if got != want:
            sys.exit(f"192K write split as {got}, want {want}")
        dwant = sorted([(0, 32768, 3), (0, 65536, 1), (0, 65536, 2),
                        (32768, 32768, 0)])
        for act in "DC":
            got = sorted((o, s, m) for _, o, s, m in r[act])
            if got != dwant:
                sys.exit(f"192K write: {act} events {got}, want {dwant}")
        split += 1
    elif op == "F":
        if sorted(m for *_, m in r["D"]) != [0, 1, 2, 3]:
            sys.exit(f"flush {seq} reached members {r['D']}")
        flushes += 1
if checked < 1000 or split != 1 or not flushes:
    sys.exit(f"checked {checked} 4K requests, {split} split, {flushes} flushes")
print(f"layout: {checked} 4K requests, the split write, {flushes} flushes",
      file=sys.stderr)
PY

# --- filters ------------------------------------------------------------------
"$BIOCTL" trace -m 1 -o write -a D t.bin >f-m1.txt || die "bioctl trace -m 1"
py - <<'PY' || die "the member and op filters"
import sys
lines = [l.split() for l in open("f-m1.txt") if l[:1] == " " and "." in l.split()[0]]
ds = [f for f in lines if len(f) > 6 and f[3] == "D"]
if not ds or len(ds) != len(lines):
    sys.exit(f"{len(ds)} D lines of {len(lines)}")
bad = [f for f in ds if f[4] != "W" or f[6] != "m1"]
if bad:
    sys.exit(f"not member 1's writes: {bad[:3]}")
# All of member 1's write issues, from the unfiltered listing.
want = sum(1 for l in open("all.txt")
           if len(l.split()) > 6 and l.split()[3] == "D" and
           l.split()[4] == "W" and l.split()[6] == "m1")
if len(ds) != want:
    sys.exit(f"{len(ds)} filtered, {want} in the listing")
PY
"$BIOCTL" trace -m m2 -o read --json t.bin >f-m2.json || die "-m PATH"
py - <<'PY' || die "the member filter by path"
import json, sys
s = json.load(open("f-m2.json"))
(m,) = [m for m in json.load(open("sum.json"))["members"] if m["name"].rsplit("/", 1)[-1] == "m2"]
if s["actions"]["D"] != m["ops"]["read"]["count"] or not s["actions"]["D"]:
    sys.exit(f"-m m2 -o read: {s['actions']['D']} issues, member 2 had "
             f"{m['ops']['read']['count']} reads")
if set(s["ops"]) != {"read"}:
    sys.exit(f"ops {list(s['ops'])}")
PY
"$BIOCTL" trace -r 0-1M -a Q t.bin >f-range.txt || die "bioctl trace -r"
awk '$4 == "Q" { split($6, a, "+"); if (a[1] >= 1048576) bad = 1; n++ }
     END { exit bad || !n }' f-range.txt || die "range filter: requests outside 0-1M"
p50=$(py -c 'import json; print(json.load(open("sum.json"))["stages"]["Q2R"]["p50_us"])')
"$BIOCTL" trace --min-lat "$p50" -a R t.bin >f-lat.txt || die "bioctl trace --min-lat"
py - "$p50" <<'PY' || die "latency filter"
import json, sys
p50 = float(sys.argv[1])
lat = [float(l.split()[-1].rstrip("us")) for l in open("f-lat.txt")
       if len(l.split()) > 3 and l.split()[3] == "R"]
total = json.load(open("sum.json"))["requests"]
if not lat or min(lat) < p50 - 0.1 or not (total * 0.3 < len(lat) < total * 0.7 + 2):
    sys.exit(f"{len(lat)} of {total} replies at least {p50} us, the slowest "
             f"{min(lat) if lat else None}")
PY

# --- damaged files ------------------------------------------------------------
size=$(stat -c %s t.bin)
head -c $((size - 30)) t.bin >cut.bin
"$BIOCTL" trace -s cut.bin >cut.out 2>cut.err || die "a truncated trace: exit $?"
grep -q "truncated at byte" cut.err || die "no truncation message: $(cat cut.err)"
grep -q "events, 0 lost; truncated" cut.out || die "summary does not say truncated"
py - <<'PY' || die "damaging the trace"
import struct
d = bytearray(open("t.bin", "rb").read())
off = 64
for _ in range(300):              # into the events, a record boundary
    off += struct.unpack_from("<H", d, off + 2)[0]
d[off] = 0xEE
open("bad.bin", "wb").write(d)
d = bytearray(open("t.bin", "rb").read())
d[off + 2:off + 4] = struct.pack("<H", 13)
open("badlen.bin", "wb").write(d)
PY
for f in bad.bin badlen.bin; do
    rc=0
    "$BIOCTL" trace -s "$f" >bad.out 2>bad.err || rc=$?
    [[ $rc -eq 1 ]] || die "$f: exit $rc, want 1"
    grep -q "corrupt at byte" bad.err || die "$f: no message: $(cat bad.err)"
    grep -q "showing the [0-9]* events before it" bad.err || die "$f: $(cat bad.err)"
done
rc=0
"$BIOCTL" trace m0 2>notrace.err >/dev/null || rc=$?
[[ $rc -eq 2 ]] && grep -q "not a bionbd trace" notrace.err ||
    die "a member file as a trace: exit $rc, $(cat notrace.err)"

# --- losses under load --------------------------------------------------------
fresh_members
start_server --stripe-size 64K --trace "$tmp/small.bin" --trace-buffer 4K \
    "${members[@]}"
fio --name=load --ioengine=nbd --uri="$NBD_URI" --bs=4k --size=60M \
    --rw=randread --iodepth=32 --numjobs=2 --number_ios=6000 --group_reporting \
    --output-format=json --output=load.json >/dev/null 2>&1 || die "fio load"
stop_server
"$BIOCTL" trace --json small.bin >small.json || die "bioctl trace small.bin"
py - <<'PY' || die "lost events not counted"
import json, sys
job = json.load(open("load.json"))["jobs"][0]
s = json.load(open("small.json"))
reads = job["read"]["total_ios"]
syncs = job["sync"]["total_ios"]
# A 4K read: Q, D, C, R.  A flush: Q, R and X, D, C on each of 4 members.
want = 4 * reads + 14 * syncs
print(f"{s['events']} events + {s['lost']} lost, {want} made", file=sys.stderr)
if s["lost"] == 0:
    sys.exit("nothing lost with a 4K buffer under load")
if s["events"] + s["lost"] != want:
    sys.exit(f"{s['events']} + {s['lost']} != {want}")
if s["end_lost"] != s["lost"] or s["end_written"] != s["events"]:
    sys.exit(f"end record {s['end_written']}/{s['end_lost']}")
PY
grep -q "events lost\|lost (the buffers" "$SERVER_LOG" ||
    die "the server did not report the loss: $(cat "$SERVER_LOG")"

# --- bionbd: bad settings, sendfile reads -------------------------------------
if [[ $SERVER == bionbd ]]; then
    server_refuses_once --trace /nonexistent/dir/t.bin "${members[@]}"
    grep -q "/nonexistent/dir/t.bin" "$SERVER_ERR" || die "$(cat "$SERVER_ERR")"
    server_refuses_once --trace t2.bin --trace-buffer 1K "${members[@]}"
    grep -q "trace-buffer" "$SERVER_ERR" || die "$(cat "$SERVER_ERR")"

    if [[ $(stat -f -c %T /dev/shm 2>/dev/null) == tmpfs ]]; then
        shm=$(mktemp -d /dev/shm/bionbd-trace.XXXXXX)
        on_exit "rm -rf '$shm'"
        for m in "${members[@]}"; do truncate -s 4M "$shm/$m"; done
        start_server --stripe-size 64K --sendfile-min 64K --trace "$tmp/sf.bin" \
            "${members[@]/#/$shm/}"
        NBD_URI=$NBD_URI nbdpy - <<'PY' || die "sendfile reads"
from nbd_e2e import connect
h = connect()
h.pwrite(b"s" * (256 << 10), 0)
for i in range(4):
    h.pread(256 << 10, 0)
PY
        stop_server
        "$BIOCTL" trace -o read -a DC sf.bin >sf.txt || die "bioctl trace sf.bin"
        n=$(grep -c " sendfile" sf.txt || :)
        # 4 reads x 4 members x (D, C); a member may go in two sendfiles.
        [[ $n -ge 32 ]] || die "$n sendfile events: $(head sf.txt)"
        awk '$4 == "D" && $7 !~ /^m[0-3]$/ { exit 1 }' sf.txt ||
            die "sendfile events without their member"
        # A sendfile's C event times it from its D event: well under the
        # run's few seconds (it was once the clock's whole reading, hours).
        "$BIOCTL" trace -s --json sf.bin | py -c '
import json, sys
d2c = json.load(sys.stdin)["stages"]["D2C"]
sys.exit(0 if d2c["max_us"] < 10e6 else "D2C max %.0f us" % d2c["max_us"])
' || die "sendfile reads: member latencies wrong"
    else
        echo "trace: no tmpfs at /dev/shm; sendfile reads not traced here" >&2
    fi
fi
log ok
