// SPDX-License-Identifier: MIT
/*
 * bio.c - bio allocation, iteration, clone/split/chain and completion.
 *
 * Bios come from a per-thread cache so that the request path never calls
 * malloc once a thread is warm.  A bio freed on another thread simply joins
 * that thread's cache: all bios are the same size, so no pool owns one.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define BIO_CACHE_MAX 4096

struct bio_cache {
	struct bio *free;
	unsigned int nr;
	bool registered;
};

static __thread struct bio_cache cache;
static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;

static void cache_drain(struct bio_cache *c)
{
	while (c->free) {
		struct bio *b = c->free;

		c->free = b->bi_next;
		free(b);
	}
	c->nr = 0;
}

static void cache_thread_exit(void *arg)
{
	struct bio_cache *c = arg;

	cache_drain(c);
	/*
	 * Destructors of other keys may still put or allocate bios on this
	 * thread.  Unregistered, puts go straight to free() and an
	 * allocation registers again, so that this destructor runs once
	 * more; left registered, those bios would sit in a pool nobody
	 * drains.
	 */
	c->registered = false;
}

static void cache_key_init(void)
{
	/* Failure only means cached bios leak at thread exit; keep going. */
	(void)pthread_key_create(&cache_key, cache_thread_exit);
}

void bio_pool_drain(void)
{
	cache_drain(&cache);
}

static struct bio *bio_cache_get(void)
{
	struct bio *b = cache.free;

	if (likely(b)) {
		cache.free = b->bi_next;
		cache.nr--;
		return b;
	}
	if (!cache.registered) {
		pthread_once(&cache_once, cache_key_init);
		pthread_setspecific(cache_key, &cache);
		cache.registered = true;
	}
	return malloc(sizeof(*b));
}

static void bio_cache_put(struct bio *b)
{
	if (cache.nr >= BIO_CACHE_MAX || !cache.registered) {
		free(b);
		return;
	}
	b->bi_next = cache.free;
	cache.free = b;
	cache.nr++;
}

static void bio_init(struct bio *bio, unsigned int opf)
{
	bio->bi_next = NULL;
	bio->bi_opf = opf;
	bio->bi_flags = 0;
	bio->bi_status = 0;
	memset(&bio->bi_iter, 0, sizeof(bio->bi_iter));
	atomic_init(&bio->__bi_remaining, 1);
	atomic_init(&bio->__bi_cnt, 1);
	bio->bi_end_io = NULL;
	bio->bi_private = NULL;
	bio->bi_ext = NULL;
	bio->bi_acct = NULL;
	bio->bi_trace = 0;
	bio->bi_trace_obj = 0;
	bio->bi_vcnt = 0;
	bio->bi_max_vecs = BIO_INLINE_VECS;
	bio->bi_io_vec = bio->bi_inline_vecs;
}

struct bio *bio_alloc(unsigned int nr_vecs, unsigned int opf)
{
	struct bio *bio;

	if (nr_vecs > UINT16_MAX)
		return NULL;
	bio = bio_cache_get();
	if (!bio)
		return NULL;
	bio_init(bio, opf);
	if (nr_vecs > BIO_INLINE_VECS) {
		bio->bi_io_vec = malloc(nr_vecs * sizeof(struct bio_vec));
		if (!bio->bi_io_vec) {
			bio_cache_put(bio);
			return NULL;
		}
		bio->bi_max_vecs = (unsigned short)nr_vecs;
		bio->bi_flags |= BIO_EXT_VEC;
	}
	return bio;
}

int bio_add_buf(struct bio *bio, void *buf, unsigned int len)
{
	uintptr_t addr = (uintptr_t)buf;
	struct bio_vec *bv;

	if ((bio->bi_flags & BIO_CLONED) || bio->bi_vcnt >= bio->bi_max_vecs ||
	    len == 0 || len > UINT32_MAX - bio->bi_iter.bi_size)
		return -EINVAL;
	bv = &bio->bi_io_vec[bio->bi_vcnt++];
	bv->bv_page = (void *)(addr & ~(uintptr_t)(BIO_PAGE_SIZE - 1));
	bv->bv_offset = (unsigned int)(addr & (BIO_PAGE_SIZE - 1));
	bv->bv_len = len;
	bio->bi_iter.bi_size += len;
	return 0;
}

void bio_put(struct bio *bio)
{
	if (atomic_fetch_sub_explicit(&bio->__bi_cnt, 1,
				      memory_order_acq_rel) != 1)
		return;
	if (bio->bi_flags & BIO_EXT_VEC)
		free(bio->bi_io_vec);
	bio_cache_put(bio);
}

void bvec_iter_advance(const struct bio_vec *vec, struct bvec_iter *iter,
		       unsigned int bytes)
{
	iter->bi_sector += bytes >> SECTOR_SHIFT;
	iter->bi_size -= bytes;
	iter->bi_done += bytes;
	bytes += iter->bi_bvec_done;
	while (bytes && bytes >= vec[iter->bi_idx].bv_len) {
		bytes -= vec[iter->bi_idx].bv_len;
		iter->bi_idx++;
	}
	iter->bi_bvec_done = bytes;
}

void bio_advance(struct bio *bio, unsigned int bytes)
{
	if (bytes > bio->bi_iter.bi_size)
		bytes = bio->bi_iter.bi_size;
	if (bio_op(bio) == REQ_OP_READ || bio_op(bio) == REQ_OP_WRITE) {
		bvec_iter_advance(bio->bi_io_vec, &bio->bi_iter, bytes);
		return;
	}
	/* No vector to walk: discard, write-zeroes, cache, extents. */
	bio->bi_iter.bi_sector += bytes >> SECTOR_SHIFT;
	bio->bi_iter.bi_size -= bytes;
	bio->bi_iter.bi_done += bytes;
}

struct bio *bio_clone(struct bio *src)
{
	struct bio *bio = bio_cache_get();

	if (!bio)
		return NULL;
	bio_init(bio, src->bi_opf);
	bio->bi_flags = BIO_CLONED;
	bio->bi_iter = src->bi_iter;
	bio->bi_io_vec = src->bi_io_vec;
	bio->bi_vcnt = src->bi_vcnt;
	bio->bi_max_vecs = src->bi_vcnt;
	bio->bi_ext = src->bi_ext;
	bio->bi_trace = src->bi_trace;
	return bio;
}

struct bio *bio_split(struct bio *bio, unsigned int sectors)
{
	struct bio *split = bio_clone(bio);

	if (!split)
		return NULL;
	split->bi_iter.bi_size = sectors << SECTOR_SHIFT;
	bio_advance(bio, split->bi_iter.bi_size);
	return split;
}

static void bio_set_status(struct bio *bio, int error)
{
	int zero = 0;

	/* First error wins, even when children end on several threads. */
	__atomic_compare_exchange_n(&bio->bi_status, &zero, error, false,
				    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

static void bio_chain_endio(struct bio *bio)
{
	/* Never called: bio_endio() walks chains itself. */
	(void)bio;
}

void bio_chain(struct bio *child, struct bio *parent)
{
	child->bi_private = parent;
	child->bi_end_io = bio_chain_endio;
	parent->bi_flags |= BIO_CHAIN;
	atomic_fetch_add_explicit(&parent->__bi_remaining, 1,
				  memory_order_relaxed);
}

static bool bio_remaining_done(struct bio *bio)
{
	if (!(bio->bi_flags & BIO_CHAIN))
		return true;
	return atomic_fetch_sub_explicit(&bio->__bi_remaining, 1,
					 memory_order_acq_rel) == 1;
}

void bio_endio(struct bio *bio, unsigned int nbytes, int error)
{
	if (error) {
		bio_set_status(bio, error);
	} else {
		bio_advance(bio, nbytes);
		if (bio->bi_iter.bi_size)
			return; /* partial: the submitter goes on with the rest */
	}

	for (;;) {
		struct bio *parent;

		if (!bio_remaining_done(bio))
			return;
		if (unlikely(bio->bi_acct)) {
			io_stats_done(bio->bi_acct, bio_op(bio),
				      bio->bi_acct_bytes, bio->bi_status,
				      bio->bi_acct_start);
			bio->bi_acct = NULL; /* a retry elsewhere counts anew */
		}
		if (unlikely(bio->bi_trace_obj)) {
			trace_bio_complete(bio);
			bio->bi_trace_obj = 0;
		}
		if (bio->bi_end_io != bio_chain_endio)
			break;
		parent = bio->bi_private;
		if (bio->bi_status)
			bio_set_status(parent, bio->bi_status);
		bio_put(bio);
		bio = parent;
	}
	if (bio->bi_end_io)
		bio->bi_end_io(bio);
}

int bio_extents_add(struct bio_extents *ext, uint64_t offset, uint64_t length,
		    uint32_t flags)
{
	struct bio_extent *last = ext->nr ? &ext->v[ext->nr - 1] : NULL;

	if (!length)
		return 0;
	if (last && last->flags == flags &&
	    last->offset + last->length == offset) {
		last->length += length;
		return 0;
	}
	if (ext->nr == ext->cap) {
		size_t cap = ext->cap ? ext->cap * 2 : 16;
		struct bio_extent *v = realloc(ext->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		ext->v = v;
		ext->cap = cap;
	}
	ext->v[ext->nr++] =
		(struct bio_extent){ .offset = offset, .length = length,
				     .flags = flags };
	return 0;
}

static int extent_cmp(const void *a, const void *b)
{
	const struct bio_extent *x = a, *y = b;

	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

void bio_extents_finish(struct bio_extents *ext)
{
	size_t i, out = 0;

	if (!ext->nr)
		return;
	qsort(ext->v, ext->nr, sizeof(ext->v[0]), extent_cmp);
	for (i = 1; i < ext->nr; i++) {
		struct bio_extent *last = &ext->v[out];

		if (last->flags == ext->v[i].flags &&
		    last->offset + last->length == ext->v[i].offset)
			last->length += ext->v[i].length;
		else
			ext->v[++out] = ext->v[i];
	}
	ext->nr = out + 1;
}

void bio_extents_free(struct bio_extents *ext)
{
	free(ext->v);
	ext->v = NULL;
	ext->nr = ext->cap = 0;
}
