// SPDX-License-Identifier: MIT
/*
 * volume.c - turn a volume definition (member paths, chunk, size) into a
 * stripe target, checking everything before touching any file.
 *
 * Order matters for "a config mistake loses nothing": first every check
 * that can be made without side effects, then create/extend members (never
 * shrink), then open.  What was created or grown is recorded (struct
 * volume_made): if a later step fails, the open takes it back, and so can
 * a front end whose own start fails after the open (volume_unmake).
 *
 * Members with superblocks (superblock.h, docs/format.md) are a
 * self-describing volume: assembled by role whatever order they are given
 * in, their geometry from the superblocks (a stripe size or size given
 * must agree), never created or extended, and kept by sbvol.c while open
 * (clean flag, locks, and for a mirror its role states, bitmap and
 * resync).  A mirror opens only the members in service.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <linux/major.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <bionbd/mdev.h>
#include <bionbd/plural.h>
#include <bionbd/superblock.h>

#include "internal.h"

/*
 * What a member is stored on, so that two spellings of one storage are
 * told apart from two members: the file or whole disk at the bottom and
 * the byte range of it the member covers.  A partition is followed to its
 * disk and a loop device to its backing file, so a loop device over a
 * member file, a disk and its partition, and overlapping partitions or
 * loop devices meet on one base with overlapping ranges.
 */
enum member_base {
	BASE_NONE, /* not known: compared by path (and device number) only */
	BASE_FILE, /* base_dev, base_ino: st_dev and st_ino of a file */
	BASE_DISK, /* base_dev: the whole disk's device number */
};

struct member_id {
	char *canon; /* absolute path, for members not created yet */
	bool exists;
	struct stat st;
	enum member_base base;
	dev_t base_dev;
	ino_t base_ino;
	uint64_t start, end; /* bytes of the base; end UINT64_MAX: to its end */
	dev_t disk;	/* block device members: the whole disk they are on */
	bool partition; /* a partition of that disk */
	bool via_loop;	/* reached through a loop device */
};

struct member_check {
	struct member_id id;
	bool remote; /* an NBD URI (remote.c) or RBD image (rbd.c), probed */
	uint64_t size_bytes; /* before this open grew it */
};

/* One member as volume_unmake() finds it: what this open did to it. */
struct made_member {
	const char *path; /* in the record's own allocation */
	uint64_t old_bytes; /* a grown member's size before */
	bool created;
	bool grown;
};

/*
 * The paths are copied in with the record, so that it outlives the
 * configuration it came from and taking a member back needs no memory.
 */
struct volume_made {
	unsigned int nr;
	struct made_member m[];
};

int verr(char *buf, size_t len, int err, const char *fmt, ...)
{
	va_list ap;

	if (buf && len) {
		va_start(ap, fmt);
		vsnprintf(buf, len, fmt, ap);
		va_end(ap);
	}
	return err;
}

/* realpath() of the file, or of its directory when it does not exist yet. */
static char *canonical_path(const char *path)
{
	char *copy, *dir, *base, *rdir, *out = NULL;

	out = realpath(path, NULL);
	if (out)
		return out;
	copy = strdup(path);
	base = strdup(path);
	if (!copy || !base)
		goto done;
	dir = dirname(copy);
	rdir = realpath(dir, NULL);
	if (rdir) {
		if (asprintf(&out, "%s/%s", rdir, basename(base)) < 0)
			out = NULL;
		free(rdir);
	}
done:
	free(copy);
	free(base);
	return out;
}

/* ---- member identity ---- */

/* A sysfs attribute of the block device directory @dir, without its newline. */
static int sysfs_read(const char *dir, const char *name, char *buf,
		      size_t len)
{
	char path[PATH_MAX];
	ssize_t n;
	int fd;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >=
	    sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	while (n > 0 && buf[n - 1] == '\n')
		buf[--n] = '\0';
	return 0;
}

static int sysfs_u64(const char *dir, const char *name, uint64_t *out)
{
	char buf[32], *end;
	int r = sysfs_read(dir, name, buf, sizeof(buf));

	if (r)
		return r;
	errno = 0;
	*out = strtoull(buf, &end, 10);
	return errno || end == buf || *end ? -EINVAL : 0;
}

/* "MAJ:MIN", as sysfs writes device numbers. */
static int sysfs_dev(const char *dir, const char *name, dev_t *out)
{
	unsigned int maj, min;
	char buf[32], c;
	int r = sysfs_read(dir, name, buf, sizeof(buf));

	if (r)
		return r;
	if (sscanf(buf, "%u:%u%c", &maj, &min, &c) != 2)
		return -EINVAL;
	*out = makedev(maj, min);
	return 0;
}

static void dev_sysfs_dir(dev_t dev, char *buf, size_t len)
{
	snprintf(buf, len, "/sys/dev/block/%u:%u", major(dev), minor(dev));
}

/* Bytes from 512-byte sectors; UINT64_MAX (unbounded) when it overflows. */
static uint64_t sectors_to_bytes(uint64_t sectors)
{
	uint64_t b;

	return __builtin_mul_overflow(sectors, (uint64_t)SECTOR_SIZE, &b) ?
		       UINT64_MAX :
		       b;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
	uint64_t s;

	return __builtin_add_overflow(a, b, &s) ? UINT64_MAX : s;
}

/* Move @id's range onto a backing file or disk that starts it at @offset. */
static void id_shift(struct member_id *id, uint64_t offset, uint64_t limit)
{
	uint64_t cap = limit ? add_sat(offset, limit) : UINT64_MAX;

	id->start = add_sat(id->start, offset);
	id->end = id->end == UINT64_MAX ? UINT64_MAX : add_sat(id->end, offset);
	if (id->end > cap)
		id->end = cap;
}

static void blk_resolve(struct member_id *id, dev_t rdev, int fd,
			unsigned int depth);

/*
 * @id lies on loop device @disk: move it onto the backing file.  The ioctl
 * names the backing file by device and inode even when it was deleted or
 * renamed; sysfs's path text is the fallback when there is no descriptor
 * (a loop device over a loop device) or the ioctl is refused.
 */
static void loop_resolve(struct member_id *id, dev_t disk, int fd,
			 unsigned int depth)
{
	struct loop_info64 li;
	char dir[64], file[PATH_MAX];
	uint64_t offset = 0, limit = 0;
	struct stat st;
	size_t n;

	if (fd >= 0 && ioctl(fd, LOOP_GET_STATUS64, &li) == 0) {
		id->via_loop = true;
		id_shift(id, li.lo_offset, li.lo_sizelimit);
		if (li.lo_rdevice) {
			/* The backing "file" is itself a block device. */
			blk_resolve(id, (dev_t)li.lo_rdevice, -1, depth + 1);
			return;
		}
		id->base = BASE_FILE;
		id->base_dev = (dev_t)li.lo_device;
		id->base_ino = (ino_t)li.lo_inode;
		return;
	}
	if (fd >= 0 && errno == ENXIO)
		return; /* a loop device with nothing bound */
	dev_sysfs_dir(disk, dir, sizeof(dir));
	if (sysfs_read(dir, "loop/backing_file", file, sizeof(file)))
		return;
	/* A deleted backing file can no longer be named by any path. */
	n = strlen(file);
	if (n >= 10 && !strcmp(file + n - 10, " (deleted)"))
		return;
	if (stat(file, &st))
		return;
	sysfs_u64(dir, "loop/offset", &offset);
	sysfs_u64(dir, "loop/sizelimit", &limit);
	id->via_loop = true;
	id_shift(id, offset, limit);
	if (S_ISBLK(st.st_mode)) {
		blk_resolve(id, st.st_rdev, -1, depth + 1);
		return;
	}
	id->base = BASE_FILE;
	id->base_dev = st.st_dev;
	id->base_ino = st.st_ino;
}

/*
 * Block device @rdev (@fd open on it, or -1): a partition becomes a range
 * of its disk, a loop device its backing file.  Without sysfs the device
 * stays its own base, so only its device number is compared.
 */
static void blk_resolve(struct member_id *id, dev_t rdev, int fd,
			unsigned int depth)
{
	uint64_t start, nr_sectors, part;
	char dir[64], disk_dir[80];
	dev_t disk = rdev;

	id->base = BASE_DISK;
	id->base_dev = rdev;
	if (depth > 8)
		return; /* loop over loop over ...: deeper is not worth following */
	dev_sysfs_dir(rdev, dir, sizeof(dir));
	if (sysfs_u64(dir, "partition", &part) == 0) {
		snprintf(disk_dir, sizeof(disk_dir), "%s/..", dir);
		if (sysfs_u64(dir, "start", &start) ||
		    sysfs_u64(dir, "size", &nr_sectors) ||
		    sysfs_dev(disk_dir, "dev", &disk))
			return;
		id->base_dev = disk;
		id_shift(id, sectors_to_bytes(start),
			 sectors_to_bytes(nr_sectors));
		dev_sysfs_dir(disk, dir, sizeof(dir));
		if (!depth)
			id->partition = true;
	}
	if (!depth)
		id->disk = disk;
	/* LOOP_GET_STATUS64 is only asked of loop devices: it is their ioctl. */
	snprintf(disk_dir, sizeof(disk_dir), "%s/loop", dir);
	if (major(disk) == LOOP_MAJOR || access(disk_dir, F_OK) == 0)
		loop_resolve(id, disk, fd, depth);
}

/*
 * Learn what @path is stored on.  A path that does not exist yet is known
 * by its canonical path alone; failing to read sysfs or a loop device's
 * status only narrows what can be compared.  Returns 0 or -errno.
 */
static int member_identify(const char *path, struct member_id *id)
{
	int fd;

	memset(id, 0, sizeof(*id));
	id->end = UINT64_MAX;
	/* A remote member is known by its name: given twice is all we see. */
	if (member_is_remote(path)) {
		id->canon = strdup(path);
		return id->canon ? 0 : -ENOMEM;
	}
	id->canon = canonical_path(path);
	if (!id->canon)
		return errno ? -errno : -ENOENT;
	if (stat(path, &id->st))
		return errno == ENOENT ? 0 : -errno;
	id->exists = true;
	if (S_ISREG(id->st.st_mode)) {
		id->base = BASE_FILE;
		id->base_dev = id->st.st_dev;
		id->base_ino = id->st.st_ino;
	} else if (S_ISBLK(id->st.st_mode)) {
		fd = open(path, O_RDONLY | O_CLOEXEC);
		blk_resolve(id, id->st.st_rdev, fd, 0);
		if (fd >= 0)
			close(fd);
	}
	return 0;
}

/* Hard links, symlinks, /dev/fd/N: one volume calls this "given twice". */
static const char same_file[] = "the same file";

/*
 * Whether @a and @b are one storage, and why (a short phrase), or NULL.
 * Past same_file come the aliases no path or inode comparison sees.
 */
static const char *member_overlap(const struct member_id *a,
				  const struct member_id *b)
{
	if (a->exists && b->exists && a->st.st_dev == b->st.st_dev &&
	    a->st.st_ino == b->st.st_ino)
		return same_file;
	if (!strcmp(a->canon, b->canon))
		return same_file;
	if (!a->exists || !b->exists)
		return NULL;
	if (S_ISBLK(a->st.st_mode) && S_ISBLK(b->st.st_mode) &&
	    a->st.st_rdev == b->st.st_rdev)
		return "two nodes of one device";
	if (a->base == BASE_NONE || a->base != b->base ||
	    a->base_dev != b->base_dev ||
	    (a->base == BASE_FILE && a->base_ino != b->base_ino))
		return NULL;
	if (a->end <= b->start || b->end <= a->start)
		return NULL; /* e.g. two partitions side by side */
	if (a->disk && a->disk == b->disk)
		return a->partition && b->partition ?
			       "overlapping partitions of one disk" :
			       "a disk and its partition";
	if (a->via_loop != b->via_loop)
		return "a loop device over the other";
	return a->via_loop ? "loop devices over the same bytes of one file" :
			     "overlapping parts of one device";
}

static void member_id_release(struct member_id *id)
{
	free(id->canon);
	id->canon = NULL;
}

/* ---- the checks ---- */

static int check_member(const struct volume_config *cfg, unsigned int i,
			struct member_check *m, char *errbuf, size_t errlen)
{
	const char *path = cfg->members[i];
	int fd, r;

	if (!path || !*path)
		return verr(errbuf, errlen, -EINVAL, "member %u: empty path",
			    i + 1);
	r = member_identify(path, &m->id);
	if (!r && remote_uri(path)) {
		struct remote_info info;

		r = remote_probe(path, cfg->remote_timeout_ms, &info, errbuf,
				 errlen);
		if (r)
			return r;
		m->remote = true;
		m->size_bytes = info.size_bytes;
		return 0;
	}
	if (!r && rbd_member(path)) {
		r = rbd_probe(path, cfg->remote_timeout_ms, &m->size_bytes,
			      errbuf, errlen);
		m->remote = !r;
		return r;
	}
	if (r)
		return verr(errbuf, errlen, r, "member %s: %s", path,
			    strerror(-r));
	if (m->id.exists) {
		if (S_ISREG(m->id.st.st_mode)) {
			m->size_bytes = (uint64_t)m->id.st.st_size;
		} else if (S_ISBLK(m->id.st.st_mode)) {
			fd = open(path, O_RDONLY | O_CLOEXEC);
			if (fd < 0 ||
			    ioctl(fd, BLKGETSIZE64, &m->size_bytes) != 0) {
				int e = errno;

				if (fd >= 0)
					close(fd);
				return verr(errbuf, errlen, -e, "member %s: %s",
					    path, strerror(e));
			}
			close(fd);
		} else {
			return verr(errbuf, errlen, -EINVAL,
				    "member %s: not a regular file or block device",
				    path);
		}
		if (access(path, cfg->readonly ? R_OK : R_OK | W_OK))
			return verr(errbuf, errlen, -errno, "member %s: %s",
				    path, strerror(errno));
	} else if (!cfg->size_bytes || cfg->readonly) {
		/* Only a volume with a size may create its members. */
		return verr(errbuf, errlen, -ENOENT, "member %s: %s", path,
			    strerror(ENOENT));
	}
	return 0;
}

/* An empty record for @cfg's members, made before any of them is touched. */
static struct volume_made *made_alloc(const struct volume_config *cfg)
{
	size_t bytes = sizeof(struct volume_made) +
		       cfg->nr_members * sizeof(struct made_member);
	struct volume_made *made;
	char *p;

	/* A missing path is refused by the checks, never made: "" will do. */
	for (unsigned int i = 0; i < cfg->nr_members; i++)
		bytes += (cfg->members[i] ? strlen(cfg->members[i]) : 0) + 1;
	made = calloc(1, bytes);
	if (!made)
		return NULL;
	made->nr = cfg->nr_members;
	p = (char *)&made->m[made->nr];
	for (unsigned int i = 0; i < made->nr; i++) {
		made->m[i].path = p;
		p = stpcpy(p, cfg->members[i] ? cfg->members[i] : "") + 1;
	}
	return made;
}

static bool made_any(const struct volume_made *made)
{
	for (unsigned int i = 0; i < made->nr; i++)
		if (made->m[i].created || made->m[i].grown)
			return true;
	return false;
}

void volume_unmake(struct volume_made *made)
{
	for (unsigned int i = 0; made && i < made->nr; i++) {
		const struct made_member *mm = &made->m[i];

		if (mm->created)
			unlink(mm->path);
		else if (mm->grown && truncate(mm->path, (off_t)mm->old_bytes))
			continue; /* best effort: the start has failed already */
	}
	free(made);
}

void volume_made_free(struct volume_made *made)
{
	free(made);
}

/*
 * Create or grow @path to @size (sparse), noting in @rec what was done
 * for volume_unmake().  Never shrinks what it was given.
 */
static int extend_member(const char *path, const struct member_check *m,
			 uint64_t size, struct made_member *rec)
{
	int fd, r = 0;

	if (m->remote || (m->id.exists && (S_ISBLK(m->id.st.st_mode) ||
					   m->size_bytes >= size)))
		return 0;
	fd = open(path,
		  O_RDWR | O_CREAT | O_CLOEXEC | (m->id.exists ? 0 : O_EXCL),
		  0644);
	if (fd < 0)
		return -errno;
	if (!m->id.exists)
		rec->created = true;
	if (ftruncate(fd, (off_t)size)) {
		r = -errno;
	} else if (m->id.exists) {
		rec->grown = true;
		rec->old_bytes = m->size_bytes;
	}
	close(fd);
	return r;
}

static void members_free(const struct volume_config *cfg,
			 struct member_check *m)
{
	for (unsigned int i = 0; m && i < cfg->nr_members; i++)
		member_id_release(&m[i].id);
	free(m);
}

/* The size a volume without one gets: whole stripes of the smallest member. */
static int default_size(const struct volume_config *cfg,
			const struct member_check *m, uint64_t chunk,
			char *errbuf, size_t errlen)
{
	unsigned int n = cfg->nr_members, i, small = 0;
	uint64_t stripe, size;

	for (i = 1; i < n; i++)
		if (m[i].size_bytes < m[small].size_bytes)
			small = i;
	if (__builtin_mul_overflow((uint64_t)n, chunk, &stripe) ||
	    __builtin_mul_overflow(m[small].size_bytes / chunk, stripe,
				   &size) ||
	    size > (uint64_t)INT64_MAX)
		return verr(errbuf, errlen, -EFBIG,
			    "member %s: %llu bytes, times %u member%s is more than %lld bytes; give a smaller size",
			    cfg->members[small],
			    (unsigned long long)m[small].size_bytes, n,
			    plural(n),
			    (long long)INT64_MAX);
	return 0;
}

/* For messages: "volume 'NAME'", or its UUID for a volume with no name. */
static void sb_volume_name(const struct sb_volume *v, char *buf, size_t len)
{
	if (v->sb.name[0])
		snprintf(buf, len, "%s", v->sb.name);
	else
		sb_uuid_format(v->sb.volume_uuid, buf);
}

/*
 * The superblocks, if the members have them: the geometry comes from
 * there, and a stripe size or size given must agree with it.  Returns 0
 * with *sb false for a headerless volume.
 */
static int volume_superblocks(const struct volume_config *cfg,
			      struct sb_volume *v, bool *sb, char *errbuf,
			      size_t errlen)
{
	int r = sb_assemble(cfg->members, cfg->nr_members,
			    cfg->remote_timeout_ms, v, errbuf, errlen);
	char name[SB_NAME_BYTES + 40];

	*sb = !r;
	if (r == -ENOENT) {
		if (errbuf && errlen)
			errbuf[0] = '\0';
		return 0;
	}
	if (r)
		return r;
	sb_volume_name(v, name, sizeof(name));
	if (cfg->chunk_bytes && cfg->chunk_bytes != v->sb.chunk_bytes)
		return verr(errbuf, errlen, -EINVAL,
			    "stripe-size %llu: volume '%s' has %llu in its superblocks",
			    (unsigned long long)cfg->chunk_bytes, name,
			    (unsigned long long)v->sb.chunk_bytes);
	if (cfg->size_bytes && cfg->size_bytes != v->sb.size_bytes)
		return verr(errbuf, errlen, -EINVAL,
			    "size %llu: volume '%s' is %llu bytes in its superblocks",
			    (unsigned long long)cfg->size_bytes, name,
			    (unsigned long long)v->sb.size_bytes);
	if (cfg->level_set && cfg->level != v->sb.level)
		return verr(errbuf, errlen, -EINVAL,
			    "level %s: volume '%s' is %s in its superblocks",
			    sb_level_name(cfg->level), name,
			    sb_level_name(v->sb.level));
	/* A raid0's superblocks say 0 copies: not a number to compare. */
	if (cfg->copies && !sb_redundant(v->sb.level))
		return verr(errbuf, errlen, -EINVAL,
			    "copies %u: volume '%s' is %s in its superblocks, "
			    "and only raid1 and raid10 keep copies",
			    cfg->copies, name,
			    sb_level_name(v->sb.level));
	if (cfg->copies && cfg->copies != v->sb.copies)
		return verr(errbuf, errlen, -EINVAL,
			    "copies %u: volume '%s' has %u in its superblocks",
			    cfg->copies, name, v->sb.copies);
	/*
	 * A mirror named with fewer members than it has active roles would
	 * start degraded and record the one left out faulty, to be rebuilt
	 * in full: a member left off the command line or the config, or
	 * misspelt (a path that does not exist), must not cost that.  Nor
	 * may a read-only start serve a member alone that the others may
	 * have recorded stale.  A member there but failing (a dead disk, a
	 * remote that is down) still starts degraded, and so does a volume
	 * given spares enough to take the missing roles over.
	 */
	if (sb_redundant(v->sb.level) && !cfg->degraded) {
		unsigned int active = 0, left = SB_ROLE_NONE;

		for (unsigned int i = 0; i < cfg->nr_members; i++)
			if (!member_is_remote(cfg->members[i]) &&
			    access(cfg->members[i], F_OK) && errno == ENOENT)
				return verr(errbuf, errlen, -ENOENT,
					    "member %s: %s; a mirror starts "
					    "without one of its members only "
					    "when asked (--degraded, degraded "
					    "= true)",
					    cfg->members[i], strerror(ENOENT));

		for (unsigned int i = 0; i < v->sb.nr_roles; i++) {
			if (v->sb.roles[i].state != SB_ROLE_ACTIVE)
				continue;
			active++;
			if (v->order[i] == SB_ROLE_NONE && left == SB_ROLE_NONE)
				left = i;
		}
		/*
		 * A spare given takes over a role left out: meant.  A member
		 * replaced in its role (retired) is given but plays none.
		 */
		unsigned int given =
			cfg->nr_members -
			(unsigned int)__builtin_popcountll(v->retired);

		if (given + cfg->nr_spares < active)
			return verr(errbuf, errlen, -EINVAL,
				    "volume '%s': %u member%s given, %u active "
				    "in its superblocks (role %u is not there): "
				    "name them all, or start it degraded "
				    "(--degraded, degraded = true)",
				    name, given, plural(given), active,
				    left == SB_ROLE_NONE ? 0 : left);
	}
	return 0;
}

/*
 * A mirror asked for (level = raid1|raid10) over members that have no
 * superblocks: made here, like bioctl create, when none of them exists
 * yet and a size is given; refused otherwise, since a mirror without
 * superblocks could not tell a stale copy from a good one.  *@sb gets the
 * new volume's superblock (role 0's).
 */
static int new_mirror_plan(const struct volume_config *cfg,
			   struct superblock *sb, char *errbuf, size_t errlen)
{
	struct sb_new_opts o = { .name = "", .level = cfg->level,
				 .copies = cfg->copies,
				 .chunk_bytes = cfg->chunk_bytes ?
							cfg->chunk_bytes :
							STRIPE_DEFAULT_CHUNK,
				 .size_bytes = cfg->size_bytes };
	const char *level = sb_level_name(cfg->level);
	char why[200];

	for (unsigned int i = 0; i < cfg->nr_members; i++)
		if (member_is_remote(cfg->members[i]) ||
		    !access(cfg->members[i], F_OK))
			return verr(errbuf, errlen, -EINVAL,
				    "level %s: member %s has no superblock; "
				    "make the mirror with bioctl create --level "
				    "%s, or name members that do not exist yet",
				    level, cfg->members[i], level);
	if (!cfg->size_bytes)
		return verr(errbuf, errlen, -EINVAL,
			    "level %s: a size is needed to create the "
			    "mirror's members",
			    level);
	if (cfg->copies && cfg->level == SB_LEVEL_RAID1 &&
	    cfg->copies != cfg->nr_members)
		return verr(errbuf, errlen, -EINVAL,
			    "copies %u: raid1 keeps a copy on every member (%u "
			    "here)",
			    cfg->copies, cfg->nr_members);
	/*
	 * Said here, not by sb_new: its "level" message would send the
	 * user to the level's line, and the copies are what is wrong.
	 */
	if (cfg->copies && cfg->level == SB_LEVEL_RAID10 &&
	    cfg->copies > cfg->nr_members)
		return verr(errbuf, errlen, -EINVAL,
			    "copies %u: more than the %u member%s (raid10 "
			    "keeps each copy on a member of its own)",
			    cfg->copies, cfg->nr_members,
			    plural(cfg->nr_members));
	if (sb_new(sb, cfg->nr_members, &o, why, sizeof(why)))
		return verr(errbuf, errlen, -EINVAL, "level %s: %s", level,
			    why);
	return 0;
}

/*
 * Does @cfg ask for a new mirror?  1 (with *@sb), 0, or -errno with a
 * message (a mirror asked of headerless members that exist, ...).
 */
static int wants_new_mirror(const struct volume_config *cfg,
			    struct superblock *sb, char *errbuf, size_t errlen)
{
	struct sb_volume *v;
	int r;

	if (!cfg->level_set || !sb_redundant(cfg->level)) {
		if (cfg->copies && cfg->level_set)
			return verr(errbuf, errlen, -EINVAL,
				    "copies %u: only raid1 and raid10 keep "
				    "copies",
				    cfg->copies);
		return 0;
	}
	v = malloc(sizeof(*v));
	if (!v)
		return verr(errbuf, errlen, -ENOMEM, "out of memory");
	r = sb_assemble(cfg->members, cfg->nr_members, cfg->remote_timeout_ms,
			v, errbuf, errlen);
	free(v);
	if (r != -ENOENT)
		return 0; /* superblocks (or their error): volume_plan's */
	r = new_mirror_plan(cfg, sb, errbuf, errlen);
	return r ? r : 1;
}

/*
 * Create the members of a new mirror, each noted in @made as soon as it
 * exists: on failure the caller's volume_unmake() removes them.
 */
static int new_mirror_create(const struct volume_config *cfg,
			     struct superblock *sb, struct volume_made *made,
			     char *errbuf, size_t errlen)
{
	unsigned int i;
	uint64_t bytes;
	int r = sb_member_bytes(sb, &bytes);

	for (i = 0; !r && i < cfg->nr_members; i++) {
		int fd = open(cfg->members[i],
			      O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);

		if (fd < 0) {
			r = -errno;
			break;
		}
		made->m[i].created = true;
		sb_set_role(sb, i);
		r = ftruncate(fd, (off_t)bytes) ? -errno :
						  sb_write_member(MDEV_FD(fd), sb);
		close(fd);
		if (r)
			break; /* @i names the member in the message */
	}
	if (!r)
		return 0;
	return verr(errbuf, errlen, r, "member %s: creating the mirror: %s",
		    cfg->members[i < cfg->nr_members ? i : 0], strerror(-r));
}

/*
 * Is role @role opened?  Active ones are; a rebuilding one only to go on
 * rebuilding, which a read-only volume does not do (it never writes).
 */
static bool role_used(const struct sb_volume *v, unsigned int role,
		      bool readonly)
{
	return v->state[role] == SB_ROLE_ACTIVE ||
	       (v->state[role] == SB_ROLE_REBUILDING && !readonly);
}

static bool member_in_service(const struct sb_volume *v, unsigned int i)
{
	for (unsigned int role = 0; role < v->sb.nr_roles; role++)
		if (v->order[role] == i)
			return v->state[role] != SB_ROLE_FAULTY;
	return false;
}

/*
 * A mirror's spare: an existing file or block device, large enough, not a
 * member nor another spare, holding no superblock (its contents will be
 * overwritten: refusing a superblock is what keeps a member of this or
 * another volume from being taken by mistake).
 */
static int check_spare(const struct volume_config *cfg, unsigned int i,
		       const struct sb_volume *v, const struct member_check *m,
		       struct member_id *ids, char *errbuf, size_t errlen)
{
	const char *path = cfg->spares[i], *why;
	struct superblock sb;
	uint64_t bytes = 0;
	char reason[200];
	int fd, r;

	if (!v->nr || !sb_redundant(v->sb.level))
		return verr(errbuf, errlen, -EINVAL,
			    "spare %s: only a raid1 or raid10 volume has "
			    "spares (bioctl create --level raid1 ...)",
			    path);
	if (member_is_remote(path))
		return verr(errbuf, errlen, -EINVAL,
			    "spare %s: a spare is a local file or block device",
			    path);
	r = member_identify(path, &ids[i]);
	if (!r && !ids[i].exists)
		r = -ENOENT;
	if (r)
		return verr(errbuf, errlen, r, "spare %s: %s", path,
			    strerror(-r));
	for (unsigned int j = 0; j < cfg->nr_members + i; j++) {
		const struct member_id *o = j < cfg->nr_members ?
						    &m[j].id :
						    &ids[j - cfg->nr_members];

		if (!o->canon)
			continue;
		why = member_overlap(&ids[i], o);
		if (why)
			return verr(errbuf, errlen, -EINVAL,
				    "spare %s: the same storage as %s %s (%s)",
				    path,
				    j < cfg->nr_members ? "member" : "spare",
				    j < cfg->nr_members ?
					    cfg->members[j] :
					    cfg->spares[j - cfg->nr_members],
				    why);
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return verr(errbuf, errlen, -errno, "spare %s: %s", path,
			    strerror(errno));
	r = sb_read(MDEV_FD(fd), &sb, reason, sizeof(reason));
	if (S_ISBLK(ids[i].st.st_mode))
		(void)ioctl(fd, BLKGETSIZE64, &bytes);
	else
		bytes = (uint64_t)ids[i].st.st_size;
	close(fd);
	if (!r && !memcmp(sb.volume_uuid, v->sb.volume_uuid, 16) &&
	    sb.role < v->sb.nr_roles &&
	    memcmp(v->sb.roles[sb.role].uuid, sb.member_uuid, 16))
		return verr(errbuf, errlen, -EINVAL,
			    "spare %s: a former member of volume '%s', "
			    "replaced in role %u; a spare is overwritten, so "
			    "it must hold no superblock",
			    path, v->sb.name, sb.role);
	if (!r && !memcmp(sb.volume_uuid, v->sb.volume_uuid, 16))
		return verr(errbuf, errlen, -EINVAL,
			    "spare %s: already role %u of volume '%s': give it "
			    "as a member",
			    path, sb.role, v->sb.name);
	if (!r)
		return verr(errbuf, errlen, -EINVAL,
			    "spare %s: holds a superblock of volume '%s'; a "
			    "spare is overwritten, so it must hold none",
			    path, sb.name);
	if (r != -ENOENT)
		return verr(errbuf, errlen, -EINVAL,
			    "spare %s: %s; a spare must hold no superblock",
			    path, reason);
	if (bytes < v->member_bytes)
		return verr(errbuf, errlen, -ENOSPC,
			    "spare %s: %llu bytes, a member of volume '%s' "
			    "needs %llu",
			    path, (unsigned long long)bytes, v->sb.name,
			    (unsigned long long)v->member_bytes);
	if (access(path, R_OK | W_OK))
		return verr(errbuf, errlen, -errno, "spare %s: %s", path,
			    strerror(errno));
	return 0;
}

static int check_spares(const struct volume_config *cfg,
			const struct sb_volume *v, const struct member_check *m,
			char *errbuf, size_t errlen)
{
	struct member_id *ids;
	int r = 0;

	if (!cfg->nr_spares)
		return 0;
	ids = calloc(cfg->nr_spares, sizeof(*ids));
	if (!ids)
		return verr(errbuf, errlen, -ENOMEM, "out of memory");
	for (unsigned int i = 0; i < cfg->nr_spares && !r; i++)
		r = check_spare(cfg, i, v, m, ids, errbuf, errlen);
	for (unsigned int i = 0; i < cfg->nr_spares; i++)
		member_id_release(&ids[i]);
	free(ids);
	return r;
}

/*
 * Is member @i of a mirror left out by the assembly (cut short,
 * unreadable, replaced)?  Its size is then none of the volume's concern.
 */
static bool left_out(const struct sb_volume *v, unsigned int i)
{
	if (!v->nr || !sb_redundant(v->sb.level))
		return false;
	for (unsigned int r = 0; r < v->sb.nr_roles; r++)
		if (v->order[r] == i)
			return false;
	return true;
}

/*
 * Every check that can be made without side effects.  On success *mp
 * holds what was learnt of each member and *need the bytes each member
 * must hold (0: no size given, use what they have); @v->nr is non-zero
 * for a volume with superblocks.
 */
static int volume_plan(const struct volume_config *cfg,
		       struct member_check **mp, uint64_t *chunkp,
		       uint64_t *needp, struct sb_volume *v, char *errbuf,
		       size_t errlen)
{
	unsigned int n = cfg->nr_members, i, j;
	uint64_t chunk = cfg->chunk_bytes ? cfg->chunk_bytes :
					    STRIPE_DEFAULT_CHUNK;
	struct member_check *m;
	struct stripe_geom g;
	const char *why;
	uint64_t need = 0;
	bool sb;
	int r;

	if (errbuf && errlen)
		errbuf[0] = '\0';
	if (!n)
		return verr(errbuf, errlen, -EINVAL, "no member files given");
	r = volume_superblocks(cfg, v, &sb, errbuf, errlen);
	if (r)
		return r;
	if (sb) {
		chunk = v->sb.chunk_bytes;
		need = v->member_bytes;
	} else {
		v->nr = 0;
	}
	/*
	 * Headerless members are raid0 (a new mirror has its superblocks by
	 * now): copies asked of them would be silently ignored.
	 */
	if (!sb && cfg->copies)
		return verr(errbuf, errlen, -EINVAL,
			    "copies %u: only raid1 and raid10 keep copies, and "
			    "members without superblocks are raid0",
			    cfg->copies);
	if (stripe_geom_init(&g, n, chunk))
		return verr(errbuf, errlen, -EINVAL,
			    "stripe-size %llu: must be a power of two from 4K to 1G",
			    (unsigned long long)chunk);
	if (cfg->size_bytes && !sb) {
		if (cfg->size_bytes % SECTOR_SIZE)
			return verr(errbuf, errlen, -EINVAL,
				    "size %llu: must be a multiple of 512",
				    (unsigned long long)cfg->size_bytes);
		/*
		 * Offsets are off_t on every path (pread, NBD clients), and
		 * NBD clients read the size as a signed 64-bit number.
		 */
		if (cfg->size_bytes > (uint64_t)INT64_MAX)
			return verr(errbuf, errlen, -EFBIG,
				    "size %llu: more than %lld bytes, the largest volume",
				    (unsigned long long)cfg->size_bytes,
				    (long long)INT64_MAX);
		if (stripe_member_bytes(&g, cfg->size_bytes, &need))
			return verr(errbuf, errlen, -EFBIG,
				    "size %llu: needs more than %lld bytes per member",
				    (unsigned long long)cfg->size_bytes,
				    (long long)INT64_MAX);
	}

	m = calloc(n, sizeof(*m));
	if (!m)
		return verr(errbuf, errlen, -ENOMEM, "out of memory");
	for (i = 0; i < n; i++) {
		/*
		 * A mirror's member out of service (missing, stale, faulty)
		 * is never opened: nothing about it can stop the volume.
		 */
		if (sb && sb_redundant(v->sb.level) && !member_in_service(v, i))
			continue;
		r = check_member(cfg, i, &m[i], errbuf, errlen);
		if (r)
			goto err;
		for (j = 0; j < i; j++) {
			if (!m[j].id.canon)
				continue; /* skipped above */
			why = member_overlap(&m[i].id, &m[j].id);
			if (!why)
				continue;
			if (why == same_file)
				r = verr(errbuf, errlen, -EINVAL,
					 "member %s: given twice (as %s too)",
					 cfg->members[i], cfg->members[j]);
			else
				r = verr(errbuf, errlen, -EINVAL,
					 "member %s: the same storage as member %s (%s)",
					 cfg->members[i], cfg->members[j],
					 why);
			goto err;
		}
		if ((m[i].id.exists || m[i].remote) && need &&
		    m[i].size_bytes < need && !left_out(v, i) &&
		    (cfg->readonly || S_ISBLK(m[i].id.st.st_mode) || sb ||
		     m[i].remote)) {
			r = verr(errbuf, errlen, -ENOSPC,
				 "member %s: %llu bytes, size %llu needs %llu per member",
				 cfg->members[i],
				 (unsigned long long)m[i].size_bytes,
				 (unsigned long long)(sb ? v->sb.size_bytes :
							   cfg->size_bytes),
				 (unsigned long long)need);
			goto err;
		}
		if (!need && m[i].size_bytes < chunk) {
			r = verr(errbuf, errlen, -ENOSPC,
				 "member %s: %llu bytes, smaller than one %llu-byte chunk",
				 cfg->members[i],
				 (unsigned long long)m[i].size_bytes,
				 (unsigned long long)chunk);
			goto err;
		}
	}
	if (!need) {
		r = default_size(cfg, m, chunk, errbuf, errlen);
		if (r)
			goto err;
	}
	r = check_spares(cfg, v, m, errbuf, errlen);
	if (r)
		goto err;
	for (i = 0; i < cfg->nr_faults; i++) {
		char rule_why[512];

		r = fault_rule_check(cfg->faults[i].kind, cfg->faults[i].text,
				     sb ? v->sb.nr_roles : n, rule_why,
				     sizeof(rule_why));
		if (r) {
			verr(errbuf, errlen, r, "%s = %s: %s",
			     fault_kind_name(cfg->faults[i].kind),
			     cfg->faults[i].text, rule_why);
			goto err;
		}
	}
	*mp = m;
	*chunkp = chunk;
	*needp = need;
	return 0;
err:
	members_free(cfg, m);
	return r;
}

/*
 * A timeout given to a volume with no remote or RBD member times nothing
 * out: refused, or the user believes local members have one.
 */
static int timeout_used(const struct volume_config *cfg, char *errbuf,
			size_t errlen)
{
	if (!cfg->remote_timeout_ms)
		return 0;
	for (unsigned int i = 0; i < cfg->nr_members; i++)
		if (member_is_remote(cfg->members[i]))
			return 0;
	for (unsigned int i = 0; i < cfg->nr_spares; i++)
		if (member_is_remote(cfg->spares[i]))
			return 0;
	return verr(errbuf, errlen, -EINVAL,
		    "timeout %g: no member is remote (nbd://..., rbd:...), "
		    "and only their requests time out",
		    cfg->remote_timeout_ms / 1000.0);
}

static int check_held(const struct volume_config *cfg, char *errbuf,
		      size_t errlen)
{
	struct member_check *m;
	struct sb_volume *v = malloc(sizeof(*v));
	struct volume_config plain = *cfg;
	struct superblock sb;
	uint64_t chunk, need;
	int r;

	if (!v)
		return verr(errbuf, errlen, -ENOMEM, "out of memory");
	r = timeout_used(cfg, errbuf, errlen);
	if (r) {
		free(v);
		return r;
	}
	r = wants_new_mirror(cfg, &sb, errbuf, errlen);
	if (r < 0) {
		free(v);
		return r;
	}
	/* A new mirror: the paths checked as new members of any volume. */
	if (r) {
		plain.level_set = false;
		plain.copies = 0;
	}
	r = volume_plan(&plain, &m, &chunk, &need, v, errbuf, errlen);
	if (!r)
		members_free(cfg, m);
	free(v);
	return r;
}

/* What every member of one volume is stored on (volume.h). */
struct volume_ids {
	unsigned int nr;
	struct member_id id[];
};

int volume_ids_get(struct volume_ids **out, const struct volume_config *cfg)
{
	struct volume_ids *v;
	unsigned int i;
	int r;

	v = calloc(1, sizeof(*v) + cfg->nr_members * sizeof(v->id[0]));
	if (!v)
		return -ENOMEM;
	for (i = 0; i < cfg->nr_members; i++, v->nr++) {
		r = member_identify(cfg->members[i], &v->id[i]);
		if (r) {
			member_id_release(&v->id[i]);
			volume_ids_free(v);
			return r;
		}
	}
	*out = v;
	return 0;
}

void volume_ids_free(struct volume_ids *v)
{
	for (unsigned int i = 0; v && i < v->nr; i++)
		member_id_release(&v->id[i]);
	free(v);
}

int volume_overlap(const struct volume_ids *a, const struct volume_ids *b,
		   struct volume_overlap *ov)
{
	const char *why;

	for (unsigned int i = 0; i < a->nr; i++) {
		for (unsigned int j = 0; j < b->nr; j++) {
			why = member_overlap(&a->id[i], &b->id[j]);
			if (why) {
				ov->member_a = i;
				ov->member_b = j;
				ov->why = why;
				return -EEXIST;
			}
		}
	}
	return 0;
}

/* What the plan decided, for the caller. */
static void volume_info_fill(struct volume_info *info,
			     const struct volume_config *cfg,
			     const struct sb_volume *v, uint64_t chunk)
{
	memset(info, 0, sizeof(*info));
	info->superblocks = v->nr != 0;
	info->chunk_bytes = chunk;
	info->nr_members = v->nr ? v->sb.nr_roles : cfg->nr_members;
	for (unsigned int i = 0; i < info->nr_members && i < 64; i++) {
		info->order[i] = v->nr ? v->order[i] : i;
		info->cut[i] = v->nr ? v->cut[i] : VOLUME_NO_MEMBER;
		info->cut_bytes[i] = v->nr ? v->cut_bytes[i] : 0;
		info->active[i] = !v->nr || v->state[i] == SB_ROLE_ACTIVE;
		info->rebuilding[i] = v->nr &&
				      v->state[i] == SB_ROLE_REBUILDING;
	}
	if (!v->nr)
		return;
	snprintf(info->name, sizeof(info->name), "%s", v->sb.name);
	sb_uuid_format(v->sb.volume_uuid, info->uuid);
	info->data_offset = v->sb.data_offset;
	info->member_bytes = v->member_bytes;
	info->level = v->sb.level;
	info->copies = v->sb.copies;
	info->resynced = sb_redundant(v->sb.level) && !v->clean &&
			 !cfg->readonly;
}

/*
 * Put the fault and delay rules between the stripe or mirror and each
 * member they name (@t by role; NULL for a member out of service).
 */
static int stack_faults(const struct volume_config *cfg,
			const struct sb_volume *v, struct target **t,
			unsigned int n, uint64_t chunk, bool mirror,
			char *errbuf, size_t errlen)
{
	struct fault_geom g = {
		.nr_members = n,
		.copies = mirror ? v->sb.copies : 1,
		.chunk_shift = (unsigned int)__builtin_ctzll(chunk),
		.data_offset = v->nr ? v->sb.data_offset : 0,
	};
	char name[SB_NAME_BYTES + 40];
	struct fault_set *set;
	int r;

	if (v->nr)
		sb_volume_name(v, name, sizeof(name));
	else
		snprintf(name, sizeof(name), "%s...", cfg->members[0]);
	r = fault_set_create(&set, cfg->faults, cfg->nr_faults, n, name,
			     errbuf, errlen);
	if (r)
		return r;
	for (unsigned int i = 0; i < n && !r; i++) {
		struct target *ft;

		if (!t[i] || !fault_set_covers(set, i))
			continue;
		r = fault_target_create(&ft, t[i], set, i, &g);
		if (r)
			verr(errbuf, errlen, r, "out of memory");
		else
			t[i] = ft;
	}
	fault_set_put(set); /* the fault targets hold it now */
	return r;
}

int volume_open(struct target **out, const struct volume_config *cfg,
		char *errbuf, size_t errlen)
{
	return volume_open_info(out, cfg, NULL, errbuf, errlen);
}

/*
 * A volume's remote members are probed several times as it is checked and
 * opened (assembly, the member check, the target's open): the RBD images
 * and the NBD connections stay open in between (rbd_hold, remote_hold); a
 * cluster connection or an NBD handshake each time would cost tens of
 * milliseconds a member, more over a WAN or TLS.
 */
void volume_hold(void)
{
	rbd_hold();
	remote_hold();
}

void volume_release(void)
{
	remote_release();
	rbd_release();
}

/* @path's superblock, if it is a local file or device that holds one. */
static bool sb_peek(const char *path, struct superblock *sb)
{
	char why[200];
	int fd, r;

	if (member_is_remote(path))
		return false;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	r = sb_read(MDEV_FD(fd), sb, why, sizeof(why));
	close(fd);
	return !r;
}

/*
 * A spare that a mirror put in a role while a server ran (it took over
 * from a failed member) is a member since, but the command line or the
 * configuration that started that server still names it a spare, and must
 * start the volume again: a service restarted after a takeover would stay
 * down otherwise.  Such a spare holds a superblock of the volume, the
 * newest role table among the local members given names it in its role
 * (faulty too: it failed since, and the volume starts without it, as
 * with any member recorded faulty), and no member given is that member
 * (the same file given twice: check_spare says so).  *@local gets @cfg
 * with those spares moved
 * to the end of the members (the member they replaced, if given, is left
 * out by the assembly: sb_volume.retired); *@names holds its arrays, for
 * the caller to free.  Nothing moves where nothing matches: check_spare
 * refuses.
 */
static int spares_promote(const struct volume_config *cfg,
			  struct volume_config *local, const char ***names)
{
	struct superblock newest, sb;
	unsigned int nm = cfg->nr_members, ns, i;
	bool have = false, *in_role;
	uint8_t (*given)[16];
	const char **a;

	*local = *cfg;
	*names = NULL;
	if (!cfg->nr_spares)
		return 0;
	given = calloc(cfg->nr_members, sizeof(*given));
	if (!given)
		return -ENOMEM;
	for (i = 0; i < cfg->nr_members; i++) {
		if (!sb_peek(cfg->members[i], &sb))
			continue;
		memcpy(given[i], sb.member_uuid, 16);
		if (!have || sb.events > newest.events) {
			newest = sb;
			have = true;
		}
	}
	if (!have || !sb_redundant(newest.level)) {
		free(given);
		return 0;
	}
	a = calloc(cfg->nr_members + cfg->nr_spares, sizeof(*a));
	in_role = calloc(cfg->nr_spares, sizeof(*in_role));
	if (!a || !in_role) {
		free(given);
		free(a);
		free(in_role);
		return -ENOMEM;
	}
	memcpy(a, cfg->members, cfg->nr_members * sizeof(*a));
	for (i = 0; i < cfg->nr_spares; i++) {
		in_role[i] = sb_peek(cfg->spares[i], &sb) &&
			     !memcmp(sb.volume_uuid, newest.volume_uuid, 16) &&
			     sb.role < newest.nr_roles &&
			     !memcmp(newest.roles[sb.role].uuid,
				     sb.member_uuid, 16);
		for (unsigned int j = 0; in_role[i] && j < cfg->nr_members;
		     j++)
			if (!memcmp(given[j], sb.member_uuid, 16))
				in_role[i] = false;
		if (in_role[i])
			a[nm++] = cfg->spares[i];
	}
	free(given);
	ns = nm;
	for (i = 0; i < cfg->nr_spares; i++)
		if (!in_role[i])
			a[ns++] = cfg->spares[i];
	free(in_role);
	if (nm == cfg->nr_members) {
		free(a);
		return 0;
	}
	local->members = a;
	local->nr_members = nm;
	local->spares = a + nm;
	local->nr_spares = ns - nm;
	*names = a;
	return 0;
}

/*
 * volume_info.order names a promoted spare by its place among @cfg's
 * spares (volume.h): @local's members past @cfg's are spares of @cfg.
 */
static void order_unpromote(struct volume_info *info,
			    const struct volume_config *cfg,
			    const struct volume_config *local)
{
	for (unsigned int r = 0; r < info->nr_members && r < 64; r++) {
		unsigned int *at[] = { &info->order[r], &info->cut[r] };

		for (unsigned int k = 0; k < 2; k++) {
			if (*at[k] == VOLUME_NO_MEMBER ||
			    *at[k] < cfg->nr_members)
				continue;
			for (unsigned int j = 0; j < cfg->nr_spares; j++)
				if (cfg->spares[j] == local->members[*at[k]]) {
					*at[k] = cfg->nr_members + j;
					break;
				}
		}
	}
}

int volume_check(const struct volume_config *cfg, char *errbuf,
		 size_t errlen)
{
	struct volume_config local;
	const char **names;
	int r;

	volume_hold();
	r = spares_promote(cfg, &local, &names);
	if (r)
		r = verr(errbuf, errlen, r, "out of memory");
	else
		r = check_held(&local, errbuf, errlen);
	volume_release();
	free(names);
	return r;
}

static int open_held(struct target **out, const struct volume_config *cfg,
		     struct volume_info *info, struct volume_made **madep,
		     char *errbuf, size_t errlen);

int volume_open_info(struct target **out, const struct volume_config *cfg,
		     struct volume_info *info, char *errbuf, size_t errlen)
{
	return volume_open_made(out, cfg, info, NULL, errbuf, errlen);
}

int volume_open_made(struct target **out, const struct volume_config *cfg,
		     struct volume_info *info, struct volume_made **made,
		     char *errbuf, size_t errlen)
{
	struct volume_config local;
	const char **names;
	int r;

	volume_hold();
	r = spares_promote(cfg, &local, &names);
	if (r) {
		if (made)
			*made = NULL;
		r = verr(errbuf, errlen, r, "out of memory");
	} else {
		r = open_held(out, &local, info, made, errbuf, errlen);
	}
	if (!r && info)
		order_unpromote(info, cfg, &local);
	volume_release();
	free(names);
	return r;
}

static int open_held(struct target **out, const struct volume_config *cfg,
		     struct volume_info *info, struct volume_made **madep,
		     char *errbuf, size_t errlen)
{
	unsigned int n = cfg->nr_members, opened = 0, i;
	struct member_check *m = NULL;
	struct target **t = NULL, *top = NULL;
	struct file_target_opts fopts = { .readonly = cfg->readonly,
					  .direct = cfg->direct,
					  .no_inline = cfg->no_inline,
					  .stats_parent = cfg->stats,
					  .trace_parent = cfg->trace_id };
	struct remote_opts ropts = { .readonly = cfg->readonly,
				     .timeout_ms = cfg->remote_timeout_ms,
				     .stats_parent = cfg->stats,
				     .trace_parent = cfg->trace_id };
	const char **paths = NULL;
	struct sb_volume *v = malloc(sizeof(*v));
	struct volume_made *made = made_alloc(cfg);
	struct superblock newsb;
	uint64_t chunk, need;
	bool mirror;
	int r;

	if (madep)
		*madep = NULL;
	if (!v || !made) {
		r = verr(errbuf, errlen, -ENOMEM, "out of memory");
		goto out;
	}
	/* A new mirror: everything checked before its members are made. */
	r = wants_new_mirror(cfg, &newsb, errbuf, errlen);
	if (r > 0) {
		r = volume_check(cfg, errbuf, errlen);
		if (!r)
			r = new_mirror_create(cfg, &newsb, made, errbuf,
					      errlen);
	}
	if (!r)
		r = volume_plan(cfg, &m, &chunk, &need, v, errbuf, errlen);
	if (r)
		goto out;
	if (v->left_out[0]) {
		char name[SB_NAME_BYTES + 40];

		sb_volume_name(v, name, sizeof(name));
		target_notice(TARGET_NOTICE_ERROR,
			      "volume '%s': %s: left out, its role out of "
			      "service until rebuilt",
			      name, v->left_out);
	}
	for (i = 0; i < cfg->nr_members && i < 64; i++) {
		char name[SB_NAME_BYTES + 40];

		if (!(v->retired >> i & 1))
			continue;
		sb_volume_name(v, name, sizeof(name));
		target_notice(TARGET_NOTICE_INFO,
			      "volume '%s': member %s was replaced in its "
			      "role and is no longer part of it: left out "
			      "(take it off the member list)",
			      name, cfg->members[i]);
	}
	mirror = v->nr && sb_redundant(v->sb.level);
	/*
	 * A mirror's members were checked for size: a read that meets the
	 * end now is a member cut short, to be answered from another copy.
	 */
	fopts.eof_error = mirror;
	n = v->nr ? v->sb.nr_roles : n;
	t = calloc(n, sizeof(*t));
	paths = calloc(n, sizeof(*paths));
	if (!t || !paths) {
		r = verr(errbuf, errlen, -ENOMEM, "out of memory");
		goto out;
	}
	/*
	 * Stripe order: as given, or by the roles the superblocks name (a
	 * mirror's roles out of service get no path: never opened).
	 */
	for (i = 0; i < n; i++)
		paths[i] = !v->nr ? cfg->members[i] :
			   !role_used(v, i, cfg->readonly) ? NULL :
			   cfg->members[v->order[i]];

	/* Everything checked: now create and extend. */
	for (i = 0; i < n && need && !v->nr; i++) {
		r = extend_member(cfg->members[i], &m[i], need, &made->m[i]);
		if (r) {
			verr(errbuf, errlen, r, "member %s: %s", cfg->members[i],
			     strerror(-r));
			goto out;
		}
	}
	for (i = 0; i < n; i++, opened++) {
		if (!paths[i])
			continue; /* a mirror's member out of service */
		if (member_is_remote(paths[i])) {
			r = (remote_uri(paths[i]) ? remote_target_open :
						    rbd_target_open)(
				&t[i], paths[i], &ropts, errbuf, errlen);
			if (r)
				goto out;
			continue;
		}
		r = file_target_open(&t[i], paths[i], &fopts);
		if (r) {
			verr(errbuf, errlen, r, "member %s: %s", paths[i],
			     strerror(-r));
			goto out;
		}
		/*
		 * One writer a volume: a second server, or bioctl convert or
		 * create, writing the same members would interleave with us.
		 * A self-describing volume's lock is its sb_target's; one
		 * without superblocks holds it on the data descriptor.
		 */
		if (!v->nr && !cfg->readonly && !cfg->no_lock) {
			r = mdev_lock_say(MDEV_FD(to_file_target(t[i])->fd),
					  "member", paths[i], errbuf, errlen);
			if (r) {
				opened++; /* t[i] is open: the undo closes it */
				goto out;
			}
		}
	}
	if (cfg->nr_faults) {
		r = stack_faults(cfg, v, t, n, chunk, mirror, errbuf, errlen);
		if (r)
			goto out;
	}
	if (mirror) {
		uint8_t state[SB_MAX_ROLES];
		uint64_t cp[SB_MAX_ROLES];
		char name[SB_NAME_BYTES + 40];

		for (i = 0; i < n; i++) {
			state[i] = v->state[i] == SB_ROLE_ACTIVE ?
					   MIRROR_ACTIVE :
				   role_used(v, i, cfg->readonly) ?
					   MIRROR_REBUILDING :
					   MIRROR_FAULTY;
			cp[i] = v->sb.roles[i].checkpoint;
		}
		sb_volume_name(v, name, sizeof(name));
		r = mirror_target_create(&top, t, state, cp, n, v->sb.copies,
					 chunk, v->sb.size_bytes,
					 v->sb.data_offset, name);
		if (!r && cfg->readonly && !v->clean) {
			/* Not resynced (read-only): say what is read. */
			target_notice(TARGET_NOTICE_INFO,
				      "volume '%s': not clean (the copies may "
				      "differ where the last writes went); "
				      "read-only, so not resynced: every read "
				      "comes from the first live copy",
				      name);
			mirror_read_primary(top);
		}
	} else {
		r = stripe_target_create(&top, t, n, chunk,
					 v->nr ? v->sb.size_bytes :
						 cfg->size_bytes,
					 v->nr ? v->sb.data_offset : 0);
	}
	if (r) {
		verr(errbuf, errlen, r, "members too small for a %llu-byte stripe",
		     (unsigned long long)n * chunk);
		goto out;
	}
	opened = 0; /* the stripe or mirror owns them now */
	if (v->nr && !cfg->readonly) {
		struct target *sv = NULL;

		r = sbvol_create(&sv, top, v, paths, cfg->spares,
				 cfg->nr_spares, &fopts, cfg->remote_timeout_ms,
				 errbuf, errlen);
		if (r) {
			target_destroy(top);
			goto out;
		}
		top = sv;
	}
	if (info)
		volume_info_fill(info, cfg, v, chunk);
	*out = top;
out:
	for (i = 0; t && i < opened; i++)
		target_destroy(t[i]);
	members_free(cfg, m);
	/* Once the members are closed: a failed open leaves no trace. */
	if (r)
		volume_unmake(made);
	else if (madep && made_any(made))
		*madep = made;
	else
		volume_made_free(made);
	free(paths);
	free(t);
	free(v);
	return r;
}
