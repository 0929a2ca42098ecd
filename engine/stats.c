// SPDX-License-Identifier: MIT
/*
 * stats.c - per-thread I/O counters (stats.h) and their sums.
 *
 * Each thread has a shard: for every statistics object it accounted
 * against (by id), one struct io_stats_snap of its own.  Only that thread
 * writes it, with relaxed atomic loads and stores (plain moves on the
 * machines we run on) so that a reader adding shards up under the
 * registry lock reads whole values.  The registry also knows every object
 * by id, so a thread that exits folds its counts into the objects
 * themselves.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <bionbd/stats.h>

#include "internal.h"

struct io_stats {
	unsigned int id;
	char *name;
	struct io_stats *parent;
	struct io_stats *children, **children_tail, *sibling;
	struct io_stats_snap retired; /* from threads that exited */
};

struct stats_shard {
	struct stats_shard *next, **pprev; /* the registry's list */
	unsigned int cap;
	struct io_stats_snap **slot; /* by id; NULL until first used */
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct stats_shard *shards;
static struct io_stats **by_id;
static unsigned int nr_ids;
static pthread_key_t shard_key;
static pthread_once_t shard_once = PTHREAD_ONCE_INIT;
static __thread struct stats_shard *my_shard;

static void snap_add(struct io_stats_snap *to, const struct io_stats_snap *from)
{
	for (unsigned int o = 0; o < REQ_OP_LAST; o++) {
		const struct io_stats_op *f = &from->op[o];
		struct io_stats_op *t = &to->op[o];

		t->requests += io_stats_read(&f->requests);
		t->bytes += io_stats_read(&f->bytes);
		t->lat_ns += io_stats_read(&f->lat_ns);
		for (unsigned int e = 0; e < IOSE_NR; e++)
			t->errors[e] += io_stats_read(&f->errors[e]);
		for (unsigned int b = 0; b < IO_STATS_BUCKETS; b++)
			t->hist[b] += io_stats_read(&f->hist[b]);
	}
	/* Net: starts less ends. */
	to->inflight += io_stats_read(&from->inflight);
}

static void shard_exit(void *arg)
{
	struct stats_shard *s = arg;

	pthread_mutex_lock(&reg_lock);
	for (unsigned int id = 0; id < s->cap; id++) {
		if (!s->slot[id])
			continue;
		if (id < nr_ids && by_id[id])
			snap_add(&by_id[id]->retired, s->slot[id]);
		free(s->slot[id]);
	}
	*s->pprev = s->next;
	if (s->next)
		s->next->pprev = s->pprev;
	pthread_mutex_unlock(&reg_lock);
	free(s->slot);
	free(s);
	my_shard = NULL;
}

static void shard_key_init(void)
{
	/* Failure only means a thread's counts are lost at its exit. */
	(void)pthread_key_create(&shard_key, shard_exit);
}

/* This thread's counters for @st, made on first use; NULL without memory. */
static __attribute__((noinline)) struct io_stats_snap *
slot_slow(struct io_stats *st)
{
	struct stats_shard *s = my_shard;
	struct io_stats_snap *snap = NULL;

	pthread_once(&shard_once, shard_key_init);
	pthread_mutex_lock(&reg_lock);
	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s)
			goto out;
		s->next = shards;
		if (shards)
			shards->pprev = &s->next;
		s->pprev = &shards;
		shards = s;
		my_shard = s;
		pthread_setspecific(shard_key, s);
	}
	if (st->id >= s->cap) {
		unsigned int cap = st->id + 16;
		struct io_stats_snap **v = realloc(s->slot, cap * sizeof(*v));

		if (!v)
			goto out;
		memset(v + s->cap, 0, (cap - s->cap) * sizeof(*v));
		s->slot = v;
		s->cap = cap;
	}
	if (!s->slot[st->id])
		s->slot[st->id] = calloc(1, sizeof(*snap));
	snap = s->slot[st->id];
out:
	pthread_mutex_unlock(&reg_lock);
	return snap;
}

static inline struct io_stats_snap *slot(struct io_stats *st)
{
	struct stats_shard *s = my_shard;

	if (likely(s && st->id < s->cap && s->slot[st->id]))
		return s->slot[st->id];
	return slot_slow(st);
}

uint64_t io_stats_start(struct io_stats *st)
{
	struct io_stats_snap *snap;

	if (!st || !(snap = slot(st)))
		return 0;
	io_stats_add(&snap->inflight, 1);
	return engine_now_ns();
}

static enum io_stats_err err_kind(int err)
{
	switch (err) {
	case -EIO: return IOSE_EIO;
	case -ENOSPC: case -EDQUOT: case -EFBIG: return IOSE_ENOSPC;
	case -EPERM: case -EROFS: return IOSE_EPERM;
	case -EINVAL: return IOSE_EINVAL;
	case -ENOMEM: return IOSE_ENOMEM;
	case -EOVERFLOW: return IOSE_EOVERFLOW;
	case -EOPNOTSUPP: return IOSE_ENOTSUP;
	case -ESHUTDOWN: return IOSE_ESHUTDOWN;
	default: return IOSE_OTHER;
	}
}

void io_stats_done(struct io_stats *st, enum req_op op, uint64_t bytes,
		   int err, uint64_t start)
{
	struct io_stats_snap *snap;
	struct io_stats_op *o;
	uint64_t ns, us;
	unsigned int b;

	if (!st || !start || !(snap = slot(st)))
		return;
	if (op >= REQ_OP_LAST) { /* not an I/O after all: only not in flight */
		io_stats_add(&snap->inflight, -1);
		return;
	}
	ns = engine_now_ns() - start;
	us = ns / 1000;
	b = us ? 64 - (unsigned int)__builtin_clzll(us) : 0;
	if (b >= IO_STATS_BUCKETS)
		b = IO_STATS_BUCKETS - 1;
	o = &snap->op[op];
	io_stats_add(&o->requests, 1);
	if (err)
		io_stats_add(&o->errors[err_kind(err)], 1);
	else
		io_stats_add(&o->bytes, bytes);
	io_stats_add(&o->lat_ns, ns);
	io_stats_add(&o->hist[b], 1);
	/* Last: a reader sees the start gone only with the counts in. */
	io_stats_add(&snap->inflight, -1);
}

struct io_stats *io_stats_create(const char *name, struct io_stats *parent)
{
	struct io_stats *st = calloc(1, sizeof(*st));
	struct io_stats **v;

	if (!st || !(st->name = strdup(name ? name : ""))) {
		free(st);
		return NULL;
	}
	pthread_mutex_lock(&reg_lock);
	v = realloc(by_id, (nr_ids + 1) * sizeof(*v));
	if (!v) {
		pthread_mutex_unlock(&reg_lock);
		free(st->name);
		free(st);
		return NULL;
	}
	by_id = v;
	st->id = nr_ids++;
	by_id[st->id] = st;
	st->children_tail = &st->children;
	st->parent = parent;
	if (parent) {
		*parent->children_tail = st;
		parent->children_tail = &st->sibling;
	}
	pthread_mutex_unlock(&reg_lock);
	return st;
}

void io_stats_destroy(struct io_stats *st)
{
	if (!st)
		return;
	pthread_mutex_lock(&reg_lock);
	by_id[st->id] = NULL;
	if (st->parent) {
		struct io_stats **pp = &st->parent->children;

		while (*pp != st)
			pp = &(*pp)->sibling;
		*pp = st->sibling;
		if (st->parent->children_tail == &st->sibling)
			st->parent->children_tail = pp;
	}
	/* Children outliving their parent become top objects. */
	for (struct io_stats *c = st->children; c; c = c->sibling)
		c->parent = NULL;
	pthread_mutex_unlock(&reg_lock);
	free(st->name);
	free(st);
}

const char *io_stats_name(const struct io_stats *st)
{
	return st->name;
}

void io_stats_snapshot(struct io_stats *st, struct io_stats_snap *out)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&reg_lock);
	snap_add(out, &st->retired);
	for (struct stats_shard *s = shards; s; s = s->next)
		if (st->id < s->cap && s->slot[st->id])
			snap_add(out, s->slot[st->id]);
	pthread_mutex_unlock(&reg_lock);
	/* A thread may have ended an I/O another one started (sendfile). */
	if ((int64_t)out->inflight < 0)
		out->inflight = 0;
}

unsigned int io_stats_children(struct io_stats *st, struct io_stats **out,
			       unsigned int max)
{
	unsigned int n = 0;

	pthread_mutex_lock(&reg_lock);
	for (struct io_stats *c = st->children; c; c = c->sibling, n++)
		if (n < max)
			out[n] = c;
	pthread_mutex_unlock(&reg_lock);
	return n;
}

uint64_t io_stats_percentile(const struct io_stats_op *o, double p)
{
	uint64_t total = 0, want, seen = 0;

	for (unsigned int b = 0; b < IO_STATS_BUCKETS; b++)
		total += o->hist[b];
	if (!total)
		return 0;
	want = (uint64_t)(p * (double)total);
	if (want >= total)
		want = total - 1;
	for (unsigned int b = 0; b < IO_STATS_BUCKETS; b++) {
		seen += o->hist[b];
		if (seen > want)
			return (1ull << b) * 1000; /* the bucket's upper edge */
	}
	return (1ull << (IO_STATS_BUCKETS - 1)) * 1000;
}

const char *io_stats_err_name(enum io_stats_err e)
{
	static const char *const names[IOSE_NR] = {
		"EIO", "ENOSPC", "EPERM", "EINVAL", "ENOMEM",
		"EOVERFLOW", "ENOTSUP", "ESHUTDOWN", "other",
	};

	return e < IOSE_NR ? names[e] : "other";
}
