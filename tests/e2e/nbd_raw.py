# SPDX-License-Identifier: MIT
"""nbd_raw.py - a hand-written NBD client over a raw socket (standard
library only), for the server tests that need bytes no real client sends.

Written from the NBD protocol document (fixed newstyle), independently of
the server: every constant below is the spec's.  Not a test itself.

    c = Raw(sock_path)              # connect, read the greeting
    c.client_flags(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES)
    c.send_opt(OPT_STRUCTURED_REPLY); c.opt_reply()
    size, tflags = c.go("")         # NBD_OPT_GO, returns at the ACK
    c.request(CMD_READ, cookie=1, offset=0, length=4096)
    r = c.reply()                   # one simple reply or structured chunk

With NBD_TLS_CA set (a CA certificate file), every Raw connection that
sends valid client flags upgrades with NBD_OPT_STARTTLS right after them
and talks TLS from then on (server certificate for "localhost"), so a
suite written for plaintext runs unchanged against --tls=require.
"""
import os
import socket
import ssl
import struct
import sys
import threading
import time

TEST = os.environ.get("TEST_NAME", "nbd_raw")

NBDMAGIC = 0x4E42444D41474943
IHAVEOPT = 0x49484156454F5054
REP_MAGIC = 0x0003E889045565A9
REQUEST_MAGIC = 0x25609513
SIMPLE_REPLY_MAGIC = 0x67446698
STRUCTURED_REPLY_MAGIC = 0x668E33EF

FLAG_FIXED_NEWSTYLE = 1 << 0
FLAG_NO_ZEROES = 1 << 1
FLAG_C_FIXED_NEWSTYLE = 1 << 0
FLAG_C_NO_ZEROES = 1 << 1

# transmission flags
FLAG_HAS_FLAGS = 1 << 0
FLAG_READ_ONLY = 1 << 1
FLAG_SEND_FLUSH = 1 << 2
FLAG_SEND_FUA = 1 << 3
FLAG_SEND_TRIM = 1 << 5
FLAG_SEND_WRITE_ZEROES = 1 << 6
FLAG_SEND_DF = 1 << 7
FLAG_CAN_MULTI_CONN = 1 << 8
FLAG_SEND_CACHE = 1 << 10
FLAG_SEND_FAST_ZERO = 1 << 11

OPT_EXPORT_NAME = 1
OPT_ABORT = 2
OPT_LIST = 3
OPT_STARTTLS = 5
OPT_INFO = 6
OPT_GO = 7
OPT_STRUCTURED_REPLY = 8
OPT_LIST_META_CONTEXT = 9
OPT_SET_META_CONTEXT = 10

REP_ACK = 1
REP_SERVER = 2
REP_INFO = 3
REP_META_CONTEXT = 4
REP_ERR_UNSUP = (1 << 31) | 1
REP_ERR_POLICY = (1 << 31) | 2
REP_ERR_INVALID = (1 << 31) | 3
REP_ERR_UNKNOWN = (1 << 31) | 6
REP_ERR_TLS_REQD = (1 << 31) | 5
REP_ERR_SHUTDOWN = (1 << 31) | 7

INFO_EXPORT = 0
INFO_NAME = 1
INFO_DESCRIPTION = 2
INFO_BLOCK_SIZE = 3

CMD_READ = 0
CMD_WRITE = 1
CMD_DISC = 2
CMD_FLUSH = 3
CMD_TRIM = 4
CMD_CACHE = 5
CMD_WRITE_ZEROES = 6
CMD_BLOCK_STATUS = 7

CMD_FLAG_FUA = 1 << 0
CMD_FLAG_NO_HOLE = 1 << 1
CMD_FLAG_DF = 1 << 2
CMD_FLAG_REQ_ONE = 1 << 3
CMD_FLAG_FAST_ZERO = 1 << 4

REPLY_FLAG_DONE = 1 << 0
REPLY_TYPE_NONE = 0
REPLY_TYPE_OFFSET_DATA = 1
REPLY_TYPE_OFFSET_HOLE = 2
REPLY_TYPE_BLOCK_STATUS = 5
REPLY_TYPE_ERROR = (1 << 15) | 1
REPLY_TYPE_ERROR_OFFSET = (1 << 15) | 2

EPERM, EIO, ENOMEM, EINVAL, ENOSPC, EOVERFLOW, ENOTSUP, ESHUTDOWN = \
    1, 5, 12, 22, 28, 75, 95, 108


def log(msg):
    print(f"{TEST}: {msg}", file=sys.stderr, flush=True)


class Fail(Exception):
    """A test expectation that did not hold."""


def fail(msg):
    print(f"{TEST}: FAIL: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        raise Fail(msg)


class Closed(Exception):
    """The server closed the connection."""


class Reply:
    """A simple reply (simple=True) or one structured reply chunk."""

    def __init__(self, simple, cookie, error=0, flags=0, rtype=None,
                 payload=b"", data=b""):
        self.simple = simple
        self.cookie = cookie
        self.error = error
        self.flags = flags
        self.type = rtype
        self.payload = payload
        self.data = data  # simple read reply data
        self.message = ""  # an error chunk's text

    @property
    def done(self):
        return self.simple or bool(self.flags & REPLY_FLAG_DONE)

    def __repr__(self):
        if self.simple:
            return (f"<simple cookie={self.cookie} error={self.error} "
                    f"data={len(self.data)}>")
        return (f"<chunk cookie={self.cookie} type={self.type:#x} "
                f"flags={self.flags} len={len(self.payload)} "
                f"error={self.error}>")


class TLSSock:
    """TLS over a connected socket, with the socket calls Raw and the
    suites use (sendall, recv, shutdown, settimeout, close), from one
    reading and one writing thread at a time (the pipelined cases).
    Memory BIOs rather than ssl.SSLSocket: its shutdown() drops TLS
    altogether, while here shutdown(SHUT_WR) sends close_notify and
    reading goes on (a TLS half-close).

    Locks: obj_lock around the TLS state (short, never held across a
    socket call); send_lock from taking ciphertext to its sending, so
    records reach the socket in the order they were made."""

    def __init__(self, sock, ctx, hostname="localhost"):
        self.raw = sock
        self.inc = ssl.MemoryBIO()
        self.out = ssl.MemoryBIO()
        self.obj = ctx.wrap_bio(self.inc, self.out, server_hostname=hostname)
        self.obj_lock = threading.Lock()
        self.send_lock = threading.Lock()
        while True:
            try:
                self.obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                self._feed()
        self._flush()

    def _flush(self):
        with self.send_lock:
            with self.obj_lock:
                data = self.out.read()
            if data:
                self.raw.sendall(data)

    def _feed(self):
        d = self.raw.recv(1 << 20)
        with self.obj_lock:
            if d:
                self.inc.write(d)
            else:
                self.inc.write_eof()

    def sendall(self, data):
        # Encrypted whole, then one send: the bytes reach the socket at
        # once, as a plaintext sendall's would.
        view = memoryview(data)
        with self.send_lock:
            with self.obj_lock:
                while view:
                    view = view[self.obj.write(view[:16384]):]
                out = self.out.read()
            self.raw.sendall(out)

    def recv(self, n):
        while True:
            try:
                with self.obj_lock:
                    data = self.obj.read(n)
                    owe = self.out.pending
                if owe:
                    self._flush()
                return data
            except ssl.SSLWantReadError:
                pass
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""
            except ssl.SSLError as e:
                raise ConnectionResetError(str(e))
            self._flush()
            self._feed()

    def shutdown(self, how):
        if how in (socket.SHUT_WR, socket.SHUT_RDWR):
            try:
                with self.obj_lock:
                    self.obj.unwrap()
            except ssl.SSLError:
                pass  # close_notify is out; the peer's is not awaited
            try:
                self._flush()
            except OSError:
                pass
        self.raw.shutdown(how)

    def settimeout(self, t):
        self.raw.settimeout(t)

    def close(self):
        self.raw.close()


def tls_context(cafile, certfile=None, keyfile=None):
    ctx = ssl.create_default_context(cafile=cafile)
    if certfile:
        ctx.load_cert_chain(certfile, keyfile)
    return ctx


_TLS_CA = os.environ.get("NBD_TLS_CA")


class Raw:
    def __init__(self, path, timeout=10.0, greet=True, tls=None):
        """tls: an SSLContext to upgrade with after valid client flags;
        default from $NBD_TLS_CA, False for plaintext."""
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        if tls is None and _TLS_CA:
            tls = tls_context(_TLS_CA)
        self.tls = tls or None
        self.structured = False
        self.lengths = {}  # cookie -> read length, to parse simple replies
        self.gflags = None
        if greet:
            self.greeting()

    # ---- bytes

    def send(self, data):
        self.sock.sendall(data)

    def recv_exact(self, n):
        buf = bytearray()
        while len(buf) < n:
            try:
                b = self.sock.recv(min(n - len(buf), 1 << 20))
            except ConnectionResetError:
                b = b""
            if not b:
                raise Closed(f"closed after {len(buf)} of {n} bytes")
            buf += b
        return bytes(buf)

    def expect_closed(self, what, timeout=10.0):
        """The server closes the connection (EOF or reset) within timeout,
        sending nothing more."""
        self.sock.settimeout(timeout)
        try:
            b = self.sock.recv(65536)
        except ConnectionResetError:
            b = b""
        except (socket.timeout, TimeoutError):
            raise Fail(f"{what}: connection still open after {timeout} s")
        check(b == b"", f"{what}: expected the connection to close, got "
              f"{len(b)} more bytes: {b[:32].hex()}")

    def close(self):
        self.sock.close()

    # ---- handshake

    def greeting(self):
        magic, opt, flags = struct.unpack(">QQH", self.recv_exact(18))
        check(magic == NBDMAGIC, f"greeting magic {magic:#x}")
        check(opt == IHAVEOPT, f"greeting IHAVEOPT {opt:#x}")
        self.gflags = flags
        return flags

    def client_flags(self, flags):
        self.send(struct.pack(">I", flags))
        known = FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES
        if self.tls and flags & FLAG_C_FIXED_NEWSTYLE and not flags & ~known:
            self.starttls(self.tls)

    def starttls(self, ctx):
        """NBD_OPT_STARTTLS, which must be acknowledged, then TLS."""
        self.send_opt(OPT_STARTTLS)
        rtype, data = self.opt_reply(OPT_STARTTLS)
        check(rtype == REP_ACK and data == b"",
              f"STARTTLS answered {rtype:#x}")
        self.sock = TLSSock(self.sock, ctx)

    def start(self, structured=True):
        """Client flags, and structured replies if asked."""
        self.client_flags(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES)
        if structured:
            self.send_opt(OPT_STRUCTURED_REPLY)
            r = self.opt_reply(OPT_STRUCTURED_REPLY)
            check(r[0] == REP_ACK, f"STRUCTURED_REPLY answered {r[0]:#x}")
            self.structured = True

    @staticmethod
    def opt_bytes(opt, data=b"", length=None):
        return struct.pack(">QII", IHAVEOPT, opt,
                           len(data) if length is None else length) + data

    def send_opt(self, opt, data=b"", length=None):
        self.send(self.opt_bytes(opt, data, length))

    def opt_reply(self, want_opt=None):
        """(type, data) of one option reply; checks magic and option."""
        magic, opt, rtype, n = struct.unpack(">QIII", self.recv_exact(20))
        check(magic == REP_MAGIC, f"option reply magic {magic:#x}")
        if want_opt is not None:
            check(opt == want_opt,
                  f"option reply for option {opt}, expected {want_opt}")
        check(n <= 1 << 20, f"option reply length {n}")
        return rtype, self.recv_exact(n)

    def opt_replies(self, want_opt):
        """All replies to one option up to its ACK or error: a list of
        (type, data), the final one last."""
        out = []
        while True:
            rtype, data = self.opt_reply(want_opt)
            out.append((rtype, data))
            if rtype == REP_ACK or rtype & (1 << 31):
                return out

    @staticmethod
    def info_data(name, infos=()):
        n = name.encode()
        return (struct.pack(">I", len(n)) + n + struct.pack(">H", len(infos))
                + b"".join(struct.pack(">H", i) for i in infos))

    def info_go(self, opt, name="", infos=(INFO_BLOCK_SIZE,)):
        """NBD_OPT_INFO/GO: (final reply type, {info type: data})."""
        self.send_opt(opt, self.info_data(name, infos))
        got = {}
        reps = self.opt_replies(opt)
        for rtype, data in reps[:-1]:
            check(rtype == REP_INFO, f"unexpected reply {rtype:#x}")
            check(len(data) >= 2, "short NBD_REP_INFO")
            got[struct.unpack(">H", data[:2])[0]] = data[2:]
        return reps[-1][0], got

    def go(self, name="", infos=(INFO_BLOCK_SIZE,)):
        """NBD_OPT_GO that must succeed: (size, transmission flags)."""
        rtype, got = self.info_go(OPT_GO, name, infos)
        check(rtype == REP_ACK, f"GO {name!r} answered {rtype:#x}")
        check(INFO_EXPORT in got, "GO: no NBD_INFO_EXPORT")
        size, tflags = struct.unpack(">QH", got[INFO_EXPORT])
        self.size, self.tflags = size, tflags
        return size, tflags

    @staticmethod
    def meta_data(name, queries):
        n = name.encode()
        d = struct.pack(">I", len(n)) + n + struct.pack(">I", len(queries))
        for q in queries:
            q = q.encode()
            d += struct.pack(">I", len(q)) + q
        return d

    # ---- transmission

    @staticmethod
    def req_bytes(cmd, cookie, offset=0, length=0, flags=0, payload=b"",
                  magic=REQUEST_MAGIC):
        return struct.pack(">IHHQQI", magic, flags, cmd, cookie, offset,
                           length) + payload

    def request(self, cmd, cookie, offset=0, length=0, flags=0, payload=b""):
        if cmd == CMD_READ:
            self.lengths[cookie] = length
        self.send(self.req_bytes(cmd, cookie, offset, length, flags, payload))

    def note_read(self, cookie, length):
        """A read sent with send() of req_bytes(): remember its length."""
        self.lengths[cookie] = length

    def reply(self):
        """One simple reply (with read data if the cookie was a read and
        there is no error) or one structured chunk."""
        magic = struct.unpack(">I", self.recv_exact(4))[0]
        if magic == SIMPLE_REPLY_MAGIC:
            error, cookie = struct.unpack(">IQ", self.recv_exact(12))
            data = b""
            n = self.lengths.pop(cookie, 0)
            if n and not error:
                data = self.recv_exact(n)
            return Reply(True, cookie, error=error, data=data)
        check(magic == STRUCTURED_REPLY_MAGIC, f"reply magic {magic:#x}")
        check(self.structured, "structured chunk without negotiation")
        flags, rtype, cookie, n = struct.unpack(">HHQI", self.recv_exact(16))
        payload = self.recv_exact(n)
        error, message = 0, ""
        if rtype & (1 << 15):
            check(n >= 6, f"error chunk of {n} bytes")
            error, mlen = struct.unpack(">IH", payload[:6])
            # The spec: the message fills the chunk (ERROR_OFFSET: up to
            # its 8-byte offset) and is UTF-8, at most 4096 bytes.
            tail = 8 if rtype == REPLY_TYPE_ERROR_OFFSET else 0
            check(n == 6 + mlen + tail,
                  f"error chunk of {n} bytes with a {mlen}-byte message")
            check(mlen <= 4096, f"error message of {mlen} bytes")
            try:
                message = payload[6:6 + mlen].decode("utf-8")
            except UnicodeDecodeError:
                fail(f"error message not UTF-8: {payload[6:6 + mlen]!r}")
        if flags & REPLY_FLAG_DONE:
            self.lengths.pop(cookie, None)
        r = Reply(False, cookie, error=error, flags=flags, rtype=rtype,
                  payload=payload)
        r.message = message
        return r

    def full_reply(self, cookie=None):
        """All chunks of the next reply (until DONE) as a list; with
        structured replies chunks of other cookies are not expected."""
        out = []
        while True:
            r = self.reply()
            if cookie is not None:
                check(r.cookie == cookie,
                      f"reply for cookie {r.cookie}, expected {cookie}")
            out.append(r)
            if r.done:
                return out

    def error_of(self, chunks):
        """The NBD error of a whole reply (0 = success)."""
        for r in chunks:
            if r.error:
                return r.error
        return 0

    def read_data(self, chunks, offset, length):
        """Reassemble a successful read reply into bytes."""
        if len(chunks) == 1 and chunks[0].simple:
            check(not chunks[0].error, f"read error {chunks[0].error}")
            return chunks[0].data
        buf = bytearray(length)
        seen = bytearray(length)
        for r in chunks:
            check(not r.error, f"read error chunk {r.error}")
            if r.type == REPLY_TYPE_OFFSET_DATA:
                off = struct.unpack(">Q", r.payload[:8])[0] - offset
                d = r.payload[8:]
                n = len(d)
            elif r.type == REPLY_TYPE_OFFSET_HOLE:
                off, n = struct.unpack(">QI", r.payload)
                off -= offset
                d = bytes(n)
            elif r.type == REPLY_TYPE_NONE:
                continue
            else:
                raise Fail(f"unexpected chunk type {r.type:#x} in a read")
            check(0 <= off and off + n <= length and n > 0,
                  f"chunk [{off}, +{n}) outside the read of {length}")
            check(not any(seen[off:off + n]), "overlapping chunks")
            buf[off:off + n] = d
            seen[off:off + n] = b"\1" * n
        check(all(seen), "read reply does not cover the request")
        return bytes(buf)

    def read(self, offset, length, cookie=0x5EAD, flags=0):
        """A whole read: returns the data, raises Fail on error."""
        self.request(CMD_READ, cookie, offset, length, flags)
        return self.read_data(self.full_reply(cookie), offset, length)

    def cmd(self, cmd, offset=0, length=0, flags=0, payload=b"",
            cookie=0xC0DE):
        """A non-read command: returns its NBD error (0 = success)."""
        self.request(cmd, cookie, offset, length, flags, payload)
        return self.error_of(self.full_reply(cookie))


def connect_go(path, name="", structured=True, timeout=10.0):
    """A connection in transmission phase on export name."""
    c = Raw(path, timeout=timeout)
    c.start(structured)
    c.go(name)
    return c


def wait_closed_or_fail(c, what, timeout=10.0):
    c.expect_closed(what, timeout)
    c.close()


def pattern(seed, n):
    """n bytes that depend on seed and position (never all zero)."""
    block = bytes(((seed * 131 + i * 7) & 0xFF) | 1 for i in range(256))
    return (block * (n // 256 + 1))[:n]


def run_cases(cases, after=None):
    """Run (name, fn) pairs; after(name) runs after each one.  Exits 1 at
    the first failure, naming the case."""
    for name, fn in cases:
        t = time.monotonic()
        try:
            fn()
            if after:
                after(name)
        except Fail as e:
            fail(f"{name}: {e}")
        except Closed as e:
            fail(f"{name}: unexpected close: {e}")
        except socket.timeout:
            fail(f"{name}: timed out waiting for the server")
        except OSError as e:
            fail(f"{name}: {e}")
        log(f"ok {name} ({time.monotonic() - t:.2f} s)")


def listening_inodes():
    """Inodes of every listening socket: unix ones (flag __SO_ACCEPTCON)
    and TCP ones (state LISTEN)."""
    out = set()
    with open("/proc/net/unix") as f:
        next(f)
        for line in f:
            fields = line.split()
            if int(fields[3], 16) & 0x10000:
                out.add(fields[6])
    for name in ("tcp", "tcp6"):
        try:
            with open(f"/proc/net/{name}") as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] == "0A":
                        out.add(fields[9])
        except FileNotFoundError:
            pass
    return out


def server_conns(pid):
    """Open sockets of server process pid that are not listeners (the NBD
    listeners, the control socket)."""
    listening = listening_inodes()
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
        if link.startswith("socket:[") and link[8:-1] not in listening:
            n += 1
    return n
