#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: the /dev/nbd0 and VM-disk recipes, in a real Linux guest.
# A small qemu guest (KVM when /dev/kvm is usable, else TCG) boots
# Debian's kernel with a busybox initramfs built here from the host's
# files (tests/e2e/guest/init is its /init), four times, each against a
# fresh 512M volume of four members:
#   nbd/bionbd, nbd/plugin   the guest attaches the export over qemu's
#       user-mode network with "nbd-client -C 4" (four connections; with
#       bionbd -v the server must log at least four), checks the size of
#       /dev/nbd0, mkfs.ext4, writes files of random data, umounts, drops
#       its caches, mounts again and compares their sha256, e2fsck -fn is
#       clean, and nbd-client -d detaches;
#   vdisk/bionbd, vdisk/plugin   the same with the export as the guest's
#       virtio disk /dev/vda (qemu's NBD client on a unix socket, discards
#       passed through).
# The guest's verdict is a console line, GUEST-PASS or GUEST-FAIL: why; a
# guest that hangs is killed after $GUEST_TIMEOUT seconds and fails.
# Afterwards the host checks the server still serves (nbdinfo --size),
# copies the volume out, e2fsck -fn's it and reads every file the guest
# wrote back with debugfs (the same sha256), and stops the server with
# SIGTERM (bionbd must exit 0 and remove its pidfile and socket).
source "$(dirname "$0")/functions.sh"

GUEST_TIMEOUT=${BIONBD_GUEST_TIMEOUT:-120}
# nbd-client, mke2fs, e2fsck and modprobe live in sbin.
PATH=$PATH:/usr/sbin:/sbin
SIZE=512M
SIZE_BYTES=$(to_bytes $SIZE)
CONNS=4

requires qemu-system-x86_64
requires cpio
requires nbd-client
requires mke2fs
requires e2fsck
requires debugfs
requires nbdinfo
requires nbdcopy
requires nbdkit
requires modprobe
[[ -x $BIONBD ]] || die "$BIONBD not built"
[[ -f $BIO_PLUGIN ]] || die "$BIO_PLUGIN not built"

busybox=$(command -v busybox) || skip "busybox not found (busybox-static)"
if ldd "$busybox" >/dev/null 2>&1; then
    skip "$busybox is linked dynamically (install busybox-static)"
fi

# The newest installed kernel that has its modules here (Debian's
# linux-image-amd64: nbd, virtio and ext4 are modules).
kver=
for k in $(compgen -G '/boot/vmlinuz-*' | sort -V); do
    v=${k#/boot/vmlinuz-}
    [[ -r $k && -f /lib/modules/$v/modules.dep ]] || continue
    modprobe -S "$v" --show-depends nbd >/dev/null 2>&1 || continue
    kver=$v
done
[[ -n $kver ]] ||
    skip "no /boot/vmlinuz-VERSION with /lib/modules/VERSION and nbd (linux-image-amd64)"
kernel=/boot/vmlinuz-$kver

accel=(-accel tcg -cpu max)
if [[ -r /dev/kvm && -w /dev/kvm ]]; then
    # A vCPU as the guest's, set up and reset: some nested hosts open
    # /dev/kvm but fail there (qemu aborts on an MSR it cannot set).
    if echo quit | timeout 20 qemu-system-x86_64 -accel kvm -cpu host -S \
        -m 64 -smp 2 -display none -nodefaults -no-user-config \
        -monitor stdio >/dev/null 2>&1; then
        accel=(-accel kvm -cpu host)
    fi
fi

make_tmpdir
log "kernel $kernel, ${accel[1]}"

# ------------------------------------------------------------ initramfs

root=$tmp/initramfs
mkdir -p "$root"/{bin,sbin,dev,proc,sys,tmp,mnt,etc,modules,lib64}
cp "$busybox" "$root/bin/busybox"
ln -s busybox "$root/bin/sh"
install -m 755 "$SRC_DIR/tests/e2e/guest/init" "$root/init"
[[ ! -f /etc/mke2fs.conf ]] || cp /etc/mke2fs.conf "$root/etc/"

# copy_prog PROG: PROG into /sbin, with the shared libraries ldd names,
# at the same paths.
copy_prog() {
    local path lib
    path=$(command -v "$1") || die "$1 not found"
    cp -L "$path" "$root/sbin/$1"
    while read -r lib; do
        [[ -n $lib ]] || continue
        mkdir -p "$root${lib%/*}"
        [[ -e $root$lib ]] || cp -L "$lib" "$root$lib"
    done < <(ldd "$path" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }
                               $1 ~ /^\// { print $1 }')
}
copy_prog nbd-client
copy_prog mke2fs
copy_prog e2fsck
ln -s mke2fs "$root/sbin/mkfs.ext4"

# The modules and what they depend on, in load order (modules/list).
for m in nbd virtio_pci virtio_net virtio_blk ext4; do
    modprobe -S "$kver" --show-depends "$m" ||
        die "modprobe -S $kver --show-depends $m failed"
done >"$tmp/modules.dep"
: >"$root/modules/list"
declare -A have_ko=()
while read -r cmd ko _; do
    [[ $cmd == insmod && -z ${have_ko[$ko]:-} ]] || continue
    have_ko[$ko]=1
    base=${ko##*/}
    # Compressed modules (Debian 13: .ko.xz) go in plain, for busybox.
    case $ko in
    *.ko) cp "$ko" "$root/modules/" ;;
    *.ko.xz) xz -dc "$ko" >"$root/modules/${base%.xz}" ;;
    *.ko.zst) zstd -qdc "$ko" >"$root/modules/${base%.zst}" ;;
    *.ko.gz) gzip -dc "$ko" >"$root/modules/${base%.gz}" ;;
    *) die "$ko: unknown kind of module" ;;
    esac || die "could not copy $ko"
    echo "${base%.ko*}.ko" >>"$root/modules/list"
done <"$tmp/modules.dep"

initrd=$tmp/initrd.cpio
(cd "$root" && find . | cpio -o -H newc --quiet) >"$initrd" ||
    die "cpio failed"
log "initramfs: $(du -h "$initrd" | cut -f1), modules: $(tr '\n' ' ' <"$root/modules/list")"

# ------------------------------------------------------------ servers

free_port() {
    /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# serve KIND DIR LISTEN...: bionbd or the plugin (KIND) on a fresh
# volume of four members in DIR, listening where LISTEN says (bionbd's
# and nbdkit's -i/-p/-U are the same); returns once it serves.  Sets
# SERVER_PID, SERVER_LOG, SERVER_PIDFILE, NBD_SOCK ('' on TCP).
serve() {
    local kind=$1 dir=$2 n
    shift 2
    mkdir -p "$dir"
    SERVER_LOG=$dir/server.log
    SERVER_PIDFILE=$dir/server.pid
    NBD_SOCK=
    [[ $1 != -U ]] || NBD_SOCK=$2
    local m=("$dir/m0" "$dir/m1" "$dir/m2" "$dir/m3")
    case $kind in
    bionbd)
        start_bg "$BIONBD" -f -v -P "$SERVER_PIDFILE" "$@" --size $SIZE \
            "${m[@]}" </dev/null >"$SERVER_LOG" 2>&1
        ;;
    plugin)
        start_bg nbdkit -f --exit-with-parent -P "$SERVER_PIDFILE" "$@" \
            "$BIO_PLUGIN" "${m[@]/#/file=}" size=$SIZE \
            </dev/null >"$SERVER_LOG" 2>&1
        ;;
    esac
    SERVER_PID=$BG_PID
    show_log_on_failure "$SERVER_LOG"
    for ((n = 0; n < 400; n++)); do
        [[ -s $SERVER_PIDFILE ]] && return 0
        kill -0 "$SERVER_PID" 2>/dev/null ||
            die "$kind exited during start-up: $(cat "$SERVER_LOG")"
        sleep 0.05
    done
    die "$kind not ready after 20 s"
}

stop_plugin() {
    _term_and_wait 15
    [[ $_term_rc -eq 0 ]] || die "nbdkit exited $_term_rc after SIGTERM"
}

# ------------------------------------------------------------ guests

# guest NAME ARGS...: boot the guest with kernel parameters and qemu
# options ARGS (kernel parameters first, then "--", then qemu's); its
# console in $tmp/NAME.console.  Fails unless it says GUEST-PASS.
guest() {
    local name=$1 params=() rc=0 t0=$SECONDS
    shift
    while [[ $1 != -- ]]; do params+=("$1"); shift; done
    shift
    local console=$tmp/$name.console
    show_log_on_failure "$tmp/$name.qemu"
    timeout -k 5 "$GUEST_TIMEOUT" qemu-system-x86_64 \
        -nodefaults -no-user-config -display none "${accel[@]}" \
        -m 512 -smp 2 -no-reboot \
        -kernel "$kernel" -initrd "$initrd" \
        -append "console=ttyS0 panic=-1 quiet ${params[*]}" \
        -serial "file:$console" "$@" \
        </dev/null >"$tmp/$name.qemu" 2>&1 || rc=$?
    if [[ $rc -ne 0 ]] || grep -a -q 'GUEST-FAIL' "$console" ||
        ! grep -a -q '^GUEST-PASS' "$console"; then
        echo "--- $name: guest console" >&2
        tr -d '\r' <"$console" | sed 's/^/    /' >&2
        [[ $rc -ne 124 && $rc -ne 137 ]] ||
            die "$name: guest killed after $GUEST_TIMEOUT s (hung)"
        [[ $rc -eq 0 ]] || die "$name: qemu exit status $rc: $(cat "$tmp/$name.qemu")"
        die "$name: $(grep -a -m1 -o 'GUEST-FAIL.*' "$console" || echo 'no GUEST-PASS')"
    fi
    log "$name: GUEST-PASS in $((SECONDS - t0)) s"
}

# host_check NAME URI: the server still serves the volume; the file
# system the guest made is clean and holds what it wrote, read here.
host_check() {
    local name=$1 uri=$2 size img file sum got nfiles=0
    img=$tmp/$name.img
    size=$(timeout 30 nbdinfo --size "$uri") || die "$name: nbdinfo failed"
    [[ $size == "$SIZE_BYTES" ]] || die "$name: nbdinfo --size said $size"
    timeout 120 nbdcopy "$uri" "$img" || die "$name: nbdcopy failed"
    e2fsck -fn "$img" >"$tmp/$name.fsck" 2>&1 || {
        sed 's/^/    /' "$tmp/$name.fsck" >&2
        die "$name: e2fsck -fn on the host: not clean"
    }
    while read -r _ file sum; do
        debugfs -R "dump /$file $tmp/$name.file" "$img" >/dev/null 2>&1 ||
            die "$name: debugfs could not read /$file"
        got=$(sha256sum <"$tmp/$name.file" | cut -d' ' -f1)
        [[ $got == "$sum" ]] || die "$name: /$file reads $got on the host, guest wrote $sum"
        nfiles=$((nfiles + 1))
    done < <(tr -d '\r' <"$tmp/$name.console" | grep -a '^GUEST-SUM ')
    [[ $nfiles -ge 5 ]] || die "$name: the guest reported $nfiles files"
    rm -f "$img" "$tmp/$name.file"
}

t_start=$SECONDS
for kind in bionbd plugin; do
    name=nbd-$kind
    log "$name: nbd-client -C $CONNS over the guest's network"
    port=$(free_port)
    serve $kind "$tmp/$name" -i 127.0.0.1 -p "$port"
    guest "$name" guest_mode=nbd guest_port="$port" guest_conns=$CONNS \
        guest_bytes="$SIZE_BYTES" -- \
        -netdev user,id=n0 -device virtio-net-pci,netdev=n0,romfile=
    if [[ $kind == bionbd ]]; then
        n=$(grep -c 'new connection' "$SERVER_LOG" || :)
        [[ $n -ge $CONNS ]] || die "$name: bionbd saw $n connections, expected $CONNS"
    fi
    host_check "$name" "nbd://127.0.0.1:$port/"
    if [[ $kind == bionbd ]]; then stop_bionbd TERM; else stop_plugin; fi
done

for kind in bionbd plugin; do
    name=vdisk-$kind
    log "$name: the export as the guest's virtio disk"
    sock=$tmp/$name.sock
    serve $kind "$tmp/$name" -U "$sock"
    guest "$name" guest_mode=vdisk guest_bytes="$SIZE_BYTES" -- \
        -blockdev "driver=nbd,node-name=d0,server.type=unix,server.path=$sock,discard=unmap" \
        -device virtio-blk-pci,drive=d0
    host_check "$name" "nbd+unix:///?socket=$sock"
    if [[ $kind == bionbd ]]; then stop_bionbd TERM; else stop_plugin; fi
done
log "PASS in $((SECONDS - t_start)) s"
