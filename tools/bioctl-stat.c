// SPDX-License-Identifier: MIT
/*
 * bioctl-stat.c - "bioctl stat": a running bionbd's statistics as a table,
 * like iostat -x: the first report since the server started, then one per
 * interval with rates and that interval's latency percentiles.  Reads the
 * JSON document (docs/stats.md) from the server's control socket; the
 * reader below takes exactly that subset of JSON, nothing more.  Op names,
 * error kinds and percentiles are the NBD layer's and the engine's own.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <bionbd/nbdl.h>
#include <bionbd/stats.h>

#include "bioctl.h"

/* ---- a small JSON reader ---- */

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jv {
	enum jtype type;
	double num;
	uint64_t u; /* exact, for integers */
	char *str; /* J_STR; the key when inside an object */
	char *key;
	struct jv *kids; /* J_ARR, J_OBJ */
	size_t nr;
};

struct jp {
	const char *s, *end;
	int depth;
};

static void jv_free(struct jv *v)
{
	for (size_t i = 0; i < v->nr; i++)
		jv_free(&v->kids[i]);
	free(v->kids);
	free(v->str);
	free(v->key);
}

static void skip_ws(struct jp *p)
{
	while (p->s < p->end && strchr(" \t\r\n", *p->s))
		p->s++;
}

static int parse_value(struct jp *p, struct jv *v);

static int parse_string(struct jp *p, char **out)
{
	size_t cap = 16, len = 0;
	char *b = malloc(cap);

	if (!b || *p->s != '"')
		goto bad;
	for (p->s++; p->s < p->end && *p->s != '"'; p->s++) {
		char c = *p->s;

		if (c == '\\') {
			if (++p->s >= p->end)
				goto bad;
			c = *p->s == 'n' ? '\n' : *p->s == 't' ? '\t' : *p->s;
			if (*p->s == 'u') { /* our writer: \u00XX only */
				unsigned int x;

				if (p->end - p->s < 5 ||
				    sscanf(p->s + 1, "%4x", &x) != 1)
					goto bad;
				c = (char)x;
				p->s += 4;
			}
		}
		if (len + 2 > cap) {
			char *nb = realloc(b, cap *= 2);

			if (!nb)
				goto bad;
			b = nb;
		}
		b[len++] = c;
	}
	if (p->s >= p->end)
		goto bad;
	p->s++;
	b[len] = '\0';
	*out = b;
	return 0;
bad:
	free(b);
	return -EINVAL;
}

static int parse_items(struct jp *p, struct jv *v, char close, bool keys)
{
	p->s++;
	skip_ws(p);
	if (p->s < p->end && *p->s == close) {
		p->s++;
		return 0;
	}
	for (;;) {
		struct jv item = { 0 }, *nk;

		skip_ws(p);
		if (keys) {
			if (parse_string(p, &item.key))
				return -EINVAL;
			skip_ws(p);
			if (p->s >= p->end || *p->s++ != ':') {
				free(item.key);
				return -EINVAL;
			}
		}
		if (parse_value(p, &item)) {
			jv_free(&item);
			return -EINVAL;
		}
		nk = realloc(v->kids, (v->nr + 1) * sizeof(*nk));
		if (!nk) {
			jv_free(&item);
			return -ENOMEM;
		}
		v->kids = nk;
		v->kids[v->nr++] = item;
		skip_ws(p);
		if (p->s < p->end && *p->s == ',') {
			p->s++;
			continue;
		}
		if (p->s < p->end && *p->s == close) {
			p->s++;
			return 0;
		}
		return -EINVAL;
	}
}

static int parse_value(struct jp *p, struct jv *v)
{
	char *end;
	int r;

	skip_ws(p);
	if (p->s >= p->end || p->depth >= 16)
		return -EINVAL;
	switch (*p->s) {
	case '{':
	case '[':
		v->type = *p->s == '{' ? J_OBJ : J_ARR;
		p->depth++;
		r = parse_items(p, v, v->type == J_OBJ ? '}' : ']',
				v->type == J_OBJ);
		p->depth--;
		return r;
	case '"':
		v->type = J_STR;
		return parse_string(p, &v->str);
	case 't': case 'f': case 'n':
		v->type = *p->s == 'n' ? J_NULL : J_BOOL;
		v->u = *p->s == 't';
		while (p->s < p->end && *p->s >= 'a' && *p->s <= 'z')
			p->s++;
		return 0;
	default:
		v->type = J_NUM;
		errno = 0;
		v->num = strtod(p->s, &end);
		if (end == p->s || errno)
			return -EINVAL;
		v->u = strtoull(p->s, NULL, 10);
		p->s = end;
		return 0;
	}
}

static const struct jv *jget(const struct jv *v, const char *key)
{
	for (size_t i = 0; v && v->type == J_OBJ && i < v->nr; i++)
		if (!strcmp(v->kids[i].key, key))
			return &v->kids[i];
	return NULL;
}

static uint64_t jnum(const struct jv *v, const char *key)
{
	const struct jv *x = jget(v, key);

	return x && x->type == J_NUM ? x->u : 0;
}

/* ---- the server's document ---- */

/* Connection rows a report shows by default: a screen, with the rest. */
#define STAT_TOP_CONNS 10

struct row {
	char name[256];
	char state[32]; /* a mirror's member not active: why, else "" */
	bool member;
	uint64_t inflight;
	struct io_stats_op op[REQ_OP_LAST]; /* lat_ns not shown */
};

/* A connection open on bionbd, as far as the table shows it. */
struct conn_row {
	uint64_t id;
	char peer[64];
	char export[64]; /* "" while it negotiates */
	bool negotiating;
	uint64_t buffer_bytes, buffer_waits;
	uint64_t io_bytes; /* read and written, all its ops */
	uint64_t shown_bytes; /* io_bytes, or over the interval: the order */
};

/* bionbd's payload buffers in flight, all workers. */
struct buffers {
	bool present; /* the document has them (bionbd, not older) */
	bool stash_present; /* ... and the stash (not older either) */
	uint64_t limit_bytes, inflight_bytes, waits, evictions, stash_bytes;
};

struct report {
	double time;
	struct row *rows;
	size_t nr;
	struct conn_row *conns; /* open connections (bionbd) */
	size_t nr_conns;
	struct buffers buf;
};

static void report_free(struct report *r)
{
	free(r->rows);
	free(r->conns);
	memset(r, 0, sizeof(*r));
}

static void row_fill(struct row *r, const struct jv *o, bool member)
{
	const struct jv *name = jget(o, "name"), *ops = jget(o, "ops");
	const struct jv *state;

	memset(r, 0, sizeof(*r));
	snprintf(r->name, sizeof(r->name), "%s",
		 name && name->type == J_STR ? name->str : "?");
	r->member = member;
	r->inflight = jnum(o, "inflight");
	state = jget(o, "state");
	if (state && state->type == J_STR && strcmp(state->str, "active")) {
		uint64_t of = jnum(o, "rebuild_bytes");

		if (of)
			snprintf(r->state, sizeof(r->state), "%s %" PRIu64 "%%",
				 state->str, jnum(o, "rebuilt_bytes") * 100 / of);
		else
			snprintf(r->state, sizeof(r->state), "%s", state->str);
	}
	for (int k = 0; k < REQ_OP_LAST; k++) {
		const struct jv *op = jget(ops, nbdl_op_name((enum req_op)k));
		const struct jv *errs = jget(op, "errors");
		const struct jv *hist = jget(op, "histogram_us");

		r->op[k].requests = jnum(op, "requests");
		r->op[k].bytes = jnum(op, "bytes");
		for (int e = 0; e < IOSE_NR; e++)
			r->op[k].errors[e] = jnum(errs, io_stats_err_name(e));
		for (size_t h = 0; hist && h < hist->nr; h++) {
			const struct jv *pair = &hist->kids[h];
			unsigned int b;

			if (pair->type != J_ARR || pair->nr != 2)
				continue;
			/* The bucket's upper edge, 2^b us. */
			b = pair->kids[0].u ?
				    (unsigned int)__builtin_ctzll(pair->kids[0].u) :
				    IO_STATS_BUCKETS;
			if (b < IO_STATS_BUCKETS)
				r->op[k].hist[b] = pair->kids[1].u;
		}
	}
}

static void conn_fill(struct conn_row *c, const struct jv *o)
{
	const struct jv *peer = jget(o, "peer"), *exp = jget(o, "export");

	memset(c, 0, sizeof(*c));
	c->id = jnum(o, "id");
	snprintf(c->peer, sizeof(c->peer), "%s",
		 peer && peer->type == J_STR ? peer->str : "?");
	c->negotiating = !exp || exp->type != J_STR;
	snprintf(c->export, sizeof(c->export), "%s",
		 c->negotiating ? "" : exp->str);
	c->buffer_bytes = jnum(o, "buffer_bytes");
	c->buffer_waits = jnum(o, "buffer_waits");
	for (int k = 0; k < REQ_OP_LAST; k++)
		c->io_bytes += jnum(jget(jget(o, "ops"),
					 nbdl_op_name((enum req_op)k)),
				    "bytes");
}

static int report_parse(const char *text, size_t len, struct report *out)
{
	struct jp p = { .s = text, .end = text + len };
	struct jv doc = { 0 };
	const struct jv *exports, *conns, *buf;
	int r = parse_value(&p, &doc);

	memset(out, 0, sizeof(*out));
	exports = jget(&doc, "exports");
	if (r || !exports || exports->type != J_ARR) {
		r = -EINVAL;
		goto out;
	}
	out->time = jget(&doc, "time") ? jget(&doc, "time")->num : 0;
	buf = jget(&doc, "buffers");
	if (buf && buf->type == J_OBJ) {
		out->buf.present = true;
		out->buf.limit_bytes = jnum(buf, "limit_bytes");
		out->buf.inflight_bytes = jnum(buf, "inflight_bytes");
		out->buf.waits = jnum(buf, "waits");
		out->buf.evictions = jnum(buf, "evictions");
		out->buf.stash_present = jget(buf, "stash_bytes") != NULL;
		out->buf.stash_bytes = jnum(buf, "stash_bytes");
	}
	conns = jget(&doc, "connections");
	if (conns && conns->type == J_ARR && conns->nr) {
		out->conns = calloc(conns->nr, sizeof(*out->conns));
		if (!out->conns) {
			r = -ENOMEM;
			goto out;
		}
		for (size_t i = 0; i < conns->nr; i++)
			conn_fill(&out->conns[out->nr_conns++],
				  &conns->kids[i]);
	}
	for (size_t i = 0; i < exports->nr; i++) {
		const struct jv *e = &exports->kids[i];
		const struct jv *m = jget(e, "members");
		size_t want = out->nr + 1 + (m ? m->nr : 0);
		struct row *v = realloc(out->rows, want * sizeof(*v));

		if (!v) {
			r = -ENOMEM;
			goto out;
		}
		out->rows = v;
		row_fill(&out->rows[out->nr++], e, false);
		for (size_t k = 0; m && k < m->nr; k++)
			row_fill(&out->rows[out->nr++], &m->kids[k], true);
	}
out:
	jv_free(&doc);
	if (r)
		report_free(out);
	return r;
}

/*
 * bionbd answers a connection to its control socket at once; a socket
 * that says nothing for this long is something else (a server waiting
 * for its client to speak first).
 */
#define STAT_ANSWER_S 3

/*
 * Connect to the control socket @where names: @where itself when it is a
 * socket, else (a pidfile) PIDFILE.ctl beside it.  Returns the socket, or
 * -1 with @why filled (one line, naming what was looked for).
 */
static int ctl_connect(const char *where, char *why, size_t wlen)
{
	struct timeval tv = { .tv_sec = STAT_ANSWER_S };
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char ctl[PATH_MAX];
	const char *path = where;
	struct stat st;
	int fd;

	if (stat(where, &st)) {
		snprintf(why, wlen, "%s: %s", where, strerror(errno));
		return -1;
	}
	if (!S_ISSOCK(st.st_mode)) {
		int e;

		snprintf(ctl, sizeof(ctl), "%s.ctl", where);
		e = stat(ctl, &st) ? errno : 0;
		if (e || !S_ISSOCK(st.st_mode)) {
			snprintf(why, wlen, "%s: not a control socket (nor is "
				 "%s: %s)", where, ctl,
				 e ? strerror(e) : "not a socket");
			return -1;
		}
		path = ctl;
	}
	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(why, wlen, "%s: %s", path, strerror(ENAMETOOLONG));
		return -1;
	}
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		/* A bare "Connection refused" does not say the server is gone. */
		snprintf(why, wlen, "%s: %s%s", path, strerror(errno),
			 errno == ECONNREFUSED ?
				 ": no server listens there (one that was "
				 "killed leaves its socket behind)" :
				 "");
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/*
 * Does what @where answered so far (@text, @len bytes) rule out a
 * statistics document?  Told as soon as it shows, so that a peer which
 * keeps its connection open is not waited for.  0, or -1 with @why.
 */
static int not_ours(const char *where, const char *text, size_t len,
		    char *why, size_t wlen)
{
	size_t i = 0;

	if (len < 8 && !memcmp(text, "NBDMAGIC", len))
		return 0; /* the start of an NBD server's greeting, maybe */
	if (!memcmp(text, "NBDMAGIC", 8)) {
		snprintf(why, wlen, "%s: an NBD server's socket, not a control "
			 "socket (bionbd --control SOCK, or PIDFILE.ctl)",
			 where);
		return -1;
	}
	while (i < len && strchr(" \t\r\n", text[i]))
		i++;
	if (i < len && text[i] != '{') {
		snprintf(why, wlen, "%s: not a statistics document", where);
		return -1;
	}
	return 0;
}

/*
 * The control socket's document: 0, or -1 with @why (one line).  Once
 * @where has @answered, silence is a server stopped, not something else.
 */
static int fetch(const char *where, bool answered, char **text, size_t *len,
		 char *why, size_t wlen)
{
	size_t cap = 65536;
	int fd, r = 0;

	fd = ctl_connect(where, why, wlen);
	if (fd < 0)
		return -1;
	*len = 0;
	*text = malloc(cap);
	for (;;) {
		ssize_t n;

		if (!*text) {
			snprintf(why, wlen, "out of memory");
			r = -1;
			break;
		}
		if (*len == cap) {
			char *nt = realloc(*text, cap *= 2);

			if (!nt)
				free(*text);
			*text = nt;
			continue;
		}
		n = read(fd, *text + *len, cap - *len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			snprintf(why, wlen, "%s: no answer in %d s%s", where,
				 STAT_ANSWER_S,
				 answered ? "" : ": not a bionbd control socket");
			r = -1;
			break;
		}
		if (n < 0) {
			snprintf(why, wlen, "%s: %s", where, strerror(errno));
			r = -1;
			break;
		}
		if (!n)
			break;
		*len += (size_t)n;
		r = not_ours(where, *text, *len, why, wlen);
		if (r)
			break;
	}
	close(fd);
	if (r)
		free(*text);
	return r;
}

static const struct row *find_prev(const struct report *prev,
				   const struct row *r, size_t i)
{
	if (!prev)
		return NULL;
	if (i < prev->nr && !strcmp(prev->rows[i].name, r->name) &&
	    prev->rows[i].member == r->member)
		return &prev->rows[i];
	for (size_t k = 0; k < prev->nr; k++)
		if (!strcmp(prev->rows[k].name, r->name) &&
		    prev->rows[k].member == r->member)
			return &prev->rows[k];
	return NULL;
}

static const struct conn_row *find_prev_conn(const struct report *prev,
					     const struct conn_row *c)
{
	for (size_t k = 0; prev && k < prev->nr_conns; k++)
		if (prev->conns[k].id == c->id)
			return &prev->conns[k];
	return NULL;
}

/*
 * The busiest first: what a connection holds in flight now, then the
 * bytes it moved (in the interval, or in all), then the oldest.
 */
static int conn_busier(const void *a, const void *b)
{
	const struct conn_row *x = a, *y = b;

	if (x->buffer_bytes != y->buffer_bytes)
		return x->buffer_bytes > y->buffer_bytes ? -1 : 1;
	if (x->shown_bytes != y->shown_bytes)
		return x->shown_bytes > y->shown_bytes ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/*
 * bionbd's buffers in flight, then a row per open connection, the
 * busiest @top (all with 0): what it holds now, its requests that waited
 * for room and the MiB it moved (in total, or per second over the
 * interval when @secs is not 0, like the counts above); the rest summed
 * in one row, since hundreds of rows would hide the ones that matter.
 */
static void print_buffers(struct report *cur, const struct report *prev,
			  double secs, size_t top)
{
	uint64_t waits = cur->buf.waits, evictions = cur->buf.evictions;
	uint64_t rest_bytes = 0, rest_waits = 0, rest_io = 0;
	double div = secs ? secs : 1;
	char stash[48] = "";

	if (!cur->buf.present)
		return;
	if (secs && prev->buf.present) {
		waits -= prev->buf.waits;
		evictions -= prev->buf.evictions;
	}
	if (cur->buf.stash_present)
		snprintf(stash, sizeof(stash), ", %.1f MiB stashed",
			 cur->buf.stash_bytes / 1048576.0);
	printf("buffers in flight: %.1f of %.1f MiB, %.0f %s, %.0f %s%s\n",
	       cur->buf.inflight_bytes / 1048576.0,
	       cur->buf.limit_bytes / 1048576.0, waits / div,
	       secs ? "waits/s" : "waits", evictions / div,
	       secs ? "evictions/s" : "evictions", stash);
	if (!cur->nr_conns)
		return;
	for (size_t i = 0; i < cur->nr_conns; i++) {
		struct conn_row *c = &cur->conns[i];
		const struct conn_row *p = secs ? find_prev_conn(prev, c) : NULL;

		c->shown_bytes = c->io_bytes - (p ? p->io_bytes : 0);
	}
	qsort(cur->conns, cur->nr_conns, sizeof(*cur->conns), conn_busier);
	printf("%6s %-24s %-24s %8s %9s %9s\n", "conn", "peer", "export",
	       "bufMiB", secs ? "bwaits/s" : "bwaits",
	       secs ? "MiB/s" : "MiB");
	for (size_t i = 0; i < cur->nr_conns; i++) {
		const struct conn_row *c = &cur->conns[i];
		const struct conn_row *p = secs ? find_prev_conn(prev, c) : NULL;
		uint64_t w = c->buffer_waits - (p ? p->buffer_waits : 0);

		if (top && i >= top) {
			rest_bytes += c->buffer_bytes;
			rest_waits += w;
			rest_io += c->shown_bytes;
			continue;
		}
		printf("%6" PRIu64 " %-24.24s %-24.24s %8.1f %9.0f %9.1f\n",
		       c->id, c->peer, c->negotiating ? "-" :
				c->export[0] ? c->export : "''",
		       c->buffer_bytes / 1048576.0, w / div,
		       c->shown_bytes / 1048576.0 / div);
	}
	if (top && cur->nr_conns > top) {
		char rest[64];

		snprintf(rest, sizeof(rest), "%zu more (--connections all)",
			 cur->nr_conns - top);
		printf("%6s %-49s %8.1f %9.0f %9.1f\n", "+", rest,
		       rest_bytes / 1048576.0, rest_waits / div,
		       rest_io / 1048576.0 / div);
	}
}

/*
 * One report: totals since the server started (no @prev), else rates over
 * the interval since @prev and that interval's p99.
 */
static void print_report(struct report *cur, const struct report *prev,
			 size_t top)
{
	double secs = prev ? cur->time - prev->time : 0;
	bool rates = prev && secs > 0;

	printf("%-24s %9s %9s %9s %9s %7s %7s %7s %7s %6s %8s %8s %s\n",
	       rates ? "export/member" : "export/member (total)",
	       rates ? "r/s" : "reads", rates ? "rMiB/s" : "rMiB",
	       rates ? "w/s" : "writes", rates ? "wMiB/s" : "wMiB",
	       rates ? "f/s" : "flush", rates ? "t/s" : "trim",
	       rates ? "z/s" : "zero", rates ? "err/s" : "errors", "inflt",
	       "r_p99ms", "w_p99ms", "state");
	for (size_t i = 0; i < cur->nr; i++) {
		const struct row *r = &cur->rows[i], *p = find_prev(prev, r, i);
		struct io_stats_op d[REQ_OP_LAST];
		uint64_t errs = 0;
		double div = rates ? secs : 1;
		char name[sizeof(r->name) + 4];
		const char *shown;
		size_t len, room;

		for (int k = 0; k < REQ_OP_LAST; k++) {
			d[k] = r->op[k];
			if (p && rates) {
				d[k].requests -= p->op[k].requests;
				d[k].bytes -= p->op[k].bytes;
				for (int e = 0; e < IOSE_NR; e++)
					d[k].errors[e] -= p->op[k].errors[e];
				for (int b = 0; b < IO_STATS_BUCKETS; b++)
					d[k].hist[b] -= p->op[k].hist[b];
			}
			for (int e = 0; e < IOSE_NR; e++)
				errs += d[k].errors[e];
		}
		shown = r->name[0] || r->member ? r->name : "''";
		room = r->member ? 22 : 24;
		/*
		 * Member paths are absolute (the server made them so): their
		 * ends, not their common start, tell them apart.
		 */
		len = strlen(shown);
		if (len > room)
			snprintf(name, sizeof(name), "%s..%s",
				 r->member ? "  " : "", shown + len - (room - 2));
		else
			snprintf(name, sizeof(name), "%s%s",
				 r->member ? "  " : "", shown);
		printf("%-24.24s %9.0f %9.1f %9.0f %9.1f %7.0f %7.0f %7.0f "
		       "%7.0f %6" PRIu64 " %8.3f %8.3f%s%s\n",
		       name, d[REQ_OP_READ].requests / div,
		       d[REQ_OP_READ].bytes / 1048576.0 / div,
		       d[REQ_OP_WRITE].requests / div,
		       d[REQ_OP_WRITE].bytes / 1048576.0 / div,
		       d[REQ_OP_FLUSH].requests / div,
		       d[REQ_OP_DISCARD].requests / div,
		       d[REQ_OP_WRITE_ZEROES].requests / div, errs / div,
		       r->inflight,
		       io_stats_percentile(&d[REQ_OP_READ], 0.99) / 1e6,
		       io_stats_percentile(&d[REQ_OP_WRITE], 0.99) / 1e6,
		       r->state[0] ? " " : "", r->state);
	}
	print_buffers(cur, prev, rates ? secs : 0, top);
	printf("%zu connection%s open\n", cur->nr_conns,
	       cur->nr_conns == 1 ? "" : "s");
	fflush(stdout);
}

static volatile sig_atomic_t stop;

static void on_int(int sig)
{
	stop = 1;
}

int cmd_stat(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "interval", required_argument, NULL, 'i' },
		{ "count", required_argument, NULL, 'n' },
		{ "json", no_argument, NULL, 'j' },
		{ "connections", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct report prev = { 0 }, cur;
	double interval = 1;
	long count = 0;
	size_t top = STAT_TOP_CONNS; /* connection rows; 0: all */
	bool json = false;
	char why[PATH_MAX + 256];
	int ch, r;

	while ((ch = getopt_long(argc, argv, ":i:n:c:h", longopts, NULL)) !=
	       -1) {
		char *end;

		switch (ch) {
		case 'i':
			interval = strtod(optarg, &end);
			if (*end || !(interval >= 0.1 && interval <= 86400))
				return usage_error("--interval %s: expected "
						   "seconds, 0.1 to 86400",
						   optarg);
			break;
		case 'n':
			count = strtol(optarg, &end, 10);
			if (*end || count < 1)
				return usage_error("--count %s: expected a "
						   "number of reports, 1 or "
						   "more", optarg);
			break;
		case 'c': {
			long v;

			if (!strcmp(optarg, "all")) {
				top = 0;
				break;
			}
			v = strtol(optarg, &end, 10);
			if (*end || end == optarg || v < 1)
				return usage_error("--connections %s: expected "
						   "a number of rows, 1 or "
						   "more, or all",
						   optarg);
			top = (size_t)v;
			break;
		}
		case 'j': json = true; break;
		case 'h': usage(stdout); return 0;
		default: return bad_option("stat", ch, argv, longopts);
		}
	}
	if (optind != argc - 1)
		return usage_error("stat: give one SOCKET or PIDFILE (%d "
				   "given); try 'bioctl stat --help'",
				   argc - optind);
	/* A document is for a script: one, unless more are asked for. */
	if (json && !count)
		count = 1;
	signal(SIGINT, on_int);
	signal(SIGTERM, on_int);
	for (long n = 0; !stop && (!count || n < count); n++) {
		struct timespec ts = { (time_t)interval,
				       (long)((interval - (time_t)interval) *
					      1e9) };
		size_t len = 0;
		char *text = NULL;

		if (n)
			nanosleep(&ts, NULL);
		if (stop)
			break;
		r = fetch(argv[optind], n > 0, &text, &len, why, sizeof(why));
		if (r) {
			/*
			 * A pidfile removed, or a socket that said nothing, is
			 * the server going while it was watched.
			 */
			if (n)
				fprintf(stderr,
					"bioctl: the server stopped answering "
					"after %ld report%s: %s\n",
					n, n == 1 ? "" : "s", why);
			else
				fprintf(stderr, "bioctl: %s\n", why);
			report_free(&prev);
			return 1;
		}
		if (json) {
			fwrite(text, 1, len, stdout);
			fflush(stdout);
			free(text);
			continue;
		}
		r = report_parse(text, len, &cur);
		free(text);
		if (r) {
			fprintf(stderr,
				"bioctl: %s: not a statistics document\n",
				argv[optind]);
			report_free(&prev);
			return 1;
		}
		if (n)
			putchar('\n');
		print_report(&cur, n ? &prev : NULL, top);
		report_free(&prev);
		prev = cur;
	}
	report_free(&prev);
	return 0;
}
