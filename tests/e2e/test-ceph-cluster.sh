#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: the test cluster (ceph-cluster.sh) never outlives its
# owner.  Its daemons detach, so a test killed outright (a ctest timeout:
# SIGKILL, no exit trap) used to leave ceph-mon, ceph-mgr and ceph-osd
# running.  A shell that started a cluster is killed with SIGKILL, with
# everything in its process group: within a few seconds the daemons and
# the watchdog that stopped them are gone.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/ceph-cluster.sh"

# The cluster is part of the suite (tools/install-deps.sh): missing is a
# failure, not a skip.
for t in ceph-mon ceph-mgr ceph-osd ceph rbd monmaptool ceph-authtool; do
    command -v "$t" >/dev/null || die "$t not installed (tools/install-deps.sh)"
done
make_tmpdir
# BlueStore needs O_DIRECT: /var/tmp, since /tmp may be a tmpfs.
cdir=$(mktemp -d /var/tmp/test-ceph.XXXXXX)
on_exit "rm -rf '$cdir'"
on_exit "CEPH_DIR='$cdir' ceph_stop"

log "a cluster whose owner is killed outright"
t0=$SECONDS
# A process group of its own, as a test under ctest is: the owner is the
# shell that ran ceph_start (exec keeps its pid and start time).
setsid bash -c 'source "$0"; ceph_start "$1" 1024 || exit 1
    touch "$1/up"; exec sleep 600' \
    "$SRC_DIR/tests/e2e/ceph-cluster.sh" "$cdir" 2>"$tmp/start.log" &
owner=$!
for ((n = 0; n < 1800; n++)); do
    [[ -e $cdir/up ]] && break
    kill -0 "$owner" 2>/dev/null || die "ceph_start failed: $(cat "$tmp/start.log")"
    sleep 0.1
done
[[ -e $cdir/up ]] || die "the cluster did not start within 180 s"
log "cluster up in $((SECONDS - t0)) s"
pids=()
for name in mon.a mgr.x osd.0; do
    pid=$(cat "$cdir/run/$name.pid" 2>/dev/null) ||
        die "no pid file for $name: $(ls "$cdir/run")"
    kill -0 "$pid" || die "$name ($pid) is not running"
    pids+=("$pid")
done
# The watchdog must not linger either, once its work is done.
if [[ -s $cdir/watchdog.pid ]]; then
    pids+=("$(cat "$cdir/watchdog.pid")")
fi

kill -KILL -- "-$owner"
for pid in "${pids[@]}"; do
    wait_gone "$pid" 15 ||
        die "still running 15 s after its owner was killed: $(ps -o pid=,args= -p "$pid")"
done
log "PASS"
