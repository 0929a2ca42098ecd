// SPDX-License-Identifier: MIT
/*
 * rbdlib.c - binds librbd and librados at run time (see rbdlib.h for why).
 *
 * The libraries are never closed: librados starts threads and registers
 * exit handlers that must find their code mapped until the process ends.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#include "internal.h"
#include "rbdlib.h"

/* The sonames of the ABI the headers describe; a packager may override. */
#ifndef BIONBD_LIBRADOS_SONAME
#define BIONBD_LIBRADOS_SONAME "librados.so.2"
#endif
#ifndef BIONBD_LIBRBD_SONAME
#define BIONBD_LIBRBD_SONAME "librbd.so.1"
#endif

struct rbdlib rbdlib;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[512]; /* empty: loaded */

static void set_error(void)
{
	const char *e = dlerror();

	snprintf(load_error, sizeof(load_error), "%s", e ? e : "not loaded");
}

static void *load_so(const char *soname)
{
	void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);

	if (!h)
		set_error();
	return h;
}

static void load(void)
{
	struct rbdlib lib = { 0 };
	void *rados, *rbd;

	rados = load_so(BIONBD_LIBRADOS_SONAME);
	if (!rados)
		return;
	rbd = load_so(BIONBD_LIBRBD_SONAME);
	if (!rbd)
		return;
#define RBDLIB_SYM(handle, f)                                                \
	if (!(*(void **)&lib.f = dlsym(handle, #f))) {                       \
		set_error();                                                 \
		return;                                                      \
	}
#define RBDLIB_RADOS_SYM(f) RBDLIB_SYM(rados, f)
#define RBDLIB_RBD_SYM(f) RBDLIB_SYM(rbd, f)
	RBDLIB_RADOS_FUNCS(RBDLIB_RADOS_SYM)
	RBDLIB_RBD_FUNCS(RBDLIB_RBD_SYM)
#undef RBDLIB_RBD_SYM
#undef RBDLIB_RADOS_SYM
#undef RBDLIB_SYM
	rbdlib = lib;
}

int rbdlib_load(const char *member, char *errbuf, size_t errlen)
{
	pthread_once(&load_once, load);
	if (!load_error[0])
		return 0;
	return verr(errbuf, errlen, -ELIBACC,
		    "member %s: RBD members need librbd and librados (Debian packages librbd1 and librados2): %s",
		    member, load_error);
}
