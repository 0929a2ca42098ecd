/* SPDX-License-Identifier: MIT */
/*
 * bufcache.h - payload buffers: one cache per worker (one free list per
 * power-of-two size class from 4 KiB to the 32 MiB maximum, used by that
 * worker's thread only), under one process-wide budget for the bytes all
 * caches hold (struct buf_pool, --memory).
 *
 * Why both: a buffer that goes back to the system and is mapped again costs
 * two system calls and a page fault per page, which at 1 MiB and queue
 * depth 8 and more was most of a request's time; a cache without a budget
 * kept hundreds of megabytes after one burst.  Buffers are mapped
 * (mmap), so what a cache gives back really leaves the process, and a
 * worker trims its cache once it has been idle a while (worker.c).
 */
#ifndef BIONBD_BUFCACHE_H
#define BIONBD_BUFCACHE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define BUF_MIN_SHIFT 12
#define BUF_MAX_SHIFT 25
#define BUF_CLASSES (BUF_MAX_SHIFT - BUF_MIN_SHIFT + 1)
/* What an idle worker keeps cached (worker.c trims down to it). */
#define BUF_IDLE_KEEP_BYTES (8u << 20)

/* Shared by every worker's cache. */
struct buf_pool {
	size_t budget_bytes; /* cached bytes allowed, all caches together */
	atomic_size_t cached_bytes;
};

struct buf_cache {
	struct buf_pool *pool;
	void *free[BUF_CLASSES]; /* linked through the first word */
	unsigned int nr[BUF_CLASSES];
	size_t cached_bytes; /* this cache's share of pool->cached_bytes */
	uint64_t gets; /* buffers handed out, so an idle cache can be seen */
};

/* Bytes of a buffer of class @cls. */
static inline size_t buf_class_bytes(unsigned int cls)
{
	return (size_t)1 << (cls + BUF_MIN_SHIFT);
}

/* The class of a buffer of @len bytes (<= 2^BUF_MAX_SHIFT). */
static inline unsigned int buf_class_of(uint32_t len)
{
	unsigned int shift = BUF_MIN_SHIFT;

	while ((1u << shift) < len)
		shift++;
	return shift - BUF_MIN_SHIFT;
}

/* Bytes buf_get() takes for @len: what in-flight limits count. */
static inline size_t buf_bytes_for(uint32_t len)
{
	return buf_class_bytes(buf_class_of(len));
}

/**
 * buf_get - a page-aligned buffer of at least @len bytes
 * (<= 2^BUF_MAX_SHIFT)
 * @cls: receives its class, for buf_put
 * Returns NULL when out of memory.
 */
void *buf_get(struct buf_cache *bc, uint32_t len, unsigned int *cls);

/** buf_put - give back a buffer: cached if the budget has room, else freed. */
void buf_put(struct buf_cache *bc, void *p, unsigned int cls);

/** buf_cache_trim - free cached buffers, largest first, down to @keep_bytes. */
void buf_cache_trim(struct buf_cache *bc, size_t keep_bytes);

/** buf_cache_drain - free every cached buffer. */
void buf_cache_drain(struct buf_cache *bc);

#endif /* BIONBD_BUFCACHE_H */
