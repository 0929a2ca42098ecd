// SPDX-License-Identifier: MIT
/*
 * ioq.c - the backend-independent half of an I/O queue: the current queue
 * of a thread, dispatch to the backend, and the bios done inline.
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
