#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: a daemonized bionbd (no -f) changes to / and every path it
# was given relative to the directory it started in still works there.
# Started from a scratch directory with relative paths only: a raid1 of
# two member files and a remote (nbdkit on a unix socket, socket=
# relative), a --spare, a --fault rule's file=, -U, -P, --control,
# --stats.  Then /proc/PID/cwd is /; data written reads back equal
# (reads go to every copy, the remote's over connections the workers make
# after the fork); the statistics file is rewritten; the control socket
# answers; the fault rule fires once its trigger file appears, and the
# spare takes the failed member's role and is rebuilt; after SIGTERM the
# socket, the pidfile and the control socket are gone.
source "$(dirname "$0")/functions.sh"

requires_server
requires nbdkit
requires nbdcopy
make_tmpdir
cd "$tmp"

# The remote: a file behind nbdkit, reached through a relative socket=.
truncate -s 40M r.img
start_bg nbdkit -f --exit-with-parent -U "$tmp/r.sock" file r.img \
    </dev/null >r.log 2>&1
show_log_on_failure "$tmp/r.log"
for ((n = 0; n < 200; n++)); do
    [[ -S r.sock ]] && break
    sleep 0.05
done
[[ -S r.sock ]] || die "nbdkit did not start"
remote="nbd+unix:///?socket=r.sock"

expect_ok "$BIOCTL" create --level raid1 --size 32M m0 m1 "$remote"
truncate -s 40M s0
head -c 4M /dev/urandom >src

# stderr is /dev/null once daemonized: sanitizer reports go to files.
log "daemonized, with relative paths"
asan_log=$tmp/sanitizer
rc=0
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}log_path=$asan_log \
UBSAN_OPTIONS=${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}log_path=$asan_log \
    timeout 30 "$BIONBD" -t 2 -U nbd.sock -P pid --control ctl.sock \
    --stats stats.json --stats-interval 1 --spare s0 \
    --fault "member=1 op=write count=1 file=trigger" \
    m0 m1 "$remote" >out 2>&1 </dev/null || rc=$?
[[ $rc -eq 0 ]] || { cat out >&2; die "start: exit status $rc"; }
daemon=$(<pid)
[[ $daemon =~ ^[0-9]+$ ]] || die "the pidfile holds '$daemon'"
on_exit "[[ \$(ps -o comm= -p $daemon) == bionbd ]] && kill -KILL $daemon"
cwd=$(readlink "/proc/$daemon/cwd") || die "no /proc/$daemon/cwd"
[[ $cwd == / ]] || die "the daemon's directory is $cwd, not /"

uri="nbd+unix:///?socket=$tmp/nbd.sock"
timeout 60 nbdcopy src "$uri" || die "nbdcopy into the volume"
# Twice, on two connections: each worker reads from every copy in turn.
for i in 1 2; do
    timeout 60 nbdcopy --connections=2 "$uri" back || die "nbdcopy out of the volume"
    cmp -n 4M src back || die "the data read back differs ($i)"
done
timeout 10 "$BIOCTL" stat -n 1 ctl.sock >stat.txt 2>&1 || {
    cat stat.txt >&2
    die "bioctl stat on the relative control socket"
}
expect_grep "connections open" stat.txt

# The statistics file, rewritten every second, counts the writes.
wrote() {
    py -c 'import json, sys
d = json.load(open("stats.json"))
sys.exit(d["exports"][0]["ops"]["write"]["bytes"] < 4 << 20)' 2>/dev/null
}
for ((n = 0; n < 100; n++)); do
    wrote && break
    sleep 0.1
done
wrote || { cat stats.json >&2; die "stats.json does not count the writes"; }

log "the fault's trigger file, then the spare takes over"
touch trigger
head -c 1M /dev/urandom >src2
timeout 60 nbdcopy src2 "$uri" || die "nbdcopy while member 1 fails"
state=
for ((n = 0; n < 600; n++)); do
    "$BIOCTL" info m0 s0 "$remote" >info.txt 2>&1 || :
    state=$(sed -n "s|^role 1: \(.*/\)\?s0, ||p" info.txt)
    [[ $state == active ]] && break
    sleep 0.1
done
[[ $state == active ]] || { cat info.txt >&2; die "the spare is not rebuilt ($state)"; }
# The remote, written on the workers' own connections, kept its role.
expect_grep "^role 2: .*r\.sock, active" info.txt
timeout 60 nbdcopy "$uri" back || die "nbdcopy out of the volume after the takeover"
cmp -n 1M src2 back || die "the data read back after the takeover differs"

log "SIGTERM: what it made is gone"
kill -TERM "$daemon"
wait_gone "$daemon" 20 || die "still running 20 s after SIGTERM"
for f in nbd.sock pid ctl.sock; do
    [[ ! -e $f ]] || die "$f left behind after SIGTERM"
done
[[ -s stats.json ]] || die "no stats.json at exit"
for f in "$asan_log".*; do
    [[ -e $f ]] || continue
    check_sanitizer_log "$f"
done
exit 0
