// SPDX-License-Identifier: MIT
/*
 * file.c - the file target: one regular file or block device as a target,
 * plus the pieces of file I/O both backends share (iovec building, zero
 * fill past EOF, the write-zeroes fallback ladder, extents via SEEK_HOLE,
 * and the synchronous path the thread pool runs).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "internal.h"

/* ---- helpers shared with the backends ---- */

static void *zero_area;
static pthread_once_t zero_once = PTHREAD_ONCE_INIT;

static void zero_area_init(void)
{
	/* Read-only anonymous pages: all zero and never written by anyone. */
	void *p = mmap(NULL, ZERO_BUF_BYTES, PROT_READ,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	zero_area = p == MAP_FAILED ? NULL : p;
}

const void *zero_buf(void)
{
	pthread_once(&zero_once, zero_area_init);
	return zero_area;
}

unsigned int bio_iter_to_iovec(const struct bio *bio, struct bvec_iter iter,
			       struct iovec *iov, unsigned int max)
{
	struct bio_vec bv;
	unsigned int n = 0;

	while (iter.bi_size && n < max) {
		bv = bvec_iter_bvec(bio->bi_io_vec, iter);
		iov[n].iov_base = bvec_virt(&bv);
		iov[n].iov_len = bv.bv_len;
		n++;
		bvec_iter_advance(bio->bi_io_vec, &iter, bv.bv_len);
	}
	return n;
}

void bio_iter_zero(const struct bio *bio, struct bvec_iter iter)
{
	struct bio_vec bv;

	while (iter.bi_size) {
		bv = bvec_iter_bvec(bio->bi_io_vec, iter);
		memset(bvec_virt(&bv), 0, bv.bv_len);
		bvec_iter_advance(bio->bi_io_vec, &iter, bv.bv_len);
	}
}

enum zero_step zero_first_step(const struct bio *bio)
{
	if (bio_op(bio) == REQ_OP_WRITE_ZEROES && (bio->bi_opf & REQ_NOUNMAP))
		return ZS_ZERO_RANGE;
	return ZS_PUNCH;
}

enum zero_step zero_next_step(const struct bio *bio, enum zero_step step)
{
	bool nounmap = bio->bi_opf & REQ_NOUNMAP;

	/* Discard is advisory: if the file cannot punch, leave the data. */
	if (bio_op(bio) == REQ_OP_DISCARD)
		return ZS_DONE;
	switch (step) {
	case ZS_PUNCH:
		return ZS_ZERO_RANGE;
	case ZS_ZERO_RANGE:
		if (nounmap)
			return ZS_PUNCH_THEN_ALLOC;
		break;
	default:
		break;
	}
	return (bio->bi_opf & REQ_NOFALLBACK) ? ZS_FAIL : ZS_WRITE;
}

int zero_step_mode(enum zero_step step)
{
	switch (step) {
	case ZS_PUNCH:
	case ZS_PUNCH_THEN_ALLOC:
		return FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
	case ZS_ZERO_RANGE:
		return FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE;
	case ZS_ALLOC:
		return FALLOC_FL_KEEP_SIZE;
	default:
		return -1;
	}
}

/* ---- extents and cache: cheap, synchronous, the same for both backends ---- */

int file_extents(struct file_target *ft, struct bio *bio)
{
	uint64_t start = bio_offset_bytes(bio), end = start + bio->bi_iter.bi_size;
	uint64_t base = bio->bi_iter.bi_done, pos = start, eof = ft->t.size_bytes;
	struct stat st;
	int r;

	if (!bio->bi_ext)
		return -EINVAL;
	if (ft->is_blockdev)
		return bio_extents_add(bio->bi_ext, base, end - start, 0);
	/* The file may have grown or shrunk since open; ask now. */
	if (fstat(ft->fd, &st) == 0)
		eof = (uint64_t)st.st_size;

	while (pos < end) {
		off_t data, hole;
		uint64_t next;

		if (pos >= eof) {
			return bio_extents_add(bio->bi_ext, base + pos - start,
					       end - pos,
					       BIO_EXT_HOLE | BIO_EXT_ZERO);
		}
		data = lseek(ft->fd, (off_t)pos, SEEK_DATA);
		if (data < 0 && errno == ENXIO) {
			data = (off_t)eof; /* only a hole up to EOF */
		} else if (data < 0) {
			/* No SEEK_DATA on this file system: all data. */
			if (errno == EINVAL || errno == EOPNOTSUPP)
				return bio_extents_add(bio->bi_ext,
						       base + pos - start,
						       end - pos, 0);
			return -errno;
		}
		if ((uint64_t)data > pos) {
			next = (uint64_t)data < end ? (uint64_t)data : end;
			r = bio_extents_add(bio->bi_ext, base + pos - start,
					    next - pos,
					    BIO_EXT_HOLE | BIO_EXT_ZERO);
			if (r)
				return r;
			pos = next;
			continue;
		}
		hole = lseek(ft->fd, (off_t)pos, SEEK_HOLE);
		if (hole < 0)
			return -errno;
		next = (uint64_t)hole < end ? (uint64_t)hole : end;
		if (next <= pos)
			next = end; /* racing truncate: call the rest data */
		r = bio_extents_add(bio->bi_ext, base + pos - start, next - pos,
				    0);
		if (r)
			return r;
		pos = next;
	}
	return 0;
}

/* ---- the synchronous path (thread pool workers) ---- */

static int sync_rw(struct file_target *ft, const struct bio *bio)
{
	struct bvec_iter iter = bio->bi_iter;
	bool write = bio_op(bio) == REQ_OP_WRITE;
	int rwf = (write && (bio->bi_opf & REQ_FUA)) ? RWF_DSYNC : 0;
	struct iovec iov[64];

	while (iter.bi_size) {
		unsigned int n = bio_iter_to_iovec(bio, iter, iov,
						   ARRAY_SIZE(iov));
		off_t off = (off_t)(iter.bi_sector << SECTOR_SHIFT);
		ssize_t r;

		r = write ? pwritev2(ft->fd, iov, (int)n, off, rwf) :
			    preadv(ft->fd, iov, (int)n, off);
		if (r < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		if (r == 0) {
			if (write)
				return -EIO;
			bio_iter_zero(bio, iter); /* past EOF reads as zeros */
			return 0;
		}
		/* Short I/O: go on from where it stopped. */
		bvec_iter_advance(bio->bi_io_vec, &iter, (unsigned int)r);
	}
	return 0;
}

static int sync_write_zeroes(struct file_target *ft, uint64_t off,
			     uint64_t len)
{
	const char *z = zero_buf();

	if (!z)
		return -ENOMEM;
	while (len) {
		size_t n = len < ZERO_BUF_BYTES ? len : ZERO_BUF_BYTES;
		ssize_t r = pwrite(ft->fd, z, n, (off_t)off);

		if (r < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		if (r == 0)
			return -EIO;
		off += (uint64_t)r;
		len -= (uint64_t)r;
	}
	return 0;
}

static int sync_zero(struct file_target *ft, const struct bio *bio)
{
	uint64_t off = bio_offset_bytes(bio), len = bio->bi_iter.bi_size;
	enum zero_step step = zero_first_step(bio);
	int r;

	for (;;) {
		switch (step) {
		case ZS_DONE:
			return 0;
		case ZS_FAIL:
			return -EOPNOTSUPP;
		case ZS_WRITE:
			return sync_write_zeroes(ft, off, len);
		default:
			break;
		}
		r = fallocate(ft->fd, zero_step_mode(step), (off_t)off,
			      (off_t)len);
		if (r == 0 && step == ZS_PUNCH_THEN_ALLOC) {
			step = ZS_ALLOC;
			continue;
		}
		if (r == 0)
			return 0;
		if (errno != EOPNOTSUPP && errno != ENOTTY && errno != EINVAL)
			return -errno;
		step = zero_next_step(bio, step);
	}
}

int file_do_sync(struct file_target *ft, struct bio *bio)
{
	int r;

	switch (bio_op(bio)) {
	case REQ_OP_READ:
	case REQ_OP_WRITE:
		return sync_rw(ft, bio);
	case REQ_OP_FLUSH:
		return fdatasync(ft->fd) ? -errno : 0;
	case REQ_OP_DISCARD:
	case REQ_OP_WRITE_ZEROES:
		r = sync_zero(ft, bio);
		if (!r && (bio->bi_opf & REQ_FUA) && fdatasync(ft->fd))
			r = -errno;
		return r;
	default:
		return -EOPNOTSUPP;
	}
}

/* ---- the target ---- */

/* Do @bio now on this thread; it ends at the next ioq_reap. */
static void file_inline(struct file_target *ft, struct ioq *q,
			struct bio *bio)
{
	int r = file_do_sync(ft, bio);

	if (r)
		target_report_error(&ft->t, bio, r);
	ioq_defer_end(q, bio, r);
}

static void file_submit(struct target *t, struct bio *bio)
{
	struct file_target *ft = to_file_target(t);
	struct ioq *q;
	int r;

	switch (bio_op(bio)) {
	case REQ_OP_EXTENTS:
		r = file_extents(ft, bio);
		if (r)
			target_report_error(t, bio, r);
		bio_endio(bio, bio->bi_iter.bi_size, r);
		return;
	case REQ_OP_CACHE:
		/* Only a hint: queue readahead and complete at once. */
		(void)posix_fadvise(ft->fd, (off_t)bio_offset_bytes(bio),
				    bio->bi_iter.bi_size, POSIX_FADV_WILLNEED);
		bio_endio(bio, bio->bi_iter.bi_size, 0);
		return;
	default:
		break;
	}
	if (unlikely(ft->readonly && bio_op(bio) != REQ_OP_READ &&
		     bio_op(bio) != REQ_OP_FLUSH)) {
		bio_io_error(bio, -EPERM);
		return;
	}
	q = ioq_current();
	if (unlikely(!q)) {
		bio_io_error(bio, -ENXIO);
		return;
	}
	if (ft->inline_io) {
		if ((bio_op(bio) == REQ_OP_READ ||
		     bio_op(bio) == REQ_OP_WRITE) &&
		    blk_plug_add(t, bio))
			return;
		file_inline(ft, q, bio);
		return;
	}
	q->ops->submit(q, ft, bio);
}

/* iovecs in one merged I/O: a run stops early rather than split a bio. */
#define FILE_MERGE_IOV 64

/*
 * Append all of @bio's data to @iov (@room entries left).  Returns the
 * entries used, or 0 when it does not fit whole.
 */
static unsigned int iov_add_bio(const struct bio *bio, struct iovec *iov,
				unsigned int room, size_t *bytes)
{
	unsigned int n = bio_iter_to_iovec(bio, bio->bi_iter, iov, room);
	size_t sum = 0;

	for (unsigned int i = 0; i < n; i++)
		sum += iov[i].iov_len;
	if (sum != bio->bi_iter.bi_size)
		return 0;
	*bytes += sum;
	return n;
}

/*
 * Plugged reads and writes of a memory-backed member: runs of bios that
 * follow each other on the file, same op and same FUA, go down as one
 * preadv/pwritev2.  Anything short of complete success is redone bio by
 * bio, which finds the error (and reports it with the right offset), the
 * end of file or the EINTR; rewriting the same data is harmless.
 */
static void file_unplug(struct target *t, struct bio **bios, unsigned int nr)
{
	struct file_target *ft = to_file_target(t);
	struct ioq *q = ioq_current();
	struct iovec iov[FILE_MERGE_IOV];
	unsigned int i = 0;

	while (i < nr) {
		struct bio *first = bios[i];
		bool write = bio_op(first) == REQ_OP_WRITE;
		unsigned int fua = first->bi_opf & REQ_FUA;
		uint64_t off = bio_offset_bytes(first);
		uint64_t next = off + first->bi_iter.bi_size;
		size_t bytes = 0;
		unsigned int cnt, j = i + 1;
		ssize_t r;

		cnt = iov_add_bio(first, iov, ARRAY_SIZE(iov), &bytes);
		while (cnt && j < nr && bio_op(bios[j]) == bio_op(first) &&
		       (bios[j]->bi_opf & REQ_FUA) == fua &&
		       bio_offset_bytes(bios[j]) == next) {
			unsigned int n = iov_add_bio(bios[j], iov + cnt,
						     ARRAY_SIZE(iov) - cnt,
						     &bytes);

			if (!n)
				break;
			cnt += n;
			next += bios[j]->bi_iter.bi_size;
			j++;
		}
		if (j == i + 1) {
			file_inline(ft, q, first);
			i++;
			continue;
		}
		r = write ? pwritev2(ft->fd, iov, (int)cnt, (off_t)off,
				     fua ? RWF_DSYNC : 0) :
			    preadv(ft->fd, iov, (int)cnt, (off_t)off);
		for (; i < j; i++) {
			if (r >= 0 && (size_t)r == bytes)
				ioq_defer_end(q, bios[i], 0);
			else
				file_inline(ft, q, bios[i]);
		}
	}
}

static void file_destroy(struct target *t)
{
	struct file_target *ft = to_file_target(t);

	close(ft->fd);
	free(ft->t.name);
	free(ft);
}

#define TMPFS_MAGIC_ 0x01021994
#define RAMFS_MAGIC_ 0x858458f6

static bool memory_backed(int fd)
{
	struct statfs sfs;

	if (fstatfs(fd, &sfs))
		return false;
	return sfs.f_type == TMPFS_MAGIC_ || sfs.f_type == RAMFS_MAGIC_;
}

static const struct target_ops file_target_ops = {
	.submit = file_submit,
	.destroy = file_destroy,
	.unplug = file_unplug,
};

int file_target_open(struct target **out, const char *path,
		     const struct file_target_opts *opts)
{
	struct file_target_opts none = { 0 };
	struct file_target *ft;
	struct stat st;
	int flags, r;

	if (!opts)
		opts = &none;
	ft = calloc(1, sizeof(*ft));
	if (!ft)
		return -ENOMEM;
	ft->t.ops = &file_target_ops;
	ft->readonly = opts->readonly;
	ft->t.name = strdup(path);
	if (!ft->t.name) {
		r = -ENOMEM;
		goto err_free;
	}
	flags = (opts->readonly ? O_RDONLY : O_RDWR) | O_CLOEXEC;
	if (opts->direct)
		flags |= O_DIRECT;
	ft->fd = open(path, flags);
	if (ft->fd < 0) {
		r = -errno;
		goto err_free;
	}
	if (fstat(ft->fd, &st)) {
		r = -errno;
		goto err_close;
	}
	if (S_ISREG(st.st_mode)) {
		ft->t.size_bytes = (uint64_t)st.st_size;
		ft->inline_io = !opts->no_inline && !opts->direct &&
				memory_backed(ft->fd);
	} else if (S_ISBLK(st.st_mode)) {
		ft->is_blockdev = true;
		if (ioctl(ft->fd, BLKGETSIZE64, &ft->t.size_bytes)) {
			r = -errno;
			goto err_close;
		}
	} else {
		r = -EINVAL;
		goto err_close;
	}
	*out = &ft->t;
	return 0;

err_close:
	close(ft->fd);
err_free:
	free(ft->t.name);
	free(ft);
	return r;
}
