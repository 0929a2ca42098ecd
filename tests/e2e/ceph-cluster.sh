# SPDX-License-Identifier: MIT
# ceph-cluster.sh - a private single-node Ceph cluster for tests and
# benchmarks (source, don't run): one monitor, one manager and one OSD
# whose BlueStore lives in a file, every daemon on 127.0.0.1, everything
# (config, keys, data, logs, sockets) under one directory, which must be
# on a file system with O_DIRECT (not tmpfs: BlueStore needs it).  It
# touches nothing of the machine's own Ceph (/etc/ceph, /var/lib/ceph).
# Sourced by the tests and by bench/run (bash only, no other helpers).
#
#   ceph_start DIR [OSD_MIB]    # start it (an OSD of OSD_MIB MiB, sparse;
#                               # default 4096); sets CEPH_CONF (export)
#                               # and CEPH_DIR; DIR must be new or empty
#   ceph_cmd osd pool ls        # the ceph CLI against it
#   rbd_cmd create --size 64M rbd/img   # the rbd CLI against it
#   ceph_stop                   # stop every daemon (also at exit via
#                               # the caller's on_exit, if it has one)
#
# Memory and threads are cut to what a 2-core machine with a few GiB
# spares; the pool "rbd" (size 1) exists when ceph_start returns.
#
# The daemons detach, so a caller killed outright (a ctest timeout sends
# SIGKILL: no exit trap runs) would leave them running.  ceph_start
# therefore starts a watchdog, in a session of its own and no child of
# the caller, that runs ceph_stop once the owner is gone: the caller's
# shell, or the process CEPH_OWNER_PID names (bench/run, whose cluster
# outlives the shell that started it).  ceph_stop ends the watchdog too.

ceph_cmd() { timeout 60 ceph --conf "$CEPH_CONF" "$@"; }
rbd_cmd() { timeout 120 rbd --conf "$CEPH_CONF" "$@"; }

# A free TCP port on 127.0.0.1 (the kernel's choice).
_ceph_free_port() {
    /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# A process's start time (clock ticks since boot), empty once it is gone:
# with its pid, it names the process even after the pid is reused.
_ceph_started() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    stat=${stat##*) }
    read -ra stat <<<"$stat"
    echo "${stat[19]}"
}

# _ceph_watch OWNER DIR: wait until OWNER ends (or DIR goes), then stop
# the cluster in DIR.  Runs detached (ceph_start).
_ceph_watch() {
    local owner=$1 dir=$2 since
    since=$(_ceph_started "$owner")
    echo "$$" >"$dir/watchdog.pid"
    while [[ -n $since && $(_ceph_started "$owner") == "$since" &&
             -d $dir/run ]]; do
        sleep 0.5
    done
    CEPH_DIR=$dir ceph_stop
    # A daemon started just as the owner died writes its pid file late.
    sleep 2
    CEPH_DIR=$dir ceph_stop
}

ceph_start() {
    local dir=$1 osd_mib=${2:-4096} fsid uuid p2 p1 i
    CEPH_DIR=$dir
    export CEPH_CONF=$dir/ceph.conf
    mkdir -p "$dir"/{run,log,mon/a,osd/0,mgr/x}
    # Before any daemon: the watchdog's own fork is not ours to wait for
    # (the subshell exits at once), nor in our process group or session.
    rm -f "$dir/watchdog.pid"
    ( setsid bash -c 'source "$0"; _ceph_watch "$1" "$2"' \
        "${BASH_SOURCE[0]}" "${CEPH_OWNER_PID:-$$}" "$dir" \
        </dev/null >/dev/null 2>&1 & )
    for ((i = 0; i < 100; i++)); do
        [[ -s $dir/watchdog.pid ]] && break
        sleep 0.05
    done
    [[ -s $dir/watchdog.pid ]] ||
        { echo "ceph_start: the watchdog did not start" >&2; return 1; }
    fsid=$(cat /proc/sys/kernel/random/uuid)
    uuid=$(cat /proc/sys/kernel/random/uuid)
    p2=$(_ceph_free_port)
    p1=$(_ceph_free_port)
    cat >"$CEPH_CONF" <<EOF
[global]
fsid = $fsid
mon_host = [v2:127.0.0.1:$p2,v1:127.0.0.1:$p1]
public_addr = 127.0.0.1
ms_bind_ipv6 = false
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
keyring = $dir/keyring
run_dir = $dir/run
admin_socket = $dir/run/\$name.asok
pid_file = $dir/run/\$name.pid
log_file = $dir/log/\$name.log
log_to_stderr = false
err_to_stderr = false
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_autoscale_mode = off
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
osd_crush_chooseleaf_type = 0
[mon]
mon_data = $dir/mon/\$id
mon_allow_pool_delete = true
[mgr]
mgr_data = $dir/mgr/\$id
[osd]
osd_data = $dir/osd/\$id
osd_objectstore = bluestore
bluestore_block_path = $dir/osd/\$id.block
bluestore_block_create = true
bluestore_block_size = $((osd_mib << 20))
bluestore_fsck_on_mount = false
bluestore_cache_autotune = false
bluestore_cache_size = 256M
osd_memory_target = 1G
osd_op_num_shards = 2
osd_op_num_threads_per_shard = 2
EOF
    # One keyring for every name: the mon's own, the admin the CLI and
    # the tests use, the OSD's and the manager's.
    ceph-authtool --create-keyring "$dir/keyring" --gen-key -n mon. \
        --cap mon 'allow *' >/dev/null
    ceph-authtool "$dir/keyring" --gen-key -n client.admin --cap mon 'allow *' \
        --cap osd 'allow *' --cap mgr 'allow *' --cap mds 'allow *' >/dev/null
    ceph-authtool "$dir/keyring" --gen-key -n osd.0 --cap mon 'allow profile osd' \
        --cap mgr 'allow profile osd' --cap osd 'allow *' >/dev/null
    ceph-authtool "$dir/keyring" --gen-key -n mgr.x --cap mon 'allow profile mgr' \
        --cap osd 'allow *' --cap mds 'allow *' >/dev/null
    monmaptool --create --fsid "$fsid" \
        --addv a "[v2:127.0.0.1:$p2,v1:127.0.0.1:$p1]" "$dir/monmap" >/dev/null
    ceph-mon --conf "$CEPH_CONF" --mkfs -i a --monmap "$dir/monmap" \
        --keyring "$dir/keyring"
    ceph-mon --conf "$CEPH_CONF" -i a
    ceph_cmd osd new "$uuid" 0 >/dev/null
    ceph-osd --conf "$CEPH_CONF" -i 0 --mkfs --osd-uuid "$uuid" 2>"$dir/log/osd-mkfs.err" ||
        { cat "$dir/log/osd-mkfs.err" >&2; return 1; }
    ceph-osd --conf "$CEPH_CONF" -i 0
    ceph-mgr --conf "$CEPH_CONF" -i x
    ceph_cmd osd pool create rbd 16 16 >/dev/null 2>&1
    ceph_cmd osd pool application enable rbd rbd >/dev/null 2>&1
    # The pool is usable once its placement groups are active: all of the
    # cluster's, 16 or more ("17 pgs: 17 active+clean; ...").  The mgr
    # makes a pool of its own (one more PG, device_health_metrics or
    # .mgr) when it likes: looking for "16 active+clean" matched only
    # while that one was not clean yet, and on a loaded machine, where
    # they all became clean between two looks, never.
    for ((i = 0; i < 600; i++)); do
        if ceph_cmd pg stat 2>/dev/null | awk '$2 == "pgs:" && $1 >= 16 &&
            $3 == $1 && $4 ~ /^active\+clean;?$/ { ok = 1 } END { exit !ok }'; then
            rbd_cmd pool init rbd
            return 0
        fi
        sleep 0.1
    done
    echo "ceph_start: the pool's placement groups did not become active:" >&2
    ceph_cmd -s >&2 || true
    return 1
}

ceph_stop() {
    local f pid pids=()
    [[ -n ${CEPH_DIR:-} ]] || return 0
    # The watchdog first (unless this is it): it would stop them too.
    if [[ -s $CEPH_DIR/watchdog.pid ]]; then
        pid=$(cat "$CEPH_DIR/watchdog.pid")
        [[ $pid == "$$" ]] || kill "$pid" 2>/dev/null || true
        rm -f "$CEPH_DIR/watchdog.pid"
    fi
    for f in "$CEPH_DIR"/run/*.pid; do
        [[ -e $f ]] || continue
        pid=$(cat "$f")
        kill "$pid" 2>/dev/null && pids+=("$pid")
    done
    for pid in "${pids[@]}"; do
        for ((f = 0; f < 100; f++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null || true
    done
    CEPH_DIR=
}
