/* SPDX-License-Identifier: MIT */
/*
 * internal.h - what engine files share with each other and nobody else.
 */
#ifndef BIONBD_INTERNAL_H
#define BIONBD_INTERNAL_H

#ifndef BIONBD_INTERNAL
#error "internal.h is private to the engine; use <bionbd/...> headers"
#endif

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/uio.h>
#include <time.h>

#include <bionbd/bio.h>
#include <bionbd/ioq.h>
#include <bionbd/stats.h>
#include <bionbd/target.h>
#include <bionbd/trace.h>
#include <bionbd/volume.h>

#define container_of(ptr, type, member)                                        \
	((type *)((char *)(ptr) - offsetof(type, member)))

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define unlikely(x) __builtin_expect(!!(x), 0)
#define likely(x) __builtin_expect(!!(x), 1)

/* A regular file or block device, as the backends see it. */
struct file_target {
	struct target t;
	int fd;
	bool is_blockdev;
	bool readonly;
	bool inline_io; /* memory-backed: do the I/O in the submitter */
	bool eof_error; /* file_target_opts.eof_error */
	struct io_stats *stats; /* the member's counters, or NULL */
	/* Memory-backed files: no hole anywhere (file_dense in file.c). */
	atomic_bool dense;
	atomic_uint dense_looks;
	/*
	 * A second open of the member, for flushes only: the kernel reports a
	 * failed writeback once to each open file, so a FUA write's sync on
	 * @fd cannot take the report a later flush needs.  -1: flush on @fd.
	 */
	int sync_fd;
	/* A flush failed: every flush fails from then on (file_report_error). */
	atomic_bool sync_failed;
};

extern const struct target_ops file_target_ops;

static inline struct file_target *to_file_target(struct target *t)
{
	return container_of(t, struct file_target, t);
}

/*
 * The readahead a CACHE bio asks of a member (POSIX_FADV_WILLNEED from
 * @bio's offset): a hint of a whole volume is cut to its head, so that
 * one client's hint cannot keep the disk busy for seconds.
 */
#define FILE_CACHE_MAX_BYTES (8u << 20)

static inline off_t file_cache_bytes(const struct bio *bio)
{
	return bio->bi_iter.bi_size < FILE_CACHE_MAX_BYTES ?
		       (off_t)bio->bi_iter.bi_size :
		       (off_t)FILE_CACHE_MAX_BYTES;
}

/* The descriptor a flush of @ft syncs (see file_target.sync_fd). */
static inline int file_flush_fd(const struct file_target *ft)
{
	return ft->sync_fd >= 0 ? ft->sync_fd : ft->fd;
}

/*
 * Count @bio against member @t (its counters @stats, may be NULL) from now
 * until bio_endio (stats.h), once: not again when it comes back for the
 * rest of a short transfer.  Every target at the bottom calls it.
 */
static inline void member_acct_start(struct target *t, struct io_stats *stats,
				     struct bio *bio)
{
	if (bio->bi_flags & BIO_NO_ACCT)
		return;
	if (stats && !bio->bi_acct) {
		bio->bi_acct = stats;
		bio->bi_acct_bytes = bio->bi_iter.bi_size;
		bio->bi_acct_start = io_stats_start(stats);
	}
	/* Traced: the request's D event now, its C event in bio_endio. */
	if (unlikely(bio->bi_trace) && t->trace_id && !bio->bi_trace_obj) {
		bio->bi_trace_obj = t->trace_id;
		bio->bi_trace_off = bio_offset_bytes(bio);
		bio->bi_trace_bytes = bio->bi_iter.bi_size;
		bio->bi_trace_t0 = trace_bio_issue(bio, t->trace_id);
	}
}

static inline void file_acct_start(struct file_target *ft, struct bio *bio)
{
	member_acct_start(&ft->t, ft->stats, bio);
}

/*
 * How write-zeroes is carried out: a sequence of fallocate modes tried in
 * turn while the file system answers EOPNOTSUPP, ending with writing zero
 * buffers (unless REQ_NOFALLBACK).  One table serves both backends.
 *
 * A fast zero (REQ_NOFALLBACK) that is refused must leave the data as it
 * was (the NBD spec: "SHOULD NOT alter the contents ... when returning
 * NBD_ENOTSUP"), so it never punches before it knows the file can allocate
 * the range again: ZS_PROBE_ALLOC asks first, with a mode that changes no
 * data.
 */
enum zero_step {
	ZS_PUNCH, /* FALLOC_FL_PUNCH_HOLE | KEEP_SIZE */
	ZS_ZERO_RANGE, /* FALLOC_FL_ZERO_RANGE | KEEP_SIZE */
	ZS_PROBE_ALLOC, /* fast + NO_HOLE: can the file allocate at all? */
	ZS_PUNCH_THEN_ALLOC, /* punch, then allocate the range again */
	ZS_ALLOC, /* second half: fallocate(FALLOC_FL_KEEP_SIZE) */
	ZS_WRITE, /* pwrite from the zero buffer */
	ZS_FAIL, /* -EOPNOTSUPP: fast zero not possible */
	ZS_DONE, /* nothing more to do (advisory discard) */
};

/* First step for @bio (REQ_OP_WRITE_ZEROES or REQ_OP_DISCARD). */
enum zero_step zero_first_step(const struct bio *bio);
/* Next step after @step failed with -EOPNOTSUPP. */
enum zero_step zero_next_step(const struct bio *bio, enum zero_step step);
/* Next step after a fallocate @step succeeded; ZS_DONE when none. */
enum zero_step zero_step_done(enum zero_step step);
/* True when fallocate's -errno means "this mode is not supported here". */
bool zero_unsupported(int err);
/* fallocate mode for a fallocate step. */
int zero_step_mode(enum zero_step step);

/* A read-only buffer of zeros, ZERO_BUF_BYTES long, for ZS_WRITE. */
#define ZERO_BUF_BYTES (1u << 20)
const void *zero_buf(void);

/* Zero the data of a read bio from @iter on (a member's EOF). */
void bio_iter_zero(const struct bio *bio, struct bvec_iter iter);

/*
 * Build an iovec array for a data bio from @iter on; returns the count
 * (<= max).  Stops early when @max segments are filled; the caller issues
 * the rest after the partial completion.
 */
unsigned int bio_iter_to_iovec(const struct bio *bio, struct bvec_iter iter,
			       struct iovec *iov, unsigned int max);

/*
 * stripe.c: the part of [off, off + len) of a RAID-0 that lies on @member,
 * as one range of that member: from the first of its chunks the range
 * touches to the last.  False when the range misses the member.  The
 * mirror uses it for whole chunks too (their copies are RAID-0 positions).
 */
bool stripe_member_range(const struct stripe_geom *g, unsigned int member,
			 uint64_t off, uint64_t len, uint64_t *mstart,
			 uint64_t *mlen);

/*
 * volume.c: print a one-line message into @buf (if any) and return @err,
 * for the "return verr(errbuf, errlen, -EINVAL, ...)" of volume opening.
 */
int verr(char *buf, size_t len, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/*
 * remote.c, rbd.c: @member (an NBD URI, an RBD member) with the relative
 * paths it names joined to the absolute @dir (member_absolute, path.h).
 */
int remote_uri_absolute(const char *uri, const char *dir, char **out);
int rbd_member_absolute(const char *member, const char *dir, char **out);

/*
 * path.c: close @f, an open_memstream of @buf: 0 with the text in *@out
 * (the caller's), or @r (else -ENOMEM, when the stream failed) with
 * nothing kept.
 */
int memstream_end(FILE *f, char **buf, int r, char **out);

/* Nanoseconds on the monotonic clock: for timers. */
static inline uint64_t engine_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Seconds on the monotonic clock: for durations in messages. */
static inline double engine_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

struct sb_volume;

/*
 * sbvol.c: stack the superblock keeper (clean flag, flock, role states,
 * bitmap, resync, spares) on @inner, the stripe or mirror of volume @v;
 * @paths by role (only roles in service are opened); @spares checked
 * already; @timeout_ms for remote members' metadata calls.  On success it
 * owns @inner.
 */
int sbvol_create(struct target **out, struct target *inner,
		 const struct sb_volume *v, const char *const *paths,
		 const char *const *spares, unsigned int nr_spares,
		 const struct file_target_opts *fopts, unsigned int timeout_ms,
		 char *errbuf, size_t errlen);

/* ---- fault.c: fault and delay rules (fault.h) ---- */

struct fault_set;
struct fault_text;

/*
 * The rules of one volume, parsed and checked against its @nr_members
 * (roles); each one's seed is announced through target_notice, naming
 * @volume.  One reference, the caller's.  0 or -errno with a message.
 */
int fault_set_create(struct fault_set **out, const struct fault_text *rules,
		     unsigned int nr, unsigned int nr_members,
		     const char *volume, char *errbuf, size_t errlen);
void fault_set_put(struct fault_set *set);
/* Does a rule of @set name @member? */
bool fault_set_covers(const struct fault_set *set, unsigned int member);

/* The layout, to tell which volume bytes a member bio holds. */
struct fault_geom {
	unsigned int nr_members; /* N */
	unsigned int copies; /* K: 1 for RAID-0 */
	unsigned int chunk_shift;
	uint64_t data_offset;
};

bool fault_member_hits_volume(const struct fault_geom *g, unsigned int m,
			      uint64_t a, uint64_t len, uint64_t r0,
			      uint64_t r1);

/*
 * Stack @set's rules on member @member's target @below; owns @below on
 * success and takes a reference to @set.  0 or -ENOMEM.
 */
int fault_target_create(struct target **out, struct target *below,
			struct fault_set *set, unsigned int member,
			const struct fault_geom *g);

/*
 * rbd.c: between rbd_hold and rbd_release (nested), RBD images opened and
 * closed again stay open for the next opener: one volume's probes.
 */
void rbd_hold(void);
void rbd_release(void);

/* remote.c: the same for the connections of probes and remote mdevs. */
void remote_hold(void);
void remote_release(void);

/* remote.c, rbd.c: mdev_open (bionbd/mdev.h) for an NBD URI, an RBD image. */
struct mdev;
int remote_mdev_open(struct mdev **out, const char *uri, bool write,
		     unsigned int timeout_ms, char *why, size_t whylen);
int rbd_mdev_open(struct mdev **out, const char *member, bool write,
		  unsigned int timeout_ms, char *why, size_t whylen);

/* remote.c, rbd.c: the counters of such a member @t, NULL for another. */
struct io_stats *remote_target_stats(struct target *t);
struct io_stats *rbd_target_stats(struct target *t);

/* The counters of a member that is not a file (NULL if none). */
static inline struct io_stats *member_stats(struct target *t)
{
	struct io_stats *s = remote_target_stats(t);

	return s ? s : rbd_target_stats(t);
}

/* ---- fileio.c: file I/O shared by the file target and the backends ---- */


/*
 * file.c: count @t's I/O and name it in traces as @opts ask (what
 * file_target_open does last), once: for a spare opened uncounted at
 * start, when it takes a role over, so that it appears among the members
 * only then (docs/stats.md).
 */
void file_target_account(struct target *t,
			 const struct file_target_opts *opts);

/* Allocation extents of [off, off+len) of a file target into bio->bi_ext. */
int file_extents(struct file_target *ft, struct bio *bio);

/*
 * Carry out one whole bio on a file synchronously (thread pool backend),
 * with requeue on short I/O.  Returns 0 or -errno; does not end the bio's
 * byte count (the caller does that on the owning thread).
 */
int file_do_sync(struct file_target *ft, struct bio *bio);

/*
 * Do @bio on this thread now (a memory-backed member); it ends at the next
 * ioq_reap.  A long trim or zero does one piece (file_inline_cost) and
 * waits for a later period for the rest (ioq_inline_later).
 */
void file_inline(struct file_target *ft, struct ioq *q, struct bio *bio);

/* What file_inline(@bio) now charges a period's inline budget, in bytes. */
size_t file_inline_cost(const struct ioq *q, const struct bio *bio);

/*
 * @bio failed on @ft with @err: report it (target_report_error) and, if a
 * flush failed, fail the member's later flushes (see file.c).
 */
void file_report_error(struct file_target *ft, const struct bio *bio,
		       int err);

struct ioq_later;
struct ioq_poll;

/* Backend ops behind struct ioq. */
struct ioq_ops {
	void (*submit)(struct ioq *q, struct file_target *ft, struct bio *bio);
	int (*flush)(struct ioq *q);
	int (*reap)(struct ioq *q);
	int (*wait)(struct ioq *q);
	int (*event_fd)(struct ioq *q);
	void (*destroy)(struct ioq *q);
	int (*poll_set)(struct ioq *q, struct ioq_poll *p);
	void (*poll_del)(struct ioq *q, struct ioq_poll *p);
};

/*
 * A socket watched by an ioq (remote.c's connections): when it becomes
 * ready for what @events asks (POLLIN, POLLOUT), @fn runs on the queue's
 * thread during a reap, with the events seen.  One-shot: @fn (or whoever
 * changes @events) calls ioq_poll_set again to go on watching.  A blocked
 * ioq_wait and the event fd wake for it like for any completion, so a
 * target whose bios complete over a socket needs no thread of its own and
 * no event loop: the io_uring backend arms a POLL_ADD, the thread-pool
 * backend an epoll set behind its event fd.
 */
struct ioq_poll {
	int fd;
	unsigned int events; /* POLLIN | POLLOUT wanted */
	void (*fn)(struct ioq_poll *p, unsigned int revents);
	/* The backend's. */
	void *ref; /* io_uring: what its POLL_ADDs point at (uring.c) */
	unsigned int arm_wait; /* io_uring: directions waiting for an SQE */
	struct ioq_poll *arm_next; /* io_uring: in its list of those */
	bool added; /* threads: in the epoll set */
};

/*
 * Watch @p->fd for @p->events from now on: 0, or -errno when it cannot be
 * watched (out of memory, an fd epoll refuses).  A ring without a free SQE
 * is no failure: the poll is armed at the next flush or reap.
 */
int ioq_poll_set(struct ioq *q, struct ioq_poll *p);
/*
 * Stop watching @p->fd; call before closing it.  On return @p is the
 * caller's again: to free, or to set at once on another fd.  No callback
 * runs for what was armed before.
 */
void ioq_poll_del(struct ioq *q, struct ioq_poll *p);

/*
 * Per-queue state of a target (remote.c: its connection on this thread),
 * found by @key; ioq_destroy runs each one's @destroy, on the queue's
 * thread, before the backend goes.
 */
struct ioq_slot {
	struct ioq_slot *next;
	const void *key;
	void (*destroy)(struct ioq_slot *s);
};

void ioq_slot_add(struct ioq *q, struct ioq_slot *s);
void ioq_slot_remove(struct ioq *q, struct ioq_slot *s);

/*
 * A call back onto an ioq's own thread at a time (fault.c's delays): run
 * by the first reap at or after @deadline_ns.  Counts as in flight, so
 * ioq_wait() waits for it and the queue cannot be destroyed under it;
 * ioq_timer_next_ns() tells an event loop when to wake.
 */
struct ioq_timer {
	struct ioq_timer *next;
	uint64_t deadline_ns; /* engine_now_ns() clock */
	void (*fn)(struct ioq_timer *tm);
};

/*
 * A one-shot ioq_poll on an eventfd that must not go unwatched (others
 * post work behind it: completions, calls): when it cannot be armed again
 * (out of memory, a full ring), @tm looks at it every IOQ_WATCH_LOOK_NS
 * instead, while its owner still waits for posts, and tries again.  The
 * owner sets @tm.fn (which clears @tm_on, looks, and arms again) and
 * @what, which names it in the two notices.
 */
struct ioq_watch {
	struct ioq_timer tm;
	const char *what;
	bool unwatched; /* the last arm failed */
	bool tm_on;
};

#define IOQ_WATCH_LOOK_NS (10 * 1000 * 1000ull)

struct ioq {
	const struct ioq_ops *ops;
	enum ioq_backend backend;
	unsigned int inflight;
	/* Bios done inline, ended by the next ioq_reap (never recursively). */
	struct bio *done_head, **done_tail;
	/* Eventfd to poke when done_head fills, or -1; set by the backend. */
	int done_efd;
	bool inline_wakeup; /* see ioq_set_inline_wakeup */
	/*
	 * Inline copies a reap period may still do (see
	 * ioq_set_inline_budget; 0 budget = no limit), and the bios that
	 * found it spent, in order, for the next period.
	 */
	size_t inline_budget, inline_left;
	struct ioq_later *later_head, **later_tail, *later_free;
	/* Pending ioq_timer_add()s, earliest first (each counts in flight). */
	struct ioq_timer *timers;
	struct ioq_slot *slots;
	unsigned int hints; /* CACHE bios the backend holds (file_submit) */
	/*
	 * ioq_call_post: calls posted from any thread (under @call_lock),
	 * and the eventfd that wakes the queue's thread for them, watched
	 * through @call_poll while calls are expected (owner thread only:
	 * @calls_expected, @call_armed, @call_watch).  -1 until the first
	 * expect.  While it cannot be watched, @call_watch's timer looks at
	 * the list instead.
	 */
	pthread_mutex_t call_lock;
	struct ioq_call *calls;
	int call_efd;
	struct ioq_poll call_poll;
	unsigned int calls_expected;
	bool call_armed;
	struct ioq_watch call_watch;
};

/* The backend took (@n 1) or ended (@n -1) @bio: count it if a hint. */
static inline void ioq_hints_add(struct ioq *q, const struct bio *bio, int n)
{
	if (bio_op(bio) == REQ_OP_CACHE)
		q->hints += (unsigned int)n;
}

static inline struct ioq_slot *ioq_slot_find(struct ioq *q, const void *key)
{
	struct ioq_slot *s = q->slots;

	while (s && s->key != key)
		s = s->next;
	return s;
}

void ioq_timer_add(struct ioq *q, struct ioq_timer *tm);
/* Take @tm back before it ran; false when it was not pending. */
bool ioq_timer_del(struct ioq *q, struct ioq_timer *tm);

/**
 * ioq_watch_arm - ioq_poll_set(@q, @p), or when it fails, @w's timer
 * started (if @look: posts are still to come) to look at @p's eventfd
 * instead; one notice when it starts failing, one when it works again.
 * Returns ioq_poll_set's result.  @q's own thread.
 */
int ioq_watch_arm(struct ioq *q, struct ioq_poll *p, struct ioq_watch *w,
		  bool look);

/* The wait a blocking backend may do: -1 (none) or ms, rounded up. */
int ioq_timer_wait_ms(const struct ioq *q);

/*
 * Reads and writes this small are never held back, so a 4 KiB request does
 * not queue behind another client's megabytes: they ignore the inline
 * budget, and the thread pool takes them before larger work.
 */
#define IOQ_INLINE_SMALL (16u << 10)

static inline bool ioq_bio_small(const struct bio *bio)
{
	return bio_has_data(bio) && bio->bi_iter.bi_size <= IOQ_INLINE_SMALL;
}

/* End @bio with @err at the next reap; called from submit paths. */
void ioq_defer_end(struct ioq *q, struct bio *bio, int err);

/*
 * May an inline copy of @bytes run now?  Charges the budget if so; if
 * not, the caller hands the bio to ioq_inline_later.
 */
bool ioq_inline_now(struct ioq *q, size_t bytes);

/* Largest inline copy worth merging into one call (0 = no limit). */
static inline size_t ioq_inline_cap(const struct ioq *q)
{
	return q->inline_budget;
}

/* Do @bio inline at the next reap period (or now, out of memory). */
void ioq_inline_later(struct ioq *q, struct file_target *ft, struct bio *bio);

/*
 * For a target's unplug: how many of @bios (@nr > 0) from the first on
 * are one run that can go down as one request: the same op and flags,
 * each starting where the one before ends, @max_bytes in all at most (0:
 * no limit).  At least 1.
 */
static inline unsigned int bio_run_len(struct bio *const *bios,
				       unsigned int nr, uint64_t max_bytes)
{
	const struct bio *first = bios[0];
	uint64_t next = bio_offset_bytes(first) + first->bi_iter.bi_size;
	uint64_t len = first->bi_iter.bi_size;
	unsigned int j = 1;

	while (j < nr && bios[j]->bi_opf == first->bi_opf &&
	       bio_offset_bytes(bios[j]) == next &&
	       (!max_bytes || len + bios[j]->bi_iter.bi_size <= max_bytes)) {
		next += bios[j]->bi_iter.bi_size;
		len += bios[j]->bi_iter.bi_size;
		j++;
	}
	return j;
}

/* Common set-up of the generic part; backends call it first. */
void ioq_init(struct ioq *q, const struct ioq_ops *ops,
	      enum ioq_backend backend);

int uring_ioq_create(struct ioq **out, unsigned int depth);
int threads_ioq_create(struct ioq **out, unsigned int depth);

#endif /* BIONBD_INTERNAL_H */
