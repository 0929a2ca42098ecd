#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: "cmake --install" into a DESTDIR.  With --prefix /usr:
# usr/sbin/bionbd, the plugin in nbdkit's own plugindir (nbdkit
# --dump-config) under the DESTDIR, etc/bionbd/bionbd.conf (members in
# /var/lib/bionbd, no listen/port/socket key, so socket activation works),
# var/lib/bionbd, and bionbd.service, bionbd.socket and bionbd@.service in
# usr/lib/systemd/system naming /usr/sbin/bionbd; nothing else, nothing
# outside the DESTDIR; installing again keeps an edited bionbd.conf.  With
# --prefix /usr/local everything follows the prefix, units included; with
# the configured prefix, bionbd's default configuration (bionbd --help) is
# where it is installed.  Man pages are checked only once
# docs/CMakeLists.txt installs them (and then systemd-analyze checks the
# units' man: links too).
# Then (root: a private mount and network namespace, the DESTDIR's
# directories bind-mounted over the real ones): "nbdkit bio" finds the
# installed plugin by name and serves through it; systemd-analyze verify
# passes the units without a word, and does complain about a unit with a
# typo or a missing ExecStart binary (so the check has teeth); the
# service's ExecStart, started as bionbd.socket would (its ListenStream
# passed by systemd-socket-activate), serves the default configuration's
# export, creating its members in /var/lib/bionbd, and keeps serving after
# the ExecReload signal (SIGHUP); without activation it listens on
# 127.0.0.1:10809 itself; conf/example.conf, copied as shipped, is served
# by bionbd -c and by nbdkit bio conf=; and bionbd given no members and no
# -c serves the configuration at its default path (a tmpfs over that
# directory's parent in the namespace).
source "$(dirname "$0")/functions.sh"

# ------------------------------------------------------------ helpers

# "... (or the exports of FILE.conf; with neither, of PATH) ...": PATH.
conf_of_help() {
    "$BIONBD" --help 2>&1 | tr '\n' ' ' | tr -s ' ' |
        grep -o 'with neither, of /[^ )]*' | head -1 | sed 's/^with neither, of //'
}

# wait_nbd URI PID LOG WHAT: until nbdinfo gets URI's size (20 s); PID
# exiting first fails the test, showing LOG.
wait_nbd() {
    local n
    for ((n = 0; n < 200; n++)); do
        nbdinfo --size "$1" >/dev/null 2>&1 && return 0
        if ! kill -0 "$2" 2>/dev/null; then
            sed 's/^/    /' "$3" >&2
            die "$4: exited during start-up"
        fi
        sleep 0.1
    done
    die "$4: not serving $1 after 20 s"
}

# stop_ok PID LOG WHAT: SIGTERM; it must exit 0 within 20 s.
stop_ok() {
    local rc=0
    kill -TERM "$1" 2>/dev/null || :
    wait_gone "$1" 20 || die "$3: still running 20 s after SIGTERM"
    wait "$1" 2>/dev/null || rc=$?
    check_sanitizer_log "$2"
    if [[ $rc -ne 0 ]]; then
        sed 's/^/    /' "$2" >&2
        die "$3: exit status $rc after SIGTERM"
    fi
}

# expect_size URI BYTES
expect_size() {
    local got
    got=$(nbdinfo --size "$1" 2>&1) || die "nbdinfo --size $1: $got"
    [[ $got == "$2" ]] || die "nbdinfo --size $1: $got, expected $2"
}

# verify_units LOG UNIT...: systemd-analyze verify; true only when it
# exits 0 and says nothing (an unknown key is a warning with exit 0).
verify_units() {
    local log=$1 rc=0
    shift
    systemd-analyze verify --man="$VERIFY_MAN" "$@" >"$log" 2>&1 || rc=$?
    [[ $rc -eq 0 && ! -s $log ]]
}

# ------------------------------------------------------------ namespace
#
# Run as "bash test-install.sh --in-namespace" by the test itself, under
# unshare -m -n: the mounts and the loopback interface are private, and
# vanish with the last process.  The DESTDIR's directories cover the real
# ones, so the installed files are where the installed paths say.  Its
# scratch directory is $INSTALL_TMP/ns, removed by the outer test.

in_namespace() {
    local d=$INSTALL_DESTDIR pd=$INSTALL_PLUGINDIR ns=$INSTALL_TMP/ns
    local units out pid listen i
    local -a cmd
    units=$d/usr/lib/systemd/system
    mkdir -p "$ns"
    cd "$ns" || die "cd $ns"
    ip link set lo up || die "ip link set lo up failed in the namespace"
    mount --bind "$d$pd" "$pd" || die "mount --bind over $pd failed"
    mount --bind "$d/var/lib" /var/lib || die "mount --bind over /var/lib failed"
    # Last: it hides the rest of /usr/sbin (ip included).
    mount --bind "$d/usr/sbin" /usr/sbin || die "mount --bind over /usr/sbin failed"

    log "nbdkit bio: the installed plugin, found by name"
    out=$(nbdkit bio --dump-plugin 2>&1) || die "nbdkit bio --dump-plugin: $out"
    if ! grep -qx "path=$pd/nbdkit-bio-plugin.so" <<<"$out" ||
        ! grep -qx 'name=bio' <<<"$out"; then
        die "nbdkit bio --dump-plugin: $out"
    fi
    start_bg nbdkit -f --exit-with-parent -U "$ns/k.sock" bio \
        file="$ns/m0" file="$ns/m1" size=64M >"$ns/k.log" 2>&1
    pid=$BG_PID
    show_log_on_failure "$ns/k.log"
    wait_nbd "nbd+unix:///?socket=$ns/k.sock" "$pid" "$ns/k.log" "nbdkit bio"
    expect_size "nbd+unix:///?socket=$ns/k.sock" $((64 << 20))
    stop_ok "$pid" "$ns/k.log" "nbdkit bio"

    log "systemd-analyze verify: the installed units"
    verify_units "$ns/verify.log" "$units/bionbd.service" \
        "$units/bionbd.socket" "$units/bionbd@.service" || {
        sed 's/^/    /' "$ns/verify.log" >&2
        die "systemd-analyze verify: the installed units (above)"
    }
    log "systemd-analyze verify: a typo and a missing binary are caught"
    mkdir "$ns/typo" "$ns/nobin"
    sed 's/^Type=/Tpye=/' "$units/bionbd.service" >"$ns/typo/bionbd.service"
    ! verify_units "$ns/typo.log" "$ns/typo/bionbd.service" ||
        die "systemd-analyze verify: passed a unit with a typo (Tpye=)"
    sed 's|^ExecStart=/usr/sbin/bionbd|&-missing|' "$units/bionbd.service" \
        >"$ns/nobin/bionbd.service"
    ! verify_units "$ns/nobin.log" "$ns/nobin/bionbd.service" ||
        die "systemd-analyze verify: passed a unit whose ExecStart is missing"

    # The service's command line; only /etc/bionbd is the DESTDIR's path.
    read -r -a cmd <<<"$(sed -n 's/^ExecStart=//p' "$units/bionbd.service")"
    [[ ${cmd[0]} == /usr/sbin/bionbd ]] || die "ExecStart=${cmd[*]}"
    for i in "${!cmd[@]}"; do
        [[ ${cmd[i]} != /etc/bionbd/* ]] || cmd[i]=$d${cmd[i]}
    done
    listen=$(sed -n 's/^ListenStream=//p' "$units/bionbd.socket")
    [[ $listen == 127.0.0.1:10809 ]] ||
        die "bionbd.socket: ListenStream=$listen (expected 127.0.0.1:10809)"

    log "bionbd.socket + bionbd.service: the default configuration, activated"
    start_bg systemd-socket-activate -l "$listen" "${cmd[@]}" \
        </dev/null >"$ns/a.log" 2>&1
    pid=$BG_PID
    show_log_on_failure "$ns/a.log"
    wait_nbd "nbd://$listen/disk" "$pid" "$ns/a.log" "activated ${cmd[*]}"
    expect_size "nbd://$listen/disk" $((16 << 30))
    expect_size "nbd://$listen/" $((16 << 30))
    expect_grep 'serving on 1 socket passed by the service manager;' "$ns/a.log"
    for i in 0 1 2 3; do
        [[ -f /var/lib/bionbd/disk-$i.img ]] ||
            die "member /var/lib/bionbd/disk-$i.img not created"
    done
    log "ExecReload (SIGHUP): still serving"
    kill -HUP "$pid"
    for ((i = 0; i < 100; i++)); do
        grep -q 'SIGHUP' "$ns/a.log" && break
        sleep 0.05
    done
    expect_grep 'SIGHUP' "$ns/a.log"
    expect_size "nbd://$listen/disk" $((16 << 30))
    stop_ok "$pid" "$ns/a.log" "activated bionbd"

    log "bionbd.service alone: listens on 127.0.0.1:10809 itself"
    start_bg "${cmd[@]}" </dev/null >"$ns/s.log" 2>&1
    pid=$BG_PID
    show_log_on_failure "$ns/s.log"
    wait_nbd "nbd://127.0.0.1:10809/disk" "$pid" "$ns/s.log" "${cmd[*]}"
    expect_size "nbd://127.0.0.1:10809/" $((16 << 30))
    stop_ok "$pid" "$ns/s.log" "${cmd[*]}"

    log "conf/example.conf as shipped: bionbd -c, nbdkit bio conf="
    mkdir "$ns/ex"
    cp "$SRC_DIR/conf/example.conf" "$SRC_DIR/conf/golden.img" "$ns/ex/"
    start_bg /usr/sbin/bionbd -f -c ex/example.conf </dev/null \
        >"$ns/e.log" 2>&1
    pid=$BG_PID
    show_log_on_failure "$ns/e.log"
    wait_nbd "nbd://127.0.0.1:10809/scratch" "$pid" "$ns/e.log" \
        "bionbd -c example.conf"
    expect_size "nbd://127.0.0.1:10809/scratch" $((4 << 30))
    expect_size "nbd://127.0.0.1:10809/golden" $((64 << 10))
    nbdinfo "nbd://127.0.0.1:10809/golden" >"$ns/golden.info" 2>&1 ||
        die "nbdinfo golden: $(cat "$ns/golden.info")"
    expect_grep 'is_read_only: true' "$ns/golden.info"
    for i in 0 1 2 3; do
        [[ -f $ns/ex/scratch-$i.img ]] ||
            die "example.conf: member scratch-$i.img not created next to it"
    done
    stop_ok "$pid" "$ns/e.log" "bionbd -c example.conf"
    start_bg nbdkit -f --exit-with-parent -i 127.0.0.1 -p 10809 bio \
        conf=ex/example.conf >"$ns/n.log" 2>&1
    pid=$BG_PID
    show_log_on_failure "$ns/n.log"
    wait_nbd "nbd://127.0.0.1:10809/" "$pid" "$ns/n.log" \
        "nbdkit bio conf=example.conf"
    expect_size "nbd://127.0.0.1:10809/" $((4 << 30))
    expect_size "nbd://127.0.0.1:10809/golden" $((64 << 10))
    stop_ok "$pid" "$ns/n.log" "nbdkit bio conf=example.conf"

    # Under a tmpfs on its parent directory (the real one stays as it is).
    local conf etc
    conf=$(conf_of_help)
    etc=${conf%/bionbd/bionbd.conf}
    if [[ $etc == /etc || ! -d $etc ]]; then
        log "bionbd with no members: $etc not replaceable here, not checked"
        return 0
    fi
    log "bionbd with no members and no -c: serves $conf"
    mount -t tmpfs -o size=1m tmpfs "$etc"
    mkdir "$etc/bionbd"
    printf '[export dflt]\nfile = %s\nfile = %s\nsize = 8M\n' \
        "$ns/d0" "$ns/d1" >"$conf"
    out=$(timeout 60 "$BIONBD" --run 'nbdinfo --size "nbd+unix:///dflt?socket=$unixsocket"' \
        2>"$ns/dflt.log") || die "bionbd without members: $(cat "$ns/dflt.log")"
    [[ $out == $((8 << 20)) ]] || die "bionbd without members served $out"
    umount "$etc"
}

if [[ ${1:-} == --in-namespace ]]; then
    VERIFY_MAN=$INSTALL_VERIFY_MAN
    [[ -z ${INSTALL_MANPATH:-} ]] || export MANPATH=$INSTALL_MANPATH
    in_namespace
    exit 0
fi

# ------------------------------------------------------------ install

requires nbdkit
requires nbdinfo
[[ -x $BIONBD ]] || die "$BIONBD not built"
[[ -f $BIO_PLUGIN ]] || die "$BIO_PLUGIN not built"
make_tmpdir

cmake_cmd=$(sed -n 's/^CMAKE_COMMAND:INTERNAL=//p' "$BUILD_DIR/CMakeCache.txt")
[[ -n $cmake_cmd && -x $cmake_cmd ]] || cmake_cmd=cmake

# install_to DESTDIR PREFIX
install_to() {
    DESTDIR=$1 "$cmake_cmd" --install "$BUILD_DIR" --prefix "$2" \
        >"$1.log" 2>&1 || {
        sed 's/^/    /' "$1.log" >&2
        die "DESTDIR=$1 cmake --install --prefix $2 failed"
    }
}

# expect_file PATH [-x]: PATH (under $tmp) is a regular file (executable).
expect_file() {
    [[ -f $1 ]] || die "not installed: ${1#"$tmp"/}"
    [[ ${2:-} != -x || -x $1 ]] || die "not executable: ${1#"$tmp"/}"
}

# expect_entries DIR NAME...: DIR holds exactly these names.
expect_entries() {
    local got want
    got=$(cd "$1" && find . -mindepth 1 -maxdepth 1 -printf '%f\n' | sort |
        tr '\n' ' ')
    want=$(printf '%s\n' "${@:2}" | sort | tr '\n' ' ')
    [[ $got == "$want" ]] ||
        die "${1#"$tmp"/}: holds '$got', expected '$want'"
}

plugindir=$(nbdkit --dump-config | sed -n 's/^plugindir=//p')
[[ $plugindir == /* ]] || die "nbdkit --dump-config names no plugindir"

log "DESTDIR=\$tmp/usr cmake --install --prefix /usr"
D=$tmp/usr
install_to "$D" /usr
expect_entries "$D" etc usr var
expect_file "$D/usr/sbin/bionbd" -x
out=$("$D/usr/sbin/bionbd" --version 2>&1) || die "installed bionbd --version: $out"
[[ -f $D$plugindir/nbdkit-bio-plugin.so ]] ||
    die "the plugin is not in nbdkit's plugindir $plugindir under the DESTDIR; installed: $(cd "$D" && find . -name 'nbdkit-bio-plugin.so')"
conf=$D/etc/bionbd/bionbd.conf
expect_file "$conf"
expect_grep '^[[:space:]]*file = /var/lib/bionbd/disk-0\.img$' "$conf"
expect_grep '^[[:space:]]*size = ' "$conf"
expect_no_grep '^[[:space:]]*(listen|port|socket)[[:space:]]*=' "$conf"
[[ -d $D/var/lib/bionbd ]] || die "not installed: var/lib/bionbd"
units=$D/usr/lib/systemd/system
expect_entries "$units" bionbd.service bionbd.socket bionbd@.service
expect_grep '^ExecStart=/usr/sbin/bionbd -f -c /etc/bionbd/bionbd\.conf$' \
    "$units/bionbd.service"
expect_grep '^ExecStart=/usr/sbin/bionbd -f -c /etc/bionbd/%i\.conf$' \
    "$units/bionbd@.service"
for f in "$conf" "$units"/*; do
    expect_no_grep '@[A-Za-z_]+@' "$f"
done
VERIFY_MAN=no
MANPATH_D=
if [[ -f $SRC_DIR/docs/CMakeLists.txt ]]; then
    compgen -G "$D/usr/share/man/man*/bionbd.*" >/dev/null ||
        die "docs/CMakeLists.txt exists, but no bionbd man page is installed"
    # Then the units' Documentation=man:bionbd(8) must be found too.
    VERIFY_MAN=yes
    MANPATH_D=$D/usr/share/man
else
    log "no docs/CMakeLists.txt: man pages not checked"
fi

log "installing again keeps an edited bionbd.conf"
echo '# edited' >>"$conf"
install_to "$D" /usr
expect_grep '^# edited$' "$conf"

log "DESTDIR=\$tmp/local cmake --install --prefix /usr/local: paths follow"
L=$tmp/local
install_to "$L" /usr/local
expect_entries "$L" usr
expect_entries "$L/usr" local
expect_file "$L/usr/local/sbin/bionbd" -x
expect_file "$L/usr/local/${plugindir#/usr/}/nbdkit-bio-plugin.so"
expect_grep '^[[:space:]]*file = /usr/local/var/lib/bionbd/disk-0\.img$' \
    "$L/usr/local/etc/bionbd/bionbd.conf"
[[ -d $L/usr/local/var/lib/bionbd ]] || die "not installed: usr/local/var/lib/bionbd"
expect_grep '^ExecStart=/usr/local/sbin/bionbd -f -c /usr/local/etc/bionbd/bionbd\.conf$' \
    "$L/usr/local/lib/systemd/system/bionbd.service"

log "cmake --install with the configured prefix: bionbd's default config is installed"
default_conf=$(conf_of_help) || :
[[ -n $default_conf ]] || die "bionbd --help names no default configuration"
if [[ -n $default_conf ]]; then
    C=$tmp/configured
    DESTDIR=$C "$cmake_cmd" --install "$BUILD_DIR" >"$C.log" 2>&1 || {
        sed 's/^/    /' "$C.log" >&2
        die "DESTDIR=$C cmake --install failed"
    }
    expect_file "$C$default_conf"
else
    log "bionbd --help names no default configuration: not checked"
fi

# ------------------------------------------------------------ namespace

[[ $(id -u) -eq 0 ]] ||
    skip "installed files are right; running them in a mount namespace (nbdkit finding the plugin, systemd-analyze verify, the default configuration) needs root"
requires systemd-analyze
requires systemd-socket-activate
requires ip
unshare -m -n --propagation private true 2>/dev/null ||
    skip "installed files are right; unshare -m -n (mount and network namespace) not permitted"

rc=0
INSTALL_DESTDIR=$D INSTALL_PLUGINDIR=$plugindir INSTALL_TMP=$tmp \
    INSTALL_VERIFY_MAN=$VERIFY_MAN INSTALL_MANPATH=$MANPATH_D \
    unshare -m -n --propagation private "$BASH" "$0" --in-namespace || rc=$?
# The namespace's own FAIL line said why.
[[ $rc -eq 0 ]] || exit "$rc"
log "PASS"
