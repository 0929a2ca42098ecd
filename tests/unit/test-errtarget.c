// SPDX-License-Identifier: MIT
/*
 * Description: the error-injecting target, alone and as a stripe member, for
 * faults that real files cannot produce on demand.  On a 4-member stripe
 * (64 KiB chunks) whose members are spy(error(file)): a 1 MiB write (aligned
 * and not) with one member failing ends the parent bio with that error
 * exactly once, after every piece; all other pieces completed and their
 * data is in the member files; the parent holds no extra reference; the
 * next bio works.  The same for READ, DISCARD, WRITE_ZEROES, CACHE,
 * EXTENTS and FLUSH (which fans out to every member); DISCARD,
 * WRITE_ZEROES and CACHE reach each member as one merged piece, the
 * member's chunks of the range back to back.  Two members failing
 * with different errors: the error of the piece that completed first wins.
 * Rule semantics on a bare error target: range overlap, op filter, skip
 * then count, count 0 = forever, invalid rules.  A loop of failing bios
 * must not grow the heap (bios and clones are freed; the ASan build's leak
 * checker covers the same).  Both backends; a backend the machine lacks is
 * skipped, and the test skips (77) only if neither runs.
 *
 * The spy target stacked above each error target is the test's own: it
 * clones each bio it gets, records (op, member offset, length, status,
 * order of completion) and ends the original with the clone's status.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>

#include <bionbd/bio.h>
#include <bionbd/ioq.h>
#include <bionbd/target.h>

#include "errtarget.h"
#include "unit.h"

#define NR 4
#define CHUNK (64u * 1024)
#define MEMBER_BYTES (1024u * 1024)
#define VOL_BYTES ((uint64_t)NR * MEMBER_BYTES)
#define MIB (1024u * 1024)
#define OLD_BYTE 0x5a
#define MAX_RECS 64

/* ------------------------------------------------------------ spy target */

struct spy_rec {
	enum req_op op;
	uint64_t off_bytes;
	uint64_t len_bytes;
	int status;
	bool done;
	unsigned int done_seq;
};

struct spy {
	struct target t;
	struct target *below;
	unsigned int nr;
	struct spy_rec rec[MAX_RECS];
};

struct spy_ctx {
	struct bio *orig;
	struct spy_rec *rec;
};

/* Completion order across all spies and the parents. */
static unsigned int done_seq;

static void spy_endio(struct bio *clone)
{
	struct spy_ctx *ctx = clone->bi_private;
	struct bio *orig = ctx->orig;
	int status = clone->bi_status;

	CHECK(!ctx->rec->done);
	ctx->rec->done = true;
	ctx->rec->status = status;
	ctx->rec->done_seq = ++done_seq;
	free(ctx);
	bio_put(clone);
	if (status)
		bio_io_error(orig, status);
	else
		bio_endio(orig, orig->bi_iter.bi_size, 0);
}

static void spy_submit(struct target *t, struct bio *bio)
{
	struct spy *s = (struct spy *)t;
	struct spy_ctx *ctx = malloc(sizeof(*ctx));
	struct bio *clone = bio_clone(bio);

	CHECK(ctx && clone);
	CHECK(s->nr < MAX_RECS);
	ctx->orig = bio;
	ctx->rec = &s->rec[s->nr++];
	*ctx->rec = (struct spy_rec){.op = bio_op(bio),
				     .off_bytes = bio_offset_bytes(bio),
				     .len_bytes = bio->bi_iter.bi_size};
	clone->bi_private = ctx;
	clone->bi_end_io = spy_endio;
	submit_bio(s->below, clone);
}

static void spy_destroy(struct target *t)
{
	struct spy *s = (struct spy *)t;

	target_destroy(s->below);
	free(s->t.name);
	free(s);
}

static const struct target_ops spy_ops = {
    .submit = spy_submit,
    .destroy = spy_destroy,
};

static struct spy *spy_create(struct target *below)
{
	struct spy *s = calloc(1, sizeof(*s));

	CHECK(s);
	s->t.ops = &spy_ops;
	s->t.name = strdup(below->name);
	s->t.size_bytes = below->size_bytes;
	s->below = below;
	return s;
}

/* ------------------------------------------------------------ fixture */

struct fixture {
	struct ioq *q;
	char dir[PATH_MAX];
	char path[NR][PATH_MAX + 16];
	struct target *err[NR]; /* error targets, owned through the stripe */
	struct spy *spy[NR];
	struct target *vol;
};

static void member_fill(const char *path, unsigned char byte)
{
	static unsigned char buf[MEMBER_BYTES];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	CHECK(fd >= 0);
	memset(buf, byte, sizeof(buf));
	CHECK_EQ(pwrite(fd, buf, sizeof(buf), 0), sizeof(buf));
	close(fd);
}

/* Every byte of @path in [off, off + len) is @byte (read directly). */
static void member_expect(const char *path, uint64_t off, uint64_t len,
			  unsigned char byte)
{
	unsigned char *buf = malloc(len);
	int fd = open(path, O_RDONLY);

	CHECK(buf && fd >= 0);
	CHECK_EQ(pread(fd, buf, len, (off_t)off), len);
	close(fd);
	for (uint64_t i = 0; i < len; i++) {
		if (buf[i] != byte) {
			fprintf(stderr,
				"%s: byte %" PRIu64
				" is 0x%02x, expected 0x%02x\n",
				path, off + i, buf[i], byte);
			CHECK_EQ(buf[i], byte);
		}
	}
	free(buf);
}

static void fixture_setup(struct fixture *f, struct ioq *q)
{
	const char *tmpdir = getenv("TMPDIR");
	struct file_target_opts fo = {0};
	struct target *members[NR];

	memset(f, 0, sizeof(*f));
	f->q = q;
	snprintf(f->dir, sizeof(f->dir), "%s/test-errtarget.XXXXXX",
		 tmpdir && *tmpdir ? tmpdir : "/tmp");
	CHECK(mkdtemp(f->dir));
	for (int i = 0; i < NR; i++) {
		struct target *file;

		snprintf(f->path[i], sizeof(f->path[i]), "%s/m%d", f->dir, i);
		member_fill(f->path[i], OLD_BYTE);
		CHECK_EQ(file_target_open(&file, f->path[i], &fo), 0);
		CHECK_EQ(error_target_create(&f->err[i], file), 0);
		f->spy[i] = spy_create(f->err[i]);
		members[i] = &f->spy[i]->t;
	}
	CHECK_EQ(stripe_target_create(&f->vol, members, NR, CHUNK, 0, 0), 0);
	CHECK_EQ(f->vol->size_bytes, VOL_BYTES);
}

static void fixture_teardown(struct fixture *f)
{
	target_destroy(f->vol);
	for (int i = 0; i < NR; i++)
		unlink(f->path[i]);
	rmdir(f->dir);
}

static void spies_reset(struct fixture *f)
{
	for (int i = 0; i < NR; i++)
		f->spy[i]->nr = 0;
}

static void rules_clear(struct fixture *f)
{
	for (int i = 0; i < NR; i++)
		error_target_clear(f->err[i]);
}

static void add_rule(struct target *et, int op, int error)
{
	struct error_rule r = {.op = op, .error = error};

	CHECK_EQ(error_target_add_rule(et, &r), 0);
}

/* ------------------------------------------------------------ one bio */

struct done {
	struct fixture *f; /* NULL: no spies to look at */
	int calls;
	int status;
	unsigned int seq;
	bool early; /* ended while a piece was still out */
};

static void count_endio(struct bio *bio)
{
	struct done *d = bio->bi_private;

	d->calls++;
	d->status = bio->bi_status;
	d->seq = ++done_seq;
	for (int i = 0; d->f && i < NR; i++)
		for (unsigned int j = 0; j < d->f->spy[i]->nr; j++)
			if (!d->f->spy[i]->rec[j].done)
				d->early = true;
}

/*
 * Submit one bio of @opf on [@off, @off + @len) to @t and wait until it and
 * everything it started are over.  Checks: end_io ran exactly once, not
 * before all pieces, and the caller's reference is the only one left.
 * Returns the bio's status.
 */
static int do_bio(struct ioq *q, struct target *t, struct fixture *f,
		  unsigned int opf, uint64_t off, uint64_t len, void *buf,
		  struct bio_extents *ext)
{
	enum req_op op = (enum req_op)(opf & REQ_OP_MASK);
	struct done d = {.f = f};
	struct bio *bio;

	if (f)
		spies_reset(f);
	bio = bio_alloc(1, opf);
	CHECK(bio);
	bio->bi_iter.bi_sector = off >> SECTOR_SHIFT;
	if (op == REQ_OP_READ || op == REQ_OP_WRITE)
		CHECK_EQ(bio_add_buf(bio, buf, (unsigned int)len), 0);
	else
		bio->bi_iter.bi_size = (uint32_t)len;
	bio->bi_ext = ext;
	bio->bi_private = &d;
	bio->bi_end_io = count_endio;
	submit_bio(t, bio);
	while (!d.calls) {
		int r = ioq_wait(q);

		CHECK(r >= 0 || r == -EINTR);
	}
	/* Anything still running would be a piece outliving its parent. */
	CHECK_EQ(ioq_inflight(q), 0);
	CHECK(ioq_reap(q) >= 0);
	CHECK_EQ(d.calls, 1);
	CHECK(!d.early);
	CHECK_EQ(atomic_load(&bio->__bi_cnt), 1);
	bio_put(bio);
	return d.status;
}

/*
 * The layout rule for the piece of [.., @end) that starts at @o: chunk k
 * on member k % NR at (k / NR) * CHUNK.  Returns its length.
 */
static uint64_t layout_piece(uint64_t o, uint64_t end, unsigned int *m,
			     uint64_t *moff)
{
	uint64_t k = o / CHUNK, in = o % CHUNK;

	*m = (unsigned int)(k % NR);
	*moff = (k / NR) * CHUNK + in;
	return CHUNK - in < end - o ? CHUNK - in : end - o;
}

/* A spy's record of a finished piece: @len bytes of @op, ended @status. */
static void check_rec(const struct spy_rec *r, uint64_t len, enum req_op op,
		      int status)
{
	CHECK_EQ(r->len_bytes, len);
	CHECK_EQ(r->op, op);
	CHECK(r->done);
	CHECK_EQ(r->status, status);
}

/*
 * Ranged ops without data go down as one piece per member: the pieces the
 * layout rule gives for that member, which lie back to back on it, merged.
 */
static void expect_merged(struct fixture *f, enum req_op op, uint64_t off,
			  uint64_t len, unsigned int fail_mask,
			  const int fail_err[NR])
{
	uint64_t start[NR], end[NR];
	bool touched[NR] = {false};

	for (uint64_t o = off; o < off + len;) {
		unsigned int m;
		uint64_t moff, n = layout_piece(o, off + len, &m, &moff);

		if (!touched[m]) {
			touched[m] = true;
			start[m] = moff;
		} else {
			CHECK_EQ(moff, end[m]); /* back to back on the member */
		}
		end[m] = moff + n;
		o += n;
	}
	for (unsigned int m = 0; m < NR; m++) {
		CHECK_EQ(f->spy[m]->nr, touched[m] ? 1 : 0);
		if (!touched[m])
			continue;
		CHECK_EQ(f->spy[m]->rec[0].off_bytes, start[m]);
		check_rec(&f->spy[m]->rec[0], end[m] - start[m], op,
			  (fail_mask >> m) & 1 ? fail_err[m] : 0);
	}
}

/*
 * The spies saw exactly the pieces of [@off, @off + @len) by the layout
 * rule (chunk k on member k % NR at (k / NR) * CHUNK), each op @op, and
 * each ended with @fail_err on members set in @fail_mask and 0 elsewhere.
 */
static void expect_pieces(struct fixture *f, enum req_op op, uint64_t off,
			  uint64_t len, unsigned int fail_mask,
			  const int fail_err[NR])
{
	unsigned int want[NR] = {0};

	if (op == REQ_OP_DISCARD || op == REQ_OP_WRITE_ZEROES ||
	    op == REQ_OP_CACHE) {
		expect_merged(f, op, off, len, fail_mask, fail_err);
		return;
	}
	for (uint64_t o = off; o < off + len;) {
		unsigned int m;
		uint64_t moff, n = layout_piece(o, off + len, &m, &moff);
		bool found = false;

		for (unsigned int j = 0; j < f->spy[m]->nr; j++) {
			struct spy_rec *r = &f->spy[m]->rec[j];

			if (r->off_bytes != moff)
				continue;
			found = true;
			check_rec(r, n, op,
				  (fail_mask >> m) & 1 ? fail_err[m] : 0);
		}
		CHECK(found);
		want[m]++;
		o += n;
	}
	for (int m = 0; m < NR; m++)
		CHECK_EQ(f->spy[m]->nr, want[m]);
}

/* The status of the first failing piece to complete, over all spies. */
static int first_piece_error(struct fixture *f)
{
	unsigned int best = UINT_MAX;
	int err = 0;

	for (int m = 0; m < NR; m++) {
		for (unsigned int j = 0; j < f->spy[m]->nr; j++) {
			struct spy_rec *r = &f->spy[m]->rec[j];

			if (r->status && r->done_seq < best) {
				best = r->done_seq;
				err = r->status;
			}
		}
	}
	return err;
}

static void *xbuf(uint64_t len, int byte)
{
	void *p = NULL;

	CHECK_EQ(posix_memalign(&p, 4096, len), 0);
	memset(p, byte, len);
	return p;
}

/* Member @m's share of volume range [off, off + len): check with @byte. */
static void expect_member_range(struct fixture *f, unsigned int m, uint64_t off,
				uint64_t len, unsigned char byte)
{
	for (uint64_t o = off; o < off + len;) {
		unsigned int pm;
		uint64_t moff, n = layout_piece(o, off + len, &pm, &moff);

		if (pm == m)
			member_expect(f->path[m], moff, n, byte);
		o += n;
	}
}

/* ------------------------------------------------------------ cases */

/*
 * A 1 MiB write (at @off) with member @bad failing: error once, other
 * pieces done and on disk, the bad member untouched, the next bios work.
 */
static void case_write_one_member_fails(struct fixture *f, uint64_t off,
					unsigned int bad, int err)
{
	int errs[NR] = {0};
	unsigned char *buf = xbuf(MIB, 0xc1), *rd = xbuf(MIB, 0);

	for (int i = 0; i < NR; i++)
		member_fill(f->path[i], OLD_BYTE);
	errs[bad] = err;
	add_rule(f->err[bad], REQ_OP_WRITE, err);

	CHECK_EQ(do_bio(f->q, f->vol, f, REQ_OP_WRITE, off, MIB, buf, NULL),
		 err);
	expect_pieces(f, REQ_OP_WRITE, off, MIB, 1u << bad, errs);
	for (unsigned int m = 0; m < NR; m++)
		expect_member_range(f, m, off, MIB, m == bad ? OLD_BYTE : 0xc1);

	/* Next bios, fault still on: a read, and a write that misses @bad. */
	CHECK_EQ(do_bio(f->q, f->vol, f, REQ_OP_READ, off, MIB, rd, NULL), 0);
	for (uint64_t i = 0; i < MIB; i++) {
		uint64_t k = (off + i) / CHUNK;

		CHECK_EQ(rd[i], k % NR == bad ? OLD_BYTE : 0xc1);
	}
	{
		uint64_t other = (uint64_t)((bad + 1) % NR) * CHUNK;

		memset(buf, 0xc2, CHUNK);
		CHECK_EQ(do_bio(f->q, f->vol, f, REQ_OP_WRITE, other, CHUNK,
				buf, NULL),
			 0);
		member_expect(f->path[(bad + 1) % NR], 0, CHUNK, 0xc2);
	}

	/* Fault gone: the same write works and lands everywhere. */
	rules_clear(f);
	memset(buf, 0xc3, MIB);
	CHECK_EQ(do_bio(f->q, f->vol, f, REQ_OP_WRITE | REQ_FUA, off, MIB, buf,
			NULL),
		 0);
	for (unsigned int m = 0; m < NR; m++)
		expect_member_range(f, m, off, MIB, 0xc3);
	free(buf);
	free(rd);
}

/* Non-write ops with member 2 failing every op. */
static void case_other_ops_one_member_fails(struct fixture *f)
{
	static const unsigned int ops[] = {
	    REQ_OP_READ,	 REQ_OP_DISCARD,
	    REQ_OP_WRITE_ZEROES, REQ_OP_WRITE_ZEROES | REQ_NOUNMAP,
	    REQ_OP_CACHE,	 REQ_OP_EXTENTS,
	};
	const unsigned int bad = 2;
	int errs[NR] = {0};
	unsigned char *buf = xbuf(MIB, 0);

	errs[bad] = -EIO;
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		enum req_op op = (enum req_op)(ops[i] & REQ_OP_MASK);
		struct bio_extents ext = {0};
		uint64_t off = 3 * CHUNK + 4096; /* not chunk aligned */

		for (int m = 0; m < NR; m++)
			member_fill(f->path[m], OLD_BYTE);
		add_rule(f->err[bad], -1, -EIO);
		CHECK_EQ(do_bio(f->q, f->vol, f, ops[i], off, MIB, buf,
				op == REQ_OP_EXTENTS ? &ext : NULL),
			 -EIO);
		expect_pieces(f, op, off, MIB, 1u << bad, errs);
		bio_extents_free(&ext);
		if (op == REQ_OP_DISCARD || op == REQ_OP_WRITE_ZEROES) {
			/* The other members' pieces were carried out. */
			for (unsigned int m = 0; m < NR; m++)
				expect_member_range(f, m, off, MIB,
						    m == bad ? OLD_BYTE : 0);
		}
		rules_clear(f);
		/* The next bio of the same op works. */
		CHECK_EQ(do_bio(f->q, f->vol, f, ops[i], off, MIB, buf,
				op == REQ_OP_EXTENTS ? &ext : NULL),
			 0);
		bio_extents_free(&ext);
	}
	free(buf);
}

/* FLUSH fans out: one flush per member, one failing, error once. */
static void case_flush(struct fixture *f)
{
	int errs[NR] = {0};

	for (unsigned int bad = 0; bad < NR; bad++) {
		memset(errs, 0, sizeof(errs));
		errs[bad] = -EIO;
		add_rule(f->err[bad], REQ_OP_FLUSH, -EIO);
		CHECK_EQ(
		    do_bio(f->q, f->vol, f, REQ_OP_FLUSH, 0, 0, NULL, NULL),
		    -EIO);
		for (unsigned int m = 0; m < NR; m++) {
			CHECK_EQ(f->spy[m]->nr, 1);
			CHECK_EQ(f->spy[m]->rec[0].op, REQ_OP_FLUSH);
			CHECK(f->spy[m]->rec[0].done);
			CHECK_EQ(f->spy[m]->rec[0].status, errs[m]);
		}
		rules_clear(f);
		CHECK_EQ(
		    do_bio(f->q, f->vol, f, REQ_OP_FLUSH, 0, 0, NULL, NULL), 0);
		for (unsigned int m = 0; m < NR; m++)
			CHECK_EQ(f->spy[m]->rec[0].status, 0);
	}
	/* A write rule does not fail a flush, nor a flush rule a write. */
	add_rule(f->err[1], REQ_OP_WRITE, -EIO);
	CHECK_EQ(do_bio(f->q, f->vol, f, REQ_OP_FLUSH, 0, 0, NULL, NULL), 0);
	rules_clear(f);
	add_rule(f->err[1], REQ_OP_FLUSH, -EIO);
	{
		unsigned char *buf = xbuf(MIB, 0x77);

		CHECK_EQ(
		    do_bio(f->q, f->vol, f, REQ_OP_WRITE, 0, MIB, buf, NULL),
		    0);
		free(buf);
	}
	rules_clear(f);
}

/*
 * Two members fail with different errors: the parent ends with the error
 * of whichever failing piece completed first -- and once.
 */
static void case_first_error_wins(struct fixture *f)
{
	static const int pairs[][2] = {{-EIO, -ENOSPC}, {-ENOSPC, -EIO}};
	unsigned char *buf = xbuf(MIB, 0x99);

	for (size_t i = 0; i < 2; i++) {
		int errs[NR] = {0};
		int r;

		errs[1] = pairs[i][0];
		errs[3] = pairs[i][1];
		add_rule(f->err[1], REQ_OP_WRITE, errs[1]);
		add_rule(f->err[3], REQ_OP_WRITE, errs[3]);
		r = do_bio(f->q, f->vol, f, REQ_OP_WRITE, 0, MIB, buf, NULL);
		expect_pieces(f, REQ_OP_WRITE, 0, MIB, (1u << 1) | (1u << 3),
			      errs);
		CHECK_EQ(r, first_piece_error(f));
		rules_clear(f);

		/* Flush: members 0 and 2. */
		add_rule(f->err[0], REQ_OP_FLUSH, pairs[i][0]);
		add_rule(f->err[2], REQ_OP_FLUSH, pairs[i][1]);
		r = do_bio(f->q, f->vol, f, REQ_OP_FLUSH, 0, 0, NULL, NULL);
		CHECK(r == -EIO || r == -ENOSPC);
		CHECK_EQ(r, first_piece_error(f));
		rules_clear(f);
	}
	free(buf);
}

/* Rules on a bare error target over one file: overlap, op, skip, count. */
static void case_rule_semantics(struct fixture *f)
{
	char path[PATH_MAX + 16];
	struct file_target_opts fo = {0};
	struct target *file, *et;
	unsigned char *buf = xbuf(8192, 0);
	struct error_rule r;
	struct {
		unsigned int opf;
		uint64_t off, len;
		int want;
	} steps[] = {
	    /* rule: WRITE on [4096, 8192), skip 2, count 3 */
	    {REQ_OP_WRITE, 0, 4096, 0},	      /* no overlap: not counted */
	    {REQ_OP_READ, 4096, 4096, 0},     /* other op: not counted */
	    {REQ_OP_WRITE, 8192, 4096, 0},    /* touches the end only */
	    {REQ_OP_WRITE, 4096, 4096, 0},    /* match 1: skipped */
	    {REQ_OP_WRITE, 0, 8192, 0},	      /* match 2 (overlap): skipped */
	    {REQ_OP_WRITE, 4096, 4096, -EIO}, /* match 3: fails */
	    {REQ_OP_WRITE, 6144, 512, -EIO},  /* match 4, inside */
	    {REQ_OP_WRITE | REQ_FUA, 3584, 1024, -EIO}, /* match 5 */
	    {REQ_OP_WRITE, 4096, 4096, 0},		/* count used up */
	    {REQ_OP_WRITE, 4096, 4096, 0},
	};

	snprintf(path, sizeof(path), "%s/rules", f->dir);
	member_fill(path, OLD_BYTE);
	CHECK_EQ(file_target_open(&file, path, &fo), 0);
	CHECK_EQ(error_target_create(&et, file), 0);
	CHECK_EQ(et->size_bytes, MEMBER_BYTES);

	/* Invalid rules. */
	r = (struct error_rule){.op = REQ_OP_WRITE, .error = 0};
	CHECK_EQ(error_target_add_rule(et, &r), -EINVAL);
	r.error = EIO; /* positive errno: a classic slip */
	CHECK_EQ(error_target_add_rule(et, &r), -EINVAL);
	r = (struct error_rule){.op = REQ_OP_LAST, .error = -EIO};
	CHECK_EQ(error_target_add_rule(et, &r), -EINVAL);
	r = (struct error_rule){.op = -1, .error = -EIO};
	CHECK_EQ(error_target_add_rule(f->vol, &r), -EINVAL); /* not one */

	r = (struct error_rule){.op = REQ_OP_WRITE,
				.offset = 4096,
				.length = 4096,
				.error = -EIO,
				.skip = 2,
				.count = 3};
	CHECK_EQ(error_target_add_rule(et, &r), 0);
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		int got;

		memset(buf, 0x10 + (int)i, steps[i].len);
		got = do_bio(f->q, et, NULL, steps[i].opf, steps[i].off,
			     steps[i].len, buf, NULL);
		if (got != steps[i].want)
			fprintf(stderr, "rule step %zu\n", i);
		CHECK_EQ(got, steps[i].want);
	}
	/* Failed writes wrote nothing: [3584, 8192) is from steps 4 and 8/9. */
	member_expect(path, 0, 3584, 0x10 + 4);
	member_expect(path, 3584, 512, 0x10 + 4);
	member_expect(path, 4096, 4096, 0x10 + 9);
	member_expect(path, 8192, 4096, 0x10 + 2);

	/* count 0: after one skipped, every op fails, forever. */
	error_target_clear(et);
	r = (struct error_rule){.op = -1, .error = -ENOSPC, .skip = 1};
	CHECK_EQ(error_target_add_rule(et, &r), 0);
	CHECK_EQ(do_bio(f->q, et, NULL, REQ_OP_READ, 0, 4096, buf, NULL), 0);
	for (int i = 0; i < 3; i++) {
		CHECK_EQ(
		    do_bio(f->q, et, NULL, REQ_OP_WRITE, 0, 4096, buf, NULL),
		    -ENOSPC);
		CHECK_EQ(
		    do_bio(f->q, et, NULL, REQ_OP_READ, 65536, 4096, buf, NULL),
		    -ENOSPC);
		CHECK_EQ(do_bio(f->q, et, NULL, REQ_OP_FLUSH, 0, 0, NULL, NULL),
			 -ENOSPC);
		CHECK_EQ(
		    do_bio(f->q, et, NULL, REQ_OP_DISCARD, 0, 4096, NULL, NULL),
		    -ENOSPC);
	}
	/* Rule range past a bio: no match. */
	error_target_clear(et);
	r = (struct error_rule){
	    .op = -1, .offset = 65536, .length = 0, .error = -EIO};
	CHECK_EQ(error_target_add_rule(et, &r), 0);
	CHECK_EQ(do_bio(f->q, et, NULL, REQ_OP_WRITE, 0, 4096, buf, NULL), 0);
	CHECK_EQ(do_bio(f->q, et, NULL, REQ_OP_WRITE, MEMBER_BYTES - 4096, 4096,
			buf, NULL),
		 -EIO); /* length 0 = to the end */
	CHECK_EQ(do_bio(f->q, et, NULL, REQ_OP_FLUSH, 0, 0, NULL, NULL),
		 -EIO); /* a flush covers the whole target */
	error_target_clear(et);
	CHECK_EQ(do_bio(f->q, et, NULL, REQ_OP_WRITE, MEMBER_BYTES - 4096, 4096,
			buf, NULL),
		 0);

	target_destroy(et);
	unlink(path);
	free(buf);
}

/*
 * Failing bios over and over must not grow the heap: a leaked bio, clone
 * or piece per failure would.  (Steady state is reached first, so the
 * per-thread bio caches are already as big as they get.)
 */
static void case_no_leak(struct fixture *f)
{
	unsigned char *buf = xbuf(MIB, 0x42);
	size_t before = 0, after;

	add_rule(f->err[2], -1, -EIO);
	for (int round = 0; round < 2; round++) {
		if (round == 1)
			before = mallinfo2().uordblks;
		for (int i = 0; i < 300; i++) {
			CHECK_EQ(do_bio(f->q, f->vol, f, REQ_OP_WRITE, 0, MIB,
					buf, NULL),
				 -EIO);
			CHECK_EQ(do_bio(f->q, f->vol, f, REQ_OP_FLUSH, 0, 0,
					NULL, NULL),
				 -EIO);
			CHECK_EQ(do_bio(f->q, f->vol, f, REQ_OP_DISCARD, 0, MIB,
					NULL, NULL),
				 -EIO);
		}
	}
	after = mallinfo2().uordblks;
	if (after > before + 32 * 1024) {
		fprintf(stderr,
			"heap grew by %zu bytes over 900 failing bios\n",
			after - before);
		CHECK(after <= before + 32 * 1024);
	}
	rules_clear(f);
	free(buf);
}

static bool run_backend(enum ioq_backend be)
{
	struct fixture f;
	struct ioq *q;
	int r = ioq_create(&q, be, 0);

	if (be == IOQ_IO_URING && (r == -ENOSYS || r == -EPERM)) {
		printf("%s: not available here (%s), skipped\n",
		       ioq_backend_name(be), strerror(-r));
		return false;
	}
	CHECK_EQ(r, 0);
	ioq_set_current(q);
	fixture_setup(&f, q);

	for (unsigned int bad = 0; bad < NR; bad++) {
		case_write_one_member_fails(&f, 0, bad, -EIO);
		case_write_one_member_fails(&f, 40960, bad, -ENOSPC);
	}
	case_other_ops_one_member_fails(&f);
	case_flush(&f);
	case_first_error_wins(&f);
	case_rule_semantics(&f);
	case_no_leak(&f);

	fixture_teardown(&f);
	CHECK_EQ(ioq_inflight(q), 0);
	ioq_destroy(q);
	bio_pool_drain();
	printf("%s: ok\n", ioq_backend_name(be));
	return true;
}

int main(void)
{
	bool ran = false;

	setvbuf(stdout, NULL, _IOLBF, 0);
	ran |= run_backend(IOQ_IO_URING);
	ran |= run_backend(IOQ_THREADS);
	return ran ? 0 : 77;
}
