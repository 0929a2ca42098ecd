#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: statistics agree with the clients' own counts, exactly.
# fio (random reads and writes with flushes, then trims) and nbdsh (write
# zeroes, cache, block status, and reads past the end, which bionbd counts
# as EINVAL and nbdkit refuses without asking the plugin) run
# against a 4-member raid0 with --stats FILE (plugin: stats=FILE): at exit
# the file's export has fio's request and byte totals per op and nbdsh's
# counts, the members' 4 KiB pieces add up to the export's, every member
# saw every flush, and nothing is left in flight.  A read fault at 20 %
# (seed given): the export's and the members' EIO counts equal fio's error
# count.  bionbd only: SIGUSR1 logs a snapshot with the same counts; the
# control socket (PIDFILE.ctl, mode 0600) answers bioctl stat, whose table
# has them too; open connections are listed with their own counts and a
# closed one no longer; four control readers that never read a document
# larger than the socket holds (901 connections listed) delay neither a new
# client nor bioctl stat; the --stats-interval file is there before exit; a
# corrupt answer is refused with a clear message.  statistics=false
# (--no-statistics) counts nothing, and an export without statistics is
# left out of the document beside one with them.  A --stats path in a
# directory that is not there is refused at start, in one line.
source "$(dirname "$0")/functions.sh"

requires_server
requires_nbdpy
requires_fio_nbd
[[ -x $BIOCTL ]] || die "$BIOCTL not built"
make_tmpdir
cd "$tmp"

members=(m0 m1 m2 m3)

# fio_json NAME ARGS...: run fio against the server, JSON in NAME.json.
fio_json() {
    local name=$1
    shift
    fio --name="$name" --ioengine=nbd --uri="$NBD_URI" --bs=4k --size=60M \
        --output-format=json --output="$name.json" "$@" >/dev/null 2>&1 ||
        die "fio $name failed"
}

# --- exact counts -------------------------------------------------------------
fresh_members
start_server --stripe-size 64K --stats "$tmp/stats.json" "${members[@]}"
fio_json mix --rw=randrw --rwmixread=60 --iodepth=4 --number_ios=2000 --fsync=10
fio_json trim --rw=randtrim --iodepth=4 --number_ios=300
NBD_URI=$NBD_URI nbdpy - <<'PY' || die "nbdsh requests"
import nbd
from nbd_e2e import connect, check
h = connect(strict=0)   # reads past the end must reach the server
for i in range(7):
    h.zero(8192, i * 65536)
for i in range(5):
    h.cache(4096, i * 65536)
for i in range(3):
    h.block_status(65536, 0, lambda *a: 0)
refused = 0
for i in range(4):     # past the end: EINVAL, answered by the server
    try:
        h.pread(4096, h.get_size() + i * 4096)
    except nbd.Error:
        refused += 1
check(refused == 4, "reads past the end succeeded")
open("nbdsh.counts", "w").write("7 5 3 4\n")
PY
if [[ $SERVER == bionbd ]]; then
    kill -USR1 "$SERVER_PID"
    for ((n = 0; n < 50; n++)); do
        grep -q "stats: export ''" "$SERVER_LOG" && break
        sleep 0.1
    done
    "$BIOCTL" stat -n 1 "$tmp/server.$_server_seq.pid" >table ||
        die "bioctl stat failed"
    sed 's/^/    /' table >&2
    [[ $(stat -c %a "$tmp/server.$_server_seq.pid.ctl") == 600 ]] ||
        die "control socket mode $(stat -c %a "$tmp/server.$_server_seq.pid.ctl")"
fi
stop_server
[[ -s stats.json ]] || die "no statistics file at exit"

py - "$SERVER" <<'PY' || die "statistics do not match the clients"
import json, sys
server = sys.argv[1]
mix = json.load(open("mix.json"))["jobs"][0]
trim = json.load(open("trim.json"))["jobs"][0]
zeros, caches, bstat, refused = map(int, open("nbdsh.counts").read().split())
doc = json.load(open("stats.json"))
(e,) = doc["exports"]
ops = e["ops"]

def same(what, got, want):
    if got != want:
        sys.exit(f"{what}: statistics say {got}, the clients {want}")

# fio's reads plus the 4 refused ones (bionbd answered them, EINVAL;
# nbdkit answers them itself, never asking the plugin).
if server == "plugin":
    refused = 0
same("reads", ops["read"]["requests"], mix["read"]["total_ios"] + refused)
same("read bytes", ops["read"]["bytes"], mix["read"]["io_bytes"])
same("read EINVAL", ops["read"]["errors"].get("EINVAL", 0), refused)
same("writes", ops["write"]["requests"], mix["write"]["total_ios"])
same("write bytes", ops["write"]["bytes"], mix["write"]["io_bytes"])
same("flushes", ops["flush"]["requests"], mix["sync"]["total_ios"])
same("trims", ops["trim"]["requests"], trim["trim"]["total_ios"])
same("trim bytes", ops["trim"]["bytes"], trim["trim"]["io_bytes"])
same("zeroes", ops["write-zeroes"]["requests"], zeros)
same("zero bytes", ops["write-zeroes"]["bytes"], zeros * 8192)
same("cache", ops["cache"]["requests"], caches)
same("block status", ops["block-status"]["requests"], bstat)
same("in flight", e["inflight"], 0)
for op in ("read", "write", "trim"):
    hist = sum(c for _, c in ops[op]["histogram_us"])
    same(f"{op} histogram", hist, ops[op]["requests"])
ms = e["members"]
same("members", [m["name"].rsplit("/", 1)[-1] for m in ms], ["m0", "m1", "m2", "m3"])
# 4 KiB requests never cross a chunk: one member piece each.
same("member reads", sum(m["ops"]["read"]["requests"] for m in ms),
     mix["read"]["total_ios"])
same("member writes", sum(m["ops"]["write"]["requests"] for m in ms),
     mix["write"]["total_ios"])
same("member trims", sum(m["ops"]["trim"]["requests"] for m in ms),
     trim["trim"]["total_ios"])
for m in ms:
    same(f"{m['name']} flushes", m["ops"]["flush"]["requests"],
         mix["sync"]["total_ios"])
    same(f"{m['name']} in flight", m["inflight"], 0)
PY

if [[ $SERVER == bionbd ]]; then
    reads=$(py -c 'import json; print(json.load(open("stats.json"))["exports"][0]["ops"]["read"]["requests"])')
    grep -q "stats: export '': 0 in flight; read $reads " "$SERVER_LOG" ||
        die "SIGUSR1: no snapshot with $reads reads in the log"
    ! grep "stats: " "$SERVER_LOG" | grep -q ';$' ||
        die "SIGUSR1: a line ends with ';': $(grep "stats: " "$SERVER_LOG" | grep ';$' | head -1)"
    # bioctl stat's first report: totals; the export's row is named ''.
    awk -v r="$reads" '$1 == "'"''"'" && $2 == r { ok = 1 } END { exit !ok }' table ||
        die "bioctl stat: no export row with $reads reads"
fi

# --- errors -------------------------------------------------------------------
fresh_members
rm -f stats.json
start_server --stripe-size 64K --stats "$tmp/stats.json" \
    --fault "op=read error=EIO rate=20% seed=3" "${members[@]}"
fio_json err --rw=randread --iodepth=4 --number_ios=1500 --continue_on_error=all
stop_server
py - <<'PY' || die "error counts do not match fio's"
import json, sys
job = json.load(open("err.json"))["jobs"][0]
(e,) = json.load(open("stats.json"))["exports"]
eio = e["ops"]["read"]["errors"].get("EIO", 0)
meio = sum(m["ops"]["read"]["errors"].get("EIO", 0) for m in e["members"])
print(f"fio errors {job['total_err']}, export EIO {eio}, members {meio}", file=sys.stderr)
if not (job["total_err"] == eio == meio) or eio == 0:
    sys.exit("mismatch")
if e["ops"]["read"]["requests"] != job["read"]["total_ios"]:
    sys.exit("read requests differ")
PY

# --- the control socket, the interval file, no statistics ---------------------
if [[ $SERVER == bionbd ]]; then
    # Per connection: one that is open shows its own counts, by peer.
    start_bionbd "${members[@]}"
    NBD_URI=$NBD_URI BIOCTL=$BIOCTL PIDFILE=$SERVER_PIDFILE nbdpy - <<'PY' ||
import json, os, subprocess, time
from nbd_e2e import check, connect
busy, idle = connect(), connect()
for i in range(10):
    busy.pread(4096, i * 65536)
for i in range(3):
    busy.pwrite(b"x" * 8192, i * 65536)
busy.flush()
idle.pread(512, 0)
doc = json.loads(subprocess.run([os.environ["BIOCTL"], "stat", "--json",
                                 os.environ["PIDFILE"]], check=True,
                                capture_output=True).stdout)
conns = doc["connections"]
check(len(conns) == 2, f"{len(conns)} connections listed, 2 open")
got = sorted((c["ops"]["read"]["requests"], c["ops"]["write"]["requests"],
              c["ops"]["write"]["bytes"], c["ops"]["flush"]["requests"])
             for c in conns)
check(got == [(1, 0, 0, 0), (10, 3, 3 * 8192, 1)], f"per connection: {got}")
check(all(c["peer"] == "unix" and c["export"] == "" for c in conns),
      f"peers, exports: {conns}")
idle.shutdown()
# The closed one leaves the list once its worker saw it go.
for _ in range(100):
    table = subprocess.run([os.environ["BIOCTL"], "stat", "-n", "1",
                            os.environ["PIDFILE"]], check=True,
                           capture_output=True, text=True).stdout
    if "\n1 connection open" in table:
        break
    time.sleep(0.05)
check("\n1 connection open" in table, f"bioctl stat after a close:\n{table}")
PY
        die "per-connection counts"
    stop_bionbd
    # Readers of the control socket that never read a document larger than
    # the socket takes hold nothing but themselves: new clients are
    # accepted and served, and bioctl stat answers, meanwhile (the main
    # loop used to wait up to 1 s for each).
    start_bionbd --handshake-timeout 0 "${members[@]}"
    NBD_URI=$NBD_URI NBD_SOCK=$NBD_SOCK BIOCTL=$BIOCTL \
        PIDFILE=$SERVER_PIDFILE nbdpy - <<'PY' ||
import json, os, socket, subprocess, time
from nbd_e2e import check, connect
# Connections still negotiating are listed too: ~250 bytes of JSON each.
idle = []
for _ in range(900):
    s = socket.socket(socket.AF_UNIX)
    s.connect(os.environ["NBD_SOCK"])
    idle.append(s)
stalled = []
for _ in range(4):
    s = socket.socket(socket.AF_UNIX)
    s.connect(os.environ["PIDFILE"] + ".ctl")
    stalled.append(s)
time.sleep(0.3)
t0 = time.monotonic()
h = connect()
h.pread(4096, 0)
took = time.monotonic() - t0
check(took < 2, f"a new client waited {took:.1f} s beside 4 stalled readers")
out = subprocess.run([os.environ["BIOCTL"], "stat", "--json",
                      os.environ["PIDFILE"]], check=True,
                     capture_output=True, timeout=10).stdout
took = time.monotonic() - t0
check(took < 3, f"bioctl stat took {took:.1f} s beside 4 stalled readers")
n = len(json.loads(out)["connections"])
check(n == 901, f"{n} connections listed, 901 open")
# Else no reader stalled the server's send, and this proved nothing.
wmem = int(open("/proc/sys/net/core/wmem_default").read())
check(len(out) > 1.2 * wmem, f"document {len(out)} bytes, socket {wmem}")
h.shutdown()
PY
        die "control socket readers that stall"
    stop_bionbd
    # --stats-interval: the file exists while the server runs.
    rm -f live.json
    start_bionbd --stats "$tmp/live.json" --stats-interval 1 "${members[@]}"
    for ((n = 0; n < 40; n++)); do [[ -s live.json ]] && break; sleep 0.1; done
    [[ -s live.json ]] || die "--stats-interval 1: no file after 4 s"
    py -c 'import json; json.load(open("live.json"))' || die "live.json is not JSON"
    stop_bionbd
    # Something that is not our server on the control path.
    py - "$tmp/fake.ctl" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1]); s.listen(1)
c, _ = s.accept(); c.sendall(b"HTTP/1.0 200 OK\r\n\r\nhello"); c.close()
PY
    fake=$!
    for ((n = 0; n < 40; n++)); do [[ -S fake.ctl ]] && break; sleep 0.1; done
    rc=0; "$BIOCTL" stat -n 1 "$tmp/fake.ctl" >out 2>err || rc=$?
    wait $fake || :
    [[ $rc -eq 1 ]] && grep -q "not a statistics document" err ||
        die "bioctl stat on a bad answer: exit $rc, $(cat err)"
fi
fresh_members
rm -f stats.json
start_server --stripe-size 64K --stats "$tmp/stats.json" --no-statistics "${members[@]}"
fio_json none --rw=randread --iodepth=4 --number_ios=200
stop_server
py -c 'import json, sys; sys.exit(json.load(open("stats.json"))["exports"] != [])' ||
    die "statistics=false: something was counted: $(cat stats.json)"
# Two exports, the first not counted: the document lists the other only.
truncate -s 4M q0 l0
cat >two.conf <<EOF
[export quiet]
file = $tmp/q0
statistics = false
[export loud]
file = $tmp/l0
EOF
rm -f two.json
start_server --conf two.conf --stats "$tmp/two.json"
stop_server
py -c 'import json, sys; sys.exit([e["name"] for e in json.load(open("two.json"))["exports"]] != ["loud"])' ||
    die "two exports: $(cat two.json)"
# A file the counts cannot be written to is refused at start, not found
# out at exit when a whole run's counts are lost.
server_refuses_once --stats "$tmp/no/such/dir/s.json" "$tmp/l0"
expect_grep "stats[ =].*/no/such/dir/s.json: No such file or directory" "$SERVER_ERR"
log ok
