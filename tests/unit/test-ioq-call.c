// SPDX-License-Identifier: MIT
/*
 * Description: calls onto a queue's thread from any thread (struct
 * ioq_call: how a read-modify-write parked behind another's edge sectors
 * is handed back to its own thread), on each backend (io_uring, threads):
 *
 *  - an expected call counts as in flight until it ran; a reap before it
 *    is posted runs nothing;
 *  - posted from this thread: it runs at the next reap, not inside the
 *    post, on this thread;
 *  - posted from another thread while this one blocks in ioq_wait_for:
 *    the wait wakes and runs it here (a plugin thread waiting in its ring);
 *  - posted from another thread while a loop polls the event fd: the fd
 *    becomes readable (a bionbd worker asleep in libev);
 *  - several posted from another thread run in the order they came, and
 *    a call that expects and posts another from its callback is run too;
 *  - nothing is left in flight after, and the queue is destroyed cleanly
 *    (ASan: the wake-up's descriptor and memory go with it);
 *  - the queue fails to watch the eventfd (an injected ioq_poll_set error),
 *    in ioq_call_expect or when re-arming after a call ran: the expect
 *    still succeeds, and a call posted later from another thread runs
 *    within 2 s under a loop that sleeps on the event fd and the timers
 *    (ioq_timer_next_ns), like bionbd's: found by the timer while the
 *    watch keeps failing, else by the watch the timer set again; one
 *    error notice says so, and one notice that the watch is back.
 */
#define BIONBD_INTERNAL 1
#include <poll.h>
#include <pthread.h>

#include "../../engine/internal.h"
#include "unit.h"

struct tcall {
	struct ioq_call c;
	pthread_t ran_on;
	int order;
	int runs;
	bool ran;
	struct ioq *q; /* again: expect one more, posted from here */
};

static int ran_count;
static bool done;

static void tcall_fn(struct ioq_call *c)
{
	struct tcall *t = (struct tcall *)c;

	t->ran = true;
	t->runs++;
	t->ran_on = pthread_self();
	t->order = ran_count++;
	if (t->q) {
		CHECK_EQ(ioq_call_expect(t->q), 0);
		t->q = NULL;
		ioq_call_post(ioq_current(), c);
		return;
	}
	done = true;
}

struct poster {
	struct ioq *q;
	struct tcall *calls;
	int n;
	unsigned int delay_us;
};

static void *post_later(void *arg)
{
	struct poster *p = arg;

	usleep(p->delay_us);
	for (int i = 0; i < p->n; i++)
		ioq_call_post(p->q, &p->calls[i].c);
	return NULL;
}

static void run(enum ioq_backend be)
{
	struct tcall t[3];
	struct poster p;
	struct ioq *q;
	pthread_t th;
	int fd;

	if (!unit_ioq_create(&q, be))
		return;
	ioq_set_current(q);
	memset(t, 0, sizeof(t));
	for (int i = 0; i < 3; i++)
		t[i].c.fn = tcall_fn;

	/* Expected: in flight; nothing runs before it is posted. */
	ran_count = 0;
	CHECK_EQ(ioq_call_expect(q), 0);
	CHECK_EQ(ioq_inflight(q), 1);
	CHECK(ioq_reap(q) >= 0);
	CHECK(!t[0].ran);
	/* From this thread: not inside the post, at the next reap. */
	ioq_call_post(q, &t[0].c);
	CHECK(!t[0].ran);
	done = false;
	ioq_wait_for(q, &done);
	CHECK(t[0].ran);
	CHECK(pthread_equal(t[0].ran_on, pthread_self()));
	CHECK_EQ(ioq_inflight(q), 0);

	/* From another thread while this one blocks in its queue. */
	memset(t, 0, sizeof(t));
	t[0].c.fn = tcall_fn;
	CHECK_EQ(ioq_call_expect(q), 0);
	p = (struct poster){ .q = q, .calls = t, .n = 1, .delay_us = 50000 };
	CHECK_EQ(pthread_create(&th, NULL, post_later, &p), 0);
	done = false;
	ioq_wait_for(q, &done);
	CHECK(pthread_equal(t[0].ran_on, pthread_self()));
	CHECK_EQ(pthread_join(th, NULL), 0);
	CHECK_EQ(ioq_inflight(q), 0);

	/*
	 * Three from another thread while a loop sleeps on the event fd; the
	 * first expects a fourth from its callback.
	 */
	memset(t, 0, sizeof(t));
	ran_count = 0;
	for (int i = 0; i < 3; i++) {
		t[i].c.fn = tcall_fn;
		CHECK_EQ(ioq_call_expect(q), 0);
	}
	t[0].q = q;
	fd = ioq_event_fd(q);
	CHECK(fd >= 0);
	ioq_flush(q);
	p = (struct poster){ .q = q, .calls = t, .n = 3, .delay_us = 50000 };
	CHECK_EQ(pthread_create(&th, NULL, post_later, &p), 0);
	while (ran_count < 4) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };

		ioq_flush(q);
		CHECK_EQ(poll(&pfd, 1, 10000), 1);
		CHECK(ioq_reap(q) >= 0);
	}
	CHECK_EQ(pthread_join(th, NULL), 0);
	/* In the order posted (t[0]'s second run may come anywhere after). */
	CHECK(t[1].order < t[2].order);
	CHECK_EQ(t[0].runs, 2);
	CHECK(t[1].ran && t[2].ran);
	CHECK_EQ(ioq_inflight(q), 0);

	ioq_set_current(NULL);
	ioq_destroy(q);
	printf("ioq-call: %s ok\n", ioq_backend_name(be));
}

/* The backend's ops with a poll_set that fails while fail_polls lasts. */
static struct ioq_ops failing_ops;
static const struct ioq_ops *real_ops;
static int fail_polls;
static int notices[2];

static int failing_poll_set(struct ioq *q, struct ioq_poll *p)
{
	if (fail_polls > 0) {
		fail_polls--;
		return -ENOMEM;
	}
	return real_ops->poll_set(q, p);
}

static void count_notice(enum target_notice_level level, const char *msg)
{
	printf("notice: %s\n", msg);
	notices[level]++;
}

/* Reap, sleeping on the event fd and the timers, until @t ran or 2 s. */
static void loop_until(struct ioq *q, struct tcall *t)
{
	uint64_t end = engine_now_ns() + 2000000000ull;

	while (!t->ran && engine_now_ns() < end) {
		struct pollfd pfd = { .fd = ioq_event_fd(q), .events = POLLIN };
		int ms = ioq_timer_wait_ms(q);

		ioq_flush(q);
		(void)poll(&pfd, 1, ms < 0 || ms > 100 ? 100 : ms);
		CHECK(ioq_reap(q) >= 0);
	}
	CHECK(t->ran);
}

static void run_unwatched(enum ioq_backend be)
{
	struct tcall t[2];
	struct poster p;
	struct ioq *q;
	pthread_t th;

	if (!unit_ioq_create(&q, be))
		return;
	ioq_set_current(q);
	real_ops = q->ops;
	failing_ops = *q->ops;
	failing_ops.poll_set = failing_poll_set;
	q->ops = &failing_ops;
	memset(notices, 0, sizeof(notices));
	target_set_notice_reporter(count_notice);

	/*
	 * The expect cannot watch, nor can the timer's tries: the expect
	 * succeeds all the same, and the timer finds the post.
	 */
	memset(t, 0, sizeof(t));
	t[0].c.fn = tcall_fn;
	fail_polls = 1000;
	CHECK_EQ(ioq_call_expect(q), 0);
	CHECK_EQ(notices[TARGET_NOTICE_ERROR], 1);
	p = (struct poster){ .q = q, .calls = t, .n = 1, .delay_us = 50000 };
	CHECK_EQ(pthread_create(&th, NULL, post_later, &p), 0);
	loop_until(q, &t[0]);
	CHECK_EQ(pthread_join(th, NULL), 0);
	/* Nothing expected: the timer looks no more. */
	CHECK_EQ(ioq_inflight(q), 0);
	CHECK(fail_polls < 1000);
	fail_polls = 0;

	/* Watched again at the next expect, said once. */
	memset(t, 0, sizeof(t));
	t[0].c.fn = t[1].c.fn = tcall_fn;
	CHECK_EQ(ioq_call_expect(q), 0);
	CHECK_EQ(ioq_call_expect(q), 0);
	CHECK_EQ(notices[TARGET_NOTICE_INFO], 1);
	/*
	 * The watch after the first call ran fails: the timer tries again,
	 * the watch is back, and the second is found.
	 */
	fail_polls = 1;
	ioq_call_post(q, &t[0].c);
	loop_until(q, &t[0]);
	CHECK_EQ(fail_polls, 0);
	CHECK_EQ(notices[TARGET_NOTICE_ERROR], 2);
	p = (struct poster){ .q = q, .calls = &t[1], .n = 1,
			     .delay_us = 50000 };
	CHECK_EQ(pthread_create(&th, NULL, post_later, &p), 0);
	loop_until(q, &t[1]);
	CHECK_EQ(pthread_join(th, NULL), 0);
	CHECK_EQ(notices[TARGET_NOTICE_INFO], 2);
	CHECK_EQ(ioq_inflight(q), 0);

	target_set_notice_reporter(NULL);
	q->ops = real_ops;
	ioq_set_current(NULL);
	ioq_destroy(q);
	printf("ioq-call: %s ok, unwatched\n", ioq_backend_name(be));
}

int main(void)
{
	run(IOQ_IO_URING);
	run(IOQ_THREADS);
	run_unwatched(IOQ_IO_URING);
	run_unwatched(IOQ_THREADS);
	return 0;
}
