# SPDX-License-Identifier: MIT
"""nbd_e2e.py - helpers for the end-to-end NBD tests (not a test itself).

Imported by the Python snippets of tests/e2e/test-*.sh, which run under
Debian's python3 through `nbdpy` (functions.sh).  Everything here is an
independent model of what the server must do: the stripe layout rule is
written out again below, from docs/design.md, and the member files are read with
plain os calls, never through the engine.
"""
import errno
import os
import re
import sys

import nbd

TEST = os.environ.get("TEST_NAME", "nbd_e2e")
SECTOR = 512

HOLE_ZERO = nbd.STATE_HOLE | nbd.STATE_ZERO


def log(msg):
    print(f"{TEST}: {msg}", file=sys.stderr, flush=True)


def fail(msg):
    print(f"{TEST}: FAIL: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


# AddressSanitizer's shadow memory (x86_64: 0x7fff8000 to 0x10007fff8000)
# grows as buffers are mapped and unmapped, and is the sanitizer's, not
# bionbd's: the resident memory outside it is what the server's memory
# policies bound.  Nothing else of a process lives in that range.
ASAN_SHADOW = (0x7fff8000, 0x10007fff8000)


def rss_mib(pid):
    """The resident memory of process pid outside ASan's shadow, MiB."""
    kib = 0
    start = 0
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            if re.match(r"[0-9a-f]+-[0-9a-f]+ ", line):
                start = int(line.split("-", 1)[0], 16)
            elif line.startswith("Rss:") and \
                    not ASAN_SHADOW[0] <= start < ASAN_SHADOW[1]:
                kib += int(line.split()[1])
    if not kib:
        fail("no Rss in smaps")
    return kib / 1024


def env_int(name):
    return int(os.environ[name], 0)


def members_from_env():
    return os.environ["MEMBERS"].split()


def connect(uri=None, strict=None, meta=True):
    """A handle on uri (default $NBD_URI) asking for base:allocation.

    strict: None keeps libnbd's client-side checks; otherwise the flags to
    keep, e.g. 0 to let every malformed request reach the server."""
    h = nbd.NBD()
    if meta:
        h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
    if strict is not None:
        h.set_strict_mode(strict)
    h.connect_uri(uri or os.environ["NBD_URI"])
    return h


def expect_error(want, what, fn, *args, **kw):
    """fn(*args) must fail with NBD error errno `want`."""
    try:
        fn(*args, **kw)
    except nbd.Error as e:
        if e.errnum != want:
            fail(f"{what}: expected {errno.errorcode[want]}, got "
                 f"{errno.errorcode.get(e.errnum, e.errnum)} ({e.string})")
        return
    fail(f"{what}: expected {errno.errorcode[want]}, but it succeeded")


# ---------------------------------------------------------------- layout

def layout(off, chunk, n):
    """Volume byte off -> (member, member offset): chunk k = off / chunk
    lives on member k % n at (k / n) * chunk."""
    k = off // chunk
    return k % n, (k // n) * chunk + off % chunk


def member_view(members, chunk, size):
    """The volume as the member files say it is, by the layout rule."""
    n = len(members)
    files = [open(m, "rb") for m in members]
    out = bytearray(size)
    try:
        for start in range(0, size, chunk):
            m, moff = layout(start, chunk, n)
            piece = min(chunk, size - start)
            files[m].seek(moff)
            data = files[m].read(piece)
            # A member shorter than its share reads as zeroes there.
            out[start:start + len(data)] = data
    finally:
        for f in files:
            f.close()
    return out


def first_difference(a, b):
    if a == b:
        return None
    n = min(len(a), len(b))
    step = 1 << 16
    for base in range(0, n, step):
        if a[base:base + step] != b[base:base + step]:
            for i in range(base, min(base + step, n)):
                if a[i] != b[i]:
                    return i
    return n


def check_members(model, members, chunk, what="members"):
    """The member files hold model at the places the layout rule names."""
    view = member_view(members, chunk, len(model))
    i = first_difference(view, model)
    if i is not None:
        m, moff = layout(i, chunk, len(members))
        fail(f"{what}: volume byte {i} (chunk {i // chunk}, member {m} "
             f"offset {moff}) is {view[i]:#04x} in {members[m]}, "
             f"expected {model[i]:#04x}")


def check_volume(h, model, what="volume", step=4 << 20):
    """Reading the whole volume through NBD gives model."""
    for off in range(0, len(model), step):
        n = min(step, len(model) - off)
        got = h.pread(n, off)
        if got != model[off:off + n]:
            i = off + first_difference(got, model[off:off + n])
            fail(f"{what}: byte {i} read {got[i - off]:#04x}, expected "
                 f"{model[i]:#04x}")


# ---------------------------------------------------------------- holes

def data_ranges(path):
    """[(start, end)] of a file's data, by SEEK_DATA/SEEK_HOLE."""
    out = []
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        off = 0
        while off < size:
            try:
                d = os.lseek(fd, off, os.SEEK_DATA)
            except OSError as e:
                if e.errno == errno.ENXIO:
                    break
                raise
            hole = os.lseek(fd, d, os.SEEK_HOLE)
            out.append((d, hole))
            off = hole
    finally:
        os.close(fd)
    return out


def is_hole(path, off, length):
    """No data anywhere in [off, off + length) of path."""
    return all(e <= off or s >= off + length for s, e in data_ranges(path))


def blocks(path):
    return os.stat(path).st_blocks


def member_pieces(off, length, chunk, n):
    """[(member, member offset, length)] of a volume range."""
    out = []
    end = off + length
    while off < end:
        m, moff = layout(off, chunk, n)
        piece = min(chunk - off % chunk, end - off)
        out.append((m, moff, piece))
        off += piece
    return out


def merge(extents):
    """Merge neighbouring (offset, length, flags) with equal flags."""
    out = []
    for off, length, flags in extents:
        if out and out[-1][2] == flags and out[-1][0] + out[-1][1] == off:
            out[-1] = (out[-1][0], out[-1][1] + length, flags)
        else:
            out.append((off, length, flags))
    return out


def expected_extents(members, chunk, off, length):
    """Allocation of a volume range as the member files report it, mapped
    by the layout rule: data = 0, hole = HOLE|ZERO."""
    n = len(members)
    ranges = [data_ranges(m) for m in members]
    out = []
    pos = off
    for m, moff, piece in member_pieces(off, length, chunk, n):
        cur = moff
        mend = moff + piece
        while cur < mend:
            # Is cur in data?  Where does that state end?
            state, nxt = HOLE_ZERO, mend
            for s, e in ranges[m]:
                if s <= cur < e:
                    state, nxt = 0, min(e, mend)
                    break
                if s > cur:
                    nxt = min(s, mend)
                    break
            out.append((pos + (cur - moff), nxt - cur, state))
            cur = nxt
        pos += piece
    return merge(out)


def block_status(h, length, off, flags=0):
    """base:allocation of [off, off + length) as merged (offset, length,
    flags), asking again where the server's answer stops short."""
    out = []
    end = off + length
    while off < end:
        got = []

        def cb(metacontext, offset, entries, err):
            if metacontext == nbd.CONTEXT_BASE_ALLOCATION:
                got.extend(entries)

        h.block_status(end - off, off, cb, flags)
        check(len(got) >= 2, f"block status at {off}: empty answer")
        pos = off
        for i in range(0, len(got), 2):
            n = min(got[i], end - pos)
            if n <= 0:
                break
            out.append((pos, n, got[i + 1]))
            pos += n
        off = pos
    return merge(out)


def server_error(want, what, fn, *args):
    """fn(*args) fails with NBD error want, and the error came from the
    server (libnbd says "command failed"), not from libnbd's own checks."""
    name = errno.errorcode[want]
    try:
        fn(*args)
    except nbd.Error as e:
        check(e.errnum == want, f"{what}: expected {name}, got "
              f"{errno.errorcode.get(e.errnum, e.errnum)} ({e.string})")
        check("command failed" in (e.string or ""),
              f"{what}: refused by libnbd, not the server: {e.string}")
        return
    fail(f"{what}: expected {name}, but it succeeded")


def restart_nbdkit(pid, sock, args):
    """Kill nbdkit @pid (SIGKILL: a crash, its caches lost) and start it
    again on unix socket @sock with nbdkit arguments @args (a list); the
    new one exits with the caller.  Returns once it listens and a server's
    idle connections to the old one are past their 0.2 s idle check."""
    import signal
    import subprocess
    import time
    os.kill(pid, signal.SIGKILL)
    # Gone, or a zombie its parent (the test script) has not reaped yet.
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split()[2] == "Z":
                    break
        except OSError:  # gone between the lookup and the read (ESRCH)
            break
        time.sleep(0.05)
    os.unlink(sock)
    subprocess.Popen(["nbdkit", "-f", "--exit-with-parent", "-U", sock] +
                     args)
    while not os.path.exists(sock):
        time.sleep(0.05)
    time.sleep(0.3)


def sigstop(pid):
    """SIGSTOP pid and wait until every thread of it has stopped: kill()
    returns before a thread busy on another CPU has, and a request that
    reaches it meanwhile is still answered."""
    import signal
    import time
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while True:
        running = 0
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            return
        for t in tasks:
            try:
                with open(f"/proc/{pid}/task/{t}/stat") as f:
                    s = f.read()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if s[s.rindex(")") + 2] not in "tT":
                running += 1
        if not running:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"pid {pid}: {running} threads not stopped")
        time.sleep(0.001)


def restart_remote_from_env():
    """restart_nbdkit of the remote the test script names: $WBPID on
    $SOCK, started with the nbdkit arguments $WBARGS."""
    restart_nbdkit(int(os.environ["WBPID"]), os.environ["SOCK"],
                   os.environ["WBARGS"].split())


def write_then_lose_cache(h, flushed, unflushed):
    """Write @flushed at 0 and flush, write @unflushed at 1 MiB, then crash
    and restart the remote ($WBPID ...) with its writeback cache: it keeps
    @flushed and has lost @unflushed."""
    h.pwrite(flushed, 0)
    h.flush()
    h.pwrite(unflushed, 1 << 20)
    restart_remote_from_env()
