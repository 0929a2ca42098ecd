// SPDX-License-Identifier: MIT
/*
 * fault.c - fault and delay rules (fault.h), and the target that carries
 * them out between a stripe or mirror and one member.
 *
 * The target costs nothing to volumes without rules: volume.c stacks it
 * only on members some rule names.  With rules, each bio takes each
 * matching rule's lock once (counters and the random stream must see bios
 * one at a time for a seed to replay); a bio held for a delay waits on an
 * ioq timer of the thread that submitted it, so it is resubmitted, and
 * ends, there, as every bio must.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bionbd/fault.h>
#include <bionbd/path.h>
#include <bionbd/plural.h>
#include <bionbd/size.h>

#include "internal.h"

/* A stalled bio looks at its trigger file this often. */
#define FAULT_STALL_POLL_NS (10u * 1000u * 1000u)

/* The ops a rule can name: what reaches a member with a range or a sync. */
#define FAULT_OPS_ALL                                                          \
	(1u << REQ_OP_READ | 1u << REQ_OP_WRITE | 1u << REQ_OP_FLUSH |         \
	 1u << REQ_OP_DISCARD | 1u << REQ_OP_WRITE_ZEROES)

enum fault_dist { DIST_FIXED, DIST_UNIFORM, DIST_EXP };

struct fault_rule {
	enum fault_kind kind;
	char *text; /* as written, for messages */
	unsigned int index; /* 1-based, for messages */
	uint64_t members; /* bit per member (role); all ones = every one */
	unsigned int ops; /* bit per enum req_op */
	bool has_range, has_mrange;
	uint64_t r0, r1; /* volume bytes [r0, r1) */
	uint64_t m0, m1; /* member bytes [m0, m1), superblock included */
	int error; /* -errno */
	bool torn;
	uint32_t torn_sectors;
	double rate; /* 0..1 */
	uint64_t after, count; /* count 0: no limit */
	char *file; /* active while it exists; NULL: always */
	uint64_t seed;
	bool seed_set;
	enum fault_dist dist;
	double ms_lo, ms_hi; /* fixed: ms_lo; uniform: [lo, hi]; exp: mean lo */
	bool stall;

	pthread_mutex_t lock;
	uint64_t rng; /* splitmix64 state */
	uint64_t matched, fired;
};

struct fault_set {
	atomic_uint refs;
	unsigned int nr;
	struct fault_rule *rules;
};

struct fault_target {
	struct target t;
	struct target *below;
	struct fault_set *set;
	unsigned int member;
	struct fault_geom g;
	bool reads; /* some rule may touch this member's reads */
};

/* A bio held or failed by the rules; only bios a rule touched get one. */
struct fault_io {
	struct ioq_timer tm;
	struct ioq *q;
	struct fault_target *ft;
	struct bio *bio;
	int error;
	bool torn;
	uint32_t torn_sectors;
	const struct fault_rule *stall; /* held while its file exists */
};

static inline struct fault_target *to_fault(struct target *t)
{
	return container_of(t, struct fault_target, t);
}

const char *fault_kind_name(enum fault_kind kind)
{
	return kind == FAULT_DELAY ? "delay" : "fault";
}

/* ---- parsing ---- */

static const struct {
	const char *name;
	int err;
} fault_errnos[] = {
	{ "EIO", EIO },	       { "ENOSPC", ENOSPC },
	{ "EPERM", EPERM },    { "EROFS", EROFS },
	{ "EDQUOT", EDQUOT },  { "EFBIG", EFBIG },
	{ "EINVAL", EINVAL },  { "ENOMEM", ENOMEM },
	{ "ENOTSUP", ENOTSUP }, { "EOPNOTSUPP", EOPNOTSUPP },
	{ "EOVERFLOW", EOVERFLOW }, { "ESHUTDOWN", ESHUTDOWN },
	{ "ETIMEDOUT", ETIMEDOUT }, { "ENODATA", ENODATA },
	{ "EAGAIN", EAGAIN },  { "ECANCELED", ECANCELED },
};

static const struct {
	const char *name;
	enum req_op op;
} fault_op_names[] = {
	{ "read", REQ_OP_READ },     { "write", REQ_OP_WRITE },
	{ "flush", REQ_OP_FLUSH },   { "trim", REQ_OP_DISCARD },
	{ "discard", REQ_OP_DISCARD }, { "zero", REQ_OP_WRITE_ZEROES },
};

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	*out = strtoull(s, &end, 10);
	return errno || *end ? -EINVAL : 0;
}

/* A non-negative finite decimal number. */
static int parse_num(const char *s, double *out)
{
	char *end;

	if ((*s < '0' || *s > '9') && *s != '.')
		return -EINVAL;
	errno = 0;
	*out = strtod(s, &end);
	return errno || *end || !isfinite(*out) ? -EINVAL : 0;
}

/* "A-B" (B excluded), "A+LEN" or "A-" (to the end), in sizes. */
static int parse_range(char *s, uint64_t *lo, uint64_t *hi)
{
	char *sep = strpbrk(s, "-+");
	char c;
	uint64_t a, b;

	if (!sep)
		return -EINVAL;
	c = *sep;
	*sep = '\0';
	if (parse_size(s, &a)) {
		*sep = c;
		return -EINVAL;
	}
	*sep = c;
	if (c == '-' && !sep[1]) {
		b = UINT64_MAX;
	} else {
		if (parse_size(sep + 1, &b))
			return -EINVAL;
		if (c == '+') {
			if (b > UINT64_MAX - a)
				return -EINVAL;
			b += a;
		}
	}
	if (b <= a)
		return -EINVAL;
	*lo = a;
	*hi = b;
	return 0;
}

static int parse_members(char *s, unsigned int nr_members, uint64_t *mask,
			 char *errbuf, size_t errlen, const char *word)
{
	char *save = NULL, *tok;

	if (!strcmp(s, "*") || !strcmp(s, "all")) {
		*mask = UINT64_MAX;
		return 0;
	}
	*mask = 0;
	for (tok = strtok_r(s, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		uint64_t m;

		if (parse_u64(tok, &m) || m >= 64)
			return verr(errbuf, errlen, -EINVAL,
				    "%s: expected member numbers from 0 (the first) to 63, or *",
				    word);
		if (nr_members && m >= nr_members)
			return verr(errbuf, errlen, -EINVAL,
				    "%s: member %" PRIu64
				    " does not exist (the volume has %u, numbered from 0)",
				    word, m, nr_members);
		*mask |= 1ull << m;
	}
	return *mask ? 0 : verr(errbuf, errlen, -EINVAL, "%s: no member", word);
}

static int parse_ops(char *s, unsigned int *ops, char *errbuf, size_t errlen,
		     const char *word)
{
	char *save = NULL, *tok;

	if (!strcmp(s, "*") || !strcmp(s, "all")) {
		*ops = FAULT_OPS_ALL;
		return 0;
	}
	*ops = 0;
	for (tok = strtok_r(s, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		size_t i;

		for (i = 0; i < ARRAY_SIZE(fault_op_names); i++)
			if (!strcmp(tok, fault_op_names[i].name))
				break;
		if (i == ARRAY_SIZE(fault_op_names))
			return verr(errbuf, errlen, -EINVAL,
				    "%s: expected read, write, flush, trim, zero (comma-separated) or *",
				    word);
		*ops |= 1u << fault_op_names[i].op;
	}
	return *ops ? 0 : verr(errbuf, errlen, -EINVAL, "%s: no op", word);
}

static int parse_errno(const char *s, int *err)
{
	for (size_t i = 0; i < ARRAY_SIZE(fault_errnos); i++) {
		if (!strcmp(s, fault_errnos[i].name)) {
			*err = -fault_errnos[i].err;
			return 0;
		}
	}
	return -EINVAL;
}

/* "5", "0.5", "2-8": milliseconds. */
static int parse_ms(char *s, struct fault_rule *r)
{
	char *dash = strchr(s, '-');

	if (!dash)
		return parse_num(s, &r->ms_lo) ? -EINVAL : (r->ms_hi = r->ms_lo, 0);
	*dash = '\0';
	if (parse_num(s, &r->ms_lo) || parse_num(dash + 1, &r->ms_hi) ||
	    r->ms_hi < r->ms_lo) {
		*dash = '-';
		return -EINVAL;
	}
	*dash = '-';
	return 0;
}

/* The longest delay a rule may add: an hour is already a stall. */
#define FAULT_MAX_MS (3600.0 * 1000.0)

/* One word "key=value" (or "stall"); @word is a writable copy. */
static int parse_word(struct fault_rule *r, char *word, unsigned int nr_members,
		      const char *orig, bool *has_ms,
		      bool *has_dist, char *errbuf, size_t errlen)
{
	char *eq = strchr(word, '=');
	char *v;
	uint64_t u;
	double d;

	if (!eq) {
		if (!strcmp(word, "stall") && r->kind == FAULT_DELAY) {
			r->stall = true;
			return 0;
		}
		return verr(errbuf, errlen, -EINVAL, "%s: expected key=value", orig);
	}
	*eq = '\0';
	v = eq + 1;
	if (!strcmp(word, "member"))
		return parse_members(v, nr_members, &r->members, errbuf, errlen,
				     orig);
	if (!strcmp(word, "op"))
		return parse_ops(v, &r->ops, errbuf, errlen, orig);
	if (!strcmp(word, "range") || !strcmp(word, "member-range")) {
		bool vol = word[0] == 'r';

		if (parse_range(v, vol ? &r->r0 : &r->m0, vol ? &r->r1 : &r->m1))
			return verr(errbuf, errlen, -EINVAL,
				    "%s: expected START-END (END excluded), START+LENGTH or START- in bytes or sizes like 1G",
				    orig);
		if (vol)
			r->has_range = true;
		else
			r->has_mrange = true;
		return 0;
	}
	if (!strcmp(word, "rate")) {
		size_t n = strlen(v);
		bool pct = n && v[n - 1] == '%';

		if (pct)
			v[n - 1] = '\0';
		if (parse_num(v, &d) || (pct ? d > 100 : d > 1))
			return verr(errbuf, errlen, -EINVAL,
				    "%s: expected a percentage (0%%-100%%) or a fraction (0-1)",
				    orig);
		r->rate = pct ? d / 100 : d;
		return 0;
	}
	if (!strcmp(word, "after") || !strcmp(word, "count")) {
		if (parse_u64(v, &u))
			return verr(errbuf, errlen, -EINVAL, "%s: expected a count",
				    orig);
		*(word[0] == 'a' ? &r->after : &r->count) = u;
		if (word[0] == 'c' && !u)
			return verr(errbuf, errlen, -EINVAL,
				    "%s: a count of 0 would never fire", orig);
		return 0;
	}
	if (!strcmp(word, "file")) {
		if (!*v)
			return verr(errbuf, errlen, -EINVAL, "%s: empty path", orig);
		free(r->file);
		r->file = strdup(v);
		return r->file ? 0 : -ENOMEM;
	}
	if (!strcmp(word, "seed")) {
		if (parse_u64(v, &r->seed))
			return verr(errbuf, errlen, -EINVAL,
				    "%s: expected a number (0 to 2^64-1)", orig);
		r->seed_set = true;
		return 0;
	}
	if (r->kind == FAULT_ERROR && !strcmp(word, "error")) {
		if (parse_errno(v, &r->error)) {
			char names[256] = "";

			for (size_t i = 0; i < ARRAY_SIZE(fault_errnos); i++)
				snprintf(names + strlen(names),
					 sizeof(names) - strlen(names), "%s%s",
					 i ? ", " : "", fault_errnos[i].name);
			return verr(errbuf, errlen, -EINVAL, "%s: expected one of %s",
				    orig, names);
		}
		return 0;
	}
	if (r->kind == FAULT_ERROR && !strcmp(word, "torn")) {
		if (parse_u64(v, &u) || u > UINT32_MAX >> SECTOR_SHIFT)
			return verr(errbuf, errlen, -EINVAL,
				    "%s: expected the 512-byte sectors that reach the member",
				    orig);
		r->torn = true;
		r->torn_sectors = (uint32_t)u;
		return 0;
	}
	if (r->kind == FAULT_DELAY && !strcmp(word, "ms")) {
		if (parse_ms(v, r) || r->ms_hi > FAULT_MAX_MS)
			return verr(errbuf, errlen, -EINVAL,
				    "%s: expected milliseconds (5, 0.5) or a range (2-8), at most an hour",
				    orig);
		*has_ms = true;
		return 0;
	}
	if (r->kind == FAULT_DELAY && !strcmp(word, "dist")) {
		if (!strcmp(v, "fixed"))
			r->dist = DIST_FIXED;
		else if (!strcmp(v, "uniform"))
			r->dist = DIST_UNIFORM;
		else if (!strcmp(v, "exp"))
			r->dist = DIST_EXP;
		else
			return verr(errbuf, errlen, -EINVAL,
				    "%s: expected fixed, uniform or exp", orig);
		*has_dist = true;
		return 0;
	}
	return verr(errbuf, errlen, -EINVAL,
		    r->kind == FAULT_ERROR ?
			    "%s: unknown key (fault keys: member, op, range, member-range, error, torn, rate, after, count, file, seed)" :
			    "%s: unknown key (delay keys: member, op, range, member-range, ms, dist, stall, rate, after, count, file, seed)",
		    orig);
}

/*
 * A key said twice: the second would silently replace the first, and
 * "op=read op=write" would fail writes only.  Marks @word's key in @seen.
 */
static bool key_repeated(const char *word, uint32_t *seen)
{
	static const char *const keys[] = {
		"member", "op",	   "range", "member-range", "rate",
		"after",  "count", "file",  "seed",	    "error",
		"torn",	  "ms",	   "dist",  "stall",
	};
	size_t n = strcspn(word, "=");

	for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
		if (strlen(keys[i]) != n || strncmp(keys[i], word, n))
			continue;
		if (*seen & (1u << i))
			return true;
		*seen |= 1u << i;
		return false;
	}
	return false;
}

static void rule_release(struct fault_rule *r)
{
	free(r->text);
	free(r->file);
}

/* Parse @text into @r (zeroed by the caller); 0 or -errno with a message. */
static int rule_parse(struct fault_rule *r, enum fault_kind kind,
		      const char *text, unsigned int nr_members, char *errbuf,
		      size_t errlen)
{
	bool has_ms = false, has_dist = false;
	char *copy = strdup(text), *save = NULL, *word;
	unsigned int words = 0;
	uint32_t seen = 0;
	int err = 0;

	if (!copy)
		return -ENOMEM;
	r->kind = kind;
	r->members = UINT64_MAX;
	r->ops = FAULT_OPS_ALL;
	r->rate = 1;
	r->error = -EIO;
	for (word = strtok_r(copy, " \t", &save); word && !err;
	     word = strtok_r(NULL, " \t", &save)) {
		char *orig;

		if (key_repeated(word, &seen)) {
			err = verr(errbuf, errlen, -EINVAL,
				   "%.*s: given twice in one rule (say each key "
				   "once; member= and op= take lists: "
				   "op=read,write)",
				   (int)strcspn(word, "="), word);
			break;
		}
		orig = strdup(word);
		if (!orig) {
			err = -ENOMEM;
			break;
		}
		err = parse_word(r, word, nr_members, orig, &has_ms,
				 &has_dist, errbuf, errlen);
		free(orig);
		words++;
	}
	free(copy);
	if (err)
		return err;
	/*
	 * With every key at its default an empty rule fails (or delays)
	 * all I/O: that is what an unset shell variable would ask for, so
	 * "everything" has to be said.
	 */
	if (!words)
		return verr(errbuf, errlen, -EINVAL,
			    "empty rule (one that matches all I/O says so: "
			    "member=*)");
	if (kind == FAULT_ERROR && r->torn) {
		if (r->ops & ~(1u << REQ_OP_WRITE))
			return verr(errbuf, errlen, -EINVAL,
				    "torn=%u: only writes can be torn (add op=write)",
				    r->torn_sectors);
	}
	if (kind == FAULT_DELAY) {
		/*
		 * A range means uniform unless dist= says otherwise, whichever
		 * word comes first: set by ms= itself, a dist= before it was
		 * overwritten, and "dist=exp ms=2-8" served a uniform delay.
		 */
		if (!has_dist && r->ms_lo != r->ms_hi)
			r->dist = DIST_UNIFORM;
		if (r->stall && !r->file)
			return verr(errbuf, errlen, -EINVAL,
				    "stall: holds bios while a file exists; add file=PATH");
		if (r->stall == has_ms)
			return verr(errbuf, errlen, -EINVAL,
				    "a delay needs either ms=MILLISECONDS or stall (with file=PATH)");
		if (has_dist && r->dist == DIST_UNIFORM && r->ms_lo == r->ms_hi)
			return verr(errbuf, errlen, -EINVAL,
				    "dist=uniform: needs a range, e.g. ms=2-8");
		if (has_dist && r->dist != DIST_UNIFORM &&
		    r->ms_lo != r->ms_hi)
			return verr(errbuf, errlen, -EINVAL,
				    "ms=%g-%g: a range is uniform; dist=%s takes one number",
				    r->ms_lo, r->ms_hi,
				    r->dist == DIST_EXP ? "exp" : "fixed");
	}
	r->text = strdup(text);
	return r->text ? 0 : -ENOMEM;
}

int fault_rule_absolute(const char *text, const char *dir, char **out)
{
	const char *p = text;
	size_t len = 0;
	char *buf = NULL;
	FILE *f;
	int r = 0;

	*out = NULL;
	f = open_memstream(&buf, &len);
	if (!f)
		return -ENOMEM;
	while (*p && !r) {
		size_t gap = strspn(p, " \t"), n = strcspn(p + gap, " \t");
		char *word = NULL, *abs = NULL;

		fwrite(p, 1, gap, f);
		p += gap;
		if (n > 5 && !strncmp(p, "file=", 5) &&
		    (word = strndup(p + 5, n - 5))) {
			r = path_absolute(word, dir, &abs);
			/* Words are cut at blanks: the path would be two. */
			if (!r && abs[strcspn(abs, " \t")])
				r = -EINVAL;
			if (!r)
				fprintf(f, "file=%s", abs);
		} else if (n > 5 && !strncmp(p, "file=", 5)) {
			r = -ENOMEM;
		} else {
			fwrite(p, 1, n, f);
		}
		free(abs);
		free(word);
		p += n;
	}
	return memstream_end(f, &buf, r, out);
}

int fault_rule_check(enum fault_kind kind, const char *text,
		     unsigned int nr_members, char *errbuf, size_t errlen)
{
	struct fault_rule r;
	int err;

	memset(&r, 0, sizeof(r));
	err = rule_parse(&r, kind, text, nr_members, errbuf, errlen);
	rule_release(&r);
	if (err == -ENOMEM)
		verr(errbuf, errlen, -EINVAL, "out of memory");
	return err ? -EINVAL : 0;
}

/* ---- the rule set ---- */

static uint64_t splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* In [0, 1). */
static double rule_random(struct fault_rule *r)
{
	return (double)(splitmix64(&r->rng) >> 11) * 0x1.0p-53;
}

int fault_set_create(struct fault_set **out, const struct fault_text *rules,
		     unsigned int nr, unsigned int nr_members,
		     const char *volume, char *errbuf, size_t errlen)
{
	struct fault_set *set = calloc(1, sizeof(*set));
	uint64_t seed0 = engine_now_ns() ^ ((uint64_t)getpid() << 32);
	unsigned int i;
	int err = 0;

	if (!set || !(set->rules = calloc(nr, sizeof(*set->rules)))) {
		free(set);
		return verr(errbuf, errlen, -ENOMEM, "out of memory");
	}
	atomic_init(&set->refs, 1);
	for (i = 0; i < nr; i++) {
		struct fault_rule *r = &set->rules[i];
		char why[512];

		err = rule_parse(r, rules[i].kind, rules[i].text, nr_members,
				 why, sizeof(why));
		if (err) {
			rule_release(r);
			if (err == -ENOMEM)
				verr(errbuf, errlen, err, "out of memory");
			else
				verr(errbuf, errlen, err, "%s = %s: %s",
				     fault_kind_name(rules[i].kind),
				     rules[i].text, why);
			break;
		}
		r->index = i + 1;
		if (!r->seed_set)
			r->seed = splitmix64(&seed0);
		r->rng = r->seed;
		pthread_mutex_init(&r->lock, NULL);
		set->nr++;
		/* What a replay needs: the rule and its seed. */
		if (r->seed_set)
			target_notice(TARGET_NOTICE_INFO,
				      "volume '%s': %s rule %u: %s", volume,
				      fault_kind_name(r->kind), r->index,
				      r->text);
		else
			target_notice(TARGET_NOTICE_INFO,
				      "volume '%s': %s rule %u: %s seed=%" PRIu64
				      " (drawn; add it to the rule to replay)",
				      volume, fault_kind_name(r->kind),
				      r->index, r->text, r->seed);
	}
	if (err) {
		fault_set_put(set);
		return err;
	}
	*out = set;
	return 0;
}

void fault_set_put(struct fault_set *set)
{
	if (!set || atomic_fetch_sub(&set->refs, 1) != 1)
		return;
	for (unsigned int i = 0; i < set->nr; i++) {
		struct fault_rule *r = &set->rules[i];

		if (r->fired)
			target_notice(TARGET_NOTICE_INFO,
				      "%s rule %u (%s): fired %" PRIu64
				      " time%s in %" PRIu64 " matching bio%s",
				      fault_kind_name(r->kind), r->index,
				      r->text, r->fired, plural(r->fired),
				      r->matched, plural(r->matched));
		pthread_mutex_destroy(&r->lock);
		rule_release(r);
	}
	free(set->rules);
	free(set);
}

bool fault_set_covers(const struct fault_set *set, unsigned int member)
{
	for (unsigned int i = 0; i < set->nr; i++)
		if (set->rules[i].members >> member & 1)
			return true;
	return false;
}

/* ---- matching ---- */

/*
 * Does [@a, @a + @len) of member @m hold a volume byte of [@r0, @r1)?
 * Member data chunk q is position p = q * N + m of the RAID-0 under the
 * layout, which holds copy p mod K of volume chunk k = p / K (RAID-0 is
 * K = 1; docs/format.md).  k grows with q, so the walk starts at the
 * first q whose chunk can reach r0 and stops past r1; only the bio's
 * partial first and last chunks can miss inside that span, so it takes
 * at most three steps.
 */
bool fault_member_hits_volume(const struct fault_geom *g, unsigned int m,
			      uint64_t a, uint64_t len, uint64_t r0,
			      uint64_t r1)
{
	uint64_t shift = g->chunk_shift, rel, end, qa, qb, q, kr0, kr1, p0;

	if (!len || a + len <= g->data_offset)
		return false;
	rel = a > g->data_offset ? a - g->data_offset : 0;
	end = a + len - g->data_offset;
	qa = rel >> shift;
	qb = (end - 1) >> shift;
	kr0 = r0 >> shift;
	kr1 = (r1 - 1) >> shift;
	/* First q with q * N + m >= kr0 * K. */
	p0 = kr0 * g->copies;
	q = p0 > m ? (p0 - m + g->nr_members - 1) / g->nr_members : 0;
	if (q < qa)
		q = qa;
	for (; q <= qb; q++) {
		uint64_t k = (q * g->nr_members + m) / g->copies;
		uint64_t lo, hi, vlo;

		if (k > kr1)
			return false;
		lo = rel > q << shift ? rel : q << shift;
		hi = end < (q + 1) << shift ? end : (q + 1) << shift;
		vlo = (k << shift) + (lo - (q << shift));
		if (vlo < r1 && vlo + (hi - lo) > r0)
			return true;
	}
	return false;
}

static bool rule_matches(const struct fault_rule *r,
			 const struct fault_target *ft, const struct bio *bio)
{
	enum req_op op = bio_op(bio);
	uint64_t off = bio_offset_bytes(bio), len = bio->bi_iter.bi_size;

	if (!(r->members >> ft->member & 1) || !(r->ops >> op & 1))
		return false;
	if (op != REQ_OP_FLUSH) { /* a flush covers every range */
		if (r->has_mrange && (off >= r->m1 || off + len <= r->m0))
			return false;
		if (r->has_range &&
		    !fault_member_hits_volume(&ft->g, ft->member, off, len,
					      r->r0, r->r1))
			return false;
	}
	return !r->file || access(r->file, F_OK) == 0;
}

static uint64_t rule_delay_ns(struct fault_rule *r)
{
	double ms = r->ms_lo;

	if (r->dist == DIST_UNIFORM)
		ms = r->ms_lo + (r->ms_hi - r->ms_lo) * rule_random(r);
	else if (r->dist == DIST_EXP)
		ms = -r->ms_lo * log1p(-rule_random(r));
	if (ms > FAULT_MAX_MS)
		ms = FAULT_MAX_MS;
	return (uint64_t)(ms * 1e6);
}

/*
 * Does rule @r fire for this bio?  Called with @r matching; counts it.
 * Adds a delay to *@delay_ns, or returns true for an error or a stall.
 */
static bool rule_fire(struct fault_rule *r, uint64_t *delay_ns)
{
	bool fire = false;

	pthread_mutex_lock(&r->lock);
	if (++r->matched > r->after && (!r->count || r->fired < r->count) &&
	    (r->rate >= 1 || rule_random(r) < r->rate)) {
		r->fired++;
		fire = true;
		if (r->kind == FAULT_DELAY && !r->stall)
			*delay_ns += rule_delay_ns(r);
	}
	pthread_mutex_unlock(&r->lock);
	return fire;
}

/* ---- the target ---- */

static void fault_torn_endio(struct bio *clone)
{
	struct fault_io *io = clone->bi_private;
	struct bio *bio = io->bio;
	int err = clone->bi_status ? clone->bi_status : io->error;

	bio_put(clone);
	free(io);
	bio_io_error(bio, err);
}

/* The delay is over (or there was none): fail, tear or pass the bio on. */
static void fault_io_go(struct fault_io *io)
{
	struct bio *bio = io->bio, *clone;

	if (io->stall && access(io->stall->file, F_OK) == 0) {
		io->tm.deadline_ns = engine_now_ns() + FAULT_STALL_POLL_NS;
		ioq_timer_add(io->q, &io->tm);
		return;
	}
	if (!io->error) {
		submit_bio(io->ft->below, bio);
		free(io);
		return;
	}
	if (io->torn && bio_op(bio) == REQ_OP_WRITE && io->torn_sectors &&
	    (clone = bio_clone(bio))) {
		/* The first sectors reach the member; the bio still fails. */
		if (io->torn_sectors < bio_sectors(bio))
			clone->bi_iter.bi_size = io->torn_sectors << SECTOR_SHIFT;
		/* The member counts the bio itself (an error), not this part. */
		clone->bi_flags |= BIO_NO_ACCT;
		clone->bi_end_io = fault_torn_endio;
		clone->bi_private = io;
		submit_bio(io->ft->below, clone);
		return;
	}
	ioq_defer_end(io->q, bio, io->error);
	free(io);
}

static void fault_timer_fn(struct ioq_timer *tm)
{
	fault_io_go(container_of(tm, struct fault_io, tm));
}

static void fault_submit(struct target *t, struct bio *bio)
{
	struct fault_target *ft = to_fault(t);
	struct fault_set *set = ft->set;
	const struct fault_rule *stall = NULL;
	uint64_t delay_ns = 0;
	struct fault_io *io;
	int error = 0;
	bool torn = false;
	uint32_t torn_sectors = 0;

	/*
	 * What a rule does to a bio is the member's doing, as far as its
	 * statistics go: delays count in its latency, errors as its errors.
	 */
	if (ft->below->ops == &file_target_ops)
		file_acct_start(to_file_target(ft->below), bio);
	else
		member_acct_start(ft->below, member_stats(ft->below), bio);
	for (unsigned int i = 0; i < set->nr; i++) {
		struct fault_rule *r = &set->rules[i];

		if (r->kind == FAULT_ERROR && error)
			continue; /* the first error wins */
		if (!rule_matches(r, ft, bio) || !rule_fire(r, &delay_ns))
			continue;
		if (r->kind == FAULT_DELAY) {
			if (r->stall && !stall)
				stall = r;
			continue;
		}
		error = r->error;
		torn = r->torn;
		torn_sectors = r->torn_sectors;
	}
	if (likely(!error && !delay_ns && !stall)) {
		submit_bio(ft->below, bio);
		return;
	}
	io = malloc(sizeof(*io));
	if (!io) {
		/* No memory to hold it: fail rather than skip the rule. */
		ioq_defer_end(ioq_current(), bio, error ? error : -ENOMEM);
		return;
	}
	io->q = ioq_current();
	io->ft = ft;
	io->bio = bio;
	io->error = error;
	io->torn = torn;
	io->torn_sectors = torn_sectors;
	io->stall = stall;
	io->tm.fn = fault_timer_fn;
	if (delay_ns) {
		io->tm.deadline_ns = engine_now_ns() + delay_ns;
		ioq_timer_add(io->q, &io->tm);
		return;
	}
	fault_io_go(io);
}

static int fault_iomap(struct target *t, uint64_t off, uint64_t len,
		       unsigned int flags, struct target_iomap *m)
{
	struct fault_target *ft = to_fault(t);

	int r;

	/* Reads a rule may touch must be bios: sendfile would skip it. */
	if (ft->reads)
		return -EOPNOTSUPP;
	r = target_iomap(ft->below, off, len, flags, m);
	/*
	 * A mirror above knows its members, not what lies under them: it
	 * must find this one when target_iomap_short() names it.
	 */
	if (!r)
		m->src = t;
	return r;
}

static void fault_destroy(struct target *t)
{
	struct fault_target *ft = to_fault(t);

	target_destroy(ft->below);
	fault_set_put(ft->set);
	free(ft->t.name);
	free(ft);
}

static void fault_start(struct target *t)
{
	target_start(to_fault(t)->below);
}

/* What the member below would refuse; the rules act on what it accepts. */
static bool fault_zero_refused(struct target *t, uint64_t off, uint64_t len,
			       unsigned int opf)
{
	return target_zero_refused(to_fault(t)->below, off, len, opf);
}

static bool fault_lost(struct target *t)
{
	return target_lost(to_fault(t)->below);
}

static const struct target_ops fault_target_ops = {
	.submit = fault_submit,
	.destroy = fault_destroy,
	.start = fault_start,
	.iomap = fault_iomap,
	.zero_refused = fault_zero_refused,
	.lost = fault_lost,
};

int fault_target_create(struct target **out, struct target *below,
			struct fault_set *set, unsigned int member,
			const struct fault_geom *g)
{
	struct fault_target *ft = calloc(1, sizeof(*ft));

	if (!ft || !(ft->t.name = strdup(below->name))) {
		free(ft);
		return -ENOMEM;
	}
	ft->t.ops = &fault_target_ops;
	ft->t.size_bytes = below->size_bytes;
	ft->t.trace_id = below->trace_id;
	ft->t.single_conn = below->single_conn;
	ft->t.whole_io = below->whole_io;
	ft->t.readonly = below->readonly;
	ft->below = below;
	ft->set = set;
	ft->member = member;
	ft->g = *g;
	for (unsigned int i = 0; i < set->nr; i++)
		if (set->rules[i].members >> member & 1 &&
		    set->rules[i].ops >> REQ_OP_READ & 1)
			ft->reads = true;
	atomic_fetch_add(&set->refs, 1);
	*out = &ft->t;
	return 0;
}
