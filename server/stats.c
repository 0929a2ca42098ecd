// SPDX-License-Identifier: MIT
/*
 * stats.c - bionbd's statistics going out: a snapshot to the log on
 * SIGUSR1, the --stats file (at exit, and every --stats-interval), and the
 * control socket, which answers every connection with the JSON document
 * and closes it (bioctl stat reads it).  All of it on the main thread's
 * loop; counting itself happens in the workers (engine stats.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "listener.h"
#include "stats.h"

/* A reader that stalls longer holds the main loop no more than this. */
#define CONTROL_SEND_TIMEOUT_S 1

static struct server *stats_srv;
static char *stats_path; /* --stats FILE */
static char *control_path; /* bound by us: removed at stop */
static int control_fd = -1;
static ev_io control_w;
static ev_timer interval_w;
static ev_signal usr1_w;

/* The document in memory: one consistent snapshot per write. */
static char *stats_render(size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);

	if (!f)
		return NULL;
	nbdl_stats_json(f, stats_srv->exports, stats_srv->nr_exports);
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
				stats_srv->nr_exports);
}

static void control_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct timeval tv = { .tv_sec = CONTROL_SEND_TIMEOUT_S };
	size_t len, off = 0;
	char *doc;
	int fd;

	fd = accept4(w->fd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return; /* gone already, or out of descriptors: next time */
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	doc = stats_render(&len);
	while (doc && off < len) {
		ssize_t n = send(fd, doc + off, len - off, MSG_NOSIGNAL);

		if (n <= 0 && errno != EINTR)
			break;
		if (n > 0)
			off += (size_t)n;
	}
	free(doc);
	close(fd);
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
	ev_signal_stop(loop, &usr1_w);
	ev_timer_stop(loop, &interval_w);
	if (control_fd >= 0) {
		ev_io_stop(loop, &control_w);
		close(control_fd);
		control_fd = -1;
		unlink(control_path);
	}
}

void srv_stats_release(void)
{
	free(control_path);
	free(stats_path);
	control_path = stats_path = NULL;
}
