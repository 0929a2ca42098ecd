// SPDX-License-Identifier: MIT
/*
 * bio.c - nbdkit-bio-plugin: serve striped volumes through nbdkit, every
 * NBD request turned into a bio built on nbdkit's own buffer.
 *
 *   nbdkit bio file=A file=B ... [stripe-size=64K] [size=4G]
 *              [backend=io_uring|threads] [read-only=true] [description=..]
 *   nbdkit bio conf=FILE.conf [export=NAME] [backend=...]
 *
 * Threading.  The volumes are opened once, in .get_ready, before nbdkit
 * forks; a connection's handle is just a pointer to its volume, so the
 * .open/.close pair nbdkit runs for NBD_OPT_INFO and again for NBD_OPT_GO
 * costs nothing and touches no file.  Thread model PARALLEL: each nbdkit
 * worker thread lazily makes its own ioq on its first request and waits for
 * its bios in it with submit_bio_wait(), so a request never changes thread
 * and nothing is locked on the data path.  nbdkit starts fresh worker
 * threads for every connection, so a thread's ioq is destroyed when the
 * thread exits (a pthread key destructor); whatever is left goes at
 * .unload.
 *
 * Alignment.  The engine addresses 512-byte sectors; we advertise a minimum
 * block size of 512 and well-behaved clients stay aligned.  nbdkit passes
 * any request on regardless, so unaligned ones are still served correctly:
 * reads go through 512-byte bounce sectors at the ragged ends; writes and
 * zeroes read-modify-write those end sectors under one mutex (only
 * unaligned requests take it: two unaligned writes into the same sector
 * must not lose each other's bytes, while an aligned write covering that
 * sector overlaps the unaligned one byte-wise, so NBD leaves their order
 * unspecified anyway); trims shrink to the whole sectors inside (a trim is
 * advisory); cache and block status widen to whole sectors.
 *
 * Errors: the engine returns -errno; we set errno (errno_is_preserved) and
 * return -1.  Member errors are reported by the engine's error hook, which
 * we point at nbdkit_error with the member's path and offset.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include <bionbd/bio.h>
#include <bionbd/config.h>
#include <bionbd/ioq.h>
#include <bionbd/target.h>
#include <bionbd/volume.h>

#ifndef BIONBD_VERSION
#define BIONBD_VERSION "unknown"
#endif

#define SECTOR_MASK ((uint64_t)SECTOR_SIZE - 1)
#define BIO_PREFERRED_BLOCK 4096u
#define BIO_MAX_BLOCK (32u << 20)
/* Largest sector-aligned span one bio can describe (bi_size is 32 bits). */
#define BIO_MAX_SPAN ((uint64_t)UINT32_MAX & ~SECTOR_MASK)

#define unlikely(x) __builtin_expect(!!(x), 0)
#define likely(x) __builtin_expect(!!(x), 1)

/* One served volume; a connection's handle points at one of these. */
struct bio_volume {
	const struct conf_export *exp;
	struct target *t;
};

/* -------- configuration (set before .get_ready, read-only afterwards) */

static struct conf_export cmdline; /* file=, stripe-size=, ... */
static unsigned int cmdline_keys;
static char *conf_path;
static char *export_name;
static struct conf *conf;
static enum ioq_backend backend = IOQ_IO_URING;
static bool backend_set;

static struct bio_volume *volumes;
static unsigned int nr_volumes;

/* -------- per-thread I/O queues */

struct thread_ioq {
	struct ioq *q;
	struct thread_ioq *next;
	struct thread_ioq **pprev;
};

static pthread_key_t ioq_key;
static bool ioq_key_live;
static pthread_mutex_t ioq_lock = PTHREAD_MUTEX_INITIALIZER;
static struct thread_ioq *ioq_list; /* every live thread's queue */
static __thread struct thread_ioq *my_ioq;

/* Serialises read-modify-write of partial sectors (see the top). */
static pthread_mutex_t rmw_lock = PTHREAD_MUTEX_INITIALIZER;

static void thread_ioq_free_locked(struct thread_ioq *w)
{
	*w->pprev = w->next;
	if (w->next)
		w->next->pprev = w->pprev;
	ioq_destroy(w->q);
	free(w);
}

/* Thread exit: every bio of this thread has ended (we only wait). */
static void thread_ioq_destructor(void *p)
{
	pthread_mutex_lock(&ioq_lock);
	thread_ioq_free_locked(p);
	pthread_mutex_unlock(&ioq_lock);
	ioq_set_current(NULL);
	my_ioq = NULL;
}

static int thread_ioq_create(void)
{
	struct thread_ioq *w;
	int r;

	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	r = ioq_create(&w->q, backend, 0);
	if (r) {
		free(w);
		nbdkit_error("cannot create an I/O queue (backend %s): %s",
			     ioq_backend_name(backend), strerror(-r));
		return r;
	}
	pthread_mutex_lock(&ioq_lock);
	r = pthread_setspecific(ioq_key, w);
	if (r) {
		pthread_mutex_unlock(&ioq_lock);
		ioq_destroy(w->q);
		free(w);
		return -r;
	}
	w->next = ioq_list;
	if (ioq_list)
		ioq_list->pprev = &w->next;
	w->pprev = &ioq_list;
	ioq_list = w;
	pthread_mutex_unlock(&ioq_lock);
	ioq_set_current(w->q);
	my_ioq = w;
	return 0;
}

/* Make sure this thread has a current ioq; the first call creates it. */
static inline int thread_ioq(void)
{
	if (likely(my_ioq))
		return 0;
	return thread_ioq_create();
}

/* -------- bios */

/*
 * One bio over [offset, offset + count) of @v, built on @buf when the op
 * carries data, submitted and waited for on this thread's queue.  The
 * bounds are the caller's: sector-aligned and inside the volume.
 */
static int do_bio(struct bio_volume *v, unsigned int opf, void *buf,
		  uint64_t count, uint64_t offset, struct bio_extents *ext)
{
	struct bio *bio;
	int r;

	r = thread_ioq();
	if (r)
		return r;
	bio = bio_alloc(buf ? 1 : 0, opf);
	if (!bio) {
		nbdkit_error("bio_alloc: out of memory");
		return -ENOMEM;
	}
	bio->bi_iter.bi_sector = offset >> SECTOR_SHIFT;
	if (buf) {
		r = bio_add_buf(bio, buf, (unsigned int)count);
		if (r)
			goto out;
	} else {
		bio->bi_iter.bi_size = (uint32_t)count;
	}
	bio->bi_ext = ext;
	r = submit_bio_wait(v->t, bio);
out:
	bio_put(bio);
	return r;
}

/*
 * How an unaligned request [off, off + count) sits on sectors: the span of
 * whole sectors it touches, the whole sectors inside it, and the partial
 * sector at each end (which may be the same sector).
 */
struct span {
	uint64_t start, end; /* sector-aligned span covering the request */
	uint64_t mid_start, mid_end; /* whole sectors inside; may be empty */
	bool head, tail;	     /* partial first / last sector */
	bool one;		     /* head and tail are the same sector */
};

static void span_of(uint64_t off, uint64_t count, struct span *s)
{
	uint64_t end = off + count;

	s->start = off & ~SECTOR_MASK;
	s->end = (end + SECTOR_MASK) & ~SECTOR_MASK;
	s->mid_start = (off + SECTOR_MASK) & ~SECTOR_MASK;
	s->mid_end = end & ~SECTOR_MASK;
	s->head = off != s->start;
	s->tail = end != s->end;
	s->one = s->head && s->tail && s->end - s->start == SECTOR_SIZE;
	if (s->mid_end < s->mid_start)
		s->mid_end = s->mid_start; /* inside one sector */
}

/*
 * A data bio over the span: the partial sectors come from @hb/@tb, the
 * whole ones straight from the caller's buffer.
 */
static int span_bio(struct bio_volume *v, unsigned int opf,
		    const struct span *s, char *buf, uint64_t off, char *hb,
		    char *tb)
{
	struct bio *bio;
	int r;

	r = thread_ioq();
	if (r)
		return r;
	bio = bio_alloc(3, opf);
	if (!bio) {
		nbdkit_error("bio_alloc: out of memory");
		return -ENOMEM;
	}
	bio->bi_iter.bi_sector = s->start >> SECTOR_SHIFT;
	if (s->head || s->one)
		r = bio_add_buf(bio, hb, SECTOR_SIZE);
	if (!r && s->mid_end > s->mid_start)
		r = bio_add_buf(bio, buf + (s->mid_start - off),
				(unsigned int)(s->mid_end - s->mid_start));
	if (!r && s->tail && !s->one)
		r = bio_add_buf(bio, tb, SECTOR_SIZE);
	if (!r)
		r = submit_bio_wait(v->t, bio);
	bio_put(bio);
	return r;
}

static int read_unaligned(struct bio_volume *v, char *buf, uint32_t count,
			  uint64_t off)
{
	char hb[SECTOR_SIZE], tb[SECTOR_SIZE];
	uint64_t end = off + count, tail_start;
	struct span s;
	int r;

	span_of(off, count, &s);
	r = span_bio(v, REQ_OP_READ, &s, buf, off, hb, tb);
	if (r)
		return r;
	if (s.one) {
		memcpy(buf, hb + (off - s.start), count);
		return 0;
	}
	if (s.head)
		memcpy(buf, hb + (off - s.start), s.mid_start - off);
	if (s.tail) {
		tail_start = s.end - SECTOR_SIZE;
		memcpy(buf + (tail_start - off), tb, end - tail_start);
	}
	return 0;
}

/* Caller holds rmw_lock.  Read the partial end sectors into hb/tb. */
static int read_edges(struct bio_volume *v, const struct span *s, char *hb,
		      char *tb)
{
	int r = 0;

	if (s->head || s->one)
		r = do_bio(v, REQ_OP_READ, hb, SECTOR_SIZE, s->start, NULL);
	if (!r && s->tail && !s->one)
		r = do_bio(v, REQ_OP_READ, tb, SECTOR_SIZE,
			   s->end - SECTOR_SIZE, NULL);
	return r;
}

/*
 * Fill the request's part of the edge sectors, from @src or (NULL) with
 * zeroes.
 */
static void patch_edges(const struct span *s, const char *src, uint64_t off,
			uint64_t count, char *hb, char *tb)
{
	uint64_t end = off + count, n, tail_start;

	if (s->one || s->head) {
		n = (s->one ? end : s->mid_start) - off;
		if (src)
			memcpy(hb + (off - s->start), src, n);
		else
			memset(hb + (off - s->start), 0, n);
	}
	if (s->tail && !s->one) {
		tail_start = s->end - SECTOR_SIZE;
		if (src)
			memcpy(tb, src + (tail_start - off), end - tail_start);
		else
			memset(tb, 0, end - tail_start);
	}
}

static int write_unaligned(struct bio_volume *v, const char *buf,
			   uint32_t count, uint64_t off, unsigned int fua)
{
	char hb[SECTOR_SIZE], tb[SECTOR_SIZE];
	struct span s;
	int r;

	span_of(off, count, &s);
	pthread_mutex_lock(&rmw_lock);
	r = read_edges(v, &s, hb, tb);
	if (!r) {
		patch_edges(&s, buf, off, count, hb, tb);
		r = span_bio(v, REQ_OP_WRITE | fua, &s, (char *)buf, off, hb,
			     tb);
	}
	pthread_mutex_unlock(&rmw_lock);
	return r;
}

/*
 * Zero the whole sectors inside first: with FAST_ZERO that is the part that
 * may refuse, and it must refuse before anything has changed.
 */
static int zero_unaligned(struct bio_volume *v, uint32_t count, uint64_t off,
			  unsigned int opf)
{
	char hb[SECTOR_SIZE], tb[SECTOR_SIZE];
	struct span s;
	int r = 0;

	span_of(off, count, &s);
	pthread_mutex_lock(&rmw_lock);
	if (s.mid_end > s.mid_start)
		r = do_bio(v, opf, NULL, s.mid_end - s.mid_start, s.mid_start,
			   NULL);
	if (!r)
		r = read_edges(v, &s, hb, tb);
	if (!r) {
		/* Only the edge sectors: the middle is done. */
		patch_edges(&s, NULL, off, count, hb, tb);
		if (s.head || s.one)
			r = do_bio(v, REQ_OP_WRITE | (opf & REQ_FUA), hb,
				   SECTOR_SIZE, s.start, NULL);
		if (!r && s.tail && !s.one)
			r = do_bio(v, REQ_OP_WRITE | (opf & REQ_FUA), tb,
				   SECTOR_SIZE, s.end - SECTOR_SIZE, NULL);
	}
	pthread_mutex_unlock(&rmw_lock);
	return r;
}

static inline bool aligned(uint32_t count, uint64_t offset)
{
	return !((offset | count) & SECTOR_MASK);
}

static inline int fail(int r)
{
	errno = -r;
	return -1;
}

/* -------- engine error hook */

static const char *op_name(enum req_op op)
{
	/* clang-format off */
	static const char *const names[] = {
		[REQ_OP_READ] = "read",
		[REQ_OP_WRITE] = "write",
		[REQ_OP_FLUSH] = "flush",
		[REQ_OP_DISCARD] = "trim",
		[REQ_OP_CACHE] = "cache",
		[REQ_OP_WRITE_ZEROES] = "zero",
		[REQ_OP_EXTENTS] = "extents",
	};
	/* clang-format on */

	return op < REQ_OP_LAST ? names[op] : "?";
}

static void report_member_error(const struct target *t, enum req_op op,
				uint64_t offset, uint64_t length, int err)
{
	/* A refused fast zero is an answer, not a failure. */
	if (op == REQ_OP_WRITE_ZEROES &&
	    (err == -EOPNOTSUPP || err == -ENOTSUP)) {
		nbdkit_debug("member %s: fast zero at offset %" PRIu64
			     " length %" PRIu64 " not possible",
			     t->name, offset, length);
		return;
	}
	nbdkit_error("member %s: %s at offset %" PRIu64 " length %" PRIu64
		     ": %s",
		     t->name, op_name(op), offset, length, strerror(-err));
}

/* -------- configuration callbacks */

/*
 * .load cannot fail: what goes wrong here (no thread key, no memory) is
 * reported by .config_complete or .get_ready.
 */
static void bio_load(void)
{
	ioq_key_live = !pthread_key_create(&ioq_key, thread_ioq_destructor);
	conf_export_init(&cmdline, "");
}

static void bio_unload(void)
{
	struct thread_ioq *w;
	unsigned int i;

	/*
	 * nbdkit has joined the connection threads by now.  Deleting the key
	 * first means no destructor of ours can run once this code is
	 * unmapped.
	 */
	pthread_mutex_lock(&ioq_lock);
	if (ioq_key_live) {
		pthread_key_delete(ioq_key);
		ioq_key_live = false;
	}
	while ((w = ioq_list))
		thread_ioq_free_locked(w);
	pthread_mutex_unlock(&ioq_lock);

	for (i = 0; i < nr_volumes; i++)
		target_destroy(volumes[i].t);
	free(volumes);
	volumes = NULL;
	nr_volumes = 0;
	conf_free(conf);
	conf = NULL;
	conf_export_release(&cmdline);
	free(conf_path);
	free(export_name);
}

/* key=value given twice where once is the only sensible meaning. */
static int set_once(char **slot, const char *key, char *value)
{
	if (!value) {
		nbdkit_error("%s: out of memory", key);
		return -1;
	}
	if (*slot) {
		nbdkit_error("%s= given twice ('%s', then '%s')", key, *slot,
			     value);
		free(value);
		return -1;
	}
	*slot = value;
	return 0;
}

static int bio_config(const char *key, const char *value)
{
	char msg[512];
	char *path = NULL;
	int r;

	if (!strcmp(key, "conf"))
		return set_once(&conf_path, key, nbdkit_absolute_path(value));
	if (!strcmp(key, "export"))
		return set_once(&export_name, key, strdup(value));
	if (!strcmp(key, "backend")) {
		if (backend_set) {
			nbdkit_error("backend= given twice");
			return -1;
		}
		if (ioq_backend_parse(value, &backend)) {
			nbdkit_error("backend=%s: expected io_uring or threads",
				     value);
			return -1;
		}
		backend_set = true;
		return 0;
	}
	if (!strcmp(key, "file")) {
		/* nbdkit changes directory when it daemonizes. */
		path = nbdkit_absolute_path(value);
		if (!path)
			return -1;
		value = path;
	}
	r = conf_export_set(&cmdline, key, value, msg, sizeof(msg));
	free(path);
	if (r == -ENOENT) {
		nbdkit_error("unknown parameter '%s' (see nbdkit bio --help)",
			     key);
		return -1;
	}
	if (r) {
		nbdkit_error("%s", r == -ENOMEM ? "out of memory" : msg);
		return -1;
	}
	cmdline_keys++;
	return 0;
}

static int bio_config_complete(void)
{
	char msg[1024];
	int r;

	if (!cmdline.name) {
		nbdkit_error("out of memory");
		return -1;
	}
	if (!conf_path) {
		if (export_name) {
			nbdkit_error(
			    "export= selects an export of a conf= file; "
			    "there is no conf=");
			return -1;
		}
		if (conf_export_check(&cmdline, msg, sizeof(msg))) {
			nbdkit_error("missing file=: give the members as "
				     "file=PATH (repeat), or conf=FILE");
			return -1;
		}
		return 0;
	}
	if (cmdline_keys) {
		nbdkit_error(
		    "conf= cannot be combined with file=, stripe-size=, "
		    "size=, read-only= or description= (put them in %s)",
		    conf_path);
		return -1;
	}
	r = conf_load(&conf, conf_path, msg, sizeof(msg));
	if (r) {
		nbdkit_error("%s", msg);
		return -1;
	}
	if (export_name && !conf_find_export(conf, export_name)) {
		nbdkit_error("export=%s: %s has no [export %s]", export_name,
			     conf_path, export_name);
		return -1;
	}
	/* The command line wins over the file. */
	if (!backend_set && conf->server.backend_set)
		backend = conf->server.backend;
	return 0;
}

/*
 * Fail now, while the user is watching, if io_uring cannot be used; fall
 * back to the thread pool when no backend was asked for.  Only io_uring is
 * probed: the thread pool's threads would not survive nbdkit's fork.
 */
static int probe_backend(void)
{
	struct ioq *q;
	int r;

	if (backend != IOQ_IO_URING)
		return 0;
	r = ioq_create(&q, IOQ_IO_URING, 0);
	if (!r) {
		ioq_destroy(q);
		return 0;
	}
	if (backend_set || (conf && conf->server.backend_set)) {
		nbdkit_error("backend=io_uring: %s", strerror(-r));
		return -1;
	}
	nbdkit_debug("io_uring not usable (%s): using backend=threads",
		     strerror(-r));
	backend = IOQ_THREADS;
	return 0;
}

static void export_error(const struct conf_export *e, const char *msg)
{
	if (conf)
		nbdkit_error("%s:%u: [export %s] %s", conf->path, e->line,
			     e->name, msg);
	else
		nbdkit_error("%s", msg);
}

/* The i-th export this run serves. */
static const struct conf_export *export_at(unsigned int i)
{
	if (!conf)
		return &cmdline;
	if (export_name)
		return conf_find_export(conf, export_name);
	return &conf->exports[i];
}

static int check_volume(const struct conf_export *e)
{
	struct volume_config vc;
	char msg[1024];
	int r;

	conf_export_volume(e, &vc);
	r = volume_check(&vc, msg, sizeof(msg));
	if (r)
		export_error(e, msg);
	return r;
}

static int open_volume(struct bio_volume *v, const struct conf_export *e)
{
	struct volume_config vc;
	char msg[1024];
	int r;

	conf_export_volume(e, &vc);
	r = volume_open(&v->t, &vc, msg, sizeof(msg));
	if (r) {
		export_error(e, msg);
		return r;
	}
	v->exp = e;
	nbdkit_debug("export '%s': %u members, stripe %" PRIu64 ", %" PRIu64
		     " bytes%s, backend %s",
		     e->name, e->nr_members, e->chunk_bytes, v->t->size_bytes,
		     e->readonly ? ", read-only" : "",
		     ioq_backend_name(backend));
	return 0;
}

static int bio_get_ready(void)
{
	unsigned int i, n;

	if (!ioq_key_live) {
		nbdkit_error("pthread_key_create failed: no per-thread queues");
		return -1;
	}
	if (probe_backend())
		return -1;
	target_set_error_reporter(report_member_error);

	n = !conf ? 1 : export_name ? 1 : conf->nr_exports;
	volumes = calloc(n, sizeof(*volumes));
	if (!volumes) {
		nbdkit_error("out of memory");
		return -1;
	}
	/* All exports must pass before any creates a member file. */
	for (i = 0; i < n; i++)
		if (check_volume(export_at(i)))
			return -1;
	for (i = 0; i < n; i++) {
		if (open_volume(&volumes[i], export_at(i)))
			return -1; /* .unload closes what is open */
		nr_volumes++;
	}
	return 0;
}

static void bio_dump_plugin(void)
{
	printf("bio_version=%s\n", BIONBD_VERSION);
	printf("bio_backends=io_uring,threads\n");
	printf("bio_default_stripe_size=%u\n", STRIPE_DEFAULT_CHUNK);
	printf("bio_min_stripe_size=%u\n", STRIPE_MIN_CHUNK);
	printf("bio_max_stripe_size=%u\n", STRIPE_MAX_CHUNK);
	printf("bio_block_size=%u,%u,%u\n", SECTOR_SIZE, BIO_PREFERRED_BLOCK,
	       BIO_MAX_BLOCK);
}

/* -------- exports and connections */

static int bio_list_exports(int readonly, int is_tls,
			    struct nbdkit_exports *exports)
{
	unsigned int i;

	for (i = 0; i < nr_volumes; i++)
		if (nbdkit_add_export(exports, volumes[i].exp->name,
				      volumes[i].exp->description))
			return -1;
	return 0;
}

static const char *bio_default_export(int readonly, int is_tls)
{
	return nr_volumes ? volumes[0].exp->name : NULL;
}

static void *bio_open(int readonly)
{
	const char *name;
	unsigned int i;

	/* Without conf= there is one volume, whatever name is asked for. */
	if (!conf)
		return &volumes[0];
	name = nbdkit_export_name();
	if (!name || !*name)
		return &volumes[0];
	for (i = 0; i < nr_volumes; i++)
		if (!strcmp(volumes[i].exp->name, name))
			return &volumes[i];
	nbdkit_error("unknown export '%s'", name);
	return NULL;
}

static int64_t bio_get_size(void *handle)
{
	struct bio_volume *v = handle;

	return (int64_t)v->t->size_bytes;
}

static const char *bio_export_description(void *handle)
{
	struct bio_volume *v = handle;

	return v->exp->description;
}

static int bio_block_size(void *handle, uint32_t *minimum, uint32_t *preferred,
			  uint32_t *maximum)
{
	/*
	 * Preferred is "no read-modify-write below this": the stripe has no
	 * such penalty at any sector-aligned size (a piece smaller than a
	 * chunk touches one member and nothing else), so it is the page size
	 * the members' page caches work in, not the chunk: advertising the
	 * chunk would invite clients that honour it strictly to do their own
	 * read-modify-write for every 4K write.
	 */
	*minimum = SECTOR_SIZE;
	*preferred = BIO_PREFERRED_BLOCK;
	*maximum = BIO_MAX_BLOCK;
	return 0;
}

static int bio_can_write(void *handle)
{
	struct bio_volume *v = handle;

	return !v->exp->readonly;
}

static int bio_true(void *handle)
{
	return 1;
}

static int bio_false(void *handle)
{
	return 0;
}

static int bio_can_fua(void *handle)
{
	return NBDKIT_FUA_NATIVE;
}

static int bio_can_cache(void *handle)
{
	return NBDKIT_CACHE_NATIVE;
}

/* -------- data */

static int bio_pread(void *handle, void *buf, uint32_t count, uint64_t offset,
		     uint32_t flags)
{
	int r;

	if (unlikely(!count))
		return 0;
	if (likely(aligned(count, offset)))
		r = do_bio(handle, REQ_OP_READ, buf, count, offset, NULL);
	else
		r = read_unaligned(handle, buf, count, offset);
	return r ? fail(r) : 0;
}

static int bio_pwrite(void *handle, const void *buf, uint32_t count,
		      uint64_t offset, uint32_t flags)
{
	unsigned int fua = flags & NBDKIT_FLAG_FUA ? REQ_FUA : 0;
	int r;

	if (unlikely(!count))
		return 0;
	/* A write bio only reads the buffer; the cast is the bio API's. */
	if (likely(aligned(count, offset)))
		r = do_bio(handle, REQ_OP_WRITE | fua, (void *)buf, count,
			   offset, NULL);
	else
		r = write_unaligned(handle, buf, count, offset, fua);
	return r ? fail(r) : 0;
}

static int bio_flush(void *handle, uint32_t flags)
{
	/*
	 * Flushes every member, whichever connection wrote: that is what
	 * lets can_multi_conn be true.
	 */
	int r = do_bio(handle, REQ_OP_FLUSH, NULL, 0, 0, NULL);

	return r ? fail(r) : 0;
}

static int bio_trim(void *handle, uint32_t count, uint64_t offset,
		    uint32_t flags)
{
	unsigned int opf = REQ_OP_DISCARD;
	struct span s;
	int r;

	if (flags & NBDKIT_FLAG_FUA)
		opf |= REQ_FUA;
	span_of(offset, count, &s);
	if (s.mid_end == s.mid_start)
		return 0;
	r = do_bio(handle, opf, NULL, s.mid_end - s.mid_start, s.mid_start,
		   NULL);
	return r ? fail(r) : 0;
}

static int bio_zero(void *handle, uint32_t count, uint64_t offset,
		    uint32_t flags)
{
	unsigned int opf = REQ_OP_WRITE_ZEROES;
	int r;

	if (unlikely(!count))
		return 0;
	if (!(flags & NBDKIT_FLAG_MAY_TRIM))
		opf |= REQ_NOUNMAP;
	if (flags & NBDKIT_FLAG_FAST_ZERO)
		opf |= REQ_NOFALLBACK;
	if (flags & NBDKIT_FLAG_FUA)
		opf |= REQ_FUA;
	if (likely(aligned(count, offset)))
		r = do_bio(handle, opf, NULL, count, offset, NULL);
	else
		r = zero_unaligned(handle, count, offset, opf);
	return r ? fail(r) : 0;
}

static int bio_cache(void *handle, uint32_t count, uint64_t offset,
		     uint32_t flags)
{
	struct bio_volume *v = handle;
	struct span s;
	int r;

	if (unlikely(!count))
		return 0;
	span_of(offset, count, &s);
	if (s.end - s.start > BIO_MAX_SPAN)
		s.end = s.start + BIO_MAX_SPAN; /* a hint may fall short */
	r = do_bio(v, REQ_OP_CACHE, NULL, s.end - s.start, s.start, NULL);
	return r ? fail(r) : 0;
}

static int bio_extents(void *handle, uint32_t count, uint64_t offset,
		       uint32_t flags, struct nbdkit_extents *extents)
{
	struct bio_volume *v = handle;
	struct bio_extents ext = {0};
	uint64_t next, len;
	struct span s;
	size_t i;
	int r;

	if (unlikely(!count))
		return 0;
	span_of(offset, count, &s);
	/* nbdkit accepts an answer that covers less than it asked for. */
	len = s.end - s.start;
	if (len > BIO_MAX_SPAN)
		len = BIO_MAX_SPAN;
	r = do_bio(v, REQ_OP_EXTENTS, NULL, len, s.start, &ext);
	if (r)
		goto out;
	bio_extents_finish(&ext);

	/*
	 * The engine's offsets are relative to the bio; nbdkit wants volume
	 * offsets, in order, without gaps, starting at or before @offset.
	 */
	next = 0;
	for (i = 0; i < ext.nr; i++) {
		const struct bio_extent *e = &ext.v[i];

		if (e->offset != next || !e->length) {
			nbdkit_error("extents: engine answer for %" PRIu64
				     "+%" PRIu64
				     " has a gap or overlap at %" PRIu64,
				     s.start, len, s.start + next);
			r = -EIO;
			goto out;
		}
		if (nbdkit_add_extent(extents, s.start + e->offset, e->length,
				      e->flags)) {
			r = -errno;
			goto out;
		}
		next = e->offset + e->length;
		if ((flags & NBDKIT_FLAG_REQ_ONE) && s.start + next > offset)
			break;
	}
	if (i == ext.nr && next != len) {
		nbdkit_error("extents: engine answer for %" PRIu64 "+%" PRIu64
			     " covers only %" PRIu64 " bytes",
			     s.start, len, next);
		r = -EIO;
	}
out:
	bio_extents_free(&ext);
	return r ? fail(r) : 0;
}

/* Shown by "nbdkit bio --help"; one line per key, as nbdkit's plugins do. */
static const char bio_config_help[] =
    "file=PATH         Member file or block device; repeat, in stripe order\n"
    "                  (required unless conf=; 'nbdkit bio A B' works too).\n"
    "stripe-size=SIZE  Stripe unit, a power of two 4K..1G (default 64K).\n"
    "size=SIZE         Volume size, a multiple of 512: members are created\n"
    "                  or extended (sparse), never truncated.  Default: N x\n"
    "                  the smallest member, rounded down to whole stripes.\n"
    "read-only=BOOL    Serve read-only; members are opened read-only.\n"
    "description=TEXT  Export description shown to clients.\n"
    "backend=io_uring|threads\n"
    "                  How members are read and written (default io_uring,\n"
    "                  or threads when io_uring is not usable).\n"
    "conf=FILE         Serve the exports of a bionbd config file (see\n"
    "                  conf/example.conf) instead of file= and friends.\n"
    "export=NAME       With conf=: serve only this export.";

static struct nbdkit_plugin plugin = {
    .name = "bio",
    .longname = "bionbd striped volume plugin",
    .version = BIONBD_VERSION,
    .description = "Serve RAID-0 volumes of files; each NBD request is a "
		   "userspace bio split at stripe boundaries",
    .load = bio_load,
    .unload = bio_unload,
    .config = bio_config,
    .config_complete = bio_config_complete,
    .config_help = bio_config_help,
    .magic_config_key = "file",
    .get_ready = bio_get_ready,
    .dump_plugin = bio_dump_plugin,
    .list_exports = bio_list_exports,
    .default_export = bio_default_export,
    .open = bio_open,
    .get_size = bio_get_size,
    .export_description = bio_export_description,
    .block_size = bio_block_size,
    .can_write = bio_can_write,
    .can_flush = bio_true,
    .is_rotational = bio_false,
    .can_trim = bio_true,
    .can_zero = bio_true,
    .can_fast_zero = bio_true,
    .can_fua = bio_can_fua,
    .can_multi_conn = bio_true,
    .can_extents = bio_true,
    .can_cache = bio_can_cache,
    .pread = bio_pread,
    .pwrite = bio_pwrite,
    .flush = bio_flush,
    .trim = bio_trim,
    .zero = bio_zero,
    .extents = bio_extents,
    .cache = bio_cache,
    .errno_is_preserved = 1,
};

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL
NBDKIT_REGISTER_PLUGIN(plugin)
