#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: the ways other programs start bionbd.  Captive mode: --run
# with no listen option serves a private unix socket, gives the command
# $uri, $unixsocket and $exportname (no $port), and afterwards the server
# is gone and the socket and its directory with it (also when it could not
# start: a missing member is one line and exit 1); the command's exit
# status is bionbd's (7 stays 7, a command killed by SIGKILL gives 137;
# bionbd stopped by SIGTERM, SIGINT or SIGQUIT before its command ended
# exits 128 + the signal, not 0, and passes the signal on to the
# command's process group: the command and its child are gone with the
# server; one that ignores it is killed 5 s after the server is done);
# with -U and an export name with a space, $uri percent-encodes it and
# nbdcopy writes through it and qemu-img reads the same bytes back;
# --description is what nbdinfo shows; with
# -i/-p, $port is set and $uri is nbd://127.0.0.1:PORT/; with -U and -p,
# $uri is the unix socket's and $port is set too.  A [server]
# socket key alone is the only listener, like -U alone; with port, TCP is
# served too.  Socket
# activation (LISTEN_PID/LISTEN_FDS, as libnbd's "[ CMD ]" starts servers):
# nbdinfo and nbdcopy get the data through bionbd with and without -f
# (activation implies it), and no server is left when they return; -U
# next to activation is refused with one line and exit 1; LISTEN_PID of
# another process is ignored, and so is LISTEN_FDS=0 (nothing passed).
# A TCP client's connection has keepalive on (ss shows its timer).
# --exit-with-parent: the server exits when
# the process that started it does.  The test leaves no /tmp/libnbd*
# directory behind (libnbd's socket activation makes one per client and
# removes it only when the client closes its handle: nbdinfo and nbdcopy
# exit without closing it when the server they started fails).
source "$(dirname "$0")/functions.sh"

requires nbdinfo
requires nbdcopy
requires qemu-img
[[ -x $BIONBD ]] || die "$BIONBD not built"
make_tmpdir

# libnbd's socket activation makes its directory in /tmp whatever TMPDIR
# says, as other programs on the machine do: to know ours, the servers
# libnbd starts go through this wrapper, which notes the path of the
# socket it was passed (fd 3, found by its inode in /proc/net/unix).
cat >"$tmp/activated" <<'WRAPPER'
#!/bin/bash
ino=$(readlink /proc/self/fd/3)
ino=${ino#socket:[}
awk -v ino="${ino%]}" '$7 == ino { print $8 }' /proc/net/unix \
    >>"${0%/*}/activated.paths"
exec "$@"
WRAPPER
chmod +x "$tmp/activated"

SIZE=64M
m=("$tmp/m0" "$tmp/m1" "$tmp/m2")

# No bionbd serving these members may be left running.
none_left() {
    local n
    for ((n = 0; n < 100; n++)); do
        pgrep -f "bionbd.*$tmp/m0" >/dev/null || return 0
        sleep 0.05
    done
    pgrep -fa "bionbd.*$tmp/m0" >&2
    die "$1: a bionbd is still running"
}

# run_captive LOG ARGS...: bionbd ARGS (with --run), stderr to LOG checked
# for sanitizer reports; its exit status in $rc, stdout in $out.
run_captive() {
    local log=$1
    shift
    rc=0
    out=$(timeout 60 "$BIONBD" "$@" 2>"$log") || rc=$?
    check_sanitizer_log "$log"
}

log "--run, nowhere to listen given: a private unix socket"
run_captive "$tmp/r1.log" --size $SIZE --run '
    printf "%s|%s|%s|%s\n" "$uri" "$unixsocket" "${port-unset}" "$exportname"
    nbdinfo --size "$uri"' "${m[@]}"
[[ $rc -eq 0 ]] || die "--run nbdinfo: exit $rc: $(cat "$tmp/r1.log")"
IFS='|' read -r uri sock port export <<<"$(head -1 <<<"$out")"
[[ $sock == /* && $uri == "nbd+unix:///?socket=$sock" ]] ||
    die "private socket: uri '$uri', unixsocket '$sock'"
[[ $port == unset && -z $export ]] || die "port '$port', exportname '$export'"
[[ $(tail -1 <<<"$out") == $((64 << 20)) ]] || die "nbdinfo said: $out"
[[ ! -e $sock && ! -e ${sock%/*} ]] || die "left ${sock%/*} behind"
none_left "--run nbdinfo"

log "--run that cannot start: exit 1, one line, no private directory left"
private_dirs() { compgen -G '/tmp/bionbd-??????' | sort || true; }
before=$(private_dirs)
run_captive "$tmp/r0.log" --run 'exit 0' "$tmp/no/such/member"
[[ $rc -eq 1 && $(wc -l <"$tmp/r0.log") -eq 1 ]] ||
    die "--run, missing member: exit $rc: $(cat "$tmp/r0.log")"
[[ $(private_dirs) == "$before" ]] || die "--run left $(private_dirs) behind"

log "--run: the command's exit status is the server's"
run_captive "$tmp/r2.log" --run 'exit 7' "${m[@]}"
[[ $rc -eq 7 ]] || die "--run 'exit 7': exit $rc"
run_captive "$tmp/r3.log" --run 'kill -KILL $$' "${m[@]}"
[[ $rc -eq 137 ]] || die "--run killed by SIGKILL: exit $rc, expected 137"
none_left "--run exit status"

log "--run: bionbd stopped by a signal before its command ended is not a success"
# start_captive_bg CMD: bionbd --run CMD in the background, stdin not a
# terminal (the command leads a process group of its own); once CMD has
# written its pids, the command's in $cmd and a child's in $child.
start_captive_bg() {
    rm -f "$tmp/cmd.pid" "$tmp/child.pid"
    start_bg "$BIONBD" --run "$1" "${m[@]}" </dev/null 2>"$tmp/r4.log"
    srv=$BG_PID
    for ((n = 0; n < 200; n++)); do
        [[ -s $tmp/child.pid ]] && break
        sleep 0.05
    done
    [[ -s $tmp/child.pid ]] || die "--run: the command did not start"
    cmd=$(<"$tmp/cmd.pid")
    child=$(<"$tmp/child.pid")
    on_exit "kill -KILL $cmd $child 2>/dev/null || :"
}
# The shell waits for a child of its own: both get SIGTERM, so neither
# outlives the server, which exits 128 + the signal.  (A shell's
# background child ignores SIGINT and SIGQUIT: those are sent to a
# command that is the child itself, exec'd.)
for sig in TERM INT QUIT; do
    if [[ $sig == TERM ]]; then
        start_captive_bg "echo \$\$ >'$tmp/cmd.pid'; sleep 100 & echo \$! >'$tmp/child.pid'; wait"
    else
        start_captive_bg "echo \$\$ >'$tmp/cmd.pid'; echo \$\$ >'$tmp/child.pid'; exec sleep 100"
    fi
    kill -"$sig" "$srv"
    rc=0
    wait "$srv" || rc=$?
    check_sanitizer_log "$tmp/r4.log"
    want=$((128 + $(kill -l "$sig")))
    [[ $rc -eq $want ]] || die "SIG$sig during --run: exit $rc, expected $want"
    expect_grep "shutting down before the --run command ended \(exit status $want\); passed on to the command" "$tmp/r4.log"
    for pid in "$cmd" "$child"; do
        wait_gone "$pid" 5 || die "SIG$sig during --run: $(ps -o args= -p "$pid") ($pid) outlived the server"
    done
    none_left "--run stopped by SIG$sig"
done
# A command that ignores the signal is killed once the server is done,
# and so is what it started.
start_captive_bg "trap '' TERM; echo \$\$ >'$tmp/cmd.pid'; sleep 100 & echo \$! >'$tmp/child.pid'; wait"
kill -TERM "$srv"
rc=0
wait "$srv" || rc=$?
check_sanitizer_log "$tmp/r4.log"
[[ $rc -eq 143 ]] || die "SIGTERM during --run (ignored): exit $rc, expected 143"
expect_grep "the --run command \(pid $cmd\) is still running 5000 ms after the signal: killing it" "$tmp/r4.log"
for pid in "$cmd" "$child"; do
    wait_gone "$pid" 5 || die "a --run command that ignores SIGTERM: $pid outlived the server"
done
none_left "--run ignoring SIGTERM"

log "--run with -U and an export name with a space: nbdcopy in, qemu-img out"
head -c $((4 << 20)) /dev/urandom >"$tmp/src"
run_captive "$tmp/r4.log" -U "$tmp/s.sock" -e 'my disk' --run '
    echo "$uri|$unixsocket|$exportname"
    nbdcopy "'"$tmp/src"'" "$uri" &&
    qemu-img convert -f raw -O raw "$uri" "'"$tmp/out"'"' "${m[@]}"
[[ $rc -eq 0 ]] || die "-U -e --run: exit $rc: $(cat "$tmp/r4.log")"
[[ $(head -1 <<<"$out") == "nbd+unix:///my%20disk?socket=$tmp/s.sock|$tmp/s.sock|my disk" ]] ||
    die "-U -e: environment: $out"
cmp -n $((4 << 20)) "$tmp/src" "$tmp/out" ||
    die "qemu-img read back other bytes than nbdcopy wrote"
[[ ! -e $tmp/s.sock ]] || die "-U socket left behind"

log "--description reaches the client"
run_captive "$tmp/r7.log" --description 'scratch disk' --run 'nbdinfo "$uri"' \
    "${m[@]}"
[[ $rc -eq 0 ]] || die "--description: exit $rc: $(cat "$tmp/r7.log")"
grep -q '^[[:space:]]*description: scratch disk$' <<<"$out" ||
    die "--description: nbdinfo says: $out"

log "--run on TCP: \$port and an nbd:// URI"
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
run_captive "$tmp/r5.log" -i 127.0.0.1 -p "$port" --run '
    echo "$uri|$port|${unixsocket-unset}"; nbdinfo --size "$uri"' "${m[@]}"
[[ $rc -eq 0 ]] || die "TCP --run: exit $rc: $(cat "$tmp/r5.log")"
[[ $(head -1 <<<"$out") == "nbd://127.0.0.1:$port/|$port|unset" ]] ||
    die "TCP --run: environment: $out"
none_left "--run TCP"
# A TCP client's connection has keepalive on: the server's end of it shows
# a keepalive timer, so a client host that vanishes is found out.
run_captive "$tmp/r5k.log" -i 127.0.0.1 -p "$port" --run '
    /usr/bin/python3 -c "
import nbd, os, subprocess, time
h = nbd.NBD()
h.connect_uri(os.environ[\"uri\"])
# A retransmission timer shows instead while the last reply is unacked.
for _ in range(50):
    out = subprocess.run([\"ss\", \"-tnoH\", \"state\", \"established\",
                          \"( sport = :\" + os.environ[\"port\"] + \" )\"],
                         capture_output=True, text=True, check=True).stdout
    if \"keepalive\" in out:
        break
    time.sleep(0.1)
print(out)
"' "${m[@]}"
[[ $rc -eq 0 ]] || die "TCP keepalive: exit $rc: $(cat "$tmp/r5k.log")"
grep -q 'timer:(keepalive,' <<<"$out" ||
    die "TCP keepalive: the server's socket has no keepalive timer: $out"
none_left "--run TCP keepalive"
run_captive "$tmp/r6.log" -U "$tmp/t.sock" -p "$port" --run '
    echo "$uri|$port|$unixsocket"; nbdinfo --size "nbd://127.0.0.1:$port/"' "${m[@]}"
[[ $rc -eq 0 ]] || die "-U and -p --run: exit $rc: $(cat "$tmp/r6.log")"
[[ $(head -1 <<<"$out") == "nbd+unix:///?socket=$tmp/t.sock|$port|$tmp/t.sock" &&
    $(tail -1 <<<"$out") =~ ^[0-9]+$ ]] ||
    die "-U and -p --run: \$port must be set as TCP listens too: $out"
none_left "--run -U and TCP"

log "[server] socket alone is the only listener, like -U alone; with port, TCP too"
printf '[server]\nsocket = c.sock\n[export one]\nfile = m0\n' >"$tmp/sock.conf"
run_captive "$tmp/r8.log" -c "$tmp/sock.conf" --run 'echo "$uri|${port-unset}"'
[[ $rc -eq 0 && $out == "nbd+unix:///one?socket=$tmp/c.sock|unset" ]] ||
    die "socket key: exit $rc, said '$out': $(cat "$tmp/r8.log")"
expect_grep "serving on unix socket $tmp/c\.sock; " "$tmp/r8.log"
printf '[server]\nsocket = c.sock\nport = %s\n[export one]\nfile = m0\n' "$port" \
    >"$tmp/sock.conf"
run_captive "$tmp/r8.log" -c "$tmp/sock.conf" --run 'nbdinfo --size "nbd://127.0.0.1:'"$port"'/"'
[[ $rc -eq 0 && $out == $(stat -c %s "$tmp/m0") ]] ||
    die "socket and port keys: exit $rc, said '$out': $(cat "$tmp/r8.log")"
expect_grep "serving on unix socket $tmp/c\.sock, TCP 127\.0\.0\.1:$port; " "$tmp/r8.log"
none_left "[server] socket"

log "socket activation: nbdinfo and nbdcopy start bionbd themselves"
for f in -f ''; do
    size=$(timeout 60 nbdinfo --size -- [ "$tmp/activated" "$BIONBD" $f --size $SIZE "${m[@]}" ] 2>"$tmp/a.log") ||
        die "nbdinfo -- [ bionbd $f ]: $(cat "$tmp/a.log")"
    [[ $size == $((64 << 20)) ]] || die "activated ($f): size $size"
    rm -f "$tmp/out2"
    timeout 60 nbdcopy -- [ "$tmp/activated" "$BIONBD" $f "${m[@]}" ] "$tmp/out2" 2>"$tmp/a.log" ||
        die "nbdcopy -- [ bionbd $f ]: $(cat "$tmp/a.log")"
    check_sanitizer_log "$tmp/a.log"
    cmp -n $((4 << 20)) "$tmp/src" "$tmp/out2" ||
        die "activated ($f): nbdcopy read other bytes"
    none_left "activated ($f)"
done

log "socket activation refuses -U; LISTEN_PID of another process is ignored"
# A listening socket passed as systemd and libnbd pass it, by hand: a
# client that started the server itself would leave its directory behind
# when the server refuses (see above).
rc=0
timeout 60 /usr/bin/python3 -c '
import os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen()
if s.fileno() != 3:
    os.dup2(s.fileno(), 3)
os.set_inheritable(3, True)
os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS="1")
os.execv(sys.argv[2], sys.argv[2:])' "$tmp/act.sock" \
    "$BIONBD" -f -U "$tmp/x.sock" "${m[@]}" 2>"$tmp/act.log" || rc=$?
check_sanitizer_log "$tmp/act.log"
[[ $rc -eq 1 && $(wc -l <"$tmp/act.log") -eq 1 ]] ||
    die "activation with -U: exit $rc: $(cat "$tmp/act.log")"
expect_grep 'socket activation \(LISTEN_FDS\): -U, -i and -p' "$tmp/act.log"
run_captive "$tmp/r6.log" --run 'nbdinfo --size "$uri" >/dev/null' "${m[@]}"
LISTEN_PID=1 LISTEN_FDS=1 run_captive "$tmp/r6.log" \
    --run 'nbdinfo --size "$uri" >/dev/null; echo "${LISTEN_FDS-gone}"' "${m[@]}"
[[ $rc -eq 0 ]] || die "LISTEN_PID=1: exit $rc: $(cat "$tmp/r6.log")"
[[ $out == 1 ]] || die "another process's LISTEN_FDS was taken: '$out'"
none_left "LISTEN_PID of another process"
# Ours, but no socket passed: not activated (sd_listen_fds says 0 too), so
# --run (refused under activation) serves on its private socket.
rc=0
out=$(LISTEN_FDS=0 timeout 60 bash -c 'LISTEN_PID=$$ exec "$@"' - \
    "$BIONBD" --run 'nbdinfo --size "$uri"' "${m[@]}" 2>"$tmp/r7.log") || rc=$?
check_sanitizer_log "$tmp/r7.log"
[[ $rc -eq 0 && $out =~ ^[0-9]+$ ]] ||
    die "LISTEN_FDS=0: exit $rc, said '$out': $(cat "$tmp/r7.log")"
none_left "LISTEN_FDS=0"

log "--exit-with-parent"
# The subshell is the parent: it starts bionbd, waits until it serves
# (the pidfile), notes its pid and exits.
( "$BIONBD" --exit-with-parent -U "$tmp/p.sock" -P "$tmp/p.pid" "${m[@]}" \
    2>"$tmp/p.log" &
  echo $! >"$tmp/p.child"
  for ((n = 0; n < 200; n++)); do
      [[ -s $tmp/p.pid ]] && exit 0
      sleep 0.05
  done
  exit 1 ) || die "--exit-with-parent: never served: $(cat "$tmp/p.log")"
pid=$(cat "$tmp/p.child")
wait_gone "$pid" 10 || die "--exit-with-parent: still running after its parent"
check_sanitizer_log "$tmp/p.log"
[[ ! -e $tmp/p.sock ]] || die "--exit-with-parent: socket left behind"

log "no libnbd socket activation directory left behind"
[[ $(wc -l <"$tmp/activated.paths") -eq 4 ]] ||
    die "the activated servers noted $(cat "$tmp/activated.paths"), not 4 sockets"
while read -r sock; do
    [[ $sock == /tmp/libnbd*/sock ]] || die "activated on '$sock', not libnbd's"
    [[ ! -e ${sock%/sock} ]] || die "left behind: ${sock%/sock}"
done <"$tmp/activated.paths"
log "PASS"
