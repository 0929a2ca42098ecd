// SPDX-License-Identifier: MIT
/*
 * Description: the statistics counters (stats.h).  Four threads count
 * random mixes of ops, sizes and errors against one object and its two
 * children at once, then exit; the sums equal what each thread recorded
 * (so a thread's counts outlive it), nothing is in flight, and the
 * histograms hold every request.  While a thread holds a start without an
 * end, one is in flight; an end with an op that is not one only leaves
 * flight.  Errors land in their kind (ENOSPC, EDQUOT and EFBIG alike).
 * Latencies land in their power-of-two bucket and the percentiles read
 * the bucket edges.  A child destroyed leaves its parent's list.  Then
 * through a volume: every member bio of a striped read is counted on its
 * member, with its bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include <bionbd/bio.h>
#include <bionbd/ioq.h>
#include <bionbd/stats.h>
#include <bionbd/volume.h>

#include "bioio_sync.h"
#include "unit.h"

#define THREADS 4
#define OPS_PER_THREAD 20000

struct expect {
	uint64_t requests[REQ_OP_LAST], bytes[REQ_OP_LAST];
	uint64_t eio[REQ_OP_LAST], enospc[REQ_OP_LAST];
};

static struct io_stats *top, *kid[2];
static struct expect want[THREADS][3];

static void *counter(void *arg)
{
	unsigned int t = (unsigned int)(uintptr_t)arg;

	unit_seed_thread(t * 7919u + 1);
	for (int i = 0; i < OPS_PER_THREAD; i++) {
		unsigned int which = (unsigned int)rnd_below(3);
		struct io_stats *st = which ? kid[which - 1] : top;
		enum req_op op = (enum req_op)rnd_below(REQ_OP_LAST);
		uint64_t bytes = rnd_range(0, 1 << 20);
		unsigned int e = (unsigned int)rnd_below(10);
		int err = e == 0 ? -EIO : e == 1 ? -EDQUOT : 0;
		uint64_t start = io_stats_start(st);
		struct expect *x = &want[t][which];

		CHECK(start);
		io_stats_done(st, op, bytes, err, start);
		x->requests[op]++;
		if (!err)
			x->bytes[op] += bytes;
		else if (err == -EIO)
			x->eio[op]++;
		else
			x->enospc[op]++;
	}
	return NULL;
}

static void check_sum(struct io_stats *st, unsigned int which)
{
	struct io_stats_snap s;

	io_stats_snapshot(st, &s);
	CHECK_EQ(s.inflight, 0);
	for (unsigned int op = 0; op < REQ_OP_LAST; op++) {
		uint64_t r = 0, b = 0, eio = 0, nospc = 0, h = 0;

		for (unsigned int t = 0; t < THREADS; t++) {
			r += want[t][which].requests[op];
			b += want[t][which].bytes[op];
			eio += want[t][which].eio[op];
			nospc += want[t][which].enospc[op];
		}
		CHECK_EQ(s.op[op].requests, r);
		CHECK_EQ(s.op[op].bytes, b);
		CHECK_EQ(s.op[op].errors[IOSE_EIO], eio);
		CHECK_EQ(s.op[op].errors[IOSE_ENOSPC], nospc);
		CHECK_EQ(s.op[op].errors[IOSE_OTHER], 0);
		for (unsigned int k = 0; k < IO_STATS_BUCKETS; k++)
			h += s.op[op].hist[k];
		CHECK_EQ(h, r);
	}
}

static void case_threads(void)
{
	pthread_t tid[THREADS];
	struct io_stats *list[4];

	top = io_stats_create("vol", NULL);
	kid[0] = io_stats_create("a", top);
	kid[1] = io_stats_create("b", top);
	CHECK(top && kid[0] && kid[1]);
	CHECK_EQ(io_stats_children(top, list, 4), 2);
	CHECK_PTR_EQ(list[0], kid[0]);
	CHECK_PTR_EQ(list[1], kid[1]);
	CHECK(!strcmp(io_stats_name(kid[1]), "b"));
	for (unsigned int t = 0; t < THREADS; t++)
		CHECK_EQ(pthread_create(&tid[t], NULL, counter,
					(void *)(uintptr_t)t),
			 0);
	for (unsigned int t = 0; t < THREADS; t++)
		pthread_join(tid[t], NULL);
	check_sum(top, 0);
	check_sum(kid[0], 1);
	check_sum(kid[1], 2);
	io_stats_destroy(kid[0]);
	CHECK_EQ(io_stats_children(top, list, 4), 1);
	CHECK_PTR_EQ(list[0], kid[1]);
	io_stats_destroy(kid[1]);
	CHECK_EQ(io_stats_children(top, list, 4), 0);
	io_stats_destroy(top);
}

static uint64_t ago_ns(uint64_t ns)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec - ns;
}

static void case_inflight_buckets(void)
{
	struct io_stats *st = io_stats_create("x", NULL);
	struct io_stats_snap s;
	uint64_t t0, n;
	unsigned int b;

	t0 = io_stats_start(st);
	io_stats_snapshot(st, &s);
	CHECK_EQ(s.inflight, 1);
	io_stats_done(st, REQ_OP_LAST, 0, 0, t0);
	io_stats_snapshot(st, &s);
	CHECK_EQ(s.inflight, 0);
	CHECK_EQ(s.op[REQ_OP_READ].requests, 0);

	/* 100 reads of 3 us ([2, 4) us), one of 700 us ([512, 1024) us). */
	for (int i = 0; i < 100; i++) {
		(void)io_stats_start(st);
		io_stats_done(st, REQ_OP_READ, 4096, 0, ago_ns(3000));
	}
	(void)io_stats_start(st);
	io_stats_done(st, REQ_OP_READ, 4096, -ENOSPC, ago_ns(700000));
	(void)io_stats_start(st);
	io_stats_done(st, REQ_OP_WRITE, 512, -ESHUTDOWN, ago_ns(10));
	(void)io_stats_start(st);
	io_stats_done(st, REQ_OP_WRITE, 512, -EBADF, ago_ns(10));
	io_stats_snapshot(st, &s);
	CHECK_EQ(s.inflight, 0);
	CHECK_EQ(s.op[REQ_OP_READ].requests, 101);
	CHECK_EQ(s.op[REQ_OP_READ].bytes, 100 * 4096);
	/*
	 * "3 us ago" is taken just before the call: a thread preempted in
	 * between (a loaded CI machine) lands a few in the next bucket up.
	 */
	CHECK(s.op[REQ_OP_READ].hist[2] >= 90);
	/*
	 * One preempted for 13 us or more (ASan, 2 loaded CPUs: CI saw it)
	 * reached [16, 32) us; they all stay below the 700 us one.
	 */
	for (b = 2, n = 0; b < 10; b++)
		n += s.op[REQ_OP_READ].hist[b];
	CHECK_EQ(n, 100);
	CHECK_EQ(s.op[REQ_OP_READ].hist[10], 1);
	CHECK_EQ(s.op[REQ_OP_READ].errors[IOSE_ENOSPC], 1);
	CHECK(s.op[REQ_OP_READ].lat_ns >= 100 * 3000 + 700000);
	CHECK_EQ(io_stats_percentile(&s.op[REQ_OP_READ], 0.5), 4000);
	/*
	 * The 100th of 101: the last 3 us read, in whichever bucket; bucket
	 * b holds [1 << (b - 1), 1 << b) us and reports its upper end.
	 */
	for (b = 2, n = 0; n < 100; b++)
		n += s.op[REQ_OP_READ].hist[b];
	CHECK_EQ(io_stats_percentile(&s.op[REQ_OP_READ], 0.99),
		 1000u << (b - 1));
	CHECK_EQ(io_stats_percentile(&s.op[REQ_OP_READ], 0.999), 1024000);
	CHECK_EQ(io_stats_percentile(&s.op[REQ_OP_FLUSH], 0.5), 0);
	CHECK_EQ(s.op[REQ_OP_WRITE].errors[IOSE_ESHUTDOWN], 1);
	CHECK_EQ(s.op[REQ_OP_WRITE].errors[IOSE_OTHER], 1);
	CHECK_EQ(s.op[REQ_OP_WRITE].bytes, 0);
	CHECK(!strcmp(io_stats_err_name(IOSE_ENOTSUP), "ENOTSUP"));
	io_stats_destroy(st);
	/* NULL: nothing counted, nothing crashes. */
	CHECK_EQ(io_stats_start(NULL), 0);
	io_stats_done(NULL, REQ_OP_READ, 1, 0, 1);
}

/* A read over 3 chunks of a 2-member stripe: pieces on both members. */
static void case_volume(void)
{
	static char buf[3 * 65536];
	const char *tmp = getenv("TMPDIR");
	char dir[256], p0[300], p1[300];
	const char *members[2] = { p0, p1 };
	struct io_stats *st = io_stats_create("vol", NULL), *m[2];
	struct volume_config cfg = { .members = members, .nr_members = 2,
				     .stats = st };
	struct io_stats_snap s0, s1;
	struct target *t;
	struct ioq *q;
	char err[256];

	snprintf(dir, sizeof(dir), "%s/bionbd-stats-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	CHECK(mkdtemp(dir));
	snprintf(p0, sizeof(p0), "%s/m0", dir);
	snprintf(p1, sizeof(p1), "%s/m1", dir);
	for (int i = 0; i < 2; i++) {
		int fd = open(members[i], O_RDWR | O_CREAT, 0600);

		CHECK(fd >= 0);
		CHECK_EQ(ftruncate(fd, 1 << 20), 0);
		close(fd);
	}
	CHECK_EQ(ioq_create(&q, IOQ_THREADS, 0), 0);
	ioq_set_current(q);
	CHECK_EQ(volume_open(&t, &cfg, err, sizeof(err)), 0);
	CHECK_EQ(io_stats_children(st, m, 2), 2);
	CHECK(!strcmp(io_stats_name(m[0]), p0));
	/* Chunks 1, 2, 3: member 1, 0, 1. */
	CHECK_EQ(test_bio_io(t, REQ_OP_READ, 65536, sizeof(buf), buf), 0);
	CHECK_EQ(test_bio_io(t, REQ_OP_FLUSH, 0, 0, NULL), 0);
	io_stats_snapshot(m[0], &s0);
	io_stats_snapshot(m[1], &s1);
	CHECK_EQ(s0.op[REQ_OP_READ].requests, 1);
	CHECK_EQ(s0.op[REQ_OP_READ].bytes, 65536);
	/* Two bios, even where plugging sends them down as one I/O. */
	CHECK_EQ(s1.op[REQ_OP_READ].requests, 2);
	CHECK_EQ(s1.op[REQ_OP_READ].bytes, 2 * 65536);
	CHECK_EQ(s0.op[REQ_OP_FLUSH].requests, 1);
	CHECK_EQ(s1.op[REQ_OP_FLUSH].requests, 1);
	CHECK_EQ(s0.inflight + s1.inflight, 0);
	target_destroy(t);
	CHECK_EQ(io_stats_children(st, m, 2), 0);
	io_stats_destroy(st);
	ioq_set_current(NULL);
	ioq_destroy(q);
	unlink(p0);
	unlink(p1);
	rmdir(dir);
}

int main(void)
{
	unit_seed("stats");
	case_threads();
	case_inflight_buckets();
	case_volume();
	return 0;
}
