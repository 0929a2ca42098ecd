#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: bench/run still works end to end.  A few seconds of one
# workload against bionbd and nbdkit-file, then the outputs are checked for
# shape, never for speed: the Markdown table (stdout and latest.md) has a
# row per server with numbers that parse, latest.json holds every raw run
# and the machine description, no row says MISSING or FAILED for servers
# that exist, and the harness left no server or scratch directory behind.
# A second run with an empty build tree must name the missing peers (and
# exit 3) instead of dropping their rows.  The qemu-img bench client rows
# give figures too.
source "$(dirname "$0")/functions.sh"

requires fio
requires nbdkit --version
requires nbdinfo --version
[[ -x /usr/bin/python3 ]] || skip "/usr/bin/python3 missing"
[[ -x $BIONBD ]] || die "$BIONBD not built"
make_tmpdir

BENCH=$SRC_DIR/bench/run
PY=/usr/bin/python3

# The harness keeps its data on tmpfs: /dev/shm, or a small mount of ours.
if [[ $(stat -f -c %T /dev/shm 2>/dev/null) == tmpfs ]]; then
    shm=/dev/shm
else
    requires_mount
    mount_tmpfs "$tmp/shm" 128M
    shm=$tmp/shm
fi

# bench_run OUT RC [ARGS...]: run the harness; it must exit with RC.
bench_run() {
    local out=$1 want=$2 rc=0
    shift 2
    mkdir -p "$out"
    "$PY" "$BENCH" --build-dir "$BUILD_DIR" --out "$out" --tmpdir "$shm" \
        --rounds 2 --runtime 1 --size 16M "$@" \
        >"$out/stdout.md" 2>"$out/stderr.log" || rc=$?
    if [[ $rc -ne $want ]]; then
        sed 's/^/    /' "$out/stderr.log" >&2
        die "bench/run $* exited $rc, expected $want"
    fi
}

# no_leftovers OUT: the scratch directory named in the log is gone and no
# process still mentions it.
no_leftovers() {
    local scratch
    scratch=$(sed -n 's/^bench: scratch \([^;]*\);.*/\1/p' "$1/stderr.log")
    [[ -n $scratch ]] || die "$1/stderr.log does not name its scratch dir"
    [[ ! -e $scratch ]] || die "scratch dir $scratch left behind"
    if pgrep -f -- "$scratch" >/dev/null; then
        pgrep -a -f -- "$scratch" >&2
        die "processes left behind using $scratch"
    fi
}

# ------------------------------------------------------------ a real run

log "bench/run on bionbd and nbdkit-file, randread4k-qd8"
out=$tmp/run1
bench_run "$out" 0 --servers bionbd,nbdkit-file --workloads randread4k-qd8
no_leftovers "$out"
cmp -s "$out/stdout.md" "$out/latest.md" ||
    die "stdout and latest.md differ"

"$PY" - "$out" <<'EOF' || die "outputs are malformed (see above)"
import json, os, re, sys

out = sys.argv[1]
servers = ["bionbd", "nbdkit-file"]
wl = "randread4k-qd8"
bad = []

def check(cond, what):
    if not cond:
        bad.append(what)

def number(s):
    s = s.strip().rstrip("×%")
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(k?)", s)
    if not m:
        return None
    return float(m.group(1)) * (1000 if m.group(2) else 1)

md = open(os.path.join(out, "latest.md")).read()
check("MISSING" not in md and "FAILED" not in md,
      "latest.md mentions MISSING or FAILED")

def table_after(heading):
    """Rows (lists of cells) of the first table after a heading."""
    part = md.split(heading, 1)
    check(len(part) == 2, "no '%s' section" % heading)
    rows = []
    if len(part) == 2:
        for line in part[1].splitlines():
            if line.startswith("## "):
                break
            if line.startswith("|") and not line.startswith("|---"):
                rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows

summary = table_after("## Summary")
check(summary and summary[0][1:] == servers,
      "summary header is %r" % (summary[:1],))
rows = [r for r in summary[1:] if r[0] == wl]
check(len(rows) == 1, "summary has no single %s row" % wl)
if rows:
    for s, cell in zip(servers, rows[0][1:]):
        v = number(cell.split(" ")[0])
        check(v is not None and v > 0, "summary %s: %r" % (s, cell))

details = table_after("## Details")
hdr = details[0] if details else []
check("server CPU µs/req" in hdr and "peak RSS MiB" in hdr,
      "details header is %r" % hdr)
for s in servers:
    r = [d for d in details[1:] if d[:2] == [wl, s]]
    check(len(r) == 1, "details: no single row for %s" % s)
    if not r:
        continue
    row = dict(zip(hdr, r[0]))
    for col in ("IOPS", "MiB/s", "lat mean µs", "p99 µs",
                "server CPU µs/req", "fio CPU µs/req", "peak RSS MiB",
                "idle RSS MiB"):
        v = number(row.get(col, ""))
        check(v is not None and v > 0, "details %s %s: %r"
              % (s, col, row.get(col)))

js = json.load(open(os.path.join(out, "latest.json")))
m = js.get("machine", {})
for k in ("nproc", "cpu_model", "kernel", "versions"):
    check(m.get(k), "machine.%s missing" % k)
for s in servers:
    check(m.get("versions", {}).get(s), "no version for %s" % s)
    sv = js.get("servers", {}).get(s, {})
    check(sv.get("status") == "ok", "%s status %r" % (s, sv.get("status")))
    check(sv.get("command"), "%s: no command line" % s)
runs = js.get("runs", [])
check(len(runs) == 4, "%d runs, expected 2 servers x 2 rounds" % len(runs))
for r in runs:
    where = "run %s/%s/%s" % (r.get("server"), r.get("workload"),
                              r.get("round"))
    check(r.get("error") is None, "%s: %s" % (where, r.get("error")))
    for k in ("iops", "mib_s", "lat_mean_us", "total_ios",
              "server_cpu_s", "server_cpu_us_per_req", "peak_rss_kib",
              "idle_rss_kib", "client_cpu_us_per_req"):
        v = r.get(k)
        check(isinstance(v, (int, float)) and v >= 0,
              "%s: %s = %r" % (where, k, v))
    check((r.get("iops") or 0) > 0 and (r.get("total_ios") or 0) > 0,
          "%s did no I/O" % where)
    check(isinstance(r.get("read"), dict), "%s: no read figures" % where)
cells = js.get("cells", [])
check(sorted(c["server"] for c in cells) == sorted(servers),
      "cells are %r" % [c.get("server") for c in cells])
for c in cells:
    check(c.get("ok_rounds") == 2 and (c.get("iops") or 0) > 0,
          "cell %s: %r" % (c.get("server"), c))
    check(len(c.get("iops_all", [])) == 2, "cell %s: raw IOPS missing"
          % c.get("server"))
check(any(c.get("ratio_vs_baseline") for c in cells
          if c["server"] == "bionbd"), "bionbd has no ratio to nbdkit-file")

for png in js.get("plots", []):
    with open(os.path.join(out, png), "rb") as f:
        check(f.read(8) == b"\x89PNG\r\n\x1a\n", "%s is not a PNG" % png)

if bad:
    print("\n".join("    " + b for b in bad), file=sys.stderr)
    sys.exit(1)
EOF
if command -v gnuplot >/dev/null; then
    [[ -s $out/cpu-per-request.png ]] || die "no cpu-per-request.png"
fi

# ------------------------------------------------------------ shaped rows

log "rows that compare a server with itself: shared-worker, neighbour"
out=$tmp/run4
bench_run "$out" 0 --servers bionbd,nbdkit-file,fio-direct \
    --workloads shared-worker-read,neighbour-write --rounds 1 --runtime 0.5
no_leftovers "$out"
# A ratio and what it is made of, for both servers; n/a for no server.
expect_grep '^\| shared-worker-read \| [0-9.]+× \([0-9]+ / [0-9]+ MiB/s\) \| [0-9.]+× \([0-9]+ / [0-9]+ MiB/s\) \| n/a \|' \
    "$out/latest.md"
expect_grep '^\| neighbour-write \| [0-9.]+× \(p99 [0-9]+ / [0-9]+ µs; p50 [0-9]+ / [0-9]+\) \| [0-9.]+× \(p99' \
    "$out/latest.md"
expect_grep '^\| 10 \| bionbd -t 1: two connections' "$out/latest.md"
"$PY" -c '
import json, sys
js = json.load(open(sys.argv[1]))
runs = js["runs"]
assert len(runs) == 4, [(r["server"], r["workload"]) for r in runs]
for r in runs:
    assert r["error"] is None, r
    assert r["shape_ratio"] > 0 and r["server_cpu_us_per_req"] > 0, r
    assert r["peak_rss_kib"] > 0, r
    if r["workload"].startswith("neighbour"):
        assert set(r["jobs"]) == {"small", "stream"}, r["jobs"]
        assert 0 < r["alone_p99_us"] and 0 < r["next_p99_us"], r
    else:
        assert r["base_mib_s"] > 0 and r["mib_s"] > 0, r
# bionbd ran them on a server of its own with one worker.
cmd = js["servers"]["bionbd"]["shaped_command"]
assert cmd[cmd.index("-t") + 1] == "1", cmd
' "$out/latest.json" || die "shaped runs are malformed"

# ------------------------------------------------------------ qemu-img bench

if command -v qemu-img >/dev/null; then
    log "the qemu-img bench client: a write row with figures"
    out=$tmp/run3
    bench_run "$out" 0 --servers bionbd,nbdkit-file \
        --workloads qemu-write4k-qd32 --rounds 1 --runtime 0.2
    no_leftovers "$out"
    expect_grep '^\| qemu-write4k-qd32 \| [0-9.]+k? \([0-9.]+×\) \| [0-9.]+k? \|' \
        "$out/latest.md"
    "$PY" -c '
import json, sys
js = json.load(open(sys.argv[1]))
runs = js["runs"]
assert len(runs) == 2, runs
for r in runs:
    assert r["error"] is None, r
    assert r["iops"] > 0 and r["total_ios"] >= 2000, r
    assert r["server_cpu_us_per_req"] > 0 and r["lat_mean_us"] > 0, r
' "$out/latest.json" || die "qemu-img bench runs are malformed"
fi

# ------------------------------------------------------------ TLS rows

if command -v psktool >/dev/null && command -v cc >/dev/null; then
    log "a TLS row (PSK, ChaCha20 disabled for every process)"
    out=$tmp/run5
    bench_run "$out" 0 --servers bionbd,nbdkit-file,fio-direct \
        --workloads tls-randread4k-qd32 --rounds 1 --runtime 0.2
    no_leftovers "$out"
    expect_grep '^\| tls-randread4k-qd32 \| [0-9.]+k? \([0-9.]+×\) \| [0-9.]+k? \| n/a \|' \
        "$out/latest.md"
    "$PY" -c '
import json, sys
js = json.load(open(sys.argv[1]))
for s in ("bionbd", "nbdkit-file"):
    t = js["servers"][s]["tls"]
    assert t["status"] == "ok" and "--tls=require" in t["command"], t
    assert t["uri"].startswith("nbds+unix://alice@"), t
assert js["servers"]["fio-direct"]["tls"]["status"] == "n/a"
assert len(js["runs"]) == 2, js["runs"]
assert all(r["error"] is None and r["iops"] > 0 for r in js["runs"]), js["runs"]
' "$out/latest.json" || die "TLS runs are malformed"
fi

# ------------------------------------------------------------ a missing peer

log "a build tree without our servers: rows must say MISSING"
mkdir -p "$tmp/empty-build"
out=$tmp/run2
bench_run "$out" 3 --servers bionbd,nbdkit-bio,nbdkit-file \
    --workloads randread4k-qd1 --rounds 1 --runtime 0.5 \
    --build-dir "$tmp/empty-build"
no_leftovers "$out"
expect_grep '^\| randread4k-qd1 \| MISSING \| MISSING \| [0-9]' "$out/latest.md"
expect_grep '\*\*bionbd is MISSING\*\*: .*not built' "$out/latest.md"
expect_grep '\*\*nbdkit-bio is MISSING\*\*: .*not built' "$out/latest.md"
expect_grep '^\| randread4k-qd1 \| bionbd \| MISSING: ' "$out/latest.md"
expect_grep 'bionbd +MISSING' "$out/stderr.log"
"$PY" -c '
import json, sys
js = json.load(open(sys.argv[1]))
assert js["servers"]["bionbd"]["status"] == "missing", js["servers"]
assert js["servers"]["nbdkit-bio"]["status"] == "missing", js["servers"]
assert js["servers"]["nbdkit-file"]["status"] == "ok", js["servers"]
' "$out/latest.json" || die "latest.json does not record the missing peers"

log "ok"
