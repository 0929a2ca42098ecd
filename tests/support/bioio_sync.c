// SPDX-License-Identifier: MIT
/*
 * bioio_sync.c - test_bio_io(): one synchronous bio for unit tests.
 */
#include <stdlib.h>

#include <bionbd/bio.h>

#include "bioio_sync.h"

int test_bio_io(struct target *t, unsigned int opf, uint64_t off,
		uint32_t len, void *buf)
{
	struct bio *bio = bio_alloc(1, opf);
	int r;

	if (!bio || (buf && bio_add_buf(bio, buf, len)))
		abort();
	bio->bi_iter.bi_sector = off >> SECTOR_SHIFT;
	if (!buf)
		bio->bi_iter.bi_size = len;
	r = submit_bio_wait(t, bio);
	bio_put(bio);
	return r;
}
