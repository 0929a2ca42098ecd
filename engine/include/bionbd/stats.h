/* SPDX-License-Identifier: MIT */
/*
 * stats.h - I/O statistics of exports and members: requests, bytes and
 * errors per op, requests in flight, and latency histograms.
 *
 * Counting is per thread: each thread that accounts I/O keeps its own
 * counters for every statistics object it touched, written without atomic
 * read-modify-write or locks, so workers never share a cache line for
 * them.  A reader (a snapshot: the log, a JSON file, bioctl stat) adds
 * the threads' counters up under the registry's lock; a count may be one
 * request behind, never torn.  A thread's counters outlive it (they are
 * folded into the object at thread exit).
 *
 * Latency buckets are powers of two of microseconds: bucket 0 holds
 * latencies under 1 us, bucket b (b >= 1) those in [2^(b-1), 2^b) us; the
 * last bucket everything longer.
 */
#ifndef BIONBD_STATS_H
#define BIONBD_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <bionbd/bio.h>

#define IO_STATS_BUCKETS 32

/* Errors by kind: the NBD errors a client can tell apart, and the rest. */
enum io_stats_err {
	IOSE_EIO,
	IOSE_ENOSPC,
	IOSE_EPERM,
	IOSE_EINVAL,
	IOSE_ENOMEM,
	IOSE_EOVERFLOW,
	IOSE_ENOTSUP,
	IOSE_ESHUTDOWN,
	IOSE_OTHER,
	IOSE_NR,
};

struct io_stats_op {
	uint64_t requests; /* completed, failed or not */
	uint64_t bytes; /* of requests that succeeded */
	uint64_t errors[IOSE_NR];
	uint64_t lat_ns; /* sum of latencies */
	uint64_t hist[IO_STATS_BUCKETS];
};

struct io_stats_snap {
	struct io_stats_op op[REQ_OP_LAST]; /* by enum req_op */
	uint64_t inflight; /* started, not yet completed */
};

struct io_stats;

/*
 * A counter that one thread writes and other threads read: whole values,
 * without a locked read-modify-write (stats.c's shards, bionbd's
 * per-connection counts).
 */
static inline void io_stats_add(uint64_t *c, uint64_t v)
{
	__atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + v,
			 __ATOMIC_RELAXED);
}

static inline uint64_t io_stats_read(const uint64_t *c)
{
	return __atomic_load_n(c, __ATOMIC_RELAXED);
}

/**
 * io_stats_create - a statistics object named @name ("" allowed), under
 * @parent (NULL for a top one: an export; its members under it).
 * Returns NULL when out of memory: accounting against NULL does nothing.
 */
struct io_stats *io_stats_create(const char *name, struct io_stats *parent);

/** io_stats_destroy - unregister and free (NULL is fine). */
void io_stats_destroy(struct io_stats *st);

const char *io_stats_name(const struct io_stats *st);

/**
 * io_stats_start - one I/O of @st begins; returns its start time (ns on
 * the monotonic clock) for io_stats_done.
 */
uint64_t io_stats_start(struct io_stats *st);

/**
 * io_stats_done - the I/O begun at @start ended: @bytes moved (counted
 * only when @err is 0), @err 0 or -errno.  An @op of REQ_OP_LAST or more
 * (a request that turned out not to be one) only ends the in-flight count.
 */
void io_stats_done(struct io_stats *st, enum req_op op, uint64_t bytes,
		   int err, uint64_t start);

/**
 * io_stats_snapshot - the sum over every thread of @st's counters.
 */
void io_stats_snapshot(struct io_stats *st, struct io_stats_snap *out);

/**
 * io_stats_children - @st's children, in creation order, into @out (at
 * most @max); returns how many there are.  They stay valid while @st's
 * owner keeps the volume open.
 */
unsigned int io_stats_children(struct io_stats *st, struct io_stats **out,
			       unsigned int max);

/**
 * io_stats_percentile - the latency under which @p (0..1) of @o's requests
 * completed, in ns: the upper edge of the bucket it falls in.  0 when
 * there were none.
 */
uint64_t io_stats_percentile(const struct io_stats_op *o, double p);

/** io_stats_err_name - "EIO" ... "other" for an enum io_stats_err. */
const char *io_stats_err_name(enum io_stats_err e);

#endif /* BIONBD_STATS_H */
