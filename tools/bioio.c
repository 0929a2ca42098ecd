// SPDX-License-Identifier: MIT
/*
 * bioio.c - run bios against a striped volume from the command line.
 *
 *   bioio [OPTIONS] MEMBER... -- CMD [ARG...] [CMD [ARG...]]...
 *
 * The volume is opened exactly as the front ends open it (volume_open), on
 * an ioq of the chosen backend, and every command becomes one bio that is
 * waited for before the next one starts.  Each command prints one result
 * line on stdout; a failing command prints "bioio: CMD OFF LEN: error" on
 * stderr and the run goes on, so a script can check that the bio after a
 * failure still works.  The exit status is 1 when any command failed.
 *
 * Data buffers are 4096-aligned so that --direct (O_DIRECT members) works.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <bionbd/bio.h>
#include <bionbd/config.h>
#include <bionbd/ioq.h>
#include <bionbd/nbdl.h>
#include <bionbd/target.h>
#include <bionbd/volume.h>

#define BUF_ALIGN 4096u
/* bi_size is 32 bits; keep a whole number of sectors. */
#define MAX_BIO_BYTES (UINT32_MAX & ~(uint64_t)(SECTOR_SIZE - 1))

enum cmd_kind {
	CMD_WRITE,
	CMD_WRITEF,
	CMD_WRITEIN,
	CMD_READ,
	CMD_READOUT,
	CMD_CHECK,
	CMD_ZERO,
	CMD_TRIM,
	CMD_CACHE,
	CMD_FLUSH,
	CMD_EXTENTS,
	CMD_SIZE,
	CMD_SH,
};

/* What a command takes after its name. */
enum {
	ARG_RANGE = 1u << 0,  /* OFF LEN */
	ARG_BYTE = 1u << 1,   /* BYTE after the range */
	ARG_ZFLAGS = 1u << 2, /* [nounmap] [fast] after the range */
	ARG_TEXT = 1u << 3,   /* one free-form word */
};

struct cmd_desc {
	const char *name;
	enum cmd_kind kind;
	unsigned int args;
	const char *help;
};

static const struct cmd_desc cmd_table[] = {
    {"write", CMD_WRITE, ARG_RANGE | ARG_BYTE,
     "OFF LEN BYTE      write LEN bytes of BYTE"},
    {"writef", CMD_WRITEF, ARG_RANGE | ARG_BYTE,
     "OFF LEN BYTE      the same with FUA"},
    {"writein", CMD_WRITEIN, ARG_RANGE,
     "OFF LEN           write LEN bytes read from stdin"},
    {"read", CMD_READ, ARG_RANGE,
     "OFF LEN           read; print the POSIX cksum of the data"},
    {"readout", CMD_READOUT, ARG_RANGE,
     "OFF LEN           read; write the data to stdout (no result line)"},
    {"check", CMD_CHECK, ARG_RANGE | ARG_BYTE,
     "OFF LEN BYTE      read; fail unless every byte is BYTE"},
    {"zero", CMD_ZERO, ARG_RANGE | ARG_ZFLAGS,
     "OFF LEN [nounmap] [fast]  write zeroes"},
    {"trim", CMD_TRIM, ARG_RANGE, "OFF LEN           discard"},
    {"cache", CMD_CACHE, ARG_RANGE, "OFF LEN           readahead hint"},
    {"flush", CMD_FLUSH, 0, "                  flush every member"},
    {"extents", CMD_EXTENTS, ARG_RANGE,
     "OFF LEN           print allocation extents (volume offsets)"},
    {"size", CMD_SIZE, 0, "                  print the volume size in bytes"},
    {"sh", CMD_SH, ARG_TEXT,
     "'SHELL COMMAND'   run /bin/sh -c between bios; fails on non-zero exit"},
};

struct cmd {
	const struct cmd_desc *d;
	uint64_t off_bytes;
	uint64_t len_bytes;
	unsigned int flags; /* REQ_* flags added to the op */
	unsigned char byte;
	const char *text;
	char *label; /* "NAME OFF LEN" as typed, for messages */
};

struct opts {
	enum ioq_backend backend;
	uint64_t chunk_bytes;
	uint64_t size_bytes;
	unsigned int segments;
	bool direct;
	bool readonly;
	bool quiet_members;
};

/* ---------------------------------------------------------------- cksum */

/* POSIX cksum (CRC-32, polynomial 0x04C11DB7, MSB first, length appended),
 * so "read" results can be compared with `cksum` run on a file. */
static uint32_t crc_table[256];

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i << 24;

		for (int k = 0; k < 8; k++)
			c = (c & 0x80000000u) ? (c << 1) ^ 0x04C11DB7u : c << 1;
		crc_table[i] = c;
	}
}

static uint32_t crc_update(uint32_t crc, const unsigned char *p, size_t n)
{
	while (n--)
		crc = (crc << 8) ^ crc_table[((crc >> 24) ^ *p++) & 0xff];
	return crc;
}

static uint32_t posix_cksum(const unsigned char *p, uint64_t n)
{
	uint32_t crc = crc_update(0, p, n);

	for (; n; n >>= 8) {
		unsigned char b = n & 0xff;

		crc = crc_update(crc, &b, 1);
	}
	return ~crc;
}

/* ---------------------------------------------------------------- parsing */

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: bioio [OPTIONS] MEMBER... -- CMD [ARG...] [CMD "
	    "[ARG...]]...\n"
	    "\n"
	    "Open a striped volume as the front ends do and run one bio per "
	    "command.\n"
	    "\n"
	    "options:\n"
	    "  -b, --backend io_uring|threads  I/O backend (default io_uring)\n"
	    "  -s, --stripe-size SIZE          chunk size (default 64K)\n"
	    "  -S, --size SIZE                 volume size; creates/extends "
	    "members\n"
	    "  -d, --direct                    open members with O_DIRECT\n"
	    "  -r, --readonly                  open members read-only\n"
	    "  -n, --segments N                split each data buffer into N "
	    "segments\n"
	    "  -q, --quiet-members             do not print per-member errors\n"
	    "  -h, --help                      this text\n"
	    "\n"
	    "commands (OFF and LEN take K/M/G suffixes, multiples of 512):\n");
	for (size_t i = 0; i < sizeof(cmd_table) / sizeof(cmd_table[0]); i++)
		fprintf(f, "  %-8s %s\n", cmd_table[i].name, cmd_table[i].help);
	fprintf(f, "\n"
		   "Each command prints one line on stdout; an error prints\n"
		   "\"bioio: CMD OFF LEN: message\" on stderr and the next "
		   "command still runs.\n"
		   "Exit status: 0 all commands succeeded, 1 a command or the "
		   "volume failed,\n"
		   "2 bad command line.\n");
}

static const struct cmd_desc *find_cmd(const char *name)
{
	for (size_t i = 0; i < sizeof(cmd_table) / sizeof(cmd_table[0]); i++)
		if (!strcmp(cmd_table[i].name, name))
			return &cmd_table[i];
	return NULL;
}

static int parse_byte(const char *s, unsigned char *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 0);
	if (errno || end == s || *end || v > 255)
		return -EINVAL;
	*out = (unsigned char)v;
	return 0;
}

/*
 * Parse the command starting at argv[*i]; moves *i past it.
 * Returns 0, or prints why and returns -EINVAL.
 */
static int parse_cmd(int argc, char **argv, int *i, struct cmd *c)
{
	const char *name = argv[(*i)++];
	unsigned int need;

	memset(c, 0, sizeof(*c));
	c->d = find_cmd(name);
	if (!c->d) {
		fprintf(stderr, "bioio: unknown command '%s'\n", name);
		return -EINVAL;
	}
	need = (c->d->args & ARG_RANGE ? 2 : 0) +
	       (c->d->args & ARG_BYTE ? 1 : 0) +
	       (c->d->args & ARG_TEXT ? 1 : 0);
	if (argc - *i < (int)need) {
		fprintf(stderr, "bioio: %s: expects %s\n", name, c->d->help);
		return -EINVAL;
	}
	if (c->d->args & ARG_RANGE) {
		const char *o = argv[(*i)++], *l = argv[(*i)++];

		if (parse_size(o, &c->off_bytes) ||
		    parse_size(l, &c->len_bytes)) {
			fprintf(stderr,
				"bioio: %s %s %s: bad offset or length\n", name,
				o, l);
			return -EINVAL;
		}
		if ((c->off_bytes | c->len_bytes) & (SECTOR_SIZE - 1) ||
		    !c->len_bytes || c->len_bytes > MAX_BIO_BYTES) {
			fprintf(stderr,
				"bioio: %s %s %s: offset and length must be "
				"multiples of 512, length 512..%" PRIu64 "\n",
				name, o, l, (uint64_t)MAX_BIO_BYTES);
			return -EINVAL;
		}
		if (asprintf(&c->label, "%s %s %s", name, o, l) < 0)
			c->label = NULL;
	}
	if (c->d->args & ARG_BYTE) {
		const char *b = argv[(*i)++];

		if (parse_byte(b, &c->byte)) {
			fprintf(stderr,
				"bioio: %s: bad byte value '%s' (0..255)\n",
				c->label, b);
			return -EINVAL;
		}
	}
	if (c->d->args & ARG_ZFLAGS) {
		for (; *i < argc; (*i)++) {
			if (!strcmp(argv[*i], "nounmap"))
				c->flags |= REQ_NOUNMAP;
			else if (!strcmp(argv[*i], "fast"))
				c->flags |= REQ_NOFALLBACK;
			else
				break;
		}
	}
	if (c->d->args & ARG_TEXT) {
		c->text = argv[(*i)++];
		if (asprintf(&c->label, "%s %s", name, c->text) < 0)
			c->label = NULL;
	} else if (!(c->d->args & ARG_RANGE)) {
		c->label = strdup(name);
	}
	if (!c->label) {
		fprintf(stderr, "bioio: out of memory\n");
		return -ENOMEM;
	}
	if (c->d->kind == CMD_WRITEF)
		c->flags |= REQ_FUA;
	return 0;
}

/* ---------------------------------------------------------------- running */

/* --quiet-members: member errors are expected and not worth a line. */
static void log_nothing(enum nbdl_level level, const char *fmt, va_list ap)
{
}

static void cmd_error(const struct cmd *c, int err)
{
	fflush(stdout);
	fprintf(stderr, "bioio: %s: %s\n", c->label, strerror(-err));
}

static void *alloc_buf(uint64_t len)
{
	void *p = NULL;
	size_t n = (size_t)((len + BUF_ALIGN - 1) & ~(uint64_t)(BUF_ALIGN - 1));

	if (posix_memalign(&p, BUF_ALIGN, n))
		return NULL;
	return p;
}

/*
 * One bio for @c.  Data ops get @buf as @segments pieces (segment sizes are
 * multiples of 4096 except the last, so O_DIRECT rules hold for each).
 */
static struct bio *build_bio(const struct cmd *c, unsigned int opf, void *buf,
			     unsigned int segments)
{
	enum req_op op = (enum req_op)(opf & REQ_OP_MASK);
	struct bio *bio;

	if (op != REQ_OP_READ && op != REQ_OP_WRITE) {
		bio = bio_alloc(0, opf);
		if (!bio)
			return NULL;
		bio->bi_iter.bi_sector = c->off_bytes >> SECTOR_SHIFT;
		bio->bi_iter.bi_size = (uint32_t)c->len_bytes;
		return bio;
	}

	uint64_t seg = (c->len_bytes + segments - 1) / segments;

	seg = (seg + BUF_ALIGN - 1) & ~(uint64_t)(BUF_ALIGN - 1);
	bio = bio_alloc(segments, opf);
	if (!bio)
		return NULL;
	bio->bi_iter.bi_sector = c->off_bytes >> SECTOR_SHIFT;
	for (uint64_t done = 0; done < c->len_bytes; done += seg) {
		uint64_t n =
		    c->len_bytes - done < seg ? c->len_bytes - done : seg;

		if (bio_add_buf(bio, (char *)buf + done, (unsigned int)n)) {
			bio_put(bio);
			return NULL;
		}
	}
	return bio;
}

static int read_stdin(void *buf, uint64_t len)
{
	uint64_t got = 0;

	while (got < len) {
		size_t n = fread((char *)buf + got, 1, len - got, stdin);

		if (!n)
			return ferror(stdin) ? -EIO : -ENODATA;
		got += n;
	}
	return 0;
}

static void print_extents(const struct cmd *c, struct bio_extents *ext)
{
	printf("%s:", c->label);
	for (size_t i = 0; i < ext->nr; i++) {
		const struct bio_extent *e = &ext->v[i];
		const char *what;

		switch (e->flags & (BIO_EXT_HOLE | BIO_EXT_ZERO)) {
		case 0:
			what = "data";
			break;
		case BIO_EXT_HOLE:
			what = "hole";
			break;
		case BIO_EXT_ZERO:
			what = "zero";
			break;
		default:
			what = "hole,zero";
			break;
		}
		printf(" %" PRIu64 "+%" PRIu64 ":%s", c->off_bytes + e->offset,
		       e->length, what);
	}
	printf("\n");
}

static int run_sh(const struct cmd *c)
{
	int st;

	fflush(stdout);
	fflush(stderr);
	st = system(c->text);
	if (st == -1) {
		cmd_error(c, -errno);
		return -1;
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "bioio: %s: %s %d\n", c->label,
			WIFEXITED(st) ? "exit status" : "killed by signal",
			WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
		return -1;
	}
	printf("%s: ok\n", c->label);
	return 0;
}

/* Returns 0 when the command succeeded, -1 when it failed (and said so). */
static int run_cmd(struct target *vol, const struct cmd *c,
		   const struct opts *o)
{
	struct bio_extents ext = {0};
	void *buf = NULL;
	struct bio *bio = NULL;
	unsigned int opf;
	int r;

	switch (c->d->kind) {
	case CMD_SIZE:
		printf("size: %" PRIu64 "\n", vol->size_bytes);
		return 0;
	case CMD_SH:
		return run_sh(c);
	case CMD_WRITE:
	case CMD_WRITEF:
	case CMD_WRITEIN:
		opf = REQ_OP_WRITE;
		break;
	case CMD_READ:
	case CMD_READOUT:
	case CMD_CHECK:
		opf = REQ_OP_READ;
		break;
	case CMD_ZERO:
		opf = REQ_OP_WRITE_ZEROES;
		break;
	case CMD_TRIM:
		opf = REQ_OP_DISCARD;
		break;
	case CMD_CACHE:
		opf = REQ_OP_CACHE;
		break;
	case CMD_FLUSH:
		opf = REQ_OP_FLUSH;
		break;
	case CMD_EXTENTS:
		opf = REQ_OP_EXTENTS;
		break;
	default:
		abort();
	}
	opf |= c->flags;

	if (opf == REQ_OP_READ || (opf & REQ_OP_MASK) == REQ_OP_WRITE) {
		buf = alloc_buf(c->len_bytes);
		if (!buf) {
			r = -ENOMEM;
			goto fail;
		}
		if (c->d->kind == CMD_WRITEIN) {
			r = read_stdin(buf, c->len_bytes);
			if (r)
				goto fail;
		} else if (opf == REQ_OP_READ) {
			/* A bio that reports success without filling the
			 * buffer must not pass "check" by luck. */
			memset(buf, c->byte ^ 0xa5, c->len_bytes);
		} else {
			memset(buf, c->byte, c->len_bytes);
		}
	}

	bio = build_bio(c, opf, buf, o->segments);
	if (!bio) {
		r = -ENOMEM;
		goto fail;
	}
	if (c->d->kind == CMD_EXTENTS)
		bio->bi_ext = &ext;
	r = submit_bio_wait(vol, bio);
	bio_put(bio);
	if (r)
		goto fail;

	switch (c->d->kind) {
	case CMD_READ:
		printf("%s: cksum %" PRIu32 " %" PRIu64 "\n", c->label,
		       posix_cksum(buf, c->len_bytes), c->len_bytes);
		break;
	case CMD_READOUT:
		if (fwrite(buf, 1, c->len_bytes, stdout) != c->len_bytes) {
			r = -EIO;
			goto fail;
		}
		break;
	case CMD_CHECK: {
		const unsigned char *p = buf;

		for (uint64_t i = 0; i < c->len_bytes; i++) {
			if (p[i] != c->byte) {
				fflush(stdout);
				fprintf(
				    stderr,
				    "bioio: %s: mismatch at volume offset "
				    "%" PRIu64 ": 0x%02x, expected 0x%02x\n",
				    c->label, c->off_bytes + i, p[i], c->byte);
				free(buf);
				return -1;
			}
		}
		printf("%s: ok\n", c->label);
		break;
	}
	case CMD_EXTENTS:
		bio_extents_finish(&ext);
		print_extents(c, &ext);
		break;
	default:
		printf("%s: ok\n", c->label);
		break;
	}
	bio_extents_free(&ext);
	free(buf);
	return 0;

fail:
	cmd_error(c, r);
	bio_extents_free(&ext);
	free(buf);
	return -1;
}

/* ---------------------------------------------------------------- main */

static void free_cmds(struct cmd *cmds, int nr)
{
	for (int i = 0; cmds && i < nr; i++)
		free(cmds[i].label);
	free(cmds);
}

static int parse_options(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
	    {"backend", required_argument, NULL, 'b'},
	    {"stripe-size", required_argument, NULL, 's'},
	    {"size", required_argument, NULL, 'S'},
	    {"direct", no_argument, NULL, 'd'},
	    {"readonly", no_argument, NULL, 'r'},
	    {"segments", required_argument, NULL, 'n'},
	    {"quiet-members", no_argument, NULL, 'q'},
	    {"help", no_argument, NULL, 'h'},
	    {0},
	};
	char *end;
	unsigned long n;
	int ch;

	/* '+': stop at the first member, so "--" separates commands. */
	while ((ch = getopt_long(argc, argv, "+b:s:S:drn:qh", longopts,
				 NULL)) != -1) {
		switch (ch) {
		case 'b':
			if (ioq_backend_parse(optarg, &o->backend)) {
				fprintf(stderr,
					"bioio: --backend %s: expected "
					"io_uring or threads\n",
					optarg);
				return -EINVAL;
			}
			break;
		case 's':
			if (parse_size(optarg, &o->chunk_bytes)) {
				fprintf(stderr,
					"bioio: --stripe-size %s: bad size\n",
					optarg);
				return -EINVAL;
			}
			break;
		case 'S':
			if (parse_size(optarg, &o->size_bytes)) {
				fprintf(stderr, "bioio: --size %s: bad size\n",
					optarg);
				return -EINVAL;
			}
			break;
		case 'd':
			o->direct = true;
			break;
		case 'r':
			o->readonly = true;
			break;
		case 'n':
			errno = 0;
			n = strtoul(optarg, &end, 10);
			if (errno || end == optarg || *end || !n ||
			    n > BIO_INLINE_VECS * 1024) {
				fprintf(
				    stderr,
				    "bioio: --segments %s: expected 1..%u\n",
				    optarg, BIO_INLINE_VECS * 1024);
				return -EINVAL;
			}
			o->segments = (unsigned int)n;
			break;
		case 'q':
			o->quiet_members = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			return -EINVAL;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o = {.backend = IOQ_IO_URING, .segments = 1};
	struct volume_config cfg = {0};
	struct target *vol = NULL;
	struct ioq *q = NULL;
	struct cmd *cmds = NULL;
	int nr_cmds = 0, first_cmd, i, r, failed = 0;
	char errbuf[512];

	crc_init();
	if (parse_options(argc, argv, &o))
		goto usage;

	/* MEMBER... -- commands */
	for (i = optind; i < argc && strcmp(argv[i], "--"); i++)
		;
	if (i == argc) {
		fprintf(stderr, "bioio: missing '--' before the commands\n");
		goto usage;
	}
	cfg.members = (const char *const *)&argv[optind];
	cfg.nr_members = (unsigned int)(i - optind);
	first_cmd = i + 1;

	/* Parse every command before touching the volume. */
	cmds = calloc((size_t)(argc - first_cmd) + 1, sizeof(*cmds));
	if (!cmds) {
		fprintf(stderr, "bioio: out of memory\n");
		return 1;
	}
	for (i = first_cmd; i < argc;)
		if (parse_cmd(argc, argv, &i, &cmds[nr_cmds++]))
			goto usage;

	cfg.chunk_bytes = o.chunk_bytes;
	cfg.size_bytes = o.size_bytes;
	cfg.readonly = o.readonly;
	cfg.direct = o.direct;

	r = ioq_create(&q, o.backend, 0);
	if (r) {
		fprintf(stderr, "bioio: %s backend: %s\n",
			ioq_backend_name(o.backend), strerror(-r));
		free_cmds(cmds, nr_cmds);
		return 1;
	}
	ioq_set_current(q);

	r = volume_open(&vol, &cfg, errbuf, sizeof(errbuf));
	if (r) {
		fprintf(stderr, "bioio: %s\n",
			errbuf[0] ? errbuf : strerror(-r));
		ioq_destroy(q);
		free_cmds(cmds, nr_cmds);
		return 1;
	}
	/* Member errors, worded by the NBD layer as the servers word them. */
	if (o.quiet_members)
		nbdl_set_logger(log_nothing);
	else
		nbdl_log_to_stderr("bioio");

	for (i = 0; i < nr_cmds; i++)
		if (run_cmd(vol, &cmds[i], &o))
			failed++;

	target_destroy(vol);
	ioq_destroy(q);
	bio_pool_drain();
	free_cmds(cmds, nr_cmds);
	if (fflush(stdout)) {
		perror("bioio: stdout");
		return 1;
	}
	return failed ? 1 : 0;

usage:
	free_cmds(cmds, nr_cmds);
	fprintf(stderr, "Try 'bioio --help'.\n");
	return 2;
}
