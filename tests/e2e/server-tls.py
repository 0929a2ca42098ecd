# SPDX-License-Identifier: MIT
"""server-tls.py - the NBD_OPT_STARTTLS rules of the spec, by hand over
bionbd's unix socket (standard library only; nbd_raw.py, with Python's ssl
for TLS).  Run by test-server-tls.sh, which sets:

  NBD_SOCK    the server's unix socket
  SERVER_PID  its pid (to count its open connections)
  TLS_MODE    "require" or "on" (the server's --tls)
  TLS_CA      the CA certificate that signed the server's
  SIZE        the export size (at least 40 MiB, writable)
  SHUTDOWN    if set, only the case that stops the server (SIGTERM)
"""
import os
import signal
import socket
import ssl
import threading
import time

import nbd_raw as raw
from nbd_raw import (CMD_READ, CMD_WRITE, OPT_ABORT, OPT_EXPORT_NAME,
                     OPT_GO, OPT_INFO, OPT_LIST, OPT_LIST_META_CONTEXT,
                     OPT_SET_META_CONTEXT, OPT_STARTTLS, OPT_STRUCTURED_REPLY,
                     REP_ACK, REP_ERR_INVALID, REP_ERR_TLS_REQD, REP_SERVER,
                     Raw, check, pattern)

sock = os.environ["NBD_SOCK"]
pid = int(os.environ["SERVER_PID"])
mode = os.environ["TLS_MODE"]
ctx = raw.tls_context(os.environ["TLS_CA"])
size = int(os.environ["SIZE"])
K, M = 1024, 1 << 20


def plain():
    """A plaintext connection after valid client flags."""
    c = Raw(sock, tls=False)
    c.start(structured=False)
    return c


def upgraded(structured=True):
    c = plain()
    c.starttls(ctx)
    if structured:
        c.send_opt(OPT_STRUCTURED_REPLY)
        check(c.opt_reply(OPT_STRUCTURED_REPLY)[0] == REP_ACK,
              "STRUCTURED_REPLY over TLS")
        c.structured = True
    return c


def wait_conns(want, what, limit=15.0):
    deadline = time.monotonic() + limit
    while raw.server_conns(pid) != want:
        check(time.monotonic() < deadline,
              f"{what}: the server holds {raw.server_conns(pid)} "
              f"connections, expected {want}")
        time.sleep(0.02)


def disc(c):
    c.send(c.req_bytes(raw.CMD_DISC, 0))
    c.expect_closed("after NBD_CMD_DISC")
    c.close()


def before_starttls():
    """require: every option but STARTTLS and ABORT is refused with
    NBD_REP_ERR_TLS_REQD and the handshake goes on; on: they work."""
    c = plain()
    opts = [(OPT_LIST, b""), (OPT_INFO, c.info_data("")),
            (OPT_GO, c.info_data("")), (OPT_STRUCTURED_REPLY, b""),
            (OPT_LIST_META_CONTEXT, c.meta_data("", ["base:allocation"])),
            (OPT_SET_META_CONTEXT, c.meta_data("", ["base:allocation"])),
            (0x4242, b"x" * 10)]
    if mode == "on":
        c.send_opt(OPT_LIST)
        reps = c.opt_replies(OPT_LIST)
        check(reps[0][0] == REP_SERVER and reps[-1][0] == REP_ACK,
              f"--tls=on: LIST in plaintext answered {reps}")
        c.go("")
        check(c.read(0, 4 * K) is not None, "plaintext read")
        disc(c)
        return
    for opt, data in opts:
        c.send_opt(opt, data)
        reps = c.opt_replies(opt)
        check(len(reps) == 1 and reps[0][0] == REP_ERR_TLS_REQD,
              f"option {opt} before STARTTLS answered "
              f"{[hex(t) for t, _ in reps]}, expected NBD_REP_ERR_TLS_REQD")
    # STARTTLS with data is invalid (and not an upgrade).
    c.send_opt(OPT_STARTTLS, b"junk")
    check(c.opt_reply(OPT_STARTTLS)[0] == REP_ERR_INVALID,
          "STARTTLS with data")
    # Still negotiating: the upgrade works after all that.
    c.starttls(ctx)
    c.structured = False
    c.go("")
    data = pattern(3, 8 * K)
    check(c.cmd(CMD_WRITE, 0, len(data), payload=data) == 0, "write")
    check(c.read(0, len(data)) == data, "read back")
    disc(c)


def export_name_plaintext():
    """require: NBD_OPT_EXPORT_NAME before TLS cannot be refused: closed
    with nothing sent.  on: it enters transmission."""
    c = plain()
    c.send_opt(OPT_EXPORT_NAME, b"")
    if mode == "require":
        c.expect_closed("NBD_OPT_EXPORT_NAME before STARTTLS")
        c.close()
        return
    reply = c.recv_exact(10)  # size and flags; NO_ZEROES was negotiated
    check(int.from_bytes(reply[:8], "big") == size, "EXPORT_NAME size")
    disc(c)


def abort_plaintext():
    c = plain()
    c.send_opt(OPT_ABORT)
    rtype, _ = c.opt_reply(OPT_ABORT)
    check(rtype == REP_ACK, f"ABORT before STARTTLS answered {rtype:#x}")
    c.expect_closed("after ABORT")
    c.close()


def starttls_twice():
    c = upgraded(structured=False)
    c.send_opt(OPT_STARTTLS)
    check(c.opt_reply(OPT_STARTTLS)[0] == REP_ERR_INVALID,
          "a second STARTTLS must get NBD_REP_ERR_INVALID")
    c.go("")
    c.read(0, 4 * K)
    disc(c)


def state_forgotten():
    """Structured replies and meta contexts negotiated before STARTTLS do
    not survive it (only possible in plaintext under --tls=on)."""
    if mode != "on":
        return
    c = plain()
    c.send_opt(OPT_STRUCTURED_REPLY)
    check(c.opt_reply(OPT_STRUCTURED_REPLY)[0] == REP_ACK, "SR")
    c.send_opt(OPT_SET_META_CONTEXT, c.meta_data("", ["base:allocation"]))
    check(c.opt_replies(OPT_SET_META_CONTEXT)[-1][0] == REP_ACK, "SET_META")
    c.starttls(ctx)
    c.structured = False
    c.go("")
    c.request(CMD_READ, 9, 0, 4 * K)
    r = c.reply()
    check(r.simple, "structured replies survived NBD_OPT_STARTTLS: "
          f"got {r}")
    c.request(raw.CMD_BLOCK_STATUS, 10, 0, 4 * K)
    r = c.reply()
    check(r.simple and r.error == raw.EINVAL,
          f"BLOCK_STATUS after STARTTLS without SET_META: {r}")
    disc(c)


def big_and_many():
    """32 MiB each way (a record straight from the buffer), then 500
    pipelined 4 KiB reads (replies sharing records)."""
    c = upgraded()
    c.go("")
    data = pattern(11, 32 * M)
    check(c.cmd(CMD_WRITE, 0, len(data), payload=data) == 0, "32 MiB write")
    check(c.read(0, len(data)) == data, "32 MiB read back")
    blob = b""
    for i in range(500):
        blob += c.req_bytes(CMD_READ, 100 + i, i * 4 * K, 4 * K)
        c.note_read(100 + i, 4 * K)
    c.send(blob)
    got = {}
    while len(got) < 500:
        chunks = c.full_reply()
        i = chunks[0].cookie - 100
        got[100 + i] = c.read_data(chunks, i * 4 * K, 4 * K)
    for i in range(500):
        check(got[100 + i] == data[i * 4 * K:(i + 1) * 4 * K],
              f"pipelined read {i}: wrong data")
    disc(c)


def closed_with_close_notify(c, what):
    """The server ended TLS (close_notify) before closing: the spec's
    SHOULD for whoever initiates a disconnect (a MUST after DISC)."""
    s = c.sock
    while True:
        try:
            with s.obj_lock:
                d = s.obj.read(65536)
            # b"" is a close_notify: the context takes a bare EOF as an
            # error (OP_IGNORE_UNEXPECTED_EOF cleared).
            check(d == b"", f"{what}: {len(d)} more bytes")
            c.close()
            return
        except ssl.SSLWantReadError:
            s._feed()
        except ssl.SSLError as e:
            raise raw.Fail(f"{what}: closed without close_notify ({e})")


def hangups_end_tls():
    """Every close of the server's on a working TLS session sends
    close_notify first: after DISC (with a request in flight), and when it
    hangs up (an EXPORT_NAME it cannot serve, NBD_OPT_ABORT, bad magic in
    the handshake and in a request, a WRITE over 32 MiB)."""
    strict = raw.tls_context(os.environ["TLS_CA"])
    strict.options &= ~ssl.OP_IGNORE_UNEXPECTED_EOF

    def up():
        c = plain()
        c.starttls(strict)
        return c

    c = up()
    c.go("")
    c.send(c.req_bytes(CMD_READ, 1, 0, 64 * K) + c.req_bytes(raw.CMD_DISC, 2))
    c.note_read(1, 64 * K)
    c.read_data(c.full_reply(1), 0, 64 * K)
    closed_with_close_notify(c, "DISC")
    c = up()
    c.send_opt(OPT_EXPORT_NAME, b"no-such-export")
    closed_with_close_notify(c, "EXPORT_NAME of an unknown export")
    c = up()
    c.send_opt(OPT_ABORT)
    check(c.opt_reply(OPT_ABORT)[0] == REP_ACK, "ABORT over TLS")
    closed_with_close_notify(c, "ABORT")
    c = up()
    c.send(b"x" * 16)
    closed_with_close_notify(c, "bad option magic")
    c = up()
    c.go("")
    c.send(c.req_bytes(CMD_READ, 1, 0, 512, magic=0x12345678))
    closed_with_close_notify(c, "bad request magic")
    c = up()
    c.go("")
    c.send(c.req_bytes(CMD_WRITE, 1, 0, 64 * M))
    closed_with_close_notify(c, "WRITE of 64 MiB")


def broken_handshakes():
    """Clients that go wrong after STARTTLS's ACK: garbage for a
    ClientHello, hanging up, or saying nothing (the handshake time limit
    ends it).  None of them disturbs a client that is busy meanwhile."""
    stop = threading.Event()
    errors = []

    def busy():
        try:
            c = upgraded()
            c.go("")
            n = 0
            while not stop.is_set():
                d = pattern(n, 64 * K)
                off = 8 * M + (n % 16) * 64 * K
                check(c.cmd(CMD_WRITE, off, len(d), payload=d) == 0, "w")
                check(c.read(off, len(d)) == d, "busy client: wrong data")
                n += 1
            disc(c)
            check(n > 0, "the busy client got nothing done")
        except Exception as e:  # reported by the main thread
            errors.append(e)

    t = threading.Thread(target=busy)
    t.start()
    silent = []
    for i in range(5):
        c = plain()
        c.send_opt(OPT_STARTTLS)
        check(c.opt_reply(OPT_STARTTLS)[0] == REP_ACK, "STARTTLS")
        if i == 0:
            c.send(b"\x16\x03\x01\x00\x05hello" + b"\xff" * 64)
            c.expect_closed("garbage instead of a ClientHello")
        elif i == 1:
            c.sock.shutdown(socket.SHUT_RDWR)
        else:
            silent.append(c)
            continue
        c.close()
    time.sleep(0.5)
    stop.set()
    t.join(60)
    check(not t.is_alive(), "the busy client hangs")
    if errors:
        raise errors[0]
    # The silent ones go when the handshake time limit (2 s) runs out.
    for c in silent:
        c.expect_closed("silent after STARTTLS", timeout=15)
        c.close()


def negotiating_at_shutdown():
    """SIGTERM while a client negotiates over TLS and then says nothing:
    once the 2 s the server gives such clients have run out, it ends TLS
    (close_notify) before it closes, as its other hang-ups do."""
    strict = raw.tls_context(os.environ["TLS_CA"])
    strict.options &= ~ssl.OP_IGNORE_UNEXPECTED_EOF
    c = plain()
    c.starttls(strict)
    os.kill(pid, signal.SIGTERM)
    closed_with_close_notify(c, "negotiating at shutdown")


# SHUTDOWN=1: only the case that stops the server.
if os.environ.get("SHUTDOWN"):
    raw.run_cases([("a client negotiating over TLS at shutdown",
                    negotiating_at_shutdown)])
    raise SystemExit(0)

raw.run_cases([
    ("options before STARTTLS", before_starttls),
    ("NBD_OPT_EXPORT_NAME in plaintext", export_name_plaintext),
    ("NBD_OPT_ABORT in plaintext", abort_plaintext),
    ("STARTTLS twice", starttls_twice),
    ("negotiation state forgotten", state_forgotten),
    ("32 MiB and 500 pipelined reads over TLS", big_and_many),
    ("the server's hang-ups end TLS first", hangups_end_tls),
    ("broken TLS handshakes beside a busy client", broken_handshakes),
], after=lambda name: wait_conns(0, f"after {name}"))
