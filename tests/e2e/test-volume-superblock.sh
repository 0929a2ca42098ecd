#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: self-describing volumes (member superblocks, bioctl).
# bioctl create writes them (refusing members with a superblock or a file
# system unless --force); members given in any order, on the command line
# or in a config file, assemble by role: 32 MiB of random data written
# through one order reads back the same through another (while served, a
# second server and bioctl create are refused: the members are locked),
# and lies on the
# members where the rule says (chunk k on role k % N at data offset +
# (k / N) * stripe); the volume name is the export description; the clean
# flag is cleared while serving and set again after a clean stop (bioctl
# info --json, parsed), and bionbd -r leaves it alone.  Refused in one line, exit 1: a member of another
# volume with the same geometry, a missing member, two members with one
# role, a stale member (lower event count), one flipped bit, a truncated
# superblock, a member too short for its data, a headerless member among
# self-describing ones, an unknown format version, and a stripe size or
# size that disagrees with the superblocks.  A volume without superblocks
# is locked the same way while a writer serves it (a server with
# --no-lock / lock=false, and bionbd -r, may start beside it).  A FIFO
# given as a member is refused at once, not waited on; a trace or statistics file that is a
# member is refused before it is written, and so are the two at one path.
source "$(dirname "$0")/functions.sh"

requires_server
requires nbdcopy
requires nbdinfo
[[ -x $BIOCTL ]] || die "$BIOCTL not built"
make_tmpdir
cd "$tmp"

# clean MEMBER: "true" or "false", from bioctl info --json.
clean() {
    "$BIOCTL" info --json "$@" | /usr/bin/python3 -c '
import json, sys
js = json.load(sys.stdin)
print(str(js["members"][0]["clean"]).lower())'
}

log "bioctl create, and what it refuses"
expect_ok "$BIOCTL" create --name vol1 --size 32M a b c d
expect_fail "$BIOCTL" create --name again --size 32M a b c d
out=$("$BIOCTL" create --size 32M a x y z 2>&1) && die "create over a superblock: $out"
[[ $out == *"member a: holds a bionbd superblock (--force to overwrite it)"* ]] ||
    die "create over a superblock said: $out"
truncate -s 8M fs.img
mkfs.ext4 -q -F fs.img
out=$("$BIOCTL" create --size 4M fs.img 2>&1) && die "create over ext4: $out"
[[ $out == *"an ext2/3/4 file system"* ]] || die "create over ext4 said: $out"
expect_ok "$BIOCTL" create --force --name forced --size 4M fs.img
expect_ok "$BIOCTL" info fs.img
"$BIOCTL" info a b c d >info.txt || die "bioctl info: exit $?"
expect_grep "volume 'vol1': complete and consistent; members by role: a b c d" info.txt
rc=0
"$BIOCTL" info a b c >info.txt || rc=$?
[[ $rc -eq 1 ]] || die "bioctl info of 3 of 4 members: exit $rc"
expect_grep "not a complete volume: .*role 3 .* is missing" info.txt
[[ $(clean a) == true ]] || die "a new volume must be clean"

log "members in any order: data in through one, out through another"
head -c $((32 << 20)) /dev/urandom >src
start_server d b a c
[[ $(nbdinfo --size "$NBD_URI") == $((32 << 20)) ]] || die "size"
nbdinfo "$NBD_URI" >nbdinfo.txt
expect_grep 'description: vol1' nbdinfo.txt
[[ $(clean a b c d) == false ]] || die "the clean flag is still set while serving"
nbdcopy src "$NBD_URI" || die "nbdcopy in"
# While it is served, no second writer: another server, bioctl create or
# convert are refused (flock); bioctl info still reads.
first_log=$SERVER_LOG first_pid=$SERVER_PID first_sock=$NBD_SOCK
server_refuses_once c a d b
expect_grep "member (.*/)?[abcd]: in use by another process" "$SERVER_ERR"
SERVER_LOG=$first_log SERVER_PID=$first_pid NBD_SOCK=$first_sock
out=$("$BIOCTL" create --force --size 32M a b c d 2>&1) && die "create on a served volume: $out"
[[ $out == *"in use by another process"* ]] || die "create on a served volume said: $out"
expect_ok "$BIOCTL" info a b c d
stop_server
[[ $(clean a b c d) == true ]] || die "the clean flag is not set after a clean stop"
cat >vol.conf <<EOF2
[export vol1]
file = c
file = a
file = d
file = b
EOF2
start_server --conf vol.conf
nbdcopy "nbd+unix:///vol1?socket=$NBD_SOCK" back || die "nbdcopy out"
stop_server
cmp src back || die "data differs between two member orders"
/usr/bin/python3 - <<'PY' || die "the layout rule does not hold on the members"
src = open("src", "rb").read()
m = [open(x, "rb").read() for x in "abcd"]
C, D, N = 64 << 10, 1 << 20, 4
for k in range(len(src) // C):
    at = D + (k // N) * C
    if m[k % N][at:at + C] != src[k * C:(k + 1) * C]:
        raise SystemExit(f"chunk {k} is not on role {k % N} at {at}")
PY

# (nbdkit -r only makes the clients read-only: the plugin still opens the
# volume for writing, so only bionbd -r promises not to write.)
if [[ $SERVER == bionbd ]]; then
    log "read-only: the superblocks are not written"
    start_server -r b a d c
    [[ $(clean a b c d) == true ]] ||
        die "a read-only server cleared the clean flag"
    nbdcopy "$NBD_URI" back-ro || die "nbdcopy out read-only"
    stop_server
    cmp src back-ro || die "read-only: data differs"
    [[ $(clean a b c d) == true ]] || die "the clean flag after a read-only server"
fi

log "refusals: one line each, exit 1"
expect_ok "$BIOCTL" create --name vol2 --size 32M e f g h
server_refuses_once a b c h
expect_grep "member (.*/)?h: belongs to another volume" "$SERVER_ERR"
server_refuses_once a b c
expect_grep "role 3 .* is missing" "$SERVER_ERR"
cp a a2
server_refuses_once a a2 b c
expect_grep "members (.*/)?a and (.*/)?a2 both claim role 0" "$SERVER_ERR"
cp d d.bak
for x in a b c; do cp "$x" "$x.bak"; sb_edit "$x" events=5; done
server_refuses_once a b c d
expect_grep "member (.*/)?d: stale \(event 1, member .* has 5\)" "$SERVER_ERR"
for x in a b c; do cp "$x.bak" "$x"; done
cp c c.bak
printf '\x01' | dd of=c bs=1 seek=2000 conv=notrunc status=none
server_refuses_once a b c d
expect_grep "member (.*/)?c: superblock checksum mismatch" "$SERVER_ERR"
cp c.bak c
truncate -s 2048 d
server_refuses_once a b c d
expect_grep "member (.*/)?d: superblock truncated" "$SERVER_ERR"
cp d.bak d
truncate -s 5M d
server_refuses_once a b c d
expect_grep "member (.*/)?d: .* bytes, size 33554432 needs 9437184 per member" "$SERVER_ERR"
cp d.bak d
truncate -s 16M plain
server_refuses_once a b c plain
expect_grep "member (.*/)?plain: no superblock, while (.*/)?a has one" "$SERVER_ERR"
sb_edit b version=2
server_refuses_once a b c d
expect_grep "member (.*/)?b: superblock format version 2 \(this bionbd reads 1\)" "$SERVER_ERR"
cp b.bak b
server_refuses_once --stripe-size 128K a b c d
expect_grep "(--stripe-size |stripe-size=)128K: volume 'vol1' has 65536 in its superblocks" "$SERVER_ERR"
server_refuses_once --size 64M a b c d
expect_grep "(--size |size=)64M: volume 'vol1' is 33554432 bytes in its superblocks" "$SERVER_ERR"

log "after all that, the volume still serves its data"
start_server b c d a
nbdcopy "$NBD_URI" back2 || die "nbdcopy out at the end"
stop_server
cmp src back2 || die "data differs at the end"

log "members without superblocks: one writer too"
start_server --size 16M h0 h1
first_log=$SERVER_LOG first_pid=$SERVER_PID first_sock=$NBD_SOCK
server_refuses_once h0 h1
expect_grep "member (.*/)?h0: in use by another process" "$SERVER_ERR"
for cmd in "convert --stripe-size 128K" "create --size 16M"; do
    out=$("$BIOCTL" $cmd h0 h1 2>&1) && die "bioctl $cmd on a served volume: $out"
    [[ $out == *"in use by another process"* ]] || die "bioctl $cmd on a served volume said: $out"
done
# A server that shares the files on purpose says so.
start_server --no-lock h0 h1
stop_server
# bionbd -r reads without a lock (the plugin cannot see nbdkit -r).
if [[ $SERVER == bionbd ]]; then
    start_server -r h0 h1
    stop_server
fi
SERVER_LOG=$first_log SERVER_PID=$first_pid NBD_SOCK=$first_sock
stop_server
cmp -s -n 4096 h0 /dev/zero || die "something wrote h0 while it was served"

log "a FIFO is no member (refused at once, not waited on)"
mkfifo fifo
t0=$SECONDS
server_refuses_once fifo
expect_grep "member (.*/)?fifo: not a regular file or block device" "$SERVER_ERR"
out=$(timeout 10 "$BIOCTL" info fifo 2>&1) && die "bioctl info of a FIFO: $out"
[[ $out == *"not a regular file or block device"* ]] || die "bioctl info of a FIFO said: $out"
# Its own line says why too, not a bare errno text.
[[ $out == *"fifo: not a regular file or block device"* && $out != *"Invalid argument"* ]] ||
    die "bioctl info of a FIFO, member line: $out"
((SECONDS - t0 < 10)) || die "the FIFO refusals took $((SECONDS - t0)) s"

log "a trace or statistics file that is a member: refused, the member untouched"
cp a a.before
server_refuses_once --trace a b c d a
expect_grep "trace[ =](.*/)?a: that is member (.*/)?a of the volume" "$SERVER_ERR"
server_refuses_once --stats "$tmp/a" b c d a
expect_grep "stats[ =](.*/)?a: that is member (.*/)?a of the volume" "$SERVER_ERR"
cmp a a.before || die "member a changed by a refused start"

log "statistics and a trace at one path: refused (the statistics would replace the trace)"
mkdir -p sub
server_refuses_once --trace "$tmp/st" --stats "$tmp/sub/../st" b c d a
expect_grep "stats[ =](.*/)?sub/\.\./st: the same file as (--)?trace[ =](.*/)?st; give each a path of its own" "$SERVER_ERR"
[[ ! -e st ]] || die "a refused start made the trace"
log "ok"
