// SPDX-License-Identifier: MIT
/*
 * mirror_bitmap.c - a mirror's regions and its write-intent bitmap
 * (mirror.h has the scheme).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mirror.h"

enum { BM_CLEAN, BM_DIRTY, BM_CLEARING };

#define BM_CLEAR_DELAY_S 5

/* ---- regions ---- */

int mirror_regions_init(struct mirror_regions *reg, uint64_t size,
			unsigned int shift)
{
	uint64_t nr = ((size - 1) >> shift) + 1;

	if (nr > (1u << 24))
		return -EINVAL;
	reg->shift = shift;
	reg->nr = (uint32_t)nr;
	reg->inflight = calloc(nr, sizeof(*reg->inflight));
	reg->gen = calloc(nr, sizeof(*reg->gen));
	if (reg->inflight && reg->gen)
		return 0;
	mirror_regions_free(reg);
	return -ENOMEM;
}

void mirror_regions_free(struct mirror_regions *reg)
{
	free(reg->inflight);
	free(reg->gen);
	reg->inflight = NULL;
	reg->gen = NULL;
	reg->nr = 0;
}

void mirror_regions_range(const struct mirror_regions *reg, uint64_t off,
			  uint64_t len, uint32_t *r0, uint32_t *r1)
{
	*r0 = (uint32_t)(off >> reg->shift);
	*r1 = (uint32_t)((off + (len ? len - 1 : 0)) >> reg->shift);
}

static void bio_regions(const struct mirror_target *mt, struct bio *bio,
			uint32_t *r0, uint32_t *r1)
{
	mirror_regions_range(&mt->reg, bio_offset_bytes(bio),
			     bio->bi_iter.bi_size, r0, r1);
}

void mirror_regions_start(struct mirror_target *mt, struct bio *bio)
{
	uint32_t r0, r1;

	bio_regions(mt, bio, &r0, &r1);
	for (uint32_t r = r0; r <= r1; r++) {
		atomic_fetch_add(&mt->reg.inflight[r], 1);
		atomic_fetch_add(&mt->reg.gen[r], 1);
	}
}

void mirror_regions_end(struct mirror_target *mt, struct bio *bio)
{
	uint32_t r0, r1;

	bio_regions(mt, bio, &r0, &r1);
	for (uint32_t r = r0; r <= r1; r++)
		atomic_fetch_sub(&mt->reg.inflight[r], 1);
}

/* ---- write-intent bitmap ---- */

static void *bm_daemon(void *arg);

/*
 * Before a write to @bio's range (counted in already): make sure each
 * region's bit is on disk.  0, or -EIO when no member took the bitmap (the
 * write must not go out: nothing would say to resync it).
 */
int mirror_bitmap_dirty(struct mirror_target *mt, struct bio *bio)
{
	struct mirror_bitmap *bm = mt->bm;
	bool slow = false, changed = false;
	uint32_t r0, r1, r;
	int err = 0;

	bio_regions(mt, bio, &r0, &r1);
	for (r = r0; r <= r1; r++) {
		atomic_store_explicit(&bm->touched[r], true,
				      memory_order_relaxed);
		if (atomic_load(&bm->state[r]) != BM_DIRTY)
			slow = true;
	}
	if (!slow)
		return 0;
	pthread_mutex_lock(&bm->lock);
	if (!bm->started && !pthread_create(&bm->daemon, NULL, bm_daemon, mt))
		bm->started = true; /* else bits stay set: resync does more */
	for (r = r0; r <= r1; r++) {
		if (atomic_load(&bm->state[r]) == BM_DIRTY)
			continue;
		if (!(bm->image[r / 8] >> (r % 8) & 1)) {
			bm->image[r / 8] |= (uint8_t)(1u << (r % 8));
			changed = true;
		}
	}
	if (changed && mt->hooks.bitmap_write)
		err = mt->hooks.bitmap_write(mt->hooks.arg, bm->image,
					     mt->reg.nr);
	if (!err)
		for (r = r0; r <= r1; r++)
			atomic_store(&bm->state[r], BM_DIRTY);
	pthread_mutex_unlock(&bm->lock);
	if (err) {
		target_notice(TARGET_NOTICE_ERROR,
			      "volume '%s': the write-intent bitmap could not "
			      "be written (%s): the write fails",
			      mt->t.name, strerror(-err));
		return -EIO;
	}
	return 0;
}

/* One pass of the daemon: clear the regions idle since the last pass. */
static void bm_clear_idle(struct mirror_target *mt)
{
	struct mirror_bitmap *bm = mt->bm;
	bool claimed = false, changed = false;

	for (uint32_t r = 0; r < mt->reg.nr; r++) {
		uint8_t dirty = BM_DIRTY;

		if (atomic_load(&bm->state[r]) != BM_DIRTY)
			continue;
		if (atomic_exchange(&bm->touched[r], false))
			continue;
		if (atomic_load(&mt->reg.inflight[r]) ||
		    !atomic_compare_exchange_strong(&bm->state[r], &dirty,
						    BM_CLEARING))
			continue;
		if (atomic_load(&mt->reg.inflight[r])) {
			uint8_t clearing = BM_CLEARING;

			atomic_compare_exchange_strong(&bm->state[r],
						       &clearing, BM_DIRTY);
			continue;
		}
		claimed = true;
	}
	if (!claimed)
		return;
	/* What the claimed regions had written must be on disk first. */
	if (mt->hooks.sync && mt->hooks.sync(mt->hooks.arg)) {
		for (uint32_t r = 0; r < mt->reg.nr; r++) {
			uint8_t clearing = BM_CLEARING;

			atomic_compare_exchange_strong(&bm->state[r],
						       &clearing, BM_DIRTY);
		}
		return;
	}
	pthread_mutex_lock(&bm->lock);
	for (uint32_t r = 0; r < mt->reg.nr; r++) {
		uint8_t clearing = BM_CLEARING;

		if (atomic_compare_exchange_strong(&bm->state[r], &clearing,
						   BM_CLEAN)) {
			bm->image[r / 8] &= (uint8_t)~(1u << (r % 8));
			changed = true;
		}
	}
	/* A failed write leaves bits set on disk: the safe side. */
	if (changed && mt->hooks.bitmap_write)
		(void)mt->hooks.bitmap_write(mt->hooks.arg, bm->image,
					       mt->reg.nr);
	pthread_mutex_unlock(&bm->lock);
}

static void *bm_daemon(void *arg)
{
	struct mirror_target *mt = arg;
	struct mirror_bitmap *bm = mt->bm;
	struct timespec ts;

	pthread_mutex_lock(&bm->lock);
	while (!bm->stop) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += BM_CLEAR_DELAY_S;
		pthread_cond_timedwait(&bm->cond, &bm->lock, &ts);
		if (bm->stop)
			break;
		pthread_mutex_unlock(&bm->lock);
		bm_clear_idle(mt);
		pthread_mutex_lock(&bm->lock);
	}
	pthread_mutex_unlock(&bm->lock);
	return NULL;
}

static void bm_free(struct mirror_bitmap *bm)
{
	if (!bm)
		return;
	free(bm->state);
	free(bm->touched);
	free(bm->image);
	pthread_cond_destroy(&bm->cond);
	pthread_mutex_destroy(&bm->lock);
	free(bm);
}

int mirror_bitmap_enable(struct target *t, unsigned int shift)
{
	struct mirror_target *mt = to_mirror(t);
	struct mirror_bitmap *bm;
	pthread_condattr_t ca;
	uint32_t nr;
	int r;

	if (mt->bm || shift < 9 || shift > 62)
		return -EINVAL;
	/* Before serving: no write is counted in the regions yet. */
	if (shift != mt->reg.shift) {
		struct mirror_regions reg;

		r = mirror_regions_init(&reg, t->size_bytes, shift);
		if (r)
			return r;
		mirror_regions_free(&mt->reg);
		mt->reg = reg;
	}
	nr = mt->reg.nr;
	bm = calloc(1, sizeof(*bm));
	if (!bm)
		return -ENOMEM;
	bm->state = calloc(nr, sizeof(*bm->state));
	bm->touched = calloc(nr, sizeof(*bm->touched));
	bm->image = calloc((nr + 7) / 8, 1);
	pthread_mutex_init(&bm->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&bm->cond, &ca);
	pthread_condattr_destroy(&ca);
	if (!bm->state || !bm->touched || !bm->image) {
		bm_free(bm);
		return -ENOMEM;
	}
	/* calloc: every region starts clean, as resync left it. */
	mt->bm = bm;
	return 0;
}

void mirror_bitmap_stop(struct mirror_target *mt)
{
	struct mirror_bitmap *bm = mt->bm;

	if (!bm)
		return;
	pthread_mutex_lock(&bm->lock);
	bm->stop = true;
	pthread_cond_signal(&bm->cond);
	pthread_mutex_unlock(&bm->lock);
	if (bm->started)
		pthread_join(bm->daemon, NULL);
	mt->bm = NULL;
	bm_free(bm);
}
