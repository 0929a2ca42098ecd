// SPDX-License-Identifier: MIT
/*
 * rebuild.c - a mirror's rebuild: a spare takes over the role of a faulty
 * member, and the role's data is copied onto it row by row from the live
 * copies while clients keep reading and writing (docs/format.md,
 * "Rebuild").
 *
 * One thread per mirror, started by target_start() (after the front end
 * has forked), sleeping until a member turns faulty.  It does its I/O
 * with bios on its own ioq, through the same member targets as clients.
 *
 * Client writes reach a rebuilding member as they reach live ones, so
 * what the rebuild must not do is write an old copy over a newer one: it
 * copies a step only while the step's region has no write in flight, and
 * redoes the step when the region's write count moved meanwhile (a write
 * started after the source was read: mirror.h, regions).  md blocks the
 * writers instead; here the writers are event loops that must not wait.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <bionbd/plural.h>

#include "mirror.h"

#define REBUILD_STEP (1u << 20)
#define REBUILD_CHECKPOINT_S 1.0
#define REBUILD_REPORT_S 10.0
/* A rebuilt role whose record failed: tried again after 1, 2, 4... 30 s. */
#define REBUILD_RECORD_RETRY_MIN_S 1u
#define REBUILD_RECORD_RETRY_MAX_S 30u


static int rb_io(struct target *t, unsigned int opf, uint64_t off, void *buf,
		 uint32_t len)
{
	struct bio *bio = bio_alloc(1, opf);
	int r;

	if (!bio)
		return -ENOMEM;
	bio->bi_iter.bi_sector = off >> SECTOR_SHIFT;
	r = bio_add_buf(bio, buf, len);
	if (!r)
		r = submit_bio_wait(t, bio);
	bio_put(bio);
	return r;
}

static bool stopping(struct mirror_target *mt)
{
	bool stop;

	pthread_mutex_lock(&mt->lock);
	stop = mt->rb.stop;
	pthread_mutex_unlock(&mt->lock);
	return stop;
}

/*
 * Wait until region @r has no write in flight and take its write count.
 * False when the mirror is stopping.
 */
static bool region_quiet(struct mirror_target *mt, uint32_t r, unsigned *gen)
{
	struct timespec pause = { .tv_nsec = 200 * 1000 };

	for (;;) {
		if (!atomic_load(&mt->reg.inflight[r])) {
			*gen = atomic_load(&mt->reg.gen[r]);
			if (!atomic_load(&mt->reg.inflight[r]))
				return true;
		}
		if (stopping(mt))
			return false;
		nanosleep(&pause, NULL);
	}
}

struct step {
	uint64_t voff; /* volume offset of the data */
	uint32_t len;
	unsigned int src[MIRROR_MAX_MEMBERS]; /* live copies to read */
	uint64_t src_off[MIRROR_MAX_MEMBERS];
	unsigned int nr_src;
};

/*
 * What member data offset @x (after D) of member @m holds, as a step of
 * at most REBUILD_STEP inside one chunk: the chunk's volume range and its
 * live copies.  Returns the member bytes the step covers; @s->len is 0
 * for member bytes past the volume's end (nothing to copy).
 */
static uint64_t step_plan(struct mirror_target *mt, unsigned int m,
			  uint64_t x, struct step *s)
{
	const struct mirror_geom *g = &mt->g;
	uint64_t c = g->chunk_bytes, in = x & (c - 1);
	uint64_t p = (x >> g->chunk_shift) * g->nr_members + m;
	uint64_t k = p / g->copies, left = c - in, moff;
	unsigned int j = (unsigned int)(p % g->copies), member;

	if (left > REBUILD_STEP)
		left = REBUILD_STEP;
	s->voff = (k << g->chunk_shift) + in;
	s->len = 0;
	s->nr_src = 0;
	if (s->voff >= mt->t.size_bytes)
		return left;
	s->len = (uint32_t)(mt->t.size_bytes - s->voff < left ?
				    mt->t.size_bytes - s->voff :
				    left);
	for (unsigned int i = 0; i < g->copies; i++) {
		if (i == j)
			continue;
		mirror_map(g, s->voff, i, &member, &moff);
		if (mirror_live(mt, member)) {
			s->src[s->nr_src] = member;
			s->src_off[s->nr_src++] = moff;
		}
	}
	return left;
}

/* Copy one step onto member @m at member data offset @x.  0 or -errno. */
static int step_copy(struct mirror_target *mt, unsigned int m, uint64_t x,
		     const struct step *s, void *buf, uint64_t *redone)
{
	uint64_t dst = mt->g.data_offset + x;
	uint32_t r0, r1;
	unsigned int gen;
	int err;

	mirror_regions_range(&mt->reg, s->voff, s->len, &r0, &r1);
	for (;;) {
		unsigned int i;

		if (!region_quiet(mt, r0, &gen))
			return -EINTR;
		for (i = 0, err = -EIO; i < s->nr_src && err; i++) {
			struct target *src = mt->members[s->src[i]];

			if (!mirror_live(mt, s->src[i]))
				continue;
			err = rb_io(src, REQ_OP_READ, s->src_off[i], buf,
				    s->len);
			if (err && err != -ENOMEM)
				(void)mirror_fail(mt, s->src[i], src,
						  REQ_OP_READ, s->src_off[i],
						  err);
		}
		if (err) {
			target_notice(TARGET_NOTICE_ERROR,
				      "volume '%s': rebuilding member %s (role "
				      "%u): volume offset %" PRIu64 " has no "
				      "readable copy (%s); the rebuild stops",
				      mt->t.name, mt->members[m]->name, m,
				      s->voff, strerror(-err));
			return err;
		}
		err = rb_io(mt->members[m], REQ_OP_WRITE, dst, buf, s->len);
		if (err) {
			(void)mirror_fail(mt, m, mt->members[m], REQ_OP_WRITE,
					  dst, err);
			return err;
		}
		/* A write came meanwhile: its data may be older than ours. */
		if (!atomic_load(&mt->reg.inflight[r0]) &&
		    atomic_load(&mt->reg.gen[r0]) == gen)
			return 0;
		(*redone)++;
	}
}

/*
 * Member @m's copies so far reach storage before a checkpoint (or the
 * active state) on the others says they are there: after a power loss the
 * rebuild must not resume past data the member never kept.  A failure is
 * the member's: it is marked faulty, as for a failed copy.  0 or -errno.
 */
static int rb_flush(struct mirror_target *mt, unsigned int m)
{
	struct bio *bio = bio_alloc(0, REQ_OP_FLUSH);
	int r;

	if (!bio)
		return -ENOMEM;
	r = submit_bio_wait(mt->members[m], bio);
	bio_put(bio);
	if (r && r != -ENOMEM)
		(void)mirror_fail(mt, m, mt->members[m], REQ_OP_FLUSH, 0, r);
	return r;
}

/* Checkpoint member @m's rebuild at @x, once what it copied is synced. */
static int record_progress(struct mirror_target *mt, unsigned int m,
			   uint64_t x)
{
	uint64_t cp = x & ~((uint64_t)mt->g.chunk_bytes - 1);
	int r = rb_flush(mt, m);

	if (r)
		return r;
	pthread_mutex_lock(&mt->lock);
	mt->checkpoint[m] = cp;
	if (mt->hooks.progress)
		(void)mt->hooks.progress(mt->hooks.arg, m, cp);
	pthread_mutex_unlock(&mt->lock);
	return 0;
}

/* The statistics read the checkpoint again (mirror_rebuild.copying). */
static void copy_done(struct mirror_target *mt)
{
	pthread_mutex_lock(&mt->lock);
	mt->rb.copying = false;
	pthread_mutex_unlock(&mt->lock);
}

/*
 * Rebuild member @m from its checkpoint on.  0 when it is active and
 * recorded so; else -errno, with @unrecorded set when every byte is
 * copied and synced but no member took the record (its checkpoint then
 * stands at the end, so the next try, in @retry_s, only records).
 */
static int rebuild_member(struct mirror_target *mt, unsigned int m,
			  unsigned int retry_s, bool *unrecorded)
{
	uint64_t bytes, x, redone = 0, start_x;
	double t0 = engine_now_s(), saved = t0, told = t0;
	struct step s;
	void *buf = NULL;
	int err = 0;

	*unrecorded = false;
	if (mirror_member_bytes(&mt->g, mt->t.size_bytes, &bytes) ||
	    posix_memalign(&buf, 4096, REBUILD_STEP)) {
		target_notice(TARGET_NOTICE_ERROR,
			      "volume '%s': rebuild of role %u: out of memory",
			      mt->t.name, m);
		return -ENOMEM;
	}
	pthread_mutex_lock(&mt->lock);
	start_x = x = mt->checkpoint[m];
	mt->rb.copying = true;
	mt->rb.copy_member = m;
	mt->rb.copied = x;
	pthread_mutex_unlock(&mt->lock);
	if (x < bytes) /* else copied already: only its record failed */
		target_notice(TARGET_NOTICE_INFO,
			      "volume '%s': rebuilding member %s (role %u) "
			      "from %" PRIu64 " of %" PRIu64 " MiB",
			      mt->t.name, mt->members[m]->name, m, x >> 20,
			      bytes >> 20);
	while (x < bytes) {
		uint64_t n;
		double now;

		/* A stop (shutdown) waits for this step only, not the rest. */
		if (stopping(mt)) {
			err = -EINTR;
			break;
		}
		n = step_plan(mt, m, x, &s);
		if (mirror_state_of(mt, m) != MIRROR_REBUILDING) {
			err = -EIO; /* marked faulty: said so already */
			break;
		}
		if (s.len) {
			err = step_copy(mt, m, x, &s, buf, &redone);
			if (err)
				break;
		}
		x += n;
		pthread_mutex_lock(&mt->lock);
		mt->rb.copied = x < bytes ? x : bytes;
		pthread_mutex_unlock(&mt->lock);
		now = engine_now_s();
		if (now - saved >= REBUILD_CHECKPOINT_S) {
			err = record_progress(mt, m, x);
			if (err)
				break;
			saved = now;
		}
		if (now - told >= REBUILD_REPORT_S) {
			target_notice(TARGET_NOTICE_INFO,
				      "volume '%s': rebuilding role %u: %" PRIu64
				      "%% (%" PRIu64 " of %" PRIu64 " MiB)",
				      mt->t.name, m, x * 100 / bytes, x >> 20,
				      bytes >> 20);
			told = now;
		}
	}
	free(buf);
	if (err == -EINTR)
		(void)record_progress(mt, m, x); /* stopping: resume here */
	if (!err)
		err = rb_flush(mt, m);
	if (err) {
		copy_done(mt);
		return err;
	}
	pthread_mutex_lock(&mt->lock);
	/* The statistics go from copied to active at once. */
	mt->rb.copying = false;
	/*
	 * Marked faulty since the loop last looked (a client write failed
	 * on it during the last step or the flush; a record-only try has no
	 * step at all): recorded active, it would serve reads without the
	 * write it missed.
	 */
	if (atomic_load(&mt->state[m]) != MIRROR_REBUILDING) {
		pthread_mutex_unlock(&mt->lock);
		return -EIO; /* marked faulty: said so already */
	}
	{
		uint8_t state[MIRROR_MAX_MEMBERS];

		for (unsigned int i = 0; i < mt->g.nr_members; i++)
			state[i] = atomic_load(&mt->state[i]);
		state[m] = MIRROR_ACTIVE;
		/*
		 * Copied and synced: until the record says active, the
		 * checkpoint says so (statistics, the next try, and any
		 * other record of the role table meanwhile), so a record
		 * that fails costs a record again, not the whole copy.
		 */
		mt->checkpoint[m] = bytes;
		err = mt->hooks.record ?
			      mt->hooks.record(mt->hooks.arg, state,
					       mt->checkpoint,
					       mt->g.nr_members) :
			      0;
		if (!err) {
			mt->checkpoint[m] = 0;
			atomic_store_explicit(&mt->state[m], MIRROR_ACTIVE,
					      memory_order_release);
		}
	}
	pthread_mutex_unlock(&mt->lock);
	if (err) {
		target_notice(TARGET_NOTICE_ERROR,
			      "volume '%s': role %u rebuilt but not recorded "
			      "(%s): it stays rebuilding, copied in full; "
			      "recording it again in %u s",
			      mt->t.name, m, strerror(-err), retry_s);
		*unrecorded = true;
		return err;
	}
	if (start_x >= bytes) {
		target_notice(TARGET_NOTICE_INFO,
			      "volume '%s': member %s (role %u) rebuilt and "
			      "now recorded active",
			      mt->t.name, mt->members[m]->name, m);
		return 0;
	}
	target_notice(TARGET_NOTICE_INFO,
		      "volume '%s': member %s (role %u) rebuilt: %" PRIu64
		      " MiB in %.1f s (%.0f MB/s), %" PRIu64 " step%s redone "
		      "after client writes",
		      mt->t.name, mt->members[m]->name, m,
		      (bytes - start_x) >> 20, engine_now_s() - t0,
		      (double)(bytes - start_x) / 1e6 /
			      (engine_now_s() - t0 > 1e-6 ? engine_now_s() - t0 : 1e-6),
		      redone, plural(redone));
	return 0;
}

/*
 * Under the lock: wait @secs before recording a rebuilt role again, or
 * until the mirror stops.  Kicks meanwhile (other members' faults) do not
 * cut it short: the superblocks that just failed get time to come back.
 */
static void record_retry_wait(struct mirror_target *mt, unsigned int secs)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += secs;
	while (!mt->rb.stop &&
	       pthread_cond_timedwait(&mt->rb.cond, &mt->lock, &until) !=
		       ETIMEDOUT)
		;
}

/* Under the lock: a member to rebuild, or one a spare may replace. */
static int next_work(struct mirror_target *mt, bool *takeover)
{
	for (unsigned int m = 0; m < mt->g.nr_members; m++)
		if (atomic_load(&mt->state[m]) == MIRROR_REBUILDING) {
			*takeover = false;
			return (int)m;
		}
	if (mt->rb.no_spare || !mt->hooks.spare)
		return -1;
	for (unsigned int m = 0; m < mt->g.nr_members; m++)
		if (atomic_load(&mt->state[m]) == MIRROR_FAULTY) {
			*takeover = true;
			return (int)m;
		}
	return -1;
}

/* Under the lock: ask for a spare in place of member @m. */
static void take_spare(struct mirror_target *mt, unsigned int m)
{
	struct target *t = NULL;
	int r;

	if (mt->nr_retired == MIRROR_MAX_MEMBERS) {
		mt->rb.no_spare = true; /* replaced this often: give up */
		return;
	}
	r = mt->hooks.spare(mt->hooks.arg, m, &t);
	if (r) {
		/* The hook said why (or that there is none left). */
		mt->rb.no_spare = true;
		return;
	}
	if (mt->members[m])
		mt->retired[mt->nr_retired++] = mt->members[m];
	mt->members[m] = t;
	mt->checkpoint[m] = 0;
	atomic_store_explicit(&mt->state[m], MIRROR_REBUILDING,
			      memory_order_release);
}

static struct ioq *rebuild_ioq(void)
{
	struct ioq *q = NULL;

	if (ioq_create(&q, IOQ_IO_URING, 0) && ioq_create(&q, IOQ_THREADS, 0))
		return NULL;
	return q;
}

static void *rebuild_main(void *arg)
{
	struct mirror_target *mt = arg;
	struct ioq *q = NULL; /* made at the first work: an idle mirror's
			       * thread holds no ring */
	bool takeover, unrecorded;
	unsigned int retry_s = REBUILD_RECORD_RETRY_MIN_S;
	int m, err;

	pthread_mutex_lock(&mt->lock);
	while (!mt->rb.stop) {
		m = next_work(mt, &takeover);
		if (m < 0) {
			pthread_cond_wait(&mt->rb.cond, &mt->lock);
			continue;
		}
		if (takeover) {
			take_spare(mt, (unsigned int)m);
			continue;
		}
		pthread_mutex_unlock(&mt->lock);
		if (!q) {
			q = rebuild_ioq();
			if (!q) {
				target_notice(TARGET_NOTICE_ERROR,
					      "volume '%s': no I/O queue for "
					      "the rebuild",
					      mt->t.name);
				return NULL;
			}
			ioq_set_current(q);
		}
		err = rebuild_member(mt, (unsigned int)m, retry_s, &unrecorded);
		if (unrecorded) {
			pthread_mutex_lock(&mt->lock);
			record_retry_wait(mt, retry_s);
			retry_s = retry_s * 2 > REBUILD_RECORD_RETRY_MAX_S ?
					  REBUILD_RECORD_RETRY_MAX_S :
					  retry_s * 2;
			continue;
		}
		if (!err)
			retry_s = REBUILD_RECORD_RETRY_MIN_S;
		/*
		 * Still rebuilding and not stopping: it failed for good (no
		 * readable copy somewhere).  Out of service, and no spare
		 * after it: the next one would fail the same way.
		 */
		if (mirror_state_of(mt, (unsigned int)m) == MIRROR_REBUILDING &&
		    !stopping(mt))
			(void)mirror_fail(mt, (unsigned int)m,
					  mt->members[m], REQ_OP_READ, 0,
					  -EIO);
		pthread_mutex_lock(&mt->lock);
		if (mirror_state_of(mt, (unsigned int)m) == MIRROR_FAULTY)
			mt->rb.no_spare = true;
	}
	pthread_mutex_unlock(&mt->lock);
	if (q) {
		ioq_set_current(NULL);
		ioq_destroy(q);
	}
	return NULL;
}

void mirror_rebuild_start(struct target *t)
{
	struct mirror_target *mt = to_mirror(t);

	pthread_mutex_lock(&mt->lock);
	if (!mt->rb.started && !mt->rb.stop &&
	    !pthread_create(&mt->rb.thread, NULL, rebuild_main, mt))
		mt->rb.started = true;
	pthread_mutex_unlock(&mt->lock);
}

void mirror_rebuild_kick(struct mirror_target *mt)
{
	pthread_cond_signal(&mt->rb.cond);
}

void mirror_rebuild_stop(struct mirror_target *mt)
{
	bool started;

	pthread_mutex_lock(&mt->lock);
	mt->rb.stop = true;
	started = mt->rb.started;
	pthread_cond_signal(&mt->rb.cond);
	pthread_mutex_unlock(&mt->lock);
	if (started)
		pthread_join(mt->rb.thread, NULL);
}
