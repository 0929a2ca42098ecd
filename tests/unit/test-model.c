// SPDX-License-Identifier: MIT
/*
 * Description: randomized model test of a striped volume.  For each ioq
 * backend (io_uring, threads), N in {1, 2, 3, 4, 7} members and chunk in
 * {4 KiB, 64 KiB, 1 MiB}, random READ / WRITE (+FUA) / DISCARD /
 * WRITE_ZEROES (+NOUNMAP) / FLUSH / CACHE / EXTENTS bios -- sector aligned,
 * 512 B .. 2 MiB, not aligned to chunks, data in 1..8 segments of any byte
 * length scattered over a buffer with guard bytes between them -- run in
 * batches of several bios in flight against a flat in-memory copy of the
 * volume.  Every read is compared with the copy, every extent flagged zero
 * must be zero in it, bios past the end must fail with -ENOSPC (write,
 * write-zeroes) or -EINVAL (everything else), and at the end the member
 * files are compared byte for byte with the copy through the layout rule
 * written out here again (chunk k at member k % N, offset (k / N) * chunk),
 * not through stripe_map().
 *
 * Bios within a batch never overlap when one of them changes data, so the
 * result of a batch does not depend on completion order and the copy can
 * be updated at submission.
 *
 * Environment:
 *   MODEL_SEED     master seed (printed; default from the clock)
 *   MODEL_ITERS    bios over the whole run (default 18000), split evenly
 *                  between the 30 combinations
 *   MODEL_BACKEND, MODEL_MEMBERS, MODEL_CHUNK
 *                  run only matching combinations ("threads", "3",
 *                  "65536"); a combination's random stream depends only on
 *                  the seed and the combination, so a failure replays alone
 *                  with the same MODEL_SEED and MODEL_ITERS
 *   MODEL_TRACE=1  print every bio
 *
 * Exit 77 only when io_uring is unavailable (after the threads backend ran
 * and passed); any failure exits 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <bionbd/bio.h>
#include <bionbd/ioq.h>
#include <bionbd/target.h>
#include <bionbd/volume.h>

#define KiB 1024u
#define MiB (1024u * 1024u)

#define MAX_LEN (2 * MiB)
#define MAX_SEGS 8
#define MAX_BATCH 16
#define MAX_MEMBERS 7
#define GAP_MAX 64 /* guard bytes between two segments */
#define TAIL_GUARD 64 /* guard bytes after the last segment */
/* Room for a 4 KiB misaligned start, 2 MiB of data and every gap. */
#define ARENA_BYTES                                                            \
	((MAX_LEN + 2 * BIO_PAGE_SIZE + MAX_SEGS * GAP_MAX + TAIL_GUARD +      \
	  BIO_PAGE_SIZE - 1) &                                                 \
	 ~(BIO_PAGE_SIZE - 1))
#define NR_COMBOS 30
#define DEFAULT_ITERS 18000
#define WATCHDOG_SECS 60 /* one batch; generous even under ASan */
#define MAX_REPORTS 8 /* failures printed per combination */

static const unsigned int member_counts[] = { 1, 2, 3, 4, 7 };
static const uint32_t chunk_sizes[] = { 4 * KiB, 64 * KiB, 1 * MiB };
/*
 * Small depths make the io_uring backend queue SQEs in userspace and put
 * more requests in flight than its completion ring holds.
 */
static const unsigned int depths[] = { 0, 8, 64 };

/* ------------------------------------------------------------------ */
/* PRNG: splitmix64; tiny, and every seed gives a full-period stream. */

struct rng {
	uint64_t s;
};

static uint64_t rng_next(struct rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [0, n); n > 0. */
static uint64_t rng_below(struct rng *r, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)rng_next(r) * n) >> 64);
}

/* Uniform in [lo, hi]. */
static uint64_t rng_range(struct rng *r, uint64_t lo, uint64_t hi)
{
	return lo + rng_below(r, hi - lo + 1);
}

static bool rng_pct(struct rng *r, unsigned int pct)
{
	return rng_below(r, 100) < pct;
}

static void rng_fill(struct rng *r, uint8_t *p, size_t n)
{
	while (n >= 8) {
		uint64_t v = rng_next(r);

		memcpy(p, &v, 8);
		p += 8;
		n -= 8;
	}
	if (n) {
		uint64_t v = rng_next(r);

		memcpy(p, &v, n);
	}
}

/* ------------------------------------------------------------------ */

struct combo {
	enum ioq_backend backend;
	unsigned int nr;
	uint32_t chunk;
	unsigned int idx; /* stable: the seed of a combination depends on it */
};

struct model;

/* One bio of a batch and everything needed to check it afterwards. */
struct req {
	struct model *m;
	struct bio *bio;
	unsigned long nr; /* sequence number within the combination */
	unsigned int opf;
	sector_t sector;
	uint64_t off; /* bytes; saturated for the far-out-of-range cases */
	uint32_t len;
	int expect; /* 0, or the error a bio past the end must end with */
	bool sync; /* submit_bio_wait rather than submit_bio */
	unsigned int nseg;
	uint32_t seg_at[MAX_SEGS]; /* where each segment starts in arena */
	uint32_t seg_len[MAX_SEGS];
	uint32_t arena_used; /* guard bytes included */
	uint8_t fill; /* what a read buffer held before the read */
	uint8_t *arena;
	struct bio_extents ext;
	int status;
	unsigned int ended;
};

struct stats {
	unsigned long bios, batches, sync, max_batch;
	unsigned long reads, writes, fua, discards, zeroes, nounmap, flushes,
		caches, extents, oor;
	unsigned long ext_zero, ext_hole, ext_nr;
	unsigned long long read_bytes, write_bytes;
};

struct model {
	struct combo c;
	uint64_t seed;
	struct rng rng;
	struct ioq *q;
	unsigned int depth;
	struct target *vol;
	uint64_t size;
	uint8_t *ref;
	char dir[PATH_MAX - 32]; /* room for "/memberN" in path[] */
	char path[MAX_MEMBERS][PATH_MAX];
	struct req req[MAX_BATCH];
	unsigned int done; /* bios of the current batch that ended */
	unsigned long next_nr;
	unsigned long allocs, puts;
	unsigned int reports;
	struct stats st;
	bool failed;
};

static uint64_t master_seed;
static unsigned long iters_total = DEFAULT_ITERS;
static bool trace;
static pthread_t main_thread;
static char watchdog_msg[512];

static const uint8_t zeros[64 * KiB];

static void on_alarm(int sig)
{
	ssize_t r;

	(void)sig;
	/* Only async-signal-safe calls: a hung batch ends the run. */
	r = write(STDERR_FILENO, watchdog_msg, strlen(watchdog_msg));
	(void)r;
	_exit(1);
}

static const char *op_str(unsigned int opf, char *buf, size_t len)
{
	static const char *const names[REQ_OP_LAST] = {
		[REQ_OP_READ] = "READ",
		[REQ_OP_WRITE] = "WRITE",
		[REQ_OP_FLUSH] = "FLUSH",
		[REQ_OP_DISCARD] = "DISCARD",
		[REQ_OP_CACHE] = "CACHE",
		[REQ_OP_WRITE_ZEROES] = "WRITE_ZEROES",
		[REQ_OP_EXTENTS] = "EXTENTS",
	};

	snprintf(buf, len, "%s%s%s", names[opf & REQ_OP_MASK],
		 opf & REQ_FUA ? "|FUA" : "", opf & REQ_NOUNMAP ? "|NOUNMAP" : "");
	return buf;
}

static void combo_str(const struct combo *c, char *buf, size_t len)
{
	snprintf(buf, len, "backend=%s N=%u chunk=%u",
		 ioq_backend_name(c->backend), c->nr, c->chunk);
}

/* The layout rule, written out independently of stripe_map(). */
static void layout(const struct model *m, uint64_t vol_off,
		   unsigned int *member, uint64_t *member_off)
{
	uint64_t k = vol_off / m->c.chunk;

	*member = (unsigned int)(k % m->c.nr);
	*member_off = (k / m->c.nr) * m->c.chunk + vol_off % m->c.chunk;
}

static void __attribute__((format(printf, 3, 4)))
fail(struct model *m, const struct req *r, const char *fmt, ...)
{
	char cs[96], os[48];
	va_list ap;

	m->failed = true;
	if (++m->reports > MAX_REPORTS)
		return;
	combo_str(&m->c, cs, sizeof(cs));
	fprintf(stderr, "FAIL seed=%llu %s", (unsigned long long)master_seed,
		cs);
	if (r)
		fprintf(stderr,
			" bio#%lu %s sector=%llu offset=%llu length=%u nseg=%u%s",
			r->nr, op_str(r->opf, os, sizeof(os)),
			(unsigned long long)r->sector,
			(unsigned long long)r->off, r->len, r->nseg,
			r->sync ? " (submit_bio_wait)" : "");
	fputs(": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/*
 * Name the first differing byte by volume offset and by member, so a bug
 * report says whether the read or the write path went to the wrong place.
 */
static void report_mismatch(struct model *m, const struct req *r,
			    const char *what, uint64_t vol_off,
			    const uint8_t *got, const uint8_t *want, size_t n)
{
	size_t i, first = SIZE_MAX, last = 0, count = 0;
	unsigned int member;
	uint64_t moff;

	for (i = 0; i < n; i++) {
		if (got[i] == want[i])
			continue;
		if (first == SIZE_MAX)
			first = i;
		last = i;
		count++;
	}
	if (!count)
		return;
	layout(m, vol_off + first, &member, &moff);
	fail(m, r,
	     "%s: %zu bytes differ within volume [%llu, %llu]; first at volume offset %llu (member %u offset %llu): expected 0x%02x got 0x%02x",
	     what, count, (unsigned long long)(vol_off + first),
	     (unsigned long long)(vol_off + last),
	     (unsigned long long)(vol_off + first), member,
	     (unsigned long long)moff, want[first], got[first]);
}

/* First non-zero byte of p[0..n), or n. */
static size_t first_nonzero(const uint8_t *p, size_t n)
{
	size_t at = 0;

	while (at < n) {
		size_t step = n - at < sizeof(zeros) ? n - at : sizeof(zeros);

		if (memcmp(p + at, zeros, step)) {
			while (!p[at])
				at++;
			return at;
		}
		at += step;
	}
	return n;
}

static bool op_modifies(unsigned int opf)
{
	enum req_op op = (enum req_op)(opf & REQ_OP_MASK);

	return op == REQ_OP_WRITE || op == REQ_OP_DISCARD ||
	       op == REQ_OP_WRITE_ZEROES;
}

static bool op_has_data(unsigned int opf)
{
	enum req_op op = (enum req_op)(opf & REQ_OP_MASK);

	return op == REQ_OP_READ || op == REQ_OP_WRITE;
}

/* The part of the volume @r touches, clipped to the volume; may be empty. */
static void req_span(const struct model *m, const struct req *r,
		     uint64_t *lo, uint64_t *hi)
{
	uint64_t end = r->off + r->len < r->off ? UINT64_MAX : r->off + r->len;

	if ((r->opf & REQ_OP_MASK) == REQ_OP_FLUSH) {
		*lo = *hi = 0;
		return;
	}
	*lo = r->off < m->size ? r->off : m->size;
	*hi = end < m->size ? end : m->size;
}

/*
 * Two bios of one batch may overlap only if neither changes data.  A bio
 * past the end counts as changing what it covers: if the range check
 * failed to stop it, its effect must still be well defined.
 */
static bool conflicts(const struct model *m, unsigned int n,
		      const struct req *r)
{
	uint64_t lo, hi, lo2, hi2;
	bool mod = op_modifies(r->opf) || r->expect;
	unsigned int i;

	req_span(m, r, &lo, &hi);
	if (lo == hi)
		return false;
	for (i = 0; i < n; i++) {
		const struct req *o = &m->req[i];

		if (!mod && !op_modifies(o->opf) && !o->expect)
			continue;
		req_span(m, o, &lo2, &hi2);
		if (lo < hi2 && lo2 < hi)
			return true;
	}
	return false;
}

/* ------------------------------------------------------------------ */
/* Building bios */

static uint32_t pick_len(struct model *m)
{
	struct rng *g = &m->rng;
	uint64_t sectors, max = MAX_LEN / SECTOR_SIZE;

	switch (rng_below(g, 10)) {
	case 0:
	case 1:
	case 2:
		sectors = rng_range(g, 1, 16);
		break;
	case 3:
	case 4:
	case 5:
	case 6:
		/* Around a chunk: crosses zero, one or two boundaries. */
		sectors = rng_range(g, 1, 2 * m->c.chunk / SECTOR_SIZE);
		break;
	case 7:
	case 8:
		sectors = rng_range(g, 1, max);
		break;
	default:
		/* Whole chunks; the offset decides whether they are aligned. */
		sectors = m->c.chunk / SECTOR_SIZE *
			  rng_range(g, 1, 2 * m->c.nr);
		break;
	}
	if (sectors > max)
		sectors = max;
	return (uint32_t)(sectors * SECTOR_SIZE);
}

static uint64_t pick_off(struct model *m, uint32_t len)
{
	struct rng *g = &m->rng;
	uint64_t max = m->size - len, nchunks = m->size / m->c.chunk;
	int64_t off;

	switch (rng_below(g, 10)) {
	case 0:
	case 1:
	case 2:
	case 3:
	case 4:
		return rng_range(g, 0, max / SECTOR_SIZE) * SECTOR_SIZE;
	case 5:
	case 6:
	case 7: {
		/* Start or end a few sectors from a chunk boundary. */
		int64_t b = (int64_t)(rng_range(g, 1, nchunks - 1) *
				      m->c.chunk);
		int64_t d = (int64_t)rng_range(g, 0, 16) * SECTOR_SIZE;

		if (rng_pct(g, 50))
			off = rng_pct(g, 50) ? b - d : b + d;
		else
			off = b - (int64_t)len + (rng_pct(g, 50) ? d : -d);
		if (off < 0)
			off = 0;
		if ((uint64_t)off > max)
			off = (int64_t)max;
		return (uint64_t)off;
	}
	case 8:
		return 0;
	default:
		return max;
	}
}

/*
 * Cut @r->len into 1..8 segments -- either at sector multiples or at any
 * byte -- and lay them out in the arena with a random start (page aligned,
 * sector aligned or not at all) and gaps of guard bytes, some of them
 * empty so that two segments also sit back to back.
 */
static void build_segments(struct model *m, struct req *r)
{
	struct rng *g = &m->rng;
	uint32_t cuts[MAX_SEGS + 1], pos;
	unsigned int want = (unsigned int)rng_range(g, 1, MAX_SEGS);
	unsigned int n = 0, i, j;
	bool bytes = rng_pct(g, 50);

	if (!bytes && r->len / SECTOR_SIZE < 2)
		want = 1;
	cuts[n++] = 0;
	for (i = 1; i < want; i++)
		cuts[n++] = bytes ? (uint32_t)rng_range(g, 1, r->len - 1) :
				    (uint32_t)rng_range(g, 1,
							r->len / SECTOR_SIZE -
								1) *
					    SECTOR_SIZE;
	/* Insertion sort and drop duplicates: n is at most 8. */
	for (i = 1; i < n; i++) {
		uint32_t v = cuts[i];

		for (j = i; j > 0 && cuts[j - 1] > v; j--)
			cuts[j] = cuts[j - 1];
		cuts[j] = v;
	}
	for (i = 1, j = 1; i < n; i++)
		if (cuts[i] != cuts[j - 1])
			cuts[j++] = cuts[i];
	n = j;
	cuts[n] = r->len;

	switch (rng_below(g, 4)) {
	case 0:
		pos = 0;
		break;
	case 1:
		pos = (uint32_t)rng_below(g, 8) * SECTOR_SIZE;
		break;
	default:
		pos = (uint32_t)rng_below(g, BIO_PAGE_SIZE);
		break;
	}
	r->nseg = n;
	for (i = 0; i < n; i++) {
		r->seg_at[i] = pos;
		r->seg_len[i] = cuts[i + 1] - cuts[i];
		pos += r->seg_len[i];
		if (i + 1 < n)
			pos += rng_pct(g, 20) ? 0 :
						(uint32_t)rng_range(g, 1, GAP_MAX);
	}
	r->arena_used = pos + TAIL_GUARD;
	if (r->arena_used > ARENA_BYTES)
		abort(); /* the arena size above is wrong */
}

/* Choose the op of a bio that lies inside the volume. */
static unsigned int pick_op(struct rng *g)
{
	unsigned int x = (unsigned int)rng_below(g, 100);

	if (x < 34)
		return REQ_OP_READ;
	if (x < 60)
		return REQ_OP_WRITE;
	if (x < 65)
		return REQ_OP_WRITE | REQ_FUA;
	if (x < 72)
		return REQ_OP_DISCARD;
	if (x < 78)
		return REQ_OP_WRITE_ZEROES;
	if (x < 84)
		return REQ_OP_WRITE_ZEROES | REQ_NOUNMAP;
	if (x < 94)
		return REQ_OP_EXTENTS;
	if (x < 97)
		return REQ_OP_FLUSH;
	return REQ_OP_CACHE;
}

/* target.h: past the end, write and write-zeroes get -ENOSPC, else -EINVAL. */
static int oor_error(unsigned int opf)
{
	enum req_op op = (enum req_op)(opf & REQ_OP_MASK);

	return op == REQ_OP_WRITE || op == REQ_OP_WRITE_ZEROES ? -ENOSPC :
								  -EINVAL;
}

/*
 * A bio that does not fit: crossing the end, starting at or after it, or
 * so far out that offset + length overflows 64 bits.
 */
static void pick_oor(struct model *m, struct req *r)
{
	static const unsigned int ops[] = {
		REQ_OP_READ,	      REQ_OP_WRITE,
		REQ_OP_WRITE | REQ_FUA, REQ_OP_DISCARD,
		REQ_OP_WRITE_ZEROES,  REQ_OP_WRITE_ZEROES | REQ_NOUNMAP,
		REQ_OP_EXTENTS,	      REQ_OP_CACHE,
	};
	struct rng *g = &m->rng;
	uint64_t end_sec = m->size / SECTOR_SIZE, back;

	r->opf = ops[rng_below(g, sizeof(ops) / sizeof(ops[0]))];
	r->expect = oor_error(r->opf);
	switch (rng_below(g, 4)) {
	case 0:
	case 1:
		back = rng_range(g, 1, 16);
		r->sector = end_sec - back;
		r->len = (uint32_t)(back + rng_range(g, 1, 64)) * SECTOR_SIZE;
		break;
	case 2:
		r->sector = end_sec + rng_range(g, 0, 3) * rng_range(g, 0, 4096);
		r->len = (uint32_t)rng_range(g, 1, 64) * SECTOR_SIZE;
		break;
	default:
		/* The byte offset fits in 64 bits, offset + length does not. */
		r->sector = (UINT64_MAX >> SECTOR_SHIFT) - rng_range(g, 0, 7);
		r->len = (uint32_t)rng_range(g, 9, 64) * SECTOR_SIZE;
		break;
	}
	r->off = r->sector << SECTOR_SHIFT;
}

static void model_end_io(struct bio *bio)
{
	struct req *r = bio->bi_private;
	struct model *m = r->m;

	if (!pthread_equal(pthread_self(), main_thread))
		fail(m, r, "end_io ran on another thread than the submitter");
	if (r->ended++) {
		fail(m, r, "end_io ran %u times", r->ended);
		return;
	}
	r->status = bio->bi_status;
	m->done++;
}

static struct bio *req_bio(struct model *m, struct req *r)
{
	/* Sometimes ask for more vectors than used: a half-full vector. */
	unsigned int spare = rng_pct(&m->rng, 10) ?
				     (unsigned int)rng_range(&m->rng, 1, 8) :
				     0;
	struct bio *bio;
	unsigned int i;

	bio = bio_alloc(op_has_data(r->opf) ? r->nseg + spare : spare,
			r->opf);
	if (!bio) {
		fprintf(stderr, "FAIL bio_alloc: out of memory\n");
		exit(1);
	}
	m->allocs++;
	bio->bi_iter.bi_sector = r->sector;
	if (op_has_data(r->opf)) {
		for (i = 0; i < r->nseg; i++) {
			int ret = bio_add_buf(bio, r->arena + r->seg_at[i],
					      r->seg_len[i]);

			if (ret)
				fail(m, r, "bio_add_buf segment %u: %d", i,
				     ret);
		}
		if (bio->bi_iter.bi_size != r->len)
			fail(m, r, "bio_add_buf built bi_size %u",
			     bio->bi_iter.bi_size);
	} else if ((r->opf & REQ_OP_MASK) != REQ_OP_FLUSH) {
		/* No vector: the size is the whole description. */
		bio->bi_iter.bi_size = r->len;
	}
	if ((r->opf & REQ_OP_MASK) == REQ_OP_EXTENTS) {
		memset(&r->ext, 0, sizeof(r->ext));
		bio->bi_ext = &r->ext;
	}
	bio->bi_end_io = model_end_io;
	bio->bi_private = r;
	return bio;
}

/* Fill the data of @r and update the reference for what @r will change. */
static void req_prepare(struct model *m, struct req *r)
{
	enum req_op op = (enum req_op)(r->opf & REQ_OP_MASK);
	uint64_t at = r->off;
	unsigned int i;

	if (op == REQ_OP_READ) {
		/* Whole used arena: segments and guards hold one byte value. */
		r->fill = (uint8_t)rng_range(&m->rng, 1, 255);
		memset(r->arena, r->fill, r->arena_used);
		return;
	}
	if (op == REQ_OP_WRITE) {
		/* Sometimes zeros, so zero data is not always a hole. */
		bool z = rng_pct(&m->rng, 5);

		for (i = 0; i < r->nseg; i++) {
			uint8_t *p = r->arena + r->seg_at[i];

			if (z)
				memset(p, 0, r->seg_len[i]);
			else
				rng_fill(&m->rng, p, r->seg_len[i]);
			if (!r->expect)
				memcpy(m->ref + at, p, r->seg_len[i]);
			at += r->seg_len[i];
		}
		return;
	}
	if ((op == REQ_OP_DISCARD || op == REQ_OP_WRITE_ZEROES) && !r->expect)
		memset(m->ref + r->off, 0, r->len);
}

static void count_op(struct model *m, const struct req *r)
{
	struct stats *st = &m->st;

	st->bios++;
	if (r->sync)
		st->sync++;
	if (r->expect) {
		st->oor++;
		return;
	}
	switch (r->opf & REQ_OP_MASK) {
	case REQ_OP_READ:
		st->reads++;
		st->read_bytes += r->len;
		break;
	case REQ_OP_WRITE:
		st->writes++;
		st->write_bytes += r->len;
		if (r->opf & REQ_FUA)
			st->fua++;
		break;
	case REQ_OP_DISCARD:
		st->discards++;
		break;
	case REQ_OP_WRITE_ZEROES:
		st->zeroes++;
		if (r->opf & REQ_NOUNMAP)
			st->nounmap++;
		break;
	case REQ_OP_FLUSH:
		st->flushes++;
		break;
	case REQ_OP_CACHE:
		st->caches++;
		break;
	case REQ_OP_EXTENTS:
		st->extents++;
		break;
	}
}

/* ------------------------------------------------------------------ */
/* Checking completed bios */

static void check_read(struct model *m, struct req *r)
{
	uint64_t at = r->off;
	uint32_t pos = 0;
	unsigned int i;

	for (i = 0; i < r->nseg; i++) {
		const uint8_t *p = r->arena + r->seg_at[i];
		char what[64];

		if (memcmp(p, m->ref + at, r->seg_len[i])) {
			snprintf(what, sizeof(what),
				 "read data, segment %u of %u (%u bytes)", i,
				 r->nseg, r->seg_len[i]);
			report_mismatch(m, r, what, at, p, m->ref + at,
					r->seg_len[i]);
			return;
		}
		at += r->seg_len[i];
	}
	/* Nothing outside the segments may have been written. */
	for (i = 0; i <= r->nseg; i++) {
		uint32_t end = i < r->nseg ? r->seg_at[i] : r->arena_used;

		for (; pos < end; pos++)
			if (r->arena[pos] != r->fill) {
				fail(m, r,
				     "read wrote outside its segments: buffer byte %u (before segment %u) is 0x%02x, was 0x%02x",
				     pos, i, r->arena[pos], r->fill);
				return;
			}
		if (i < r->nseg)
			pos = r->seg_at[i] + r->seg_len[i];
	}
}

static void check_extents(struct model *m, struct req *r)
{
	struct bio_extents *e = &r->ext;
	uint64_t at = 0;
	size_t i;

	bio_extents_finish(e);
	if (!e->nr) {
		fail(m, r, "no extents reported");
		return;
	}
	m->st.ext_nr += e->nr;
	for (i = 0; i < e->nr; i++) {
		const struct bio_extent *x = &e->v[i];

		if (x->offset != at) {
			fail(m, r,
			     "extent %zu of %zu starts at %llu, expected %llu (%s)",
			     i, e->nr, (unsigned long long)x->offset,
			     (unsigned long long)at,
			     x->offset > at ? "gap" : "overlap");
			return;
		}
		if (!x->length || x->length > r->len - at) {
			fail(m, r, "extent %zu of %zu at %llu has length %llu",
			     i, e->nr, (unsigned long long)x->offset,
			     (unsigned long long)x->length);
			return;
		}
		if (x->flags & ~(BIO_EXT_HOLE | BIO_EXT_ZERO)) {
			fail(m, r, "extent %zu has unknown flags 0x%x", i,
			     x->flags);
			return;
		}
		if (i && x->flags == e->v[i - 1].flags) {
			fail(m, r,
			     "extents %zu and %zu have equal flags 0x%x but were not merged",
			     i - 1, i, x->flags);
			return;
		}
		if (x->flags & BIO_EXT_HOLE)
			m->st.ext_hole++;
		if (x->flags & BIO_EXT_ZERO) {
			const uint8_t *p = m->ref + r->off + x->offset;
			size_t nz = first_nonzero(p, x->length);

			m->st.ext_zero++;
			if (nz < x->length) {
				unsigned int member;
				uint64_t moff, o = r->off + x->offset + nz;

				layout(m, o, &member, &moff);
				fail(m, r,
				     "extent [%llu, +%llu) flagged 0x%x (zero) but volume offset %llu (member %u offset %llu) holds 0x%02x",
				     (unsigned long long)x->offset,
				     (unsigned long long)x->length, x->flags,
				     (unsigned long long)o, member,
				     (unsigned long long)moff, p[nz]);
				return;
			}
		}
		at += x->length;
	}
	if (at != r->len)
		fail(m, r, "extents cover [0, %llu), expected [0, %u)",
		     (unsigned long long)at, r->len);
}

static void check_req(struct model *m, struct req *r)
{
	enum req_op op = (enum req_op)(r->opf & REQ_OP_MASK);
	int cnt;

	if (r->ended != 1) {
		fail(m, r, "completed %u times", r->ended);
		return;
	}
	if (r->status != r->expect) {
		fail(m, r, "status %d (%s), expected %d (%s)", r->status,
		     strerror(-r->status), r->expect, strerror(-r->expect));
		return;
	}
	/*
	 * The engine must have dropped every reference it took: ours is the
	 * only one left, or the bio leaks.
	 */
	cnt = atomic_load(&r->bio->__bi_cnt);
	if (cnt != 1)
		fail(m, r, "after completion __bi_cnt is %d, expected 1", cnt);
	if (r->expect)
		return;
	if (op == REQ_OP_READ)
		check_read(m, r);
	else if (op == REQ_OP_EXTENTS)
		check_extents(m, r);
}

/*
 * Wait until @want bios of the batch ended.  Either as an nbdkit worker
 * does (ioq_reap / ioq_wait) or as an event loop does (ioq_flush, poll
 * the eventfd, ioq_reap).  A bio that never ends is fatal: the engine
 * still owns it, so nothing after this could be trusted.
 */
static void drive(struct model *m, unsigned int want, bool use_fd)
{
	unsigned int idle = 0;
	int ret;

	while (m->done < want) {
		unsigned int before = m->done;

		if (use_fd) {
			struct pollfd p = { .fd = ioq_event_fd(m->q),
					    .events = POLLIN };

			if (p.fd < 0) {
				fail(m, NULL, "ioq_event_fd: %d", p.fd);
				exit(1);
			}
			ret = ioq_flush(m->q);
			if (ret < 0)
				fail(m, NULL, "ioq_flush: %d", ret);
			ret = poll(&p, 1, 30000);
			if (ret == 0) {
				fail(m, NULL,
				     "eventfd not readable after 30 s with %u of %u bios ended, %u in flight",
				     m->done, want, ioq_inflight(m->q));
				exit(1);
			}
			ret = ioq_reap(m->q);
			if (ret < 0)
				fail(m, NULL, "ioq_reap: %d", ret);
		} else {
			ret = ioq_reap(m->q);
			if (ret < 0)
				fail(m, NULL, "ioq_reap: %d", ret);
			if (m->done >= want)
				break;
			ret = ioq_wait(m->q);
			if (ret < 0)
				fail(m, NULL, "ioq_wait: %d", ret);
		}
		if (m->done == before && ioq_inflight(m->q) == 0) {
			if (++idle > 3) {
				fail(m, NULL,
				     "lost completion: %u of %u bios ended and nothing is in flight",
				     m->done, want);
				exit(1);
			}
		} else {
			idle = 0;
		}
	}
}

static void trace_req(const struct req *r)
{
	char os[48];

	fprintf(stderr,
		"  bio#%lu %s sector=%llu offset=%llu length=%u nseg=%u%s%s\n",
		r->nr, op_str(r->opf, os, sizeof(os)),
		(unsigned long long)r->sector, (unsigned long long)r->off,
		r->len, r->nseg, r->sync ? " sync" : "",
		r->expect ? " (past the end)" : "");
}

/* ------------------------------------------------------------------ */

/*
 * One batch: up to 16 bios, non-overlapping where one changes data, all
 * in flight together; one of them may be a submit_bio_wait issued while
 * the others are still running.
 */
static void run_batch(struct model *m)
{
	struct rng *g = &m->rng;
	unsigned int want, n = 0, i, tries, sync_idx = UINT_MAX;
	char cs[96];
	bool use_fd;

	switch (rng_below(g, 5)) {
	case 0:
	case 1:
		want = 1;
		break;
	case 2:
	case 3:
		want = (unsigned int)rng_range(g, 2, 8);
		break;
	default:
		want = (unsigned int)rng_range(g, 9, MAX_BATCH);
		break;
	}
	for (i = 0; i < want; i++) {
		struct req *r = &m->req[n];

		for (tries = 0; tries < 8; tries++) {
			r->expect = 0;
			if (rng_pct(g, 2)) {
				pick_oor(m, r);
			} else {
				r->opf = pick_op(g);
				if ((r->opf & REQ_OP_MASK) == REQ_OP_FLUSH) {
					r->len = 0;
					r->off = 0;
				} else {
					r->len = pick_len(m);
					r->off = pick_off(m, r->len);
				}
				r->sector = r->off >> SECTOR_SHIFT;
			}
			if (!conflicts(m, n, r))
				break;
		}
		if (tries == 8)
			continue;
		r->m = m;
		r->nr = m->next_nr++;
		r->nseg = 0;
		r->arena_used = 0;
		r->sync = false;
		r->ended = 0;
		r->status = 0;
		if (op_has_data(r->opf))
			build_segments(m, r);
		n++;
	}
	if (rng_pct(g, 30))
		sync_idx = (unsigned int)rng_below(g, n);
	use_fd = rng_pct(g, 30);

	combo_str(&m->c, cs, sizeof(cs));
	snprintf(watchdog_msg, sizeof(watchdog_msg),
		 "FAIL seed=%llu %s: batch of %u bios from bio#%lu not done after %u s (hang)\n",
		 (unsigned long long)master_seed, cs, n, m->req[0].nr,
		 WATCHDOG_SECS);
	alarm(WATCHDOG_SECS);

	for (i = 0; i < n; i++) {
		struct req *r = &m->req[i];

		r->sync = i == sync_idx;
		req_prepare(m, r);
		r->bio = req_bio(m, r);
		count_op(m, r);
		if (trace)
			trace_req(r);
	}

	m->done = 0;
	for (i = 0; i < n; i++)
		if (i != sync_idx)
			submit_bio(m->vol, m->req[i].bio);
	if (sync_idx != UINT_MAX) {
		struct req *r = &m->req[sync_idx];

		/* The others keep completing while this one waits. */
		r->status = submit_bio_wait(m->vol, r->bio);
		r->ended++;
		m->done++;
	}
	drive(m, n, use_fd);
	alarm(0);

	m->st.batches++;
	if (n > m->st.max_batch)
		m->st.max_batch = n;
	for (i = 0; i < n; i++) {
		struct req *r = &m->req[i];

		check_req(m, r);
		if ((r->opf & REQ_OP_MASK) == REQ_OP_EXTENTS)
			bio_extents_free(&r->ext);
		bio_put(r->bio);
		m->puts++;
		r->bio = NULL;
	}
}

/*
 * A sector number whose byte offset does not fit in 64 bits: shifting it
 * wraps to a small offset, and a range check done on the wrapped value
 * would let the bio through to the start of the volume.
 */
static void check_sector_wrap(struct model *m)
{
	static const unsigned int ops[] = { REQ_OP_READ, REQ_OP_WRITE,
					    REQ_OP_DISCARD,
					    REQ_OP_WRITE_ZEROES };
	unsigned int i;

	for (i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		struct req *r = &m->req[0];
		uint8_t *arena = r->arena;

		memset(r, 0, sizeof(*r));
		r->arena = arena;
		r->m = m;
		r->nr = m->next_nr++;
		r->opf = ops[i];
		r->sector = (1ull << (64 - SECTOR_SHIFT)) + 8 * i;
		r->off = UINT64_MAX; /* for req_span: nowhere in the volume */
		r->len = 4096;
		r->expect = oor_error(r->opf);
		r->sync = true;
		if (op_has_data(r->opf)) {
			r->nseg = 1;
			r->seg_len[0] = r->len;
			r->arena_used = r->len;
		}
		req_prepare(m, r);
		r->bio = req_bio(m, r);
		count_op(m, r);
		r->status = submit_bio_wait(m->vol, r->bio);
		r->ended++;
		if (r->status != r->expect) {
			char what[96];

			snprintf(what, sizeof(what),
				 "sector 2^%d + %u (byte offset wraps)",
				 64 - SECTOR_SHIFT, 8 * i);
			fail(m, r, "%s: status %d, expected %d", what,
			     r->status, r->expect);
		}
		bio_put(r->bio);
		m->puts++;
		r->bio = NULL;
	}
}

/*
 * The member files, read with plain pread and placed by the layout rule,
 * must be the reference byte for byte; a file may be longer than its
 * share only with zeros.
 */
static void check_members(struct model *m)
{
	uint32_t chunk = m->c.chunk;
	uint64_t share = m->size / m->c.nr, k;
	int fd[MAX_MEMBERS];
	uint8_t *buf = malloc(chunk);
	unsigned int i;

	if (!buf) {
		fprintf(stderr, "FAIL out of memory\n");
		exit(1);
	}
	for (i = 0; i < m->c.nr; i++) {
		struct stat sb;

		fd[i] = open(m->path[i], O_RDONLY | O_CLOEXEC);
		if (fd[i] < 0 || fstat(fd[i], &sb)) {
			fail(m, NULL, "open %s: %s", m->path[i],
			     strerror(errno));
			exit(1);
		}
		if ((uint64_t)sb.st_size < share)
			fail(m, NULL,
			     "member %u (%s) is %llu bytes, less than its share %llu",
			     i, m->path[i], (unsigned long long)sb.st_size,
			     (unsigned long long)share);
		else if ((uint64_t)sb.st_size > share)
			fprintf(stderr,
				"note: member %u is %llu bytes, its share is %llu\n",
				i, (unsigned long long)sb.st_size,
				(unsigned long long)share);
	}
	for (k = 0; k < m->size / chunk; k++) {
		unsigned int member = (unsigned int)(k % m->c.nr);
		uint64_t moff = k / m->c.nr * chunk;
		size_t got = 0;

		/* Short reads only at EOF; a sparse tail reads as zeros. */
		while (got < chunk) {
			ssize_t r = pread(fd[member], buf + got, chunk - got,
					  (off_t)(moff + got));

			if (r < 0) {
				fail(m, NULL, "pread %s: %s",
				     m->path[member], strerror(errno));
				exit(1);
			}
			if (r == 0)
				break;
			got += (size_t)r;
		}
		memset(buf + got, 0, chunk - got);
		if (memcmp(buf, m->ref + k * chunk, chunk)) {
			char what[PATH_MAX + 128];

			snprintf(what, sizeof(what),
				 "member file %u (%s) at %llu vs volume chunk %llu",
				 member, m->path[member],
				 (unsigned long long)moff,
				 (unsigned long long)k);
			report_mismatch(m, NULL, what, k * chunk, buf,
					m->ref + k * chunk, chunk);
			break;
		}
	}
	for (i = 0; i < m->c.nr; i++) {
		uint64_t at = share;
		ssize_t r;

		while ((r = pread(fd[i], buf, chunk, (off_t)at)) > 0) {
			size_t nz = first_nonzero(buf, (size_t)r);

			if (nz < (size_t)r) {
				fail(m, NULL,
				     "member %u holds 0x%02x at %llu, past its share %llu",
				     i, buf[nz], (unsigned long long)(at + nz),
				     (unsigned long long)share);
				break;
			}
			at += (uint64_t)r;
		}
		close(fd[i]);
	}
	free(buf);
}

/*
 * Open the members again without a size: the volume must come back with
 * the same size, and reading all of it through the engine must give the
 * reference.
 */
static void check_reopen(struct model *m)
{
	const char *paths[MAX_MEMBERS];
	struct volume_config cfg = { 0 };
	struct target *t;
	char err[256] = "";
	uint64_t off;
	uint8_t *buf;
	unsigned int i;
	int ret;

	for (i = 0; i < m->c.nr; i++)
		paths[i] = m->path[i];
	cfg.members = paths;
	cfg.nr_members = m->c.nr;
	cfg.chunk_bytes = m->c.chunk;
	ret = volume_open(&t, &cfg, err, sizeof(err));
	if (ret) {
		fail(m, NULL, "reopen: volume_open: %d (%s)", ret, err);
		return;
	}
	if (t->size_bytes != m->size) {
		fail(m, NULL, "reopen: size %llu, expected %llu",
		     (unsigned long long)t->size_bytes,
		     (unsigned long long)m->size);
		target_destroy(t);
		return;
	}
	buf = malloc(MAX_LEN + 1);
	if (!buf) {
		fprintf(stderr, "FAIL out of memory\n");
		exit(1);
	}
	for (off = 0; off < m->size && !m->failed;) {
		uint32_t len = m->size - off < MAX_LEN ? (uint32_t)(m->size - off) :
							 MAX_LEN;
		/* Two segments, the second one byte out of step. */
		uint32_t first = len / 3 + 1;
		struct bio *bio = bio_alloc(2, REQ_OP_READ);

		if (!bio) {
			fprintf(stderr, "FAIL bio_alloc: out of memory\n");
			exit(1);
		}
		m->allocs++;
		bio->bi_iter.bi_sector = off >> SECTOR_SHIFT;
		if (bio_add_buf(bio, buf, first) ||
		    bio_add_buf(bio, buf + first + 1, len - first))
			fail(m, NULL, "reopen: bio_add_buf failed");
		memset(buf, 0xee, len + 1);
		ret = submit_bio_wait(t, bio);
		bio_put(bio);
		m->puts++;
		if (ret) {
			fail(m, NULL, "reopen: read at %llu length %u: %d",
			     (unsigned long long)off, len, ret);
			break;
		}
		memmove(buf + first, buf + first + 1, len - first);
		report_mismatch(m, NULL, "reopen: read back", off, buf,
				m->ref + off, len);
		off += len;
	}
	free(buf);
	target_destroy(t);
}

static void cleanup_dir(struct model *m)
{
	unsigned int i;

	for (i = 0; i < m->c.nr; i++)
		unlink(m->path[i]);
	rmdir(m->dir);
}

static double now_sec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Returns 0 (pass), 1 (fail) or 77 (backend not available). */
static int run_combo(const struct combo *c, unsigned long iters)
{
	const char *paths[MAX_MEMBERS];
	struct volume_config cfg = { 0 };
	const char *tmp = getenv("TMPDIR");
	struct model *m;
	char err[256] = "", cs[96];
	uint64_t stripe;
	double t0 = now_sec();
	unsigned int i;
	int ret, result;

	m = calloc(1, sizeof(*m));
	if (!m) {
		fprintf(stderr, "FAIL out of memory\n");
		exit(1);
	}
	m->c = *c;
	/* Independent of which other combinations run. */
	m->rng.s = master_seed ^ (0x9e3779b97f4a7c15ull * (c->idx + 1));
	m->seed = rng_next(&m->rng);
	m->rng.s = m->seed;
	m->depth = depths[(c->idx / 3 + c->idx) % 3];

	ret = ioq_create(&m->q, c->backend, m->depth);
	if (ret) {
		if (c->backend == IOQ_IO_URING &&
		    (ret == -ENOSYS || ret == -EPERM || ret == -EOPNOTSUPP)) {
			free(m);
			return 77;
		}
		fail(m, NULL, "ioq_create(%s, %u): %d",
		     ioq_backend_name(c->backend), m->depth, ret);
		free(m);
		return 1;
	}
	ioq_set_current(m->q);
	/*
	 * Ask for the eventfd up front, as an event loop does when it sets up
	 * its watcher: completions before the first ioq_event_fd() call need
	 * not have signalled it.
	 */
	ret = ioq_event_fd(m->q);
	if (ret < 0)
		fail(m, NULL, "ioq_event_fd: %d", ret);

	stripe = (uint64_t)c->nr * c->chunk;
	m->size = 8 * MiB > 4 * stripe ? 8 * MiB : 4 * stripe;
	m->size = (m->size + stripe - 1) / stripe * stripe;
	m->ref = calloc(1, m->size);
	if (!m->ref) {
		fprintf(stderr, "FAIL out of memory\n");
		exit(1);
	}
	for (i = 0; i < MAX_BATCH; i++) {
		m->req[i].arena = aligned_alloc(BIO_PAGE_SIZE, ARENA_BYTES);
		if (!m->req[i].arena) {
			fprintf(stderr, "FAIL out of memory\n");
			exit(1);
		}
	}

	snprintf(m->dir, sizeof(m->dir), "%s/test-model.XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(m->dir)) {
		fprintf(stderr, "FAIL mkdtemp %s: %s\n", m->dir,
			strerror(errno));
		exit(1);
	}
	for (i = 0; i < c->nr; i++) {
		snprintf(m->path[i], sizeof(m->path[i]), "%s/member%u", m->dir,
			 i);
		paths[i] = m->path[i];
	}
	cfg.members = paths;
	cfg.nr_members = c->nr;
	cfg.chunk_bytes = c->chunk;
	cfg.size_bytes = m->size;
	ret = volume_open(&m->vol, &cfg, err, sizeof(err));
	if (ret) {
		fail(m, NULL, "volume_open: %d (%s)", ret, err);
		goto out;
	}
	if (m->vol->size_bytes != m->size)
		fail(m, NULL, "volume size %llu, asked for %llu",
		     (unsigned long long)m->vol->size_bytes,
		     (unsigned long long)m->size);

	while (m->st.bios < iters && !m->failed)
		run_batch(m);
	if (!m->failed)
		check_sector_wrap(m);

	if (ioq_inflight(m->q))
		fail(m, NULL, "%u operations still in flight after the last batch",
		     ioq_inflight(m->q));
	target_destroy(m->vol);
	m->vol = NULL;
	/* Even after a failure: says whether the data on disk is right. */
	check_members(m);
	if (!m->failed)
		check_reopen(m);
	if (m->allocs != m->puts)
		fail(m, NULL, "%lu bios allocated, %lu put", m->allocs,
		     m->puts);

out:
	ioq_set_current(NULL);
	ioq_destroy(m->q);
	combo_str(c, cs, sizeof(cs));
	printf("model: %-8s N=%u chunk=%4uK size=%5lluK depth=%3u: %5lu bios in %4lu batches (max %2lu, %lu sync): R %lu (%llu MiB) W %lu (%llu MiB, %lu FUA) D %lu Z %lu (%lu NOUNMAP) F %lu C %lu E %lu (%lu extents, %lu zero, %lu hole) oor %lu; %.2f s %s\n",
	       ioq_backend_name(c->backend), c->nr, c->chunk / KiB,
	       (unsigned long long)(m->size / KiB), m->depth, m->st.bios,
	       m->st.batches, m->st.max_batch, m->st.sync, m->st.reads,
	       m->st.read_bytes / MiB, m->st.writes, m->st.write_bytes / MiB,
	       m->st.fua, m->st.discards, m->st.zeroes, m->st.nounmap,
	       m->st.flushes, m->st.caches, m->st.extents, m->st.ext_nr,
	       m->st.ext_zero, m->st.ext_hole, m->st.oor, now_sec() - t0,
	       m->failed ? "FAIL" : "ok");
	fflush(stdout);
	if (m->failed) {
		fprintf(stderr,
			"repro: MODEL_SEED=%llu MODEL_ITERS=%lu MODEL_BACKEND=%s MODEL_MEMBERS=%u MODEL_CHUNK=%u (member files kept in %s)\n",
			(unsigned long long)master_seed, iters_total,
			ioq_backend_name(c->backend), c->nr, c->chunk, m->dir);
	} else {
		cleanup_dir(m);
	}
	result = m->failed ? 1 : 0;
	for (i = 0; i < MAX_BATCH; i++)
		free(m->req[i].arena);
	free(m->ref);
	free(m);
	return result;
}

static bool env_u64(const char *name, uint64_t *out)
{
	const char *s = getenv(name);
	char *end;

	if (!s || !*s)
		return false;
	errno = 0;
	*out = strtoull(s, &end, 0);
	if (errno || *end) {
		fprintf(stderr, "bad %s=%s\n", name, s);
		exit(1);
	}
	return true;
}

int main(void)
{
	const char *only_backend = getenv("MODEL_BACKEND");
	uint64_t only_members = 0, only_chunk = 0, v;
	unsigned int b, ni, ci, passed = 0, failed = 0, skipped = 0;
	bool uring_missing = false;
	const char *tr = getenv("MODEL_TRACE");
	double t0 = now_sec();

	main_thread = pthread_self();
	trace = tr && *tr && strcmp(tr, "0");
	if (!env_u64("MODEL_SEED", &master_seed)) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		master_seed = (uint64_t)ts.tv_sec * 1000000000ull +
			      (uint64_t)ts.tv_nsec + (uint64_t)getpid();
	}
	if (env_u64("MODEL_ITERS", &v))
		iters_total = v;
	env_u64("MODEL_MEMBERS", &only_members);
	env_u64("MODEL_CHUNK", &only_chunk);
	signal(SIGALRM, on_alarm);
	setvbuf(stdout, NULL, _IOLBF, 0);

	printf("model: seed %llu (set MODEL_SEED to replay), %lu bios per combination\n",
	       (unsigned long long)master_seed,
	       iters_total / NR_COMBOS ? iters_total / NR_COMBOS : 1);

	for (b = 0; b < 2; b++) {
		enum ioq_backend be = b ? IOQ_THREADS : IOQ_IO_URING;

		if (only_backend && *only_backend &&
		    strcmp(only_backend, ioq_backend_name(be)))
			continue;
		for (ni = 0; ni < 5; ni++) {
			for (ci = 0; ci < 3; ci++) {
				struct combo c = {
					.backend = be,
					.nr = member_counts[ni],
					.chunk = chunk_sizes[ci],
					.idx = b * 15 + ni * 3 + ci,
				};
				unsigned long iters = iters_total / NR_COMBOS;
				int r;

				if ((only_members && only_members != c.nr) ||
				    (only_chunk && only_chunk != c.chunk))
					continue;
				if (be == IOQ_IO_URING && uring_missing) {
					skipped++;
					continue;
				}
				r = run_combo(&c, iters ? iters : 1);
				if (r == 77) {
					printf("model: io_uring unavailable, skipping its combinations\n");
					uring_missing = true;
					skipped++;
				} else if (r) {
					failed++;
				} else {
					passed++;
				}
			}
		}
	}
	bio_pool_drain();
	printf("model: %u combinations passed, %u failed, %u skipped; %.1f s\n",
	       passed, failed, skipped, now_sec() - t0);
	if (failed)
		return 1;
	if (!passed && !skipped) {
		fprintf(stderr, "model: no combination matched the filters\n");
		return 1;
	}
	return skipped ? 77 : 0;
}
