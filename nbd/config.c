// SPDX-License-Identifier: MIT
/*
 * config.c - the one configuration parser: INI files (via libinih) and the
 * single-key setters that command-line front ends share with it.
 *
 * libinih does the tokenising; around it sits a line reader of our own that
 * (a) counts physical lines, so every message carries the right line number
 * without relying on how the installed libinih was built, (b) strips leading
 * blanks, so indentation is just indentation and never libinih's multi-line
 * continuation (an indented "file =" would otherwise silently become a
 * second value of the previous key), and (c) sees section headers, so empty
 * or repeated sections are reported even though libinih only calls us for
 * key = value lines.
 */
#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <bionbd/config.h>
#include <bionbd/path.h>
#include <bionbd/superblock.h>

/* Larger files are certainly not configuration files. */
#define CONF_MAX_FILE_BYTES (1u << 20)

static void __attribute__((format(printf, 3, 4)))
set_err(char *errbuf, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!errbuf || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(errbuf, errlen, fmt, ap);
	va_end(ap);
}

int conf_parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = {"1", "true", "yes", "on"};
	static const char *const no[] = {"0", "false", "no", "off"};
	size_t i;

	for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (!strcasecmp(s, yes[i])) {
			*out = true;
			return 0;
		}
		if (!strcasecmp(s, no[i])) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

int conf_parse_chunk(const char *s, uint64_t *out, char *errbuf, size_t errlen)
{
	uint64_t v;

	if (parse_size(s, &v)) {
		set_err(errbuf, errlen, "not a size (e.g. 64K, 1M)");
		return -EINVAL;
	}
	if (!stripe_chunk_valid(v)) {
		set_err(errbuf, errlen,
			"stripe size must be a power of two from %uK to %uG",
			STRIPE_MIN_CHUNK >> 10, STRIPE_MAX_CHUNK >> 30);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

int conf_parse_uint(const char *s, unsigned int min, unsigned int max,
		    unsigned int *out)
{
	unsigned long v;
	char *end;

	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -EINVAL;
	*out = (unsigned int)v;
	return 0;
}

int conf_set_string(char **slot, const char *value)
{
	char *s = strdup(value);

	if (!s)
		return -ENOMEM;
	free(*slot);
	*slot = s;
	return 0;
}

int conf_export_init(struct conf_export *e, const char *name)
{
	memset(e, 0, sizeof(*e));
	e->chunk_bytes = STRIPE_DEFAULT_CHUNK;
	e->name = strdup(name);
	return e->name ? 0 : -ENOMEM;
}

void conf_export_release(struct conf_export *e)
{
	unsigned int i;

	for (i = 0; i < e->nr_members; i++)
		free(e->members[i]);
	free(e->members);
	for (i = 0; i < e->nr_spares; i++)
		free(e->spares[i]);
	free(e->spares);
	for (i = 0; i < e->nr_faults; i++)
		free((char *)e->faults[i].text);
	free(e->faults);
	free(e->size_text);
	free(e->chunk_text);
	free(e->copies_text);
	free(e->timeout_text);
	free(e->member_lines);
	free(e->spare_lines);
	free(e->fault_lines);
	free(e->name);
	free(e->description);
	memset(e, 0, sizeof(*e));
}

/*
 * Append @path to a member or spare list (@key names it in messages).
 * Only the spelling is compared here; volume_open() compares the files
 * themselves (symlinks, hard links) before creating anything, and says
 * "given twice" as this does: one mistake, one wording.
 */
static int path_list_add(const char *key, char ***list, unsigned int *nr,
			 const char *path, char *errbuf, size_t errlen)
{
	char **v;
	unsigned int i;

	if (!*path) {
		set_err(errbuf, errlen, "%s=: empty path", key);
		return -EINVAL;
	}
	for (i = 0; i < *nr; i++) {
		if (!strcmp((*list)[i], path)) {
			set_err(errbuf, errlen, "%s=%s: given twice", key, path);
			return -EINVAL;
		}
	}
	v = realloc(*list, (*nr + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	*list = v;
	v[*nr] = strdup(path);
	if (!v[*nr])
		return -ENOMEM;
	(*nr)++;
	return 0;
}

/*
 * A fault or delay rule: its words are checked now (the line is known
 * here); member numbers once the volume's member count is (volume_check).
 */
static int fault_add(struct conf_export *e, const char *key,
		     const char *value, char *errbuf, size_t errlen)
{
	enum fault_kind kind = key[0] == 'd' ? FAULT_DELAY : FAULT_ERROR;
	struct fault_text *v;
	char why[512];
	int r;

	r = fault_rule_check(kind, value, 0, why, sizeof(why));
	if (r) {
		set_err(errbuf, errlen, "%s=%s: %s", key, value, why);
		return r;
	}
	v = realloc(e->faults, (e->nr_faults + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	e->faults = v;
	v[e->nr_faults].kind = kind;
	v[e->nr_faults].text = strdup(value);
	if (!v[e->nr_faults].text)
		return -ENOMEM;
	e->nr_faults++;
	return 0;
}

int conf_export_set(struct conf_export *e, const char *key, const char *value,
		    char *errbuf, size_t errlen)
{
	char why[128];
	uint64_t v;
	bool b;

	if (!strcmp(key, "file"))
		return path_list_add(key, &e->members, &e->nr_members, value,
				     errbuf, errlen);
	if (!strcmp(key, "spare"))
		return path_list_add(key, &e->spares, &e->nr_spares, value,
				     errbuf, errlen);

	if (!strcmp(key, "fault") || !strcmp(key, "delay"))
		return fault_add(e, key, value, errbuf, errlen);
	if (!strcmp(key, "stripe-size")) {
		if (conf_parse_chunk(value, &v, why, sizeof(why))) {
			set_err(errbuf, errlen, "%s=%s: %s", key, value, why);
			return -EINVAL;
		}
		e->chunk_bytes = v;
		return conf_set_string(&e->chunk_text, value);
	}
	if (!strcmp(key, "size")) {
		if (parse_size(value, &v)) {
			set_err(errbuf, errlen,
				"%s=%s: not a size (e.g. 4G, 512M, 1048576)",
				key, value);
			return -EINVAL;
		}
		/*
		 * 0 would read as "no size" and serve whatever the members
		 * hold, which is not what was asked for.
		 */
		if (!v) {
			set_err(errbuf, errlen,
				"%s=%s: a volume of 0 bytes (leave the size out "
				"to take the members' own)",
				key, value);
			return -EINVAL;
		}
		/* Sector-based engine: a ragged tail is unreachable. */
		if (v % SECTOR_SIZE) {
			set_err(errbuf, errlen,
				"%s=%s: not a multiple of %u bytes", key, value,
				SECTOR_SIZE);
			return -EINVAL;
		}
		e->size_bytes = v;
		return conf_set_string(&e->size_text, value);
	}
	if (!strcmp(key, "level")) {
		if (!strcmp(value, "raid0"))
			e->level = SB_LEVEL_RAID0;
		else if (!strcmp(value, "raid1"))
			e->level = SB_LEVEL_RAID1;
		else if (!strcmp(value, "raid10"))
			e->level = SB_LEVEL_RAID10;
		else {
			set_err(errbuf, errlen,
				"%s=%s: expected raid0, raid1 or raid10", key,
				value);
			return -EINVAL;
		}
		e->level_set = true;
		return 0;
	}
	if (!strcmp(key, "copies")) {
		char *end;
		unsigned long k;

		errno = 0;
		k = strtoul(value, &end, 10);
		if (errno || end == value || *end || value[0] == '-' || k < 2 ||
		    k > SB_MAX_ROLES) {
			set_err(errbuf, errlen,
				"%s=%s: expected a number of copies, 2 to %u",
				key, value, SB_MAX_ROLES);
			return -EINVAL;
		}
		e->copies = (uint32_t)k;
		return conf_set_string(&e->copies_text, value);
	}
	if (!strcmp(key, "timeout")) {
		char *end;
		double s;

		errno = 0;
		s = strtod(value, &end);
		if (errno || end == value || *end || !(s >= 0.001 && s <= 3600)) {
			set_err(errbuf, errlen,
				"%s=%s: expected seconds, 0.001 to 3600 (a remote member's requests)",
				key, value);
			return -EINVAL;
		}
		e->remote_timeout_ms = (unsigned int)(s * 1000 + 0.5);
		return conf_set_string(&e->timeout_text, value);
	}
	if (!strcmp(key, "statistics") || !strcmp(key, "lock") ||
	    !strcmp(key, "degraded")) {
		if (conf_parse_bool(value, &b)) {
			set_err(errbuf, errlen, "%s=%s: expected true or false",
				key, value);
			return -EINVAL;
		}
		if (key[0] == 'd')
			e->degraded = b;
		else
			*(key[0] == 's' ? &e->no_statistics : &e->no_lock) = !b;
		return 0;
	}
	if (!strcmp(key, "read-only")) {
		if (conf_parse_bool(value, &b)) {
			set_err(errbuf, errlen, "%s=%s: expected true or false",
				key, value);
			return -EINVAL;
		}
		e->readonly = b;
		return 0;
	}
	if (!strcmp(key, "description")) {
		if (strlen(value) > CONF_MAX_NAME_BYTES) {
			set_err(errbuf, errlen, "%s: longer than %u bytes", key,
				CONF_MAX_NAME_BYTES);
			return -EINVAL;
		}
		if (!*value) {
			free(e->description);
			e->description = NULL;
			return 0;
		}
		return conf_set_string(&e->description, value);
	}
	set_err(errbuf, errlen,
		"%s=%s: unknown key (export keys: file, spare, level, copies, "
		"stripe-size, size, read-only, description, fault, delay, "
		"statistics, lock, degraded, timeout)",
		key, value);
	return -ENOENT;
}

int conf_export_check(const struct conf_export *e, char *errbuf, size_t errlen)
{
	size_t len = strlen(e->name);

	/*
	 * Checked here rather than in conf_export_init(), whose callers take
	 * any failure for want of memory; every front end calls this.
	 */
	if (len > CONF_MAX_NAME_BYTES) {
		set_err(errbuf, errlen,
			"export name '%.32s...': %zu bytes, longer than NBD's %u",
			e->name, len, CONF_MAX_NAME_BYTES);
		return -EINVAL;
	}
	if (!e->nr_members) {
		set_err(errbuf, errlen,
			"no member: add at least one file=PATH");
		return -EINVAL;
	}
	return 0;
}

/* Is @st one of the files @paths names? */
static const char *path_among(const struct stat *st, char *const *paths,
			      unsigned int n)
{
	struct stat m;

	for (unsigned int i = 0; i < n; i++)
		if (!stat(paths[i], &m) && m.st_dev == st->st_dev &&
		    m.st_ino == st->st_ino)
			return paths[i];
	return NULL;
}

int conf_exports_path_check(const struct conf_export *defs, unsigned int nr,
			    const char *path, const char *what, char *errbuf,
			    size_t errlen)
{
	struct stat st;

	/* Not there yet: not a member (they exist once the volume is open). */
	if (!path || stat(path, &st) || !S_ISREG(st.st_mode))
		return 0;
	for (unsigned int i = 0; i < nr; i++) {
		const char *m = path_among(&st, defs[i].members,
					   defs[i].nr_members);

		if (!m)
			m = path_among(&st, defs[i].spares, defs[i].nr_spares);
		if (m) {
			set_err(errbuf, errlen,
				"%s%s: that is member %s of the volume; it "
				"would be overwritten",
				what, path, m);
			return -EINVAL;
		}
	}
	return 0;
}

void conf_export_volume(const struct conf_export *e, struct volume_config *vc)
{
	memset(vc, 0, sizeof(*vc));
	vc->members = (const char *const *)e->members;
	vc->nr_members = e->nr_members;
	vc->spares = (const char *const *)e->spares;
	vc->nr_spares = e->nr_spares;
	vc->faults = e->faults;
	vc->nr_faults = e->nr_faults;
	vc->level_set = e->level_set;
	vc->level = e->level;
	vc->copies = e->copies;
	vc->chunk_bytes = e->chunk_bytes;
	vc->size_bytes = e->size_bytes;
	vc->readonly = e->readonly;
	vc->no_lock = e->no_lock;
	vc->degraded = e->degraded;
	vc->remote_timeout_ms = e->remote_timeout_ms;
}

/* -------- the file parser -------- */

enum section { SEC_NONE, SEC_SERVER, SEC_EXPORT };

struct parser {
	struct conf *c;
	const char *name;    /* for messages */
	const char *basedir; /* NULL: keep relative paths */
	const char *text, *pos, *end;
	unsigned int line; /* physical line last handed to libinih */
	enum section sec;
	unsigned int cur; /* index of the current export */
	unsigned int server_line;
	/*
	 * The current export's keys given so far that may be given once
	 * (conf_key_repeats), with their lines: a second one is refused,
	 * not silently taken over the first.
	 */
	struct {
		char key[24];
		unsigned int line;
	} seen[16];
	unsigned int nr_seen;
	int err; /* first error, 0 = none */
	unsigned int err_line;
	char *errbuf;
	size_t errlen;
};

static void __attribute__((format(printf, 3, 4)))
fail(struct parser *p, int err, const char *fmt, ...)
{
	va_list ap;

	if (p->err)
		return; /* the first error is the one worth reading */
	p->err = err;
	p->err_line = p->line;
	if (!p->errbuf || !p->errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(p->errbuf, p->errlen, fmt, ap);
	va_end(ap);
}

static char *trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

static int add_export(struct parser *p, const char *name)
{
	struct conf *c = p->c;
	struct conf_export *v;
	int r;

	v = realloc(c->exports, (c->nr_exports + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	c->exports = v;
	r = conf_export_init(&v[c->nr_exports], name);
	if (r)
		return r;
	v[c->nr_exports].line = p->line;
	p->cur = c->nr_exports++;
	p->nr_seen = 0;
	return 0;
}

/* Keys an export may give on several lines: the others, once. */
static bool conf_key_repeats(const char *key)
{
	return !strcmp(key, "file") || !strcmp(key, "spare") ||
	       !strcmp(key, "fault") || !strcmp(key, "delay");
}

/*
 * @key of the current section given before: the line it was given on,
 * else 0, and from now on it has been.  Every [server] key is given once.
 */
static unsigned int key_given_before(struct parser *p, const char *key)
{
	if (p->sec == SEC_SERVER) {
		for (unsigned int i = 0; i < p->c->nr_server_keys; i++)
			if (!strcmp(p->c->server_keys[i].key, key))
				return p->c->server_keys[i].line;
		return 0;
	}
	if (conf_key_repeats(key))
		return 0;
	for (unsigned int i = 0; i < p->nr_seen; i++)
		if (!strcmp(p->seen[i].key, key))
			return p->seen[i].line;
	/* Known keys only get here (one each), and fit. */
	if (p->nr_seen < sizeof(p->seen) / sizeof(p->seen[0]) &&
	    strlen(key) < sizeof(p->seen[0].key)) {
		strcpy(p->seen[p->nr_seen].key, key);
		p->seen[p->nr_seen++].line = p->line;
	}
	return 0;
}

static int add_server_key(struct conf *c, const char *key, const char *value,
			  unsigned int line)
{
	struct conf_kv *v;

	v = realloc(c->server_keys, (c->nr_server_keys + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	c->server_keys = v;
	v += c->nr_server_keys;
	v->key = strdup(key);
	v->value = strdup(value);
	v->line = line;
	c->nr_server_keys++;
	return v->key && v->value ? 0 : -ENOMEM;
}

/* A "[...]" line: @s is what lies between the brackets. */
static void begin_section(struct parser *p, char *s)
{
	const struct conf_export *e;
	char *name;

	s = trim(s);
	if (!strcmp(s, "server")) {
		if (p->c->has_server) {
			fail(p, -EINVAL,
			     "%s:%u: duplicate [server] section (first at line "
			     "%u)",
			     p->name, p->line, p->server_line);
			return;
		}
		p->c->has_server = true;
		p->server_line = p->line;
		p->sec = SEC_SERVER;
		return;
	}
	if (strncmp(s, "export", 6) || (s[6] && s[6] != ' ' && s[6] != '\t')) {
		fail(p, -EINVAL,
		     "%s:%u: unknown section [%s] (expected [export NAME] or "
		     "[server])",
		     p->name, p->line, s);
		return;
	}
	name = trim(s + 6);
	if (!*name) {
		fail(p, -EINVAL, "%s:%u: [export] needs a name: [export NAME]",
		     p->name, p->line);
		return;
	}
	e = conf_find_export(p->c, name);
	if (e) {
		fail(p, -EINVAL,
		     "%s:%u: duplicate export '%s' (first defined at line %u)",
		     p->name, p->line, name, e->line);
		return;
	}
	if (add_export(p, name)) {
		fail(p, -ENOMEM, "%s:%u: out of memory", p->name, p->line);
		return;
	}
	p->sec = SEC_EXPORT;
}

/*
 * libinih's fgets-style reader: one physical line per call, leading blanks
 * dropped, section headers noted.  Returning NULL ends the parse, which is
 * how an error found here or in the handler stops it.
 */
static char *conf_reader(char *str, int num, void *stream)
{
	struct parser *p = stream;
	const char *s = p->pos, *nl;
	size_t len;
	char *close;

	if (p->err || s >= p->end)
		return NULL;
	nl = memchr(s, '\n', p->end - s);
	p->pos = nl ? nl + 1 : p->end;
	p->line++;
	/* A UTF-8 byte order mark is not part of the first line's text. */
	if (p->line == 1 && p->end - s >= 3 && !memcmp(s, "\xef\xbb\xbf", 3))
		s += 3;
	while (s < p->pos && (*s == ' ' || *s == '\t'))
		s++;
	len = p->pos - s;
	if (len + 1 > (size_t)num) {
		fail(p, -EINVAL, "%s:%u: line too long (at most %d characters)",
		     p->name, p->line, num - 2);
		return NULL;
	}
	memcpy(str, s, len);
	str[len] = '\0';

	/*
	 * Mirror libinih's rule: the header ends at ']' and " ;" starts a
	 * comment.  A header libinih will reject (no ']') is left to it, so
	 * it comes back as a syntax error on this line.
	 */
	if (str[0] == '[') {
		for (close = str + 1; *close && *close != ']'; close++)
			if (*close == ';' && isspace((unsigned char)close[-1]))
				break;
		if (*close == ']') {
			const char *after = close + 1;
			char *hdr;

			/* After the header only a comment: " ;" or ";". */
			after += strspn(after, " \t\r\n");
			if (*after && *after != ';') {
				fail(p, -EINVAL,
				     "%s:%u: syntax error: '%.*s' after the "
				     "section header [%.*s]",
				     p->name, p->line,
				     (int)strcspn(after, "\r\n"), after,
				     (int)(close - str - 1), str + 1);
				return NULL;
			}
			/* Not truncated: a long name must reach its check. */
			hdr = strndup(str + 1, close - (str + 1));
			if (!hdr) {
				fail(p, -ENOMEM, "%s:%u: out of memory",
				     p->name, p->line);
				return NULL;
			}
			begin_section(p, hdr);
			free(hdr);
			if (p->err)
				return NULL;
		}
	}
	return str;
}

int conf_export_value_absolute(const char *key, const char *value,
			       const char *dir, char **out)
{
	if (!strcmp(key, "file") || !strcmp(key, "spare"))
		return member_absolute(value, dir, out);
	if (!strcmp(key, "fault") || !strcmp(key, "delay"))
		return fault_rule_absolute(value, dir, out);
	*out = strdup(value);
	return *out ? 0 : -ENOMEM;
}

/* Entry @nr - 1 of a list just grown is on @line. */
static int lines_add(unsigned int **lines, unsigned int nr, unsigned int line)
{
	unsigned int *v = realloc(*lines, nr * sizeof(*v));

	if (!v)
		return -ENOMEM;
	v[nr - 1] = line;
	*lines = v;
	return 0;
}

/* Where @key (just set in @e) was given: see conf_export's *_line. */
static int note_line(struct conf_export *e, const char *key,
		     unsigned int line)
{
	if (!strcmp(key, "file"))
		return lines_add(&e->member_lines, e->nr_members, line);
	if (!strcmp(key, "spare"))
		return lines_add(&e->spare_lines, e->nr_spares, line);
	if (!strcmp(key, "fault") || !strcmp(key, "delay"))
		return lines_add(&e->fault_lines, e->nr_faults, line);
	if (!strcmp(key, "size"))
		e->size_line = line;
	else if (!strcmp(key, "stripe-size"))
		e->chunk_line = line;
	else if (!strcmp(key, "level"))
		e->level_line = line;
	else if (!strcmp(key, "copies"))
		e->copies_line = line;
	else if (!strcmp(key, "timeout"))
		e->timeout_line = line;
	return 0;
}

static int conf_handler(void *user, const char *section, const char *key,
			const char *value)
{
	struct parser *p = user;
	const char *written = value; /* value may become a joined path */
	char msg[512];
	char *path = NULL;
	unsigned int first;
	int r;

	if (p->err)
		return 0;
	switch (p->sec) {
	case SEC_NONE:
		fail(p, -EINVAL,
		     "%s:%u: %s=%s: outside any section (start with [export "
		     "NAME] or [server])",
		     p->name, p->line, key, value);
		return 0;
	case SEC_SERVER:
		if ((first = key_given_before(p, key))) {
			fail(p, -EINVAL,
			     "%s:%u: [server] %s=%s: given twice (first at "
			     "line %u)",
			     p->name, p->line, key, value, first);
			return 0;
		}
		/* Kept as written: the front end that owns them checks them. */
		if (add_server_key(p->c, key, value, p->line))
			goto nomem;
		return 1;
	case SEC_EXPORT:
		/* Relative to the file, wherever the server runs. */
		if (p->basedir) {
			r = conf_export_value_absolute(key, value, p->basedir,
						       &path);
			if (r == -EINVAL) {
				fail(p, r,
				     "%s:%u: [export %s] %s=%s: file=: the "
				     "directory %s holds a blank: give the "
				     "file whole",
				     p->name, p->line,
				     p->c->exports[p->cur].name, key, value,
				     p->basedir);
				return 0;
			}
			if (r)
				goto nomem;
			value = path;
		}
		r = conf_export_set(&p->c->exports[p->cur], key, value, msg,
				    sizeof(msg));
		free(path);
		if (!r)
			r = note_line(&p->c->exports[p->cur], key, p->line);
		if (!r && (first = key_given_before(p, key))) {
			fail(p, -EINVAL,
			     "%s:%u: [export %s] %s=%s: given twice (first at "
			     "line %u)",
			     p->name, p->line, p->c->exports[p->cur].name, key,
			     written, first);
			return 0;
		}
		if (r == -ENOMEM)
			goto nomem;
		if (r) {
			fail(p, r == -ENOENT ? -EINVAL : r,
			     "%s:%u: [export %s] %s", p->name, p->line,
			     p->c->exports[p->cur].name, msg);
			return 0;
		}
		return 1;
	}
	return 0;
nomem:
	fail(p, -ENOMEM, "%s:%u: out of memory", p->name, p->line);
	return 0;
}

/* Quote line @lineno of the text in a syntax error message. */
static void syntax_error(struct parser *p, unsigned int lineno)
{
	const char *s = p->text, *nl;
	char shown[81];
	size_t n;
	unsigned int i;

	for (i = 1; i < lineno && s < p->end; i++) {
		nl = memchr(s, '\n', p->end - s);
		s = nl ? nl + 1 : p->end;
	}
	nl = memchr(s, '\n', p->end - s);
	n = (nl ? nl : p->end) - s;
	if (n >= sizeof(shown))
		n = sizeof(shown) - 1;
	memcpy(shown, s, n);
	shown[n] = '\0';
	p->err = 0;
	p->line = lineno;
	fail(p, -EINVAL,
	     "%s:%u: syntax error: expected [section] or key = value, got '%s'",
	     p->name, lineno, trim(shown));
}

int conf_parse_string(struct conf **out, const char *text, const char *name,
		      const char *basedir, char *errbuf, size_t errlen)
{
	struct parser p = {
	    .name = name,
	    .basedir = basedir,
	    .text = text,
	    .pos = text,
	    .end = text + strlen(text),
	    .errbuf = errbuf,
	    .errlen = errlen,
	};
	unsigned int i;
	char msg[512];
	int r;

	if (errbuf && errlen)
		errbuf[0] = '\0';
	p.c = calloc(1, sizeof(*p.c));
	if (!p.c || !(p.c->path = strdup(name)) ||
	    (basedir && !(p.c->dir = strdup(basedir)))) {
		if (p.c)
			free(p.c->path);
		free(p.c);
		set_err(errbuf, errlen, "%s: out of memory", name);
		return -ENOMEM;
	}

	r = ini_parse_stream(conf_reader, &p, conf_handler, &p);
	/*
	 * libinih keeps going after a syntax error and returns the first
	 * bad line; ours stop the parse.  Whichever came first is reported.
	 */
	if (r > 0 && (!p.err || (unsigned int)r < p.err_line))
		syntax_error(&p, (unsigned int)r);
	else if (r < 0 && !p.err)
		fail(&p, -ENOMEM, "%s: out of memory", name);
	if (p.err)
		goto err;

	if (!p.c->nr_exports) {
		fail(&p, -EINVAL, "%s: no [export NAME] section", name);
		goto err;
	}
	for (i = 0; i < p.c->nr_exports; i++) {
		const struct conf_export *e = &p.c->exports[i];

		if (conf_export_check(e, msg, sizeof(msg))) {
			fail(&p, -EINVAL, "%s:%u: [export %s] %s", name,
			     e->line, e->name, msg);
			goto err;
		}
	}
	*out = p.c;
	return 0;
err:
	conf_free(p.c);
	return p.err;
}

int conf_load(struct conf **out, const char *path, char *errbuf, size_t errlen)
{
	char *text = NULL, *dir = NULL, *absdir = NULL, *slash;
	size_t len = 0, n;
	FILE *f;
	int r;

	f = fopen(path, "re");
	if (!f) {
		r = -errno;
		set_err(errbuf, errlen, "%s: %s", path, strerror(-r));
		return r;
	}
	text = malloc(CONF_MAX_FILE_BYTES + 1);
	if (!text) {
		r = -ENOMEM;
		set_err(errbuf, errlen, "%s: out of memory", path);
		goto out;
	}
	errno = 0;
	while ((n = fread(text + len, 1, CONF_MAX_FILE_BYTES + 1 - len, f)))
		len += n;
	if (ferror(f)) {
		/* Say why (a directory: EISDIR), not only that it failed. */
		r = errno ? -errno : -EIO;
		set_err(errbuf, errlen, "%s: %s", path, strerror(-r));
		goto out;
	}
	if (len > CONF_MAX_FILE_BYTES) {
		r = -EFBIG;
		set_err(errbuf, errlen, "%s: larger than %u bytes", path,
			CONF_MAX_FILE_BYTES);
		goto out;
	}
	text[len] = '\0';
	if (strlen(text) != len) {
		r = -EINVAL;
		set_err(errbuf, errlen,
			"%s: contains a NUL byte (not a text file)", path);
		goto out;
	}

	/*
	 * Members are relative to the file, not to whoever started us, and
	 * made absolute now because servers chdir("/") when they daemonize.
	 */
	slash = strrchr(path, '/');
	dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path))
		    : strdup(".");
	if (dir)
		absdir = realpath(dir, NULL);
	if (!absdir) {
		r = dir ? -errno : -ENOMEM;
		set_err(errbuf, errlen, "%s: %s", path, strerror(-r));
		goto out;
	}
	r = conf_parse_string(out, text, path, absdir, errbuf, errlen);
out:
	free(absdir);
	free(dir);
	free(text);
	fclose(f);
	return r;
}

void conf_free(struct conf *c)
{
	unsigned int i;

	if (!c)
		return;
	for (i = 0; i < c->nr_exports; i++)
		conf_export_release(&c->exports[i]);
	free(c->exports);
	for (i = 0; i < c->nr_server_keys; i++) {
		free(c->server_keys[i].key);
		free(c->server_keys[i].value);
	}
	free(c->server_keys);
	free(c->dir);
	free(c->path);
	free(c);
}

const struct conf_export *conf_find_export(const struct conf *c,
					   const char *name)
{
	unsigned int i;

	for (i = 0; i < c->nr_exports; i++)
		if (!strcmp(c->exports[i].name, name))
			return &c->exports[i];
	return NULL;
}
