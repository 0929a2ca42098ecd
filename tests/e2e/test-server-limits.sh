#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: what one client can cost bionbd during negotiation, and the
# limits around connections (server-limits.py does the raw NBD):
#  - options flood: with 4000 exports with descriptions (an NBD_OPT_LIST
#    reply of 750 KiB), two clients each send 1024 LIST options and never
#    read; the server reads no further option while a reply waits, so its
#    RSS grows < 32 MB, another client is served meanwhile, and the
#    flooders, never having read, are cut off by the handshake time limit;
#    the option cap (32 + 4 per export; tested in server-malformed.py)
#    still lets nbdinfo --list see every one of the 4000 exports on one
#    connection;
#  - an idle client is dropped after --handshake-timeout, not before;
#  - --max-connections 3: the fourth client is closed before the greeting,
#    the three keep working, and a slot freed by a leaving client is used;
#  - a second bionbd on the same -U socket exits 1 naming it and the first
#    keeps serving; a socket left by a killed server is replaced;
#  - a start that fails after binding its -U socket (its TCP port taken,
#    its control socket's directory missing) exits 1 and leaves neither
#    that socket nor the pidfile's control socket behind;
#  - -U naming a regular file is refused as such, before members are
#    made, and the file is left alone;
#  - an option whose reply cannot be built (realloc fails, through an
#    LD_PRELOAD shim) ends the connection at once, even with no handshake
#    time limit: the half-built reply once kept it open for good;
#  - under ulimit -n 64 with 200 idle connections the server spins no core
#    (< 10% over 3 s) and keeps serving its existing client.
source "$(dirname "$0")/functions.sh"

requires_nbdpy
requires nbdinfo
make_tmpdir

# ---- options flood, handshake limit
d=$tmp/flood
mkdir -p "$d"
# One member file each: room for 4000 of them open.
if (($(ulimit -n) < 8192)); then
    ulimit -n 8192 2>/dev/null || skip "cannot raise the fd limit to 8192"
fi
desc=$(head -c 160 /dev/zero | tr '\0' 'd')
{
    for i in $(seq 1 ${FLOOD_EXPORTS:-4000}); do
        printf '[export export-%04d]\nfile = m%d\nsize = 1M\ndescription = %s\n' \
            "$i" "$i" "$desc"
    done
} >"$d/many.conf"
start_bionbd -t 2 --handshake-timeout 4 -c "$d/many.conf"
NBD_SOCK=$NBD_SOCK SERVER_PID=$SERVER_PID CASES=flood \
    nbdpy "$SRC_DIR/tests/e2e/server-limits.py" || die "flood cases failed"
n=$(nbdinfo --list "$NBD_URI" | grep -c '^export=') || :
[[ $n -eq ${FLOOD_EXPORTS:-4000} ]] ||
    die "nbdinfo --list saw $n of ${FLOOD_EXPORTS:-4000} exports"
log "ok nbdinfo --list sees all $n exports"
stop_bionbd

d=$tmp/small
mkdir -p "$d"
start_bionbd -t 1 --handshake-timeout 2 --max-connections 3 \
    --size 8M "$d/m0" "$d/m1"
NBD_SOCK=$NBD_SOCK SERVER_PID=$SERVER_PID CASES=idle,maxconn \
    nbdpy "$SRC_DIR/tests/e2e/server-limits.py" || die "limit cases failed"

# ---- a second instance on the same socket
first_sock=$NBD_SOCK
rc=0
timeout 20 "$BIONBD" -f -U "$first_sock" --size 8M "$d/o0" "$d/o1" \
    >"$d/second.out" 2>"$d/second.err" </dev/null || rc=$?
[[ $rc -eq 1 ]] || die "second bionbd on $first_sock: exit status $rc, expected 1"
[[ $(wc -l <"$d/second.err") -eq 1 ]] || die "second bionbd: expected one line on stderr"
expect_grep "^bionbd: unix socket .*nbd\..*\.sock: in use" "$d/second.err"
[[ ! -e $d/o0 ]] || die "second bionbd created its members before refusing"
nbdinfo --size "$NBD_URI" >/dev/null || die "the first server stopped serving"
log "ok second instance refused, the first still serves"

# A socket left behind by a killed server is replaced.
kill -KILL "$SERVER_PID"
wait "$SERVER_PID" 2>/dev/null || :
SERVER_PID=
[[ -S $first_sock ]] || die "the killed server's socket is gone already"
start_bg "$BIONBD" -f -U "$first_sock" "$d/m0" "$d/m1" </dev/null \
    >"$d/third.log" 2>&1
third=$BG_PID
for ((n = 0; n < 100; n++)); do
    nbdinfo --size "nbd+unix:///?socket=$first_sock" >/dev/null 2>&1 && break
    sleep 0.1
done
nbdinfo --size "nbd+unix:///?socket=$first_sock" >/dev/null ||
    die "no server on the replaced stale socket"
kill -TERM "$third"
wait "$third" || die "bionbd on the replaced socket: exit status $?"
log "ok stale socket replaced"

# ---- a start that fails after its sockets are bound removes them
start_bg python3 -c 'import socket, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(1)
print(s.getsockname()[1], flush=True)
time.sleep(600)' >"$d/busy.port"
for ((n = 0; n < 200; n++)); do
    [[ -s $d/busy.port ]] && break
    sleep 0.05
done
busy_port=$(<"$d/busy.port")
[[ $busy_port =~ ^[0-9]+$ ]] || die "no port held for the port-in-use case"
late_fails() {
    local rc=0
    timeout 20 "$BIONBD" -f -t 1 -U "$d/late.sock" "$@" "$d/m0" "$d/m1" \
        </dev/null >"$d/late.err" 2>&1 || rc=$?
    [[ $rc -eq 1 ]] || die "exit status $rc, expected 1: $*"
    [[ $(wc -l <"$d/late.err") -eq 1 ]] || die "expected one line: $*"
    [[ ! -e $d/late.sock ]] || die "a failed start left its -U socket: $*"
    [[ ! -e $d/late.pid && ! -e $d/late.pid.ctl ]] ||
        die "a failed start left its pidfile or control socket: $*"
}
late_fails -P "$d/late.pid" -p "$busy_port"
expect_grep "port $busy_port: Address already in use" "$d/late.err"
late_fails --control "$d/no/such/dir/c.sock"
expect_grep "c.sock: No such file or directory" "$d/late.err"
log "ok a failed start leaves no socket behind"

# Something else than a socket where -U points is never replaced, and is
# named for what it is before any member is made ("Address already in
# use", bind's word for it, would send the user looking for a server).
: >"$d/not-a-socket"
rc=0
timeout 20 "$BIONBD" -f -U "$d/not-a-socket" --size 8M "$d/n0" "$d/n1" \
    </dev/null >"$d/ns.err" 2>&1 || rc=$?
[[ $rc -eq 1 && $(wc -l <"$d/ns.err") -eq 1 ]] ||
    die "-U on a regular file: exit $rc: $(cat "$d/ns.err")"
expect_grep "^bionbd: unix socket $d/not-a-socket: exists and is not a socket$" "$d/ns.err"
[[ -f $d/not-a-socket && ! -e $d/n0 && ! -e $d/n1 ]] ||
    die "-U on a regular file: the file or the members changed"
log "ok -U on a regular file refused, naming it"

# ---- an option reply that cannot be built: the connection ends at once
# (a half-built reply left queued once kept it open, unserved, for as long
# as the handshake limit; here there is none).  A shim fails the realloc
# that grows the 256-byte handshake buffer for a long export name.
d=$tmp/enomem
mkdir -p "$d"
if command -v "${CC:-cc}" >/dev/null; then
    cat >"$d/shim.c" <<'EOF'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

/* Fail one realloc(p, 512) once the file $FAIL_REALLOC_TRIGGER exists. */
void *realloc(void *p, size_t n)
{
	static void *(*next)(void *, size_t);
	const char *t = getenv("FAIL_REALLOC_TRIGGER");

	if (!next)
		next = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
	if (p && n == 512 && t && unlink(t) == 0) {
		errno = ENOMEM;
		return NULL;
	}
	return next(p, n);
}
EOF
    "${CC:-cc}" -shared -fPIC -o "$d/shim.so" "$d/shim.c" -ldl ||
        die "cannot build the realloc shim"
    long=$(printf 'n%.0s' {1..300})
    # Under ASan its runtime must come first, unless told otherwise.
    LD_PRELOAD=$d/shim.so FAIL_REALLOC_TRIGGER=$d/fail \
        ASAN_OPTIONS=verify_asan_link_order=0${ASAN_OPTIONS:+:$ASAN_OPTIONS} \
        start_bionbd -t 1 --handshake-timeout 0 -e "$long" --size 8M \
        "$d/m0" "$d/m1"
    TRIGGER=$d/fail NBD_SOCK=$NBD_SOCK nbdpy - <<'PY' ||
import os, socket
import nbd_raw as raw
from nbd_e2e import check
c = raw.Raw(os.environ["NBD_SOCK"])
c.client_flags(raw.FLAG_C_FIXED_NEWSTYLE)
open(os.environ["TRIGGER"], "w").close()
c.send_opt(raw.OPT_LIST)  # the 20-byte header fits; the 304-byte name not
c.sock.settimeout(5)
try:
    got = c.sock.recv(64)
except socket.timeout:
    got = None
check(not os.path.exists(os.environ["TRIGGER"]), "the shim failed no realloc")
check(got == b"", f"LIST whose reply could not be built: {got!r}, not a close")
# Another client is served as usual.
c = raw.Raw(os.environ["NBD_SOCK"])
c.client_flags(raw.FLAG_C_FIXED_NEWSTYLE)
c.send_opt(raw.OPT_LIST)
check(c.opt_replies(raw.OPT_LIST)[-1][0] == raw.REP_ACK, "LIST after it")
PY
        die "an option reply that could not be built"
    stop_bionbd
    log "ok an option reply that cannot be built ends the connection"
else
    log "no C compiler: the failed option reply case not tried"
fi

# ---- out of file descriptors
d=$tmp/fds
mkdir -p "$d"
(
    ulimit -n 64
    exec "$BIONBD" -f -t 1 -U "$d/sock" -P "$d/pid" --size 8M \
        "$d/m0" "$d/m1" </dev/null >"$d/log" 2>&1
) &
fdpid=$!
_cleanup_pids+=("$fdpid")
show_log_on_failure "$d/log"
for ((n = 0; n < 100; n++)); do
    [[ -s $d/pid ]] && break
    sleep 0.1
done
[[ -s $d/pid ]] || die "bionbd under ulimit -n 64 did not start"
NBD_SOCK=$d/sock SERVER_PID=$fdpid CASES=fds \
    nbdpy "$SRC_DIR/tests/e2e/server-limits.py" || die "fd limit cases failed"
kill -TERM "$fdpid"
wait "$fdpid" || die "bionbd under ulimit -n 64: exit status $?"
expect_grep "accept: Too many open files" "$d/log"
[[ $(grep -c 'accept:' "$d/log") -eq 1 ]] || die "EMFILE logged more than once"
log "PASS"
