// SPDX-License-Identifier: MIT
/*
 * target.c - submit_bio() with the one range check every target relies on,
 * submit_bio_wait(), target_iomap(), the error-report hook, and plugging.
 */
#include <errno.h>

#include "internal.h"

static target_error_fn *error_reporter;

void target_set_error_reporter(target_error_fn *fn)
{
	error_reporter = fn;
}

void target_report_error(const struct target *t, const struct bio *bio,
			 int err)
{
	if (error_reporter)
		error_reporter(t, bio_op(bio), bio_offset_bytes(bio),
			       bio->bi_iter.bi_size, err);
}

void submit_bio(struct target *t, struct bio *bio)
{
	uint64_t off = bio_offset_bytes(bio);
	uint64_t len = bio->bi_iter.bi_size;
	enum req_op op = bio_op(bio);

	if (unlikely(op >= REQ_OP_LAST)) {
		bio_io_error(bio, -EINVAL);
		return;
	}
	/* A sector past 2^55 would wrap when turned into bytes. */
	if (unlikely(bio->bi_iter.bi_sector > (UINT64_MAX >> SECTOR_SHIFT) ||
		     off > t->size_bytes || len > t->size_bytes - off)) {
		/* NBD's rule: writing past the end is "no space". */
		bio_io_error(bio, (op == REQ_OP_WRITE ||
				   op == REQ_OP_WRITE_ZEROES) ? -ENOSPC :
								-EINVAL);
		return;
	}
	t->ops->submit(t, bio);
}

static void submit_wait_endio(struct bio *bio)
{
	*(bool *)bio->bi_private = true;
}

int submit_bio_wait(struct target *t, struct bio *bio)
{
	struct ioq *q = ioq_current();
	bio_end_io_t *end_io = bio->bi_end_io;
	void *private = bio->bi_private;
	bool done = false;

	if (!q)
		return -ENXIO;
	bio->bi_private = &done;
	bio->bi_end_io = submit_wait_endio;
	submit_bio(t, bio);
	ioq_wait_for(q, &done);
	bio->bi_end_io = end_io;
	bio->bi_private = private;
	return bio->bi_status;
}

static __thread struct blk_plug *current_plug;

void blk_start_plug(struct blk_plug *plug)
{
	plug->nr = 0;
	if (!current_plug)
		current_plug = plug;
}

/* Hand every target its held bios, grouped per target, in order. */
static void blk_flush_plug(struct blk_plug *plug)
{
	struct bio *bios[BLK_PLUG_MAX];
	unsigned int nr = plug->nr;

	plug->nr = 0;
	for (unsigned int i = 0; i < nr; i++) {
		struct target *t = plug->ent[i].t;
		unsigned int n = 0;

		if (!t)
			continue;
		for (unsigned int j = i; j < nr; j++) {
			if (plug->ent[j].t != t)
				continue;
			bios[n++] = plug->ent[j].bio;
			plug->ent[j].t = NULL;
		}
		t->ops->unplug(t, bios, n);
	}
}

void blk_finish_plug(struct blk_plug *plug)
{
	if (current_plug != plug)
		return; /* an inner plug: the outer one issues */
	/* Detached first: nothing the targets do now may be held back. */
	current_plug = NULL;
	blk_flush_plug(plug);
}

bool blk_plug_add(struct target *t, struct bio *bio)
{
	struct blk_plug *plug = current_plug;

	if (!plug)
		return false;
	if (plug->nr == BLK_PLUG_MAX) {
		current_plug = NULL;
		blk_flush_plug(plug);
		current_plug = plug;
	}
	plug->ent[plug->nr].t = t;
	plug->ent[plug->nr].bio = bio;
	plug->nr++;
	return true;
}

int target_iomap(struct target *t, uint64_t off, uint64_t len,
		 unsigned int flags, struct target_iomap *m)
{
	if (!t->ops->iomap)
		return -EOPNOTSUPP;
	if (!len || off > t->size_bytes || len > t->size_bytes - off)
		return -EINVAL;
	return t->ops->iomap(t, off, len, flags, m);
}

int target_iomap_short(struct target *t, struct target *src, uint64_t off)
{
	if (!t->ops->iomap_short)
		return -EOPNOTSUPP;
	return t->ops->iomap_short(t, src, off);
}

unsigned int target_member_states(struct target *t,
				  struct target_member_state *out,
				  unsigned int max)
{
	return t && t->ops->member_states ? t->ops->member_states(t, out, max) :
					     0;
}

bool target_lost(struct target *t)
{
	return t->ops->lost && t->ops->lost(t);
}

bool target_zero_refused(struct target *t, uint64_t off, uint64_t len,
			 unsigned int opf)
{
	return t->ops->zero_refused && t->ops->zero_refused(t, off, len, opf);
}

void target_start(struct target *t)
{
	if (t && t->ops->start)
		t->ops->start(t);
}

void target_destroy(struct target *t)
{
	if (t)
		t->ops->destroy(t);
}
