/* SPDX-License-Identifier: MIT */
/*
 * bio.h - the bio core: a userspace copy of the Linux block layer's struct bio.
 *
 * A bio describes one I/O on a range of a target: an op (read, write, flush,
 * discard, write-zeroes, cache, extents), a starting sector and a byte count,
 * and for data ops a vector of memory segments.  The iterator (bi_iter) is
 * what moves: clones and splits copy the iterator and share the vector, so
 * cutting a 32 MiB request at every chunk boundary copies neither data nor
 * vectors.
 *
 * Lifetime uses two counters, as the kernel does: __bi_cnt (bio_get/bio_put;
 * the last put frees the bio) and __bi_remaining (bio_chain adds one per
 * chained child; the bio's end_io runs when its own I/O and every child
 * are done).  Completion always goes through bio_endio(); nobody calls
 * bi_end_io directly.
 *
 * Threading: a bio completes on the thread that owns the ioq it was submitted
 * on (see ioq.h).  The counters are atomic so that chains spanning threads
 * stay correct, but nothing else in a bio is locked.
 */
#ifndef BIONBD_BIO_H
#define BIONBD_BIO_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef uint64_t sector_t;

#define SECTOR_SHIFT 9
#define SECTOR_SIZE (1u << SECTOR_SHIFT)
#define BIO_PAGE_SIZE 4096u

/*
 * One contiguous piece of memory.  bv_page is the page-aligned address that
 * contains the segment's first byte; the segment may run on across following
 * pages, so one contiguous NBD buffer is always one segment.  A bvec made by
 * the iterator (bio_iter_iovec, bio_for_each_segment) keeps bv_page and
 * grows bv_offset, which may then exceed a page: use bvec_virt() for the
 * address.
 */
struct bio_vec {
	void *bv_page;
	unsigned int bv_len;
	unsigned int bv_offset;
};

/*
 * Position inside a bio.  bi_done counts the bytes this iterator has been
 * advanced since the top-level bio was built; splits inherit it, so any piece
 * knows where it lies in the original request (extents use that to map member
 * answers back to the caller's range).
 */
struct bvec_iter {
	sector_t bi_sector;
	uint32_t bi_size; /* residual bytes */
	uint32_t bi_idx; /* current index into bi_io_vec */
	uint32_t bi_bvec_done; /* bytes done in bi_io_vec[bi_idx] */
	uint64_t bi_done;
};

/* Ops: the low bits of bi_opf.  Odd ops write (as in the kernel). */
enum req_op {
	REQ_OP_READ = 0,
	REQ_OP_WRITE = 1,
	REQ_OP_FLUSH = 2,
	REQ_OP_DISCARD = 3,
	REQ_OP_CACHE = 4, /* readahead hint; completes when queued */
	REQ_OP_WRITE_ZEROES = 5,
	REQ_OP_EXTENTS = 6, /* report allocation of the range in bi_ext; a
			     * target may report a prefix only (completing
			     * the rest unreported) to bound its work */
	REQ_OP_LAST,
};

#define REQ_OP_BITS 8
#define REQ_OP_MASK ((1u << REQ_OP_BITS) - 1)

/* Flags: the high bits of bi_opf. */
enum req_flag {
	REQ_FUA = 1u << REQ_OP_BITS, /* write: durable before completion */
	REQ_NOUNMAP = 1u << (REQ_OP_BITS + 1), /* write-zeroes: keep allocated */
	REQ_NOFALLBACK = 1u << (REQ_OP_BITS + 2), /* write-zeroes: fail with
						   * -EOPNOTSUPP rather than
						   * write zeroes slowly */
	/*
	 * The submitter is an event loop serving other clients too: the data
	 * copy must not run on its thread.  Targets that would do the I/O
	 * inline hand it to their queue instead, and io_uring punts it to its
	 * async workers even when the page cache could serve it at once, so
	 * the pieces of one large request run in parallel on other cores.
	 */
	REQ_ASYNC = 1u << (REQ_OP_BITS + 3),
};

/* Extent flags, equal to NBD's base:allocation bits. */
#define BIO_EXT_HOLE 1u
#define BIO_EXT_ZERO 2u

struct bio_extent {
	uint64_t offset; /* bytes from the start of the top-level bio */
	uint64_t length;
	uint32_t flags;
};

/*
 * Extents a REQ_OP_EXTENTS bio collects from file members before the rest
 * of its range goes unreported.  Each costs hole lookups on the submitting
 * thread, and memory until the answer is sent: a fragmented file must not
 * make one request cost seconds and megabytes: 256 cost ~0.6 ms on tmpfs,
 * so the 256 requests a connection may have in flight take a worker
 * ~0.2 s, not the ~9 s they took for 64 MiB of 4K data and holes.  An
 * answer may cover a prefix (NBD's BLOCK_STATUS may; the client asks
 * again where it ends).
 */
#define BIO_EXTENTS_MAX 256u

/*
 * Where REQ_OP_EXTENTS bios put their answer.  Owned by the submitter; every
 * piece of a split extents bio appends to the same list, in any order.
 */
struct bio_extents {
	struct bio_extent *v;
	size_t nr;
	size_t cap;
	/* Enough once there are this many (0: BIO_EXTENTS_MAX); REQ_ONE: 1. */
	size_t max;
	/*
	 * A piece stopped short (bio_extents_full): a gap after it ends the
	 * answer, where otherwise a gap is an engine bug.
	 */
	bool cut;
};

static inline bool bio_extents_full(const struct bio_extents *ext)
{
	return ext->nr >= (ext->max ? ext->max : BIO_EXTENTS_MAX);
}

struct bio;
struct io_stats;
typedef void bio_end_io_t(struct bio *bio);

/* bi_flags */
enum {
	BIO_CHAIN = 1u << 0, /* __bi_remaining is live */
	BIO_CLONED = 1u << 1, /* shares another bio's vector */
	BIO_EXT_VEC = 1u << 2, /* bi_io_vec was allocated apart */
	BIO_NO_ACCT = 1u << 3, /* not counted below (stats.h): a part of a
				* bio that is counted already */
};

#define BIO_INLINE_VECS 4

struct bio {
	struct bio *bi_next; /* free for the current owner's queues */
	unsigned int bi_opf;
	unsigned int bi_flags;
	int bi_status; /* 0 or -errno; the first error wins */
	struct bvec_iter bi_iter;
	atomic_int __bi_remaining;
	atomic_int __bi_cnt;
	bio_end_io_t *bi_end_io;
	void *bi_private;
	struct bio_extents *bi_ext; /* REQ_OP_EXTENTS only */
	/*
	 * Accounting (stats.h): set by the target that counts the bio (a
	 * member file), ended by bio_endio when the bio completes.
	 */
	struct io_stats *bi_acct;
	uint64_t bi_acct_start;
	uint32_t bi_acct_bytes;
	/*
	 * Tracing (trace.h): the request's sequence number, 0 when it is not
	 * traced; clones and splits inherit it.  The member a traced bio
	 * reaches keeps here what its completion event reports.
	 */
	uint32_t bi_trace_obj; /* the member's trace id, 0 until issued */
	uint32_t bi_trace_bytes;
	uint64_t bi_trace;
	uint64_t bi_trace_t0;
	uint64_t bi_trace_off;
	unsigned short bi_vcnt;
	unsigned short bi_max_vecs;
	struct bio_vec *bi_io_vec;
	struct bio_vec bi_inline_vecs[BIO_INLINE_VECS];
};

static inline enum req_op bio_op(const struct bio *bio)
{
	return (enum req_op)(bio->bi_opf & REQ_OP_MASK);
}

/* Does @op change data (write, discard, write-zeroes: the odd ones)? */
static inline bool op_is_write(enum req_op op)
{
	return op & 1;
}

/* READ (0) or WRITE (1): the direction data moves, for data ops. */
static inline int bio_data_dir(const struct bio *bio)
{
	return op_is_write(bio_op(bio));
}

static inline bool bio_has_data(const struct bio *bio)
{
	enum req_op op = bio_op(bio);

	return (op == REQ_OP_READ || op == REQ_OP_WRITE) &&
	       bio->bi_iter.bi_size;
}

static inline unsigned int bio_sectors(const struct bio *bio)
{
	return bio->bi_iter.bi_size >> SECTOR_SHIFT;
}

static inline sector_t bio_end_sector(const struct bio *bio)
{
	return bio->bi_iter.bi_sector + bio_sectors(bio);
}

static inline uint64_t bio_offset_bytes(const struct bio *bio)
{
	return bio->bi_iter.bi_sector << SECTOR_SHIFT;
}

/* The segment the iterator is in, cut down to what remains of the bio. */
static inline struct bio_vec bvec_iter_bvec(const struct bio_vec *vec,
					    struct bvec_iter iter)
{
	const struct bio_vec *bv = &vec[iter.bi_idx];
	unsigned int left = bv->bv_len - iter.bi_bvec_done;
	struct bio_vec r = {
		.bv_page = bv->bv_page,
		.bv_offset = bv->bv_offset + iter.bi_bvec_done,
		.bv_len = left < iter.bi_size ? left : iter.bi_size,
	};
	return r;
}

void bvec_iter_advance(const struct bio_vec *vec, struct bvec_iter *iter,
		       unsigned int bytes);

#define bio_iter_iovec(bio, iter) bvec_iter_bvec((bio)->bi_io_vec, (iter))

/**
 * bio_for_each_segment - walk the segments a bio has left to do
 * @bvl: a struct bio_vec filled in for each step (a copy, trimmed to the bio)
 * @bio: the bio; not changed
 * @iter: a struct bvec_iter used as the cursor
 */
#define bio_for_each_segment(bvl, bio, iter)                                   \
	for (iter = (bio)->bi_iter;                                            \
	     (iter).bi_size && ((bvl = bio_iter_iovec((bio), (iter))), 1);     \
	     bvec_iter_advance((bio)->bi_io_vec, &(iter), (bvl).bv_len))

/* The current segment's address, as the kernel's bio_data() after kmap. */
static inline void *bvec_virt(const struct bio_vec *bv)
{
	return (char *)bv->bv_page + bv->bv_offset;
}

static inline void *bio_page(const struct bio *bio)
{
	return bio_iter_iovec(bio, bio->bi_iter).bv_page;
}

static inline unsigned int bio_offset(const struct bio *bio)
{
	return bio_iter_iovec(bio, bio->bi_iter).bv_offset;
}

static inline unsigned int bio_cur_bytes(const struct bio *bio)
{
	return bio_has_data(bio) ? bio_iter_iovec(bio, bio->bi_iter).bv_len :
				   bio->bi_iter.bi_size;
}

static inline unsigned int bio_cur_sectors(const struct bio *bio)
{
	return bio_cur_bytes(bio) >> SECTOR_SHIFT;
}

static inline void *bio_data(const struct bio *bio)
{
	if (!bio_has_data(bio))
		return NULL;
	return (char *)bio_page(bio) + bio_offset(bio);
}

/**
 * bio_alloc - get a bio from this thread's pool
 * @nr_vecs: segments the caller will add (up to UINT16_MAX, the size of
 *           bi_max_vecs; more than BIO_INLINE_VECS costs one extra
 *           allocation)
 * @opf: op and flags
 *
 * The bio starts with one reference (the caller's), bi_status 0, an empty
 * vector and sector 0.  Any thread may call it; the pool is per thread and a
 * bio may be freed on another thread than the one that allocated it.
 *
 * Returns: the bio, or NULL when out of memory or @nr_vecs > UINT16_MAX.
 */
struct bio *bio_alloc(unsigned int nr_vecs, unsigned int opf);

/**
 * bio_add_buf - append a contiguous buffer as one segment
 * @bio: a bio that is not a clone and not yet submitted
 * @buf: the data; the caller keeps owning it and keeps it alive until the
 *       bio's end_io has run
 * @len: bytes, > 0
 *
 * Returns: 0, or -EINVAL when the vector is full or bi_size would overflow.
 */
int bio_add_buf(struct bio *bio, void *buf, unsigned int len);

/** bio_get - take a reference; pairs with bio_put. */
static inline void bio_get(struct bio *bio)
{
	atomic_fetch_add_explicit(&bio->__bi_cnt, 1, memory_order_relaxed);
}

/** bio_put - drop a reference; the last one returns the bio to a pool. */
void bio_put(struct bio *bio);

/**
 * bio_clone - a new bio that describes the same I/O and shares @src's vector
 *
 * The clone must not outlive @src's data or vector (chain it to @src, or
 * otherwise complete it first).  Returns NULL when out of memory.
 */
struct bio *bio_clone(struct bio *src);

/**
 * bio_advance - move a bio's iterator forward by @bytes (no I/O happens)
 */
void bio_advance(struct bio *bio, unsigned int bytes);

/**
 * bio_split - cut the first @sectors off @bio
 * @bio: the bio to split; afterwards it describes what follows the split
 * @sectors: > 0 and < bio_sectors(@bio)
 *
 * O(1) in data and vectors: the split is a clone whose iterator stops after
 * @sectors; @bio's iterator moves past them.  The caller owns the split and
 * normally chains it to @bio.  Returns NULL when out of memory.
 */
struct bio *bio_split(struct bio *bio, unsigned int sectors);

/**
 * bio_chain - make @parent's completion wait for @child
 *
 * @child's end_io and private are taken over; when it completes its status
 * passes to @parent (if @parent has none yet) and the child is put.
 */
void bio_chain(struct bio *child, struct bio *parent);

/**
 * bio_endio - report that @nbytes of @bio are done
 * @bio: the bio
 * @nbytes: bytes completed from the iterator's position on
 * @error: 0, or a -errno that ends the whole bio (first error wins)
 *
 * Partial completion: without an error, the iterator moves by @nbytes and the
 * bio completes only when bi_size reaches zero, so a short read can simply
 * be resubmitted.  On completion the bio waits for chained children; then its
 * end_io runs, and walking up a chain of parents is a loop, not recursion.
 * Runs end_io on the calling thread.
 */
void bio_endio(struct bio *bio, unsigned int nbytes, int error);

/** bio_io_error - end the rest of @bio with @error. */
static inline void bio_io_error(struct bio *bio, int error)
{
	bio_endio(bio, bio->bi_iter.bi_size, error);
}

/**
 * bio_extents_add - append an extent, merging with the last one if adjacent
 * Returns: 0 or -ENOMEM.
 */
int bio_extents_add(struct bio_extents *ext, uint64_t offset, uint64_t length,
		    uint32_t flags);

/**
 * bio_extents_finish - sort by offset and merge neighbours with equal flags
 * (pieces of a split bio append out of order).
 */
void bio_extents_finish(struct bio_extents *ext);

void bio_extents_free(struct bio_extents *ext);

/**
 * bio_pool_drain - free this thread's cached bios (at thread exit; optional,
 * a thread-exit destructor does it too)
 */
void bio_pool_drain(void);

#endif /* BIONBD_BIO_H */
