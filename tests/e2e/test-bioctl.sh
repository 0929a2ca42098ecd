#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: bioctl check.  On a fresh volume: exit 0 and every byte of
# data read.  With a member too short for its share (the server refuses
# it), the ranges past its end are reported as unreadable with member
# offsets, exit 1.  Members that do not make a volume (one missing, or
# headerless): exit 2.  Interrupted by SIGINT half way through a large
# sparse volume: exit 130 with the volume offset to resume from, and
# --from that offset finishes with exit 0 and reads only the rest.  Not
# on a terminal, progress is plain lines ("check: N% ...").
source "$(dirname "$0")/functions.sh"

[[ -x $BIOCTL ]] || die "$BIOCTL not built"
make_tmpdir
cd "$tmp"

log "a fresh volume: clean"
expect_ok "$BIOCTL" create --name small --size 16M a b c
"$BIOCTL" check c a b >out 2>err || die "check: exit $? $(cat out err)"
expect_grep "^volume 'small': superblocks consistent, 16777216 bytes of data read$" out
expect_grep "^check: 100% \(16 of 16 MiB\)" err

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
log "ok"
