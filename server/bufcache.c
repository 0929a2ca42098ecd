// SPDX-License-Identifier: MIT
/*
 * bufcache.c - per-worker payload buffers under one budget (bufcache.h).
 */
#include <sys/mman.h>

#include "bufcache.h"

static unsigned int buf_class_of(uint32_t len)
{
	unsigned int shift = BUF_MIN_SHIFT;

	while ((1u << shift) < len)
		shift++;
	return shift - BUF_MIN_SHIFT;
}

static void buf_unmap(void *p, unsigned int k)
{
	munmap(p, buf_class_bytes(k));
}

void *buf_get(struct buf_cache *bc, uint32_t len, unsigned int *cls)
{
	unsigned int k = buf_class_of(len);
	void *p = bc->free[k];

	*cls = k;
	bc->gets++;
	if (p) {
		bc->free[k] = *(void **)p;
		bc->nr[k]--;
		bc->cached_bytes -= buf_class_bytes(k);
		atomic_fetch_sub(&bc->pool->cached_bytes, buf_class_bytes(k));
		return p;
	}
	p = mmap(NULL, buf_class_bytes(k), PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

void buf_put(struct buf_cache *bc, void *p, unsigned int k)
{
	size_t n = buf_class_bytes(k);
	size_t was = atomic_fetch_add(&bc->pool->cached_bytes, n);

	if (was + n > bc->pool->budget_bytes) {
		atomic_fetch_sub(&bc->pool->cached_bytes, n);
		buf_unmap(p, k);
		return;
	}
	*(void **)p = bc->free[k];
	bc->free[k] = p;
	bc->nr[k]++;
	bc->cached_bytes += n;
}

void buf_cache_trim(struct buf_cache *bc, size_t keep_bytes)
{
	for (int k = BUF_CLASSES - 1; k >= 0 && bc->cached_bytes > keep_bytes;
	     k--) {
		while (bc->free[k] && bc->cached_bytes > keep_bytes) {
			void *p = bc->free[k];

			bc->free[k] = *(void **)p;
			bc->nr[k]--;
			bc->cached_bytes -= buf_class_bytes(k);
			atomic_fetch_sub(&bc->pool->cached_bytes,
					 buf_class_bytes(k));
			buf_unmap(p, (unsigned int)k);
		}
	}
}

void buf_cache_drain(struct buf_cache *bc)
{
	buf_cache_trim(bc, 0);
}
