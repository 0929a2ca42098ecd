/* SPDX-License-Identifier: MIT */
/*
 * superblock.h - the on-disk record that makes a volume self-describing:
 * one 4 KiB superblock at the start of every member, saying which volume
 * the member belongs to, which role (stripe index) it plays, the geometry,
 * and where the data starts.  The format is docs/format.md; this is the
 * one place that reads and writes it.
 *
 * Decoding trusts nothing: every field is range-checked and the CRC32C
 * covers the whole block, so a corrupt, truncated or foreign block is a
 * clean refusal with a reason, never an out-of-bounds access.
 */
#ifndef BIONBD_SUPERBLOCK_H
#define BIONBD_SUPERBLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SB_BYTES 4096u
#define SB_MAGIC "bionbdSB" /* 8 bytes, no NUL */
#define SB_VERSION 1u
#define SB_NAME_BYTES 64u /* volume name, NUL-padded, at most 63 bytes */
#define SB_MAX_ROLES 64u
#define SB_DEFAULT_DATA_OFFSET (1u << 20)

enum sb_level {
	SB_LEVEL_RAID0 = 0,
	SB_LEVEL_RAID1 = 1, /* every member a full copy */
	SB_LEVEL_RAID10 = 10, /* K copies of each chunk, md's "near" layout */
};

enum sb_role_state {
	SB_ROLE_ACTIVE = 0,
	SB_ROLE_FAULTY = 1,
	SB_ROLE_SPARE = 2,
	SB_ROLE_REBUILDING = 3, /* with a checkpoint */
};

#define SB_FLAG_CLEAN 0x1u /* set at clean shutdown, cleared at start */

/*
 * The write-intent bitmap of a mirror (docs/format.md): one 4 KiB block
 * right after the superblock, one bit per region of 2^bitmap_shift volume
 * bytes, set on disk before the first write to a region and cleared once
 * the region's writes are on every copy.  An unclean start resyncs only the
 * regions whose bits are set.
 */
#define SB_BITMAP_OFFSET SB_BYTES
#define SB_BITMAP_BYTES 4096u
#define SB_BITMAP_MAGIC "bionbdBM"
#define SB_BITMAP_HDR 64u /* magic, region count, reserved */
#define SB_BITMAP_BITS ((SB_BITMAP_BYTES - SB_BITMAP_HDR - 4) * 8)
#define SB_BITMAP_MIN_SHIFT 20 /* regions of 1 MiB at least */

struct sb_role {
	uint8_t uuid[16]; /* the member that plays this role */
	uint32_t state; /* enum sb_role_state */
	uint64_t checkpoint; /* rebuilding: bytes done */
};

struct superblock {
	uint32_t version;
	uint8_t volume_uuid[16];
	char name[SB_NAME_BYTES]; /* NUL-terminated */
	uint32_t level; /* enum sb_level */
	uint32_t nr_roles;
	uint32_t role; /* this member's */
	uint32_t flags; /* SB_FLAG_* */
	uint32_t copies; /* raid1: N; raid10: K, 2 to N; raid0: 0 */
	uint32_t bitmap_shift; /* log2 bytes per bitmap bit; 0: no bitmap */
	uint64_t chunk_bytes;
	uint64_t size_bytes; /* the volume's */
	uint64_t data_offset; /* bytes before each member's data */
	uint64_t events; /* bumped on every change of roles or states */
	uint64_t ctime, utime; /* seconds since the epoch */
	uint8_t member_uuid[16]; /* this member's */
	struct sb_role roles[SB_MAX_ROLES];
};

/* CRC32C (Castagnoli), as the superblock's checksum uses it. */
uint32_t crc32c(uint32_t crc, const void *buf, size_t len);

/** sb_encode - @sb as its 4 KiB on-disk block, checksum included. */
void sb_encode(const struct superblock *sb, uint8_t out[SB_BYTES]);

/**
 * sb_decode - parse and check one on-disk block
 * @why: on failure, what is wrong (for "member X: WHY")
 *
 * Returns 0, -ENOENT when @buf does not start with the magic (a headerless
 * member), -EPROTONOSUPPORT for a version this code does not know, or
 * -EINVAL for a bad checksum or a field out of range.
 */
int sb_decode(const uint8_t *buf, size_t len, struct superblock *sb,
	      char *why, size_t whylen);

struct mdev;

/**
 * sb_read - sb_decode of the first SB_BYTES of member @m; a shorter member
 * is -ENOENT when it is too short to hold even the magic, else -EINVAL.
 * Other read errors are -errno.
 */
int sb_read(struct mdev *m, struct superblock *sb, char *why, size_t whylen);

/** sb_write - encode and write @sb at offset 0 of @m, then sync. */
int sb_write(struct mdev *m, const struct superblock *sb);

/** sb_redundant - does @level keep more than one copy of the data? */
static inline bool sb_redundant(uint32_t level)
{
	return level == SB_LEVEL_RAID1 || level == SB_LEVEL_RAID10;
}

/**
 * sb_bitmap_shift - the region size a new mirror of @size_bytes gets: the
 * smallest power of two from 1 MiB on whose regions fit SB_BITMAP_BITS.
 */
unsigned int sb_bitmap_shift(uint64_t size_bytes);

/** sb_bitmap_regions - the regions of @sb's bitmap (its bit count). */
static inline uint32_t sb_bitmap_regions(const struct superblock *sb)
{
	return (uint32_t)(((sb->size_bytes - 1) >> sb->bitmap_shift) + 1);
}

/*
 * sb_bitmap_encode/decode - the bitmap block (@bits: SB_BITMAP_BITS / 8
 * bytes, bit r of byte r / 8 for region r).  decode returns -EINVAL when
 * the block is not a valid bitmap for @nr_regions (torn, never written):
 * the caller then treats every region as dirty.
 */
void sb_bitmap_encode(const uint8_t *bits, uint32_t nr_regions,
		      uint8_t out[SB_BITMAP_BYTES]);
int sb_bitmap_decode(const uint8_t *buf, uint32_t nr_regions, uint8_t *bits);

/* What a new volume is (bioctl create; a config's level = raid1). */
struct sb_new_opts {
	const char *name;
	uint32_t level; /* enum sb_level */
	uint32_t copies; /* raid1: N (0 = N); raid10: K (0 = 2); raid0: 0 */
	uint64_t chunk_bytes;
	uint64_t size_bytes;
	uint64_t data_offset; /* 0: SB_DEFAULT_DATA_OFFSET, or the chunk */
};

/**
 * sb_new - the superblock of a new volume of @nr members, as role 0 has
 * it (sb_set_role for the others): fresh UUIDs, event counter 1, the
 * clean flag, and a bitmap for a mirror.  -EINVAL, with @why, when the
 * options do not make a valid volume; -errno from getrandom.
 */
int sb_new(struct superblock *sb, unsigned int nr,
	   const struct sb_new_opts *o, char *why, size_t whylen);

/** sb_set_role - make @sb the superblock of role @role. */
void sb_set_role(struct superblock *sb, unsigned int role);

/**
 * sb_member_bytes - the bytes each member of @sb's volume needs (data
 * offset included).  0 or -EFBIG.
 */
int sb_member_bytes(const struct superblock *sb, uint64_t *out);

/**
 * sb_write_member - a new member's first data-offset bytes: zeros (the
 * reserved area), a mirror's all-clear bitmap, then @sb, synced.
 */
int sb_write_member(struct mdev *m, const struct superblock *sb);

/* A volume assembled from its members' superblocks. */
struct sb_volume {
	struct superblock sb; /* the newest (highest event counter) */
	unsigned int nr; /* members given (redundant levels: may be < roles) */
	unsigned int order[SB_MAX_ROLES]; /* order[role] = index in paths,
					   * SB_ROLE_NONE if no member plays it */
	/*
	 * What each role is at start: SB_ROLE_ACTIVE; SB_ROLE_REBUILDING
	 * for a role the newest superblock calls so, its member present and
	 * up to date (it resumes at sb.roles[role].checkpoint); else
	 * SB_ROLE_FAULTY: a role the newest superblock calls faulty, whose
	 * member is stale (missed writes) or missing.  Only redundant levels start with a
	 * role not active; @degraded says which roles turned faulty here
	 * (not yet recorded in the superblocks).
	 */
	uint32_t state[SB_MAX_ROLES];
	uint64_t degraded; /* bit r: role r found faulty by this assembly */
	/*
	 * Bit i: paths[i] was replaced in its role (a spare took it over, or
	 * bioctl rebuild --replace): its superblock is older than the newest
	 * and names it where the newest names another member.  Left out, not
	 * an error, so that the command line that named it still starts.
	 */
	uint64_t retired;
	/*
	 * A mirror's member given but left out as failing (unreadable, cut
	 * short): the first one, "member PATH: why", for the log; "" if none.
	 */
	char left_out[512];
	/*
	 * cut[role]: the index in paths of the member given for the role but
	 * left out as cut short (SB_ROLE_NONE: none), cut_bytes[role] its
	 * size: a role without a member is then told apart from one whose
	 * member is there but too short, which the user fixes otherwise.
	 */
	unsigned int cut[SB_MAX_ROLES];
	uint64_t cut_bytes[SB_MAX_ROLES];
	bool clean; /* every member given has the clean flag */
	uint64_t member_bytes; /* each member must hold this many bytes */
};

#define SB_ROLE_NONE (~0u)

/**
 * sb_assemble - read the superblocks of @paths (any order) and check that
 * they make one complete, consistent volume (docs/format.md, "Assembly")
 * @paths: members as mdev_open takes them (paths, NBD URIs, rbd:...)
 * @timeout_ms: for remote members, as mdev_open
 * @why: on failure, one line naming the member and the reason
 *
 * A mirror (raid1, raid10) assembles degraded: members that are missing
 * (not given, not existing, or a remote that cannot be reached), stale (a lower event counter: they missed
 * writes) or called faulty by the newest superblock leave their role
 * faulty, as long as the other roles still hold a copy of every chunk.
 * A member replaced in its role is left out (@out->retired).
 *
 * Returns 0, -ENOENT when no member has a superblock (a headerless volume;
 * members that do not exist count as headerless), or another -errno
 * (-EINVAL: they do not make a volume; -EPROTONOSUPPORT: a version this
 * code does not know; a read error).  Reads only.
 */
int sb_assemble(const char *const *paths, unsigned int n,
		unsigned int timeout_ms, struct sb_volume *out, char *why,
		size_t whylen);

/**
 * sb_covered - do the roles whose @state is SB_ROLE_ACTIVE hold at least
 * one copy of every chunk of a volume of @level with @nr roles and
 * @copies?  (raid0 needs every role.)
 */
bool sb_covered(uint32_t level, unsigned int nr, unsigned int copies,
		const uint32_t *state);

/* A random (version 4) UUID from getrandom(2). */
int sb_uuid_generate(uint8_t uuid[16]);

/* "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (37 bytes with the NUL). */
void sb_uuid_format(const uint8_t uuid[16], char out[37]);

const char *sb_level_name(uint32_t level);
const char *sb_role_state_name(uint32_t state);

#endif /* BIONBD_SUPERBLOCK_H */
