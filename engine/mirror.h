/* SPDX-License-Identifier: MIT */
/*
 * mirror.h - what the mirror's files share: the target's state (mirror.c:
 * the request path and faults), the regions and write-intent bitmap
 * (mirror_bitmap.c), and the rebuild onto spares (rebuild.c).
 */
#ifndef BIONBD_MIRROR_H
#define BIONBD_MIRROR_H

#include <pthread.h>
#include <stdatomic.h>

#include "internal.h"

#define MIRROR_MAX_MEMBERS 64

/*
 * The volume cut into regions of 2^shift bytes (the bitmap's, when there
 * is one).  Every write counts itself in (inflight, and gen once more)
 * before it decides which copies it goes to, and out when they are all
 * done: the rebuild and the bitmap daemon learn from them that a region
 * is quiet, or that a write raced them.
 */
struct mirror_regions {
	unsigned int shift;
	uint32_t nr;
	atomic_uint *inflight;
	atomic_uint *gen;
};

/*
 * The write-intent bitmap, md's scheme: a region's bit is on disk before
 * any write to it starts, and comes off only when the region has had no
 * write for a while and the members were synced since.  A region goes
 * CLEAN -> DIRTY (bit written, under the lock) -> CLEARING (the daemon
 * claims an idle one) -> CLEAN (bit cleared on disk, under the lock); a
 * writer that finds it anything but DIRTY takes the lock and makes it
 * DIRTY again.  Writers count themselves in before they look at the state
 * and the daemon looks at the count after it claims: with sequentially
 * consistent atomics one of them sees the other.
 */
struct mirror_bitmap {
	_Atomic uint8_t *state; /* BM_* per region */
	atomic_bool *touched; /* written since the daemon last looked */
	uint8_t *image; /* the bits on disk; under the lock */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;
	/*
	 * Started by the first write, not when the volume opens: nbdkit
	 * opens volumes before it forks, and threads do not survive a fork.
	 */
	bool started;
	pthread_t daemon;
};

/* The rebuild thread (rebuild.c), started by target_start(). */
struct mirror_rebuild {
	pthread_t thread;
	bool started;
	bool stop; /* under the mirror's lock */
	bool no_spare; /* the spare hook said none is left */
	pthread_cond_t cond; /* with the mirror's lock: work, or stop */
	/*
	 * Under the mirror's lock: the member being copied and how far,
	 * every step, for the statistics (mirror_member_states); the
	 * checkpoint, durable, moves only every second.
	 */
	bool copying;
	unsigned int copy_member;
	uint64_t copied;
};

struct mirror_target {
	struct target t;
	struct mirror_geom g;
	bool iomap; /* every live member answers target_iomap() */
	bool primary_reads; /* mirror_read_primary */
	struct mirror_regions reg;
	struct mirror_bitmap *bm;
	struct mirror_rebuild rb;
	atomic_bool failed; /* some data lost its last copy: no writes */
	pthread_mutex_t lock; /* state changes, hooks, checkpoints */
	struct mirror_hooks hooks;
	_Atomic uint8_t state[MIRROR_MAX_MEMBERS];
	uint64_t checkpoint[MIRROR_MAX_MEMBERS]; /* rebuilding; under lock */
	/*
	 * A member's target changes only when a spare takes over its role,
	 * before its state turns MIRROR_REBUILDING (release): whoever reads
	 * the state as writable or live (acquire) sees the new one.  The
	 * target it replaced may still have I/O in flight, so it is kept
	 * until the mirror is destroyed.
	 */
	struct target *members[MIRROR_MAX_MEMBERS];
	struct target *retired[MIRROR_MAX_MEMBERS];
	unsigned int nr_retired;
};

static inline struct mirror_target *to_mirror(struct target *t)
{
	return container_of(t, struct mirror_target, t);
}

static inline bool mirror_raid1(const struct mirror_target *mt)
{
	return mt->g.copies == mt->g.nr_members;
}

static inline uint8_t mirror_state_of(struct mirror_target *mt,
				      unsigned int m)
{
	return atomic_load_explicit(&mt->state[m], memory_order_acquire);
}

/* Reads may use member @m. */
static inline bool mirror_live(struct mirror_target *mt, unsigned int m)
{
	return mirror_state_of(mt, m) == MIRROR_ACTIVE;
}

/* Writes go to member @m: live, or being rebuilt. */
static inline bool mirror_writable(struct mirror_target *mt, unsigned int m)
{
	uint8_t s = mirror_state_of(mt, m);

	return s == MIRROR_ACTIVE || s == MIRROR_REBUILDING;
}

/* mirror.c */
/*
 * @t: the target the failed I/O went to; when a spare has taken member
 * @m's role since, the old member's failure changes nothing.
 */
int mirror_fail(struct mirror_target *mt, unsigned int m, struct target *t,
		enum req_op op, uint64_t member_offset, int err);
const char *mirror_op_name(enum req_op op);

/* mirror_bitmap.c */
int mirror_regions_init(struct mirror_regions *reg, uint64_t size,
			unsigned int shift);
void mirror_regions_free(struct mirror_regions *reg);
void mirror_regions_range(const struct mirror_regions *reg, uint64_t off,
			  uint64_t len, uint32_t *r0, uint32_t *r1);
/* A write to @bio's range starts / ends (not for flushes). */
void mirror_regions_start(struct mirror_target *mt, struct bio *bio);
void mirror_regions_end(struct mirror_target *mt, struct bio *bio);
/* Before the write goes out: its regions' bits on disk.  0 or -EIO. */
int mirror_bitmap_dirty(struct mirror_target *mt, struct bio *bio);
void mirror_bitmap_stop(struct mirror_target *mt);

/* rebuild.c */
void mirror_rebuild_start(struct target *t);
/* A member turned faulty: a spare may take over. */
void mirror_rebuild_kick(struct mirror_target *mt);
void mirror_rebuild_stop(struct mirror_target *mt);

#endif /* BIONBD_MIRROR_H */
