#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: bioctl usage errors (a bad or missing option value, an
# unknown or ambiguous option, no command, no member, a missing
# SOCKET or FILE, convert without --stripe-size, a member given twice
# by the same path, another spelling of it or a symlink to it, for every
# command that takes members) in every command: exit
# 2, nothing on stdout and one line on stderr naming the option and the
# value, no usage, no member created; convert onto a member too small
# for one stripe unit names it, exit 1.  bioctl --help and COMMAND --help
# print the usage on stdout, exit 0; --version prints bionbd's version.  bioctl
# check.  On a fresh volume: exit 0 and every byte of
# data read.  With a member too short for its share (the server refuses
# it), the ranges past its end are reported as unreadable with member
# offsets, exit 1.  Members that do not make a volume (one missing, or
# headerless): exit 2.  Interrupted by SIGINT half way through a large
# sparse volume: exit 130 with the volume offset to resume from, and
# --from that offset finishes with exit 0 and reads only the rest.  Not
# on a terminal, progress is plain lines ("check: N% ..."); on a pty
# (script(1)) a bar.  bioctl
# convert: 48 MiB of random data written through bionbd onto a headerless
# volume; convert (rate-limited) killed with SIGKILL half way, then run
# again: it resumes from its checkpoint; a resume with other arguments is
# refused; afterwards the members (given in another order) serve the same
# bytes, carry superblocks with the data 1 MiB in, and convert refuses
# them; a run that died while writing the superblocks (checkpoint "all
# moved", some superblocks missing) is finished by running it again.  SIGINT stops a convert cleanly with how to resume.
# bioctl stat on bionbd's pidfile shows its members and its buffers in
# flight (the stash too), the busiest 10 connections first and a row
# summing the others (-c all: every one); on a member file, on
# bionbd's NBD socket, on a socket that says nothing and on one nothing
# listens on: exit 1 within 8 s (not after the server's 10 s handshake
# timeout), one line saying what it looked for and what it found; a
# server that goes while watched: exit 1, one line saying so.
source "$(dirname "$0")/functions.sh"

[[ -x $BIOCTL ]] || die "$BIOCTL not built"
make_tmpdir
cd "$tmp"

# usage_error WANT ARGS...: "bioctl ARGS" exits 2 with nothing on stdout
# and exactly one line on stderr: "bioctl: " then WANT (ERE), no usage.
usage_error() {
    local want=$1 rc=0
    shift
    "$BIOCTL" "$@" >out 2>err || rc=$?
    [[ $rc -eq 2 ]] || die "bioctl $*: exit $rc (want 2): $(cat out err)"
    [[ $(wc -l <err) -eq 1 ]] || die "bioctl $*: not one line: $(cat err)"
    [[ ! -s out ]] || die "bioctl $*: output on stdout: $(cat out)"
    expect_grep "^bioctl: $want" err
}

log "--help after any command, and --version: on stdout, exit 0"
for cmd in "" create info check convert rebuild stat trace; do
    # shellcheck disable=SC2086 # no word for bioctl --help
    "$BIOCTL" $cmd --help >out 2>err || die "bioctl $cmd --help: exit $? $(cat err)"
    [[ ! -s err ]] || die "bioctl $cmd --help: on stderr: $(cat err)"
    # One usage for all, but trace has one of its own.
    first=create
    [[ $cmd != trace ]] || first=trace
    expect_grep "^Usage: bioctl $first " out
done
"$BIOCTL" --version >out 2>err || die "bioctl --version: exit $? $(cat err)"
[[ ! -s err ]] || die "bioctl --version: on stderr: $(cat err)"
if [[ -x $BIONBD ]]; then
    want=$("$BIONBD" --version) || die "bionbd --version: exit $?"
    [[ $(cat out) == "bioctl ${want#bionbd }" ]] ||
        die "bioctl --version: '$(cat out)', bionbd says '$want'"
else
    expect_grep '^bioctl [0-9]+\.[0-9]+' out
fi

log "usage errors: one line naming the option or what is missing, exit 2"
usage_error '--from 1\.5G: expected a size' check --from 1.5G u0 u1
usage_error '--from abc: expected a size' check --from abc u0 u1
usage_error '--from: a value is missing$' check u0 u1 --from
usage_error "--bogus: unknown option; try 'bioctl create --help'$" create --bogus u0
usage_error "-x: unknown option; try 'bioctl check --help'$" check -x u0
usage_error "--json: takes no value \(--json=1 given\)$" info --json=1 u0
usage_error "--s: ambiguous option; try 'bioctl create --help'$" create --s 4G u0
usage_error "-i: a value is missing$" stat -i
usage_error "--count 0: expected a number of reports" stat -n 0 u0
usage_error "--frob: unknown option; try 'bioctl stat --help'$" stat --frob u0
usage_error "--op bad: expected read, " trace -o bad u0
usage_error "--bogus: unknown option; try 'bioctl trace --help'$" trace --bogus u0
usage_error "no command given; try 'bioctl --help'$"
usage_error "frob: unknown command; try 'bioctl --help'$" frob
for cmd in create info check convert rebuild; do
    extra=()
    [[ $cmd != convert ]] || extra=(--stripe-size 64K)
    [[ $cmd != rebuild ]] || extra=(--replace u0 u1)
    usage_error "$cmd: no MEMBER given; try 'bioctl $cmd --help'$" $cmd "${extra[@]}"
done
usage_error "rebuild: --replace OLD NEW or --role R NEW is missing" rebuild u0
usage_error "stat: give one SOCKET or PIDFILE \(0 given\)" stat
usage_error "trace: give one FILE \(2 given\)" trace u0 u1
usage_error '--size 1\.5G: expected a size' create --size 1.5G u0 u1
usage_error '--size 1000: not a multiple of 512' create --size 1000 u0 u1
usage_error '--name x{64}: at most 63 bytes' create --name "$(printf 'x%.0s' {1..64})" u0
usage_error '--stripe-size 3000: ' convert --stripe-size 3000 u0 u1
usage_error '--max-rate -5: ' convert --stripe-size 64K --max-rate -5 u0 u1
usage_error '--max-rate 0: ' rebuild --max-rate 0 u0 --replace u0 u1
usage_error '--role x: expected a role number' rebuild --role x u1 u0
usage_error 'convert: --stripe-size is required' convert u0 u1
[[ ! -e u0 && ! -e u1 ]] || die "a usage error created a member"

log "a member given twice: one line naming it, exit 2, nothing created"
usage_error 'member u0: given twice$' create --size 64M u0 u0
usage_error 'member \./u0: given twice \(as u0 too\)$' create --size 64M u0 ./u0
mkdir dir && ln -s dir dirlink
usage_error 'member dirlink/u0: given twice \(as dir/u0 too\)$' create --size 64M dir/u0 dirlink/u0
[[ ! -e u0 && ! -e dir/u0 ]] || die "create of a member given twice created it"
truncate -s 2M e0 e1
ln -s e0 e0link
usage_error 'member e0link: given twice \(as e0 too\)$' create --force --size 1M e0 e0link
usage_error 'member e0link: given twice \(as e0 too\)$' info e0 e1 e0link
usage_error 'member e1: given twice$' check e1 e0 e1
usage_error 'member e0link: given twice \(as e0 too\)$' convert --stripe-size 64K e0 e0link
usage_error 'member e0link: given twice \(as e0 too\)$' rebuild e0 e0link --replace e1 e2
[[ ! -e e2 ]] || die "rebuild with a member given twice created NEW"

log "convert: a member too small for one stripe unit is named"
truncate -s 64K small0 && truncate -s 2M big0
rc=0
"$BIOCTL" convert --stripe-size 128K big0 small0 >cv.out 2>cv.err || rc=$?
[[ $rc -eq 1 ]] || die "convert onto a too small member: exit $rc $(cat cv.out cv.err)"
expect_grep "^bioctl: member small0: 65536 bytes, less than one stripe unit \(131072 bytes\)$" cv.err
[[ $(stat -c %s small0) -eq 65536 && $(stat -c %s big0) -eq 2097152 ]] ||
    die "a refused convert changed a member's size"

log "a fresh volume: clean"
expect_ok "$BIOCTL" create --name small --size 16M a b c
"$BIOCTL" check c a b >out 2>err || die "check: exit $? $(cat out err)"
expect_grep "^volume 'small': superblocks consistent, 16777216 bytes of data read$" out
expect_grep "^check: 100% \(16 of 16 MiB\)" err

log "on a terminal: a progress bar"
if command -v script >/dev/null; then
    script -qec "$BIOCTL check a b c" /dev/null >tty.out ||
        die "check on a pty: exit $?"
    expect_grep 'check \[#{30}\] 100%' tty.out
fi

log "a member too short: unreadable ranges, exit 1"
cp b b.bak
truncate -s $((1024 * 1024 + 3 * 65536)) b # data offset + 3 chunks
rc=0
"$BIOCTL" check a b c >out 2>err || rc=$?
[[ $rc -eq 1 ]] || die "short member: exit $rc: $(cat out err)"
# b is role 1: its 4th chunk (volume chunk 10 = offset 655360) is the first gone.
expect_grep "^unreadable: volume offset 655360, 65536 bytes \(member b, offset 1245184\)$" out
expect_grep "^[0-9]+ unreadable bytes in [0-9]+ ranges$" out
cp b.bak b

log "not a volume: exit 2"
rc=0
"$BIOCTL" check a b >out 2>&1 || rc=$?
[[ $rc -eq 2 ]] || die "missing member: exit $rc"
expect_grep "role 2 .* is missing" out
truncate -s 1M h0 h1
rc=0
"$BIOCTL" check h0 h1 >out 2>&1 || rc=$?
[[ $rc -eq 2 ]] || die "headerless: exit $rc"
expect_grep "headerless" out

log "SIGINT half way, then --from"
expect_ok "$BIOCTL" create --name big --size 8G x0 x1
"$BIOCTL" check x0 x1 >out 2>err &
pid=$!
sleep 0.5
kill -INT "$pid"
rc=0
wait "$pid" || rc=$?
[[ $rc -eq 130 ]] || die "interrupted check: exit $rc (too fast a machine? $(cat out err))"
from=$(sed -n 's/.*resume with: bioctl check --from \([0-9]*\) MEMBER.*/\1/p' err)
[[ $from -gt 0 && $from -lt $((8 << 30)) ]] || die "no resume offset: $(cat err)"
"$BIOCTL" check --from "$from" x0 x1 >out 2>err || die "resumed check: exit $?"
expect_grep "^volume 'big': superblocks consistent, $(((8 << 30) - from)) bytes of data read$" out
log "convert: SIGKILL half way, resume, same data"
requires nbdcopy
[[ -x $BIONBD ]] || die "$BIONBD not built"
head -c $((48 << 20)) /dev/urandom >src
start_bionbd --size 48M h0 h1 h2
nbdcopy src "$NBD_URI" || die "nbdcopy onto the headerless volume"

log "stat: what is not a control socket is said so in one line, quickly"
# stat_refused WANT ARG: "bioctl stat -n 1 ARG" exits 1 within 8 s (the
# server's handshake timeout is 10), one line on stderr matching WANT.
stat_refused() {
    local rc=0 t0=$SECONDS
    "$BIOCTL" stat -n 1 "$2" >out 2>err || rc=$?
    [[ $rc -eq 1 ]] || die "stat $2: exit $rc (want 1): $(cat out err)"
    ((SECONDS - t0 < 8)) || die "stat $2: took $((SECONDS - t0)) s"
    [[ $(wc -l <err) -eq 1 ]] || die "stat $2: not one line: $(cat err)"
    expect_grep "^bioctl: $1" err
}
"$BIOCTL" stat -n 1 "$SERVER_PIDFILE" >out 2>err || die "stat PIDFILE: exit $? $(cat err)"
# Members are shown by the end of their (absolute) paths.
expect_grep "^  \.\..*/h0 " out
# bionbd's buffers in flight, none with no client (test-server-inflight.sh
# has them busy).
expect_grep "^buffers in flight: 0\.0 of [0-9]+\.[0-9] MiB, 0 waits, 0 evictions, 0\.0 MiB stashed$" out
# A striped volume's members have no state: the row ends at the p99s.
! grep -n ' $' out || die "stat PIDFILE: a line ends with a space"

log "stat: the busiest 10 connections, one row for the rest; -c all"
nbdpy - "$NBD_SOCK" "$BIOCTL" "$SERVER_PIDFILE" <<'PY' || die "stat with 13 connections"
import re, subprocess, sys
from nbd_raw import Raw, check
conns = []
for i in range(13):
    c = Raw(sys.argv[1])
    c.start()
    c.go("")
    conns.append(c)
# The 7th to connect read 1 MiB (a read: the data is checked later):
# the busiest, so the first row.
conns[6].read(0, 1 << 20)
def stat(*args):
    return subprocess.run([sys.argv[2], "stat", "-n", "1", *args, sys.argv[3]],
                          check=True, capture_output=True, text=True).stdout
def rows(table):
    return re.findall(r"^ *(\d+) unix +'' +[0-9.]+ +\d+ +([0-9.]+)$", table,
                      re.M)
table = stat()
check(re.search(r"^ +conn peer +export +bufMiB +bwaits +MiB$", table, re.M),
      f"no connections' header:\n{table}")
r = rows(table)
check(len(r) == 10 and r[0][1] == "1.0", f"not the busiest 10:\n{table}")
check(re.search(r"^ +\+ 3 more \(--connections all\) +0\.0 +0 +0\.0$",
                table, re.M), f"no row for the other 3:\n{table}")
check("\n13 connections open" in table, f"count:\n{table}")
table = stat("-c", "all")
check(len(rows(table)) == 13 and "more (--connections" not in table,
      f"-c all:\n{table}")
table = stat("--connections", "12")
check(len(rows(table)) == 12 and " 1 more (" in table, f"-c 12:\n{table}")
for c in conns:
    c.close()
PY
usage_error "--connections 0: expected a number of rows" stat -c 0 u0
stat_refused "h0: not a control socket \(nor is h0\.ctl: No such file or directory\)$" h0
stat_refused "${NBD_SOCK//./\\.}: an NBD server's socket, not a control socket" "$NBD_SOCK"
# A socket that takes the connection and says nothing until bioctl gives
# up and closes it (or 20 s pass).
py - silent.sock <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(1)
s.settimeout(20)
c, _ = s.accept()
c.settimeout(20)
c.recv(1)
PY
silent=$!
for ((n = 0; n < 40; n++)); do [[ -S silent.sock ]] && break; sleep 0.1; done
stat_refused "silent\.sock: no answer in 3 s: not a bionbd control socket$" silent.sock
wait $silent || die "the silent socket's script failed"
# A socket nothing listens on (what a killed server leaves): said so, not
# a bare "Connection refused".
py -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' dead.sock
stat_refused "dead\.sock: Connection refused: no server listens there \(one that was killed leaves its socket behind\)$" dead.sock
# A server that goes while it is watched: said so, with what was found.
"$BIOCTL" stat -i 0.2 "$SERVER_PIDFILE" >watch.out 2>watch.err &
watch=$!
for ((n = 0; n < 50; n++)); do
    [[ $(grep -c '^export/member' watch.out) -ge 2 ]] && break
    sleep 0.1
done
stop_bionbd
rc=0
wait $watch || rc=$?
[[ $rc -eq 1 ]] || die "stat of a server that went: exit $rc"
[[ $(wc -l <watch.err) -eq 1 ]] || die "stat of a server that went said: $(cat watch.err)"
expect_grep "^bioctl: the server stopped answering after [0-9]+ reports?: .*: No such file or directory$" watch.err
"$BIOCTL" convert --stripe-size 64K --name conv --max-rate 16M h0 h1 h2 \
    >cv.out 2>cv.err &
pid=$!
sleep 1.5
kill -KILL "$pid"
wait "$pid" 2>/dev/null || :
rc=0
"$BIOCTL" convert --stripe-size 128K h0 h1 h2 >cv.out 2>cv.err || rc=$?
[[ $rc -eq 1 ]] || die "a resume with another stripe size: exit $rc"
expect_grep "holds the checkpoint of another conversion" cv.err
"$BIOCTL" convert --stripe-size 64K --name conv h0 h1 h2 >cv.out 2>cv.err ||
    die "resumed convert: exit $? $(cat cv.out cv.err)"
expect_grep "^bioctl: resuming: member h[0-2], [0-9]+ bytes still to move$" cv.err
expect_grep "^converted volume 'conv' .*: raid0, 3 members, stripe 65536, size 50331648, data offset 1048576$" cv.out
"$BIOCTL" info h2 h0 h1 >info.txt || die "info after convert"
expect_grep "volume 'conv': complete and consistent; members by role: h0 h1 h2" info.txt
start_bionbd h2 h1 h0
nbdcopy "$NBD_URI" back || die "nbdcopy out of the converted volume"
stop_bionbd
cmp src <(head -c $((48 << 20)) back) || die "the converted volume's data differs"
rc=0
"$BIOCTL" convert --stripe-size 64K h0 h1 h2 >cv.out 2>cv.err || rc=$?
[[ $rc -eq 1 ]] && expect_grep "already has a superblock" cv.err

log "convert: a run that died while writing the superblocks is finished"
# As it would be left: all data moved (the checkpoint at member 0's end
# says so), h0's superblock written, h1's and h2's not yet.
nbdpy - <<'PY' || die "could not fake the interrupted run"
import struct
from sb_format import crc32c
cp = b"bionbdCV" + struct.pack("<6Q", 65536, 50331648, 1 << 20, 3, 2, 0)
cp += struct.pack("<I", crc32c(cp))
with open("h0", "ab") as f:
    f.write(cp + bytes(4096 - len(cp)))
for m in ("h1", "h2"):
    with open(m, "r+b") as f:
        f.write(bytes(4096))
PY
"$BIOCTL" convert --stripe-size 64K --name conv h0 h1 h2 >cv.out 2>cv.err ||
    die "finishing convert: exit $? $(cat cv.out cv.err)"
expect_grep "^converted volume 'conv'" cv.out
"$BIOCTL" info h0 h1 h2 >info.txt || die "info after the finished convert"
start_bionbd h1 h2 h0
nbdcopy "$NBD_URI" back || die "nbdcopy out after the finished convert"
stop_bionbd
cmp src <(head -c $((48 << 20)) back) || die "data differs after the finished convert"

log "convert: SIGINT stops cleanly and says how to resume"
truncate -s 64M i0 i1
"$BIOCTL" convert --stripe-size 64K --max-rate 8M i0 i1 >cv.out 2>cv.err &
pid=$!
sleep 1
kill -INT "$pid"
rc=0
wait "$pid" || rc=$?
[[ $rc -eq 130 ]] || die "interrupted convert: exit $rc $(cat cv.err)"
expect_grep "convert interrupted; run the same command again to resume" cv.err
"$BIOCTL" convert --stripe-size 64K i0 i1 >cv.out 2>cv.err ||
    die "resumed convert after SIGINT: exit $?"
expect_grep "^converted volume" cv.out
log "ok"
