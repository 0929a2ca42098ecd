#!/usr/bin/env bash
# install-deps.sh - install every Debian 12 package bionbd needs to build,
# test and benchmark.  Idempotent; run as root.  Kept in one place so the
# README's two commands and CI install exactly the same set.
set -euo pipefail

pkgs=(
  # build
  build-essential cmake pkg-config
  liburing-dev libev-dev libinih-dev libgnutls28-dev librbd-dev
  nbdkit nbdkit-plugin-dev libnbd-dev
  # tests: real clients and fault injection
  libnbd-bin python3 python3-libnbd qemu-utils fio fuse3 procps util-linux
  gnutls-bin
  # the qemu guest that attaches /dev/nbd0 and boots with an NBD disk
  # (tests/e2e/test-guest-nbd.sh): TCG qemu, Debian's kernel with nbd.ko,
  # a busybox initramfs
  qemu-system-x86 linux-image-amd64 busybox-static nbd-client cpio kmod
  strace e2fsprogs
  # fuzzing (tools/fuzz.sh): clang, and its runtimes (libFuzzer, ASan) that
  # --no-install-recommends would leave out
  clang libclang-rt-dev
  # benchmarks: the peers and the plots
  nbd-server gnuplot-nox
  # RBD members (tests/e2e/ceph-cluster.sh): a private single-node Ceph
  # cluster, and qemu-nbd's rbd: driver for the benchmark
  ceph-mon ceph-mgr ceph-osd ceph-common qemu-block-extra
)

missing=()
for p in "${pkgs[@]}"; do
  [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == 'install ok installed' ]] ||
    missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps.sh: need root to install: ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
