// SPDX-License-Identifier: MIT
/*
 * bufcache.c - per-worker payload buffers by size class (bufcache.h).
 */
#include <stdlib.h>

#include "bufcache.h"

static unsigned int buf_class_of(uint32_t len)
{
	unsigned int shift = BUF_MIN_SHIFT;

	while ((1u << shift) < len)
		shift++;
	return shift - BUF_MIN_SHIFT;
}

void *buf_get(struct buf_cache *bc, uint32_t len, unsigned int *cls)
{
	unsigned int k = buf_class_of(len);
	void *p = bc->free[k];

	*cls = k;
	if (p) {
		bc->free[k] = *(void **)p;
		bc->nr[k]--;
		return p;
	}
	if (posix_memalign(&p, 4096, buf_class_bytes(k)))
		return NULL;
	return p;
}

void buf_put(struct buf_cache *bc, void *p, unsigned int k)
{
	/* Keep plenty of small buffers, a few big ones. */
	unsigned int keep = k <= 6 ? 64 : (k <= 10 ? 8 : 2);

	if (bc->nr[k] >= keep) {
		free(p);
		return;
	}
	*(void **)p = bc->free[k];
	bc->free[k] = p;
	bc->nr[k]++;
}

void buf_cache_drain(struct buf_cache *bc)
{
	for (unsigned int k = 0; k < BUF_CLASSES; k++) {
		while (bc->free[k]) {
			void *p = bc->free[k];

			bc->free[k] = *(void **)p;
			free(p);
		}
		bc->nr[k] = 0;
	}
}
