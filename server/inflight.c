// SPDX-License-Identifier: MIT
/*
 * inflight.c - a worker's share of the bound on buffers in flight
 * (inflight.h).
 */
#include <assert.h>

#include "inflight.h"
#include "server.h"

/* Relaxed: only this thread writes, the statistics read from another. */
static void inflight_set_used(struct inflight_budget *b, size_t v)
{
	__atomic_store_n(&b->used_bytes, v, __ATOMIC_RELAXED);
}

static bool inflight_fits(const struct inflight_budget *b, size_t bytes)
{
	/* Empty, the share takes any one request: none is ever refused. */
	return !b->used_bytes || (b->used_bytes <= b->limit_bytes &&
				  bytes <= b->limit_bytes - b->used_bytes);
}

bool inflight_admit(struct inflight_budget *b, size_t bytes)
{
	/* Behind those waiting, however small: nobody is passed over. */
	if (b->head || !inflight_fits(b, bytes))
		return false;
	inflight_set_used(b, b->used_bytes + bytes);
	return true;
}

void inflight_wait(struct inflight_budget *b, struct inflight_waiter *wt,
		   size_t bytes)
{
	assert(!wt->queued);
	wt->need_bytes = bytes;
	wt->queued = true;
	wt->next = NULL;
	wt->prev = b->tail;
	if (b->tail)
		b->tail->next = wt;
	else
		b->head = wt;
	b->tail = wt;
	b->nr_waiting++;
	__atomic_store_n(&b->waits, b->waits + 1, __ATOMIC_RELAXED);
}

void inflight_cancel(struct inflight_budget *b, struct inflight_waiter *wt)
{
	if (!wt->queued)
		return;
	if (wt->prev)
		wt->prev->next = wt->next;
	else
		b->head = wt->next;
	if (wt->next)
		wt->next->prev = wt->prev;
	else
		b->tail = wt->prev;
	wt->next = wt->prev = NULL;
	wt->queued = false;
	b->nr_waiting--;
}

void inflight_release(struct inflight_budget *b, size_t bytes)
{
	assert(bytes <= b->used_bytes);
	inflight_set_used(b, b->used_bytes - bytes);
}

struct inflight_waiter *inflight_next(struct inflight_budget *b)
{
	struct inflight_waiter *wt = b->head;

	if (!wt || !inflight_fits(b, wt->need_bytes))
		return NULL;
	inflight_cancel(b, wt);
	inflight_set_used(b, b->used_bytes + wt->need_bytes);
	return wt;
}

bool inflight_ready(const struct inflight_budget *b)
{
	return b->head && inflight_fits(b, b->head->need_bytes);
}

uint64_t inflight_progress_bytes(size_t held_bytes)
{
	return held_bytes < SRV_STALL_MIN_BYTES ? held_bytes :
						  SRV_STALL_MIN_BYTES;
}

bool inflight_stalled(size_t held_bytes, bool client_owes, double idle_s)
{
	return held_bytes && client_owes && idle_s >= SRV_STALL_S;
}
