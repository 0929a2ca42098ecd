// SPDX-License-Identifier: MIT
/*
 * threads.c - the thread-pool backend, for systems without io_uring or
 * when asked for.
 *
 * One pool of workers serves every queue in the process.  A worker carries
 * out a whole bio with blocking syscalls (file_do_sync) but never ends it:
 * it puts the request on its queue's done list and signals the queue's
 * eventfd, and the queue's own thread calls bio_endio in ioq_reap.  So bios
 * complete on their submitter's thread, as with io_uring.
 */
#include <errno.h>
#include <poll.h>
#include <sys/epoll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "internal.h"

struct threads_ioq;

struct threads_rq {
	struct threads_rq *next;
	struct bio *bio;
	struct file_target *ft;
	struct threads_ioq *tq;
	int res;
};

struct threads_ioq {
	struct ioq q;
	int efd;
	/*
	 * The event fd callers see: an epoll set holding @efd and the sockets
	 * of ioq_poll_set, so one fd wakes a loop or ioq_wait for both.
	 */
	int epfd;
	unsigned int nr_polls;
	/*
	 * The events threads_polls is handing out: a poll deleted by one of
	 * their callbacks (and maybe freed) loses its own there.
	 */
	struct epoll_event *batch;
	int batch_n;
	pthread_mutex_t lock; /* guards done */
	struct threads_rq *done;
	struct threads_rq *free_rqs; /* owner thread only */
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct threads_rq *head, **tail;
	/*
	 * Small reads and writes go first: one client's 32 MiB request is
	 * hundreds of pieces, and a 4 KiB request queued behind them would
	 * wait for all of them.
	 */
	struct threads_rq *small_head, **small_tail;
	unsigned int nr_threads; /* wanted */
	unsigned int running;
	unsigned int users; /* queues alive */
	/*
	 * Which pool is current: a worker of an older one ends once nothing
	 * is left to do.  Not a stop flag, which a new pool started while
	 * the last one is still being joined (pool_put) would clear under
	 * the old workers, and the join would never return.
	 */
	unsigned long gen;
	pthread_t *tids;
} pool = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
	.nr_threads = 8,
};

static inline struct threads_ioq *to_tq(struct ioq *q)
{
	return container_of(q, struct threads_ioq, q);
}

int ioq_pool_set_threads(unsigned int n)
{
	int r = 0;

	if (!n || n > 1024)
		return -EINVAL;
	pthread_mutex_lock(&pool.lock);
	if (pool.running)
		r = -EBUSY;
	else
		pool.nr_threads = n;
	pthread_mutex_unlock(&pool.lock);
	return r;
}

static void *pool_worker(void *arg)
{
	unsigned long gen = (unsigned long)(uintptr_t)arg;

	for (;;) {
		struct threads_rq *rq;
		struct threads_ioq *tq;
		uint64_t one = 1;

		pthread_mutex_lock(&pool.lock);
		while (!pool.small_head && !pool.head && pool.gen == gen)
			pthread_cond_wait(&pool.cond, &pool.lock);
		if ((rq = pool.small_head)) {
			pool.small_head = rq->next;
			if (!pool.small_head)
				pool.small_tail = &pool.small_head;
		} else if ((rq = pool.head)) {
			pool.head = rq->next;
			if (!pool.head)
				pool.tail = &pool.head;
		} else { /* an old pool's, and nothing left */
			pthread_mutex_unlock(&pool.lock);
			return NULL;
		}
		pthread_mutex_unlock(&pool.lock);

		rq->res = file_do_sync(rq->ft, rq->bio);

		/*
		 * Signal before letting go of the lock: once @rq is on the
		 * list the owner may reap it (without waiting for the eventfd)
		 * and destroy the queue, and the fd number, closed, may then
		 * name a member file or a client socket.
		 */
		tq = rq->tq;
		pthread_mutex_lock(&tq->lock);
		rq->next = tq->done;
		tq->done = rq;
		(void)!write(tq->efd, &one, sizeof(one));
		pthread_mutex_unlock(&tq->lock);
	}
}

/* Called with pool.lock held. */
static int pool_start_locked(void)
{
	unsigned int i;

	pool.tids = calloc(pool.nr_threads, sizeof(pthread_t));
	if (!pool.tids)
		return -ENOMEM;
	/* Empty lists: an old pool's workers may still be leaving. */
	if (!pool.head)
		pool.tail = &pool.head;
	if (!pool.small_head)
		pool.small_tail = &pool.small_head;
	for (i = 0; i < pool.nr_threads; i++) {
		if (pthread_create(&pool.tids[i], NULL, pool_worker,
				   (void *)(uintptr_t)pool.gen))
			break;
	}
	pool.running = i;
	if (!i) {
		free(pool.tids);
		pool.tids = NULL;
		return -EAGAIN;
	}
	return 0;
}

static void pool_get(void)
{
	pthread_mutex_lock(&pool.lock);
	pool.users++;
	pthread_mutex_unlock(&pool.lock);
}

/* The last queue gone: stop the workers so nothing outlives its user. */
static void pool_put(void)
{
	pthread_t *tids = NULL;
	unsigned int n = 0;

	pthread_mutex_lock(&pool.lock);
	if (--pool.users == 0 && pool.running) {
		pool.gen++;
		pthread_cond_broadcast(&pool.cond);
		tids = pool.tids;
		n = pool.running;
		pool.tids = NULL;
		pool.running = 0;
	}
	pthread_mutex_unlock(&pool.lock);
	for (unsigned int i = 0; i < n; i++)
		pthread_join(tids[i], NULL);
	free(tids);
}

static void threads_submit(struct ioq *q, struct file_target *ft,
			   struct bio *bio)
{
	struct threads_ioq *tq = to_tq(q);
	struct threads_rq *rq = tq->free_rqs;
	bool small;
	int r = 0;

	if (rq)
		tq->free_rqs = rq->next;
	else if (!(rq = malloc(sizeof(*rq)))) {
		bio_io_error(bio, -ENOMEM);
		return;
	}
	rq->bio = bio;
	rq->ft = ft;
	rq->tq = tq;
	rq->next = NULL;
	small = ioq_bio_small(bio);

	pthread_mutex_lock(&pool.lock);
	if (!pool.running)
		r = pool_start_locked();
	if (!r && small) {
		*pool.small_tail = rq;
		pool.small_tail = &rq->next;
		pthread_cond_signal(&pool.cond);
	} else if (!r) {
		*pool.tail = rq;
		pool.tail = &rq->next;
		pthread_cond_signal(&pool.cond);
	}
	pthread_mutex_unlock(&pool.lock);
	if (r) {
		rq->next = tq->free_rqs;
		tq->free_rqs = rq;
		bio_io_error(bio, r);
		return;
	}
	q->inflight++;
	ioq_hints_add(q, bio, 1);
}

static int threads_flush(struct ioq *q)
{
	return 0; /* work goes to the pool as it is submitted */
}

/* Run the callbacks of the sockets that are ready; returns how many. */
static int threads_polls(struct threads_ioq *tq)
{
	struct epoll_event ev[16];
	int n, done = 0;

	do {
		n = epoll_wait(tq->epfd, ev, ARRAY_SIZE(ev), 0);
		tq->batch = ev;
		tq->batch_n = n;
		for (int i = 0; i < n; i++) {
			struct ioq_poll *p = ev[i].data.ptr;
			unsigned int got = ev[i].events & (POLLIN | POLLOUT);

			if (!p)
				continue; /* efd (the caller's), or deleted */
			if (ev[i].events & (EPOLLERR | EPOLLHUP))
				got |= POLLERR | (p->events & (POLLIN | POLLOUT));
			/* One-shot, like io_uring's: the callback re-arms. */
			p->fn(p, got);
			done++;
		}
		tq->batch_n = 0;
	} while (n == (int)ARRAY_SIZE(ev));
	return done;
}

static int threads_poll_set(struct ioq *q, struct ioq_poll *p)
{
	struct threads_ioq *tq = to_tq(q);
	struct epoll_event ev = {
		.events = (p->events & (POLLIN | POLLOUT)) | EPOLLONESHOT,
		.data.ptr = p
	};

	if (!p->added) {
		if (epoll_ctl(tq->epfd, EPOLL_CTL_ADD, p->fd, &ev))
			return -errno;
		p->added = true;
		tq->nr_polls++;
		return 0;
	}
	return epoll_ctl(tq->epfd, EPOLL_CTL_MOD, p->fd, &ev) ? -errno : 0;
}

static void threads_poll_del(struct ioq *q, struct ioq_poll *p)
{
	struct threads_ioq *tq = to_tq(q);

	if (!p->added)
		return;
	for (int i = 0; i < tq->batch_n; i++)
		if (tq->batch[i].data.ptr == p)
			tq->batch[i].data.ptr = NULL;
	(void)epoll_ctl(tq->epfd, EPOLL_CTL_DEL, p->fd, NULL);
	p->added = false;
	tq->nr_polls--;
}

static int threads_reap(struct ioq *q)
{
	struct threads_ioq *tq = to_tq(q);
	struct threads_rq *list;
	uint64_t v;
	int n = 0;

	(void)!read(tq->efd, &v, sizeof(v));
	if (tq->nr_polls)
		n = threads_polls(tq);
	for (;;) {
		pthread_mutex_lock(&tq->lock);
		list = tq->done;
		tq->done = NULL;
		pthread_mutex_unlock(&tq->lock);
		if (!list)
			return n;
		while (list) {
			struct threads_rq *rq = list;
			struct bio *bio = rq->bio;
			struct file_target *ft = rq->ft;
			int res = rq->res;

			list = rq->next;
			rq->next = tq->free_rqs;
			tq->free_rqs = rq;
			q->inflight--;
			ioq_hints_add(q, bio, -1);
			if (res)
				file_report_error(ft, bio, res);
			bio_endio(bio, bio->bi_iter.bi_size, res);
			n++;
		}
	}
}

static int threads_wait(struct ioq *q)
{
	struct threads_ioq *tq = to_tq(q);
	struct pollfd pfd = { .fd = tq->epfd, .events = POLLIN };
	int r;

	r = threads_reap(q);
	if (r || !q->inflight)
		return r;
	/* Up to the next timer, if any: ioq_wait's caller runs it then. */
	if (poll(&pfd, 1, ioq_timer_wait_ms(q)) < 0)
		return -errno;
	return threads_reap(q);
}

static int threads_event_fd(struct ioq *q)
{
	return to_tq(q)->epfd;
}

static void threads_destroy(struct ioq *q)
{
	struct threads_ioq *tq = to_tq(q);

	while (tq->free_rqs) {
		struct threads_rq *rq = tq->free_rqs;

		tq->free_rqs = rq->next;
		free(rq);
	}
	/* The last pool thread to signal us is out of its lock (above). */
	pthread_mutex_lock(&tq->lock);
	pthread_mutex_unlock(&tq->lock);
	close(tq->epfd);
	close(tq->efd);
	pthread_mutex_destroy(&tq->lock);
	free(tq);
	pool_put();
}

static const struct ioq_ops threads_ops = {
	.submit = threads_submit,
	.flush = threads_flush,
	.reap = threads_reap,
	.wait = threads_wait,
	.event_fd = threads_event_fd,
	.destroy = threads_destroy,
	.poll_set = threads_poll_set,
	.poll_del = threads_poll_del,
};

int threads_ioq_create(struct ioq **out, unsigned int depth)
{
	struct threads_ioq *tq = calloc(1, sizeof(*tq));

	if (!tq)
		return -ENOMEM;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };

	tq->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	tq->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (tq->efd < 0 || tq->epfd < 0 ||
	    epoll_ctl(tq->epfd, EPOLL_CTL_ADD, tq->efd, &ev)) {
		int r = -errno;

		if (tq->efd >= 0)
			close(tq->efd);
		if (tq->epfd >= 0)
			close(tq->epfd);
		free(tq);
		return r;
	}
	pthread_mutex_init(&tq->lock, NULL);
	ioq_init(&tq->q, &threads_ops, IOQ_THREADS);
	tq->q.done_efd = tq->efd;
	pool_get();
	*out = &tq->q;
	return 0;
}
