// SPDX-License-Identifier: MIT
/*
 * rbd.c - the RBD target: a member that is a Ceph RBD image, reached with
 * librbd's asynchronous API.
 *
 * One image handle serves every thread (librbd's aio calls are thread
 * safe, and one handle means one cache, so a flush covers every
 * connection's writes: the member can multi-conn).  librbd completes
 * requests on threads of its own; those must not end bios, which belong to
 * the thread that submitted them.  So each submitting thread has one
 * "port" (an ioq_slot of its ioq) shared by all RBD members: a completion
 * callback puts its request on the port's list and pokes the port's
 * eventfd, an ioq_poll, so the worker's ring (or epoll set) wakes and the
 * worker ends the bio in its reap, as it would a file member's.
 *
 * Cluster handles (rados_t: monitor sessions, messenger threads) are
 * shared by the members that name the same conf, id and keyring.  They are
 * made when the member is started (target_start) or first used, never at
 * open: the front ends open volumes before they daemonize, and librados'
 * threads would not survive the fork.  Open only probes (connects, reads
 * the size, disconnects), so that a mistake is still reported at once.
 * Connecting blocks (librados has no asynchronous connect) for as long as
 * the cluster takes to answer, so it is a thread of its own, the
 * connector; bios that arrive meanwhile wait on the target and go back to
 * their ports, to be issued or failed there, when it is done.
 *
 * Extents come from the image's object map (librbd's diff walk, whole
 * objects), where the image has fast-diff: a client copying a sparse
 * image (nbdcopy, qemu-img convert) then skips what was never written
 * instead of reading zeros over the network.  The walk is synchronous and
 * may wait for an OSD, so it runs on a thread of the target's own, the
 * walker, and comes back through the port like a librbd completion.
 */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <bionbd/mdev.h>

#include "internal.h"
#include "rbdlib.h"

/*
 * librbd retries an operation while the OSDs are away; without a limit a
 * dead cluster hangs its requests for ever.  The default is longer than a
 * remote NBD member's: a loaded cluster's latency is not a failure.
 */
#define RBD_TIMEOUT_MS_DEFAULT 30000u
/*
 * Ranges one extents walk may collect (16 bytes each) before it gives up
 * and answers all data, which is always true: an image of tiny objects
 * written every other object must not cost unbounded memory.
 */
#define RBD_EXTENTS_MAX_RANGES 65536u
/* Segments described on the stack; a bio with more allocates. */
#define RBD_IOV_INLINE 16

struct rbd_spec {
	char *pool, *ns, *image, *snap; /* ns, snap: NULL when not given */
	char *conf, *id, *keyring; /* NULL: librados' defaults */
	/* Other Ceph options, "key=value" lines in the order given; NULL: none. */
	char *opts;
};

/* Ceph options one member may set besides conf, id and keyring. */
#define RBD_MAX_OPTS 16

/* A cluster connection, shared by the members with the same identity. */
struct rbd_cluster {
	struct rbd_cluster *next;
	char *conf, *id, *keyring, *opts; /* as rbd_spec's */
	unsigned int timeout_ms;
	unsigned int refs;
	rados_t rados;
	/*
	 * The process that connected it: librados' threads do not survive a
	 * fork, so a child never uses (nor shuts down) its parent's.
	 */
	pid_t pid;
};

/*
 * An open image, shared in a process by whatever opens the same member:
 * the data path and the superblock handle (mdev) of a member are then one
 * librbd client, not two that pass the image's exclusive lock back and
 * forth on every metadata write (measured: half the IOPS of a mirror's
 * random writes).  A read-only user may share a read-write handle.
 */
struct rbd_handle {
	struct rbd_handle *next; /* in rbd_handles */
	char *member;
	bool readonly;
	bool snap; /* a snapshot: read-only whatever was asked */
	unsigned int timeout_ms;
	unsigned int refs; /* under rbd_lock */
	pid_t pid; /* as rbd_cluster's */
	struct rbd_cluster *cl;
	rados_ioctx_t ioctx;
	rbd_image_t image;
	uint64_t size;
	uint64_t obj_size;
	/* A flush failed: every flush fails from now on (rbd_flush_failed). */
	atomic_bool lost;
	/* Fast zeros may cover whole objects of this size (fast_zero_ok). */
	uint64_t zero_obj;
	/*
	 * An object map to take extents from, and objects laid out one
	 * after another (no fancy striping, which librbd before 16.2.8
	 * diffed wrongly).
	 */
	bool fast_diff;
};

static void handle_put(struct rbd_handle *h);

struct rbd_target {
	struct target t;
	struct rbd_handle *h; /* once connected, as image */
	/* NULL until connected (see the file comment); set once. */
	_Atomic(rbd_image_t) image;
	bool readonly;
	unsigned int timeout_ms;
	/* The connector: at most one at a time, under connect_lock. */
	pthread_mutex_t connect_lock;
	pthread_t connector;
	bool connecting, joinable;
	uint64_t retry_ns; /* after a failure: bios fail at once until then */
	bool down_logged;
	struct rbd_io *waiting; /* bios waiting for the connector */
	/*
	 * Requests time out (the cluster does not answer): said once for
	 * all threads, and once when one succeeds again, not per bio.
	 */
	atomic_bool stalled;
	struct io_stats *stats;
	/*
	 * Fast zeros of whole objects of this size are kept (fast_zero_ok);
	 * 0: none.  Learnt by the probe at open, before any bio.
	 */
	uint64_t zero_obj;
	/* The walker (extents), started by the first extents request. */
	pthread_mutex_t walk_lock;
	pthread_cond_t walk_cond;
	struct rbd_io *walk_head, **walk_tail;
	pthread_t walker;
	pid_t walker_pid; /* 0: none; a forked child starts its own */
	bool walk_stop;
};

/* A member that could not be reached is tried again after this. */
#define RBD_RETRY_NS 1000000000ull

/*
 * One request out to librbd: one bio, or a run of reads or writes a plug
 * held back that follow each other on the image (the pieces of a large
 * request on one member of a stripe: chunks k, k + N, ...), sent as one
 * vectored call, since each call costs a round trip to an OSD.
 */
struct rbd_io {
	struct rbd_io *next;
	struct rbd_port *port;
	struct rbd_target *rt;
	enum req_op op;
	unsigned int opf; /* the first bio's flags */
	uint64_t off, len; /* on the image */
	unsigned int nr_bios;
	struct bio *bios[BLK_PLUG_MAX];
	ssize_t ret; /* librbd's answer: bytes or -errno */
	bool then_flush; /* FUA: a flush once the write is done */
	bool flushing; /* what librbd answers is a flush's */
	bool issue; /* back from the connector: issue it now (ret 0) */
	struct iovec *iov; /* iov_inline, or allocated */
	struct iovec iov_inline[RBD_IOV_INLINE];
	/* Extents: the walker's answer, added to the bio's list at the end. */
	struct bio_extents ext;
};

/* One submitting thread's end of the completions (see the file comment). */
struct rbd_port {
	struct ioq_slot slot; /* key: &rbd_port_key */
	struct ioq_poll poll; /* the eventfd */
	struct ioq *q;
	/*
	 * Completed requests, newest first.  The lock also covers the
	 * eventfd write, so that once the port's thread holds it no callback
	 * is still about to touch the eventfd (see port_destroy).
	 */
	pthread_mutex_t lock;
	struct rbd_io *done;
	struct rbd_io *free_ios; /* the port thread's alone */
	/* The rest is the port thread's alone too. */
	unsigned int nr_out; /* requests sent from here, not yet ended */
	/*
	 * The eventfd could not be watched again: librbd goes on completing
	 * what is out, so while it is, the watch's timer looks at the list
	 * instead; a request sent meanwhile tries the watch again.
	 */
	struct ioq_watch watch;
};

static const char rbd_port_key = 0;

/* Guards rbd_clusters, rbd_handles and rbd_connecting. */
static pthread_mutex_t rbd_lock = PTHREAD_MUTEX_INITIALIZER;
/* Connector threads of this process still at work (rbd_wait_connecting). */
static unsigned int rbd_connecting;
static pthread_cond_t rbd_connected = PTHREAD_COND_INITIALIZER;
static struct rbd_cluster *rbd_clusters;
static struct rbd_handle *rbd_handles;

static inline struct rbd_target *to_rbd(struct target *t)
{
	return container_of(t, struct rbd_target, t);
}

bool rbd_member(const char *member)
{
	return member && !strncmp(member, "rbd:", 4);
}

/* ---- the member's name ---- */

static void spec_free(struct rbd_spec *s)
{
	free(s->pool); /* the other names point into the same string */
	free(s->conf);
	free(s->id);
	free(s->keyring);
	free(s->opts);
	memset(s, 0, sizeof(*s));
}

/*
 * Cut @str at its first ':' that no backslash escapes, and drop the
 * escapes before it (qemu's spelling: mon_host=1.2.3.4\:6789).  Returns
 * what follows the ':', or NULL.
 */
static char *cut_colon(char *str)
{
	char *r, *w = str;

	for (r = str; *r; r++) {
		if (*r == '\\' && r[1]) {
			*w++ = *++r;
			continue;
		}
		if (*r == ':') {
			*w = '\0';
			return r + 1;
		}
		*w++ = *r;
	}
	*w = '\0';
	return NULL;
}

/*
 * The options whose value names a local file or directory the client
 * opens, maybe long after the start (a daemon is in / by then): conf=
 * (ours, rados_conf_read_file's) and the Ceph options a librados or librbd
 * client reads a path from.  @list: candidates separated by ',' or ';',
 * the first that opens wins (Ceph's file search), each joined alone.
 */
static const struct rbd_path_opt {
	const char *name;
	bool list;
} rbd_path_opts[] = {
	{ "conf", true },
	{ "keyring", true },
	{ "keyfile", false },
	{ "monmap", false },
	{ "admin_socket", false },
	{ "log_file", false },
	{ "run_dir", false },
	{ "crash_dir", false },
	{ "plugin_dir", false },
	{ "erasure_code_dir", false },
	{ "gss_ktab_client_file", false },
	{ "rbd_persistent_cache_path", false },
	{ "immutable_object_cache_path", false },
	{ "immutable_object_cache_sock", false },
};

/*
 * Ceph spells an option's '_' as ' ' or '-' as well (admin-socket, "mon
 * host"): one option, whichever spelling.  Its own spelling is '_'.
 */
static char opt_char(char c)
{
	return c == '-' || c == ' ' ? '_' : c;
}

static const struct rbd_path_opt *path_opt(const char *key, size_t len)
{
	for (size_t i = 0; i < ARRAY_SIZE(rbd_path_opts); i++) {
		const char *n = rbd_path_opts[i].name;
		size_t j;

		for (j = 0; j < len && n[j]; j++)
			if (opt_char(key[j]) != n[j])
				break;
		if (j == len && !n[j])
			return &rbd_path_opts[i];
	}
	return NULL;
}

/*
 * Does the item [@s, @end) start with a Ceph metavariable that expands
 * to a name, not a directory ("$cluster.keyring" is "ceph.keyring",
 * relative)?  Ceph expands it when it opens the file, long after the
 * daemon went to /, so @dir goes in front of it as of any relative path
 * and Ceph still expands the rest ("/etc/bionbd/$cluster.keyring").
 * $data_dir, $home and option names ($run_dir) expand to paths: kept.
 */
static bool meta_relative(const char *s, const char *end)
{
	static const char *const names[] = { "cluster", "type", "name",
					     "host",    "num",  "id",
					     "pid",     "cctid" };
	const char *v = s + 1;
	bool brace;
	size_t len = 0;

	if (*s != '$')
		return false;
	brace = v < end && *v == '{';
	v += brace;
	while (v + len < end && (v[len] == '_' || (v[len] >= 'a' &&
						   v[len] <= 'z')))
		len++;
	if (brace && (v + len >= end || v[len] != '}'))
		return false;
	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (strlen(names[i]) == len && !memcmp(v, names[i], len))
			return true;
	return false;
}

/*
 * Write the value [@v, @end) (as written in the member: '\' escapes) with
 * each relative path in it joined to @dir.  Absolute paths stay, and so
 * do those Ceph expands to a path itself: "$run_dir/...", "~/...".
 */
static void path_value_absolute(FILE *f, const char *v, const char *end,
				bool list, const char *dir)
{
	while (v < end) {
		/* Never past @end: it is a ':' or the string's end. */
		const char *item = v + strspn(v, " \t");

		fwrite(v, 1, (size_t)(item - v), f);
		v = item;
		/* The item ends at the next separator, escaped or not. */
		while (v < end && !(list && (*v == ',' || *v == ';' ||
					     (*v == '\\' && v + 1 < end &&
					      (v[1] == ',' || v[1] == ';')))))
			v += v[0] == '\\' && v + 1 < end ? 2 : 1;
		if (v > item && (!strchr("/$~", *item) ||
				 meta_relative(item, v))) {
			size_t n = strlen(dir);

			while (v - item > 2 && item[0] == '.' && item[1] == '/')
				item += 2 + strspn(item + 2, "/");
			for (const char *d = dir; *d; d++) {
				if (*d == ':' || *d == '\\')
					fputc('\\', f);
				fputc(*d, f);
			}
			if (n && dir[n - 1] != '/')
				fputc('/', f);
		}
		fwrite(item, 1, (size_t)(v - item), f);
		if (v < end) { /* the separator */
			size_t sep = *v == '\\' ? 2 : 1;

			fwrite(v, 1, sep, f);
			v += sep;
		}
	}
}

int rbd_member_absolute(const char *member, const char *dir, char **out)
{
	const char *p = member + 4; /* after "rbd:" */
	size_t len = 0;
	char *buf = NULL;
	bool first = true;
	FILE *f;

	*out = NULL;
	f = open_memstream(&buf, &len);
	if (!f)
		return -ENOMEM;
	fputs("rbd:", f);
	/* The image's name, then each option: cut as cut_colon cuts. */
	while (*p) {
		const char *s = p, *eq;
		const struct rbd_path_opt *po = NULL;

		while (*p && *p != ':')
			p += p[0] == '\\' && p[1] ? 2 : 1;
		eq = memchr(s, '=', (size_t)(p - s));
		if (!first && eq)
			po = path_opt(s, (size_t)(eq - s));
		if (po) {
			fwrite(s, 1, (size_t)(eq + 1 - s), f);
			path_value_absolute(f, eq + 1, p, po->list, dir);
		} else {
			fwrite(s, 1, (size_t)(p - s), f);
		}
		first = false;
		if (*p) /* the ':' */
			fputc(*p++, f);
	}
	return memstream_end(f, &buf, 0, out);
}

/*
 * Append "@key=@value" as a line of s->opts, the key in Ceph's own
 * spelling, unless that key is there: mon_host and mon-host are one
 * option, which Ceph would set twice, the last one winning unseen.
 */
static int spec_add_opt(struct rbd_spec *s, const char *key, const char *value)
{
	size_t klen = strlen(key), old = s->opts ? strlen(s->opts) : 0;
	unsigned int n = 0;
	char *o;

	for (const char *l = s->opts; l; n++) {
		size_t j = 0;

		while (j < klen && l[j] == opt_char(key[j]))
			j++;
		if (j == klen && l[klen] == '=')
			return -EEXIST;
		l = strchr(l, '\n');
		l = l ? l + 1 : NULL;
	}
	if (n == RBD_MAX_OPTS)
		return -E2BIG;
	o = realloc(s->opts, old + klen + strlen(value) + 3);
	if (!o)
		return -ENOMEM;
	sprintf(o + old, "%s%s=%s", old ? "\n" : "", key, value);
	for (size_t j = 0; j < klen; j++)
		o[old + !!old + j] = opt_char(key[j]);
	s->opts = o;
	return 0;
}

/*
 * rbd:POOL[/NAMESPACE]/IMAGE[@SNAP][:conf=PATH][:id=USER][:keyring=PATH]
 * [:OPTION=VALUE]... (qemu's spelling; OPTION any Ceph option, such as
 * mon_host, so that no configuration file is needed; '\:' is a colon in
 * a name or a value).  Returns 0 or -EINVAL with a message.
 */
static int spec_parse(const char *member, struct rbd_spec *s, char *errbuf,
		      size_t errlen)
{
	char *name, *opt, *next, *slash, *at;
	int r;

	memset(s, 0, sizeof(*s));
	if (!rbd_member(member))
		return verr(errbuf, errlen, -EINVAL,
			    "member %s: not an rbd: member", member);
	name = strdup(member + 4);
	if (!name)
		return verr(errbuf, errlen, -ENOMEM, "out of memory");
	s->pool = name;
	for (opt = cut_colon(name); opt; opt = next) {
		char *eq = strchr(opt, '=');
		char **dst = NULL;

		next = cut_colon(opt);
		if (!eq || eq == opt || !eq[1] || strchr(opt, '\n'))
			goto bad_opt;
		*eq = '\0';
		if (!strcmp(opt, "key")) {
			*eq = '=';
			spec_free(s);
			return verr(errbuf, errlen, -EINVAL,
				    "member %s: key= would show the secret in logs and process lists: give it in a keyring= file",
				    member);
		}
		if (!strcmp(opt, "conf"))
			dst = &s->conf;
		else if (!strcmp(opt, "id"))
			dst = &s->id;
		else if (!strcmp(opt, "keyring"))
			dst = &s->keyring;
		if (!dst) {
			r = spec_add_opt(s, opt, eq + 1);
			*eq = '=';
			if (r == -ENOMEM) {
				spec_free(s);
				return verr(errbuf, errlen, r, "out of memory");
			}
			if (r)
				goto bad_opt;
			continue;
		}
		*eq = '=';
		if (*dst)
			goto bad_opt;
		*dst = strdup(eq + 1);
		if (!*dst) {
			spec_free(s);
			return verr(errbuf, errlen, -ENOMEM, "out of memory");
		}
	}
	at = strchr(name, '@');
	if (at) {
		*at = '\0';
		s->snap = at + 1;
	}
	slash = strchr(name, '/');
	if (!slash)
		goto bad_name;
	*slash = '\0';
	s->image = slash + 1;
	slash = strchr(s->image, '/');
	if (slash) {
		*slash = '\0';
		s->ns = s->image;
		s->image = slash + 1;
		if (!*s->ns)
			goto bad_name;
	}
	if (!*s->pool || !*s->image || strchr(s->image, '/') ||
	    (s->snap && !*s->snap))
		goto bad_name;
	return 0;
bad_opt:
	/* Before spec_free: @opt is in its string. */
	verr(errbuf, errlen, -EINVAL,
	     "member %s: malformed or repeated option '%s' (conf=, id=, keyring= or a Ceph option, each once)",
	     member, opt);
	spec_free(s);
	return -EINVAL;
bad_name:
	spec_free(s);
	return verr(errbuf, errlen, -EINVAL,
		    "member %s: expected rbd:POOL[/NAMESPACE]/IMAGE[@SNAP][:conf=PATH][:id=USER][:keyring=PATH][:OPTION=VALUE]...",
		    member);
}

static bool same_str(const char *a, const char *b)
{
	return a == b || (a && b && !strcmp(a, b));
}

static int cluster_set(rados_t r, const char *key, const char *value,
		       const char *member, char *errbuf, size_t errlen)
{
	int e = rbdlib.rados_conf_set(r, key, value);

	if (!e)
		return 0;
	if (e == -ENOENT)
		return verr(errbuf, errlen, -EINVAL,
			    "member %s: %s: not a Ceph option", member, key);
	return verr(errbuf, errlen, e, "member %s: %s=%s: %s", member, key,
		    value, strerror(-e));
}

/* The member's own Ceph options (rbd_spec.opts), last: they win. */
static int cluster_set_opts(struct rbd_cluster *cl, const char *member,
			    char *errbuf, size_t errlen)
{
	char *opts, *line, *save = NULL;
	int r = 0;

	if (!cl->opts)
		return 0;
	opts = strdup(cl->opts);
	if (!opts)
		return verr(errbuf, errlen, -ENOMEM, "out of memory");
	for (line = strtok_r(opts, "\n", &save); line && !r;
	     line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '=');

		*eq = '\0'; /* spec_parse made every line KEY=VALUE */
		r = cluster_set(cl->rados, line, eq + 1, member, errbuf,
				errlen);
	}
	free(opts);
	return r;
}

static int cluster_connect(struct rbd_cluster *cl, const char *member,
			   char *errbuf, size_t errlen)
{
	char secs[32];
	int r;

	r = rbdlib.rados_create(&cl->rados, cl->id);
	if (r)
		return verr(errbuf, errlen, r, "member %s: %s", member,
			    strerror(-r));
	/*
	 * NULL: $CEPH_CONF, then /etc/ceph/ceph.conf and the other defaults;
	 * none of them is needed when the member names its own options
	 * (mon_host=...).
	 */
	r = rbdlib.rados_conf_read_file(cl->rados, cl->conf);
	if (r == -ENOENT && !cl->conf && cl->opts)
		r = 0;
	if (r) {
		verr(errbuf, errlen, r, "member %s: reading %s: %s", member,
		     cl->conf ? cl->conf : "the Ceph configuration",
		     strerror(-r));
		goto err;
	}
	/* Ceph takes whole seconds here: rounded up, never 0 (no limit). */
	snprintf(secs, sizeof(secs), "%u", (cl->timeout_ms + 999) / 1000);
	if ((r = cluster_set(cl->rados, "client_mount_timeout", secs, member,
			     errbuf, errlen)) ||
	    (r = cluster_set(cl->rados, "rados_mon_op_timeout", secs, member,
			     errbuf, errlen)) ||
	    (r = cluster_set(cl->rados, "rados_osd_op_timeout", secs, member,
			     errbuf, errlen)) ||
	    (cl->keyring && (r = cluster_set(cl->rados, "keyring", cl->keyring,
					     member, errbuf, errlen))) ||
	    (r = cluster_set_opts(cl, member, errbuf, errlen)))
		goto err;
	r = rbdlib.rados_connect(cl->rados);
	if (r == -ETIMEDOUT) {
		r = verr(errbuf, errlen, -EHOSTUNREACH,
			 "member %s: cannot reach the Ceph cluster: no answer within the timeout",
			 member);
		goto err;
	}
	if (r) {
		verr(errbuf, errlen, r,
		     "member %s: cannot reach the Ceph cluster: %s", member,
		     strerror(-r));
		goto err;
	}
	return 0;
err:
	rbdlib.rados_shutdown(cl->rados);
	return r;
}

static int cluster_get(const struct rbd_spec *s, unsigned int timeout_ms,
		       const char *member, struct rbd_cluster **out,
		       char *errbuf, size_t errlen)
{
	struct rbd_cluster *cl;
	int r;

	/* Every librbd call starts from a cluster: the one place to load it. */
	r = rbdlib_load(member, errbuf, errlen);
	if (r)
		return r;
	pthread_mutex_lock(&rbd_lock);
	for (cl = rbd_clusters; cl; cl = cl->next) {
		if (cl->pid == getpid() && same_str(cl->conf, s->conf) &&
		    same_str(cl->id, s->id) &&
		    same_str(cl->keyring, s->keyring) &&
		    same_str(cl->opts, s->opts) &&
		    cl->timeout_ms == timeout_ms) {
			cl->refs++;
			*out = cl;
			pthread_mutex_unlock(&rbd_lock);
			return 0;
		}
	}
	pthread_mutex_unlock(&rbd_lock);

	cl = calloc(1, sizeof(*cl));
	if (!cl)
		return verr(errbuf, errlen, -ENOMEM, "out of memory");
	cl->timeout_ms = timeout_ms;
	cl->refs = 1;
	cl->pid = getpid();
	if ((s->conf && !(cl->conf = strdup(s->conf))) ||
	    (s->id && !(cl->id = strdup(s->id))) ||
	    (s->keyring && !(cl->keyring = strdup(s->keyring))) ||
	    (s->opts && !(cl->opts = strdup(s->opts)))) {
		r = verr(errbuf, errlen, -ENOMEM, "out of memory");
		goto err;
	}
	/* Connected outside the lock: it takes up to the timeout. */
	r = cluster_connect(cl, member, errbuf, errlen);
	if (r)
		goto err;
	pthread_mutex_lock(&rbd_lock);
	cl->next = rbd_clusters;
	rbd_clusters = cl;
	pthread_mutex_unlock(&rbd_lock);
	*out = cl;
	return 0;
err:
	free(cl->conf);
	free(cl->id);
	free(cl->keyring);
	free(cl->opts);
	free(cl);
	return r;
}

static void cluster_put(struct rbd_cluster *cl)
{
	pthread_mutex_lock(&rbd_lock);
	if (--cl->refs) {
		pthread_mutex_unlock(&rbd_lock);
		return;
	}
	for (struct rbd_cluster **pp = &rbd_clusters; *pp; pp = &(*pp)->next) {
		if (*pp == cl) {
			*pp = cl->next;
			break;
		}
	}
	pthread_mutex_unlock(&rbd_lock);
	rbdlib.rados_shutdown(cl->rados);
	free(cl->conf);
	free(cl->id);
	free(cl->keyring);
	free(cl->opts);
	free(cl);
}

/* ---- ports: completions back to the submitting thread ---- */

/* librbd's errors as the NBD client will see them. */
static int rbd_errno(ssize_t r)
{
	switch (r) {
	case -ENOSPC:
	case -EDQUOT:
		return -ENOSPC;
	case -EROFS:
	case -EPERM:
	case -EACCES:
		return -EPERM;
	case -EOPNOTSUPP:
		return -EOPNOTSUPP;
	default:
		return -EIO;
	}
}

/*
 * The member's timeouts: one line when they start, one when they end.
 * True when @ret (librbd's answer, or -ENOTCONN: never sent, the member
 * is not connected) was said for the member already, not per bio.
 */
static bool rbd_note_answer(struct rbd_target *rt, ssize_t ret)
{
	if (ret == -ENOTCONN)
		return true; /* the connector's line */
	if (ret == -ETIMEDOUT) {
		if (!atomic_exchange(&rt->stalled, true))
			target_notice(TARGET_NOTICE_ERROR,
				      "member %s: no answer within %u ms; its requests fail with EIO until it answers",
				      rt->t.name, rt->timeout_ms);
		return true;
	}
	if (ret >= 0 &&
	    unlikely(atomic_load_explicit(&rt->stalled,
					  memory_order_relaxed)) &&
	    atomic_exchange(&rt->stalled, false))
		target_notice(TARGET_NOTICE_INFO, "member %s: answering again",
			      rt->t.name);
	return false;
}

/*
 * A flush of @h failed.  librbd's cache (write-around, Ceph's default)
 * acknowledges a write once it is sent, and the error of one that fails
 * goes to the next flush to complete, whoever's, and is forgotten: a later
 * flush would succeed over the lost write.  So every flush of the image
 * fails from now on (as a file's does), and a mirror takes the member out
 * (target_lost).
 */
static void rbd_flush_failed(struct rbd_handle *h, const char *member,
			     ssize_t ret)
{
	if (!atomic_exchange(&h->lost, true))
		target_notice(TARGET_NOTICE_ERROR,
			      "member %s: a flush failed (%s): writes before it "
			      "may not have reached the cluster; every flush "
			      "fails with EIO from now on (restart the server "
			      "once the image is checked)",
			      member, strerror((int)-ret));
}

static bool rbd_lost(struct target *t)
{
	struct rbd_target *rt = to_rbd(t);

	return atomic_load_explicit(&rt->image, memory_order_acquire) &&
	       atomic_load_explicit(&rt->h->lost, memory_order_relaxed);
}

static void io_end(struct rbd_port *p, struct rbd_io *io, int err)
{
	bool report = err && err != -EOPNOTSUPP &&
		      !rbd_note_answer(io->rt, io->ret);

	/* On the bio's thread: the pieces of one bio share its list. */
	for (size_t i = 0; !err && i < io->ext.nr; i++)
		err = bio_extents_add(io->bios[0]->bi_ext, io->ext.v[i].offset,
				      io->ext.v[i].length, io->ext.v[i].flags);
	bio_extents_free(&io->ext);
	for (unsigned int i = 0; i < io->nr_bios; i++) {
		if (report)
			target_report_error(&io->rt->t, io->bios[i], err);
		ioq_defer_end(p->q, io->bios[i], err);
	}
	if (io->iov != io->iov_inline)
		free(io->iov);
	p->q->inflight--;
	p->nr_out--;
	io->next = p->free_ios;
	p->free_ios = io;
}

/* Another thread (librbd's, the connector) hands @io back to its port. */
static void io_to_port(struct rbd_io *io)
{
	struct rbd_port *p = io->port;
	uint64_t one = 1;

	pthread_mutex_lock(&p->lock);
	io->next = p->done;
	p->done = io;
	if (!io->next)
		(void)!write(p->poll.fd, &one, sizeof(one));
	pthread_mutex_unlock(&p->lock);
}

static void io_complete_cb(rbd_completion_t c, void *arg)
{
	struct rbd_io *io = arg;

	io->ret = rbdlib.rbd_aio_get_return_value(c);
	rbdlib.rbd_aio_release(c);
	io_to_port(io);
}

static int io_issue(rbd_image_t image, struct rbd_io *io);

static int io_flush(struct rbd_io *io)
{
	rbd_completion_t c;
	int r;

	r = rbdlib.rbd_aio_create_completion(io, io_complete_cb, &c);
	if (r)
		return r;
	io->flushing = true;
	r = rbdlib.rbd_aio_flush(atomic_load_explicit(&io->rt->image,
					       memory_order_acquire),
			  c);
	if (r)
		rbdlib.rbd_aio_release(c);
	return r;
}

/*
 * Watch the port's eventfd again.  When the queue cannot (out of memory),
 * completions still arrive on the list, and a port nobody looks at would
 * hold its requests, and a drain waiting for them, for ever: so the timer
 * looks instead, as long as requests are out.
 */
static void port_watch(struct rbd_port *p)
{
	(void)ioq_watch_arm(p->q, &p->poll, &p->watch, p->nr_out != 0);
}

/* The port's thread: end what librbd finished, oldest first. */
static void port_drain(struct rbd_port *p)
{
	struct rbd_io *list, *io, *fifo = NULL;
	uint64_t n;

	(void)!read(p->poll.fd, &n, sizeof(n));
	pthread_mutex_lock(&p->lock);
	list = p->done;
	p->done = NULL;
	pthread_mutex_unlock(&p->lock);
	/* Oldest first, as they completed. */
	while (list) {
		io = list;
		list = io->next;
		io->next = fifo;
		fifo = io;
	}
	while (fifo) {
		int r;

		io = fifo;
		fifo = io->next;
		if (io->ret < 0) {
			if (io->flushing)
				rbd_flush_failed(io->rt->h, io->rt->t.name,
						 io->ret);
			io_end(p, io, rbd_errno(io->ret));
			continue;
		}
		if (io->issue) {
			io->issue = false;
			r = io_issue(atomic_load_explicit(&io->rt->image,
							  memory_order_acquire),
				     io);
			if (r) {
				io->ret = r;
				io_end(p, io, rbd_errno(r));
			}
			continue;
		}
		(void)rbd_note_answer(io->rt, io->ret);
		if (io->then_flush) {
			io->then_flush = false;
			r = atomic_load_explicit(&io->rt->h->lost,
						 memory_order_relaxed) ?
				    -EIO :
				    io_flush(io);
			if (r) {
				io->ret = r;
				io_end(p, io, rbd_errno(r));
			}
			continue;
		}
		io_end(p, io, 0);
	}
}

/* In a reap: the eventfd fired. */
static void port_poll_fn(struct ioq_poll *poll, unsigned int revents)
{
	struct rbd_port *p = container_of(poll, struct rbd_port, poll);

	(void)revents;
	port_drain(p);
	/* After the drain: it may have ended the last request out. */
	port_watch(p);
}

static void port_timer_fn(struct ioq_timer *tm)
{
	struct rbd_port *p = container_of(tm, struct rbd_port, watch.tm);

	p->watch.tm_on = false;
	port_drain(p);
	port_watch(p);
}

static void port_destroy(struct ioq_slot *s)
{
	struct rbd_port *p = container_of(s, struct rbd_port, slot);

	/*
	 * Nothing is in flight (the queue was drained), but the callback
	 * that handed over the last request may still be on its way out of
	 * the lock: taking the lock waits for it.
	 */
	pthread_mutex_lock(&p->lock);
	pthread_mutex_unlock(&p->lock);
	if (p->watch.tm_on)
		ioq_timer_del(p->q, &p->watch.tm);
	ioq_poll_del(p->q, &p->poll);
	close(p->poll.fd);
	pthread_mutex_destroy(&p->lock);
	while (p->free_ios) {
		struct rbd_io *io = p->free_ios;

		p->free_ios = io->next;
		free(io);
	}
	free(p);
}

static struct rbd_port *port_get(struct ioq *q)
{
	struct ioq_slot *s = ioq_slot_find(q, &rbd_port_key);
	struct rbd_port *p;

	if (likely(s))
		return container_of(s, struct rbd_port, slot);
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->poll.fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (p->poll.fd < 0) {
		free(p);
		return NULL;
	}
	pthread_mutex_init(&p->lock, NULL);
	p->q = q;
	p->poll.events = POLLIN;
	p->poll.fn = port_poll_fn;
	p->watch.tm.fn = port_timer_fn;
	p->watch.what = "rbd: a completion port";
	p->slot.key = &rbd_port_key;
	p->slot.destroy = port_destroy;
	if (ioq_poll_set(q, &p->poll)) {
		close(p->poll.fd);
		pthread_mutex_destroy(&p->lock);
		free(p);
		return NULL;
	}
	ioq_slot_add(q, &p->slot);
	return p;
}

/* ---- extents: the walker ---- */

struct walk_range {
	uint64_t start, end;
};

/* One extents request's walk, on the image's offsets. */
struct walk {
	uint64_t start, end;
	struct walk_range *v; /* what the diff reported as existing */
	size_t nr, cap;
	int err;
	/* Nothing to tell but "all data": no usable object map, or more
	 * than RBD_EXTENTS_MAX_RANGES ranges. */
	bool all_data;
};

static int walk_cb(uint64_t off, size_t len, int exists, void *arg)
{
	struct walk *w = arg;
	uint64_t end = off + len;

	/* exists = 0: removed since the start of history, a hole. */
	if (!exists)
		return 0;
	off = off > w->start ? off : w->start;
	end = end < w->end ? end : w->end;
	if (off >= end)
		return 0;
	if (w->nr && w->v[w->nr - 1].end == off) {
		w->v[w->nr - 1].end = end;
		return 0;
	}
	if (w->nr == RBD_EXTENTS_MAX_RANGES) {
		w->all_data = true;
		return -ERANGE; /* stops the walk */
	}
	if (w->nr == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 32;
		struct walk_range *v = realloc(w->v, cap * sizeof(*v));

		if (!v) {
			w->err = -ENOMEM;
			return -ENOMEM; /* stops the walk */
		}
		w->v = v;
		w->cap = cap;
	}
	w->v[w->nr++] = (struct walk_range){ .start = off, .end = end };
	return 0;
}

static int walk_range_cmp(const void *a, const void *b)
{
	const struct walk_range *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

/*
 * What exists in [w->start, w->end) of the image, sorted, in @w->v; or
 * w->all_data, when only "all data" can be said.  Returns 0 or librbd's
 * error.
 */
static int walk_collect(const struct rbd_handle *h, struct walk *w)
{
	uint64_t flags = 0, from, to;
	int r = 0;

	if (h->fast_diff)
		r = rbdlib.rbd_get_flags(h->image, &flags);
	if (r)
		return r;
	/* An object map marked invalid (rbd object-map rebuild) tells nothing. */
	if (!h->fast_diff || (flags & RBD_FLAG_FAST_DIFF_INVALID)) {
		w->all_data = true;
		return 0;
	}
	/*
	 * Whole objects: librbd before 16.2.8 reported the extents of a walk
	 * that starts inside an object shifted by that much (Ceph tracker
	 * 53784).  walk_cb clips to the range asked.
	 */
	from = w->start - w->start % h->obj_size;
	to = w->end + (h->obj_size - w->end % h->obj_size) % h->obj_size;
	to = to < h->size ? to : h->size;
	/* include_parent: a clone's data may be its parent's. */
	r = rbdlib.rbd_diff_iterate2(h->image, NULL, from, to - from, 1, 1,
				     walk_cb, w);
	if (w->all_data)
		return 0;
	if (w->err)
		return w->err;
	/* Whatever order the diff reported in. */
	if (!r && w->nr)
		qsort(w->v, w->nr, sizeof(*w->v), walk_range_cmp);
	return r;
}

/*
 * @io's share of the walk @w (which covers it): its extents, as offsets in
 * its bio, in @io->ext, all of its range (a piece of a split request must
 * not stop short: the pieces after it would leave a gap).  @next: the
 * first of @w's ranges that may reach @io; ios come in ascending order.
 */
static int walk_emit(struct rbd_io *io, const struct walk *w, size_t *next)
{
	const uint64_t base = io->bios[0]->bi_iter.bi_done;
	const uint32_t hole = BIO_EXT_HOLE | BIO_EXT_ZERO;
	const uint64_t end = io->off + io->len;
	uint64_t pos = io->off;
	size_t i = *next;
	int r = 0;

	if (w->all_data)
		return bio_extents_add(&io->ext, base, io->len, 0);
	while (i < w->nr && w->v[i].end <= pos)
		i++;
	*next = i;
	for (; !r && i < w->nr && w->v[i].start < end; i++) {
		uint64_t s = w->v[i].start > pos ? w->v[i].start : pos;
		uint64_t e = w->v[i].end < end ? w->v[i].end : end;

		if (w->v[i].end <= pos)
			continue; /* within one before it */
		r = bio_extents_add(&io->ext, base + pos - io->off, s - pos,
				    hole);
		if (!r)
			r = bio_extents_add(&io->ext, base + s - io->off,
					    e - s, 0);
		pos = e;
	}
	if (!r)
		r = bio_extents_add(&io->ext, base + pos - io->off, end - pos,
				    hole);
	return r;
}

/*
 * Bytes of the image one walk covers at most, for requests queued
 * together: a striped request's pieces on one image lie back to back
 * there, and one walk for all of them (not one per chunk; each walk also
 * flushes the image) is what makes a stripe of images cheap to map.
 */
#define RBD_WALK_MAX_BYTES (4ull << 30)

/*
 * Walk for the run of queued requests from @list that follow each other
 * on the image, and hand each back to its port.  Returns the rest.
 */
static struct rbd_io *walk_run(struct rbd_io *list)
{
	const struct rbd_handle *h = list->rt->h;
	struct walk w = { .start = list->off, .end = list->off + list->len };
	struct rbd_io *io, *stop;
	size_t next = 0;
	int r;

	for (stop = list->next; stop; stop = stop->next) {
		if (stop->off != w.end ||
		    w.end + stop->len - w.start > RBD_WALK_MAX_BYTES)
			break;
		w.end += stop->len;
	}
	r = walk_collect(h, &w);
	for (io = list; io != stop;) {
		struct rbd_io *done = io;

		io = io->next;
		done->ret = r ? r : walk_emit(done, &w, &next);
		io_to_port(done); /* @done is the port's from here */
	}
	free(w.v);
	return stop;
}

static void *rbd_walker(void *arg)
{
	struct rbd_target *rt = arg;

	pthread_mutex_lock(&rt->walk_lock);
	for (;;) {
		struct rbd_io *list = rt->walk_head;

		if (!list) {
			if (rt->walk_stop)
				break;
			pthread_cond_wait(&rt->walk_cond, &rt->walk_lock);
			continue;
		}
		/* All that waits: runs of them go in one walk each. */
		rt->walk_head = NULL;
		rt->walk_tail = &rt->walk_head;
		pthread_mutex_unlock(&rt->walk_lock);
		while (list)
			list = walk_run(list);
		pthread_mutex_lock(&rt->walk_lock);
	}
	pthread_mutex_unlock(&rt->walk_lock);
	return NULL;
}

/* Hand an extents request to the walker, starting it the first time. */
static int walker_queue(struct rbd_target *rt, struct rbd_io *io)
{
	int r = 0;

	pthread_mutex_lock(&rt->walk_lock);
	if (rt->walker_pid != getpid()) {
		r = -pthread_create(&rt->walker, NULL, rbd_walker, rt);
		if (!r)
			rt->walker_pid = getpid();
	}
	if (!r) {
		io->next = NULL;
		*rt->walk_tail = io;
		rt->walk_tail = &io->next;
		pthread_cond_signal(&rt->walk_cond);
	}
	pthread_mutex_unlock(&rt->walk_lock);
	return r;
}

/* ---- issuing ---- */

/* The data of all of @io's bios, in order, as one iovec array. */
static int io_iov(struct rbd_io *io, int *cnt)
{
	struct bvec_iter iter;
	struct bio_vec bv;
	unsigned int i, n = 0, done = 0;

	/* A split or clone's bi_vcnt says nothing of its own range: count. */
	for (i = 0; i < io->nr_bios; i++) {
		bio_for_each_segment(bv, io->bios[i], iter)
			n++;
	}
	io->iov = io->iov_inline;
	if (n > RBD_IOV_INLINE) {
		io->iov = malloc(n * sizeof(*io->iov));
		if (!io->iov) {
			io->iov = io->iov_inline;
			return -ENOMEM;
		}
	}
	for (i = 0; i < io->nr_bios; i++)
		done += bio_iter_to_iovec(io->bios[i], io->bios[i]->bi_iter,
					  io->iov + done, n - done);
	*cnt = (int)done;
	return 0;
}

static int io_issue(rbd_image_t image, struct rbd_io *io)
{
	const int thick = RBD_WRITE_ZEROES_FLAG_THICK_PROVISION;
	uint64_t off = io->off, len = io->len;
	rbd_completion_t c;
	int cnt = 0, r;

	if (io->op == REQ_OP_EXTENTS)
		return walker_queue(io->rt, io);
	if (io->op == REQ_OP_READ || io->op == REQ_OP_WRITE) {
		r = io_iov(io, &cnt);
		if (r)
			return r;
	}
	r = rbdlib.rbd_aio_create_completion(io, io_complete_cb, &c);
	if (r)
		return r;
	switch (io->op) {
	case REQ_OP_READ:
		r = rbdlib.rbd_aio_readv(image, io->iov, cnt, off, c);
		break;
	case REQ_OP_WRITE:
		r = rbdlib.rbd_aio_writev(image, io->iov, cnt, off, c);
		break;
	case REQ_OP_FLUSH:
		io->flushing = true;
		r = rbdlib.rbd_aio_flush(image, c);
		break;
	case REQ_OP_DISCARD:
		r = rbdlib.rbd_aio_discard(image, off, len, c);
		break;
	case REQ_OP_WRITE_ZEROES:
		/* NBD_CMD_FLAG_NO_HOLE: the range stays allocated. */
		r = rbdlib.rbd_aio_write_zeroes(image, off, len, c,
					 io->opf & REQ_NOUNMAP ? thick : 0, 0);
		break;
	default:
		r = -EOPNOTSUPP;
		break;
	}
	if (r)
		rbdlib.rbd_aio_release(c);
	return r;
}

/*
 * A fast zero librbd can keep: whole objects, which it removes without
 * writing a byte.  Part of an object gets zeros written into it, NO_HOLE
 * (thick provisioning) writes them all, with fancy striping a range is
 * no whole object, and in a clone librbd first copies the parent's
 * object up wherever the clone has snapshots.
 */
static bool fast_zero_ok(const struct rbd_target *rt, uint64_t off,
			 uint64_t len, unsigned int opf)
{
	return !(opf & REQ_NOUNMAP) && rt->zero_obj && off % rt->zero_obj == 0 &&
	       len % rt->zero_obj == 0;
}

static bool rbd_zero_refused(struct target *t, uint64_t off, uint64_t len,
			     unsigned int opf)
{
	return !fast_zero_ok(to_rbd(t), off, len, opf);
}

/*
 * What needs no request to the cluster: a read-ahead hint, the extents of
 * an image without an object map (all data: only reading would tell), and
 * a fast zero librbd cannot keep.  -1: send it.
 */
static int rbd_answer_here(struct rbd_target *rt, const struct bio *bio)
{
	enum req_op op = bio_op(bio);

	if (rt->readonly && op_is_write(op))
		return -EPERM;
	switch (op) {
	case REQ_OP_CACHE:
		return 0;
	case REQ_OP_EXTENTS:
		/* Not connected yet: the walker decides once it is. */
		if (!atomic_load_explicit(&rt->image, memory_order_acquire) ||
		    rt->h->fast_diff)
			return -1;
		return bio_extents_add(bio->bi_ext, bio->bi_iter.bi_done,
				       bio->bi_iter.bi_size, 0);
	case REQ_OP_WRITE_ZEROES:
		if ((bio->bi_opf & REQ_NOFALLBACK) &&
		    !fast_zero_ok(rt, bio_offset_bytes(bio),
				  bio->bi_iter.bi_size, bio->bi_opf))
			return -EOPNOTSUPP;
		return -1;
	case REQ_OP_FLUSH:
		if (rt->readonly)
			return 0;
		/* Said once, by rbd_flush_failed. */
		return rbd_lost(&rt->t) ? -EIO : -1;
	default:
		return -1;
	}
}

static bool rbd_wait_connect(struct rbd_target *rt, struct rbd_io *io);

/*
 * Send @nr bios (one, or a run that follows each other on the image, same
 * op and flags) as one request, or queue it for the connector.
 */
static void rbd_send(struct rbd_target *rt, struct ioq *q, struct bio **bios,
		     unsigned int nr)
{
	struct bio *first = bios[0];
	rbd_image_t image;
	struct rbd_port *p;
	struct rbd_io *io;
	unsigned int i;
	int r;

	p = port_get(q);
	io = !p ? NULL : p->free_ios ? p->free_ios : malloc(sizeof(*io));
	if (unlikely(!io)) {
		for (i = 0; i < nr; i++)
			ioq_defer_end(q, bios[i], -ENOMEM);
		return;
	}
	if (io == p->free_ios)
		p->free_ios = io->next;
	io->port = p;
	io->rt = rt;
	io->op = bio_op(first);
	io->opf = first->bi_opf;
	io->off = bio_offset_bytes(first);
	io->len = 0;
	for (i = 0; i < nr; i++) {
		io->bios[i] = bios[i];
		io->len += bios[i]->bi_iter.bi_size;
	}
	io->nr_bios = nr;
	io->ret = 0;
	io->issue = false;
	io->flushing = false;
	io->iov = io->iov_inline;
	io->ext = (struct bio_extents){ 0 };
	io->then_flush = (io->opf & REQ_FUA) && (io->op == REQ_OP_WRITE ||
						 io->op == REQ_OP_WRITE_ZEROES ||
						 io->op == REQ_OP_DISCARD);
	q->inflight++;
	p->nr_out++;
	if (unlikely(p->watch.unwatched))
		port_watch(p);
	image = atomic_load_explicit(&rt->image, memory_order_acquire);
	if (unlikely(!image) && rbd_wait_connect(rt, io))
		return;
	image = atomic_load_explicit(&rt->image, memory_order_acquire);
	if (unlikely(!image)) {
		io->ret = -ENOTCONN;
		io_end(p, io, -EIO);
		return;
	}
	r = io_issue(image, io);
	if (unlikely(r)) {
		io->ret = r;
		io_end(p, io, rbd_errno(r));
	}
}

static void rbd_submit(struct target *t, struct bio *bio)
{
	struct rbd_target *rt = to_rbd(t);
	struct ioq *q = ioq_current();
	int r;

	member_acct_start(t, rt->stats, bio);
	if (unlikely(!q)) {
		bio_io_error(bio, -ENXIO);
		return;
	}
	r = rbd_answer_here(rt, bio);
	if (r != -1) {
		ioq_defer_end(q, bio, r);
		return;
	}
	if (bio_has_data(bio) && blk_plug_add(t, bio))
		return;
	rbd_send(rt, q, &bio, 1);
}

/* Plugged reads and writes: runs that follow each other go as one. */
static void rbd_unplug(struct target *t, struct bio **bios, unsigned int nr)
{
	struct ioq *q = ioq_current();
	unsigned int i = 0;

	while (i < nr) {
		unsigned int n = bio_run_len(bios + i, nr - i, 0);

		rbd_send(to_rbd(t), q, bios + i, n);
		i += n;
	}
}

static void rbd_destroy(struct target *t)
{
	struct rbd_target *rt = to_rbd(t);

	if (rt->joinable)
		pthread_join(rt->connector, NULL);
	if (rt->walker_pid == getpid()) {
		pthread_mutex_lock(&rt->walk_lock);
		rt->walk_stop = true;
		pthread_cond_signal(&rt->walk_cond);
		pthread_mutex_unlock(&rt->walk_lock);
		pthread_join(rt->walker, NULL);
	}
	pthread_cond_destroy(&rt->walk_cond);
	pthread_mutex_destroy(&rt->walk_lock);
	/* rbd_close waits for what is still out (nothing: drained). */
	if (rt->image)
		handle_put(rt->h);
	pthread_mutex_destroy(&rt->connect_lock);
	io_stats_destroy(rt->stats);
	free(rt->t.name);
	free(rt);
}

static void rbd_start(struct target *t)
{
	/* In the background; bios that come first wait for it. */
	(void)rbd_wait_connect(to_rbd(t), NULL);
}

static const struct target_ops rbd_target_ops = {
	.submit = rbd_submit,
	.destroy = rbd_destroy,
	.start = rbd_start,
	.unplug = rbd_unplug,
	.zero_refused = rbd_zero_refused,
	.lost = rbd_lost,
};

struct io_stats *rbd_target_stats(struct target *t)
{
	return t->ops == &rbd_target_ops ? to_rbd(t)->stats : NULL;
}

static void handle_free(struct rbd_handle *h)
{
	free(h->member);
	free(h);
}

/* Open @member's image: a handle of its own, not in the list yet. */
static int handle_open(const char *member, bool readonly,
		       unsigned int timeout_ms, struct rbd_handle **out,
		       char *errbuf, size_t errlen)
{
	struct rbd_handle *h = calloc(1, sizeof(*h));
	rbd_image_info_t info;
	uint64_t features = 0, stripes = 0, overlap = 0;
	struct rbd_spec s;
	int r;

	if (!h || !(h->member = strdup(member))) {
		free(h);
		return verr(errbuf, errlen, -ENOMEM, "out of memory");
	}
	r = spec_parse(member, &s, errbuf, errlen);
	if (r) {
		handle_free(h);
		return r;
	}
	r = cluster_get(&s, timeout_ms, member, &h->cl, errbuf, errlen);
	if (r)
		goto out;
	r = rbdlib.rados_ioctx_create(h->cl->rados, s.pool, &h->ioctx);
	if (r) {
		verr(errbuf, errlen, r, "member %s: pool %s: %s", member,
		     s.pool, strerror(-r));
		goto err_cluster;
	}
	if (s.ns)
		rbdlib.rados_ioctx_set_namespace(h->ioctx, s.ns);
	/* A snapshot is read-only whatever the volume asks. */
	h->snap = s.snap != NULL;
	h->readonly = readonly || h->snap;
	r = h->readonly
		? rbdlib.rbd_open_read_only(h->ioctx, s.image, &h->image, s.snap)
		: rbdlib.rbd_open(h->ioctx, s.image, &h->image, NULL);
	if (r) {
		verr(errbuf, errlen, r, "member %s: image %s%s%s: %s", member,
		     s.image, s.snap ? "@" : "", s.snap ? s.snap : "",
		     strerror(-r));
		goto err_ioctx;
	}
	r = rbdlib.rbd_get_size(h->image, &h->size);
	if (!r)
		r = rbdlib.rbd_get_features(h->image, &features);
	if (!r)
		r = rbdlib.rbd_stat(h->image, &info, sizeof(info));
	if (!r)
		r = rbdlib.rbd_get_stripe_count(h->image, &stripes);
	if (!r && rbdlib.rbd_get_overlap(h->image, &overlap))
		overlap = 1; /* cannot tell: as a clone */
	if (r) {
		verr(errbuf, errlen, r, "member %s: reading its size and layout: %s",
		     member, strerror(-r));
		rbdlib.rbd_close(h->image);
		goto err_ioctx;
	}
	h->obj_size = info.obj_size;
	/* With fancy striping (stripes > 1) objects interleave. */
	h->fast_diff = (features & RBD_FEATURE_FAST_DIFF) && stripes == 1 &&
		       h->obj_size;
	h->zero_obj = stripes == 1 && !overlap ? h->obj_size : 0;
	h->timeout_ms = timeout_ms;
	h->pid = getpid();
	h->refs = 1;
	*out = h;
	goto out;
err_ioctx:
	rbdlib.rados_ioctx_destroy(h->ioctx);
err_cluster:
	cluster_put(h->cl);
out:
	spec_free(&s);
	if (r)
		handle_free(h);
	return r;
}

static void handle_close(struct rbd_handle *h)
{
	rbdlib.rbd_close(h->image);
	rbdlib.rados_ioctx_destroy(h->ioctx);
	cluster_put(h->cl);
	handle_free(h);
}

/* A handle of this process's for @member, with a reference; under rbd_lock. */
static struct rbd_handle *handle_find(const char *member, bool readonly,
				      unsigned int timeout_ms)
{
	for (struct rbd_handle *h = rbd_handles; h; h = h->next) {
		if (h->pid == getpid() && !strcmp(h->member, member) &&
		    (readonly || !h->readonly) && h->timeout_ms == timeout_ms) {
			h->refs++;
			return h;
		}
	}
	return NULL;
}

/* @member's image, shared with its other users in this process. */
static int handle_get(const char *member, bool readonly,
		      unsigned int timeout_ms, struct rbd_handle **out,
		      char *errbuf, size_t errlen)
{
	struct rbd_handle *h, *mine = NULL;
	int r;

	pthread_mutex_lock(&rbd_lock);
	h = handle_find(member, readonly, timeout_ms);
	pthread_mutex_unlock(&rbd_lock);
	if (h) {
		*out = h;
		return 0;
	}
	/* Opened outside the lock: it takes up to the timeout. */
	r = handle_open(member, readonly, timeout_ms, &mine, errbuf, errlen);
	if (r)
		return r;
	pthread_mutex_lock(&rbd_lock);
	/* Another thread may have opened it meanwhile: one handle a member. */
	h = handle_find(member, readonly, timeout_ms);
	if (!h) {
		mine->next = rbd_handles;
		rbd_handles = mine;
		h = mine;
		mine = NULL;
	}
	pthread_mutex_unlock(&rbd_lock);
	if (mine)
		handle_close(mine);
	*out = h;
	return 0;
}

/*
 * Close this process's handles (only those nobody holds: @idle), outside
 * the lock: closing waits for the cluster.
 */
static void handles_close(bool idle)
{
	struct rbd_handle *gone = NULL, *h;

	pthread_mutex_lock(&rbd_lock);
	for (struct rbd_handle **pp = &rbd_handles; (h = *pp);) {
		if ((idle && h->refs) || h->pid != getpid()) {
			pp = &h->next;
			continue;
		}
		*pp = h->next;
		h->next = gone;
		gone = h;
	}
	pthread_mutex_unlock(&rbd_lock);
	while ((h = gone)) {
		gone = h->next;
		handle_close(h);
	}
}

/*
 * While volumes are opened or checked (rbd_hold), a handle nobody holds
 * any more stays open: the probes of one start (assembly, the member
 * check, the target's own) then cost one cluster connection and one image
 * open a member rather than one each.  Under rbd_lock.
 */
static unsigned int rbd_holds;

void rbd_hold(void)
{
	pthread_mutex_lock(&rbd_lock);
	rbd_holds++;
	pthread_mutex_unlock(&rbd_lock);
}

void rbd_release(void)
{
	bool last;

	pthread_mutex_lock(&rbd_lock);
	last = !--rbd_holds;
	pthread_mutex_unlock(&rbd_lock);
	if (last)
		handles_close(true);
}

void rbd_release_locks(void)
{
	pthread_mutex_lock(&rbd_lock);
	for (struct rbd_handle *h = rbd_handles; h; h = h->next) {
		int owner = 0;

		/* Images without the exclusive-lock feature have none. */
		if (h->pid == getpid() && !h->readonly &&
		    !rbdlib.rbd_is_exclusive_lock_owner(h->image, &owner) && owner)
			(void)rbdlib.rbd_lock_release(h->image);
	}
	pthread_mutex_unlock(&rbd_lock);
}

void rbd_close_all(void)
{
	handles_close(false);
}

void rbd_wait_connecting(void)
{
	pthread_mutex_lock(&rbd_lock);
	while (rbd_connecting)
		pthread_cond_wait(&rbd_connected, &rbd_lock);
	pthread_mutex_unlock(&rbd_lock);
}

static void handle_put(struct rbd_handle *h)
{
	pthread_mutex_lock(&rbd_lock);
	if (--h->refs || rbd_holds) {
		pthread_mutex_unlock(&rbd_lock);
		return;
	}
	for (struct rbd_handle **pp = &rbd_handles; *pp; pp = &(*pp)->next) {
		if (*pp == h) {
			*pp = h->next;
			break;
		}
	}
	pthread_mutex_unlock(&rbd_lock);
	handle_close(h);
}

/* Open the image of @member into @rt (its handle, image and size). */
static int rbd_image_open(struct rbd_target *rt, const char *member,
			  const struct remote_opts *opts, char *errbuf,
			  size_t errlen)
{
	unsigned int timeout_ms = opts && opts->timeout_ms
				      ? opts->timeout_ms
				      : RBD_TIMEOUT_MS_DEFAULT;
	bool readonly = opts && opts->readonly;
	struct rbd_handle *h;
	int r;

	r = handle_get(member, readonly, timeout_ms, &h, errbuf, errlen);
	if (r)
		return r;
	/*
	 * Connecting again after a probe: the image must be the same, and
	 * what the probe learnt stays as it is (workers read it meanwhile).
	 */
	if (rt->t.size_bytes && h->size != rt->t.size_bytes) {
		r = verr(errbuf, errlen, -ESTALE,
			 "member %s: %llu bytes now, %llu at start: refused",
			 member, (unsigned long long)h->size,
			 (unsigned long long)rt->t.size_bytes);
		handle_put(h);
		return r;
	}
	if (!rt->t.size_bytes) {
		rt->readonly = readonly || h->snap;
		rt->t.size_bytes = h->size;
		rt->t.readonly = h->snap;
	}
	rt->h = h;
	atomic_store_explicit(&rt->image, h->image, memory_order_release);
	return 0;
}

/* Open and close again: @rt learns the size and whether it is read-only. */
static int rbd_probe_into(struct rbd_target *rt, const char *member,
			  unsigned int timeout_ms, char *errbuf, size_t errlen)
{
	struct remote_opts opts = {.readonly = true, .timeout_ms = timeout_ms};
	int r = rbd_image_open(rt, member, &opts, errbuf, errlen);

	if (r)
		return r;
	rt->zero_obj = rt->h->zero_obj;
	handle_put(rt->h);
	rt->h = NULL;
	rt->image = NULL;
	return 0;
}

int rbd_probe(const char *member, unsigned int timeout_ms, uint64_t *size,
	      char *errbuf, size_t errlen)
{
	struct rbd_target rt;
	int r;

	memset(&rt, 0, sizeof(rt));
	r = rbd_probe_into(&rt, member, timeout_ms, errbuf, errlen);
	if (!r)
		*size = rt.t.size_bytes;
	return r;
}

/* The connector thread: connect, then send the waiting bios home. */
static void *rbd_connector(void *arg)
{
	struct rbd_target *rt = arg;
	struct remote_opts opts = { .readonly = rt->readonly,
				    .timeout_ms = rt->timeout_ms };
	struct rbd_io *list;
	char msg[256];
	int r;

	r = rbd_image_open(rt, rt->t.name, &opts, msg, sizeof(msg));
	pthread_mutex_lock(&rt->connect_lock);
	if (r) {
		rt->retry_ns = engine_now_ns() + RBD_RETRY_NS;
		if (!rt->down_logged)
			target_notice(TARGET_NOTICE_ERROR,
				      "%s; its requests fail with EIO until it can be reached",
				      msg);
		rt->down_logged = true;
	} else if (rt->down_logged) {
		target_notice(TARGET_NOTICE_INFO, "member %s: connected",
			      rt->t.name);
		rt->down_logged = false;
	}
	list = rt->waiting;
	rt->waiting = NULL;
	rt->connecting = false;
	pthread_mutex_unlock(&rt->connect_lock);
	pthread_mutex_lock(&rbd_lock);
	if (!--rbd_connecting)
		pthread_cond_broadcast(&rbd_connected);
	pthread_mutex_unlock(&rbd_lock);
	while (list) {
		struct rbd_io *io = list;

		list = io->next;
		io->ret = r ? -ENOTCONN : 0;
		io->issue = !r;
		io_to_port(io);
	}
	return NULL;
}

/*
 * @rt is not connected: start the connector unless it runs, and queue @io
 * (if any) for it.  False when @io is not queued: connected meanwhile
 * (issue it), or failed lately (fail it).
 */
static bool rbd_wait_connect(struct rbd_target *rt, struct rbd_io *io)
{
	bool queued = false;

	pthread_mutex_lock(&rt->connect_lock);
	if (rt->image)
		goto out;
	if (!rt->connecting) {
		if (engine_now_ns() < rt->retry_ns)
			goto out;
		if (rt->joinable)
			pthread_join(rt->connector, NULL);
		/* Counted first: the connector may be done before we look. */
		pthread_mutex_lock(&rbd_lock);
		rbd_connecting++;
		pthread_mutex_unlock(&rbd_lock);
		rt->joinable = !pthread_create(&rt->connector, NULL,
					       rbd_connector, rt);
		if (!rt->joinable) {
			pthread_mutex_lock(&rbd_lock);
			if (!--rbd_connecting)
				pthread_cond_broadcast(&rbd_connected);
			pthread_mutex_unlock(&rbd_lock);
			goto out;
		}
		rt->connecting = true;
	}
	if (io) {
		io->next = rt->waiting;
		rt->waiting = io;
		queued = true;
	}
out:
	pthread_mutex_unlock(&rt->connect_lock);
	return queued;
}

int rbd_target_open(struct target **out, const char *member,
		    const struct remote_opts *opts, char *errbuf, size_t errlen)
{
	struct rbd_target *rt = calloc(1, sizeof(*rt));
	int r;

	if (!rt)
		return verr(errbuf, errlen, -ENOMEM, "out of memory");
	rt->t.name = strdup(member);
	if (!rt->t.name) {
		free(rt);
		return verr(errbuf, errlen, -ENOMEM, "out of memory");
	}
	rt->timeout_ms = opts && opts->timeout_ms ? opts->timeout_ms
						  : RBD_TIMEOUT_MS_DEFAULT;
	/* The size and a mistake now; the connection for I/O later. */
	r = rbd_probe_into(rt, member, rt->timeout_ms, errbuf, errlen);
	if (r) {
		free(rt->t.name);
		free(rt);
		return r;
	}
	pthread_mutex_init(&rt->connect_lock, NULL);
	pthread_mutex_init(&rt->walk_lock, NULL);
	pthread_cond_init(&rt->walk_cond, NULL);
	rt->walk_tail = &rt->walk_head;
	rt->readonly = (opts && opts->readonly) || rt->t.readonly;
	if (rt->t.readonly && !(opts && opts->readonly))
		target_notice(
		    TARGET_NOTICE_INFO,
		    "member %s: a snapshot is read-only, and so is the volume",
		    member);
	rt->t.ops = &rbd_target_ops;
	rt->t.whole_io = true;
	if (opts && opts->stats_parent)
		rt->stats = io_stats_create(member, opts->stats_parent);
	if (opts && opts->trace_parent)
		rt->t.trace_id =
		    trace_obj_add(TRACE_OBJ_MEMBER, opts->trace_parent, member);
	*out = &rt->t;
	return 0;
}

/* ---- metadata I/O (mdev.h) ---- */

/*
 * The member's image handle (rbd_handle, shared with its data path), got
 * on open: librbd's synchronous calls are thread-safe and bounded by the
 * cluster's op timeouts.  A process forked since (nbdkit and bionbd open
 * volumes before they daemonize) leaves the parent's handle alone and
 * gets its own.
 */
struct rbd_mdev {
	struct mdev m;
	pthread_mutex_t lock; /* opening */
	struct rbd_target rt; /* its handle, image and size only */
	pid_t pid; /* whose handles rt holds */
	bool write;
};

static rbd_image_t rbm_image(struct mdev *m, int *err)
{
	struct rbd_mdev *rm = container_of(m, struct rbd_mdev, m);
	struct remote_opts opts = { .readonly = !rm->write,
				    .timeout_ms = rm->rt.timeout_ms };
	rbd_image_t image;
	char why[256];

	pthread_mutex_lock(&rm->lock);
	if (rm->rt.image && rm->pid != getpid()) {
		/* The parent's: its threads are not here to close it. */
		rm->rt.image = NULL;
		rm->rt.h = NULL;
	}
	*err = 0;
	if (!rm->rt.image)
		*err = rbd_image_open(&rm->rt, rm->rt.t.name, &opts, why,
				      sizeof(why));
	if (!*err)
		rm->pid = getpid();
	image = rm->rt.image;
	pthread_mutex_unlock(&rm->lock);
	return image;
}

static int rbm_pread(struct mdev *m, void *buf, size_t len, uint64_t off)
{
	struct rbd_mdev *rm = container_of(m, struct rbd_mdev, m);
	rbd_image_t image;
	uint64_t size;
	ssize_t n;
	int r;

	image = rbm_image(m, &r);
	if (r)
		return r;
	size = rm->rt.t.size_bytes;
	if (off > size || len > size - off) {
		/* Past the end reads as zeros, as a file does. */
		memset(buf, 0, len);
		len = off < size ? (size_t)(size - off) : 0;
	}
	if (!len)
		return 0;
	n = rbdlib.rbd_read(image, off, len, buf);
	return n < 0 ? (int)n : (size_t)n == len ? 0 : -EIO;
}

static int rbm_pwrite(struct mdev *m, const void *buf, size_t len,
		      uint64_t off)
{
	struct rbd_mdev *rm = container_of(m, struct rbd_mdev, m);
	rbd_image_t image;
	ssize_t n;
	int r;

	image = rbm_image(m, &r);
	if (r)
		return r;
	if (off > rm->rt.t.size_bytes || len > rm->rt.t.size_bytes - off)
		return -ENOSPC;
	n = rbdlib.rbd_write(image, off, len, buf);
	return n < 0 ? (int)n : (size_t)n == len ? 0 : -EIO;
}

static int rbm_zero(struct mdev *m, uint64_t off, uint64_t len)
{
	struct rbd_mdev *rm = container_of(m, struct rbd_mdev, m);
	rbd_image_t image;
	int r;

	image = rbm_image(m, &r);
	if (r)
		return r;
	if (off > rm->rt.t.size_bytes || len > rm->rt.t.size_bytes - off)
		return -ENOSPC;
	/* In pieces a size_t and an OSD op take comfortably. */
	while (len) {
		size_t n = len < (64u << 20) ? (size_t)len : 64u << 20;
		ssize_t w = rbdlib.rbd_write_zeroes(image, off, n, 0, 0);

		if (w < 0)
			return (int)w;
		off += n;
		len -= n;
	}
	return 0;
}

static int rbm_sync(struct mdev *m)
{
	struct rbd_mdev *rm = container_of(m, struct rbd_mdev, m);
	rbd_image_t image;
	int r;

	image = rbm_image(m, &r);
	if (r)
		return r;
	if (atomic_load(&rm->rt.h->lost))
		return -EIO;
	r = rbdlib.rbd_flush(image);
	if (r)
		rbd_flush_failed(rm->rt.h, rm->rt.t.name, r);
	return r;
}

static int rbm_size(struct mdev *m, uint64_t *bytes)
{
	*bytes = container_of(m, struct rbd_mdev, m)->rt.t.size_bytes;
	return 0;
}

static void rbm_close(struct mdev *m)
{
	struct rbd_mdev *rm = container_of(m, struct rbd_mdev, m);

	if (rm->rt.image && rm->pid == getpid())
		handle_put(rm->rt.h);
	pthread_mutex_destroy(&rm->lock);
	free(rm->rt.t.name);
	free(rm);
}

/*
 * A server with the image open watches its header; so does this process's
 * own handle, whose watch carries this cluster connection's id.  Any
 * other watcher is a client that may write while we rewrite.
 */
static int rbm_claim(struct mdev *m, char *why, size_t whylen)
{
	struct rbd_mdev *rm = container_of(m, struct rbd_mdev, m);
	const char *name = rm->rt.t.name;
	rbd_image_watcher_t w[8];
	size_t n = ARRAY_SIZE(w), others = 0, first = 0;
	rbd_image_t image;
	uint64_t self;
	int r;

	image = rbm_image(m, &r);
	if (r)
		return verr(why, whylen, r, "member %s: %s", name,
			    strerror(-r));
	self = rbdlib.rados_get_instance_id(rm->rt.h->cl->rados);
	r = rbdlib.rbd_watchers_list(image, w, &n);
	/* @n is then how many there are, this process's watch included. */
	if (r == -ERANGE)
		return verr(why, whylen, -EBUSY,
			    "member %s: in use by %zu other clients", name,
			    n - 1);
	if (r)
		return verr(why, whylen, r, "member %s: listing its clients: %s",
			    name, strerror(-r));
	for (size_t i = 0; i < n; i++) {
		if ((uint64_t)w[i].id != self && !others++)
			first = i;
	}
	if (others)
		r = verr(why, whylen, -EBUSY,
			 "member %s: in use by another client (client.%lld at %s%s): stop the server that serves it first (a killed one keeps it until the cluster times it out, about 30 s)",
			 name, (long long)w[first].id, w[first].addr,
			 others > 1 ? " and others" : "");
	rbdlib.rbd_watchers_list_cleanup(w, n);
	return r;
}

static const struct mdev_ops rbd_mdev_ops = {
	.pread = rbm_pread,
	.pwrite = rbm_pwrite,
	.zero = rbm_zero,
	.sync = rbm_sync,
	.size = rbm_size,
	.close = rbm_close,
	.claim = rbm_claim,
};

int rbd_mdev_open(struct mdev **out, const char *member, bool write,
		  unsigned int timeout_ms, char *why, size_t whylen)
{
	struct rbd_mdev *rm = calloc(1, sizeof(*rm));
	struct remote_opts opts = { .readonly = !write,
				    .timeout_ms = timeout_ms ?
							  timeout_ms :
							  RBD_TIMEOUT_MS_DEFAULT };
	int r;

	if (!rm || !(rm->rt.t.name = strdup(member))) {
		free(rm);
		return verr(why, whylen, -ENOMEM, "out of memory");
	}
	rm->m.ops = &rbd_mdev_ops;
	rm->m.fd = -1;
	rm->write = write;
	rm->rt.timeout_ms = opts.timeout_ms;
	pthread_mutex_init(&rm->lock, NULL);
	r = rbd_image_open(&rm->rt, member, &opts, why, whylen);
	rm->pid = getpid(); /* rbm_close puts a handle of this process */
	if (!r && write && rm->rt.t.readonly)
		r = verr(why, whylen, -EROFS,
			 "member %s: a snapshot is read-only", member);
	if (r) {
		rbm_close(&rm->m);
		return r;
	}
	*out = &rm->m;
	return 0;
}
