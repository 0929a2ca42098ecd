/* SPDX-License-Identifier: MIT */
/*
 * stats.h - bionbd's statistics outputs (stats.c): SIGUSR1, --stats FILE,
 * the control socket.  Main thread only.
 */
#ifndef BIONBD_SERVER_STATS_H
#define BIONBD_SERVER_STATS_H

#include <ev.h>

#include "conn.h"
#include "options.h"
#include "server.h"

/*
 * Before privileges go: bind the control socket (--control SOCK, or
 * PIDFILE.ctl with a pidfile; mode 0600).  0 or -errno with a message.
 */
int srv_stats_open(const struct srv_options *o, const char *pidfile,
		   char *errbuf, size_t errlen);

/* The control socket's path (for chown), or NULL. */
const char *srv_stats_control_path(void);

/* A start that failed: remove the control socket, if this process bound it. */
void srv_stats_unlink(void);

/* Serving: SIGUSR1, the control socket, the --stats-interval timer. */
void srv_stats_start(struct ev_loop *loop, struct server *srv,
		     const struct srv_options *o);

/* --stats FILE now (written aside, then renamed); 0 or -errno, logged. */
int srv_stats_write(void);

/*
 * Stop the watchers, SIGUSR1 ignored from then on (the server finishes);
 * close and remove the control socket.
 */
void srv_stats_stop(struct ev_loop *loop);

void srv_stats_release(void);

/* A connection opened (its id, peer and start set here) or closed. */
void srv_stats_conn_add(struct conn *c);
void srv_stats_conn_del(struct conn *c);

/* Count a request @c answered (worker thread): type, length, NBD error. */
void srv_stats_conn_count(struct conn *c, uint16_t type, uint32_t len,
			  uint32_t nbd_err);

#endif /* BIONBD_SERVER_STATS_H */
