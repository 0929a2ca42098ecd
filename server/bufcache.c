// SPDX-License-Identifier: MIT
/*
 * bufcache.c - per-worker payload buffers under one budget (bufcache.h).
 */
#include <sys/mman.h>

#include "bufcache.h"

/*
 * Buffers are mapped, not malloc'd, so AddressSanitizer would not see an
 * overrun past a request's length or a use of a cached buffer: poison what
 * no request owns.
 */
#if defined(__SANITIZE_ADDRESS__)
#define BUF_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BUF_ASAN 1
#endif
#endif
#ifdef BUF_ASAN
#include <sanitizer/asan_interface.h>
#define buf_poison(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define buf_unpoison(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define buf_poison(p, n) ((void)(p), (void)(n))
#define buf_unpoison(p, n) ((void)(p), (void)(n))
#endif

static void buf_unmap(void *p, unsigned int k)
{
	buf_unpoison(p, buf_class_bytes(k));
	munmap(p, buf_class_bytes(k));
}

/* The request owns @len bytes; the rest of the buffer is nobody's. */
static void *buf_hand_out(void *p, uint32_t len, unsigned int k)
{
	buf_unpoison(p, len);
	buf_poison((char *)p + len, buf_class_bytes(k) - len);
	return p;
}

void *buf_get(struct buf_cache *bc, uint32_t len, unsigned int *cls)
{
	unsigned int k = buf_class_of(len);
	void *p = bc->free[k];

	*cls = k;
	bc->gets++;
	if (p) {
		buf_unpoison(p, sizeof(void *));
		bc->free[k] = *(void **)p;
		bc->nr[k]--;
		bc->cached_bytes -= buf_class_bytes(k);
		atomic_fetch_sub(&bc->pool->cached_bytes, buf_class_bytes(k));
		return buf_hand_out(p, len, k);
	}
	p = mmap(NULL, buf_class_bytes(k), PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : buf_hand_out(p, len, k);
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
	buf_unpoison(p, sizeof(void *));
	*(void **)p = bc->free[k];
	/* A cached buffer is nobody's but for the free-list link. */
	buf_poison((char *)p + sizeof(void *), n - sizeof(void *));
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

			buf_unpoison(p, sizeof(void *));
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
