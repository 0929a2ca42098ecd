/*
 * Description: the extents list a REQ_OP_EXTENTS bio fills.
 * bio_extents_add merges an extent into the previous one only when it
 * follows it directly with the same flags, ignores empty extents and grows
 * the array; bio_extents_finish sorts what the pieces of a split bio added
 * in any order and merges neighbours with equal flags, never across a gap;
 * bio_extents_free leaves an empty, reusable list.  The expected list is
 * the run-length encoding of a per-sector flag map drawn at random; the
 * last case splits a real extents bio with bio_split and lets each piece
 * report at its bi_done, last piece first.
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

#define UNIT 512u /* flag map granularity, bytes */
#define MAX_UNITS 4096u
#define NO_EXTENT 0xffu /* a unit nobody reported */

static const uint32_t flag_values[] = {0, BIO_EXT_HOLE, BIO_EXT_ZERO,
				       BIO_EXT_HOLE | BIO_EXT_ZERO};

static void check_extent(const struct bio_extents *ext, size_t i,
			 uint64_t offset, uint64_t length, uint32_t flags)
{
	CHECK(i < ext->nr);
	CHECK_EQ(ext->v[i].offset, offset);
	CHECK_EQ(ext->v[i].length, length);
	CHECK_EQ(ext->v[i].flags, flags);
}

static void test_add_merge(void)
{
	struct bio_extents ext = {0};
	const uint32_t hz = BIO_EXT_HOLE | BIO_EXT_ZERO;

	CHECK_EQ(bio_extents_add(&ext, 0, 4096, 0), 0);
	CHECK_EQ(ext.nr, 1);
	check_extent(&ext, 0, 0, 4096, 0);

	/* Directly after, same flags: one longer extent. */
	CHECK_EQ(bio_extents_add(&ext, 4096, 4096, 0), 0);
	CHECK_EQ(ext.nr, 1);
	check_extent(&ext, 0, 0, 8192, 0);

	/* Directly after, other flags: a new one. */
	CHECK_EQ(bio_extents_add(&ext, 8192, 4096, hz), 0);
	CHECK_EQ(ext.nr, 2);
	check_extent(&ext, 1, 8192, 4096, hz);
	CHECK_EQ(bio_extents_add(&ext, 12288, 512, hz), 0);
	CHECK_EQ(ext.nr, 2);
	check_extent(&ext, 1, 8192, 4608, hz);

	/* Same flags after a gap: kept apart. */
	CHECK_EQ(bio_extents_add(&ext, 20000, 100, hz), 0);
	CHECK_EQ(ext.nr, 3);
	check_extent(&ext, 2, 20000, 100, hz);

	/* Empty: accepted and ignored, even where it would merge. */
	CHECK_EQ(bio_extents_add(&ext, 20100, 0, hz), 0);
	CHECK_EQ(bio_extents_add(&ext, 5, 0, 0), 0);
	CHECK_EQ(ext.nr, 3);
	check_extent(&ext, 2, 20000, 100, hz);

	/*
	 * Directly before the last one, same flags: adds only look at the
	 * end of the list; finish does the rest.
	 */
	CHECK_EQ(bio_extents_add(&ext, 19900, 100, hz), 0);
	CHECK_EQ(ext.nr, 4);
	check_extent(&ext, 3, 19900, 100, hz);
	/* Overlapping the end is not "directly after" either. */
	CHECK_EQ(bio_extents_add(&ext, 19950, 50, hz), 0);
	CHECK_EQ(ext.nr, 5);

	/* The earlier entries were never touched. */
	check_extent(&ext, 0, 0, 8192, 0);
	check_extent(&ext, 1, 8192, 4608, hz);
	check_extent(&ext, 2, 20000, 100, hz);
	bio_extents_free(&ext);
}

static void test_add_grow(void)
{
	struct bio_extents ext = {0};
	const size_t n = 5000;

	/* Alternating flags: nothing merges, so the array must grow. */
	for (size_t i = 0; i < n; i++) {
		CHECK_EQ(bio_extents_add(&ext, i * 4096, 4096,
					 flag_values[i % 2 ? 1 : 3]),
			 0);
		CHECK_EQ(ext.nr, i + 1);
		CHECK(ext.cap >= ext.nr);
	}
	for (size_t i = 0; i < n; i++)
		check_extent(&ext, i, i * 4096, 4096,
			     flag_values[i % 2 ? 1 : 3]);
	/* Then one that merges into the very last. */
	CHECK_EQ(bio_extents_add(&ext, n * 4096, 1,
				 flag_values[(n - 1) % 2 ? 1 : 3]),
		 0);
	CHECK_EQ(ext.nr, n);
	check_extent(&ext, n - 1, (n - 1) * 4096, 4097,
		     flag_values[(n - 1) % 2 ? 1 : 3]);
	bio_extents_free(&ext);
}

static void test_free(void)
{
	struct bio_extents ext = {0};

	/* Freeing an empty list is fine, twice too. */
	bio_extents_free(&ext);
	bio_extents_free(&ext);
	CHECK(ext.v == NULL);
	CHECK_EQ(ext.nr, 0);
	CHECK_EQ(ext.cap, 0);

	for (int i = 0; i < 100; i++)
		CHECK_EQ(bio_extents_add(&ext, (uint64_t)i * 10, 5, 0), 0);
	CHECK_EQ(ext.nr, 100);
	bio_extents_free(&ext);
	CHECK(ext.v == NULL);
	CHECK_EQ(ext.nr, 0);
	CHECK_EQ(ext.cap, 0);

	/* Reusable after free. */
	CHECK_EQ(bio_extents_add(&ext, 0, 512, BIO_EXT_ZERO), 0);
	CHECK_EQ(bio_extents_add(&ext, 512, 512, BIO_EXT_ZERO), 0);
	CHECK_EQ(ext.nr, 1);
	check_extent(&ext, 0, 0, 1024, BIO_EXT_ZERO);
	bio_extents_free(&ext);
	CHECK(ext.v == NULL);
}

static void test_finish_small(void)
{
	struct bio_extents ext = {0};

	/* Empty and single lists. */
	bio_extents_finish(&ext);
	CHECK_EQ(ext.nr, 0);
	CHECK_EQ(bio_extents_add(&ext, 4096, 512, BIO_EXT_HOLE), 0);
	bio_extents_finish(&ext);
	CHECK_EQ(ext.nr, 1);
	check_extent(&ext, 0, 4096, 512, BIO_EXT_HOLE);

	/* Three pieces of one hole, added last to first. */
	CHECK_EQ(bio_extents_add(&ext, 3072, 1024, BIO_EXT_HOLE), 0);
	CHECK_EQ(bio_extents_add(&ext, 0, 3072, BIO_EXT_HOLE), 0);
	CHECK_EQ(ext.nr, 3);
	bio_extents_finish(&ext);
	CHECK_EQ(ext.nr, 1);
	check_extent(&ext, 0, 0, 4608, BIO_EXT_HOLE);

	/* A gap keeps equal neighbours apart; other flags too. */
	CHECK_EQ(bio_extents_add(&ext, 8192, 512, 0), 0);
	CHECK_EQ(bio_extents_add(&ext, 5120, 512, BIO_EXT_HOLE), 0);
	CHECK_EQ(bio_extents_add(&ext, 4608, 512, 0), 0);
	bio_extents_finish(&ext);
	CHECK_EQ(ext.nr, 4);
	check_extent(&ext, 0, 0, 4608, BIO_EXT_HOLE);
	check_extent(&ext, 1, 4608, 512, 0);
	check_extent(&ext, 2, 5120, 512, BIO_EXT_HOLE);
	check_extent(&ext, 3, 8192, 512, 0);
	bio_extents_free(&ext);
}

/* A random flag map: runs of random length, now and then a missing run. */
static unsigned int random_map(unsigned char *map, bool gaps)
{
	unsigned int units = (unsigned int)rnd_range(1, MAX_UNITS);

	for (unsigned int u = 0; u < units;) {
		unsigned int len = (unsigned int)rnd_range(1, 40);
		unsigned char f = (unsigned char)rnd_below(4);

		if (gaps && rnd_below(6) == 0)
			f = NO_EXTENT;
		for (; len && u < units; len--, u++)
			map[u] = f;
	}
	return units;
}

/* The answer: maximal runs of one flag value, broken by missing units. */
static size_t rle(const unsigned char *map, unsigned int units,
		  struct bio_extent *out)
{
	size_t n = 0;

	for (unsigned int u = 0; u < units;) {
		unsigned int e = u;

		while (e < units && map[e] == map[u])
			e++;
		if (map[u] != NO_EXTENT)
			out[n++] = (struct bio_extent){
			    .offset = (uint64_t)u * UNIT,
			    .length = (uint64_t)(e - u) * UNIT,
			    .flags = flag_values[map[u]],
			};
		u = e;
	}
	return n;
}

/*
 * What one member reports for [from, to) of the map: its own runs, in
 * order, cut at its edges (a member knows nothing of its neighbours).
 */
static void report(struct bio_extents *ext, const unsigned char *map,
		   unsigned int from, unsigned int to)
{
	for (unsigned int u = from; u < to;) {
		unsigned int e = u;

		while (e < to && map[e] == map[u])
			e++;
		if (map[u] != NO_EXTENT)
			CHECK_EQ(bio_extents_add(ext, (uint64_t)u * UNIT,
						 (uint64_t)(e - u) * UNIT,
						 flag_values[map[u]]),
				 0);
		u = e;
	}
}

static void check_against(const struct bio_extents *ext,
			  const struct bio_extent *want, size_t n)
{
	CHECK_EQ(ext->nr, n);
	for (size_t i = 0; i < n; i++)
		check_extent(ext, i, want[i].offset, want[i].length,
			     want[i].flags);
}

static void test_finish_random(void)
{
	unsigned char *map = malloc(MAX_UNITS);
	struct bio_extent *want = malloc(MAX_UNITS * sizeof(*want));
	unsigned int *cuts = malloc((MAX_UNITS + 1) * sizeof(*cuts));
	int *order = malloc(MAX_UNITS * sizeof(*order));

	CHECK(map && want && cuts && order);
	for (int round = 0; round < 3000; round++) {
		struct bio_extents ext = {0};
		unsigned int units = random_map(map, round % 3 == 0);
		size_t n = rle(map, units, want);
		unsigned int nc = 0;

		/* Pieces at random edges, unrelated to the runs. */
		cuts[nc++] = 0;
		for (unsigned int u = 1; u < units; u++)
			if (rnd_below(round % 2 ? 8 : 64) == 0)
				cuts[nc++] = u;
		cuts[nc] = units;
		for (unsigned int i = 0; i < nc; i++)
			order[i] = (int)i;
		shuffle_int(order, nc);
		for (unsigned int i = 0; i < nc; i++)
			report(&ext, map, cuts[order[i]], cuts[order[i] + 1]);

		bio_extents_finish(&ext);
		check_against(&ext, want, n);
		/* Finishing a finished list changes nothing. */
		bio_extents_finish(&ext);
		check_against(&ext, want, n);
		bio_extents_free(&ext);
	}
	free(order);
	free(cuts);
	free(want);
	free(map);
}

/*
 * An extents bio split the way the stripe target splits it: every piece
 * shares the submitter's list (bi_ext) and reports at its bi_done, here in
 * reverse order.
 */
static void test_split_bio_reports(void)
{
	unsigned char *map = malloc(MAX_UNITS);
	struct bio_extent *want = malloc(MAX_UNITS * sizeof(*want));
	struct bio **pieces = malloc(MAX_UNITS * sizeof(*pieces));

	CHECK(map && want && pieces);
	for (int round = 0; round < 500; round++) {
		struct bio_extents ext = {0};
		unsigned int units = random_map(map, false);
		size_t n = rle(map, units, want);
		struct bio *bio = bio_alloc(0, REQ_OP_EXTENTS);
		unsigned int np = 0;

		CHECK(bio);
		bio->bi_iter.bi_sector = rnd_below(1ull << 30);
		bio->bi_iter.bi_size = units * UNIT;
		bio->bi_ext = &ext;
		for (;;) {
			unsigned int left = bio_sectors(bio);
			unsigned int s = (unsigned int)rnd_range(1, 100);

			CHECK(np < MAX_UNITS);
			if (s >= left) {
				pieces[np++] = bio;
				break;
			}
			pieces[np] = bio_split(bio, s);
			CHECK(pieces[np]);
			CHECK_PTR_EQ(pieces[np]->bi_ext, &ext);
			np++;
		}
		for (unsigned int i = np; i-- > 0;) {
			struct bio *p = pieces[i];
			uint64_t from = p->bi_iter.bi_done / UNIT;

			CHECK_EQ(p->bi_iter.bi_done % UNIT, 0);
			report(
			    p->bi_ext, map, (unsigned int)from,
			    (unsigned int)(from + p->bi_iter.bi_size / UNIT));
		}
		/* Splits first: none may outlive the bio it came from. */
		for (unsigned int i = 0; i < np; i++)
			bio_put(pieces[i]);
		bio_extents_finish(&ext);
		check_against(&ext, want, n);
		bio_extents_free(&ext);
	}
	free(pieces);
	free(want);
	free(map);
}

int main(void)
{
	unit_seed("test-extents");
	test_add_merge();
	test_add_grow();
	test_free();
	test_finish_small();
	test_finish_random();
	test_split_bio_reports();
	bio_pool_drain();
	printf("test-extents: ok\n");
	return 0;
}
