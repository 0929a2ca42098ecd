// SPDX-License-Identifier: MIT
/*
 * superblock.c - encode, decode and check member superblocks
 * (superblock.h; the layout is docs/format.md).
 *
 * The block is built and parsed field by field at fixed offsets in little
 * endian, never by casting a struct onto the bytes: the layout is the
 * document's, whatever the compiler's padding or the host's byte order.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <bionbd/mdev.h>
#include <bionbd/plural.h>
#include <bionbd/superblock.h>
#include <bionbd/target.h>

/* Offsets of version 1 (docs/format.md). */
enum {
	SBO_MAGIC = 0,
	SBO_VERSION = 8,
	SBO_HDR_BYTES = 12,
	SBO_VOLUME_UUID = 16,
	SBO_NAME = 32,
	SBO_LEVEL = 96,
	SBO_NR_ROLES = 100,
	SBO_ROLE = 104,
	SBO_FLAGS = 108,
	SBO_CHUNK = 112,
	SBO_SIZE = 120,
	SBO_DATA_OFFSET = 128,
	SBO_EVENTS = 136,
	SBO_CTIME = 144,
	SBO_UTIME = 152,
	SBO_MEMBER_UUID = 160,
	SBO_COPIES = 176,
	SBO_BITMAP_SHIFT = 180,
	SBO_ROLES = 256, /* SB_MAX_ROLES entries of SBO_ROLE_BYTES */
	SBO_ROLE_BYTES = 32,
	SBO_ROLE_UUID = 0,
	SBO_ROLE_STATE = 16,
	SBO_ROLE_CHECKPOINT = 24,
	SBO_CRC = SB_BYTES - 4,
};

_Static_assert(SBO_ROLES + SB_MAX_ROLES * SBO_ROLE_BYTES <= SBO_CRC,
	       "the role table must fit before the checksum");

/* ---- CRC32C ---- */

static uint32_t crc_table[256];

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;

		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
		crc_table[i] = c;
	}
}

uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	const uint8_t *p = buf;

	pthread_once(&once, crc_init);
	crc = ~crc;
	while (len--)
		crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

/* ---- little endian ---- */

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;

	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* ---- encode ---- */

void sb_encode(const struct superblock *sb, uint8_t out[SB_BYTES])
{
	memset(out, 0, SB_BYTES);
	memcpy(out + SBO_MAGIC, SB_MAGIC, 8);
	put32(out + SBO_VERSION, SB_VERSION);
	put32(out + SBO_HDR_BYTES, SB_BYTES);
	memcpy(out + SBO_VOLUME_UUID, sb->volume_uuid, 16);
	/* At most 63 bytes: the name always ends in a NUL on disk. */
	memcpy(out + SBO_NAME, sb->name,
	       strnlen(sb->name, SB_NAME_BYTES - 1));
	put32(out + SBO_LEVEL, sb->level);
	put32(out + SBO_NR_ROLES, sb->nr_roles);
	put32(out + SBO_ROLE, sb->role);
	put32(out + SBO_FLAGS, sb->flags);
	put64(out + SBO_CHUNK, sb->chunk_bytes);
	put64(out + SBO_SIZE, sb->size_bytes);
	put64(out + SBO_DATA_OFFSET, sb->data_offset);
	put64(out + SBO_EVENTS, sb->events);
	put64(out + SBO_CTIME, sb->ctime);
	put64(out + SBO_UTIME, sb->utime);
	memcpy(out + SBO_MEMBER_UUID, sb->member_uuid, 16);
	put32(out + SBO_COPIES, sb->copies);
	put32(out + SBO_BITMAP_SHIFT, sb->bitmap_shift);
	for (uint32_t i = 0; i < sb->nr_roles && i < SB_MAX_ROLES; i++) {
		uint8_t *r = out + SBO_ROLES + i * SBO_ROLE_BYTES;

		memcpy(r + SBO_ROLE_UUID, sb->roles[i].uuid, 16);
		put32(r + SBO_ROLE_STATE, sb->roles[i].state);
		put64(r + SBO_ROLE_CHECKPOINT, sb->roles[i].checkpoint);
	}
	put32(out + SBO_CRC, crc32c(0, out, SBO_CRC));
}

/* ---- decode ---- */

static bool uuid_null(const uint8_t u[16])
{
	for (int i = 0; i < 16; i++)
		if (u[i])
			return false;
	return true;
}

/* The checks that need more than one field. */
static int sb_check(const struct superblock *sb, char *why, size_t whylen)
{
	if (sb->level != SB_LEVEL_RAID0 && sb->level != SB_LEVEL_RAID1 &&
	    sb->level != SB_LEVEL_RAID10) {
		snprintf(why, whylen, "unknown RAID level %u", sb->level);
		return -EINVAL;
	}
	if (!sb->nr_roles || sb->nr_roles > SB_MAX_ROLES ||
	    sb->role >= sb->nr_roles) {
		snprintf(why, whylen, "role %u of %u member%s is out of range",
			 sb->role, sb->nr_roles, plural(sb->nr_roles));
		return -EINVAL;
	}
	if (sb->level == SB_LEVEL_RAID0 ? sb->copies != 0 :
	    sb->nr_roles < 2 || sb->copies < 2 || sb->copies > sb->nr_roles ||
	    (sb->level == SB_LEVEL_RAID1 && sb->copies != sb->nr_roles)) {
		snprintf(why, whylen, "%u cop%s on %u member%s: not a %s "
			 "volume", sb->copies, sb->copies == 1 ? "y" : "ies",
			 sb->nr_roles, plural(sb->nr_roles),
			 sb_level_name(sb->level));
		return -EINVAL;
	}
	if (sb->flags & ~SB_FLAG_CLEAN) {
		snprintf(why, whylen, "unknown flags %#x", sb->flags);
		return -EINVAL;
	}
	if (!stripe_chunk_valid(sb->chunk_bytes)) {
		snprintf(why, whylen, "stripe size %llu is not a power of two "
			 "from 4K to 1G", (unsigned long long)sb->chunk_bytes);
		return -EINVAL;
	}
	if (sb->data_offset < SB_BYTES || sb->data_offset % 4096 ||
	    sb->data_offset % sb->chunk_bytes ||
	    sb->data_offset > (1ull << 40)) {
		snprintf(why, whylen,
			 "data offset %llu is not a multiple of 4K and of the "
			 "stripe size, at least 4K and at most 1T",
			 (unsigned long long)sb->data_offset);
		return -EINVAL;
	}
	if (!sb->size_bytes || sb->size_bytes % 512 ||
	    sb->size_bytes > (1ull << 60)) {
		snprintf(why, whylen, "volume size %llu is not a positive "
			 "multiple of 512 up to 1E",
			 (unsigned long long)sb->size_bytes);
		return -EINVAL;
	}
	if (sb->bitmap_shift &&
	    (sb->level == SB_LEVEL_RAID0 ||
	     sb->bitmap_shift < SB_BITMAP_MIN_SHIFT || sb->bitmap_shift > 60 ||
	     ((sb->size_bytes - 1) >> sb->bitmap_shift) >= SB_BITMAP_BITS ||
	     sb->data_offset < SB_BITMAP_OFFSET + SB_BITMAP_BYTES)) {
		snprintf(why, whylen, "bitmap regions of 2^%u bytes do not fit "
			 "this volume", sb->bitmap_shift);
		return -EINVAL;
	}
	if (uuid_null(sb->volume_uuid) || uuid_null(sb->member_uuid)) {
		snprintf(why, whylen, "null volume or member UUID");
		return -EINVAL;
	}
	for (uint32_t i = 0; i < sb->nr_roles; i++) {
		const struct sb_role *r = &sb->roles[i];

		if (r->state > SB_ROLE_REBUILDING || uuid_null(r->uuid)) {
			snprintf(why, whylen, "role %u: bad state %u or null "
				 "UUID", i, r->state);
			return -EINVAL;
		}
		for (uint32_t j = 0; j < i; j++)
			if (!memcmp(r->uuid, sb->roles[j].uuid, 16)) {
				snprintf(why, whylen, "roles %u and %u name "
					 "the same member", j, i);
				return -EINVAL;
			}
	}
	if (memcmp(sb->roles[sb->role].uuid, sb->member_uuid, 16)) {
		snprintf(why, whylen, "the role table gives role %u to another "
			 "member", sb->role);
		return -EINVAL;
	}
	return 0;
}

int sb_decode(const uint8_t *buf, size_t len, struct superblock *sb,
	      char *why, size_t whylen)
{
	uint32_t crc;

	memset(sb, 0, sizeof(*sb));
	if (len < 8 || memcmp(buf + SBO_MAGIC, SB_MAGIC, 8)) {
		snprintf(why, whylen, "no superblock");
		return -ENOENT;
	}
	if (len < SB_BYTES) {
		snprintf(why, whylen, "superblock truncated (%zu of %u bytes)",
			 len, SB_BYTES);
		return -EINVAL;
	}
	sb->version = get32(buf + SBO_VERSION);
	if (sb->version != SB_VERSION) {
		snprintf(why, whylen,
			 "superblock format version %u (this bionbd reads %u)",
			 sb->version, SB_VERSION);
		return -EPROTONOSUPPORT;
	}
	crc = crc32c(0, buf, SBO_CRC);
	if (get32(buf + SBO_CRC) != crc) {
		snprintf(why, whylen, "superblock checksum mismatch (stored "
			 "%08x, computed %08x)", get32(buf + SBO_CRC), crc);
		return -EINVAL;
	}
	if (get32(buf + SBO_HDR_BYTES) != SB_BYTES) {
		snprintf(why, whylen, "superblock size %u (expected %u)",
			 get32(buf + SBO_HDR_BYTES), SB_BYTES);
		return -EINVAL;
	}
	if (buf[SBO_NAME + SB_NAME_BYTES - 1]) {
		snprintf(why, whylen, "volume name not terminated");
		return -EINVAL;
	}
	memcpy(sb->volume_uuid, buf + SBO_VOLUME_UUID, 16);
	/* Up to the NUL: bytes after it mean nothing and are not kept. */
	memcpy(sb->name, buf + SBO_NAME,
	       strnlen((const char *)buf + SBO_NAME, SB_NAME_BYTES));
	sb->level = get32(buf + SBO_LEVEL);
	sb->nr_roles = get32(buf + SBO_NR_ROLES);
	sb->role = get32(buf + SBO_ROLE);
	sb->flags = get32(buf + SBO_FLAGS);
	sb->chunk_bytes = get64(buf + SBO_CHUNK);
	sb->size_bytes = get64(buf + SBO_SIZE);
	sb->data_offset = get64(buf + SBO_DATA_OFFSET);
	sb->events = get64(buf + SBO_EVENTS);
	sb->ctime = get64(buf + SBO_CTIME);
	sb->utime = get64(buf + SBO_UTIME);
	memcpy(sb->member_uuid, buf + SBO_MEMBER_UUID, 16);
	sb->copies = get32(buf + SBO_COPIES);
	sb->bitmap_shift = get32(buf + SBO_BITMAP_SHIFT);
	/* Entries past the member count mean nothing and are not kept. */
	for (uint32_t i = 0; i < sb->nr_roles && i < SB_MAX_ROLES; i++) {
		const uint8_t *r = buf + SBO_ROLES + i * SBO_ROLE_BYTES;

		memcpy(sb->roles[i].uuid, r + SBO_ROLE_UUID, 16);
		sb->roles[i].state = get32(r + SBO_ROLE_STATE);
		sb->roles[i].checkpoint = get64(r + SBO_ROLE_CHECKPOINT);
	}
	return sb_check(sb, why, whylen);
}

/* ---- members ---- */

int sb_read(struct mdev *m, struct superblock *sb, char *why, size_t whylen)
{
	uint8_t buf[SB_BYTES];
	uint64_t have;
	int r;

	/* A member shorter than a block: too short, not a zero-padded one. */
	r = mdev_size(m, &have);
	if (!r)
		r = mdev_pread(m, buf, sizeof(buf), 0);
	if (r) {
		snprintf(why, whylen, "reading the superblock: %s",
			 strerror(-r));
		return r;
	}
	return sb_decode(buf, have < sizeof(buf) ? (size_t)have : sizeof(buf),
			 sb, why, whylen);
}

int sb_write(struct mdev *m, const struct superblock *sb)
{
	uint8_t buf[SB_BYTES];

	sb_encode(sb, buf);
	return mdev_pwrite(m, buf, sizeof(buf), 0) ?: mdev_sync(m);
}

/* ---- new volumes ---- */

int sb_member_bytes(const struct superblock *sb, uint64_t *out)
{
	struct mirror_geom mg;
	struct stripe_geom g;
	int r;

	if (sb_redundant(sb->level))
		r = mirror_geom_init(&mg, sb->nr_roles, sb->copies,
				     sb->chunk_bytes) ?:
			    mirror_member_bytes(&mg, sb->size_bytes, out);
	else
		r = stripe_geom_init(&g, sb->nr_roles, sb->chunk_bytes) ?:
			    stripe_member_bytes(&g, sb->size_bytes, out);
	if (r)
		return -EFBIG;
	return __builtin_add_overflow(*out, sb->data_offset, out) ? -EFBIG : 0;
}

int sb_new(struct superblock *sb, unsigned int nr,
	   const struct sb_new_opts *o, char *why, size_t whylen)
{
	uint64_t bytes;
	int r;

	memset(sb, 0, sizeof(*sb));
	sb->version = SB_VERSION;
	snprintf(sb->name, sizeof(sb->name), "%s", o->name ? o->name : "");
	sb->level = o->level;
	sb->nr_roles = nr;
	sb->copies = o->level == SB_LEVEL_RAID1 ? nr :
		     o->level == SB_LEVEL_RAID10 ? (o->copies ? o->copies : 2) :
						   o->copies;
	sb->chunk_bytes = o->chunk_bytes;
	sb->size_bytes = o->size_bytes;
	sb->data_offset = o->data_offset ? o->data_offset :
			  o->chunk_bytes > SB_DEFAULT_DATA_OFFSET ?
							     o->chunk_bytes :
							     SB_DEFAULT_DATA_OFFSET;
	if (sb_redundant(o->level))
		sb->bitmap_shift = sb_bitmap_shift(o->size_bytes);
	sb->flags = SB_FLAG_CLEAN;
	sb->events = 1;
	sb->ctime = sb->utime = (uint64_t)time(NULL);
	r = sb_uuid_generate(sb->volume_uuid);
	for (unsigned int i = 0; i < nr && i < SB_MAX_ROLES && !r; i++)
		r = sb_uuid_generate(sb->roles[i].uuid);
	if (r) {
		snprintf(why, whylen, "getrandom: %s", strerror(-r));
		return r;
	}
	sb_set_role(sb, 0);
	r = sb_check(sb, why, whylen);
	if (!r && sb_member_bytes(sb, &bytes)) {
		snprintf(why, whylen, "size %llu does not fit",
			 (unsigned long long)sb->size_bytes);
		r = -EFBIG;
	}
	return r;
}

void sb_set_role(struct superblock *sb, unsigned int role)
{
	sb->role = role;
	memcpy(sb->member_uuid, sb->roles[role].uuid, 16);
}

int sb_write_member(struct mdev *m, const struct superblock *sb)
{
	static const uint8_t clear[SB_BITMAP_BITS / 8];
	uint8_t block[SB_BITMAP_BYTES];
	int r = mdev_zero(m, SB_BYTES, sb->data_offset - SB_BYTES);

	/* The bitmap before the superblock whose sync covers both. */
	if (!r && sb->bitmap_shift) {
		sb_bitmap_encode(clear, sb_bitmap_regions(sb), block);
		r = mdev_pwrite(m, block, sizeof(block), SB_BITMAP_OFFSET);
	}
	return r ?: sb_write(m, sb);
}

/* ---- write-intent bitmap ---- */

unsigned int sb_bitmap_shift(uint64_t size_bytes)
{
	unsigned int shift = SB_BITMAP_MIN_SHIFT;

	while (size_bytes && ((size_bytes - 1) >> shift) >= SB_BITMAP_BITS)
		shift++;
	return shift;
}

enum { SBB_MAGIC = 0, SBB_REGIONS = 8, SBB_CRC = SB_BITMAP_BYTES - 4 };

void sb_bitmap_encode(const uint8_t *bits, uint32_t nr_regions,
		      uint8_t out[SB_BITMAP_BYTES])
{
	memset(out, 0, SB_BITMAP_BYTES);
	memcpy(out + SBB_MAGIC, SB_BITMAP_MAGIC, 8);
	put32(out + SBB_REGIONS, nr_regions);
	memcpy(out + SB_BITMAP_HDR, bits, (nr_regions + 7) / 8);
	put32(out + SBB_CRC, crc32c(0, out, SBB_CRC));
}

int sb_bitmap_decode(const uint8_t *buf, uint32_t nr_regions, uint8_t *bits)
{
	if (nr_regions > SB_BITMAP_BITS ||
	    memcmp(buf + SBB_MAGIC, SB_BITMAP_MAGIC, 8) ||
	    get32(buf + SBB_REGIONS) != nr_regions ||
	    get32(buf + SBB_CRC) != crc32c(0, buf, SBB_CRC))
		return -EINVAL;
	memcpy(bits, buf + SB_BITMAP_HDR, (nr_regions + 7) / 8);
	return 0;
}

/* ---- assembly ---- */

bool sb_covered(uint32_t level, unsigned int nr, unsigned int copies,
		const uint32_t *state)
{
	uint8_t st[SB_MAX_ROLES];
	struct mirror_geom g;

	for (unsigned int i = 0; i < nr && i < SB_MAX_ROLES; i++) {
		if (!sb_redundant(level) && state[i] != SB_ROLE_ACTIVE)
			return false;
		st[i] = state[i] == SB_ROLE_ACTIVE ? MIRROR_ACTIVE :
						     MIRROR_FAULTY;
	}
	if (!sb_redundant(level))
		return true;
	return !mirror_geom_init(&g, nr, copies, 4096) &&
	       mirror_covered(&g, st);
}

/* Member @i of @paths against the first one read (@ref, from @ref_path). */
static int sb_agree(const struct superblock *sb, const char *path,
		    const struct superblock *ref, const char *ref_path,
		    char *why, size_t whylen)
{
	if (memcmp(sb->volume_uuid, ref->volume_uuid, 16)) {
		char a[37], b[37];

		sb_uuid_format(sb->volume_uuid, a);
		sb_uuid_format(ref->volume_uuid, b);
		snprintf(why, whylen,
			 "member %s: belongs to another volume ('%s', %s; %s "
			 "is in '%s', %s)",
			 path, sb->name, a, ref_path, ref->name, b);
		return -EINVAL;
	}
	if (sb->nr_roles != ref->nr_roles || sb->level != ref->level ||
	    sb->copies != ref->copies ||
	    sb->bitmap_shift != ref->bitmap_shift ||
	    sb->chunk_bytes != ref->chunk_bytes ||
	    sb->size_bytes != ref->size_bytes ||
	    sb->data_offset != ref->data_offset) {
		snprintf(why, whylen,
			 "member %s: its superblock's geometry differs from "
			 "%s's (members, level, copies, bitmap, stripe size, "
			 "size or data offset)",
			 path, ref_path);
		return -EINVAL;
	}
	if (memcmp(sb->roles[sb->role].uuid, ref->roles[sb->role].uuid, 16)) {
		snprintf(why, whylen,
			 "member %s: claims role %u, which %s's superblock "
			 "gives to another member",
			 path, sb->role, ref_path);
		return -EINVAL;
	}
	return 0;
}

/* The roles that lost their member, for "cannot start" messages. */
static void roles_lost(const struct sb_volume *v, const char *const *paths,
		       char *out, size_t len)
{
	size_t at = 0;

	out[0] = '\0';
	for (unsigned int r = 0; r < v->sb.nr_roles && at < len; r++) {
		unsigned int i = v->order[r];
		int w;

		if (v->state[r] == SB_ROLE_ACTIVE)
			continue;
		w = snprintf(out + at, len - at, "%srole %u (%s%s)",
			     at ? ", " : "", r, i == SB_ROLE_NONE ? "missing" :
			     paths[i], i == SB_ROLE_NONE ? "" :
			     (v->degraded >> r & 1) ? ", stale" : ", faulty");
		if (w < 0)
			break;
		at += (size_t)w;
	}
}

/*
 * Was the member whose superblock is @sb replaced in its role since (a
 * spare took it over, bioctl rebuild --replace)?  Then @ref, newer, names
 * another member there.  A member of another volume, or one as new as
 * @ref, is not: sb_agree refuses those.
 */
static bool sb_replaced(const struct superblock *sb,
			const struct superblock *ref)
{
	return !memcmp(sb->volume_uuid, ref->volume_uuid, 16) &&
	       sb->events < ref->events && sb->role < ref->nr_roles &&
	       memcmp(sb->roles[sb->role].uuid, ref->roles[sb->role].uuid,
		      16);
}

/*
 * Does @sb lag @ref by one superblock write that only a crash cut short?
 * Every change goes to the members in service one by one with the event
 * counter one up: a start's dirty mark, a clean stop, another member
 * marked faulty or taken over.  A crash between two members' writes
 * leaves some one behind.  Their data is no older: nothing is written to
 * the data during a mark, and a member in service took every write before
 * the change was recorded.  So a member one behind whose own role @ref
 * still gives it, unchanged, stays in service, and the volume is resynced
 * as unclean.  Its own role changed (it was marked faulty), or two behind
 * (an old copy: every run is three marks, and a clean stop two, so a copy
 * taken while it ran is two behind after it), is stale.
 */
static bool sb_one_mark_behind(const struct superblock *sb,
			       const struct superblock *ref)
{
	const struct sb_role *mine = &sb->roles[sb->role];
	const struct sb_role *theirs = &ref->roles[sb->role];

	return sb->events + 1 == ref->events &&
	       sb->nr_roles == ref->nr_roles && sb->role < ref->nr_roles &&
	       mine->state == theirs->state &&
	       mine->checkpoint == theirs->checkpoint &&
	       !memcmp(mine->uuid, theirs->uuid, 16);
}

/* @out->member_bytes from the geometry of @out->sb; -EFBIG if too big. */
static int sb_layout_bytes(struct sb_volume *out, bool redundant)
{
	struct stripe_geom g;
	struct mirror_geom mg;

	if (redundant) {
		if (mirror_geom_init(&mg, out->sb.nr_roles, out->sb.copies,
				     out->sb.chunk_bytes) ||
		    mirror_member_bytes(&mg, out->sb.size_bytes,
					&out->member_bytes))
			return -EFBIG;
	} else if (stripe_geom_init(&g, out->sb.nr_roles,
				    out->sb.chunk_bytes) ||
		   stripe_member_bytes(&g, out->sb.size_bytes,
				       &out->member_bytes)) {
		return -EFBIG;
	}
	if (__builtin_add_overflow(out->member_bytes, out->sb.data_offset,
				   &out->member_bytes))
		return -EFBIG;
	return 0;
}

/* Does @a record the member whose superblock is @b as faulty? */
static bool sb_condemns(const struct superblock *a, const struct superblock *b)
{
	const struct sb_role *r = &a->roles[b->role];

	return r->state == SB_ROLE_FAULTY &&
	       !memcmp(r->uuid, b->member_uuid, sizeof(r->uuid));
}

/*
 * Two present members that each record the other as faulty were each
 * served without the other (one start missed the first, a later one the
 * second): each holds writes the other lacks, and neither event counts
 * nor the order of the members say which to keep.  Assembling from the
 * newest would drop the other's writes without a word, so refuse and let
 * the administrator choose.
 */
static int sb_split_brain(const struct superblock *sbs, const char *const *paths,
			  unsigned int n, char *why, size_t whylen)
{
	for (unsigned int a = 0; a < n; a++) {
		if (!sbs[a].version)
			continue;
		for (unsigned int b = a + 1; b < n; b++) {
			if (!sbs[b].version || !sb_condemns(&sbs[a], &sbs[b]) ||
			    !sb_condemns(&sbs[b], &sbs[a]))
				continue;
			snprintf(why, whylen,
				 "members %s and %s each record the other as "
				 "faulty: the volume was served from each "
				 "without the other, and each holds writes the "
				 "other lacks; keep one and copy it over the "
				 "other, offline (to keep %s: bioctl rebuild "
				 "%s --replace %s %s)",
				 paths[a], paths[b], paths[a], paths[a],
				 paths[b], paths[b]);
			return -EINVAL;
		}
	}
	return 0;
}

int sb_assemble(const char *const *paths, unsigned int n,
		unsigned int timeout_ms, struct sb_volume *out, char *why,
		size_t whylen)
{
	static const unsigned int none = SB_ROLE_NONE;
	struct superblock *sbs;
	uint64_t *sizes; /* each member's bytes */
	unsigned int found = 0, headerless = none, absent = none, ref = none;
	unsigned int nr_absent = 0;
	int lost_err = 0; /* the first member that could not be read */
	char reason[200], lost[512];
	bool redundant;
	int r = 0;

	memset(out, 0, sizeof(*out));
	sbs = calloc(n ? n : 1, sizeof(*sbs));
	sizes = calloc(n ? n : 1, sizeof(*sizes));
	if (!sbs || !sizes) {
		free(sbs);
		free(sizes);
		snprintf(why, whylen, "out of memory");
		return -ENOMEM;
	}
	for (unsigned int i = 0; i < n; i++) {
		struct mdev *m;
		uint64_t bytes = 0;

		r = mdev_open(&m, paths[i], false, timeout_ms, reason,
			      sizeof(reason));
		if (r == -ENOENT) {
			absent = absent == none ? i : absent;
			nr_absent++;
			r = 0;
			continue;
		}
		if (r == -EINVAL) {
			snprintf(why, whylen, "%s", reason);
			goto out;
		}
		if (r) {
			/* A mirror may do without it: decided below. */
			if (!lost_err) {
				lost_err = r;
				snprintf(lost, sizeof(lost), "%s", reason);
			}
			nr_absent++;
			r = 0;
			continue;
		}
		r = sb_read(m, &sbs[i], reason, sizeof(reason));
		if (!r && mdev_size(m, &bytes)) {
			r = -EIO;
			snprintf(reason, sizeof(reason), "its size is unknown");
		}
		sizes[i] = bytes; /* a member cut short: see below */
		mdev_close(m);
		if (r == -ENOENT) {
			r = 0;
			headerless = headerless == none ? i : headerless;
			continue;
		}
		if (r != -EINVAL && r != -EPROTONOSUPPORT && r) {
			/* Unreadable (a dead disk): like a missing member. */
			if (!lost_err) {
				lost_err = r;
				snprintf(lost, sizeof(lost), "member %s: %s",
					 paths[i], reason);
			}
			memset(&sbs[i], 0, sizeof(sbs[i]));
			r = 0;
			nr_absent++;
			continue;
		}
		if (r) {
			snprintf(why, whylen, "member %s: %s", paths[i], reason);
			goto out;
		}
		found++;
		/* The newest superblock says what the roles are. */
		if (ref == none || sbs[i].events > sbs[ref].events)
			ref = i;
	}
	if (!found && lost_err) {
		snprintf(why, whylen, "%s", lost);
		r = lost_err;
		goto out;
	}
	if (!found) {
		snprintf(why, whylen, "no superblocks");
		r = -ENOENT;
		goto out;
	}
	redundant = sb_redundant(sbs[ref].level);
	if (lost_err && !redundant) {
		snprintf(why, whylen, "%s", lost);
		r = lost_err;
		goto out;
	}
	/* A mirror serves without a lost member; a stripe cannot. */
	if (!redundant && absent != none)
		headerless = headerless == none || absent < headerless ?
				     absent : headerless;
	if (headerless != none) {
		snprintf(why, whylen,
			 "member %s: no superblock, while %s has one (a volume "
			 "is all headerless or all self-describing)",
			 paths[headerless], paths[ref]);
		r = -EINVAL;
		goto out;
	}
	out->sb = sbs[ref];
	if (sb_layout_bytes(out, redundant)) {
		snprintf(why, whylen, "volume '%s': size %llu does not fit",
			 out->sb.name, (unsigned long long)out->sb.size_bytes);
		r = -EFBIG;
		goto out;
	}
	for (unsigned int i = 0; i < SB_MAX_ROLES; i++)
		out->order[i] = out->cut[i] = none;
	for (unsigned int i = 0; i < n; i++) {
		if (!sbs[i].version)
			continue; /* absent */
		if (redundant && i < 64 && sb_replaced(&sbs[i], &out->sb)) {
			out->retired |= 1ull << i;
			memset(&sbs[i], 0, sizeof(sbs[i]));
			nr_absent++;
			continue;
		}
		/* Against the copy: a member cut short is zeroed below. */
		r = sb_agree(&sbs[i], paths[i], &out->sb, paths[ref], why,
			     whylen);
		if (r)
			goto out;
		/*
		 * A member of this volume cut short (a failing disk, a file
		 * truncated): a mirror leaves it out, as an unreadable one; a
		 * stripe is refused (here below its data offset, else by the
		 * caller, which knows the size asked).
		 */
		if (sizes[i] < out->member_bytes &&
		    (redundant || sizes[i] < sbs[i].data_offset)) {
			char cut[300];

			if (sizes[i] < sbs[i].data_offset)
				snprintf(cut, sizeof(cut),
					 "member %s: %llu bytes, shorter than "
					 "its data offset",
					 paths[i],
					 (unsigned long long)sizes[i]);
			else
				snprintf(cut, sizeof(cut),
					 "member %s: %llu bytes, the layout "
					 "needs %llu",
					 paths[i],
					 (unsigned long long)sizes[i],
					 (unsigned long long)out->member_bytes);
			if (!redundant) {
				snprintf(why, whylen, "%s", cut);
				r = -EINVAL;
				goto out;
			}
			if (!lost_err) {
				lost_err = -EIO;
				snprintf(lost, sizeof(lost), "%s", cut);
			}
			/* sb_read checked the role against SB_MAX_ROLES. */
			out->cut[sbs[i].role] = i;
			out->cut_bytes[sbs[i].role] = sizes[i];
			memset(&sbs[i], 0, sizeof(sbs[i]));
			nr_absent++;
			continue;
		}
		if (out->order[sbs[i].role] != none) {
			snprintf(why, whylen,
				 "members %s and %s both claim role %u",
				 paths[out->order[sbs[i].role]], paths[i],
				 sbs[i].role);
			r = -EINVAL;
			goto out;
		}
		out->order[sbs[i].role] = i;
		out->nr++;
	}
	r = sb_split_brain(sbs, paths, n, why, whylen);
	if (r)
		goto out;
	out->clean = true;
	for (unsigned int role = 0; role < out->sb.nr_roles; role++) {
		unsigned int i = out->order[role];
		bool active = out->sb.roles[role].state == SB_ROLE_ACTIVE;

		if (i == none && !redundant) {
			char u[37];

			sb_uuid_format(out->sb.roles[role].uuid, u);
			snprintf(why, whylen,
				 "volume '%s' has %u member%s: role %u (member "
				 "%s) is missing",
				 out->sb.name, out->sb.nr_roles,
				 plural(out->sb.nr_roles), role, u);
			r = -EINVAL;
			goto out;
		}
		if (i != none && sbs[i].events < out->sb.events &&
		    !redundant) {
			snprintf(why, whylen,
				 "member %s: stale (event %llu, member %s has "
				 "%llu): it missed a change the others recorded",
				 paths[i], (unsigned long long)sbs[i].events,
				 paths[ref],
				 (unsigned long long)out->sb.events);
			r = -EINVAL;
			goto out;
		}
		bool behind = i != none &&
			      sbs[i].events < out->sb.events &&
			      !sb_one_mark_behind(&sbs[i], &out->sb);

		if (active && (i == none || behind))
			out->degraded |= 1ull << role;
		out->state[role] = active && !(out->degraded >> role & 1) ?
					   SB_ROLE_ACTIVE :
					   SB_ROLE_FAULTY;
		/* A rebuild goes on where it was, with its member. */
		if (out->sb.roles[role].state == SB_ROLE_REBUILDING &&
		    i != none && !behind)
			out->state[role] = SB_ROLE_REBUILDING;
		/* One mark behind: a mark cut short, so not clean. */
		if (out->state[role] != SB_ROLE_FAULTY &&
		    (!(sbs[i].flags & SB_FLAG_CLEAN) ||
		     sbs[i].events != out->sb.events))
			out->clean = false;
	}
	if (n > out->nr + nr_absent) {
		/* Cannot happen: more given than roles means a role twice. */
		snprintf(why, whylen, "volume '%s' has %u member%s, %u given",
			 out->sb.name, out->sb.nr_roles,
			 plural(out->sb.nr_roles), n);
		r = -EINVAL;
		goto out;
	}
	if (!sb_covered(out->sb.level, out->sb.nr_roles, out->sb.copies,
			out->state)) {
		roles_lost(out, paths, lost, sizeof(lost));
		snprintf(why, whylen,
			 "volume '%s' cannot start: some data has no live "
			 "copy left (%s)", out->sb.name, lost);
		r = -EIO;
		goto out;
	}
	if (lost_err)
		snprintf(out->left_out, sizeof(out->left_out), "%s", lost);
out:
	free(sbs);
	free(sizes);
	return r;
}

/* ---- names ---- */

int sb_uuid_generate(uint8_t uuid[16])
{
	size_t have = 0;

	while (have < 16) {
		ssize_t n = getrandom(uuid + have, 16 - have, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		have += (size_t)n;
	}
	uuid[6] = (uint8_t)((uuid[6] & 0x0f) | 0x40); /* version 4 */
	uuid[8] = (uint8_t)((uuid[8] & 0x3f) | 0x80); /* RFC 4122 variant */
	return 0;
}

void sb_uuid_format(const uint8_t u[16], char out[37])
{
	snprintf(out, 37,
		 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
		 "%02x%02x%02x%02x%02x%02x",
		 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9],
		 u[10], u[11], u[12], u[13], u[14], u[15]);
}

const char *sb_level_name(uint32_t level)
{
	switch (level) {
	case SB_LEVEL_RAID0: return "raid0";
	case SB_LEVEL_RAID1: return "raid1";
	case SB_LEVEL_RAID10: return "raid10";
	default: return "unknown";
	}
}

const char *sb_role_state_name(uint32_t state)
{
	static const char *const names[] = { "active", "faulty", "spare",
					     "rebuilding" };

	return state < 4 ? names[state] : "unknown";
}
