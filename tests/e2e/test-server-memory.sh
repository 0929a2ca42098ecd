#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: one memory policy for payload buffers.  bionbd -t 2, a burst
# of reads of every buffer size class from 4 KiB to 32 MiB (8 in flight on
# each of two connections, one per worker): within 5 s of the last request
# the server's RSS is back under 24 MiB per worker above what it started
# with (the bound asked for is 64 MiB; it held 131 MB here, 423 MB on a
# larger run, before the caches had a budget and an idle trim).  Then 1 MiB reads at queue
# depth 32 in steady state: no buffer is mapped or unmapped per request
# (strace counts mmaps/munmaps of 1 MiB over 2 s: a handful at most).  And --memory 0
# (cache nothing) still serves correctly.  Both backends.
source "$(dirname "$0")/functions.sh"

requires_nbdpy
requires strace -V
make_tmpdir

for be in $BACKENDS; do
    log "backend $be"
    d=$tmp/$be
    mkdir -p "$d"
    start_bionbd -t 2 --backend "$be" --size 256M "$d/m0" "$d/m1"
    SERVER_PID=$SERVER_PID NBD_URI=$NBD_URI nbdpy - <<'PY' || die "$be: memory cases failed"
import os
import re
import signal
import subprocess
import time

import nbd
from nbd_e2e import *
from nbd_e2e import rss_mib as nbd_rss_mib

pid = int(os.environ["SERVER_PID"])
MIB = 1 << 20


def rss_mib():
    return nbd_rss_mib(pid)


def burst(conns, size, depth):
    cookies = []
    for h in conns:
        for i in range(depth):
            off = (i * size) % (256 * MIB - size + 1) // 4096 * 4096
            cookies.append((h, h.aio_pread(nbd.Buffer(size), off)))
    for h in conns:
        while h.aio_in_flight():
            h.poll(1)
    for h, c in cookies:
        check(h.aio_command_completed(c), "read not retired")


conns = [connect(), connect()]
base = rss_mib()
for shift in range(12, 26):
    burst(conns, 1 << shift, 8)
peak = rss_mib()
log(f"RSS {base:.0f} MiB before, {peak:.0f} MiB after the burst")
# The issue's bound is 64 MiB a worker; an idle worker keeps 8 MiB
# (BUF_IDLE_KEEP_BYTES), so hold it to that, with room to spare.
limit = base + 2 * 24
t0 = time.monotonic()
while rss_mib() > limit and time.monotonic() - t0 < 5:
    time.sleep(0.25)
now = rss_mib()
check(now <= limit,
      f"RSS {now:.0f} MiB 5 s after the burst, over {limit:.0f} MiB")
log(f"RSS {now:.0f} MiB {time.monotonic() - t0:.1f} s after the burst")

# Steady 1 MiB at QD32: the cache serves every buffer.
h = conns[0]
stop = time.monotonic() + 1
while time.monotonic() < stop:
    burst([h], MIB, 32)
# Every mmap/munmap of a payload-buffer size (the 1 MiB class): a buffer
# mapped or unmapped per request would show here.  Other mappings (a
# thread's malloc arena growing under the thread-pool backend) are not
# buffers and are not counted, only shown.
tr = subprocess.Popen(["strace", "-f", "-e", "trace=mmap,munmap",
                       "-p", str(pid), "-o", "/dev/stderr"],
                      stderr=subprocess.PIPE, text=True)
time.sleep(0.5)  # attached
stop = time.monotonic() + 2
n = 0
while time.monotonic() < stop:
    burst([h], MIB, 32)
    n += 32
tr.send_signal(signal.SIGINT)
out = tr.communicate(timeout=20)[1]
calls = [line for line in out.splitlines()
         if re.search(r"\b(mmap\(NULL, |munmap\(0x[0-9a-f]+, )%d\b" % MIB,
                      line)]
others = [line for line in out.splitlines()
          if ("mmap(" in line or "munmap(" in line) and line not in calls]
log(f"{n} reads of 1 MiB at QD32: {len(calls)} 1 MiB mmap/munmap calls"
    f" ({len(others)} other mappings)")
# A buffer per request would be two calls a read; a few refills after an
# idle trim (the strace attach stalls the worker) are not that.  Measured
# 0 to 18 for about 400 reads on 2 CPUs under CI load.
check(len(calls) < max(16, n // 8),
      f"{len(calls)} 1 MiB mmap/munmap calls for {n} reads:\n" +
      "\n".join(calls[:20]))
for hh in conns:
    hh.shutdown()
PY
    stop_bionbd

    # Caching nothing is allowed and still correct.
    start_bionbd -t 1 --backend "$be" --memory 0 --size 64M "$d/z0" "$d/z1"
    NBD_URI=$NBD_URI nbdpy - <<'PY' || die "$be: --memory 0 failed"
from nbd_e2e import *
h = connect()
data = bytes(range(256)) * 4096 * 4
h.pwrite(data, 1 << 20)
check(h.pread(len(data), 1 << 20) == data, "--memory 0: data")
h.shutdown()
PY
    stop_bionbd
done
log "PASS"
