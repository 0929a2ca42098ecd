/* SPDX-License-Identifier: MIT */
/*
 * target.h - stackable "block devices" that bios are submitted to.
 *
 * A target is a small ops table plus its size.  The stripe target's members
 * are targets too, so a file, an error-injecting target or a later remote
 * target slot in under it without the stripe code knowing.  volume_open() is
 * what front ends call: it validates a whole volume definition before it
 * creates or opens anything.
 */
#ifndef BIONBD_TARGET_H
#define BIONBD_TARGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <bionbd/bio.h>

struct target;

/*
 * Never reorder: targets outside the engine may fill this in by position.
 * All callbacks run on the submitting thread.
 */
struct target_ops {
	/*
	 * Required.  Start @bio (already checked to lie inside the target).
	 * Completion, now or later, is bio_endio() on the submitting thread's
	 * ioq (ioq.h).  Must not fail synchronously other than through
	 * bio_endio().
	 */
	void (*submit)(struct target *t, struct bio *bio);
	/* Required.  Free the target (and, for stacked ones, what they own). */
	void (*destroy)(struct target *t);
	/*
	 * Optional.  Start the @nr bios a plug held back for @t (see
	 * blk_start_plug), in the order they were submitted; neighbours may
	 * go down as one I/O.  Only targets that call blk_plug_add need it.
	 */
	void (*unplug)(struct target *t, struct bio **bios, unsigned int nr);
};

struct target {
	const struct target_ops *ops;
	char *name; /* for messages: a path, or "stripe" */
	uint64_t size_bytes;
	/* Largest piece worth sending in one go, 0 = no preference. */
	uint32_t opt_io_bytes;
};

/**
 * submit_bio - send @bio to @t
 *
 * The range is checked here, once, for every target: past the end a write
 * or write-zeroes bio ends with -ENOSPC and any other with -EINVAL, as the
 * NBD spec's error rules expect.  Must run on a thread with a current
 * ioq (ioq_set_current).
 */
void submit_bio(struct target *t, struct bio *bio);

/*
 * Plugging, after the kernel's blk_start_plug()/blk_finish_plug(): while a
 * plug is active on a thread, targets that can merge (files done inline,
 * see ioq.h) hold back the reads and writes submitted to them, and
 * blk_finish_plug() hands each target its share at once.  The stripe target
 * plugs around its split loop, so the pieces of one big bio that lie back
 * to back on a member (chunks k, k + N, k + 2N ...) cost one system call
 * instead of one each.  Plugs do not nest: an inner start is a no-op and
 * the outermost finish issues everything.  A plug lives on the stack of
 * one function and never outlives it.
 */
#define BLK_PLUG_MAX 32

struct blk_plug {
	unsigned int nr;
	struct {
		struct target *t;
		struct bio *bio;
	} ent[BLK_PLUG_MAX];
};

void blk_start_plug(struct blk_plug *plug);
void blk_finish_plug(struct blk_plug *plug);
/*
 * For targets' submit: hold @bio for @t (which must have ->unplug) in the
 * thread's active plug.  False when there is none: submit it now.
 */
bool blk_plug_add(struct target *t, struct bio *bio);

/** target_destroy - free a target and everything below it. */
void target_destroy(struct target *t);

/*
 * Errors from the bottom of the stack (a member file) are reported once,
 * with the member's name and the offset inside it, through this hook; front
 * ends point it at nbdkit_error or their log.  Called on the completing
 * thread, i.e. the submitter's.  NULL (the default) reports nothing.
 */
typedef void target_error_fn(const struct target *t, enum req_op op,
			     uint64_t offset, uint64_t length, int err);
void target_set_error_reporter(target_error_fn *fn);

/* -------- file target -------- */

struct file_target_opts {
	bool readonly;
	bool direct; /* O_DIRECT: buffers and offsets must be 512-aligned */
	bool no_inline; /* use the backend even on tmpfs/ramfs (see ioq.h) */
};

/**
 * file_target_open - a target backed by one existing file or block device
 *
 * Reads past the end of a regular file return zeros, so a short sparse
 * member works.  Returns 0 or -errno (*out untouched on error).
 */
int file_target_open(struct target **out, const char *path,
		     const struct file_target_opts *opts);

/* -------- stripe target (RAID-0) -------- */

struct stripe_geom {
	unsigned int nr_members;
	uint32_t chunk_bytes; /* power of two, >= 4096 */
	unsigned int chunk_shift;
};

struct stripe_piece {
	unsigned int member;
	uint64_t member_offset;
	uint64_t length; /* bytes, up to the next chunk boundary */
};

#define STRIPE_MIN_CHUNK 4096u
#define STRIPE_DEFAULT_CHUNK 65536u
#define STRIPE_MAX_CHUNK (1u << 30)

/** stripe_geom_init - validate and precompute; returns 0 or -EINVAL. */
int stripe_geom_init(struct stripe_geom *g, unsigned int nr_members,
		     uint64_t chunk_bytes);

/**
 * stripe_map - the one place that maps a volume offset to a member
 * @g: geometry
 * @offset: volume byte offset
 * @length: bytes wanted from @offset on (> 0)
 * @p: filled with the member, the offset inside it and the length of the
 *     piece, which ends at @length or the chunk boundary, whichever is first
 *
 * Chunk k = offset / chunk lives on member k % N at (k / N) * chunk.
 */
static inline void stripe_map(const struct stripe_geom *g, uint64_t offset,
			      uint64_t length, struct stripe_piece *p)
{
	uint64_t k = offset >> g->chunk_shift;
	uint64_t in_chunk = offset & (g->chunk_bytes - 1);
	uint64_t left = g->chunk_bytes - in_chunk;

	p->member = (unsigned int)(k % g->nr_members);
	p->member_offset = ((k / g->nr_members) << g->chunk_shift) + in_chunk;
	p->length = length < left ? length : left;
}

/**
 * stripe_target_create - RAID-0 over @nr targets
 * @members: array of @nr targets; on success the stripe owns them (the array
 *           itself stays the caller's)
 * @size_bytes: volume size; 0 means N x the smallest member rounded down to
 *              a whole stripe.  Otherwise each member must hold its share.
 *
 * Returns 0 or -EINVAL (bad geometry, members too small).
 */
int stripe_target_create(struct target **out, struct target **members,
			 unsigned int nr, uint64_t chunk_bytes,
			 uint64_t size_bytes);

/* -------- error-injecting target -------- */

struct error_rule {
	int op; /* enum req_op, or -1 for any op */
	uint64_t offset; /* bytes; rule matches bios overlapping the range */
	uint64_t length; /* 0 = to the end */
	int error; /* -errno to complete matching bios with */
	unsigned int skip; /* let this many matching bios through first */
	unsigned int count; /* then fail this many; 0 = all */
};

/**
 * error_target_create - pass bios to @below, failing those a rule matches
 * Owns @below on success.  Returns 0 or -ENOMEM.
 */
int error_target_create(struct target **out, struct target *below);

/** error_target_add_rule - returns 0, -EINVAL or -ENOMEM. */
int error_target_add_rule(struct target *t, const struct error_rule *rule);

/** error_target_clear - drop every rule. */
void error_target_clear(struct target *t);

/* -------- volumes: what a front end opens -------- */

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
 * @errbuf: receives a one-line message naming the problem on failure
 *
 * Everything is validated (chunk, member count, duplicates, file types,
 * sizes) before any file is created or extended; files are never truncated.
 * Returns 0 or -errno.
 */
int volume_open(struct target **out, const struct volume_config *cfg,
		char *errbuf, size_t errlen);

/**
 * volume_check - every check volume_open makes, without creating, extending
 * or opening anything; front ends with several exports check them all
 * before opening the first.  Returns 0 or -errno with a message.
 */
int volume_check(const struct volume_config *cfg, char *errbuf,
		 size_t errlen);

/**
 * parse_size - "4096", "64K", "1M", "4G", "1T" (binary units) to bytes
 * Returns 0 or -EINVAL (empty, junk, overflow).
 */
int parse_size(const char *s, uint64_t *out);

#endif /* BIONBD_TARGET_H */
