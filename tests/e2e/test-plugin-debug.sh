#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: the plugin's debug flags.  nbdkit -v -D bio.requests=1
# logs one line per request with its command, range, flags and result (a
# 128 KiB write at 96 KiB, a 4 KiB read at 0), and -D bio.stripes=1 adds
# the member pieces: with 4
# members and 64 KiB stripes that write is m1@32768+32768 then
# m2@0+65536 then m3@0+32768.  Without the flags, no such lines.
source "$(dirname "$0")/functions.sh"

requires nbdkit
requires nbdsh
[[ -f $BIO_PLUGIN ]] || die "$BIO_PLUGIN not built"
make_tmpdir
sock=$tmp/nbd.sock

# serve LOG FLAGS...: nbdkit with the plugin; one 128 KiB write at 96 KiB
# and one 4 KiB read at 0 through nbdsh, then stop.
serve() {
    local log=$1
    shift
    rm -f "$sock"
    start_bg nbdkit -f -v --exit-with-parent -U "$sock" "$@" "$BIO_PLUGIN" \
        file="$tmp/m0" file="$tmp/m1" file="$tmp/m2" file="$tmp/m3" \
        stripe-size=64K size=16M </dev/null >"$log" 2>&1
    local pid=$BG_PID n
    for ((n = 0; n < 200; n++)); do
        [[ -S $sock ]] && break
        sleep 0.05
    done
    PATH=/usr/bin:$PATH nbdsh -u "nbd+unix:///?socket=$sock" -c '
h.pwrite(b"x" * 131072, 98304)
assert h.pread(4096, 0) == bytes(4096)
' || die "nbdsh against nbdkit $*"
    kill "$pid"
    wait_gone "$pid" 10 || die "nbdkit did not stop"
}

log "-D bio.requests=1 -D bio.stripes=1"
serve "$tmp/on.log" -D bio.requests=1 -D bio.stripes=1
expect_grep "bio: WRITE export '' offset 98304 length 131072 flags 0: ok" "$tmp/on.log"
expect_grep "bio: READ export '' offset 0 length 4096 flags 0: ok" "$tmp/on.log"
expect_grep "bio: pieces: m1@32768\\+32768 m2@0\\+65536 m3@0\\+32768$" "$tmp/on.log"
expect_grep "bio: pieces: m0@0\\+4096$" "$tmp/on.log"

log "no flags: no request lines"
serve "$tmp/off.log"
expect_no_grep "bio: (WRITE|READ|pieces)" "$tmp/off.log"
log "ok"
