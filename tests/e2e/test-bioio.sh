#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: the bioio tool itself (tools/bioio.c), which the fault tests
# and people debugging rely on: exit statuses (0 ok, 1 a command or the
# volume failed, 2 bad command line), one result line per command, a
# failing command does not stop the next, config errors are one line and
# create nothing, "read" prints the same checksum as cksum(1), writein /
# readout round-trip arbitrary data, and the data lands where the layout
# rule says.  Both backends.
source "$(dirname "$0")/functions.sh"

requires_bioio
make_tmpdir

# Bad command lines: exit 2, before any member is created.
for args in "$tmp/a -- frob" "$tmp/a" "$tmp/a -- write 1 512 0" \
    "$tmp/a -- write 0 512" "$tmp/a -- write 0 512 256" \
    "--backend nope $tmp/a -- size" "--segments 0 $tmp/a -- size"; do
    rc=0
    # shellcheck disable=SC2086 # word splitting wanted
    bioio --size 1M $args >/dev/null 2>"$tmp/err" || rc=$?
    [[ $rc -eq 2 ]] || die "bioio $args: exit status $rc, expected 2"
    [[ ! -e $tmp/a ]] || die "bioio $args: created a member"
done

# Config errors: exit 1, a one-line message naming the problem, nothing
# created.
config_error() { # PATTERN ARGS...
    local pattern=$1 rc=0
    shift
    bioio "$@" -- size >"$tmp/out" 2>"$tmp/err" || rc=$?
    [[ $rc -eq 1 ]] || die "bioio $*: exit status $rc, expected 1"
    [[ $(wc -l <"$tmp/err") -eq 1 ]] || { cat "$tmp/err" >&2; die "bioio $*: not one line"; }
    expect_grep "$pattern" "$tmp/err"
    [[ ! -s $tmp/out ]] || die "bioio $*: printed results"
}
config_error 'stripe-size' --stripe-size 3K --size 1M "$tmp/new1" "$tmp/new2"
config_error 'given twice' --size 1M "$tmp/new1" "$tmp/new1"
config_error "$tmp/missing" "$tmp/missing"
config_error 'not a regular file' "$tmp"
[[ ! -e $tmp/new1 && ! -e $tmp/new2 ]] || die "a refused volume created a member"

for be in $BACKENDS; do
    d=$tmp/$be
    mkdir -p "$d"
    m=("$d/m0" "$d/m1" "$d/m2")
    head -c 200K /dev/urandom >"$d/data"
    sum=$(cksum <"$d/data")

    rc=0
    bioio --backend "$be" --size 3M --stripe-size 64K "${m[@]}" -- \
        size \
        writein 32K 200K \
        read 32K 200K \
        readout 32K 200K \
        write 1M 128K 0x5c \
        sh 'exit 3' \
        check 1M 128K 0x5c \
        check 1M 128K 0x5d \
        write 3M 512 0 \
        flush \
        <"$d/data" >"$d/out" 2>"$d/err" || rc=$?
    [[ $rc -eq 1 ]] || { cat "$d/err" >&2; die "$be: exit status $rc, expected 1"; }

    # stdout: the result lines with the readout data in the middle.
    head -n 3 "$d/out" >"$d/out.head"
    cat >"$d/out.head.expected" <<EOF
size: 3145728
writein 32K 200K: ok
read 32K 200K: cksum $sum
EOF
    expect_same_file "$d/out.head.expected" "$d/out.head"
    hlen=$(head -n 3 "$d/out" | wc -c)
    # cmp itself skips and limits: "tail | head" under pipefail fails
    # whenever head exits before tail has written everything (SIGPIPE).
    cmp -i "$hlen:0" -n $((200 * 1024)) "$d/out" "$d/data" ||
        die "$be: readout differs from what writein wrote"
    tail -c +$((hlen + 200 * 1024 + 1)) "$d/out" >"$d/out.tail"
    cat >"$d/out.tail.expected" <<EOF
write 1M 128K: ok
check 1M 128K: ok
flush: ok
EOF
    expect_same_file "$d/out.tail.expected" "$d/out.tail"
    cat >"$d/err.expected" <<EOF
bioio: sh exit 3: exit status 3
bioio: check 1M 128K: mismatch at volume offset 1048576: 0x5c, expected 0x5d
bioio: write 3M 512: No space left on device
EOF
    expect_same_file "$d/err.expected" "$d/err"

    # The data went where the layout rule puts it: volume 32K..232K is
    # chunk 0 from 32K (member 0), chunk 1 (member 1), chunk 2 (member 2),
    # chunk 3 up to 232K (member 0 at 64K).
    layout_cmp() { # DATA-OFF LEN MEMBER MEMBER-OFF
        cmp <(tail -c +$(($1 + 1)) "$d/data" | head -c "$2") \
            <(dd if="${m[$3]}" iflag=skip_bytes,count_bytes skip="$4" \
                count="$2" status=none) ||
            die "$be: data at $1+$2 is not on member $3 at $4"
    }
    layout_cmp 0 $((32 * 1024)) 0 $((32 * 1024))
    layout_cmp $((32 * 1024)) $((64 * 1024)) 1 0
    layout_cmp $((96 * 1024)) $((64 * 1024)) 2 0
    layout_cmp $((160 * 1024)) $((40 * 1024)) 0 $((64 * 1024))
    # Volume 1M..1M+128K: chunks 16 and 17 -> member 1 at 320K, member 2 at 320K.
    check_bytes "${m[1]}" 320K 64K 0x5c
    check_bytes "${m[2]}" 320K 64K 0x5c
done

# A member cut to a size that is not a multiple of 512: a read across its
# end gets its bytes where they belong and zeros after them (a short read
# resumes at its byte, not at the sector before).  On disk and on tmpfs
# (copied inline), both backends.
make_shmdir 4M
for dir in "$tmp" "$shm"; do
    for be in $BACKENDS; do
        f=$dir/short.$be
        rm -f "$f"
        bioio --backend "$be" --size 1M "$f" -- write 0 8K 0x41 \
            sh "truncate -s 1000 '$f'" readout 0 8K >"$tmp/short.all" ||
            die "$be on $(fstype "$dir"): bioio failed"
        tail -c 8192 "$tmp/short.all" >"$tmp/short.out" # after 2 result lines
        { head -c 1000 /dev/zero | tr '\0' A; head -c $((8192 - 1000)) /dev/zero; } \
            >"$tmp/short.expected"
        cmp "$tmp/short.expected" "$tmp/short.out" ||
            die "$be on $(fstype "$dir"): read across the end of a member of 1000 bytes: wrong data"
    done
done
log "ok"
