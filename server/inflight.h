/* SPDX-License-Identifier: MIT */
/*
 * inflight.h - one worker's share of the process-wide bound on payload
 * buffers in flight (--inflight-memory), and the queue of connections
 * waiting for room in it.
 *
 * Why per worker: each worker's connections, requests and buffers are its
 * own (server.h), so a share of the bound checked and given back on the
 * worker's thread needs no lock, no atomic read-modify-write, and no
 * wake-up across threads; the shares add up to the bound.
 *
 * A request's buffer is admitted before it is taken (request.c): if it
 * does not fit, or others already wait, its connection stops reading and
 * queues here, first come first served, with the request parsed and kept;
 * room given back lets the head in, then the next, while they fit.  One
 * request always fits a share that holds nothing, so the largest request
 * (32 MiB) can always run.  Pure accounting: the caller (conn.c) resumes
 * the connections it gets from inflight_next().
 */
#ifndef BIONBD_INFLIGHT_H
#define BIONBD_INFLIGHT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Embedded in the waiting connection (container_of). */
struct inflight_waiter {
	struct inflight_waiter *next, *prev;
	size_t need_bytes;
	bool queued;
};

struct inflight_budget {
	size_t limit_bytes; /* this worker's share */
	/*
	 * Buffer bytes requests hold now.  Written by the worker only, with
	 * relaxed stores, so the statistics can read it from another thread.
	 */
	size_t used_bytes;
	struct inflight_waiter *head, *tail;
	unsigned int nr_waiting;
	uint64_t waits; /* requests that had to queue (relaxed, as above) */
};

/**
 * inflight_admit - may a buffer of @bytes be taken now?  Yes (and counted
 * in ->used_bytes) when nobody waits and it fits, or the share holds
 * nothing; else the caller must queue with inflight_wait().
 */
bool inflight_admit(struct inflight_budget *b, size_t bytes);

/**
 * inflight_wait - queue @wt, which needs @bytes, behind those waiting.
 * @wt must not be queued already.
 */
void inflight_wait(struct inflight_budget *b, struct inflight_waiter *wt,
		   size_t bytes);

/** inflight_cancel - take @wt off the queue, if it is on it. */
void inflight_cancel(struct inflight_budget *b, struct inflight_waiter *wt);

/** inflight_release - @bytes admitted earlier were given back. */
void inflight_release(struct inflight_budget *b, size_t bytes);

/**
 * inflight_next - the head of the queue, taken off it with its bytes
 * counted, if they fit now (or the share holds nothing); else NULL.
 * Call it until NULL after giving bytes back.
 */
struct inflight_waiter *inflight_next(struct inflight_budget *b);

/** inflight_ready - would inflight_next() let the head in now? */
bool inflight_ready(const struct inflight_budget *b);

/**
 * inflight_progress_bytes - what a connection that holds @held_bytes of
 * buffers must move (receive or send) for its client to have made
 * progress: SRV_STALL_MIN_BYTES, or what it holds if that is less, so
 * that trickling a few bytes is no progress.
 */
uint64_t inflight_progress_bytes(size_t held_bytes);

/**
 * inflight_stalled - the eviction rule (docs/design.md, "Buffers in
 * flight"), asked while requests wait for room: a connection is stalled
 * when it holds buffers (@held_bytes), it is its client that holds them
 * up (@client_owes: a reply the client is not reading, or a payload it is
 * not sending; not a slow member), and its last progress was @idle_s ago,
 * SRV_STALL_S or more.
 */
bool inflight_stalled(size_t held_bytes, bool client_owes, double idle_s);

#endif /* BIONBD_INFLIGHT_H */
