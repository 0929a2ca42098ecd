/* SPDX-License-Identifier: MIT */
/*
 * volume.h - what front ends open: a whole striped volume from member paths.
 *
 * volume_open() validates the whole definition (chunk, member count,
 * duplicates, file types, sizes) before it creates, extends or opens
 * anything, so a mistake in a definition costs no file.  Front ends with
 * several volumes call volume_check() on every one first, and
 * volume_overlap() on every pair (with volume_ids_get() once per volume).
 *
 * Duplicates are storage, not spellings: two members are one when they are
 * the same file (hard link, symlink, /dev/fd/N), two nodes of one block
 * device, a loop device and its backing file (or loop devices over
 * overlapping bytes of one file), a disk and one of its partitions, or
 * overlapping partitions.  Loop devices and partitions are read from sysfs
 * and LOOP_GET_STATUS64; where those are missing, what remains (paths,
 * inodes, device numbers) is compared.
 */
#ifndef BIONBD_VOLUME_H
#define BIONBD_VOLUME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <bionbd/fault.h>
#include <bionbd/target.h>

struct volume_config {
	const char *const *members; /* paths, in member order */
	unsigned int nr_members;
	/*
	 * A mirror's spares: files that take over the role of a member that
	 * fails (their contents are overwritten).  They must exist, hold no
	 * superblock, and be large enough.
	 */
	const char *const *spares;
	unsigned int nr_spares;
	/*
	 * The level asked for (enum sb_level), when @level_set: members with
	 * superblocks must agree; headerless members that do not exist yet
	 * become a new self-describing mirror (a size is needed); existing
	 * headerless ones are refused for a mirror.  @copies (raid10's K; 0 =
	 * 2, or the superblocks') likewise, and only for a mirror: copies
	 * asked of a raid0 (by @level, its superblocks, or headerless
	 * members) are refused.
	 */
	bool level_set;
	uint32_t level;
	uint32_t copies;
	uint64_t chunk_bytes; /* 0 = STRIPE_DEFAULT_CHUNK */
	uint64_t size_bytes; /* 0 = from the members; else create/extend */
	bool readonly;
	/*
	 * Members of a writable volume without superblocks are not locked
	 * (flock): for servers that share them on purpose.  A self-describing
	 * volume is always locked.
	 */
	bool no_lock;
	/*
	 * A writable mirror may start with fewer members (and spares) given
	 * than it has active roles (those left out are recorded faulty);
	 * otherwise that is refused, as the typo it usually is.
	 */
	bool degraded;
	bool direct;
	bool no_inline; /* file_target_opts.no_inline for every member */
	/*
	 * Fault and delay rules (fault.h), stacked on the members they name;
	 * checked with the rest of the definition.
	 */
	const struct fault_text *faults;
	unsigned int nr_faults;
	/*
	 * The export's statistics: every member (and spare) counts its I/O
	 * in a child of it (file_target_opts.stats_parent).  NULL: none.
	 */
	struct io_stats *stats;
	/* The export's trace id (trace.h): its members are named under it. */
	uint32_t trace_id;
	/*
	 * Remote members (NBD URIs, target.h): a connection or a request
	 * that gets no answer for this long fails with EIO.  0: 5 s.
	 */
	unsigned int remote_timeout_ms;
};

/* What volume_open_info() found out about a volume. */
struct volume_info {
	bool superblocks; /* self-describing (docs/format.md) */
	char name[64]; /* the superblocks' volume name */
	char uuid[37];
	uint64_t chunk_bytes;
	uint64_t data_offset; /* member bytes before the data */
	uint32_t level; /* enum sb_level (raid0 when headerless) */
	unsigned int copies; /* raid1/raid10: copies of each chunk */
	unsigned int nr_members; /* roles (a mirror may lack some members) */
	/*
	 * order[role]: index into cfg->members; cfg->nr_members + j for
	 * spare j, when a spare took the role over while a server ran (it is
	 * a member since, named a spare still); VOLUME_NO_MEMBER for a
	 * missing one.
	 */
	unsigned int order[64];
	/*
	 * A role whose member is there but too short to serve (left out):
	 * cut[role] indexes cfg->members as order does (VOLUME_NO_MEMBER:
	 * none), cut_bytes[role] is its size and member_bytes what each
	 * member needs.
	 */
	unsigned int cut[64];
	uint64_t cut_bytes[64], member_bytes;
	bool active[64]; /* a mirror's roles in service at start */
	bool rebuilding[64]; /* ... and those still being rebuilt */
	bool resynced; /* a mirror found unclean and resynced at open */
};

#define VOLUME_NO_MEMBER (~0u)

/**
 * volume_open - check a volume definition, then create/extend and open it
 * @out: receives the stripe target; the caller owns it (target_destroy)
 * @errbuf: receives a one-line message naming the problem on failure
 *
 * Files are never truncated below the size they had: when a later step
 * fails, members this call created are removed again and members it grew
 * are cut back to their old size.  Sizes above INT64_MAX, or that a volume
 * without a size would reach, are refused.  Returns 0 or -errno.
 */
int volume_open(struct target **out, const struct volume_config *cfg,
		char *errbuf, size_t errlen);

/** volume_open_info - volume_open, and what it found in @info. */
int volume_open_info(struct target **out, const struct volume_config *cfg,
		     struct volume_info *info, char *errbuf, size_t errlen);

/* The members one open created and grew (their old sizes): volume_unmake. */
struct volume_made;

/**
 * volume_open_made - volume_open_info, keeping what it made of the members
 * @made: receives the record of the members this open created or grew;
 *        NULL when it made none.  The caller owns it: volume_unmake() or
 *        volume_made_free().
 *
 * For a front end whose start goes on after the open and may still fail:
 * the members it made are then taken back as a failed open would.
 */
int volume_open_made(struct target **out, const struct volume_config *cfg,
		     struct volume_info *info, struct volume_made **made,
		     char *errbuf, size_t errlen);

/**
 * volume_unmake - the start failed: remove the members @made says were
 * created and cut the ones it grew back to their old size, then free it
 * (NULL is fine).  Only for a volume nothing has written to yet beyond
 * its open: bytes past a grown member's old size are lost.  The volume
 * may still be open; its created members are unlinked under it.
 */
void volume_unmake(struct volume_made *made);

/** volume_made_free - the start succeeded: keep the members, free @made. */
void volume_made_free(struct volume_made *made);

/**
 * volume_check - every check volume_open makes, without creating, extending
 * or opening anything.  Returns 0 or -errno with a message.
 */
int volume_check(const struct volume_config *cfg, char *errbuf,
		 size_t errlen);

/**
 * volume_hold - until the matching volume_release (nested, any thread),
 * the remote members' handles that checks and opens are done with stay
 * open for the next of them: RBD images and their cluster connections,
 * NBD connections.  A front end that checks several volumes, then opens
 * them, holds across all of it so that each remote member is connected
 * to once; the last release closes what nobody uses.
 */
void volume_hold(void);
void volume_release(void);

/* What every member of one volume is stored on: for volume_overlap(). */
struct volume_ids;

/**
 * volume_ids_get - learn what each member of @cfg is stored on
 * @out: receives the result; the caller frees it (volume_ids_free)
 *
 * Reads only: stat, realpath, sysfs, LOOP_GET_STATUS64.  Returns 0 or
 * -errno (-ENOMEM, or a member whose directory cannot be resolved).
 */
int volume_ids_get(struct volume_ids **out, const struct volume_config *cfg);

/** volume_ids_free - free what volume_ids_get() made (NULL is fine). */
void volume_ids_free(struct volume_ids *ids);

/* Where two volumes share storage, from volume_overlap(). */
struct volume_overlap {
	unsigned int member_a; /* index into the first volume's members */
	unsigned int member_b; /* index into the second's */
	const char *why;       /* static text, e.g. "a disk and its partition" */
};

/**
 * volume_overlap - do two volumes share storage?
 * @ov: on -EEXIST, the first pair of members found to be one storage
 *
 * The comparison volume_check() makes between the members of one volume,
 * made between two; it touches no file (the identities were learnt by
 * volume_ids_get()), so a front end with many volumes can compare every
 * pair cheaply.  Returns 0 when they share nothing, -EEXIST when they do.
 */
int volume_overlap(const struct volume_ids *a, const struct volume_ids *b,
		   struct volume_overlap *ov);

#endif /* BIONBD_VOLUME_H */
