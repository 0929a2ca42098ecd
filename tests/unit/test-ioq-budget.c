// SPDX-License-Identifier: MIT
/*
 * Description: the inline budget of an ioq (ioq_set_inline_budget) and the
 * REQ_ASYNC bio flag, on a file target whose file lies on tmpfs, where
 * reads and writes are copied by the submitting thread ("inline") and end
 * at the next ioq_reap.  Bios go straight to the file target (no stripe,
 * so no plug merges them).  For each ioq backend (io_uring, threads; a
 * backend the machine lacks is skipped with a note):
 *
 *  - default (budget 0 = no limit): 64 reads of 64 KiB, a 4 KiB one, all
 *    end at the first reap;
 *  - budget 256 KiB: 64 reads of 64 KiB back to back, then reads of 4 KiB,
 *    16 KiB (the largest that never waits) and 16 KiB + 512.  The small
 *    ones end at the first reap; the large ones end over many reaps, in
 *    submission order, no reap ending more than a period's worth of them
 *    (budget + one bio, twice that for the first reap, which also ends
 *    what was copied at submission), every reap ending some while they
 *    wait, and ioq_has_ready() true in between.  A 4 KiB read submitted
 *    after the first reap ends at the second, while the large ones still
 *    wait; a 64 KiB one submitted then queues behind all of them, even
 *    with the budget just set again (which refills the period).  Every
 *    buffer holds the file's data: nothing lost, nothing shuffled;
 *  - the same with 16 writes of 64 KiB and one of 4 KiB: the last large
 *    one has not reached the file after submission, and after the last
 *    reap the file holds every write;
 *  - a single 4 MiB read is one bio and is not cut by the budget: its data
 *    is in the buffer right after submit_bio (copied whole, overshooting
 *    the period), while a 64 KiB read submitted after it waits (its buffer
 *    is untouched until the next reap);
 *  - budget set back to 0: no limit again;
 *  - REQ_ASYNC: a 1 MiB read with it does not take the inline path.  An
 *    inline read sets ioq_has_ready() at once (its copy is done and waits
 *    to be ended); the REQ_ASYNC one leaves it false while ioq_inflight()
 *    counts it, and with io_uring its buffer stays untouched until the
 *    ring is flushed.  It ends through ioq_wait with the right data.  With
 *    a budget spent and 60 large reads waiting, a REQ_ASYNC read does not
 *    queue behind them: the backend's event fd (inline wake-ups off, so
 *    only the backend signals it) becomes readable and the bio ends while
 *    large reads still wait;
 *  - ioq_destroy with nothing in flight (the ASan build checks that the
 *    budget's wait-list nodes are freed).
 *
 * Every bio's end_io records the number of the reap it ended in and checks
 * that it runs inside ioq_reap/ioq_wait, never inside submit_bio.
 *
 * tmpfs is /dev/shm (checked with statfs); without it the test skips (77).
 */
#include <errno.h>
#include <linux/magic.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <sys/vfs.h>

#include <bionbd/bio.h>
#include <bionbd/ioq.h>
#include <bionbd/target.h>

#include "unit.h"

#define KiB 1024u
#define MiB (1024u * KiB)

#define TMPFS_DIR "/dev/shm"
#define FILE_BYTES (16 * MiB)
#define READ_AREA 0ull		/* [0, 8 MiB): only read */
#define WRITE_AREA (8ull * MiB) /* [8 MiB, 16 MiB): written */

#define BUDGET (256 * KiB)
#define BIG (64 * KiB)
#define NR_BIG 64u /* 4 MiB: some 16 budget periods */
#define NR_BIG_WRITES 16u
#define SMALL (4 * KiB)
/* IOQ_INLINE_SMALL (engine/internal.h): copies this small never wait. */
#define INLINE_SMALL (16 * KiB)
#define ASYNC_LEN (1 * MiB)
#define POISON 0xa5
#define MAX_RECS (NR_BIG + 8)
#define BUF_BYTES (NR_BIG * BIG + 2 * MiB)
/* How long a backend completion may take before the test calls it lost. */
#define POLL_MS 30000

/* One bio of a case and what happened to it. */
struct rec {
	struct bio *bio;
	uint64_t off; /* file offset */
	uint32_t len;
	uint8_t *buf;
	unsigned int calls;    /* end_io runs: must end up 1 */
	unsigned int ended_at; /* number of the reap it ended in; 0 = not yet */
	int status;
};

struct ctx {
	struct ioq *q;
	enum ioq_backend be;
	struct target *t;
	int fd;	      /* the same file, for checking writes behind the target */
	uint8_t *img; /* what the file holds */
	uint8_t *buf; /* BUF_BYTES */
	uint8_t *src; /* data to write, NR_BIG_WRITES * BIG + SMALL */
	uint8_t *aux[4]; /* small buffers, BIG + 512 bytes each */
	struct rec r[MAX_RECS];
	unsigned int nr;
};

/* The reap in progress (numbered from 1 per case), and whether one is. */
static unsigned int reap_no;
static bool in_reap;

/* -------------------------------------------------------------- data */

static uint64_t mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/*
 * Data that differs in every 8 bytes and depends on the offset, so a bio
 * that read or wrote the wrong range, or a buffer filled out of order,
 * cannot match.
 */
static void fill(uint8_t *p, uint64_t off, size_t len, uint64_t salt)
{
	for (size_t i = 0; i < len; i += 8) {
		uint64_t v = mix(salt ^ ((off + i) >> 3));

		memcpy(p + i, &v, len - i < 8 ? len - i : 8);
	}
}

/* ------------------------------------------------------------ set-up */

/* Returns 0, -ENOTSUP when TMPFS_DIR is not tmpfs, or -errno. */
static int tmpfs_file(char *path, size_t size, int *fd_out)
{
	struct statfs sfs;
	int fd;

	if (statfs(TMPFS_DIR, &sfs))
		return -errno;
	if (sfs.f_type != TMPFS_MAGIC)
		return -ENOTSUP;
	snprintf(path, size, "%s/test-ioq-budget.XXXXXX", TMPFS_DIR);
	fd = mkstemp(path);
	if (fd < 0)
		return -errno;
	*fd_out = fd;
	return 0;
}

/*
 * Read (or @write) all of @len bytes at @off; returns 0 or -errno (-EIO
 * if the file ends first).
 */
static int prw_all(bool write, int fd, void *p, size_t len, off_t off)
{
	while (len) {
		ssize_t n = write ? pwrite(fd, p, len, off) :
				    pread(fd, p, len, off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p = (uint8_t *)p + n;
		len -= (size_t)n;
		off += n;
	}
	return 0;
}

/* ------------------------------------------------------------ bios */

static void rec_end_io(struct bio *bio)
{
	struct rec *r = bio->bi_private;

	/* ioq.h: inline bios end in ioq_reap, so end_io never nests. */
	CHECK(in_reap);
	r->calls++;
	r->ended_at = reap_no;
	r->status = bio->bi_status;
}

static void case_begin(struct ctx *c)
{
	c->nr = 0;
	reap_no = 0;
}

/* Submit a READ/WRITE (@opf) of [@off, @off + @len) to/from @buf. */
static struct rec *submit(struct ctx *c, unsigned int opf, uint64_t off,
			  uint8_t *buf, uint32_t len)
{
	struct rec *r;
	struct bio *bio;

	CHECK(c->nr < MAX_RECS);
	r = &c->r[c->nr++];
	memset(r, 0, sizeof(*r));
	bio = bio_alloc(1, opf);
	CHECK(bio);
	CHECK_EQ(bio_add_buf(bio, buf, len), 0);
	bio->bi_iter.bi_sector = off >> SECTOR_SHIFT;
	bio->bi_end_io = rec_end_io;
	bio->bi_private = r;
	r->bio = bio;
	r->off = off;
	r->len = len;
	r->buf = buf;
	submit_bio(c->t, bio);
	return r;
}

/* One numbered ioq_reap; checks that its count matches the end_io calls. */
static void reap_once(struct ctx *c)
{
	unsigned int ended = 0;
	int n;

	reap_no++;
	in_reap = true;
	n = ioq_reap(c->q);
	in_reap = false;
	CHECK(n >= 0);
	for (unsigned int i = 0; i < c->nr; i++)
		ended += c->r[i].ended_at == reap_no;
	CHECK_EQ(n, ended);
}

static bool all_ended(const struct ctx *c)
{
	for (unsigned int i = 0; i < c->nr; i++)
		if (!c->r[i].ended_at)
			return false;
	return true;
}

/*
 * Reap until every bio of the case ended.  They are all inline, so one
 * that has not ended is waiting for the budget, which ioq_has_ready()
 * must say (an event loop would otherwise block with work left); and
 * every reap must end at least one of them, or a loop could spin forever.
 */
static void reap_all(struct ctx *c)
{
	while (!all_ended(c)) {
		bool progress = false;

		CHECK(ioq_has_ready(c->q));
		reap_once(c);
		for (unsigned int i = 0; i < c->nr; i++)
			progress |= c->r[i].ended_at == reap_no;
		CHECK(progress);
	}
	CHECK(!ioq_has_ready(c->q));
	CHECK_EQ(ioq_inflight(c->q), 0);
}

/* Every bio ended once, without error; reads hold the file's data. */
static void check_and_put(struct ctx *c)
{
	for (unsigned int i = 0; i < c->nr; i++) {
		struct rec *r = &c->r[i];

		CHECK_EQ(r->calls, 1);
		CHECK_EQ(r->status, 0);
		if (bio_op(r->bio) == REQ_OP_READ &&
		    memcmp(r->buf, c->img + r->off, r->len)) {
			fprintf(stderr,
				"%s: read %u (%" PRIu64 " + %u) wrong data\n",
				ioq_backend_name(c->be), i, r->off, r->len);
			CHECK(!"read data equals the file");
		}
		bio_put(r->bio);
		r->bio = NULL;
	}
	c->nr = 0;
}

/* A bio the budget governs: a large copy done inline (not REQ_ASYNC). */
static bool budgeted(const struct rec *r)
{
	return r->len > INLINE_SMALL && !(r->bio->bi_opf & REQ_ASYNC);
}

/*
 * The budget's promises for the large inline bios of the case: they end in
 * submission order, and no reap ends more than one period's worth of
 * them: the budget plus the one bio that may overshoot it (@bio_max),
 * twice that in the first reap, which also ends what was copied at
 * submission, in the period before.  Returns the reap the last one ended
 * in, after checking it is no earlier than those limits allow.
 */
static unsigned int check_spread(const struct ctx *c, uint32_t bio_max)
{
	uint64_t per_period = BUDGET + bio_max, total = 0;
	unsigned int last = 0;

	for (unsigned int i = 0; i < c->nr; i++) {
		if (!budgeted(&c->r[i]))
			continue;
		CHECK(c->r[i].len <= bio_max);
		CHECK(c->r[i].ended_at >= last);
		last = c->r[i].ended_at;
		total += c->r[i].len;
	}
	for (unsigned int k = 1; k <= last; k++) {
		uint64_t bytes = 0;

		for (unsigned int i = 0; i < c->nr; i++)
			if (budgeted(&c->r[i]) && c->r[i].ended_at == k)
				bytes += c->r[i].len;
		if (bytes > (k == 1 ? 2 : 1) * per_period) {
			fprintf(stderr,
				"%s: reap %u ended %" PRIu64
				" bytes of large bios\n",
				ioq_backend_name(c->be), k, bytes);
			CHECK(!"a reap ends at most a period's worth");
		}
	}
	/* (last + 1) periods hold at most (last + 1) * per_period bytes. */
	CHECK((uint64_t)(last + 1) * per_period >= total);
	return last;
}

/* All @len bytes of @p are POISON: nothing was copied there yet. */
static bool untouched(const uint8_t *p, size_t len)
{
	return p[0] == POISON && !memcmp(p, p + 1, len - 1);
}

/* Start a new reap period (the budget refills) with nothing in flight. */
static void fresh_period(struct ctx *c)
{
	CHECK_EQ(ioq_inflight(c->q), 0);
	CHECK_EQ(ioq_reap(c->q), 0);
}

/* ------------------------------------------------------------ cases */

/*
 * 64 reads of 64 KiB and one of 4 KiB: with no limit all are copied at
 * submission and end at the first reap.
 */
static void case_no_limit(struct ctx *c, const char *what)
{
	case_begin(c);
	memset(c->buf, POISON, NR_BIG * BIG);
	memset(c->aux[0], POISON, SMALL);
	for (unsigned int i = 0; i < NR_BIG; i++)
		submit(c, REQ_OP_READ, READ_AREA + i * BIG, c->buf + i * BIG,
		       BIG);
	submit(c, REQ_OP_READ, READ_AREA + 5 * MiB + 8 * KiB, c->aux[0], SMALL);
	/*
	 * The inline path, not the backend: done bios wait for the reap.
	 * If this fails, the file target did not see tmpfs as memory-backed
	 * and nothing below tests what it claims to.
	 */
	CHECK(ioq_has_ready(c->q));
	reap_all(c);
	CHECK_EQ(reap_no, 1);
	check_and_put(c);
	printf("%s: %s: %u reads ended in 1 reap\n", ioq_backend_name(c->be),
	       what, NR_BIG + 1);
}

static void case_budget_reads(struct ctx *c)
{
	struct rec *small, *edge, *over, *small2, *late;
	unsigned int last;

	ioq_set_inline_budget(c->q, BUDGET);
	fresh_period(c);
	case_begin(c);
	memset(c->buf, POISON, BUF_BYTES);
	for (unsigned int i = 0; i < 4; i++)
		memset(c->aux[i], POISON, BIG + 512);

	for (unsigned int i = 0; i < NR_BIG; i++)
		submit(c, REQ_OP_READ, READ_AREA + i * BIG, c->buf + i * BIG,
		       BIG);
	/* Submitted after 4 MiB of large reads, the budget long spent. */
	small = submit(c, REQ_OP_READ, READ_AREA + 5 * MiB + 8 * KiB, c->aux[0],
		       SMALL);
	edge = submit(c, REQ_OP_READ, READ_AREA + 6 * MiB, c->aux[1],
		      INLINE_SMALL);
	over = submit(c, REQ_OP_READ, READ_AREA + 6 * MiB + 512 * KiB,
		      c->aux[2], INLINE_SMALL + 512);

	reap_once(c);
	/* The small ones do not queue behind megabytes of another client. */
	CHECK_EQ(small->ended_at, 1);
	CHECK_EQ(edge->ended_at, 1);
	/* ...but 512 bytes more is a large copy, and it waits its turn. */
	CHECK_EQ(over->ended_at, 0);
	CHECK_EQ(c->r[NR_BIG - 1].ended_at, 0);
	CHECK(ioq_has_ready(c->q));

	/*
	 * Between two slices: a new small read is served by the very next
	 * reap; a new large one goes behind all those already waiting (a
	 * period's budget never skips them), even when the budget was just
	 * set again (a configuration reload), which refills the period.
	 */
	ioq_set_inline_budget(c->q, BUDGET);
	small2 =
	    submit(c, REQ_OP_READ, READ_AREA + 7 * MiB + 512, c->aux[3], SMALL);
	late = submit(c, REQ_OP_READ, READ_AREA + 7 * MiB + 64 * KiB,
		      c->buf + NR_BIG * BIG, BIG);
	reap_once(c);
	CHECK_EQ(small2->ended_at, 2);
	CHECK_EQ(late->ended_at, 0);
	CHECK(ioq_has_ready(c->q));

	reap_all(c);
	last = check_spread(c, BIG);
	/* 4 MiB + at 256 KiB a period: many reaps, not one or two. */
	CHECK(last >= 8);
	CHECK_EQ(late->ended_at, last);
	CHECK(over->ended_at >= c->r[NR_BIG - 1].ended_at);
	check_and_put(c);
	printf("%s: budget %u KiB: %u large reads ended over %u reaps, "
	       "4 KiB reads at reaps 1 and 2\n",
	       ioq_backend_name(c->be), BUDGET / KiB, NR_BIG + 2, last);
}

static void case_budget_writes(struct ctx *c)
{
	uint64_t salt = 0x100 + (uint64_t)c->be; /* differs per backend */
	uint8_t *now = c->buf;
	struct rec *small;
	unsigned int last;

	ioq_set_inline_budget(c->q, BUDGET);
	fresh_period(c);
	case_begin(c);
	fill(c->src, WRITE_AREA, NR_BIG_WRITES * BIG, salt);
	fill(c->src + NR_BIG_WRITES * BIG, WRITE_AREA + 4 * MiB, SMALL, salt);
	for (unsigned int i = 0; i < NR_BIG_WRITES; i++)
		submit(c, REQ_OP_WRITE, WRITE_AREA + i * BIG, c->src + i * BIG,
		       BIG);
	small = submit(c, REQ_OP_WRITE, WRITE_AREA + 4 * MiB,
		       c->src + NR_BIG_WRITES * BIG, SMALL);

	/* The last large write waits: its range still holds the old data. */
	CHECK_EQ(prw_all(false, c->fd, now, BIG,
			   (off_t)(WRITE_AREA + (NR_BIG_WRITES - 1) * BIG)),
		 0);
	CHECK(
	    !memcmp(now, c->img + WRITE_AREA + (NR_BIG_WRITES - 1) * BIG, BIG));

	reap_all(c);
	CHECK_EQ(small->ended_at, 1);
	last = check_spread(c, BIG);
	CHECK(last >= 2);
	check_and_put(c);

	memcpy(c->img + WRITE_AREA, c->src, NR_BIG_WRITES * BIG);
	memcpy(c->img + WRITE_AREA + 4 * MiB, c->src + NR_BIG_WRITES * BIG,
	       SMALL);
	CHECK_EQ(prw_all(false, c->fd, now, 4 * MiB + SMALL, (off_t)WRITE_AREA), 0);
	CHECK(!memcmp(now, c->img + WRITE_AREA, 4 * MiB + SMALL));
	printf("%s: budget %u KiB: %u writes of 64 KiB ended over %u reaps, "
	       "all in the file\n",
	       ioq_backend_name(c->be), BUDGET / KiB, NR_BIG_WRITES, last);
}

/*
 * The budget works per bio: one 4 MiB read is copied whole at once (the
 * period overshoots), and only what comes after it waits.
 */
static void case_single_big(struct ctx *c)
{
	struct rec *whole, *after;

	ioq_set_inline_budget(c->q, BUDGET);
	fresh_period(c);
	case_begin(c);
	memset(c->buf, POISON, BUF_BYTES);
	whole = submit(c, REQ_OP_READ, READ_AREA, c->buf, NR_BIG * BIG);
	CHECK(!memcmp(c->buf, c->img + READ_AREA, NR_BIG * BIG));
	after = submit(c, REQ_OP_READ, READ_AREA + 6 * MiB,
		       c->buf + NR_BIG * BIG, BIG);
	CHECK(untouched(c->buf + NR_BIG * BIG, BIG));
	/* The next reap does the waiting copy first, then ends both. */
	reap_all(c);
	CHECK_EQ(whole->ended_at, 1);
	CHECK_EQ(after->ended_at, 1);
	check_and_put(c);
	printf("%s: budget %u KiB: one 4 MiB read copied whole at submission, "
	       "the 64 KiB read after it at the reap\n",
	       ioq_backend_name(c->be), BUDGET / KiB);
}

/*
 * The budget lifted (0) while copies wait: the next reap does all of them,
 * rather than refill a budget of 0 and strand them for good.
 */
static void case_budget_lifted(struct ctx *c)
{
	ioq_set_inline_budget(c->q, BUDGET);
	fresh_period(c);
	case_begin(c);
	for (unsigned int i = 0; i < 16; i++)
		submit(c, REQ_OP_READ, READ_AREA + i * BIG, c->buf + i * BIG,
		       BIG);
	CHECK(!all_ended(c) && ioq_has_ready(c->q));
	ioq_set_inline_budget(c->q, 0);
	reap_once(c);
	CHECK(all_ended(c));
	CHECK(!ioq_has_ready(c->q));
	CHECK_EQ(ioq_inflight(c->q), 0);
	check_and_put(c);
	printf("%s: budget lifted with 16 reads waiting: all done at the next "
	       "reap\n",
	       ioq_backend_name(c->be));
}

/*
 * REQ_ASYNC skips the inline path.  An inline read is copied inside
 * submit_bio and sits on the ioq's done list (ioq_has_ready() true) until
 * the reap; a REQ_ASYNC read is in the backend: counted by ioq_inflight()
 * but not ready, and with io_uring not even started before the flush.
 */
static void case_async(struct ctx *c)
{
	struct rec *plain, *async;

	ioq_set_inline_budget(c->q, 0);
	fresh_period(c);
	case_begin(c);
	memset(c->buf, POISON, BUF_BYTES);
	plain = submit(c, REQ_OP_READ, READ_AREA + 1 * MiB, c->buf, ASYNC_LEN);
	CHECK(ioq_has_ready(c->q));
	CHECK(!memcmp(c->buf, c->img + READ_AREA + 1 * MiB, ASYNC_LEN));
	reap_all(c);
	CHECK_EQ(plain->ended_at, 1);
	check_and_put(c);

	case_begin(c);
	async = submit(c, REQ_OP_READ | REQ_ASYNC, READ_AREA + 2 * MiB,
		       c->buf + 2 * MiB, ASYNC_LEN);
	CHECK(!ioq_has_ready(c->q));
	CHECK_EQ(ioq_inflight(c->q), 1);
	CHECK_EQ(async->ended_at, 0);
	/* The SQE is prepared but not yet handed to the kernel. */
	if (c->be == IOQ_IO_URING)
		CHECK(untouched(c->buf + 2 * MiB, ASYNC_LEN));
	while (!async->ended_at) {
		int r;

		/* ioq_wait blocks until something completes: no spinning. */
		CHECK(reap_no < 1000);
		reap_no++;
		in_reap = true;
		r = ioq_wait(c->q);
		in_reap = false;
		CHECK(r >= 0);
	}
	CHECK(!ioq_has_ready(c->q));
	CHECK_EQ(ioq_inflight(c->q), 0);
	check_and_put(c);
	printf("%s: REQ_ASYNC 1 MiB read went through the backend "
	       "(%u wait%s)\n",
	       ioq_backend_name(c->be), reap_no, reap_no == 1 ? "" : "s");
}

/*
 * REQ_ASYNC bios are not the budget's: with 60 large inline reads waiting
 * for their periods, a REQ_ASYNC read ends as soon as the backend has it,
 * signalled by the event fd alone (inline wake-ups off, so nothing inline
 * makes it readable), not after the waiting reads.
 */
static void case_async_budget(struct ctx *c)
{
	struct rec *async;
	unsigned int async_at;
	int efd;

	ioq_set_inline_budget(c->q, BUDGET);
	fresh_period(c);
	/* Before submitting: io_uring signals only CQEs after registration. */
	efd = ioq_event_fd(c->q);
	CHECK(efd >= 0);
	ioq_set_inline_wakeup(c->q, false);
	case_begin(c);
	memset(c->buf, POISON, BUF_BYTES);
	for (unsigned int i = 0; i < NR_BIG; i++)
		submit(c, REQ_OP_READ, READ_AREA + i * BIG, c->buf + i * BIG,
		       BIG);
	async = submit(c, REQ_OP_READ | REQ_ASYNC, READ_AREA + 5 * MiB,
		       c->buf + 5 * MiB, ASYNC_LEN);
	while (!async->ended_at) {
		struct pollfd p = {.fd = efd, .events = POLLIN};
		int r;

		/* Also pushes the rest of a short read to the kernel. */
		CHECK_EQ(ioq_flush(c->q), 0);
		r = poll(&p, 1, POLL_MS);
		if (r != 1)
			fprintf(stderr,
				"%s: event fd not readable in %d ms (%d)\n",
				ioq_backend_name(c->be), POLL_MS, r);
		CHECK_EQ(r, 1);
		reap_once(c);
		CHECK(reap_no < NR_BIG / 4);
	}
	async_at = reap_no;
	CHECK(ioq_has_ready(c->q));
	CHECK_EQ(c->r[NR_BIG - 1].ended_at, 0);
	reap_all(c);
	ioq_set_inline_wakeup(c->q, true);
	CHECK(check_spread(c, BIG) > async_at);
	check_and_put(c);
	printf("%s: REQ_ASYNC read with the budget spent ended at reap %u, "
	       "before the large inline reads waiting\n",
	       ioq_backend_name(c->be), async_at);
}

/* ------------------------------------------------------------ main */

static bool run_backend(struct ctx *c, enum ioq_backend be)
{
	if (!unit_ioq_create(&c->q, be))
		return false;
	c->be = be;
	ioq_set_current(c->q);

	case_no_limit(c, "default (no budget)");
	case_budget_reads(c);
	case_budget_writes(c);
	case_single_big(c);
	case_budget_lifted(c);
	ioq_set_inline_budget(c->q, 0);
	case_no_limit(c, "budget back to 0");
	case_async(c);
	case_async_budget(c);

	/* ioq.h: destroy only with nothing in flight. */
	CHECK_EQ(ioq_inflight(c->q), 0);
	CHECK(!ioq_has_ready(c->q));
	ioq_set_current(NULL);
	ioq_destroy(c->q);
	c->q = NULL;
	printf("%s: ok\n", ioq_backend_name(be));
	return true;
}

int main(void)
{
	struct ctx c = {0};
	char path[64];
	bool uring;
	int r;

	setvbuf(stdout, NULL, _IOLBF, 0);
	r = tmpfs_file(path, sizeof(path), &c.fd);
	if (r == -ENOTSUP || r == -ENOENT) {
		printf("%s is not a tmpfs here: the inline path cannot be "
		       "tested, skipped\n",
		       TMPFS_DIR);
		return 77;
	}
	CHECK_EQ(r, 0);
	CHECK_EQ(ftruncate(c.fd, FILE_BYTES), 0);
	c.img = malloc(FILE_BYTES);
	c.buf = malloc(BUF_BYTES);
	c.src = malloc(NR_BIG_WRITES * BIG + SMALL);
	CHECK(c.img && c.buf && c.src);
	for (unsigned int i = 0; i < 4; i++)
		CHECK((c.aux[i] = malloc(BIG + 512)));
	fill(c.img, 0, FILE_BYTES, 1);
	CHECK_EQ(prw_all(true, c.fd, c.img, FILE_BYTES, 0), 0);
	CHECK_EQ(file_target_open(&c.t, path, NULL), 0);
	/* Both descriptors keep the file; an abort leaves nothing behind. */
	CHECK_EQ(unlink(path), 0);
	CHECK_EQ(c.t->size_bytes, FILE_BYTES);

	uring = run_backend(&c, IOQ_IO_URING);
	CHECK(run_backend(&c, IOQ_THREADS));
	if (!uring)
		printf("note: only the threads backend ran\n");

	target_destroy(c.t);
	close(c.fd);
	for (unsigned int i = 0; i < 4; i++)
		free(c.aux[i]);
	free(c.src);
	free(c.buf);
	free(c.img);
	bio_pool_drain();
	return 0;
}
