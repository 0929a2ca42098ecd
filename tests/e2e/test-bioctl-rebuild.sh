#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: bioctl rebuild on plain files (no server).  For raid1 (2
# members), raid10 (4 members, 2 copies) and raid10 (3 members, 2 copies,
# the role whose last row lies past the volume's end): random data at
# every copy's position (md's "near" layout computed here from
# docs/format.md, not by bioctl), one member deleted, info says degraded;
# rebuild --replace OLD NEW exits 0, info with NEW in OLD's place (any
# order) says complete with every role active, check agrees, and NEW
# holds the data at every position of its role.  Resume: a throttled
# rebuild stopped by SIGINT says interrupted and exits 1, info --json
# shows the role rebuilding with a checkpoint, the same command resumes
# there (copying only the rest) and exits 0.  Refusals, exit 1 in one
# line naming the thing, nothing written: NEW already a member, NEW
# holding another volume's superblock, NEW holding another role, OLD not
# part of the volume, a member locked by another process.  Migration: an
# active member of a healthy raid1 replaced; the old one is refused
# afterwards.  --role R NEW rebuilds a role OLD cannot name (several
# roles without a member), which --replace refuses.
source "$(dirname "$0")/functions.sh"

requires python3
[[ -x $BIOCTL ]] || die "$BIOCTL not built"
make_tmpdir
cd "$tmp"

SIZE=$((16 << 20))
head -c $SIZE /dev/urandom >pattern

# layout.py CMD N K MEMBER...: the mirror layout of docs/format.md over
# MEMBER... in role order.  Chunk k has K copies; copy j is at position
# p = k*K + j: member p mod N, member offset D + (p div N)*C.
#   fill: every copy of every chunk gets the chunk's bytes of "pattern"
#   verify: every copy of every chunk holds them (else exit 1, naming it)
cat >layout.py <<'PY'
import sys

D, C = 1 << 20, 65536
cmd, n, k_copies = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
members = sys.argv[4:]
assert len(members) == n, members
data = open("pattern", "rb").read()
chunks = (len(data) + C - 1) // C

def where(k, j):
    p = k * k_copies + j
    return members[p % n], D + (p // n) * C

files = {m: open(m, "r+b" if cmd == "fill" else "rb") for m in members}
for k in range(chunks):
    want = data[k * C:(k + 1) * C]
    for j in range(k_copies):
        m, off = where(k, j)
        files[m].seek(off)
        if cmd == "fill":
            files[m].write(want)
        elif files[m].read(len(want)) != want:
            sys.exit("chunk %d copy %d (%s at %d) differs" % (k, j, m, off))
PY
layout() { python3 layout.py "$@"; }

# jq_py EXPR FILE: a python expression over the JSON in FILE (as j).
jq_py() { python3 -c "import json, sys; j = json.load(open(sys.argv[1])); print($1)" "$2"; }

# refused WANT ARGS...: "bioctl rebuild ARGS" exits 1 with one line on
# stderr matching WANT (ERE, after "bioctl: ").
refused() {
    local want=$1 rc=0
    shift
    "$BIOCTL" rebuild "$@" >out 2>err || rc=$?
    [[ $rc -eq 1 ]] || die "rebuild $*: exit $rc (want 1): $(cat out err)"
    [[ $(wc -l <err) -eq 1 ]] || die "rebuild $*: not one line: $(cat err)"
    expect_grep "^bioctl: $want" err
}

# events FILE: the event counter in FILE's superblock.
events() { python3 -c 'import struct, sys; print(struct.unpack_from("<Q", open(sys.argv[1], "rb").read(4096), 136)[0])' "$1"; }

log "the check of this script fails on a member that lacks the data"
"$BIOCTL" create --level raid1 --name v --size $SIZE v0 v1 >/dev/null
layout fill 2 2 v0 v1
layout verify 2 2 v0 v1 || die "verify fails right after fill"
truncate -s 0 v1 && truncate -s $(((1 << 20) + SIZE)) v1
! layout verify 2 2 v0 v1 2>/dev/null || die "verify passes on a member of zeros"

# rebuild_case LEVEL K R MEMBER...: create, fill, delete role R's member,
# rebuild it onto new-LEVEL-N, and check the result.
rebuild_case() {
    local level=$1 k=$2 r=$3 n i
    shift 3
    local members=("$@") by_role=("$@")
    n=${#members[@]}
    local new=new-$level-$n old=${members[r]}
    log "$level, $n members, $k copies: role $r deleted and rebuilt"
    "$BIOCTL" create --level "$level" --copies "$k" --name "$level-$n" \
        --size $SIZE "${members[@]}" >/dev/null
    layout fill "$n" "$k" "${members[@]}"
    rm "$old"
    "$BIOCTL" info "${members[@]}" >info.txt || die "info degraded: exit $?"
    expect_grep "^volume '$level-$n': degraded \($((n - 1)) of $n members active\)" info.txt
    expect_grep "^role $r: -, missing$" info.txt

    "$BIOCTL" rebuild "${members[@]}" --replace "$old" "$new" >out 2>err ||
        die "rebuild $level: exit $? $(cat out err)"
    expect_grep "^rebuilt role $r of volume '$level-$n' on $new: [0-9]+ bytes copied in " out

    by_role[r]=$new
    # Members in another order than their roles: info sorts them.
    "$BIOCTL" info "${by_role[@]:1}" "${by_role[0]}" >info.txt ||
        die "info after rebuild: exit $? $(cat info.txt)"
    expect_grep "^volume '$level-$n': complete and consistent; members by role: ${by_role[*]}$" info.txt
    for ((i = 0; i < n; i++)); do
        expect_grep "^role $i: ${by_role[i]}, active$" info.txt
    done
    "$BIOCTL" check "${by_role[@]}" >out 2>err ||
        die "check after rebuild: exit $? $(cat out err)"
    expect_grep "the live copies agree" out
    layout verify "$n" "$k" "${by_role[@]}" || die "$new: not the data of role $r"
}

rebuild_case raid1 2 1 a0 a1
rebuild_case raid10 2 2 b0 b1 b2 b3
# 256 chunks, 512 positions in 171 rows of 3: role 2's row 170 would be
# position 512, past the last chunk.
rebuild_case raid10 2 2 c0 c1 c2

log "resume: a throttled rebuild stopped by SIGINT, then run again"
"$BIOCTL" create --level raid1 --name r --size $SIZE r0 r1 >/dev/null
layout fill 2 2 r0 r1
rm r1
"$BIOCTL" rebuild r0 r1 --replace r1 rnew --max-rate 2M >out 2>err &
pid=$!
sleep 1
kill -INT $pid
rc=0
wait $pid || rc=$?
[[ $rc -eq 1 ]] || die "interrupted rebuild: exit $rc (want 1): $(cat out err)"
expect_grep "^bioctl: rebuild interrupted at member byte [0-9]+ of $SIZE; run the same command again to resume$" err
"$BIOCTL" info --json r0 rnew >info.json || die "info during a rebuild: exit $?"
cp=$(jq_py 'j["volume"]["roles"][1]["checkpoint"]' info.json)
[[ $(jq_py 'j["volume"]["roles"][1]["state"]' info.json) == rebuilding ]] ||
    die "role 1 not rebuilding: $(cat info.json)"
((cp > 0 && cp < SIZE && cp % 65536 == 0)) || die "checkpoint $cp"
[[ $(jq_py 'j["members"][1]["state"]' info.json) == rebuilding ]] ||
    die "rnew's own superblock: $(cat info.json)"
"$BIOCTL" info r0 rnew >info.txt || die "info during a rebuild: exit $?"
expect_grep "^role 1: rnew, rebuilding, $cp of $SIZE bytes rebuilt$" info.txt
"$BIOCTL" rebuild r0 r1 --replace r1 rnew >out 2>err ||
    die "resumed rebuild: exit $? $(cat out err)"
expect_grep "^bioctl: resuming the rebuild of role 1 at member byte $cp of $SIZE$" err
expect_grep "^rebuilt role 1 of volume 'r' on rnew: $((SIZE - cp)) bytes copied " out
"$BIOCTL" info --json r0 rnew >info.json || die "info after resume: exit $?"
[[ $(jq_py '[r["state"] for r in j["volume"]["roles"]]' info.json) == "['active', 'active']" ]] ||
    die "roles after resume: $(cat info.json)"
[[ $(jq_py 'j["volume"]["roles"][1]["checkpoint"]' info.json) -eq 0 ]] ||
    die "checkpoint left after the rebuild: $(cat info.json)"
expect_ok "$BIOCTL" check r0 rnew >/dev/null 2>&1
layout verify 2 2 r0 rnew || die "rnew after resume: not the data"

log "refusals: one line, exit 1, nothing written"
"$BIOCTL" create --level raid1 --name other --size 4M o0 o1 >/dev/null
touch plain
before=$(events r0)
refused "rnew: already a member of the volume \(given as rnew\)$" \
    r0 rnew --replace r0 rnew
# b1 plays role 1 of the raid10 on 4 members, not given here.
refused "b1: holds role 1 of volume 'raid10-4' \(the role to rebuild is 3\)$" \
    b0 new-raid10-4 --replace b3 b1
refused "o0: holds the superblock of volume 'other' \([-0-9a-f]+\) \(--force to overwrite it\)$" \
    r0 rnew --replace rnew o0
refused "o0: not part of volume 'r' \(it belongs to volume 'other', [-0-9a-f]+\)$" \
    r0 rnew --replace o0 fresh
refused "plain: not part of volume 'r' \(no superblock\)$" \
    r0 rnew --replace plain fresh
refused "gone: not part of volume 'r' \(every role has a member given\)$" \
    r0 rnew --replace gone fresh
[[ ! -e fresh ]] || die "a refused rebuild created NEW"
flock -F r0 sleep 5 &
lock_pid=$!
for ((i = 0; i < 50; i++)); do
    flock -n r0 true || break
    sleep 0.1
done
((i < 50)) || die "flock did not take r0"
refused "member r0: in use by another process" r0 rnew --replace rnew fresh
kill $lock_pid
wait $lock_pid || true
[[ ! -e fresh ]] || die "a refused rebuild created NEW"
[[ $(events r0) -eq $before && $(events rnew) -eq $before ]] ||
    die "a refused rebuild changed the superblocks (events $before -> $(events r0), $(events rnew))"
rc=0
"$BIOCTL" rebuild r0 rnew --replace rnew >out 2>err || rc=$?
[[ $rc -eq 2 ]] || die "--replace without NEW: exit $rc (want 2)"

log "--role: the role to rebuild when OLD cannot say which"
# Two roles of the raid10 on 4 members without a member (one of each pair).
rm b1 b3
refused "b3: does not exist, and roles 1, 3 have no member given: name the one to rebuild with --role R NEW instead of --replace OLD NEW$" \
    b0 new-raid10-4 --replace b3 b3new
[[ ! -e b3new ]] || die "a refused rebuild created NEW"
"$BIOCTL" rebuild --role 3 b3new b0 new-raid10-4 >out 2>err ||
    die "rebuild --role 3: exit $? $(cat out err)"
expect_grep "^rebuilt role 3 of volume 'raid10-4' on b3new: " out
"$BIOCTL" info b3new new-raid10-4 b0 >info.txt || die "info after --role: exit $?"
expect_grep "^role 1: -, missing \(recorded faulty\)$" info.txt
expect_grep "^role 3: b3new, active$" info.txt
"$BIOCTL" check b0 new-raid10-4 b3new >out 2>err || die "check after --role: exit $? $(cat out err)"
expect_grep "the live copies agree" out

log "migration: an active member of a healthy raid1 replaced"
"$BIOCTL" rebuild rnew r0 --replace r0 moved >out 2>err ||
    die "migration: exit $? $(cat out err)"
expect_grep "^rebuilt role 0 of volume 'r' on moved: $SIZE bytes copied " out
"$BIOCTL" info rnew moved >info.txt || die "info after migration: exit $?"
expect_grep "^volume 'r': complete and consistent; members by role: moved rnew$" info.txt
expect_ok "$BIOCTL" check moved rnew >/dev/null 2>&1
layout verify 2 2 moved rnew || die "moved: not the data"
# The member it replaced no longer plays the role: left out, said so.
"$BIOCTL" info r0 rnew >info.txt || die "info with the replaced member: exit $? $(cat info.txt)"
expect_grep "^r0: replaced in its role, no longer a member$" info.txt
expect_grep "^role 0: -, missing" info.txt
"$BIOCTL" info --json r0 rnew moved >info.json || die "info --json: exit $?"
/usr/bin/python3 -c 'import json, sys
v = json.load(open("info.json"))["volume"]
sys.exit(v["replaced"] != ["r0"] or v["by_role"] != ["moved", "rnew"])' ||
    die "info --json with the replaced member: $(cat info.json)"
log "ok"
