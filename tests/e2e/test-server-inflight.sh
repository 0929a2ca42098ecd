#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: one bound on payload buffers in flight for the whole
# process (--inflight-memory), and stalled clients cannot hold it.  bionbd
# -t 1 --inflight-memory 64M --memory 0.  First, clients that hang up
# while their 32 MiB reads wait (some with requests still unread in the
# socket) are closed within 2.5 s, while the bound stays full (before, not
# until room came).  And 160 clients whose 32 MiB reads wait with 128 KiB
# of requests behind them: what the server read of those and keeps counts
# under the bound (buffers.stash_bytes within its 32nd, 2 MiB) and RSS
# grows by less than 8 MiB (before: 20 MiB).  Then client W sends a 32 MiB write
# header and trickles its payload a byte at a time; then three clients
# each send four 32 MiB reads and read no reply.  Without the bound they
# pinned 3 x 128 MiB (RSS 387 MiB above the start); with it:
#  - the server's RSS stays under 64 MiB + 24 MiB above its start, and the
#    control socket's buffers.inflight_bytes under 64 MiB, while the
#    readers wait (buffers.waits counts them);
#  - client B's 4 KiB read and write each complete within 3 s, over and
#    over (a liveness bound, not a speed test): small requests have a
#    part of the share of their own;
#  - W, whose client moves no 1 MiB in 5 s while others wait, is closed
#    (logged once, counted in buffers.evictions), and then the first
#    reader, which got the room W held and reads nothing: each within
#    5 s of its stall and a tick;
#  - bioctl stat's table shows the bound, the waits and evictions, and the
#    second reader, let in then, holding 32 MiB or more after waiting;
#  - B's data is right afterwards, and a bad value is one line and exit 1.
# The start-up line states the bound in force: 64M there, no warning; a
# value under 64M a worker (-t 3, 100M: the flag, or the config file's
# line) is raised to 192M, and one line says so, naming the setting.
# INFLIGHT_TLS=1 (ctest's e2e/server-inflight-tls): the same cases over
# TLS under --tls=require, B with a PSK (psktool's), the raw clients with
# X.509 (Python's ssl has no PSK); the configuration cases are left to the
# plaintext run.
source "$(dirname "$0")/functions.sh"

requires_nbdpy
make_tmpdir

# raised_once WHAT: the log has the raised bound and one warning naming WHAT.
raised_once() {
    expect_grep "; 3 workers, buffers in flight up to 192M, " "$SERVER_LOG"
    grep -c "warning: " "$SERVER_LOG" | {
        read -r n
        ((n == 1)) || die "$n warnings in the log, expected 1"
    }
    expect_grep "warning: $1 is less than 64M for each of 3 workers: buffers in flight up to 192M$" \
        "$SERVER_LOG"
}

# The configuration cases: a bad value, and a raised one.
config_cases() {
    # A bad value: one line naming the flag and value, exit 1, nothing served.
    out=$("$BIONBD" -f -U "$tmp/bad.sock" --inflight-memory 1M "$tmp/x0" 2>&1) &&
        die "--inflight-memory 1M was accepted"
    [[ $(wc -l <<<"$out") -eq 1 && $out == *"--inflight-memory 1M"* ]] ||
        die "--inflight-memory 1M: expected one line naming it, got: $out"
    printf '[server]\ninflight-memory = lots\n[export x]\nfile = %s\n' \
        "$tmp/x0" >"$tmp/bad.conf"
    out=$("$BIONBD" -f -U "$tmp/bad.sock" -c "$tmp/bad.conf" 2>&1) &&
        die "inflight-memory = lots was accepted"
    [[ $(wc -l <<<"$out") -eq 1 && $out == *"inflight-memory"*"lots"* ]] ||
        die "inflight-memory = lots: expected one line naming it, got: $out"

    start_bionbd -t 3 --inflight-memory 100M --size 64M "$tmp/s0"
    stop_bionbd
    raised_once "--inflight-memory 100M"
    printf '[server]\nthreads = 3\ninflight-memory = 100M\n[export x]\nfile = %s\n' \
        "$tmp/s0" >"$tmp/raised.conf"
    start_bionbd -c "$tmp/raised.conf"
    stop_bionbd
    raised_once "${tmp//./\\.}/raised\\.conf:3: \\[server\\] inflight-memory=100M"
}

tls=()
if [[ ${INFLIGHT_TLS:-0} == 1 ]]; then
    make_tls_keys "$tmp/keys"
    tls=(--tls=require --tls-psk "$tmp/keys/psk/keys.psk"
        --tls-certificates "$tmp/keys/server")
else
    config_cases
fi

start_bionbd -t 1 --inflight-memory 64M --memory 0 --sendfile-min 0 \
    "${tls[@]}" --size 512M "$tmp/m0" "$tmp/m1"
if ((${#tls[@]})); then
    expect_grep "TLS require" "$SERVER_LOG"
    export NBD_TLS_CA=$tmp/keys/server/ca-cert.pem
    NBD_URI="nbds+unix://alice@/?socket=$NBD_SOCK&tls-psk-file=$tmp/keys/psk/keys.psk"
fi
SERVER_PID=$SERVER_PID NBD_SOCK=$NBD_SOCK NBD_URI=$NBD_URI BIOCTL=$BIOCTL \
    PIDFILE=$SERVER_PIDFILE nbdpy - <<'PY' || die "in-flight bound cases failed"
import json
import os
import re
import socket
import subprocess
import threading
import time

import nbd
import nbd_raw as raw
from nbd_raw import connect_go
from nbd_e2e import check, log, rss_mib

pid = int(os.environ["SERVER_PID"])
sock = os.environ["NBD_SOCK"]
MIB = 1 << 20
STALL_S = 5  # SRV_STALL_S
BOUND_MIB = 64
TLS = bool(os.environ.get("NBD_TLS_CA"))


def stats():
    return json.loads(subprocess.run(
        [os.environ["BIOCTL"], "stat", "--json", os.environ["PIDFILE"]],
        check=True, capture_output=True).stdout)


def fill():
    """F: 32 MiB held, unread, and a second 32 MiB read waiting, so every
    32 MiB read queues behind it."""
    f = connect_go(sock, structured=False)
    f.send(b"".join(f.req_bytes(raw.CMD_READ, k, 0, 32 * MIB)
                    for k in (1, 2)))
    return f


def wait_gone(n):
    """Until n connections or fewer are open, at most 5 s."""
    for _ in range(50):
        if len(stats()["connections"]) <= n:
            return
        time.sleep(0.1)


def hangups():
    """Clients that give up while their requests wait for buffer room
    leave; one that ends politely is answered.  F holds 32 MiB and waits
    with a second read (fill), so every 32 MiB read queues behind it.
    Then, each with a 32 MiB read: two clients close; two close with more
    requests pipelined behind it than the server reads at once (256 KiB,
    or a 16 KiB record under TLS), so the socket stays readable; two shut
    their sending side right behind it (the socket's, with no close_notify
    under TLS), a hard disconnect; and P sends NBD_CMD_DISC behind its
    read and shuts its sending side.  The six are gone within 2.5 s, while
    F still holds its buffers and nobody was let in or evicted (5 s away);
    P stays, and once F closes, gets its read's reply, then EOF."""
    t0 = time.monotonic()
    f = fill()
    quitters = []
    for i in range(6):
        q = connect_go(sock, structured=False)
        reqs = q.req_bytes(raw.CMD_READ, 1, 32 * MIB, 32 * MIB)
        if i in (2, 3):
            reqs += b"".join(q.req_bytes(raw.CMD_READ, 2 + k, 0, 4096)
                             for k in range(2000 if TLS else 10000))
        q.send(reqs)
        quitters.append(q)
    p = connect_go(sock, structured=False)
    p.note_read(1, 32 * MIB)
    p.send(p.req_bytes(raw.CMD_READ, 1, 32 * MIB, 32 * MIB) +
           p.req_bytes(raw.CMD_DISC, 2))
    p.sock.shutdown(socket.SHUT_WR)  # under TLS, close_notify first
    doc = stats()
    for _ in range(20):
        if doc["buffers"]["waits"] >= 8:
            break
        time.sleep(0.1)
        doc = stats()
    check(doc["buffers"]["waits"] >= 8,
          f"F, the six and P do not all wait: {doc['buffers']}")
    ids = {c["id"] for c in doc["connections"]}
    f_id, p_id = min(ids), min(ids) + 7  # in accept order

    def others():
        return {c["id"] for c in doc["connections"]} - {f_id, p_id}

    for i, q in enumerate(quitters):
        if i in (4, 5):
            getattr(q.sock, "raw", q.sock).shutdown(socket.SHUT_WR)
        else:
            q.close()
    t_close = time.monotonic()
    while others() and time.monotonic() - t_close < 2.5:
        time.sleep(0.1)
        doc = stats()
    took = time.monotonic() - t_close
    log(f"{len(others())} of the six still connected {took:.1f} s after "
        f"they hung up")
    check(not others(), f"{len(others())} of the six clients that hung up "
          f"are still connected {took:.1f} s later")
    check(p_id in {c["id"] for c in doc["connections"]},
          "P, which sent NBD_CMD_DISC behind its read, was closed")
    buf = doc["buffers"]
    check(buf["inflight_bytes"] >= 32 * MIB and buf["evictions"] == 0 and
          time.monotonic() - t0 < STALL_S,
          f"the bound was not full all along: {buf}, "
          f"{time.monotonic() - t0:.1f} s")
    f.close()
    r = p.reply()
    check(r.cookie == 1 and not r.error and len(r.data) == 32 * MIB,
          f"P's read after its DISC: {r}")
    p.expect_closed("P after its DISC")
    for q in [p] + quitters[4:]:
        q.close()
    wait_gone(0)


def stashes():
    """What a waiting connection read past its request counts under the
    bound: behind F, 160 clients each send a 32 MiB read with 128 KiB of
    4 KiB reads pipelined behind it, which the server reads at once with
    the header and keeps while the read waits.  The stashes stay within
    their part of the share (1/32: 2 MiB), RSS grows by less than 8 MiB
    in plaintext (before: 128 KiB each, 20 MiB outside the bound)."""
    waits = stats()["buffers"]["waits"]
    f = fill()
    clients = [connect_go(sock, structured=False) for _ in range(160)]
    tail = b"".join(raw.Raw.req_bytes(raw.CMD_READ, 2 + k, 0, 4096)
                    for k in range((128 << 10) // 28))
    # F's first read is copied into its buffer after fill() returns: on a
    # loaded machine that growth would land between the two samples.  So
    # wait until F's second read waits (the first holds its buffer), and
    # until the RSS stops moving.
    for _ in range(50):
        if stats()["buffers"]["waits"] - waits >= 1:
            break
        time.sleep(0.1)
    rss0 = rss_mib(pid)
    for _ in range(20):
        time.sleep(0.2)
        now = rss_mib(pid)
        if abs(now - rss0) < 0.5:
            break
        rss0 = now
    for c in clients:
        c.send(c.req_bytes(raw.CMD_READ, 1, 32 * MIB, 32 * MIB) + tail)
    for _ in range(30):
        doc = stats()
        if doc["buffers"]["waits"] - waits >= 161:
            break
        time.sleep(0.1)
    grown = rss_mib(pid) - rss0
    buf = doc["buffers"]
    log(f"RSS {grown:.1f} MiB more with 160 clients waiting; {buf}")
    check(buf["waits"] - waits >= 161,
          f"the 160 clients do not all wait: {buf}")
    # Under TLS a read takes a record (16 KiB) at most, so stashes are
    # small either way, and RSS measures the sessions' buffers (under
    # ASan, quarantined, 18 MiB): the statistics tell.
    check(TLS or grown < 8,
          f"RSS grew {grown:.1f} MiB with 160 clients waiting")
    check(0 < buf["stash_bytes"] <= 2 * MIB and
          buf["limit_bytes"] == BOUND_MIB * MIB,
          f"stashes {buf['stash_bytes']} bytes, over 2 MiB or none")
    for c in clients:
        c.close()
    f.close()
    wait_gone(0)
    check(stats()["buffers"]["stash_bytes"] == 0, "stashes left")


hangups()
stashes()
b = nbd.NBD()
b.set_uri_allow_local_file(True)  # the PSK file, under TLS
b.connect_uri(os.environ["NBD_URI"])
b.pwrite(b"\x11" * 4096, 0)
base = rss_mib(pid)
first_id = max(c["id"] for c in stats()["connections"])  # B


written = {}  # B's block -> the byte it holds


def neighbour(i):
    """B's 4 KiB read and write, each within a liveness bound."""
    blk = 1 + i % 64
    for what, fn in (("read", lambda: b.pread(4096, 0)),
                     ("write", lambda: b.pwrite(bytes([i & 0xFF]) * 4096,
                                                4096 * blk))):
        t = time.monotonic()
        fn()
        took = time.monotonic() - t
        check(took < 3.0, f"B's 4 KiB {what} took {took:.1f} s")
    written[blk] = i & 0xFF


# W: a 32 MiB write whose payload comes a byte at a time.
w = connect_go(sock, structured=False)
w.send(w.req_bytes(raw.CMD_WRITE, 1, 64 * MIB, 32 * MIB))
w.send(b"\x5a")
stop = threading.Event()


def trickle():
    while not stop.wait(0.25):
        try:
            w.send(b"\x5a")
        except OSError:
            return  # closed by the server


t_w = time.monotonic()
tw = threading.Thread(target=trickle, daemon=True)
tw.start()
time.sleep(0.3)

# Three readers, four 32 MiB reads each, no reply read.
readers = []
for i in range(3):
    r = connect_go(sock, structured=False)
    r.send(b"".join(r.req_bytes(raw.CMD_READ, 10 * i + k, 128 * MIB, 32 * MIB)
                    for k in range(4)))
    readers.append(r)
time.sleep(1)  # their reads are done (without the bound, all of them)
w_id, r1_id = first_id + 1, first_id + 2

peak, peak_inflight, gone = base, 0, {}
deadline = t_w + 3 * STALL_S + 4
i = 0
while time.monotonic() < deadline and r1_id not in gone:
    neighbour(i)
    i += 1
    peak = max(peak, rss_mib(pid))
    check(peak <= base + BOUND_MIB + 24,
          f"RSS {peak:.0f} MiB, {peak - base:.0f} MiB over the start "
          f"with a {BOUND_MIB} MiB bound")
    doc = stats()
    buf = doc["buffers"]
    peak_inflight = max(peak_inflight, buf["inflight_bytes"])
    ids = {c["id"] for c in doc["connections"]}
    for cid in (w_id, r1_id):
        if cid not in ids and cid not in gone:
            gone[cid] = time.monotonic() - t_w
            log(f"connection {cid} closed after {gone[cid]:.1f} s")
    time.sleep(0.3)
log(f"RSS {base:.0f} MiB at the start, {peak:.0f} MiB at the most; "
    f"in flight {peak_inflight >> 20} MiB at the most; {i} rounds of B")
check(peak_inflight <= BOUND_MIB * MIB,
      f"{peak_inflight} bytes in flight over the bound")
check(buf["limit_bytes"] == BOUND_MIB * MIB, f"buffers: {buf}")
check(buf["waits"] >= 3, f"buffers.waits {buf['waits']}: the readers waited")
check(w_id in gone, "W, trickling its payload, was not closed")
check(gone[w_id] <= STALL_S + 2.5, f"W closed after {gone[w_id]:.1f} s")
check(r1_id in gone, "the first reader, reading nothing, was not closed")
check(gone[r1_id] - gone[w_id] <= STALL_S + 2.5,
      f"the first reader closed {gone[r1_id] - gone[w_id]:.1f} s after W")
check(stats()["buffers"]["evictions"] >= 2, "buffers.evictions under 2")


def table_check():
    """bioctl stat's table: the bound, waits and evictions, and a row per
    connection with what it holds and how often it waited."""
    table = subprocess.run(
        [os.environ["BIOCTL"], "stat", "-n", "1", os.environ["PIDFILE"]],
        check=True, capture_output=True, text=True).stdout
    m = re.search(r"^buffers in flight: [0-9.]+ of 64\.0 MiB, (\d+) waits, "
                  r"(\d+) evictions, [0-9.]+ MiB stashed$", table, re.M)
    check(m and int(m[1]) >= 3 and int(m[2]) >= 2,
          f"bioctl stat: no buffers line with the waits:\n{table}")
    check(re.search(r"^ +conn peer +export +bufMiB +bwaits +MiB$", table,
                    re.M),
          f"bioctl stat: no connections' header:\n{table}")
    rows = {int(r[0]): (float(r[1]), int(r[2])) for r in re.findall(
        r"^ *(\d+) unix +'' +([0-9.]+) +(\d+) +[0-9.]+$", table, re.M)}
    return rows, table


# The second reader, let in once the first was closed, holds its reads.
r2_id = r1_id + 1
for _ in range(30):
    rows, table = table_check()
    if rows.get(r2_id, (0, 0))[0] >= 32:
        break
    time.sleep(0.1)
check(rows.get(r2_id, (0, 0))[0] >= 32 and rows[r2_id][1] >= 1,
      f"bioctl stat: reader {r2_id} holds no 32 MiB or never waited:\n{table}")
check(rows.get(first_id) == (0.0, 0), f"bioctl stat: B's row:\n{table}")
stop.set()
tw.join()
w.close()
for r in readers:
    r.close()
neighbour(i)
for blk, v in written.items():
    check(b.pread(4096, 4096 * blk) == bytes([v]) * 4096, f"B's block {blk}")
b.shutdown()
PY
grep -c "closed: it held" "$SERVER_LOG" | {
    read -r n
    ((n >= 2)) || die "$n eviction lines in the log, expected 2 or more"
}
stop_bionbd
expect_grep "; 1 worker, buffers in flight up to 64M, " "$SERVER_LOG"
expect_no_grep "warning: " "$SERVER_LOG"
log "PASS"
