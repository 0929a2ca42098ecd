// SPDX-License-Identifier: MIT
/*
 * mdev.c - metadata I/O on a member (mdev.h): the local file or block
 * device here, and the choice of kind; remote.c and rbd.c have theirs.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bionbd/mdev.h>

#include "internal.h"

static int fd_pread(struct mdev *m, void *buf, size_t len, uint64_t off)
{
	char *p = buf;

	while (len) {
		ssize_t n = pread(m->fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (!n) {
			memset(p, 0, len);
			return 0;
		}
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

static int fd_pwrite(struct mdev *m, const void *buf, size_t len,
		     uint64_t off)
{
	const char *p = buf;

	while (len) {
		ssize_t n = pwrite(m->fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

/* Punched where the file system can (no blocks spent on zeros), else written. */
static int fd_zero(struct mdev *m, uint64_t off, uint64_t len)
{
	static const uint8_t zeros[65536];
	uint64_t end = off + len;
	int r = 0;

	if (!fallocate(m->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		       (off_t)off, (off_t)len))
		return 0;
	for (; off < end && !r; off += sizeof(zeros))
		r = fd_pwrite(m, zeros,
			      end - off < sizeof(zeros) ? end - off :
							  sizeof(zeros),
			      off);
	return r;
}

static int fd_sync(struct mdev *m)
{
	return fdatasync(m->fd) ? -errno : 0;
}

static int fd_size(struct mdev *m, uint64_t *bytes)
{
	struct stat st;

	if (fstat(m->fd, &st))
		return -errno;
	if (S_ISBLK(st.st_mode))
		return ioctl(m->fd, BLKGETSIZE64, bytes) ? -errno : 0;
	*bytes = (uint64_t)st.st_size;
	return 0;
}

static void fd_close(struct mdev *m)
{
	close(m->fd);
	free(m);
}

const struct mdev_ops mdev_fd_ops = {
	.pread = fd_pread,
	.pwrite = fd_pwrite,
	.zero = fd_zero,
	.sync = fd_sync,
	.size = fd_size,
	.close = fd_close,
};

static int local_open(struct mdev **out, const char *path, bool write,
		      char *why, size_t whylen)
{
	struct mdev *m = malloc(sizeof(*m));
	struct stat st;
	int fd, r;

	if (!m)
		return verr(why, whylen, -ENOMEM, "out of memory");
	/* O_NONBLOCK: a FIFO named as a member must not block the open. */
	fd = open(path, (write ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		r = -errno;
		verr(why, whylen, r, "member %s: %s", path, strerror(-r));
		goto err;
	}
	if (fstat(fd, &st) || (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))) {
		r = verr(why, whylen, -EINVAL,
			 "member %s: not a regular file or block device", path);
		close(fd);
		goto err;
	}
	(void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	m->ops = &mdev_fd_ops;
	m->fd = fd;
	*out = m;
	return 0;
err:
	free(m);
	return r;
}

int mdev_open(struct mdev **out, const char *member, bool write,
	      unsigned int timeout_ms, char *why, size_t whylen)
{
	if (remote_uri(member))
		return remote_mdev_open(out, member, write, timeout_ms, why,
					whylen);
	if (rbd_member(member))
		return rbd_mdev_open(out, member, write, timeout_ms, why,
				     whylen);
	return local_open(out, member, write, why, whylen);
}

int mdev_lock(struct mdev *m)
{
	if (mdev_is_remote(m) || !flock(m->fd, LOCK_EX | LOCK_NB))
		return 0;
	return -errno;
}

int mdev_lock_say(struct mdev *m, const char *what, const char *name,
		  char *why, size_t whylen)
{
	int r = mdev_lock(m);

	if (r == -EWOULDBLOCK)
		return verr(why, whylen, -EBUSY,
			    "%s %s: in use by another process (a server or "
			    "bioctl has the volume open)",
			    what, name);
	if (r)
		return verr(why, whylen, r, "%s %s: flock: %s", what, name,
			    strerror(-r));
	return 0;
}

int mdev_claim(struct mdev *m, const char *member, char *why, size_t whylen)
{
	if (m->ops->claim)
		return m->ops->claim(m, why, whylen);
	return mdev_lock_say(m, "member", member, why, whylen);
}
