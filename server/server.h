/* SPDX-License-Identifier: MIT */
/*
 * server.h - what every part of bionbd sees: the server, its limits.
 *
 * Threads: the main thread accepts (listener.c) and hands each socket to a
 * worker (worker.c); a worker owns a libev loop, an ioq, and every
 * connection it was given (conn.c), so nothing below the server struct is
 * shared or locked except the hand-off queue of new sockets and the
 * exports' read-modify-write lock (nbdl.h).
 *
 * Who calls whom (never both ways): main -> options, listener, worker,
 * stats; listener -> worker; worker -> conn, busypoll, bufcache, request,
 * inflight; conn -> handshake, request, busypoll, stats, inflight;
 * request -> reply, bufcache, inflight; reply -> stats; stats -> listener.
 */
#ifndef BIONBD_SERVER_H
#define BIONBD_SERVER_H

#include <stdatomic.h>
#include <stddef.h>

#include <bionbd/ioq.h>
#include <bionbd/nbdl.h>

#include "bufcache.h"
#include "tls.h"

#define container_of(ptr, type, member)                                        \
	((type *)((char *)(ptr) - offsetof(type, member)))

/* Limits that keep a client from growing the server's memory. */
#define SRV_MAX_OPTION_BYTES (64u << 10) /* larger: drop the client */
/*
 * Options per handshake: nbdkit's 32, plus 4 per export, so that a client
 * listing every export and asking about each one (nbdinfo --list: LIST,
 * then INFO or GO per export) is never cut off.  A client that sends more
 * and never reads holds one reply (conn.c), and the handshake time limit
 * ends one that reads.
 */
#define SRV_MAX_OPTIONS_BASE 32u
#define SRV_MAX_OPTIONS_PER_EXPORT 4u
#define SRV_MAX_INFLIGHT_REQS 256u /* per connection */
#define SRV_MAX_INFLIGHT_BYTES (128u << 20) /* per connection */
/*
 * Payload buffers in flight, all connections of all workers: at least
 * this much a worker by default (two connections at their whole
 * SRV_MAX_INFLIGHT_BYTES), and never less than two of the largest request
 * a worker, whatever --inflight-memory says, so one can always run beside
 * the small requests' part (a SRV_INFLIGHT_SMALL_DIV-th of the share,
 * worker_lane) and the stashes' (a SRV_INFLIGHT_STASH_DIV-th,
 * worker.stash_limit).
 */
#define SRV_INFLIGHT_WORKER_DEFAULT_MIN (2ull * SRV_MAX_INFLIGHT_BYTES)
#define SRV_INFLIGHT_WORKER_MIN (2 * (size_t)NBDL_MAX_PAYLOAD)
#define SRV_INFLIGHT_SMALL_DIV 16
#define SRV_INFLIGHT_STASH_DIV 32
/*
 * While requests wait for buffer room, a connection that holds buffers
 * and whose client made no progress for SRV_STALL_S (read no
 * SRV_STALL_MIN_BYTES of replies, or sent none of a payload, or as much
 * as it holds if that is less) is closed (inflight_stalled), looked for
 * every SRV_STALL_TICK_S: a few stalled or trickling clients must not
 * hold a worker's share while the others wait.
 */
#define SRV_STALL_S 5.0
#define SRV_STALL_TICK_S 1.0
#define SRV_STALL_MIN_BYTES (1u << 20)
#define SRV_RBUF_BYTES (256u << 10) /* per worker */
#define SRV_DIRECT_READ_MIN (64u << 10) /* recv payloads straight in */
/*
 * Bytes one connection may receive, and send, in one loop turn: a client
 * streaming large writes or reads then yields to the worker's other
 * connections (the read watcher is level-triggered, so the rest is read
 * next turn; the write watcher takes over the rest of the send).  With
 * the inline budget below, measured by bench/run's seq* and neighbour rows
 * (2 CPUs): 4 MiB (before) let a 1 MiB read stream hold a 4 KiB client
 * for 1.8 ms at p99; 256 KiB cut that to 0.3 ms but cost 1 MiB streams up
 * to a third of their throughput; 512 KiB keeps them and gives 0.5 ms.
 * So the bounds shrink to SRV_TURN_SMALL_BYTES only while a small request
 * (SRV_SMALL_REQ_BYTES or less) came from another connection within the
 * last SRV_SMALL_WINDOW_S: streams alone, or beside other streams, keep
 * the large ones (worker_turn_bytes).
 */
#define SRV_TURN_RECV_BYTES (512u << 10)
#define SRV_TURN_SEND_BYTES (512u << 10)
#define SRV_TURN_SMALL_BYTES (128u << 10)
#define SRV_SMALL_REQ_BYTES (16u << 10)
#define SRV_SMALL_WINDOW_S 0.01
#define SRV_SEND_IOVS 256u /* iovecs in one sendmsg */
/*
 * Bytes of member copies a worker does itself per loop turn, for all its
 * connections, before larger ones wait for the next turn (tmpfs) or go to
 * io_uring's async workers (ioq_set_inline_budget); same measurements,
 * and the same SRV_TURN_SMALL_BYTES while small requests come.
 */
#define SRV_TURN_INLINE_BYTES (512u << 10)
/*
 * Requests one connection may start in one loop turn, in units: most cost
 * one, so the bound is never met before SRV_MAX_INFLIGHT_REQS pauses the
 * connection; a block status costs what its hole lookups may (up to
 * BIO_EXTENTS_MAX extents, ~0.6 ms on tmpfs), so a client pipelining them
 * over a fragmented file gets four a turn and the others go between.  A
 * cache hint the same: each may set the disks reading up to 8 MiB a
 * member (off the worker, IOQ_MAX_HINTS at a time: file.c).
 */
#define SRV_TURN_COST 256u
#define SRV_COST_BLOCK_STATUS 64u
#define SRV_COST_CACHE 64u
/*
 * An unaligned write or write-zeroes read-modify-writes its edge sectors:
 * up to five bios where an aligned request has one (nbdl_split_submit:
 * the edges read, then written with the whole sectors between), none of
 * them waited for on the worker, however slow the member: the worker
 * serves its other clients meanwhile.  So it costs about what its bios
 * do.  Only clients that ignore the advertised minimum block size send
 * them.
 */
#define SRV_COST_UNALIGNED 4u
#define SRV_UNIX_SNDBUF (4 << 20) /* queued replies per unix socket */
#define SRV_READ_CHUNKS 8 /* content chunks in one structured read */
#define SRV_MAX_EXTENTS (1u << 20) /* descriptors in one block status */
#define SRV_SHUTDOWN_GRACE_S 10.0 /* then clients that stopped reading go */
/* Clients still negotiating when the server stops: time to hear it and abort. */
#define SRV_SHUTDOWN_OPTS_S 2.0
/* A --run command signalled with the server: time to exit, then SIGKILL. */
#define SRV_RUN_GRACE_MS 5000
#define SRV_IDLE_TRIM_S 1.5 /* a worker idle this long (twice) trims its cache */

struct worker;

struct server {
	struct nbdl_export *exports; /* [0] is the default export */
	unsigned int nr_exports;
	struct worker *workers;
	unsigned int nr_workers;
	enum ioq_backend backend;
	double poll_max_s; /* busy-poll window cap; 0 = never busy-poll */
	double handshake_s; /* drop clients still negotiating then; 0 = never */
	unsigned int max_conns;
	uint32_t async_min; /* requests this large: REQ_ASYNC; 0 = none */
	uint32_t sendfile_min; /* unix read replies this large; 0 = none */
	size_t inflight_limit_bytes; /* buffers in flight, all workers */
	enum srv_tls_mode tls_mode;
	struct srv_tls *tls; /* credentials; NULL when tls_mode is off */
	atomic_uint nr_conns; /* accepted and not yet closed, all workers */
	struct buf_pool bufs; /* the budget of every worker's buffer cache */
	atomic_bool stopping;
};

/*
 * A connection ended (or was never handed to a worker): make room under
 * max_conns.  Any thread.
 */
static inline void srv_conn_gone(struct server *srv)
{
	atomic_fetch_sub(&srv->nr_conns, 1);
}

#endif /* BIONBD_SERVER_H */
