#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: TLS (--tls, --tls-psk, --tls-certificates,
# --tls-verify-peer), keys made here with psktool and certtool.  PSK under
# --tls=require: nbdinfo, nbdcopy (64 MiB of random data in and out, and
# compared) and qemu-img (tls-creds-psk) work, over TLS 1.3 with AES-GCM
# where the CPU has AES instructions; a plaintext client is
# refused, as are a wrong key and an unknown identity, and the server goes
# on serving.  X.509 with --tls-verify-peer: nbdinfo and qemu-img
# (tls-creds-x509) with a client certificate our CA signed work; without
# a certificate, or with one another CA signed, refused.  The protocol
# rules by hand (server-tls.py) under require and on: options before
# STARTTLS get NBD_REP_ERR_TLS_REQD (require) or work (on), EXPORT_NAME in
# plaintext is closed (require), STARTTLS with data or twice is invalid,
# what was negotiated before STARTTLS is forgotten, 32 MiB requests and
# 500 pipelined reads over TLS, every close of the server's (after DISC,
# and its hang-ups: unknown EXPORT_NAME, ABORT, bad magic, WRITE over 32
# MiB) sends close_notify first, and clients that break the handshake
# (garbage, hang-up, silence until the handshake limit) do not disturb a
# busy one; a client still negotiating over TLS when the server is
# stopped gets close_notify before the close.  Then the whole hostile-input suite (server-malformed.py) over
# TLS under --tls=require.  --run under require says nbds+unix://.
# Configuration mistakes are one line and exit 1, naming the flag or the
# file's line: --tls-verify-peer without --tls-certificates (also with no
# credentials at all, which once served plain text), credentials under
# --tls off, tls = on without credentials in a file, a ca-cert.pem with
# no certificate in it, and credentials that cannot be read, named by the
# file's line when the file gave them.
source "$(dirname "$0")/functions.sh"

requires_nbdpy
requires nbdinfo
requires nbdcopy
requires qemu-img
make_tmpdir

K=$tmp/keys
make_tls_keys "$K"
SIZE=64M
m=("$tmp/m0" "$tmp/m1")

# URIs and qemu options for the current server over TLS.
psk_uri() { echo "nbds+unix://alice@/?socket=$NBD_SOCK&tls-psk-file=$1"; }
x509_uri() { echo "nbds+unix:///?socket=$NBD_SOCK&tls-certificates=$1"; }
qemu_opts() { echo "driver=nbd,server.type=unix,server.path=$NBD_SOCK,tls-creds=t0,tls-hostname=localhost"; }

log "PSK, --tls=require: nbdinfo, nbdcopy, qemu-img"
start_bionbd -v --tls=require --tls-psk "$K/psk/keys.psk" --size $SIZE "${m[@]}"
expect_grep "TLS require, PSK" "$SERVER_LOG"
[[ $(nbdinfo --size "$(psk_uri "$K/psk/keys.psk")") == $((64 << 20)) ]] ||
    die "nbdinfo over TLS-PSK"
nbdinfo "$(psk_uri "$K/psk/keys.psk")" >"$tmp/info" || die "nbdinfo (full)"
expect_grep "with TLS" "$tmp/info"
head -c $((64 << 20)) /dev/urandom >"$tmp/src"
nbdcopy "$tmp/src" "$(psk_uri "$K/psk/keys.psk")" || die "nbdcopy in over TLS"
nbdcopy "$(psk_uri "$K/psk/keys.psk")" "$tmp/back" || die "nbdcopy out over TLS"
cmp "$tmp/src" "$tmp/back" || die "nbdcopy over TLS: data differs"
qemu-img convert -O raw --object tls-creds-psk,id=t0,dir="$K/psk",username=alice,endpoint=client \
    --image-opts "$(qemu_opts)" "$tmp/qback" || die "qemu-img over TLS-PSK"
cmp "$tmp/src" "$tmp/qback" || die "qemu-img over TLS-PSK: data differs"
expect_grep "TLS on \(fd [0-9]+\): \(TLS1.3\).*PSK identity 'alice'" "$SERVER_LOG"
# With AES in hardware the server's order wins over libnbd's ChaCha20.
if grep -qw aes /proc/cpuinfo && grep -qw pclmulqdq /proc/cpuinfo; then
    expect_grep "TLS on .*AES-128-GCM" "$SERVER_LOG"
    expect_no_grep "TLS on .*CHACHA20" "$SERVER_LOG"
fi

log "PSK: plaintext, a wrong key and an unknown identity are refused"
expect_fail nbdinfo --size "$NBD_URI"
expect_fail nbdinfo --size "$(psk_uri "$K/wrong.psk")"
expect_fail nbdinfo --size "nbds+unix://mallory@/?socket=$NBD_SOCK&tls-psk-file=$K/mallory.psk"
expect_grep "TLS handshake failed" "$SERVER_LOG"
[[ $(nbdinfo --size "$(psk_uri "$K/psk/keys.psk")") == $((64 << 20)) ]] ||
    die "nbdinfo after the refused clients"

stop_bionbd

log "X.509, --tls-verify-peer: nbdinfo and qemu-img with our client certificate"
start_bionbd --tls=require --tls-certificates "$K/server" --tls-verify-peer \
    --handshake-timeout 2 "${m[@]}"
expect_grep "TLS require, X.509" "$SERVER_LOG"
[[ $(nbdinfo --size "$(x509_uri "$K/client")") == $((64 << 20)) ]] ||
    die "nbdinfo over TLS-X.509"
qemu-img convert -O raw --object tls-creds-x509,id=t0,dir="$K/client",endpoint=client \
    --image-opts "$(qemu_opts)" "$tmp/qback" || die "qemu-img over TLS-X.509"
cmp "$tmp/src" "$tmp/qback" || die "qemu-img over TLS-X.509: data differs"

log "X.509: a certificate another CA signed, or none, is refused"
expect_fail nbdinfo --size "$(x509_uri "$K/rogue")"
mkdir -p "$tmp/nocert" && cp "$K/client/ca-cert.pem" "$tmp/nocert/"
expect_fail nbdinfo --size "$(x509_uri "$tmp/nocert")"
stop_bionbd

# Without --tls-verify-peer a client needs no certificate, so Python's ssl
# (which cannot do PSK) runs the hand-written suites.
for mode in require on; do
    log "X.509, --tls=$mode: server-tls.py"
    start_bionbd --tls=$mode --tls-certificates "$K/server" \
        --handshake-timeout 2 "${m[@]}"
    NBD_SOCK=$NBD_SOCK SERVER_PID=$SERVER_PID TLS_MODE=$mode \
        TLS_CA=$K/server/ca-cert.pem SIZE=$((64 << 20)) \
        nbdpy "$SRC_DIR/tests/e2e/server-tls.py" ||
        die "server-tls.py under --tls=$mode failed"
    stop_bionbd
done

log "X.509: a client still negotiating over TLS at shutdown gets close_notify"
start_bionbd --tls=require --tls-certificates "$K/server" "${m[@]}"
NBD_SOCK=$NBD_SOCK SERVER_PID=$SERVER_PID TLS_MODE=require \
    TLS_CA=$K/server/ca-cert.pem SIZE=$((64 << 20)) SHUTDOWN=1 \
    nbdpy "$SRC_DIR/tests/e2e/server-tls.py" ||
    die "server-tls.py: negotiating at shutdown failed"
stop_bionbd

log "the hostile-input suite over TLS (--tls=require)"
start_bionbd --tls=require --tls-certificates "$K/server" -t 2 \
    --size 48M "$tmp/h0" "$tmp/h1" "$tmp/h2"
NBD_SOCK=$NBD_SOCK SERVER_PID=$SERVER_PID SIZE=$((48 << 20)) \
    NBD_TLS_CA=$K/server/ca-cert.pem NBD_URI="$(x509_uri "$K/client")" \
    nbdpy "$SRC_DIR/tests/e2e/server-malformed.py" ||
    die "server-malformed.py over TLS failed"
stop_bionbd

log "--run under --tls=require: \$uri is nbds+unix://"
out=$(timeout 60 "$BIONBD" --tls-certificates "$K/server" \
    --run 'nbdinfo --size "$uri&tls-certificates='"$K/client"'"; echo "$uri"' \
    "${m[@]}" 2>"$tmp/run.log") || die "--run over TLS: $(cat "$tmp/run.log")"
check_sanitizer_log "$tmp/run.log"
[[ $(head -1 <<<"$out") == $((64 << 20)) && $(tail -1 <<<"$out") == nbds+unix://* ]] ||
    die "--run over TLS said: $out"

log "configuration mistakes: one line, exit 1"
bad_tls() {
    local rc=0
    timeout 20 "$BIONBD" -f -U "$tmp/bad.sock" "$@" "${m[@]}" \
        </dev/null >"$tmp/bad.err" 2>&1 || rc=$?
    [[ $rc -eq 1 && $(grep -c . "$tmp/bad.err") -eq 1 ]] || {
        sed 's/^/    /' "$tmp/bad.err" >&2
        die "expected one line and exit 1 (got $rc): $*"
    }
    check_sanitizer_log "$tmp/bad.err"
    [[ ! -e $tmp/bad.sock ]] || die "refused, but created its socket: $*"
}
bad_tls --tls=require
expect_grep "needs --tls-certificates DIR or --tls-psk FILE" "$tmp/bad.err"
# Checked before any member is created.
rc=0
"$BIONBD" -f -U "$tmp/bad.sock" --tls-psk "$tmp/no-such.psk" --size 16M \
    "$tmp/new0" "$tmp/new1" >"$tmp/bad.err" 2>&1 || rc=$?
[[ $rc -eq 1 && ! -e $tmp/new0 && ! -e $tmp/new1 ]] ||
    die "a TLS mistake with --size: exit $rc, members created: $(ls "$tmp")"
bad_tls --tls=sometimes --tls-psk "$K/psk/keys.psk"
expect_grep "expected off, on or require" "$tmp/bad.err"
bad_tls --tls-psk "$tmp/no-such.psk"
expect_grep "no-such.psk" "$tmp/bad.err"
printf 'alice:12345\n' >"$tmp/odd.psk"
bad_tls --tls-psk "$tmp/odd.psk"
expect_grep "^bionbd: --tls-psk $tmp/odd\.psk: line 1: expected identity:hexkey" "$tmp/bad.err"
bad_tls --tls-certificates "$tmp/no-such-dir"
expect_grep "no-such-dir" "$tmp/bad.err"
bad_tls --tls-certificates "$K/client"
expect_grep "server-cert.pem" "$tmp/bad.err"
mkdir -p "$tmp/noca" && cp "$K/server/server-"*.pem "$tmp/noca/"
bad_tls --tls-certificates "$tmp/noca" --tls-verify-peer
expect_grep "ca-cert.pem missing" "$tmp/bad.err"
bad_tls --tls-psk "$K/psk/keys.psk" --tls-verify-peer
expect_grep "needs --tls-certificates" "$tmp/bad.err"
# A ca-cert.pem with no certificate in it would refuse every client.
mkdir -p "$tmp/junkca" && cp "$K/server/server-"*.pem "$tmp/junkca/"
echo junk >"$tmp/junkca/ca-cert.pem"
bad_tls --tls-certificates "$tmp/junkca" --tls-verify-peer
expect_grep "^bionbd: --tls-certificates $tmp/junkca: ca-cert\.pem: no certificate in it$" "$tmp/bad.err"
# Settings that would leave a server in plain text while it looks
# protected: --tls-verify-peer with no credentials at all, and TLS
# credentials under --tls off.
bad_tls --tls-verify-peer
expect_grep "^bionbd: --tls-verify-peer: needs --tls-certificates DIR" "$tmp/bad.err"
bad_tls --tls off --tls-verify-peer
expect_grep "^bionbd: --tls-verify-peer: needs --tls-certificates DIR" "$tmp/bad.err"
bad_tls --tls off --tls-psk "$K/psk/keys.psk"
expect_grep "^bionbd: --tls off: contradicts --tls-psk $K/psk/keys\.psk: " "$tmp/bad.err"
bad_tls --tls=off --tls-certificates "$K/server"
expect_grep "^bionbd: --tls off: contradicts --tls-certificates $K/server: " "$tmp/bad.err"
# bad_conf PATTERN TEXT [ARGS...]: a config file of TEXT (then the
# members), refused like bad_tls, naming its line.
bad_conf() {
    local pat=$1 text=$2 rc=0
    shift 2
    printf '%b[export x]\nfile = %s\n' "$text" "$tmp/m0" >"$tmp/bad.conf"
    timeout 20 "$BIONBD" -f -U "$tmp/bad.sock" -c "$tmp/bad.conf" "$@" \
        </dev/null >"$tmp/bad.err" 2>&1 || rc=$?
    [[ $rc -eq 1 && $(grep -c . "$tmp/bad.err") -eq 1 ]] || {
        sed 's/^/    /' "$tmp/bad.err" >&2
        die "expected one line and exit 1 (got $rc): $text"
    }
    check_sanitizer_log "$tmp/bad.err"
    expect_grep "$pat" "$tmp/bad.err"
}
bad_conf "^bionbd: $tmp/bad.conf:2: \[server\] tls=maybe: expected off, on or require" \
    '[server]\ntls = maybe\n'
bad_conf "^bionbd: $tmp/bad.conf:2: \[server\] tls=on: needs tls-certificates = DIR or tls-psk = FILE" \
    '[server]\ntls = on\n'
bad_conf "^bionbd: $tmp/bad.conf:3: \[server\] tls-verify-peer=true: needs tls-certificates = DIR" \
    '[server]\n# no credentials\ntls-verify-peer = true\n'
bad_conf "^bionbd: $tmp/bad.conf:2: \[server\] tls=off: contradicts tls-psk=$K/psk/keys\.psk \($tmp/bad.conf:3\): " \
    "[server]\ntls = off\ntls-psk = $K/psk/keys.psk\n"
bad_conf "^bionbd: --tls off: contradicts tls-psk=$K/psk/keys\.psk \($tmp/bad.conf:2\): " \
    "[server]\ntls-psk = $K/psk/keys.psk\n" --tls off
# Credentials that cannot be read: named by their line, as written.
bad_conf "^bionbd: $tmp/bad.conf:3: \[server\] tls-certificates=no-such-dir: No such file or directory$" \
    '[server]\n# relative to the file\ntls-certificates = no-such-dir\n'
bad_conf "^bionbd: $tmp/bad.conf:2: \[server\] tls-psk=odd\.psk: line 1: expected identity:hexkey" \
    '[server]\ntls-psk = odd.psk\n'
bad_conf "^bionbd: $tmp/bad.conf:3: \[server\] tls-verify-peer=true: $tmp/noca/ca-cert\.pem missing" \
    '[server]\ntls-certificates = noca\ntls-verify-peer = true\n'

log "[server] keys: relative tls-psk path, tls defaults to require"
mkdir -p "$tmp/conf"
cp "$K/psk/keys.psk" "$tmp/conf/keys.psk"
printf '[server]\ntls-psk = keys.psk\n[export ""]\nfile = %s\n' "$tmp/m0" >"$tmp/conf/tls.conf"
start_bionbd -c "$tmp/conf/tls.conf"
expect_grep "TLS require, PSK" "$SERVER_LOG"
expect_fail nbdinfo --size "$NBD_URI"
[[ $(nbdinfo --size "$(psk_uri "$K/psk/keys.psk")") -gt 0 ]] ||
    die "config-file TLS: nbdinfo"
stop_bionbd
log "ok"
