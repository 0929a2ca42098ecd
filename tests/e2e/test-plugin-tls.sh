#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: the nbdkit plugin inherits nbdkit's TLS (--tls,
# --tls-psk, --tls-certificates): with --tls=require and a PSK made by
# psktool, nbdcopy writes 16 MiB of random data striped by the plugin and
# reads the same back, qemu-img reads it through tls-creds-psk, and
# plaintext and a wrong key are refused; with X.509 certificates made by
# certtool nbdinfo connects.
source "$(dirname "$0")/functions.sh"

requires nbdkit
requires nbdinfo
requires nbdcopy
requires qemu-img
[[ -f $BIO_PLUGIN ]] || die "$BIO_PLUGIN not built"
make_tmpdir
K=$tmp/keys
make_tls_keys "$K"
sock=$tmp/nbd.sock
psk_uri() { echo "nbds+unix://alice@/?socket=$sock&tls-psk-file=$1"; }

# plugin_tls ARGS...: nbdkit with the plugin over three members, TLS args.
plugin_tls() {
    rm -f "$sock"
    start_bg nbdkit -f --exit-with-parent -U "$sock" -P "$tmp/pid" "$@" \
        "$BIO_PLUGIN" file="$tmp/m0" file="$tmp/m1" file="$tmp/m2" \
        size=48M </dev/null >"$tmp/nbdkit.log" 2>&1
    show_log_on_failure "$tmp/nbdkit.log"
    local n
    for ((n = 0; n < 200; n++)); do
        [[ -S $sock ]] && return 0
        sleep 0.05
    done
    die "nbdkit did not start: $*"
}

log "PSK, --tls=require: nbdcopy in and out, qemu-img"
plugin_tls --tls=require --tls-psk="$K/psk/keys.psk"
head -c $((16 << 20)) /dev/urandom >"$tmp/src"
nbdcopy "$tmp/src" "$(psk_uri "$K/psk/keys.psk")" || die "nbdcopy in"
nbdcopy "$(psk_uri "$K/psk/keys.psk")" "$tmp/back" || die "nbdcopy out"
cmp "$tmp/src" <(head -c $((16 << 20)) "$tmp/back") || die "data differs"
qemu-img convert -O raw \
    --object tls-creds-psk,id=t0,dir="$K/psk",username=alice,endpoint=client \
    --image-opts "driver=nbd,server.type=unix,server.path=$sock,tls-creds=t0" \
    "$tmp/qback" || die "qemu-img over TLS-PSK"
cmp "$tmp/src" <(head -c $((16 << 20)) "$tmp/qback") || die "qemu-img: data differs"

log "PSK: plaintext and a wrong key refused"
expect_fail nbdinfo --size "nbd+unix:///?socket=$sock"
expect_fail nbdinfo --size "$(psk_uri "$K/wrong.psk")"
kill "$BG_PID"
wait_gone "$BG_PID" 10 || die "nbdkit did not stop"

log "X.509: nbdinfo with the client's certificates"
plugin_tls --tls=require --tls-certificates="$K/server"
[[ $(nbdinfo --size "nbds+unix:///?socket=$sock&tls-certificates=$K/client") == $((48 << 20)) ]] ||
    die "nbdinfo over X.509"
expect_fail nbdinfo --size "nbd+unix:///?socket=$sock"
log "ok"
