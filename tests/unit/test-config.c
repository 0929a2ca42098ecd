/*
 * Description: the configuration parser (config.h).  Good files: several
 * exports in file order with members in line order, defaults, every key,
 * indentation, comments (full-line and inline), a [server] section (kept
 * as written for bionbd, test-server-options checks its values),
 * relative member paths joined to the file's directory, and
 * conf/example.conf itself.  Bad files: each error comes back as one line
 * that names the file, the line number, and the key and value (or the
 * offending text): syntax errors, keys outside a section, unknown sections
 * and keys, bad sizes, stripe sizes that are not a power of two or below
 * 4K, sizes not a multiple of 512, bad booleans, duplicate exports,
 * duplicate [server], duplicate members, an export
 * without a member, an empty file, an overlong line, a missing file.  And
 * the single-key setters the command-line front ends use, with NBD's
 * 4096-byte limit on export names (4096 accepted, 4097 refused) and
 * descriptions.  And conf_export_value_absolute: member paths, the local
 * files of NBD URIs (percent-encoded) and RBD names ('\:'), and a rule's
 * file= joined to a directory, everything else kept as written.  And an
 * RBD member's Ceph options, one option in any of Ceph's spellings
 * (mon_host, mon-host, "mon host"), refused when given twice (no cluster
 * needed: the name is read before anything is loaded).
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bionbd/config.h>
#include <bionbd/target.h>

#include "unit.h"

static char err[1024];

static struct conf *parse_ok(const char *text)
{
	struct conf *c = NULL;
	int r =
	    conf_parse_string(&c, text, "t.conf", "/base", err, sizeof(err));

	if (r) {
		fprintf(stderr, "unexpected error %d: %s\n--- text:\n%s\n", r,
			err, text);
		abort();
	}
	CHECK(c);
	return c;
}

/*
 * The text must be refused with -EINVAL (or @want) and a message that
 * contains every one of the NULL-terminated fragments, on one line.
 */
static void parse_bad(int want, const char *text, ...)
{
	struct conf *c = (struct conf *)0x1;
	const char *frag;
	va_list ap;
	int r;

	r = conf_parse_string(&c, text, "t.conf", "/base", err, sizeof(err));
	if (r != want) {
		fprintf(stderr, "expected %d, got %d (%s)\n--- text:\n%s\n",
			want, r, err, text);
		abort();
	}
	CHECK_PTR_EQ(c, (struct conf *)0x1); /* untouched on error */
	CHECK(!strchr(err, '\n'));
	va_start(ap, text);
	while ((frag = va_arg(ap, const char *))) {
		if (!strstr(err, frag)) {
			fprintf(stderr, "message '%s' lacks '%s'\n", err, frag);
			abort();
		}
	}
	va_end(ap);
}

static void test_good(void)
{
	struct conf *c;
	const struct conf_export *e;

	c = parse_ok("# leading comment\n"
		     "; another\n"
		     "\n"
		     "[export one]\n"
		     "file = /a/m0\n"
		     "  file=/a/m1   \n"
		     "\tfile = rel/m2 ; an inline comment\n"
		     "stripe-size = 128K\n"
		     "size = 1G\n"
		     "read-only = yes\n"
		     "description = first; export\n"
		     "\n"
		     "  [ export  two words ] ; a comment after a header\n"
		     "file = /b/only\n"
		     "[server]\n"
		     "listen = ::1\n"
		     "port = 10810\n"
		     "socket = s.sock\n"
		     "threads = 8\n"
		     "backend = threads\n"
		     "poll-us = 50\n");
	CHECK_EQ(c->nr_exports, 2);
	CHECK(!strcmp(c->path, "t.conf"));

	e = &c->exports[0];
	CHECK(!strcmp(e->name, "one"));
	CHECK_EQ(e->line, 4);
	CHECK_EQ(e->nr_members, 3);
	CHECK(!strcmp(e->members[0], "/a/m0"));
	CHECK(!strcmp(e->members[1], "/a/m1"));
	/* relative to the file's directory; the inline comment is gone */
	CHECK(!strcmp(e->members[2], "/base/rel/m2"));
	CHECK_EQ(e->chunk_bytes, 128 * 1024);
	CHECK_EQ(e->size_bytes, 1ull << 30);
	CHECK(e->readonly);
	/* ';' without a blank before it is text, not a comment */
	CHECK(!strcmp(e->description, "first; export"));

	e = &c->exports[1];
	CHECK(!strcmp(e->name, "two words"));
	CHECK_EQ(e->line, 13);
	CHECK_EQ(e->nr_members, 1);
	CHECK_EQ(e->chunk_bytes, STRIPE_DEFAULT_CHUNK);
	CHECK_EQ(e->size_bytes, 0);
	CHECK(!e->readonly);
	CHECK(!e->description);

	CHECK_PTR_EQ(conf_find_export(c, "two words"), &c->exports[1]);
	CHECK_PTR_EQ(conf_find_export(c, "one"), &c->exports[0]);
	CHECK_PTR_EQ(conf_find_export(c, "three"), NULL);
	CHECK_PTR_EQ(conf_find_export(c, ""), NULL);

	/* [server] is bionbd's: handed over as written, with line numbers */
	CHECK(c->has_server);
	CHECK(!strcmp(c->dir, "/base"));
	CHECK_EQ(c->nr_server_keys, 6);
	{
		static const char *const want[][2] = {
			{ "listen", "::1" },   { "port", "10810" },
			{ "socket", "s.sock" }, { "threads", "8" },
			{ "backend", "threads" }, { "poll-us", "50" },
		};

		for (unsigned int i = 0; i < 6; i++) {
			CHECK(!strcmp(c->server_keys[i].key, want[i][0]));
			CHECK(!strcmp(c->server_keys[i].value, want[i][1]));
			CHECK_EQ(c->server_keys[i].line, 16 + i);
		}
	}

	/* volume_open() arguments */
	{
		struct volume_config vc;

		conf_export_volume(&c->exports[0], &vc);
		CHECK_EQ(vc.nr_members, 3);
		CHECK(!strcmp(vc.members[2], "/base/rel/m2"));
		CHECK_EQ(vc.chunk_bytes, 128 * 1024);
		CHECK_EQ(vc.size_bytes, 1ull << 30);
		CHECK(vc.readonly);
	}
	conf_free(c);

	/* no [server]: nothing set; "name: value" as libinih allows */
	c = parse_ok("[export x]\nfile: /m\nread-only = OFF\n");
	CHECK(!c->has_server);
	CHECK_EQ(c->nr_server_keys, 0);
	CHECK(!c->exports[0].readonly);
	conf_free(c);

	/* CRLF line ends and a UTF-8 byte order mark */
	c = parse_ok("\xef\xbb\xbf[export w]\r\nfile = /w0\r\nfile = /w1\r\n");
	CHECK_EQ(c->exports[0].nr_members, 2);
	CHECK(!strcmp(c->exports[0].members[1], "/w1"));
	conf_free(c);

	/* no basedir: relative paths stay as written */
	c = NULL;
	CHECK_EQ(conf_parse_string(&c, "[export r]\nfile = a/b\n", "s", NULL,
				   err, sizeof(err)),
		 0);
	CHECK(!strcmp(c->exports[0].members[0], "a/b"));
	conf_free(c);

	conf_free(NULL);
}

static void test_bad(void)
{
	parse_bad(-EINVAL, "[export a]\nfile = /m\nthis is not a key\n",
		  "t.conf:3:", "syntax error", "this is not a key", NULL);
	parse_bad(-EINVAL, "[export a\nfile = /m\n",
		  "t.conf:1:", "syntax error", "[export a", NULL);
	/* the first error wins, whichever part of the parser finds it */
	parse_bad(-EINVAL, "[export a]\nbogus\nfile = /m\nfoo = bar\n",
		  "t.conf:2:", "bogus", NULL);
	parse_bad(-EINVAL, "[export a]\nfile = /m\nfoo = bar\nbogus\n",
		  "t.conf:3:", "foo=bar", "unknown key", NULL);
	parse_bad(-EINVAL, "file = /m\n[export a]\n", "t.conf:1:", "file=/m",
		  "outside any section", NULL);
	parse_bad(-EINVAL, "[exports a]\nfile = /m\n",
		  "t.conf:1:", "unknown section [exports a]", NULL);
	parse_bad(-EINVAL, "[export]\nfile = /m\n", "t.conf:1:", "needs a name",
		  NULL);
	parse_bad(-EINVAL, "[export a]\nfile = /m\nstrip-size = 64K\n",
		  "t.conf:3:", "[export a]", "strip-size=64K", "unknown key",
		  NULL);
	parse_bad(-EINVAL, "[export a]\nfile = /m\nsize = 12Q\n",
		  "t.conf:3:", "size=12Q", "not a size", NULL);
	parse_bad(-EINVAL, "[export a]\nfile = /m\nsize = -1\n",
		  "t.conf:3:", "size=-1", NULL);
	parse_bad(-EINVAL, "[export a]\nfile = /m\nsize = 1000\n",
		  "t.conf:3:", "size=1000", "multiple of 512", NULL);
	parse_bad(-EINVAL, "[export a]\nfile = /m\nsize = 0\n",
		  "t.conf:3:", "size=0", "0 bytes", NULL);
	parse_bad(-EINVAL, "[export a]\nfile = /m\nsize = 0K\n",
		  "t.conf:3:", "size=0K", "0 bytes", NULL);
	parse_bad(-EINVAL, "[export a]\nfile = /m\nstripe-size = 48K\n",
		  "t.conf:3:", "stripe-size=48K", "power of two", NULL);
	parse_bad(-EINVAL, "[export a]\nfile = /m\nstripe-size = 2K\n",
		  "t.conf:3:", "stripe-size=2K", "power of two from 4K", NULL);
	parse_bad(-EINVAL, "[export a]\nfile = /m\nstripe-size = 2G\n",
		  "t.conf:3:", "stripe-size=2G", NULL);
	parse_bad(-EINVAL, "[export a]\nfile = /m\nstripe-size = big\n",
		  "t.conf:3:", "stripe-size=big", "not a size", NULL);
	parse_bad(-EINVAL, "[export a]\nfile = /m\nread-only = maybe\n",
		  "t.conf:3:", "read-only=maybe", NULL);
	parse_bad(-EINVAL, "[server]\n[export a]\nfile = /m\n[server]\n",
		  "t.conf:4:", "duplicate [server]", "line 1", NULL);
	parse_bad(-EINVAL,
		  "[export a]\nfile = /m\n\n[export b]\nfile = /n\n"
		  "[export a]\nfile = /o\n",
		  "t.conf:6:", "duplicate export 'a'", "line 1", NULL);
	/* a key given twice: the second line is not silently the value */
	parse_bad(-EINVAL, "[export a]\nfile = /m\nsize = 1M\nsize = 2M\n",
		  "t.conf:4:", "[export a]", "size=2M", "given twice",
		  "line 3", NULL);
	parse_bad(-EINVAL, "[server]\nport = 1\nport = 2\n[export a]\nfile = /m\n",
		  "t.conf:3:", "[server]", "port=2", "given twice", "line 2",
		  NULL);
	parse_bad(-EINVAL, "[export a] junk\nfile = /m\n", "t.conf:1:",
		  "syntax error", "'junk'", "[export a]", NULL);
	/* an empty repeated section is still a duplicate */
	parse_bad(-EINVAL, "[export a]\nfile = /m\n[export a]\n",
		  "t.conf:3:", "duplicate export 'a'", NULL);
	parse_bad(-EINVAL, "[export a]\nfile = /m\nfile = /n\nfile = /m\n",
		  "t.conf:4:", "file=/m", "twice", NULL);
	/* relative and absolute spellings of one path meet after joining */
	parse_bad(-EINVAL, "[export a]\nfile = m\nfile = /base/m\n",
		  "t.conf:3:", "file=/base/m", "twice", NULL);
	parse_bad(-EINVAL, "[export a]\nfile =\n", "t.conf:2:", "empty path",
		  NULL);
	parse_bad(-EINVAL, "[export a]\nfile = /m\n[export b]\nsize = 1M\n",
		  "t.conf:3:", "[export b]", "no member", NULL);
	parse_bad(-EINVAL, "[export a]\nfile = /m\n[export empty]\n",
		  "t.conf:3:", "[export empty]", "no member", NULL);
	parse_bad(-EINVAL, "", "t.conf", "no [export NAME] section", NULL);
	parse_bad(-EINVAL, "[server]\nport = 1\n", "t.conf",
		  "no [export NAME] section", NULL);

	{
		char text[600];

		snprintf(text, sizeof(text), "[export a]\nfile = /%0300d\n", 0);
		parse_bad(-EINVAL, text, "t.conf:2:", "line too long", NULL);
	}
}

static void test_setters(void)
{
	struct conf_export e;
	uint64_t v;
	bool b;

	CHECK_EQ(conf_export_init(&e, ""), 0);
	CHECK_EQ(e.chunk_bytes, STRIPE_DEFAULT_CHUNK);
	CHECK_EQ(conf_export_set(&e, "file", "/x", err, sizeof(err)), 0);
	CHECK_EQ(conf_export_set(&e, "file", "/y", err, sizeof(err)), 0);
	CHECK_EQ(conf_export_set(&e, "file", "/x", err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "file=/x"));
	CHECK_EQ(conf_export_set(&e, "stripe-size", "4K", err, sizeof(err)), 0);
	CHECK_EQ(e.chunk_bytes, 4096);
	CHECK_EQ(conf_export_set(&e, "stripe-size", "4097", err, sizeof(err)),
		 -EINVAL);
	CHECK(strstr(err, "stripe-size=4097"));
	CHECK_EQ(e.chunk_bytes, 4096); /* unchanged by a refused value */
	CHECK_EQ(conf_export_set(&e, "stripe-size", "1G", err, sizeof(err)), 0);
	CHECK_EQ(conf_export_set(&e, "size", "4G", err, sizeof(err)), 0);
	CHECK_EQ(conf_export_set(&e, "size", "0", err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "size=0"));
	CHECK_EQ(e.size_bytes, 4ull << 30);
	CHECK_EQ(conf_export_set(&e, "description", "d", err, sizeof(err)), 0);
	CHECK(!strcmp(e.description, "d"));
	CHECK_EQ(conf_export_set(&e, "description", "", err, sizeof(err)), 0);
	CHECK(!e.description);
	CHECK_EQ(conf_export_set(&e, "nope", "1", err, sizeof(err)), -ENOENT);
	CHECK(strstr(err, "nope=1") && strstr(err, "unknown key"));
	CHECK_EQ(conf_export_check(&e, err, sizeof(err)), 0);
	CHECK_EQ(e.nr_members, 2);
	conf_export_release(&e);

	CHECK_EQ(conf_export_init(&e, "n"), 0);
	CHECK_EQ(conf_export_check(&e, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "file="));
	conf_export_release(&e);

	CHECK_EQ(conf_parse_bool("TRUE", &b), 0);
	CHECK(b);
	CHECK_EQ(conf_parse_bool("0", &b), 0);
	CHECK(!b);
	CHECK_EQ(conf_parse_bool("", &b), -EINVAL);
	CHECK_EQ(conf_parse_bool("truth", &b), -EINVAL);
	CHECK_EQ(conf_parse_chunk("65536", &v, err, sizeof(err)), 0);
	CHECK_EQ(v, 65536);
	CHECK_EQ(conf_parse_chunk("0", &v, err, sizeof(err)), -EINVAL);
	{
		unsigned int n;

		CHECK_EQ(conf_parse_uint("65535", 1, 65535, &n), 0);
		CHECK_EQ(n, 65535);
		CHECK_EQ(conf_parse_uint("65536", 1, 65535, &n), -EINVAL);
		CHECK_EQ(conf_parse_uint("0", 1, 65535, &n), -EINVAL);
		CHECK_EQ(conf_parse_uint("-1", 0, 9, &n), -EINVAL);
		CHECK_EQ(conf_parse_uint("8x", 0, 9, &n), -EINVAL);
		CHECK_EQ(conf_parse_uint("", 0, 9, &n), -EINVAL);
	}
}

/*
 * NBD's limit for names and descriptions, 4096 bytes: the name is checked
 * by conf_export_check (conf_export_init only copies it), the description
 * by conf_export_set; in a file, a long [export NAME] is refused too.
 */
static void test_name_limits(void)
{
	static char s[CONF_MAX_NAME_BYTES + 2];
	struct conf_export e;
	struct conf *c = NULL;
	char *text;

	memset(s, 'n', CONF_MAX_NAME_BYTES);
	s[CONF_MAX_NAME_BYTES] = '\0';
	CHECK_EQ(conf_export_init(&e, s), 0);
	CHECK_EQ(conf_export_set(&e, "file", "/x", err, sizeof(err)), 0);
	CHECK_EQ(conf_export_check(&e, err, sizeof(err)), 0);
	conf_export_release(&e);

	s[CONF_MAX_NAME_BYTES] = 'n'; /* 4097 bytes */
	CHECK_EQ(conf_export_init(&e, s), 0);
	CHECK_EQ(conf_export_set(&e, "file", "/x", err, sizeof(err)), 0);
	CHECK_EQ(conf_export_check(&e, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "export name 'nnnn"));
	CHECK(strstr(err, "4097 bytes") && strstr(err, "4096"));
	CHECK(!strchr(err, '\n') && strlen(err) < 200);
	conf_export_release(&e);

	/* Descriptions: the same limit, at the setter. */
	CHECK_EQ(conf_export_init(&e, ""), 0);
	CHECK_EQ(conf_export_set(&e, "description", s, err, sizeof(err)),
		 -EINVAL);
	CHECK(strstr(err, "description") && strstr(err, "4096"));
	CHECK(!e.description);
	s[CONF_MAX_NAME_BYTES] = '\0';
	CHECK_EQ(conf_export_set(&e, "description", s, err, sizeof(err)), 0);
	CHECK_EQ(strlen(e.description), CONF_MAX_NAME_BYTES);
	CHECK_EQ(conf_export_set(&e, "file", "/x", err, sizeof(err)), 0);
	CHECK_EQ(conf_export_check(&e, err, sizeof(err)), 0);
	conf_export_release(&e);

	/*
	 * In a file: refused, whether by the line length or by the name's
	 * own check (the header is no longer cut at 255 bytes).
	 */
	s[CONF_MAX_NAME_BYTES] = 'n';
	CHECK(asprintf(&text, "[export %s]\nfile = /x\n", s) > 0);
	CHECK_EQ(conf_parse_string(&c, text, "t.conf", "/base", err,
				   sizeof(err)),
		 -EINVAL);
	CHECK(strstr(err, "t.conf:1:"));
	CHECK(strstr(err, "line too long") || strstr(err, "4097 bytes"));
	free(text);

	/* 300 bytes fit NBD; if libinih takes the line, it is kept whole. */
	s[300] = '\0';
	CHECK(asprintf(&text, "[export %s]\nfile = /x\n", s) > 0);
	if (conf_parse_string(&c, text, "t.conf", "/base", err,
			      sizeof(err)) == 0) {
		CHECK_EQ(strlen(c->exports[0].name), 300);
		conf_free(c);
	} else {
		CHECK(strstr(err, "line too long"));
	}
	free(text);
}

/* conf_load: real files, relative paths, errors naming the file. */
static void test_files(void)
{
	const char *tmpdir = getenv("TMPDIR");
	char dir[PATH_MAX], path[PATH_MAX + 32], rdir[PATH_MAX];
	char want[PATH_MAX + 64];
	struct conf *c = NULL;
	FILE *f;

	snprintf(dir, sizeof(dir), "%s/test-config.XXXXXX",
		 tmpdir && *tmpdir ? tmpdir : "/tmp");
	CHECK(mkdtemp(dir));
	CHECK(realpath(dir, rdir));
	snprintf(path, sizeof(path), "%s/x.conf", dir);

	f = fopen(path, "w");
	CHECK(f);
	fputs("[export e]\nfile = sub/m0\nfile = /abs/m1\n", f);
	CHECK_EQ(fclose(f), 0);
	CHECK_EQ(conf_load(&c, path, err, sizeof(err)), 0);
	snprintf(want, sizeof(want), "%s/sub/m0", rdir);
	CHECK(!strcmp(c->exports[0].members[0], want));
	CHECK(!strcmp(c->exports[0].members[1], "/abs/m1"));
	CHECK(!strcmp(c->path, path));
	conf_free(c);

	/* a relative conf path still yields absolute members */
	CHECK_EQ(chdir(dir), 0);
	c = NULL;
	CHECK_EQ(conf_load(&c, "x.conf", err, sizeof(err)), 0);
	CHECK(!strcmp(c->exports[0].members[0], want));
	conf_free(c);

	f = fopen(path, "w");
	CHECK(f);
	fputs("[export e]\nfile = /m\n\nstripe-size = 3K\n", f);
	CHECK_EQ(fclose(f), 0);
	c = (struct conf *)0x1;
	CHECK_EQ(conf_load(&c, path, err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want), "%s:4: [export e] stripe-size=3K", path);
	CHECK(!strncmp(err, want, strlen(want)));
	CHECK_PTR_EQ(c, (struct conf *)0x1);

	CHECK_EQ(unlink(path), 0);
	CHECK_EQ(conf_load(&c, path, err, sizeof(err)), -ENOENT);
	CHECK(strstr(err, path) && strstr(err, "No such file"));
	CHECK_EQ(chdir("/"), 0);
	CHECK_EQ(rmdir(dir), 0);
}

/*
 * conf/example.conf must stay valid: it is what users copy.  Found next to
 * this source file, as the build passes absolute source paths.
 */
static void test_example(void)
{
	char path[PATH_MAX];
	const char *slash = strrchr(__FILE__, '/');
	struct conf *c = NULL;
	const struct conf_export *e;

	CHECK(slash && __FILE__[0] == '/');
	snprintf(path, sizeof(path), "%.*s/../../conf/example.conf",
		 (int)(slash - __FILE__), __FILE__);
	if (conf_load(&c, path, err, sizeof(err))) {
		fprintf(stderr, "%s\n", err);
		abort();
	}
	CHECK_EQ(c->nr_exports, 2);
	e = &c->exports[0];
	CHECK(!strcmp(e->name, "scratch"));
	CHECK_EQ(e->nr_members, 4);
	CHECK_EQ(e->chunk_bytes, 65536);
	CHECK_EQ(e->size_bytes, 4ull << 30);
	CHECK(!e->readonly);
	CHECK(e->description);
	e = &c->exports[1];
	CHECK(!strcmp(e->name, "golden"));
	CHECK(e->readonly);
	CHECK(c->has_server);
	for (unsigned int i = 0; i < c->nr_server_keys; i++)
		CHECK(strcmp(c->server_keys[i].key, "socket"));
	conf_free(c);
}

/* @key=@value made absolute against @dir is @want (NULL: refused, -EINVAL). */
static void check_abs(const char *key, const char *value, const char *dir,
		      const char *want)
{
	char *got = (char *)0x1;
	int r = conf_export_value_absolute(key, value, dir, &got);

	if (!want) {
		CHECK_EQ(r, -EINVAL);
		CHECK(!got);
		return;
	}
	if (r || strcmp(got, want)) {
		fprintf(stderr, "%s=%s in %s: got %d '%s', want '%s'\n", key,
			value, dir ? dir : "(cwd)", r, r ? "" : got, want);
		abort();
	}
	free(got);
}

/*
 * Every local file a member or a rule names, joined to the directory it
 * was given in (a daemon changes to / later); what is absolute, remote or
 * not a path is kept as written.
 */
static void test_absolute(void)
{
	char cwd[PATH_MAX], want[PATH_MAX + 16];

	check_abs("file", "m0", "/d", "/d/m0");
	check_abs("file", "./a/m0", "/d/", "/d/a/m0");
	check_abs("file", "/abs/m0", "/d", "/abs/m0");
	check_abs("spare", "s0", "/d", "/d/s0");
	CHECK(getcwd(cwd, sizeof(cwd)));
	snprintf(want, sizeof(want), "%s/m0", strcmp(cwd, "/") ? cwd : "");
	check_abs("file", "m0", NULL, want);

	/* NBD URIs: the parameters that are files, percent-encoded. */
	check_abs("file", "nbd+unix:///e?socket=r.sock", "/d",
		  "nbd+unix:///e?socket=/d/r.sock");
	check_abs("file", "nbd+unix:///e?socket=r.sock", "/a b&c%",
		  "nbd+unix:///e?socket=/a%20b%26c%25/r.sock");
	check_abs("file", "nbds://h/e?tls-psk-file=k.psk&tls-username=u&"
			  "tls-certificates=pki#frag",
		  "/d",
		  "nbds://h/e?tls-psk-file=/d/k.psk&tls-username=u&"
		  "tls-certificates=/d/pki#frag");
	check_abs("file", "nbd+unix:///e?socket=/s.sock", "/d",
		  "nbd+unix:///e?socket=/s.sock");
	check_abs("file", "nbd+unix:///e?socket=%2Fs.sock", "/d",
		  "nbd+unix:///e?socket=%2Fs.sock");
	check_abs("file", "nbd://h/e", "/d", "nbd://h/e");
	check_abs("file", "nbd://h/e?tls-username=socket=x", "/d",
		  "nbd://h/e?tls-username=socket=x");

	/* RBD: conf= and keyring=, a colon in the directory escaped. */
	check_abs("file", "rbd:p/i:conf=c.conf:id=a:keyring=k:mon_host=x",
		  "/d:e", "rbd:p/i:conf=/d\\:e/c.conf:id=a:"
			  "keyring=/d\\:e/k:mon_host=x");
	check_abs("file", "rbd:p/i:conf=/etc/ceph/c.conf", "/d",
		  "rbd:p/i:conf=/etc/ceph/c.conf");
	check_abs("file", "rbd:p/i\\:conf=x", "/d", "rbd:p/i\\:conf=x");
	/*
	 * Every Ceph option that names a file the client opens later, in
	 * any of Ceph's spellings; lists (conf=, keyring=) item by item;
	 * what Ceph expands itself ($run_dir, ~) as written.
	 */
	check_abs("file", "rbd:p/i:keyfile=k.key:admin_socket=a.asok:"
			  "log-file=l.log:monmap=./m:mon_host=h",
		  "/d", "rbd:p/i:keyfile=/d/k.key:admin_socket=/d/a.asok:"
			"log-file=/d/l.log:monmap=/d/m:mon_host=h");
	check_abs("file", "rbd:p/i:rbd_persistent_cache_path=c:run_dir=r:"
			  "plugin_dir=/usr/lib/ceph",
		  "/d", "rbd:p/i:rbd_persistent_cache_path=/d/c:"
			"run_dir=/d/r:plugin_dir=/usr/lib/ceph");
	check_abs("file", "rbd:p/i:keyring=a.keyring,/etc/ceph/b; c:"
			  "conf=x.conf;~/.ceph/y.conf",
		  "/d", "rbd:p/i:keyring=/d/a.keyring,/etc/ceph/b; /d/c:"
			"conf=/d/x.conf;~/.ceph/y.conf");
	check_abs("file", "rbd:p/i:admin_socket=$run_dir/$name.asok:"
			  "keyfile=k",
		  "/d:e", "rbd:p/i:admin_socket=$run_dir/$name.asok:"
			  "keyfile=/d\\:e/k");
	/*
	 * A metavariable that Ceph expands to a name, not a directory, is
	 * relative: joined like any relative path, Ceph expanding the rest.
	 */
	check_abs("file", "rbd:p/i:keyring=$cluster.keyring:id=a", "/d:e",
		  "rbd:p/i:keyring=/d\\:e/$cluster.keyring:id=a");
	check_abs("file", "rbd:p/i:keyring=${cluster}.$name.keyring,"
			  "/etc/ceph/k:log_file=$name-$pid.log",
		  "/d", "rbd:p/i:keyring=/d/${cluster}.$name.keyring,"
			"/etc/ceph/k:log_file=/d/$name-$pid.log");
	check_abs("file", "rbd:p/i:conf=$data_dir/c.conf;$home/c.conf:"
			  "admin_socket=$run_dir/a.asok:keyfile=$unknown/k",
		  "/d", "rbd:p/i:conf=$data_dir/c.conf;$home/c.conf:"
			"admin_socket=$run_dir/a.asok:keyfile=$unknown/k");
	check_abs("file", "rbd:p/i:rbd_cache_policy=writeback", "/d",
		  "rbd:p/i:rbd_cache_policy=writeback");

	/* Rules: file= only, and never split into two words. */
	check_abs("fault", "op=write file=t error=EIO", "/d",
		  "op=write file=/d/t error=EIO");
	check_abs("delay", "stall\tfile=/abs/t", "/d", "stall\tfile=/abs/t");
	check_abs("fault", "op=read file=t", "/a b", NULL);
	check_abs("fault", "op=read file=/t", "/a b", "op=read file=/t");
	check_abs("description", "a b", "/d", "a b");
}

/* @member is refused at once, its message naming @opt (KEY=VALUE). */
static void check_rbd_repeated(const char *member, const char *opt)
{
	char msg[512], want[128];
	uint64_t size = 0;

	msg[0] = '\0';
	CHECK_EQ(rbd_probe(member, 1000, &size, msg, sizeof(msg)), -EINVAL);
	snprintf(want, sizeof(want), "repeated option '%s'", opt);
	if (!strstr(msg, want)) {
		fprintf(stderr, "%s: got '%s', want '%s'\n", member, msg, want);
		abort();
	}
}

static void test_rbd_options(void)
{
	check_rbd_repeated("rbd:p/i:mon_host=a:mon_host=b", "mon_host=b");
	check_rbd_repeated("rbd:p/i:mon_host=a:mon-host=b", "mon-host=b");
	check_rbd_repeated("rbd:p/i:mon-host=a:mon host=b", "mon host=b");
	check_rbd_repeated("rbd:p/i:rbd_cache=false:id=x:rbd-cache=true",
			   "rbd-cache=true");
	check_rbd_repeated("rbd:p/i:keyring=a:keyring=b", "keyring=b");
}

int main(void)
{
	test_good();
	test_bad();
	test_setters();
	test_name_limits();
	test_files();
	test_example();
	test_absolute();
	test_rbd_options();
	printf("test-config: ok\n");
	return 0;
}
