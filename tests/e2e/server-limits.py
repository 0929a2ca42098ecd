# SPDX-License-Identifier: MIT
"""Raw-protocol cases for test-server-limits.sh (which see).  CASES picks
the groups: flood, idle, maxconn, fds."""
import os
import socket
import time

import nbd
import nbd_raw as raw
from nbd_raw import Raw, check, connect_go, log, run_cases, server_conns

sock = os.environ["NBD_SOCK"]
pid = int(os.environ["SERVER_PID"])
cases = os.environ["CASES"].split(",")
OPT_LIST = 3


def rss_kib():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise raw.Fail("no VmRSS")


def cpu_s():
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def works(what):
    h = nbd.NBD()
    h.connect_uri(f"nbd+unix:///?socket={sock}")
    check(h.get_size() > 0, f"{what}: no size")
    h.pread(4096, 0)
    h.shutdown()


def flood():
    base_conns = server_conns(pid)
    before = rss_kib()
    floods = []
    for _ in range(2):
        c = Raw(sock)
        c.start(structured=False)
        c.sock.setblocking(False)
        sent = 0
        data = c.opt_bytes(OPT_LIST) * 1024
        t = time.monotonic()
        # Send what the server takes; it stops reading once a reply waits.
        while sent < len(data) and time.monotonic() - t < 2:
            try:
                sent += c.sock.send(data[sent:])
            except BlockingIOError:
                time.sleep(0.05)
        floods.append(c)
    time.sleep(0.5)
    grown = rss_kib() - before
    log(f"two unread LIST floods: RSS grew {grown // 1024} MiB")
    check(grown < 32 * 1024, f"RSS grew by {grown} KiB")
    works("a client during the floods")
    # Never reading, they are cut off by the handshake time limit (4 s).
    t = time.monotonic()
    while server_conns(pid) > base_conns and time.monotonic() - t < 10:
        time.sleep(0.2)
    dt = time.monotonic() - t
    check(server_conns(pid) == base_conns,
          f"flooders still connected {dt:.1f} s later")
    log(f"flooders cut off {dt:.1f} s after the check, never having read")
    for c in floods:
        c.close()


def idle():
    c = Raw(sock)
    t = time.monotonic()
    c.expect_closed("idle client", timeout=10)
    dt = time.monotonic() - t
    check(dt > 1.5, f"idle client dropped after {dt:.2f} s, limit is 2 s")
    log(f"idle client dropped after {dt:.2f} s")
    c.close()
    works("after the idle client")


def maxconn():
    conns = [connect_go(sock) for _ in range(3)]
    extra = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    extra.settimeout(5)
    extra.connect(sock)
    try:
        b = extra.recv(64)
    except ConnectionResetError:
        b = b""
    check(b == b"", f"a 4th client got {len(b)} bytes, not a refusal")
    extra.close()
    for i, c in enumerate(conns):
        check(c.read(0, 4096) is not None, f"connection {i} after refusal")
    conns.pop().close()
    for _ in range(50):  # the worker notices the close, then a slot frees
        c = Raw(sock, greet=False)
        c.sock.settimeout(2)
        try:
            c.greeting()
            conns.append(c)
            break
        except raw.Closed:
            c.close()
            time.sleep(0.1)
    else:
        raise raw.Fail("no slot after a client left")
    for c in conns:
        c.close()


def fds():
    first = connect_go(sock)
    idle_socks = []
    for _ in range(200):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(sock)
        except (BlockingIOError, ConnectionRefusedError, OSError):
            pass
        idle_socks.append(s)
    time.sleep(0.5)
    c0 = cpu_s()
    time.sleep(3)
    used = cpu_s() - c0
    log(f"200 idle clients under ulimit -n 64: {used:.2f} s CPU in 3 s")
    check(used < 0.3, f"server used {used:.2f} s of CPU in 3 s")
    check(first.read(0, 4096) is not None, "the existing client")
    for s in idle_socks:
        s.close()
    first.close()


groups = {
    "flood": [("options flood", flood)],
    "idle": [("idle client", idle)],
    "maxconn": [("max connections", maxconn)],
    "fds": [("out of descriptors", fds)],
}
run_cases([case for g in cases for case in groups[g]])
