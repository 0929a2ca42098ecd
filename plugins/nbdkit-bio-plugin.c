// SPDX-License-Identifier: MIT
/*
 * nbdkit-bio-plugin.c - serve striped volumes through nbdkit, every NBD
 * request turned into a bio built on nbdkit's own buffer.
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
 * Alignment, flags, errors, extents and block sizes are the NBD layer's
 * (nbdl.h), exactly as in bionbd: this file only translates nbdkit's
 * callbacks and flags into NBD commands and runs them with nbdl_do().
 *
 * Errors: the NBD layer picks the NBD error for the command (nbdl_errno_to_
 * nbd); we set errno to the errno nbdkit maps back to that same NBD error
 * (errno_is_preserved) and return -1.  Member errors are logged by the NBD
 * layer, through nbdkit_verror/nbdkit_vdebug.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include <bionbd/bio.h>
#include <bionbd/config.h>
#include <bionbd/ioq.h>
#include <bionbd/nbdl.h>
#include <bionbd/path.h>
#include <bionbd/plural.h>
#include <bionbd/size.h>
#include <bionbd/target.h>
#include <bionbd/trace.h>

#ifndef BIONBD_VERSION
#define BIONBD_VERSION "unknown"
#endif

#define unlikely(x) __builtin_expect(!!(x), 0)
#define likely(x) __builtin_expect(!!(x), 1)

/* -------- configuration (set before .get_ready, read-only afterwards) */

static struct conf_export cmdline; /* file=, stripe-size=, ... */
static unsigned int cmdline_keys;
/* The first of them, named when conf= makes them all out of place. */
static char first_cmdline_key[32];
static char *conf_path;
static char *export_name;
static char *stats_path; /* stats=FILE: written at unload */
static char *trace_path; /* trace=FILE: the bio trace */
static uint64_t trace_ring; /* trace-buffer=SIZE; 0: the default */
static const char *trace_ring_text; /* trace-buffer= as given */
static struct conf *conf;
static enum ioq_backend backend = IOQ_IO_URING;
static bool backend_set;
static enum ioq_backend conf_backend; /* [server] backend = */
static bool conf_backend_set;

/* What this run serves; a connection's handle points at one of these. */
static struct nbdl_export *exports;
static unsigned int nr_exports;
static struct stripe_geom *geoms; /* exports[i]'s layout, for bio.stripes */

/*
 * Debug flags (nbdkit -D bio.requests=1 ...; plugin.syms exports them):
 *   bio.requests  one line per request: command, range, flags, the result
 *                 and how long it took
 *   bio.stripes   and the member pieces the stripe split it into
 */
NBDKIT_DLL_PUBLIC int bio_debug_requests;
NBDKIT_DLL_PUBLIC int bio_debug_stripes;

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
/*
 * Queues off the list and being destroyed by their ending threads
 * (outside the lock): bio_unload waits for them before it closes the
 * exports, whose final flush must come after theirs.
 */
static unsigned int ioq_destroying;
static pthread_cond_t ioq_destroyed = PTHREAD_COND_INITIALIZER;
static bool ioq_unloaded; /* bio_unload destroyed what the list held */
static __thread struct thread_ioq *my_ioq;

static void thread_ioq_unlink_locked(struct thread_ioq *w)
{
	*w->pprev = w->next;
	if (w->next)
		w->next->pprev = w->pprev;
}

/*
 * ioq_destroy closes the queue's remote connections, each flushing what
 * it wrote first (up to a member's timeout): outside ioq_lock, so that a
 * new connection's thread never waits for it to create its own queue.
 */
static void thread_ioq_free(struct thread_ioq *w)
{
	ioq_destroy(w->q);
	free(w);
}

/* Thread exit: every bio of this thread has ended (we only wait). */
static void thread_ioq_destructor(void *p)
{
	ioq_set_current(NULL);
	my_ioq = NULL;
	pthread_mutex_lock(&ioq_lock);
	if (ioq_unloaded) { /* it took @p from the list before we got here */
		pthread_mutex_unlock(&ioq_lock);
		return;
	}
	thread_ioq_unlink_locked(p);
	ioq_destroying++;
	pthread_mutex_unlock(&ioq_lock);
	thread_ioq_free(p);
	pthread_mutex_lock(&ioq_lock);
	if (!--ioq_destroying)
		pthread_cond_broadcast(&ioq_destroyed);
	pthread_mutex_unlock(&ioq_lock);
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

/* -------- requests */

static const char *cmd_name(uint16_t type)
{
	static const char *const names[] = {
		[NBD_CMD_READ] = "READ",	 [NBD_CMD_WRITE] = "WRITE",
		[NBD_CMD_FLUSH] = "FLUSH",	 [NBD_CMD_TRIM] = "TRIM",
		[NBD_CMD_CACHE] = "CACHE",	 [NBD_CMD_WRITE_ZEROES] = "ZERO",
		[NBD_CMD_BLOCK_STATUS] = "BLOCK_STATUS",
	};

	return type < sizeof(names) / sizeof(names[0]) && names[type] ?
		       names[type] :
		       "?";
}

/* bio.stripes: the pieces of [offset, offset + count), eight at most. */
static void debug_stripes(const struct nbdl_export *e, uint64_t offset,
			  uint32_t count)
{
	const struct stripe_geom *g = &geoms[e - exports];
	char line[512];
	size_t n = 0;
	unsigned int pieces = 0;

	line[0] = 0;
	if (e->info.level) {
		/* A mirror: the copies of the first chunk. */
		struct mirror_geom mg;
		unsigned int member;
		uint64_t moff;

		if (mirror_geom_init(&mg, e->info.nr_members, e->info.copies,
				     e->info.chunk_bytes))
			return;
		mg.data_offset = e->info.data_offset;
		for (unsigned int j = 0; j < mg.copies && n < sizeof(line); j++) {
			mirror_map(&mg, offset, j, &member, &moff);
			n += (size_t)snprintf(line + n, sizeof(line) - n,
					      " copy%u=m%u@%" PRIu64, j, member,
					      moff);
		}
		nbdkit_debug("bio: pieces:%s", line);
		return;
	}
	while (count && n < sizeof(line)) {
		struct stripe_piece p;

		stripe_map(g, offset, count, &p);
		if (++pieces > 8) {
			snprintf(line + n, sizeof(line) - n, " ...");
			break;
		}
		n += (size_t)snprintf(line + n, sizeof(line) - n,
				      " m%u@%" PRIu64 "+%" PRIu64, p.member,
				      p.member_offset, p.length);
		offset += p.length;
		count -= (uint32_t)p.length;
	}
	nbdkit_debug("bio: pieces:%s", line);
}

static void debug_request(const struct nbdl_export *e, uint16_t type,
			  uint16_t nbd_flags, uint32_t count, uint64_t offset,
			  int r, const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	nbdkit_debug("bio: %s export '%s' offset %" PRIu64 " length %" PRIu32
		     " flags %#x: %s, %ld us",
		     cmd_name(type), e->name, offset, count, nbd_flags,
		     r ? strerror(-r) : "ok",
		     (long)((t1.tv_sec - t0->tv_sec) * 1000000 +
			    (t1.tv_nsec - t0->tv_nsec) / 1000));
	if (bio_debug_stripes && count && type != NBD_CMD_FLUSH)
		debug_stripes(e, offset, count);
}

/*
 * Run NBD command @type on this thread's queue; nbdkit has checked the
 * range and the flags.  Returns 0, or -1 with errno set to what nbdkit
 * turns into the NBD error the layer chose for this command.
 */
static int run(void *handle, uint16_t type, uint16_t nbd_flags, void *buf,
	       uint32_t count, uint64_t offset, struct bio_extents *ext)
{
	bool debug = unlikely(bio_debug_requests || bio_debug_stripes);
	struct nbdl_export *e = handle;
	uint64_t start = io_stats_start(e->stats);
	struct nbdl_trace tr = { .offset = offset,
				 .len = count,
				 .type = type,
				 .flags = nbd_flags };
	struct timespec t0;
	uint32_t nbd_err;
	int r = thread_ioq();

	if (debug)
		clock_gettime(CLOCK_MONOTONIC, &t0);
	if (trace_on())
		nbdl_trace_queued(e, &tr);
	if (!r)
		r = nbdl_do(e, type, nbd_flags, buf, offset, count, ext,
			    SIZE_MAX, tr.seq);
	if (debug)
		debug_request(handle, type, nbd_flags, count, offset, r, &t0);
	nbd_err = nbdl_errno_to_nbd(r, type, nbd_flags);
	nbdl_account(e, type, count, nbd_err, start);
	/* nbdkit sends the reply once we return: as near as we can see. */
	if (tr.seq)
		nbdl_trace_reply(e, &tr, nbd_err, false);
	if (!r)
		return 0;
	errno = nbdl_nbd_to_errno(nbd_err);
	return -1;
}

static uint16_t fua_flag(uint32_t flags)
{
	return flags & NBDKIT_FLAG_FUA ? NBD_CMD_FLAG_FUA : 0;
}

static void log_nbdkit(enum nbdl_level level, const char *fmt, va_list ap)
{
	/* nbdkit has no info level; its -v shows debug lines. */
	if (level == NBDL_ERROR)
		nbdkit_verror(fmt, ap);
	else
		nbdkit_vdebug(fmt, ap);
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

/* The end of trace=FILE: its totals in the debug output, losses as errors. */
static void trace_finish(void)
{
	uint64_t written = 0, lost = 0;
	int r = trace_stop(&written, &lost);

	if (r)
		nbdkit_error("trace=%s: %s: the trace is incomplete", trace_path,
			     strerror(-r));
	if (lost)
		nbdkit_error("trace=%s: %" PRIu64 " event%s lost (the buffers "
			     "were full; a larger trace-buffer= keeps them)",
			     trace_path, lost, plural(lost));
	nbdkit_debug("trace=%s: %" PRIu64 " event%s written, %" PRIu64
		     " lost", trace_path, written, plural(written), lost);
}

/*
 * nbdkit gives up on a start after .get_ready (a socket it cannot bind, a
 * -u user it cannot become, .after_fork failing) through exit(), with no
 * .unload: the members the opens created or grew are taken back then, as
 * bionbd does.  Only by the process that opened them and only until it
 * forks: a fork hands them to the child that serves, whether the parent
 * exits at once (into the background) or once --run's command is done.
 * .after_fork and .unload end it.
 */
static bool unmake_at_exit;

static void unmake_exit(void)
{
	if (unmake_at_exit)
		nbdl_exports_unmake(exports, nr_exports);
}

/* pthread_atfork's prepare: so neither side of the fork undoes. */
static void unmake_forking(void)
{
	unmake_at_exit = false;
}

static void bio_unload(void)
{
	struct thread_ioq *w;

	unmake_at_exit = false; /* an exit after a start that served */
	/*
	 * nbdkit has seen its connection threads finish by now, but a
	 * thread's destructors run after that: one may be in ours still,
	 * destroying its queue (flushing a remote), or about to start it.
	 * Deleting the key first means none starts from here on; one that
	 * started and waits for the lock finds ioq_unloaded; one past the
	 * lock is waited for.
	 */
	pthread_mutex_lock(&ioq_lock);
	if (ioq_key_live) {
		pthread_key_delete(ioq_key);
		ioq_key_live = false;
	}
	while (ioq_destroying)
		pthread_cond_wait(&ioq_destroyed, &ioq_lock);
	ioq_unloaded = true;
	while ((w = ioq_list)) {
		thread_ioq_unlink_locked(w);
		thread_ioq_free(w);
	}
	pthread_mutex_unlock(&ioq_lock);

	if (stats_path && exports)
		(void)nbdl_stats_write(stats_path, exports, nr_exports, NULL,
				       NULL);
	if (trace_path)
		trace_finish();
	nbdl_exports_close(exports, nr_exports, backend);
	exports = NULL;
	nr_exports = 0;
	free(geoms);
	geoms = NULL;
	conf_free(conf);
	conf = NULL;
	conf_export_release(&cmdline);
	free(conf_path);
	free(export_name);
	free(stats_path);
	free(trace_path);
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
	if (!strcmp(key, "stats"))
		return set_once(&stats_path, key, nbdkit_absolute_path(value));
	if (!strcmp(key, "trace"))
		return set_once(&trace_path, key, nbdkit_absolute_path(value));
	if (!strcmp(key, "trace-buffer")) {
		if (parse_size(value, &trace_ring) || trace_ring < TRACE_MIN_RING ||
		    trace_ring > TRACE_MAX_RING) {
			nbdkit_error("trace-buffer=%s: expected a size from 4K "
				     "to 1G", value);
			return -1;
		}
		/* nbdkit keeps the command line's strings to the end. */
		trace_ring_text = value;
		return 0;
	}
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
	if (!strcmp(key, "file") || !strcmp(key, "spare") ||
	    !strcmp(key, "fault") || !strcmp(key, "delay")) {
		/*
		 * nbdkit changes directory when it daemonizes: a remote
		 * member's socket=, a rule's file= too.
		 */
		r = conf_export_value_absolute(key, value, NULL, &path);
		if (r) {
			nbdkit_error("%s=%s: %s", key, value,
				     r == -EINVAL ? "file=: the current "
						    "directory holds a blank: "
						    "give the file whole" :
						    strerror(-r));
			return -1;
		}
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
	if (!cmdline_keys++)
		snprintf(first_cmdline_key, sizeof(first_cmdline_key), "%s",
			 key);
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
	/* Accepted and unused, it would let the user believe it works. */
	if (trace_ring_text && !trace_path) {
		nbdkit_error("trace-buffer=%s: needs trace=FILE (the trace it "
			     "buffers)",
			     trace_ring_text);
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
		nbdkit_error("conf= cannot be combined with %s= (nor with "
			     "the other keys of an export: put them in %s)",
			     first_cmdline_key, conf_path);
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
	/*
	 * Of the [server] section, which configures bionbd, only the
	 * backend is ours; the command line wins over the file.
	 */
	for (unsigned int i = 0; i < conf->nr_server_keys; i++) {
		const struct conf_kv *kv = &conf->server_keys[i];

		if (strcmp(kv->key, "backend"))
			continue;
		if (ioq_backend_parse(kv->value, &conf_backend)) {
			nbdkit_error("%s:%u: [server] backend=%s: expected "
				     "io_uring or threads",
				     conf->path, kv->line, kv->value);
			return -1;
		}
		conf_backend_set = true;
	}
	if (!backend_set && conf_backend_set)
		backend = conf_backend;
	return 0;
}

/*
 * Each nbdkit thread has its own connection to a remote member, and a
 * flush goes down the flushing thread's.  A remote without multi-conn
 * only promises that a flush covers the writes of its own connection, so
 * then one client's requests must stay on one thread: nbdkit serializes
 * them.  Probed here: nbdkit asks before .get_ready, whose opens then take
 * the probes' connections over (volume_hold) rather than connect again.
 */
static bool probes_held;

static int bio_thread_model(void)
{
	const struct conf_export *e = conf ? conf->exports : &cmdline;
	unsigned int nr = conf ? conf->nr_exports : 1;

	if (!probes_held) {
		volume_hold();
		probes_held = true;
	}

	for (unsigned int i = 0; i < nr; i++) {
		for (unsigned int j = 0; j < e[i].nr_members; j++) {
			struct remote_info info;
			char msg[256];

			if (!remote_uri(e[i].members[j]) ||
			    remote_probe(e[i].members[j],
					 e[i].remote_timeout_ms, &info, msg,
					 sizeof(msg)) ||
			    info.multi_conn)
				continue;
			nbdkit_debug("%s has no multi-conn: requests of one client are served in order",
				     e[i].members[j]);
			return NBDKIT_THREAD_MODEL_SERIALIZE_REQUESTS;
		}
	}
	return NBDKIT_THREAD_MODEL_PARALLEL;
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
	if (backend_set || conf_backend_set) {
		nbdkit_error("backend=io_uring: %s", strerror(-r));
		return -1;
	}
	nbdkit_debug("io_uring not usable (%s): using backend=threads",
		     strerror(-r));
	backend = IOQ_THREADS;
	return 0;
}

static bool rbd_atexit_set;

/*
 * nbdkit's parent leaves through exit() as soon as it has forked.  Its RBD
 * handles are closed there (their locks went in .get_ready), but only once
 * the child's .after_fork has opened images of its own: an image nobody
 * watches for that moment is one a second server would take (see
 * rbd_wait_connecting).  The child holds the pipe's write end until then,
 * or until it dies; without a fork, .after_fork runs in this process and
 * closes both ends.
 */
static int fork_pipe[2] = { -1, -1 };
static pid_t fork_parent;

static void fork_pipe_close(void)
{
	for (int i = 0; i < 2; i++) {
		if (fork_pipe[i] >= 0)
			close(fork_pipe[i]);
		fork_pipe[i] = -1;
	}
}

static void rbd_exit(void)
{
	char c;

	if (fork_pipe[1] >= 0 && getpid() == fork_parent) {
		close(fork_pipe[1]);
		fork_pipe[1] = -1;
		while (read(fork_pipe[0], &c, 1) < 0 && errno == EINTR)
			;
	}
	fork_pipe_close();
	rbd_close_all();
}

static int get_ready(void)
{
	const struct conf_export *defs = &cmdline;
	unsigned int n = 1, i;
	char msg[1024];
	int r;

	if (!ioq_key_live) {
		nbdkit_error("pthread_key_create failed: no per-thread queues");
		return -1;
	}
	if (probe_backend())
		return -1;
	nbdl_set_logger(log_nbdkit);
	if (conf && export_name) {
		defs = conf_find_export(conf, export_name);
	} else if (conf) {
		defs = conf->exports;
		n = conf->nr_exports;
	}
	/* The statistics renamed over the trace at unload would replace it. */
	if (stats_path && trace_path && path_same_name(stats_path, trace_path)) {
		nbdkit_error("stats=%s: the same file as trace=%s; give each a "
			     "path of its own",
			     stats_path, trace_path);
		return -1;
	}
	/* Before trace_open truncates it. */
	if (conf_exports_path_check(defs, n, trace_path, "trace=", msg,
				    sizeof(msg)) ||
	    conf_exports_path_check(defs, n, stats_path, "stats=", msg,
				    sizeof(msg))) {
		nbdkit_error("%s", msg);
		return -1;
	}
	/* Again in .after_fork, as nbdkit's -u user. */
	if (stats_path && (r = nbdl_stats_probe(stats_path))) {
		nbdkit_error("stats=%s: %s", stats_path, strerror(-r));
		return -1;
	}
	if (trace_path &&
	    trace_open(trace_path, trace_ring, msg, sizeof(msg))) {
		nbdkit_error("trace=%s", msg);
		return -1;
	}
	if (nbdl_exports_open(&exports, defs, n, false,
			      conf ? conf->path : NULL, msg, sizeof(msg))) {
		nbdkit_error("%s", msg);
		return -1;
	}
	nr_exports = n;
	/* Without the fork hook an exit could be a parent's: keep them then. */
	unmake_at_exit = !atexit(unmake_exit) &&
			 !pthread_atfork(unmake_forking, NULL, NULL);
	geoms = calloc(n, sizeof(*geoms));
	if (!geoms) {
		nbdkit_error("out of memory");
		return -1;
	}
	/* Checked by nbdl_exports_open already: this cannot fail. */
	for (i = 0; i < n; i++) {
		stripe_geom_init(&geoms[i], exports[i].info.nr_members,
				 exports[i].info.chunk_bytes);
		geoms[i].data_offset = exports[i].info.data_offset;
	}
	for (i = 0; i < n; i++)
		nbdkit_debug("export '%s': %u member%s, stripe %" PRIu64
			     ", %" PRIu64 " bytes%s, backend %s%s%s%s",
			     exports[i].name, defs[i].nr_members,
			     plural(defs[i].nr_members),
			     exports[i].info.chunk_bytes, exports[i].size_bytes,
			     exports[i].readonly ? ", read-only" : "",
			     ioq_backend_name(backend),
			     exports[i].info.superblocks ? ", volume '" : "",
			     exports[i].info.name,
			     exports[i].info.superblocks ? "'" : "");
	/*
	 * nbdkit may fork now and its parent exit: a lock that parent took
	 * (a superblock written at open) would make the first write wait
	 * until the cluster gives up on it (~30 s).
	 */
	rbd_release_locks();
	/* And that parent leaves through exit(): close its handles there. */
	if (!rbd_atexit_set && !atexit(rbd_exit)) {
		rbd_atexit_set = true;
		fork_parent = getpid();
		if (pipe2(fork_pipe, O_CLOEXEC))
			fork_pipe[0] = fork_pipe[1] = -1;
	}
	return 0;
}

static int bio_get_ready(void)
{
	int r = get_ready();

	/* The opens took the thread-model probes' connections: close the rest. */
	if (probes_held) {
		probes_held = false;
		volume_release();
	}
	return r;
}

/*
 * Background work (a mirror's rebuild onto its spares) needs threads, and
 * nbdkit may have forked since .get_ready opened the volumes.
 */
static int bio_after_fork(void)
{
	int r;

	for (unsigned int i = 0; i < nr_exports; i++)
		target_start(exports[i].vol);
	rbd_wait_connecting();
	fork_pipe_close();
	/* nbdkit is the user of -u now, who writes them at unload. */
	if (stats_path && (r = nbdl_stats_probe(stats_path))) {
		nbdkit_error("stats=%s: %s", stats_path, strerror(-r));
		return -1;
	}
	if (trace_path && (r = trace_run())) {
		nbdkit_error("trace=%s: %s", trace_path, strerror(-r));
		return -1;
	}
	/* nbdkit serves from here: what the opens made is the volumes'. */
	unmake_at_exit = false;
	nbdl_exports_keep(exports, nr_exports);
	return 0;
}

static void bio_dump_plugin(void)
{
	printf("bio_version=%s\n", BIONBD_VERSION);
	printf("bio_backends=io_uring,threads\n");
	printf("bio_default_stripe_size=%u\n", STRIPE_DEFAULT_CHUNK);
	printf("bio_min_stripe_size=%u\n", STRIPE_MIN_CHUNK);
	printf("bio_max_stripe_size=%u\n", STRIPE_MAX_CHUNK);
	printf("bio_block_size=%u,%u,%u\n", NBDL_MIN_BLOCK, NBDL_PREF_BLOCK,
	       NBDL_MAX_PAYLOAD);
}

/* -------- exports and connections */

static int bio_list_exports(int readonly, int is_tls,
			    struct nbdkit_exports *list)
{
	for (unsigned int i = 0; i < nr_exports; i++)
		if (nbdkit_add_export(list, exports[i].name,
				      exports[i].description))
			return -1;
	return 0;
}

static const char *bio_default_export(int readonly, int is_tls)
{
	return nr_exports ? exports[0].name : NULL;
}

static void *bio_open(int readonly)
{
	const char *name;
	struct nbdl_export *e;

	/* Without conf= there is one volume, whatever name is asked for. */
	if (!conf)
		return &exports[0];
	name = nbdkit_export_name();
	e = nbdl_export_find(exports, nr_exports, name, name ? strlen(name) : 0);
	if (!e)
		nbdkit_error("unknown export '%s'", name);
	return e;
}

static int64_t bio_get_size(void *handle)
{
	struct nbdl_export *e = handle;

	return (int64_t)e->size_bytes;
}

static const char *bio_export_description(void *handle)
{
	struct nbdl_export *e = handle;

	return e->description;
}

static int bio_block_size(void *handle, uint32_t *minimum, uint32_t *preferred,
			  uint32_t *maximum)
{
	*minimum = NBDL_MIN_BLOCK;
	*preferred = NBDL_PREF_BLOCK;
	*maximum = NBDL_MAX_PAYLOAD;
	return 0;
}

static int bio_can_write(void *handle)
{
	struct nbdl_export *e = handle;

	return !e->readonly;
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
	return run(handle, NBD_CMD_READ, 0, buf, count, offset, NULL);
}

static int bio_pwrite(void *handle, const void *buf, uint32_t count,
		      uint64_t offset, uint32_t flags)
{
	/* A write only reads the buffer; the cast is the bio API's. */
	return run(handle, NBD_CMD_WRITE, fua_flag(flags), (void *)buf, count,
		   offset, NULL);
}

/* Not when a member (a remote without multi-conn) cannot promise it. */
static int bio_can_multi_conn(void *handle)
{
	const struct nbdl_export *e = handle;

	return !e->vol->single_conn;
}

static int bio_flush(void *handle, uint32_t flags)
{
	/*
	 * Flushes every member, whichever connection wrote: that is what
	 * lets can_multi_conn be true.
	 */
	return run(handle, NBD_CMD_FLUSH, 0, NULL, 0, 0, NULL);
}

static int bio_trim(void *handle, uint32_t count, uint64_t offset,
		    uint32_t flags)
{
	return run(handle, NBD_CMD_TRIM, fua_flag(flags), NULL, count, offset,
		   NULL);
}

static int bio_zero(void *handle, uint32_t count, uint64_t offset,
		    uint32_t flags)
{
	uint16_t f = fua_flag(flags);

	if (!(flags & NBDKIT_FLAG_MAY_TRIM))
		f |= NBD_CMD_FLAG_NO_HOLE;
	if (flags & NBDKIT_FLAG_FAST_ZERO)
		f |= NBD_CMD_FLAG_FAST_ZERO;
	return run(handle, NBD_CMD_WRITE_ZEROES, f, NULL, count, offset, NULL);
}

static int bio_cache(void *handle, uint32_t count, uint64_t offset,
		     uint32_t flags)
{
	return run(handle, NBD_CMD_CACHE, 0, NULL, count, offset, NULL);
}

static int bio_extents(void *handle, uint32_t count, uint64_t offset,
		       uint32_t flags, struct nbdkit_extents *extents)
{
	uint16_t f = flags & NBDKIT_FLAG_REQ_ONE ? NBD_CMD_FLAG_REQ_ONE : 0;
	struct bio_extents ext = { 0 };
	int r;

	r = run(handle, NBD_CMD_BLOCK_STATUS, f, NULL, count, offset, &ext);
	for (size_t i = 0; !r && i < ext.nr; i++)
		r = nbdkit_add_extent(extents, offset + ext.v[i].offset,
				      ext.v[i].length, ext.v[i].flags);
	bio_extents_free(&ext);
	return r;
}

/* Shown by "nbdkit bio --help"; one line per key, as nbdkit's plugins do. */
static const char bio_config_help[] =
    "file=PATH         Member file or block device; repeat, in stripe order\n"
    "                  (required unless conf=; 'nbdkit bio A B' works too).\n"
    "                  Or another server's export: nbd://HOST[:PORT]/NAME,\n"
    "                  nbd+unix:///NAME?socket=PATH, nbds://... (TLS).\n"
    "timeout=SECONDS   Remote members: a request or connection unanswered\n"
    "                  this long fails with EIO (default 5).\n"
    "spare=PATH        A spare of a raid1/raid10 volume (bioctl create\n"
    "                  --level): takes over a member that fails; repeat.\n"
    "level=LEVEL       raid0, raid1 or raid10: must match the superblocks;\n"
    "                  new members (with size=) become a new mirror.\n"
    "copies=K          raid10's copies of each chunk (default 2).\n"
    "fault=RULE        Fail a member's I/O, e.g. 'member=1 op=write\n"
    "                  error=EIO rate=1%'; repeat (docs/faults.md).\n"
    "delay=RULE        Delay a member's I/O, e.g. 'op=read ms=5'; repeat.\n"
    "stripe-size=SIZE  Stripe unit, a power of two 4K..1G (default 64K).\n"
    "size=SIZE         Volume size, a multiple of 512: members are created\n"
    "                  or extended (sparse), never truncated.  Default: N x\n"
    "                  the smallest member, rounded down to whole stripes.\n"
    "read-only=BOOL    Serve read-only; members are opened read-only.\n"
    "description=TEXT  Export description shown to clients.\n"
    "backend=io_uring|threads\n"
    "                  How members are read and written (default io_uring,\n"
    "                  or threads when io_uring is not usable).\n"
    "statistics=BOOL   Count requests per op, member, errno, latency\n"
    "                  (default true; docs/stats.md).\n"
    "lock=BOOL         Lock the members of a volume without superblocks\n"
    "                  against a second writer (default true).\n"
    "degraded=BOOL     Start a mirror with members left out (default\n"
    "                  false: refused).\n"
    "stats=FILE        Write the statistics (JSON) to FILE at exit.\n"
    "trace=FILE        Record every request and bio event in FILE (read it\n"
    "                  with bioctl trace; docs/trace.md).\n"
    "trace-buffer=SIZE Each thread's trace buffer (default 4M): events that\n"
    "                  find it full are lost, and counted.\n"
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
    .thread_model = bio_thread_model,
    .after_fork = bio_after_fork,
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
    .can_multi_conn = bio_can_multi_conn,
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
