#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: bionbd's handshake, on a config file with two exports (a
# 3-member striped "scratch", the default, and a read-only one-member
# "golden"): NBD_OPT_LIST, NBD_OPT_INFO (size, flags, block sizes, name,
# description), INFO/GO of an unknown export fail and the connection goes
# on, LIST_META_CONTEXT queries, SET_META_CONTEXT base:allocation and block
# status across member boundaries after writes and trims (against what was
# written and against the members' SEEK_DATA map through the stripe rule),
# REQ_ONE, simple replies only, plain (not fixed) newstyle clients served,
# NBD_OPT_EXPORT_NAME (raw socket, with and without NO_ZEROES), and the
# spec's query rules by hand ("base:" lists but never selects, unknown
# leaves are ignored, LIST's ids are 0), unknown NBD_INFO requests
# ignored, GO after INFO answering the same, ABORT with data.  The
# Python side is server-handshake.py; nbdinfo and qemu-img look at the
# export list and the read-only export.  Both backends.
source "$(dirname "$0")/functions.sh"

requires_nbdpy
requires nbdinfo
make_tmpdir
have_qemu_img=
command -v qemu-img >/dev/null && have_qemu_img=1

SIZE=12M CHUNK=64K G_SIZE=1M G_BYTE=0x5a
S_DESC="3-way striped scratch disk"
G_DESC="read-only base image"

for be in $BACKENDS; do
    log "backend $be"
    d=$tmp/$be
    mkdir -p "$d"
    # golden's member exists and holds G_BYTE everywhere.
    head -c "$(to_bytes $G_SIZE)" /dev/zero | tr '\0' '\132' >"$d/g0"
    cat >"$d/exports.conf" <<EOF
# two exports; members relative to this file
[export scratch]
    description = $S_DESC
    file = s0
    file = s1
    file = s2
    stripe-size = $CHUNK
    size = $SIZE
[export golden]
    description = $G_DESC
    file = g0
    read-only = true
EOF
    start_bionbd -t 2 --backend "$be" -c "$d/exports.conf"
    for m in s0 s1 s2; do
        [[ $(stat -c %s "$d/$m") -eq $(($(to_bytes $SIZE) / 3)) ]] ||
            die "member $m: size $(stat -c %s "$d/$m"), expected a third of $SIZE"
    done

    NBD_SOCK=$NBD_SOCK S_MEMBERS="$d/s0 $d/s1 $d/s2" S_DESC=$S_DESC \
        G_DESC=$G_DESC CHUNK=$(to_bytes $CHUNK) SIZE=$(to_bytes $SIZE) \
        G_SIZE=$(to_bytes $G_SIZE) G_BYTE=$G_BYTE \
        nbdpy "$SRC_DIR/tests/e2e/server-handshake.py" ||
        die "$be: server-handshake.py failed"

    # Other clients see the same thing.
    nbdinfo --list --json "$NBD_URI" >"$d/list.json" ||
        die "$be: nbdinfo --list failed"
    nbdpy - "$d/list.json" "$S_DESC" "$G_DESC" <<'EOF' ||
import json, sys
j = json.load(open(sys.argv[1]))
got = [(e["export-name"], e.get("description"), e["export-size"],
        e["is_read_only"]) for e in j["exports"]]
want = [("scratch", sys.argv[2], 12 << 20, False),
        ("golden", sys.argv[3], 1 << 20, True)]
if got != want:
    sys.exit(f"nbdinfo --list: {got}, expected {want}")
EOF
        die "$be: nbdinfo --list shows the wrong exports"
    if [[ -n $have_qemu_img ]]; then
        qemu-img info --output=json "$(nbd_uri golden)" >"$d/qemu.json" ||
            die "$be: qemu-img info golden failed"
        expect_grep '"virtual-size": 1048576' "$d/qemu.json"
        # qemu-img compare: golden reads back as the member file.
        qemu-img compare -f raw -F raw "$d/g0" "$(nbd_uri golden)" \
            >/dev/null || die "$be: golden does not read back as its member"
    else
        log "qemu-img not found: its checks are left out"
    fi

    stop_bionbd
done
log "PASS"
