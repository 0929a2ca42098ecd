// SPDX-License-Identifier: MIT
/*
 * engine-bench.c - drive bios through a striped volume and count them.
 *
 * The engine's throughput is only meaningful next to something that does
 * the same I/O without the bio layer, so this program is built to be run
 * beside fio on the same member files (engine-vs-fio.sh does that): same
 * block size, queue depth, pattern and a bounded runtime.
 *
 * Three ways of submitting, so that the threading choice documented in
 * ioq.h rests on a measurement:
 *
 *  async  one thread, one ioq, QD bios always in flight; each bio's end_io
 *         submits the next one.  This is the native server's shape (one
 *         loop, many requests in flight) and the one compared with fio.
 *  sync   T threads, each with its own ioq, each doing one submit_bio_wait
 *         at a time: an nbdkit worker thread (QD = T).  No thread hop.
 *  hop    T threads hand their bio to one engine thread that runs a libev
 *         loop over its ioq (ioq_ev.h) and then sleep on a condition
 *         variable until end_io wakes them: the alternative ioq.h rejects,
 *         one hop and one wake-up each way (QD = T).
 *
 * Output: a human summary and one "RESULT key=value ..." line for scripts.
 * A watchdog (SIGALRM) ends the process if the engine stops completing
 * bios, so a broken engine cannot hang a benchmark run.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <ev.h>

#include <bionbd/bio.h>
#include <bionbd/config.h>
#include <bionbd/ioq.h>
#include <bionbd/ioq_ev.h>
#include <bionbd/target.h>
#include <bionbd/volume.h>

#define MAX_THREADS 1024u
#define MAX_QD 65536u
#define MAX_RUNTIME_SECS 3600.0
/* Time a run may take beyond its runtime before the watchdog fires. */
#define WATCHDOG_GRACE_SECS 30

enum pattern { PAT_RANDREAD, PAT_RANDWRITE, PAT_READ, PAT_WRITE };

static const char *const pattern_names[] = {
	[PAT_RANDREAD] = "randread",
	[PAT_RANDWRITE] = "randwrite",
	[PAT_READ] = "read",
	[PAT_WRITE] = "write",
};

enum mode { MODE_ASYNC, MODE_SYNC, MODE_HOP };

static const char *const mode_names[] = {
	[MODE_ASYNC] = "async",
	[MODE_SYNC] = "sync",
	[MODE_HOP] = "hop",
};

struct bench_opts {
	enum mode mode;
	enum ioq_backend backend;
	enum pattern pattern;
	uint32_t bs_bytes;
	unsigned int qd; /* async mode */
	unsigned int threads; /* sync and hop modes */
	double runtime_secs;
	uint64_t chunk_bytes;
	uint64_t size_bytes; /* 0 = from the members */
	unsigned int ring_depth; /* 0 = sized from qd and bs */
	uint64_t seed;
	bool direct;
	bool no_inline;
	bool quiet;
	const char *const *members;
	unsigned int nr_members;
};

/* hop mode's engine thread; defined with its code below */
struct hop_engine;

/* What every mode reports; summed over threads. */
struct bench_stats {
	uint64_t ios;
	uint64_t bytes;
	uint64_t errors;
	int first_error;
};

static void stats_add_one(struct bench_stats *s, uint32_t bytes, int status)
{
	if (status) {
		if (!s->errors)
			s->first_error = status;
		s->errors++;
		return;
	}
	s->ios++;
	s->bytes += bytes;
}

static void stats_merge(struct bench_stats *to, const struct bench_stats *from)
{
	if (from->errors && !to->errors)
		to->first_error = from->first_error;
	to->ios += from->ios;
	to->bytes += from->bytes;
	to->errors += from->errors;
}

static double now_secs(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_secs(void)
{
	struct rusage ru;

	/* RUSAGE_SELF: all threads, including io_uring's io-wq workers. */
	if (getrusage(RUSAGE_SELF, &ru))
		return 0;
	return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
	       ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

/* -------- offsets -------- */

/*
 * Where the next I/O goes.  Random patterns draw a uniform block index
 * (no "random map" as fio keeps by default; the script turns fio's off too,
 * so both sides pick offsets the same way).  Sequential patterns walk the
 * volume and wrap at its end.
 */
struct offgen {
	bool random;
	uint64_t nr_blocks;
	uint64_t next_block;
	uint64_t rng;
	uint32_t bs_bytes;
};

static void offgen_init(struct offgen *g, const struct bench_opts *o,
			uint64_t vol_bytes, unsigned int stream,
			unsigned int nr_streams)
{
	g->random = o->pattern == PAT_RANDREAD || o->pattern == PAT_RANDWRITE;
	g->bs_bytes = o->bs_bytes;
	g->nr_blocks = vol_bytes / o->bs_bytes;
	/* Parallel sequential streams start evenly spread, as fio jobs do. */
	g->next_block = g->nr_blocks * stream / nr_streams;
	/* splitmix64 of seed and stream: distinct, never-zero xorshift state */
	uint64_t z = o->seed + 0x9e3779b97f4a7c15ull * (stream + 1);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	g->rng = (z ^ (z >> 31)) | 1;
}

static uint64_t offgen_next(struct offgen *g)
{
	uint64_t blk;

	if (g->random) {
		/* xorshift64*: a few cycles, plenty for picking blocks */
		g->rng ^= g->rng >> 12;
		g->rng ^= g->rng << 25;
		g->rng ^= g->rng >> 27;
		blk = (uint64_t)(((unsigned __int128)(g->rng *
						      0x2545f4914f6cdd1dull) *
				  g->nr_blocks) >>
				 64);
	} else {
		blk = g->next_block++;
		if (g->next_block == g->nr_blocks)
			g->next_block = 0;
	}
	return blk * g->bs_bytes;
}

/* -------- shared helpers -------- */

static unsigned int bench_op(const struct bench_opts *o)
{
	return (o->pattern == PAT_RANDWRITE || o->pattern == PAT_WRITE) ?
		       REQ_OP_WRITE :
		       REQ_OP_READ;
}

/*
 * Ring entries for @qd bios: a bio of bs bytes becomes at most
 * bs / chunk + 1 pieces (one more when it starts inside a chunk), and
 * a ring smaller than that would only measure the engine's overflow list.
 */
static unsigned int ring_for(const struct bench_opts *o, unsigned int qd)
{
	uint64_t pieces = o->bs_bytes / o->chunk_bytes + 2;
	uint64_t n = pieces * qd;

	if (o->ring_depth)
		return o->ring_depth;
	if (n < 8)
		n = 8;
	if (n > 4096)
		n = 4096;
	return (unsigned int)n;
}

/*
 * One I/O buffer, page aligned (O_DIRECT and io_uring both like that) and
 * touched now so that page faults are not part of the measurement.
 */
static void *alloc_buf(uint32_t bytes, unsigned int tag)
{
	void *buf;

	if (posix_memalign(&buf, BIO_PAGE_SIZE, bytes))
		return NULL;
	memset(buf, 0xa5 ^ (tag & 0xff), bytes);
	return buf;
}

/* A bio for one I/O of the benchmark: @buf as its single segment. */
static struct bio *bench_bio(const struct bench_opts *o, unsigned int op,
			     void *buf, uint64_t offset)
{
	struct bio *bio = bio_alloc(1, op);

	if (!bio)
		return NULL;
	if (bio_add_buf(bio, buf, o->bs_bytes)) {
		bio_put(bio);
		return NULL;
	}
	bio->bi_iter.bi_sector = offset >> SECTOR_SHIFT;
	return bio;
}

/* Start @n threads running @fn and a barrier that releases them together. */
struct thread_set {
	pthread_t *tids;
	unsigned int nr;
	pthread_barrier_t start;
};

static int threads_start(struct thread_set *ts, unsigned int n,
			 void *(*fn)(void *), void *args, size_t arg_size)
{
	int r;

	ts->tids = calloc(n, sizeof(*ts->tids));
	if (!ts->tids)
		return -ENOMEM;
	/* the workers and the timing thread */
	r = pthread_barrier_init(&ts->start, NULL, n + 1);
	if (r) {
		free(ts->tids);
		return -r;
	}
	for (ts->nr = 0; ts->nr < n; ts->nr++) {
		r = pthread_create(&ts->tids[ts->nr], NULL, fn,
				   (char *)args + ts->nr * arg_size);
		if (r) {
			/*
			 * The started ones are waiting on the barrier; they
			 * cannot be released without a full count, so give
			 * up on the whole process (a benchmark, not a lib).
			 */
			fprintf(stderr, "engine-bench: pthread_create: %s\n",
				strerror(r));
			exit(1);
		}
	}
	return 0;
}

static void threads_join(struct thread_set *ts)
{
	for (unsigned int i = 0; i < ts->nr; i++)
		pthread_join(ts->tids[i], NULL);
	pthread_barrier_destroy(&ts->start);
	free(ts->tids);
}

/* -------- async mode: one thread, QD in flight -------- */

struct async_bench;

struct async_slot {
	struct async_bench *ab;
	void *buf;
	struct async_slot *next_ready;
};

struct async_bench {
	const struct bench_opts *o;
	struct target *t;
	unsigned int op;
	struct offgen gen;
	struct bench_stats st;
	unsigned int outstanding;
	bool stopping;
	/*
	 * Nonzero while inside submit_bio.  A completion that arrives
	 * synchronously (an error, a target that finishes inline) must not
	 * submit again from there, or a fast enough target would recurse
	 * for the whole runtime; such slots wait on the ready list.
	 */
	unsigned int in_submit;
	struct async_slot *ready;
};

static void async_end_io(struct bio *bio);

static int async_submit(struct async_slot *s)
{
	struct async_bench *ab = s->ab;
	struct bio *bio;

	bio = bench_bio(ab->o, ab->op, s->buf, offgen_next(&ab->gen));
	if (!bio)
		return -ENOMEM;
	bio->bi_end_io = async_end_io;
	bio->bi_private = s;
	ab->outstanding++;
	ab->in_submit++;
	submit_bio(ab->t, bio);
	ab->in_submit--;
	return 0;
}

static void async_stop(struct async_bench *ab, int err)
{
	if (err && !ab->st.errors) {
		ab->st.first_error = err;
		ab->st.errors++;
	}
	ab->stopping = true;
}

/* Runs on the bench thread, from ioq_wait (or inline from submit_bio). */
static void async_end_io(struct bio *bio)
{
	struct async_slot *s = bio->bi_private;
	struct async_bench *ab = s->ab;
	int status = bio->bi_status;
	int r;

	stats_add_one(&ab->st, ab->o->bs_bytes, status);
	bio_put(bio);
	ab->outstanding--;
	/* A failing volume would otherwise spin through errors all runtime. */
	if (status)
		async_stop(ab, 0);
	if (ab->stopping)
		return;
	if (ab->in_submit) {
		s->next_ready = ab->ready;
		ab->ready = s;
		return;
	}
	r = async_submit(s);
	if (r)
		async_stop(ab, r);
}

static void async_drain_ready(struct async_bench *ab)
{
	while (ab->ready && !ab->stopping) {
		struct async_slot *s = ab->ready;
		int r;

		ab->ready = s->next_ready;
		r = async_submit(s);
		if (r)
			async_stop(ab, r);
	}
	ab->ready = NULL;
}

static int run_async(const struct bench_opts *o, struct target *t,
		     struct bench_stats *st, double *elapsed)
{
	struct async_bench ab = {
		.o = o,
		.t = t,
		.op = bench_op(o),
	};
	struct async_slot *slots;
	struct ioq *q;
	double start, deadline, now;
	int r;

	r = ioq_create(&q, o->backend, ring_for(o, o->qd));
	if (r) {
		fprintf(stderr, "engine-bench: ioq_create(%s): %s\n",
			ioq_backend_name(o->backend), strerror(-r));
		return r;
	}
	ioq_set_current(q);
	offgen_init(&ab.gen, o, t->size_bytes, 0, 1);

	slots = calloc(o->qd, sizeof(*slots));
	if (!slots) {
		r = -ENOMEM;
		goto out_ioq;
	}
	for (unsigned int i = 0; i < o->qd; i++) {
		slots[i].ab = &ab;
		slots[i].buf = alloc_buf(o->bs_bytes, i);
		if (!slots[i].buf) {
			r = -ENOMEM;
			goto out_slots;
		}
	}

	start = now_secs();
	deadline = start + o->runtime_secs;
	for (unsigned int i = 0; i < o->qd && !ab.stopping; i++) {
		r = async_submit(&slots[i]);
		if (r)
			async_stop(&ab, r);
	}
	async_drain_ready(&ab);

	/*
	 * Stop submitting at the deadline, then let what is in flight
	 * finish: the bios and buffers must outlive their I/O.
	 */
	now = start;
	while (ab.outstanding) {
		r = ioq_wait(q);
		if (r < 0) {
			fprintf(stderr, "engine-bench: ioq_wait: %s\n",
				strerror(-r));
			/* In-flight bios still point at our buffers. */
			exit(1);
		}
		async_drain_ready(&ab);
		now = now_secs();
		if (!ab.stopping && now >= deadline)
			ab.stopping = true;
	}
	*elapsed = now - start;
	*st = ab.st;
	r = 0;

out_slots:
	for (unsigned int i = 0; i < o->qd; i++)
		free(slots[i].buf);
	free(slots);
out_ioq:
	ioq_destroy(q);
	return r;
}

/* -------- sync mode: T threads, submit_bio_wait on their own ioq -------- */

static atomic_bool stop_flag;

struct worker {
	const struct bench_opts *o;
	struct target *t;
	struct thread_set *ts;
	unsigned int id;
	int setup_error;
	struct bench_stats st;
	/* hop mode */
	struct hop_engine *he;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
};

static void *sync_worker(void *arg)
{
	struct worker *w = arg;
	const struct bench_opts *o = w->o;
	unsigned int op = bench_op(o);
	struct offgen gen;
	struct ioq *q = NULL;
	void *buf;
	int r;

	offgen_init(&gen, o, w->t->size_bytes, w->id, o->threads);
	buf = alloc_buf(o->bs_bytes, w->id);
	if (!buf) {
		w->setup_error = -ENOMEM;
	} else {
		/* ring sized for one bio: this thread never has more */
		r = ioq_create(&q, o->backend, ring_for(o, 1));
		if (r)
			w->setup_error = r;
		else
			ioq_set_current(q);
	}
	pthread_barrier_wait(&w->ts->start);

	while (!w->setup_error &&
	       !atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
		struct bio *bio = bench_bio(o, op, buf, offgen_next(&gen));

		if (!bio) {
			stats_add_one(&w->st, 0, -ENOMEM);
			break;
		}
		r = submit_bio_wait(w->t, bio);
		bio_put(bio);
		stats_add_one(&w->st, o->bs_bytes, r);
		if (r)
			break;
	}

	if (q)
		ioq_destroy(q);
	bio_pool_drain();
	free(buf);
	return NULL;
}

/* -------- hop mode: T threads hand bios to one libev engine thread ------ */

/*
 * The engine thread owns the ioq and the loop; workers only touch the
 * hand-off list (under @lock) and ev_async_send, which is libev's one
 * thread-safe entry point.  Bios queue through bi_next, which belongs to
 * whoever currently owns the bio.
 */
struct hop_engine {
	const struct bench_opts *o;
	struct target *t;
	struct ev_loop *loop;
	ev_async kick;
	struct ioq_ev qev;
	pthread_mutex_t lock;
	struct bio *head;
	struct bio **tail;
	bool quit;
	int setup_error;
	pthread_barrier_t ready;
};

/* Engine thread: take everything handed over and submit it. */
static void hop_kick_cb(struct ev_loop *loop, ev_async *w, int revents)
{
	struct hop_engine *he = w->data;
	struct bio *list;
	bool quit;

	pthread_mutex_lock(&he->lock);
	list = he->head;
	he->head = NULL;
	he->tail = &he->head;
	quit = he->quit;
	pthread_mutex_unlock(&he->lock);

	while (list) {
		struct bio *bio = list;

		list = bio->bi_next;
		bio->bi_next = NULL;
		submit_bio(he->t, bio);
	}
	/* the ioq_ev prepare watcher flushes the batch before we sleep */
	if (quit)
		ev_break(loop, EVBREAK_ALL);
}

/* Engine thread, from the ioq_ev io watcher: wake the waiting worker. */
static void hop_end_io(struct bio *bio)
{
	struct worker *w = bio->bi_private;

	pthread_mutex_lock(&w->lock);
	w->done = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

static void *hop_engine_thread(void *arg)
{
	struct hop_engine *he = arg;
	struct ioq *q = NULL;
	int r;

	r = ioq_create(&q, he->o->backend, ring_for(he->o, he->o->threads));
	if (r)
		goto fail;
	ioq_set_current(q);
	he->loop = ev_loop_new(EVFLAG_AUTO);
	if (!he->loop) {
		r = -ENOMEM;
		goto fail;
	}
	r = ioq_ev_start(&he->qev, q, he->loop);
	if (r)
		goto fail;
	ev_async_init(&he->kick, hop_kick_cb);
	he->kick.data = he;
	ev_async_start(he->loop, &he->kick);

	pthread_barrier_wait(&he->ready);
	ev_run(he->loop, 0);

	ev_async_stop(he->loop, &he->kick);
	ioq_ev_stop(&he->qev, he->loop);
	ev_loop_destroy(he->loop);
	ioq_destroy(q);
	bio_pool_drain();
	return NULL;

fail:
	he->setup_error = r;
	if (he->loop)
		ev_loop_destroy(he->loop);
	he->loop = NULL;
	if (q)
		ioq_destroy(q);
	pthread_barrier_wait(&he->ready);
	return NULL;
}

static void *hop_worker(void *arg)
{
	struct worker *w = arg;
	struct hop_engine *he = w->he;
	const struct bench_opts *o = w->o;
	unsigned int op = bench_op(o);
	struct offgen gen;
	void *buf;

	offgen_init(&gen, o, w->t->size_bytes, w->id, o->threads);
	buf = alloc_buf(o->bs_bytes, w->id);
	if (!buf)
		w->setup_error = -ENOMEM;
	pthread_barrier_wait(&w->ts->start);

	while (!w->setup_error &&
	       !atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
		/*
		 * Allocated and put here, not on the engine thread, so that
		 * the per-thread bio cache stays balanced and what is
		 * measured is the hop itself.
		 */
		struct bio *bio = bench_bio(o, op, buf, offgen_next(&gen));
		int status;

		if (!bio) {
			stats_add_one(&w->st, 0, -ENOMEM);
			break;
		}
		bio->bi_end_io = hop_end_io;
		bio->bi_private = w;
		bio->bi_next = NULL;
		w->done = false;

		pthread_mutex_lock(&he->lock);
		*he->tail = bio;
		he->tail = &bio->bi_next;
		pthread_mutex_unlock(&he->lock);
		ev_async_send(he->loop, &he->kick);

		pthread_mutex_lock(&w->lock);
		while (!w->done)
			pthread_cond_wait(&w->cond, &w->lock);
		pthread_mutex_unlock(&w->lock);

		status = bio->bi_status;
		bio_put(bio);
		stats_add_one(&w->st, o->bs_bytes, status);
		if (status)
			break;
	}
	bio_pool_drain();
	free(buf);
	return NULL;
}

/* -------- the timed run for the threaded modes -------- */

static int run_threads(const struct bench_opts *o, struct target *t,
		       struct bench_stats *st, double *elapsed)
{
	struct hop_engine he = {
		.o = o,
		.t = t,
		.lock = PTHREAD_MUTEX_INITIALIZER,
	};
	struct thread_set ts;
	pthread_t engine_tid;
	struct worker *ws;
	struct timespec nap;
	double start;
	int r = 0;

	he.tail = &he.head;
	if (o->mode == MODE_HOP) {
		if (pthread_barrier_init(&he.ready, NULL, 2))
			return -ENOMEM;
		r = pthread_create(&engine_tid, NULL, hop_engine_thread, &he);
		if (r) {
			pthread_barrier_destroy(&he.ready);
			return -r;
		}
		pthread_barrier_wait(&he.ready);
		pthread_barrier_destroy(&he.ready);
		if (he.setup_error) {
			pthread_join(engine_tid, NULL);
			fprintf(stderr, "engine-bench: engine thread: %s\n",
				strerror(-he.setup_error));
			return he.setup_error;
		}
	}

	ws = calloc(o->threads, sizeof(*ws));
	if (!ws) {
		r = -ENOMEM;
		goto out_engine;
	}
	for (unsigned int i = 0; i < o->threads; i++) {
		ws[i].o = o;
		ws[i].t = t;
		ws[i].ts = &ts;
		ws[i].id = i;
		ws[i].he = &he;
		pthread_mutex_init(&ws[i].lock, NULL);
		pthread_cond_init(&ws[i].cond, NULL);
	}

	atomic_store(&stop_flag, false);
	r = threads_start(&ts, o->threads,
			  o->mode == MODE_HOP ? hop_worker : sync_worker, ws,
			  sizeof(*ws));
	if (r)
		goto out_ws;
	pthread_barrier_wait(&ts.start);
	start = now_secs();
	nap.tv_sec = (time_t)o->runtime_secs;
	nap.tv_nsec = (long)((o->runtime_secs - nap.tv_sec) * 1e9);
	while (nanosleep(&nap, &nap) && errno == EINTR)
		;
	atomic_store(&stop_flag, true);
	threads_join(&ts);
	*elapsed = now_secs() - start;

	memset(st, 0, sizeof(*st));
	for (unsigned int i = 0; i < o->threads; i++) {
		if (ws[i].setup_error && !r) {
			fprintf(stderr, "engine-bench: worker %u: %s\n", i,
				strerror(-ws[i].setup_error));
			r = ws[i].setup_error;
		}
		stats_merge(st, &ws[i].st);
	}

out_ws:
	for (unsigned int i = 0; i < o->threads; i++) {
		pthread_mutex_destroy(&ws[i].lock);
		pthread_cond_destroy(&ws[i].cond);
	}
	free(ws);
out_engine:
	if (o->mode == MODE_HOP) {
		/* every worker has its bio back, so nothing is in flight */
		pthread_mutex_lock(&he.lock);
		he.quit = true;
		pthread_mutex_unlock(&he.lock);
		ev_async_send(he.loop, &he.kick);
		pthread_join(engine_tid, NULL);
	}
	return r;
}

/* -------- command line -------- */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: engine-bench [options] MEMBER...\n"
		"  -m, --mode MODE        async (default), sync, hop\n"
		"  -e, --backend NAME     io_uring (default) or threads\n"
		"  -p, --pattern PAT      randread (default), randwrite, read, write\n"
		"  -b, --bs SIZE          block size (default 4K, multiple of 512)\n"
		"  -q, --qd N             async mode: bios in flight (default 32)\n"
		"  -j, --threads N        sync/hop modes: threads (default 16)\n"
		"  -t, --runtime SECS     measured time (default 5, may be fractional)\n"
		"  -c, --chunk SIZE       stripe chunk (default 64K)\n"
		"  -s, --size SIZE        volume size; creates/extends members (default:\n"
		"                         from the members)\n"
		"  -r, --ring N           ring entries per ioq (default: from qd and bs)\n"
		"  -S, --seed N           offset generator seed (default 1)\n"
		"  -d, --direct           open members with O_DIRECT\n"
		"  -n, --no-inline        use the backend even on tmpfs (no inline I/O)\n"
		"  -Q, --quiet            print only the RESULT line\n"
		"  -h, --help\n"
		"Prints IOPS and MiB/s, then one line\n"
		"  RESULT mode= backend= pattern= bs= qd= threads= members= chunk= secs= ios= iops= mibps= cpu_us_per_io= errors=\n");
}

static int parse_uint(const char *s, unsigned int min, unsigned int max,
		      unsigned int *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max)
		return -EINVAL;
	*out = (unsigned int)v;
	return 0;
}

static int parse_enum(const char *s, const char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(s, names[i]))
			return (int)i;
	return -1;
}

static void die_usage(const char *what, const char *arg)
{
	fprintf(stderr, "engine-bench: bad %s '%s'\n", what, arg);
	usage(stderr);
	exit(2);
}

static void parse_args(int argc, char **argv, struct bench_opts *o)
{
	static const struct option longopts[] = {
		{ "mode", required_argument, NULL, 'm' },
		{ "backend", required_argument, NULL, 'e' },
		{ "pattern", required_argument, NULL, 'p' },
		{ "bs", required_argument, NULL, 'b' },
		{ "qd", required_argument, NULL, 'q' },
		{ "threads", required_argument, NULL, 'j' },
		{ "runtime", required_argument, NULL, 't' },
		{ "chunk", required_argument, NULL, 'c' },
		{ "size", required_argument, NULL, 's' },
		{ "ring", required_argument, NULL, 'r' },
		{ "seed", required_argument, NULL, 'S' },
		{ "direct", no_argument, NULL, 'd' },
		{ "no-inline", no_argument, NULL, 'n' },
		{ "quiet", no_argument, NULL, 'Q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t v;
	char *end;
	int c, i;

	*o = (struct bench_opts){
		.mode = MODE_ASYNC,
		.backend = IOQ_IO_URING,
		.pattern = PAT_RANDREAD,
		.bs_bytes = 4096,
		.qd = 32,
		.threads = 16,
		.runtime_secs = 5,
		.chunk_bytes = STRIPE_DEFAULT_CHUNK,
		.seed = 1,
	};

	while ((c = getopt_long(argc, argv, "m:e:p:b:q:j:t:c:s:r:S:dnQh",
				longopts, NULL)) != -1) {
		switch (c) {
		case 'm':
			i = parse_enum(optarg, mode_names, 3);
			if (i < 0)
				die_usage("mode", optarg);
			o->mode = (enum mode)i;
			break;
		case 'e':
			if (ioq_backend_parse(optarg, &o->backend))
				die_usage("backend", optarg);
			break;
		case 'p':
			i = parse_enum(optarg, pattern_names, 4);
			if (i < 0)
				die_usage("pattern", optarg);
			o->pattern = (enum pattern)i;
			break;
		case 'b':
			/* a bio's bi_size is 32 bits; keep well inside it */
			if (parse_size(optarg, &v) || !v || v % SECTOR_SIZE ||
			    v > (1u << 30))
				die_usage("block size", optarg);
			o->bs_bytes = (uint32_t)v;
			break;
		case 'q':
			if (parse_uint(optarg, 1, MAX_QD, &o->qd))
				die_usage("queue depth", optarg);
			break;
		case 'j':
			if (parse_uint(optarg, 1, MAX_THREADS, &o->threads))
				die_usage("thread count", optarg);
			break;
		case 't':
			errno = 0;
			o->runtime_secs = strtod(optarg, &end);
			if (errno || end == optarg || *end ||
			    !(o->runtime_secs > 0) ||
			    o->runtime_secs > MAX_RUNTIME_SECS)
				die_usage("runtime", optarg);
			break;
		case 'c':
			if (parse_size(optarg, &o->chunk_bytes))
				die_usage("chunk", optarg);
			break;
		case 's':
			if (parse_size(optarg, &o->size_bytes))
				die_usage("size", optarg);
			break;
		case 'r':
			if (parse_uint(optarg, 1, 1u << 16, &o->ring_depth))
				die_usage("ring depth", optarg);
			break;
		case 'S':
			errno = 0;
			o->seed = strtoull(optarg, &end, 0);
			if (errno || end == optarg || *end)
				die_usage("seed", optarg);
			break;
		case 'n':
			o->no_inline = true;
			break;
		case 'd':
			o->direct = true;
			break;
		case 'Q':
			o->quiet = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			exit(2);
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "engine-bench: no member files given\n");
		usage(stderr);
		exit(2);
	}
	o->members = (const char *const *)&argv[optind];
	o->nr_members = (unsigned int)(argc - optind);
}

/* The engine stopped completing bios: say so and leave, don't hang. */
static void watchdog(int sig)
{
	static const char msg[] =
		"engine-bench: watchdog: run did not finish in time\n";
	ssize_t r = write(STDERR_FILENO, msg, sizeof(msg) - 1);

	(void)r;
	_exit(3);
}

int main(int argc, char **argv)
{
	struct volume_config cfg = { 0 };
	struct bench_stats st = { 0 };
	struct bench_opts o;
	struct target *vol;
	double elapsed = 0, cpu0, cpu, iops, mibps;
	char err[256] = "";
	unsigned int qd;
	int r;

	parse_args(argc, argv, &o);

	cfg.members = o.members;
	cfg.nr_members = o.nr_members;
	cfg.chunk_bytes = o.chunk_bytes;
	cfg.size_bytes = o.size_bytes;
	cfg.readonly = !op_is_write((enum req_op)bench_op(&o)) &&
		       !o.size_bytes;
	cfg.direct = o.direct;
	cfg.no_inline = o.no_inline;
	r = volume_open(&vol, &cfg, err, sizeof(err));
	if (r) {
		fprintf(stderr, "engine-bench: %s\n",
			err[0] ? err : strerror(-r));
		return 1;
	}
	if (vol->size_bytes < o.bs_bytes) {
		fprintf(stderr,
			"engine-bench: volume (%" PRIu64
			" bytes) smaller than one block\n",
			vol->size_bytes);
		target_destroy(vol);
		return 1;
	}

	qd = o.mode == MODE_ASYNC ? o.qd : o.threads;
	if (!o.quiet)
		printf("engine-bench: %s %s %s bs=%" PRIu32
		       " qd=%u threads=%u members=%u chunk=%" PRIu64
		       " volume=%" PRIu64 " MiB runtime=%.1fs\n",
		       mode_names[o.mode], ioq_backend_name(o.backend),
		       pattern_names[o.pattern], o.bs_bytes, qd,
		       o.mode == MODE_ASYNC ? 1 : o.threads, o.nr_members,
		       o.chunk_bytes, vol->size_bytes >> 20, o.runtime_secs);

	signal(SIGALRM, watchdog);
	alarm((unsigned int)o.runtime_secs + 1 + WATCHDOG_GRACE_SECS);

	cpu0 = cpu_secs();
	if (o.mode == MODE_ASYNC)
		r = run_async(&o, vol, &st, &elapsed);
	else
		r = run_threads(&o, vol, &st, &elapsed);
	cpu = cpu_secs() - cpu0;
	alarm(0);
	target_destroy(vol);
	bio_pool_drain();
	if (r)
		return 1;

	iops = elapsed > 0 ? st.ios / elapsed : 0;
	mibps = elapsed > 0 ? st.bytes / elapsed / (1 << 20) : 0;
	if (!o.quiet) {
		printf("  %" PRIu64 " I/Os in %.3f s: %.0f IOPS, %.1f MiB/s, "
		       "CPU %.0f%% (%.2f us/IO)\n",
		       st.ios, elapsed, iops, mibps,
		       elapsed > 0 ? 100 * cpu / elapsed : 0,
		       st.ios ? cpu * 1e6 / st.ios : 0);
		if (st.errors)
			printf("  %" PRIu64 " I/O errors, first: %s\n",
			       st.errors, strerror(-st.first_error));
	}
	printf("RESULT mode=%s backend=%s pattern=%s bs=%" PRIu32
	       " qd=%u threads=%u members=%u chunk=%" PRIu64
	       " secs=%.6f ios=%" PRIu64 " iops=%.1f mibps=%.2f"
	       " cpu_us_per_io=%.3f errors=%" PRIu64 "\n",
	       mode_names[o.mode], ioq_backend_name(o.backend),
	       pattern_names[o.pattern], o.bs_bytes, qd,
	       o.mode == MODE_ASYNC ? 1 : o.threads, o.nr_members,
	       o.chunk_bytes, elapsed, st.ios, iops, mibps,
	       st.ios ? cpu * 1e6 / st.ios : 0, st.errors);
	return st.errors ? 1 : 0;
}
