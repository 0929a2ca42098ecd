/*
 * Description: a worker's share of the bound on buffers in flight
 * (inflight.h).  Requests are let in while they fit; one that does not
 * queues, and so does every later one however small (first come, first
 * served: a 4 KiB request never passes a waiting 32 MiB one); room given
 * back lets the queue in from its head, as many as fit, in order; an
 * empty share takes any one request, even one larger than the share; a
 * waiter cancelled (its connection closed) leaves the queue intact; the
 * bytes counted never exceed the share but for that one request.  And
 * the stall rule: a connection is stalled only if it holds buffers, its
 * client holds it up, and it made no progress (1 MiB moved, or what it
 * holds if less) for SRV_STALL_S.
 *
 * SPDX-License-Identifier: MIT
 */
#include "inflight.h"
#include "server.h"
#include "unit.h"

#define MIB ((size_t)1 << 20)
#define KIB ((size_t)1 << 10)

static void fifo(void)
{
	struct inflight_budget b = { .limit_bytes = 64 * MIB };
	struct inflight_waiter w[4] = { 0 };

	CHECK(inflight_admit(&b, 32 * MIB));
	CHECK(inflight_admit(&b, 32 * MIB));
	CHECK_EQ(b.used_bytes, 64 * MIB);
	/* Full: the next waits, and a small one behind it too. */
	CHECK(!inflight_admit(&b, 32 * MIB));
	inflight_wait(&b, &w[0], 32 * MIB);
	CHECK(!inflight_admit(&b, 4 * KIB));
	inflight_wait(&b, &w[1], 4 * KIB);
	inflight_wait(&b, &w[2], 4 * KIB);
	CHECK_EQ(b.nr_waiting, 3);
	CHECK_EQ(b.waits, 3);
	CHECK(!inflight_ready(&b));
	CHECK(inflight_next(&b) == NULL);

	/* 16 MiB back: the head still does not fit, so nobody goes. */
	inflight_release(&b, 16 * MIB);
	CHECK(!inflight_ready(&b));
	CHECK(inflight_next(&b) == NULL);
	/* A small one would fit now, but others wait: it may not pass. */
	CHECK(!inflight_admit(&b, 4 * KIB));
	/* Room for all three, let in in order. */
	inflight_release(&b, 32 * MIB);
	CHECK(inflight_ready(&b));
	CHECK(inflight_next(&b) == &w[0]);
	CHECK(inflight_next(&b) == &w[1]);
	CHECK(inflight_next(&b) == &w[2]);
	CHECK(inflight_next(&b) == NULL);
	CHECK_EQ(b.used_bytes, 48 * MIB + 8 * KIB);
	CHECK_EQ(b.nr_waiting, 0);
	CHECK(!w[0].queued && !w[1].queued && !w[2].queued);
	/* Nobody waits and it fits: straight in. */
	CHECK(inflight_admit(&b, 4 * KIB));
}

static void cancel(void)
{
	struct inflight_budget b = { .limit_bytes = 32 * MIB };
	struct inflight_waiter w[3] = { 0 };

	CHECK(inflight_admit(&b, 32 * MIB));
	for (int i = 0; i < 3; i++)
		inflight_wait(&b, &w[i], MIB);
	/* The middle, the head, then one not queued at all. */
	inflight_cancel(&b, &w[1]);
	CHECK(!w[1].queued);
	inflight_cancel(&b, &w[0]);
	inflight_cancel(&b, &w[1]);
	CHECK_EQ(b.nr_waiting, 1);
	CHECK(b.head == &w[2] && b.tail == &w[2]);
	inflight_release(&b, 32 * MIB);
	CHECK(inflight_next(&b) == &w[2]);
	CHECK(b.head == NULL && b.tail == NULL);
	/* Cancelling the last leaves an empty queue that works. */
	inflight_wait(&b, &w[0], MIB);
	inflight_cancel(&b, &w[0]);
	CHECK(b.head == NULL && b.tail == NULL && !b.nr_waiting);
	CHECK(inflight_admit(&b, MIB));
}

static void oversized(void)
{
	struct inflight_budget b = { .limit_bytes = 16 * MIB };
	struct inflight_waiter w = { 0 };

	/* Larger than the share, which holds nothing: it runs. */
	CHECK(inflight_admit(&b, 32 * MIB));
	/* Over the share now: nothing else, however small. */
	CHECK(!inflight_admit(&b, 4 * KIB));
	inflight_wait(&b, &w, 32 * MIB);
	inflight_release(&b, 32 * MIB);
	CHECK(inflight_next(&b) == &w);
	CHECK_EQ(b.used_bytes, 32 * MIB);
}

/* Random admits, waits, cancels and releases against a simple model. */
static void random_ops(void)
{
	enum { N = 64 };
	struct inflight_budget b = { .limit_bytes = 96 * MIB };
	struct inflight_waiter w[N] = { 0 };
	size_t held[N] = { 0 }; /* bytes each "connection" holds */
	size_t order[N], nr_order = 0; /* the model's queue */

	for (int step = 0; step < 200000; step++) {
		unsigned int i = (unsigned int)(rnd() % N);
		size_t bytes = (size_t)4096 << (rnd() % 14);
		size_t total = 0;

		if (w[i].queued) {
			if (rnd() % 4 == 0) {
				size_t k = 0;

				inflight_cancel(&b, &w[i]);
				while (order[k] != i)
					k++;
				memmove(&order[k], &order[k + 1],
					(nr_order - k - 1) * sizeof(order[0]));
				nr_order--;
			}
		} else if (held[i] && rnd() % 2) {
			inflight_release(&b, held[i]);
			held[i] = 0;
		} else if (!held[i]) {
			bool fits = !nr_order &&
				    (!b.used_bytes ||
				     b.used_bytes + bytes <= b.limit_bytes);

			CHECK_EQ(inflight_admit(&b, bytes), fits);
			if (fits) {
				held[i] = bytes;
			} else {
				inflight_wait(&b, &w[i], bytes);
				order[nr_order++] = i;
			}
		}
		for (struct inflight_waiter *wt; (wt = inflight_next(&b));) {
			unsigned int j = (unsigned int)(wt - w);

			CHECK(nr_order && order[0] == j);
			memmove(&order[0], &order[1],
				(nr_order - 1) * sizeof(order[0]));
			nr_order--;
			held[j] = wt->need_bytes;
		}
		for (int k = 0; k < N; k++)
			total += held[k];
		CHECK_EQ(b.used_bytes, total);
		CHECK_EQ(b.nr_waiting, nr_order);
		/* Over the share only by one request let into an empty one. */
		CHECK(total <= b.limit_bytes || total <= 32 * MIB);
		/* The head waits only while it does not fit. */
		CHECK(!nr_order || (b.used_bytes &&
				    b.used_bytes + w[order[0]].need_bytes >
					    b.limit_bytes));
	}
}

static void stalled(void)
{
	/* Progress is 1 MiB moved, or what it holds if that is less. */
	CHECK_EQ(inflight_progress_bytes(32 * MIB), SRV_STALL_MIN_BYTES);
	CHECK_EQ(inflight_progress_bytes(4 * KIB), 4 * KIB);
	CHECK_EQ(inflight_progress_bytes(0), 0);
	/* Nothing held, or a slow member (the client owes nothing): never. */
	CHECK(!inflight_stalled(0, true, 60));
	CHECK(!inflight_stalled(32 * MIB, false, 60));
	/* Its client held it up for the whole time, and only then. */
	CHECK(inflight_stalled(32 * MIB, true, SRV_STALL_S));
	CHECK(!inflight_stalled(32 * MIB, true, SRV_STALL_S - 0.01));
	CHECK(inflight_stalled(4 * KIB, true, SRV_STALL_S + 1));
}

int main(void)
{
	unit_seed("test-inflight");
	fifo();
	cancel();
	oversized();
	random_ops();
	stalled();
	printf("test-inflight: ok\n");
	return 0;
}
