/* SPDX-License-Identifier: MIT */
/*
 * bufcache.h - a worker's cache of page-aligned payload buffers, one free
 * list per power-of-two size class from 4 KiB to the 32 MiB maximum.
 * Owned and used by one worker thread only.
 */
#ifndef BIONBD_BUFCACHE_H
#define BIONBD_BUFCACHE_H

#include <stddef.h>
#include <stdint.h>

#define BUF_MIN_SHIFT 12
#define BUF_MAX_SHIFT 25
#define BUF_CLASSES (BUF_MAX_SHIFT - BUF_MIN_SHIFT + 1)

struct buf_cache {
	void *free[BUF_CLASSES]; /* linked through the first word */
	unsigned int nr[BUF_CLASSES];
};

/* Bytes of a buffer of class @cls. */
static inline size_t buf_class_bytes(unsigned int cls)
{
	return (size_t)1 << (cls + BUF_MIN_SHIFT);
}

/**
 * buf_get - a buffer of at least @len bytes (<= 2^BUF_MAX_SHIFT)
 * @cls: receives its class, for buf_put
 * Returns NULL when out of memory.
 */
void *buf_get(struct buf_cache *bc, uint32_t len, unsigned int *cls);

/** buf_put - give back a buffer from buf_get. */
void buf_put(struct buf_cache *bc, void *p, unsigned int cls);

/** buf_cache_drain - free every cached buffer. */
void buf_cache_drain(struct buf_cache *bc);

#endif /* BIONBD_BUFCACHE_H */
