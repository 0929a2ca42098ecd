// SPDX-License-Identifier: MIT
/*
 * uring.c - the io_uring backend: one ring per ioq, owned by one thread.
 *
 * Each backend operation is a struct uring_rq (bio + file + retry state)
 * from a per-queue free list.  Short reads and writes are finished by ending
 * the bytes done (bio_endio advances the iterator) and issuing the rest;
 * -EAGAIN is issued again; write-zeroes walks the fallback ladder from
 * internal.h one SQE at a time.  When the SQ ring is full, requests wait on
 * a userspace list instead of failing.
 */
#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "internal.h"

#define URING_RQ_IOVS 16
/*
 * Bytes of reads and writes we push to io_uring's async workers at once;
 * the rest wait here.  The kernel runs those workers' queue in order, and
 * a small request the kernel itself punts there (a buffered write that
 * must allocate, say) would otherwise wait behind all of a client's 32 MiB
 * requests; a few MiB still keeps many cores copying.
 */
#define URING_ASYNC_MAX_BYTES (4u << 20)

struct uring_rq {
	struct uring_rq *next;
	struct bio *bio;
	struct file_target *ft;
	enum zero_step zstep;
	bool syncing; /* FUA on discard/zeroes: the final fdatasync */
	bool async; /* IOSQE_ASYNC: the copy never runs in io_uring_submit */
	uint32_t async_bytes; /* counted in uring_ioq.async_bytes */
	uint32_t zdone; /* bytes of zeros written (ZS_WRITE) */
	/*
	 * Bytes short transfers moved past what bi_sector counts (it drops
	 * a remainder under 512): added to its offset when the rest goes.
	 */
	uint32_t skew;
	struct iovec iov[URING_RQ_IOVS];
};

struct uring_ioq {
	struct ioq q;
	struct io_uring ring;
	int efd; /* -1 until someone asks for it */
	unsigned int queued; /* SQEs prepared, not yet submitted */
	unsigned int in_kernel; /* SQEs prepared and not yet reaped */
	unsigned int cq_entries;
	struct uring_rq *free_rqs;
	struct uring_rq *pending, **pending_tail;
	uint64_t async_bytes; /* IOSQE_ASYNC reads and writes in flight */
	struct uring_rq *async_wait, **async_wait_tail; /* over the cap */
	struct ioq_poll *arm_waiting; /* polls without an SQE (ioq_poll) */
	struct uring_poll_ref *detached; /* deleted polls' refs still out */
	bool remove_waiting; /* some of those wait to send a POLL_REMOVE */
};

static inline struct uring_ioq *to_uq(struct ioq *q)
{
	return container_of(q, struct uring_ioq, q);
}

static struct uring_rq *rq_get(struct uring_ioq *uq)
{
	struct uring_rq *rq = uq->free_rqs;

	if (likely(rq)) {
		uq->free_rqs = rq->next;
		return rq;
	}
	return malloc(sizeof(*rq));
}

static void rq_put(struct uring_ioq *uq, struct uring_rq *rq)
{
	rq->next = uq->free_rqs;
	uq->free_rqs = rq;
}

static void rq_prep(struct io_uring_sqe *sqe, struct uring_rq *rq)
{
	struct bio *bio = rq->bio;
	int fd = rq->ft->fd;
	uint64_t off = bio_offset_bytes(bio);
	unsigned int n;

	switch (bio_op(bio)) {
	case REQ_OP_READ:
	case REQ_OP_WRITE:
		n = bio_iter_to_iovec(bio, bio->bi_iter, rq->iov,
				      URING_RQ_IOVS);
		off += rq->skew;
		if (bio_op(bio) == REQ_OP_READ) {
			if (n == 1)
				io_uring_prep_read(sqe, fd, rq->iov[0].iov_base,
						   (unsigned int)rq->iov[0].iov_len,
						   off);
			else
				io_uring_prep_readv(sqe, fd, rq->iov, n, off);
		} else {
			if (n == 1)
				io_uring_prep_write(sqe, fd, rq->iov[0].iov_base,
						    (unsigned int)rq->iov[0].iov_len,
						    off);
			else
				io_uring_prep_writev(sqe, fd, rq->iov, n, off);
			if (bio->bi_opf & REQ_FUA)
				sqe->rw_flags = RWF_DSYNC;
		}
		break;
	case REQ_OP_FLUSH:
		io_uring_prep_fsync(sqe, file_flush_fd(rq->ft),
				    IORING_FSYNC_DATASYNC);
		break;
	case REQ_OP_CACHE:
		/* Off the worker: the readahead may wait for the disk. */
		io_uring_prep_fadvise(sqe, fd, off, file_cache_bytes(bio),
				      POSIX_FADV_WILLNEED);
		sqe->flags |= IOSQE_ASYNC;
		break;
	default: /* discard, write-zeroes */
		if (rq->syncing) {
			io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
		} else if (rq->zstep == ZS_WRITE) {
			uint32_t left = bio->bi_iter.bi_size - rq->zdone;

			io_uring_prep_write(sqe, fd, zero_buf(),
					    left < ZERO_BUF_BYTES ? left :
								    ZERO_BUF_BYTES,
					    off + rq->zdone);
		} else {
			io_uring_prep_fallocate(sqe, fd,
						zero_step_mode(rq->zstep), off,
						bio->bi_iter.bi_size);
		}
		break;
	}
	if (rq->async)
		sqe->flags |= IOSQE_ASYNC;
	io_uring_sqe_set_data(sqe, rq);
}

static bool uring_try_issue(struct uring_ioq *uq, struct uring_rq *rq)
{
	struct io_uring_sqe *sqe;

	/*
	 * Never have more in the kernel than the CQ ring holds: the rest of
	 * the completions would go to the kernel's overflow list, which
	 * neither a CQ walk nor the eventfd reports.
	 */
	if (unlikely(uq->in_kernel >= uq->cq_entries))
		return false;
	sqe = io_uring_get_sqe(&uq->ring);
	if (unlikely(!sqe)) {
		/* SQ full: hand the batch to the kernel and try once more. */
		io_uring_submit(&uq->ring);
		uq->queued = 0;
		sqe = io_uring_get_sqe(&uq->ring);
		if (!sqe)
			return false;
	}
	rq_prep(sqe, rq);
	uq->queued++;
	uq->in_kernel++;
	return true;
}

static void uring_issue(struct uring_ioq *uq, struct uring_rq *rq)
{
	if (!uq->pending && uring_try_issue(uq, rq))
		return;
	rq->next = NULL;
	*uq->pending_tail = rq;
	uq->pending_tail = &rq->next;
}

static void uring_issue_pending(struct uring_ioq *uq)
{
	while (uq->pending) {
		struct uring_rq *rq = uq->pending;

		if (!uring_try_issue(uq, rq))
			return;
		uq->pending = rq->next;
		if (!uq->pending)
			uq->pending_tail = &uq->pending;
	}
}

/* Would @rq fit under the cap?  One at a time always does. */
static bool uring_async_fits(const struct uring_ioq *uq,
			     const struct uring_rq *rq)
{
	uint64_t after = uq->async_bytes + rq->bio->bi_iter.bi_size;

	return !uq->async_bytes || after <= URING_ASYNC_MAX_BYTES;
}

static void uring_issue_counted(struct uring_ioq *uq, struct uring_rq *rq)
{
	rq->async_bytes = rq->bio->bi_iter.bi_size;
	uq->async_bytes += rq->async_bytes;
	uring_issue(uq, rq);
}

/* An async read or write: issued now if the cap allows, else queued. */
static void uring_issue_async(struct uring_ioq *uq, struct uring_rq *rq)
{
	if (!uq->async_wait && uring_async_fits(uq, rq)) {
		uring_issue_counted(uq, rq);
		return;
	}
	rq->next = NULL;
	*uq->async_wait_tail = rq;
	uq->async_wait_tail = &rq->next;
}

/* Room under the cap again: the waiting ones, in order. */
static void uring_issue_async_waiting(struct uring_ioq *uq)
{
	while (uq->async_wait && uring_async_fits(uq, uq->async_wait)) {
		struct uring_rq *rq = uq->async_wait;

		uq->async_wait = rq->next;
		if (!uq->async_wait)
			uq->async_wait_tail = &uq->async_wait;
		uring_issue_counted(uq, rq);
	}
}

static void uring_submit(struct ioq *q, struct file_target *ft,
			 struct bio *bio)
{
	struct uring_ioq *uq = to_uq(q);
	struct uring_rq *rq = rq_get(uq);

	if (unlikely(!rq || (bio_op(bio) == REQ_OP_WRITE_ZEROES &&
			     !zero_buf()))) {
		if (rq)
			rq_put(uq, rq);
		bio_io_error(bio, -ENOMEM);
		return;
	}
	rq->bio = bio;
	rq->ft = ft;
	/*
	 * Page-cache hits are copied inside io_uring_submit, on this thread:
	 * past the period's inline budget (ioq_set_inline_budget), or when
	 * asked, they go to io_uring's async workers instead.
	 */
	rq->async = bio_has_data(bio) &&
		    ((bio->bi_opf & REQ_ASYNC) ||
		     !ioq_inline_now(q, bio->bi_iter.bi_size));
	rq->syncing = false;
	rq->zdone = 0;
	rq->skew = 0;
	rq->zstep = zero_first_step(bio);
	rq->async_bytes = 0;
	q->inflight++;
	ioq_hints_add(q, bio, 1);
	if (rq->async) {
		uring_issue_async(uq, rq);
		return;
	}
	uring_issue(uq, rq);
}

static void rq_end(struct uring_ioq *uq, struct uring_rq *rq, int err)
{
	struct bio *bio = rq->bio;
	struct file_target *ft = rq->ft;

	uq->q.inflight--;
	ioq_hints_add(&uq->q, bio, -1);
	uq->async_bytes -= rq->async_bytes;
	rq_put(uq, rq);
	if (err)
		file_report_error(ft, bio, err);
	bio_endio(bio, bio->bi_iter.bi_size, err);
}

/* Discard / write-zeroes: one step of the ladder finished with @res. */
static void rq_zero_done(struct uring_ioq *uq, struct uring_rq *rq, int res)
{
	struct bio *bio = rq->bio;

	if (rq->syncing) {
		rq_end(uq, rq, res < 0 ? res : 0);
		return;
	}
	if (res < 0) {
		if (rq->zstep == ZS_WRITE || !zero_unsupported(res)) {
			rq_end(uq, rq, res);
			return;
		}
		rq->zstep = zero_next_step(bio, rq->zstep);
		if (rq->zstep == ZS_DONE || rq->zstep == ZS_FAIL) {
			rq_end(uq, rq, rq->zstep == ZS_FAIL ? -EOPNOTSUPP : 0);
			return;
		}
		uring_issue(uq, rq);
		return;
	}
	if (rq->zstep != ZS_WRITE && zero_step_done(rq->zstep) != ZS_DONE) {
		rq->zstep = zero_step_done(rq->zstep);
		uring_issue(uq, rq);
		return;
	}
	if (rq->zstep == ZS_WRITE) {
		if (res == 0) {
			rq_end(uq, rq, -EIO);
			return;
		}
		rq->zdone += (uint32_t)res;
		if (rq->zdone < bio->bi_iter.bi_size) {
			uring_issue(uq, rq);
			return;
		}
	}
	if (bio->bi_opf & REQ_FUA) {
		rq->syncing = true;
		uring_issue(uq, rq);
		return;
	}
	rq_end(uq, rq, 0);
}

static void rq_complete(struct uring_ioq *uq, struct uring_rq *rq, int res)
{
	struct bio *bio = rq->bio;

	switch (bio_op(bio)) {
	case REQ_OP_READ:
	case REQ_OP_WRITE:
		if (unlikely(res == -EAGAIN || res == -EINTR)) {
			uring_issue(uq, rq);
			return;
		}
		if (unlikely(res < 0)) {
			rq_end(uq, rq, res);
			return;
		}
		if (unlikely(res == 0)) {
			if (bio_op(bio) == REQ_OP_WRITE || rq->ft->eof_error) {
				rq_end(uq, rq, -EIO);
				return;
			}
			/* A member shorter than its share reads as zeros. */
			bio_iter_zero(bio, bio->bi_iter);
			rq_end(uq, rq, 0);
			return;
		}
		if ((unsigned int)res < bio->bi_iter.bi_size) {
			/* Short: account what was done, issue the rest. */
			rq->skew += (uint32_t)res & (SECTOR_SIZE - 1);
			bio_endio(bio, (unsigned int)res, 0);
			uring_issue(uq, rq);
			return;
		}
		rq_end(uq, rq, 0);
		return;
	case REQ_OP_FLUSH:
		rq_end(uq, rq, res < 0 ? res : 0);
		return;
	case REQ_OP_CACHE: /* a hint: its failure is nobody's error */
		rq_end(uq, rq, 0);
		return;
	default:
		rq_zero_done(uq, rq, res);
		return;
	}
}

static void uring_poll_retry(struct uring_ioq *uq);

static int uring_flush(struct ioq *q)
{
	struct uring_ioq *uq = to_uq(q);
	int r;

	/* Polls first: a few, each maybe waited for by many requests. */
	if (unlikely(uq->arm_waiting || uq->remove_waiting))
		uring_poll_retry(uq);
	uring_issue_pending(uq);
	if (!uq->queued)
		return 0;
	r = io_uring_submit(&uq->ring);
	if (r < 0)
		return r;
	uq->queued = 0;
	return 0;
}

/*
 * Sockets (struct ioq_poll): one one-shot POLL_ADD per direction wanted,
 * its user data the poll's ref with the low bits telling it from a
 * uring_rq (malloc'd, so 16-aligned) and giving the direction.  The kernel
 * points at the ref, never at the poll: ioq_poll_del detaches the ref and
 * cancels what is out, so the poll may be freed, or set on a new fd, at
 * once; the ref goes with the last of its completions (or with the ring).
 * A direction that finds no SQE (the SQ ring full, or as much in the
 * kernel as the CQ ring holds) waits on a list for the next flush or
 * reap: a poll is never dropped for want of room.
 */
#define URING_POLL_TAG 1u
#define URING_POLL_OUT 2u
#define URING_POLL_REMOVE ((uintptr_t)URING_POLL_TAG) /* no poll: ignore */

struct uring_poll_ref {
	struct ioq_poll *p; /* NULL once deleted: completions go nowhere */
	unsigned int armed; /* directions with a POLL_ADD in the kernel */
	unsigned int remove_wait; /* deleted: POLL_REMOVEs not yet sent */
	struct uring_poll_ref *next, **pprev; /* deleted: in uq->detached */
};

/*
 * An SQE for a poll, or NULL: the caller's poll waits for the next flush
 * or reap.  Under the same cap as the requests' (uring_try_issue): a burst
 * of sockets becoming ready must not overflow the CQ ring either.
 */
static struct io_uring_sqe *uring_sqe_now(struct uring_ioq *uq)
{
	struct io_uring_sqe *sqe;

	if (unlikely(uq->in_kernel >= uq->cq_entries))
		return NULL;
	sqe = io_uring_get_sqe(&uq->ring);
	if (!sqe) {
		io_uring_submit(&uq->ring);
		uq->queued = 0;
		sqe = io_uring_get_sqe(&uq->ring);
	}
	if (sqe) {
		uq->queued++;
		uq->in_kernel++;
	}
	return sqe;
}

static void *poll_data(struct uring_poll_ref *ref, unsigned int ev)
{
	return (void *)((uintptr_t)ref | URING_POLL_TAG |
			(ev == POLLOUT ? URING_POLL_OUT : 0));
}

/*
 * Arm the directions of @want that @p->events asks for and the kernel
 * lacks.  One without an SQE waits in uq->arm_waiting (@p->arm_wait, set
 * only while @p is on that list).
 */
static int uring_poll_arm(struct uring_ioq *uq, struct ioq_poll *p,
			  unsigned int want)
{
	struct uring_poll_ref *ref = p->ref;

	if (!ref) {
		ref = calloc(1, sizeof(*ref));
		if (!ref)
			return -ENOMEM;
		ref->p = p;
		p->ref = ref;
	}
	for (unsigned int d = 0; d < 2; d++) {
		unsigned int ev = d ? POLLOUT : POLLIN;
		struct io_uring_sqe *sqe;

		if (!(want & p->events & ev) || (ref->armed & ev))
			continue;
		sqe = uring_sqe_now(uq);
		if (!sqe) {
			if (!p->arm_wait) {
				p->arm_next = uq->arm_waiting;
				uq->arm_waiting = p;
			}
			p->arm_wait |= ev;
			continue;
		}
		io_uring_prep_poll_add(sqe, p->fd, ev);
		io_uring_sqe_set_data(sqe, poll_data(ref, ev));
		ref->armed |= ev;
	}
	return 0;
}

/* Ask the kernel to cancel what @ref (deleted) has out. */
static void uring_poll_cancel(struct uring_ioq *uq,
			      struct uring_poll_ref *ref, unsigned int dirs)
{
	for (unsigned int d = 0; d < 2; d++) {
		unsigned int ev = d ? POLLOUT : POLLIN;
		struct io_uring_sqe *sqe;

		if (!(dirs & ref->armed & ev))
			continue;
		sqe = uring_sqe_now(uq);
		if (!sqe) {
			/* Until it is sent, the POLL_ADD holds the socket. */
			ref->remove_wait |= ev;
			uq->remove_waiting = true;
			continue;
		}
		ref->remove_wait &= ~ev;
		io_uring_prep_poll_remove(sqe, (uintptr_t)poll_data(ref, ev));
		io_uring_sqe_set_data(sqe, (void *)URING_POLL_REMOVE);
	}
}

/* What waited for an SQE: armed, or cancelled, now if there is room. */
static void uring_poll_retry(struct uring_ioq *uq)
{
	struct ioq_poll *list = uq->arm_waiting;

	uq->arm_waiting = NULL;
	while (list) {
		struct ioq_poll *p = list;
		unsigned int want = p->arm_wait;

		list = p->arm_next;
		p->arm_wait = 0;
		/* Its ref is there: only the SQE can be missing again. */
		(void)uring_poll_arm(uq, p, want);
	}
	if (!uq->remove_waiting)
		return;
	uq->remove_waiting = false;
	for (struct uring_poll_ref *ref = uq->detached; ref; ref = ref->next)
		if (ref->remove_wait)
			uring_poll_cancel(uq, ref, ref->remove_wait);
}

static void uring_poll_ref_free(struct uring_poll_ref *ref)
{
	*ref->pprev = ref->next;
	if (ref->next)
		ref->next->pprev = ref->pprev;
	free(ref);
}

static void uring_poll_done(struct uring_ioq *uq, uintptr_t data, int res)
{
	struct uring_poll_ref *ref =
		(struct uring_poll_ref *)(data & ~(uintptr_t)3);
	unsigned int ev = data & URING_POLL_OUT ? POLLOUT : POLLIN;
	struct ioq_poll *p;

	if (!ref)
		return; /* a POLL_REMOVE's own completion */
	ref->armed &= ~ev;
	p = ref->p;
	if (!p) {
		ref->remove_wait &= ~ev;
		if (!ref->armed)
			uring_poll_ref_free(ref);
		return;
	}
	/*
	 * We cancel only what was deleted: this one the kernel cancelled on
	 * its own, and its owner still waits for it.
	 */
	if (res == -ECANCELED) {
		(void)uring_poll_arm(uq, p, ev);
		return;
	}
	/* An error on the socket: its owner learns it by reading. */
	p->fn(p, res < 0 ? (unsigned int)(POLLERR | ev) : (unsigned int)res);
}

static int uring_poll_set(struct ioq *q, struct ioq_poll *p)
{
	return uring_poll_arm(to_uq(q), p, POLLIN | POLLOUT);
}

static void uring_poll_del(struct ioq *q, struct ioq_poll *p)
{
	struct uring_ioq *uq = to_uq(q);
	struct uring_poll_ref *ref = p->ref;

	if (p->arm_wait) {
		struct ioq_poll **pp = &uq->arm_waiting;

		while (*pp != p)
			pp = &(*pp)->arm_next;
		*pp = p->arm_next;
		p->arm_wait = 0;
	}
	p->ref = NULL;
	if (ref && !ref->armed) {
		free(ref);
	} else if (ref) {
		ref->p = NULL;
		ref->next = uq->detached;
		if (ref->next)
			ref->next->pprev = &ref->next;
		ref->pprev = &uq->detached;
		uq->detached = ref;
		uring_poll_cancel(uq, ref, POLLIN | POLLOUT);
	}
	/*
	 * A POLL_ADD not yet submitted names the fd by number: it must
	 * reach the kernel before the fd is closed (and its number reused).
	 */
	if (uq->queued && io_uring_submit(&uq->ring) >= 0)
		uq->queued = 0;
}

static int uring_reap(struct ioq *q)
{
	struct uring_ioq *uq = to_uq(q);
	struct io_uring_cqe *cqe;
	unsigned int head, n, total = 0;
	uint64_t v;

	/*
	 * Only the kernel signals this fd (inline completions skip it), so
	 * with nothing in the kernel there is nothing to drain.
	 */
	if (uq->efd >= 0 && uq->in_kernel)
		(void)!read(uq->efd, &v, sizeof(v));
	do {
		n = 0;
		io_uring_for_each_cqe(&uq->ring, head, cqe) {
			uintptr_t data = (uintptr_t)io_uring_cqe_get_data(cqe);

			uq->in_kernel--;
			if (unlikely(data & URING_POLL_TAG))
				uring_poll_done(uq, data, cqe->res);
			else
				rq_complete(uq, (struct uring_rq *)data,
					    cqe->res);
			n++;
		}
		io_uring_cq_advance(&uq->ring, n);
		total += n;
		/* Belt and braces: pull back anything that overflowed. */
		if (!n && io_uring_cq_has_overflow(&uq->ring) &&
		    io_uring_get_events(&uq->ring) == 0)
			n = 1;
	} while (n);
	if (unlikely(uq->arm_waiting || uq->remove_waiting))
		uring_poll_retry(uq);
	uring_issue_async_waiting(uq);
	uring_issue_pending(uq);
	return (int)total;
}

static int uring_wait(struct ioq *q)
{
	struct uring_ioq *uq = to_uq(q);
	int r;

	r = uring_reap(q);
	if (r)
		return r;
	uring_issue_pending(uq);
	if (!q->inflight)
		return 0;
	if (unlikely(q->timers)) {
		int64_t ns = ioq_timer_next_ns(q);
		struct __kernel_timespec ts = { .tv_sec = ns / 1000000000,
						.tv_nsec = ns % 1000000000 };
		struct io_uring_cqe *cqe;

		/* Up to the next timer: ioq_wait's caller runs it then. */
		r = io_uring_submit_and_wait_timeout(&uq->ring, &cqe, 1, &ts,
						     NULL);
		if (r < 0 && r != -ETIME)
			return r;
	} else {
		r = io_uring_submit_and_wait(&uq->ring, 1);
		if (r < 0)
			return r;
	}
	uq->queued = 0;
	return uring_reap(q);
}

static int uring_event_fd(struct ioq *q)
{
	struct uring_ioq *uq = to_uq(q);
	int fd, r;

	if (uq->efd >= 0)
		return uq->efd;
	fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = io_uring_register_eventfd(&uq->ring, fd);
	if (r < 0) {
		close(fd);
		return r;
	}
	uq->efd = fd;
	uq->q.done_efd = fd;
	return fd;
}

static void uring_destroy(struct ioq *q)
{
	struct uring_ioq *uq = to_uq(q);

	while (uq->free_rqs) {
		struct uring_rq *rq = uq->free_rqs;

		uq->free_rqs = rq->next;
		free(rq);
	}
	/* With the ring go the completions the deleted polls' refs await. */
	while (uq->detached)
		uring_poll_ref_free(uq->detached);
	io_uring_queue_exit(&uq->ring);
	if (uq->efd >= 0)
		close(uq->efd);
	free(uq);
}

static const struct ioq_ops uring_ops = {
	.submit = uring_submit,
	.flush = uring_flush,
	.reap = uring_reap,
	.wait = uring_wait,
	.event_fd = uring_event_fd,
	.destroy = uring_destroy,
	.poll_set = uring_poll_set,
	.poll_del = uring_poll_del,
};

int uring_ioq_create(struct ioq **out, unsigned int depth)
{
	struct uring_ioq *uq = calloc(1, sizeof(*uq));
	int r;

	if (!uq)
		return -ENOMEM;
	if (depth > 4096)
		depth = 4096;
	r = io_uring_queue_init(depth, &uq->ring, 0);
	if (r < 0) {
		free(uq);
		return r;
	}
	ioq_init(&uq->q, &uring_ops, IOQ_IO_URING);
	uq->efd = -1;
	uq->cq_entries = uq->ring.cq.ring_entries;
	uq->pending_tail = &uq->pending;
	uq->async_wait_tail = &uq->async_wait;
	*out = &uq->q;
	return 0;
}
