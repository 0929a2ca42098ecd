// SPDX-License-Identifier: MIT
/*
 * busypoll.c - the adaptive busy-poll window (busypoll.h).
 */
#include <stddef.h>

#include "busypoll.h"

#define POLL_MIN_S 2e-6

static void busypoll_cb(struct ev_loop *loop, ev_idle *i, int revents)
{
	struct busypoll *bp = (struct busypoll *)((char *)i -
						  offsetof(struct busypoll, idle));

	if (ev_time() > bp->until)
		ev_idle_stop(loop, i);
}

void busypoll_init(struct busypoll *bp, double max_s)
{
	ev_idle_init(&bp->idle, busypoll_cb);
	bp->until = bp->replied_at = bp->window_s = 0;
	bp->max_s = max_s;
}

void busypoll_replied(struct busypoll *bp, struct ev_loop *loop)
{
	bp->replied_at = ev_time();
	if (bp->window_s > 0) {
		bp->until = bp->replied_at + bp->window_s;
		ev_idle_start(loop, &bp->idle);
	}
}

void busypoll_arrival(struct busypoll *bp, struct ev_loop *loop)
{
	double gap, max = bp->max_s;

	if (!bp->replied_at)
		return;
	gap = ev_now(loop) - bp->replied_at;
	bp->replied_at = 0;
	if (gap < max) {
		if (gap > bp->window_s)
			bp->window_s = gap * 2 < max ? gap * 2 : max;
		if (bp->window_s < POLL_MIN_S)
			bp->window_s = POLL_MIN_S;
	} else {
		bp->window_s /= 2;
		if (bp->window_s < POLL_MIN_S)
			bp->window_s = 0;
	}
}

void busypoll_stop(struct busypoll *bp, struct ev_loop *loop)
{
	ev_idle_stop(loop, &bp->idle);
}
