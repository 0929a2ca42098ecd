#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: a conf file with two exports.  NBD_OPT_LIST shows both with
# their descriptions (libnbd and nbdinfo --list); the default export is the
# first; each name gets its own volume (size, description, data on its own
# members by the layout rule, nothing leaking into the other's members); an
# unknown export name is refused and the server keeps serving; export=NAME
# (the plugin's) serves only that export.  Connecting over and over (each
# NBD_OPT_INFO + NBD_OPT_GO opens and closes) and restarting the server,
# even with a smaller size, never resets or truncates anything.
source "$(dirname "$0")/functions.sh"

requires_server
requires_nbdpy
requires nbdinfo
make_tmpdir

conf=$tmp/two.conf
cat >"$conf" <<EOF
# two volumes; member paths relative to this file
[export alpha]
description = Alpha disk
file = a0
file = a1
stripe-size = 16K
size = 2M

[export beta]
description = Beta disk
file = b0
file = b1
file = b2
size = 3M
EOF
start_server --conf "$conf"

NBD_SOCK=$NBD_SOCK TMP=$tmp nbdpy - <<'EOF'
import os
import nbd
from nbd_e2e import *

sock = os.environ["NBD_SOCK"]
tmp = os.environ["TMP"]


def uri(name):
    return f"nbd+unix:///{name}?socket={sock}"


# the list, with descriptions
h = nbd.NBD()
h.set_opt_mode(True)
h.set_full_info(True)
h.connect_uri(uri(""))
names = []
h.opt_list(lambda name, desc: names.append((name, desc)))
check(sorted(names) == [("alpha", "Alpha disk"), ("beta", "Beta disk")],
      f"export list {names}")
# the default export is the first one
h.opt_go()
check(h.get_canonical_export_name() == "alpha",
      f"default export is {h.get_canonical_export_name()!r}")
check(h.get_size() == 2 << 20, "default export size")
h.shutdown()

vols = {"alpha": ([f"{tmp}/a0", f"{tmp}/a1"], 16384, 2 << 20, "Alpha disk"),
        "beta": ([f"{tmp}/b0", f"{tmp}/b1", f"{tmp}/b2"], 65536, 3 << 20,
                 "Beta disk")}
models = {}
for name, (members, chunk, size, desc) in vols.items():
    h = nbd.NBD()
    h.set_full_info(True)
    h.connect_uri(uri(name))
    check(h.get_size() == size, f"{name}: size {h.get_size()}")
    check(h.get_export_description() == desc, f"{name}: description")
    fill = name[0].encode()
    models[name] = bytes(fill) * size
    h.pwrite(models[name], 0)
    h.flush()
    h.shutdown()
for name, (members, chunk, size, desc) in vols.items():
    check_members(models[name], members, chunk, name)

# an unknown export is refused; the server goes on serving
try:
    h = nbd.NBD()
    h.connect_uri(uri("gamma"))
    fail("export gamma was accepted")
except nbd.Error as e:
    log(f"gamma refused: {e.string}")
h = connect(uri("beta"))
check(h.pread(512, 0) == b"b" * 512, "beta after a refused connection")
h.shutdown()

# many connections, each with NBD_OPT_INFO then NBD_OPT_GO
for i in range(20):
    h = nbd.NBD()
    h.set_opt_mode(True)
    h.connect_uri(uri("alpha" if i % 2 else "beta"))
    h.opt_info()
    h.opt_go()
    h.shutdown()
for name in vols:
    h = connect(uri(name))
    check(h.pread(vols[name][2], 0) == models[name], f"{name} after reconnects")
    h.shutdown()
EOF

expect_ok nbdinfo --list "$NBD_URI" >"$tmp/list"
expect_grep 'export="alpha"' "$tmp/list"
expect_grep 'description: Beta disk' "$tmp/list"
stop_server

sizes() { stat -c '%n %s' "$tmp"/a0 "$tmp"/a1 "$tmp"/b0 "$tmp"/b1 "$tmp"/b2; }
sizes >"$tmp/sizes.before"

if [[ $SERVER == plugin ]]; then
    log "export=beta: only beta"
    start_server --conf "$conf" --export beta
    NBD_SOCK=$NBD_SOCK nbdpy - <<'EOF'
import os
import nbd
from nbd_e2e import *

sock = os.environ["NBD_SOCK"]
h = nbd.NBD()
h.set_opt_mode(True)
h.set_full_info(True)
h.connect_uri(f"nbd+unix:///?socket={sock}")
names = []
h.opt_list(lambda name, desc: names.append(name))
check(names == ["beta"], f"list {names}")
h.opt_go()
check(h.get_canonical_export_name() == "beta", "default is not beta")
check(h.pread(512, 0) == b"b" * 512, "beta data")
h.shutdown()
try:
    h = nbd.NBD()
    h.connect_uri(f"nbd+unix:///alpha?socket={sock}")
    fail("alpha served with export=beta")
except nbd.Error:
    pass
EOF
    stop_server
fi

log "restart with smaller sizes: nothing truncated"
sed -e 's/^size = 2M/size = 1M/' -e 's/^size = 3M/size = 1536K/' "$conf" >"$tmp/small.conf"
start_server --conf "$tmp/small.conf"
NBD_SOCK=$NBD_SOCK nbdpy - <<'EOF'
import os
from nbd_e2e import *

sock = os.environ["NBD_SOCK"]
for name, size in (("alpha", 1 << 20), ("beta", 1536 << 10)):
    h = connect(f"nbd+unix:///{name}?socket={sock}")
    check(h.get_size() == size, f"{name}: size {h.get_size()}")
    check(h.pread(size, 0) == name[0].encode() * size, f"{name}: data")
    h.shutdown()
EOF
stop_server
sizes >"$tmp/sizes.after"
diff -u "$tmp/sizes.before" "$tmp/sizes.after" >&2 || die "member sizes changed"
log "ok"
