/* SPDX-License-Identifier: MIT */
/*
 * mdev.h - a member seen as a plain device, for what goes around the data
 * path: superblocks, the write-intent bitmap, the resync after an unclean
 * shutdown, and creating a volume (bioctl create).
 *
 * The data path goes through targets (bio, asynchronous, per thread); this
 * is synchronous and rare (start, a fault, a bitmap bit), so one interface
 * serves a local file or block device, another server's NBD export and a
 * Ceph RBD image alike, and the superblock code never knows which.  A
 * remote call is bounded by the member's timeout: a dead remote is an
 * error, never a hang.
 */
#ifndef BIONBD_MDEV_H
#define BIONBD_MDEV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mdev;

struct mdev_ops {
	/* All of @len at @off; past the member's end reads as zeros. */
	int (*pread)(struct mdev *m, void *buf, size_t len, uint64_t off);
	/* All of @len at @off, or -errno (-ENOSPC past a remote's end). */
	int (*pwrite)(struct mdev *m, const void *buf, size_t len,
		      uint64_t off);
	/* [off, off + len) reads as zeros afterwards. */
	int (*zero)(struct mdev *m, uint64_t off, uint64_t len);
	/* What was written is durable. */
	int (*sync)(struct mdev *m);
	int (*size)(struct mdev *m, uint64_t *bytes);
	void (*close)(struct mdev *m);
	/* Optional (mdev_claim): does another client have it open? */
	int (*claim)(struct mdev *m, char *why, size_t whylen);
};

struct mdev {
	const struct mdev_ops *ops;
	int fd; /* a local file or device; -1 for a remote member */
};

extern const struct mdev_ops mdev_fd_ops;

/* A descriptor the caller owns, seen as an mdev for one call (never
 * mdev_close'd: the caller closes the descriptor). */
#define MDEV_FD(fd_) (&(struct mdev){ .ops = &mdev_fd_ops, .fd = (fd_) })

/**
 * mdev_open - open @member (a path, an NBD URI or rbd:...) for metadata I/O
 * @write: read-write (a read-only remote is then -EROFS)
 * @timeout_ms: bound on connecting and on each remote call (0: the
 *	member type's default, as its target has)
 *
 * Returns 0, or -errno with a one-line message naming @member in @why
 * (-ENOENT: a local path that does not exist).  A local member must be a
 * regular file or a block device (-EINVAL otherwise).
 */
int mdev_open(struct mdev **out, const char *member, bool write,
	      unsigned int timeout_ms, char *why, size_t whylen);

/* flock(2) LOCK_EX | LOCK_NB on a local member: one writer a volume.  A
 * remote member cannot be locked from here: 0.  -EWOULDBLOCK when held. */
int mdev_lock(struct mdev *m);

/* mdev_lock, and for -EWOULDBLOCK (-EBUSY then) or a failure a one-line
 * message "WHAT NAME: ..." in @why. */
int mdev_lock_say(struct mdev *m, const char *what, const char *name,
		  char *why, size_t whylen);

/**
 * mdev_claim - make sure no one else writes @m while a tool rewrites it
 * (bioctl create, check --repair): a local member is locked (mdev_lock);
 * an RBD image must have no client but this process (another client's
 * watch on it: a server, or one killed less than about 30 s ago).  An NBD
 * export cannot tell who else is connected: 0.
 * Returns 0, or -EBUSY (or the error that stopped the check) with a
 * one-line message naming @member.
 */
int mdev_claim(struct mdev *m, const char *member, char *why, size_t whylen);

static inline bool mdev_is_remote(const struct mdev *m)
{
	return m->fd < 0;
}

static inline int mdev_pread(struct mdev *m, void *buf, size_t len,
			     uint64_t off)
{
	return m->ops->pread(m, buf, len, off);
}

static inline int mdev_pwrite(struct mdev *m, const void *buf, size_t len,
			      uint64_t off)
{
	return m->ops->pwrite(m, buf, len, off);
}

static inline int mdev_zero(struct mdev *m, uint64_t off, uint64_t len)
{
	return len ? m->ops->zero(m, off, len) : 0;
}

static inline int mdev_sync(struct mdev *m)
{
	return m->ops->sync(m);
}

static inline int mdev_size(struct mdev *m, uint64_t *bytes)
{
	return m->ops->size(m, bytes);
}

static inline void mdev_close(struct mdev *m)
{
	if (m)
		m->ops->close(m);
}

#endif /* BIONBD_MDEV_H */
