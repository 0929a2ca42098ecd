#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: configuration mistakes.  Each one (missing member, the same
# member twice, also through a symlink, a directory as member, stripe size
# not a power of two or below 4K, bad or ragged size, members too small,
# unknown backend, no member at all, size 0; in a conf file a syntax
# error, an unknown key, a bad value (size = 0 too) and a duplicate
# export, each with its line number, an export without member, a missing
# conf file; and for the plugin an export= not in the conf file, an
# unknown key, conf= mixed with file= or another export key, named) makes
# the server exit 1 before serving, with exactly one line of output that
# names the problem (the line of the key at fault, a member's own), and
# leaves the member directory exactly as it was: nothing created,
# extended or truncated, even when other members of the same volume were
# fine and would have needed creating.  Also the plugin's --help lists
# every key and --dump-plugin works.
source "$(dirname "$0")/functions.sh"

requires_server
make_tmpdir

d=$tmp/members
mkdir -p "$d/adir"
truncate -s 1M "$d/m0"
truncate -s 1M "$d/m1"
truncate -s 4K "$d/tiny"
printf 'precious' | dd of="$d/m0" conv=notrunc status=none
ln -s m0 "$d/link-to-m0"

snapshot() {
    (cd "$d" && find . -printf '%p %y %s %T@ %l\n' | sort &&
        find . -type f -exec md5sum {} + | sort)
}
snapshot >"$tmp/before"

# refuse PATTERN OPTIONS...: the server refuses with one line matching the
# extended regex PATTERN, and the members are untouched.
refuse() {
    server_refuses_line "$@"
    shift
    snapshot >"$tmp/after"
    diff -u "$tmp/before" "$tmp/after" >&2 ||
        die "the member directory changed: $*"
    log "refused: $(cat "$SERVER_ERR")"
}

refuse "$d/nope.*No such file" "$d/m0" "$d/nope"
refuse "m0.*twice" "$d/m0" "$d/m1" "$d/m0"
refuse "link-to-m0.*twice|m0.*twice" "$d/m0" "$d/link-to-m0"
refuse "adir.*not a regular file" --size 4M "$d/m0" "$d/new" "$d/adir"
refuse "stripe.size.*48K.*power of two|stripe.size.*power of two" \
    --stripe-size 48K "$d/m0" "$d/m1"
refuse "stripe.size.*2K|stripe.size.*power of two" --stripe-size 2K "$d/m0" "$d/m1"
refuse "stripe.size.*banana" --stripe-size banana "$d/m0" "$d/m1"
refuse "size.*12Q" --size 12Q "$d/m0" "$d/m1"
refuse "size.*1000.*512" --size 1000 "$d/m0" "$d/m1"
# 0 is not "no size": neither served as the members are, nor reported as
# a missing member.
refuse "(^bionbd: --size 0|size=0): a volume of 0 bytes" --size 0 "$d/m0" "$d/m1"
refuse "(^bionbd: --size 0|size=0): a volume of 0 bytes" --size 0 "$d/m0" "$d/new"
refuse "tiny.*smaller than" "$d/m0" "$d/tiny"
refuse "backend.*bogus" --backend bogus "$d/m0" "$d/m1"
refuse "file|member" # no member at all

# Configuration files: the message names the file and the line.
conf=$tmp/bad.conf
conf_case() { # PATTERN TEXT
    printf '%s' "$2" >"$conf"
    refuse "$1" --conf "$conf"
}
conf_case "bad.conf:4: syntax error.*'this line is wrong'" \
"# a comment
[export a]
file = $d/m0
this line is wrong
"
conf_case "bad.conf:5: \[export a\] stripe-sise=64K: unknown key" \
"[export a]
file = $d/m0

  file = $d/m1
stripe-sise = 64K
"
conf_case "bad.conf:3: \[export a\] stripe-size=3K: .*power of two" \
"[export a]
file = $d/m0
stripe-size = 3K
"
conf_case "bad.conf:4: \[export a\] size=0: a volume of 0 bytes" \
"[export a]
file = $d/m0
file = $d/m1
size = 0
"
conf_case "bad.conf:5: duplicate export 'a' \(first defined at line 1\)" \
"[export a]
file = $d/m0
[export b]
file = $d/m1
[export a]
file = $d/tiny
"
conf_case "bad.conf:1: \[export a\] no member" \
"[export a]
description = nothing in it
"
conf_case "nope.*No such file" \
"[export a]
file = $d/nope
"
# What is found when the members are looked at cites the line at fault:
# the member's own, or the key's, not the [export] header's.
conf_case "bad.conf:5: \[export a\] member $d/nope: No such file" \
"[export a]
stripe-size = 64K
file = $d/m0

file = $d/nope
"
conf_case "bad.conf:4: \[export a\] member $d/tiny: .*smaller than" \
"[export a]
file = $d/m0
# the second is too small
file = $d/tiny
"
conf_case "bad.conf:5: \[export a\] fault = member=7: member=7: member 7 does not exist" \
"[export a]
file = $d/m0
file = $d/m1
fault = op=read rate=1%
fault = member=7
"
conf_case "bad.conf:3: \[export a\] copies=2: only raid1 and raid10 keep copies" \
"[export a]
file = $d/m0
copies = 2
file = $d/m1
"
# All or nothing: export a alone would create two new members, but export
# b is broken, so neither may touch the directory.
conf_case "bad.conf:6: \[export b\] member $d/nope: No such file" \
"[export a]
file = $d/new-a0
file = $d/new-a1
size = 1M
[export b]
file = $d/nope
"
refuse "missing.conf.*No such file" --conf "$tmp/missing.conf"
printf '[export a]\nfile = %s\n' "$d/m0" >"$conf"

# Plugin-only spellings: export= naming no export of the conf file, an
# unknown key, conf= mixed with file=, --help.
if [[ $SERVER == plugin ]]; then
    plugin_refuses() { # PATTERN ARGS...
        local pattern=$1 rc=0
        shift
        nbdkit -f -U "$tmp/x.sock" "$BIO_PLUGIN" "$@" \
            >"$tmp/plugin.err" 2>&1 </dev/null || rc=$?
        [[ $rc -ne 0 ]] || die "nbdkit accepted: $*"
        [[ $(grep -c . "$tmp/plugin.err") -eq 1 ]] ||
            { cat "$tmp/plugin.err" >&2; die "not one line: $*"; }
        expect_grep "$pattern" "$tmp/plugin.err"
        log "refused: $(cat "$tmp/plugin.err")"
    }
    refuse "export.*zzz" --conf "$conf" --export zzz
    plugin_refuses "unknown parameter 'colour'" file="$d/m0" colour=blue
    plugin_refuses "conf= cannot be combined with file=" conf="$conf" file="$d/m1"
    # Any export key, named: not only the five of old.
    plugin_refuses "conf= cannot be combined with level=" conf="$conf" level=raid1
    plugin_refuses "conf= cannot be combined with fault=" conf="$conf" 'fault=member=*'
    plugin_refuses "export= .*no conf=" file="$d/m0" export=a
    plugin_refuses "read-only=perhaps" file="$d/m0" read-only=perhaps
    plugin_refuses "conf= given twice" conf="$conf" conf="$conf"
    # Keys that would be silently unused, refused as bionbd's flags are.
    plugin_refuses "trace-buffer=8M: needs trace=FILE" file="$d/m0" trace-buffer=8M
    plugin_refuses "timeout=3: no member is remote" file="$d/m0" timeout=3
    snapshot >"$tmp/after"
    diff -u "$tmp/before" "$tmp/after" >&2 || die "the member directory changed"

    nbdkit "$BIO_PLUGIN" --help >"$tmp/help" 2>&1 || die "nbdkit bio --help failed"
    for key in file stripe-size size read-only description backend conf export; do
        expect_grep "^$key=" "$tmp/help"
    done
    nbdkit "$BIO_PLUGIN" --dump-plugin >"$tmp/dump" 2>&1 || die "--dump-plugin failed"
    expect_grep '^name=bio$' "$tmp/dump"
    expect_grep '^thread_model=parallel$' "$tmp/dump"
    expect_grep '^bio_backends=' "$tmp/dump"
fi
log "ok"
