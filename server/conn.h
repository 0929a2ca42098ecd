/* SPDX-License-Identifier: MIT */
/*
 * conn.h - one client connection, as conn.c (its state machine and socket
 * I/O), handshake.c, request.c and reply.c see it.
 */
#ifndef BIONBD_CONN_H
#define BIONBD_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ev.h>

#include <bionbd/nbdl.h>

#include "worker.h"

enum conn_state {
	CS_CLIENT_FLAGS, /* 4 bytes of client flags */
	CS_OPT_HDR, /* 16-byte option header */
	CS_OPT_DATA, /* option payload */
	CS_TLS_HANDSHAKE, /* after NBD_OPT_STARTTLS's ACK */
	CS_TRANSMISSION,
};

struct conn {
	struct worker *w;
	struct conn *next, *prev; /* worker's list */
	struct conn *dirty_next;
	bool dirty;
	int fd;
	bool unix_sock; /* AF_UNIX: read replies may use sendfile */
	ev_io rio, wio;
	ev_timer hs_timer; /* handshake time limit */
	enum conn_state state;

	/* handshake (handshake.c) */
	uint8_t small[NBD_OPT_HDR_BYTES];
	uint8_t *optdata;
	uint32_t need, have; /* bytes wanted / read for the current step */
	uint32_t opt, optlen;
	unsigned int nr_opts;
	bool no_zeroes;
	bool fixed; /* NBD_FLAG_C_FIXED_NEWSTYLE: option replies understood */
	const struct nbdl_export *meta_exp; /* export SET_META_CONTEXT named */
	uint8_t *obuf; /* handshake output */
	size_t olen, ooff, ocap;
	bool close_after_send;
	bool starttls; /* ACK queued: the TLS handshake follows it */

	/*
	 * TLS (tls.h): from the STARTTLS ACK on, every byte goes through the
	 * session.  Replies are copied into tls_stage so that small ones
	 * share a record; a full record's worth goes from its buffer.
	 */
	tls_session tls;
	bool tls_up; /* handshake done */
	uint8_t *tls_stage; /* TLS_RECORD_BYTES */
	size_t tls_stage_len;

	/* transmission */
	struct nbdl_export *exp;
	struct nbdl_conn_opts opts;
	uint8_t hdr[NBD_REQUEST_BYTES];
	unsigned int hdr_have;
	struct nbd_req *rx; /* receiving a write payload */
	bool big_writes; /* last request was a big write: read headers alone */
	/*
	 * Unparsed bytes while paused or yielded, counted in the worker's
	 * stash part of the bound (conn_stash_set).
	 */
	uint8_t *pend;
	size_t pend_len;
	unsigned int inflight;
	size_t inflight_bytes; /* relaxed stores: the statistics read it */
	bool paused; /* not reading: a limit reached, or held below */
	/*
	 * Parsed, not started: its buffer waits for room in the worker's
	 * share of --inflight-memory (inflight.h), queued as @bwait.
	 */
	struct nbd_req *held;
	struct inflight_waiter bwait;
	/*
	 * Transmission bytes received and sent; when its client last made
	 * progress (inflight_progress_bytes of them moved, a reply queued,
	 * or buffers taken after it held none), and the count then.
	 */
	uint64_t moved_bytes, progress_mark;
	ev_tstamp progress_at;
	/*
	 * Not reading: this turn's requests cost SRV_TURN_COST; the rest
	 * (pend) is parsed at the next turn (conn_resume_yielded).
	 */
	bool yielded;
	struct conn *yield_next; /* worker's yielded list */
	unsigned int turn_cost;
	bool draining; /* DISC, EOF or shutdown: finish, then close */
	bool dead; /* socket failed: never write again */
	struct nbd_req *oq_head, **oq_tail; /* replies to send, in order */

	/*
	 * Statistics (stats.c): the connection's answered requests, written
	 * by its worker with relaxed stores, read by the main thread through
	 * the registry while the connection is open.
	 */
	struct conn *reg_next, **reg_pprev;
	uint64_t id; /* 1, 2, ... in accept order */
	char peer[64]; /* "unix", or the client's address:port */
	double since; /* wall clock at accept */
	uint64_t st_requests[REQ_OP_LAST], st_bytes[REQ_OP_LAST], st_errors;
	uint64_t st_yields; /* turns it spent SRV_TURN_COST in */
	uint64_t st_buf_waits; /* requests that waited for buffer room */
};

/*
 * Queue @c for the end of the loop iteration, when the worker sends its
 * replies, or frees it if it is done (conn_send_dirty).
 */
static inline void conn_mark_dirty(struct conn *c)
{
	if (c->dirty)
		return;
	c->dirty = true;
	c->dirty_next = c->w->dirty;
	c->w->dirty = c;
}

/*
 * @c's client has something new to do, or did it: its stall clock starts
 * again (conn_evict_stalled).
 */
static inline void conn_progress(struct conn *c)
{
	c->progress_at = ev_now(c->w->loop);
	c->progress_mark = c->moved_bytes;
}

/* The statistics read c->inflight_bytes on another thread. */
static inline void conn_add_inflight_bytes(struct conn *c, size_t delta)
{
	if (!c->inflight_bytes)
		conn_progress(c); /* it starts holding: a fresh clock */
	__atomic_store_n(&c->inflight_bytes, c->inflight_bytes + delta,
			 __ATOMIC_RELAXED);
}

/* conn.c, for the worker */
void conn_accept(struct worker *w, int fd);
void conn_send_dirty(struct worker *w);
void conn_resume_yielded(struct worker *w);
void conn_resume_waiting(struct worker *w);
void conn_evict_stalled(struct worker *w);
void conn_stop_all(struct worker *w);
void conn_close_all(struct worker *w);

#endif /* BIONBD_CONN_H */
