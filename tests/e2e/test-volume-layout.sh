#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: the raw RAID-0 layout, checked on the member files: for
# several geometries (1 to 5 members, 4K to 1M stripes, volumes that end
# inside a stripe row) random writes through NBD must land where the rule
# says (chunk k on member k % N at (k / N) * stripe), computed here
# independently and read from the member files with plain reads; and data
# written straight into the member files must read back through NBD at the
# volume offsets the rule gives.  Members are created sparse, each large
# enough for its share.
source "$(dirname "$0")/functions.sh"

requires_server
requires_nbdpy
make_tmpdir

# members stripe size
geometries=(
    "1 4K 1M"
    "3 4K 3M"
    "4 64K 8M"
    "2 1M 6M"
    "5 8K 2600K"
)

for g in "${geometries[@]}"; do
    read -r nm chunk size <<<"$g"
    log "$nm members, stripe $chunk, size $size"
    d=$tmp/$nm-$chunk
    mkdir -p "$d"
    members=()
    for ((i = 0; i < nm; i++)); do members+=("$d/m$i"); done
    start_server --stripe-size "$chunk" --size "$size" "${members[@]}"
    MEMBERS="${members[*]}" CHUNK=$(to_bytes "$chunk") SIZE=$(to_bytes "$size") \
        SEED=${SEED:-$RANDOM} NBD_URI=$NBD_URI nbdpy - <<'EOF'
import os
import random

from nbd_e2e import *

members = members_from_env()
chunk = env_int("CHUNK")
size = env_int("SIZE")
n = len(members)
seed = int(os.environ["SEED"])
rng = random.Random(seed)
log(f"seed {seed}")

# Each member is created large enough for the volume bytes it holds.
share = [0] * n
for start in range(0, size, chunk):
    m, moff = layout(start, chunk, n)
    share[m] = max(share[m], moff + min(chunk, size - start))
for m in range(n):
    st = os.stat(members[m])
    check(st.st_size >= share[m],
          f"{members[m]}: {st.st_size} bytes, holds {share[m]}")
    check(st.st_blocks * 512 < st.st_size or st.st_size == 0,
          f"{members[m]}: not created sparse")

h = connect()
check(h.get_size() == size, f"size {h.get_size()} != {size}")

# NBD -> members: random sector-aligned writes of up to three chunks.
model = bytearray(size)
for _ in range(150):
    length = rng.randrange(1, min(3 * chunk, size) // 512 + 1) * 512
    off = rng.randrange(0, (size - length) // 512 + 1) * 512
    data = rng.randbytes(length)
    h.pwrite(data, off)
    model[off:off + length] = data
# the first and last sector, and every chunk edge of the first rows
for off in [0, size - 512] + [k * chunk - 512 for k in range(1, 2 * n + 1)
                              if k * chunk < size]:
    data = rng.randbytes(1024 if off + 1024 <= size else 512)
    h.pwrite(data, off)
    model[off:off + len(data)] = data
h.flush()
check_members(model, members, chunk, "after NBD writes")

# members -> NBD: write the member files directly, read through NBD.
for _ in range(40):
    m = rng.randrange(n)
    length = rng.randrange(1, 2 * chunk)
    moff = rng.randrange(0, max(1, share[m] - length))
    with open(members[m], "r+b") as f:
        f.seek(moff)
        f.write(rng.randbytes(min(length, share[m] - moff)))
view = member_view(members, chunk, size)
check_volume(h, view, "after writing the members directly")
h.shutdown()
log("ok")
EOF
    stop_server
done
log "ok"
