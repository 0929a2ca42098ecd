// SPDX-License-Identifier: MIT
/*
 * bioctl-trace.c - "bioctl trace": read a bio trace (trace.h, written by
 * bionbd --trace or the plugin's trace=) and print it like blkparse, one
 * line per event, then summarise it like btt: requests per op, and the
 * time between the stages of a request (queued, issued to a member,
 * completed by it, reply sent), overall and per member.
 *
 * A trace may be cut short (the server was killed, the disk filled up) or
 * damaged: the reader takes every whole record up to the damage, says
 * where it stopped and why, and prints what it has.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <bionbd/nbdl.h>
#include <bionbd/plural.h>
#include <bionbd/size.h>
#include <bionbd/trace.h>

#include "bioctl.h"

struct obj {
	uint32_t id, parent;
	unsigned int kind;
	unsigned int index; /* a member's place among its export's */
	char *name;
};

struct trace {
	const char *path;
	struct trace_file_hdr hdr;
	struct trace_rec *ev; /* events (not N), in file order at first */
	size_t nr, cap;
	size_t nr_events; /* of them, Q, X, D, C and R */
	struct obj *objs;
	size_t nr_objs;
	uint64_t lost; /* from L records */
	bool ended; /* an E record was read */
	uint64_t end_written, end_lost;
	int damage; /* 0, or 1 truncated, 2 corrupt */
};

struct filter {
	const char *member, *export;
	unsigned int ops; /* bit per enum req_op; 0 = all */
	bool range_set;
	uint64_t range_lo, range_hi; /* volume bytes, [lo, hi) */
	uint64_t min_lat_ns, max_lat_ns;
	const char *actions; /* NULL = all */
};

static const char *const op_letters[] = { "R", "W", "F", "T", "Z", "C", "B" };

static const char *op_name(uint8_t op)
{
	return op < REQ_OP_LAST ? nbdl_op_name((enum req_op)op) : "?";
}

/* ---- reading ---- */

static int add_event(struct trace *t, const struct trace_rec *r)
{
	if (t->nr == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 4096;
		struct trace_rec *v = realloc(t->ev, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		t->ev = v;
		t->cap = cap;
	}
	t->ev[t->nr++] = *r;
	return 0;
}

static int add_name(struct trace *t, const struct trace_name *n,
		    const uint8_t *name)
{
	struct obj *v = realloc(t->objs, (t->nr_objs + 1) * sizeof(*v));
	struct obj *o;

	if (!v)
		return -ENOMEM;
	t->objs = v;
	o = &v[t->nr_objs];
	o->name = strndup((const char *)name, n->name_len);
	if (!o->name)
		return -ENOMEM;
	o->id = n->obj;
	o->parent = n->parent;
	o->kind = n->kind;
	o->index = 0;
	for (size_t i = 0; i < t->nr_objs; i++)
		o->index += v[i].kind == TRACE_OBJ_MEMBER &&
			    v[i].parent == n->parent;
	t->nr_objs++;
	return 0;
}

static const struct obj *obj_get(const struct trace *t, uint32_t id)
{
	for (size_t i = 0; i < t->nr_objs; i++)
		if (t->objs[i].id == id)
			return &t->objs[i];
	return NULL;
}

static bool known_type(uint8_t type)
{
	return type && strchr("QXDCRNLE", type);
}

/* Read @t->path whole; 0, or a message printed and 2 (cannot read it). */
static int trace_read(struct trace *t)
{
	FILE *f = fopen(t->path, "rb");
	uint8_t *buf = NULL;
	size_t len = 0, cap = 0, off;
	int r = 0;

	if (!f) {
		fprintf(stderr, "bioctl trace: %s: %s\n", t->path,
			strerror(errno));
		return 2;
	}
	for (;;) {
		size_t n;

		if (len == cap) {
			uint8_t *b = realloc(buf, cap = cap ? cap * 2 : 1 << 20);

			if (!b) {
				fprintf(stderr, "bioctl trace: out of memory\n");
				r = 2;
				goto out;
			}
			buf = b;
		}
		n = fread(buf + len, 1, cap - len, f);
		len += n;
		if (n == 0)
			break;
	}
	if (ferror(f)) {
		fprintf(stderr, "bioctl trace: %s: %s\n", t->path,
			strerror(errno));
		r = 2;
		goto out;
	}
	if (len < TRACE_HDR_BYTES || memcmp(buf, TRACE_MAGIC, 8)) {
		fprintf(stderr, "bioctl trace: %s: not a bionbd trace (%s)\n",
			t->path,
			len < TRACE_HDR_BYTES ? "shorter than a trace header" :
						"no BIONBDTR magic");
		r = 2;
		goto out;
	}
	memcpy(&t->hdr, buf, sizeof(t->hdr));
	if (t->hdr.version != TRACE_VERSION ||
	    t->hdr.hdr_bytes < TRACE_HDR_BYTES || t->hdr.hdr_bytes > len) {
		fprintf(stderr,
			"bioctl trace: %s: trace version %" PRIu32
			" (header %" PRIu32 " bytes): this bioctl reads "
			"version %d\n",
			t->path, t->hdr.version, t->hdr.hdr_bytes,
			TRACE_VERSION);
		r = 2;
		goto out;
	}
	for (off = t->hdr.hdr_bytes; off < len;) {
		struct trace_rec ev;
		struct trace_name nm;
		uint8_t type = buf[off];
		uint16_t rlen = 0;
		const char *bad = NULL;

		if (len - off >= 4)
			memcpy(&rlen, buf + off + 2, 2);
		if (!known_type(type))
			bad = "unknown record type";
		else if (len - off >= 4 &&
			 (rlen % 8 || (type == TRACE_N ? rlen < sizeof(nm) :
							 rlen < TRACE_REC_BYTES)))
			bad = "impossible record length";
		if (bad) {
			fprintf(stderr,
				"bioctl trace: %s: corrupt at byte %zu (%s: "
				"type 0x%02x, length %u); showing the %zu "
				"events before it\n",
				t->path, off, bad, type, rlen, t->nr_events);
			t->damage = 2;
			break;
		}
		if (len - off < 4 || len - off < rlen) {
			fprintf(stderr,
				"bioctl trace: %s: truncated at byte %zu (a "
				"record of %u bytes, %zu there: the server was "
				"killed or is still writing); showing the %zu "
				"events before it\n",
				t->path, off, rlen, len - off, t->nr_events);
			t->damage = 1;
			break;
		}
		if (type == TRACE_N) {
			memcpy(&nm, buf + off, sizeof(nm));
			if (nm.name_len > rlen - sizeof(nm)) {
				fprintf(stderr,
					"bioctl trace: %s: corrupt at byte "
					"%zu (a name longer than its record); "
					"showing the %zu event%s before it\n",
					t->path, off, t->nr_events,
					plural(t->nr_events));
				t->damage = 2;
				break;
			}
			r = add_name(t, &nm, buf + off + sizeof(nm));
		} else {
			/* Longer records (a later version) keep this prefix. */
			memcpy(&ev, buf + off, sizeof(ev));
			if (type == TRACE_L) {
				t->lost += ev.offset;
			} else if (type == TRACE_E) {
				t->ended = true;
				t->end_written = ev.offset;
				t->end_lost = ev.lat_ns;
			}
			r = add_event(t, &ev);
			t->nr_events += !!strchr("QXDCR", type);
		}
		if (r) {
			fprintf(stderr, "bioctl trace: out of memory\n");
			r = 2;
			goto out;
		}
		off += rlen;
	}
out:
	free(buf);
	fclose(f);
	return r;
}

static int ev_cmp(const void *a, const void *b)
{
	const struct trace_rec *x = a, *y = b;

	if (x->time_ns != y->time_ns)
		return x->time_ns < y->time_ns ? -1 : 1;
	/* The same nanosecond: the order the stages come in. */
	return (int)(strchr("QXDCRLE", x->type) - strchr("QXDCRLE", y->type));
}

/* ---- requests ---- */

/* What a request's events tell, gathered by sequence number. */
struct req {
	uint64_t seq;
	const struct trace_rec *q, *r;
	uint64_t first_d, last_c; /* times; 0 none */
	bool selected;
	bool touches_member;
};

struct reqs {
	struct req *v;
	size_t cap; /* a power of two: an open-addressing table */
};

static struct req *req_find(struct reqs *rs, uint64_t seq, bool add)
{
	size_t i = (size_t)(seq * 0x9e3779b97f4a7c15ull) & (rs->cap - 1);

	while (rs->v[i].seq && rs->v[i].seq != seq)
		i = (i + 1) & (rs->cap - 1);
	if (!rs->v[i].seq) {
		if (!add)
			return NULL;
		rs->v[i].seq = seq;
	}
	return &rs->v[i];
}

static int reqs_build(struct reqs *rs, const struct trace *t)
{
	size_t want = 16;

	while (want < t->nr * 2 + 16)
		want *= 2;
	rs->cap = want;
	rs->v = calloc(want, sizeof(*rs->v));
	if (!rs->v)
		return -ENOMEM;
	for (size_t i = 0; i < t->nr; i++) {
		const struct trace_rec *e = &t->ev[i];
		struct req *q;

		if (!e->seq)
			continue;
		q = req_find(rs, e->seq, true);
		switch (e->type) {
		case TRACE_Q: q->q = e; break;
		case TRACE_R: q->r = e; break;
		case TRACE_D:
			if (!q->first_d || e->time_ns < q->first_d)
				q->first_d = e->time_ns;
			break;
		case TRACE_C:
			if (e->time_ns > q->last_c)
				q->last_c = e->time_ns;
			break;
		default: break;
		}
	}
	return 0;
}

/* ---- filters ---- */

static bool member_is(const struct trace *t, uint32_t id, const char *want)
{
	const struct obj *o = obj_get(t, id);
	const char *base;
	char *end;
	unsigned long n;

	if (!o || o->kind != TRACE_OBJ_MEMBER)
		return false;
	if (!strcmp(o->name, want))
		return true;
	/* A file name alone names the member whose path ends in it. */
	base = strrchr(o->name, '/');
	if (!strchr(want, '/') && base && !strcmp(base + 1, want))
		return true;
	n = strtoul(want, &end, 10);
	return *want && !*end && n == o->index;
}

static bool export_is(const struct trace *t, const struct trace_rec *e,
		      const char *want)
{
	const struct obj *o = obj_get(t, e->obj);

	if (o && o->kind == TRACE_OBJ_MEMBER)
		o = obj_get(t, o->parent);
	return o && !strcmp(o->name, want);
}

/* Does request @q pass the request-level filters (op, range, latency)? */
static bool req_selected(const struct req *q, const struct filter *f)
{
	const struct trace_rec *e = q->q ? q->q : q->r;

	if (!e)
		return !f->ops && !f->range_set && !f->min_lat_ns &&
		       f->max_lat_ns == UINT64_MAX;
	if (f->ops && !(e->op < 32 && (f->ops >> e->op & 1)))
		return false;
	/* A flush has no range: it overlaps none. */
	if (f->range_set &&
	    (e->op == REQ_OP_FLUSH || e->offset >= f->range_hi ||
	     e->offset + (e->size ? e->size : 1) <= f->range_lo))
		return false;
	if (f->min_lat_ns || f->max_lat_ns != UINT64_MAX) {
		if (!q->r || q->r->lat_ns < f->min_lat_ns ||
		    q->r->lat_ns > f->max_lat_ns)
			return false;
	}
	return true;
}

static void select_reqs(struct reqs *rs, const struct trace *t,
			const struct filter *f)
{
	for (size_t i = 0; i < t->nr; i++) {
		const struct trace_rec *e = &t->ev[i];
		struct req *q;

		if (!e->seq || !(q = req_find(rs, e->seq, false)))
			continue;
		if ((e->type == TRACE_X || e->type == TRACE_D ||
		     e->type == TRACE_C) &&
		    (!f->member || member_is(t, e->obj, f->member)))
			q->touches_member = true;
	}
	for (size_t i = 0; i < rs->cap; i++) {
		struct req *q = &rs->v[i];
		const struct trace_rec *e = q->q ? q->q : q->r;

		if (!q->seq)
			continue;
		q->selected = req_selected(q, f) &&
			      (!f->member || q->touches_member) &&
			      (!f->export || (e && export_is(t, e, f->export)));
	}
}

static bool event_shown(const struct trace *t, struct reqs *rs,
			const struct trace_rec *e, const struct filter *f)
{
	struct req *q;

	if (f->actions && !strchr(f->actions, e->type))
		return false;
	if (!e->seq) /* L and E: always worth seeing */
		return e->type == TRACE_L;
	q = req_find(rs, e->seq, false);
	if (!q || !q->selected)
		return false;
	/* With a member named, of its requests only that member's part. */
	if (f->member && e->type != TRACE_Q && e->type != TRACE_R &&
	    !member_is(t, e->obj, f->member))
		return false;
	return true;
}

/* ---- printing ---- */

static void print_event(const struct trace *t, const struct trace_rec *e)
{
	const struct obj *o = obj_get(t, e->obj);
	char range[48], who[300];

	if (e->type == TRACE_L) {
		printf("%5" PRIu64 ".%09" PRIu64 " %3u %12s L  lost %" PRIu64
		       " events (the thread's buffer was full)\n",
		       e->time_ns / 1000000000u, e->time_ns % 1000000000u,
		       e->thread, "-", e->offset);
		return;
	}
	snprintf(range, sizeof(range), "%" PRIu64 "+%" PRIu32, e->offset,
		 e->size);
	if (!o)
		snprintf(who, sizeof(who), "#%" PRIu32, e->obj);
	else if (o->kind == TRACE_OBJ_EXPORT)
		snprintf(who, sizeof(who), "'%s'", o->name);
	else
		snprintf(who, sizeof(who), "m%u %s", o->index, o->name);
	printf("%5" PRIu64 ".%09" PRIu64 " %3u %6" PRIu64 ".%-5" PRIu64
	       " %c %-2s %-22s %-20s",
	       e->time_ns / 1000000000u, e->time_ns % 1000000000u, e->thread,
	       e->seq >> 40, e->seq & ((UINT64_C(1) << 40) - 1), e->type,
	       e->op < REQ_OP_LAST ? op_letters[e->op] : "?", range, who);
	if (e->type == TRACE_Q && e->conn)
		printf(" conn %" PRIu32, e->conn);
	if (e->flags & TRACE_F_FUA)
		printf(" FUA");
	if (e->flags & TRACE_F_FAST_ZERO)
		printf(" FAST_ZERO");
	if (e->flags & TRACE_F_NO_HOLE)
		printf(" NO_HOLE");
	if (e->flags & TRACE_F_SENDFILE)
		printf(" sendfile");
	if (e->type == TRACE_C || e->type == TRACE_R) {
		if (e->flags & TRACE_F_DROPPED)
			printf(" dropped (the connection went)");
		else
			printf(" %s", e->status ? strerror(-e->status) : "ok");
		printf(" %.1fus", (double)e->lat_ns / 1000.0);
	}
	putchar('\n');
}

/* Latencies of one stage, in ns. */
struct lat {
	uint64_t *v;
	size_t nr, cap;
	uint64_t sum;
};

static int lat_add(struct lat *l, uint64_t ns)
{
	if (l->nr == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 256;
		uint64_t *v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->nr++] = ns;
	l->sum += ns;
	return 0;
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double lat_pct(const struct lat *l, double p)
{
	size_t i = (size_t)(p * (double)l->nr);

	if (i >= l->nr)
		i = l->nr - 1;
	return (double)l->v[i] / 1000.0;
}

static void lat_print(const char *name, const char *what, struct lat *l,
		      bool json, bool *first)
{
	if (l->nr)
		qsort(l->v, l->nr, sizeof(l->v[0]), u64_cmp);
	if (json) {
		printf("%s\"%s\": {\"count\": %zu", *first ? "" : ", ", name,
		       l->nr);
		if (l->nr)
			printf(", \"min_us\": %.3f, \"avg_us\": %.3f, "
			       "\"p50_us\": %.3f, \"p99_us\": %.3f, "
			       "\"max_us\": %.3f",
			       (double)l->v[0] / 1000.0,
			       (double)l->sum / (double)l->nr / 1000.0,
			       lat_pct(l, 0.5), lat_pct(l, 0.99),
			       (double)l->v[l->nr - 1] / 1000.0);
		putchar('}');
		*first = false;
		return;
	}
	printf("  %-4s %-26s %9zu", name, what, l->nr);
	if (l->nr)
		printf(" %10.1f %10.1f %10.1f %10.1f %10.1f",
		       (double)l->v[0] / 1000.0,
		       (double)l->sum / (double)l->nr / 1000.0,
		       lat_pct(l, 0.5), lat_pct(l, 0.99),
		       (double)l->v[l->nr - 1] / 1000.0);
	putchar('\n');
}

struct op_count {
	uint64_t count, bytes, errors;
};

struct member_sum {
	struct op_count op[REQ_OP_LAST];
	struct lat d2c;
};

static void counts_print(const struct op_count *oc, bool json)
{
	bool first = true;

	for (unsigned int o = 0; o < REQ_OP_LAST; o++) {
		if (!oc[o].count)
			continue;
		if (json)
			printf("%s\"%s\": {\"count\": %" PRIu64
			       ", \"bytes\": %" PRIu64 ", \"errors\": %" PRIu64
			       "}",
			       first ? "" : ", ", op_name((uint8_t)o),
			       oc[o].count, oc[o].bytes, oc[o].errors);
		else
			printf("    %-13s %10" PRIu64 " %14" PRIu64 " %8" PRIu64
			       "\n",
			       op_name((uint8_t)o), oc[o].count, oc[o].bytes,
			       oc[o].errors);
		first = false;
	}
}

static int summary(const struct trace *t, struct reqs *rs,
		   const struct filter *f, bool json)
{
	struct lat q2d = { 0 }, d2c = { 0 }, c2r = { 0 }, q2r = { 0 };
	struct op_count reqc[REQ_OP_LAST] = { { 0 } };
	struct member_sum *ms = calloc(t->nr_objs + 1, sizeof(*ms));
	uint64_t nreq = 0, dropped = 0, unanswered = 0;
	uint64_t actions[5] = { 0 };
	bool first = true;
	int r = 0;

	if (!ms)
		return -ENOMEM;
	for (size_t i = 0; i < rs->cap && !r; i++) {
		const struct req *q = &rs->v[i];

		if (!q->seq || !q->selected)
			continue;
		nreq++;
		if (q->r && (q->r->flags & TRACE_F_DROPPED)) {
			dropped++;
			continue;
		}
		if (!q->r) {
			unanswered++;
		} else if (q->r->op < REQ_OP_LAST) {
			struct op_count *oc = &reqc[q->r->op];

			oc->count++;
			if (q->r->status)
				oc->errors++;
			else if (q->r->op != REQ_OP_FLUSH)
				oc->bytes += q->r->size;
			r = lat_add(&q2r, q->r->lat_ns);
		}
		if (!r && q->q && q->first_d)
			r = lat_add(&q2d, q->first_d - q->q->time_ns);
		if (!r && q->r && q->last_c && q->r->time_ns >= q->last_c)
			r = lat_add(&c2r, q->r->time_ns - q->last_c);
	}
	for (size_t i = 0; i < t->nr && !r; i++) {
		const struct trace_rec *e = &t->ev[i];
		const char *a;

		if (!event_shown(t, rs, e, f))
			continue;
		if ((a = strchr("QXDCR", e->type)))
			actions[a - "QXDCR"]++;
		if (e->type != TRACE_C || e->op >= REQ_OP_LAST)
			continue;
		for (size_t m = 0; m < t->nr_objs; m++) {
			struct op_count *oc;

			if (t->objs[m].id != e->obj)
				continue;
			oc = &ms[m].op[e->op];
			oc->count++;
			if (e->status)
				oc->errors++;
			else
				oc->bytes += e->size;
			r = lat_add(&ms[m].d2c, e->lat_ns);
			break;
		}
		if (!r)
			r = lat_add(&d2c, e->lat_ns);
	}
	if (r)
		goto out;

	if (json) {
		printf("{\"file\": ");
		json_str(t->path);
		printf(", \"pid\": %" PRIu32 ", \"complete\": %s, "
		       "\"truncated\": %s, \"corrupt\": %s, \"events\": %zu, "
		       "\"lost\": %" PRIu64,
		       t->hdr.pid, t->ended ? "true" : "false",
		       t->damage == 1 ? "true" : "false",
		       t->damage == 2 ? "true" : "false", t->nr_events,
		       t->lost);
		if (t->ended)
			printf(", \"end_written\": %" PRIu64
			       ", \"end_lost\": %" PRIu64,
			       t->end_written, t->end_lost);
		printf(", \"actions\": {\"Q\": %" PRIu64 ", \"X\": %" PRIu64
		       ", \"D\": %" PRIu64 ", \"C\": %" PRIu64
		       ", \"R\": %" PRIu64 "}",
		       actions[0], actions[1], actions[2], actions[3],
		       actions[4]);
		printf(", \"requests\": %" PRIu64 ", \"dropped\": %" PRIu64
		       ", \"unanswered\": %" PRIu64 ", \"ops\": {",
		       nreq, dropped, unanswered);
		counts_print(reqc, true);
		printf("}, \"stages\": {");
	} else {
		time_t when = (time_t)(t->hdr.realtime_ns / 1000000000u);
		char ts[64];

		strftime(ts, sizeof(ts), "%Y-%m-%d %H:%M:%S UTC",
			 gmtime(&when));
		printf("\n%s: pid %" PRIu32 ", started %s; %zu event%s, %" PRIu64
		       " lost%s\n",
		       t->path, t->hdr.pid, ts, t->nr_events,
		       plural(t->nr_events), t->lost,
		       t->damage == 2 ? "; corrupt, read up to the damage" :
		       t->damage == 1 ? "; truncated" :
		       !t->ended ? "; no end record (still being written, "
				   "or the server was killed)" :
				   "");
		printf("\nrequests: %" PRIu64 " (%" PRIu64
		       " dropped with their connection, %" PRIu64
		       " without a reply in the trace)\n"
		       "    op                 count          bytes   errors\n",
		       nreq, dropped, unanswered);
		counts_print(reqc, false);
		printf("\nstage                                   count    min(us)"
		       "    avg(us)    p50(us)    p99(us)    max(us)\n");
	}
	lat_print("Q2D", "queued -> issued", &q2d, json, &first);
	lat_print("D2C", "issued -> completed", &d2c, json, &first);
	lat_print("C2R", "completed -> reply sent", &c2r, json, &first);
	lat_print("Q2R", "queued -> reply sent", &q2r, json, &first);
	if (json)
		printf("}, \"members\": [");
	else
		printf("\nper member (D2C)\n");
	first = true;
	for (size_t m = 0; m < t->nr_objs; m++) {
		const struct obj *o = &t->objs[m];
		const struct obj *x = obj_get(t, o->parent);
		bool f1 = true;

		if (o->kind != TRACE_OBJ_MEMBER || !ms[m].d2c.nr)
			continue;
		if (json) {
			printf("%s{\"name\": ", first ? "" : ", ");
			json_str(o->name);
			printf(", \"index\": %u, \"export\": ", o->index);
			json_str(x ? x->name : "");
			printf(", \"ops\": {");
			counts_print(ms[m].op, true);
			printf("}, ");
			lat_print("D2C", NULL, &ms[m].d2c, true, &f1);
			putchar('}');
		} else {
			printf("  m%u %s (export '%s')\n", o->index, o->name,
			       x ? x->name : "?");
			counts_print(ms[m].op, false);
			lat_print("D2C", "issued -> completed", &ms[m].d2c,
				  false, &f1);
		}
		first = false;
	}
	if (json)
		printf("]}\n");
out:
	for (size_t m = 0; m < t->nr_objs; m++)
		free(ms[m].d2c.v);
	free(ms);
	free(q2d.v);
	free(d2c.v);
	free(c2r.v);
	free(q2r.v);
	return r;
}

/* ---- the command ---- */

static int parse_range(const char *s, struct filter *f)
{
	char *dup = strdup(s), *sep;
	uint64_t a, b;
	int r = -EINVAL;

	if (!dup)
		return -ENOMEM;
	sep = strpbrk(dup, "-+");
	if (sep) {
		char c = *sep;

		*sep = 0;
		if (!parse_size(dup, &a) &&
		    (sep[1] ? !parse_size(sep + 1, &b) : (b = UINT64_MAX, true))) {
			if (c == '+')
				b = b > UINT64_MAX - a ? UINT64_MAX : a + b;
			if (b > a) {
				f->range_lo = a;
				f->range_hi = b;
				f->range_set = true;
				r = 0;
			}
		}
	}
	free(dup);
	return r;
}

static int parse_ops(const char *s, unsigned int *ops)
{
	char *dup = strdup(s), *tok, *save = NULL;
	int r = 0;

	if (!dup)
		return -ENOMEM;
	for (tok = strtok_r(dup, ",", &save); tok && !r;
	     tok = strtok_r(NULL, ",", &save)) {
		unsigned int o;

		for (o = 0; o < REQ_OP_LAST; o++)
			if (!strcmp(tok, op_name((uint8_t)o)) ||
			    (!strcmp(tok, "zero") && o == REQ_OP_WRITE_ZEROES))
				break;
		if (o == REQ_OP_LAST)
			r = -EINVAL;
		else
			*ops |= 1u << o;
	}
	free(dup);
	return r;
}

static int parse_us(const char *s, uint64_t *ns)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || v < 0 || v > 1e12)
		return -EINVAL;
	*ns = (uint64_t)(v * 1000.0);
	return 0;
}

static void trace_usage(FILE *f)
{
	fputs("Usage: bioctl trace [-m MEMBER] [-e EXPORT] [-o OP[,OP...]]\n"
	      "                    [-r RANGE] [--min-lat US] [--max-lat US]\n"
	      "                    [-a ACTIONS] [-s | --json] FILE\n"
	      "Print a bio trace (bionbd --trace, the plugin's trace=) one line\n"
	      "per event, then a summary per op, stage and member.\n"
	      "  -m, --member M   requests that reached member M (its path, its file\n"
	      "                   name, or its number in the export), and only its\n"
	      "                   events\n"
	      "  -e, --export N   requests of export N\n"
	      "  -o, --op OPS     read, write, flush, trim, cache, write-zeroes\n"
	      "                   (or zero), block-status\n"
	      "  -r, --range R    requests overlapping volume bytes A-B, A+LEN, A-\n"
	      "      --min-lat US, --max-lat US\n"
	      "                   requests whose reply took that long (us)\n"
	      "  -a, --actions A  which events to print: letters of QXDCRL\n"
	      "  -s, --summary    the summary only\n"
	      "      --json       the summary as JSON\n",
	      f);
}

int cmd_trace(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "member", required_argument, NULL, 'm' },
		{ "export", required_argument, NULL, 'e' },
		{ "op", required_argument, NULL, 'o' },
		{ "range", required_argument, NULL, 'r' },
		{ "min-lat", required_argument, NULL, 'L' },
		{ "max-lat", required_argument, NULL, 'M' },
		{ "actions", required_argument, NULL, 'a' },
		{ "summary", no_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct filter f = { .max_lat_ns = UINT64_MAX };
	struct trace t = { 0 };
	struct reqs rs = { 0 };
	bool only_summary = false, json = false;
	int ch, r;

	optind = 1;
	while ((ch = getopt_long(argc, argv, ":m:e:o:r:a:sh", longopts,
				 NULL)) != -1) {
		switch (ch) {
		case 'm': f.member = optarg; break;
		case 'e': f.export = optarg; break;
		case 'o':
			if (parse_ops(optarg, &f.ops))
				return usage_error("--op %s: expected read, "
						   "write, flush, trim, cache, "
						   "write-zeroes or "
						   "block-status", optarg);
			break;
		case 'r':
			if (parse_range(optarg, &f))
				return usage_error("--range %s: expected A-B, "
						   "A+LEN or A-", optarg);
			break;
		case 'L':
		case 'M':
			if (parse_us(optarg, ch == 'L' ? &f.min_lat_ns :
							  &f.max_lat_ns))
				return usage_error("--%s %s: expected "
						   "microseconds",
						   ch == 'L' ? "min-lat" :
							       "max-lat",
						   optarg);
			break;
		case 'a':
			if (optarg[strspn(optarg, "QXDCRL")])
				return usage_error("--actions %s: expected "
						   "letters of QXDCRL", optarg);
			f.actions = optarg;
			break;
		case 's': only_summary = true; break;
		case 'j': json = true; break;
		case 'h': trace_usage(stdout); return 0;
		default: return bad_option("trace", ch, argv, longopts);
		}
	}
	if (optind != argc - 1)
		return usage_error("trace: give one FILE (%d given); try "
				   "'bioctl trace --help'", argc - optind);
	t.path = argv[optind];
	r = trace_read(&t);
	if (r)
		goto out;
	qsort(t.ev, t.nr, sizeof(t.ev[0]), ev_cmp);
	if (reqs_build(&rs, &t)) {
		fprintf(stderr, "bioctl trace: out of memory\n");
		r = 2;
		goto out;
	}
	select_reqs(&rs, &t, &f);
	if (!only_summary && !json) {
		printf("%15s %3s %12s A OP %-22s %-20s\n", "time(s)", "thr",
		       "request", "offset+bytes", "export/member");
		for (size_t i = 0; i < t.nr; i++)
			if (event_shown(&t, &rs, &t.ev[i], &f))
				print_event(&t, &t.ev[i]);
	}
	if (summary(&t, &rs, &f, json)) {
		fprintf(stderr, "bioctl trace: out of memory\n");
		r = 2;
		goto out;
	}
	/* What was there is shown; a damaged file still fails the command. */
	r = t.damage == 2;
out:
	for (size_t i = 0; i < t.nr_objs; i++)
		free(t.objs[i].name);
	free(t.objs);
	free(t.ev);
	free(rs.v);
	if (fflush(stdout) && !r)
		r = 2;
	return r;
}
