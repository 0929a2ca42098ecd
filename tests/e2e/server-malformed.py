# SPDX-License-Identifier: MIT
"""server-malformed.py - hand-written NBD traffic against bionbd over its
unix socket (standard library only; the protocol side is nbd_raw.py).  Run
by test-server-malformed.sh, which sets:

  NBD_SOCK      the server's unix socket
  SERVER_PID    its pid (to count its open connections)
  SIZE          the export size (at least 40 MiB, writable)

After every case: the server has closed every connection the case opened
(none left behind), a fresh raw connection writes and reads back, and
nbdinfo still sees the export.
"""
import os
import socket
import struct
import subprocess
import threading
import time

import nbd_raw as raw
from nbd_raw import (CMD_BLOCK_STATUS, CMD_DISC, CMD_FLUSH, CMD_READ,
                     CMD_WRITE, CMD_WRITE_ZEROES, EINVAL, ENOSPC, EOVERFLOW,
                     OPT_ABORT, OPT_GO, OPT_INFO, OPT_LIST,
                     OPT_SET_META_CONTEXT, OPT_STRUCTURED_REPLY, REP_ACK,
                     REP_ERR_INVALID, REP_ERR_UNSUP, Raw, check, connect_go,
                     pattern)

sock = os.environ["NBD_SOCK"]
pid = int(os.environ["SERVER_PID"])
size = int(os.environ["SIZE"])
K, M = 1024, 1 << 20
MAX = 32 * M
# nbdinfo checks the server between cases (NBD_URI: over TLS, say).
uri = os.environ.get("NBD_URI", f"nbd+unix:///?socket={sock}")


def wait_conns(want, what, limit=10.0):
    deadline = time.monotonic() + limit
    while True:
        got = raw.server_conns(pid)
        if got == want:
            return
        check(time.monotonic() < deadline,
              f"{what}: the server holds {got} connections, expected {want}")
        time.sleep(0.02)


serial = [0]


def still_serves(case):
    """Nothing left open; a new client writes and reads; nbdinfo works."""
    wait_conns(0, f"after {case}")
    serial[0] += 1
    off = (serial[0] % 64) * 64 * K + 40 * M - 4 * M
    data = pattern(serial[0], 8 * K)
    c = connect_go(sock)
    check(c.cmd(CMD_WRITE, off, len(data), payload=data) == 0,
          "check write failed")
    check(c.read(off, len(data)) == data, "check read: wrong data")
    c.send(c.req_bytes(CMD_DISC, 0))
    c.expect_closed("check connection after DISC")
    c.close()
    out = subprocess.run(["nbdinfo", "--size", uri], capture_output=True,
                         text=True, timeout=30)
    check(out.returncode == 0 and out.stdout.strip() == str(size),
          f"nbdinfo --size: rc {out.returncode}, {out.stdout!r} "
          f"{out.stderr!r}")
    wait_conns(0, f"after the checks of {case}")


def disc(c, what):
    c.send(c.req_bytes(CMD_DISC, 0))
    c.expect_closed(what)
    c.close()


# ---------------------------------------------------------------- handshake

def unknown_flags():
    for flags in (1 << 5, raw.FLAG_C_FIXED_NEWSTYLE | (1 << 5),
                  raw.FLAG_C_FIXED_NEWSTYLE | (1 << 31)):
        c = Raw(sock)
        c.client_flags(flags)
        c.expect_closed(f"client flags {flags:#x}")
        c.close()


def plain_newstyle():
    """No NBD_FLAG_C_FIXED_NEWSTYLE: a plain newstyle client, whose one
    option is NBD_OPT_EXPORT_NAME (served, or under --tls=require refused
    by hanging up: such a client cannot start TLS); any other option, to
    which it could not read a reply, ends the connection."""
    for flags in (0, raw.FLAG_C_NO_ZEROES):
        c = Raw(sock)
        c.client_flags(flags)
        c.send_opt(raw.OPT_EXPORT_NAME, b"")
        if c.tls:
            c.expect_closed("EXPORT_NAME of a plain newstyle client in "
                            "plaintext")
            c.close()
            continue
        b = c.recv_exact(10 if flags else 134)
        esize, tflags = struct.unpack(">QH", b[:10])
        check(esize == size and tflags & raw.FLAG_HAS_FLAGS,
              f"client flags {flags:#x}: EXPORT_NAME gave {b[:10].hex()}")
        check(b[10:] == bytes(len(b) - 10), "EXPORT_NAME: padding not zero")
        c.read(0, 4 * K)
        disc(c, f"client flags {flags:#x}: DISC")
    for opt, data in ((OPT_GO, Raw.info_data("")), (raw.OPT_LIST, b""),
                      (OPT_STRUCTURED_REPLY, b"")):
        c = Raw(sock)
        c.client_flags(0)
        c.send_opt(opt, data)
        c.expect_closed(f"option {opt} from a plain newstyle client")
        c.close()


def truncated_handshake():
    c = Raw(sock)
    c.send(b"\0\0")  # half the client flags
    c.close()
    c = Raw(sock)
    c.start(structured=False)
    c.send(c.opt_bytes(OPT_GO, b"")[:9])  # half an option header
    c.close()
    c = Raw(sock)
    c.start(structured=False)
    c.send_opt(OPT_GO, b"\0" * 10, length=100)  # 10 of 100 bytes
    c.close()
    c = Raw(sock, greet=False)  # not even the greeting read
    c.close()


def absurd_option_length():
    for n in (0xFFFFFFFF, 0x80000000, 64 * K + 1):
        c = Raw(sock)
        c.start(structured=False)
        c.send_opt(0x4242, length=n)
        c.expect_closed(f"option length {n:#x}")
        c.close()


def unknown_option():
    c = Raw(sock)
    c.start(structured=False)
    # STARTTLS: refused by policy without TLS, invalid once TLS is on.
    tls_rep = raw.REP_ERR_INVALID if c.tls else raw.REP_ERR_POLICY
    # 4 (PEEK_EXPORT, withdrawn) and 11 (EXTENDED_HEADERS, which newer
    # clients try first): options this server does not implement.
    for opt, data, want in ((0x4242, b"", REP_ERR_UNSUP),
                            (4, b"", REP_ERR_UNSUP),
                            (11, b"", REP_ERR_UNSUP),
                            (0x7FFFFFFF, b"x" * 100, REP_ERR_UNSUP),
                            (raw.OPT_STARTTLS, b"", tls_rep),
                            (0x4343, b"y" * 60000, REP_ERR_UNSUP)):
        c.send_opt(opt, data)
        rtype, _ = c.opt_reply(opt)
        check(rtype == want,
              f"option {opt:#x}: reply {rtype:#x}, expected {want:#x}")
    # The handshake goes on.
    c.send_opt(OPT_STRUCTURED_REPLY)
    check(c.opt_reply(OPT_STRUCTURED_REPLY)[0] == REP_ACK,
          "STRUCTURED_REPLY after unknown options")
    c.structured = True
    c.go("")
    c.read(0, 4 * K)
    disc(c, "DISC after unknown options")


def option_errors():
    c = Raw(sock)
    c.start(structured=False)
    bad = [
        (OPT_INFO, struct.pack(">I", 100) + b"ab" + b"\0\0"),  # name too long
        (OPT_GO, struct.pack(">I", 0) + struct.pack(">H", 5)),  # 5 infos, 0
        (OPT_GO, b"\0\0\0"),                                   # too short
        (OPT_LIST, b"x"),                                      # LIST + data
        (OPT_STRUCTURED_REPLY, b"x"),
        (OPT_SET_META_CONTEXT, c.meta_data("", ["base:allocation"])),
    ]
    for opt, data in bad:
        c.send_opt(opt, data)
        reps = c.opt_replies(opt)
        check(reps[-1][0] == REP_ERR_INVALID,
              f"option {opt} with bad data {data[:16].hex()}: "
              f"{reps[-1][0]:#x}")
    c.send_opt(OPT_STRUCTURED_REPLY)
    check(c.opt_reply(OPT_STRUCTURED_REPLY)[0] == REP_ACK, "STRUCTURED_REPLY")
    c.structured = True
    md = c.meta_data("", ["base:allocation"])
    for data in (md[:-3],                      # query cut short
                 md[:8] + struct.pack(">I", 99) + md[12:],  # bad query len
                 c.meta_data("", ["nonamespace"])):
        c.send_opt(OPT_SET_META_CONTEXT, data)
        reps = c.opt_replies(OPT_SET_META_CONTEXT)
        check(reps[-1][0] == REP_ERR_INVALID,
              f"SET_META_CONTEXT {data.hex()}: {reps[-1][0]:#x}")
    c.go("")
    # No context survived the failed SETs.
    c.request(CMD_BLOCK_STATUS, 1, 0, 4 * K)
    check(c.error_of(c.full_reply(1)) == EINVAL,
          "block status after failed SET_META_CONTEXT")
    disc(c, "DISC after option errors")


def too_many_options():
    c = Raw(sock)
    c.start(structured=False)
    c.send(c.opt_bytes(0x4242) * 1100)
    n = 0
    try:
        while True:
            rtype, _ = c.opt_reply(0x4242)
            check(rtype == REP_ERR_UNSUP, f"reply {rtype:#x}")
            n += 1
    except raw.Closed:
        pass
    # 32 + 4 per export (this server has one)
    check(n <= 36, f"{n} of 1100 options in one handshake answered")
    log_info(f"too many options: dropped after {n} answers")
    c.close()


def opt_abort():
    c = Raw(sock)
    c.start(structured=True)
    c.send_opt(OPT_ABORT)
    rtype, data = c.opt_reply(OPT_ABORT)
    check(rtype == REP_ACK and data == b"", f"ABORT reply {rtype:#x}")
    c.expect_closed("after NBD_OPT_ABORT")
    c.close()
    # Abort and hang up at once, as nbdinfo --list does: the ACK cannot
    # be sent, and the server must still let go of the connection.
    for _ in range(20):
        c = Raw(sock)
        c.start(structured=False)
        c.send_opt(OPT_ABORT)
        c.sock.shutdown(2)
        c.close()


def go_then_pipelined():
    """Requests sent in the same packet as NBD_OPT_GO."""
    data = pattern(7, 4 * K)
    c = connect_go(sock)
    check(c.cmd(CMD_WRITE, 4 * M, len(data), payload=data) == 0, "write")
    disc(c, "DISC after write")
    for structured in (True, False):
        c = Raw(sock)
        c.start(structured=structured)
        c.send(c.opt_bytes(OPT_GO, c.info_data(""))
               + c.req_bytes(CMD_READ, 2, 4 * M, len(data))
               + c.req_bytes(CMD_WRITE, 3, 4 * M + 4 * K, len(data),
                             payload=data))
        c.note_read(2, len(data))
        reps = c.opt_replies(OPT_GO)
        check(reps[-1][0] == REP_ACK, "GO")
        got = {}
        while len(got) < 2:
            r = c.full_reply()
            got[r[0].cookie] = r
        check(c.read_data(got[2], 4 * M, len(data)) == data,
              "read sent with GO: wrong data")
        check(c.error_of(got[3]) == 0, "write sent with GO failed")
        check(c.read(4 * M + 4 * K, len(data)) == data,
              "write sent with GO: wrong data")
        disc(c, "DISC after GO + requests")


# ---------------------------------------------------------------- requests

def bad_magic():
    for magic in (0x12345678, raw.SIMPLE_REPLY_MAGIC, 0):
        c = connect_go(sock)
        c.send(c.req_bytes(CMD_READ, 1, 0, 4 * K, magic=magic))
        c.expect_closed(f"request magic {magic:#x}")
        c.close()


def truncated_request():
    c = connect_go(sock)
    c.send(c.req_bytes(CMD_READ, 1, 0, 4 * K)[:10])
    c.close()
    c = connect_go(sock)
    c.send(c.req_bytes(CMD_WRITE, 1, 0, 64 * K, payload=b"z" * 1000))
    c.close()
    c = connect_go(sock)  # a big write, cut short: payload read directly
    c.send(c.req_bytes(CMD_WRITE, 1, 0, 1 * M, payload=b"z" * 300 * K))
    c.close()
    # None of it was written.
    c = connect_go(sock)
    check(c.read(0, 4 * K) != b"z" * 4 * K, "a truncated write was written")
    disc(c, "DISC after truncated requests")


def unknown_command():
    for structured in (True, False):
        c = connect_go(sock, structured=structured)
        for i, (cmd, off, n) in enumerate(((8, 0, 4 * K), (9, 0, 0),
                                           (0xFFFF, 1 << 62, 1 << 30),
                                           (0x100, 0, 4 * K))):
            c.request(cmd, 100 + i, off, n)
            r = c.full_reply(100 + i)
            err = c.error_of(r)
            check(err == EINVAL, f"command {cmd:#x}: error {err}, want EINVAL")
            # With structured replies an error SHOULD be an error chunk.
            check(len(r) == 1 and r[0].simple != structured and
                  (r[0].simple or r[0].type == raw.REPLY_TYPE_ERROR),
                  f"command {cmd:#x}, structured {structured}: reply {r}")
            # ... and its text says why, for a human (proto.md).
            check(r[0].simple or r[0].message == "unknown command",
                  f"command {cmd:#x}: message {r[0].message!r}")
            check(c.read(0, 4 * K) is not None, "read after unknown command")
        disc(c, "DISC after unknown commands")


def fake_requests(n):
    """n bytes of valid-looking READ headers (cookie 0xBAD...): if a server
    took a write payload for requests, it would answer these."""
    one = Raw.req_bytes(CMD_READ, 0xBAD0000 + 1, 0, 512)
    return (one * (n // len(one) + 1))[:n]


def write_past_end():
    c = connect_go(sock)
    tail = pattern(3, 8 * K)
    check(c.cmd(CMD_WRITE, size - len(tail), len(tail), payload=tail) == 0,
          "write of the last 8K")
    cases = [
        (ENOSPC, 0, size - 4 * K, 8 * K),     # across the end
        (ENOSPC, 0, size, 4 * K),             # just past it
        (ENOSPC, 0, (1 << 64) - 4 * K, 8 * K),  # wrapping
        (ENOSPC, 0, size - 4 * K, MAX),       # the largest payload
        (0, 0, 100, 512),                     # unaligned offset: served
        (0, 0, 0, 100),                       # unaligned length: served
        (EINVAL, raw.CMD_FLAG_DF, 0, 4 * K),  # flag not for WRITE
        (EINVAL, 1 << 9, 0, 4 * K),           # unknown flag
    ]
    for i, (want, flags, off, n) in enumerate(cases):
        c.request(CMD_WRITE, 200 + i, off, n, flags, fake_requests(n))
        r = c.full_reply(200 + i)
        check(c.error_of(r) == want,
              f"write {off}+{n} flags {flags:#x}: error "
              f"{c.error_of(r)}, want {want}")
        check(not want or (len(r) == 1 and not r[0].simple and
                           r[0].type == raw.REPLY_TYPE_ERROR),
              f"write {off}+{n}: a structured error chunk, not {r}")
        why = ("the request goes past the end of the export"
               if want == ENOSPC else "a flag this command does not take")
        check(not want or r[0].message == why,
              f"write {off}+{n} flags {flags:#x}: message "
              f"{r[0].message!r}, want {why!r}")
        # The payload was consumed: the next request is answered, and
        # none of the fake headers inside the payload.
        check(c.read(size - len(tail), len(tail), cookie=300 + i) == tail,
              f"after write {off}+{n}: the end of the volume changed")
    disc(c, "DISC after refused writes")


def write_too_big():
    for n in (MAX + 512, 0xFFFFFFFF, 1 << 31):
        c = connect_go(sock)
        c.send(c.req_bytes(CMD_WRITE, 1, 0, n))
        c.expect_closed(f"WRITE of {n} bytes")
        c.close()


def read_too_big():
    for structured in (True, False):
        c = connect_go(sock, structured=structured)
        for i, n in enumerate((MAX + 512, 0xFFFFFE00, 1 << 31)):
            c.request(CMD_READ, 10 + i, 0, n)
            r = c.full_reply(10 + i)
            check(c.error_of(r) == EINVAL,
                  f"READ of {n} bytes: error {c.error_of(r)}, want EINVAL")
            check(all(not x.data for x in r), "error reply carried data")
            if structured:
                check(r[-1].type == raw.REPLY_TYPE_ERROR, "not an error chunk")
        if structured:
            c.request(CMD_READ, 20, 0, MAX + 512, raw.CMD_FLAG_DF)
            check(c.error_of(c.full_reply(20)) == EOVERFLOW,
                  "DF READ above the maximum: not EOVERFLOW")
        # The largest allowed read works.
        check(len(c.read(0, MAX)) == MAX, "32 MiB read")
        disc(c, "DISC after oversized reads")


def structured_rules():
    """Structured replies (proto.md): a READ refused for any reason is an
    error chunk, never a simple reply; a zero-length READ has no content
    chunk (each describes at least a byte); only the last chunk says DONE
    and nothing of the reply follows it; FUA is valid on every command,
    block status included."""
    c = Raw(sock)
    c.start(structured=True)
    c.send_opt(OPT_SET_META_CONTEXT, c.meta_data("", ["base:allocation"]))
    reps = c.opt_replies(OPT_SET_META_CONTEXT)
    check(reps[-1][0] == REP_ACK and len(reps) == 2,
          f"SET_META_CONTEXT base:allocation: {reps}")
    c.go("")

    def reply_then_flush(cookie, what):
        """The reply to @cookie; the FLUSH sent after it is answered next:
        no chunk of the reply came after its DONE."""
        r = c.full_reply(cookie)
        c.request(CMD_FLUSH, cookie + 1000)
        nxt = c.full_reply()
        check(nxt[0].cookie == cookie + 1000,
              f"{what}: a reply for cookie {nxt[0].cookie:#x} after DONE")
        check(all(not x.done for x in r[:-1]),
              f"{what}: DONE before the last chunk: {r}")
        return r

    for i, (flags, off, n, want) in enumerate((
            (raw.CMD_FLAG_NO_HOLE, 0, 4 * K, EINVAL),
            (raw.CMD_FLAG_REQ_ONE, 0, 4 * K, EINVAL),
            (raw.CMD_FLAG_DF | (1 << 9), 0, 4 * K, EINVAL),
            (0, size, 4 * K, EINVAL),
            (raw.CMD_FLAG_DF, size - 4 * K, 8 * K, EINVAL))):
        what = f"READ {off}+{n} flags {flags:#x}"
        c.request(CMD_READ, 10 + i, off, n, flags)
        r = reply_then_flush(10 + i, what)
        check(len(r) == 1 and not r[0].simple and
              r[0].type == raw.REPLY_TYPE_ERROR and r[0].done,
              f"{what}: not one final error chunk: {r}")
        check(r[0].error == want, f"{what}: error {r[0].error}")
    for i, off in enumerate((0, 4 * K + 1, size)):
        for flags in (0, raw.CMD_FLAG_DF):
            what = f"zero-length READ at {off} flags {flags:#x}"
            c.request(CMD_READ, 20 + i, off, 0, flags)
            r = reply_then_flush(20 + i, what)
            check(all(not x.simple and x.type in (raw.REPLY_TYPE_NONE,
                                                  raw.REPLY_TYPE_ERROR)
                      for x in r),
                  f"{what}: a content chunk for no bytes: {r}")
    for i, flags in enumerate((raw.CMD_FLAG_FUA,
                               raw.CMD_FLAG_FUA | raw.CMD_FLAG_REQ_ONE)):
        what = f"BLOCK_STATUS flags {flags:#x}"
        c.request(CMD_BLOCK_STATUS, 30 + i, 0, 64 * K, flags)
        r = reply_then_flush(30 + i, what)
        check(len(r) == 1 and r[0].type == raw.REPLY_TYPE_BLOCK_STATUS,
              f"{what}: {r}")
    disc(c, "DISC after the structured reply checks")


def collect(c, expect, out, errors):
    """Reader thread: expect whole replies into out[cookie]."""
    try:
        while expect > 0:
            r = c.full_reply()
            cookie = r[0].cookie
            check(cookie not in out, f"cookie {cookie:#x} answered twice")
            out[cookie] = r
            expect -= 1
    except Exception as e:  # reported by the main thread
        errors.append(e)


def pipeline(c, blob, expect, limit=60.0):
    """Send blob in one sendall while a thread reads expect replies."""
    out, errors = {}, []
    t = threading.Thread(target=collect, args=(c, expect, out, errors))
    t.start()
    c.send(blob)
    t.join(limit)
    check(not t.is_alive(), f"only {len(out)} of {expect} replies after "
          f"{limit} s")
    if errors:
        raise errors[0]
    return out


def pipelined_reads():
    base = 2 * M
    for structured in (True, False):
        c = connect_go(sock, structured=structured)
        data = pattern(11 + structured, 512 * K)
        check(c.cmd(CMD_WRITE, base, len(data), payload=data) == 0, "write")
        blob = b""
        for i in range(1000):
            off = (i * 7 % 1024) * 512
            blob += c.req_bytes(CMD_READ, i, base + off, 512)
            c.note_read(i, 512)
        out = pipeline(c, blob, 1000)
        check(len(out) == 1000, f"{len(out)} of 1000 reads answered")
        for i in range(1000):
            off = (i * 7 % 1024) * 512
            got = c.read_data(out[i], base + off, 512)
            check(got == data[off:off + 512], f"read {i} at {off}: wrong data")
        disc(c, "DISC after 1000 reads")


def pipelined_mixed():
    """1000 writes with payloads and reads in one send: more than the
    in-flight limit, so the server pauses, keeps the rest, and resumes."""
    base = 8 * M
    c = connect_go(sock)
    blob, model = [], {}
    for i in range(500):
        off = base + (i % 250) * 4 * K
        d = pattern(i, 4 * K)
        blob.append(c.req_bytes(CMD_WRITE, 2 * i, off, 4 * K, payload=d))
        model[off] = d
        # A read of a block written in an earlier round (stable by then).
        blob.append(c.req_bytes(CMD_READ, 2 * i + 1, base + 4 * K * 300, 4 * K))
        c.note_read(2 * i + 1, 4 * K)
    out = pipeline(c, b"".join(blob), 1000)
    for i in range(500):
        check(c.error_of(out[2 * i]) == 0, f"write {i} failed")
    # Writes to the same block may complete in any order; check the
    # blocks written once in the last round.
    for i in range(250, 500):
        off = base + (i % 250) * 4 * K
        got = c.read(off, 4 * K, cookie=5000 + i)
        check(got in (pattern(i, 4 * K), pattern(i - 250, 4 * K)),
              f"block at {off}: neither write")
    # Big ones: five 32 MiB writes, over the in-flight byte limit.
    blob = b""
    for i in range(5):
        blob += c.req_bytes(CMD_WRITE, 9000 + i, 0, MAX,
                            payload=bytes([0x61 + i]) * MAX)
    out = pipeline(c, blob, 5)
    for i in range(5):
        check(c.error_of(out[9000 + i]) == 0, f"32 MiB write {i} failed")
    got = c.read(0, 4 * K)
    check(len(set(got)) == 1 and got[0] in range(0x61, 0x66),
          "after five 32 MiB writes: block 0 is none of them")
    disc(c, "DISC after pipelined writes")


def disc_inflight():
    base = 12 * M
    c = connect_go(sock)
    blob = b""
    datas = {}
    for i in range(64):
        d = pattern(100 + i, 64 * K)
        datas[i] = d
        blob += c.req_bytes(CMD_WRITE, i, base + i * 64 * K, 64 * K,
                            payload=d)
    for i in range(64, 96):
        blob += c.req_bytes(CMD_READ, i, (i - 64) * 4 * K, 4 * K)
        c.note_read(i, 4 * K)
    blob += c.req_bytes(CMD_WRITE_ZEROES, 96, base + 64 * 64 * K, 64 * K)
    blob += c.req_bytes(CMD_FLUSH, 97)
    blob += c.req_bytes(CMD_DISC, 98)
    # Nothing after DISC may be taken (the client MUST NOT send it; the
    # server must not act on it).
    blob += c.req_bytes(CMD_WRITE, 99, base, 4 * K, payload=b"X" * 4 * K)
    out = pipeline(c, blob, 98)
    check(sorted(out) == list(range(98)), "not every request before DISC "
          "was answered")
    for i in range(98):
        check(c.error_of(out[i]) == 0, f"request {i} before DISC failed")
    c.expect_closed("after DISC with requests in flight")
    c.close()
    c = connect_go(sock)
    for i in (0, 1, 33, 63):
        check(c.read(base + i * 64 * K, 64 * K) == datas[i],
              f"write {i} before DISC did not land")
    disc(c, "DISC")


def half_close():
    """Requests, then shutdown(SHUT_WR): every request is still answered,
    then the server closes."""
    for structured in (True, False):
        c = connect_go(sock, structured=structured)
        blob = b""
        for i in range(50):
            blob += c.req_bytes(CMD_READ, i, i * 64 * K, 64 * K)
            c.note_read(i, 64 * K)
        blob += c.req_bytes(CMD_FLUSH, 50)
        c.send(blob)
        c.sock.shutdown(socket.SHUT_WR)
        got = {}
        while len(got) < 51:
            r = c.full_reply()
            check(c.error_of(r) == 0, f"request {r[0].cookie} failed")
            got[r[0].cookie] = r
        check(sorted(got) == list(range(51)), "not all answered")
        c.expect_closed("after the client's half-close")
        c.close()


def slow_client():
    """Headers and payloads a few bytes at a time."""
    c = connect_go(sock)
    d = pattern(77, 4 * K)
    req = c.req_bytes(CMD_WRITE, 1, 5 * M, len(d), payload=d)
    head, body = req[:28], req[28:]
    for i in range(0, len(head), 3):
        c.send(head[i:i + 3])
        time.sleep(0.002)
    for i in range(0, len(body), 1000):
        c.send(body[i:i + 1000])
        time.sleep(0.002)
    check(c.error_of(c.full_reply(1)) == 0, "slow write failed")
    req = c.req_bytes(CMD_READ, 2, 5 * M, len(d))
    c.note_read(2, len(d))
    for b in req:
        c.send(bytes([b]))
        time.sleep(0.001)
    check(c.read_data(c.full_reply(2), 5 * M, len(d)) == d,
          "slow read: wrong data")
    disc(c, "DISC after a slow client")


def log_info(msg):
    raw.log(msg)


raw.run_cases([
    ("unknown client flags", unknown_flags),
    ("plain newstyle client", plain_newstyle),
    ("truncated handshake", truncated_handshake),
    ("absurd option length", absurd_option_length),
    ("unknown option", unknown_option),
    ("option errors", option_errors),
    ("too many options", too_many_options),
    ("NBD_OPT_ABORT", opt_abort),
    ("requests pipelined after GO", go_then_pipelined),
    ("bad request magic", bad_magic),
    ("truncated request", truncated_request),
    ("unknown command", unknown_command),
    ("write past the end with payload", write_past_end),
    ("WRITE over 32 MiB", write_too_big),
    ("READ over 32 MiB", read_too_big),
    ("structured reply rules", structured_rules),
    ("1000 pipelined reads", pipelined_reads),
    ("1000 pipelined writes and reads, 5 x 32 MiB", pipelined_mixed),
    ("NBD_CMD_DISC with requests in flight", disc_inflight),
    ("half-close after requests", half_close),
    ("slow client", slow_client),
], after=still_serves)
