// SPDX-License-Identifier: MIT
/*
 * stats.c - the exports' statistics (engine stats.h) as JSON, for files,
 * the control socket and bioctl stat, and as log lines, for SIGUSR1.  The
 * JSON layout is documented in docs/stats.md; tools read it by name.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <bionbd/nbdl.h>
#include <bionbd/plural.h>

/* Members an export can have: roles, and a spare or two in service. */
#define STATS_MAX_CHILDREN 80

void nbdl_json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

static void json_op(FILE *f, const struct io_stats_op *o)
{
	bool first = true;

	fprintf(f,
		"{\"requests\": %" PRIu64 ", \"bytes\": %" PRIu64
		", \"latency_ns_sum\": %" PRIu64 ", \"errors\": {",
		o->requests, o->bytes, o->lat_ns);
	for (unsigned int e = 0; e < IOSE_NR; e++) {
		if (!o->errors[e])
			continue;
		fprintf(f, "%s\"%s\": %" PRIu64, first ? "" : ", ",
			io_stats_err_name(e), o->errors[e]);
		first = false;
	}
	fprintf(f,
		"}, \"p50_us\": %" PRIu64 ", \"p99_us\": %" PRIu64
		", \"p999_us\": %" PRIu64 ", \"histogram_us\": [",
		io_stats_percentile(o, 0.5) / 1000,
		io_stats_percentile(o, 0.99) / 1000,
		io_stats_percentile(o, 0.999) / 1000);
	first = true;
	for (unsigned int b = 0; b < IO_STATS_BUCKETS; b++) {
		if (!o->hist[b])
			continue;
		/* [upper edge in us, count]: the bucket below that edge. */
		fprintf(f, "%s[%llu, %" PRIu64 "]", first ? "" : ", ",
			1ull << b, o->hist[b]);
		first = false;
	}
	fputs("]}", f);
}

static void json_object(FILE *f, struct io_stats *st)
{
	struct io_stats_snap s;

	io_stats_snapshot(st, &s);
	fputs("{\"name\": ", f);
	nbdl_json_string(f, io_stats_name(st));
	fprintf(f, ", \"inflight\": %" PRIu64 ", \"ops\": {", s.inflight);
	for (unsigned int op = 0; op < REQ_OP_LAST; op++) {
		fprintf(f, "%s\"%s\": ", op ? ", " : "",
			nbdl_op_name((enum req_op)op));
		json_op(f, &s.op[op]);
	}
	fputc('}', f);
}

/*
 * A mirror's member: its state, and a rebuild's progress.  A member that
 * left the mirror (a spare took its role) keeps its counts, and says so.
 */
static void json_member_state(FILE *f, const char *name,
			      const struct target_member_state *st,
			      unsigned int nst)
{
	static const char *const names[] = {
		[TARGET_MEMBER_ACTIVE] = "active",
		[TARGET_MEMBER_FAULTY] = "faulty",
		[TARGET_MEMBER_REBUILDING] = "rebuilding",
	};

	if (!nst)
		return; /* not a mirror */
	for (unsigned int i = 0; i < nst; i++) {
		if (strcmp(st[i].name, name))
			continue;
		fprintf(f, ", \"state\": \"%s\"", names[st[i].state]);
		if (st[i].state == TARGET_MEMBER_REBUILDING)
			fprintf(f,
				", \"rebuilt_bytes\": %" PRIu64
				", \"rebuild_bytes\": %" PRIu64,
				st[i].rebuilt, st[i].bytes);
		return;
	}
	fputs(", \"state\": \"replaced\"", f);
}

void nbdl_stats_json(FILE *f, struct nbdl_export *v, unsigned int nr,
		     nbdl_stats_more_fn *more, void *arg)
{
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	fprintf(f, "{\"time\": %lld.%03ld, \"exports\": [",
		(long long)now.tv_sec, now.tv_nsec / 1000000);
	for (unsigned int i = 0, shown = 0; i < nr; i++) {
		struct io_stats *kids[STATS_MAX_CHILDREN];
		struct target_member_state st[STATS_MAX_CHILDREN];
		unsigned int n, nst;

		if (!v[i].stats)
			continue; /* statistics = false */
		fputs(shown++ ? ",\n  " : "\n  ", f);
		json_object(f, v[i].stats);
		n = io_stats_children(v[i].stats, kids, STATS_MAX_CHILDREN);
		if (n > STATS_MAX_CHILDREN)
			n = STATS_MAX_CHILDREN;
		nst = target_member_states(v[i].vol, st, STATS_MAX_CHILDREN);
		fputs(", \"members\": [", f);
		for (unsigned int k = 0; k < n; k++) {
			fputs(k ? ",\n    " : "\n    ", f);
			json_object(f, kids[k]);
			json_member_state(f, io_stats_name(kids[k]), st, nst);
			fputc('}', f);
		}
		fputs("]}", f);
	}
	fputs("\n]", f);
	if (more)
		more(f, arg);
	fputs("}\n", f);
}

int nbdl_stats_probe(const char *path)
{
	char *tmp = NULL;
	struct stat st;
	int fd, r = 0;

	/* The file is renamed over @path at the end: a directory stays. */
	if (!stat(path, &st) && S_ISDIR(st.st_mode))
		return -EISDIR;
	if (asprintf(&tmp, "%s.tmp", path) < 0)
		return -ENOMEM;
	fd = open(tmp, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
	if (fd < 0) {
		r = -errno;
	} else {
		close(fd);
		unlink(tmp);
	}
	free(tmp);
	return r;
}

int nbdl_stats_write(const char *path, struct nbdl_export *v, unsigned int nr,
		     nbdl_stats_more_fn *more, void *arg)
{
	char *tmp = NULL;
	FILE *f;
	int r = 0;

	/* Readers never see half a file: written aside, then renamed. */
	if (asprintf(&tmp, "%s.tmp", path) < 0)
		return -ENOMEM;
	f = fopen(tmp, "we");
	if (!f) {
		r = -errno;
		goto out;
	}
	nbdl_stats_json(f, v, nr, more, arg);
	if (fclose(f) || rename(tmp, path)) {
		r = -errno;
		unlink(tmp);
	}
out:
	if (r)
		nbdl_log(NBDL_ERROR, "statistics to %s: %s", path,
			 strerror(-r));
	free(tmp);
	return r;
}

/* One line per object: what each op did, for the log. */
static void log_object(const char *what, struct io_stats *st)
{
	struct io_stats_snap s;
	char line[1024];
	size_t len = 0;

	io_stats_snapshot(st, &s);
	for (unsigned int op = 0; op < REQ_OP_LAST && len < sizeof(line); op++) {
		const struct io_stats_op *o = &s.op[op];
		uint64_t errs = 0;

		if (!o->requests)
			continue;
		for (unsigned int e = 0; e < IOSE_NR; e++)
			errs += o->errors[e];
		len += (size_t)snprintf(line + len, sizeof(line) - len,
					" %s %" PRIu64 " (%" PRIu64
					" bytes, %" PRIu64 " error%s, p50 %" PRIu64
					" us, p99 %" PRIu64 " us);",
					nbdl_op_name((enum req_op)op),
					o->requests, o->bytes, errs,
					plural(errs),
					io_stats_percentile(o, 0.5) / 1000,
					io_stats_percentile(o, 0.99) / 1000);
	}
	/* "op ...; op ...": a separator, not a terminator. */
	if (len && len < sizeof(line))
		line[--len] = '\0';
	nbdl_log(NBDL_INFO, "stats: %s '%s': %" PRIu64 " in flight;%s", what,
		 io_stats_name(st), s.inflight, len ? line : " no I/O yet");
}

void nbdl_stats_log(struct nbdl_export *v, unsigned int nr)
{
	for (unsigned int i = 0; i < nr; i++) {
		struct io_stats *kids[STATS_MAX_CHILDREN];
		unsigned int n;

		if (!v[i].stats)
			continue;
		log_object("export", v[i].stats);
		n = io_stats_children(v[i].stats, kids, STATS_MAX_CHILDREN);
		for (unsigned int k = 0; k < n && k < STATS_MAX_CHILDREN; k++)
			log_object("member", kids[k]);
	}
}
