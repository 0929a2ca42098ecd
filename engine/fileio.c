// SPDX-License-Identifier: MIT
/*
 * fileio.c - file I/O that every backend shares: iovecs from a bio, zero
 * fill past EOF, the write-zeroes fallback ladder, extents via SEEK_HOLE,
 * and the synchronous path that the thread pool and inline members run.
 *
 * Nothing here queues or completes a bio: the backends (uring.c,
 * threads.c) and the file target (file.c) call down into this file, and it
 * calls nothing above it.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

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
	bool fast = bio->bi_opf & REQ_NOFALLBACK;

	/* Discard is advisory: if the file cannot punch, leave the data. */
	if (bio_op(bio) == REQ_OP_DISCARD)
		return ZS_DONE;
	switch (step) {
	case ZS_PUNCH:
		return ZS_ZERO_RANGE;
	case ZS_ZERO_RANGE:
		if (nounmap)
			return fast ? ZS_PROBE_ALLOC : ZS_PUNCH_THEN_ALLOC;
		break;
	default:
		break;
	}
	return fast ? ZS_FAIL : ZS_WRITE;
}

enum zero_step zero_step_done(enum zero_step step)
{
	switch (step) {
	case ZS_PROBE_ALLOC:
		return ZS_PUNCH_THEN_ALLOC;
	case ZS_PUNCH_THEN_ALLOC:
		return ZS_ALLOC;
	default:
		return ZS_DONE;
	}
}

bool zero_unsupported(int err)
{
	/*
	 * What fallocate answers when a file system (or a block device
	 * driver) cannot do a mode: try the next step of the ladder rather
	 * than fail the bio.
	 */
	return err == -EOPNOTSUPP || err == -ENOTTY || err == -EINVAL ||
	       err == -ENODEV;
}

int zero_step_mode(enum zero_step step)
{
	switch (step) {
	case ZS_PUNCH:
	case ZS_PUNCH_THEN_ALLOC:
		return FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
	case ZS_ZERO_RANGE:
		return FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE;
	case ZS_PROBE_ALLOC:
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

		/*
		 * Enough (bio_extents_full): the rest of the range goes
		 * unreported.  The request's first piece answers at least
		 * its first extent, so every answer makes progress.
		 */
		if ((pos > start || base) && bio_extents_full(bio->bi_ext)) {
			bio->bi_ext->cut = true;
			break;
		}
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
	/*
	 * Bytes, not iter.bi_sector: a short transfer need not end on a
	 * sector (a member whose size is not a multiple of 512, a nearly
	 * full file system), and the sector would drop the remainder.
	 */
	off_t off = (off_t)bio_offset_bytes(bio);
	struct iovec iov[64];

	while (iter.bi_size) {
		unsigned int n = bio_iter_to_iovec(bio, iter, iov,
						   ARRAY_SIZE(iov));
		ssize_t r;

		r = write ? pwritev2(ft->fd, iov, (int)n, off, rwf) :
			    preadv(ft->fd, iov, (int)n, off);
		if (r < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		if (r == 0) {
			if (write || ft->eof_error)
				return -EIO;
			bio_iter_zero(bio, iter); /* past EOF reads as zeros */
			return 0;
		}
		/* Short I/O: go on from where it stopped. */
		bvec_iter_advance(bio->bi_io_vec, &iter, (unsigned int)r);
		off += r;
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
		if (r == 0) {
			step = zero_step_done(step);
			if (step == ZS_DONE)
				return 0;
			continue;
		}
		if (!zero_unsupported(-errno))
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
		return fdatasync(file_flush_fd(ft)) ? -errno : 0;
	case REQ_OP_CACHE: /* a hint: what the kernel makes of it is its own */
		(void)posix_fadvise(ft->fd, (off_t)bio_offset_bytes(bio),
				    file_cache_bytes(bio), POSIX_FADV_WILLNEED);
		return 0;
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
