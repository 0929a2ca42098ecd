// SPDX-License-Identifier: MIT
/*
 * volume.c - turn a volume definition (member paths, chunk, size) into a
 * stripe target, checking everything before touching any file.
 *
 * Order matters for "a config mistake loses nothing": first every check
 * that can be made without side effects, then create/extend members (never
 * shrink), then open.  If a later step fails, members this call created
 * are removed again.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <linux/fs.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

struct member_check {
	char *canon; /* absolute path, for duplicate detection */
	bool exists;
	bool created;
	struct stat st;
	uint64_t size_bytes;
};

static int verr(char *buf, size_t len, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int verr(char *buf, size_t len, int err, const char *fmt, ...)
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

static int check_member(const struct volume_config *cfg, unsigned int i,
			struct member_check *m, char *errbuf, size_t errlen)
{
	const char *path = cfg->members[i];
	int fd;

	if (!path || !*path)
		return verr(errbuf, errlen, -EINVAL, "member %u: empty path",
			    i + 1);
	m->canon = canonical_path(path);
	if (!m->canon)
		return verr(errbuf, errlen, -errno ? -errno : -ENOENT,
			    "member %s: %s", path,
			    strerror(errno ? errno : ENOENT));
	if (stat(path, &m->st) == 0) {
		m->exists = true;
		if (S_ISREG(m->st.st_mode)) {
			m->size_bytes = (uint64_t)m->st.st_size;
		} else if (S_ISBLK(m->st.st_mode)) {
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
	} else if (errno != ENOENT) {
		return verr(errbuf, errlen, -errno, "member %s: %s", path,
			    strerror(errno));
	} else if (!cfg->size_bytes || cfg->readonly) {
		/* Only a volume with a size may create its members. */
		return verr(errbuf, errlen, -ENOENT, "member %s: %s", path,
			    strerror(ENOENT));
	}
	return 0;
}

static bool same_member(const struct member_check *a,
			const struct member_check *b)
{
	if (a->exists && b->exists && a->st.st_dev == b->st.st_dev &&
	    a->st.st_ino == b->st.st_ino)
		return true;
	return strcmp(a->canon, b->canon) == 0;
}

/* Create or grow @path to @size (sparse).  Never shrinks. */
static int extend_member(const char *path, struct member_check *m,
			 uint64_t size)
{
	int fd, r = 0;

	if (m->exists && (S_ISBLK(m->st.st_mode) || m->size_bytes >= size))
		return 0;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | (m->exists ? 0 : O_EXCL),
		  0644);
	if (fd < 0)
		return -errno;
	if (!m->exists)
		m->created = true;
	if (ftruncate(fd, (off_t)size))
		r = -errno;
	close(fd);
	return r;
}

static void members_free(const struct volume_config *cfg,
			 struct member_check *m, bool unlink_created)
{
	for (unsigned int i = 0; m && i < cfg->nr_members; i++) {
		if (unlink_created && m[i].created)
			unlink(cfg->members[i]);
		free(m[i].canon);
	}
	free(m);
}

/*
 * Every check that can be made without side effects.  On success *mp
 * holds what was learnt of each member and *need the bytes each member
 * must hold (0: no size given, use what they have).
 */
static int volume_plan(const struct volume_config *cfg,
		       struct member_check **mp, uint64_t *chunkp,
		       uint64_t *needp, char *errbuf, size_t errlen)
{
	unsigned int n = cfg->nr_members, i, j;
	uint64_t chunk = cfg->chunk_bytes ? cfg->chunk_bytes :
					    STRIPE_DEFAULT_CHUNK;
	struct member_check *m;
	struct stripe_geom g;
	uint64_t need = 0;
	int r;

	if (errbuf && errlen)
		errbuf[0] = '\0';
	if (!n)
		return verr(errbuf, errlen, -EINVAL, "no member files given");
	if (stripe_geom_init(&g, n, chunk))
		return verr(errbuf, errlen, -EINVAL,
			    "stripe-size %llu: must be a power of two from 4K to 1G",
			    (unsigned long long)chunk);
	if (cfg->size_bytes) {
		if (cfg->size_bytes % SECTOR_SIZE)
			return verr(errbuf, errlen, -EINVAL,
				    "size %llu: must be a multiple of 512",
				    (unsigned long long)cfg->size_bytes);
		if (stripe_member_bytes(&g, cfg->size_bytes, &need))
			return verr(errbuf, errlen, -EFBIG,
				    "size %llu: too large for the members",
				    (unsigned long long)cfg->size_bytes);
	}

	m = calloc(n, sizeof(*m));
	if (!m)
		return verr(errbuf, errlen, -ENOMEM, "out of memory");
	for (i = 0; i < n; i++) {
		r = check_member(cfg, i, &m[i], errbuf, errlen);
		if (r)
			goto err;
		for (j = 0; j < i; j++) {
			if (same_member(&m[i], &m[j])) {
				r = verr(errbuf, errlen, -EINVAL,
					 "member %s: given twice (as %s too)",
					 cfg->members[i], cfg->members[j]);
				goto err;
			}
		}
		if (m[i].exists && need && m[i].size_bytes < need &&
		    (cfg->readonly || S_ISBLK(m[i].st.st_mode))) {
			r = verr(errbuf, errlen, -ENOSPC,
				 "member %s: %llu bytes, size %llu needs %llu per member",
				 cfg->members[i],
				 (unsigned long long)m[i].size_bytes,
				 (unsigned long long)cfg->size_bytes,
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
	*mp = m;
	*chunkp = chunk;
	*needp = need;
	return 0;
err:
	members_free(cfg, m, false);
	return r;
}

int volume_check(const struct volume_config *cfg, char *errbuf,
		 size_t errlen)
{
	struct member_check *m;
	uint64_t chunk, need;
	int r = volume_plan(cfg, &m, &chunk, &need, errbuf, errlen);

	if (!r)
		members_free(cfg, m, false);
	return r;
}

int volume_open(struct target **out, const struct volume_config *cfg,
		char *errbuf, size_t errlen)
{
	unsigned int n = cfg->nr_members, opened = 0, i;
	struct member_check *m = NULL;
	struct target **t, *stripe;
	struct file_target_opts fopts = { .readonly = cfg->readonly,
					  .direct = cfg->direct,
					  .no_inline = cfg->no_inline };
	uint64_t chunk, need;
	int r;

	r = volume_plan(cfg, &m, &chunk, &need, errbuf, errlen);
	if (r)
		return r;
	t = calloc(n, sizeof(*t));
	if (!t) {
		r = verr(errbuf, errlen, -ENOMEM, "out of memory");
		goto out;
	}

	/* Everything checked: now create and extend. */
	for (i = 0; i < n && need; i++) {
		r = extend_member(cfg->members[i], &m[i], need);
		if (r) {
			verr(errbuf, errlen, r, "member %s: %s", cfg->members[i],
			     strerror(-r));
			goto out;
		}
	}
	for (i = 0; i < n; i++, opened++) {
		r = file_target_open(&t[i], cfg->members[i], &fopts);
		if (r) {
			verr(errbuf, errlen, r, "member %s: %s", cfg->members[i],
			     strerror(-r));
			goto out;
		}
	}
	r = stripe_target_create(&stripe, t, n, chunk, cfg->size_bytes);
	if (r) {
		verr(errbuf, errlen, r, "members too small for a %llu-byte stripe",
		     (unsigned long long)(n * chunk));
		goto out;
	}
	opened = 0; /* the stripe owns them now */
	*out = stripe;
out:
	for (i = 0; t && i < opened; i++)
		target_destroy(t[i]);
	members_free(cfg, m, r != 0);
	free(t);
	return r;
}
