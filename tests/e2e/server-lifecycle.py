# SPDX-License-Identifier: MIT
"""server-lifecycle.py - clients for test-server-lifecycle.sh (Debian's
python3; libnbd for the load, raw sockets for the rude clients).

  load ACKLOG         writes 4K blocks 0, 1, 2, ... of [0, LOAD_BYTES) once
                      each (block b holds pattern(b)), 32 in flight; every
                      write the server acknowledges is appended to ACKLOG
                      (one block number a line) at once.  Runs until the
                      server goes away; exits 0 then.
  verify ACKLOG       every acknowledged block is on the member files
                      (read directly, mapped by the stripe rule)
  disconnects         clients that hang up with requests in flight, or stop
                      reading replies; another client is served meanwhile
  idle N              N connections through the handshake, left idle:
                      prints the server's RSS growth in KiB
  unstarted           SIGTERMs the server while it holds requests read
                      but not started: every one is answered

Environment: NBD_URI, NBD_SOCK, SERVER_PID, MEMBERS, CHUNK, LOAD_BYTES.
"""
import os
import signal
import socket
import struct
import sys
import time

import nbd_raw as raw
from nbd_e2e import check, fail, layout, log

K, M = 1024, 1 << 20
BLOCK = 4 * K


def block_data(b):
    return struct.pack(">Q", b) * (BLOCK // 8)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    fail("no VmRSS")


def wait_conns(pid, want, what, limit=15.0):
    deadline = time.monotonic() + limit
    while raw.server_conns(pid) != want:
        if time.monotonic() > deadline:
            fail(f"{what}: the server holds {raw.server_conns(pid)} "
                 f"connections, expected {want}")
        time.sleep(0.05)


def load(acklog):
    import nbd
    nblocks = int(os.environ["LOAD_BYTES"]) // BLOCK
    h = nbd.NBD()
    h.connect_uri(os.environ["NBD_URI"])
    out = open(acklog, "w", buffering=1)
    inflight = {}
    nxt = 0
    try:
        while True:
            while len(inflight) < 32 and nxt < nblocks:
                cookie = h.aio_pwrite(block_data(nxt), nxt * BLOCK)
                inflight[cookie] = nxt
                nxt += 1
            if not inflight:  # everything written: keep reading
                h.pread(BLOCK, 0)
                continue
            h.poll(-1)
            for cookie in list(inflight):
                if h.aio_command_completed(cookie):
                    out.write(f"{inflight.pop(cookie)}\n")
    except nbd.Error as e:
        # The server shut down under us: expected, and how this ends.
        log(f"load: {nxt} writes issued, stopped by: {e.string}")
    out.close()


def verify(acklog):
    members = os.environ["MEMBERS"].split()
    chunk = int(os.environ["CHUNK"])
    with open(acklog) as f:
        acked = [int(x) for x in f.read().split()]
    check(len(set(acked)) == len(acked), "a block acknowledged twice")
    files = [open(m, "rb") for m in members]
    for b in acked:
        m, moff = layout(b * BLOCK, chunk, len(members))
        files[m].seek(moff)
        got = files[m].read(BLOCK)
        check(got == block_data(b),
              f"acknowledged block {b} is not on member {m} at {moff}")
    log(f"verify: {len(acked)} acknowledged writes are on the members")


def disconnects():
    sock = os.environ["NBD_SOCK"]
    pid = int(os.environ["SERVER_PID"])
    import nbd
    h = nbd.NBD()
    h.connect_uri(os.environ["NBD_URI"])
    probe = b"\xa5" * BLOCK
    h.pwrite(probe, 60 * M)
    base = raw.server_conns(pid)
    try:
        for i in range(20):
            c = raw.connect_go(sock)
            blob = b""
            for j in range(100):
                blob += c.req_bytes(raw.CMD_READ, j, (j % 64) * 64 * K,
                                    64 * K)
            for j in range(20):
                blob += c.req_bytes(raw.CMD_WRITE, 100 + j,
                                    32 * M + j * 64 * K, 64 * K,
                                    payload=bytes([i]) * 64 * K)
            c.send(blob)
            if i % 2:
                # Reset instead of a clean close.
                c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                  struct.pack("ii", 1, 0))
            c.close()
            # The other client is served meanwhile.
            check(h.pread(BLOCK, 60 * M) == probe,
                  f"round {i}: the other client read wrong data")
        # A client that never reads its replies (128 MiB of them), then
        # goes away: the server must not wait for it forever.
        # Its in-flight limits must bound what it costs the server.
        rss0 = rss_kib(pid)
        c = raw.connect_go(sock)
        blob = b"".join(c.req_bytes(raw.CMD_READ, j, (j % 256) * 64 * K,
                                    64 * K) for j in range(2048))
        c.sock.settimeout(5)
        try:
            c.send(blob)
        except socket.timeout:
            pass  # the server stopped reading: its in-flight limit
        time.sleep(0.5)
        check(h.pread(BLOCK, 60 * M) == probe,
              "while a client ignores its replies: wrong data")
        grown = rss_kib(pid) - rss0
        log(f"disconnects: a client not reading 128 MiB of replies grew "
            f"the server's RSS by {grown} KiB")
        check(grown < 64 * 1024, f"a client not reading its replies grew "
              f"the server by {grown} KiB")
        c.close()
    except raw.Fail as e:
        fail(str(e))
    wait_conns(pid, base, "after the rude clients")
    h.pwrite(probe, 60 * M + BLOCK)
    h.flush()
    check(h.pread(2 * BLOCK, 60 * M) == probe * 2, "after: wrong data")
    h.shutdown()
    wait_conns(pid, base - 1, "after the last client")
    log("disconnects: 20 hang-ups with 120 requests in flight, one client "
        "not reading; no connection left, others served")


def idle(n):
    sock = os.environ["NBD_SOCK"]
    pid = int(os.environ["SERVER_PID"])
    # Warm up once (buffers, first-connection allocations).
    c = raw.connect_go(sock)
    c.read(0, BLOCK)
    c.close()
    wait_conns(pid, 0, "before the idle connections")
    before = rss_kib(pid)
    conns = []
    try:
        for _ in range(n):
            conns.append(raw.connect_go(sock))
        wait_conns(pid, n, f"{n} idle connections")
        # They all still work.
        for c in conns[::50]:
            c.read(0, BLOCK)
    except raw.Fail as e:
        fail(str(e))
    after = rss_kib(pid)
    for c in conns:
        c.close()
    wait_conns(pid, 0, f"after closing {n} idle connections")
    print(after - before)


def negotiate_through_shutdown(c, signalled):
    """@c is negotiating; once the file @signalled exists (the caller has
    signalled the server), options get NBD_REP_ERR_SHUTDOWN (proto.md:
    a server shutting down SHOULD error further options but ABORT), and
    ABORT still gets its ACK before the server closes."""
    deadline = time.monotonic() + 15
    while not os.path.exists(signalled):
        check(time.monotonic() < deadline, "the caller never signalled")
        time.sleep(0.01)
    # The stop reaches the worker a moment after the signal: until then
    # a LIST is answered as usual.  The option limit allows ~30 tries,
    # spaced so that a loaded machine has ~2 s to deliver the signal.
    for _ in range(30):
        c.send_opt(raw.OPT_LIST)
        final = c.opt_replies(raw.OPT_LIST)[-1][0]
        if final == raw.REP_ERR_SHUTDOWN:
            break
        check(final == raw.REP_ACK, f"LIST at shutdown: reply {final:#x}")
        time.sleep(0.07)
    else:
        fail("no NBD_REP_ERR_SHUTDOWN for an option sent after the signal")
    c.send_opt(raw.OPT_GO, raw.Raw.info_data(""))
    rtype = c.opt_reply(raw.OPT_GO)[0]
    check(rtype == raw.REP_ERR_SHUTDOWN, f"GO at shutdown: reply {rtype:#x}")
    c.send_opt(raw.OPT_ABORT)
    rtype = c.opt_reply(raw.OPT_ABORT)[0]
    check(rtype == raw.REP_ACK, f"ABORT at shutdown: reply {rtype:#x}")


def hold(signalled):
    """Connections in every state: just connected, mid-handshake, idle in
    transmission, and with a read in flight.  Prints "ready", then waits
    until the server (sent SIGTERM by the caller) has closed all of them;
    the read in flight must be answered first.  One more negotiates on
    through the shutdown (negotiate_through_shutdown)."""
    sock = os.environ["NBD_SOCK"]
    conns = []
    try:
        conns.append(raw.Raw(sock))                      # greeting only
        c = raw.Raw(sock)
        c.start(structured=False)
        c.send(c.opt_bytes(raw.OPT_LIST)[:7])            # half an option
        conns.append(c)
        conns.append(raw.connect_go(sock))              # idle
        busy = raw.connect_go(sock)
        conns.append(busy)
        talker = raw.Raw(sock)
        talker.start(structured=False)
    except raw.Fail as e:
        fail(str(e))
    print("ready", flush=True)
    # Sent after "ready": the caller's SIGTERM may come before or after
    # the server reads it, so the reply is optional, but a reply, if any,
    # must be whole and right.
    busy.request(raw.CMD_READ, 1, 0, BLOCK)
    try:
        negotiate_through_shutdown(talker, signalled)
    except raw.Fail as e:
        fail(str(e))
    conns.append(talker)
    for i, c in enumerate(conns):
        c.sock.settimeout(15)
        try:
            if c is busy:
                try:
                    r = c.full_reply(1)
                    check(c.error_of(r) in (0, raw.ESHUTDOWN),
                          f"read during shutdown: error {c.error_of(r)}")
                except raw.Closed:
                    pass
            c.expect_closed(f"connection {i} at shutdown", 15)
        except raw.Fail as e:
            fail(str(e))
    log("hold: the server closed every connection")


def unstarted():
    """SIGTERM while the server holds requests it has read but not
    started.  A delay rule holds every read for seconds, so: on A
    (structured) and B (simple replies) 256 reads start (the
    per-connection limit) and the rest wait, read, behind them, on A
    with writes and a write whose payload is half sent; on C, 32 MiB
    reads fill the worker's --inflight-memory share and the next waits
    for buffer room; on D, sent after C's, a 32 KiB write waits for
    buffer room too, its whole payload read and kept in the connection's
    stash, with reads, a write and a flush behind it there (none of D's
    starts); on E, a 32 MiB write waits for buffer room with a part of its
    payload sent; on F, a 1 MiB write is partly received.
    Each connection's requests go in one send, small enough to reach the
    server at once.  Then SIGTERM: the started reads are answered with
    their data, every other request the server read gets NBD_ESHUTDOWN
    (proto.md: a server shutting down SHOULD serve what is in flight, and
    errors it gives for it SHOULD be ESHUTDOWN), and none is left
    unanswered.  A write whose payload the client is still sending is not
    all read, and gets no answer (before, NBD_ESHUTDOWN, which libnbd took
    for a reply to no command of its: "no matching cookie found for
    server reply, this is probably a bug in the server")."""
    sock = os.environ["NBD_SOCK"]
    pid = int(os.environ["SERVER_PID"])
    conns = {}
    try:
        # cut: the length of a last write, and the part of its payload sent
        for name, structured, reads, rlen, writes, cut in (
                ("A", True, 300, BLOCK, 3, (BLOCK, 256)),
                ("B", False, 300, BLOCK, 0, None),
                ("C", True, 5, 32 * M, 0, None),
                ("D", True, 3, BLOCK, 1, None),
                ("E", True, 0, 0, 0, (32 * M, 128 * 1024)),
                ("F", True, 0, 0, 0, (M, 300 * 1024))):
            c = raw.connect_go(sock, structured=structured, timeout=30)
            blob = b""
            if name == "D":
                # C's reads took the share: this write waits for room,
                # and nothing behind it starts.
                blob += c.req_bytes(raw.CMD_WRITE, 0, 56 * M, 32 * K,
                                    payload=b"d" * (32 * K))
                for j in range(1, reads + 1):
                    blob += c.req_bytes(raw.CMD_READ, j, j * BLOCK, BLOCK)
                    c.note_read(j, BLOCK)
                blob += c.req_bytes(raw.CMD_WRITE, reads + 1, 57 * M, 512,
                                    payload=b"e" * 512)
                blob += c.req_bytes(raw.CMD_FLUSH, reads + 2)
                c.send(blob)
                conns[name] = (c, 0, reads + 3)
                continue
            for j in range(reads):
                blob += c.req_bytes(raw.CMD_READ, j, j * rlen % (32 * M),
                                    rlen)
                c.note_read(j, rlen)
            for j in range(reads, reads + writes):
                blob += c.req_bytes(raw.CMD_WRITE, j, 40 * M + j * 512, 512,
                                    payload=b"w" * 512)
            if cut:  # a last write, its payload cut short
                blob += c.req_bytes(raw.CMD_WRITE, reads + writes, 48 * M,
                                    cut[0], payload=b"h" * cut[1])
            c.send(blob)
            conns[name] = (c, reads, reads + writes)
            if name == "C":
                time.sleep(0.5)  # its reads take the share before D's write
        time.sleep(1)  # read by the server, the reads held by the delay
        os.kill(pid, signal.SIGTERM)
        for name, (c, reads, total) in conns.items():
            got = {}
            try:
                while True:
                    r = c.full_reply()
                    check(r[0].cookie not in got,
                          f"{name}: cookie {r[0].cookie} answered twice")
                    got[r[0].cookie] = c.error_of(r)
            except raw.Closed:
                pass
            check(total not in got,
                  f"{name}: the write whose payload was cut short "
                  f"(cookie {total}) was answered")
            check(sorted(got) == list(range(total)),
                  f"{name}: {total} requests sent, answered "
                  f"{len(got)}: {sorted(set(range(total)) - set(got))[:8]} "
                  f"... left without a reply")
            if not total:
                log(f"unstarted: {name}: the write cut short got no answer")
                c.close()
                continue
            ok = [k for k in range(total) if got[k] == 0]
            check(ok == list(range(len(ok))) and
                  (0 < len(ok) < reads if reads else not ok),
                  f"{name}: requests served {ok[:8]}...: not the first "
                  f"few reads" if reads else f"{name}: served {ok[:8]}")
            check(all(got[k] == raw.ESHUTDOWN for k in range(len(ok), total)),
                  f"{name}: errors {sorted(set(got.values()))}, expected "
                  f"only NBD_ESHUTDOWN ({raw.ESHUTDOWN})")
            log(f"unstarted: {name}: {len(ok)} served, "
                f"{total - len(ok)} got NBD_ESHUTDOWN")
            c.close()
    except raw.Fail as e:
        fail(str(e))


cmd = sys.argv[1]
if cmd == "load":
    load(sys.argv[2])
elif cmd == "verify":
    verify(sys.argv[2])
elif cmd == "disconnects":
    disconnects()
elif cmd == "hold":
    hold(sys.argv[2])
elif cmd == "unstarted":
    unstarted()
elif cmd == "idle":
    idle(int(sys.argv[2]))
else:
    fail(f"unknown command {cmd}")
