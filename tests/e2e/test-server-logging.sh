#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: bionbd's log and signals.  With -f the log is stderr: the
# start-up lines name the export, its size, members and stripe (in the
# largest whole unit: 1M, not 1024K), and where it listens; -v adds debug lines (connections, an export name
# not served: escaped, cut, rate-limited), which are absent without it; --log=null writes nothing at all.  A member that fails every write
# (its tmpfs is full: ENOSPC) while a client sends 300 writes is logged
# with its path, at most SRV_LOG_BURST (20) lines a second, followed by a
# count of the ones held back; every write is still answered (ENOSPC) and
# the connection stays up.  SIGHUP in the middle of 64 writes in flight:
# all complete, the server keeps serving and says it reopened its log.
# SIGQUIT drains and exits 0 like SIGTERM.  --log=syslog: inside a private
# mount namespace whose /dev holds our own /dev/log (a datagram socket the
# test reads), the start-up lines, a member error and the shutdown arrive
# there with the ident bionbd and nothing goes to stderr.  A bad --log
# value is refused with one line.
source "$(dirname "$0")/functions.sh"

requires_nbdpy
requires nbdinfo
requires_mount
make_tmpdir

m=("$tmp/m0" "$tmp/m1" "$tmp/m2")
BURST=20

# ---- start-up lines, -v, --log=null
log "-f: start-up lines on stderr"
start_bionbd --size 64M "${m[@]}"
nbdinfo --size "$NBD_URI" >/dev/null || die "nbdinfo"
stop_bionbd
expect_grep "^bionbd: export '': 67108864 bytes, 3 members, stripe 64K: $tmp/m0, $tmp/m1, $tmp/m2\$" "$SERVER_LOG"
expect_grep "^bionbd: serving on unix socket $NBD_SOCK; [0-9]+ workers, buffers in flight up to [0-9]+[MGTP], backend " "$SERVER_LOG"
expect_grep '^bionbd: Terminated: shutting down$' "$SERVER_LOG"
expect_no_grep 'connection' "$SERVER_LOG"

log "start-up lines: sizes in the largest whole unit"
# A 1M chunk and data offset read "1M", not "1024K".
"$BIOCTL" create --level raid1 --stripe-size 1M --size 8M "$tmp/g0" "$tmp/g1" >/dev/null ||
    die "bioctl create"
start_bionbd --stripe-size 1M "$tmp/g0" "$tmp/g1"
stop_bionbd
expect_grep "^bionbd: export '': 8388608 bytes, volume '' \([-0-9a-f]+\), raid1, 2 copies, 2 members, chunk 1M, data offset 1M: $tmp/g0, $tmp/g1\$" "$SERVER_LOG"
start_bionbd --stripe-size 1G --size 1G "$tmp/g2"
stop_bionbd
expect_grep "^bionbd: export '': 1073741824 bytes, 1 member, stripe 1G: $tmp/g2\$" "$SERVER_LOG"
rm -f "$tmp/g0" "$tmp/g1" "$tmp/g2"

log "-v: debug lines"
start_bionbd -v "${m[@]}"
nbdinfo --size "$NBD_URI" >/dev/null || die "nbdinfo"
stop_bionbd
expect_grep '^bionbd: new connection' "$SERVER_LOG"
expect_grep '^bionbd: connection closed' "$SERVER_LOG"

log "-v: an export name not served, logged escaped, cut and rate-limited"
start_bionbd -v -e served "${m[@]}"
nbdpy - "$NBD_SOCK" <<'PY' || die "asking for export names not served"
import sys
from nbd_raw import (Raw, OPT_GO, OPT_EXPORT_NAME, REP_ERR_UNKNOWN, check)
c = Raw(sys.argv[1])
c.start(structured=False)
c.send_opt(OPT_EXPORT_NAME, b"gone")
c.expect_closed("EXPORT_NAME of an export not served")
# 20 options a connection, under the server's cap on options.
for names in (["no\x01such'\u00e9", "y" * 4096] + ["loop"] * 18,
              ["loop"] * 20):
    c = Raw(sys.argv[1])
    c.start()
    for name in names:
        rtype, _ = c.info_go(OPT_GO, name)
        check(rtype == REP_ERR_UNKNOWN, f"GO {name[:8]!r}: {rtype:#x}")
    c.close()
PY
stop_bionbd
expect_grep "^bionbd: connection 1 \(unix\): NBD_OPT_EXPORT_NAME: no export 'gone': refused$" "$SERVER_LOG"
expect_grep "^bionbd: connection 2 \(unix\): NBD_OPT_GO: no export 'no\\\\x01such\\\\'\\\\xc3\\\\xa9': refused$" "$SERVER_LOG"
expect_grep "^bionbd: connection 2 \(unix\): NBD_OPT_GO: no export 'y{64}\.\.\.' \(4096 bytes\): refused$" "$SERVER_LOG"
# 20 a second at most: 3 lines above, so 17 of the 38, the rest counted.
[[ $(grep -c "no export 'loop'" "$SERVER_LOG") -eq $((BURST - 3)) ]] ||
    die "refusals not limited to $BURST a second: $(grep -c "no export 'loop'" "$SERVER_LOG") lines"
expect_grep "^bionbd: [0-9]+ more refused clients? not logged \(at most $BURST a second\)$" "$SERVER_LOG"
start_bionbd -e served "${m[@]}"
nbdinfo --size "nbd+unix:///nosuch?socket=$NBD_SOCK" >/dev/null 2>&1 &&
    die "nbdinfo of an export not served succeeded"
stop_bionbd
expect_no_grep "no export" "$SERVER_LOG"

log "--log=null: nothing"
start_bionbd --log=null -v "${m[@]}"
nbdinfo --size "$NBD_URI" >/dev/null || die "nbdinfo"
stop_bionbd
[[ ! -s $SERVER_LOG ]] || die "--log=null wrote: $(cat "$SERVER_LOG")"

rc=0
"$BIONBD" -f --log=journal "${m[@]}" >"$tmp/bad" 2>&1 || rc=$?
[[ $rc -eq 1 && $(wc -l <"$tmp/bad") -eq 1 ]] || die "--log=journal: exit $rc: $(cat "$tmp/bad")"
expect_grep '^bionbd: --log journal: expected stderr, syslog or null$' "$tmp/bad"

# ---- a flood of member errors
log "member errors: rate-limited, every request answered"
mount_tmpfs "$tmp/small" 1M
f=("$tmp/small/f0" "$tmp/small/f1" "$tmp/small/f2")
start_bionbd --size 96M "${f[@]}"
NBD_URI=$NBD_URI nbdpy - <<'EOF' || die "flood client failed"
import errno, nbd, signal
signal.alarm(120)
from nbd_e2e import check, connect
h = connect()
failed = 0
for i in range(300):
    try:
        h.pwrite(b"\x5a" * 65536, i * 65536 * 3)
    except nbd.Error as e:
        check(e.errnum == errno.ENOSPC, f"write {i}: {e}")
        failed += 1
check(failed >= 250, f"only {failed} of 300 writes failed")
check(len(h.pread(4096, 0)) == 4096, "connection gone")
h.shutdown()
EOF
stop_bionbd
errs=$(grep -c "^bionbd: member $tmp/small/f[0-2]: write at offset" "$SERVER_LOG" || true)
(( errs >= 1 )) || die "no member error logged: $(head -5 "$SERVER_LOG")"
(( errs <= 4 * BURST )) || die "$errs member error lines for 300 failing writes"
expect_grep "^bionbd: [0-9]+ more errors not logged \(at most $BURST a second\)$" "$SERVER_LOG"
log "$errs member error lines for 300 failing writes"

# ---- signals
log "SIGHUP with 64 writes in flight: all complete"
start_bionbd --size 64M "${m[@]}"
NBD_URI=$NBD_URI SERVER_PID=$SERVER_PID nbdpy - <<'EOF' ||
import os, signal
signal.alarm(60)  # a lost reply fails the test, not the time limit
from nbd_e2e import check, connect
h = connect()
data = os.urandom(256 * 1024)
for i in range(64):
    h.aio_pwrite(data, i * len(data))
os.kill(int(os.environ["SERVER_PID"]), signal.SIGHUP)
while h.aio_in_flight() > 0:
    h.poll(-1)
for i in range(64):
    check(h.pread(len(data), i * len(data)) == data, f"write {i} lost")
h.shutdown()
EOF
    die "SIGHUP client failed"
kill -0 "$SERVER_PID" || die "SIGHUP ended the server"
nbdinfo --size "$NBD_URI" >/dev/null || die "not serving after SIGHUP"
expect_grep '^bionbd: SIGHUP: log reopened; exports unchanged$' "$SERVER_LOG"

log "SIGQUIT: drain and exit 0"
stop_bionbd QUIT
expect_grep '^bionbd: Quit: shutting down$' "$SERVER_LOG"

# ---- syslog, caught in a private mount namespace
log "--log=syslog"
requires unshare --version
cat >"$tmp/sink.py" <<'EOF'
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("/dev/log")
open(sys.argv[1] + ".ready", "w").close()
with open(sys.argv[1], "ab", buffering=0) as out:
    while True:
        out.write(s.recv(65536) + b"\n")
EOF
cat >"$tmp/syslog.sh" <<EOF
set -e
mount -t tmpfs -o size=1M,mode=755 tmpfs /dev
mknod -m 666 /dev/null c 1 3
/usr/bin/python3 "$tmp/sink.py" "$tmp/syslog.out" </dev/null >/dev/null 2>&1 &
sink=\$!
trap 'kill \$sink 2>/dev/null' EXIT
for ((n = 0; n < 200; n++)); do [[ -e $tmp/syslog.out.ready ]] && break; sleep 0.05; done
"$BIONBD" -f --log=syslog -U "$tmp/sl.sock" -P "$tmp/sl.pid" --size 96M \
    ${f[*]} 2>"$tmp/syslog.err" &
srv=\$!
for ((n = 0; n < 200; n++)); do [[ -s $tmp/sl.pid ]] && break; sleep 0.05; done
nbdinfo --size "nbd+unix:///?socket=$tmp/sl.sock" >/dev/null
/usr/bin/python3 -c '
import nbd
h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=$tmp/sl.sock")
try:
    h.pwrite(b"x" * 65536, 90 << 20)
except nbd.Error:
    pass
h.shutdown()'
kill -TERM \$srv
wait \$srv
sleep 0.2
EOF
timeout 120 unshare -m --propagation private bash "$tmp/syslog.sh" ||
    die "syslog run failed: $(cat "$tmp/syslog.err" 2>/dev/null)"
check_sanitizer_log "$tmp/syslog.err"
[[ ! -s $tmp/syslog.err ]] || die "--log=syslog wrote to stderr: $(cat "$tmp/syslog.err")"
grep -a -q "bionbd\[[0-9]*\]: export '': 100663296 bytes, 3 members" "$tmp/syslog.out" ||
    die "no start-up line in syslog: $(cat "$tmp/syslog.out")"
grep -a -q "bionbd\[[0-9]*\]: member $tmp/small/f[0-2]: write at offset" "$tmp/syslog.out" ||
    die "no member error in syslog: $(cat "$tmp/syslog.out")"
grep -a -q "bionbd\[[0-9]*\]: Terminated: shutting down" "$tmp/syslog.out" ||
    die "no shutdown in syslog: $(cat "$tmp/syslog.out")"
log "PASS"
