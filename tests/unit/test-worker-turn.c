/*
 * Description: how much one connection may move per loop turn
 * (worker_turn_bytes).  A worker that has seen no small request gives
 * every connection the large bound; once connection A sends a small one,
 * its neighbours get SRV_TURN_SMALL_BYTES and A itself keeps the large
 * bound (its own order is its client's business); after
 * SRV_SMALL_WINDOW_S without a small request everyone is back to large;
 * a small request from B moves the exemption to B.  The worker's real
 * libev loop supplies the time, so the window is loop time, as in bionbd.
 *
 * SPDX-License-Identifier: MIT
 */
#include <string.h>
#include <time.h>

#include "worker.h"
#include "unit.h"

#define LARGE ((size_t)512 << 10)

static void sleep_s(double s)
{
	struct timespec ts = { 0, (long)(s * 1e9) };

	nanosleep(&ts, NULL);
}

int main(void)
{
	struct worker w;
	/* Only compared by address, as the worker does. */
	const struct conn *a = (const struct conn *)&w.nr_conns;
	const struct conn *b = (const struct conn *)&w.nr_new;

	memset(&w, 0, sizeof(w));
	w.loop = ev_loop_new(EVFLAG_AUTO);
	CHECK(w.loop);
	CHECK(SRV_TURN_SMALL_BYTES < LARGE);

	CHECK_EQ(worker_turn_bytes(&w, a, LARGE), LARGE);
	CHECK_EQ(worker_turn_bytes(&w, b, LARGE), LARGE);

	worker_small_seen(&w, a);
	CHECK_EQ(worker_turn_bytes(&w, a, LARGE), LARGE);
	CHECK_EQ(worker_turn_bytes(&w, b, LARGE), SRV_TURN_SMALL_BYTES);

	/* Past the window (loop time, updated as each turn does). */
	sleep_s(SRV_SMALL_WINDOW_S * 2);
	ev_now_update(w.loop);
	CHECK_EQ(worker_turn_bytes(&w, b, LARGE), LARGE);

	worker_small_seen(&w, b);
	CHECK_EQ(worker_turn_bytes(&w, a, LARGE), SRV_TURN_SMALL_BYTES);
	CHECK_EQ(worker_turn_bytes(&w, b, LARGE), LARGE);

	ev_loop_destroy(w.loop);
	printf("test-worker-turn: ok\n");
	return 0;
}
