/*
 * Description: the bio and its iterator.  bio_alloc with inline and external
 * vectors (and that a recycled bio comes back clean); bio_add_buf splitting
 * an address into page + offset, a buffer spanning many pages staying one
 * segment, and its errors (full vector, clone, zero length, bi_size
 * overflow); bio_for_each_segment over multi-segment bios from partially
 * advanced and trimmed iterators; bio_advance across segment boundaries
 * (bi_idx, bi_bvec_done, bi_sector, bi_size, bi_done); the accessors
 * (bio_data, bio_page, bio_offset, bio_cur_sectors, bio_sectors,
 * bio_data_dir, bio_has_data) for every op; and no-data ops (discard,
 * write-zeroes, cache, extents) advancing without touching a vector.
 *
 * Every expectation is computed here from the list of buffers the test
 * added, not from the engine's own arithmetic.
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bionbd/bio.h>

#include "unit.h"

#define ARENA_BYTES (8u << 20)
#define MAX_SEGS 64

/* Page aligned and filled with random bytes, so every position differs. */
static unsigned char *arena;

struct seg {
	unsigned char *p;
	unsigned int len;
};

/* What the test put into a bio, plus derived positions. */
struct layout {
	unsigned int nr;
	struct seg seg[MAX_SEGS];
	uint64_t start[MAX_SEGS + 1]; /* byte where segment i begins */
	uint64_t total;
};

static const unsigned int all_ops[] = {
    REQ_OP_READ,  REQ_OP_WRITE,	       REQ_OP_FLUSH,   REQ_OP_DISCARD,
    REQ_OP_CACHE, REQ_OP_WRITE_ZEROES, REQ_OP_EXTENTS,
};

/*
 * Which ops move data towards the device, listed by hand rather than
 * derived from the op number: bio_data_dir() must agree with this table.
 */
static int expected_dir(unsigned int op)
{
	switch (op) {
	case REQ_OP_WRITE:
	case REQ_OP_DISCARD:
	case REQ_OP_WRITE_ZEROES:
		return 1;
	case REQ_OP_READ:
	case REQ_OP_FLUSH:
	case REQ_OP_CACHE:
	case REQ_OP_EXTENTS:
		return 0;
	}
	abort();
}

static bool op_carries_data(unsigned int op)
{
	return op == REQ_OP_READ || op == REQ_OP_WRITE;
}

static void arena_init(void)
{
	arena = aligned_alloc(BIO_PAGE_SIZE, ARENA_BYTES);
	CHECK(arena);
	for (size_t i = 0; i < ARENA_BYTES; i += 8) {
		uint64_t r = rnd();

		memcpy(arena + i, &r, 8);
	}
}

/* The page holding @p, computed from its distance to the aligned arena. */
static void *page_of(const unsigned char *p)
{
	size_t off = (size_t)(p - arena);

	return arena + off / BIO_PAGE_SIZE * BIO_PAGE_SIZE;
}

static unsigned int in_page(const unsigned char *p)
{
	return (unsigned int)((size_t)(p - arena) % BIO_PAGE_SIZE);
}

static void layout_finish(struct layout *l)
{
	l->start[0] = 0;
	for (unsigned int i = 0; i < l->nr; i++)
		l->start[i + 1] = l->start[i] + l->seg[i].len;
	l->total = l->start[l->nr];
}

/*
 * @nr segments of 1..@max_len bytes at random places in the arena; when
 * @sector_lens every length is a multiple of 512 (so bi_sector is exact).
 */
static void layout_random(struct layout *l, unsigned int nr,
			  unsigned int max_len, bool sector_lens)
{
	CHECK(nr <= MAX_SEGS);
	l->nr = nr;
	for (unsigned int i = 0; i < nr; i++) {
		unsigned int len = (unsigned int)rnd_range(1, max_len);

		if (sector_lens)
			len =
			    (len + SECTOR_SIZE - 1) / SECTOR_SIZE * SECTOR_SIZE;
		l->seg[i].len = len;
		l->seg[i].p = arena + rnd_below(ARENA_BYTES - len + 1);
	}
	layout_finish(l);
}

static struct bio *bio_from_layout(const struct layout *l, unsigned int opf)
{
	struct bio *bio = bio_alloc(l->nr, opf);

	CHECK(bio);
	for (unsigned int i = 0; i < l->nr; i++)
		CHECK_EQ(bio_add_buf(bio, l->seg[i].p, l->seg[i].len), 0);
	CHECK_EQ(bio->bi_vcnt, l->nr);
	CHECK_EQ(bio->bi_iter.bi_size, l->total);
	return bio;
}

/* Everything a just-allocated bio must look like. */
static void check_fresh(const struct bio *bio, unsigned int opf,
			unsigned int nr_vecs)
{
	CHECK(bio);
	CHECK_EQ(bio->bi_opf, opf);
	CHECK_EQ(bio_op(bio), opf & REQ_OP_MASK);
	CHECK_EQ(bio->bi_status, 0);
	CHECK_EQ(bio->bi_iter.bi_sector, 0);
	CHECK_EQ(bio->bi_iter.bi_size, 0);
	CHECK_EQ(bio->bi_iter.bi_idx, 0);
	CHECK_EQ(bio->bi_iter.bi_bvec_done, 0);
	CHECK_EQ(bio->bi_iter.bi_done, 0);
	CHECK_EQ(bio->bi_vcnt, 0);
	CHECK(bio->bi_max_vecs >= nr_vecs);
	CHECK_EQ(atomic_load(&bio->__bi_cnt), 1);
	CHECK(bio->bi_end_io == NULL);
	CHECK(bio->bi_private == NULL);
	CHECK(bio->bi_ext == NULL);
	CHECK_EQ(bio->bi_flags & (BIO_CLONED | BIO_CHAIN), 0);
	CHECK(bio->bi_io_vec != NULL);
	if (nr_vecs <= BIO_INLINE_VECS) {
		/* No extra allocation for small bios. */
		CHECK_PTR_EQ(bio->bi_io_vec, bio->bi_inline_vecs);
		CHECK_EQ(bio->bi_flags & BIO_EXT_VEC, 0);
	} else {
		CHECK(bio->bi_io_vec != bio->bi_inline_vecs);
		CHECK(bio->bi_flags & BIO_EXT_VEC);
	}
}

/* Fill a bio to its capacity; the next add must fail and change nothing. */
static void fill_and_overflow(struct bio *bio, unsigned int at_least)
{
	unsigned int max = bio->bi_max_vecs;
	struct bio_vec before[BIO_INLINE_VECS];
	uint64_t size = 0;

	CHECK(max >= at_least);
	for (unsigned int i = 0; i < max; i++) {
		unsigned int len =
		    (unsigned int)rnd_range(1, 3 * BIO_PAGE_SIZE);
		unsigned char *p = arena + rnd_below(ARENA_BYTES - len);

		CHECK_EQ(bio_add_buf(bio, p, len), 0);
		size += len;
		CHECK_EQ(bio->bi_vcnt, i + 1);
		CHECK_PTR_EQ(bvec_virt(&bio->bi_io_vec[i]), p);
	}
	CHECK_EQ(bio->bi_iter.bi_size, size);
	memcpy(before, bio->bi_inline_vecs, sizeof(before));
	CHECK_EQ(bio_add_buf(bio, arena, 512), -EINVAL);
	CHECK_EQ(bio->bi_vcnt, max);
	CHECK_EQ(bio->bi_iter.bi_size, size);
	CHECK(memcmp(before, bio->bi_inline_vecs, sizeof(before)) == 0);
}

static void test_alloc(void)
{
	static const unsigned int counts[] = {0, 1,  2,	  3,	4,	   5,
					      8, 17, 256, 1000, UINT16_MAX};

	for (size_t o = 0; o < sizeof(all_ops) / sizeof(all_ops[0]); o++) {
		for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]);
		     i++) {
			unsigned int opf = all_ops[o];
			struct bio *bio;

			if (all_ops[o] == REQ_OP_WRITE)
				opf |= REQ_FUA;
			if (all_ops[o] == REQ_OP_WRITE_ZEROES)
				opf |= REQ_NOUNMAP | REQ_NOFALLBACK;
			bio = bio_alloc(counts[i], opf);
			check_fresh(bio, opf, counts[i]);
			if (op_carries_data(all_ops[o]))
				fill_and_overflow(bio, counts[i]);
			bio_put(bio);
		}
	}

	/*
	 * bi_max_vecs is 16 bits: a larger request must fail rather than
	 * hand back a bio that silently holds fewer segments.
	 */
	CHECK(bio_alloc(UINT16_MAX + 1u, REQ_OP_READ) == NULL);
}

/*
 * A bio that went through every state (advanced, chained, errored, external
 * vector, end_io set) and was put must come back from the pool clean.
 */
static void test_recycle_clean(void)
{
	for (int round = 0; round < 200; round++) {
		unsigned int nr = (unsigned int)rnd_range(1, 40);
		struct layout l;
		struct bio *bio, *child, *again;

		layout_random(&l, nr, 9000, true);
		bio = bio_from_layout(&l, REQ_OP_WRITE | REQ_FUA);
		bio->bi_iter.bi_sector = rnd_below(1u << 30);
		bio->bi_private = &l;
		child = bio_clone(bio);
		CHECK(child);
		bio_chain(child, bio);
		bio_advance(bio, (unsigned int)(l.total / 2 / SECTOR_SIZE *
						SECTOR_SIZE));
		bio_endio(child, child->bi_iter.bi_size, -EIO);
		bio_io_error(bio, -ENOSPC);
		CHECK_EQ(bio->bi_status, -EIO);
		bio_put(bio);

		nr = (unsigned int)rnd_below(40);
		again = bio_alloc(nr, REQ_OP_READ);
		check_fresh(again, REQ_OP_READ, nr);
		bio_put(again);
	}
}

static void test_add_buf(void)
{
	static const size_t offs[] = {0,    1,	  511,	512,   4095,
				      4096, 4097, 8191, 12345, 65536 + 17};
	struct bio *bio, *clone, *clone2;
	struct bio_vec snap[BIO_INLINE_VECS];
	uint64_t size = 0;

	/* The page/offset split of single addresses. */
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		unsigned int len = 1 + (unsigned int)i * 700;
		unsigned char *p = arena + offs[i];

		bio = bio_alloc(1, REQ_OP_WRITE);
		CHECK(bio);
		CHECK_EQ(bio_add_buf(bio, p, len), 0);
		CHECK_EQ(bio->bi_vcnt, 1);
		CHECK_PTR_EQ(bio->bi_io_vec[0].bv_page,
			     arena + offs[i] / 4096 * 4096);
		CHECK_EQ(bio->bi_io_vec[0].bv_offset, offs[i] % 4096);
		CHECK_EQ(bio->bi_io_vec[0].bv_len, len);
		CHECK_EQ(bio->bi_iter.bi_size, len);
		CHECK_PTR_EQ(bio_data(bio), p);
		bio_put(bio);
	}

	/* Many segments, each split independently; sizes add up. */
	bio = bio_alloc(MAX_SEGS, REQ_OP_READ);
	CHECK(bio);
	for (unsigned int i = 0; i < MAX_SEGS; i++) {
		size_t off = rnd_below(ARENA_BYTES - 70000);
		unsigned int len = (unsigned int)rnd_range(1, 70000);

		CHECK_EQ(bio_add_buf(bio, arena + off, len), 0);
		size += len;
		CHECK_EQ(bio->bi_vcnt, i + 1);
		CHECK_PTR_EQ(bio->bi_io_vec[i].bv_page,
			     arena + off - off % BIO_PAGE_SIZE);
		CHECK_EQ(bio->bi_io_vec[i].bv_offset, off % BIO_PAGE_SIZE);
		CHECK_EQ(bio->bi_io_vec[i].bv_len, len);
		CHECK_EQ(bio->bi_iter.bi_size, size);
	}
	/* Adding never moves the iterator. */
	CHECK_EQ(bio->bi_iter.bi_idx, 0);
	CHECK_EQ(bio->bi_iter.bi_bvec_done, 0);
	CHECK_EQ(bio->bi_iter.bi_sector, 0);
	bio_put(bio);

	/* 1 MiB + 3 starting mid-page: 258 pages touched, still one segment. */
	{
		unsigned char *p = arena + 100;
		unsigned int len = (1u << 20) + 3;
		struct bio_vec bv;
		struct bvec_iter it;
		unsigned int steps = 0;

		bio = bio_alloc(1, REQ_OP_WRITE);
		CHECK(bio);
		CHECK_EQ(bio_add_buf(bio, p, len), 0);
		CHECK_EQ(bio->bi_vcnt, 1);
		CHECK_EQ(bio->bi_io_vec[0].bv_len, len);
		CHECK_PTR_EQ(bio->bi_io_vec[0].bv_page, arena);
		CHECK_EQ(bio->bi_io_vec[0].bv_offset, 100);
		CHECK_EQ(bio_cur_sectors(bio), len >> SECTOR_SHIFT);
		bio_for_each_segment(bv, bio, it)
		{
			CHECK_PTR_EQ(bvec_virt(&bv), p);
			CHECK_EQ(bv.bv_len, len);
			steps++;
		}
		CHECK_EQ(steps, 1);
		bio_put(bio);
	}

	/* Zero length: refused, nothing changes (empty or not). */
	bio = bio_alloc(2, REQ_OP_WRITE);
	CHECK(bio);
	CHECK_EQ(bio_add_buf(bio, arena, 0), -EINVAL);
	CHECK_EQ(bio->bi_vcnt, 0);
	CHECK_EQ(bio->bi_iter.bi_size, 0);
	CHECK_EQ(bio_add_buf(bio, arena + 5, 4096), 0);
	CHECK_EQ(bio_add_buf(bio, arena + 9000, 0), -EINVAL);
	CHECK_EQ(bio->bi_vcnt, 1);
	CHECK_EQ(bio->bi_iter.bi_size, 4096);

	/*
	 * A clone shares the vector, so an add would write into its
	 * parent's array: refused, and the parent's array is untouched.
	 */
	CHECK(bio->bi_max_vecs > 1); /* there is room the clone could abuse */
	memcpy(snap, bio->bi_inline_vecs, sizeof(snap));
	clone = bio_clone(bio);
	CHECK(clone);
	CHECK_EQ(bio_add_buf(clone, arena + 4096, 512), -EINVAL);
	CHECK_EQ(clone->bi_vcnt, 1);
	CHECK_EQ(clone->bi_iter.bi_size, 4096);
	clone2 = bio_clone(clone);
	CHECK(clone2);
	CHECK_EQ(bio_add_buf(clone2, arena + 4096, 512), -EINVAL);
	CHECK_EQ(clone2->bi_vcnt, 1);
	CHECK_EQ(bio->bi_vcnt, 1);
	CHECK_EQ(bio->bi_iter.bi_size, 4096);
	CHECK(memcmp(snap, bio->bi_inline_vecs, sizeof(snap)) == 0);
	bio_put(clone2);
	bio_put(clone);

	/* The parent itself may still grow. */
	CHECK_EQ(bio_add_buf(bio, arena + 8192, 512), 0);
	CHECK_EQ(bio->bi_iter.bi_size, 4096 + 512);
	bio_put(bio);

	/* A clone of an empty bio is refused too. */
	bio = bio_alloc(0, REQ_OP_READ);
	CHECK(bio);
	clone = bio_clone(bio);
	CHECK(clone);
	CHECK_EQ(bio_add_buf(clone, arena, 512), -EINVAL);
	CHECK_EQ(clone->bi_vcnt, 0);
	CHECK_EQ(clone->bi_iter.bi_size, 0);
	bio_put(clone);
	bio_put(bio);

	/*
	 * bi_size is 32 bits: the add that would wrap it is refused.  No
	 * byte of these buffers is touched, so their length is free.
	 */
	bio = bio_alloc(4, REQ_OP_WRITE);
	CHECK(bio);
	CHECK_EQ(bio_add_buf(bio, arena, 0x80000000u), 0);
	CHECK_EQ(bio_add_buf(bio, arena, 0x80000000u), -EINVAL);
	CHECK_EQ(bio->bi_vcnt, 1);
	CHECK_EQ(bio->bi_iter.bi_size, 0x80000000u);
	CHECK_EQ(bio_add_buf(bio, arena, 0x7fffffffu), 0);
	CHECK_EQ(bio->bi_iter.bi_size, UINT32_MAX);
	CHECK_EQ(bio_add_buf(bio, arena, 1), -EINVAL);
	CHECK_EQ(bio->bi_vcnt, 2);
	CHECK_EQ(bio->bi_iter.bi_size, UINT32_MAX);
	bio_put(bio);
}

/*
 * Walk @bio with bio_for_each_segment and check every step against the
 * part of the layout that lies in [from, from + size): step j must be
 * exactly the overlap of the j-th overlapping segment with that window.
 */
static void check_walk(const struct bio *bio, const struct layout *l,
		       uint64_t from, uint64_t size)
{
	struct bvec_iter before = bio->bi_iter;
	struct bio_vec bv;
	struct bvec_iter it;
	unsigned int i = 0, first;
	uint64_t seen = 0;

	/* First segment that has a byte at or after @from. */
	while (i < l->nr && l->start[i + 1] <= from)
		i++;
	first = i;

	bio_for_each_segment(bv, bio, it)
	{
		uint64_t lo, hi;

		CHECK(i < l->nr);
		CHECK(l->start[i] < from + size);
		lo = l->start[i] > from ? l->start[i] : from;
		hi = l->start[i + 1] < from + size ? l->start[i + 1]
						   : from + size;
		CHECK_PTR_EQ(bvec_virt(&bv), l->seg[i].p + (lo - l->start[i]));
		CHECK_EQ(bv.bv_len, hi - lo);
		/*
		 * bv_page is page aligned and no later than the data; the
		 * offset may run past one page in a multi-page segment.
		 */
		CHECK_EQ((uintptr_t)bv.bv_page % BIO_PAGE_SIZE, 0);
		CHECK((unsigned char *)bv.bv_page >=
		      (unsigned char *)page_of(l->seg[i].p));
		seen += bv.bv_len;
		i++;
	}
	CHECK_EQ(seen, size);
	/* Nothing in the window was skipped: what follows lies past it. */
	if (size)
		CHECK(i == l->nr || l->start[i] >= from + size);
	else
		CHECK_EQ(i, first); /* and an empty bio takes no step */
	/* The walk uses its own cursor. */
	CHECK(memcmp(&before, &bio->bi_iter, sizeof(before)) == 0);
}

/* Also compare the bytes, gathered through the iterator, with memcpy. */
static void check_bytes(const struct bio *bio, const struct layout *l,
			uint64_t from, uint64_t size)
{
	unsigned char *want = malloc(size + 1), *got = malloc(size + 1);
	uint64_t n = 0;
	struct bio_vec bv;
	struct bvec_iter it;

	CHECK(want && got);
	for (unsigned int i = 0; i < l->nr; i++) {
		for (unsigned int b = 0; b < l->seg[i].len; b++) {
			uint64_t pos = l->start[i] + b;

			if (pos >= from && pos < from + size)
				want[pos - from] = l->seg[i].p[b];
		}
	}
	bio_for_each_segment(bv, bio, it)
	{
		CHECK(n + bv.bv_len <= size);
		memcpy(got + n, bvec_virt(&bv), bv.bv_len);
		n += bv.bv_len;
	}
	CHECK_EQ(n, size);
	CHECK(memcmp(want, got, size) == 0);
	free(want);
	free(got);
}

static void test_for_each_segment(void)
{
	for (int round = 0; round < 400; round++) {
		unsigned int nr = (unsigned int)rnd_range(1, MAX_SEGS);
		struct layout l;
		struct bio *bio;
		uint64_t from, size;

		layout_random(&l, nr, round % 2 ? 20000 : 700, false);
		bio =
		    bio_from_layout(&l, round % 3 ? REQ_OP_READ : REQ_OP_WRITE);

		check_walk(bio, &l, 0, l.total);
		if (round % 8 == 0)
			check_bytes(bio, &l, 0, l.total);

		/* Partially advanced: anywhere, including a boundary. */
		if (round % 4 == 0 && nr > 1)
			from = l.start[rnd_range(1, nr - 1)];
		else
			from = rnd_below(l.total);
		bio_advance(bio, (unsigned int)from);
		check_walk(bio, &l, from, l.total - from);
		if (round % 8 == 0)
			check_bytes(bio, &l, from, l.total - from);

		/* Trimmed as a split would be: stops mid-vector. */
		size = rnd_range(1, l.total - from);
		bio->bi_iter.bi_size = (uint32_t)size;
		check_walk(bio, &l, from, size);
		if (round % 8 == 0)
			check_bytes(bio, &l, from, size);

		/* Fully advanced: no step at all. */
		bio_advance(bio, (unsigned int)size);
		check_walk(bio, &l, from + size, 0);
		bio_put(bio);
	}
}

/*
 * The iterator after @done bytes of @l, computed from the layout: bi_idx is
 * the number of segments wholly consumed, bi_bvec_done the bytes consumed
 * of the next one (a position on a boundary belongs to the next segment).
 */
static void check_iter_at(const struct bio *bio, const struct layout *l,
			  uint64_t done, sector_t sector0, bool sectors_exact)
{
	unsigned int idx = 0;

	while (idx < l->nr && l->start[idx + 1] <= done)
		idx++;
	CHECK_EQ(bio->bi_iter.bi_idx, idx);
	CHECK_EQ(bio->bi_iter.bi_bvec_done,
		 idx < l->nr ? done - l->start[idx] : 0);
	CHECK_EQ(bio->bi_iter.bi_size, l->total - done);
	CHECK_EQ(bio->bi_iter.bi_done, done);
	if (sectors_exact)
		CHECK_EQ(bio->bi_iter.bi_sector, sector0 + done / SECTOR_SIZE);
	CHECK_EQ(bio_sectors(bio), (l->total - done) / SECTOR_SIZE);

	if (done < l->total) {
		const unsigned char *at =
		    l->seg[idx].p + (done - l->start[idx]);

		CHECK(bio_has_data(bio));
		CHECK_PTR_EQ(bio_data(bio), at);
		/*
		 * Whether bio_page() names the segment's first page or the
		 * current one is the engine's choice; what must hold is that
		 * it is a page, page + offset is the data, and the page lies
		 * inside the segment's pages.
		 */
		CHECK_EQ((uintptr_t)bio_page(bio) % BIO_PAGE_SIZE, 0);
		CHECK((unsigned char *)bio_page(bio) >=
		      (unsigned char *)page_of(l->seg[idx].p));
		CHECK((unsigned char *)bio_page(bio) <= at);
		CHECK_PTR_EQ((char *)bio_page(bio) + bio_offset(bio), at);
		if (bio_page(bio) == page_of(l->seg[idx].p))
			CHECK_EQ(bio_offset(bio), in_page(l->seg[idx].p) +
						      (done - l->start[idx]));
		else
			CHECK(bio_offset(bio) < BIO_PAGE_SIZE);
		CHECK_EQ(bio_cur_bytes(bio), l->start[idx + 1] - done);
		CHECK_EQ(bio_cur_sectors(bio),
			 (l->start[idx + 1] - done) / SECTOR_SIZE);
	} else {
		CHECK(!bio_has_data(bio));
		CHECK(bio_data(bio) == NULL);
		CHECK_EQ(bio_cur_sectors(bio), 0);
	}
}

static void test_advance_fixed(void)
{
	/*
	 * 1024 | 512 | 3072 | 4608 (crosses a page) | 1536: boundaries at
	 * 1024, 1536, 4608, 9216, 10752.
	 */
	static const unsigned int lens[] = {1024, 512, 3072, 4608, 1536};
	static const struct {
		unsigned int step;
		unsigned int idx, bvec_done;
	} steps[] = {
	    {512, 0, 512},   /* inside segment 0 */
	    {512, 1, 0},     /* exactly onto a boundary */
	    {1024, 2, 512},  /* across one boundary */
	    {2560, 3, 0},    /* to the next boundary */
	    {4096, 3, 4096}, /* within the page-crossing segment */
	    {1024, 4, 512},  /* across its end */
	    {0, 4, 512},     /* nothing */
	    {1024, 5, 0},    /* to the very end */
	};
	struct layout l = {.nr = 5};
	struct bio *bio;
	uint64_t done = 0;

	for (unsigned int i = 0; i < l.nr; i++) {
		l.seg[i].len = lens[i];
		l.seg[i].p = arena + 3 * 4096 * (i + 1) + 100 * i;
	}
	layout_finish(&l);
	bio = bio_from_layout(&l, REQ_OP_READ);
	bio->bi_iter.bi_sector = 1000;

	for (size_t s = 0; s < sizeof(steps) / sizeof(steps[0]); s++) {
		bio_advance(bio, steps[s].step);
		done += steps[s].step;
		CHECK_EQ(bio->bi_iter.bi_idx, steps[s].idx);
		CHECK_EQ(bio->bi_iter.bi_bvec_done, steps[s].bvec_done);
		CHECK_EQ(bio->bi_iter.bi_sector, 1000 + done / 512);
		CHECK_EQ(bio->bi_iter.bi_done, done);
		CHECK_EQ(bio->bi_iter.bi_size, 10752 - done);
		check_iter_at(bio, &l, done, 1000, true);
	}
	bio_put(bio);

	/* Across several boundaries in one step. */
	bio = bio_from_layout(&l, REQ_OP_WRITE);
	bio_advance(bio, 4608 + 1000);
	CHECK_EQ(bio->bi_iter.bi_idx, 3);
	CHECK_EQ(bio->bi_iter.bi_bvec_done, 1000);
	check_iter_at(bio, &l, 4608 + 1000, 0, false);
	bio_put(bio);
}

static void test_advance_random(void)
{
	for (int round = 0; round < 2000; round++) {
		bool exact = round % 2;
		unsigned int nr = (unsigned int)rnd_range(1, MAX_SEGS);
		sector_t sector0 = rnd_below(1ull << 40);
		struct layout l;
		struct bio *bio;
		uint64_t done = 0;

		layout_random(&l, nr, round % 3 ? 3 * 4096 : 1536, exact);
		bio = bio_from_layout(&l, round % 5 ? REQ_OP_READ
						    : REQ_OP_WRITE | REQ_FUA);
		bio->bi_iter.bi_sector = sector0;
		check_iter_at(bio, &l, 0, sector0, true);
		while (done < l.total) {
			uint64_t step;

			switch (rnd_below(4)) {
			case 0: /* to the next boundary */
				step = bio_cur_bytes(bio);
				break;
			case 1: /* small */
				step = rnd_range(0, 2 * SECTOR_SIZE);
				break;
			default: /* anything up to the rest */
				step = rnd_range(1, l.total - done);
				break;
			}
			if (exact)
				step = step / SECTOR_SIZE * SECTOR_SIZE;
			if (step > l.total - done)
				step = l.total - done;
			bio_advance(bio, (unsigned int)step);
			done += step;
			check_iter_at(bio, &l, done, sector0, exact);
			if (round % 16 == 0)
				check_walk(bio, &l, done, l.total - done);
		}
		CHECK_EQ(bio->bi_iter.bi_idx, nr);
		bio_put(bio);
	}
}

/* The accessors on data bios, no-data bios and empty bios, for every op. */
static void test_accessors_every_op(void)
{
	for (size_t o = 0; o < sizeof(all_ops) / sizeof(all_ops[0]); o++) {
		unsigned int op = all_ops[o];
		unsigned int flag_sets[] = {0, REQ_FUA,
					    REQ_NOUNMAP | REQ_NOFALLBACK};

		for (size_t f = 0; f < 3; f++) {
			unsigned int opf = op | flag_sets[f];
			struct bio *bio = bio_alloc(3, opf);
			sector_t sector = rnd_below(1ull << 35);

			CHECK(bio);
			CHECK_EQ(bio_op(bio), op);
			CHECK_EQ(bio_data_dir(bio), expected_dir(op));
			CHECK_EQ(op_is_write(bio_op(bio)), expected_dir(op));

			/* Empty: nothing to do for any op. */
			CHECK(!bio_has_data(bio));
			CHECK(bio_data(bio) == NULL);
			CHECK_EQ(bio_sectors(bio), 0);
			CHECK_EQ(bio_cur_sectors(bio), 0);
			bio->bi_iter.bi_sector = sector;
			CHECK_EQ(bio_end_sector(bio), sector);
			CHECK_EQ(bio_offset_bytes(bio), sector * 512);

			if (op_carries_data(op)) {
				unsigned char *a = arena + 4096 * 7 + 1536;
				unsigned char *b = arena + 4096 * 20;

				CHECK_EQ(bio_add_buf(bio, a, 3 * 512), 0);
				CHECK_EQ(bio_add_buf(bio, b, 9 * 4096), 0);
				CHECK(bio_has_data(bio));
				CHECK_PTR_EQ(bio_data(bio), a);
				CHECK_PTR_EQ(bio_page(bio), arena + 4096 * 7);
				CHECK_EQ(bio_offset(bio), 1536);
				CHECK_EQ(bio_cur_sectors(bio), 3);
				CHECK_EQ(bio_sectors(bio), 3 + 72);
				CHECK_EQ(bio_end_sector(bio), sector + 75);

				/* Into the second segment. */
				bio_advance(bio, 4 * 512);
				CHECK_PTR_EQ(bio_data(bio), b + 512);
				CHECK_PTR_EQ(bio_page(bio), b);
				CHECK_EQ(bio_offset(bio), 512);
				CHECK_EQ(bio_cur_sectors(bio), 71);
				CHECK_EQ(bio_sectors(bio), 71);
				CHECK_EQ(bio->bi_iter.bi_sector, sector + 4);

				/* Trimmed below the segment, as in a split. */
				bio->bi_iter.bi_size = 5 * 512;
				CHECK_EQ(bio_cur_sectors(bio), 5);
				CHECK_EQ(bio_sectors(bio), 5);
				CHECK_EQ(bio_end_sector(bio), sector + 9);

				bio_advance(bio, 5 * 512);
				CHECK(!bio_has_data(bio));
				CHECK(bio_data(bio) == NULL);
			} else {
				/*
				 * No vector: the range is just sector and
				 * size, and the whole of it is "current".
				 */
				unsigned int nsec =
				    (unsigned int)rnd_range(1, 1u << 22);

				bio->bi_iter.bi_size = nsec * 512;
				CHECK(!bio_has_data(bio));
				CHECK(bio_data(bio) == NULL);
				CHECK_EQ(bio_sectors(bio), nsec);
				CHECK_EQ(bio_cur_sectors(bio), nsec);
				CHECK_EQ(bio_end_sector(bio), sector + nsec);
			}
			/* Flags never leak into the op or the direction. */
			CHECK_EQ(bio_op(bio), op);
			CHECK_EQ(bio_data_dir(bio), expected_dir(op));
			bio_put(bio);
		}
	}
}

/*
 * Discard, write-zeroes, cache and extents have no vector: advancing moves
 * the range and bi_done, and never walks (or reads) bi_io_vec.
 */
static void test_nodata_advance(void)
{
	static const unsigned int ops[] = {REQ_OP_DISCARD, REQ_OP_WRITE_ZEROES,
					   REQ_OP_CACHE, REQ_OP_EXTENTS};

	for (int round = 0; round < 400; round++) {
		unsigned int op = ops[round % 4];
		unsigned int nsec = (unsigned int)rnd_range(1, 1u << 23);
		sector_t sector0 = rnd_below(1ull << 40);
		struct bio *bio = bio_alloc(0, op);
		uint64_t done = 0, total = (uint64_t)nsec * 512;

		CHECK(bio);
		/*
		 * Poison the unused inline vector: a walk over it would hit
		 * zero-length segments and go wrong visibly.
		 */
		memset(bio->bi_inline_vecs, 0, sizeof(bio->bi_inline_vecs));
		bio->bi_iter.bi_sector = sector0;
		bio->bi_iter.bi_size = (uint32_t)total;
		while (done < total) {
			uint64_t step =
			    rnd_range(0, (total - done) / 512) * 512;

			if (rnd_below(4) == 0)
				step = total - done;
			bio_advance(bio, (unsigned int)step);
			done += step;
			CHECK_EQ(bio->bi_iter.bi_sector, sector0 + done / 512);
			CHECK_EQ(bio->bi_iter.bi_size, total - done);
			CHECK_EQ(bio->bi_iter.bi_done, done);
			CHECK_EQ(bio->bi_iter.bi_idx, 0);
			CHECK_EQ(bio->bi_iter.bi_bvec_done, 0);
			CHECK_EQ(bio->bi_vcnt, 0);
			CHECK_EQ(bio_sectors(bio), (total - done) / 512);
			CHECK_EQ(bio_cur_sectors(bio), (total - done) / 512);
			CHECK(!bio_has_data(bio));
			CHECK(bio_data(bio) == NULL);
		}
		bio_put(bio);
	}
}

int main(void)
{
	unit_seed("test-bio-iter");
	arena_init();

	test_alloc();
	test_recycle_clean();
	test_add_buf();
	test_for_each_segment();
	test_advance_fixed();
	test_advance_random();
	test_accessors_every_op();
	test_nodata_advance();

	bio_pool_drain();
	free(arena);
	printf("test-bio-iter: ok\n");
	return 0;
}
