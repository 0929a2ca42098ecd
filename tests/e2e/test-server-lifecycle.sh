#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: bionbd's life cycle.  SIGTERM in the middle of a load (a
# libnbd writer with 32 writes in flight, plus fio if it has its nbd
# engine): the server exits 0 and every write it acknowledged is on the
# member files.  Clients that hang up (FIN or RST) with 120 requests in
# flight, or stop reading 128 MiB of replies: no crash, no connection left
# over, another client served meanwhile.  500 idle connections: the
# server's RSS growth is printed and must stay under 64 MiB.  SIGINT also
# exits 0, and a client still negotiating then gets NBD_REP_ERR_SHUTDOWN
# for its options and an ACK for its ABORT.  SIGTERM while requests the
# server read wait to start (behind the per-connection limit, or for
# buffer room, a read or a write whose payload sits whole in the stash
# with requests behind it): they get NBD_ESHUTDOWN, the started ones their
# data; writes whose payload is still being sent (half stashed, held for
# buffer room, half received) get no answer.  Daemon mode (no -f): returns once serving, pidfile written,
# SIGTERM removes socket and pidfile.  --help and --version; a mistyped
# option or a missing argument: getopt's line and "Try 'bionbd --help'.",
# exit 1.  Config errors (missing member, stripe size not a power of two,
# unknown key, duplicate member, key or export, text after a section
# header, bad size, --stats-interval without --stats, --trace-buffer
# without --trace, --timeout with no remote member, -P in a missing
# directory, two of its own files at one path, ...): exit 1 with one line naming the option or key and the
# value (a [server] key by its file and line, also a user, path or address
# found wrong only when it is used), and nothing created, no socket left
# either.  SIGUSR1 and SIGHUP while the server finishes (its final flush
# held): still exit 0, pidfile removed.  Both backends where it matters.
source "$(dirname "$0")/functions.sh"

requires_nbdpy
requires nbdinfo
make_tmpdir

CHUNK=64K SIZE=64M LOAD_BYTES=$((32 << 20))
IDLE_CONNS=500
IDLE_RSS_LIMIT_KIB=$((64 * 1024))

have_fio_nbd=
if command -v fio >/dev/null && fio --enghelp=nbd >/dev/null 2>&1; then
    have_fio_nbd=1
fi

lifecycle() { # PY-ARGS... with the current server's environment
    MEMBERS="${members[*]}" CHUNK=$(to_bytes $CHUNK) LOAD_BYTES=$LOAD_BYTES \
        NBD_URI=$NBD_URI NBD_SOCK=$NBD_SOCK SERVER_PID=$SERVER_PID \
        nbdpy "$SRC_DIR/tests/e2e/server-lifecycle.py" "$@"
}

# wait_exit PID SECONDS: PID (a child of this shell) exits within SECONDS;
# its exit status in $exit_rc.
wait_exit() {
    local pid=$1
    wait_gone "$pid" "$2" || die "pid $pid still running after $2 s"
    exit_rc=0
    wait "$pid" || exit_rc=$?
}

for be in $BACKENDS; do
    d=$tmp/$be
    mkdir -p "$d"
    members=("$d/m0" "$d/m1" "$d/m2" "$d/m3")

    # ---- SIGTERM under load
    log "$be: SIGTERM under load"
    start_bionbd -t 2 --backend "$be" --stripe-size $CHUNK --size $SIZE \
        "${members[@]}"
    acklog=$d/acked
    lifecycle load "$acklog" 2>"$d/load.err" &
    load_pid=$!
    _cleanup_pids+=("$load_pid")
    if [[ -n $have_fio_nbd ]]; then
        # fio on the other half of the volume, until the server goes.
        start_bg fio --name=load --ioengine=nbd --uri="$NBD_URI" \
            --rw=randrw --bs=4k --iodepth=16 --offset=32M --size=32M \
            --time_based --runtime=60 >"$d/fio.log" 2>&1
        fio_pid=$BG_PID
    fi
    for ((n = 0; n < 400; n++)); do
        [[ -s $acklog && $(wc -l <"$acklog") -ge 2000 ]] && break
        kill -0 "$load_pid" 2>/dev/null || die "$be: the load client died early"
        sleep 0.05
    done
    [[ $(wc -l <"$acklog") -ge 2000 ]] || die "$be: load too slow to test"
    kill -TERM "$SERVER_PID"
    wait_exit "$SERVER_PID" 15
    check_sanitizer_log "$SERVER_LOG"
    [[ $exit_rc -eq 0 ]] || die "$be: SIGTERM under load: exit status $exit_rc"
    [[ ! -e $NBD_SOCK && ! -e $SERVER_PIDFILE ]] ||
        die "$be: socket or pidfile left after SIGTERM"
    SERVER_PID=
    wait_exit "$load_pid" 15
    [[ $exit_rc -eq 0 ]] || { cat "$d/load.err" >&2; die "$be: load client failed"; }
    [[ -z $have_fio_nbd ]] || wait_exit "$fio_pid" 15
    log "$be: $(wc -l <"$acklog") writes acknowledged before the shutdown"
    lifecycle verify "$acklog" || die "$be: acknowledged writes lost"

    # ---- rude clients, idle connections
    log "$be: idle connections; disconnects with requests in flight"
    start_bionbd -t 2 --backend "$be" --stripe-size $CHUNK "${members[@]}"
    rss=$(lifecycle idle $IDLE_CONNS) || die "$be: idle connections failed"
    log "$be: RSS growth for $IDLE_CONNS idle connections: $rss KiB" \
        "($((rss * 1024 / IDLE_CONNS)) bytes each)"
    [[ $rss -lt $IDLE_RSS_LIMIT_KIB ]] ||
        die "$be: $IDLE_CONNS idle connections cost $rss KiB (limit $IDLE_RSS_LIMIT_KIB)"
    lifecycle disconnects || die "$be: disconnect cases failed"
    # Acknowledged data from the load is still there after the restart.
    lifecycle verify "$acklog" || die "$be: data lost across the restart"
    stop_bionbd

    # ---- SIGTERM while requests the server read wait to start (behind
    # the per-connection limit, or for buffer room): those started are
    # answered, the others get NBD_ESHUTDOWN, none is dropped unanswered
    # but a write whose payload the client is still sending.
    log "$be: SIGTERM with requests read but not started"
    start_bionbd -t 1 --backend "$be" --inflight-memory 64M \
        --delay 'member=* op=read ms=4000' "${members[@]}"
    lifecycle unstarted || die "$be: requests read but not started at SIGTERM"
    wait_exit "$SERVER_PID" 15
    SERVER_PID=
    check_sanitizer_log "$SERVER_LOG"
    [[ $exit_rc -eq 0 ]] || die "$be: SIGTERM with requests waiting: exit status $exit_rc"

    # ---- SIGINT with clients in every state: it closes them at once (not
    # after the 10 s grace for clients that stop reading) and exits 0; a
    # client still negotiating has its options refused with
    # NBD_REP_ERR_SHUTDOWN and may abort.
    log "$be: SIGINT with clients connected"
    start_bionbd -t 2 --backend "$be" "${members[@]}"
    rm -f "$d/signalled"
    lifecycle hold "$d/signalled" >"$d/hold.out" 2>"$d/hold.err" &
    hold_pid=$!
    _cleanup_pids+=("$hold_pid")
    for ((n = 0; n < 200; n++)); do
        grep -qs ready "$d/hold.out" && break
        kill -0 "$hold_pid" 2>/dev/null || break
        sleep 0.05
    done
    grep -qs ready "$d/hold.out" || { cat "$d/hold.err" >&2; die "$be: hold client not ready"; }
    t0=$SECONDS
    kill -INT "$SERVER_PID"
    : >"$d/signalled"
    # The clients see their connections closed well before the 10 s grace
    # the server gives clients that stop reading.
    wait_exit "$hold_pid" 15
    [[ $exit_rc -eq 0 ]] || { cat "$d/hold.err" >&2; die "$be: clients at SIGINT"; }
    [[ $((SECONDS - t0)) -le 7 ]] ||
        die "$be: SIGINT: idle clients closed only after $((SECONDS - t0)) s"
    wait_exit "$SERVER_PID" 15
    SERVER_PID=
    check_sanitizer_log "$SERVER_LOG"
    [[ $exit_rc -eq 0 ]] || die "$be: SIGINT: exit status $exit_rc"
    [[ ! -e $NBD_SOCK ]] || die "$be: socket left after SIGINT"
done

# ---- daemon mode
log "daemon mode"
d=$tmp/daemon
mkdir -p "$d"
asan_log=$d/sanitizer
dsock=$d/sock dpid=$d/pid
# stderr is /dev/null once daemonized: sanitizer reports go to files.
rc=0
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}log_path=$asan_log \
UBSAN_OPTIONS=${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}log_path=$asan_log \
    timeout 20 "$BIONBD" -U "$dsock" -P "$dpid" --size 8M "$d/m0" "$d/m1" \
    >"$d/out" 2>&1 </dev/null || rc=$?
[[ $rc -eq 0 ]] || { cat "$d/out" >&2; die "daemon start: exit status $rc"; }
[[ ! -s $d/out ]] || { cat "$d/out" >&2; die "daemon start printed something"; }
# Ready when the parent returned: socket and pidfile are there now.
[[ -S $dsock ]] || die "daemon: no socket when the command returned"
[[ -s $dpid ]] || die "daemon: no pidfile when the command returned"
daemon=$(<"$dpid")
[[ $daemon =~ ^[0-9]+$ ]] || die "daemon: pidfile holds '$daemon'"
on_exit "[[ \$(ps -o comm= -p $daemon) == bionbd ]] && kill -KILL $daemon"
kill -0 "$daemon" 2>/dev/null || die "daemon: pid $daemon not running"
[[ $(ps -o comm= -p "$daemon") == bionbd ]] || die "daemon: pid $daemon is not bionbd"
[[ $(nbdinfo --size "nbd+unix:///?socket=$dsock") -eq $((8 << 20)) ]] ||
    die "daemon: nbdinfo --size"
kill -TERM "$daemon"
wait_gone "$daemon" 15 || die "daemon: still running 15 s after SIGTERM"
[[ ! -e $dsock ]] || die "daemon: socket left after SIGTERM"
[[ ! -e $dpid ]] || die "daemon: pidfile left after SIGTERM"
for f in "$asan_log".*; do
    [[ -e $f ]] || continue
    check_sanitizer_log "$f"
done

# ---- SIGUSR1 (a statistics snapshot) and SIGHUP (log reopened) while the
# server finishes: its final flush held 1.5 s by a delay rule, a SIGUSR1
# and a SIGHUP every 0.1 s from the SIGTERM on.  It still exits 0 and
# removes its pidfile (before, SIGUSR1's default action killed it once
# the statistics had stopped: status 138, members not closed, pidfile
# left).
log "SIGUSR1 and SIGHUP while the server finishes"
d=$tmp/late-signals
mkdir -p "$d"
start_bionbd --size 8M --delay 'op=flush ms=1500' "$d/m0"
kill -TERM "$SERVER_PID"
for ((n = 0; n < 50; n++)); do
    kill -USR1 "$SERVER_PID" 2>/dev/null || break
    kill -HUP "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
done
wait_exit "$SERVER_PID" 15
SERVER_PID=
check_sanitizer_log "$SERVER_LOG"
[[ $exit_rc -eq 0 ]] || die "signals while finishing: exit status $exit_rc"
[[ ! -e $NBD_SOCK ]] || die "signals while finishing: socket left"
[[ ! -e $SERVER_PIDFILE ]] || die "signals while finishing: pidfile left"

# ---- --help, --version, bad options
log "--help, --version"
"$BIONBD" --help >"$d/help" 2>"$d/help.err" || die "--help: exit status $?"
expect_grep '^Usage: bionbd' "$d/help"
expect_grep '--backend' "$d/help"
[[ ! -s $d/help.err ]] || die "--help wrote to stderr"
"$BIONBD" --version >"$d/version" 2>&1 || die "--version: exit status $?"
[[ $(wc -l <"$d/version") -eq 1 ]] || die "--version: not one line"
expect_grep '^bionbd [0-9]' "$d/version"
# bad_option PATTERN ARGS...: exit 1, getopt's one line (matching
# PATTERN) and a pointer to --help: no usage text to scroll it away.
bad_option() {
    local pat=$1 rc=0
    shift
    "$BIONBD" "$@" >"$d/bad" 2>"$d/bad.err" </dev/null || rc=$?
    check_sanitizer_log "$d/bad.err"
    [[ $rc -eq 1 ]] || die "bionbd $*: exit status $rc, expected 1"
    [[ $(wc -l <"$d/bad.err") -eq 2 ]] || {
        sed 's/^/    /' "$d/bad.err" >&2
        die "bionbd $*: expected two lines on stderr"
    }
    head -1 "$d/bad.err" | grep -E -q -- "$pat" ||
        die "bionbd $*: first line: $(head -1 "$d/bad.err")"
    [[ $(tail -1 "$d/bad.err") == "Try 'bionbd --help'." ]] ||
        die "bionbd $*: second line: $(tail -1 "$d/bad.err")"
    [[ ! -s $d/bad ]] || die "bionbd $*: wrote to stdout"
}
bad_option "unrecognized option '--no-such-flag'" --no-such-flag
bad_option "unrecognized option '--bogus'" --bogus "$d/m0"
bad_option "option requires an argument -- 'c'" -c
bad_option "option '--stats' requires an argument" --stats

# ---- configuration errors
log "configuration errors"
c=$tmp/conf
mkdir -p "$c"
truncate -s 1M "$c/a.img" "$c/b.img"

# snapshot: names, types and sizes of what $c holds (but out and err).
snapshot() {
    find "$c" -mindepth 1 -printf '%P %y %s\n' | grep -v '^\(out\|err\) ' |
        sort
}

# refuse PATTERN ARGS...: bionbd ARGS (with -f, a socket and a pidfile in
# $c) exits 1 with exactly one line on stderr matching PATTERN, and the
# directory's contents and the member sizes are unchanged.
refuse() {
    local pat=$1 rc=0 before after
    shift
    before=$(snapshot)
    timeout 20 "$BIONBD" -f -U "$c/sock" -P "$c/pid" "$@" \
        >"$c/out" 2>"$c/err" </dev/null || rc=$?
    after=$(snapshot)
    check_sanitizer_log "$c/err"
    [[ $rc -eq 1 ]] || { cat "$c/err" >&2; die "bionbd $*: exit status $rc, expected 1"; }
    [[ $(wc -l <"$c/err") -eq 1 ]] || {
        sed 's/^/    /' "$c/err" >&2
        die "bionbd $*: expected one line on stderr"
    }
    expect_grep "^bionbd: .*$pat" "$c/err"
    [[ ! -s $c/out ]] || die "bionbd $*: wrote to stdout"
    [[ $before == "$after" ]] || {
        diff <(echo "$before") <(echo "$after") >&2
        die "bionbd $*: changed the directory (diff above)"
    }
}

conf() { # NAME: write stdin to $c/NAME.conf
    cat >"$c/$1.conf"
}

# Nothing to serve: the message names the default configuration it
# looked for (where there is none; otherwise that file is served).
dflt=$("$BIONBD" --help | tr '\n' ' ' | tr -s ' ' |
    grep -o 'with neither, of /[^ )]*' | sed 's/^with neither, of //') || :
[[ -n $dflt ]] || die "bionbd --help names no default configuration"
if [[ ! -e $dflt ]]; then
    refuse "no member files given, no -c, and no $dflt \(see --help\)$"
fi
refuse 'missing\.img' "$c/missing.img"
refuse 'no/such/dir/x\.img' --size 4M "$c/no/such/dir/x.img"
refuse 'stripe-size.*48K|48K.*stripe' --stripe-size 48K "$c/a.img" "$c/b.img"
refuse 'a\.img' "$c/a.img" "$c/a.img"
refuse 'size.*1000|1000' --size 1000 "$c/a.img"
refuse 'io_uring_not' --backend io_uring_not "$c/a.img"
refuse '-t' -t 0 "$c/a.img"
# An empty value (an unset shell variable) shows as '', not as nothing.
refuse "-U '': empty value$" -U '' "$c/a.img"
refuse "-t '': expected a number" -t '' "$c/a.img"
refuse "-c '': empty path$" -c ''
refuse "-c '': empty path$" -c '' "$c/a.img"
refuse 'poll-us.*100001' --poll-us 100001 "$c/a.img"
refuse 'poll-us.*-5' --poll-us -5 "$c/a.img"
refuse 'sendfile-min.*33M' --sendfile-min 33M "$c/a.img"
refuse 'exportname|-e|config' -c "$c/none.conf" -e foo
# Settings that would be silently unused: --stats-interval without a
# --stats file, --trace-buffer without --trace, --timeout with no remote
# member (and in the file too).
refuse '--stats-interval 5: needs --stats FILE' --stats-interval 5 "$c/a.img"
refuse '--stats-interval 0: needs --stats FILE' --stats-interval 0 "$c/a.img"
refuse '--trace-buffer 8M: needs --trace FILE' --trace-buffer 8M "$c/a.img"
refuse '--timeout 5: no member is remote' --timeout 5 "$c/a.img"
# -P's directory is checked before any member is made (the pidfile is
# written last), and its problem is named as -P's, not the control
# socket's that goes beside it.
refuse "-P $c/no/dir/x\.pid: directory $c/no/dir: No such file or directory$" \
    -P "$c/no/dir/x.pid" --size 4M "$c/new0.img" "$c/new1.img"
# A directory where the pidfile goes could never be renamed over: said
# at once, not once serving was all but begun (leaving x.tmp beside it).
mkdir "$c/pdir"
refuse "-P $c/pdir: is a directory$" -P "$c/pdir" --size 4M "$c/new0.img" \
    "$c/new1.img"
refuse "--stats $c/pdir: Is a directory$" --stats "$c/pdir" "$c/a.img"
rmdir "$c/pdir"
long=$c/$(printf 'd%.0s' {1..100})
mkdir -p "$long"
refuse "-P $long/x\.pid: the control socket beside it \(--control puts it elsewhere\): .*x\.pid\.ctl: path too long" \
    -P "$long/x.pid" "$c/a.img"
rmdir "$long"
# Two of bionbd's own files at one path would destroy each other, said
# by nothing: the pidfile renamed over the socket (the start-up line
# names a socket no client can reach), the pidfile or a socket removed
# at exit with the statistics or the trace in it, the statistics renamed
# over the trace or the keys.  Refused, naming both as they were given.
refuse "-P $c/sock: the same file as -U $c/sock; give each a path of its own$" \
    -P "$c/sock" "$c/a.img"
refuse "-P $c/pid: the same file as --stats $c/pid; give each" \
    --stats "$c/pid" "$c/a.img"
refuse "-P $c/pid: the same file as --trace $c/pid; give each" \
    --trace "$c/pid" "$c/a.img"
refuse "--control $c/x: the same file as --stats $c/x; give each" \
    --control "$c/x" --stats "$c/x" "$c/a.img"
# However spelt: the directory is compared, not the text.
mkdir "$c/sub"
refuse "--stats $c/sub/\.\./t: the same file as --trace $c/t; give each" \
    --trace "$c/t" --stats "$c/sub/../t" "$c/a.img"
rmdir "$c/sub"
# The control socket a pidfile brings (PIDFILE.ctl) too.
refuse "-P $c/pid: its control socket $c/pid\.ctl: the same file as -U $c/pid\.ctl; give each" \
    -U "$c/pid.ctl" "$c/a.img"
echo "alice:00112233445566778899aabbccddeeff" >"$c/keys.psk"
refuse "--stats $c/keys\.psk: the same file as --tls-psk $c/keys\.psk; give each" \
    --tls-psk "$c/keys.psk" --stats "$c/keys.psk" "$c/a.img"
rm "$c/keys.psk"
conf clash <<'EOF'
[server]
    stats = clash.out
    trace = clash.out
[export one]
    file = a.img
EOF
refuse '[^ ]*clash\.conf:2: \[server\] stats=clash\.out: the same file as trace=clash\.out \([^ ]*clash\.conf:3\); give each' \
    -c "$c/clash.conf"
# A flag is named as the flag, over the key it wins over.
refuse "--stats $c/clash\\.out: the same file as trace=clash\.out \([^ ]*clash\.conf:3\); give each" \
    --stats "$c/clash.out" -c "$c/clash.conf"
rm "$c/clash.conf"
conf poll <<'EOF'
[server]
    poll-us = soon
[export one]
    file = a.img
EOF
refuse 'poll\.conf:2.*poll-us=soon' -c "$c/poll.conf"
conf interval <<'EOF'
[server]
    socket = interval.sock
    stats-interval = 5
[export one]
    file = a.img
EOF
refuse '[^ ]*interval\.conf:3: \[server\] stats-interval=5: needs stats = FILE' -c "$c/interval.conf"
conf tracebuf <<'EOF'
[server]
    trace-buffer = 8M
[export one]
    file = a.img
EOF
refuse '[^ ]*tracebuf\.conf:2: \[server\] trace-buffer=8M: needs trace = FILE' -c "$c/tracebuf.conf"
conf rtimeout <<'EOF'
[export one]
    file = a.img
    timeout = 2.5
EOF
refuse '[^ ]*rtimeout\.conf:3: \[export one\] timeout=2\.5: no member is remote' -c "$c/rtimeout.conf"
# --timeout is the command line's export's, as --size is: with -c it would
# time out nothing, the file's exports having their own timeout = S.
conf ltimeout <<'EOF'
[export one]
    file = a.img
EOF
refuse '-c .*--timeout.*belong in the config file' -c "$c/ltimeout.conf" --timeout 5
# A [server] setting found wrong only when it is used (a path, a user,
# an address) is named by its line as well, not as the flag it stands for.
server_key() { # KEY VALUE PATTERN: refused, naming the line KEY = VALUE
    printf '[server]\n    %s = %s\n[export one]\n    file = a.img\n' \
        "$1" "$2" >"$c/key-$1.conf"
    refuse "[^ ]*key-$1\.conf:2: \[server\] $1=$3" -c "$c/key-$1.conf"
    rm "$c/key-$1.conf"
}
server_key user no-such-user-here 'no-such-user-here: no such user$'
server_key group no-such-group-here 'no-such-group-here: no such group$'
server_key stats no/dir/s.json 'no/dir/s\.json: No such file or directory$'
server_key trace no/dir/t 'no/dir/t: trace: .*No such file or directory$'
server_key control no/dir/c.sock 'no/dir/c\.sock: control socket: .*No such file or directory$'
server_key listen 999.1.1.1 '999\.1\.1\.1: listen 999\.1\.1\.1 port'
conf missing <<'EOF'
[export one]
    file = nope.img
EOF
refuse 'nope\.img' -c "$c/missing.conf"
conf stripe <<'EOF'
[export one]
    file = a.img
    stripe-size = 48K
EOF
refuse 'stripe\.conf:3.*stripe-size.*48K' -c "$c/stripe.conf"
conf key <<'EOF'
[export one]
    file = a.img
    colour = blue
EOF
refuse 'key\.conf:3.*colour' -c "$c/key.conf"
conf dup <<'EOF'
[export one]
    file = a.img
    file = b.img
    file = a.img
EOF
refuse 'dup\.conf:4.*a\.img' -c "$c/dup.conf"
conf dupexp <<'EOF'
[export one]
    file = a.img
[export one]
    file = b.img
EOF
refuse 'dupexp\.conf:3.*one' -c "$c/dupexp.conf"
conf section <<'EOF'
[volume one]
    file = a.img
EOF
refuse 'section\.conf:1.*volume' -c "$c/section.conf"
# A key given twice, in an export or in [server], is not silently the
# second line's; nor is text after a section header ignored.
conf twice <<'EOF'
[export one]
    file = a.img
    size = 4M
    size = 8M
EOF
refuse 'twice\.conf:4: \[export one\] size=8M: given twice \(first at line 3\)' -c "$c/twice.conf"
conf stwice <<'EOF'
[server]
    threads = 1
    threads = 2
[export one]
    file = a.img
EOF
refuse 'stwice\.conf:3: \[server\] threads=2: given twice \(first at line 2\)' -c "$c/stwice.conf"
conf header <<'EOF'
[export one] size = 4M
    file = a.img
EOF
refuse "header\.conf:1: syntax error: 'size = 4M' after the section header \[export one\]" -c "$c/header.conf"
# The second export is wrong: the first one's members (which --size would
# create) must not be created either.
conf second <<'EOF'
[export one]
    file = new0.img
    file = new1.img
    size = 4M
[export two]
    file = nope.img
EOF
refuse 'nope\.img' -c "$c/second.conf"
refuse 'no such file|No such file|none\.conf' -c "$c/none.conf"
mkdir "$c/conf.d"
refuse "$c/conf\.d: Is a directory$" -c "$c/conf.d"
rmdir "$c/conf.d"

log "PASS"
