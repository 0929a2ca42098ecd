#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: bioctl on mirrors.  create --level raid1 (2 members) and
# raid10 (4 members, 2 copies; 3 members, 2 copies) sizes the members by
# the layout rule (data offset + whole chunk rows), with or without
# --size, and writes a bitmap block; bad combinations (--copies 1,
# --copies 5 on 4 members, --copies with raid0, raid1 on one member, an
# unknown level, a data offset with no room for the bitmap) are usage
# errors: one line naming the option, exit 2, no member created.  info shows the level, copies
# and each role's state, in text and JSON.  check: the same bytes written
# by this script at every copy's position (md's "near" layout computed
# here from docs/format.md, not by bioctl) compare equal, exit 0; so a
# wrong layout in bioctl would show as mismatches.  One copy of one chunk
# corrupted: check names its volume offset and the two roles, exit 1;
# check --repair rewrites it from the first copy, exit 0, and the copy
# equals the others again; --repair is refused on a locked member and on
# raid0.  A raid1 member deleted: info says degraded and exits 0, check
# skips the role; a stale member (two events behind: a run it missed)
# shows as stale.
source "$(dirname "$0")/functions.sh"

[[ -x $BIOCTL ]] || die "$BIOCTL not built"
PY=/usr/bin/python3
[[ -x $PY ]] || skip "no $PY"
make_tmpdir
cd "$tmp"

D=$((1 << 20))
C=65536

# layout.py CMD N K SIZE MEMBER...: the mirror layout of docs/format.md.
# Chunk k has K copies; copy j is at position p = k*K + j: member p mod N,
# member offset D + (p div N)*C.
#   fill: chunk k's bytes (a pattern unique to the chunk) at every copy
#   corrupt K J OFF LEN: overwrite LEN bytes at OFF in copy J of chunk K
#   same K: every copy of chunk K holds the chunk's pattern
cat >layout.py <<'PY'
import sys

D, C = 1 << 20, 65536
cmd, n, k_copies, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
args = sys.argv[5:]
members, rest = args[:n], args[n:]

def where(k, j):
    p = k * k_copies + j
    return members[p % n], D + (p // n) * C

def pattern(k):
    # Differs from chunk to chunk and within a chunk, so that a copy
    # looked for at the wrong place never matches by chance.
    unit = (k * 2654435761 & 0xFFFFFFFF).to_bytes(4, "little")
    return bytes(b ^ (i & 0xFF) for i, b in enumerate(unit * (C // 4)))

chunks = (size + C - 1) // C
if cmd == "fill":
    files = {m: open(m, "r+b") for m in members}
    for k in range(chunks):
        data = pattern(k)[: min(C, size - k * C)]
        for j in range(k_copies):
            m, off = where(k, j)
            files[m].seek(off)
            files[m].write(data)
    for f in files.values():
        f.close()
elif cmd == "corrupt":
    k, j, off, length = map(int, rest)
    m, at = where(k, j)
    with open(m, "r+b") as f:
        f.seek(at + off)
        f.write(bytes((0xA5 ^ i) & 0xFF for i in range(length)))
    print(m)
elif cmd == "same":
    k = int(rest[0])
    for j in range(k_copies):
        m, at = where(k, j)
        with open(m, "rb") as f:
            f.seek(at)
            if f.read(C) != pattern(k):
                sys.exit("chunk %d copy %d (%s at %d) differs" % (k, j, m, at))
PY
layout() { "$PY" layout.py "$@"; }

# size_of FILE: its size in bytes.
size_of() { stat -c %s "$1"; }

# jq_py EXPR FILE: evaluate a python expression over the JSON in FILE (as j).
jq_py() { "$PY" -c "import json, sys; j = json.load(open(sys.argv[1])); print($1)" "$2"; }

log "create raid1 on 2 members: a full copy each"
"$BIOCTL" create --level raid1 --name m1 --size 16M a b >out 2>&1 ||
    die "create raid1: exit $? $(cat out)"
expect_grep "^created volume 'm1' .*: raid1, 2 members, 2 copies, stripe 65536, size 16777216, data offset 1048576$" out
for m in a b; do
    [[ $(size_of $m) -eq $((D + (16 << 20))) ]] || die "raid1 member $m: $(size_of $m) bytes"
    # The bitmap block right after the superblock.
    [[ $(dd if=$m bs=1 skip=4096 count=8 status=none) == bionbdBM ]] ||
        die "raid1 member $m: no bitmap block at 4096"
done

log "create raid10 on 4 members, 2 copies: half the volume on each"
"$BIOCTL" create --level raid10 --copies 2 --name m10 --size 16M c0 c1 c2 c3 >out 2>&1 ||
    die "create raid10: exit $? $(cat out)"
expect_grep ": raid10, 4 members, 2 copies, stripe 65536, size 16777216," out
for m in c0 c1 c2 c3; do
    [[ $(size_of $m) -eq $((D + (8 << 20))) ]] || die "raid10 member $m: $(size_of $m) bytes"
done

log "create raid10 on 3 members, 2 copies (the default)"
# 15M: 240 chunks, 480 copies, 160 rows of 64K on each member.
"$BIOCTL" create --level raid10 --name m3 --size 15M d0 d1 d2 >out 2>&1 ||
    die "create raid10 on 3: exit $? $(cat out)"
expect_grep ": raid10, 3 members, 2 copies, stripe 65536, size 15728640," out
for m in d0 d1 d2; do
    [[ $(size_of $m) -eq $((D + 160 * C)) ]] || die "raid10 member $m: $(size_of $m) bytes"
done

log "create raid10 without --size: what the smallest member holds"
# 10M + 1 chunk of data room each: 161 rows x 3 = 483 positions, 241
# whole chunks of 2 copies.
truncate -s $((D + 161 * C)) e0 e1
truncate -s $((D + 161 * C + 4096)) e2
expect_ok "$BIOCTL" create --level raid10 e0 e1 e2 >/dev/null
"$BIOCTL" info --json e0 e1 e2 >e.json || die "info of e: exit $?"
[[ $(jq_py 'j["volume"]["size"]' e.json) -eq $((241 * C)) ]] ||
    die "default raid10 size: $(jq_py 'j["volume"]["size"]' e.json)"

log "bad combinations: one line naming the option, exit 2 (usage)"
# refused ARGS... -- OPTION: create refuses, exit 2, one line naming it.
refused() {
    local args=() rc=0
    while [[ $1 != -- ]]; do args+=("$1"); shift; done
    "$BIOCTL" create "${args[@]}" >out 2>err || rc=$?
    [[ $rc -eq 2 ]] || die "create ${args[*]}: exit $rc (want 2): $(cat out err)"
    [[ $(wc -l <err) -eq 1 ]] || die "create ${args[*]}: not one line: $(cat err)"
    expect_grep "^bioctl: $2" err
}
refused --level raid10 --copies 1 x0 x1 x2 x3 -- '--copies 1: '
refused --level raid10 --copies 5 x0 x1 x2 x3 -- '--copies 5: .*4'
refused --copies 2 x0 x1 -- '--copies 2: .*raid0'
refused --level raid0 --copies 2 x0 x1 -- '--copies 2: '
refused --level raid1 x0 -- '--level raid1: .*2 members'
refused --level raid1 --copies 3 x0 x1 -- '--copies 3: '
refused --level raid10 x0 -- '--level raid10: '
refused --level raid5 x0 x1 -- '--level raid5: '
refused --level raid10 --copies two x0 x1 -- '--copies two: '
refused --level raid1 --stripe-size 4K --data-offset 4K x0 x1 -- '--data-offset 4K: '
# Sizes as typed, not in bytes: the user looks for what they wrote.
refused --level raid1 --size 2047P x0 x1 -- '--size 2047P: '
for m in x0 x1 x2 x3; do
    [[ ! -e $m ]] || die "a refused create left $m behind"
done

log "info: level, copies, roles"
"$BIOCTL" info c0 c1 c2 c3 >info.txt || die "info raid10: exit $?"
expect_grep "^volume 'm10': complete and consistent; members by role: c0 c1 c2 c3$" info.txt
expect_grep "^level raid10, 2 copies, stripe 65536, size 16777216, " info.txt
for r in 0 1 2 3; do
    expect_grep "^role $r: c$r, active$" info.txt
done
expect_no_grep degraded info.txt
"$BIOCTL" info --json c2 c0 c3 c1 >info.json || die "info --json raid10: exit $?"
"$PY" - info.json <<'PY' || die "info --json: $(cat info.json)"
import json, sys
j = json.load(open(sys.argv[1]))
v = j["volume"]
assert v["complete"] and not v["degraded"], v
assert (v["level"], v["copies"], v["members"], v["active"]) == ("raid10", 2, 4, 4), v
assert v["by_role"] == ["c0", "c1", "c2", "c3"], v
assert [r["state"] for r in v["roles"]] == ["active"] * 4, v
assert v["bitmap_shift"] == 20, v
assert all(m["level"] == "raid10" and m["copies"] == 2 for m in j["members"]), j
PY

log "check: the same bytes at every copy's position compare equal"
layout fill 2 2 $((16 << 20)) a b
layout fill 4 2 $((16 << 20)) c0 c1 c2 c3
layout fill 3 2 $((15 << 20)) d0 d1 d2
for vol in "a b" "c0 c1 c2 c3" "d2 d0 d1"; do
    # shellcheck disable=SC2086 # word splitting wanted
    "$BIOCTL" check $vol >out 2>err || die "check $vol: exit $? $(cat out err)"
    expect_grep "superblocks consistent, [0-9]+ bytes of data read, the live copies agree" out
    expect_no_grep mismatch out
    expect_grep "^check: 100% " err
done

log "check: one copy of one chunk corrupted is named, exit 1"
# Chunk 37 of the 3-member raid10: copies at positions 74 and 75, i.e.
# role 2 and role 0 (row 24 and 25).  Corrupt copy 1 (role 0) 8K in.
[[ $(layout corrupt 3 2 $((15 << 20)) d0 d1 d2 37 1 8192 4096) == d0 ]] ||
    die "chunk 37 copy 1 is not on d0 by the layout rule"
rc=0
"$BIOCTL" check d0 d1 d2 >out 2>err || rc=$?
[[ $rc -eq 1 ]] || die "check of a corrupted copy: exit $rc $(cat out err)"
expect_grep "^mismatch: volume offset $((37 * C + 8192)) length 4096: role 0 differs from role 2$" out
expect_grep "^4096 mismatching bytes in 1 range$" out
[[ $(grep -c '^mismatch' out) -eq 1 ]] || die "more than one mismatch: $(cat out)"
rc=0
"$BIOCTL" check --from 1G d0 d1 d2 >out 2>err || rc=$?
[[ $rc -ne 0 ]] || die "check --from past the end: exit 0"
expect_grep "^bioctl: --from 1G: past the volume's end$" err

log "check --repair: refused while a member is locked"
if command -v flock >/dev/null; then
    rc=0
    flock -x d1 "$BIOCTL" check --repair d0 d1 d2 >out 2>err || rc=$?
    [[ $rc -eq 1 ]] || die "repair of a locked volume: exit $rc $(cat out err)"
    expect_grep "member d1: in use by another process" err
fi

log "check --repair: rewritten from the first copy, then clean"
"$BIOCTL" check --repair d0 d1 d2 >out 2>err || die "repair: exit $? $(cat out err)"
expect_grep "^mismatch: volume offset $((37 * C + 8192)) length 4096: role 0 differs from role 2, repaired$" out
expect_grep "^4096 mismatching bytes in 1 range, repaired$" out
layout same 3 2 $((15 << 20)) d0 d1 d2 37 || die "chunk 37 not repaired"
"$BIOCTL" check d0 d1 d2 >out 2>err || die "check after repair: exit $? $(cat out err)"
expect_no_grep mismatch out

log "check: raid1 corruption across a block boundary is one range"
# Copy 1 of the raid1 (b) from 1M - 4K to 1M + 4K: two check blocks.
layout corrupt 2 2 $((16 << 20)) a b 15 1 $((C - 4096)) 4096 >/dev/null
layout corrupt 2 2 $((16 << 20)) a b 16 1 0 4096 >/dev/null
rc=0
"$BIOCTL" check a b >out 2>err || rc=$?
[[ $rc -eq 1 ]] || die "raid1 check: exit $rc"
expect_grep "^mismatch: volume offset $((16 * C - 4096)) length 8192: role 1 differs from role 0$" out
expect_ok "$BIOCTL" check --repair a b >/dev/null 2>&1
layout same 2 2 $((16 << 20)) a b 15
layout same 2 2 $((16 << 20)) a b 16
expect_ok "$BIOCTL" check a b >/dev/null 2>&1

log "check --repair on raid0: refused"
expect_ok "$BIOCTL" create --size 4M r0 r1 >/dev/null
rc=0
"$BIOCTL" check --repair r0 r1 >out 2>err || rc=$?
[[ $rc -eq 1 ]] || die "repair raid0: exit $rc"
expect_grep "^bioctl: --repair: " err

log "a raid1 member deleted: degraded, exit 0"
cp b b.bak
rm b
"$BIOCTL" info a b >info.txt 2>&1 || die "info of a degraded raid1: exit $? $(cat info.txt)"
expect_grep "^b: missing" info.txt
expect_grep "^volume 'm1': degraded \(1 of 2 members active\)" info.txt
expect_grep "^role 0: a, active$" info.txt
expect_grep "^role 1: -, missing$" info.txt
"$BIOCTL" info --json a b >info.json || die "info --json of a degraded raid1: exit $?"
"$PY" -c '
import json, sys
j = json.load(open(sys.argv[1]))
v = j["volume"]
assert v["complete"] and v["degraded"] and v["active"] == 1, v
assert v["by_role"] == ["a", None], v
assert [r["state"] for r in v["roles"]] == ["active", "missing"], v
assert j["members"][1]["exists"] is False, j
' info.json || die "degraded info --json: $(cat info.json)"
"$BIOCTL" check a b >out 2>err || die "check of a degraded raid1: exit $? $(cat out err)"
expect_grep "^skipped: role 1 \(-\): missing$" out

log "a stale member: shown as such"
cp b.bak b
# A run that b missed (a start and a clean stop, each one event up) on a
# only; one behind with the same roles would be a mark cut short, not
# stale (test-volume-mirror.sh).
sb_edit a events=+2
"$BIOCTL" info a b >info.txt 2>&1 || die "info with a stale member: exit $? $(cat info.txt)"
expect_grep "^volume 'm1': degraded \(1 of 2 members active\)" info.txt
expect_grep "^role 1: b, stale$" info.txt
"$BIOCTL" check a b >out 2>err || die "check with a stale member: exit $?"
expect_grep "^skipped: role 1 \(b\): stale$" out
log "ok"
