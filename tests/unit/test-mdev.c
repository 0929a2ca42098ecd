/*
 * Description: mdev (bionbd/mdev.h) on a local file, and the superblock
 * calls that go through it: reads past the end are zeros, zero() really
 * zeroes, sizes and kinds, the lock, and sb_read's verdicts on members too
 * short to hold a superblock.  Remote members (NBD, RBD) have the same
 * interface and are exercised end to end (test-volume-remote-mirror.sh,
 * test-volume-rbd.sh).
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <bionbd/mdev.h>
#include <bionbd/superblock.h>

#include "unit.h"

static char dir[256];

static const char *path_of(const char *name)
{
	static char p[320];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return p;
}

static void make_file(const char *name, uint64_t size)
{
	int fd = open(path_of(name), O_RDWR | O_CREAT | O_TRUNC, 0644);

	CHECK(fd >= 0);
	CHECK_EQ(ftruncate(fd, (off_t)size), 0);
	close(fd);
}

static void test_io(void)
{
	struct mdev *m;
	uint8_t buf[8192], want[8192];
	uint64_t size = 0;
	char why[256];

	make_file("io", 16384);
	CHECK_EQ(mdev_open(&m, path_of("io"), true, 0, why, sizeof(why)), 0);
	CHECK(!mdev_is_remote(m));
	CHECK_EQ(mdev_size(m, &size), 0);
	CHECK_EQ(size, 16384);

	memset(want, 0xa5, sizeof(want));
	CHECK_EQ(mdev_pwrite(m, want, sizeof(want), 4096), 0);
	CHECK_EQ(mdev_pread(m, buf, sizeof(buf), 4096), 0);
	CHECK(!memcmp(buf, want, sizeof(buf)));

	/* Straddling the end: the tail reads as zeros, not garbage. */
	CHECK_EQ(mdev_pwrite(m, want, 4096, 12288), 0);
	memset(buf, 0xff, sizeof(buf));
	CHECK_EQ(mdev_pread(m, buf, sizeof(buf), 12288), 0);
	CHECK(!memcmp(buf, want, 4096));
	for (size_t i = 4096; i < sizeof(buf); i++)
		CHECK_EQ(buf[i], 0);

	/* zero() clears exactly its range. */
	CHECK_EQ(mdev_zero(m, 6144, 2048), 0);
	CHECK_EQ(mdev_pread(m, buf, sizeof(buf), 4096), 0);
	CHECK(!memcmp(buf, want, 2048));
	for (size_t i = 2048; i < 4096; i++)
		CHECK_EQ(buf[i], 0);
	CHECK(!memcmp(buf + 4096, want, 4096));
	CHECK_EQ(mdev_sync(m), 0);
	mdev_close(m);
}

static void test_open(void)
{
	struct mdev *m, *m2;
	char why[256];

	CHECK_EQ(mdev_open(&m, path_of("absent"), false, 0, why, sizeof(why)),
		 -ENOENT);
	CHECK(strstr(why, "absent"));
	CHECK_EQ(mdev_open(&m, dir, false, 0, why, sizeof(why)), -EINVAL);
	CHECK(strstr(why, "not a regular file or block device"));
	CHECK_EQ(mdev_open(&m, "/dev/null", false, 0, why, sizeof(why)),
		 -EINVAL);

	/* One writer: a second lock on the same file is refused. */
	make_file("locked", 8192);
	CHECK_EQ(mdev_open(&m, path_of("locked"), true, 0, why, sizeof(why)),
		 0);
	CHECK_EQ(mdev_open(&m2, path_of("locked"), true, 0, why, sizeof(why)),
		 0);
	CHECK_EQ(mdev_lock(m), 0);
	CHECK_EQ(mdev_lock(m2), -EWOULDBLOCK);
	mdev_close(m);
	CHECK_EQ(mdev_lock(m2), 0);
	mdev_close(m2);
}

static void test_superblock(void)
{
	struct sb_new_opts o = { .name = "t", .level = SB_LEVEL_RAID1,
				 .chunk_bytes = 65536,
				 .size_bytes = 4 << 20 };
	struct superblock sb, back;
	struct mdev *m;
	uint8_t junk[4096];
	char why[256];
	int fd;

	CHECK_EQ(sb_new(&sb, 2, &o, why, sizeof(why)), 0);
	make_file("member", 8 << 20);
	/* Reserved bytes that sb_write_member must clear. */
	fd = open(path_of("member"), O_RDWR);
	CHECK(fd >= 0);
	memset(junk, 0x5a, sizeof(junk));
	CHECK_EQ(pwrite(fd, junk, sizeof(junk), 12288), (ssize_t)sizeof(junk));
	CHECK_EQ(sb_write_member(MDEV_FD(fd), &sb), 0);
	CHECK_EQ(pread(fd, junk, sizeof(junk), 12288), (ssize_t)sizeof(junk));
	for (size_t i = 0; i < sizeof(junk); i++)
		CHECK_EQ(junk[i], 0);
	close(fd);

	CHECK_EQ(mdev_open(&m, path_of("member"), false, 0, why, sizeof(why)),
		 0);
	CHECK_EQ(sb_read(m, &back, why, sizeof(why)), 0);
	CHECK(!memcmp(back.volume_uuid, sb.volume_uuid, 16));
	CHECK_EQ(back.role, 0);
	mdev_close(m);

	/* Too short for the magic: headerless; magic but cut short: bad. */
	make_file("tiny", 4);
	CHECK_EQ(mdev_open(&m, path_of("tiny"), false, 0, why, sizeof(why)),
		 0);
	CHECK_EQ(sb_read(m, &back, why, sizeof(why)), -ENOENT);
	mdev_close(m);
	fd = open(path_of("cut"), O_RDWR | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0);
	CHECK_EQ(write(fd, SB_MAGIC "0123", 12), 12);
	CHECK_EQ(sb_read(MDEV_FD(fd), &back, why, sizeof(why)), -EINVAL);
	close(fd);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(dir, sizeof(dir), "%s/test-mdev.XXXXXX", tmp ? tmp : "/tmp");
	CHECK(mkdtemp(dir));
	test_io();
	test_open();
	test_superblock();
	for (const char *const *n = (const char *const[]){ "io", "locked",
			"member", "tiny", "cut", NULL }; *n; n++)
		unlink(path_of(*n));
	rmdir(dir);
	return 0;
}
