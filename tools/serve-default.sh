#!/usr/bin/env bash
# serve-default.sh - the README's main job: install, build, and serve the
# default volume (4 sparse members under ./data, 64 KiB stripes, 4 GiB) on
# a unix socket and on 127.0.0.1:10809 (nbdkit: the unix socket only)
# until Ctrl-C.
#
#   FRONTEND=nbdkit tools/serve-default.sh   serve through the nbdkit plugin
#   SIZE=16G tools/serve-default.sh          a bigger volume
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)

tools/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc 2>/dev/null || echo 2)"

data=$top/data
size=${SIZE:-4G}
sock=$data/bionbd.sock
mkdir -p "$data"
members=("$data/member0" "$data/member1" "$data/member2" "$data/member3")

# nbdkit takes one listener: the unix socket, so no TCP lines for it.
tcp_info= tcp_client=
if [[ ${FRONTEND:-bionbd} == bionbd ]]; then
  tcp_info=$'\n  nbdinfo nbd://127.0.0.1:10809'
  tcp_client="nbd-client 127.0.0.1 10809 /dev/nbd0 -N ''"
else
  tcp_client="nbd-client -u $sock /dev/nbd0 -N ''"
fi
cat <<EOT

Serving a ${size} volume striped over ${#members[@]} sparse members in $data (64 KiB stripes).
Connect with:
  nbdinfo 'nbd+unix:///?socket=$sock'$tcp_info
  qemu-img info nbd+unix:///?socket=$sock
  qemu-io -f raw -c 'write -P 0x55 0 1M' -c 'read -P 0x55 0 1M' 'nbd+unix:///?socket=$sock'
  $tcp_client     (needs the nbd kernel module)
Stop with Ctrl-C.

EOT

case "${FRONTEND:-bionbd}" in
bionbd)
  exec build/server/bionbd -f -U "$sock" -i 127.0.0.1 -p 10809 \
    --stripe-size 64K --size "$size" "${members[@]}"
  ;;
nbdkit)
  files=()
  for m in "${members[@]}"; do files+=("file=$m"); done
  rm -f "$sock"
  exec nbdkit -f -U "$sock" build/plugins/nbdkit-bio-plugin.so \
    "${files[@]}" stripe-size=64K size="$size"
  ;;
*)
  echo "serve-default.sh: FRONTEND must be bionbd or nbdkit" >&2
  exit 1
  ;;
esac
