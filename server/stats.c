// SPDX-License-Identifier: MIT
/*
 * stats.c - bionbd's statistics going out: a snapshot to the log on
 * SIGUSR1, the --stats file (at exit, and every --stats-interval), and the
 * control socket, which answers every connection with the JSON document
 * and closes it (bioctl stat reads it).  All of it on the main thread's
 * loop; counting itself happens in the workers (engine stats.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "listener.h"
#include "stats.h"

/*
 * The document goes out from the main loop as the reader takes it, so a
 * reader that stalls holds nothing but its own copy, for at most
 * CONTROL_SEND_TIMEOUT_S; past CONTROL_MAX_READERS at once, accepting
 * waits (the kernel's backlog holds the rest).
 */
#define CONTROL_SEND_TIMEOUT_S 5.0
#define CONTROL_MAX_READERS 16u

struct control_reader {
	ev_io io;
	ev_timer timeout;
	char *doc;
	size_t len, off;
	struct control_reader *next, **pprev;
};

static struct server *stats_srv;
/* The open connections, for their counts: workers add and remove. */
static pthread_mutex_t conns_lock = PTHREAD_MUTEX_INITIALIZER;
static struct conn *conns;
static uint64_t conns_next_id;
static char *stats_path; /* --stats FILE */
static char *control_path; /* bound by us: removed at stop */
static int control_fd = -1;
static ev_io control_w;
static struct control_reader *readers;
static unsigned int nr_readers;
static ev_timer interval_w;
static ev_signal usr1_w;

void srv_stats_conn_add(struct conn *c)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char host[48] = "?";
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	c->since = (double)now.tv_sec + now.tv_nsec / 1e9;
	snprintf(c->peer, sizeof(c->peer), "unix");
	if (!c->unix_sock && !getpeername(c->fd, (struct sockaddr *)&ss, &len)) {
		const void *a = ss.ss_family == AF_INET6 ?
			(const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr :
			(const void *)&((struct sockaddr_in *)&ss)->sin_addr;
		unsigned int port = ntohs(ss.ss_family == AF_INET6 ?
			((struct sockaddr_in6 *)&ss)->sin6_port :
			((struct sockaddr_in *)&ss)->sin_port);

		inet_ntop(ss.ss_family, a, host, sizeof(host));
		snprintf(c->peer, sizeof(c->peer),
			 ss.ss_family == AF_INET6 ? "[%s]:%u" : "%s:%u", host,
			 port);
	}
	pthread_mutex_lock(&conns_lock);
	c->id = ++conns_next_id;
	c->reg_next = conns;
	if (conns)
		conns->reg_pprev = &c->reg_next;
	c->reg_pprev = &conns;
	conns = c;
	pthread_mutex_unlock(&conns_lock);
}

void srv_stats_conn_del(struct conn *c)
{
	/* Under the lock: a neighbour leaving rewrites our reg_pprev. */
	pthread_mutex_lock(&conns_lock);
	if (c->reg_pprev) { /* else never added */
		*c->reg_pprev = c->reg_next;
		if (c->reg_next)
			c->reg_next->reg_pprev = c->reg_pprev;
		c->reg_pprev = NULL;
	}
	pthread_mutex_unlock(&conns_lock);
}

void srv_stats_conn_count(struct conn *c, uint16_t type, uint32_t len,
			  uint32_t nbd_err)
{
	enum req_op op = nbdl_cmd_op(type);

	if (op == REQ_OP_LAST)
		return;
	io_stats_add(&c->st_requests[op], 1);
	if (nbd_err)
		io_stats_add(&c->st_errors, 1);
	else if (op != REQ_OP_FLUSH)
		io_stats_add(&c->st_bytes[op], len);
}

/*
 * Payload buffers in flight and stashed bytes, all workers
 * (--inflight-memory): the shares as set (the bound in force), and the
 * counts each worker writes with relaxed stores.
 */
static void buffers_json(FILE *f)
{
	uint64_t limit = 0, used = 0, waits = 0, evictions = 0, stash = 0;

	for (unsigned int i = 0; i < stats_srv->nr_workers; i++) {
		struct worker *w = &stats_srv->workers[i];

		for (unsigned int k = 0; k < 2; k++) {
			limit += w->lanes[k].limit_bytes;
			used += __atomic_load_n(&w->lanes[k].used_bytes,
						__ATOMIC_RELAXED);
			waits += io_stats_read(&w->lanes[k].waits);
		}
		evictions += io_stats_read(&w->evictions);
		limit += w->stash_limit;
		stash += __atomic_load_n(&w->stash_bytes, __ATOMIC_RELAXED);
	}
	fprintf(f,
		", \"buffers\": {\"limit_bytes\": %" PRIu64
		", \"inflight_bytes\": %" PRIu64 ", \"waits\": %" PRIu64
		", \"evictions\": %" PRIu64 ", \"stash_bytes\": %" PRIu64
		"}",
		limit, used, waits, evictions, stash);
}

/* The open connections, oldest last: the document's "connections". */
static void conns_json(FILE *f, void *arg)
{
	buffers_json(f);
	fputs(", \"connections\": [", f);
	pthread_mutex_lock(&conns_lock);
	for (struct conn *c = conns; c; c = c->reg_next) {
		/* The export is set once, by the worker, at the handshake. */
		const struct nbdl_export *e =
			__atomic_load_n(&c->exp, __ATOMIC_RELAXED);

		fprintf(f, "%s\n  {\"id\": %" PRIu64 ", \"peer\": \"%s\", "
			   "\"since\": %.3f, \"export\": ",
			c == conns ? "" : ",", c->id, c->peer, c->since);
		if (e)
			nbdl_json_string(f, e->name);
		else
			fputs("null", f);
		fprintf(f,
			", \"errors\": %" PRIu64 ", \"yields\": %" PRIu64
			", \"buffer_bytes\": %zu, \"buffer_waits\": %" PRIu64
			", \"ops\": {",
			io_stats_read(&c->st_errors),
			io_stats_read(&c->st_yields),
			__atomic_load_n(&c->inflight_bytes, __ATOMIC_RELAXED),
			io_stats_read(&c->st_buf_waits));
		for (unsigned int op = 0; op < REQ_OP_LAST; op++)
			fprintf(f,
				"%s\"%s\": {\"requests\": %" PRIu64
				", \"bytes\": %" PRIu64 "}",
				op ? ", " : "", nbdl_op_name((enum req_op)op),
				io_stats_read(&c->st_requests[op]),
				io_stats_read(&c->st_bytes[op]));
		fputs("}}", f);
	}
	pthread_mutex_unlock(&conns_lock);
	fputs("]", f);
}

/* The document in memory: one consistent snapshot per write. */
static char *stats_render(size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);

	if (!f)
		return NULL;
	nbdl_stats_json(f, stats_srv->exports, stats_srv->nr_exports,
			conns_json, NULL);
	if (fclose(f)) {
		free(buf);
		return NULL;
	}
	return buf;
}

int srv_stats_write(void)
{
	if (!stats_path)
		return 0;
	return nbdl_stats_write(stats_path, stats_srv->exports,
				stats_srv->nr_exports, conns_json, NULL);
}

static void reader_free(struct ev_loop *loop, struct control_reader *rd)
{
	ev_io_stop(loop, &rd->io);
	ev_timer_stop(loop, &rd->timeout);
	close(rd->io.fd);
	*rd->pprev = rd->next;
	if (rd->next)
		rd->next->pprev = rd->pprev;
	free(rd->doc);
	free(rd);
	if (nr_readers-- == CONTROL_MAX_READERS && control_fd >= 0)
		ev_io_start(loop, &control_w);
}

/* Send what the socket takes; true once the reader is done with. */
static bool reader_send(struct control_reader *rd)
{
	while (rd->off < rd->len) {
		ssize_t n = send(rd->io.fd, rd->doc + rd->off,
				 rd->len - rd->off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return false;
		if (n <= 0)
			return true; /* gone: nothing more to do for it */
		rd->off += (size_t)n;
	}
	return true;
}

static void reader_write_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct control_reader *rd = container_of(w, struct control_reader, io);

	if (reader_send(rd))
		reader_free(loop, rd);
	else
		ev_timer_again(loop, &rd->timeout);
}

static void reader_timeout_cb(struct ev_loop *loop, ev_timer *t,
			      int revents)
{
	reader_free(loop, container_of(t, struct control_reader, timeout));
}

static void control_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct control_reader *rd;
	int fd;

	fd = accept4(w->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (fd < 0)
		return; /* gone already, or out of descriptors: next time */
	rd = calloc(1, sizeof(*rd));
	if (!rd || !(rd->doc = stats_render(&rd->len))) {
		free(rd);
		close(fd);
		return;
	}
	ev_io_init(&rd->io, reader_write_cb, fd, EV_WRITE);
	/* A reader that makes no progress for this long is dropped. */
	ev_init(&rd->timeout, reader_timeout_cb);
	rd->timeout.repeat = CONTROL_SEND_TIMEOUT_S;
	rd->next = readers;
	if (readers)
		readers->pprev = &rd->next;
	rd->pprev = &readers;
	readers = rd;
	if (++nr_readers == CONTROL_MAX_READERS)
		ev_io_stop(loop, &control_w);
	/* Most documents fit the socket at once: done before a watcher. */
	if (reader_send(rd)) {
		reader_free(loop, rd);
		return;
	}
	ev_timer_again(loop, &rd->timeout);
	ev_io_start(loop, &rd->io);
}

static void interval_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)srv_stats_write();
}

static void usr1_cb(struct ev_loop *loop, ev_signal *w, int revents)
{
	nbdl_stats_log(stats_srv->exports, stats_srv->nr_exports);
}

int srv_stats_open(const struct srv_options *o, const char *pidfile,
		   char *errbuf, size_t errlen)
{
	const char *path = o->control;
	char *dflt = NULL;
	mode_t old;

	if (o->stats_file && !(stats_path = strdup(o->stats_file)))
		return -ENOMEM;
	if (!path && pidfile) {
		if (asprintf(&dflt, "%s.ctl", pidfile) < 0)
			return -ENOMEM;
		path = dflt;
	}
	if (!path)
		return 0;
	/* Only the server's user may read what its clients do. */
	old = umask(0177);
	control_fd = unix_socket_listen(path, errbuf, errlen);
	umask(old);
	if (control_fd < 0) {
		free(dflt);
		return control_fd;
	}
	control_path = dflt ? dflt : strdup(path);
	return control_path ? 0 : -ENOMEM;
}

const char *srv_stats_control_path(void)
{
	return control_path;
}

void srv_stats_unlink(void)
{
	if (control_fd >= 0 && control_path)
		unlink(control_path);
}

void srv_stats_start(struct ev_loop *loop, struct server *srv,
		     const struct srv_options *o)
{
	stats_srv = srv;
	ev_signal_init(&usr1_w, usr1_cb, SIGUSR1);
	ev_signal_start(loop, &usr1_w);
	if (control_fd >= 0) {
		ev_io_init(&control_w, control_cb, control_fd, EV_READ);
		ev_io_start(loop, &control_w);
	}
	if (stats_path && o->stats_interval) {
		ev_timer_init(&interval_w, interval_cb, o->stats_interval,
			      o->stats_interval);
		ev_timer_start(loop, &interval_w);
	}
}

void srv_stats_stop(struct ev_loop *loop)
{
	sigset_t usr1;

	/*
	 * The server has its exports still to close (their final flush, a
	 * mirror's clean mark) and its pidfile to remove: a snapshot asked
	 * for from now on must not take SIGUSR1's default action, which
	 * would end the process there.  Stopping the watcher restores that
	 * action before it is ignored, so the signal is held off meanwhile
	 * (workers never take it: their mask blocks it).
	 */
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &usr1, NULL);
	ev_signal_stop(loop, &usr1_w);
	signal(SIGUSR1, SIG_IGN);
	pthread_sigmask(SIG_UNBLOCK, &usr1, NULL);
	ev_timer_stop(loop, &interval_w);
	if (control_fd >= 0) {
		ev_io_stop(loop, &control_w);
		close(control_fd);
		control_fd = -1;
		unlink(control_path);
	}
	while (readers)
		reader_free(loop, readers);
}

void srv_stats_release(void)
{
	free(control_path);
	free(stats_path);
	control_path = stats_path = NULL;
}
