#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: -u/-g.  Started as root with -u nobody -g nogroup, bionbd
# runs as uid and gid 65534 with no supplementary group of root's (read
# from /proc), while the members root created and opened stay usable:
# nbdcopy writes 16 MiB of random data and reads it back the same, and
# SIGTERM still exits 0 and removes its socket and pidfile.  -u alone
# takes the user's group, also given as a number (a user whose primary
# group is not its uid's number: that group and its supplementary groups,
# as by name).  --run's command runs as the user and the
# private socket directory is still removed; it runs also where the
# user is at its process limit (forked while root).  An unknown user or group,
# -u when not started as root, and --stats in a directory the user cannot
# write are one line and exit 1 (and leave no socket or pidfile, nor the
# members and trace file the start made, where only root could remove
# them).  A spare only root may open still takes a role over.
source "$(dirname "$0")/functions.sh"

requires_root
requires nbdcopy
requires setpriv
make_tmpdir

# The socket and pidfile must stay removable by nobody: bionbd hands them
# over, and a sticky directory lets their owner remove them.
chmod 1777 "$tmp"
m=("$tmp/m0" "$tmp/m1")

# ids PID: "uid gid groups" of a running process.
ids() {
    awk '/^Uid:/ { u = $2 "," $3 "," $4 "," $5 }
         /^Gid:/ { g = $2 "," $3 "," $4 "," $5 }
         /^Groups:/ { $1 = ""; gr = $0 }
         END { print u, g, "[" gr "]" }' "/proc/$1/status"
}

# dropped: the pidfile (start_bionbd's sign) comes just before root goes.
dropped() {
    local n
    for ((n = 0; n < 200; n++)); do
        grep -q "running as uid" "$SERVER_LOG" && return 0
        sleep 0.05
    done
    die "no 'running as uid' line from bionbd"
}

log "-u nobody -g nogroup: ids, and the members still usable"
start_bionbd -u nobody -g nogroup --size 32M "${m[@]}"
dropped
[[ $(stat -c %u "$tmp/m0") -eq 0 ]] || die "members should be root's"
got=$(ids "$SERVER_PID")
[[ $got == "65534,65534,65534,65534 65534,65534,65534,65534 [ 65534]" ]] ||
    die "expected uid/gid 65534 and groups [65534], /proc says: $got"
expect_grep "running as uid 65534, gid 65534" "$SERVER_LOG"
head -c $((16 << 20)) /dev/urandom >"$tmp/src"
nbdcopy "$tmp/src" "$NBD_URI" || die "nbdcopy in as nobody"
nbdcopy "$NBD_URI" "$tmp/back" || die "nbdcopy out as nobody"
cmp "$tmp/src" <(head -c $((16 << 20)) "$tmp/back") || die "data differs"
stop_bionbd

# A spare is held open from the start: after root went, nobody could not
# open one only root may (the old code opened it by path at the fault, and
# the takeover failed with "Permission denied").
log "-u nobody --spare: a spare only root may open still takes over"
sp=("$tmp/sp0" "$tmp/sp1")
"$BIOCTL" create --level raid1 --size 16M "${sp[@]}" >/dev/null ||
    die "bioctl create"
truncate -s 20M "$tmp/sp2"
chmod 600 "${sp[@]}" "$tmp/sp2"
start_bionbd -u nobody --spare "$tmp/sp2" \
    --fault "member=1 op=write count=1" "${sp[@]}"
dropped
head -c $((1 << 20)) /dev/urandom >"$tmp/one"
nbdcopy "$tmp/one" "$NBD_URI" || die "nbdcopy into the mirror"
for ((n = 0; n < 200; n++)); do
    grep -q "rebuilt:\|cannot take over" "$SERVER_LOG" && break
    sleep 0.05
done
expect_grep "spare $tmp/sp2 takes over role 1" "$SERVER_LOG"
expect_grep "member $tmp/sp2 \(role 1\) rebuilt" "$SERVER_LOG"
nbdcopy "$NBD_URI" "$tmp/back" || die "nbdcopy out of the mirror"
cmp "$tmp/one" <(head -c $((1 << 20)) "$tmp/back") || die "data differs"
stop_bionbd
"$BIOCTL" info "$tmp/sp0" "$tmp/sp2" >"$tmp/info" 2>&1 || :
expect_grep "role 1: $tmp/sp2, active" "$tmp/info"
[[ $(stat -c %u "$tmp/sp2") -eq 0 ]] || die "the spare should stay root's"

log "-u alone: the user's own group"
start_bionbd -u nobody "${m[@]}"
dropped
got=$(ids "$SERVER_PID")
[[ $got == "65534,65534,65534,65534 65534,65534,65534,65534 "* ]] ||
    die "-u nobody: /proc says $got"
stop_bionbd

log "--run -u nobody: the command runs as nobody; no private directory left"
private_dirs() { compgen -G '/tmp/bionbd-??????' | sort || true; }
before=$(private_dirs)
out=$(timeout 60 "$BIONBD" -u nobody --run 'id -u; nbdinfo --size "$uri"' \
    "${m[@]}" 2>"$tmp/run.log") || die "--run -u: $(cat "$tmp/run.log")"
check_sanitizer_log "$tmp/run.log"
[[ $out == $'65534\n33554432' ]] || die "--run -u nobody said: $out"
[[ $(private_dirs) == "$before" ]] || die "--run -u left $(private_dirs) behind"

log "--run -u nobody at nobody's process limit: the command still runs"
# The command is forked while the server is root (exempt from the limit)
# and takes nobody's ids at once, before the server's threads count as
# nobody's: forked after root went, it failed (EAGAIN), and the start was
# refused leaving the member it made, which only root could remove.
if [[ -z $(ps -u 65534 -o pid= 2>/dev/null) ]] && command -v prlimit >/dev/null; then
    mkdir -m 0755 "$tmp/nproc"
    # The threads backend: io_uring's kernel workers would count too.  No
    # leak check: its thread could not start under the limit either.
    out=$(ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
        timeout 60 prlimit --nproc=1 "$BIONBD" -u nobody --backend threads \
        --size 4M --run 'echo "ran as $exportname."' "$tmp/nproc/n0" \
        2>"$tmp/run.log") || die "--run -u nobody, nproc 1: $(cat "$tmp/run.log")"
    check_sanitizer_log "$tmp/run.log"
    [[ $out == "ran as ." ]] || die "--run -u nobody, nproc 1 said: $out"
else
    log "nobody runs processes here, or no prlimit: skipped"
fi

log "-u NUMBER: the user of that number, with its own groups"
# A user whose primary group is not the group of its uid's number (the
# base system has some: sync, games, man): -u NUMBER once took that
# group, and none of the user's supplementary groups.
user=$(getent passwd | awk -F: '$3 != 0 && $3 != $4 { print $1; exit }')
if [[ -n $user ]]; then
    uid=$(id -u "$user")
    want=$(id -u "$user"; id -g "$user"; id -G "$user")
    for who in "$user" "$uid"; do
        out=$(timeout 60 "$BIONBD" -u "$who" --run 'id -u; id -g; id -G' \
            "${m[@]}" 2>"$tmp/run.log") || die "-u $who: $(cat "$tmp/run.log")"
        check_sanitizer_log "$tmp/run.log"
        [[ $out == "$want" ]] ||
            die "-u $who ran with ids $(echo $out), $user has $(echo $want)"
    done
else
    log "no user whose primary group differs from its uid: skipped"
fi

log "mistakes: one line, exit 1"
refused() {
    local rc=0
    "$@" >"$tmp/err" 2>&1 </dev/null || rc=$?
    [[ $rc -eq 1 && $(grep -c . "$tmp/err") -eq 1 ]] || {
        sed 's/^/    /' "$tmp/err" >&2
        die "expected one line and exit 1 (got $rc): $*"
    }
}
refused "$BIONBD" -f -U "$tmp/x.sock" -u no-such-user-here "${m[@]}"
expect_grep "no such user" "$tmp/err"
[[ ! -e $tmp/x.sock ]] || die "-u with an unknown user left its socket"
refused "$BIONBD" -f -U "$tmp/x.sock" -g no-such-group-here "${m[@]}"
expect_grep "no such group" "$tmp/err"
# Statistics nobody could write at exit: refused at start, as nobody.
mkdir -m 0700 "$tmp/rootonly"
refused "$BIONBD" -f -U "$tmp/x.sock" -P "$tmp/x.pid" -u nobody \
    --stats "$tmp/rootonly/s.json" "${m[@]}"
expect_grep "^bionbd: --stats .*/rootonly/s.json: Permission denied" "$tmp/err"
[[ ! -e $tmp/x.sock && ! -e $tmp/x.pid && ! -e $tmp/x.pid.ctl ]] ||
    die "a refused --stats left $(ls "$tmp"/x.*) behind"
# ... and what that start made or grew is taken back, although nobody
# could not remove or shrink it (the old code tried as nobody, after root
# went, and left all three).
mkdir -m 0755 "$tmp/made"
truncate -s 1M "$tmp/made/g1"
refused "$BIONBD" -f -U "$tmp/x.sock" -u nobody --size 32M \
    --trace "$tmp/made/t.bin" --stats "$tmp/rootonly/s.json" \
    "$tmp/made/n0" "$tmp/made/g1"
expect_grep "^bionbd: --stats .*/rootonly/s.json: Permission denied" "$tmp/err"
[[ ! -e $tmp/made/n0 && ! -e $tmp/made/t.bin ]] ||
    die "a start refused as nobody left $(ls "$tmp/made" | tr "\n" " ")behind"
[[ $(stat -c %s "$tmp/made/g1") -eq $((1 << 20)) ]] ||
    die "a start refused as nobody left g1 grown"
chmod 666 "$tmp/m0" "$tmp/m1"
refused setpriv --reuid=65534 --regid=65534 --clear-groups \
    "$BIONBD" -f -U "$tmp/x.sock" -u nobody "${m[@]}"
expect_grep "must be started as root" "$tmp/err"
[[ ! -e $tmp/x.sock ]] || die "a refused start left its socket"
log "ok"
