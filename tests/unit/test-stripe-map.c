/*
 * Description: the RAID-0 map.  stripe_geom_init accepts every power-of-two
 * chunk from STRIPE_MIN_CHUNK to STRIPE_MAX_CHUNK with any member count and
 * rejects the rest with -EINVAL (not a power of two, too small, too large,
 * values that only look valid in their low 32 bits, no members).
 * stripe_map is compared, for 1..8 members and 4 KiB, 64 KiB and 1 MiB
 * chunks, with two references written differently from it: a row-based
 * formula (row = offset / (N * chunk)) and a table built by dealing a
 * volume out to the members sector by sector, round-robin, one chunk at a
 * time.  Walking a range piece by piece must cover it exactly, each piece
 * inside one chunk and ending on a chunk edge unless it is the last; and
 * every sector of a small volume must land on a distinct member sector,
 * with none left over.
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bionbd/target.h>

#include "unit.h"

static const uint64_t chunks[] = {4096, 65536, 1u << 20};

/* Where @off lands, by rows: one row is one chunk from each member. */
static void ref_map(unsigned int n, uint64_t chunk, uint64_t off, uint64_t len,
		    struct stripe_piece *p)
{
	uint64_t row_bytes = chunk * n;
	uint64_t row = off / row_bytes;
	uint64_t in_row = off % row_bytes;
	uint64_t in_chunk = in_row % chunk;

	p->member = (unsigned int)(in_row / chunk);
	p->member_offset = row * chunk + in_chunk;
	p->length = chunk - in_chunk < len ? chunk - in_chunk : len;
}

static void check_piece(const struct stripe_piece *got,
			const struct stripe_piece *want)
{
	CHECK_EQ(got->member, want->member);
	CHECK_EQ(got->member_offset, want->member_offset);
	CHECK_EQ(got->length, want->length);
}

static void init_ok(struct stripe_geom *g, unsigned int n, uint64_t chunk)
{
	unsigned int shift = 0;

	memset(g, 0xa5, sizeof(*g));
	CHECK_EQ(stripe_geom_init(g, n, chunk), 0);
	CHECK_EQ(g->nr_members, n);
	CHECK_EQ(g->chunk_bytes, chunk);
	while ((1ull << shift) < chunk)
		shift++;
	CHECK_EQ(g->chunk_shift, shift);
}

static void test_geom_init(void)
{
	static const unsigned int members[] = {1, 2, 3, 5, 7, 8, 16, 255, 1000};
	static const uint64_t bad[] = {
	    0,
	    1,
	    2,
	    512,
	    2048,
	    4095,
	    4097,
	    6144, /* 1.5 x 4096 */
	    12288,
	    65535,
	    65537,
	    65536 + 4096,
	    3u << 20,
	    (1u << 30) + 4096,
	    (1u << 30) - 4096,
	    1u << 31, /* power of two, too large */
	    1ull << 32,
	    (1ull << 32) + 4096,  /* low 32 bits say 4096 */
	    (1ull << 32) + 65536, /* low 32 bits say 64 KiB */
	    (1ull << 33) | (1u << 20),
	    1ull << 40,
	    1ull << 63,
	    UINT64_MAX,
	    UINT64_MAX - 4095,
	};
	struct stripe_geom g;

	for (size_t m = 0; m < sizeof(members) / sizeof(members[0]); m++)
		for (unsigned int s = 12; s <= 30; s++)
			init_ok(&g, members[m], 1ull << s);
	init_ok(&g, 4, STRIPE_MIN_CHUNK);
	init_ok(&g, 4, STRIPE_DEFAULT_CHUNK);
	init_ok(&g, 4, STRIPE_MAX_CHUNK);
	CHECK_EQ(STRIPE_MAX_CHUNK, 1u << 30);
	CHECK_EQ(STRIPE_MIN_CHUNK, 4096);

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		for (unsigned int n = 1; n <= 4; n++) {
			int r = stripe_geom_init(&g, n, bad[i]);

			if (r != -EINVAL) {
				fprintf(stderr,
					"stripe_geom_init(%u, 0x%" PRIx64
					") = %d, want -EINVAL\n",
					n, bad[i], r);
				abort();
			}
		}
	}
	/* No members is never a volume, whatever the chunk. */
	for (unsigned int s = 12; s <= 30; s++)
		CHECK_EQ(stripe_geom_init(&g, 0, 1ull << s), -EINVAL);
	CHECK_EQ(stripe_geom_init(&g, 0, 0), -EINVAL);
	CHECK_EQ(stripe_geom_init(&g, 0, 4095), -EINVAL);
}

/* Offsets that matter: around chunk and row edges, and anywhere. */
static uint64_t pick_offset(unsigned int n, uint64_t chunk)
{
	uint64_t k = rnd_below(1ull << 24);

	switch (rnd_below(6)) {
	case 0:
		return k * chunk; /* a chunk's first byte */
	case 1:
		return k * chunk + chunk - 1; /* its last */
	case 2:
		return (k + 1) * chunk * n - 1; /* a row's last byte */
	case 3:
		return k * chunk * n; /* a row's first */
	case 4:
		return rnd_below(4 * chunk * n); /* near the start */
	default:
		return rnd_below(1ull << 44);
	}
}

static uint64_t pick_length(uint64_t chunk)
{
	switch (rnd_below(8)) {
	case 0:
		return 1;
	case 1:
		return chunk - 1;
	case 2:
		return chunk;
	case 3:
		return chunk + 1;
	case 4:
		return 1ull << 40;
	case 5:
		return UINT64_MAX;
	default:
		return rnd_range(1, 4 * chunk);
	}
}

static void test_map_vs_rows(void)
{
	for (unsigned int n = 1; n <= 8; n++) {
		for (size_t c = 0; c < 3; c++) {
			struct stripe_geom g;

			init_ok(&g, n, chunks[c]);
			for (int i = 0; i < 200000; i++) {
				uint64_t off = pick_offset(n, chunks[c]);
				uint64_t len = pick_length(chunks[c]);
				struct stripe_piece got, want;

				stripe_map(&g, off, len, &got);
				ref_map(n, chunks[c], off, len, &want);
				check_piece(&got, &want);
			}
		}
	}
}

/*
 * Deal a volume of @rows rows out to the members the way a striped writer
 * would: sector after sector onto the current member, moving to the next
 * member each time a chunk is full.  The table says where each volume
 * sector ended up.
 */
struct placed {
	unsigned int member;
	uint64_t offset;
};

static struct placed *deal(unsigned int n, uint64_t chunk, unsigned int rows,
			   uint64_t *nr_sectors)
{
	uint64_t total = (uint64_t)rows * n * chunk / SECTOR_SIZE;
	struct placed *t = malloc(total * sizeof(*t));
	uint64_t *fill = calloc(n, sizeof(*fill));
	unsigned int cur = 0;

	CHECK(t && fill);
	for (uint64_t s = 0; s < total; s++) {
		t[s].member = cur;
		t[s].offset = fill[cur];
		fill[cur] += SECTOR_SIZE;
		if (fill[cur] % chunk == 0)
			cur = (cur + 1) % n;
	}
	free(fill);
	*nr_sectors = total;
	return t;
}

/* @b sits directly after @a on the same member. */
static bool back_to_back(const struct placed *a, const struct placed *b)
{
	return a->member == b->member && b->offset == a->offset + SECTOR_SIZE;
}

static void test_map_vs_dealt(void)
{
	for (unsigned int n = 1; n <= 8; n++) {
		for (size_t c = 0; c < 3; c++) {
			uint64_t chunk = chunks[c], nsec;
			unsigned int rows =
			    (unsigned int)((16u << 20) / (chunk * n)) + 2;
			struct placed *t = deal(n, chunk, rows, &nsec);
			uint64_t *run = malloc(nsec * sizeof(*run));
			struct stripe_geom g;

			/*
			 * run[s]: sectors from s on that sit back to back on
			 * the same member.  For N > 1 such a stretch is one
			 * chunk, and a piece must stop where it stops.
			 */
			CHECK(run);
			run[nsec - 1] = 1;
			for (uint64_t s = nsec - 1; s-- > 0;)
				run[s] = back_to_back(&t[s], &t[s + 1])
					     ? run[s + 1] + 1
					     : 1;

			init_ok(&g, n, chunk);
			for (uint64_t s = 0; s < nsec; s++) {
				uint64_t delta = rnd_below(SECTOR_SIZE);
				uint64_t off = s * SECTOR_SIZE + delta;
				uint64_t len = 1 + rnd_below(3 * chunk);
				uint64_t stretch = run[s] * SECTOR_SIZE - delta;
				struct stripe_piece p;

				stripe_map(&g, off, len, &p);
				CHECK_EQ(p.member, t[s].member);
				CHECK_EQ(p.member_offset, t[s].offset + delta);
				/* The last stretch may be cut by the table. */
				if (n > 1 && s + run[s] < nsec)
					CHECK_EQ(p.length,
						 len < stretch ? len : stretch);
			}
			free(run);
			free(t);
		}
	}
}

/*
 * Walk [off, off + len) the way the stripe target does and check that the
 * pieces tile it exactly, each inside one chunk.
 */
static void walk_range(const struct stripe_geom *g, uint64_t chunk,
		       uint64_t off, uint64_t len)
{
	uint64_t pos = off, left = len, pieces = 0;

	while (left) {
		struct stripe_piece p, want;

		stripe_map(g, pos, left, &p);
		ref_map(g->nr_members, chunk, pos, left, &want);
		check_piece(&p, &want);
		CHECK(p.length > 0);
		CHECK(p.length <= left);
		CHECK(p.length <= chunk);
		/* First and last byte in the same chunk. */
		CHECK_EQ(pos / chunk, (pos + p.length - 1) / chunk);
		/* Stops at the chunk edge, or at the end of the range. */
		CHECK((pos + p.length) % chunk == 0 || p.length == left);
		pos += p.length;
		left -= p.length;
		pieces++;
	}
	CHECK_EQ(pos, off + len);
	/* Exactly the chunks the range touches, no more pieces. */
	CHECK_EQ(pieces, (off + len - 1) / chunk - off / chunk + 1);
}

static void test_walk(void)
{
	for (unsigned int n = 1; n <= 8; n++) {
		for (size_t c = 0; c < 3; c++) {
			uint64_t chunk = chunks[c];
			struct stripe_geom g;

			init_ok(&g, n, chunk);
			for (int i = 0; i < 3000; i++) {
				uint64_t off = pick_offset(n, chunk);
				uint64_t len;

				switch (rnd_below(4)) {
				case 0:
					len = rnd_range(1, 512);
					break;
				case 1:
					len = rnd_range(1, 3 * chunk);
					break;
				case 2: /* a 32 MiB request, the NBD maximum */
					len = 32u << 20;
					break;
				default:
					len = rnd_range(1, 64 * chunk);
					break;
				}
				walk_range(&g, chunk, off, len);
			}
		}
	}
}

/*
 * Every sector of a small volume maps to its own member sector, and all
 * member sectors of the volume's rows are used: the map is a bijection.
 */
static void test_bijection(void)
{
	for (unsigned int n = 1; n <= 8; n++) {
		for (size_t c = 0; c < 3; c++) {
			uint64_t chunk = chunks[c];
			unsigned int rows = c == 2 ? 3 : 11;
			uint64_t per_member = rows * chunk / SECTOR_SIZE;
			unsigned char *hit = calloc(n * per_member, 1);
			struct stripe_geom g;

			CHECK(hit);
			init_ok(&g, n, chunk);
			for (uint64_t s = 0; s < n * per_member; s++) {
				struct stripe_piece p;

				stripe_map(&g, s * SECTOR_SIZE, SECTOR_SIZE,
					   &p);
				CHECK(p.member < n);
				CHECK_EQ(p.member_offset % SECTOR_SIZE, 0);
				CHECK(p.member_offset / SECTOR_SIZE <
				      per_member);
				CHECK_EQ(p.length, SECTOR_SIZE);
				hit[p.member * per_member +
				    p.member_offset / SECTOR_SIZE]++;
			}
			for (uint64_t i = 0; i < n * per_member; i++)
				CHECK_EQ(hit[i], 1);
			free(hit);
		}
	}
}

int main(void)
{
	unit_seed("test-stripe-map");
	test_geom_init();
	test_map_vs_rows();
	test_map_vs_dealt();
	test_walk();
	test_bijection();
	printf("test-stripe-map: ok\n");
	return 0;
}
