// SPDX-License-Identifier: MIT
/*
 * errtarget.c - an error-injecting target for faults that real files cannot
 * produce on demand (one member failing in the middle of a striped bio,
 * two members failing with different errors, a failing flush).
 */
#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <bionbd/bio.h>

#include "errtarget.h"

#define container_of(ptr, type, member)                                        \
	((type *)((char *)(ptr) - offsetof(type, member)))

struct err_rule_state {
	struct error_rule r;
	unsigned int seen; /* matching bios so far */
};

struct error_target {
	struct target t;
	struct target *below;
	pthread_mutex_t lock; /* rules may change while bios run */
	struct err_rule_state *rules;
	size_t nr_rules;
};

static inline struct error_target *to_err(struct target *t)
{
	return container_of(t, struct error_target, t);
}

static bool rule_matches(const struct error_rule *r, const struct bio *bio)
{
	uint64_t off = bio_offset_bytes(bio);
	uint64_t end = off + bio->bi_iter.bi_size;
	uint64_t rend = r->length ? r->offset + r->length : UINT64_MAX;

	if (r->op >= 0 && (enum req_op)r->op != bio_op(bio))
		return false;
	if (bio_op(bio) == REQ_OP_FLUSH)
		return true; /* a flush covers the whole target */
	return off < rend && end > r->offset;
}

/*
 * Returns the error to fail @bio with, or 0; *@before (with *@arg) is a
 * matching rule's call to make first.
 */
static int error_target_check(struct error_target *et, const struct bio *bio,
			      void (**before)(void *), void **arg)
{
	int err = 0;

	pthread_mutex_lock(&et->lock);
	for (size_t i = 0; i < et->nr_rules && !err; i++) {
		struct err_rule_state *s = &et->rules[i];
		unsigned int n;

		if (!rule_matches(&s->r, bio))
			continue;
		n = s->seen++;
		if (n < s->r.skip)
			continue;
		if (s->r.count && n - s->r.skip >= s->r.count)
			continue;
		err = s->r.error;
		if (s->r.before && !*before) {
			*before = s->r.before;
			*arg = s->r.arg;
		}
	}
	pthread_mutex_unlock(&et->lock);
	return err;
}

static void error_submit(struct target *t, struct bio *bio)
{
	struct error_target *et = to_err(t);
	void (*before)(void *) = NULL;
	void *arg = NULL;
	int err = error_target_check(et, bio, &before, &arg);

	if (before)
		before(arg);
	if (err) {
		target_report_error(t, bio, err);
		bio_io_error(bio, err);
		return;
	}
	submit_bio(et->below, bio);
}

static void error_destroy(struct target *t)
{
	struct error_target *et = to_err(t);

	target_destroy(et->below);
	pthread_mutex_destroy(&et->lock);
	free(et->rules);
	free(et->t.name);
	free(et);
}

static const struct target_ops error_target_ops = {
	.submit = error_submit,
	.destroy = error_destroy,
};

int error_target_create(struct target **out, struct target *below)
{
	struct error_target *et = calloc(1, sizeof(*et));

	if (!et)
		return -ENOMEM;
	et->t.name = strdup(below->name);
	if (!et->t.name) {
		free(et);
		return -ENOMEM;
	}
	et->t.ops = &error_target_ops;
	et->t.size_bytes = below->size_bytes;
	et->below = below;
	pthread_mutex_init(&et->lock, NULL);
	*out = &et->t;
	return 0;
}

int error_target_add_rule(struct target *t, const struct error_rule *rule)
{
	struct error_target *et = to_err(t);
	struct err_rule_state *v;

	if (t->ops != &error_target_ops || rule->error > 0 ||
	    (!rule->error && !rule->before) ||
	    rule->op >= REQ_OP_LAST)
		return -EINVAL;
	pthread_mutex_lock(&et->lock);
	v = realloc(et->rules, (et->nr_rules + 1) * sizeof(*v));
	if (!v) {
		pthread_mutex_unlock(&et->lock);
		return -ENOMEM;
	}
	v[et->nr_rules++] = (struct err_rule_state){ .r = *rule };
	et->rules = v;
	pthread_mutex_unlock(&et->lock);
	return 0;
}

void error_target_clear(struct target *t)
{
	struct error_target *et = to_err(t);

	pthread_mutex_lock(&et->lock);
	free(et->rules);
	et->rules = NULL;
	et->nr_rules = 0;
	pthread_mutex_unlock(&et->lock);
}
