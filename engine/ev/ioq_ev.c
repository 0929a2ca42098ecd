// SPDX-License-Identifier: MIT
/*
 * ioq_ev.c - libev watchers that flush and reap an ioq on its loop's thread.
 *
 * A library of its own (bionbd_ev), so that only front ends with a libev
 * loop link libev: the engine has no event loop, and the nbdkit plugin's
 * threads wait in their rings instead.
 */
#include <stddef.h>
#include <unistd.h>

#include <bionbd/ioq_ev.h>

#define container_of(ptr, type, member)                                        \
	((type *)((char *)(ptr) - offsetof(type, member)))

/*
 * Bios held by a delay (fault.h) wait on ioq timers, which no fd reports:
 * the loop must not block past the first one.  Costs a branch when there
 * are none.
 */
static void ioq_ev_arm_timer(struct ev_loop *loop, struct ioq_ev *iw)
{
	int64_t ns = ioq_timer_next_ns(iw->q);

	if (ns < 0) {
		if (ev_is_active(&iw->timer))
			ev_timer_stop(loop, &iw->timer);
		return;
	}
	ev_timer_stop(loop, &iw->timer);
	/* libev counts from the loop's cached time, older than @ns's now. */
	ev_now_update(loop);
	ev_timer_set(&iw->timer, (double)ns / 1e9, 0.);
	ev_timer_start(loop, &iw->timer);
}

static void ioq_ev_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	/* Nothing to do here either: the prepare watcher reaps, timers too. */
}

static void ioq_ev_prepare_cb(struct ev_loop *loop, ev_prepare *w, int revents)
{
	struct ioq_ev *iw = container_of(w, struct ioq_ev, prepare);

	ioq_flush(iw->q);
	/*
	 * What finished goes out before this turn's waiting copies are
	 * done, then what those finish: a 4 KiB reply does not wait for
	 * another client's megabyte.
	 */
	ioq_reap_done(iw->q);
	if (iw->after_reap)
		iw->after_reap(iw);
	if (ioq_has_ready(iw->q)) {
		ioq_reap(iw->q);
		if (iw->after_reap)
			iw->after_reap(iw);
	}
	/*
	 * The loop is about to block: whatever the reap or the hook queued
	 * (the rest of a short read, the next step of a write-zeroes, bios
	 * the hook parsed) must reach the kernel now, or it would wait for
	 * an unrelated wake-up.
	 */
	ioq_flush(iw->q);
	/*
	 * Bios done inline since the reap (by the hook, or by end_io
	 * callbacks that resubmit) need another pass: an idle watcher makes
	 * the loop poll without blocking and come straight back here.
	 */
	if (ioq_has_ready(iw->q))
		ev_idle_start(loop, &iw->idle);
	else
		ev_idle_stop(loop, &iw->idle);
	ioq_ev_arm_timer(loop, iw);
}

static void ioq_ev_idle_cb(struct ev_loop *loop, ev_idle *w, int revents)
{
	/* Nothing to do here: the prepare watcher runs next and reaps. */
}

static void ioq_ev_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct ioq_ev *iw = container_of(w, struct ioq_ev, io);
	uint64_t v;

	/* Level-triggered: drain, or the loop spins on a stale count. */
	(void)!read(w->fd, &v, sizeof(v));
	ioq_reap(iw->q);
}

int ioq_ev_start(struct ioq_ev *w, struct ioq *q, struct ev_loop *loop)
{
	int fd = ioq_event_fd(q);

	if (fd < 0)
		return fd;
	w->q = q;
	w->after_reap = NULL;
	/*
	 * The prepare and idle watchers end inline completions before the
	 * loop blocks, so they need not poke the eventfd (two syscalls a
	 * batch).
	 */
	ioq_set_inline_wakeup(q, false);
	ev_prepare_init(&w->prepare, ioq_ev_prepare_cb);
	ev_io_init(&w->io, ioq_ev_io_cb, fd, EV_READ);
	ev_idle_init(&w->idle, ioq_ev_idle_cb);
	ev_timer_init(&w->timer, ioq_ev_timer_cb, 0., 0.);
	ev_prepare_start(loop, &w->prepare);
	ev_io_start(loop, &w->io);
	return 0;
}

void ioq_ev_stop(struct ioq_ev *w, struct ev_loop *loop)
{
	ev_prepare_stop(loop, &w->prepare);
	ev_idle_stop(loop, &w->idle);
	ev_timer_stop(loop, &w->timer);
	ev_io_stop(loop, &w->io);
}
