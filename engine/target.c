// SPDX-License-Identifier: MIT
/*
 * target.c - submit_bio(), the one range check every target relies on, and
 * the error-report hook.
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

void target_destroy(struct target *t)
{
	if (t)
		t->ops->destroy(t);
}
