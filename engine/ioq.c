// SPDX-License-Identifier: MIT
/*
 * ioq.c - the backend-independent half of an I/O queue: the current queue
 * of a thread, dispatch to the backend, and submit_bio_wait().
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

static __thread struct ioq *current_ioq;

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

enum ioq_backend ioq_backend_of(const struct ioq *q)
{
	return q->backend;
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
}

void ioq_defer_end(struct ioq *q, struct bio *bio, int err)
{
	uint64_t one = 1;

	/* bio_endio would record it the same way: first error wins. */
	if (err && !bio->bi_status)
		bio->bi_status = err;
	bio->bi_next = NULL;
	/* A poller of ioq_event_fd must wake for these too. */
	if (!q->done_head && q->done_efd >= 0)
		(void)!write(q->done_efd, &one, sizeof(one));
	*q->done_tail = bio;
	q->done_tail = &bio->bi_next;
	q->inflight++;
}

/*
 * End the bios done inline up to now.  Their end_io may submit more, which
 * may be done inline too: those wait for the next call, so a callback that
 * always resubmits can neither recurse nor keep this loop from returning.
 */
static int ioq_end_deferred(struct ioq *q)
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

int ioq_reap(struct ioq *q)
{
	int n = ioq_end_deferred(q);
	int r = q->ops->reap(q);

	return r < 0 ? r : n + r;
}

bool ioq_has_ready(const struct ioq *q)
{
	return q->done_head != NULL;
}

int ioq_wait(struct ioq *q)
{
	int n = ioq_end_deferred(q);

	return n ? n : q->ops->wait(q);
}

int ioq_event_fd(struct ioq *q)
{
	return q->ops->event_fd(q);
}

static void submit_wait_endio(struct bio *bio)
{
	*(bool *)bio->bi_private = true;
}

int submit_bio_wait(struct target *t, struct bio *bio)
{
	struct ioq *q = ioq_current();
	bio_end_io_t *end_io = bio->bi_end_io;
	void *private = bio->bi_private;
	bool done = false;
	int r;

	if (!q)
		return -ENXIO;
	bio->bi_private = &done;
	bio->bi_end_io = submit_wait_endio;
	submit_bio(t, bio);
	while (!done) {
		r = ioq_wait(q);
		/*
		 * The bio is in flight and owns the caller's buffers: there is
		 * no returning before it ends, so a failing wait is retried.
		 */
		if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY)
			ioq_reap(q);
	}
	bio->bi_end_io = end_io;
	bio->bi_private = private;
	return bio->bi_status;
}
