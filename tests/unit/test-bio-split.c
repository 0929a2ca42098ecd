/*
 * Description: bio_clone, bio_split, bio_chain, bio_endio and the bio pool.
 * A clone shares its source's vector (no copy); bio_split at every sector of
 * random multi-segment bios gives two pieces whose bytes, gathered through
 * the iterator and concatenated, are exactly the original's (compared with
 * memcmp against a copy made with plain memcpy), with the right bi_sector
 * and bi_done; bio_chain completes the parent exactly once, after the
 * parent and every child, in every completion order, with the first error
 * to reach it winning; bio_endio partial completion; a chain 1,000,000 deep
 * completes (on a small stack, so recursion would crash); bio_get/bio_put
 * and end_io callbacks that put; bios allocated on one thread and freed on
 * another, bio_pool_drain, and the pool's thread-exit destructor.  The
 * whole suite runs on the main thread and then again on a thread with a
 * 1 MiB stack.
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bionbd/bio.h>

#include "unit.h"

#define ARENA_BYTES (4u << 20)
#define MAX_SEGS 48
#define DEEP_CHAIN 1000000u

static unsigned char *arena; /* random bytes: every position differs */

static const int errs[] = {-EIO,   -ENOSPC, -EINVAL, -ENOMEM,
			   -EROFS, -EFBIG,  -EPERM};

struct seg {
	unsigned char *p;
	unsigned int len;
};

struct layout {
	unsigned int nr;
	struct seg seg[MAX_SEGS];
	uint64_t total;
	unsigned char *flat; /* the bytes, copied segment by segment */
};

static void arena_init(void)
{
	arena = aligned_alloc(BIO_PAGE_SIZE, ARENA_BYTES);
	CHECK(arena);
	for (size_t i = 0; i < ARENA_BYTES; i += 8) {
		uint64_t r = rnd();

		memcpy(arena + i, &r, 8);
	}
}

/*
 * @nr segments of arbitrary lengths (so segment edges fall anywhere inside
 * sectors) whose total is a whole number of sectors, as an NBD request is.
 */
static void layout_random(struct layout *l, unsigned int nr,
			  unsigned int max_len)
{
	uint64_t n = 0;

	CHECK(nr >= 1 && nr <= MAX_SEGS);
	l->nr = nr;
	l->total = 0;
	for (unsigned int i = 0; i < nr; i++) {
		unsigned int len = (unsigned int)rnd_range(1, max_len);

		if (i == nr - 1)
			len += (unsigned int)((SECTOR_SIZE -
					       (l->total + len) % SECTOR_SIZE) %
					      SECTOR_SIZE);
		l->seg[i].len = len;
		l->seg[i].p = arena + rnd_below(ARENA_BYTES - len + 1);
		l->total += len;
	}
	CHECK_EQ(l->total % SECTOR_SIZE, 0);
	l->flat = malloc(l->total);
	CHECK(l->flat);
	for (unsigned int i = 0; i < nr; i++) {
		memcpy(l->flat + n, l->seg[i].p, l->seg[i].len);
		n += l->seg[i].len;
	}
}

static struct bio *bio_from_layout(const struct layout *l, unsigned int opf)
{
	struct bio *bio = bio_alloc(l->nr, opf);

	CHECK(bio);
	for (unsigned int i = 0; i < l->nr; i++)
		CHECK_EQ(bio_add_buf(bio, l->seg[i].p, l->seg[i].len), 0);
	return bio;
}

/* The bytes @bio describes, read through its own iterator. */
static uint64_t gather(const struct bio *bio, unsigned char *out, uint64_t cap)
{
	struct bio_vec bv;
	struct bvec_iter it;
	uint64_t n = 0;

	bio_for_each_segment(bv, bio, it)
	{
		CHECK(bv.bv_len > 0);
		CHECK(n + bv.bv_len <= cap);
		memcpy(out + n, bvec_virt(&bv), bv.bv_len);
		n += bv.bv_len;
	}
	return n;
}

/* Lexicographic next permutation; false after the last one. */
static bool next_perm(int *a, int n)
{
	int i = n - 2, j = n - 1, t;

	while (i >= 0 && a[i] >= a[i + 1])
		i--;
	if (i < 0)
		return false;
	while (a[j] <= a[i])
		j--;
	t = a[i];
	a[i] = a[j];
	a[j] = t;
	for (i++, j = n - 1; i < j; i++, j--) {
		t = a[i];
		a[i] = a[j];
		a[j] = t;
	}
	return true;
}

/* -------- end_io callbacks used below -------- */

struct end_rec {
	struct bio *bio;
	int calls;
	int status;
	uint64_t done; /* bi_done seen by end_io */
};

static void rec_end_io(struct bio *bio)
{
	struct end_rec *r = bio->bi_private;

	CHECK_PTR_EQ(r->bio, bio);
	r->calls++;
	r->status = bio->bi_status;
	r->done = bio->bi_iter.bi_done;
}

/* bio_chain takes a child's end_io over: this one must never run. */
static void must_not_run(struct bio *bio)
{
	fprintf(stderr, "a chained child's own end_io ran (bio %p)\n",
		(void *)bio);
	abort();
}

static void put_end_io(struct bio *bio)
{
	atomic_int *calls = bio->bi_private;

	atomic_fetch_add(calls, 1);
	bio_put(bio);
}

/* -------- clone -------- */

static void test_clone_shares_vector(void)
{
	for (int round = 0; round < 50; round++) {
		unsigned int nr = (unsigned int)rnd_range(1, MAX_SEGS);
		unsigned int opf =
		    round % 2 ? REQ_OP_WRITE | REQ_FUA : REQ_OP_READ;
		struct layout l;
		struct bio *bio, *clone, *clone2;
		struct bvec_iter before;
		unsigned char *buf;
		uint64_t skip;

		layout_random(&l, nr, 9000);
		buf = malloc(l.total);
		CHECK(buf);
		bio = bio_from_layout(&l, opf);
		bio->bi_iter.bi_sector = rnd_below(1ull << 40);
		skip = rnd_below(l.total / SECTOR_SIZE) * SECTOR_SIZE;
		bio_advance(bio, (unsigned int)skip);
		before = bio->bi_iter;

		clone = bio_clone(bio);
		CHECK(clone);
		CHECK(clone != bio);
		/* The very same array: nothing was copied. */
		CHECK_PTR_EQ(clone->bi_io_vec, bio->bi_io_vec);
		if (nr <= BIO_INLINE_VECS)
			CHECK_PTR_EQ(clone->bi_io_vec, bio->bi_inline_vecs);
		CHECK_EQ(clone->bi_vcnt, bio->bi_vcnt);
		CHECK(memcmp(&clone->bi_iter, &bio->bi_iter,
			     sizeof(clone->bi_iter)) == 0);
		CHECK_EQ(clone->bi_opf, opf);
		CHECK(clone->bi_flags & BIO_CLONED);
		/* A clone frees no vector: it owns none. */
		CHECK_EQ(clone->bi_flags & BIO_EXT_VEC, 0);
		CHECK_EQ(clone->bi_flags & BIO_CHAIN, 0);
		CHECK_EQ(atomic_load(&clone->__bi_cnt), 1);
		CHECK_EQ(clone->bi_status, 0);

		CHECK_EQ(gather(clone, buf, l.total), l.total - skip);
		CHECK(memcmp(buf, l.flat + skip, l.total - skip) == 0);

		/* A clone of a clone still points at the original array. */
		clone2 = bio_clone(clone);
		CHECK(clone2);
		CHECK_PTR_EQ(clone2->bi_io_vec, bio->bi_io_vec);

		/* Moving a clone does not move its source. */
		bio_advance(clone, clone->bi_iter.bi_size);
		CHECK(memcmp(&before, &bio->bi_iter, sizeof(before)) == 0);

		bio_put(clone2);
		bio_put(clone);
		/*
		 * The source's vector survives its clones: were it freed,
		 * the allocator's own bookkeeping would now overwrite it.
		 */
		for (int i = 0; i < 8; i++)
			free(malloc(nr * sizeof(struct bio_vec)));
		memset(buf, 0, l.total);
		CHECK_EQ(gather(bio, buf, l.total), l.total - skip);
		CHECK(memcmp(buf, l.flat + skip, l.total - skip) == 0);

		bio_put(bio);
		free(buf);
		free(l.flat);
	}
}

/* -------- split -------- */

static void check_split_at(struct bio *base, const struct layout *l,
			   uint64_t skip, unsigned int s, unsigned char *buf)
{
	unsigned int nsec = bio_sectors(base);
	sector_t sector = base->bi_iter.bi_sector;
	uint64_t done = base->bi_iter.bi_done;
	uint64_t rest = l->total - skip, n;
	struct bio *work = bio_clone(base), *split, *split2 = NULL;

	CHECK(work);
	split = bio_split(work, s);
	CHECK(split);
	CHECK(split != work);

	CHECK_PTR_EQ(split->bi_io_vec, base->bi_io_vec);
	CHECK_EQ(split->bi_opf, base->bi_opf);
	CHECK_EQ(split->bi_iter.bi_sector, sector);
	CHECK_EQ(split->bi_iter.bi_size, (uint64_t)s * SECTOR_SIZE);
	CHECK_EQ(split->bi_iter.bi_done, done);
	CHECK_EQ(bio_sectors(split), s);
	CHECK_EQ(work->bi_iter.bi_sector, sector + s);
	CHECK_EQ(work->bi_iter.bi_size, (uint64_t)(nsec - s) * SECTOR_SIZE);
	CHECK_EQ(work->bi_iter.bi_done, done + (uint64_t)s * SECTOR_SIZE);

	/* Each piece on its own ... */
	n = gather(split, buf, rest);
	CHECK_EQ(n, (uint64_t)s * SECTOR_SIZE);
	CHECK(memcmp(buf, l->flat + skip, n) == 0);
	/* ... and split followed by remainder is the original, exactly. */
	memset(buf, 0, rest);
	n = gather(split, buf, rest);
	n += gather(work, buf + n, rest - n);
	CHECK_EQ(n, rest);
	CHECK(memcmp(buf, l->flat + skip, rest) == 0);

	/* Splitting a split: three pieces, still the same bytes. */
	if (s >= 2) {
		unsigned int t = (unsigned int)rnd_range(1, s - 1);

		split2 = bio_split(split, t);
		CHECK(split2);
		CHECK_EQ(split2->bi_iter.bi_done, done);
		CHECK_EQ(split->bi_iter.bi_done,
			 done + (uint64_t)t * SECTOR_SIZE);
		CHECK_EQ(split->bi_iter.bi_sector, sector + t);
		CHECK_EQ(bio_sectors(split), s - t);
		memset(buf, 0, rest);
		n = gather(split2, buf, rest);
		n += gather(split, buf + n, rest - n);
		n += gather(work, buf + n, rest - n);
		CHECK_EQ(n, rest);
		CHECK(memcmp(buf, l->flat + skip, rest) == 0);
		bio_put(split2);
	}
	bio_put(split);
	bio_put(work);
}

static void test_split_positions(void)
{
	for (int round = 0; round < 300; round++) {
		unsigned int nr = (unsigned int)rnd_range(1, MAX_SEGS);
		unsigned int opf =
		    round % 3 ? REQ_OP_READ : REQ_OP_WRITE | REQ_FUA;
		struct layout l;
		struct bio *base;
		struct bvec_iter before;
		unsigned char *buf;
		unsigned int nsec;
		uint64_t skip = 0;

		layout_random(&l, nr, round % 2 ? 3000 : 40000);
		buf = malloc(l.total);
		CHECK(buf);
		base = bio_from_layout(&l, opf);
		base->bi_iter.bi_sector = rnd_below(1ull << 40);
		/* Half the time start from a partially advanced bio. */
		if (round % 2 && l.total > SECTOR_SIZE)
			skip = rnd_below(l.total / SECTOR_SIZE) * SECTOR_SIZE;
		bio_advance(base, (unsigned int)skip);
		before = base->bi_iter;
		nsec = bio_sectors(base);

		if (nsec <= 200) {
			for (unsigned int s = 1; s < nsec; s++)
				check_split_at(base, &l, skip, s, buf);
		} else {
			for (int k = 0; k < 200; k++)
				check_split_at(
				    base, &l, skip,
				    (unsigned int)rnd_range(1, nsec - 1), buf);
		}
		/* Splitting clones never moved the base. */
		CHECK(memcmp(&before, &base->bi_iter, sizeof(before)) == 0);

		bio_put(base);
		free(buf);
		free(l.flat);
	}
}

/*
 * The stripe target's loop: split the front off the bio until what is left
 * is the last piece, chain every split to the bio, complete the pieces in
 * a random order.  Bytes, bi_done and the single parent completion are
 * all checked.
 */
static void test_split_chain_loop(void)
{
	for (int round = 0; round < 300; round++) {
		struct layout l;
		struct bio *bio, **pieces;
		int *order;
		unsigned int np = 0;
		struct end_rec rec = {0};
		unsigned char *buf;
		uint64_t off = 0, n = 0;
		int first_err = 0;

		layout_random(&l, (unsigned int)rnd_range(1, MAX_SEGS), 20000);
		buf = malloc(l.total);
		/* At most one piece per sector. */
		pieces = malloc(l.total / SECTOR_SIZE * sizeof(*pieces));
		order = malloc(l.total / SECTOR_SIZE * sizeof(*order));
		CHECK(buf && pieces && order);
		bio = bio_from_layout(&l, REQ_OP_WRITE);
		bio->bi_iter.bi_sector = 4096;
		bio->bi_end_io = rec_end_io;
		bio->bi_private = &rec;
		rec.bio = bio;

		for (;;) {
			unsigned int left = bio_sectors(bio);
			unsigned int s =
			    (unsigned int)rnd_range(1, left < 64 ? left : 64);
			struct bio *p;

			CHECK(np < l.total / SECTOR_SIZE);
			if (s == left) {
				pieces[np++] = bio;
				break;
			}
			p = bio_split(bio, s);
			CHECK(p);
			bio_chain(p, bio);
			pieces[np++] = p;
		}
		for (unsigned int i = 0; i < np; i++) {
			CHECK_EQ(pieces[i]->bi_iter.bi_done, off);
			CHECK_EQ(pieces[i]->bi_iter.bi_sector,
				 4096 + off / SECTOR_SIZE);
			off += pieces[i]->bi_iter.bi_size;
			n += gather(pieces[i], buf + n, l.total - n);
		}
		CHECK_EQ(off, l.total);
		CHECK_EQ(n, l.total);
		CHECK(memcmp(buf, l.flat, l.total) == 0);

		for (unsigned int i = 0; i < np; i++)
			order[i] = (int)i;
		shuffle_int(order, np);
		for (unsigned int i = 0; i < np; i++) {
			struct bio *p = pieces[order[i]];
			int err = rnd_below(8) ? 0 : errs[rnd_below(7)];

			CHECK_EQ(rec.calls, 0);
			if (err && !first_err)
				first_err = err;
			bio_endio(p, p->bi_iter.bi_size, err);
		}
		CHECK_EQ(rec.calls, 1);
		CHECK_EQ(rec.status, first_err);
		bio_put(bio);
		free(order);
		free(pieces);
		free(buf);
		free(l.flat);
	}
}

/* No-data bios split by range alone. */
static void test_split_nodata(void)
{
	static const unsigned int ops[] = {REQ_OP_DISCARD, REQ_OP_WRITE_ZEROES,
					   REQ_OP_EXTENTS, REQ_OP_CACHE};

	for (int round = 0; round < 400; round++) {
		unsigned int opf = ops[round % 4];
		unsigned int nsec = (unsigned int)rnd_range(2, 1u << 22);
		unsigned int s = (unsigned int)rnd_range(1, nsec - 1);
		sector_t sector = rnd_below(1ull << 40);
		struct bio *bio = bio_alloc(0, opf), *split;

		CHECK(bio);
		if (opf == REQ_OP_WRITE_ZEROES)
			opf |= REQ_NOUNMAP;
		bio->bi_opf = opf;
		bio->bi_iter.bi_sector = sector;
		bio->bi_iter.bi_size = nsec * SECTOR_SIZE;
		split = bio_split(bio, s);
		CHECK(split);
		CHECK_EQ(split->bi_opf, opf);
		CHECK_EQ(split->bi_iter.bi_sector, sector);
		CHECK_EQ(bio_sectors(split), s);
		CHECK_EQ(split->bi_iter.bi_done, 0);
		CHECK_EQ(bio->bi_iter.bi_sector, sector + s);
		CHECK_EQ(bio_sectors(bio), nsec - s);
		CHECK_EQ(bio->bi_iter.bi_done, (uint64_t)s * SECTOR_SIZE);
		CHECK_EQ(bio->bi_iter.bi_idx, 0);
		CHECK_EQ(bio->bi_iter.bi_bvec_done, 0);
		bio_put(split);
		bio_put(bio);
	}
}

/* -------- chain -------- */

/*
 * One parent and @k children, completed in @order (0 is the parent's own
 * I/O, c the child c) with @err[who] for each.  The parent's end_io must
 * run once, at the last event, with the first error in completion order.
 */
static void chain_run_order(int k, const int *order, const int *err)
{
	struct bio *parent, *child[6];
	struct end_rec rec = {0};
	int expect = 0;

	parent = bio_alloc(1, REQ_OP_WRITE);
	CHECK(parent);
	CHECK_EQ(bio_add_buf(parent, arena, 8 * 512), 0);
	parent->bi_end_io = rec_end_io;
	parent->bi_private = &rec;
	rec.bio = parent;
	for (int c = 1; c <= k; c++) {
		child[c] = bio_clone(parent);
		CHECK(child[c]);
		child[c]->bi_end_io = must_not_run;
		child[c]->bi_private = NULL;
		/* Keep a reference to see the chain drop its own. */
		bio_get(child[c]);
		bio_chain(child[c], parent);
	}

	for (int e = 0; e <= k; e++) {
		int who = order[e];
		struct bio *b = who ? child[who] : parent;

		CHECK_EQ(rec.calls, 0);
		if (err[who] && !expect)
			expect = err[who];
		if (who == 0) {
			/* The parent's own I/O ends in two calls. */
			bio_endio(parent, 1024, 0);
			CHECK_EQ(rec.calls, 0);
			bio_endio(parent, err[0] ? 0 : parent->bi_iter.bi_size,
				  err[0]);
			continue;
		}
		bio_endio(b, b->bi_iter.bi_size, err[who]);
		CHECK_EQ(atomic_load(&b->__bi_cnt), 1);
		CHECK_EQ(b->bi_status, err[who]);
	}
	CHECK_EQ(rec.calls, 1);
	CHECK_EQ(rec.status, expect);
	for (int c = 1; c <= k; c++)
		bio_put(child[c]);
	bio_put(parent);
}

/* Every order of 1 + k completions, k = 1..5, three error patterns. */
static void test_chain_orders(void)
{
	for (int k = 1; k <= 5; k++) {
		int order[6], err[6];

		for (int i = 0; i <= k; i++)
			order[i] = i;
		do {
			/* No errors; some; every event a different one. */
			for (int i = 0; i <= k; i++)
				err[i] = 0;
			chain_run_order(k, order, err);
			for (int i = 0; i <= k; i++)
				err[i] = rnd_below(2) ? errs[i] : 0;
			chain_run_order(k, order, err);
			for (int i = 0; i <= k; i++)
				err[i] = errs[i];
			chain_run_order(k, order, err);
		} while (next_perm(order, k + 1));
	}
}

/*
 * Random trees of chained bios, every node with its own I/O, completed in
 * a random order.  The expectation is computed from arrival times rather
 * than by replaying events: a node's status is whichever error reaches it
 * first, its own (at its own event) or a child's (when that child's whole
 * subtree is done); the root completes at the last event.
 */
#define TREE_MAX 14

static void test_chain_trees(void)
{
	for (int round = 0; round < 5000; round++) {
		int n = (int)rnd_range(2, TREE_MAX);
		int parent_of[TREE_MAX], err[TREE_MAX], order[TREE_MAX];
		int t_of[TREE_MAX], done_t[TREE_MAX], status[TREE_MAX];
		int best_t[TREE_MAX];
		struct bio *b[TREE_MAX];
		struct end_rec rec = {0};

		parent_of[0] = -1;
		for (int i = 1; i < n; i++)
			parent_of[i] = (int)rnd_below((uint64_t)i);
		for (int i = 0; i < n; i++) {
			err[i] = rnd_below(3) ? 0 : errs[rnd_below(7)];
			order[i] = i;
		}
		shuffle_int(order, (size_t)n);
		for (int e = 0; e < n; e++)
			t_of[order[e]] = e;

		/* Parents have lower indices: children are final first. */
		for (int i = 0; i < n; i++) {
			done_t[i] = t_of[i];
			status[i] = err[i];
			best_t[i] = err[i] ? t_of[i] : n;
		}
		for (int i = n - 1; i >= 1; i--) {
			int p = parent_of[i];

			if (done_t[i] > done_t[p])
				done_t[p] = done_t[i];
		}
		for (int i = n - 1; i >= 1; i--) {
			int p = parent_of[i];

			if (status[i] && done_t[i] < best_t[p]) {
				best_t[p] = done_t[i];
				status[p] = status[i];
			}
		}
		CHECK_EQ(done_t[0], n - 1);

		for (int i = 0; i < n; i++) {
			/* A mix of data and no-data bios. */
			if (i % 2) {
				b[i] = bio_alloc(1, REQ_OP_READ);
				CHECK(b[i]);
				CHECK_EQ(
				    bio_add_buf(b[i], arena + 512 * i, 2048),
				    0);
			} else {
				b[i] = bio_alloc(0, i % 4 ? REQ_OP_FLUSH
							  : REQ_OP_DISCARD);
				CHECK(b[i]);
				if (i % 4 == 0)
					b[i]->bi_iter.bi_size = 64 * 512;
			}
		}
		b[0]->bi_end_io = rec_end_io;
		b[0]->bi_private = &rec;
		rec.bio = b[0];
		for (int i = 1; i < n; i++) {
			b[i]->bi_end_io = must_not_run;
			bio_get(b[i]);
			bio_chain(b[i], b[parent_of[i]]);
		}

		for (int e = 0; e < n; e++) {
			int who = order[e];

			CHECK_EQ(rec.calls, 0);
			bio_endio(b[who], b[who]->bi_iter.bi_size, err[who]);
			for (int j = 1; j < n; j++)
				CHECK_EQ(atomic_load(&b[j]->__bi_cnt),
					 done_t[j] <= e ? 1 : 2);
		}
		CHECK_EQ(rec.calls, 1);
		CHECK_EQ(rec.status, status[0]);
		for (int j = 1; j < n; j++) {
			CHECK_EQ(b[j]->bi_status, status[j]);
			bio_put(b[j]);
		}
		bio_put(b[0]);
	}
}

/* -------- endio -------- */

static void test_endio_partial(void)
{
	struct end_rec rec = {0};
	struct bio *bio, *child;
	unsigned char *a = arena + 100, *b = arena + 70000;

	/* 3 + 13 sectors; completed in pieces that do not follow segments. */
	bio = bio_alloc(2, REQ_OP_READ);
	CHECK(bio);
	CHECK_EQ(bio_add_buf(bio, a, 3 * 512), 0);
	CHECK_EQ(bio_add_buf(bio, b, 13 * 512), 0);
	bio->bi_iter.bi_sector = 50;
	bio->bi_end_io = rec_end_io;
	bio->bi_private = &rec;
	rec.bio = bio;

	bio_endio(bio, 1024, 0);
	CHECK_EQ(rec.calls, 0);
	CHECK_EQ(bio->bi_iter.bi_sector, 52);
	CHECK_EQ(bio->bi_iter.bi_size, 14 * 512);
	CHECK_EQ(bio->bi_iter.bi_done, 1024);
	CHECK_PTR_EQ(bio_data(bio), a + 1024);
	bio_endio(bio, 0, 0); /* nothing done, nothing changes */
	CHECK_EQ(rec.calls, 0);
	CHECK_EQ(bio->bi_iter.bi_size, 14 * 512);
	bio_endio(bio, 2048, 0); /* across the segment edge */
	CHECK_EQ(rec.calls, 0);
	CHECK_PTR_EQ(bio_data(bio), b + 1536);
	CHECK_EQ(bio->bi_iter.bi_sector, 56);
	bio_endio(bio, 512, 0);
	CHECK_EQ(rec.calls, 0);
	bio_endio(bio, bio->bi_iter.bi_size, 0);
	CHECK_EQ(rec.calls, 1);
	CHECK_EQ(rec.status, 0);
	CHECK_EQ(rec.done, 16 * 512);
	CHECK_EQ(bio->bi_iter.bi_size, 0);
	CHECK_EQ(bio->bi_iter.bi_sector, 66);
	bio_put(bio);

	/* An error after some progress ends the bio at once. */
	rec = (struct end_rec){0};
	bio = bio_alloc(1, REQ_OP_WRITE);
	CHECK(bio);
	CHECK_EQ(bio_add_buf(bio, b, 8 * 512), 0);
	bio->bi_end_io = rec_end_io;
	bio->bi_private = &rec;
	rec.bio = bio;
	bio_endio(bio, 512, 0);
	bio_endio(bio, 512, 0);
	CHECK_EQ(rec.calls, 0);
	bio_endio(bio, 512, -EIO);
	CHECK_EQ(rec.calls, 1);
	CHECK_EQ(rec.status, -EIO);
	bio_put(bio);

	/* An error before any progress; and bio_io_error. */
	for (int i = 0; i < 2; i++) {
		rec = (struct end_rec){0};
		bio = bio_alloc(1, REQ_OP_WRITE);
		CHECK(bio);
		CHECK_EQ(bio_add_buf(bio, b, 8 * 512), 0);
		bio->bi_end_io = rec_end_io;
		bio->bi_private = &rec;
		rec.bio = bio;
		if (i)
			bio_io_error(bio, -ENOSPC);
		else
			bio_endio(bio, 0, -ENOSPC);
		CHECK_EQ(rec.calls, 1);
		CHECK_EQ(rec.status, -ENOSPC);
		bio_put(bio);
	}

	/* A discard completes in parts too. */
	rec = (struct end_rec){0};
	bio = bio_alloc(0, REQ_OP_DISCARD);
	CHECK(bio);
	bio->bi_iter.bi_size = 1u << 20;
	bio->bi_end_io = rec_end_io;
	bio->bi_private = &rec;
	rec.bio = bio;
	for (int i = 0; i < 255; i++) {
		bio_endio(bio, 4096, 0);
		CHECK_EQ(rec.calls, 0);
	}
	bio_endio(bio, 4096, 0);
	CHECK_EQ(rec.calls, 1);
	CHECK_EQ(rec.done, 1u << 20);
	bio_put(bio);

	/*
	 * Partial completion of a chained child and of its parent: neither
	 * half-done bio counts as done.
	 */
	rec = (struct end_rec){0};
	bio = bio_alloc(1, REQ_OP_WRITE);
	CHECK(bio);
	CHECK_EQ(bio_add_buf(bio, b, 16 * 512), 0);
	bio->bi_end_io = rec_end_io;
	bio->bi_private = &rec;
	rec.bio = bio;
	child = bio_split(bio, 8);
	CHECK(child);
	bio_chain(child, bio);
	bio_endio(child, 4 * 512, 0);
	bio_endio(bio, 4 * 512, 0);
	bio_endio(bio, 4 * 512, 0); /* parent's own part is done */
	CHECK_EQ(rec.calls, 0);
	bio_endio(child, 2 * 512, 0);
	CHECK_EQ(rec.calls, 0);
	bio_endio(child, 512, -EROFS); /* child fails part-way */
	CHECK_EQ(rec.calls, 1);
	CHECK_EQ(rec.status, -EROFS);
	bio_put(bio);
}

/*
 * @n bios, each chained to the one before.  Every bio but the deepest has
 * finished its own part, so ending the deepest walks all @n levels; done
 * recursively that is n stack frames and cannot fit a 1 MiB stack (nor
 * 8 MiB).  Then the other order, which walks one level per call.
 */
static void test_deep_chain(unsigned int n)
{
	struct bio **v = malloc(n * sizeof(*v));
	struct end_rec rec = {0};

	CHECK(v);
	for (unsigned int i = 0; i < n; i++) {
		v[i] = bio_alloc(0, REQ_OP_FLUSH);
		CHECK(v[i]);
		if (i)
			bio_chain(v[i], v[i - 1]);
	}
	v[0]->bi_end_io = rec_end_io;
	v[0]->bi_private = &rec;
	rec.bio = v[0];
	for (unsigned int i = 0; i < n - 1; i++)
		bio_endio(v[i], 0, 0);
	CHECK_EQ(rec.calls, 0);
	bio_endio(v[n - 1], 0, -EIO);
	CHECK_EQ(rec.calls, 1);
	CHECK_EQ(rec.status, -EIO);
	bio_put(v[0]);

	rec = (struct end_rec){0};
	for (unsigned int i = 0; i < n; i++) {
		v[i] = bio_alloc(0, REQ_OP_FLUSH);
		CHECK(v[i]);
		if (i)
			bio_chain(v[i], v[i - 1]);
	}
	v[0]->bi_end_io = rec_end_io;
	v[0]->bi_private = &rec;
	rec.bio = v[0];
	for (unsigned int i = n; i-- > 0;) {
		CHECK_EQ(rec.calls, 0);
		bio_endio(v[i], 0, i == n / 2 ? -ENOSPC : 0);
	}
	CHECK_EQ(rec.calls, 1);
	CHECK_EQ(rec.status, -ENOSPC);
	bio_put(v[0]);
	free(v);
}

/* -------- references and the pool -------- */

static void test_refcount(void)
{
	struct bio *bio, *others[64], *again;

	bio = bio_alloc(0, REQ_OP_READ);
	CHECK(bio);
	CHECK_EQ(atomic_load(&bio->__bi_cnt), 1);
	bio_get(bio);
	bio_get(bio);
	CHECK_EQ(atomic_load(&bio->__bi_cnt), 3);
	bio_put(bio);
	CHECK_EQ(atomic_load(&bio->__bi_cnt), 2);
	bio_put(bio);
	CHECK_EQ(atomic_load(&bio->__bi_cnt), 1);

	/* Still referenced: the pool must not hand it out. */
	for (int i = 0; i < 64; i++) {
		others[i] = bio_alloc(0, REQ_OP_READ);
		CHECK(others[i]);
		CHECK(others[i] != bio);
	}
	for (int i = 0; i < 64; i++)
		bio_put(others[i]);

	/*
	 * The last put gives it back to this thread's pool, which is empty
	 * apart from it: the next allocation is served from there.
	 */
	bio_pool_drain();
	bio_put(bio);
	again = bio_alloc(0, REQ_OP_WRITE);
	CHECK_PTR_EQ(again, bio);
	CHECK_EQ(atomic_load(&again->__bi_cnt), 1);
	bio_put(again);
}

static void test_end_io_puts(void)
{
	atomic_int calls = 0;
	struct bio *bio, *again, *children[5], *got[16];

	/* The owner holds another reference: end_io's put is not the last. */
	bio = bio_alloc(0, REQ_OP_FLUSH);
	CHECK(bio);
	bio->bi_end_io = put_end_io;
	bio->bi_private = &calls;
	bio_get(bio);
	bio_endio(bio, 0, -EIO);
	CHECK_EQ(atomic_load(&calls), 1);
	CHECK_EQ(atomic_load(&bio->__bi_cnt), 1);
	CHECK_EQ(bio->bi_status, -EIO);
	bio_put(bio);

	/* end_io's put is the last: the bio is back in the pool. */
	bio_pool_drain();
	bio = bio_alloc(0, REQ_OP_FLUSH);
	CHECK(bio);
	bio->bi_end_io = put_end_io;
	bio->bi_private = &calls;
	bio_endio(bio, 0, 0);
	CHECK_EQ(atomic_load(&calls), 2);
	again = bio_alloc(0, REQ_OP_READ);
	CHECK_PTR_EQ(again, bio);
	bio_put(again);

	/*
	 * A parent whose end_io puts it, five chained children: afterwards
	 * exactly those six bios are in the (drained) pool, each once.  A
	 * missed put leaves one out; a double put would hand one out twice.
	 */
	bio_pool_drain();
	bio = bio_alloc(1, REQ_OP_WRITE);
	CHECK(bio);
	CHECK_EQ(bio_add_buf(bio, arena, 4096), 0);
	bio->bi_end_io = put_end_io;
	bio->bi_private = &calls;
	for (int i = 0; i < 5; i++) {
		children[i] = bio_clone(bio);
		CHECK(children[i]);
		bio_chain(children[i], bio);
	}
	bio_endio(children[3], 4096, 0);
	bio_endio(bio, 4096, 0);
	bio_endio(children[0], 4096, 0);
	bio_endio(children[4], 4096, -EIO);
	bio_endio(children[1], 4096, 0);
	CHECK_EQ(atomic_load(&calls), 2);
	bio_endio(children[2], 4096, 0);
	CHECK_EQ(atomic_load(&calls), 3);
	for (int i = 0; i < 16; i++) {
		got[i] = bio_alloc(0, REQ_OP_READ);
		CHECK(got[i]);
		for (int j = 0; j < i; j++)
			CHECK(got[j] != got[i]);
	}
	for (int i = 0; i < 6; i++) {
		const struct bio *want = i < 5 ? children[i] : bio;
		bool found = false;

		for (int j = 0; j < 6; j++)
			found |= got[j] == want;
		CHECK(found);
	}
	for (int i = 0; i < 16; i++)
		bio_put(got[i]);
}

/* Bytes malloc reports in use, all arenas; -1 when it cannot tell. */
static long long heap_in_use(void)
{
	static int usable = -1;

	if (usable < 0) {
		/*
		 * Sanitizers replace malloc and its statistics; only trust
		 * mallinfo2 if it sees a known allocation.  glibc counts
		 * chunks cached in its tcache as in use already, so a few
		 * of these may not show: ask for half.
		 */
		size_t before = mallinfo2().uordblks;
		void *p[64];

		for (int i = 0; i < 64; i++)
			p[i] = malloc(1000);
		usable = mallinfo2().uordblks >= before + 64 * 1000 / 2;
		for (int i = 0; i < 64; i++)
			free(p[i]);
		if (!usable)
			printf("malloc statistics unavailable: "
			       "memory-return checks not run\n");
	}
	return usable ? (long long)mallinfo2().uordblks : -1;
}

/* A leak of the pool would be thousands of bios; allow for noise. */
#define HEAP_SLACK (256 * 1024)

static void test_pool_drain(void)
{
	enum { N = 3000 };
	struct bio **v = malloc(N * sizeof(*v));
	long long m0, m1, m2;

	CHECK(v);
	bio_pool_drain();
	m0 = heap_in_use();
	for (int i = 0; i < N; i++) {
		v[i] = bio_alloc(i % 2 ? 0 : 9, REQ_OP_READ);
		CHECK(v[i]);
	}
	for (int i = 0; i < N; i++)
		bio_put(v[i]);
	m1 = heap_in_use();
	bio_pool_drain();
	m2 = heap_in_use();
	if (m0 >= 0) {
		/* The pool kept the bios (external vectors went back) ... */
		CHECK(m1 - m0 >= (long long)(N * sizeof(struct bio)) / 2);
		/* ... and drain gave them back to malloc. */
		CHECK(m2 - m0 < HEAP_SLACK);
	}
	/* Draining twice is harmless, and allocation works afterwards. */
	bio_pool_drain();
	for (int i = 0; i < N; i++) {
		v[i] = bio_alloc(1, REQ_OP_WRITE);
		CHECK(v[i]);
		CHECK_EQ(atomic_load(&v[i]->__bi_cnt), 1);
	}
	for (int i = 0; i < N; i++)
		bio_put(v[i]);
	free(v);
}

/* Phase 1: allocated on one thread, put on two others. */
#define XN 10000

struct xfer {
	struct bio *bios[XN];
	unsigned char *buf;
};

static void *xfer_alloc(void *arg)
{
	struct xfer *x = arg;

	for (unsigned int i = 0; i < XN; i++) {
		struct bio *bio = bio_alloc(i % 7, REQ_OP_WRITE);

		CHECK(bio);
		CHECK_EQ(bio_add_buf(bio, x->buf + i, 512), 0);
		bio->bi_iter.bi_sector = i;
		bio->bi_private = x;
		x->bios[i] = bio;
	}
	return NULL;
}

struct xfer_put {
	struct xfer *x;
	unsigned int parity;
	bool warm; /* allocate first, so this thread has a pool */
};

static void *xfer_put(void *arg)
{
	struct xfer_put *xp = arg;
	struct bio **mine;

	if (xp->warm)
		bio_put(bio_alloc(0, REQ_OP_READ));
	for (unsigned int i = xp->parity; i < XN; i += 2) {
		struct bio *bio = xp->x->bios[i];

		CHECK_EQ(bio->bi_iter.bi_sector, i);
		CHECK_PTR_EQ(bio->bi_private, xp->x);
		CHECK_PTR_EQ(bio_data(bio), xp->x->buf + i);
		CHECK_EQ(atomic_load(&bio->__bi_cnt), 1);
		bio_put(bio);
	}
	/* Reuse what other threads allocated: it must come back clean. */
	mine = malloc(XN / 2 * sizeof(*mine));
	CHECK(mine);
	for (unsigned int i = 0; i < XN / 2; i++) {
		mine[i] = bio_alloc(i % 2, REQ_OP_READ);
		CHECK(mine[i]);
		CHECK_EQ(mine[i]->bi_vcnt, 0);
		CHECK_EQ(mine[i]->bi_iter.bi_size, 0);
		CHECK_EQ(mine[i]->bi_iter.bi_sector, 0);
		CHECK(mine[i]->bi_private == NULL);
		CHECK_PTR_EQ(mine[i]->bi_io_vec, mine[i]->bi_inline_vecs);
		CHECK_EQ(atomic_load(&mine[i]->__bi_cnt), 1);
	}
	for (unsigned int i = 0; i < XN / 2; i++)
		bio_put(mine[i]);
	free(mine);
	/* Exit with a full pool: the thread-exit destructor frees it. */
	return NULL;
}

/* Phase 2: producers and consumers at the same time. */
#define PC_PRODUCERS 2
#define PC_CONSUMERS 2
#define PC_PER_PRODUCER 50000u
#define PC_RING 1024

struct pc {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct bio *ring[PC_RING];
	unsigned int head, tail; /* head - tail = queued */
	unsigned int producers_left;
	atomic_int ended;
	atomic_uchar seen[PC_PRODUCERS * PC_PER_PRODUCER];
	unsigned char *buf;
};

struct pc_arg {
	struct pc *pc;
	unsigned int id;
};

static void pc_end_io(struct bio *bio)
{
	struct pc *pc = bio->bi_private;
	/* Completion moved bi_sector by the size done; undo that. */
	sector_t id =
	    bio->bi_iter.bi_sector - bio->bi_iter.bi_done / SECTOR_SIZE;
	CHECK(id < PC_PRODUCERS * PC_PER_PRODUCER);
	CHECK_EQ(atomic_fetch_add(&pc->seen[id], 1), 0);
	atomic_fetch_add(&pc->ended, 1);
	bio_put(bio);
}

static void *pc_producer(void *arg)
{
	struct pc_arg *a = arg;
	struct pc *pc = a->pc;

	for (unsigned int i = 0; i < PC_PER_PRODUCER; i++) {
		unsigned int nr = i % 9;
		struct bio *bio = bio_alloc(nr, REQ_OP_WRITE);

		CHECK(bio);
		for (unsigned int s = 0; s < nr; s++)
			CHECK_EQ(bio_add_buf(bio, pc->buf + 512 * s, 512), 0);
		bio->bi_iter.bi_sector = a->id * PC_PER_PRODUCER + i;
		bio->bi_end_io = pc_end_io;
		bio->bi_private = pc;

		pthread_mutex_lock(&pc->lock);
		while (pc->head - pc->tail == PC_RING)
			pthread_cond_wait(&pc->cond, &pc->lock);
		pc->ring[pc->head++ % PC_RING] = bio;
		pthread_cond_broadcast(&pc->cond);
		pthread_mutex_unlock(&pc->lock);
	}
	pthread_mutex_lock(&pc->lock);
	pc->producers_left--;
	pthread_cond_broadcast(&pc->cond);
	pthread_mutex_unlock(&pc->lock);
	return NULL;
}

static void *pc_consumer(void *arg)
{
	struct pc_arg *a = arg;
	struct pc *pc = a->pc;

	for (;;) {
		struct bio *bio, *clone;

		pthread_mutex_lock(&pc->lock);
		while (pc->head == pc->tail && pc->producers_left)
			pthread_cond_wait(&pc->cond, &pc->lock);
		if (pc->head == pc->tail) {
			pthread_mutex_unlock(&pc->lock);
			break;
		}
		bio = pc->ring[pc->tail++ % PC_RING];
		pthread_cond_broadcast(&pc->cond);
		pthread_mutex_unlock(&pc->lock);

		/* A clone made here, of a bio made there. */
		clone = bio_clone(bio);
		CHECK(clone);
		CHECK_PTR_EQ(clone->bi_io_vec, bio->bi_io_vec);
		CHECK_EQ(clone->bi_vcnt, bio->bi_vcnt);
		CHECK_EQ(bio_sectors(clone), bio->bi_vcnt);
		bio_put(clone);
		bio_endio(bio, bio->bi_iter.bi_size, 0);
	}
	return NULL;
}

static void test_pool_cross_thread(void)
{
	struct xfer *x = calloc(1, sizeof(*x));
	struct xfer_put even = {.parity = 0, .warm = false};
	struct xfer_put odd = {.parity = 1, .warm = true};
	struct pc *pc = calloc(1, sizeof(*pc));
	struct pc_arg pargs[PC_PRODUCERS], cargs[PC_CONSUMERS];
	pthread_t ta, tb, tc, tp[PC_PRODUCERS], tcons[PC_CONSUMERS];
	long long m0, m1;

	CHECK(x && pc);
	bio_pool_drain();
	m0 = heap_in_use();

	x->buf = arena;
	even.x = odd.x = x;
	CHECK_EQ(pthread_create(&ta, NULL, xfer_alloc, x), 0);
	CHECK_EQ(pthread_join(ta, NULL), 0);
	CHECK_EQ(pthread_create(&tb, NULL, xfer_put, &even), 0);
	CHECK_EQ(pthread_create(&tc, NULL, xfer_put, &odd), 0);
	CHECK_EQ(pthread_join(tb, NULL), 0);
	CHECK_EQ(pthread_join(tc, NULL), 0);

	pthread_mutex_init(&pc->lock, NULL);
	pthread_cond_init(&pc->cond, NULL);
	pc->producers_left = PC_PRODUCERS;
	pc->buf = arena;
	for (unsigned int i = 0; i < PC_CONSUMERS; i++) {
		cargs[i] = (struct pc_arg){.pc = pc, .id = i};
		CHECK_EQ(
		    pthread_create(&tcons[i], NULL, pc_consumer, &cargs[i]), 0);
	}
	for (unsigned int i = 0; i < PC_PRODUCERS; i++) {
		pargs[i] = (struct pc_arg){.pc = pc, .id = i};
		CHECK_EQ(pthread_create(&tp[i], NULL, pc_producer, &pargs[i]),
			 0);
	}
	for (unsigned int i = 0; i < PC_PRODUCERS; i++)
		CHECK_EQ(pthread_join(tp[i], NULL), 0);
	for (unsigned int i = 0; i < PC_CONSUMERS; i++)
		CHECK_EQ(pthread_join(tcons[i], NULL), 0);
	CHECK_EQ(atomic_load(&pc->ended), PC_PRODUCERS * PC_PER_PRODUCER);
	for (unsigned int i = 0; i < PC_PRODUCERS * PC_PER_PRODUCER; i++)
		CHECK_EQ(atomic_load(&pc->seen[i]), 1);
	pthread_cond_destroy(&pc->cond);
	pthread_mutex_destroy(&pc->lock);

	/*
	 * Every thread above exited with bios in its pool (tc and the
	 * consumers thousands); the destructors must have freed them all.
	 */
	m1 = heap_in_use();
	if (m0 >= 0)
		CHECK(m1 - m0 < HEAP_SLACK);
	free(pc);
	free(x);
}

/*
 * Regression: the pool's thread-exit destructor used to leave the pool
 * marked live, so bios that a later destructor of the same thread (an
 * ioq's, a front end's) allocated or put went into a pool nobody would
 * drain again, and leaked.  glibc runs destructors in key order, and this
 * key is created after the pool's (the pool's exists since the first
 * bio_alloc), so its destructor runs after the pool's.
 */
#define LATE_BIOS 3000

static pthread_key_t late_key;

static void late_destructor(void *arg)
{
	struct bio **v = arg;

	for (int i = 0; i < LATE_BIOS; i++) {
		v[i] = bio_alloc(0, REQ_OP_READ);
		CHECK(v[i]);
	}
	for (int i = 0; i < LATE_BIOS; i++)
		bio_put(v[i]);
}

static void *late_thread(void *arg)
{
	/* A pool for this thread, with its exit destructor armed. */
	bio_put(bio_alloc(0, REQ_OP_READ));
	CHECK_EQ(pthread_setspecific(late_key, arg), 0);
	return NULL;
}

static void test_pool_late_thread_exit(void)
{
	struct bio **v = malloc(LATE_BIOS * sizeof(*v));
	long long m0, m1;
	pthread_t t;

	CHECK(v);
	CHECK_EQ(pthread_key_create(&late_key, late_destructor), 0);
	bio_pool_drain();
	m0 = heap_in_use();
	CHECK_EQ(pthread_create(&t, NULL, late_thread, v), 0);
	CHECK_EQ(pthread_join(t, NULL), 0);
	m1 = heap_in_use();
	if (m0 >= 0)
		CHECK(m1 - m0 < HEAP_SLACK);
	CHECK_EQ(pthread_key_delete(late_key), 0);
	free(v);
}

/* -------- driver -------- */

static void run_suite(const char *where)
{
	test_clone_shares_vector();
	test_split_positions();
	test_split_chain_loop();
	test_split_nodata();
	test_chain_orders();
	test_chain_trees();
	test_endio_partial();
	test_deep_chain(DEEP_CHAIN);
	test_refcount();
	test_end_io_puts();
	test_pool_drain();
	test_pool_cross_thread();
	test_pool_late_thread_exit();
	printf("test-bio-split: suite passed on %s\n", where);
	fflush(stdout);
}

static void *suite_thread(void *arg)
{
	unit_seed_thread(*(uint64_t *)arg);
	run_suite("a 1 MiB-stack thread");
	/* No bio_pool_drain: leave the pool to the thread-exit destructor. */
	return NULL;
}

int main(void)
{
	uint64_t seed = unit_seed("test-bio-split");
	pthread_attr_t attr;
	pthread_t t;
	long long m0, m1;

	arena_init();
	run_suite("the main thread");

	bio_pool_drain();
	m0 = heap_in_use();
	CHECK_EQ(pthread_attr_init(&attr), 0);
	CHECK_EQ(pthread_attr_setstacksize(&attr, 1u << 20), 0);
	seed ^= 0x5bd1e995;
	CHECK_EQ(pthread_create(&t, &attr, suite_thread, &seed), 0);
	CHECK_EQ(pthread_join(t, NULL), 0);
	pthread_attr_destroy(&attr);
	m1 = heap_in_use();
	if (m0 >= 0)
		CHECK(m1 - m0 < HEAP_SLACK);

	bio_pool_drain();
	free(arena);
	printf("test-bio-split: ok\n");
	return 0;
}
