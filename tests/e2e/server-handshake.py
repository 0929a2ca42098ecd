# SPDX-License-Identifier: MIT
"""server-handshake.py - bionbd's handshake through libnbd (and a raw
socket for what libnbd 1.14 cannot send).  Run by test-server-handshake.sh
with Debian's python3, which sets:

  NBD_SOCK      the server's unix socket
  S_MEMBERS     members of export "scratch" (the first, default export)
  S_DESC        its description
  CHUNK, SIZE   its stripe size and volume size
  G_SIZE, G_DESC, G_BYTE  export "golden": read-only, one member filled
                with G_BYTE
"""
import errno
import os

import nbd

import nbd_raw as raw
from nbd_e2e import (server_error, HOLE_ZERO, check, connect, expected_extents, env_int,
                     fail, log, merge)

sock = os.environ["NBD_SOCK"]
members = os.environ["S_MEMBERS"].split()
s_desc = os.environ["S_DESC"]
g_desc = os.environ["G_DESC"]
chunk = env_int("CHUNK")
size = env_int("SIZE")
g_size = env_int("G_SIZE")
g_byte = env_int("G_BYTE")
n = len(members)
K, M = 1024, 1 << 20


def uri(name=""):
    return f"nbd+unix:///{name}?socket={sock}"


def opt_handle(structured=True):
    """A handle stopped in option negotiation."""
    h = nbd.NBD()
    h.set_opt_mode(True)
    h.set_request_structured_replies(structured)
    h.connect_unix(sock)
    check(h.aio_is_negotiating(), "not negotiating after connect in opt mode")
    return h


# ---------------------------------------------------------------- LIST

h = opt_handle()
got = []
cnt = h.opt_list(lambda name, desc: got.append((name, desc)) or 0)
check(cnt == 2, f"opt_list counted {cnt} exports, expected 2")
check(got == [("scratch", s_desc), ("golden", g_desc)],
      f"opt_list gave {got}")
# Still negotiating: LIST does not end the handshake.
check(h.aio_is_negotiating(), "LIST ended the handshake")
h.opt_abort()
check(h.aio_is_closed(), "opt_abort did not close")
log("ok opt_list")

# ---------------------------------------------------------------- INFO


def info_checks(h, name, want_size, desc, ro):
    check(h.get_size() == want_size,
          f"{name}: size {h.get_size()}, expected {want_size}")
    check(h.get_canonical_export_name() == name,
          f"{name}: canonical name {h.get_canonical_export_name()!r}")
    check(h.get_export_description() == desc,
          f"{name}: description {h.get_export_description()!r}")
    for what, want in ((nbd.SIZE_MINIMUM, 512), (nbd.SIZE_PREFERRED, 4096),
                       (nbd.SIZE_MAXIMUM, 32 * M)):
        check(h.get_block_size(what) == want,
              f"{name}: block size {what} is {h.get_block_size(what)}, "
              f"expected {want}")
    check(bool(h.is_read_only()) == ro, f"{name}: read-only {h.is_read_only()}")
    for f in ("can_flush", "can_fua", "can_multi_conn", "can_cache",
              "can_df"):
        check(getattr(h, f)(), f"{name}: {f} is false")
    for f in ("can_trim", "can_zero", "can_fast_zero"):
        check(bool(getattr(h, f)()) == (not ro),
              f"{name}: {f} is {getattr(h, f)()} (read-only {ro})")
    check(not h.is_rotational(), f"{name}: rotational")


h = opt_handle()
h.set_full_info(True)
h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
h.set_export_name("scratch")
h.opt_info()
info_checks(h, "scratch", size, s_desc, False)
check(h.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION),
      "scratch: base:allocation not offered")
h.set_export_name("golden")
h.opt_info()
info_checks(h, "golden", g_size, g_desc, True)
# "" is the first export of the file.
h.set_export_name("")
h.opt_info()
info_checks(h, "scratch", size, s_desc, False)
log("ok opt_info (size, flags, block sizes, name, description)")

# ---------------------------------------------------------------- unknown

h.set_export_name("no-such-export")
try:
    h.opt_info()
    fail("opt_info on an unknown export succeeded")
except nbd.Error:
    pass
check(h.aio_is_negotiating(), "failed INFO ended the negotiation")
try:
    h.opt_go()
    fail("opt_go on an unknown export succeeded")
except nbd.Error:
    pass
check(h.aio_is_negotiating(), "failed GO ended the negotiation")
# The connection still takes options: LIST, then GO to a real export.
got = []
h.opt_list(lambda name, desc: got.append(name) or 0)
check(got == ["scratch", "golden"], f"LIST after failed GO gave {got}")
h.set_export_name("golden")
h.opt_go()
check(h.aio_is_ready(), "GO did not reach transmission")
check(h.get_size() == g_size, "golden: wrong size after GO")
check(h.pread(4096, g_size - 4096) == bytes([g_byte]) * 4096,
      "golden: wrong data")
h.shutdown()
log("ok unknown export: INFO/GO fail, the connection goes on")

# ---------------------------------------------------------------- meta


def list_meta(queries, structured=True):
    h = opt_handle(structured)
    for q in queries:
        h.add_meta_context(q)
    got = []
    cnt = h.opt_list_meta_context(lambda name: got.append(name) or 0)
    check(cnt == len(got), f"opt_list_meta_context count {cnt} != {got}")
    h.opt_abort()
    return got


for q, want in (([], ["base:allocation"]),
                (["base:"], ["base:allocation"]),
                (["base:allocation"], ["base:allocation"]),
                (["x-nothing:here"], []),
                (["x-nothing:here", "base:allocation"], ["base:allocation"])):
    got = list_meta(q)
    check(got == want, f"list_meta_context {q}: got {got}, expected {want}")
log("ok list_meta_context")

# SET with only an unknown context: nothing selected.
h = nbd.NBD()
h.add_meta_context("x-nothing:here")
h.connect_uri(uri())
check(not h.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION),
      "base:allocation selected though not asked for")
h.set_strict_mode(0)
server_error(errno.EINVAL, "block status without a selected context",
             h.block_status, 4096, 0, lambda *a: 0)
check(h.pread(512, 0) == bytes(512), "read after refused block status")
h.shutdown()

# Writes and trims, then base:allocation across member boundaries.  The
# expected map is what was written, in 4K blocks (4K-aligned pieces, so a
# file system with blocks of 4K or less allocates exactly them): allocated =
# data (0), the rest HOLE|ZERO.
h = connect(uri())
check(h.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION), "no base:allocation")
alloc = bytearray(size // (4 * K))  # 1 = allocated, per 4K block


def mark(off, length, v):
    for b in range(off // (4 * K), (off + length) // (4 * K)):
        alloc[b] = v


writes = [(60 * K, 200 * K),             # tail of chunk 0 .. into chunk 4
          (chunk * 7 + 8 * K, 4 * K),      # inside one chunk
          (chunk * 10, chunk * 5),         # whole chunks, every member
          (size - chunk - 4 * K, chunk + 4 * K)]  # up to the end
for i, (off, length) in enumerate(writes):
    h.pwrite(bytes([0x40 + i]) * length, off)
    mark(off, length, 1)
trims = [(chunk * 11, chunk * 2),            # two whole chunks in the middle
         (64 * K, 64 * K),                   # all of chunk 1
         (size - 8 * K, 8 * K)]
for off, length in trims:
    h.trim(length, off)
    mark(off, length, 0)
h.flush()


def model_extents(off, length):
    out = []
    for b in range(off // (4 * K), min(off + length, size) // (4 * K)):
        out.append((b * 4 * K, 4 * K, 0 if alloc[b] else HOLE_ZERO))
    return merge(out)


def one_block_status(h, off, length, flags=0):
    """One request: [(offset, length, flags)], checked for well-formedness."""
    got = []

    def cb(ctx, offset, entries, err):
        check(ctx == nbd.CONTEXT_BASE_ALLOCATION, f"context {ctx}")
        check(offset == off, f"block status offset {offset} != {off}")
        got.extend(entries)
        return 0

    h.block_status(length, off, cb, flags)
    check(got, f"block status {off}+{length}: no extents")
    out, pos = [], off
    for i in range(0, len(got), 2):
        check(got[i] > 0, f"block status {off}+{length}: zero-length extent")
        check(got[i] % 512 == 0, f"extent length {got[i]} not 512-aligned")
        check(got[i + 1] & ~HOLE_ZERO == 0, f"unknown flags {got[i + 1]:#x}")
        check(pos < off + length,
              f"block status {off}+{length}: extent past the request")
        out.append((pos, got[i], got[i + 1]))
        pos += got[i]
    return out


def covered(exts, off, length):
    """Clip merged extents to [off, off + length)."""
    out = []
    for o, ln, f in exts:
        s, e = max(o, off), min(o + ln, off + length)
        if s < e:
            out.append((s, e - s, f))
    return merge(out)


ranges = [(0, size), (60 * K, 400 * K), (chunk * 7, chunk * 2),
          (chunk * 9 + 512, chunk * 4 - 1024), (size - 3 * chunk, 3 * chunk)]
for off, length in ranges:
    want = covered(model_extents(off - off % (4 * K),
                                 length + off % (4 * K) + 4 * K), off, length)
    got, pos = [], off
    while pos < off + length:
        part = one_block_status(h, pos, off + length - pos)
        got += part
        pos = part[-1][0] + part[-1][1]
    got = merge(got)
    check(got == want, f"block status {off}+{length}:\n  got  {got}\n"
          f"  want {want}")
    # The same answer from the member files, mapped through the stripe.
    files = expected_extents(members, chunk, off, length)
    check(got == files, f"block status {off}+{length} disagrees with the "
          f"members' SEEK_DATA map:\n  got  {got}\n  files {files}")
# REQ_ONE: one extent, never longer than asked.
for off, length in ranges:
    e = one_block_status(h, off, length, nbd.CMD_FLAG_REQ_ONE)
    check(len(e) == 1, f"REQ_ONE {off}+{length}: {len(e)} extents")
    check(e[0][1] <= length, f"REQ_ONE {off}+{length}: extent {e[0]} too long")
    want = covered(model_extents(off - off % (4 * K), length + 8 * K),
                   off, length)[0]
    check(e[0][2] == want[2] and e[0][1] <= want[1],
          f"REQ_ONE {off}+{length}: {e[0]}, model says {want}")
# And the data is what was written (trimmed blocks read as zeroes: the
# members have holes there).
for i, (off, length) in enumerate(writes):
    got = h.pread(length, off)
    for b in range(off // (4 * K), (off + length) // (4 * K)):
        s = b * 4 * K - off
        want = bytes([0x40 + i]) * 4 * K if alloc[b] else bytes(4 * K)
        check(got[s:s + 4 * K] == want,
              f"data at {b * 4 * K}: expected {want[0]:#x} (write {i})")
ref_off, ref_len = writes[0]
ref = h.pread(ref_len, ref_off)
h.shutdown()
log("ok set_meta_context base:allocation, block status across members")

# ---------------------------------------------------------------- simple

h = nbd.NBD()
h.set_request_structured_replies(False)
h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
h.connect_uri(uri())
check(not h.get_structured_replies_negotiated(), "structured negotiated")
check(not h.can_df(), "DF advertised without structured replies")
check(not h.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION),
      "meta context without structured replies")
check(h.pread(ref_len, ref_off) == ref, "simple reply read: wrong data")
check(h.pread(64 * K, chunk * 20) == bytes(64 * K),
      "simple reply read of a hole: not zero")
h.set_strict_mode(0)
server_error(errno.EINVAL, "simple: read past the end", h.pread, 4096, size)
server_error(errno.EINVAL, "simple: block status", h.block_status, 4096, 0,
             lambda *a: 0)
server_error(errno.EINVAL, "simple: read with DF", h.pread, 4096, 0,
             nbd.CMD_FLAG_DF)
check(h.pread(ref_len, ref_off) == ref,
      "simple reply read after errors: wrong data")
h.shutdown()
log("ok structured replies off")

# A plain newstyle client (no FIXED_NEWSTYLE, a SHOULD only) is served
# through NBD_OPT_EXPORT_NAME, the one option it has.
h = nbd.NBD()
h.set_handshake_flags(0)
h.connect_uri(uri())
check(h.get_size() == size, "plain newstyle client: wrong size")
check(h.pread(ref_len, ref_off) == ref, "plain newstyle client: wrong data")
h.shutdown()
log("ok plain newstyle client")

# ---------------------------------------------------------------- raw


def raw_export_name(name, no_zeroes):
    c = raw.Raw(sock)
    check(c.gflags == raw.FLAG_FIXED_NEWSTYLE | raw.FLAG_NO_ZEROES,
          f"greeting flags {c.gflags:#x}")
    c.client_flags(raw.FLAG_C_FIXED_NEWSTYLE |
                   (raw.FLAG_C_NO_ZEROES if no_zeroes else 0))
    c.send_opt(raw.OPT_EXPORT_NAME, name.encode())
    return c


def go_without_context(c, name, what):
    """GO to @name on @c, where no meta context is selected: block status
    is refused (EINVAL), then the connection is closed."""
    c.go(name)
    c.request(raw.CMD_BLOCK_STATUS, 7, 0, 4096)
    check(c.error_of(c.full_reply(7)) == raw.EINVAL,
          f"block status {what} worked")
    c.close()


try:
    for name, want_size, ro in (("golden", g_size, True),
                                ("", size, False),
                                ("scratch", size, False)):
        for no_zeroes in (True, False):
            c = raw_export_name(name, no_zeroes)
            b = c.recv_exact(10 if no_zeroes else 134)
            esize = int.from_bytes(b[:8], "big")
            tflags = int.from_bytes(b[8:10], "big")
            check(esize == want_size,
                  f"EXPORT_NAME {name!r}: size {esize}, expected {want_size}")
            check(tflags & raw.FLAG_HAS_FLAGS, "EXPORT_NAME: no HAS_FLAGS")
            check(bool(tflags & raw.FLAG_READ_ONLY) == ro,
                  f"EXPORT_NAME {name!r}: flags {tflags:#x}")
            check(not (tflags & raw.FLAG_SEND_DF),
                  "EXPORT_NAME: DF without structured replies")
            if not no_zeroes:
                check(b[10:] == bytes(124), "EXPORT_NAME: padding not zero")
            data = c.read(want_size - 4096, 4096)
            if name == "golden":
                check(data == bytes([g_byte]) * 4096,
                      "EXPORT_NAME golden: wrong data")
            c.send(c.req_bytes(raw.CMD_DISC, 1))
            c.expect_closed("EXPORT_NAME then DISC")
            c.close()
    # Structured replies before EXPORT_NAME carry over.
    c = raw.Raw(sock)
    c.start(structured=True)
    c.send_opt(raw.OPT_EXPORT_NAME, b"scratch")
    b = c.recv_exact(10)
    check(int.from_bytes(b[8:10], "big") & raw.FLAG_SEND_DF,
          "EXPORT_NAME after STRUCTURED_REPLY: no DF")
    check(c.read(writes[0][0], 4096) == bytes([0x40]) * 4096,
          "EXPORT_NAME structured read: wrong data")
    c.close()
    # No error reply exists for EXPORT_NAME: an unknown name is a hang-up.
    c = raw_export_name("no-such-export", True)
    c.expect_closed("EXPORT_NAME of an unknown export")
    c.close()
    # Raw checks of option errors libnbd will not send.
    c = raw.Raw(sock)
    c.start(structured=False)
    c.send_opt(raw.OPT_LIST_META_CONTEXT,
               c.meta_data("", ["base:allocation"]))
    r = c.opt_replies(raw.OPT_LIST_META_CONTEXT)
    check(r[-1][0] == raw.REP_ERR_INVALID,
          f"LIST_META_CONTEXT without structured replies: {r[-1][0]:#x}")
    c.send_opt(raw.OPT_SET_META_CONTEXT, c.meta_data("", ["base:allocation"]))
    r = c.opt_replies(raw.OPT_SET_META_CONTEXT)
    check(r[-1][0] == raw.REP_ERR_INVALID,
          f"SET_META_CONTEXT without structured replies: {r[-1][0]:#x}")
    c.send_opt(raw.OPT_STRUCTURED_REPLY)
    check(c.opt_reply(raw.OPT_STRUCTURED_REPLY)[0] == raw.REP_ACK,
          "STRUCTURED_REPLY refused")
    c.structured = True
    # No data at all (found by tests/fuzz: the parser once did arithmetic
    # on the absent buffer, which UBSan stops on).
    for opt in (raw.OPT_LIST_META_CONTEXT, raw.OPT_SET_META_CONTEXT):
        c.send_opt(opt)
        r = c.opt_replies(opt)
        check(r[-1][0] == raw.REP_ERR_INVALID,
              f"meta context option {opt} without data: {r[-1][0]:#x}")
    c.send_opt(raw.OPT_SET_META_CONTEXT,
               c.meta_data("no-such-export", ["base:allocation"]))
    r = c.opt_replies(raw.OPT_SET_META_CONTEXT)
    check(r[-1][0] == raw.REP_ERR_UNKNOWN,
          f"SET_META_CONTEXT on an unknown export: {r[-1][0]:#x}")
    # Selected for "golden", then GO to "scratch": not selected there.
    c.send_opt(raw.OPT_SET_META_CONTEXT,
               c.meta_data("golden", ["base:allocation"]))
    r = c.opt_replies(raw.OPT_SET_META_CONTEXT)
    check([t for t, _ in r] == [raw.REP_META_CONTEXT, raw.REP_ACK],
          f"SET_META_CONTEXT golden: {r}")
    ctx_id = int.from_bytes(r[0][1][:4], "big")
    check(r[0][1][4:] == b"base:allocation", f"context name {r[0][1][4:]}")
    go_without_context(c, "scratch",
                       "on an export other than SET_META_CONTEXT's")
    # Selected for the export GO names: the context id comes back.
    c = raw.Raw(sock)
    c.start(structured=True)
    c.send_opt(raw.OPT_SET_META_CONTEXT,
               c.meta_data("", ["base:allocation"]))
    r = c.opt_replies(raw.OPT_SET_META_CONTEXT)
    ctx_id = int.from_bytes(r[0][1][:4], "big")
    c.go("")
    c.request(raw.CMD_BLOCK_STATUS, 8, 0, chunk)
    ch = c.full_reply(8)
    check(len(ch) == 1 and ch[0].type == raw.REPLY_TYPE_BLOCK_STATUS,
          f"block status reply {ch}")
    check(int.from_bytes(ch[0].payload[:4], "big") == ctx_id,
          "block status with another context id than SET gave")
    c.close()
    # Meta context queries (proto.md, "The base: metadata namespace"):
    # "base:" lists every base: context but SET MUST ignore it; an
    # unknown leaf in base: is ignored, not refused; LIST's context ids
    # SHOULD be 0, SET gives a context once however often it is asked.
    c = raw.Raw(sock)
    c.start(structured=True)
    for opt, queries, want in (
            (raw.OPT_LIST_META_CONTEXT, ["base:", "base:allocation"],
             ["base:allocation"]),
            (raw.OPT_LIST_META_CONTEXT, ["base:no-such-leaf"], []),
            (raw.OPT_SET_META_CONTEXT, ["base:no-such-leaf"], []),
            (raw.OPT_SET_META_CONTEXT,
             ["base:allocation", "base:", "base:allocation", "x-a:b"],
             ["base:allocation"]),
            (raw.OPT_SET_META_CONTEXT, ["base:"], [])):
        c.send_opt(opt, c.meta_data("", queries))
        r = c.opt_replies(opt)
        names = [d[4:].decode() for t, d in r[:-1]]
        check(r[-1][0] == raw.REP_ACK and
              all(t == raw.REP_META_CONTEXT for t, _ in r[:-1]) and
              names == want,
              f"option {opt} {queries}: {r}, expected contexts {want}")
        if opt == raw.OPT_LIST_META_CONTEXT:
            check(all(d[:4] == bytes(4) for _, d in r[:-1]),
                  f"LIST_META_CONTEXT {queries}: context id not 0: {r}")
    # The last SET asked only for "base:": nothing is selected.
    go_without_context(c, "", 'after SET_META_CONTEXT "base:"')
    # INFO/GO: unknown information requests are ignored (MUST); with no
    # request at all NBD_INFO_EXPORT still comes; GO after INFO with the
    # same data gives the same export information.
    c = raw.Raw(sock)
    c.start(structured=True)
    rtype, info = c.info_go(raw.OPT_INFO, "", (0x7777, raw.INFO_NAME))
    check(rtype == raw.REP_ACK and raw.INFO_EXPORT in info,
          f"INFO with an unknown request: {rtype:#x} {info}")
    check(info.get(raw.INFO_NAME) == b"scratch",
          f"INFO_NAME of the default export: {info.get(raw.INFO_NAME)}")
    rtype, none = c.info_go(raw.OPT_INFO, "scratch", ())
    check(rtype == raw.REP_ACK and raw.INFO_EXPORT in none,
          f"INFO without requests: {rtype:#x} {none}")
    rtype, go = c.info_go(raw.OPT_GO, "scratch", ())
    check(rtype == raw.REP_ACK and go == none,
          f"GO after INFO of the same: {go}, INFO gave {none}")
    c.close()
    # NBD_OPT_ABORT with data: the server SHOULD ignore the data.
    c = raw.Raw(sock)
    c.start(structured=False)
    c.send_opt(raw.OPT_ABORT, b"unexpected")
    rtype, data = c.opt_reply(raw.OPT_ABORT)
    check(rtype == raw.REP_ACK and data == b"",
          f"ABORT with data: {rtype:#x} {data}")
    c.expect_closed("after NBD_OPT_ABORT with data")
    c.close()
except raw.Fail as e:
    fail(str(e))
except raw.Closed as e:
    fail(f"unexpected close: {e}")
log("ok NBD_OPT_EXPORT_NAME and raw option checks")
