#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""make-corpus.py - write the seed corpus of tests/fuzz/fuzz-session.

Each file is what one client sends after reading the server's greeting
(client flags, options, requests, write payloads): valid sessions against
the harness's exports ("disk", the default, writable, 2 MiB; "ro",
read-only, 512 KiB, data in every other 4 KiB block of its first 64 KiB;
"big", read-only, 128 MiB of holes), plus a few with the mistakes real
clients make.
Constants and message layouts come from tests/e2e/nbd_raw.py (the spec's).

Usage: tests/fuzz/make-corpus.py [DIR]   (default: tests/fuzz/corpus)
The output is deterministic; the generated files are committed.
"""
import os
import struct
import sys

# The protocol's constants and message builders, as the e2e tests' raw
# client writes them.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "e2e"))
from nbd_raw import *  # noqa: E402,F401,F403  (constants)
from nbd_raw import Raw  # noqa: E402

KIB = 1024
MIB = 1024 * KIB


def client_flags(no_zeroes=True):
    flags = FLAG_C_FIXED_NEWSTYLE | (FLAG_C_NO_ZEROES if no_zeroes else 0)
    return struct.pack(">I", flags)


option = Raw.opt_bytes  # an option header and its data
name_info = Raw.info_data  # NBD_OPT_INFO / NBD_OPT_GO data
meta = Raw.meta_data  # NBD_OPT_LIST/SET_META_CONTEXT data


class Requests:
    """Builds transmission-phase requests with increasing cookies."""

    def __init__(self, first_cookie=1):
        self.cookie = first_cookie - 1
        self.out = b""

    def req(self, cmd, offset=0, length=0, flags=0, payload=b"",
            magic=REQUEST_MAGIC):
        self.cookie += 1
        self.out += Raw.req_bytes(cmd, self.cookie, offset, length, flags,
                                  payload, magic)
        return self

    def write(self, offset, payload, flags=0):
        return self.req(CMD_WRITE, offset, len(payload), flags, payload)

    def disc(self):
        return self.req(CMD_DISC)


def delivery(data):
    """How fuzz-session delivers @data: a mirror of its session_plan().

    Returns (bytes per send, hang up at the end).  Only used to give the
    seeds below whose point is how their bytes arrive the delivery they
    need; if the two drift apart, those seeds are still valid sessions.
    """
    n = len(data)
    h = (2166136261 ^ n) & 0xFFFFFFFF
    for b in data[:64]:
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    if h % 4 == 2:
        piece = max(1 + (h >> 2) % 97, n // 256)
    elif h % 4 == 3:
        piece = n // (2 + (h >> 2) % 3) + 1
    else:
        piece = max(n, 1)
    return piece, (h >> 12) % 4 == 0


def in_halves(build):
    """build(first_cookie) -> session; the first one sent in two halves.

    The first request's cookie lies in the hashed prefix, so trying a few
    changes the delivery and nothing else.
    """
    for cookie in range(1, 1000):
        data = build(cookie)
        if delivery(data) == (len(data) // 2 + 1, False):
            return data
    raise SystemExit("make-corpus.py: no cookie gives a delivery in halves")


def pattern(n, seed):
    return bytes((seed + i * 7) & 0xFF for i in range(n))


def sessions():
    s = {}

    # The common modern client (qemu, nbdcopy, nbd-client): structured
    # replies, base:allocation, GO with block sizes, every command.
    hs = (client_flags() + option(OPT_STRUCTURED_REPLY) +
          option(OPT_SET_META_CONTEXT, meta("", ["base:allocation"])) +
          option(OPT_GO, name_info("", [INFO_BLOCK_SIZE])))
    r = Requests()
    r.write(0, pattern(4096, 1))
    r.req(CMD_READ, 0, 4096)
    r.write(64 * KIB, pattern(8192, 2), CMD_FLAG_FUA)
    r.req(CMD_READ, 60 * KIB, 8192, CMD_FLAG_DF)  # across a stripe edge
    r.req(CMD_FLUSH)
    r.req(CMD_TRIM, 128 * KIB, 64 * KIB)
    r.req(CMD_WRITE_ZEROES, 256 * KIB, 8192, CMD_FLAG_NO_HOLE)
    r.req(CMD_WRITE_ZEROES, 512 * KIB, 128 * KIB, CMD_FLAG_FAST_ZERO)
    r.req(CMD_CACHE, 0, 256 * KIB)
    r.req(CMD_BLOCK_STATUS, 0, 2 * MIB)
    r.req(CMD_BLOCK_STATUS, 0, 1 * MIB, CMD_FLAG_REQ_ONE)
    r.disc()
    s["go-structured-all-commands"] = hs + r.out

    # Unaligned requests (clients that never negotiated block sizes).
    r = Requests()
    r.write(1000, pattern(100, 3))
    r.req(CMD_READ, 1000, 100)
    r.req(CMD_READ, 511, 2)
    r.write(65535, pattern(3, 4))  # unaligned and across a stripe edge
    r.req(CMD_WRITE_ZEROES, 4097, 511)
    r.req(CMD_WRITE_ZEROES, 4097, 511, CMD_FLAG_FAST_ZERO)
    r.req(CMD_TRIM, 100, 1000)
    r.req(CMD_CACHE, 3, 5)
    r.req(CMD_BLOCK_STATUS, 1, 1)
    r.disc()
    s["go-structured-unaligned"] = hs + r.out

    # Old-style negotiation: EXPORT_NAME, simple replies, zero padding.
    r = Requests()
    r.write(8192, pattern(4096, 5), CMD_FLAG_FUA)
    r.req(CMD_READ, 8192, 4096)
    r.req(CMD_FLUSH)
    r.req(CMD_TRIM, 0, 4096)
    r.req(CMD_WRITE_ZEROES, 0, 4096)
    r.disc()
    s["export-name-simple"] = (client_flags(no_zeroes=False) +
                               option(OPT_EXPORT_NAME, b"disk") + r.out)

    # Asking before choosing: LIST, INFO with name and description,
    # LIST_META_CONTEXT, an unknown option, STARTTLS, then ABORT.
    s["list-info-abort"] = (
        client_flags() + option(OPT_LIST) +
        option(OPT_INFO, name_info("ro", [INFO_NAME, INFO_DESCRIPTION,
                                          INFO_BLOCK_SIZE])) +
        option(OPT_INFO, name_info("", [])) +
        option(OPT_STRUCTURED_REPLY) +
        option(OPT_LIST_META_CONTEXT, meta("disk", [])) +
        option(OPT_LIST_META_CONTEXT, meta("disk", ["base:"])) +
        option(0x42, b"unknown") + option(OPT_STARTTLS) +
        option(OPT_ABORT))

    # The read-only export: reads and block status work, writes do not.
    r = Requests()
    r.req(CMD_READ, 0, 64 * KIB)
    r.req(CMD_READ, 60 * KIB, 8 * KIB, CMD_FLAG_DF)
    r.req(CMD_BLOCK_STATUS, 0, 512 * KIB)
    r.write(0, pattern(512, 6))
    r.req(CMD_TRIM, 0, 4096)
    r.req(CMD_WRITE_ZEROES, 0, 4096)
    r.req(CMD_FLUSH)
    r.disc()
    s["go-readonly"] = (client_flags() + option(OPT_STRUCTURED_REPLY) +
                        option(OPT_SET_META_CONTEXT,
                               meta("ro", ["base:allocation"])) +
                        option(OPT_GO, name_info("ro", [INFO_NAME])) + r.out)

    # Mistakes the server must answer and survive: bad option lengths,
    # data where none belongs, unknown exports, then bad requests.
    r = Requests()
    r.req(CMD_READ, 0, 4096, 0x8000)  # unknown flag
    r.req(CMD_READ, 2 * MIB - 512, 4096)  # past the end
    r.write(2 * MIB, pattern(16, 7))  # past the end (ENOSPC)
    r.req(CMD_READ, 0, 33 * MIB, CMD_FLAG_DF)  # over the maximum payload
    r.req(CMD_BLOCK_STATUS, 0, 4096)  # no base:allocation
    r.req(CMD_WRITE_ZEROES, 0, 0)  # zero length
    r.req(CMD_READ, 0, 0)
    r.req(0x99, 0, 512)  # unknown command
    r.req(CMD_FLUSH, 0, 4096)
    r.disc()
    s["errors"] = (
        client_flags() +
        option(OPT_STRUCTURED_REPLY, b"x") +
        option(OPT_INFO, b"\0\0\0\xff\0\0") +  # name longer than option
        option(OPT_INFO, name_info("", [INFO_NAME])[:-1]) +  # odd length
        option(OPT_GO, b"\0") +  # too short
        option(OPT_INFO, name_info("x" * 4097, [])) +  # name too long
        option(OPT_SET_META_CONTEXT, meta("", ["base:allocation"])) +
        option(OPT_LIST, b"x") +
        option(OPT_GO, name_info("nosuch", [])) +
        option(OPT_LIST_META_CONTEXT, meta("", ["nocolon"])) +
        option(OPT_GO, name_info("", [])) + r.out)

    # Writes large enough (64 KiB) to be received straight into their
    # buffers.  Sent in two halves: the first ends inside the second
    # write's header, which is then read alone (after a big write), and
    # the second payload arrives whole in one direct read.
    def big_write(cookie):
        r = Requests(cookie)
        r.write(0, pattern(64 * KIB, 8))
        r.write(64 * KIB, pattern(64 * KIB, 9), CMD_FLAG_FUA)
        r.req(CMD_READ, 0, 128 * KIB)
        r.disc()
        return (client_flags() + option(OPT_GO, name_info("disk", [])) +
                r.out)
    s["big-write"] = in_halves(big_write)

    # Enough pipelined requests to reach the in-flight limit (256): sent
    # in two halves, so the connection pauses in the middle of the first,
    # keeps the rest of that read, resumes once the replies are out, and
    # reads the second half from the socket.
    def pipelined(cookie):
        r = Requests(cookie)
        for i in range(600):
            r.req(CMD_READ, (i * 4096) % (2 * MIB), 512)
        r.disc()
        return client_flags() + option(OPT_GO, name_info("", [])) + r.out
    s["pipelined-600"] = in_halves(pipelined)

    # The big sparse export: a read above the maximum payload is in range
    # there, so it is refused for its size; block status stops at the
    # limit of chunk lookups.
    r = Requests()
    r.req(CMD_READ, 0, 1 * MIB)
    r.req(CMD_READ, 0, 32 * MIB + 512, CMD_FLAG_DF)
    r.req(CMD_READ, 0, 48 * MIB)
    r.req(CMD_BLOCK_STATUS, 0, 128 * MIB)
    r.req(CMD_CACHE, 0, 64 * MIB)
    r.req(CMD_WRITE_ZEROES, 0, 64 * MIB)
    r.disc()
    s["go-big"] = (client_flags() + option(OPT_STRUCTURED_REPLY) +
                   option(OPT_SET_META_CONTEXT,
                          meta("big", ["base:allocation"])) +
                   option(OPT_GO, name_info("big", [INFO_BLOCK_SIZE])) +
                   r.out)

    # Meta context chosen for another export: dropped at GO.
    r = Requests()
    r.req(CMD_BLOCK_STATUS, 0, 4096)
    r.disc()
    s["meta-other-export"] = (
        client_flags() + option(OPT_STRUCTURED_REPLY) +
        option(OPT_SET_META_CONTEXT, meta("ro", ["base:allocation"])) +
        option(OPT_GO, name_info("disk", [])) + r.out)

    # Lost framing: a bad magic drops the client.
    r = Requests()
    r.req(CMD_READ, 0, 512)
    r.req(CMD_READ, 0, 512, magic=0x12345678)
    r.req(CMD_READ, 0, 512)
    s["bad-magic"] = (client_flags() + option(OPT_GO, name_info("", [])) +
                      r.out)

    # Ends half-way through a write payload (EOF with a payload pending).
    r = Requests()
    r.req(CMD_WRITE, 0, 4096, 0, pattern(1000, 10))
    s["eof-mid-write"] = (client_flags() +
                          option(OPT_EXPORT_NAME, b"") + r.out)
    return s


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus")
    os.makedirs(out, exist_ok=True)
    for name, data in sorted(sessions().items()):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
        print(f"{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
