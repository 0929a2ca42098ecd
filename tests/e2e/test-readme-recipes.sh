#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: the README's recipes run as written.  Every code block
# whose first line is "# recipe: NAME" is cut out of README.md and run
# with bash -e in a scratch directory of its own, bionbd (the build's) on
# PATH, within 120 s: ci-job (--run, nbdfuse, mkfs.ext4, e2fsck), mirror
# (bioctl create --level raid1, a member deleted, served degraded, bioctl
# info says so, bioctl rebuild, bioctl check), faults (a write fault
# switched on and off by a file, seen by nbdcopy),
# socket-activation (nbdcopy and nbdinfo start bionbd themselves), tls-psk
# and tls-x509 (keys made as the recipe says, nbdinfo over TLS), remote (a
# file and an nbdkit memory export striped, data copied and compared),
# remote-mirror (bioctl create over two nbdkit exports, one killed while
# served, the data still read back).  A recipe missing from the README
# fails, as does one that fails or hangs; no bionbd may be left running.
source "$(dirname "$0")/functions.sh"

requires nbdinfo
requires nbdcopy
requires nbdfuse
requires nbdkit
requires psktool
requires certtool
requires mkfs.ext4
requires_fuse
[[ -x $BIONBD ]] || die "$BIONBD not built"
make_tmpdir
mkdir -p "$tmp/bin"
ln -s "$BIONBD" "$tmp/bin/bionbd"
ln -s "$BIOCTL" "$tmp/bin/bioctl"

# recipe NAME: the block's text on stdout (without its fence lines).
recipe() {
    awk -v name="$1" '
        /^```/ { if (inb) { inb = 0; if (take) exit } else inb = 1; next }
        inb && $0 == "# recipe: " name { take = 1 }
        inb && take { print }
    ' "$SRC_DIR/README.md"
}

for name in ci-job mirror faults socket-activation tls-psk tls-x509 remote \
    remote-mirror; do
    log "recipe $name"
    text=$(recipe "$name")
    [[ -n $text ]] || die "README.md has no '# recipe: $name' block"
    d=$tmp/$name
    mkdir -p "$d"
    (cd "$d" && PATH=$tmp/bin:$PATH timeout 120 bash -e -c "$text") \
        >"$d.out" 2>&1 || {
        sed 's/^/    /' "$d.out" >&2
        die "recipe $name failed"
    }
    check_sanitizer_log "$d.out"
    # Captive and activated servers end with their client.
    if pgrep -f "$tmp/bin/bionbd|bionbd .*data/m0" >/dev/null; then
        pgrep -fa "bionbd .*data/m0" >&2
        die "recipe $name left a bionbd running"
    fi
done
expect_grep "export-size: $((512 << 20)) " "$tmp/socket-activation.out"
expect_grep "with TLS" "$tmp/tls-psk.out"
expect_grep "with TLS" "$tmp/tls-x509.out"
pgrep -f "nbdkit -U r1.sock" >/dev/null && die "recipe remote left its nbdkit running"
expect_grep "^mnt/nbd: [0-9]+/65536 files" "$tmp/ci-job.out"
expect_grep "degraded \(1 of 2 members active\)" "$tmp/mirror.out"
expect_grep "volume 'home': superblocks consistent, .* the live copies agree" "$tmp/mirror.out"
log "ok"
