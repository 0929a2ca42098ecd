/* SPDX-License-Identifier: MIT */
/*
 * path.h - relative paths made absolute once, where they are given.
 *
 * A daemon changes to / once it has forked, and opens (a remote member's
 * socket at each reconnection, a Ceph configuration when it connects)
 * or removes some of its files long after: a path that meant something
 * where it was given must mean the same there.  So front ends join every relative path to the directory
 * it was given relative to (the one they started in, or a configuration
 * file's), before anything uses it.  Paths are joined, not resolved: a
 * symlink, or a file that does not exist yet, stays what it was.
 */
#ifndef BIONBD_PATH_H
#define BIONBD_PATH_H

#include <stdbool.h>

/**
 * path_absolute - @path, joined to @dir when it is relative
 * @dir: an absolute directory; NULL: the current one
 * @out: receives the path; the caller owns it (free)
 *
 * An absolute or empty @path is copied as it is; a leading "./" is
 * dropped.  Returns 0 or -errno (-ENOMEM, or getcwd's).
 */
int path_absolute(const char *path, const char *dir, char **out);

/**
 * member_absolute - @member with the local files it names made absolute
 * @dir: as path_absolute's
 * @out: receives the member; the caller owns it (free)
 *
 * A file's path is path_absolute's; an NBD URI's socket=, tls-psk-file=
 * and tls-certificates= are joined to @dir (percent-encoded); an RBD
 * member's conf=, keyring= and Ceph options that name a file (keyfile=,
 * admin_socket=, log_file=, ...: rbd.c's list) too, each item of a
 * list alone ('\:' for a colon; "$..." and "~..." are Ceph's to expand).
 * Everything else is kept as written.  Returns 0 or -errno.
 */
int member_absolute(const char *member, const char *dir, char **out);

/**
 * path_same_name - whether the absolute paths @a and @b name one entry of
 * one directory, however spelt ("d/../d/x", a linked directory)
 *
 * The last component is compared, not followed: a file that is renamed
 * into place replaces a link there rather than writing through it.  For
 * two files a server writes, which would destroy each other at one name.
 */
bool path_same_name(const char *a, const char *b);

#endif /* BIONBD_PATH_H */
