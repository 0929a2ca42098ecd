// SPDX-License-Identifier: MIT
/*
 * export.c - exports: check every definition, then open them all; flush
 * and close; look up by name.  And the layer's logging, with the policy for
 * member errors that the engine reports through its hook.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bionbd/nbdl.h>
#include <bionbd/superblock.h>
#include <bionbd/trace.h>
#include <bionbd/volume.h>

/* ---- messages ---- */

static nbdl_log_fn *logger;
static const char *stderr_prefix; /* "bionbd": lines read "bionbd: ..." */

static void log_stderr(enum nbdl_level level, const char *fmt, va_list ap)
{
	if (level == NBDL_DEBUG)
		return;
	if (stderr_prefix)
		fprintf(stderr, "%s: ", stderr_prefix);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

void nbdl_log(enum nbdl_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	(logger ? logger : log_stderr)(level, fmt, ap);
	va_end(ap);
}

static void member_error(const struct target *t, enum req_op op,
			 uint64_t offset, uint64_t length, int err)
{
	/* A refused fast zero is an answer, not a failure. */
	enum nbdl_level level =
		op == REQ_OP_WRITE_ZEROES && err == -EOPNOTSUPP ? NBDL_DEBUG :
								  NBDL_ERROR;

	nbdl_log(level,
		 "member %s: %s at offset %" PRIu64 " length %" PRIu64 ": %s",
		 t->name, nbdl_op_name(op), offset, length, strerror(-err));
}

/* A member marked faulty, a mirror's resync: the volume's own news. */
static void volume_notice(enum target_notice_level level, const char *msg)
{
	nbdl_log(level == TARGET_NOTICE_ERROR ? NBDL_ERROR : NBDL_INFO, "%s",
		 msg);
}

void nbdl_set_logger(nbdl_log_fn *fn)
{
	logger = fn;
	target_set_error_reporter(member_error);
	target_set_notice_reporter(volume_notice);
}

void nbdl_log_to_stderr(const char *prefix)
{
	stderr_prefix = prefix;
	nbdl_set_logger(NULL);
}

/* ---- exports ---- */

/* Does @msg start with @prefix, @what and then one of @ends? */
static bool names(const char *msg, const char *prefix, const char *what,
		  const char *ends)
{
	size_t n = strlen(prefix), w = strlen(what);

	return !strncmp(msg, prefix, n) && !strncmp(msg + n, what, w) &&
	       msg[n + w] && strchr(ends, msg[n + w]);
}

/*
 * The line of @d that a volume's message is about.  The engine begins
 * one about a member with "member PATH" (or "members PATH and ..."), a
 * spare's with "spare PATH", a rule's with "fault = RULE:" and a key's
 * with "KEY VALUE:" (size, stripe-size, level, copies, timeout); anything
 * else is the export's, at its header.
 */
static unsigned int culprit_line(const struct conf_export *d, const char *msg)
{
	static const char *const kinds[] = { "fault = ", "delay = " };
	unsigned int line = 0;
	size_t longest = 0;

	/* The longest path that fits: "/m1" is not "/m1 old". */
	for (unsigned int i = 0; d->member_lines && i < d->nr_members; i++)
		if ((names(msg, "member ", d->members[i], ": ") ||
		     names(msg, "members ", d->members[i], " ")) &&
		    strlen(d->members[i]) >= longest) {
			longest = strlen(d->members[i]);
			line = d->member_lines[i];
		}
	for (unsigned int i = 0; d->spare_lines && i < d->nr_spares; i++)
		if (names(msg, "spare ", d->spares[i], ": ") &&
		    strlen(d->spares[i]) >= longest) {
			longest = strlen(d->spares[i]);
			line = d->spare_lines[i];
		}
	for (unsigned int i = 0; d->fault_lines && i < d->nr_faults; i++)
		if (names(msg, kinds[d->faults[i].kind == FAULT_DELAY],
			  d->faults[i].text, ":") &&
		    !line)
			line = d->fault_lines[i];
	if (!line && !strncmp(msg, "size ", 5))
		line = d->size_line;
	if (!line && !strncmp(msg, "stripe-size ", 12))
		line = d->chunk_line;
	if (!line && !strncmp(msg, "level ", 6))
		line = d->level_line;
	if (!line && !strncmp(msg, "copies ", 7))
		line = d->copies_line;
	if (!line && !strncmp(msg, "timeout ", 8))
		line = d->timeout_line;
	return line ? line : d->line;
}

/*
 * The engine names a key by its value in bytes ("stripe-size 131072:
 * ..."); the user gave "128K".  A message about size, stripe-size, copies,
 * timeout or level gets the key and the value as given, in the front ends' one
 * spelling ("stripe-size=128K: ...", as conf_export_set's own messages):
 * a file's line shows it so, the plugin's keys are so, and bionbd turns
 * it into the flag.  Other messages are @msg as it is.
 */
static const char *as_given(const struct conf_export *d, const char *msg,
			    char *buf, size_t len)
{
	const struct {
		const char *key, *text;
	} given[] = {
		{ "size", d->size_text },
		{ "stripe-size", d->chunk_text },
		{ "copies", d->copies_text },
		{ "timeout", d->timeout_text },
		{ "level", d->level_set ? sb_level_name(d->level) : NULL },
	};
	const char *value, *rest;
	size_t n;

	for (size_t i = 0; i < sizeof(given) / sizeof(given[0]); i++) {
		n = strlen(given[i].key);
		if (!given[i].text || strncmp(msg, given[i].key, n) ||
		    msg[n] != ' ')
			continue;
		value = msg + n + 1;
		rest = strstr(value, ": ");
		/* One word, then ": why": the value, not a phrase. */
		if (!rest || memchr(value, ' ', (size_t)(rest - value)))
			return msg;
		snprintf(buf, len, "%s=%s%s", given[i].key, given[i].text, rest);
		return buf;
	}
	return msg;
}

static void export_errmsg(char *errbuf, size_t errlen, const char *conf_path,
			  const struct conf_export *d, const char *msg)
{
	char buf[1100];
	const char *text = as_given(d, msg, buf, sizeof(buf));

	if (conf_path)
		snprintf(errbuf, errlen, "%s:%u: [export %s] %s", conf_path,
			 culprit_line(d, msg), d->name, text);
	else
		snprintf(errbuf, errlen, "%s", text);
}

/* @undo: the start failed; take back the members its open made. */
static void export_release(struct nbdl_export *x, bool undo)
{
	target_destroy(x->vol); /* the members' statistics with it */
	if (undo)
		volume_unmake(x->made);
	else
		volume_made_free(x->made);
	io_stats_destroy(x->stats);
	free(x->name);
	free(x->description);
	pthread_mutex_destroy(&x->rmw_lock);
}

/*
 * Two exports on one storage would each write under the other's cache and
 * layout.  Only read-only exports may share: nothing changes under either.
 * Every member is looked at once; the pairs are compared in memory, so a
 * file with thousands of exports costs no more system calls than that.
 */
static int exports_disjoint(const struct conf_export *defs, unsigned int nr,
			    bool readonly, const char *conf_path,
			    char *errbuf, size_t errlen)
{
	struct volume_ids **ids;
	struct volume_config vc;
	struct volume_overlap ov;
	bool ro_i, ro_j;
	char msg[1024];
	unsigned int i, j;
	int r = 0;

	if (nr < 2)
		return 0;
	ids = calloc(nr, sizeof(*ids));
	if (!ids) {
		snprintf(errbuf, errlen, "out of memory");
		return -ENOMEM;
	}
	for (i = 0; i < nr && !r; i++) {
		conf_export_volume(&defs[i], &vc);
		r = volume_ids_get(&ids[i], &vc);
		if (r) {
			snprintf(msg, sizeof(msg), "%s",
				 r == -ENOMEM ? "out of memory" : strerror(-r));
			export_errmsg(errbuf, errlen, conf_path, &defs[i], msg);
		}
	}
	for (i = 0; i < nr && !r; i++) {
		ro_i = readonly || defs[i].readonly;
		for (j = i + 1; j < nr && !r; j++) {
			ro_j = readonly || defs[j].readonly;
			if ((ro_i && ro_j) || !volume_overlap(ids[i], ids[j], &ov))
				continue;
			snprintf(msg, sizeof(msg),
				 "member %s: the same storage as member %s of [export %s] (%s)",
				 defs[j].members[ov.member_b],
				 defs[i].members[ov.member_a], defs[i].name,
				 ov.why);
			/* The command line has one export; this is for others. */
			if (conf_path)
				export_errmsg(errbuf, errlen, conf_path,
					      &defs[j], msg);
			else
				snprintf(errbuf, errlen, "[export %s] %s",
					 defs[j].name, msg);
			r = -EINVAL;
		}
	}
	for (i = 0; i < nr; i++)
		volume_ids_free(ids[i]);
	free(ids);
	return r;
}

static int exports_open(struct nbdl_export **out,
			const struct conf_export *defs, unsigned int nr,
			bool readonly, const char *conf_path, char *errbuf,
			size_t errlen)
{
	struct nbdl_export *v;
	struct volume_config vc;
	char msg[1024];
	unsigned int i, opened = 0;
	int r = 0;

	if (!nr) {
		snprintf(errbuf, errlen, "no export to serve");
		return -EINVAL;
	}
	/* Every export must pass before any of them creates a member. */
	for (i = 0; i < nr; i++) {
		conf_export_volume(&defs[i], &vc);
		vc.readonly |= readonly;
		r = volume_check(&vc, msg, sizeof(msg));
		if (r) {
			export_errmsg(errbuf, errlen, conf_path, &defs[i], msg);
			return r;
		}
	}
	r = exports_disjoint(defs, nr, readonly, conf_path, errbuf, errlen);
	if (r)
		return r;
	v = calloc(nr, sizeof(*v));
	if (!v) {
		snprintf(errbuf, errlen, "out of memory");
		return -ENOMEM;
	}
	for (i = 0; i < nr; i++, opened++) {
		const struct conf_export *d = &defs[i];
		struct nbdl_export *x = &v[i];
		struct target_iomap m;

		conf_export_volume(d, &vc);
		vc.readonly |= readonly;
		/* Without memory for it, the export is served uncounted. */
		x->stats = vc.stats = d->no_statistics ?
					      NULL :
					      io_stats_create(d->name, NULL);
		x->trace_id = vc.trace_id =
			trace_obj_add(TRACE_OBJ_EXPORT, 0, d->name);
		r = volume_open_made(&x->vol, &vc, &x->info, &x->made, msg,
				     sizeof(msg));
		if (r) {
			io_stats_destroy(x->stats);
			export_errmsg(errbuf, errlen, conf_path, d, msg);
			goto err;
		}
		pthread_mutex_init(&x->rmw_lock, NULL);
		x->size_bytes = x->vol->size_bytes;
		x->iomap = target_iomap(x->vol, 0, 1, 0, &m) == 0;
		x->readonly = vc.readonly || x->vol->readonly;
		x->name = strdup(d->name);
		/* A self-describing volume is described by its name. */
		if (d->description)
			x->description = strdup(d->description);
		else if (x->info.superblocks && x->info.name[0])
			x->description = strdup(x->info.name);
		if (!x->name || ((d->description || x->info.name[0]) &&
				 !x->description)) {
			opened++; /* release it too */
			snprintf(errbuf, errlen, "out of memory");
			r = -ENOMEM;
			goto err;
		}
	}
	*out = v;
	return 0;
err:
	/* The exports opened before this one made members too. */
	for (i = 0; i < opened; i++)
		export_release(&v[i], true);
	free(v);
	return r;
}

int nbdl_exports_open(struct nbdl_export **out, const struct conf_export *defs,
		      unsigned int nr, bool readonly, const char *conf_path,
		      char *errbuf, size_t errlen)
{
	int r;

	/* One connection a remote member for all the checks and opens. */
	volume_hold();
	r = exports_open(out, defs, nr, readonly, conf_path, errbuf, errlen);
	volume_release();
	return r;
}

void nbdl_exports_close(struct nbdl_export *v, unsigned int nr,
			enum ioq_backend backend)
{
	struct ioq *q = ioq_current(), *tmp = NULL;
	unsigned int i;
	int r;

	if (!v)
		return;
	if (!q && ioq_create(&tmp, backend, 8) == 0) {
		ioq_set_current(tmp);
		q = tmp;
	}
	for (i = 0; i < nr; i++) {
		if (q && !v[i].readonly) {
			r = nbdl_do(&v[i], NBD_CMD_FLUSH, 0, NULL, 0, 0, NULL, 0, 0);
			if (r)
				nbdl_log(NBDL_ERROR, "export '%s': flush: %s",
					 v[i].name, strerror(-r));
		}
		export_release(&v[i], false);
	}
	if (tmp) {
		ioq_set_current(NULL);
		ioq_destroy(tmp);
	}
	free(v);
}

void nbdl_exports_unmake(struct nbdl_export *v, unsigned int nr)
{
	for (unsigned int i = 0; v && i < nr; i++) {
		volume_unmake(v[i].made);
		v[i].made = NULL;
	}
}

void nbdl_exports_keep(struct nbdl_export *v, unsigned int nr)
{
	for (unsigned int i = 0; v && i < nr; i++) {
		volume_made_free(v[i].made);
		v[i].made = NULL;
	}
}

struct nbdl_export *nbdl_export_find(struct nbdl_export *v, unsigned int nr,
				     const void *name, size_t len)
{
	if (!nr)
		return NULL;
	if (!len)
		return &v[0];
	for (unsigned int i = 0; i < nr; i++)
		if (strlen(v[i].name) == len && !memcmp(v[i].name, name, len))
			return &v[i];
	return NULL;
}
