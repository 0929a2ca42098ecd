// SPDX-License-Identifier: MIT
/*
 * bioctl.c - make and inspect self-describing volumes (docs/format.md).
 *
 *   bioctl create [--level raid0|raid1|raid10] [--copies K]
 *                 [--stripe-size SIZE] [--size SIZE] [--name NAME]
 *                 [--data-offset SIZE] [--force] MEMBER...
 *   bioctl info [--json] MEMBER...
 *   bioctl check [--from OFFSET] [--repair] MEMBER...
 *   bioctl convert --stripe-size SIZE [--size SIZE] [--name NAME]
 *                  [--max-rate RATE] MEMBER...
 *   bioctl rebuild [--max-rate RATE] [--force] MEMBER...
 *                  --replace OLD NEW | --role R NEW
 *   bioctl stat [-i SECONDS] [-n COUNT] [-c N|all] [--json]
 *               SOCKET|PIDFILE
 *   bioctl trace [-m MEMBER] [-e EXPORT] [-o OPS] [-r RANGE] [--min-lat US]
 *                [--max-lat US] [-a ACTIONS] [-s | --json] FILE
 *   bioctl [COMMAND] --help
 *   bioctl --version
 *
 * create writes a superblock on every member, role i for the i-th member
 * given, creating or extending sparse files as the size needs; it refuses
 * a member that already carries a superblock, a file system or a
 * partition table unless --force.  A mirror (raid1, raid10) also gets an
 * all-clear write-intent bitmap on every member: a new volume has nothing
 * to resync.  create, info and check also take remote members (NBD URIs,
 * rbd: names; mdev.h), which are used as they are: never extended nor
 * locked, but an RBD image another client has open is refused where
 * bioctl writes (mdev_claim).
 * info shows each member's superblock and whether the members
 * make one complete, consistent volume, with the same check the servers
 * make when they start (sb_assemble); a mirror that lost members but
 * still has a copy of everything is shown degraded, role by role.  check
 * makes that check, then reads every byte of every live member's data
 * and reports the ranges that cannot be read; on a mirror it also
 * compares the copies of every chunk and reports (--repair: rewrites from
 * the first live copy) those that differ, which is what an unclean
 * shutdown without a bitmap, or a disk returning stale data, leaves.  On
 * a terminal it shows a progress bar, elsewhere a line every few seconds,
 * and Ctrl-C stops it with the offset to resume from (--from).  rebuild
 * gives a mirror's role (OLD's, or --role R) to a new member NEW, offline
 * and in the synced steps of docs/format.md "Rebuild", copying NEW's rows
 * from the other active copies; a run stopped by Ctrl-C or a crash
 * records where it got to, and the same command resumes there.  stat
 * (bioctl-stat.c) shows a running bionbd's statistics, trace
 * (bioctl-trace.c) prints a bio trace.
 *
 * Exit status: 0 done (info: a complete volume, degraded or not; check:
 * clean, or repaired; rebuild: NEW active); 1 refused or failed (info: not
 * a complete volume, or headerless; check: unreadable ranges, or copies
 * that differ; rebuild: also interrupted); 2 usage, or (check) members
 * that do not make a volume.  A usage error is whatever the command line
 * alone gets wrong, caught before any member is opened and told in one
 * line; what depends on the members is refused (1).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <linux/falloc.h>
#include <linux/fs.h>

#include <bionbd/config.h>
#include <bionbd/mdev.h>
#include <bionbd/plural.h>
#include <bionbd/superblock.h>
#include <bionbd/target.h>

#include "bioctl.h"

void usage(FILE *f)
{
	fputs("Usage: bioctl create [--level raid0|raid1|raid10] [--copies K]\n"
	      "                     [--stripe-size SIZE] [--size SIZE] [--name NAME]\n"
	      "                     [--data-offset SIZE] [--force] MEMBER...\n"
	      "       bioctl info [--json] MEMBER...\n"
	      "       bioctl check [--from OFFSET] [--repair] MEMBER...\n"
	      "       bioctl convert --stripe-size SIZE [--size SIZE] [--name NAME]\n"
	      "                      [--max-rate RATE] MEMBER...\n"
	      "       bioctl rebuild [--max-rate RATE] [--force] MEMBER...\n"
	      "                      --replace OLD NEW | --role R NEW\n"
	      "       bioctl stat [-i SECONDS] [-n COUNT] [-c N|all] [--json]\n"
	      "                   SOCKET|PIDFILE\n"
	      "       bioctl trace [-m MEMBER] [-e EXPORT] [-o OPS] [-r RANGE]\n"
	      "                    [--min-lat US] [--max-lat US] [-a ACTIONS]\n"
	      "                    [-s | --json] FILE\n"
	      "       bioctl [COMMAND] --help\n"
	      "       bioctl --version\n"
	      "\n"
	      "create: write a superblock on every member (role i = the i-th MEMBER),\n"
	      "        creating or extending sparse files to hold SIZE; refuses members\n"
	      "        with a superblock, a file system or a partition table unless\n"
	      "        --force.  Default stripe size 64K, data offset 1M (or the stripe\n"
	      "        size if larger), size from the members when they exist.\n"
	      "        raid1: a copy on every member (2 or more); raid10: --copies K\n"
	      "        copies of each chunk, 2 to the members, default 2.\n"
	      "info:   each member's superblock, and whether they make a complete,\n"
	      "        consistent volume (exit 0) or not (exit 1); a mirror with\n"
	      "        roles lost is degraded (exit 0); --json for scripts.\n"
	      "check:  info's check, then read all data: exit 0 clean, 1 unreadable\n"
	      "        ranges or (mirror) copies that differ (listed), 2 not a volume.\n"
	      "        --from resumes at a volume offset (Ctrl-C prints it); --repair\n"
	      "        rewrites differing copies from the first live one.\n"
	      "convert: make a headerless volume (served with that stripe size\n"
	      "        and the members in that order) self-describing: each\n"
	      "        member's data moves 1M up, then the superblocks are written.\n"
	      "        Interrupted or killed, the same command resumes it.\n"
	      "rebuild: NEW (created, or extended, if need be) takes over OLD's\n"
	      "        role of a mirror (or role R's: OLD missing, several roles\n"
	      "        without a member): the members in service name it, its\n"
	      "        data is copied from the other copies, it turns active.\n"
	      "        OLD may be missing, faulty, stale or active (a migration).\n"
	      "        Offline.  Interrupted, the same command resumes it.\n"
	      "        --force overwrites a file system or another volume on NEW.\n"
	      "stat:   a running bionbd's statistics from its control socket\n"
	      "        (--control, or PIDFILE.ctl): totals, then every -i seconds\n"
	      "        (default 1) rates and p99 latencies, -n reports (default:\n"
	      "        until Ctrl-C); the busiest -c connections (--connections,\n"
	      "        default 10, or all) and one row for the rest; --json\n"
	      "        prints the server's document (once unless -n).\n"
	      "trace:  a bio trace (bionbd --trace) like blkparse, one line per\n"
	      "        event (filtered by member, export, op, range, latency),\n"
	      "        then like btt: per op, per stage (queued, issued,\n"
	      "        completed, reply sent) and per member; -s the summary\n"
	      "        only, --json for scripts.  Exit 1 on a corrupt trace.\n",
	      f);
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One line on stderr; returns @status, the exit status it stands for. */
static int say(int status, const char *fmt, va_list ap)
{
	fputs("bioctl: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	return status;
}

static int fail(const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = say(1, fmt, ap);
	va_end(ap);
	return r;
}

int usage_error(const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = say(2, fmt, ap);
	va_end(ap);
	return r;
}

/*
 * getopt_long leaves only optopt and optind to say which word it did not
 * take.  A long option always moved optind past its word; optopt is 0 for
 * one it does not know or cannot tell (ambiguous), else the option's
 * value, and then the word is the option missing its value or one given
 * a value it does not take (--force=1).  Anything else is a short option,
 * named by its letter: its word may be a cluster (-fx) that optind has
 * not left yet.
 */
int bad_option(const char *cmd, int ch, char *const *argv,
	       const struct option *longopts)
{
	const char *w = argv[optind - 1];
	size_t len = strcspn(w, "=");
	const struct option *hit = NULL;
	int matches = 0;
	bool is_long = !strncmp(w, "--", 2) && len > 2;

	for (const struct option *o = longopts; is_long && o->name; o++)
		if (!strncmp(o->name, w + 2, len - 2)) {
			matches++;
			if (o->val == optopt)
				hit = o;
		}
	if (is_long && optopt)
		is_long = hit && (ch == ':' || w[len] == '=');
	if (!is_long) {
		if (ch == ':')
			return usage_error("-%c: a value is missing", optopt);
		return usage_error("-%c: unknown option; try 'bioctl %s "
				   "--help'", optopt, cmd);
	}
	if (ch == ':')
		return usage_error("--%s: a value is missing", hit->name);
	if (optopt)
		return usage_error("--%s: takes no value (%s given)",
				   hit->name, w);
	if (matches > 1)
		return usage_error("%.*s: ambiguous option; try 'bioctl %s "
				   "--help'", (int)len, w, cmd);
	return usage_error("%.*s: unknown option; try 'bioctl %s --help'",
			   (int)len, w, cmd);
}

/* ---- create ---- */

/* What an existing member holds that a new superblock would destroy. */
static const char *signature(struct mdev *m)
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
	/*
	 * One aligned read of the start, not one per signature: a remote
	 * member may refuse reads that are not whole blocks, and a member
	 * that cannot be read is not known to be blank.
	 */
	enum { START = 72 << 10 };
	static uint8_t buf[START];

	if (mdev_pread(m, buf, sizeof(buf), 0))
		return "a start that cannot be read";
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		if (!memcmp(buf + sigs[i].off, sigs[i].magic, sigs[i].len))
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

/*
 * The servers hold an exclusive flock(2) on the members of a writable
 * self-describing volume; create and convert take the same, so neither
 * rewrites a volume that is being served.  Returns 0, or 1 with a message.
 */
static int lock_member(int fd, const char *path)
{
	char why[256];

	if (mdev_claim(MDEV_FD(fd), path, why, sizeof(why)))
		return fail("%s", why);
	return 0;
}

/*
 * Do two stat(2)s name one file or device (one given twice)?  A device
 * may have several nodes, each an inode of its own.
 */
static bool same_file(const struct stat *a, const struct stat *b)
{
	if (S_ISBLK(a->st_mode) && S_ISBLK(b->st_mode))
		return a->st_rdev == b->st_rdev;
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/*
 * A member as the command line names it, to tell one given twice before
 * anything is opened (two opens of one file would each take the lock and
 * the second find it "in use").  A file that exists is its inode, however
 * it is spelled or linked to; one that does not yet (create makes it) is
 * its directory's inode and its name; a remote member is its name only.
 */
struct member_id {
	const char *path;
	bool known, absent; /* st: the file's; absent: its directory's */
	struct stat st;
};

static void member_id(struct member_id *id, const char *path)
{
	const char *slash = strrchr(path, '/');
	char dir[PATH_MAX];

	*id = (struct member_id){ .path = path };
	if (member_is_remote(path))
		return;
	if (!stat(path, &id->st)) {
		id->known = true;
		return;
	}
	if (errno != ENOENT)
		return;
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	else
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	id->known = id->absent = !stat(dir, &id->st);
}

static bool member_same(const struct member_id *a, const struct member_id *b)
{
	const char *an = strrchr(a->path, '/'), *bn = strrchr(b->path, '/');

	if (!strcmp(a->path, b->path))
		return true;
	if (!a->known || !b->known || a->absent != b->absent)
		return false;
	if (!a->absent)
		return same_file(&a->st, &b->st);
	return a->st.st_dev == b->st.st_dev && a->st.st_ino == b->st.st_ino &&
	       !strcmp(an ? an + 1 : a->path, bn ? bn + 1 : b->path);
}

/* MEMBER... names each member once: 0, or 2 with a message. */
static int members_distinct(char *const *paths, int n)
{
	struct member_id *id = calloc((size_t)n, sizeof(*id));
	int rc = 0;

	if (!id)
		return fail("out of memory");
	for (int i = 0; i < n && !rc; i++) {
		member_id(&id[i], paths[i]);
		for (int j = 0; j < i && !rc; j++) {
			if (!member_same(&id[i], &id[j]))
				continue;
			if (!strcmp(paths[i], paths[j]))
				rc = usage_error("member %s: given twice",
						 paths[i]);
			else
				rc = usage_error("member %s: given twice (as "
						 "%s too)", paths[i], paths[j]);
		}
	}
	free(id);
	return rc;
}

struct create_opts {
	uint64_t chunk, size, data_offset;
	const char *size_text; /* --size as typed, for messages */
	const char *name;
	bool force;
	uint32_t level; /* enum sb_level */
	uint32_t copies; /* raid1: N; raid10: K; raid0: 0 */
};

/*
 * The superblocks of a new volume, role i on @fds[i]: the last step of
 * create and of convert.  Returns 0, or 1 with the message printed.
 */
static int write_superblocks(struct mdev *const *md, char **paths, int n,
			     const struct create_opts *o, uint64_t size,
			     const char *verb)
{
	struct sb_new_opts no = { .name = o->name, .level = o->level,
				  .copies = o->copies, .chunk_bytes = o->chunk,
				  .size_bytes = size,
				  .data_offset = o->data_offset };
	struct superblock sb;
	char u[37], why[256];
	int r;

	r = sb_new(&sb, (unsigned int)n, &no, why, sizeof(why));
	if (r)
		return fail("%s", why);
	for (int i = 0; i < n; i++) {
		sb_set_role(&sb, (unsigned int)i);
		r = sb_write_member(md[i], &sb);
		if (r)
			return fail("member %s: writing the superblock: %s",
				    paths[i], strerror(-r));
	}
	sb_uuid_format(sb.volume_uuid, u);
	printf("%s volume '%s' (%s): %s, %d member%s", verb, sb.name, u,
	       sb_level_name(sb.level), n, plural((uint64_t)n));
	if (sb.copies)
		printf(", %u copies", sb.copies);
	printf(", stripe %" PRIu64 ", size %" PRIu64 ", data offset %" PRIu64
	       "\n", sb.chunk_bytes, sb.size_bytes, sb.data_offset);
	return 0;
}

/*
 * The largest volume whose share fits @per data bytes on each member:
 * whole stripe rows for raid0, whole chunks for a mirror (the rows that
 * fit hold rows x N chunk positions, K of them per chunk).
 */
static uint64_t size_from_members(const struct create_opts *o, uint64_t per,
				  unsigned int n)
{
	uint64_t rows = per / o->chunk, chunks, size;

	chunks = o->copies ? rows * n / o->copies : rows * n;
	if (__builtin_mul_overflow(chunks, o->chunk, &size))
		return UINT64_MAX; /* refused below as too big */
	return size;
}

/*
 * Open member @i of a new volume: a local one created if need be and
 * locked (@fds[i], @st[i]), a remote one (NBD URI, rbd:...) connected.
 * Returns 0, or 1 with a message (2: the member was given twice).
 */
static int create_open(char **paths, int i, int *fds, struct stat *st,
		       struct mdev **md)
{
	char why[256];

	fds[i] = -1;
	if (member_is_remote(paths[i])) {
		if (mdev_open(md, paths[i], true, 0, why, sizeof(why)))
			return fail("%s", why);
		if (mdev_claim(*md, paths[i], why, sizeof(why)))
			return fail("%s", why);
		return 0;
	}
	fds[i] = open(paths[i], O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fds[i] < 0 || fstat(fds[i], &st[i]))
		return fail("member %s: %s", paths[i], strerror(errno));
	/*
	 * members_distinct cannot see through a dangling symlink to a file
	 * that open just created: before the lock, which would call the
	 * member in use.
	 */
	for (int j = 0; j < i; j++)
		if (fds[j] >= 0 && same_file(&st[i], &st[j]))
			return usage_error("member %s: given twice (as %s too)",
					   paths[i], paths[j]);
	if (lock_member(fds[i], paths[i]))
		return 1;
	if (!S_ISREG(st[i].st_mode) && !S_ISBLK(st[i].st_mode))
		return fail("member %s: not a regular file or block device",
			    paths[i]);
	return 0;
}

static int do_create(const struct create_opts *o, char **paths, int n)
{
	struct superblock sb = { 0 };
	struct stripe_geom g;
	struct mirror_geom mg;
	uint64_t member_bytes, min = UINT64_MAX, bytes[SB_MAX_ROLES];
	int fds[SB_MAX_ROLES], rc = 1;
	struct mdev *md[SB_MAX_ROLES] = { 0 }, local[SB_MAX_ROLES];
	struct stat st[SB_MAX_ROLES];

	/* What the command line alone gets wrong: before any member opens. */
	if (n < 1 || n > (int)SB_MAX_ROLES)
		return usage_error("create: 1 to %u members, %d given",
				   SB_MAX_ROLES, n);
	if (strlen(o->name) >= SB_NAME_BYTES)
		return usage_error("--name %s: at most %u bytes", o->name,
				   SB_NAME_BYTES - 1);
	if (o->size && (o->size % 512 || o->size > (1ull << 60)))
		return usage_error("--size %s: not a multiple of 512 "
				   "up to 1E", o->size_text);
	if (sb_redundant(o->level) ?
		    mirror_geom_init(&mg, (unsigned int)n, o->copies, o->chunk) :
		    stripe_geom_init(&g, (unsigned int)n, o->chunk))
		return usage_error("create: %s with %u copies on %d members is "
				   "not a valid geometry",
				   sb_level_name(o->level), o->copies, n);
	for (int i = 0; i < n; i++)
		fds[i] = -1;
	for (int i = 0; i < n; i++) {
		const char *what;
		int e;

		e = create_open(paths, i, fds, st, &md[i]);
		if (e) {
			rc = e;
			goto out;
		}
		if (fds[i] >= 0) {
			local[i] = (struct mdev){ &mdev_fd_ops, fds[i] };
			md[i] = &local[i];
		}
		what = signature(md[i]);
		if (what && !o->force) {
			fail("member %s: holds %s (--force to overwrite it)",
			     paths[i], what);
			goto out;
		}
		e = mdev_size(md[i], &bytes[i]);
		if (e) {
			fail("member %s: %s", paths[i], strerror(-e));
			goto out;
		}
		if (bytes[i] < min)
			min = bytes[i];
	}
	sb.size_bytes = o->size;
	if (!sb.size_bytes) {
		uint64_t per = min > o->data_offset ? min - o->data_offset : 0;

		sb.size_bytes = size_from_members(o, per, (unsigned int)n);
		if (!sb.size_bytes) {
			fail("members too small for one %s after the data "
			     "offset: give --size",
			     o->copies ? "chunk's copies" : "stripe");
			goto out;
		}
	}
	if (sb.size_bytes % 512 || sb.size_bytes > (1ull << 60) ||
	    (sb_redundant(o->level) ?
		     mirror_member_bytes(&mg, sb.size_bytes, &member_bytes) :
		     stripe_member_bytes(&g, sb.size_bytes, &member_bytes))) {
		if (o->size_text)
			fail("--size %s: not a multiple of 512 up to 1E",
			     o->size_text);
		else
			fail("size %" PRIu64 " (from the members): not a "
			     "multiple of 512 up to 1E",
			     sb.size_bytes);
		goto out;
	}
	member_bytes += o->data_offset;
	for (int i = 0; i < n; i++) {
		if (bytes[i] >= member_bytes)
			continue;
		/* A file grows; a device or a remote member is what it is. */
		if (fds[i] < 0 || S_ISBLK(st[i].st_mode)) {
			fail("member %s: %" PRIu64 " bytes, the volume needs %" PRIu64,
			     paths[i], bytes[i], member_bytes);
			goto out;
		}
		if (ftruncate(fds[i], (off_t)member_bytes)) {
			fail("member %s: %s", paths[i], strerror(errno));
			goto out;
		}
	}

	if (write_superblocks(md, paths, n, o, sb.size_bytes, "created"))
		goto out;
	rc = 0;
out:
	for (int i = 0; i < n; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		else
			mdev_close(md[i]);
	}
	return rc;
}

static int cmd_create(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "level", required_argument, NULL, 'l' },
		{ "copies", required_argument, NULL, 'k' },
		{ "stripe-size", required_argument, NULL, 'S' },
		{ "size", required_argument, NULL, 's' },
		{ "name", required_argument, NULL, 'n' },
		{ "data-offset", required_argument, NULL, 'D' },
		{ "force", no_argument, NULL, 'f' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct create_opts o = { .chunk = STRIPE_DEFAULT_CHUNK, .name = "",
				 .level = SB_LEVEL_RAID0 };
	const char *copies = NULL;
	const char *offset_text = NULL; /* --data-offset as typed */
	char offset_buf[24];
	char err[256], *end;
	unsigned long k = 0;
	int ch, n;

	while ((ch = getopt_long(argc, argv, ":fh", longopts, NULL)) != -1) {
		switch (ch) {
		case 'l':
			if (!strcmp(optarg, "raid0"))
				o.level = SB_LEVEL_RAID0;
			else if (!strcmp(optarg, "raid1"))
				o.level = SB_LEVEL_RAID1;
			else if (!strcmp(optarg, "raid10"))
				o.level = SB_LEVEL_RAID10;
			else
				return usage_error("--level %s: raid0, raid1 "
						   "or raid10", optarg);
			break;
		case 'k':
			errno = 0;
			k = strtoul(optarg, &end, 10);
			if (errno || end == optarg || *end || optarg[0] == '-' ||
			    k > SB_MAX_ROLES)
				return usage_error("--copies %s: expected a "
						   "number of copies, 2 to %u",
						   optarg, SB_MAX_ROLES);
			copies = optarg;
			break;
		case 'S':
			if (conf_parse_chunk(optarg, &o.chunk, err, sizeof(err)))
				return usage_error("--stripe-size %s: %s",
						   optarg, err);
			break;
		case 's':
			if (parse_size(optarg, &o.size) || !o.size)
				return usage_error("--size %s: expected a size "
						   "(e.g. 4G)", optarg);
			o.size_text = optarg;
			break;
		case 'n': o.name = optarg; break;
		case 'D':
			if (parse_size(optarg, &o.data_offset))
				return usage_error("--data-offset %s: expected "
						   "a size", optarg);
			offset_text = optarg;
			break;
		case 'f': o.force = true; break;
		case 'h': usage(stdout); return 0;
		default: return bad_option("create", ch, argv, longopts);
		}
	}
	/* Messages name the offset as typed ("6K"), or the default's bytes. */
	if (!offset_text) {
		o.data_offset = o.chunk > SB_DEFAULT_DATA_OFFSET ?
					o.chunk :
					SB_DEFAULT_DATA_OFFSET;
		snprintf(offset_buf, sizeof(offset_buf), "%" PRIu64,
			 o.data_offset);
		offset_text = offset_buf;
	}
	if (o.data_offset < SB_BYTES || o.data_offset % 4096 ||
	    o.data_offset % o.chunk || o.data_offset > (1ull << 40))
		return usage_error("--data-offset %s: a multiple of "
				   "4K and of the stripe size, 4K to 1T",
				   offset_text);
	if (optind >= argc)
		return usage_error("create: no MEMBER given; try 'bioctl "
				   "create --help'");
	n = argc - optind;
	switch (o.level) {
	case SB_LEVEL_RAID0:
		if (copies)
			return usage_error("--copies %s: only raid1 and raid10 "
					   "keep copies (this is --level "
					   "raid0)", copies);
		break;
	case SB_LEVEL_RAID1:
		if (n < 2)
			return usage_error("--level raid1: at least 2 members, "
					   "%d given", n);
		if (copies && k != (unsigned long)n)
			return usage_error("--copies %s: raid1 keeps a copy on "
					   "every member (%d here)", copies, n);
		o.copies = (uint32_t)n;
		break;
	default:
		if (n < 2)
			return usage_error("--level raid10: at least 2 "
					   "members, %d given", n);
		if (copies && (k < 2 || k > (unsigned long)n))
			return usage_error("--copies %s: 2 to %d (the members) "
					   "for raid10", copies, n);
		o.copies = copies ? (uint32_t)k : 2;
		break;
	}
	/* A mirror's bitmap block lies between the superblock and the data. */
	if (sb_redundant(o.level) &&
	    o.data_offset < SB_BITMAP_OFFSET + SB_BITMAP_BYTES)
		return usage_error("--data-offset %s: at least %u for "
				   "%s (the superblock and the bitmap come "
				   "first)", offset_text,
				   SB_BITMAP_OFFSET + SB_BITMAP_BYTES,
				   sb_level_name(o.level));
	if (members_distinct(argv + optind, n))
		return 2;
	return do_create(&o, argv + optind, n);
}

/* ---- info ---- */

void json_str(const char *s)
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
	int r; /* sb_read's, or open's */
	bool absent; /* the path does not exist */
	char why[256];
	struct superblock sb;
};

/*
 * What role @r of an assembled volume is: the state the newest
 * superblock records, unless this assembly found the member gone or
 * behind (which the superblocks do not say yet).
 */
static const char *role_state(const struct sb_volume *v, unsigned int r)
{
	if (v->order[r] == SB_ROLE_NONE)
		return "missing";
	if (v->degraded >> r & 1)
		return "stale";
	return sb_role_state_name(v->sb.roles[r].state);
}

static unsigned int roles_active(const struct sb_volume *v)
{
	unsigned int m = 0;

	for (unsigned int r = 0; r < v->sb.nr_roles; r++)
		m += v->state[r] == SB_ROLE_ACTIVE;
	return m;
}

static void info_text(char **paths, int n, const struct member_info *mi,
		      int ar, const struct sb_volume *v, const char *why)
{
	unsigned int active;
	char u[37];

	for (int i = 0; i < n; i++) {
		const struct superblock *sb = &mi[i].sb;

		if (mi[i].absent) {
			printf("%s: missing (%s)\n", paths[i], mi[i].why);
			continue;
		}
		if (mi[i].r) {
			printf("%s: %s\n", paths[i], mi[i].why);
			continue;
		}
		sb_uuid_format(sb->volume_uuid, u);
		printf("%s: volume '%s' %s, %s", paths[i], sb->name, u,
		       sb_level_name(sb->level));
		if (sb->copies)
			printf(" (%u copies)", sb->copies);
		printf(", role %u of %u (%s), stripe %" PRIu64 ", size %" PRIu64
		       ", data offset %" PRIu64 ", events %" PRIu64 ", %s\n",
		       sb->role, sb->nr_roles,
		       sb_role_state_name(sb->roles[sb->role].state),
		       sb->chunk_bytes, sb->size_bytes, sb->data_offset,
		       sb->events, sb->flags & SB_FLAG_CLEAN ? "clean" :
							      "not clean");
	}
	if (ar == -ENOENT) {
		printf("headerless: no member has a superblock\n");
		return;
	}
	if (ar) {
		printf("not a complete volume: %s\n", why);
		return;
	}
	active = roles_active(v);
	if (active == v->sb.nr_roles)
		printf("volume '%s': complete and consistent; members by "
		       "role:", v->sb.name);
	else
		printf("volume '%s': degraded (%u of %u members active), "
		       "consistent; members by role:", v->sb.name, active,
		       v->sb.nr_roles);
	for (unsigned int r = 0; r < v->sb.nr_roles; r++)
		printf(" %s", v->order[r] == SB_ROLE_NONE ?
				      "-" : paths[v->order[r]]);
	putchar('\n');
	printf("level %s", sb_level_name(v->sb.level));
	if (v->sb.copies)
		printf(", %u copies", v->sb.copies);
	printf(", stripe %" PRIu64 ", size %" PRIu64 ", data offset %" PRIu64,
	       v->sb.chunk_bytes, v->sb.size_bytes, v->sb.data_offset);
	if (v->sb.bitmap_shift)
		printf(", bitmap regions of %" PRIu64 " bytes",
		       (uint64_t)1 << v->sb.bitmap_shift);
	printf(", %s\n", v->clean ? "clean" : "not clean");
	for (unsigned int r = 0; r < v->sb.nr_roles; r++) {
		const char *state = role_state(v, r);
		uint32_t rec = v->sb.roles[r].state;

		printf("role %u: %s, %s", r, v->order[r] == SB_ROLE_NONE ?
		       "-" : paths[v->order[r]], state);
		if (rec != SB_ROLE_ACTIVE &&
		    strcmp(state, sb_role_state_name(rec)))
			printf(" (recorded %s)", sb_role_state_name(rec));
		if (rec == SB_ROLE_REBUILDING)
			printf(", %" PRIu64 " of %" PRIu64 " bytes rebuilt",
			       v->sb.roles[r].checkpoint,
			       v->member_bytes - v->sb.data_offset);
		putchar('\n');
	}
	for (int i = 0; i < n && i < 64; i++)
		if (v->retired >> i & 1)
			printf("%s: replaced in its role, no longer a member\n",
			       paths[i]);
	if (v->left_out[0])
		printf("left out: %s\n", v->left_out);
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
		printf(", \"exists\": %s, \"superblock\": %s",
		       mi[i].absent ? "false" : "true",
		       mi[i].r ? "false" : "true");
		if (mi[i].r) {
			printf(", \"error\": ");
			json_str(mi[i].r == -ENOENT && !mi[i].absent ?
					 "no superblock" : mi[i].why);
			printf("}");
			continue;
		}
		sb_uuid_format(sb->volume_uuid, u);
		printf(", \"volume_uuid\": \"%s\", \"name\": ", u);
		json_str(sb->name);
		sb_uuid_format(sb->member_uuid, u);
		printf(", \"level\": \"%s\", \"copies\": %u, \"role\": %u, "
		       "\"members\": %u, "
		       "\"state\": \"%s\", \"stripe_size\": %" PRIu64
		       ", \"size\": %" PRIu64 ", \"data_offset\": %" PRIu64
		       ", \"events\": %" PRIu64 ", \"clean\": %s, "
		       "\"member_uuid\": \"%s\", \"ctime\": %" PRIu64
		       ", \"utime\": %" PRIu64 "}",
		       sb_level_name(sb->level), sb->copies, sb->role,
		       sb->nr_roles,
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
		unsigned int active = roles_active(v);

		sb_uuid_format(v->sb.volume_uuid, u);
		printf(", \"uuid\": \"%s\", \"name\": ", u);
		json_str(v->sb.name);
		printf(", \"level\": \"%s\", \"copies\": %u, \"members\": %u, "
		       "\"active\": %u, \"degraded\": %s, \"stripe_size\": %"
		       PRIu64 ", \"size\": %" PRIu64 ", \"data_offset\": %"
		       PRIu64 ", \"bitmap_shift\": %u, \"clean\": %s",
		       sb_level_name(v->sb.level), v->sb.copies,
		       v->sb.nr_roles, active,
		       active < v->sb.nr_roles ? "true" : "false",
		       v->sb.chunk_bytes, v->sb.size_bytes, v->sb.data_offset,
		       v->sb.bitmap_shift, v->clean ? "true" : "false");
		/* A role without a member is null: the list stays by role. */
		printf(", \"by_role\": [");
		for (unsigned int r = 0; r < v->sb.nr_roles; r++) {
			printf("%s", r ? ", " : "");
			if (v->order[r] == SB_ROLE_NONE)
				printf("null");
			else
				json_str(paths[v->order[r]]);
		}
		printf("], \"roles\": [");
		for (unsigned int r = 0; r < v->sb.nr_roles; r++) {
			printf("%s{\"role\": %u, \"path\": ", r ? ", " : "", r);
			if (v->order[r] == SB_ROLE_NONE)
				printf("null");
			else
				json_str(paths[v->order[r]]);
			sb_uuid_format(v->sb.roles[r].uuid, u);
			printf(", \"member_uuid\": \"%s\", \"state\": \"%s\", "
			       "\"recorded_state\": \"%s\", \"checkpoint\": %"
			       PRIu64 "}", u, role_state(v, r),
			       sb_role_state_name(v->sb.roles[r].state),
			       v->sb.roles[r].checkpoint);
		}
		/* Members given that were replaced in their role. */
		printf("], \"replaced\": [");
		for (int i = 0, k = 0; i < n && i < 64; i++)
			if (v->retired >> i & 1) {
				printf("%s", k++ ? ", " : "");
				json_str(paths[i]);
			}
		printf("], \"left_out\": ");
		if (v->left_out[0])
			json_str(v->left_out);
		else
			printf("null");
	}
	printf("}}\n");
}

static int cmd_info(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct member_info *mi = NULL;
	struct sb_volume *v = NULL;
	bool json = false;
	char why[512];
	int ch, n, ar;

	while ((ch = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		if (ch == 'h') {
			usage(stdout);
			return 0;
		}
		if (ch != 'j')
			return bad_option("info", ch, argv, longopts);
		json = true;
	}
	n = argc - optind;
	if (n < 1)
		return usage_error("info: no MEMBER given; try 'bioctl info "
				   "--help'");
	if (members_distinct(argv + optind, n))
		return 2;
	mi = calloc((size_t)n, sizeof(*mi));
	v = malloc(sizeof(*v));
	if (!mi || !v) {
		ar = fail("out of memory");
		goto out;
	}
	for (int i = 0; i < n; i++) {
		struct mdev *m;

		mi[i].r = mdev_open(&m, argv[optind + i], false, 0, mi[i].why,
				    sizeof(mi[i].why));
		if (mi[i].r) {
			char pfx[PATH_MAX + 16];
			size_t k = (size_t)snprintf(pfx, sizeof(pfx),
						    "member %s: ",
						    argv[optind + i]);

			/*
			 * A file's name is printed beside the reason: the
			 * reason alone, else the error (a FIFO: "not a
			 * regular file ...", not "Invalid argument").
			 */
			mi[i].absent = mi[i].r == -ENOENT;
			if (!member_is_remote(argv[optind + i]) &&
			    !strncmp(mi[i].why, pfx, k))
				memmove(mi[i].why, mi[i].why + k,
					strlen(mi[i].why + k) + 1);
			else if (!member_is_remote(argv[optind + i]))
				snprintf(mi[i].why, sizeof(mi[i].why), "%s",
					 strerror(-mi[i].r));
			continue;
		}
		mi[i].r = sb_read(m, &mi[i].sb, mi[i].why, sizeof(mi[i].why));
		mdev_close(m);
	}
	ar = sb_assemble((const char *const *)argv + optind, (unsigned int)n,
			 0, v, why, sizeof(why));
	if (json)
		info_json(argv + optind, n, mi, ar, v, why);
	else
		info_text(argv + optind, n, mi, ar, v, why);
	ar = ar ? 1 : 0;
out:
	free(mi);
	free(v);
	return ar;
}

/* ---- check ---- */

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
	(void)sig;
	interrupted = 1;
}

/* SIGINT and SIGTERM let a long operation stop where it can resume. */
static void catch_interrupts(void)
{
	struct sigaction sa = { .sa_handler = on_sigint };

	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
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
 * Read [@at, @at + @len) of member @fd (@path) into @buf, the bytes of
 * volume offset @voff on.  A failed read is retried sector by sector so
 * the report names exact ranges; the sectors that could be read land in
 * @buf all the same.  Returns the bytes found unreadable, 0 when all of
 * @buf is good; *@ranges counts the ranges reported.
 */
static uint64_t read_or_report(struct mdev *m, uint8_t *buf, uint64_t len,
			       uint64_t at, uint64_t voff, const char *path,
			       uint64_t *ranges)
{
	uint64_t bad = 0, size = 0;

	/* Past a member's end is missing data, not zeros (mdev's reads). */
	if (mdev_size(m, &size))
		size = 0;
	if (at + len <= size && !mdev_pread(m, buf, len, at))
		return 0;
	for (uint64_t s = 0; s < len; s += 512) {
		uint64_t run = 0;

		while (s + run < len &&
		       (at + s + run + 512 > size ||
			mdev_pread(m, buf + s + run, 512, at + s + run)))
			run += 512;
		if (!run)
			continue;
		printf("unreadable: volume offset %" PRIu64 ", %" PRIu64
		       " bytes (member %s, offset %" PRIu64 ")\n",
		       voff + s, run, path, at + s);
		bad += run;
		(*ranges)++;
		s += run;
	}
	return bad;
}

static void check_interrupted(const struct progress *p, uint64_t off)
{
	fprintf(stderr, "%sbioctl: check interrupted at volume offset %"
		PRIu64 "; resume with: bioctl check --from %" PRIu64
		" MEMBER...\n", p->tty ? "\n" : "", off, off);
}

static const char *not_clean(const struct superblock *sb)
{
	return sb->flags & SB_FLAG_CLEAN ?
		       "" :
		       "; not clean (served now, or not shut down cleanly)";
}

/*
 * Read the data of every role, one stripe row at a time (a chunk of each
 * member: volume order), in reads of up to a chunk.
 */
static int check_data(char **paths, const struct sb_volume *v, uint64_t from)
{
	const struct superblock *sb = &v->sb;
	uint64_t c = sb->chunk_bytes, n = v->nr, bad = 0, bad_ranges = 0;
	uint8_t *buf = malloc(c);
	struct mdev *md[SB_MAX_ROLES] = { 0 };
	struct progress p = { .what = "check", .total = sb->size_bytes };
	char why[256];
	uint64_t off;
	int rc = 0;

	if (!buf)
		return fail("out of memory");
	for (unsigned int r = 0; r < v->nr; r++) {
		if (mdev_open(&md[r], paths[v->order[r]], false, 0, why,
			      sizeof(why))) {
			rc = fail("%s", why);
			goto out;
		}
	}
	from -= from % c;
	p.tty = isatty(2);
	p.start = p.last = now_s();
	p.base = p.done = from;
	for (off = from; off < sb->size_bytes && !interrupted; off += c) {
		uint64_t k = off / c, len = sb->size_bytes - off;

		if (len > c)
			len = c;
		bad += read_or_report(md[k % n], buf, len,
				      sb->data_offset + k / n * c, off,
				      paths[v->order[k % n]], &bad_ranges);
		p.done = off + len;
		progress_show(&p, false);
	}
	if (interrupted) {
		check_interrupted(&p, off);
		rc = 130;
		goto out;
	}
	progress_show(&p, true);
	if (bad) {
		printf("%" PRIu64 " unreadable bytes in %" PRIu64 " range%s\n",
		       bad, bad_ranges, plural(bad_ranges));
		rc = 1;
	} else {
		printf("volume '%s': superblocks consistent, %" PRIu64
		       " bytes of data read%s\n",
		       sb->name, sb->size_bytes - from, not_clean(sb));
	}
out:
	for (unsigned int r = 0; r < v->nr; r++)
		mdev_close(md[r]);
	free(buf);
	return rc;
}

/*
 * A mirror's check compares the copies block by block: up to 1 MiB, and
 * never across a chunk boundary on raid10, where the next chunk's copies
 * lie on other members (raid1's copy j is the whole volume on role j).
 */
#define CHECK_BLOCK (1u << 20)

/* A range of differing bytes, held back to merge with the next block's. */
struct mismatch {
	uint64_t off, len; /* volume */
	unsigned int role, ref; /* the copy that differs, the one it's not */
};

struct mirror_check {
	char **paths;
	const struct sb_volume *v;
	struct mirror_geom g;
	bool repair;
	struct mdev *md[SB_MAX_ROLES]; /* by role; NULL: not checked */
	bool written[SB_MAX_ROLES];
	struct mismatch pend[SB_MAX_ROLES]; /* by copy */
	uint64_t read, bad, bad_ranges, diff, diff_ranges;
	int rc;
};

static void mismatch_flush(struct mirror_check *mc, struct mismatch *m)
{
	if (!m->len)
		return;
	printf("mismatch: volume offset %" PRIu64 " length %" PRIu64
	       ": role %u differs from role %u%s\n", m->off, m->len, m->role,
	       m->ref, mc->repair ? ", repaired" : "");
	mc->diff += m->len;
	mc->diff_ranges++;
	m->len = 0;
}

static void mismatch_add(struct mirror_check *mc, unsigned int j,
			 uint64_t off, uint64_t len, unsigned int role,
			 unsigned int ref)
{
	struct mismatch *m = &mc->pend[j];

	if (m->len && m->off + m->len == off && m->role == role &&
	    m->ref == ref) {
		m->len += len;
		return;
	}
	mismatch_flush(mc, m);
	*m = (struct mismatch){ off, len, role, ref };
}

/*
 * Copy @j of volume [@off, @off + @len), read into @buf, against the
 * reference copy @ref (role @ref_role): report the differing sectors, and
 * with --repair overwrite them with the reference's.
 */
static void compare_copy(struct mirror_check *mc, unsigned int j,
			 const uint8_t *ref, unsigned int ref_role,
			 const uint8_t *buf, uint64_t off, uint64_t len,
			 unsigned int role, uint64_t at)
{
	for (uint64_t s = 0; s < len; s += 512) {
		uint64_t run = 0;
		int w;

		while (s + run < len &&
		       memcmp(ref + s + run, buf + s + run, 512))
			run += 512;
		if (!run)
			continue;
		mismatch_add(mc, j, off + s, run, role, ref_role);
		if (mc->repair) {
			w = mdev_pwrite(mc->md[role], ref + s, run, at + s);
			if (w)
				mc->rc = fail("member %s: repairing %" PRIu64
					      " bytes at offset %" PRIu64 ": %s",
					      mc->paths[mc->v->order[role]], run,
					      at + s, strerror(-w));
			mc->written[role] = true;
		}
		s += run;
	}
}

/* One block of the volume: every live copy read, each compared with the
 * first that could be read (copy 0 when it is live and readable). */
static void check_block(struct mirror_check *mc, uint8_t *ref, uint8_t *buf,
			uint64_t off, uint64_t len)
{
	unsigned int ref_role = SB_ROLE_NONE;

	for (unsigned int j = 0; j < mc->g.copies; j++) {
		unsigned int role;
		uint64_t at, bad;
		uint8_t *into = ref_role == SB_ROLE_NONE ? ref : buf;

		mirror_map(&mc->g, off, j, &role, &at);
		if (!mc->md[role])
			continue;
		bad = read_or_report(mc->md[role], into, len, at, off,
				     mc->paths[mc->v->order[role]],
				     &mc->bad_ranges);
		mc->read += len;
		if (bad) {
			/* Not a reference, nor compared: its bytes are
			 * partly garbage.  Reported unreadable instead. */
			mc->bad += bad;
			continue;
		}
		if (ref_role == SB_ROLE_NONE)
			ref_role = role;
		else
			compare_copy(mc, j, ref, ref_role, buf, off, len, role,
				     at);
	}
}

static int check_mirror(char **paths, const struct sb_volume *v,
			uint64_t from, bool repair)
{
	const struct superblock *sb = &v->sb;
	struct mirror_check *mc = calloc(1, sizeof(*mc));
	struct progress p = { .what = "check", .total = sb->size_bytes };
	uint8_t *ref = malloc(CHECK_BLOCK), *buf = malloc(CHECK_BLOCK);
	uint64_t off, blk;
	char why[256];
	int rc = 0;

	if (!mc || !ref || !buf) {
		rc = fail("out of memory");
		goto out;
	}
	mc->paths = paths;
	mc->v = v;
	mc->repair = repair;
	if (mirror_geom_init(&mc->g, sb->nr_roles, sb->copies,
			     sb->chunk_bytes)) {
		rc = fail("volume '%s': %u copies on %u members is not a "
			  "mirror", sb->name, sb->copies, sb->nr_roles);
		goto out;
	}
	mc->g.data_offset = sb->data_offset;
	for (unsigned int r = 0; r < sb->nr_roles; r++) {
		const char *path = v->order[r] == SB_ROLE_NONE ?
					   "-" : paths[v->order[r]];

		if (v->state[r] != SB_ROLE_ACTIVE) {
			printf("skipped: role %u (%s): %s\n", r, path,
			       role_state(v, r));
			continue;
		}
		if (mdev_open(&mc->md[r], path, repair, 0, why,
			      sizeof(why))) {
			rc = fail("%s", why);
			goto out;
		}
		/* Rewriting copies under a server would race its writes. */
		if (repair && mdev_claim(mc->md[r], path, why, sizeof(why))) {
			rc = fail("%s", why);
			goto out;
		}
	}
	blk = mc->g.copies == mc->g.nr_members ? CHECK_BLOCK :
		      sb->chunk_bytes < CHECK_BLOCK ? sb->chunk_bytes :
						      CHECK_BLOCK;
	from -= from % blk;
	p.tty = isatty(2);
	p.start = p.last = now_s();
	p.base = p.done = from;
	for (off = from; off < sb->size_bytes && !interrupted && !mc->rc;
	     off += blk) {
		uint64_t len = sb->size_bytes - off < blk ?
				       sb->size_bytes - off : blk;

		check_block(mc, ref, buf, off, len);
		p.done = off + len;
		progress_show(&p, false);
	}
	for (unsigned int j = 0; j < mc->g.copies; j++)
		mismatch_flush(mc, &mc->pend[j]);
	for (unsigned int r = 0; r < sb->nr_roles; r++) {
		int e = mc->written[r] ? mdev_sync(mc->md[r]) : 0;

		if (e)
			mc->rc = fail("member %s: sync: %s",
				      paths[v->order[r]], strerror(-e));
	}
	if (mc->rc) {
		rc = mc->rc;
		goto out;
	}
	if (interrupted) {
		check_interrupted(&p, off);
		rc = 130;
		goto out;
	}
	progress_show(&p, true);
	if (mc->bad) {
		printf("%" PRIu64 " unreadable bytes in %" PRIu64 " range%s\n",
		       mc->bad, mc->bad_ranges, plural(mc->bad_ranges));
		rc = 1;
	}
	if (mc->diff) {
		printf("%" PRIu64 " mismatching bytes in %" PRIu64 " range%s%s\n",
		       mc->diff, mc->diff_ranges, plural(mc->diff_ranges),
		       repair ? ", repaired" : "");
		if (!repair)
			rc = 1;
	}
	if (!rc)
		printf("volume '%s': superblocks consistent, %" PRIu64
		       " bytes of data read, the live copies %s%s\n",
		       sb->name, mc->read, mc->diff ? "agree now" : "agree",
		       not_clean(sb));
out:
	if (mc)
		for (unsigned int r = 0; r < SB_MAX_ROLES; r++)
			mdev_close(mc->md[r]);
	free(mc);
	free(ref);
	free(buf);
	return rc;
}

static int cmd_check(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "from", required_argument, NULL, 'F' },
		{ "repair", no_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct sb_volume *v;
	bool repair = false;
	uint64_t from = 0;
	const char *from_text = "0"; /* --from as typed, for messages */
	char why[512];
	int ch, n, r;

	while ((ch = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'r': repair = true; break;
		case 'F':
			if (parse_size(optarg, &from))
				return usage_error("--from %s: expected a size "
						   "(a volume offset, e.g. 4G)",
						   optarg);
			from_text = optarg;
			break;
		case 'h': usage(stdout); return 0;
		default: return bad_option("check", ch, argv, longopts);
		}
	}
	n = argc - optind;
	if (n < 1)
		return usage_error("check: no MEMBER given; try 'bioctl check "
				   "--help'");
	if (members_distinct(argv + optind, n))
		return 2;
	v = malloc(sizeof(*v));
	if (!v)
		return fail("out of memory");
	r = sb_assemble((const char *const *)argv + optind, (unsigned int)n,
			0, v, why, sizeof(why));
	if (r) {
		printf("%s\n", r == -ENOENT ? "headerless: no superblocks to "
					      "check" : why);
		r = 2;
		goto out;
	}
	if (from >= v->sb.size_bytes) {
		r = fail("--from %s: past the volume's end", from_text);
		goto out;
	}
	if (repair && !sb_redundant(v->sb.level)) {
		r = fail("--repair: volume '%s' is raid0, one copy of the data "
			 "and nothing to repair it from", v->sb.name);
		goto out;
	}
	catch_interrupts();
	r = sb_redundant(v->sb.level) ?
		    check_mirror(argv + optind, v, from, repair) :
		    check_data(argv + optind, v, from);
out:
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
	int r;

	cv_encode(c, b);
	r = mdev_pwrite(MDEV_FD(fd), b, sizeof(b), at);
	return r ?: mdev_sync(MDEV_FD(fd));
}

struct convert_opts {
	struct create_opts c;
	double max_rate; /* bytes a second; 0 = as fast as it goes */
};

/* --max-rate RATE: bytes a second into *@rate; 0, or 2 with a message. */
static int parse_rate(const char *arg, double *rate)
{
	uint64_t r;

	if (parse_size(arg, &r) || !r)
		return usage_error("--max-rate %s: bytes a second, e.g. 100M",
				   arg);
	*rate = (double)r;
	return 0;
}

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

/*
 * convert and rebuild move data in place with the steps docs/format.md
 * makes crash-safe on files (extending, locking): local members only.
 * Returns 0, or 1 with a message.
 */
static int local_only(const char *cmd, char *const *paths, int n)
{
	for (int i = 0; i < n; i++)
		if (paths[i] && member_is_remote(paths[i]))
			return fail("member %s: %s takes local files and "
				    "devices only (a mirror of remote "
				    "members is rebuilt by its server onto a "
				    "spare)", paths[i], cmd);
	return 0;
}

static int do_convert(const struct convert_opts *o, char **paths, int n)
{
	const struct create_opts *co = &o->c;
	uint64_t member_bytes, min = UINT64_MAX, size = co->size, state_at;
	int fds[SB_MAX_ROLES], rc = 1, opened = 0, r;
	struct mdev *md[SB_MAX_ROLES], local[SB_MAX_ROLES];
	struct progress p = { .what = "convert" };
	struct cv_state c = { 0 }, saved;
	bool moved;
	uint8_t sbuf[SB_BYTES], *buf = NULL;
	struct stripe_geom g;
	struct superblock sb;
	char why[256];

	if (local_only("convert", paths, n))
		return 1;
	if (n < 1 || n > (int)SB_MAX_ROLES)
		return usage_error("convert: 1 to %u members, %d given",
				   SB_MAX_ROLES, n);
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
		if (sb_read(MDEV_FD(fds[i]), &sb, why, sizeof(why)) != -ENOENT) {
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
			     ", %u member%s): resume it with the same arguments",
			     paths[0], saved.chunk, saved.size, saved.nr,
			     plural(saved.nr));
			goto out;
		}
		c = saved;
		size = c.size;
		state_at = fd_bytes(fds[0]) - SB_BYTES;
		fprintf(stderr, "bioctl: resuming: member %s, %" PRIu64
			" bytes still to move\n", paths[c.member], c.pos);
	} else {
		/* The volume as bionbd serves it headerless. */
		int small = 0;

		for (int i = 0; i < n; i++)
			if (fd_bytes(fds[i]) < min) {
				min = fd_bytes(fds[i]);
				small = i;
			}
		if (!size)
			size = min / co->chunk * co->chunk * (uint64_t)n;
		/* The member to grow or replace, by name: not "members". */
		if (!size) {
			fail("member %s: %" PRIu64 " bytes, less than one "
			     "stripe unit (%" PRIu64 " bytes)",
			     paths[small], min, co->chunk);
			goto out;
		}
		if (stripe_member_bytes(&g, size, &member_bytes)) {
			fail("size %s: too large for %d member%s",
			     co->size_text ? co->size_text : "of the members",
			     n, plural((uint64_t)n));
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
	for (int i = 0; i < n; i++) {
		local[i] = (struct mdev){ &mdev_fd_ops, fds[i] };
		md[i] = &local[i];
	}
	if (write_superblocks(md, paths, n, co, size, "converted"))
		goto out;
	/*
	 * Done: the checkpoint goes (it lies past the volume's data), and the
	 * room it took when convert made it.
	 */
	if (mdev_zero(MDEV_FD(fds[0]), state_at, SB_BYTES) ||
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
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct convert_opts o = { .c = { .chunk = 0, .name = "" } };
	char err[256];
	int ch;

	while ((ch = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'S':
			if (conf_parse_chunk(optarg, &o.c.chunk, err,
					     sizeof(err)))
				return usage_error("--stripe-size %s: %s",
						   optarg, err);
			break;
		case 's':
			if (parse_size(optarg, &o.c.size) || !o.c.size)
				return usage_error("--size %s: expected a size",
						   optarg);
			o.c.size_text = optarg;
			break;
		case 'n':
			if (strlen(optarg) >= SB_NAME_BYTES)
				return usage_error("--name %s: at most %u "
						   "bytes", optarg,
						   SB_NAME_BYTES - 1);
			o.c.name = optarg;
			break;
		case 'R':
			if (parse_rate(optarg, &o.max_rate))
				return 2;
			break;
		case 'h': usage(stdout); return 0;
		default: return bad_option("convert", ch, argv, longopts);
		}
	}
	if (!o.c.chunk)
		return usage_error("convert: --stripe-size is required (the "
				   "stripe size the volume was served with)");
	if (optind >= argc)
		return usage_error("convert: no MEMBER given; try 'bioctl "
				   "convert --help'");
	if (members_distinct(argv + optind, argc - optind))
		return 2;
	o.c.data_offset = o.c.chunk > SB_DEFAULT_DATA_OFFSET ?
				  o.c.chunk :
				  SB_DEFAULT_DATA_OFFSET;
	catch_interrupts();
	return do_convert(&o, argv + optind, argc - optind);
}

/* ---- rebuild ---- */

/*
 * A new member takes over role R of a mirror, offline, in the steps of
 * docs/format.md "Rebuild": the members in service name it (rebuilding,
 * checkpoint 0, events up), it gets its superblock, its rows are copied
 * from active copies with the checkpoint recorded every few seconds, and
 * the role turns active (events up).  Each step is synced before the next,
 * so a run stopped anywhere in the copy is resumed by the same command:
 * NEW's superblock and the role table naming NEW's UUID as rebuilding say
 * so, and the checkpoint says where.
 */
#define REBUILD_RECORD_S 3.0

struct rebuild_opts {
	const char *old; /* --replace OLD; NULL with --role */
	const char *new_path;
	unsigned int role; /* --role R; SB_ROLE_NONE with --replace */
	bool force;
	double max_rate; /* bytes a second; 0 = as fast as it goes */
};

/* A path of the command line, opened and locked (fd) when it exists. */
struct rb_file {
	const char *path;
	bool exists;
	struct stat st;
	int fd, err; /* -1 and open's errno when it could not be opened */
	int r; /* sb_read's, when opened */
	char why[256];
	struct superblock sb;
};

struct rebuild {
	const struct rebuild_opts *o;
	struct rb_file old, new, m[SB_MAX_ROLES]; /* m: MEMBER... but OLD */
	const char *paths[SB_MAX_ROLES];
	unsigned int n;
	struct sb_volume v;
	struct mirror_geom g;
	unsigned int role; /* R */
	bool resume;
	uint64_t rows, chunks, copied;
	/* What every superblock written gets: the role table, the events. */
	struct superblock tab;
	struct superblock own[SB_MAX_ROLES]; /* by role, those in service */
	bool in_service[SB_MAX_ROLES], source[SB_MAX_ROLES];
	bool new_has_sb; /* NEW carries its superblock: records go there too */
};

static void rb_stat(struct rb_file *f, const char *path)
{
	f->path = path;
	f->fd = -1;
	f->exists = !stat(path, &f->st);
	f->err = f->exists ? 0 : errno;
}

/* The same file, or (neither existing) the same path. */
static bool rb_same(const struct rb_file *a, const struct rb_file *b)
{
	if (a->exists && b->exists)
		return same_file(&a->st, &b->st);
	return !a->exists && !b->exists && !strcmp(a->path, b->path);
}

/*
 * Open and lock @f when it exists, and read its superblock (@sb).  A file
 * that cannot be opened is left for the caller to judge (f->err); one
 * locked by another process is refused.  Returns 0, or 1 with a message.
 */
static int rb_open(struct rb_file *f, int flags, bool sb)
{
	if (!f->exists)
		return 0;
	f->fd = open(f->path, flags | O_CLOEXEC);
	if (f->fd < 0) {
		f->err = errno;
		return 0;
	}
	if (lock_member(f->fd, f->path))
		return 1;
	if (sb)
		f->r = sb_read(MDEV_FD(f->fd), &f->sb, f->why,
			       sizeof(f->why));
	return 0;
}

/* Does @f carry a valid superblock of the volume being rebuilt? */
static bool rb_ours(const struct rebuild *rb, const struct rb_file *f)
{
	return f->fd >= 0 && !f->r &&
	       !memcmp(f->sb.volume_uuid, rb->v.sb.volume_uuid, 16) &&
	       f->sb.nr_roles == rb->v.sb.nr_roles;
}

/* MEMBER... opened and locked, OLD set aside, NEW refused among them. */
static int rb_members(struct rebuild *rb, char **members, int n)
{
	for (int i = 0; i < n; i++) {
		struct rb_file *f = &rb->m[rb->n];

		rb_stat(f, members[i]);
		if (rb->o->old && rb_same(f, &rb->old))
			continue;
		if (rb_same(f, &rb->new))
			return fail("%s: already a member of the volume (given "
				    "as %s)", rb->o->new_path, f->path);
		if (rb_open(f, O_RDWR, false))
			return 1;
		rb->paths[rb->n++] = f->path;
	}
	return 0;
}

/*
 * R when OLD cannot tell (it does not exist, cannot be read, or is NEW):
 * the one role no member given plays, or on a resume NEW's.
 */
static int rb_role_lacking(struct rebuild *rb)
{
	const struct sb_volume *v = &rb->v;
	char list[SB_MAX_ROLES * 4] = "";
	unsigned int lacking = 0;
	size_t at = 0;

	if (rb->resume) {
		rb->role = rb->new.sb.role;
		return 0;
	}
	for (unsigned int r = 0; r < v->sb.nr_roles; r++) {
		if (v->order[r] != SB_ROLE_NONE)
			continue;
		rb->role = r;
		lacking++;
		at += (size_t)snprintf(list + at, sizeof(list) - at, "%s%u",
				       at ? ", " : "", r);
	}
	if (!lacking)
		return fail("%s: not part of volume '%s' (every role has a "
			    "member given)", rb->old.path, v->sb.name);
	if (lacking > 1)
		return fail("%s: %s, and roles %s have no member given: name "
			    "the one to rebuild with --role R NEW instead of "
			    "--replace OLD NEW", rb->old.path,
			    !rb->old.exists ? "does not exist" :
			    rb_same(&rb->old, &rb->new) ? "is NEW" :
							   "cannot be read",
			    list);
	return 0;
}

/* R, the role NEW takes over: --role's, OLD's, or the one left without. */
static int rb_role(struct rebuild *rb)
{
	const struct superblock *sb = &rb->v.sb;
	const struct rb_file *old = &rb->old;
	char u[37];

	if (rb->o->role != SB_ROLE_NONE) {
		if (rb->o->role >= sb->nr_roles)
			return fail("--role %u: volume '%s' has roles 0 to %u",
				    rb->o->role, sb->name, sb->nr_roles - 1);
		rb->role = rb->o->role;
		return 0;
	}
	/* A dead disk's superblock cannot say: as if it were gone. */
	if (!old->exists || old->fd < 0 || rb_same(old, &rb->new) ||
	    (old->r && old->r != -ENOENT && old->r != -EINVAL &&
	     old->r != -EPROTONOSUPPORT))
		return rb_role_lacking(rb);
	if (!rb_ours(rb, old)) {
		sb_uuid_format(old->sb.volume_uuid, u);
		if (!old->r)
			return fail("%s: not part of volume '%s' (it belongs to "
				    "volume '%s', %s)", old->path, sb->name,
				    old->sb.name, u);
		return fail("%s: not part of volume '%s' (%s)", old->path,
			    sb->name, old->why);
	}
	rb->role = old->sb.role;
	/* Resumed, the table names NEW; otherwise it must still name OLD. */
	if (!rb->resume &&
	    memcmp(old->sb.member_uuid, sb->roles[rb->role].uuid, 16))
		return fail("%s: not part of volume '%s' any more (role %u "
			    "belongs to another member)", old->path, sb->name,
			    rb->role);
	return 0;
}

/*
 * May NEW take role R?  Not when it plays another role of the volume, or
 * is R's member in service already; a former member of R (stale, faulty)
 * is rebuilt from the start; a superblock of another volume, a file
 * system or a partition table only with --force.
 */
static int rb_check_new(struct rebuild *rb)
{
	const struct superblock *sb = &rb->v.sb;
	const struct rb_file *nw = &rb->new;
	const char *what;
	char u[37], other[200];

	if (nw->exists && nw->fd < 0)
		return fail("%s: %s", nw->path, strerror(nw->err));
	if (nw->fd < 0)
		return 0;
	if (!S_ISREG(nw->st.st_mode) && !S_ISBLK(nw->st.st_mode))
		return fail("%s: not a regular file or block device", nw->path);
	if (rb_ours(rb, nw)) {
		if (nw->sb.role != rb->role)
			return fail("%s: holds role %u of volume '%s' (the role "
				    "to rebuild is %u)", nw->path, nw->sb.role,
				    sb->name, rb->role);
		if (!rb->resume && nw->sb.events == sb->events &&
		    sb->roles[rb->role].state == SB_ROLE_ACTIVE &&
		    !memcmp(sb->roles[rb->role].uuid, nw->sb.member_uuid, 16))
			return fail("%s: already role %u of volume '%s', active "
				    "and up to date: nothing to rebuild",
				    nw->path, rb->role, sb->name);
		return 0;
	}
	if (nw->r && nw->r != -ENOENT && nw->r != -EINVAL &&
	    nw->r != -EPROTONOSUPPORT)
		return fail("%s: %s", nw->path, nw->why);
	what = signature(MDEV_FD(nw->fd));
	if (!nw->r) {
		sb_uuid_format(nw->sb.volume_uuid, u);
		snprintf(other, sizeof(other), "the superblock of volume '%s' "
			 "(%s)", nw->sb.name, u);
		what = other;
	}
	if (what && !rb->o->force)
		return fail("%s: holds %s (--force to overwrite it)", nw->path,
			    what);
	return 0;
}

/*
 * The members in service (roles other than R, active or rebuilding, their
 * member given) get every superblock written; the active ones are the
 * sources.  Every chunk R holds a copy of needs another active copy.
 */
static int rb_service(struct rebuild *rb)
{
	const struct sb_volume *v = &rb->v;
	uint32_t st[SB_MAX_ROLES];

	for (unsigned int r = 0; r < v->sb.nr_roles; r++) {
		struct rb_file *f;

		st[r] = r == rb->role ? SB_ROLE_FAULTY : v->state[r];
		if (r == rb->role || v->order[r] == SB_ROLE_NONE ||
		    (v->state[r] != SB_ROLE_ACTIVE &&
		     v->state[r] != SB_ROLE_REBUILDING))
			continue;
		f = &rb->m[v->order[r]];
		rb->in_service[r] = true;
		rb->source[r] = v->state[r] == SB_ROLE_ACTIVE;
		if (f->fd < 0)
			return fail("member %s: %s", f->path, strerror(f->err));
		if (sb_read(MDEV_FD(f->fd), &rb->own[r], f->why,
			    sizeof(f->why)))
			return fail("member %s: %s", f->path, f->why);
	}
	if (!sb_covered(v->sb.level, v->sb.nr_roles, v->sb.copies, st))
		return fail("volume '%s': without role %u some chunks have no "
			    "active copy to rebuild from", v->sb.name, rb->role);
	return 0;
}

/* @sb, as @rb->tab has the role table and events now, written to @fd. */
static int rb_put(int fd, struct superblock *sb, const struct superblock *tab,
		  uint64_t now)
{
	memcpy(sb->roles, tab->roles, sizeof(sb->roles));
	sb->events = tab->events;
	sb->utime = now;
	return sb_write(MDEV_FD(fd), sb);
}

/*
 * The role table of @rb->tab on every member in service, then on NEW: at
 * the end NEW goes last, so that a crash between the two leaves NEW
 * stale (rebuilt again) rather than every other member.  Returns 0, or 1
 * with a message.
 */
static int rb_record(struct rebuild *rb)
{
	uint64_t now = (uint64_t)time(NULL);
	int r;

	for (unsigned int role = 0; role < rb->v.sb.nr_roles; role++) {
		struct rb_file *f;

		if (!rb->in_service[role])
			continue;
		f = &rb->m[rb->v.order[role]];
		r = rb_put(f->fd, &rb->own[role], &rb->tab, now);
		if (r)
			return fail("member %s: writing the superblock: %s",
				    f->path, strerror(-r));
	}
	r = rb->new_has_sb ? rb_put(rb->new.fd, &rb->new.sb, &rb->tab, now) :
			     0;
	if (r)
		return fail("%s: writing the superblock: %s", rb->new.path,
			    strerror(-r));
	return 0;
}

/* Rows up to @x are on NEW: synced there, then the checkpoint says so. */
static int rb_checkpoint(struct rebuild *rb, uint64_t x)
{
	if (fdatasync(rb->new.fd))
		return fail("%s: fdatasync: %s", rb->new.path, strerror(errno));
	rb->tab.roles[rb->role].checkpoint = x * rb->v.sb.chunk_bytes;
	return rb_record(rb);
}

/* Steps 1 and 2: NEW named in the role table, then given its superblock. */
static int rb_start(struct rebuild *rb)
{
	struct sb_role *role = &rb->tab.roles[rb->role];
	struct superblock *nsb = &rb->new.sb;
	int r;

	if (sb_uuid_generate(role->uuid))
		return fail("getrandom: %s", strerror(errno));
	/* What this assembly found missing or stale, the table says too. */
	for (unsigned int i = 0; i < rb->tab.nr_roles; i++)
		if (i != rb->role && (rb->v.degraded >> i & 1)) {
			rb->tab.roles[i].state = SB_ROLE_FAULTY;
			rb->tab.roles[i].checkpoint = 0;
		}
	role->state = SB_ROLE_REBUILDING;
	role->checkpoint = 0;
	rb->tab.events++;
	if (rb_record(rb))
		return 1;
	*nsb = rb->tab;
	nsb->role = rb->role;
	memcpy(nsb->member_uuid, role->uuid, 16);
	nsb->flags = rb->v.clean ? SB_FLAG_CLEAN : 0;
	nsb->utime = (uint64_t)time(NULL);
	r = sb_write_member(MDEV_FD(rb->new.fd), nsb);
	if (r)
		return fail("%s: writing the superblock: %s", rb->new.path,
			    strerror(-r));
	rb->new_has_sb = true;
	return 0;
}

/*
 * The row a resumed rebuild starts at: the lowest checkpoint recorded (a
 * crash may have stopped a record half way); after an unclean shutdown,
 * the first region dirty in the bitmap if it comes before: its writes may
 * have missed NEW.
 */
static uint64_t rb_resume_row(struct rebuild *rb)
{
	const struct superblock *sb = &rb->v.sb;
	uint64_t cp = rb->new.sb.roles[rb->role].checkpoint, x;
	uint8_t block[SB_BITMAP_BYTES], bits[SB_BITMAP_BITS / 8];
	uint32_t regions;
	int fd = -1;

	for (unsigned int r = 0; r < sb->nr_roles; r++)
		if (rb->in_service[r]) {
			if (rb->own[r].roles[rb->role].checkpoint < cp)
				cp = rb->own[r].roles[rb->role].checkpoint;
			if (fd < 0 && rb->source[r])
				fd = rb->m[rb->v.order[r]].fd;
		}
	x = cp / sb->chunk_bytes < rb->rows ? cp / sb->chunk_bytes : rb->rows;
	if (rb->v.clean)
		return x;
	if (!sb->bitmap_shift || fd < 0)
		return 0;
	regions = sb_bitmap_regions(sb);
	if (pread(fd, block, sizeof(block), SB_BITMAP_OFFSET) !=
		    (ssize_t)sizeof(block) ||
	    sb_bitmap_decode(block, regions, bits))
		return 0;
	for (uint32_t i = 0; i < regions; i++)
		if (bits[i / 8] >> (i % 8) & 1) {
			/* The region's first chunk: its first copy's row. */
			uint64_t k = ((uint64_t)i << sb->bitmap_shift) /
				     sb->chunk_bytes;
			uint64_t first = k * sb->copies / sb->nr_roles;

			return first < x ? first : x;
		}
	return x;
}

/*
 * @n bytes at @o into chunk @k, from the first source copy that can be
 * read (never R's: it is no source).  Returns 0, or 1 with a message.
 */
static int rb_read(struct rebuild *rb, uint64_t k, uint64_t o, uint8_t *buf,
		   uint64_t n)
{
	uint64_t voff = k * rb->v.sb.chunk_bytes + o;

	for (unsigned int c = 0; c < rb->g.copies; c++) {
		const struct rb_file *f;
		unsigned int role;
		uint64_t at;
		ssize_t got;

		mirror_map(&rb->g, voff, c, &role, &at);
		if (!rb->source[role])
			continue;
		f = &rb->m[rb->v.order[role]];
		got = pread(f->fd, buf, n, (off_t)at);
		if (got == (ssize_t)n)
			return 0;
		fail("member %s: reading %" PRIu64 " bytes at offset %" PRIu64
		     ": %s; trying the next copy", f->path, n, at,
		     got < 0 ? strerror(errno) : "short read");
	}
	return fail("chunk %" PRIu64 " (volume offset %" PRIu64 "): no active "
		    "copy could be read", k, voff);
}

/*
 * Member row @x of role R is position p = x N + R: copy p mod K of chunk
 * k = p div K, read from another copy and written to NEW at D + x C.  A
 * row past the volume's last chunk holds nothing and is left as it is;
 * so are the bytes of the last chunk past the volume's end.
 */
static int rb_row(struct rebuild *rb, uint64_t x, uint8_t *buf,
		  struct progress *p)
{
	const struct superblock *sb = &rb->v.sb;
	uint64_t c = sb->chunk_bytes, pos = x * sb->nr_roles + rb->role;
	uint64_t k = pos / sb->copies, len = 0;

	if (k < rb->chunks)
		len = sb->size_bytes - k * c < c ? sb->size_bytes - k * c : c;
	for (uint64_t o = 0; o < len; o += MIB) {
		uint64_t n = len - o < MIB ? len - o : MIB;
		int r;

		if (rb_read(rb, k, o, buf, n))
			return 1;
		r = mdev_pwrite(MDEV_FD(rb->new.fd), buf, n,
				sb->data_offset + x * c + o);
		if (r)
			return fail("%s: writing %" PRIu64 " bytes at offset %"
				    PRIu64 ": %s", rb->new.path, n,
				    sb->data_offset + x * c + o, strerror(-r));
		rb->copied += n;
		p->done = x * c + o + n;
		progress_show(p, false);
		/* Stopping: the rest of the row at full speed. */
		if (!interrupted)
			throttle(p->start, rb->copied, rb->o->max_rate);
	}
	p->done = (x + 1) * c;
	return 0;
}

/* Step 3 to 5: the rows from @x on, then R active.  0, or 1. */
static int rb_copy(struct rebuild *rb, uint64_t x)
{
	const struct superblock *sb = &rb->v.sb;
	struct progress p = { .what = "rebuild" };
	uint8_t *buf = malloc(MIB);
	double last;
	int rc = 1;

	if (!buf)
		return fail("out of memory");
	p.total = rb->rows * sb->chunk_bytes;
	p.base = p.done = x * sb->chunk_bytes;
	p.tty = isatty(2);
	p.start = p.last = last = now_s();
	for (; x < rb->rows && !interrupted; x++) {
		if (rb_row(rb, x, buf, &p))
			goto out;
		if (now_s() - last >= REBUILD_RECORD_S) {
			if (rb_checkpoint(rb, x + 1))
				goto out;
			last = now_s();
		}
	}
	if (x < rb->rows) {
		if (!rb_checkpoint(rb, x))
			fprintf(stderr, "%sbioctl: rebuild interrupted at member "
				"byte %" PRIu64 " of %" PRIu64 "; run the same "
				"command again to resume\n", p.tty ? "\n" : "",
				x * sb->chunk_bytes, p.total);
		goto out;
	}
	if (fdatasync(rb->new.fd)) {
		fail("%s: fdatasync: %s", rb->new.path, strerror(errno));
		goto out;
	}
	rb->tab.roles[rb->role].state = SB_ROLE_ACTIVE;
	rb->tab.roles[rb->role].checkpoint = 0;
	rb->tab.events++;
	if (rb_record(rb))
		goto out;
	progress_show(&p, true);
	last = now_s() - p.start;
	printf("rebuilt role %u of volume '%s' on %s: %" PRIu64 " bytes copied "
	       "in %.1f s (%.1f MB/s)\n", rb->role, sb->name, rb->new.path,
	       rb->copied, last, last > 0 ? (double)rb->copied / last / 1e6 : 0);
	rc = 0;
out:
	free(buf);
	return rc;
}

/* NEW exists, holds D and R's share of the volume. */
static int rb_size_new(struct rebuild *rb)
{
	struct rb_file *nw = &rb->new;

	if (nw->fd < 0) {
		nw->fd = open(nw->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC,
			      0644);
		if (nw->fd < 0 || fstat(nw->fd, &nw->st))
			return fail("%s: %s", nw->path, strerror(errno));
		if (lock_member(nw->fd, nw->path))
			return 1;
	}
	if (fd_bytes(nw->fd) >= rb->v.member_bytes)
		return 0;
	if (S_ISBLK(nw->st.st_mode))
		return fail("%s: %" PRIu64 " bytes, the volume needs %" PRIu64,
			    nw->path, fd_bytes(nw->fd), rb->v.member_bytes);
	if (ftruncate(nw->fd, (off_t)rb->v.member_bytes))
		return fail("%s: %s", nw->path, strerror(errno));
	return 0;
}

/* The volume of MEMBER... (OLD and NEW aside), which must be a mirror. */
static int rb_assemble(struct rebuild *rb)
{
	const struct superblock *sb = &rb->v.sb;
	char why[512];
	int r;

	r = sb_assemble(rb->paths, rb->n, 0, &rb->v, why, sizeof(why));
	if (r == -ENOENT)
		return fail("no member given (OLD aside) has a superblock: "
			    "nothing to rebuild from");
	if (r)
		return fail("%s", why);
	if (!sb_redundant(sb->level))
		return fail("volume '%s' is raid0: one copy of the data, "
			    "nothing to rebuild from", sb->name);
	if (mirror_geom_init(&rb->g, sb->nr_roles, sb->copies,
			     sb->chunk_bytes))
		return fail("volume '%s': %u copies on %u members is not a "
			    "mirror", sb->name, sb->copies, sb->nr_roles);
	rb->g.data_offset = sb->data_offset;
	rb->rows = (rb->v.member_bytes - sb->data_offset) / sb->chunk_bytes;
	rb->chunks = (sb->size_bytes - 1) / sb->chunk_bytes + 1;
	return 0;
}

static int do_rebuild(const struct rebuild_opts *o, char **members, int n)
{
	struct rebuild *rb = calloc(1, sizeof(*rb));
	const struct rb_file *nw;
	uint64_t x = 0;
	int rc = 1;

	if (local_only("rebuild", members, n) ||
	    local_only("rebuild", (char *const[]){ (char *)o->new_path,
						   (char *)o->old }, 2)) {
		free(rb);
		return 1;
	}
	if (!rb)
		return fail("out of memory");
	rb->o = o;
	nw = &rb->new;
	rb_stat(&rb->new, o->new_path);
	if (o->old)
		rb_stat(&rb->old, o->old);
	if (rb_members(rb, members, n) ||
	    rb_open(&rb->new, O_RDWR, true) ||
	    (o->old && !rb_same(&rb->old, &rb->new) &&
	     rb_open(&rb->old, O_RDONLY, true)) ||
	    rb_assemble(rb))
		goto out;
	rb->resume = rb_ours(rb, nw) && nw->sb.events == rb->v.sb.events &&
		     rb->v.sb.roles[nw->sb.role].state == SB_ROLE_REBUILDING &&
		     !memcmp(rb->v.sb.roles[nw->sb.role].uuid,
			     nw->sb.member_uuid, 16);
	if (rb_role(rb) || rb_check_new(rb) || rb_service(rb) ||
	    rb_size_new(rb))
		goto out;
	rb->tab = rb->v.sb;
	if (rb->resume) {
		rb->new_has_sb = true;
		x = rb_resume_row(rb);
		fprintf(stderr, "bioctl: resuming the rebuild of role %u at "
			"member byte %" PRIu64 " of %" PRIu64 "\n", rb->role,
			x * rb->v.sb.chunk_bytes,
			rb->rows * rb->v.sb.chunk_bytes);
	} else if (rb_start(rb)) {
		goto out;
	}
	rc = rb_copy(rb, x);
out:
	for (unsigned int i = 0; i < rb->n; i++)
		if (rb->m[i].fd >= 0)
			close(rb->m[i].fd);
	if (rb->old.fd >= 0)
		close(rb->old.fd);
	if (rb->new.fd >= 0)
		close(rb->new.fd);
	free(rb);
	return rc;
}

/*
 * --replace OLD NEW and --role R NEW take two words: NEW is the one after
 * the option's argument, wherever the option stands among the members.
 */
static int rb_take_new(int argc, char **argv, const char *opt,
		       struct rebuild_opts *o)
{
	if (o->new_path)
		return fail("--replace and --role: one of them, once");
	if (optind >= argc)
		return fail("%s: NEW is missing (%s NEW)", opt, opt);
	o->new_path = argv[optind++];
	return 0;
}

static int cmd_rebuild(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "replace", required_argument, NULL, 'r' },
		{ "role", required_argument, NULL, 'o' },
		{ "max-rate", required_argument, NULL, 'R' },
		{ "force", no_argument, NULL, 'f' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct rebuild_opts o = { .role = SB_ROLE_NONE };
	char opt[64], *end;
	unsigned long role;
	int ch;

	while ((ch = getopt_long(argc, argv, ":fh", longopts, NULL)) != -1) {
		switch (ch) {
		case 'r':
			o.old = optarg;
			snprintf(opt, sizeof(opt), "--replace %s", optarg);
			if (rb_take_new(argc, argv, opt, &o))
				return 2;
			break;
		case 'o':
			errno = 0;
			role = strtoul(optarg, &end, 10);
			if (errno || end == optarg || *end || optarg[0] == '-' ||
			    role >= SB_MAX_ROLES)
				return usage_error("--role %s: expected a role "
						   "number, 0 to %u", optarg,
						   SB_MAX_ROLES - 1);
			o.role = (unsigned int)role;
			snprintf(opt, sizeof(opt), "--role %s", optarg);
			if (rb_take_new(argc, argv, opt, &o))
				return 2;
			break;
		case 'R':
			if (parse_rate(optarg, &o.max_rate))
				return 2;
			break;
		case 'f': o.force = true; break;
		case 'h': usage(stdout); return 0;
		default: return bad_option("rebuild", ch, argv, longopts);
		}
	}
	if (!o.new_path)
		return usage_error("rebuild: --replace OLD NEW or --role R NEW "
				   "is missing; try 'bioctl rebuild --help'");
	if (optind >= argc)
		return usage_error("rebuild: no MEMBER given; try 'bioctl "
				   "rebuild --help'");
	if (argc - optind > (int)SB_MAX_ROLES)
		return usage_error("rebuild: at most %u members, %d given",
				   SB_MAX_ROLES, argc - optind);
	if (members_distinct(argv + optind, argc - optind))
		return 2;
	catch_interrupts();
	return do_rebuild(&o, argv + optind, argc - optind);
}

int main(int argc, char **argv)
{
	/* Each command names a bad option in a line of its own. */
	opterr = 0;
	if (argc < 2)
		return usage_error("no command given; try 'bioctl --help'");
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("bioctl %s\n", BIONBD_VERSION);
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
	if (!strcmp(argv[1], "rebuild"))
		return cmd_rebuild(argc - 1, argv + 1);
	if (!strcmp(argv[1], "stat"))
		return cmd_stat(argc - 1, argv + 1);
	if (!strcmp(argv[1], "trace"))
		return cmd_trace(argc - 1, argv + 1);
	return usage_error("%s: unknown command; try 'bioctl --help'",
			   argv[1]);
}
