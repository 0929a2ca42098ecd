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
 *
 * create writes a superblock on every member, role i for the i-th member
 * given, creating or extending sparse files as the size needs; it refuses
 * a member that already carries a superblock, a file system or a
 * partition table unless --force.  A mirror (raid1, raid10) also gets an
 * all-clear write-intent bitmap on every member: a new volume has nothing
 * to resync.  info shows each member's superblock and whether the members
 * make one complete, consistent volume, with the same check the servers
 * make when they start (sb_assemble); a mirror that lost members but
 * still has a copy of everything is shown degraded, role by role.  check
 * makes that check, then reads every byte of every live member's data
 * and reports the ranges that cannot be read; on a mirror it also
 * compares the copies of every chunk and reports (--repair: rewrites from
 * the first live copy) those that differ, which is what an unclean
 * shutdown without a bitmap, or a disk returning stale data, leaves.  On
 * a terminal it shows a progress bar, elsewhere a line every few seconds,
 * and Ctrl-C stops it with the offset to resume from (--from).
 *
 * Exit status: 0 done (info: a complete volume, degraded or not; check:
 * clean, or repaired); 1 refused or failed (info: not a complete volume,
 * or headerless; check: unreadable ranges, or copies that differ); 2
 * usage, or (check) members that do not make a volume.
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
	fputs("Usage: bioctl create [--level raid0|raid1|raid10] [--copies K]\n"
	      "                     [--stripe-size SIZE] [--size SIZE] [--name NAME]\n"
	      "                     [--data-offset SIZE] [--force] MEMBER...\n"
	      "       bioctl info [--json] MEMBER...\n"
	      "       bioctl check [--from OFFSET] [--repair] MEMBER...\n"
	      "       bioctl convert --stripe-size SIZE [--size SIZE] [--name NAME]\n"
	      "                      [--max-rate RATE] MEMBER...\n"
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
	uint32_t level; /* enum sb_level */
	uint32_t copies; /* raid1: N; raid10: K; raid0: 0 */
};

/*
 * A new mirror's write-intent bitmap, every region clean: the members
 * hold nothing yet that could differ, so the first start resyncs nothing.
 */
static int write_clean_bitmap(int fd, uint64_t size, unsigned int shift)
{
	static const uint8_t bits[SB_BITMAP_BITS / 8];
	uint8_t block[SB_BITMAP_BYTES];
	uint64_t regions = ((size - 1) >> shift) + 1;
	size_t done = 0;

	sb_bitmap_encode(bits, (uint32_t)regions, block);
	while (done < sizeof(block)) {
		ssize_t w = pwrite(fd, block + done, sizeof(block) - done,
				   (off_t)(SB_BITMAP_OFFSET + done));

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		done += (size_t)w;
	}
	return 0;
}

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
	sb.level = o->level;
	sb.copies = o->copies;
	if (sb_redundant(o->level))
		sb.bitmap_shift = sb_bitmap_shift(size);
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
		/* The bitmap before the superblock that points at it; the
		 * superblock's fdatasync covers both. */
		if (!r && sb.bitmap_shift)
			r = write_clean_bitmap(fds[i], size, sb.bitmap_shift);
		r = r ?: sb_write(fds[i], &sb);
		if (r)
			return fail("member %s: writing the superblock: %s",
				    paths[i], strerror(-r));
	}
	sb_uuid_format(sb.volume_uuid, u);
	printf("%s volume '%s' (%s): %s, %d members", verb, sb.name, u,
	       sb_level_name(sb.level), n);
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

static int do_create(const struct create_opts *o, char **paths, int n)
{
	struct superblock sb = { 0 };
	struct stripe_geom g;
	struct mirror_geom mg;
	uint64_t member_bytes, min = UINT64_MAX;
	int fds[SB_MAX_ROLES], rc = 1, opened = 0;
	struct stat st[SB_MAX_ROLES];

	if (n < 1 || n > (int)SB_MAX_ROLES)
		return fail("create: 1 to %u members, %d given", SB_MAX_ROLES,
			    n);
	if (strlen(o->name) >= SB_NAME_BYTES)
		return fail("--name %s: at most %u bytes", o->name,
			    SB_NAME_BYTES - 1);
	if (sb_redundant(o->level) ?
		    mirror_geom_init(&mg, (unsigned int)n, o->copies, o->chunk) :
		    stripe_geom_init(&g, (unsigned int)n, o->chunk))
		return fail("create: %s with %u copies on %d members is not a "
			    "valid geometry", sb_level_name(o->level),
			    o->copies, n);
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
		{ "copies", required_argument, NULL, 'k' },
		{ "stripe-size", required_argument, NULL, 'S' },
		{ "size", required_argument, NULL, 's' },
		{ "name", required_argument, NULL, 'n' },
		{ "data-offset", required_argument, NULL, 'D' },
		{ "force", no_argument, NULL, 'f' },
		{ NULL, 0, NULL, 0 },
	};
	struct create_opts o = { .chunk = STRIPE_DEFAULT_CHUNK, .name = "",
				 .level = SB_LEVEL_RAID0 };
	const char *copies = NULL;
	bool offset_set = false;
	char err[256], *end;
	unsigned long k = 0;
	int ch, n;

	while ((ch = getopt_long(argc, argv, "f", longopts, NULL)) != -1) {
		switch (ch) {
		case 'l':
			if (!strcmp(optarg, "raid0"))
				o.level = SB_LEVEL_RAID0;
			else if (!strcmp(optarg, "raid1"))
				o.level = SB_LEVEL_RAID1;
			else if (!strcmp(optarg, "raid10"))
				o.level = SB_LEVEL_RAID10;
			else
				return fail("--level %s: raid0, raid1 or "
					    "raid10", optarg);
			break;
		case 'k':
			errno = 0;
			k = strtoul(optarg, &end, 10);
			if (errno || end == optarg || *end || optarg[0] == '-' ||
			    k > SB_MAX_ROLES)
				return fail("--copies %s: expected a number of "
					    "copies, 2 to %u", optarg,
					    SB_MAX_ROLES);
			copies = optarg;
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
	n = argc - optind;
	switch (o.level) {
	case SB_LEVEL_RAID0:
		if (copies)
			return fail("--copies %s: only raid1 and raid10 keep "
				    "copies (this is --level raid0)", copies);
		break;
	case SB_LEVEL_RAID1:
		if (n < 2)
			return fail("--level raid1: at least 2 members, %d "
				    "given", n);
		if (copies && k != (unsigned long)n)
			return fail("--copies %s: raid1 keeps a copy on every "
				    "member (%d here)", copies, n);
		o.copies = (uint32_t)n;
		break;
	default:
		if (n < 2)
			return fail("--level raid10: at least 2 members, %d "
				    "given", n);
		if (copies && (k < 2 || k > (unsigned long)n))
			return fail("--copies %s: 2 to %d (the members) for "
				    "raid10", copies, n);
		o.copies = copies ? (uint32_t)k : 2;
		break;
	}
	/* A mirror's bitmap block lies between the superblock and the data. */
	if (sb_redundant(o.level) &&
	    o.data_offset < SB_BITMAP_OFFSET + SB_BITMAP_BYTES)
		return fail("--data-offset %" PRIu64 ": at least %u for %s "
			    "(the superblock and the bitmap come first)",
			    o.data_offset, SB_BITMAP_OFFSET + SB_BITMAP_BYTES,
			    sb_level_name(o.level));
	return do_create(&o, argv + optind, n);
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
			       "\"recorded_state\": \"%s\"}", u,
			       role_state(v, r),
			       sb_role_state_name(v->sb.roles[r].state));
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
	struct member_info *mi = NULL;
	struct sb_volume *v = NULL;
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
	if (!mi || !v) {
		ar = fail("out of memory");
		goto out;
	}
	for (int i = 0; i < n; i++) {
		int fd = open(argv[optind + i], O_RDONLY | O_CLOEXEC);

		if (fd < 0) {
			mi[i].r = -errno;
			mi[i].absent = errno == ENOENT;
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
static uint64_t read_or_report(int fd, uint8_t *buf, uint64_t len,
			       uint64_t at, uint64_t voff, const char *path,
			       uint64_t *ranges)
{
	uint64_t bad = 0;

	if (pread(fd, buf, len, (off_t)at) == (ssize_t)len)
		return 0;
	for (uint64_t s = 0; s < len; s += 512) {
		uint64_t run = 0;

		while (s + run < len &&
		       pread(fd, buf + s + run, 512,
			     (off_t)(at + s + run)) != 512)
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

		if (len > c)
			len = c;
		bad += read_or_report(fds[k % n], buf, len,
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
		printf("%" PRIu64 " unreadable bytes in %" PRIu64 " ranges\n",
		       bad, bad_ranges);
		rc = 1;
	} else {
		printf("volume '%s': superblocks consistent, %" PRIu64
		       " bytes of data read%s\n",
		       sb->name, sb->size_bytes - from, not_clean(sb));
	}
out:
	for (int i = 0; i < opened; i++)
		close(fds[i]);
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
	int fds[SB_MAX_ROLES]; /* by role; -1 for one not checked */
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
		ssize_t w;

		while (s + run < len &&
		       memcmp(ref + s + run, buf + s + run, 512))
			run += 512;
		if (!run)
			continue;
		mismatch_add(mc, j, off + s, run, role, ref_role);
		if (mc->repair) {
			w = pwrite(mc->fds[role], ref + s, run, (off_t)(at + s));
			if (w != (ssize_t)run)
				mc->rc = fail("member %s: repairing %" PRIu64
					      " bytes at offset %" PRIu64 ": %s",
					      mc->paths[mc->v->order[role]], run,
					      at + s, w < 0 ? strerror(errno) :
							      "short write");
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
		if (mc->fds[role] < 0)
			continue;
		bad = read_or_report(mc->fds[role], into, len, at, off,
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
	int rc = 0;

	if (!mc || !ref || !buf) {
		rc = fail("out of memory");
		goto out;
	}
	mc->paths = paths;
	mc->v = v;
	mc->repair = repair;
	for (unsigned int r = 0; r < SB_MAX_ROLES; r++)
		mc->fds[r] = -1;
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
		mc->fds[r] = open(path, (repair ? O_RDWR : O_RDONLY) |
						O_CLOEXEC);
		if (mc->fds[r] < 0) {
			rc = fail("member %s: %s", path, strerror(errno));
			goto out;
		}
		/* Rewriting copies under a server would race its writes. */
		if (repair && lock_member(mc->fds[r], path)) {
			rc = 1;
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
	for (unsigned int r = 0; r < sb->nr_roles; r++)
		if (mc->written[r] && fdatasync(mc->fds[r]))
			mc->rc = fail("member %s: fdatasync: %s",
				      paths[v->order[r]], strerror(errno));
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
		printf("%" PRIu64 " unreadable bytes in %" PRIu64 " ranges\n",
		       mc->bad, mc->bad_ranges);
		rc = 1;
	}
	if (mc->diff) {
		printf("%" PRIu64 " mismatching bytes in %" PRIu64 " ranges%s\n",
		       mc->diff, mc->diff_ranges, repair ? ", repaired" : "");
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
			if (mc->fds[r] >= 0)
				close(mc->fds[r]);
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
		{ NULL, 0, NULL, 0 },
	};
	struct sigaction sa = { .sa_handler = on_sigint };
	struct sb_volume *v;
	bool repair = false;
	uint64_t from = 0;
	char why[512];
	int ch, n, r;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		if (ch == 'r') {
			repair = true;
			continue;
		}
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
		r = 2;
		goto out;
	}
	if (from >= v->sb.size_bytes) {
		r = fail("--from %" PRIu64 ": past the volume's end", from);
		goto out;
	}
	if (repair && !sb_redundant(v->sb.level)) {
		r = fail("--repair: volume '%s' is raid0, one copy of the data "
			 "and nothing to repair it from", v->sb.name);
		goto out;
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
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
