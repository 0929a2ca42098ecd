// SPDX-License-Identifier: MIT
/*
 * ioq.c - the backend-independent half of an I/O queue: the current queue
 * of a thread, dispatch to the backend, and the bios done inline.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "internal.h"

static __thread struct ioq *current_ioq;

/* A bio waiting for the next reap period's inline budget. */
struct ioq_later {
	struct ioq_later *next;
	struct file_target *ft;
	struct bio *bio;
};

int ioq_backend_parse(const char *name, enum ioq_backend *out)
{
	if (!name)
		return -EINVAL;
	if (!strcmp(name, "io_uring") || !strcmp(name, "uring")) {
		*out = IOQ_IO_URING;
		return 0;
	}
	if (!strcmp(name, "threads")) {
		*out = IOQ_THREADS;
		return 0;
	}
	return -EINVAL;
}

const char *ioq_backend_name(enum ioq_backend b)
{
	return b == IOQ_THREADS ? "threads" : "io_uring";
}

int ioq_create(struct ioq **out, enum ioq_backend backend, unsigned int depth)
{
	if (!depth)
		depth = 256;
	switch (backend) {
	case IOQ_IO_URING:
		return uring_ioq_create(out, depth);
	case IOQ_THREADS:
		return threads_ioq_create(out, depth);
	}
	return -EINVAL;
}

void ioq_destroy(struct ioq *q)
{
	if (!q)
		return;
	if (current_ioq == q)
		current_ioq = NULL;
	while (q->slots) {
		struct ioq_slot *sl = q->slots;

		q->slots = sl->next;
		sl->destroy(sl);
	}
	/* Nothing in flight: no call is expected, none is posted. */
	if (q->call_efd >= 0) {
		ioq_poll_del(q, &q->call_poll);
		close(q->call_efd);
	}
	pthread_mutex_destroy(&q->call_lock);
	/* Nothing in flight, so later_head is empty: only spare nodes. */
	while (q->later_free) {
		struct ioq_later *l = q->later_free;

		q->later_free = l->next;
		free(l);
	}
	q->ops->destroy(q);
}

void ioq_set_current(struct ioq *q)
{
	current_ioq = q;
}

struct ioq *ioq_current(void)
{
	return current_ioq;
}

unsigned int ioq_inflight(const struct ioq *q)
{
	return q->inflight;
}

int ioq_flush(struct ioq *q)
{
	return q->ops->flush(q);
}

void ioq_init(struct ioq *q, const struct ioq_ops *ops,
	      enum ioq_backend backend)
{
	q->ops = ops;
	q->backend = backend;
	q->inflight = 0;
	q->done_head = NULL;
	q->done_tail = &q->done_head;
	q->done_efd = -1;
	q->inline_wakeup = true;
	q->inline_budget = q->inline_left = 0;
	q->later_head = q->later_free = NULL;
	q->later_tail = &q->later_head;
	q->timers = NULL;
	q->slots = NULL;
	pthread_mutex_init(&q->call_lock, NULL);
	q->calls = NULL;
	q->call_efd = -1;
	memset(&q->call_poll, 0, sizeof(q->call_poll));
	q->calls_expected = 0;
	q->call_armed = false;
	memset(&q->call_watch, 0, sizeof(q->call_watch));
	q->call_watch.what = "ioq: the call eventfd";
}

void ioq_slot_add(struct ioq *q, struct ioq_slot *s)
{
	s->next = q->slots;
	q->slots = s;
}

void ioq_slot_remove(struct ioq *q, struct ioq_slot *s)
{
	for (struct ioq_slot **pp = &q->slots; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			return;
		}
	}
}

int ioq_poll_set(struct ioq *q, struct ioq_poll *p)
{
	return q->ops->poll_set(q, p);
}

void ioq_poll_del(struct ioq *q, struct ioq_poll *p)
{
	q->ops->poll_del(q, p);
}

/*
 * The calls posted so far, on the queue's thread (a reap): each one
 * expected stops counting as in flight before its @fn runs, which may
 * expect another.
 */
static void ioq_call_drain(struct ioq *q)
{
	struct ioq_call *list, *fifo = NULL;
	uint64_t v;

	(void)!read(q->call_efd, &v, sizeof(v));
	pthread_mutex_lock(&q->call_lock);
	list = q->calls;
	q->calls = NULL;
	pthread_mutex_unlock(&q->call_lock);
	/* Posted newest first: run them in the order they came. */
	while (list) {
		struct ioq_call *c = list;

		list = c->next;
		c->next = fifo;
		fifo = c;
	}
	while (fifo) {
		struct ioq_call *c = fifo;

		fifo = c->next;
		q->calls_expected--;
		q->inflight--;
		c->fn(c);
	}
}

/*
 * Watch the eventfd (one-shot) while posts are still to come: a call
 * posted while nothing watches would sit on the list and its request
 * never end, so when the queue cannot watch it the timer looks instead.
 */
static void ioq_call_watch(struct ioq *q)
{
	if (q->calls_expected && !q->call_armed &&
	    !ioq_watch_arm(q, &q->call_poll, &q->call_watch, true))
		q->call_armed = true;
}

static void ioq_call_run(struct ioq_poll *p, unsigned int revents)
{
	struct ioq *q = container_of(p, struct ioq, call_poll);

	(void)revents;
	q->call_armed = false;
	ioq_call_drain(q);
	ioq_call_watch(q);
}

static void ioq_call_timer_fn(struct ioq_timer *tm)
{
	struct ioq *q = container_of(tm, struct ioq, call_watch.tm);

	q->call_watch.tm_on = false;
	ioq_call_drain(q);
	ioq_call_watch(q);
}

int ioq_call_expect(struct ioq *q)
{
	if (q->call_efd < 0) {
		q->call_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (q->call_efd < 0)
			return -errno;
		q->call_poll.fd = q->call_efd;
		q->call_poll.events = POLLIN;
		q->call_poll.fn = ioq_call_run;
		q->call_watch.tm.fn = ioq_call_timer_fn;
	}
	q->calls_expected++;
	q->inflight++;
	/* Watched or, failing that, looked at by the timer: never refused. */
	ioq_call_watch(q);
	return 0;
}

void ioq_call_post(struct ioq *q, struct ioq_call *c)
{
	uint64_t one = 1;

	/*
	 * Signal before letting go of the lock: once @c is on the list the
	 * owner may run it and, nothing left in flight, destroy the queue,
	 * whose fd number may then name another file (threads.c does the
	 * same).
	 */
	pthread_mutex_lock(&q->call_lock);
	c->next = q->calls;
	q->calls = c;
	(void)!write(q->call_efd, &one, sizeof(one));
	pthread_mutex_unlock(&q->call_lock);
}

int ioq_watch_arm(struct ioq *q, struct ioq_poll *p, struct ioq_watch *w,
		  bool look)
{
	int r = ioq_poll_set(q, p);

	if (likely(!r)) {
		if (unlikely(w->unwatched))
			target_notice(TARGET_NOTICE_INFO, "%s is watched again",
				      w->what);
		w->unwatched = false;
		return 0;
	}
	if (!w->unwatched)
		target_notice(TARGET_NOTICE_ERROR,
			      "%s cannot be watched (%s); looking at it every "
			      "%llu ms instead",
			      w->what, strerror(-r), IOQ_WATCH_LOOK_NS / 1000000);
	w->unwatched = true;
	if (look && !w->tm_on) {
		w->tm_on = true;
		w->tm.deadline_ns = engine_now_ns() + IOQ_WATCH_LOOK_NS;
		ioq_timer_add(q, &w->tm);
	}
	return r;
}

void ioq_timer_add(struct ioq *q, struct ioq_timer *tm)
{
	struct ioq_timer **pp = &q->timers;

	/* Few and mostly in deadline order: a walk is enough. */
	while (*pp && (*pp)->deadline_ns <= tm->deadline_ns)
		pp = &(*pp)->next;
	tm->next = *pp;
	*pp = tm;
	q->inflight++;
}

bool ioq_timer_del(struct ioq *q, struct ioq_timer *tm)
{
	for (struct ioq_timer **pp = &q->timers; *pp; pp = &(*pp)->next) {
		if (*pp == tm) {
			*pp = tm->next;
			q->inflight--;
			return true;
		}
	}
	return false;
}

int64_t ioq_timer_next_ns(const struct ioq *q)
{
	uint64_t now;

	if (likely(!q->timers))
		return -1;
	now = engine_now_ns();
	return q->timers->deadline_ns > now ?
		       (int64_t)(q->timers->deadline_ns - now) : 0;
}

int ioq_timer_wait_ms(const struct ioq *q)
{
	int64_t ns = ioq_timer_next_ns(q);

	if (ns < 0)
		return -1;
	return (int)((ns + 999999) / 1000000);
}

/*
 * Run the timers that are due.  Those due are taken off first: a callback
 * that adds a timer (a stall polling its file) cannot keep this going.
 */
static int ioq_run_timers(struct ioq *q)
{
	struct ioq_timer *due, **pp = &q->timers;
	uint64_t now = engine_now_ns();
	int n = 0;

	while (*pp && (*pp)->deadline_ns <= now)
		pp = &(*pp)->next;
	if (pp == &q->timers)
		return 0;
	due = q->timers;
	q->timers = *pp;
	*pp = NULL;
	while (due) {
		struct ioq_timer *tm = due;

		due = tm->next;
		q->inflight--;
		tm->fn(tm);
		n++;
	}
	return n;
}

void ioq_set_inline_budget(struct ioq *q, size_t bytes)
{
	q->inline_budget = q->inline_left = bytes;
}

bool ioq_inline_now(struct ioq *q, size_t bytes)
{
	if (!q->inline_budget || bytes <= IOQ_INLINE_SMALL)
		return true;
	/* Those waiting go first: a period's budget never skips them. */
	if (q->later_head || !q->inline_left)
		return false;
	q->inline_left -= bytes < q->inline_left ? bytes : q->inline_left;
	return true;
}

void ioq_inline_later(struct ioq *q, struct file_target *ft, struct bio *bio)
{
	struct ioq_later *l = q->later_free;

	if (l)
		q->later_free = l->next;
	else if (!(l = malloc(sizeof(*l)))) {
		file_inline(ft, q, bio); /* late beats lost */
		return;
	}
	l->next = NULL;
	l->ft = ft;
	l->bio = bio;
	*q->later_tail = l;
	q->later_tail = &l->next;
	q->inflight++;
}

/*
 * A new reap period: the waiting bios first, as far as the budget goes
 * (all of them if the budget was lifted meanwhile).
 */
static void ioq_run_later(struct ioq *q)
{
	q->inline_left = q->inline_budget;
	while (q->later_head && (!q->inline_budget || q->inline_left)) {
		struct ioq_later *l = q->later_head;
		size_t bytes = file_inline_cost(q, l->bio);

		q->later_head = l->next;
		if (!q->later_head)
			q->later_tail = &q->later_head;
		q->inline_left -= bytes < q->inline_left ? bytes :
							   q->inline_left;
		q->inflight--;
		file_inline(l->ft, q, l->bio);
		l->next = q->later_free;
		q->later_free = l;
	}
}

void ioq_set_inline_wakeup(struct ioq *q, bool on)
{
	q->inline_wakeup = on;
}

void ioq_defer_end(struct ioq *q, struct bio *bio, int err)
{
	uint64_t one = 1;

	/* bio_endio would record it the same way: first error wins. */
	if (err && !bio->bi_status)
		bio->bi_status = err;
	bio->bi_next = NULL;
	/* A poller of ioq_event_fd must wake for these too. */
	if (!q->done_head && q->done_efd >= 0 && q->inline_wakeup)
		(void)!write(q->done_efd, &one, sizeof(one));
	*q->done_tail = bio;
	q->done_tail = &bio->bi_next;
	q->inflight++;
}

/* End the bios on the done list now; returns how many. */
static int ioq_end_done(struct ioq *q)
{
	struct bio *list = q->done_head;
	int n = 0;

	q->done_head = NULL;
	q->done_tail = &q->done_head;
	while (list) {
		struct bio *bio = list;

		list = bio->bi_next;
		bio->bi_next = NULL;
		q->inflight--;
		bio_endio(bio, bio->bi_iter.bi_size, bio->bi_status);
		n++;
	}
	return n;
}

/*
 * End the bios done inline up to now, then do the copies waiting for this
 * period's budget and end those.  What was done already ends first: a
 * small request finished last turn does not wait for another client's
 * copies.  End_io callbacks may submit more, which may be done inline
 * too: those wait for the next call, so a callback that always resubmits
 * can neither recurse nor keep this from returning.
 */
static int ioq_end_deferred(struct ioq *q)
{
	int n = unlikely(q->timers) ? ioq_run_timers(q) : 0;

	n += ioq_end_done(q);

	if (q->later_head || q->inline_budget) {
		bool resubmitted = q->done_head; /* by those end_ios: later */

		ioq_run_later(q);
		if (!resubmitted)
			n += ioq_end_done(q);
	}
	return n;
}

int ioq_reap(struct ioq *q)
{
	int n = ioq_end_deferred(q);
	int r = q->ops->reap(q);

	return r < 0 ? r : n + r;
}

int ioq_reap_done(struct ioq *q)
{
	int n = unlikely(q->timers) ? ioq_run_timers(q) : 0;

	n += ioq_end_done(q);

	/*
	 * A new period for io_uring's budget too; copies waiting (tmpfs)
	 * get theirs in ioq_reap, first.
	 */
	if (!q->later_head)
		q->inline_left = q->inline_budget;
	int r = q->ops->reap(q);

	return r < 0 ? r : n + r;
}

bool ioq_has_ready(const struct ioq *q)
{
	return q->done_head || q->later_head;
}

int ioq_wait(struct ioq *q)
{
	int n = ioq_end_deferred(q);

	return n ? n : q->ops->wait(q);
}

void ioq_wait_for(struct ioq *q, const bool *done)
{
	while (!*done) {
		int r = ioq_wait(q);

		/*
		 * What is waited for is in flight and owns the caller's
		 * buffers: there is no returning before it ends, so a failing
		 * wait is retried.
		 */
		if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY)
			ioq_reap(q);
	}
}

int ioq_event_fd(struct ioq *q)
{
	return q->ops->event_fd(q);
}
