/*
 * Description: target_iomap, which bionbd's sendfile reads rely on.  A
 * stripe of 3 tmpfs files with 64 KiB chunks answers, for random ranges
 * and for ranges on chunk edges, with the member file the layout rule
 * names (the same inode), the offset in it (row * chunk + offset in the
 * chunk) and a length that stops at the chunk's end or the range's;
 * walking a range answer by answer and reading each with pread from the
 * fd it names gives what the members hold there.  With TARGET_IOMAP_HOLE,
 * a piece that starts in a hole says so and how far the hole reaches (to
 * the member's next data, or the piece's end), a piece with data says
 * data; without the flag no piece is a hole.  Out of range and empty
 * ranges are -EINVAL.  A file on a disk (TMPDIR, the build tree), a tmpfs
 * file opened with no_inline, and a stripe with one such member answer
 * -EOPNOTSUPP for every range, so a front end may ask once.
 *
 * tmpfs is /dev/shm (checked with statfs); without it the test skips (77).
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include <bionbd/target.h>

#include "unit.h"

#define KiB 1024u
#define MiB (1024u * KiB)
#define TMPFS_DIR "/dev/shm"
#define NR 3u
#define CHUNK (64 * KiB)
#define MEMBER_BYTES (1 * MiB)
#define VOL_BYTES ((uint64_t)NR * MEMBER_BYTES)

static char paths[NR + 1][256];
static int fds[NR + 1];
static uint8_t img[NR][MEMBER_BYTES]; /* what each member holds */

static bool on_tmpfs(const char *dir)
{
	struct statfs sfs;

	return !statfs(dir, &sfs) && sfs.f_type == TMPFS_MAGIC;
}

static int make_file(char *path, size_t size, const char *dir)
{
	int fd;

	snprintf(path, size, "%s/test-iomap.XXXXXX", dir);
	fd = mkstemp(path);
	CHECK(fd >= 0);
	CHECK(!ftruncate(fd, MEMBER_BYTES));
	return fd;
}

/*
 * Member m: data in its chunks of even rows, holes in the odd ones, and in
 * row 2 a hole of 12 KiB before the data (so a piece starts in a hole that
 * ends inside it).
 */
static void fill_members(void)
{
	for (unsigned int m = 0; m < NR; m++) {
		for (uint32_t row = 0; row < MEMBER_BYTES / CHUNK; row++) {
			uint32_t from = row == 2 ? 12 * KiB : 0;

			if (row & 1)
				continue;
			for (uint32_t i = from; i < CHUNK; i++)
				img[m][row * CHUNK + i] =
					(uint8_t)(1 + ((m * 131 + row * 7 + i) % 251));
			CHECK_EQ(pwrite(fds[m], img[m] + row * CHUNK + from,
					CHUNK - from, row * CHUNK + from),
				 CHUNK - from);
		}
	}
}

static ino_t ino_of(int fd)
{
	struct stat st;

	CHECK(!fstat(fd, &st));
	return st.st_ino;
}

/* The member and member offset of volume offset @off, by the rule. */
static void layout(uint64_t off, unsigned int *m, uint64_t *moff)
{
	uint64_t k = off / CHUNK;

	*m = (unsigned int)(k % NR);
	*moff = (k / NR) * CHUNK + off % CHUNK;
}

/* Walk [off, off + len) answer by answer and check each one. */
static void walk(struct target *vol, uint64_t off, uint64_t len,
		 unsigned int flags)
{
	static uint8_t got[2 * CHUNK];
	uint64_t pos = off, end = off + len;

	while (pos < end) {
		struct target_iomap im;
		unsigned int m;
		uint64_t moff, left_in_chunk = CHUNK - pos % CHUNK, want;

		CHECK_EQ(target_iomap(vol, pos, end - pos, flags, &im), 0);
		layout(pos, &m, &moff);
		CHECK_EQ(ino_of(im.fd), ino_of(fds[m]));
		CHECK_EQ(im.file_offset, moff);
		want = end - pos < left_in_chunk ? end - pos : left_in_chunk;
		if (!(flags & TARGET_IOMAP_HOLE)) {
			CHECK(!im.hole);
			CHECK_EQ(im.length, want);
		} else {
			uint32_t row = (uint32_t)(moff / CHUNK);
			uint64_t data_at = row & 1 ? (row + 1) * CHUNK :
					   row == 2 ? row * CHUNK + 12 * KiB :
						      moff;
			/* The last row is odd: no data after it. */
			bool hole = data_at > moff;

			CHECK_EQ(im.hole, hole);
			if (hole && data_at - moff < want)
				CHECK_EQ(im.length, data_at - moff);
			else
				CHECK_EQ(im.length, want);
		}
		CHECK(im.length > 0 && im.length <= sizeof(got));
		CHECK_EQ(pread(im.fd, got, im.length, (off_t)im.file_offset),
			 im.length);
		CHECK(!memcmp(got, img[m] + moff, im.length));
		pos += im.length;
	}
}

static struct target *open_file(const char *path, bool no_inline)
{
	struct file_target_opts o = { .no_inline = no_inline };
	struct target *t;

	CHECK_EQ(file_target_open(&t, path, &o), 0);
	return t;
}

static struct target *open_stripe(struct target **members)
{
	struct target *vol;

	CHECK_EQ(stripe_target_create(&vol, members, NR, CHUNK, 0, 0), 0);
	CHECK_EQ(vol->size_bytes, VOL_BYTES);
	return vol;
}

int main(void)
{
	struct target *members[NR], *vol, *t;
	struct target_iomap im;
	const char *disk = getenv("TMPDIR");

	if (!on_tmpfs(TMPFS_DIR)) {
		fprintf(stderr, "SKIP: %s is not tmpfs\n", TMPFS_DIR);
		return 77;
	}
	for (unsigned int m = 0; m < NR; m++)
		fds[m] = make_file(paths[m], sizeof(paths[m]), TMPFS_DIR);
	fill_members();
	for (unsigned int m = 0; m < NR; m++)
		members[m] = open_file(paths[m], false);
	vol = open_stripe(members);

	/* Edges: chunk and row boundaries, the very end, whole rows. */
	for (unsigned int flags = 0; flags <= TARGET_IOMAP_HOLE;
	     flags += TARGET_IOMAP_HOLE) {
		walk(vol, 0, VOL_BYTES, flags);
		walk(vol, CHUNK - 512, 1024, flags);
		walk(vol, NR * CHUNK - 1, 2, flags);
		walk(vol, 2 * NR * CHUNK + 4 * KiB, 12 * KiB, flags); /* in a hole */
		walk(vol, VOL_BYTES - 1, 1, flags);
		for (unsigned int i = 0; i < 2000; i++) {
			uint64_t off = rnd_below(VOL_BYTES);
			uint64_t len = 1 + rnd_below(VOL_BYTES - off < 4 * CHUNK ?
							     VOL_BYTES - off :
							     4 * CHUNK);

			walk(vol, off, len, flags);
		}
	}
	CHECK_EQ(target_iomap(vol, VOL_BYTES, 1, 0, &im), -EINVAL);
	CHECK_EQ(target_iomap(vol, VOL_BYTES - 1, 2, 0, &im), -EINVAL);
	CHECK_EQ(target_iomap(vol, 0, 0, 0, &im), -EINVAL);
	CHECK_EQ(target_iomap(vol, UINT64_MAX, 2, 0, &im), -EINVAL);
	target_destroy(vol);

	/* Not memory-backed, or told not to copy inline: never. */
	t = open_file(paths[0], true);
	CHECK_EQ(target_iomap(t, 0, 1, 0, &im), -EOPNOTSUPP);
	target_destroy(t);
	if (disk && !on_tmpfs(disk)) {
		fds[NR] = make_file(paths[NR], sizeof(paths[NR]), disk);
		t = open_file(paths[NR], false);
		CHECK_EQ(target_iomap(t, 0, 1, 0, &im), -EOPNOTSUPP);
		target_destroy(t);
		for (unsigned int m = 0; m < NR; m++)
			members[m] = open_file(m == 1 ? paths[NR] : paths[m],
					       false);
		vol = open_stripe(members);
		CHECK_EQ(target_iomap(vol, 0, 1, 0, &im), -EOPNOTSUPP);
		CHECK_EQ(target_iomap(vol, CHUNK, 1, 0, &im), -EOPNOTSUPP);
		target_destroy(vol);
		close(fds[NR]);
		unlink(paths[NR]);
	} else {
		fprintf(stderr, "note: TMPDIR unset or tmpfs: no disk member tried\n");
	}
	for (unsigned int m = 0; m < NR; m++) {
		close(fds[m]);
		unlink(paths[m]);
	}
	printf("ok\n");
	return 0;
}
