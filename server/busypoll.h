/* SPDX-License-Identifier: MIT */
/*
 * busypoll.h - adaptive busy-polling of a worker's loop after it replies.
 *
 * On a VM a cross-CPU wake-up costs tens of microseconds, twice per request
 * at queue depth 1 (the client wakes us, we wake the client), more than the
 * request itself.  So after replying, a worker keeps polling its sockets
 * (the loop runs with a zero timeout while an idle watcher is active) for a
 * short window before it sleeps, and the client's next request needs no
 * wake-up.  The window adapts to the gaps it sees between the last reply
 * and the next request: it grows to cover gaps shorter than the cap and
 * halves on each longer one, so a slow or idle client soon costs no
 * spinning at all.
 */
#ifndef BIONBD_BUSYPOLL_H
#define BIONBD_BUSYPOLL_H

#include <ev.h>

struct busypoll {
	ev_idle idle;
	ev_tstamp until; /* poll until then */
	ev_tstamp replied_at; /* last reply; 0 = a request came since */
	ev_tstamp window_s; /* current window */
	ev_tstamp max_s; /* cap; 0 = never poll */
};

void busypoll_init(struct busypoll *bp, double max_s);

/* Replies were just queued: poll for the window. */
void busypoll_replied(struct busypoll *bp, struct ev_loop *loop);

/* A request arrived: learn from the gap since the last reply. */
void busypoll_arrival(struct busypoll *bp, struct ev_loop *loop);

void busypoll_stop(struct busypoll *bp, struct ev_loop *loop);

#endif /* BIONBD_BUSYPOLL_H */
