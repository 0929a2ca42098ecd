// SPDX-License-Identifier: MIT
/*
 * file.c - the file target: one regular file or block device as a target.
 * Its I/O goes to the current thread's ioq (io_uring or the thread pool),
 * or is done inline for memory-backed files (see ioq.h); the I/O itself is
 * fileio.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "internal.h"

/*
 * The kernel reports a failed writeback once to each open file, at its
 * next fdatasync (or RWF_DSYNC write), and forgets the pages: that one
 * error may be all anyone learns of writes acknowledged long before.
 * Flushes sync a descriptor of their own (sync_fd), so no FUA write of
 * another client takes that report from them; and once a flush failed,
 * no later one may succeed: the member fails every flush from then on
 * (as qemu does), and a mirror takes the member out at the first.
 */
void file_report_error(struct file_target *ft, const struct bio *bio, int err)
{
	target_report_error(&ft->t, bio, err);
	/* Without a descriptor of their own, a FUA write took the report. */
	if ((bio_op(bio) == REQ_OP_FLUSH ||
	     (ft->sync_fd < 0 && (bio->bi_opf & REQ_FUA) && err == -EIO)) &&
	    !atomic_exchange(&ft->sync_failed, true))
		target_notice(TARGET_NOTICE_ERROR,
			      "member %s: a flush failed (%s): writes before it "
			      "may not have reached storage; every flush fails "
			      "with EIO from now on (restart the server once "
			      "the member is checked)",
			      ft->t.name, strerror(-err));
}

/*
 * Trim and zero on a memory-backed member run on the worker like its
 * copies, and the kernel frees, or allocates and clears, every page of the
 * range within the one call: a 256 MiB zero held every client of the
 * worker for a second.  So under a budget (ioq_set_inline_budget) they go
 * like copies, charged by length, a piece of at most this much a period,
 * the rest waiting its turn behind the others.  Not a fast zero: it is
 * quick or refused, and a refusal must come before anything changed.
 */
#define FILE_RANGE_PIECE (256u << 10)

static bool file_in_pieces(const struct ioq *q, const struct bio *bio)
{
	return q->inline_budget &&
	       (bio_op(bio) == REQ_OP_DISCARD ||
		bio_op(bio) == REQ_OP_WRITE_ZEROES) &&
	       !(bio->bi_opf & REQ_NOFALLBACK);
}

size_t file_inline_cost(const struct ioq *q, const struct bio *bio)
{
	if (bio_has_data(bio))
		return bio->bi_iter.bi_size;
	if (!file_in_pieces(q, bio))
		return 0; /* a flush, a fast zero: no copy to speak of */
	return bio->bi_iter.bi_size < FILE_RANGE_PIECE ? bio->bi_iter.bi_size :
							 FILE_RANGE_PIECE;
}

void file_inline(struct file_target *ft, struct ioq *q, struct bio *bio)
{
	int r;

	if (file_in_pieces(q, bio) && bio->bi_iter.bi_size > FILE_RANGE_PIECE) {
		struct bvec_iter whole = bio->bi_iter;

		bio->bi_iter.bi_size = FILE_RANGE_PIECE;
		r = file_do_sync(ft, bio);
		bio->bi_iter = whole;
		if (!r) {
			bio_advance(bio, FILE_RANGE_PIECE);
			ioq_inline_later(q, ft, bio);
			return;
		}
	} else {
		r = file_do_sync(ft, bio);
	}
	if (r)
		file_report_error(ft, bio, r);
	ioq_defer_end(q, bio, r);
}

static void file_submit(struct target *t, struct bio *bio)
{
	struct file_target *ft = to_file_target(t);
	struct ioq *q;
	int r;

	file_acct_start(ft, bio);
	switch (bio_op(bio)) {
	case REQ_OP_EXTENTS:
		r = file_extents(ft, bio);
		if (r)
			target_report_error(t, bio, r);
		bio_endio(bio, bio->bi_iter.bi_size, r);
		return;
	case REQ_OP_CACHE:
		/*
		 * Only a hint.  A memory-backed member holds every page
		 * already.  On another, the kernel reads the uncached pages in
		 * the thread that asks, and waits whenever the disk's queue is
		 * full: 256 hints held a worker, and every client on it, for
		 * up to a second.  So the backend asks off the worker (the
		 * thread pool, io_uring's async workers; file_cache_bytes),
		 * a few at a time: past IOQ_MAX_HINTS a hint is answered
		 * unheeded rather than queued ahead of anyone's reads.
		 */
		q = ioq_current();
		if (ft->inline_io || !q || q->hints >= IOQ_MAX_HINTS) {
			bio_endio(bio, bio->bi_iter.bi_size, 0);
			return;
		}
		q->ops->submit(q, ft, bio);
		return;
	default:
		break;
	}
	if (unlikely(ft->readonly && op_is_write(bio_op(bio)))) {
		bio_io_error(bio, -EPERM);
		return;
	}
	if (unlikely(bio_op(bio) == REQ_OP_FLUSH &&
		     atomic_load_explicit(&ft->sync_failed,
					  memory_order_relaxed))) {
		bio_io_error(bio, -EIO);
		return;
	}
	/* Trim and zero may punch a hole: file_dense learns it anew. */
	if (bio_op(bio) == REQ_OP_DISCARD || bio_op(bio) == REQ_OP_WRITE_ZEROES)
		atomic_store_explicit(&ft->dense, false, memory_order_relaxed);
	q = ioq_current();
	if (unlikely(!q)) {
		bio_io_error(bio, -ENXIO);
		return;
	}
	if (ft->inline_io && !(bio->bi_opf & REQ_ASYNC)) {
		bool copy = bio_has_data(bio);

		if (copy && blk_plug_add(t, bio))
			return;
		if (!ioq_inline_now(q, file_inline_cost(q, bio)))
			ioq_inline_later(q, ft, bio);
		else
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
 * preadv/pwritev2, up to the queue's inline budget; a run that finds the
 * budget spent waits for the next reap period, bio by bio.  Anything short
 * of complete success is redone bio by bio, which finds the error (and
 * reports it with the right offset), the end of file or the EINTR;
 * rewriting the same data is harmless.
 */
static void file_unplug(struct target *t, struct bio **bios, unsigned int nr)
{
	struct file_target *ft = to_file_target(t);
	struct ioq *q = ioq_current();
	struct iovec iov[FILE_MERGE_IOV];
	size_t cap = ioq_inline_cap(q);
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
		while (cnt && j < nr && (!cap || bytes < cap) &&
		       bio_op(bios[j]) == bio_op(first) &&
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
		if (!ioq_inline_now(q, cnt ? bytes : first->bi_iter.bi_size)) {
			for (; i < j; i++)
				ioq_inline_later(q, ft, bios[i]);
			continue;
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

	if (ft->sync_fd >= 0)
		close(ft->sync_fd);
	close(ft->fd);
	io_stats_destroy(ft->stats);
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

/* Hole lookups between two looks at whether a sparse file filled up. */
#define FILE_DENSE_RECHECK 1024u

/*
 * Whether the file has no hole at all (every block allocated: tmpfs and
 * ramfs count no metadata in st_blocks), so that a sendfile read's hole
 * lookup can be skipped: the lseek was a tenth of the CPU a 1 MiB read
 * costs the server.  Learnt on the first lookup and again every
 * FILE_DENSE_RECHECK lookups while the file is sparse (written full
 * since); forgotten when this target trims or zeroes.  A hole punched
 * behind the server's back is then sent as data: zeros, which the NBD
 * spec allows for any hole.
 */
static bool file_dense(struct file_target *ft)
{
	struct stat st;

	if (atomic_load_explicit(&ft->dense, memory_order_relaxed))
		return true;
	if (atomic_fetch_add_explicit(&ft->dense_looks, 1,
				      memory_order_relaxed) %
	    FILE_DENSE_RECHECK)
		return false;
	if (fstat(ft->fd, &st) ||
	    (uint64_t)st.st_blocks * 512 < (uint64_t)st.st_size)
		return false;
	atomic_store_explicit(&ft->dense, true, memory_order_relaxed);
	return true;
}

/*
 * Only memory-backed files: sendfile from a file on a disk would block the
 * caller's event loop on the disk whenever the page is not cached.
 */
static int file_iomap(struct target *t, uint64_t off, uint64_t len,
		      unsigned int flags, struct target_iomap *m)
{
	struct file_target *ft = to_file_target(t);
	off_t data;

	if (!ft->inline_io)
		return -EOPNOTSUPP;
	*m = (struct target_iomap){ .fd = ft->fd, .file_offset = off,
				    .length = len, .src = t };
	/* A member that must not be short keeps its end check below. */
	if (!(flags & TARGET_IOMAP_HOLE) || (!ft->eof_error && file_dense(ft)))
		return 0;
	/*
	 * One lseek, and only SEEK_DATA: it stops at the first page with
	 * data, where SEEK_HOLE from inside data walks the file's pages up
	 * to the next hole, however far.  ENXIO: no data from @off to EOF.
	 */
	data = lseek(ft->fd, (off_t)off, SEEK_DATA);
	if (data < 0 && errno == ENXIO) {
		struct stat st;

		/*
		 * No data up to the end: a hole, unless the end comes before
		 * the range does and must not (a member cut short).
		 */
		if (ft->eof_error &&
		    (fstat(ft->fd, &st) || (uint64_t)st.st_size < off + len))
			return -EIO;
		m->hole = true;
	} else if (data > (off_t)off) {
		m->hole = true;
		if ((uint64_t)data - off < len)
			m->length = (uint64_t)data - off;
	}
	return 0;
}

static bool file_lost(struct target *t)
{
	return atomic_load_explicit(&to_file_target(t)->sync_failed,
				    memory_order_relaxed);
}

const struct target_ops file_target_ops = {
	.submit = file_submit,
	.destroy = file_destroy,
	.unplug = file_unplug,
	.iomap = file_iomap,
	.lost = file_lost,
};

/*
 * A second open file of what @fd (opened from @path, @st) is, for flushes:
 * through /proc/self/fd (the same file for sure, even renamed or deleted
 * since), else @path again if it is still that file; -1 when neither
 * works, and flushes then sync @fd (a FUA write may take a writeback
 * error from them, as before sync_fd).
 */
static int reopen(int fd, const char *path, const struct stat *st)
{
	struct stat again;
	char self[64];
	int r;

	snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	r = open(self, O_RDWR | O_CLOEXEC);
	if (r >= 0)
		return r;
	r = open(path, O_RDWR | O_CLOEXEC);
	if (r >= 0 && (fstat(r, &again) || again.st_dev != st->st_dev ||
		       again.st_ino != st->st_ino || again.st_rdev != st->st_rdev)) {
		close(r);
		r = -1;
	}
	return r;
}

void file_target_account(struct target *t,
			 const struct file_target_opts *opts)
{
	struct file_target *ft = to_file_target(t);

	/* Without memory for it the member is served uncounted. */
	if (opts->stats_parent && !ft->stats)
		ft->stats = io_stats_create(t->name, opts->stats_parent);
	if (opts->trace_parent && !t->trace_id)
		t->trace_id = trace_obj_add(TRACE_OBJ_MEMBER,
					    opts->trace_parent, t->name);
}

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
	ft->eof_error = opts->eof_error;
	ft->t.name = strdup(path);
	if (!ft->t.name) {
		r = -ENOMEM;
		goto err_free;
	}
	flags = (opts->readonly ? O_RDONLY : O_RDWR) | O_CLOEXEC;
	if (opts->direct)
		flags |= O_DIRECT;
	ft->sync_fd = -1;
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
	if (!opts->readonly)
		ft->sync_fd = reopen(ft->fd, path, &st);
	file_target_account(&ft->t, opts);
	*out = &ft->t;
	return 0;

err_close:
	close(ft->fd);
err_free:
	free(ft->t.name);
	free(ft);
	return r;
}
