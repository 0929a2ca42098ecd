/* SPDX-License-Identifier: MIT */
/*
 * rbdlib.h - librbd and librados, bound when the first RBD member is used
 * rather than when the program starts.
 *
 * Linked the usual way, librbd brings some forty libraries (Ceph's common
 * code, Boost, ICU, RDMA) into every bionbd and nbdkit process: 20 MiB of
 * resident memory and tens of milliseconds of start-up that a volume of
 * files or remote NBD members never uses.  So only the headers are used
 * at build time; the functions come from dlopen, once, in rbdlib_load.
 * The struct members carry librbd's own names and types (__typeof__ of
 * the header's prototypes), so a call reads as the library documents it:
 * rbdlib.rbd_open(...).
 */
#ifndef BIONBD_RBDLIB_H
#define BIONBD_RBDLIB_H

#include <stddef.h>
#include <rados/librados.h>
#include <rbd/librbd.h>

#define RBDLIB_RADOS_FUNCS(X)                                             \
	X(rados_create) X(rados_conf_read_file) X(rados_conf_set)         \
	X(rados_connect) X(rados_shutdown) X(rados_ioctx_create)          \
	X(rados_ioctx_destroy) X(rados_ioctx_set_namespace)               \
	X(rados_get_instance_id)

#define RBDLIB_RBD_FUNCS(X)                                               \
	X(rbd_open) X(rbd_open_read_only) X(rbd_close) X(rbd_get_size)    \
	X(rbd_get_features) X(rbd_get_flags) X(rbd_stat)                  \
	X(rbd_get_stripe_count) X(rbd_get_overlap)                        \
	X(rbd_diff_iterate2) X(rbd_watchers_list)                         \
	X(rbd_watchers_list_cleanup)                                      \
	X(rbd_read) X(rbd_write) X(rbd_write_zeroes) X(rbd_flush)         \
	X(rbd_is_exclusive_lock_owner) X(rbd_lock_release)                \
	X(rbd_aio_create_completion) X(rbd_aio_release)                   \
	X(rbd_aio_get_return_value) X(rbd_aio_readv) X(rbd_aio_writev)    \
	X(rbd_aio_discard) X(rbd_aio_write_zeroes) X(rbd_aio_flush)

struct rbdlib {
#define RBDLIB_MEMBER(f) __typeof__(f) *f;
	RBDLIB_RADOS_FUNCS(RBDLIB_MEMBER)
	RBDLIB_RBD_FUNCS(RBDLIB_MEMBER)
#undef RBDLIB_MEMBER
};

/* Filled by the first successful rbdlib_load; read-only after it. */
extern struct rbdlib rbdlib;

/*
 * Loads both libraries once per process (later calls return the first
 * outcome).  Returns 0, or -ELIBACC with a message naming @member, the
 * package to install and the loader's reason.
 */
int rbdlib_load(const char *member, char *errbuf, size_t errlen);

#endif
