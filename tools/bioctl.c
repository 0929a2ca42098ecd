// SPDX-License-Identifier: MIT
/*
 * bioctl.c - make and inspect self-describing volumes (docs/format.md).
 *
 *   bioctl create [--level raid0] [--stripe-size SIZE] [--size SIZE]
 *                 [--name NAME] [--data-offset SIZE] [--force] MEMBER...
 *   bioctl info [--json] MEMBER...
 *   bioctl check [--from OFFSET] MEMBER...
 *   bioctl convert --stripe-size SIZE [--size SIZE] [--name NAME]
 *                  [--max-rate RATE] MEMBER...
 *
 * create writes a superblock on every member, role i for the i-th member
 * given, creating or extending sparse files as the size needs; it refuses
 * a member that already carries a superblock, a file system or a
 * partition table unless --force.  info shows each member's superblock
 * and whether the members make one complete, consistent volume, with the
 * same check the servers make when they start (sb_assemble).  check makes
 * that check, then reads every byte of every member's data and reports
 * the ranges that cannot be read; on a terminal it shows a progress bar,
 * elsewhere a line every few seconds, and Ctrl-C stops it with the offset
 * to resume from (--from).
 *
 * Exit status: 0 done (info: a complete volume; check: clean); 1 refused
 * or failed (info: not a complete volume, or headerless; check: unreadable
 * ranges); 2 usage, or (check) members that do not make a volume.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <linux/falloc.h>
#include <linux/fs.h>

#include <bionbd/config.h>
#include <bionbd/superblock.h>
#include <bionbd/target.h>

static void usage(FILE *f)
{
	fputs("Usage: bioctl create [--level raid0] [--stripe-size SIZE] [--size SIZE]\n"
	      "                     [--name NAME] [--data-offset SIZE] [--force] MEMBER...\n"
	      "       bioctl info [--json] MEMBER...\n"
	      "       bioctl check [--from OFFSET] MEMBER...\n"
	      "       bioctl convert --stripe-size SIZE [--size SIZE] [--name NAME]\n"
	      "                      [--max-rate RATE] MEMBER...\n"
	      "\n"
	      "create: write a superblock on every member (role i = the i-th MEMBER),\n"
	      "        creating or extending sparse files to hold SIZE; refuses members\n"
	      "        with a superblock, a file system or a partition table unless\n"
	      "        --force.  Default stripe size 64K, data offset 1M (or the stripe\n"
	      "        size if larger), size from the members when they exist.\n"
	      "info:   each member's superblock, and whether they make a complete,\n"
	      "        consistent volume (exit 0) or not (exit 1); --json for scripts.\n"
	      "check:  info's check, then read all data: exit 0 clean, 1 unreadable\n"
	      "        ranges (listed), 2 not a volume.  --from resumes at a volume\n"
	      "        offset (Ctrl-C prints it).\n"
	      "convert: make a headerless volume (served with that stripe size\n"
	      "        and the members in that order) self-describing: each\n"
	      "        member's data moves 1M up, then the superblocks are written.\n"
	      "        Interrupted or killed, the same command resumes it.\n",
	      f);
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int fail(const char *fmt, ...)
{
	va_list ap;

	fputs("bioctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 1;
}

/* ---- create ---- */

/* What an existing member holds that a new superblock would destroy. */
static const char *signature(int fd)
{
	static const struct {
		off_t off;
		const char *magic;
		size_t len;
		const char *what;
	} sigs[] = {
		{ 0, SB_MAGIC, 8, "a bionbd superblock" },
		{ 1080, "\x53\xef", 2, "an ext2/3/4 file system" },
		{ 0, "XFSB", 4, "an XFS file system" },
		{ 65600, "_BHRfS_M", 8, "a btrfs file system" },
		{ 4086, "SWAPSPACE2", 10, "swap space" },
		{ 0, "LUKS\xba\xbe", 6, "a LUKS header" },
		{ 512, "LABELONE", 8, "an LVM physical volume" },
		{ 512, "EFI PART", 8, "a GPT partition table" },
		{ 510, "\x55\xaa", 2, "a DOS partition table or boot sector" },
	};
	char buf[16];

	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		if (pread(fd, buf, sigs[i].len, sigs[i].off) ==
			    (ssize_t)sigs[i].len &&
		    !memcmp(buf, sigs[i].magic, sigs[i].len))
			return sigs[i].what;
	return NULL;
}

static uint64_t fd_bytes(int fd)
{
	struct stat st;
	uint64_t n = 0;

	if (fstat(fd, &st))
		return 0;
	if (S_ISBLK(st.st_mode))
		return ioctl(fd, BLKGETSIZE64, &n) ? 0 : n;
	return (uint64_t)st.st_size;
}

/* Zero [from, to) of a member: bytes a later format may give a meaning. */
static int zero_range(int fd, uint64_t from, uint64_t to)
{
	static const uint8_t zeros[65536];

	if (!fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		       (off_t)from, (off_t)(to - from)))
		return 0;
	while (from < to) {
		size_t n = to - from < sizeof(zeros) ? to - from : sizeof(zeros);
		ssize_t w = pwrite(fd, zeros, n, (off_t)from);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -errno;
		from += (uint64_t)w;
	}
	return 0;
}

/*
 * The servers hold an exclusive flock(2) on the members of a writable
 * self-describing volume; create and convert take the same, so neither
 * rewrites a volume that is being served.  Returns 0, or 1 with a message.
 */
static int lock_member(int fd, const char *path)
{
	if (!flock(fd, LOCK_EX | LOCK_NB))
		return 0;
	if (errno == EWOULDBLOCK)
		return fail("member %s: in use by another process (a server or "
			    "bioctl has the volume open)", path);
	return fail("member %s: flock: %s", path, strerror(errno));
}

struct create_opts {
	uint64_t chunk, size, data_offset;
	const char *name;
	bool force;
};

/*
 * The superblocks of a new volume, role i on @fds[i]: the last step of
 * create and of convert.  Returns 0, or 1 with the message printed.
 */
static int write_superblocks(const int *fds, char **paths, int n,
			     const struct create_opts *o, uint64_t size,
			     const char *verb)
{
	struct superblock sb = { 0 };
	char u[37];

	sb.version = SB_VERSION;
	snprintf(sb.name, sizeof(sb.name), "%s", o->name);
	sb.level = SB_LEVEL_RAID0;
	sb.nr_roles = (uint32_t)n;
	sb.flags = SB_FLAG_CLEAN;
	sb.chunk_bytes = o->chunk;
	sb.size_bytes = size;
	sb.data_offset = o->data_offset;
	sb.events = 1;
	sb.ctime = sb.utime = (uint64_t)time(NULL);
	if (sb_uuid_generate(sb.volume_uuid))
		return fail("getrandom: %s", strerror(errno));
	for (int i = 0; i < n; i++)
		if (sb_uuid_generate(sb.roles[i].uuid))
			return fail("getrandom: %s", strerror(errno));
	for (int i = 0; i < n; i++) {
		int r;

		sb.role = (uint32_t)i;
		memcpy(sb.member_uuid, sb.roles[i].uuid, 16);
		r = zero_range(fds[i], SB_BYTES, o->data_offset);
		r = r ?: sb_write(fds[i], &sb);
		if (r)
			return fail("member %s: writing the superblock: %s",
				    paths[i], strerror(-r));
	}
	sb_uuid_format(sb.volume_uuid, u);
	printf("%s volume '%s' (%s): raid0, %d members, stripe %" PRIu64
	       ", size %" PRIu64 ", data offset %" PRIu64 "\n",
	       verb, sb.name, u, n, sb.chunk_bytes, sb.size_bytes,
	       sb.data_offset);
	return 0;
}

static int do_create(const struct create_opts *o, char **paths, int n)
{
	struct superblock sb = { 0 };
	struct stripe_geom g;
	uint64_t member_bytes, min = UINT64_MAX;
	int fds[SB_MAX_ROLES], rc = 1, opened = 0;
	struct stat st[SB_MAX_ROLES];

	if (n < 1 || n > (int)SB_MAX_ROLES)
		return fail("create: 1 to %u members, %d given", SB_MAX_ROLES,
			    n);
	if (strlen(o->name) >= SB_NAME_BYTES)
		return fail("--name %s: at most %u bytes", o->name,
			    SB_NAME_BYTES - 1);
	stripe_geom_init(&g, (unsigned int)n, o->chunk);
	for (int i = 0; i < n; i++, opened++) {
		const char *what;

		fds[i] = open(paths[i], O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		if (fds[i] < 0 || fstat(fds[i], &st[i])) {
			fail("member %s: %s", paths[i], strerror(errno));
			goto out;
		}
		if (lock_member(fds[i], paths[i]))
			goto out;
		if (!S_ISREG(st[i].st_mode) && !S_ISBLK(st[i].st_mode)) {
			fail("member %s: not a regular file or block device",
			     paths[i]);
			goto out;
		}
		for (int j = 0; j < i; j++)
			if (st[i].st_dev == st[j].st_dev &&
			    st[i].st_ino == st[j].st_ino &&
			    st[i].st_rdev == st[j].st_rdev) {
				fail("member %s: given twice (as %s too)",
				     paths[i], paths[j]);
				goto out;
			}
		what = signature(fds[i]);
		if (what && !o->force) {
			fail("member %s: holds %s (--force to overwrite it)",
			     paths[i], what);
			goto out;
		}
		if (fd_bytes(fds[i]) < min)
			min = fd_bytes(fds[i]);
	}
	sb.size_bytes = o->size;
	if (!sb.size_bytes) {
		/* Whole stripes of what the smallest member holds. */
		uint64_t per = min > o->data_offset ? min - o->data_offset : 0;

		sb.size_bytes = per / o->chunk * o->chunk * (uint64_t)n;
		if (!sb.size_bytes) {
			fail("members too small for one stripe after the data "
			     "offset: give --size");
			goto out;
		}
	}
	if (sb.size_bytes % 512 || sb.size_bytes > (1ull << 60) ||
	    stripe_member_bytes(&g, sb.size_bytes, &member_bytes)) {
		fail("--size %" PRIu64 ": not a multiple of 512 up to 1E",
		     sb.size_bytes);
		goto out;
	}
	member_bytes += o->data_offset;
	for (int i = 0; i < n; i++) {
		if (fd_bytes(fds[i]) >= member_bytes)
			continue;
		if (S_ISBLK(st[i].st_mode)) {
			fail("member %s: %" PRIu64 " bytes, the volume needs %" PRIu64,
			     paths[i], fd_bytes(fds[i]), member_bytes);
			goto out;
		}
		if (ftruncate(fds[i], (off_t)member_bytes)) {
			fail("member %s: %s", paths[i], strerror(errno));
			goto out;
		}
	}

	if (write_superblocks(fds, paths, n, o, sb.size_bytes, "created"))
		goto out;
	rc = 0;
out:
	for (int i = 0; i < opened; i++)
		close(fds[i]);
	return rc;
}

static int cmd_create(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "level", required_argument, NULL, 'l' },
		{ "stripe-size", required_argument, NULL, 'S' },
		{ "size", required_argument, NULL, 's' },
		{ "name", required_argument, NULL, 'n' },
		{ "data-offset", required_argument, NULL, 'D' },
		{ "force", no_argument, NULL, 'f' },
		{ NULL, 0, NULL, 0 },
	};
	struct create_opts o = { .chunk = STRIPE_DEFAULT_CHUNK, .name = "" };
	bool offset_set = false;
	char err[256];
	int ch;

	while ((ch = getopt_long(argc, argv, "f", longopts, NULL)) != -1) {
		switch (ch) {
		case 'l':
			if (strcmp(optarg, "raid0"))
				return fail("--level %s: only raid0 for now "
					    "(raid1 and raid10 come with the "
					    "mirror)", optarg);
			break;
		case 'S':
			if (conf_parse_chunk(optarg, &o.chunk, err, sizeof(err)))
				return fail("--stripe-size %s: %s", optarg, err);
			break;
		case 's':
			if (parse_size(optarg, &o.size) || !o.size)
				return fail("--size %s: expected a size (e.g. 4G)",
					    optarg);
			break;
		case 'n': o.name = optarg; break;
		case 'D':
			if (parse_size(optarg, &o.data_offset))
				return fail("--data-offset %s: expected a size",
					    optarg);
			offset_set = true;
			break;
		case 'f': o.force = true; break;
		default: usage(stderr); return 2;
		}
	}
	if (!offset_set)
		o.data_offset = o.chunk > SB_DEFAULT_DATA_OFFSET ?
					o.chunk :
					SB_DEFAULT_DATA_OFFSET;
	if (o.data_offset < SB_BYTES || o.data_offset % 4096 ||
	    o.data_offset % o.chunk || o.data_offset > (1ull << 40))
		return fail("--data-offset %" PRIu64 ": a multiple of 4K and "
			    "of the stripe size, 4K to 1T", o.data_offset);
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	return do_create(&o, argv + optind, argc - optind);
}

/* ---- info ---- */

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

struct member_info {
	int r; /* sb_read's */
	char why[256];
	struct superblock sb;
};

static void info_text(char **paths, int n, const struct member_info *mi,
		      int ar, const struct sb_volume *v, const char *why)
{
	char u[37];

	for (int i = 0; i < n; i++) {
		const struct superblock *sb = &mi[i].sb;

		if (mi[i].r) {
			printf("%s: %s\n", paths[i], mi[i].why);
			continue;
		}
		sb_uuid_format(sb->volume_uuid, u);
		printf("%s: volume '%s' %s, %s, role %u of %u (%s), stripe %"
		       PRIu64 ", size %" PRIu64 ", data offset %" PRIu64
		       ", events %" PRIu64 ", %s\n",
		       paths[i], sb->name, u, sb_level_name(sb->level),
		       sb->role, sb->nr_roles,
		       sb_role_state_name(sb->roles[sb->role].state),
		       sb->chunk_bytes, sb->size_bytes, sb->data_offset,
		       sb->events, sb->flags & SB_FLAG_CLEAN ? "clean" :
							      "not clean");
	}
	if (ar == -ENOENT) {
		printf("headerless: no member has a superblock\n");
	} else if (ar) {
		printf("not a complete volume: %s\n", why);
	} else {
		printf("volume '%s': complete and consistent; members by role:",
		       v->sb.name);
		for (unsigned int r = 0; r < v->nr; r++)
			printf(" %s", paths[v->order[r]]);
		putchar('\n');
	}
}

static void info_json(char **paths, int n, const struct member_info *mi,
		      int ar, const struct sb_volume *v, const char *why)
{
	char u[37];

	printf("{\"members\": [");
	for (int i = 0; i < n; i++) {
		const struct superblock *sb = &mi[i].sb;

		printf("%s{\"path\": ", i ? ", " : "");
		json_str(paths[i]);
		printf(", \"superblock\": %s", mi[i].r ? "false" : "true");
		if (mi[i].r) {
			printf(", \"error\": ");
			json_str(mi[i].r == -ENOENT ? "no superblock" :
						      mi[i].why);
			printf("}");
			continue;
		}
		sb_uuid_format(sb->volume_uuid, u);
		printf(", \"volume_uuid\": \"%s\", \"name\": ", u);
		json_str(sb->name);
		sb_uuid_format(sb->member_uuid, u);
		printf(", \"level\": \"%s\", \"role\": %u, \"members\": %u, "
		       "\"state\": \"%s\", \"stripe_size\": %" PRIu64
		       ", \"size\": %" PRIu64 ", \"data_offset\": %" PRIu64
		       ", \"events\": %" PRIu64 ", \"clean\": %s, "
		       "\"member_uuid\": \"%s\", \"ctime\": %" PRIu64
		       ", \"utime\": %" PRIu64 "}",
		       sb_level_name(sb->level), sb->role, sb->nr_roles,
		       sb_role_state_name(sb->roles[sb->role].state),
		       sb->chunk_bytes, sb->size_bytes, sb->data_offset,
		       sb->events, sb->flags & SB_FLAG_CLEAN ? "true" : "false",
		       u, sb->ctime, sb->utime);
	}
	printf("], \"volume\": {\"complete\": %s, \"headerless\": %s",
	       ar ? "false" : "true", ar == -ENOENT ? "true" : "false");
	if (ar) {
		printf(", \"reason\": ");
		json_str(why);
	} else {
		sb_uuid_format(v->sb.volume_uuid, u);
		printf(", \"uuid\": \"%s\", \"name\": ", u);
		json_str(v->sb.name);
		printf(", \"by_role\": [");
		for (unsigned int r = 0; r < v->nr; r++) {
			printf("%s", r ? ", " : "");
			json_str(paths[v->order[r]]);
		}
		printf("]");
	}
	printf("}}\n");
}

static int cmd_info(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	struct member_info *mi;
	struct sb_volume *v;
	bool json = false;
	char why[512];
	int ch, n, ar;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		if (ch != 'j') {
			usage(stderr);
			return 2;
		}
		json = true;
	}
	n = argc - optind;
	if (n < 1) {
		usage(stderr);
		return 2;
	}
	mi = calloc((size_t)n, sizeof(*mi));
	v = malloc(sizeof(*v));
	if (!mi || !v)
		return fail("out of memory");
	for (int i = 0; i < n; i++) {
		int fd = open(argv[optind + i], O_RDONLY | O_CLOEXEC);

		if (fd < 0) {
			mi[i].r = -errno;
			snprintf(mi[i].why, sizeof(mi[i].why), "%s",
				 strerror(errno));
			continue;
		}
		mi[i].r = sb_read(fd, &mi[i].sb, mi[i].why, sizeof(mi[i].why));
		close(fd);
	}
	ar = sb_assemble((const char *const *)argv + optind, (unsigned int)n,
			 v, why, sizeof(why));
	if (json)
		info_json(argv + optind, n, mi, ar, v, why);
	else
		info_text(argv + optind, n, mi, ar, v, why);
	free(mi);
	free(v);
	return ar ? 1 : 0;
}

/* ---- check ---- */

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
	(void)sig;
	interrupted = 1;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * Progress of a long operation: a bar redrawn on a terminal, or a plain
 * line every PROGRESS_LINE_S seconds for a log.
 */
#define PROGRESS_LINE_S 5.0

struct progress {
	const char *what;
	uint64_t total, done, base;
	double start, last;
	bool tty;
};

static void progress_show(struct progress *p, bool final)
{
	double t = now_s(), el = t - p->start;
	double rate = el > 0 ? (double)(p->done - p->base) / el : 0;
	double eta = rate > 0 ? (double)(p->total - p->done) / rate : 0;
	int pct = p->total ? (int)(p->done * 100 / p->total) : 100;

	if (!final && t - p->last < (p->tty ? 0.2 : PROGRESS_LINE_S))
		return;
	p->last = t;
	if (p->tty) {
		char bar[31];
		int fill = pct * 30 / 100;

		memset(bar, '#', (size_t)fill);
		memset(bar + fill, '.', (size_t)(30 - fill));
		bar[30] = 0;
		fprintf(stderr, "\r%s [%s] %3d%% %7.1f MB/s ETA %4.0f s ",
			p->what, bar, pct, rate / 1e6, eta);
		if (final)
			fputc('\n', stderr);
	} else {
		fprintf(stderr, "%s: %d%% (%" PRIu64 " of %" PRIu64
			" MiB), %.1f MB/s, ETA %.0f s\n",
			p->what, pct, p->done >> 20, p->total >> 20, rate / 1e6,
			eta);
	}
}

/*
 * Read the data of every role, one stripe row at a time (a chunk of each
 * member: volume order), in reads of up to a chunk; a failed read is
 * retried sector by sector so the report names exact ranges.
 */
static int check_data(char **paths, const struct sb_volume *v, uint64_t from)
{
	const struct superblock *sb = &v->sb;
	uint64_t c = sb->chunk_bytes, n = v->nr, bad = 0, bad_ranges = 0;
	uint8_t *buf = malloc(c);
	int fds[SB_MAX_ROLES], rc = 0, opened = 0;
	struct progress p = { .what = "check", .total = sb->size_bytes };
	uint64_t off;

	if (!buf)
		return fail("out of memory");
	for (unsigned int r = 0; r < v->nr; r++, opened++) {
		fds[r] = open(paths[v->order[r]], O_RDONLY | O_CLOEXEC);
		if (fds[r] < 0) {
			rc = fail("member %s: %s", paths[v->order[r]],
				  strerror(errno));
			goto out;
		}
	}
	from -= from % c;
	p.tty = isatty(2);
	p.start = p.last = now_s();
	p.base = p.done = from;
	for (off = from; off < sb->size_bytes && !interrupted; off += c) {
		uint64_t k = off / c, len = sb->size_bytes - off;
		int fd = fds[k % n];
		uint64_t at = sb->data_offset + k / n * c;

		if (len > c)
			len = c;
		if (pread(fd, buf, len, (off_t)at) == (ssize_t)len) {
			p.done = off + len;
			progress_show(&p, false);
			continue;
		}
		/* Which sectors: one read each, runs reported together. */
		for (uint64_t s = 0; s < len; s += 512) {
			uint64_t run = 0;

			while (s + run < len &&
			       pread(fd, buf, 512, (off_t)(at + s + run)) != 512)
				run += 512;
			if (!run)
				continue;
			printf("unreadable: volume offset %" PRIu64 ", %" PRIu64
			       " bytes (member %s, offset %" PRIu64 ")\n",
			       off + s, run, paths[v->order[k % n]], at + s);
			bad += run;
			bad_ranges++;
			s += run;
		}
		p.done = off + len;
	}
	if (interrupted) {
		fprintf(stderr, "%sbioctl: check interrupted at volume offset %"
			PRIu64 "; resume with: bioctl check --from %" PRIu64
			" MEMBER...\n", p.tty ? "\n" : "", off, off);
		rc = 130;
		goto out;
	}
	progress_show(&p, true);
	if (bad) {
		printf("%" PRIu64 " unreadable bytes in %" PRIu64 " ranges\n",
		       bad, bad_ranges);
		rc = 1;
	} else {
		printf("volume '%s': superblocks consistent, %" PRIu64
		       " bytes of data read%s\n",
		       sb->name, sb->size_bytes - from,
		       sb->flags & SB_FLAG_CLEAN ?
			       "" :
			       "; not clean (served now, or not shut down "
			       "cleanly)");
	}
out:
	for (int i = 0; i < opened; i++)
		close(fds[i]);
	free(buf);
	return rc;
}

static int cmd_check(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "from", required_argument, NULL, 'F' },
		{ NULL, 0, NULL, 0 },
	};
	struct sigaction sa = { .sa_handler = on_sigint };
	struct sb_volume *v;
	uint64_t from = 0;
	char why[512];
	int ch, n, r;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		if (ch != 'F' || parse_size(optarg, &from)) {
			usage(stderr);
			return 2;
		}
	}
	n = argc - optind;
	if (n < 1) {
		usage(stderr);
		return 2;
	}
	v = malloc(sizeof(*v));
	if (!v)
		return fail("out of memory");
	r = sb_assemble((const char *const *)argv + optind, (unsigned int)n,
			v, why, sizeof(why));
	if (r) {
		printf("%s\n", r == -ENOENT ? "headerless: no superblocks to "
					      "check" : why);
		free(v);
		return 2;
	}
	if (from >= v->sb.size_bytes) {
		free(v);
		return fail("--from %" PRIu64 ": past the volume's end", from);
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	r = check_data(argv + optind, v, from);
	free(v);
	return r;
}

/* ---- convert ---- */

/*
 * A headerless volume becomes self-describing by moving each member's
 * data D bytes up (D: the data offset) and then writing the superblocks.
 * Blocks move from the top down, each at most D long, so a block's
 * source and destination never overlap and moving one again after a
 * crash copies the same bytes: the run is idempotent from its last
 * checkpoint.  The checkpoint is the last 4 KiB of member 0 (grown for it
 * if need be), above everything the move writes, fdatasync'ed after the
 * member it describes; a resumed run finds it there before it looks at
 * the (by then grown) member sizes, and takes the geometry from it.  The superblocks go last, so until the end the
 * members carry no superblock (serve them only after convert finished).
 */
#define CV_MAGIC "bionbdCV"
#define MIB (1u << 20)

struct cv_state {
	uint64_t chunk, size, data_offset;
	uint32_t nr, member; /* the member being moved */
	uint64_t pos; /* its bytes below pos are still to move */
};

static void cv_encode(const struct cv_state *c, uint8_t *b)
{
	uint64_t v[6] = { c->chunk, c->size, c->data_offset, c->nr,
			  c->member, c->pos };
	uint32_t crc;

	memset(b, 0, SB_BYTES);
	memcpy(b, CV_MAGIC, 8);
	for (int i = 0; i < 6; i++)
		for (int k = 0; k < 8; k++)
			b[8 + 8 * i + k] = (uint8_t)(v[i] >> (8 * k));
	crc = crc32c(0, b, 56);
	for (int k = 0; k < 4; k++)
		b[56 + k] = (uint8_t)(crc >> (8 * k));
}

/* 0 and *c filled, or -ENOENT when there is no (valid) checkpoint. */
static int cv_decode(const uint8_t *b, struct cv_state *c)
{
	uint64_t v[6] = { 0 };
	uint32_t crc = 0;

	for (int k = 3; k >= 0; k--)
		crc = crc << 8 | b[56 + k];
	if (memcmp(b, CV_MAGIC, 8) || crc != crc32c(0, b, 56))
		return -ENOENT;
	for (int i = 0; i < 6; i++)
		for (int k = 7; k >= 0; k--)
			v[i] = v[i] << 8 | b[8 + 8 * i + k];
	*c = (struct cv_state){ .chunk = v[0], .size = v[1],
				.data_offset = v[2], .nr = (uint32_t)v[3],
				.member = (uint32_t)v[4], .pos = v[5] };
	return 0;
}

static int cv_save(int fd, uint64_t at, const struct cv_state *c)
{
	uint8_t b[SB_BYTES];

	cv_encode(c, b);
	if (pwrite(fd, b, sizeof(b), (off_t)at) != (ssize_t)sizeof(b))
		return -errno ?: -EIO;
	return fdatasync(fd) ? -errno : 0;
}

struct convert_opts {
	struct create_opts c;
	double max_rate; /* bytes a second; 0 = as fast as it goes */
};

/* Sleep enough that @done bytes since @start stay under @rate. */
static void throttle(double start, uint64_t done, double rate)
{
	double ahead;

	if (rate <= 0)
		return;
	ahead = (double)done / rate - (now_s() - start);
	if (ahead > 0)
		usleep((useconds_t)(ahead * 1e6));
}

/* Move member @fd's data [0, len) up by @c->data_offset, from @c->pos. */
static int cv_move(int fd, int fd0, uint64_t state_at, struct cv_state *c,
		   uint8_t *buf, struct progress *p, double rate)
{
	uint64_t d = c->data_offset, blk = d < MIB ? d : MIB;

	while (c->pos && !interrupted) {
		uint64_t n = c->pos % blk ? c->pos % blk : blk;
		uint64_t from = c->pos - n;
		int r;

		if (pread(fd, buf, n, (off_t)from) != (ssize_t)n ||
		    pwrite(fd, buf, n, (off_t)(from + d)) != (ssize_t)n)
			return -errno ?: -EIO;
		if (fdatasync(fd))
			return -errno;
		c->pos = from;
		r = cv_save(fd0, state_at, c);
		if (r)
			return r;
		p->done += n;
		progress_show(p, false);
		throttle(p->start, p->done - p->base, rate);
	}
	return 0;
}

static int do_convert(const struct convert_opts *o, char **paths, int n)
{
	const struct create_opts *co = &o->c;
	uint64_t member_bytes, min = UINT64_MAX, size = co->size, state_at;
	int fds[SB_MAX_ROLES], rc = 1, opened = 0, r;
	struct progress p = { .what = "convert" };
	struct cv_state c = { 0 }, saved;
	bool moved;
	uint8_t sbuf[SB_BYTES], *buf = NULL;
	struct stripe_geom g;
	struct superblock sb;
	char why[256];

	if (n < 1 || n > (int)SB_MAX_ROLES)
		return fail("convert: 1 to %u members, %d given", SB_MAX_ROLES,
			    n);
	stripe_geom_init(&g, (unsigned int)n, co->chunk);
	for (int i = 0; i < n; i++, opened++) {
		fds[i] = open(paths[i], O_RDWR | O_CLOEXEC);
		if (fds[i] < 0) {
			fail("member %s: %s", paths[i], strerror(errno));
			goto out;
		}
		if (lock_member(fds[i], paths[i]))
			goto out;
	}
	/*
	 * Superblocks on the members: a finished volume, or a run that died
	 * while writing them after moving all data (its checkpoint says so,
	 * and the superblocks are simply written again).
	 */
	moved = fd_bytes(fds[0]) >= SB_BYTES &&
		pread(fds[0], sbuf, sizeof(sbuf),
		      (off_t)(fd_bytes(fds[0]) - SB_BYTES)) ==
			(ssize_t)sizeof(sbuf) &&
		!cv_decode(sbuf, &saved) && saved.member + 1 == saved.nr &&
		!saved.pos;
	for (int i = 0; i < n && !moved; i++)
		if (sb_read(fds[i], &sb, why, sizeof(why)) != -ENOENT) {
			fail("member %s: already has a superblock (or an "
			     "unreadable start): nothing to convert", paths[i]);
			goto out;
		}
	/* A run that stopped: its checkpoint says what the volume is. */
	if (fd_bytes(fds[0]) >= SB_BYTES &&
	    pread(fds[0], sbuf, sizeof(sbuf),
		  (off_t)(fd_bytes(fds[0]) - SB_BYTES)) ==
		    (ssize_t)sizeof(sbuf) &&
	    !cv_decode(sbuf, &saved)) {
		if (saved.chunk != co->chunk || (size && saved.size != size) ||
		    saved.data_offset != co->data_offset ||
		    saved.nr != (uint32_t)n || saved.member >= (uint32_t)n ||
		    stripe_member_bytes(&g, saved.size, &member_bytes) ||
		    saved.pos > member_bytes) {
			fail("member %s holds the checkpoint of another "
			     "conversion (stripe %" PRIu64 ", size %" PRIu64
			     ", %u members): resume it with the same arguments",
			     paths[0], saved.chunk, saved.size, saved.nr);
			goto out;
		}
		c = saved;
		size = c.size;
		state_at = fd_bytes(fds[0]) - SB_BYTES;
		fprintf(stderr, "bioctl: resuming: member %s, %" PRIu64
			" bytes still to move\n", paths[c.member], c.pos);
	} else {
		/* The volume as bionbd serves it headerless. */
		for (int i = 0; i < n; i++)
			if (fd_bytes(fds[i]) < min)
				min = fd_bytes(fds[i]);
		if (!size)
			size = min / co->chunk * co->chunk * (uint64_t)n;
		if (!size || stripe_member_bytes(&g, size, &member_bytes)) {
			fail("members too small for one stripe of %" PRIu64
			     " bytes", co->chunk * (uint64_t)n);
			goto out;
		}
		for (int i = 0; i < n; i++)
			if (fd_bytes(fds[i]) < member_bytes) {
				fail("member %s: %" PRIu64 " bytes, a volume of %"
				     PRIu64 " needs %" PRIu64, paths[i],
				     fd_bytes(fds[i]), size, member_bytes);
				goto out;
			}
		c = (struct cv_state){ .chunk = co->chunk, .size = size,
				       .data_offset = co->data_offset,
				       .nr = (uint32_t)n, .member = 0,
				       .pos = member_bytes };
		/* Room: every member for its data moved up, member 0 also
		 * for the checkpoint at its end. */
		state_at = member_bytes + co->data_offset;
		if (fd_bytes(fds[0]) >= state_at + SB_BYTES)
			state_at = fd_bytes(fds[0]) - SB_BYTES;
		for (int i = 0; i < n; i++) {
			uint64_t need = i ? member_bytes + co->data_offset :
					    state_at + SB_BYTES;

			if (fd_bytes(fds[i]) >= need)
				continue;
			if (ftruncate(fds[i], (off_t)need)) {
				fail("member %s: %s (it needs %" PRIu64
				     " bytes)", paths[i], strerror(errno), need);
				goto out;
			}
		}
	}
	r = cv_save(fds[0], state_at, &c);
	if (r) {
		fail("member %s: checkpoint: %s", paths[0], strerror(-r));
		goto out;
	}
	buf = malloc(MIB);
	if (!buf) {
		fail("out of memory");
		goto out;
	}
	p.total = member_bytes * (uint64_t)n;
	p.done = p.base = member_bytes * c.member + (member_bytes - c.pos);
	p.tty = isatty(2);
	p.start = p.last = now_s();
	for (; c.member < (uint32_t)n; c.member++, c.pos = member_bytes) {
		r = cv_move(fds[c.member], fds[0], state_at, &c, buf, &p,
			    o->max_rate);
		if (r) {
			fail("member %s: %s", paths[c.member], strerror(-r));
			goto out;
		}
		if (interrupted)
			break;
		if (c.member + 1 == (uint32_t)n)
			break;
	}
	if (interrupted) {
		fprintf(stderr, "%sbioctl: convert interrupted; run the same "
			"command again to resume (the members are not usable "
			"until it finishes)\n", p.tty ? "\n" : "");
		rc = 130;
		goto out;
	}
	progress_show(&p, true);
	if (write_superblocks(fds, paths, n, co, size, "converted"))
		goto out;
	/*
	 * Done: the checkpoint goes (it lies past the volume's data), and the
	 * room it took when convert made it.
	 */
	if (zero_range(fds[0], state_at, state_at + SB_BYTES) ||
	    (state_at == member_bytes + co->data_offset &&
	     ftruncate(fds[0], (off_t)state_at)))
		fail("member %s: could not clear the checkpoint (harmless: "
		     "it lies past the volume's data)", paths[0]);
	rc = 0;
out:
	for (int i = 0; i < opened; i++)
		close(fds[i]);
	free(buf);
	return rc;
}

static int cmd_convert(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "stripe-size", required_argument, NULL, 'S' },
		{ "size", required_argument, NULL, 's' },
		{ "name", required_argument, NULL, 'n' },
		{ "max-rate", required_argument, NULL, 'R' },
		{ NULL, 0, NULL, 0 },
	};
	struct convert_opts o = { .c = { .chunk = 0, .name = "" } };
	struct sigaction sa = { .sa_handler = on_sigint };
	uint64_t rate;
	char err[256];
	int ch;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 'S':
			if (conf_parse_chunk(optarg, &o.c.chunk, err,
					     sizeof(err)))
				return fail("--stripe-size %s: %s", optarg, err);
			break;
		case 's':
			if (parse_size(optarg, &o.c.size) || !o.c.size)
				return fail("--size %s: expected a size", optarg);
			break;
		case 'n':
			if (strlen(optarg) >= SB_NAME_BYTES)
				return fail("--name %s: at most %u bytes", optarg,
					    SB_NAME_BYTES - 1);
			o.c.name = optarg;
			break;
		case 'R':
			if (parse_size(optarg, &rate) || !rate)
				return fail("--max-rate %s: bytes a second, "
					    "e.g. 100M", optarg);
			o.max_rate = (double)rate;
			break;
		default: usage(stderr); return 2;
		}
	}
	if (!o.c.chunk)
		return fail("convert: --stripe-size is required (the stripe "
			    "size the volume was served with)");
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	o.c.data_offset = o.c.chunk > SB_DEFAULT_DATA_OFFSET ?
				  o.c.chunk :
				  SB_DEFAULT_DATA_OFFSET;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	return do_convert(&o, argv + optind, argc - optind);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "create"))
		return cmd_create(argc - 1, argv + 1);
	if (!strcmp(argv[1], "info"))
		return cmd_info(argc - 1, argv + 1);
	if (!strcmp(argv[1], "check"))
		return cmd_check(argc - 1, argv + 1);
	if (!strcmp(argv[1], "convert"))
		return cmd_convert(argc - 1, argv + 1);
	fprintf(stderr, "bioctl: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
