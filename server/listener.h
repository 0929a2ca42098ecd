/* SPDX-License-Identifier: MIT */
/*
 * listener.h - the listening sockets, on the main thread's loop; each
 * accepted socket goes round-robin to a worker and stays there.
 */
#ifndef BIONBD_LISTENER_H
#define BIONBD_LISTENER_H

#include <stddef.h>

#include <ev.h>

#include "server.h"

/**
 * listen_tcp / listen_unix - bind and listen; returns 0 or -errno with a
 * one-line message.  A unix socket path that holds a socket is replaced;
 * anything else there is an error.
 */
int listen_tcp(const char *addr, const char *port, char *errbuf,
	       size_t errlen);
int listen_unix(const char *path, char *errbuf, size_t errlen);

/*
 * A listening, non-blocking unix socket at @path (a stale one left by a
 * killed server replaced), not among the NBD listeners: the fd, or -errno
 * with a message.  For the control socket (stats.c).
 */
int unix_socket_listen(const char *path, char *errbuf, size_t errlen);

/**
 * listen_activated - take the listening sockets a service manager passed
 * (systemd's protocol: LISTEN_PID is our pid, LISTEN_FDS sockets from
 * descriptor 3 on; libnbd's "[ bionbd ... ]" does the same).  The
 * variables are cleared, so a child never takes them for its own.
 * Returns how many were taken (0: not socket-activated), or -errno with a
 * one-line message.
 */
int listen_activated(char *errbuf, size_t errlen);

/**
 * listen_unix_check - refuse early (before exports create members) when
 * @path is a socket a running server accepts on.  Returns 0 or -errno
 * with a one-line message.
 */
int listen_unix_check(const char *path, char *errbuf, size_t errlen);

/** listeners_start - accept on @loop, handing sockets to @srv's workers. */
void listeners_start(struct ev_loop *loop, struct server *srv);

/**
 * listeners_unlink - remove the unix socket file this process bound, if
 * any (a start that fails: no server will accept on it); never one a
 * service manager passed.
 */
void listeners_unlink(void);

/** listeners_close - stop accepting; remove the unix socket file. */
void listeners_close(struct ev_loop *loop);

#endif /* BIONBD_LISTENER_H */
