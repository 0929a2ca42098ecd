/* SPDX-License-Identifier: MIT */
/*
 * volume.h - what front ends open: a whole striped volume from member paths.
 *
 * volume_open() validates the whole definition (chunk, member count,
 * duplicates, file types, sizes) before it creates, extends or opens
 * anything, so a mistake in a definition costs no file.  Front ends with
 * several volumes call volume_check() on every one first.
 */
#ifndef BIONBD_VOLUME_H
#define BIONBD_VOLUME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <bionbd/target.h>

struct volume_config {
	const char *const *members; /* paths, in member order */
	unsigned int nr_members;
	uint64_t chunk_bytes; /* 0 = STRIPE_DEFAULT_CHUNK */
	uint64_t size_bytes; /* 0 = from the members; else create/extend */
	bool readonly;
	bool direct;
	bool no_inline; /* file_target_opts.no_inline for every member */
};

/**
 * volume_open - check a volume definition, then create/extend and open it
 * @out: receives the stripe target; the caller owns it (target_destroy)
 * @errbuf: receives a one-line message naming the problem on failure
 *
 * Files are never truncated; members this call created are removed again
 * when a later step fails.  Returns 0 or -errno.
 */
int volume_open(struct target **out, const struct volume_config *cfg,
		char *errbuf, size_t errlen);

/**
 * volume_check - every check volume_open makes, without creating, extending
 * or opening anything.  Returns 0 or -errno with a message.
 */
int volume_check(const struct volume_config *cfg, char *errbuf,
		 size_t errlen);

#endif /* BIONBD_VOLUME_H */
