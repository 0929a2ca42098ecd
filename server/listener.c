// SPDX-License-Identifier: MIT
/*
 * listener.c - listening sockets and accepting (listener.h): those we
 * bind, and those a service manager hands over (socket activation).
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <bionbd/config.h>
#include <bionbd/plural.h>

#include "listener.h"
#include "worker.h"

#define MAX_LISTENERS 16

struct listener {
	ev_io io;
	int fd;
	bool tcp;
};

/* Out of file descriptors: how long accepting pauses. */
#define ACCEPT_BACKOFF_S 0.25

static struct listener listeners[MAX_LISTENERS];
static int nr_listeners;
static char *unix_path_bound;
static struct server *server;
static unsigned int next_worker;
static ev_timer backoff;
static ev_tstamp logged_emfile_at; /* 0 = never */
static bool logged_full;

/* Out of descriptors is said at most once a minute: it comes in floods. */
#define EMFILE_LOG_INTERVAL_S 60.0

static void listeners_pause(struct ev_loop *loop, bool on)
{
	for (int i = 0; i < nr_listeners; i++) {
		if (on)
			ev_io_stop(loop, &listeners[i].io);
		else
			ev_io_start(loop, &listeners[i].io);
	}
}

static void backoff_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	listeners_pause(loop, false);
}

/*
 * accept() failed for want of descriptors: the pending connection stays
 * queued and the listener stays readable, so accepting again at once would
 * spin.  Pause for a moment (connections that close meanwhile free
 * descriptors); clients already connected are served as before.
 */
static void accept_backoff(struct ev_loop *loop, int err)
{
	if (!logged_emfile_at ||
	    ev_now(loop) - logged_emfile_at >= EMFILE_LOG_INTERVAL_S) {
		nbdl_log(NBDL_ERROR,
			 "accept: %s: not accepting for %g s at a time until "
			 "connections close",
			 strerror(err), ACCEPT_BACKOFF_S);
		logged_emfile_at = ev_now(loop);
	}
	listeners_pause(loop, true);
	ev_timer_set(&backoff, ACCEPT_BACKOFF_S, 0.);
	ev_timer_start(loop, &backoff);
}

/* Room for one more connection under --max-connections? */
static bool conn_slot(void)
{
	unsigned int n = atomic_fetch_add(&server->nr_conns, 1);

	if (n < server->max_conns) {
		logged_full = false;
		return true;
	}
	srv_conn_gone(server);
	if (!logged_full) {
		nbdl_log(NBDL_ERROR,
			 "%u connection%s: refusing new clients until some "
			 "leave (--max-connections)",
			 server->max_conns, plural(server->max_conns));
		logged_full = true;
	}
	return false;
}


/*
 * A TCP client: no Nagle delay on replies, and keepalive probes, so that
 * the connections of a client host that vanished (powered off, cable
 * pulled, a NAT that forgot them) are found dead and closed within about
 * two minutes of silence, instead of holding their slots (and buffers)
 * for good: an idle NBD client sends nothing for hours.
 */
#define SRV_KEEPIDLE_S 60
#define SRV_KEEPINTVL_S 15
#define SRV_KEEPCNT 4

static void tcp_tune(int fd)
{
	static const int one = 1, idle = SRV_KEEPIDLE_S,
			 intvl = SRV_KEEPINTVL_S, cnt = SRV_KEEPCNT;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}
static void accept_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct listener *l = container_of(io, struct listener, io);

	for (;;) {
		int sndbuf = SRV_UNIX_SNDBUF;
		int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE ||
			    errno == ENOBUFS || errno == ENOMEM)
				accept_backoff(loop, errno);
			return;
		}
		if (!conn_slot()) {
			/* Closed before the greeting: the client sees EOF. */
			close(fd);
			continue;
		}
		if (l->tcp)
			tcp_tune(fd);
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
		worker_hand_off(&server->workers[next_worker++ %
						 server->nr_workers],
				fd);
	}
}

static int add_listener(int fd, bool tcp, char *errbuf, size_t errlen)
{
	struct listener *l;

	if (nr_listeners == MAX_LISTENERS) {
		close(fd);
		snprintf(errbuf, errlen, "more than %d listening addresses",
			 MAX_LISTENERS);
		return -EMFILE;
	}
	l = &listeners[nr_listeners++];
	l->fd = fd;
	l->tcp = tcp;
	ev_io_init(&l->io, accept_cb, fd, EV_READ);
	return 0;
}

int listen_tcp(const char *addr, const char *port, char *errbuf,
	       size_t errlen)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC,
				  .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE };
	struct addrinfo *res, *ai;
	int r, bound = 0;

	r = getaddrinfo(addr, port, &hints, &res);
	if (r) {
		snprintf(errbuf, errlen, "listen %s port %s: %s", addr, port,
			 gai_strerror(r));
		return -EINVAL;
	}
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
			r = -errno;
			close(fd);
			freeaddrinfo(res);
			snprintf(errbuf, errlen, "listen %s port %s: %s", addr,
				 port, strerror(-r));
			return r;
		}
		r = add_listener(fd, true, errbuf, errlen);
		if (r) {
			freeaddrinfo(res);
			return r;
		}
		bound++;
	}
	freeaddrinfo(res);
	if (!bound) {
		snprintf(errbuf, errlen, "listen %s port %s: no usable address",
			 addr, port);
		return -EADDRNOTAVAIL;
	}
	return 0;
}

/*
 * 0 when nobody accepts on @sa (a stale socket: ECONNREFUSED), -EADDRINUSE
 * when a server does, else -errno.
 */
static int socket_in_use(const struct sockaddr_un *sa)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int r = 0;

	if (fd < 0)
		return -errno;
	/* EAGAIN: a live listener whose backlog is full. */
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0 ||
	    errno == EAGAIN)
		r = -EADDRINUSE;
	else if (errno != ECONNREFUSED && errno != ENOENT)
		r = -errno;
	close(fd);
	return r;
}

/*
 * Fill @sa for @path and look at what is there: 0 nothing, 1 a socket
 * nobody accepts on (left by a killed server), or -errno with a message:
 * too long, a running server's, or something else than a socket (never
 * replaced; bind would only say "Address already in use").
 */
static int unix_probe(const char *path, struct sockaddr_un *sa,
		      char *errbuf, size_t errlen)
{
	struct stat st;
	int r;

	if (strlen(path) >= sizeof(sa->sun_path)) {
		snprintf(errbuf, errlen, "unix socket %s: path too long", path);
		return -ENAMETOOLONG;
	}
	strcpy(sa->sun_path, path);
	if (stat(path, &st))
		return 0;
	if (!S_ISSOCK(st.st_mode)) {
		snprintf(errbuf, errlen, "unix socket %s: exists and is not a "
			 "socket", path);
		return -EEXIST;
	}
	r = socket_in_use(sa);
	if (r) {
		snprintf(errbuf, errlen, "unix socket %s: %s", path,
			 r == -EADDRINUSE ? "in use by a running server" :
					    strerror(-r));
		return r;
	}
	return 1;
}

int listen_unix_check(const char *path, char *errbuf, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int r = unix_probe(path, &sa, errbuf, errlen);

	return r < 0 ? r : 0;
}

int unix_socket_listen(const char *path, char *errbuf, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, r;

	/* A socket left behind by a killed server is replaced, nothing else. */
	r = unix_probe(path, &sa, errbuf, errlen);
	if (r < 0)
		return r;
	if (r)
		unlink(path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    listen(fd, 1024)) {
		r = -errno;
		if (fd >= 0)
			close(fd);
		snprintf(errbuf, errlen, "unix socket %s: %s", path,
			 strerror(-r));
		return r;
	}
	return fd;
}

int listen_unix(const char *path, char *errbuf, size_t errlen)
{
	int fd = unix_socket_listen(path, errbuf, errlen);

	if (fd < 0)
		return fd;
	unix_path_bound = strdup(path);
	return add_listener(fd, false, errbuf, errlen);
}

/* The first descriptor a service manager passes (SD_LISTEN_FDS_START). */
#define LISTEN_FDS_START 3

/* Clear the activation variables, so that no child takes them for its own. */
static void activation_unsetenv(void)
{
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
}

int listen_activated(char *errbuf, size_t errlen)
{
	const char *pid_s = getenv("LISTEN_PID"), *fds_s = getenv("LISTEN_FDS");
	unsigned int pid, n;
	int r;

	if (!pid_s || !fds_s)
		return 0;
	/* Meant for another process (the one that exec'd us, say). */
	if (conf_parse_uint(pid_s, 1, UINT32_MAX, &pid) ||
	    (pid_t)pid != getpid())
		return 0;
	activation_unsetenv();
	if (conf_parse_uint(fds_s, 0, MAX_LISTENERS, &n)) {
		snprintf(errbuf, errlen,
			 "socket activation: LISTEN_FDS=%s: expected 1..%d",
			 fds_s, MAX_LISTENERS);
		return -EINVAL;
	}
	/* None passed: not activated (sd_listen_fds says 0 too). */
	if (!n)
		return 0;
	for (unsigned int i = 0; i < n; i++) {
		int fd = LISTEN_FDS_START + (int)i, type = 0, listening = 0;
		int dom = AF_UNSPEC, fl;
		socklen_t len = sizeof(int);

		if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) ||
		    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening,
			       &len) ||
		    getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &len) ||
		    type != SOCK_STREAM || !listening) {
			snprintf(errbuf, errlen,
				 "socket activation: descriptor %d is not a "
				 "listening stream socket",
				 fd);
			return -EINVAL;
		}
		fl = fcntl(fd, F_GETFL);
		if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) ||
		    fcntl(fd, F_SETFD, FD_CLOEXEC)) {
			r = -errno;
			snprintf(errbuf, errlen, "socket activation: fd %d: %s",
				 fd, strerror(-r));
			return r;
		}
		r = add_listener(fd, dom != AF_UNIX, errbuf, errlen);
		if (r)
			return r;
	}
	return (int)n;
}

void listeners_start(struct ev_loop *loop, struct server *srv)
{
	server = srv;
	ev_timer_init(&backoff, backoff_cb, ACCEPT_BACKOFF_S, 0.);
	for (int i = 0; i < nr_listeners; i++)
		ev_io_start(loop, &listeners[i].io);
}

void listeners_unlink(void)
{
	if (unix_path_bound)
		unlink(unix_path_bound);
}

void listeners_close(struct ev_loop *loop)
{
	ev_timer_stop(loop, &backoff);
	for (int i = 0; i < nr_listeners; i++) {
		ev_io_stop(loop, &listeners[i].io);
		close(listeners[i].fd);
	}
	nr_listeners = 0;
	if (unix_path_bound) {
		unlink(unix_path_bound);
		free(unix_path_bound);
		unix_path_bound = NULL;
	}
}
