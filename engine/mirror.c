// SPDX-License-Identifier: MIT
/*
 * mirror.c - the RAID-1 / RAID-10 target (md's "near" layout, target.h).
 *
 * The request path is md raid1's: a write is cloned once per live copy,
 * a read goes to one copy and is retried on another when it fails.  The
 * clones are not bio_chain()ed to their piece: chaining passes the first
 * error up, and a mirror must not fail a write that one copy took.  A
 * small struct mirror_io per piece counts the copies instead and ends the
 * piece itself, once the copies that failed are marked faulty (recorded
 * in the superblocks before the client hears of its write).
 *
 * RAID-10 bios are split at chunk boundaries first, as RAID-0's are, and
 * every piece is mirrored on its own; RAID-1 copies lie at the same offset
 * on every member, so its bios are never split.  Ranged ops without data
 * (discard, write-zeroes) cost O(members) on RAID-10 too: whole chunks k
 * to k' are the positions kK to k'K + K - 1 of a RAID-0 over the members,
 * at most one contiguous range per member.
 *
 * All copies of one piece are submitted on one thread and so complete on
 * it (ioq.h): a mirror_io needs no locking.  What threads share is the
 * member states (atomic; changed under the lock) and the region counters.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <bionbd/superblock.h>

#include "mirror.h"

/* ---- geometry ---- */

int mirror_geom_init(struct mirror_geom *g, unsigned int nr_members,
		     unsigned int copies, uint64_t chunk_bytes)
{
	if (nr_members < 2 || nr_members > MIRROR_MAX_MEMBERS ||
	    copies < 2 || copies > nr_members ||
	    !stripe_chunk_valid(chunk_bytes))
		return -EINVAL;
	g->nr_members = nr_members;
	g->copies = copies;
	g->chunk_bytes = (uint32_t)chunk_bytes;
	g->chunk_shift = (unsigned int)__builtin_ctzll(chunk_bytes);
	g->data_offset = 0;
	return 0;
}

int mirror_member_bytes(const struct mirror_geom *g, uint64_t size_bytes,
			uint64_t *out)
{
	uint64_t chunks = (size_bytes >> g->chunk_shift) +
			  !!(size_bytes & (g->chunk_bytes - 1));
	uint64_t pos, rows;

	if (__builtin_mul_overflow(chunks, (uint64_t)g->copies, &pos))
		return -EFBIG;
	rows = pos / g->nr_members + !!(pos % g->nr_members);
	if (rows > ((uint64_t)INT64_MAX >> g->chunk_shift))
		return -EFBIG;
	*out = rows << g->chunk_shift;
	return 0;
}

bool mirror_covered(const struct mirror_geom *g, const uint8_t *state)
{
	/* Chunk k's copies start at member kK mod N: try every start. */
	for (unsigned int k = 0; k < g->nr_members; k++) {
		unsigned int start =
			(unsigned int)((uint64_t)k * g->copies % g->nr_members);
		bool live = false;

		for (unsigned int j = 0; j < g->copies && !live; j++)
			live = state[(start + j) % g->nr_members] ==
			       MIRROR_ACTIVE;
		if (!live)
			return false;
	}
	return true;
}

/* ---- faults ---- */

const char *mirror_op_name(enum req_op op)
{
	static const char *const names[] = { "read", "write", "flush",
					     "discard", "cache",
					     "write-zeroes", "extents" };

	return op < ARRAY_SIZE(names) ? names[op] : "?";
}

static unsigned int nr_live(struct mirror_target *mt)
{
	unsigned int n = 0;

	for (unsigned int m = 0; m < mt->g.nr_members; m++)
		n += mirror_live(mt, m);
	return n;
}

/*
 * @state: the members' states with member @m taken out of service.
 * Returns whether every chunk still has a live copy then.
 */
static bool mirror_state_without(struct mirror_target *mt, unsigned int m,
				 uint8_t *state)
{
	for (unsigned int i = 0; i < mt->g.nr_members; i++)
		state[i] = atomic_load(&mt->state[i]);
	state[m] = MIRROR_FAULTY;
	return mirror_covered(&mt->g, state);
}

/* Would every chunk keep a live copy without member @m? */
static bool mirror_can_lose(struct mirror_target *mt, unsigned int m)
{
	uint8_t state[MIRROR_MAX_MEMBERS];

	return mirror_state_without(mt, m, state);
}

/*
 * Take member @m out of service after @err on @op: recorded through the
 * hooks before this returns, so that the caller may then complete the I/O
 * the copy missed.  Refused (-EIO, and the volume fails) when the member
 * holds the last live copy of some data, or when no member could record
 * it.  0 when the member is (now or already) faulty.  A member being
 * rebuilt holds no live copy yet: its rebuild just stops.
 */
int mirror_fail(struct mirror_target *mt, unsigned int m, struct target *t,
		enum req_op op, uint64_t member_offset, int err)
{
	uint8_t state[MIRROR_MAX_MEMBERS];
	bool rebuilding = mirror_state_of(mt, m) == MIRROR_REBUILDING;
	int r = 0;

	pthread_mutex_lock(&mt->lock);
	if (!mirror_writable(mt, m) || mt->members[m] != t)
		goto out;
	if (atomic_load(&mt->failed) && !rebuilding) {
		r = -EIO;
		goto out;
	}
	if (!mirror_state_without(mt, m, state)) {
		atomic_store(&mt->failed, true);
		target_notice(TARGET_NOTICE_ERROR,
			      "volume '%s' failed: member %s (role %u) had a "
			      "%s error at offset %" PRIu64 " (%s) and holds "
			      "the last live copy of some data; writes fail "
			      "with EIO from now on",
			      mt->t.name, mt->members[m]->name, m,
			      mirror_op_name(op), member_offset, strerror(-err));
		r = -EIO;
		goto out;
	}
	if (mt->hooks.record) {
		r = mt->hooks.record(mt->hooks.arg, state, mt->checkpoint,
				     mt->g.nr_members);
		if (r) {
			atomic_store(&mt->failed, true);
			target_notice(TARGET_NOTICE_ERROR,
				      "volume '%s' failed: member %s (role %u) "
				      "must be marked faulty, but no member "
				      "could record it (%s); writes fail with "
				      "EIO from now on",
				      mt->t.name, mt->members[m]->name, m,
				      strerror(-r));
			r = -EIO;
			goto out;
		}
	}
	atomic_store_explicit(&mt->state[m], MIRROR_FAULTY,
			      memory_order_release);
	target_notice(TARGET_NOTICE_ERROR,
		      "volume '%s': member %s (role %u) marked faulty after a "
		      "%s error at offset %" PRIu64 " (%s)%s; serving degraded "
		      "on %u of %u members",
		      mt->t.name, mt->members[m]->name, m, mirror_op_name(op),
		      member_offset, strerror(-err),
		      rebuilding ? ", its rebuild stopped" : "", nr_live(mt),
		      mt->g.nr_members);
	mirror_rebuild_kick(mt);
out:
	pthread_mutex_unlock(&mt->lock);
	return r;
}

/* ---- one piece's copies ---- */

struct mirror_leg {
	struct mirror_io *io;
	unsigned int member;
	struct target *target; /* the member's target it went to */
	sector_t sector; /* where on the member */
	uint32_t size;
	int err;
};

struct mirror_io {
	struct mirror_target *mt;
	struct bio *bio; /* the piece; ends when every copy has */
	unsigned int pending;
	unsigned int ok;
	int err; /* reads: the last copy's error */
	uint64_t tried; /* reads: members tried */
	unsigned int start; /* reads: the copy index to try first */
	unsigned int cur_member; /* reads: the copy in flight: its member */
	struct target *cur; /* and that member's target */
	unsigned int nr_legs;
	struct mirror_leg legs[];
};

static struct mirror_io *io_alloc(struct mirror_target *mt, struct bio *bio,
				  unsigned int legs)
{
	struct mirror_io *io = malloc(sizeof(*io) + legs * sizeof(io->legs[0]));

	if (io) {
		memset(io, 0, sizeof(*io));
		io->mt = mt;
		io->bio = bio;
	}
	return io;
}

static void leg_add(struct mirror_io *io, unsigned int member,
		    uint64_t member_offset, uint64_t size)
{
	struct mirror_leg *l = &io->legs[io->nr_legs++];

	l->io = io;
	l->member = member;
	l->sector = member_offset >> SECTOR_SHIFT;
	l->size = (uint32_t)size;
	l->err = 0;
}

static void write_leg_endio(struct bio *clone);

/* Send leg @l: a clone of the piece, moved to the leg's member range. */
/* @l's piece as a bio for its member, or NULL (no memory). */
static struct bio *leg_clone(struct mirror_leg *l, unsigned int opf)
{
	struct mirror_io *io = l->io;
	struct bio *clone = bio_clone(io->bio);

	if (!clone)
		return NULL;
	clone->bi_opf = opf;
	clone->bi_iter.bi_sector = l->sector;
	if (!bio_has_data(io->bio))
		clone->bi_iter.bi_size = l->size;
	clone->bi_private = l;
	clone->bi_end_io = write_leg_endio;
	return clone;
}

static void leg_go(struct mirror_leg *l, struct bio *clone)
{
	l->io->pending++;
	l->target = l->io->mt->members[l->member];
	submit_bio(l->target, clone);
}

static int leg_submit(struct mirror_leg *l, unsigned int opf)
{
	struct bio *clone = leg_clone(l, opf);

	if (!clone)
		return -ENOMEM;
	leg_go(l, clone);
	return 0;
}

/*
 * Every copy answered.  A fast zero that some copies refused while others
 * did it would leave them different: those copies zero the slow way.
 * Copies that failed are marked faulty; the piece succeeds when one copy
 * took it and every failed one is out of service.
 */
static void write_done(struct mirror_io *io)
{
	struct mirror_target *mt = io->mt;
	struct bio *bio = io->bio;
	unsigned int redo = 0;
	bool refused = false;
	int err = 0, r;

	for (unsigned int i = 0; i < io->nr_legs; i++) {
		struct mirror_leg *l = &io->legs[i];

		if (l->err == -EOPNOTSUPP && (bio->bi_opf & REQ_NOFALLBACK) &&
		    io->ok)
			redo++;
	}
	if (redo) {
		unsigned int opf = bio->bi_opf & ~REQ_NOFALLBACK;

		io->pending = 1; /* held while the legs go out */
		for (unsigned int i = 0; i < io->nr_legs; i++) {
			struct mirror_leg *l = &io->legs[i];

			if (l->err != -EOPNOTSUPP)
				continue;
			l->err = 0;
			if (leg_submit(l, opf))
				l->err = -ENOMEM;
		}
		if (--io->pending)
			return;
	}
	for (unsigned int i = 0; i < io->nr_legs; i++) {
		struct mirror_leg *l = &io->legs[i];

		if (!l->err)
			continue;
		if (!err)
			err = l->err;
		/* Nothing took it: the copies agree that it failed. */
		if (!io->ok)
			continue;
		r = mirror_fail(mt, l->member, l->target, bio_op(bio),
				(uint64_t)l->sector << SECTOR_SHIFT, l->err);
		if (r) {
			io->ok = 0; /* mirror_fail said why */
			refused = true;
		}
	}
	r = !err || io->ok ? 0 : err;
	if (r && r != -EOPNOTSUPP && !refused)
		target_notice(TARGET_NOTICE_ERROR,
			      "volume '%s': %s at offset %" PRIu64 " length %u "
			      "failed on every live copy (%s)",
			      mt->t.name, mirror_op_name(bio_op(bio)),
			      bio_offset_bytes(bio), bio->bi_iter.bi_size,
			      strerror(-r));
	free(io);
	if (bio_op(bio) != REQ_OP_FLUSH)
		mirror_regions_end(mt, bio);
	if (r)
		bio_io_error(bio, r);
	else
		bio_endio(bio, bio->bi_iter.bi_size, 0);
}

static void write_leg_endio(struct bio *clone)
{
	struct mirror_leg *l = clone->bi_private;
	struct mirror_io *io = l->io;

	if (clone->bi_status)
		l->err = clone->bi_status;
	else
		io->ok++;
	bio_put(clone);
	if (!--io->pending)
		write_done(io);
}

/*
 * Send every leg of a write-type @io; the piece ends in write_done.  The
 * clones are made first: a leg left behind for want of memory while the
 * others went would leave its copy stale, and be marked faulty for it.
 * Without memory for all, none goes and the piece fails (ENOMEM).
 */
static void write_start(struct mirror_io *io)
{
	struct bio *clones[MIRROR_MAX_MEMBERS];
	unsigned int i;

	for (i = 0; i < io->nr_legs; i++) {
		clones[i] = leg_clone(&io->legs[i], io->bio->bi_opf);
		if (!clones[i])
			break;
	}
	if (i < io->nr_legs) {
		while (i--)
			bio_put(clones[i]);
		for (i = 0; i < io->nr_legs; i++)
			io->legs[i].err = -ENOMEM;
	}
	io->pending = 1; /* held while the legs go out */
	for (i = 0; i < io->nr_legs && !io->legs[i].err; i++)
		leg_go(&io->legs[i], clones[i]);
	if (!--io->pending)
		write_done(io);
}

/*
 * Legs of a write-type piece: one per live copy.  A piece inside one chunk
 * (or any RAID-1 piece) has its K copies; a RAID-10 piece of whole chunks
 * k to k' is positions kK to k'K + K - 1, one range per member.
 */
static struct mirror_io *write_legs(struct mirror_target *mt, struct bio *bio)
{
	const struct mirror_geom *g = &mt->g;
	uint64_t off = bio_offset_bytes(bio), len = bio->bi_iter.bi_size;
	struct mirror_io *io = io_alloc(mt, bio, g->nr_members);
	uint64_t moff;
	unsigned int m;

	if (!io)
		return NULL;
	if (bio_op(bio) == REQ_OP_FLUSH) {
		for (m = 0; m < g->nr_members; m++)
			if (mirror_writable(mt, m))
				leg_add(io, m, 0, 0);
		return io;
	}
	if (mirror_raid1(mt) || (off >> g->chunk_shift) ==
				 ((off + len - 1) >> g->chunk_shift)) {
		for (unsigned int j = 0; j < g->copies; j++) {
			mirror_map(g, off, j, &m, &moff);
			if (mirror_writable(mt, m))
				leg_add(io, m, moff, len);
		}
		return io;
	}
	{
		struct stripe_geom sg = { .nr_members = g->nr_members,
					  .chunk_bytes = g->chunk_bytes,
					  .chunk_shift = g->chunk_shift,
					  .data_offset = g->data_offset };
		uint64_t pstart = off * g->copies, plen = len * g->copies;
		uint64_t mstart, mlen;

		for (m = 0; m < g->nr_members; m++)
			if (mirror_writable(mt, m) && stripe_member_range(&sg, m, pstart,
							       plen, &mstart,
							       &mlen))
				leg_add(io, m, mstart, mlen);
	}
	return io;
}

static void write_piece(struct mirror_target *mt, struct bio *bio)
{
	struct mirror_io *io;

	bool ranged = bio_op(bio) != REQ_OP_FLUSH;
	int err = -ENOMEM;

	if (atomic_load_explicit(&mt->failed, memory_order_relaxed)) {
		bio_io_error(bio, -EIO);
		return;
	}
	/* Counted in before the copies are chosen (mirror.h, regions). */
	if (ranged)
		mirror_regions_start(mt, bio);
	io = write_legs(mt, bio);
	if (!io)
		goto fail;
	err = -EIO; /* no copy of this data left to write, or no bitmap */
	if (!io->nr_legs || (mt->bm && ranged && mirror_bitmap_dirty(mt, bio)))
		goto fail;
	write_start(io);
	return;
fail:
	free(io);
	if (ranged)
		mirror_regions_end(mt, bio);
	bio_io_error(bio, err);
}

/* ---- reads ---- */


static void read_next(struct mirror_io *io);

static void read_endio(struct bio *clone)
{
	struct mirror_io *io = clone->bi_private;
	struct mirror_target *mt = io->mt;
	unsigned int m = io->cur_member;
	int err = clone->bi_status;
	uint64_t moff = bio_offset_bytes(clone);

	bio_put(clone);
	/*
	 * The copy found out it lost writes while it served this (a remote
	 * restarted under it): what it read may be stale, so read it from a
	 * copy that did not, if one is left.  (Extents would be appended
	 * twice: they are an answer about the copy, as with errors below.)
	 */
	if (!err && bio_op(io->bio) == REQ_OP_READ &&
	    unlikely(target_lost(io->cur)) && mirror_can_lose(mt, m)) {
		(void)mirror_fail(mt, m, io->cur, REQ_OP_FLUSH, 0, -EIO);
		read_next(io);
		return;
	}
	if (!err) {
		struct bio *bio = io->bio;

		free(io);
		bio_endio(bio, bio->bi_iter.bi_size, 0);
		return;
	}
	/*
	 * Extents and cache are answers about a copy, not data: their error
	 * is the client's (a retry would append extents twice).
	 */
	if (bio_op(io->bio) != REQ_OP_READ) {
		struct bio *bio = io->bio;

		free(io);
		bio_io_error(bio, err);
		return;
	}
	io->err = err;
	if (err != -ENOMEM)
		(void)mirror_fail(mt, m, io->cur, REQ_OP_READ, moff, err);
	read_next(io);
}


/*
 * Send the read to the next live copy not tried yet, from the copy the
 * request was given (mirror_submit) on.  Taking the live copies in turn
 * measured faster than choosing the copy with the fewest reads in flight
 * (bench/mirror, tmpfs, 2 CPUs): as fast on raid1, faster on raid10,
 * where shared in-flight counters cost two atomic operations per read on
 * lines every worker touches, to balance members that were never busy.
 */
static void read_next(struct mirror_io *io)
{
	struct mirror_target *mt = io->mt;
	const struct mirror_geom *g = &mt->g;
	struct bio *bio = io->bio, *clone;
	uint64_t off = bio_offset_bytes(bio), moff, best_off = 0;
	unsigned int best = ~0u, m;

	for (unsigned int i = 0; i < g->copies; i++) {
		mirror_map(g, off, (io->start + i) % g->copies, &m, &moff);
		if ((io->tried >> m & 1) || !mirror_live(mt, m))
			continue;
		/*
		 * A copy that knows it lost writes (target_lost) may hold
		 * stale data here: out with it before it is read, unless it
		 * holds the last copy of something (then it is all there is).
		 */
		if (unlikely(target_lost(mt->members[m])) &&
		    mirror_can_lose(mt, m)) {
			io->tried |= 1ull << m;
			(void)mirror_fail(mt, m, mt->members[m], REQ_OP_FLUSH,
					  0, -EIO);
			continue;
		}
		best = m;
		best_off = moff;
		break;
	}
	if (best == ~0u) {
		int err = io->err ? io->err : -EIO;

		free(io);
		bio_io_error(bio, err);
		return;
	}
	clone = bio_clone(bio);
	if (!clone) {
		free(io);
		bio_io_error(bio, -ENOMEM);
		return;
	}
	io->tried |= 1ull << best;
	io->cur_member = best;
	clone->bi_iter.bi_sector = best_off >> SECTOR_SHIFT;
	clone->bi_private = io;
	clone->bi_end_io = read_endio;
	io->cur = mt->members[best];
	submit_bio(io->cur, clone);
}

static void read_piece(struct mirror_target *mt, struct bio *bio,
		       unsigned int start)
{
	struct mirror_io *io = io_alloc(mt, bio, 0);

	if (!io) {
		bio_io_error(bio, -ENOMEM);
		return;
	}
	io->start = start;
	read_next(io);
}

/* ---- dispatch ---- */

/* @start: the copy index reads of this request try first. */
static void mirror_piece(struct mirror_target *mt, struct bio *bio,
			 unsigned int start)
{
	switch (bio_op(bio)) {
	case REQ_OP_READ:
	case REQ_OP_EXTENTS:
	case REQ_OP_CACHE:
		read_piece(mt, bio, start);
		return;
	default:
		write_piece(mt, bio);
		return;
	}
}

/* Cut the front @bytes off @bio as a piece chained to it, and mirror it. */
static bool piece_off(struct mirror_target *mt, struct bio *bio,
		      uint64_t bytes, unsigned int start)
{
	struct bio *split = bio_split(bio, (unsigned int)(bytes >> SECTOR_SHIFT));

	if (unlikely(!split)) {
		bio_io_error(bio, -ENOMEM);
		return false;
	}
	bio_chain(split, bio);
	mirror_piece(mt, split, start);
	return true;
}

/*
 * RAID-10 discard and write-zeroes: the partial chunks at either end are
 * pieces of their own, whole chunks between them pieces of up to 2 GiB
 * (so that a member's share of one stays below a bio's 4 GiB).
 */
static void mirror_ranged(struct mirror_target *mt, struct bio *bio)
{
	uint64_t mask = mt->g.chunk_bytes - 1, max = (2ull << 30) & ~mask;
	uint64_t off = bio_offset_bytes(bio);
	uint64_t head = off & mask ? mt->g.chunk_bytes - (off & mask) : 0;

	if (!max)
		max = mt->g.chunk_bytes;
	if (head >= bio->bi_iter.bi_size) {
		mirror_piece(mt, bio, 0);
		return;
	}
	if (head && !piece_off(mt, bio, head, 0))
		return;
	for (;;) {
		uint64_t len = bio->bi_iter.bi_size, whole = len & ~mask;

		if (whole > max)
			whole = max;
		if (!whole || whole == len)
			break;
		if (!piece_off(mt, bio, whole, 0))
			return;
	}
	mirror_piece(mt, bio, 0);
}

/*
 * Every piece of one read starts at the same copy index, the next one in
 * turn for this thread (the primary copy for mirror_read_primary): on
 * RAID-10 the chunks a request reads from one member then lie back to
 * back there (chunks k, k + N/K ... are one row apart), and the plug
 * makes them one I/O, as RAID-0's are; the next request takes the other
 * copies.
 */
static unsigned int read_start(struct mirror_target *mt)
{
	static __thread unsigned int turn;

	return mt->primary_reads ? 0 : turn++;
}

static void mirror_submit(struct target *t, struct bio *bio)
{
	struct mirror_target *mt = to_mirror(t);
	unsigned int pieces = 0, start;
	struct blk_plug plug;
	uint64_t left;

	switch (bio_op(bio)) {
	case REQ_OP_FLUSH:
		write_piece(mt, bio);
		return;
	case REQ_OP_DISCARD:
	case REQ_OP_WRITE_ZEROES:
	case REQ_OP_CACHE:
		if (mirror_raid1(mt) || bio_op(bio) == REQ_OP_CACHE)
			mirror_piece(mt, bio, read_start(mt));
		else
			mirror_ranged(mt, bio);
		return;
	default:
		break;
	}
	start = read_start(mt);
	if (mirror_raid1(mt)) {
		mirror_piece(mt, bio, start);
		return;
	}
	blk_start_plug(&plug);
	for (;;) {
		uint64_t off = bio_offset_bytes(bio);

		/* As on RAID-0: a huge block status answers a prefix. */
		if (bio_op(bio) == REQ_OP_EXTENTS &&
		    pieces++ == STRIPE_MAX_EXTENT_PIECES) {
			bio_endio(bio, bio->bi_iter.bi_size, 0);
			break;
		}
		left = mt->g.chunk_bytes - (off & (mt->g.chunk_bytes - 1));
		if (left >= bio->bi_iter.bi_size) {
			mirror_piece(mt, bio, start);
			break;
		}
		if (!piece_off(mt, bio, left, start))
			break;
	}
	blk_finish_plug(&plug);
}

/* A live copy of the piece at @off, in turn. */
static int mirror_iomap(struct target *t, uint64_t off, uint64_t len,
			unsigned int flags, struct target_iomap *m)
{
	static __thread unsigned int turn;
	struct mirror_target *mt = to_mirror(t);
	uint64_t left = mt->g.chunk_bytes - (off & (mt->g.chunk_bytes - 1));
	unsigned int start = mt->primary_reads ? 0 : turn++, member;
	uint64_t moff;

	if (!mt->iomap)
		return -EOPNOTSUPP;
	if (!mirror_raid1(mt) && len > left)
		len = left;
	for (unsigned int i = 0; i < mt->g.copies; i++) {
		struct target *mem;
		int r;

		mirror_map(&mt->g, off, (start + i) % mt->g.copies, &member,
			   &moff);
		if (!mirror_live(mt, member))
			continue;
		mem = mt->members[member];
		r = target_iomap(mem, moff, len, flags, m);
		if (r != -EIO)
			return r;
		/* Cut short behind our back: as a failed read would. */
		(void)mirror_fail(mt, member, mem, REQ_OP_READ, moff, r);
	}
	return -EIO;
}

/*
 * sendfile met the end of @src's file: the member was cut short (its size
 * was checked at open), so it fails as a read would, and the caller maps
 * the data again, from another copy.
 */
static int mirror_iomap_short(struct target *t, struct target *src,
			      uint64_t off)
{
	struct mirror_target *mt = to_mirror(t);

	for (unsigned int m = 0; m < mt->g.nr_members; m++)
		if (mt->members[m] == src)
			return mirror_fail(mt, m, src, REQ_OP_READ, off, -EIO);
	return -EOPNOTSUPP;
}

static void mirror_destroy(struct target *t)
{
	struct mirror_target *mt = to_mirror(t);

	mirror_rebuild_stop(mt);
	mirror_bitmap_stop(mt);
	for (unsigned int i = 0; i < mt->g.nr_members; i++)
		target_destroy(mt->members[i]);
	for (unsigned int i = 0; i < mt->nr_retired; i++)
		target_destroy(mt->retired[i]);
	mirror_regions_free(&mt->reg);
	pthread_cond_destroy(&mt->rb.cond);
	pthread_mutex_destroy(&mt->lock);
	free(mt->t.name);
	free(mt);
}

/* The members (an RBD image connects), then the rebuild onto spares. */
static void mirror_start(struct target *t)
{
	struct mirror_target *mt = to_mirror(t);

	for (unsigned int i = 0; i < mt->g.nr_members; i++)
		target_start(mt->members[i]);
	mirror_rebuild_start(t);
}

/* Under the lock: a spare's takeover changes a member and its state. */
static unsigned int mirror_member_states(struct target *t,
					 struct target_member_state *out,
					 unsigned int max)
{
	struct mirror_target *mt = to_mirror(t);
	unsigned int n = 0;
	uint64_t bytes = 0;

	(void)mirror_member_bytes(&mt->g, mt->t.size_bytes, &bytes);
	pthread_mutex_lock(&mt->lock);
	for (unsigned int m = 0; m < mt->g.nr_members && n < max; m++) {
		uint8_t s = atomic_load(&mt->state[m]);

		if (!mt->members[m])
			continue;
		out[n].name = mt->members[m]->name;
		out[n].state = s == MIRROR_ACTIVE   ? TARGET_MEMBER_ACTIVE :
			       s == MIRROR_FAULTY   ? TARGET_MEMBER_FAULTY :
						      TARGET_MEMBER_REBUILDING;
		out[n].rebuilt = s != MIRROR_REBUILDING ? 0 :
				 mt->rb.copying && mt->rb.copy_member == m ?
							  mt->rb.copied :
							  mt->checkpoint[m];
		out[n].bytes = s == MIRROR_REBUILDING ? bytes : 0;
		n++;
	}
	pthread_mutex_unlock(&mt->lock);
	return n;
}

static const struct target_ops mirror_target_ops = {
	.submit = mirror_submit,
	.destroy = mirror_destroy,
	.iomap = mirror_iomap,
	.start = mirror_start,
	.iomap_short = mirror_iomap_short,
	.member_states = mirror_member_states,
};

int mirror_target_create(struct target **out, struct target **members,
			 const uint8_t *state, const uint64_t *checkpoint,
			 unsigned int nr, unsigned int copies,
			 uint64_t chunk_bytes, uint64_t size_bytes,
			 uint64_t data_offset, const char *name)
{
	struct mirror_target *mt;
	struct mirror_geom g;
	struct target_iomap map;
	uint64_t need;
	bool iomap = true;
	int r;

	/* Positions (offset x K) must fit in 64 bits: see write_legs. */
	if (mirror_geom_init(&g, nr, copies, chunk_bytes) ||
	    data_offset % chunk_bytes || !size_bytes ||
	    size_bytes % SECTOR_SIZE || size_bytes > UINT64_MAX / 2 / copies ||
	    mirror_member_bytes(&g, size_bytes, &need) ||
	    __builtin_add_overflow(need, data_offset, &need))
		return -EINVAL;
	g.data_offset = data_offset;
	for (unsigned int i = 0; i < nr; i++) {
		bool in_use = state[i] == MIRROR_ACTIVE ||
			      state[i] == MIRROR_REBUILDING;

		if (in_use && (!members[i] || members[i]->size_bytes < need))
			return -EINVAL;
		if (state[i] == MIRROR_ACTIVE &&
		    target_iomap(members[i], 0, 1, 0, &map))
			iomap = false;
	}
	if (!mirror_covered(&g, state))
		return -EINVAL;
	mt = calloc(1, sizeof(*mt));
	if (!mt)
		return -ENOMEM;
	mt->t.name = strdup(name && *name ? name : "mirror");
	r = mt->t.name ? mirror_regions_init(&mt->reg, size_bytes,
					     sb_bitmap_shift(size_bytes)) :
			 -ENOMEM;
	if (r) {
		free(mt->t.name);
		free(mt);
		return r;
	}
	pthread_mutex_init(&mt->lock, NULL);
	pthread_cond_init(&mt->rb.cond, NULL);
	mt->t.ops = &mirror_target_ops;
	mt->t.size_bytes = size_bytes;
	mt->g = g;
	mt->iomap = iomap;
	for (unsigned int i = 0; i < nr; i++) {
		atomic_init(&mt->state[i], state[i]);
		mt->members[i] = members[i];
		if (state[i] == MIRROR_REBUILDING && checkpoint)
			mt->checkpoint[i] = checkpoint[i];
	}
	*out = &mt->t;
	return 0;
}

void mirror_set_hooks(struct target *t, const struct mirror_hooks *hooks)
{
	struct mirror_target *mt = to_mirror(t);

	pthread_mutex_lock(&mt->lock);
	if (hooks)
		mt->hooks = *hooks;
	else
		memset(&mt->hooks, 0, sizeof(mt->hooks));
	pthread_mutex_unlock(&mt->lock);
}

void mirror_read_primary(struct target *t)
{
	to_mirror(t)->primary_reads = true;
}

void mirror_set_checkpoint(struct target *t, unsigned int m,
			   uint64_t checkpoint)
{
	struct mirror_target *mt = to_mirror(t);

	pthread_mutex_lock(&mt->lock);
	if (m < mt->g.nr_members && checkpoint < mt->checkpoint[m])
		mt->checkpoint[m] = checkpoint;
	pthread_mutex_unlock(&mt->lock);
}

void mirror_state_get(struct target *t, uint8_t *state, unsigned int nr)
{
	struct mirror_target *mt = to_mirror(t);

	for (unsigned int i = 0; i < nr && i < mt->g.nr_members; i++)
		state[i] = atomic_load(&mt->state[i]);
}

/* ---- notices ---- */

static target_notice_fn *notice_fn;

void target_set_notice_reporter(target_notice_fn *fn)
{
	notice_fn = fn;
}

void target_notice(enum target_notice_level level, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (!notice_fn)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	notice_fn(level, msg);
}
