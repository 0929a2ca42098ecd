/* SPDX-License-Identifier: MIT */
/*
 * bioio_sync.h - one bio, submitted and waited for: what unit tests that
 * drive a target by hand need most.
 */
#ifndef BIONBD_TEST_BIOIO_SYNC_H
#define BIONBD_TEST_BIOIO_SYNC_H

#include <stdint.h>

#include <bionbd/target.h>

/**
 * test_bio_io - one bio of @opf over [@off, @off + @len) of @t on the
 * current ioq, from @buf (or without data when @buf is NULL: flush,
 * discard, write-zeroes).  Returns the bio's status; aborts when out of
 * memory.
 */
int test_bio_io(struct target *t, unsigned int opf, uint64_t off,
		uint32_t len, void *buf);

#endif /* BIONBD_TEST_BIOIO_SYNC_H */
