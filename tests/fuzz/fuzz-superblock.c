// SPDX-License-Identifier: MIT
/*
 * fuzz-superblock.c - libFuzzer harness for the member superblock parser
 * (engine/superblock.c, docs/format.md).  Each input is decoded twice: as
 * it is (any length, mostly refused at the magic or the checksum), and
 * as a 4 KiB block with the magic, the version and a correct CRC32C
 * forced, so that the fuzzer explores the field checks behind the
 * checksum, starting from the valid superblocks in tests/fuzz/sb-corpus.  A block that decodes must keep every invariant the rest of
 * the server relies on and survive encode/decode unchanged; anything else
 * must be a clean refusal.  Run by tools/fuzz.sh.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <bionbd/superblock.h>
#include <bionbd/target.h>

#define REQUIRE(cond)                                                          \
	do {                                                                   \
		if (!(cond))                                                   \
			abort();                                               \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_decoded(const struct superblock *sb)
{
	uint8_t again[SB_BYTES];
	struct superblock back;
	char why[256];

	REQUIRE(sb->nr_roles >= 1 && sb->nr_roles <= SB_MAX_ROLES);
	REQUIRE(sb->role < sb->nr_roles);
	REQUIRE(stripe_chunk_valid(sb->chunk_bytes));
	REQUIRE(sb->data_offset >= SB_BYTES && !(sb->data_offset % 4096) &&
		!(sb->data_offset % sb->chunk_bytes));
	REQUIRE(sb->size_bytes && !(sb->size_bytes % 512));
	REQUIRE(memchr(sb->name, 0, SB_NAME_BYTES));
	REQUIRE(!memcmp(sb->roles[sb->role].uuid, sb->member_uuid, 16));
	sb_encode(sb, again);
	REQUIRE(sb_decode(again, sizeof(again), &back, why, sizeof(why)) == 0);
	REQUIRE(!memcmp(&back, sb, sizeof(back)));
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t block[SB_BYTES];
	struct superblock sb;
	char why[256];

	if (!sb_decode(data, size, &sb, why, sizeof(why)))
		check_decoded(&sb);

	memset(block, 0, sizeof(block));
	memcpy(block, data, size < SB_BYTES ? size : SB_BYTES);
	memcpy(block, SB_MAGIC, 8);
	put32(block + 8, SB_VERSION);
	put32(block + SB_BYTES - 4, crc32c(0, block, SB_BYTES - 4));
	if (!sb_decode(block, sizeof(block), &sb, why, sizeof(why)))
		check_decoded(&sb);
	return 0;
}
