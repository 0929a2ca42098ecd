/* SPDX-License-Identifier: MIT */
/*
 * worker.h - a worker thread: one libev loop, one ioq, the connections it
 * was handed, and the per-thread caches their requests draw from.
 */
#ifndef BIONBD_WORKER_H
#define BIONBD_WORKER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <ev.h>

#include <bionbd/ioq.h>
#include <bionbd/ioq_ev.h>

#include "bufcache.h"
#include "busypoll.h"
#include "inflight.h"
#include "server.h"

struct conn;
struct nbd_req;

struct worker {
	struct server *srv;
	pthread_t tid;
	struct ev_loop *loop;
	struct ioq *q;
	struct ioq_ev qev;
	ev_async wake; /* new sockets, or stop */

	pthread_mutex_t lock; /* guards new_fds */
	int *new_fds;
	unsigned int nr_new, cap_new;

	struct conn *conns; /* every connection of this worker */
	unsigned int nr_conns;
	struct conn *dirty; /* connections with replies to send or to close */
	struct conn *yielded; /* to go on parsing next turn (conn.yielded) */
	unsigned int yield_turn; /* ev_iteration of the last resume */
	ev_idle yield_idle; /* while any: the loop does not block */
	bool stopping;
	ev_timer grace; /* shutdown: drop clients that stop reading */
	ev_timer trim; /* gives cached buffers back once idle */
	uint64_t trim_gets; /* bufs.gets at the last trim check */
	struct busypoll poll;
	/* The last small request: when, and whose (compared, never used). */
	ev_tstamp small_at;
	const struct conn *small_conn;
	bool small_turns; /* the inline budget is the small one */

	/*
	 * This worker's share of --inflight-memory, in two parts, each with
	 * the connections queued for room in it (conn.held): requests of
	 * SRV_SMALL_REQ_BYTES or less draw from their own SRV_INFLIGHT_SMALL_DIV
	 * -th, so a 4 KiB request never queues behind 32 MiB ones
	 * (worker_lane).  While any wait, the stall timer closes connections
	 * whose clients hold buffers and make no progress
	 * (conn_evict_stalled).
	 */
	struct inflight_budget lanes[2]; /* large, small */
	ev_idle room_idle; /* room came back: the next turn lets waiters in */
	ev_timer stall;
	uint64_t evictions; /* relaxed stores: the statistics read it */
	/*
	 * The share's part for bytes read past a request and kept unparsed
	 * while its connection is paused or yielded (conn.pend), so that
	 * paused connections cannot hold a read's worth each outside the
	 * bound (tx_read_size); what they hold (relaxed stores, as above).
	 */
	size_t stash_limit, stash_bytes;

	uint8_t *rbuf; /* shared receive buffer for request headers */
	struct buf_cache bufs;
	struct nbd_req *free_reqs;
};

/* The part of @w's share a buffer of @bytes (buf_bytes_for) is counted in. */
static inline struct inflight_budget *worker_lane(struct worker *w,
						 size_t bytes)
{
	return &w->lanes[bytes <= SRV_SMALL_REQ_BYTES];
}

/* Is a request waiting for buffer room in either part? */
static inline bool worker_buf_waiting(const struct worker *w)
{
	return w->lanes[0].head || w->lanes[1].head;
}

/**
 * worker_small_seen - @c sent a request of SRV_SMALL_REQ_BYTES or less:
 * its neighbours' large transfers take small bites for a while.
 */
static inline void worker_small_seen(struct worker *w, const struct conn *c)
{
	w->small_at = ev_now(w->loop);
	w->small_conn = c;
}

/**
 * worker_turn_bytes - what @c may receive, or send, this loop turn: @large,
 * or SRV_TURN_SMALL_BYTES while another connection sends small requests.
 */
static inline size_t worker_turn_bytes(const struct worker *w,
				       const struct conn *c, size_t large)
{
	if (w->small_conn && w->small_conn != c &&
	    ev_now(w->loop) - w->small_at < SRV_SMALL_WINDOW_S)
		return SRV_TURN_SMALL_BYTES;
	return large;
}

/** worker_init - set up @w (loop, ioq, watchers); returns 0 or -errno. */
int worker_init(struct worker *w, struct server *srv);

/** worker_start - run @w's loop on a new thread; returns 0 or -errno. */
int worker_start(struct worker *w);

/** worker_hand_off - give @w a new socket (any thread). */
void worker_hand_off(struct worker *w, int fd);

/** worker_stop - ask @w to finish (any thread); join with worker_join. */
void worker_stop(struct worker *w);

void worker_join(struct worker *w);

/** worker_fini - free what worker_init made; the thread has ended. */
void worker_fini(struct worker *w);

#endif /* BIONBD_WORKER_H */
