// SPDX-License-Identifier: MIT
/*
 * stripe.c - the RAID-0 target.
 *
 * The request path for data is the kernel's raid0 loop: map the front of
 * the bio, and while it crosses a chunk boundary split the front off, chain
 * it to the bio and send it to its member; the bio itself, remapped, is the
 * last piece.  Extents go through the same loop, for a bounded prefix.
 *
 * Ranged ops without data (discard, write-zeroes, cache) cost O(members),
 * not O(chunks): the chunks k, k + N, k + 2N ... of a range lie back to
 * back on member k % N, so a volume range is at most one contiguous range
 * per member, and each member gets one clone of the bio for it.  Flush
 * fans out to every member.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct stripe_target {
	struct target t;
	struct stripe_geom g;
	bool iomap; /* every member answers target_iomap() */
	struct target *members[];
};

static inline struct stripe_target *to_stripe(struct target *t)
{
	return container_of(t, struct stripe_target, t);
}

int stripe_geom_init(struct stripe_geom *g, unsigned int nr_members,
		     uint64_t chunk_bytes)
{
	if (!nr_members || !stripe_chunk_valid(chunk_bytes))
		return -EINVAL;
	g->nr_members = nr_members;
	g->chunk_bytes = (uint32_t)chunk_bytes;
	g->chunk_shift = (unsigned int)__builtin_ctzll(chunk_bytes);
	g->data_offset = 0;
	return 0;
}

int stripe_member_bytes(const struct stripe_geom *g, uint64_t size_bytes,
			uint64_t *out)
{
	uint64_t stripe_bytes = (uint64_t)g->nr_members << g->chunk_shift;
	uint64_t chunks = size_bytes / stripe_bytes + !!(size_bytes % stripe_bytes);

	if (chunks > ((uint64_t)INT64_MAX >> g->chunk_shift))
		return -EFBIG;
	*out = chunks << g->chunk_shift;
	return 0;
}

/*
 * A traced request cut into a piece for member @m: its X event, with the
 * piece's volume range (the member range is in the member's D event).
 */
static void stripe_trace_piece(struct stripe_target *st, const struct bio *bio,
			       uint64_t vol_off, uint32_t len, unsigned int m)
{
	struct trace_rec ev = {
		.type = TRACE_X,
		.op = (uint8_t)bio_op(bio),
		.time_ns = trace_now(),
		.seq = bio->bi_trace,
		.offset = vol_off,
		.size = len,
		.obj = st->members[m]->trace_id,
	};

	trace_emit(&ev);
}

/* Flush every member in parallel; the bio completes when all have. */
static void stripe_flush(struct stripe_target *st, struct bio *bio)
{
	int err = 0;

	for (unsigned int i = 0; i < st->g.nr_members; i++) {
		struct bio *clone = bio_clone(bio);

		if (!clone) {
			err = -ENOMEM;
			continue;
		}
		bio_chain(clone, bio);
		if (unlikely(bio->bi_trace))
			stripe_trace_piece(st, bio, 0, 0, i);
		submit_bio(st->members[i], clone);
	}
	bio_endio(bio, 0, err);
}

bool stripe_member_range(const struct stripe_geom *g, unsigned int member,
			 uint64_t off, uint64_t len, uint64_t *mstart,
			 uint64_t *mlen)
{
	uint64_t n = g->nr_members, mask = g->chunk_bytes - 1;
	uint64_t k0 = off >> g->chunk_shift;
	uint64_t k1 = (off + len - 1) >> g->chunk_shift;
	uint64_t first = k0 + (member + n - k0 % n) % n;
	uint64_t last, start, end;

	if (first > k1)
		return false;
	last = k1 - (k1 % n + n - member) % n;
	start = ((first / n) << g->chunk_shift) + (first == k0 ? off & mask : 0);
	end = ((last / n) << g->chunk_shift) +
	      (last == k1 ? ((off + len - 1) & mask) + 1 : g->chunk_bytes);
	*mstart = g->data_offset + start;
	*mlen = end - start;
	return true;
}

/* Whether a member would refuse its piece of a fast zero of @off, @len. */
static bool stripe_zero_refused(struct target *t, uint64_t off, uint64_t len,
				unsigned int opf)
{
	struct stripe_target *st = to_stripe(t);
	uint64_t mstart, mlen;

	for (unsigned int i = 0; i < st->g.nr_members; i++)
		if (stripe_member_range(&st->g, i, off, len, &mstart, &mlen) &&
		    target_zero_refused(st->members[i], mstart, mlen, opf))
			return true;
	return false;
}

/* Discard, write-zeroes, cache: one clone per member the range touches. */
static void stripe_ranged(struct stripe_target *st, struct bio *bio)
{
	uint64_t off = bio_offset_bytes(bio), len = bio->bi_iter.bi_size;
	uint64_t mstart, mlen;
	int err = 0;

	/*
	 * The pieces run in parallel: a fast zero a member is sure to refuse
	 * is refused whole before any other member zeroes its piece.
	 */
	if (bio_op(bio) == REQ_OP_WRITE_ZEROES &&
	    (bio->bi_opf & REQ_NOFALLBACK) &&
	    stripe_zero_refused(&st->t, off, len, bio->bi_opf)) {
		bio_endio(bio, 0, -EOPNOTSUPP);
		return;
	}

	for (unsigned int i = 0; i < st->g.nr_members; i++) {
		struct bio *clone;

		if (!stripe_member_range(&st->g, i, off, len, &mstart, &mlen))
			continue;
		clone = bio_clone(bio);
		if (!clone) {
			err = -ENOMEM;
			break;
		}
		clone->bi_iter.bi_sector = mstart >> SECTOR_SHIFT;
		clone->bi_iter.bi_size = (uint32_t)mlen;
		bio_chain(clone, bio);
		if (unlikely(bio->bi_trace))
			stripe_trace_piece(st, bio, off, (uint32_t)len, i);
		submit_bio(st->members[i], clone);
	}
	bio_endio(bio, bio->bi_iter.bi_size, err);
}

static void stripe_submit(struct target *t, struct bio *bio)
{
	struct stripe_target *st = to_stripe(t);
	unsigned int pieces = 0;
	bool split_once = false;
	struct stripe_piece p;
	struct blk_plug plug;

	switch (bio_op(bio)) {
	case REQ_OP_FLUSH:
		stripe_flush(st, bio);
		return;
	case REQ_OP_DISCARD:
	case REQ_OP_WRITE_ZEROES:
	case REQ_OP_CACHE:
		stripe_ranged(st, bio);
		return;
	default:
		break;
	}
	/* One member that wants whole ranges: the layout is the identity. */
	if (st->g.nr_members == 1 && st->members[0]->whole_io) {
		bio->bi_iter.bi_sector += st->g.data_offset >> SECTOR_SHIFT;
		submit_bio(st->members[0], bio);
		return;
	}
	/* Chunks k, k + N ... of this bio are neighbours on member k % N. */
	blk_start_plug(&plug);
	for (;;) {
		struct bio *split;

		/*
		 * Extents may answer a prefix (bio.h): past the bound, or once
		 * the pieces so far answered enough (members that answer at
		 * once), the rest ends unreported, so a huge block status
		 * costs no more than STRIPE_MAX_EXTENT_PIECES lookups.
		 */
		if (bio_op(bio) == REQ_OP_EXTENTS &&
		    (pieces++ == STRIPE_MAX_EXTENT_PIECES ||
		     (bio->bi_ext && bio_extents_full(bio->bi_ext)))) {
			bio_endio(bio, bio->bi_iter.bi_size, 0);
			break;
		}
		stripe_map(&st->g, bio_offset_bytes(bio), bio->bi_iter.bi_size,
			   &p);
		if (p.length == bio->bi_iter.bi_size) {
			if (unlikely(bio->bi_trace) && split_once)
				stripe_trace_piece(st, bio,
						   bio_offset_bytes(bio),
						   bio->bi_iter.bi_size,
						   p.member);
			bio->bi_iter.bi_sector = p.member_offset >> SECTOR_SHIFT;
			submit_bio(st->members[p.member], bio);
			break;
		}
		split = bio_split(bio, (unsigned int)(p.length >> SECTOR_SHIFT));
		if (unlikely(!split)) {
			/* Pieces already sent still complete; then -ENOMEM. */
			bio_io_error(bio, -ENOMEM);
			break;
		}
		bio_chain(split, bio);
		if (unlikely(bio->bi_trace)) {
			split_once = true;
			stripe_trace_piece(st, split, bio_offset_bytes(split),
					   (uint32_t)p.length, p.member);
		}
		split->bi_iter.bi_sector = p.member_offset >> SECTOR_SHIFT;
		submit_bio(st->members[p.member], split);
	}
	blk_finish_plug(&plug);
}

static void stripe_destroy(struct target *t)
{
	struct stripe_target *st = to_stripe(t);

	for (unsigned int i = 0; i < st->g.nr_members; i++)
		target_destroy(st->members[i]);
	free(st->t.name);
	free(st);
}

/* The piece up to the next chunk boundary, as its member has it. */
static int stripe_iomap(struct target *t, uint64_t off, uint64_t len,
			unsigned int flags, struct target_iomap *m)
{
	struct stripe_target *st = to_stripe(t);
	struct stripe_piece p;

	if (!st->iomap)
		return -EOPNOTSUPP;
	stripe_map(&st->g, off, len, &p);
	return target_iomap(st->members[p.member], p.member_offset, p.length,
			    flags, m);
}

/* Members with work of their own once the front end is up (rbd.c). */
static void stripe_start(struct target *t)
{
	struct stripe_target *st = to_stripe(t);

	for (unsigned int i = 0; i < st->g.nr_members; i++)
		target_start(st->members[i]);
}

static const struct target_ops stripe_target_ops = {
	.submit = stripe_submit,
	.destroy = stripe_destroy,
	.iomap = stripe_iomap,
	.start = stripe_start,
	.zero_refused = stripe_zero_refused,
};

/* Members say once whether they ever answer (target_iomap's promise). */
static bool members_iomap(struct target **members, unsigned int nr)
{
	struct target_iomap m;

	for (unsigned int i = 0; i < nr; i++)
		if (target_iomap(members[i], 0, 1, 0, &m))
			return false;
	return true;
}

int stripe_target_create(struct target **out, struct target **members,
			 unsigned int nr, uint64_t chunk_bytes,
			 uint64_t size_bytes, uint64_t data_offset)
{
	struct stripe_target *st;
	struct stripe_geom g;
	uint64_t min = UINT64_MAX, stripe_bytes, need;

	if (stripe_geom_init(&g, nr, chunk_bytes) || data_offset % chunk_bytes)
		return -EINVAL;
	g.data_offset = data_offset;
	for (unsigned int i = 0; i < nr; i++)
		if (members[i]->size_bytes < min)
			min = members[i]->size_bytes;
	/* What the data has of each member. */
	if (min < data_offset)
		return -EINVAL;
	min -= data_offset;
	stripe_bytes = (uint64_t)nr * g.chunk_bytes;
	if (!size_bytes) {
		if (min / g.chunk_bytes > UINT64_MAX / stripe_bytes)
			return -EINVAL;
		size_bytes = (min / g.chunk_bytes) * stripe_bytes;
		if (!size_bytes)
			return -EINVAL;
	} else {
		if (size_bytes & (SECTOR_SIZE - 1) ||
		    stripe_member_bytes(&g, size_bytes, &need) || min < need)
			return -EINVAL;
	}

	st = calloc(1, sizeof(*st) + nr * sizeof(st->members[0]));
	if (!st)
		return -ENOMEM;
	st->t.name = strdup("stripe");
	if (!st->t.name) {
		free(st);
		return -ENOMEM;
	}
	st->t.ops = &stripe_target_ops;
	st->t.size_bytes = size_bytes;
	st->g = g;
	st->iomap = members_iomap(members, nr);
	memcpy(st->members, members, nr * sizeof(members[0]));
	for (unsigned int i = 0; i < nr; i++) {
		st->t.single_conn |= members[i]->single_conn;
		st->t.readonly |= members[i]->readonly;
	}
	*out = &st->t;
	return 0;
}
