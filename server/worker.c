// SPDX-License-Identifier: MIT
/*
 * worker.c - a worker thread: its loop, its ioq, new sockets handed over
 * from the main thread, the end-of-iteration send, and orderly stop.
 */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conn.h"
#include "request.h"
#include "worker.h"

/* While connections wait for their next turn: the loop must not block. */
static void worker_yield_idle_cb(struct ev_loop *loop, ev_idle *i,
				 int revents)
{
	/* Nothing: the prepare watcher resumes them (worker_after_reap). */
}

/* Buffer room came back after the last resume: the loop must not block. */
static void worker_room_idle_cb(struct ev_loop *loop, ev_idle *i, int revents)
{
	/* Nothing: the prepare watcher lets them in (worker_after_reap). */
}

static void worker_stall_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	conn_evict_stalled(container_of(t, struct worker, stall));
}

/*
 * Once per loop iteration, after the last reap and before the loop blocks:
 * parse on for the connections that spent their last turn, let in those
 * that waited for buffer room if there is room now, then send the replies
 * the completions queued, one send per connection.
 */
static void worker_after_reap(struct ioq_ev *qev)
{
	struct worker *w = container_of(qev, struct worker, qev);

	bool small = ev_now(w->loop) - w->small_at < SRV_SMALL_WINDOW_S;

	conn_resume_yielded(w);
	conn_resume_waiting(w);
	if (w->dirty)
		busypoll_replied(&w->poll, w->loop);
	conn_send_dirty(w);
	/* The replies just sent gave buffers back: next turn, not next event. */
	if (inflight_ready(&w->lanes[0]) || inflight_ready(&w->lanes[1]))
		ev_idle_start(w->loop, &w->room_idle);
	else
		ev_idle_stop(w->loop, &w->room_idle);
	/* The next reap period's copies: small bites while small requests come. */
	if (small != w->small_turns) {
		w->small_turns = small;
		ioq_set_inline_budget(w->q, small ? SRV_TURN_SMALL_BYTES :
						    SRV_TURN_INLINE_BYTES);
	}
	if (w->bufs.cached_bytes > BUF_IDLE_KEEP_BYTES &&
	    !ev_is_active(&w->trim))
		ev_timer_again(w->loop, &w->trim);
}

/*
 * Every SRV_IDLE_TRIM_S while the cache holds more than an idle worker
 * keeps: if no buffer was taken since the last look, the burst is over and
 * the memory goes back to the system (within two periods of the last
 * request).
 */
static void worker_trim_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker *w = container_of(t, struct worker, trim);

	if (w->bufs.gets == w->trim_gets)
		buf_cache_trim(&w->bufs, BUF_IDLE_KEEP_BYTES);
	w->trim_gets = w->bufs.gets;
	if (w->bufs.cached_bytes <= BUF_IDLE_KEEP_BYTES)
		ev_timer_stop(loop, t);
}

static void worker_grace_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	/* Clients that stopped reading their replies: cut them off. */
	conn_close_all(container_of(t, struct worker, grace));
}

static void worker_begin_stop(struct worker *w)
{
	w->stopping = true;
	ev_timer_start(w->loop, &w->grace);
	conn_stop_all(w);
	if (!w->conns)
		ev_break(w->loop, EVBREAK_ONE);
}

static void worker_wake_cb(struct ev_loop *loop, ev_async *a, int revents)
{
	struct worker *w = container_of(a, struct worker, wake);
	bool stop = atomic_load(&w->srv->stopping);
	int *fds;
	unsigned int n;

	pthread_mutex_lock(&w->lock);
	fds = w->new_fds;
	n = w->nr_new;
	w->new_fds = NULL;
	w->nr_new = w->cap_new = 0;
	pthread_mutex_unlock(&w->lock);

	for (unsigned int i = 0; i < n; i++) {
		if (stop || w->stopping) {
			close(fds[i]);
			srv_conn_gone(w->srv);
		} else {
			conn_accept(w, fds[i]);
		}
	}
	free(fds);
	if (stop && !w->stopping)
		worker_begin_stop(w);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	ioq_set_current(w->q);
	ev_run(w->loop, 0);
	return NULL;
}

int worker_init(struct worker *w, struct server *srv)
{
	size_t share;
	int r;

	w->srv = srv;
	pthread_mutex_init(&w->lock, NULL);
	w->rbuf = malloc(SRV_RBUF_BYTES);
	w->loop = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
	if (!w->rbuf || !w->loop)
		return -ENOMEM;
	r = ioq_create(&w->q, srv->backend, 256);
	if (r)
		return r;
	ioq_set_inline_budget(w->q, SRV_TURN_INLINE_BYTES);
	r = ioq_ev_start(&w->qev, w->q, w->loop);
	if (r)
		return r;
	w->qev.after_reap = worker_after_reap;
	busypoll_init(&w->poll, srv->poll_max_s);
	ev_idle_init(&w->yield_idle, worker_yield_idle_cb);
	ev_idle_init(&w->room_idle, worker_room_idle_cb);
	ev_init(&w->stall, worker_stall_cb);
	w->stall.repeat = SRV_STALL_TICK_S;
	/*
	 * The bound's share (never below two largest requests: main raised
	 * the bound); the first workers take the remainder, so that the
	 * shares add up to the bound the log and the statistics tell.
	 */
	share = srv->inflight_limit_bytes / srv->nr_workers;
	if ((size_t)(w - srv->workers) <
	    srv->inflight_limit_bytes % srv->nr_workers)
		share++;
	assert(share >= SRV_INFLIGHT_WORKER_MIN);
	w->stash_limit = share / SRV_INFLIGHT_STASH_DIV;
	w->lanes[1].limit_bytes = share / SRV_INFLIGHT_SMALL_DIV;
	w->lanes[0].limit_bytes =
		share - w->lanes[1].limit_bytes - w->stash_limit;
	ev_async_init(&w->wake, worker_wake_cb);
	ev_async_start(w->loop, &w->wake);
	ev_timer_init(&w->grace, worker_grace_cb, SRV_SHUTDOWN_GRACE_S, 0.);
	ev_init(&w->trim, worker_trim_cb);
	w->trim.repeat = SRV_IDLE_TRIM_S;
	w->bufs.pool = &srv->bufs;
	return 0;
}

int worker_start(struct worker *w)
{
	return -pthread_create(&w->tid, NULL, worker_main, w);
}

void worker_hand_off(struct worker *w, int fd)
{
	pthread_mutex_lock(&w->lock);
	if (w->nr_new == w->cap_new) {
		unsigned int cap = w->cap_new ? w->cap_new * 2 : 16;
		int *v = realloc(w->new_fds, cap * sizeof(int));

		if (!v) {
			pthread_mutex_unlock(&w->lock);
			close(fd);
			srv_conn_gone(w->srv);
			return;
		}
		w->new_fds = v;
		w->cap_new = cap;
	}
	w->new_fds[w->nr_new++] = fd;
	pthread_mutex_unlock(&w->lock);
	ev_async_send(w->loop, &w->wake);
}

void worker_stop(struct worker *w)
{
	/* The wake-up sees srv->stopping. */
	ev_async_send(w->loop, &w->wake);
}

void worker_join(struct worker *w)
{
	pthread_join(w->tid, NULL);
}

void worker_fini(struct worker *w)
{
	if (w->q) {
		ioq_ev_stop(&w->qev, w->loop);
		ioq_destroy(w->q);
	}
	buf_cache_drain(&w->bufs);
	req_cache_drain(w);
	if (w->loop) {
		ev_timer_stop(w->loop, &w->trim);
		ev_timer_stop(w->loop, &w->stall);
		ev_idle_stop(w->loop, &w->room_idle);
		busypoll_stop(&w->poll, w->loop);
		ev_loop_destroy(w->loop);
	}
	free(w->rbuf);
	free(w->new_fds);
	pthread_mutex_destroy(&w->lock);
}
