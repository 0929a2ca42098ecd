// SPDX-License-Identifier: MIT
/*
 * path.c - relative paths joined to the directory they were given in
 * (path.h says why).  The syntax of remote members stays with their
 * targets: remote.c and rbd.c rewrite their own.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bionbd/path.h>

#include "internal.h"

int path_absolute(const char *path, const char *dir, char **out)
{
	char *cwd = NULL;
	size_t n;
	int r = 0;

	*out = NULL;
	if (!path[0] || path[0] == '/') {
		*out = strdup(path);
		return *out ? 0 : -ENOMEM;
	}
	if (!dir) {
		cwd = getcwd(NULL, 0);
		if (!cwd)
			return -errno;
		dir = cwd;
	}
	/* "./d0" is d0: the name shown then reads as the user meant it. */
	while (path[0] == '.' && path[1] == '/')
		path += 2 + strspn(path + 2, "/");
	n = strlen(dir);
	if (asprintf(out, "%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/",
		     path) < 0) {
		*out = NULL;
		r = -ENOMEM;
	}
	free(cwd);
	return r;
}

int memstream_end(FILE *f, char **buf, int r, char **out)
{
	if (fclose(f) && !r)
		r = -ENOMEM;
	if (!r && !*buf)
		r = -ENOMEM;
	if (r) {
		free(*buf);
		*buf = NULL;
		return r;
	}
	*out = *buf;
	return 0;
}

int member_absolute(const char *member, const char *dir, char **out)
{
	char *cwd = NULL;
	int r;

	*out = NULL;
	if (!member_is_remote(member))
		return path_absolute(member, dir, out);
	if (!dir) {
		cwd = getcwd(NULL, 0);
		if (!cwd)
			return -errno;
		dir = cwd;
	}
	r = remote_uri(member) ? remote_uri_absolute(member, dir, out) :
				 rbd_member_absolute(member, dir, out);
	free(cwd);
	return r;
}

/* @path's directory, with its slash, into @buf; false when too long. */
static bool path_dir(const char *path, const char *slash, char *buf,
		     size_t len)
{
	size_t n = (size_t)(slash - path) + 1;

	if (n >= len)
		return false;
	memcpy(buf, path, n);
	buf[n] = '\0';
	return true;
}

bool path_same_name(const char *a, const char *b)
{
	const char *sa = strrchr(a, '/'), *sb = strrchr(b, '/');
	char da[4096], db[4096];
	struct stat ta, tb;

	if (!strcmp(a, b))
		return true;
	if (!sa || !sb || strcmp(sa, sb) || !path_dir(a, sa, da, sizeof(da)) ||
	    !path_dir(b, sb, db, sizeof(db)))
		return false;
	return !stat(da, &ta) && !stat(db, &tb) && ta.st_dev == tb.st_dev &&
	       ta.st_ino == tb.st_ino;
}
