// SPDX-License-Identifier: MIT
/*
 * main.c - bionbd: command line, exports, listening sockets, worker
 * threads, daemonizing and orderly shutdown.
 *
 * The main thread only accepts: each new socket goes round-robin to a
 * worker (a libev loop with its own ioq) and stays there.  SIGTERM/SIGINT
 * stop accepting, let every worker answer what it has taken, flush every
 * export, and exit 0.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <bionbd/config.h>

#include "server.h"

#define SHUTDOWN_GRACE_SECONDS 10.0
#define MAX_LISTENERS 16

struct listener {
	ev_io io;
	int fd;
	bool tcp;
};

struct options {
	bool foreground;
	bool readonly;
	const char *unix_path;
	const char *addr;
	const char *port;
	const char *export_name;
	const char *pidfile;
	const char *conf_path;
	const char *stripe_size;
	const char *size;
	unsigned int threads;
	bool backend_set;
	enum ioq_backend backend;
	unsigned int poll_us;
	bool poll_us_set;
	char **members;
	int nr_members;
};

static struct server srv;
static struct listener listeners[MAX_LISTENERS];
static int nr_listeners;
static unsigned int next_worker;
static char *unix_path_bound;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
	va_list ap;

	fputs("bionbd: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static void usage(FILE *f)
{
	fputs("Usage: bionbd [-f] [-U SOCK] [-i ADDR] [-p PORT] [-r] [-t THREADS]\n"
	      "              [-e EXPORTNAME] [-P PIDFILE] [--stripe-size SIZE]\n"
	      "              [--size SIZE] [--backend io_uring|threads]\n"
	      "              [--poll-us N] MEMBER...\n"
	      "       bionbd [-f] [-U SOCK] [-i ADDR] [-p PORT] [-t THREADS]\n"
	      "              [-P PIDFILE] -c FILE.conf\n"
	      "\n"
	      "Serve a RAID-0 volume striped over MEMBER files (or the exports of\n"
	      "FILE.conf) over NBD.  Listens on 127.0.0.1:10809 unless -U, -i or\n"
	      "-p say otherwise (-U alone: the unix socket only).\n"
	      "\n"
	      "  -f, --foreground       do not fork into the background\n"
	      "  -U, --unix SOCK        listen on a unix socket\n"
	      "  -i, --ipaddr ADDR      listen on ADDR (default 127.0.0.1)\n"
	      "  -p, --port PORT        TCP port (default 10809)\n"
	      "  -r, --readonly         refuse writes, trims and zeroes (EPERM)\n"
	      "  -t, --threads N        worker threads (default: number of CPUs)\n"
	      "  -e, --exportname NAME  export name (default \"\")\n"
	      "  -P, --pidfile FILE     write the pid once ready to serve\n"
	      "  -c, --config FILE      exports (and [server] defaults) from FILE\n"
	      "      --stripe-size SIZE stripe unit, power of two >= 4K (default 64K)\n"
	      "      --size SIZE        volume size; creates/extends members\n"
	      "      --backend NAME     io_uring (default) or threads\n"
	      "      --poll-us N        busy-poll up to N microseconds for the next\n"
	      "                         request after replying (adaptive; default\n"
	      "                         200, 0 = always sleep)\n"
	      "  -h, --help             this text\n"
	      "  -V, --version          print the version\n",
	      f);
}

/* ---- workers ---- */

/*
 * Busy-polling.  On a VM a cross-CPU wake-up costs tens of microseconds,
 * twice per request at queue depth 1 (the client wakes us, we wake the
 * client), more than the request itself.  So after replying, a worker
 * keeps polling its sockets (epoll with a zero timeout) for a short window
 * before it sleeps, and the client's next request needs no wake-up.  The
 * window adapts to the gaps it sees between the last reply and the next
 * request: it grows to cover gaps shorter than poll_max and halves on each
 * longer one, so a slow or idle client soon costs no spinning at all.
 */
#define POLL_MIN_S 2e-6

static void worker_after_reap(struct ioq_ev *qev)
{
	struct worker *w = container_of(qev, struct worker, qev);

	if (w->dirty) {
		w->idle_since = ev_time();
		if (w->poll_s > 0) {
			w->poll_until = w->idle_since + w->poll_s;
			ev_idle_start(w->loop, &w->poll);
		}
	}
	worker_send_dirty(w);
}

static void worker_poll_cb(struct ev_loop *loop, ev_idle *i, int revents)
{
	struct worker *w = container_of(i, struct worker, poll);

	if (ev_time() > w->poll_until)
		ev_idle_stop(loop, i);
}

void worker_poll_arrival(struct worker *w)
{
	double gap, max = w->srv->poll_max;

	if (!w->idle_since)
		return;
	gap = ev_now(w->loop) - w->idle_since;
	w->idle_since = 0;
	if (gap < max) {
		if (gap > w->poll_s)
			w->poll_s = gap * 2 < max ? gap * 2 : max;
		if (w->poll_s < POLL_MIN_S)
			w->poll_s = POLL_MIN_S;
	} else {
		w->poll_s /= 2;
		if (w->poll_s < POLL_MIN_S)
			w->poll_s = 0;
	}
}

static void worker_grace_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	/* Clients that stopped reading their replies: cut them off. */
	worker_close_all(container_of(t, struct worker, grace));
}

static void worker_wake_cb(struct ev_loop *loop, ev_async *a, int revents)
{
	struct worker *w = container_of(a, struct worker, wake);
	int *fds;
	unsigned int n;

	pthread_mutex_lock(&w->lock);
	fds = w->new_fds;
	n = w->nr_new;
	w->new_fds = NULL;
	w->nr_new = w->cap_new = 0;
	pthread_mutex_unlock(&w->lock);

	for (unsigned int i = 0; i < n; i++) {
		if (w->stopping || atomic_load(&srv.stopping))
			close(fds[i]);
		else
			conn_accept(w, fds[i]);
	}
	free(fds);
	if (atomic_load(&srv.stopping) && !w->stopping) {
		ev_timer_start(w->loop, &w->grace);
		worker_begin_stop(w);
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	ioq_set_current(w->q);
	ev_run(w->loop, 0);
	return NULL;
}

static int worker_init(struct worker *w, unsigned int id)
{
	int r;

	w->srv = &srv;
	w->id = id;
	pthread_mutex_init(&w->lock, NULL);
	w->rbuf = malloc(SRV_RBUF_BYTES);
	w->loop = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
	if (!w->rbuf || !w->loop)
		return -ENOMEM;
	r = ioq_create(&w->q, srv.backend, 256);
	if (r)
		return r;
	r = ioq_ev_start(&w->qev, w->q, w->loop);
	if (r)
		return r;
	w->qev.after_reap = worker_after_reap;
	ev_async_init(&w->wake, worker_wake_cb);
	ev_idle_init(&w->poll, worker_poll_cb);
	ev_async_start(w->loop, &w->wake);
	ev_timer_init(&w->grace, worker_grace_cb, SHUTDOWN_GRACE_SECONDS, 0.);
	return 0;
}

static void worker_fini(struct worker *w)
{
	if (w->q) {
		ioq_ev_stop(&w->qev, w->loop);
		ioq_destroy(w->q);
	}
	for (unsigned int k = 0; k < BUF_CLASSES; k++) {
		while (w->bufs.free[k]) {
			void *p = w->bufs.free[k];

			w->bufs.free[k] = *(void **)p;
			free(p);
		}
	}
	while (w->free_reqs) {
		void *p = w->free_reqs;

		w->free_reqs = *(void **)p;
		free(p);
	}
	if (w->loop)
		ev_loop_destroy(w->loop);
	free(w->rbuf);
	free(w->new_fds);
	pthread_mutex_destroy(&w->lock);
}

static void worker_hand_off(struct worker *w, int fd)
{
	pthread_mutex_lock(&w->lock);
	if (w->nr_new == w->cap_new) {
		unsigned int cap = w->cap_new ? w->cap_new * 2 : 16;
		int *v = realloc(w->new_fds, cap * sizeof(int));

		if (!v) {
			pthread_mutex_unlock(&w->lock);
			close(fd);
			return;
		}
		w->new_fds = v;
		w->cap_new = cap;
	}
	w->new_fds[w->nr_new++] = fd;
	pthread_mutex_unlock(&w->lock);
	ev_async_send(w->loop, &w->wake);
}

/* ---- listening ---- */

static void accept_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct listener *l = container_of(io, struct listener, io);

	for (;;) {
		int one = 1, sndbuf = SRV_UNIX_SNDBUF;
		int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return; /* EAGAIN, or out of fds: try on the next event */
		}
		if (l->tcp)
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one,
				   sizeof(one));
		else
			/*
			 * A unix socket queues only sk_sndbuf of replies
			 * (~200K by default), so a 1 MiB read went out in
			 * five sends, each waiting for the client to wake
			 * and drain.  The kernel caps this at wmem_max; TCP
			 * is left to autotuning, which setting it would turn
			 * off.
			 */
			setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf,
				   sizeof(sndbuf));
		worker_hand_off(&srv.workers[next_worker++ % srv.nr_workers],
				fd);
	}
}

static void add_listener(int fd, bool tcp)
{
	struct listener *l;

	if (nr_listeners == MAX_LISTENERS)
		die("too many listening addresses");
	l = &listeners[nr_listeners++];
	l->fd = fd;
	l->tcp = tcp;
	ev_io_init(&l->io, accept_cb, fd, EV_READ);
}

static void listen_tcp(const char *addr, const char *port)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC,
				  .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE };
	struct addrinfo *res, *ai;
	int r, bound = 0;

	r = getaddrinfo(addr, port, &hints, &res);
	if (r)
		die("listen %s port %s: %s", addr ? addr : "*", port,
		    gai_strerror(r));
	for (ai = res; ai; ai = ai->ai_next) {
		int one = 1;
		int fd = socket(ai->ai_family,
				ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
				ai->ai_protocol);

		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (ai->ai_family == AF_INET6)
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one,
				   sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 1024)) {
			int e = errno;

			close(fd);
			freeaddrinfo(res);
			die("listen %s port %s: %s", addr ? addr : "*", port,
			    strerror(e));
		}
		add_listener(fd, true);
		bound++;
	}
	freeaddrinfo(res);
	if (!bound)
		die("listen %s port %s: no usable address", addr ? addr : "*",
		    port);
}

static void listen_unix(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		die("unix socket %s: path too long", path);
	strcpy(sa.sun_path, path);
	/* A socket left behind by a killed server is replaced, nothing else. */
	if (stat(path, &st) == 0 && S_ISSOCK(st.st_mode))
		unlink(path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    listen(fd, 1024))
		die("unix socket %s: %s", path, strerror(errno));
	unix_path_bound = strdup(path);
	add_listener(fd, false);
}

/* ---- shutdown ---- */

static void stop_cb(struct ev_loop *loop, ev_signal *s, int revents)
{
	atomic_store(&srv.stopping, true);
	for (int i = 0; i < nr_listeners; i++) {
		ev_io_stop(loop, &listeners[i].io);
		close(listeners[i].fd);
	}
	nr_listeners = 0;
	if (unix_path_bound)
		unlink(unix_path_bound);
	for (unsigned int i = 0; i < srv.nr_workers; i++)
		ev_async_send(srv.workers[i].loop, &srv.workers[i].wake);
	ev_break(loop, EVBREAK_ALL);
}

static void flush_and_close_exports(void)
{
	struct ioq *q = NULL;

	if (ioq_create(&q, srv.backend, 8) == 0)
		ioq_set_current(q);
	for (unsigned int i = 0; i < srv.nr_exports; i++) {
		struct export *e = &srv.exports[i];
		struct bio *bio;

		if (q && !e->readonly && (bio = bio_alloc(0, REQ_OP_FLUSH))) {
			int r = submit_bio_wait(e->vol, bio);

			if (r)
				fprintf(stderr, "bionbd: flush %s: %s\n",
					e->name, strerror(-r));
			bio_put(bio);
		}
		target_destroy(e->vol);
		free(e->name);
		free(e->description);
	}
	ioq_destroy(q);
	free(srv.exports);
}

/* ---- set-up ---- */

static void error_reporter(const struct target *t, enum req_op op,
			   uint64_t offset, uint64_t length, int err)
{
	static const char *const names[] = {
		"read", "write", "flush", "trim", "cache", "zero", "extents",
	};

	fprintf(stderr, "bionbd: %s: %s of %llu bytes at offset %llu: %s\n",
		t->name, (unsigned int)op < REQ_OP_LAST ? names[op] : "?",
		(unsigned long long)length, (unsigned long long)offset,
		strerror(-err));
}

/* Returns 0, or -errno with a one-line message in @err. */
static int open_export(struct export *x, const struct conf_export *ce,
		       char *err, size_t errlen)
{
	struct volume_config vc;
	int r;

	conf_export_volume(ce, &vc);
	r = volume_open(&x->vol, &vc, err, errlen);
	if (r)
		return r;
	x->name = strdup(ce->name);
	x->description = ce->description ? strdup(ce->description) : NULL;
	if (!x->name || (ce->description && !x->description))
		die("out of memory");
	x->size_bytes = x->vol->size_bytes;
	x->readonly = ce->readonly;
	return 0;
}

static void set_export_key(struct conf_export *e, const char *key,
			   const char *value)
{
	char err[512];

	if (conf_export_set(e, key, value, err, sizeof(err)))
		die("%s", err);
}

static void exports_from_cmdline(const struct options *o)
{
	struct conf_export ce;
	char err[512];

	if (!o->nr_members)
		die("no member files given (see --help)");
	if (conf_export_init(&ce, o->export_name ? o->export_name : ""))
		die("out of memory");
	for (int i = 0; i < o->nr_members; i++)
		set_export_key(&ce, "file", o->members[i]);
	if (o->stripe_size)
		set_export_key(&ce, "stripe-size", o->stripe_size);
	if (o->size)
		set_export_key(&ce, "size", o->size);
	if (o->readonly)
		set_export_key(&ce, "read-only", "true");
	if (conf_export_check(&ce, err, sizeof(err)))
		die("%s", err);
	srv.exports = calloc(1, sizeof(*srv.exports));
	if (!srv.exports)
		die("out of memory");
	srv.nr_exports = 1;
	if (open_export(&srv.exports[0], &ce, err, sizeof(err)))
		die("%s", err);
	conf_export_release(&ce);
}

static struct conf *exports_from_file(struct options *o)
{
	struct volume_config vc;
	struct conf *c;
	char err[512];

	if (o->nr_members || o->stripe_size || o->size || o->export_name)
		die("-c %s: member files, --stripe-size, --size and -e belong in the config file",
		    o->conf_path);
	if (conf_load(&c, o->conf_path, err, sizeof(err)))
		die("%s", err);
	srv.exports = calloc(c->nr_exports, sizeof(*srv.exports));
	if (!srv.exports)
		die("out of memory");
	/* Every export must pass before any of them creates a member. */
	for (unsigned int i = 0; i < c->nr_exports; i++) {
		struct conf_export *ce = &c->exports[i];

		/* -r makes every export read-only. */
		if (o->readonly)
			ce->readonly = true;
		conf_export_volume(ce, &vc);
		if (volume_check(&vc, err, sizeof(err)))
			die("%s:%u: [export %s] %s", c->path, ce->line, ce->name,
			    err);
	}
	for (unsigned int i = 0; i < c->nr_exports; i++) {
		struct conf_export *ce = &c->exports[i];

		if (open_export(&srv.exports[i], ce, err, sizeof(err)))
			die("%s:%u: [export %s] %s", c->path, ce->line, ce->name,
			    err);
		srv.nr_exports++;
	}
	return c;
}

static unsigned int parse_uint(const char *opt, const char *s, unsigned int min,
			       unsigned int max)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || !isdigit((unsigned char)*s) ||
	    v < min || v > max)
		die("%s %s: expected a whole number from %u to %u", opt, s, min,
		    max);
	return (unsigned int)v;
}

static void parse_args(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		{ "foreground", no_argument, NULL, 'f' },
		{ "unix", required_argument, NULL, 'U' },
		{ "ipaddr", required_argument, NULL, 'i' },
		{ "port", required_argument, NULL, 'p' },
		{ "readonly", no_argument, NULL, 'r' },
		{ "read-only", no_argument, NULL, 'r' },
		{ "threads", required_argument, NULL, 't' },
		{ "exportname", required_argument, NULL, 'e' },
		{ "export-name", required_argument, NULL, 'e' },
		{ "pidfile", required_argument, NULL, 'P' },
		{ "config", required_argument, NULL, 'c' },
		{ "stripe-size", required_argument, NULL, 'S' },
		{ "size", required_argument, NULL, 's' },
		{ "backend", required_argument, NULL, 'b' },
		{ "poll-us", required_argument, NULL, 'L' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	while ((ch = getopt_long(argc, argv, "fU:i:p:rt:e:P:c:hV", longopts,
				 NULL)) != -1) {
		switch (ch) {
		case 'f': o->foreground = true; break;
		case 'U': o->unix_path = optarg; break;
		case 'i': o->addr = optarg; break;
		case 'p':
			parse_uint("-p", optarg, 1, 65535);
			o->port = optarg;
			break;
		case 'r': o->readonly = true; break;
		case 't': o->threads = parse_uint("-t", optarg, 1, CONF_MAX_THREADS); break;
		case 'e': o->export_name = optarg; break;
		case 'P': o->pidfile = optarg; break;
		case 'c': o->conf_path = optarg; break;
		case 'S': o->stripe_size = optarg; break;
		case 's': o->size = optarg; break;
		case 'b':
			if (ioq_backend_parse(optarg, &o->backend))
				die("--backend %s: expected io_uring or threads",
				    optarg);
			o->backend_set = true;
			break;
		case 'L':
			o->poll_us = parse_uint("--poll-us", optarg, 0,
						CONF_MAX_POLL_US);
			o->poll_us_set = true;
			break;
		case 'h': usage(stdout); exit(0);
		case 'V': printf("bionbd %s\n", BIONBD_VERSION); exit(0);
		default: usage(stderr); exit(1);
		}
	}
	o->members = argv + optind;
	o->nr_members = argc - optind;
}

static void write_pidfile(const char *path)
{
	FILE *f;
	char tmp[4096];

	/* Write then rename: whoever sees the file sees a whole pid. */
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		die("pidfile %s: path too long", path);
	f = fopen(tmp, "w");
	if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) ||
	    rename(tmp, path))
		die("pidfile %s: %s", path, strerror(errno));
}

/* Fork; the parent exits 0 once the child says it is serving. */
static int daemonize(void)
{
	int p[2];
	pid_t pid;
	char c;

	if (pipe(p))
		die("pipe: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid > 0) {
		close(p[1]);
		exit(read(p[0], &c, 1) == 1 ? 0 : 1);
	}
	close(p[0]);
	setsid();
	return p[1];
}

int main(int argc, char **argv)
{
	struct options o = { .threads = 0 };
	struct conf *conf = NULL;
	struct ev_loop *loop;
	ev_signal sigterm, sigint;
	sigset_t stopsigs;
	int ready_fd = -1, devnull;
	long ncpu;

	parse_args(argc, argv, &o);
	if (o.conf_path) {
		conf = exports_from_file(&o);
		/* [server] gives defaults; flags win. */
		if (conf->has_server) {
			struct conf_server *s = &conf->server;

			if (!o.addr && s->listen)
				o.addr = s->listen;
			if (!o.port && s->port) {
				static char portbuf[16];

				snprintf(portbuf, sizeof(portbuf), "%u", s->port);
				o.port = portbuf;
			}
			if (!o.unix_path && s->socket)
				o.unix_path = s->socket;
			if (!o.threads && s->threads)
				o.threads = s->threads;
			if (!o.backend_set && s->backend_set)
				o.backend = s->backend;
			if (!o.poll_us_set && s->poll_us_set) {
				o.poll_us = s->poll_us;
				o.poll_us_set = true;
			}
		}
	} else {
		exports_from_cmdline(&o);
	}
	srv.backend = o.backend;
	srv.poll_max = (o.poll_us_set ? o.poll_us : CONF_DEFAULT_POLL_US) / 1e6;
	ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	srv.nr_workers = o.threads ? o.threads : (ncpu > 0 ? (unsigned int)ncpu : 1);

	signal(SIGPIPE, SIG_IGN);
	target_set_error_reporter(error_reporter);

	if (o.unix_path)
		listen_unix(o.unix_path);
	if (!o.unix_path || o.addr || o.port)
		listen_tcp(o.addr ? o.addr : CONF_DEFAULT_LISTEN,
			   o.port ? o.port : "10809");

	if (!o.foreground)
		ready_fd = daemonize();

	srv.workers = calloc(srv.nr_workers, sizeof(*srv.workers));
	if (!srv.workers)
		die("out of memory");
	for (unsigned int i = 0; i < srv.nr_workers; i++) {
		int r = worker_init(&srv.workers[i], i);

		if (r)
			die("worker %u: %s%s", i, strerror(-r),
			    srv.backend == IOQ_IO_URING ?
				    " (try --backend threads)" : "");
	}
	/* Workers inherit a mask without SIGTERM/SIGINT: only main takes them. */
	sigemptyset(&stopsigs);
	sigaddset(&stopsigs, SIGTERM);
	sigaddset(&stopsigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &stopsigs, NULL);
	for (unsigned int i = 0; i < srv.nr_workers; i++)
		if (pthread_create(&srv.workers[i].tid, NULL, worker_main,
				   &srv.workers[i]))
			die("pthread_create: %s", strerror(errno));

	loop = ev_default_loop(EVFLAG_AUTO);
	for (int i = 0; i < nr_listeners; i++)
		ev_io_start(loop, &listeners[i].io);
	ev_signal_init(&sigterm, stop_cb, SIGTERM);
	ev_signal_init(&sigint, stop_cb, SIGINT);
	ev_signal_start(loop, &sigterm);
	ev_signal_start(loop, &sigint);
	pthread_sigmask(SIG_UNBLOCK, &stopsigs, NULL);

	if (o.pidfile)
		write_pidfile(o.pidfile);
	if (ready_fd >= 0) {
		devnull = open("/dev/null", O_RDWR);
		if (devnull >= 0) {
			dup2(devnull, 0);
			dup2(devnull, 1);
			dup2(devnull, 2);
			if (devnull > 2)
				close(devnull);
		}
		(void)!write(ready_fd, "", 1);
		close(ready_fd);
	}

	ev_run(loop, 0);

	for (unsigned int i = 0; i < srv.nr_workers; i++)
		pthread_join(srv.workers[i].tid, NULL);
	for (unsigned int i = 0; i < srv.nr_workers; i++)
		worker_fini(&srv.workers[i]);
	free(srv.workers);
	flush_and_close_exports();
	conf_free(conf);
	if (o.pidfile)
		unlink(o.pidfile);
	free(unix_path_bound);
	bio_pool_drain();
	return 0;
}
