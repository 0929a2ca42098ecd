/* SPDX-License-Identifier: MIT */
/*
 * ioq_ev.h - drive an ioq from a libev loop.
 *
 * A prepare watcher flushes queued SQEs once per loop iteration (so a burst
 * of requests parsed from one socket read goes to the kernel in one
 * io_uring_enter) and reaps right after, which catches the completions the
 * kernel finished inside that call; an io watcher on the ioq's eventfd
 * reaps the ones that finish later.
 * The caller owns struct ioq_ev and embeds it where it likes (libev style).
 */
#ifndef BIONBD_IOQ_EV_H
#define BIONBD_IOQ_EV_H

#include <ev.h>

#include <bionbd/ioq.h>

struct ioq_ev {
	struct ioq *q;
	ev_prepare prepare;
	ev_io io;
	ev_idle idle; /* keeps the loop from blocking while bios are ready */
	ev_timer timer; /* wakes the loop for the ioq's next timer */
	/*
	 * Optional: called once per loop iteration, after the last reap and
	 * before the loop blocks; a server sends the replies that the
	 * completions queued from here, one send per connection.
	 */
	void (*after_reap)(struct ioq_ev *w);
};

/**
 * ioq_ev_start - attach @q to @loop; returns 0 or -errno.
 * Set w->after_reap (or leave it NULL) after this call.
 */
int ioq_ev_start(struct ioq_ev *w, struct ioq *q, struct ev_loop *loop);

/** ioq_ev_stop - detach (completions are no longer reaped by the loop). */
void ioq_ev_stop(struct ioq_ev *w, struct ev_loop *loop);

#endif /* BIONBD_IOQ_EV_H */
