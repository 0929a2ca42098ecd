/* SPDX-License-Identifier: MIT */
/*
 * ioq.h - per-thread I/O queues: where file targets send their I/O and
 * where completions turn into bio_endio() calls.
 *
 * Every thread that submits bios owns one ioq and makes it current.  Two
 * backends sit behind the same interface:
 *
 *  - io_uring (default): the ioq is a ring.  SQEs are queued by submit_bio
 *    and pushed to the kernel in batches (ioq_flush, or a libev prepare
 *    watcher); CQEs are reaped on the owning thread.
 *  - threads: a shared pool of workers does preadv/pwritev/fdatasync/
 *    fallocate and hands each finished bio back to the ioq it came from
 *    through a locked list and the ioq's eventfd.
 *
 * Either way a bio completes on the thread that submitted it, so nothing
 * above the engine needs locks.
 *
 * Members on memory-backed file systems (tmpfs, ramfs) skip both: their
 * reads and writes are page copies that never wait for a device, tmpfs
 * cannot do them non-blocking (so io_uring would hand every one to a
 * kernel worker thread), and the submitting thread doing the copy itself
 * is cheaper than any hand-off.  Such bios still end in ioq_reap, never
 * inside submit_bio, so end_io callbacks do not nest.
 *
 * How a caller waits:
 *  - an event loop watches ioq_event_fd() and calls ioq_reap() (ioq_ev.h
 *    does this for libev);
 *  - a thread that has nothing else to do (an nbdkit worker) calls
 *    submit_bio_wait() (target.h), which submits and blocks in its own
 *    ring.  This was
 *    chosen over handing bios to one engine thread running a libev loop
 *    because it costs no thread hop and no wake-up in either direction:
 *    bench/engine-bench --mode sync vs --mode hop measured 2.6-3.4x the
 *    IOPS at about half the CPU per I/O (4K random reads, 4 and 16
 *    threads, 4-member stripe on tmpfs, io_uring with --no-inline).
 */
#ifndef BIONBD_IOQ_H
#define BIONBD_IOQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <bionbd/bio.h>

struct target;
struct ioq;

enum ioq_backend {
	IOQ_IO_URING = 0,
	IOQ_THREADS = 1,
};

/* "io_uring" / "threads" -> enum; returns 0 or -EINVAL. */
int ioq_backend_parse(const char *name, enum ioq_backend *out);
const char *ioq_backend_name(enum ioq_backend b);

/**
 * ioq_create - make an I/O queue for the calling thread
 * @backend: IOQ_IO_URING or IOQ_THREADS
 * @depth: ring entries (0 = 256; io_uring rounds up to a power of two and
 *         caps it at 4096).  More bios than that may be in flight; extra
 *         SQEs wait in userspace.
 *
 * Returns 0 or -errno; -ENOSYS/-EPERM when io_uring is not available.
 */
int ioq_create(struct ioq **out, enum ioq_backend backend, unsigned int depth);

/** ioq_destroy - must have nothing in flight (ioq_inflight() == 0). */
void ioq_destroy(struct ioq *q);

/** ioq_set_current - make @q the queue this thread's submissions use. */
void ioq_set_current(struct ioq *q);
struct ioq *ioq_current(void);

/*
 * CACHE bios of file members one queue lets its backend hold (readahead
 * off the submitting thread); more, or any on a memory-backed member, end
 * at once, successful and unheeded: a hint is worth less than the reads
 * it would queue ahead of.
 */
#define IOQ_MAX_HINTS 4u

/** ioq_inflight - backend operations started and not yet reaped. */
unsigned int ioq_inflight(const struct ioq *q);

/**
 * ioq_flush - push queued work to the kernel / the pool now
 * Returns 0 or -errno.
 */
int ioq_flush(struct ioq *q);

/**
 * ioq_reap - run the completions that are ready, without blocking
 * Returns the number of bios ended or advanced, or -errno.
 */
int ioq_reap(struct ioq *q);

/**
 * ioq_reap_done - ioq_reap without the copies that wait for the inline
 * budget (ioq_set_inline_budget): only what is finished already.  A loop
 * calls it, sends the replies that produced, then calls ioq_reap, so a
 * small request's reply never waits for another client's copies.
 */
int ioq_reap_done(struct ioq *q);

/**
 * ioq_has_ready - true when bios done inline wait for ioq_reap
 *
 * A loop must not block while this is true: those completions do not
 * always make the event fd readable again.
 */
bool ioq_has_ready(const struct ioq *q);

/**
 * ioq_wait - flush, then block until at least one completion was reaped
 * (or nothing is in flight).  Returns >= 0 or -errno.
 */
int ioq_wait(struct ioq *q);

/**
 * ioq_wait_for - ioq_wait until *@done, which an end_io run by the waits
 * sets; a failing wait is retried (what is in flight owns the caller's
 * buffers, so there is no returning early).  @q's own thread.
 */
void ioq_wait_for(struct ioq *q, const bool *done);

/**
 * ioq_set_inline_wakeup - whether bios done inline make ioq_event_fd()
 * readable (default on).  A loop that runs ioq_reap() before every block
 * (ioq_ev.h) turns it off and saves two system calls a batch.
 */
void ioq_set_inline_wakeup(struct ioq *q, bool on);

/**
 * ioq_set_inline_budget - bytes of inline copies (memory-backed members)
 * per reap period; 0 (the default) = no limit
 *
 * An event loop serving many clients sets it: a copy larger than
 * IOQ_INLINE_SMALL that finds the period's budget spent waits for the next
 * ioq_reap, which does the waiting ones first, in order.  So one client's
 * 32 MiB read is copied a slice per loop turn, and the 4 KiB request of
 * another client on the same loop is served between two slices instead of
 * after all of it.  ioq_has_ready() is true while copies wait.
 */
void ioq_set_inline_budget(struct ioq *q, size_t bytes);

/**
 * ioq_timer_next_ns - when the queue's next timer is due (delays a fault
 * rule holds bios for, fault.h): nanoseconds from now, 0 when due, -1 when
 * none.  An event loop wakes then and calls ioq_reap(); the event fd does
 * not become readable for timers.  ioq_wait() takes them into account.
 */
int64_t ioq_timer_next_ns(const struct ioq *q);

/**
 * ioq_event_fd - an eventfd that becomes readable when ioq_reap has work
 * The caller must not read it; ioq_reap drains it.  Returns the fd or -errno.
 */
int ioq_event_fd(struct ioq *q);

/*
 * A call onto a queue's own thread from any thread: how a thread hands
 * back work it parked for another (nbd/request.c's read-modify-writes
 * waiting for each other's edge sectors), so that its bios are submitted,
 * and end, where they belong.  The caller owns it and keeps it alive
 * until @fn has run.
 */
struct ioq_call {
	struct ioq_call *next; /* the queue's while posted */
	void (*fn)(struct ioq_call *c);
};

/**
 * ioq_call_expect - @q's own thread: an ioq_call_post() to @q will come
 *
 * Until its @fn has run, the call counts as in flight: ioq_wait() blocks
 * for it (and wakes for it), and an event loop's event fd becomes
 * readable when it is posted; should the queue fail to watch for the
 * post, a timer looks every 10 ms instead (ioq_timer_next_ns() tells
 * the loop when), logged once through target_notice.  Each expect is
 * answered by exactly one post.  Returns 0, or -errno when the wake-up
 * cannot be made (no eventfd: no post may come then).
 */
int ioq_call_expect(struct ioq *q);

/**
 * ioq_call_post - any thread: run @c->fn on @q's thread, at its next reap
 * (never inside this call, even on that thread).  Only after an
 * ioq_call_expect(@q) it answers.
 */
void ioq_call_post(struct ioq *q, struct ioq_call *c);

/**
 * ioq_pool_set_threads - size of the shared thread-pool backend (before the
 * first IOQ_THREADS queue is created; default 8).  Returns 0 or -EBUSY.
 */
int ioq_pool_set_threads(unsigned int n);

#endif /* BIONBD_IOQ_H */
