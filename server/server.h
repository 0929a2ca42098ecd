/* SPDX-License-Identifier: MIT */
/*
 * server.h - the native NBD server's shared structures.
 *
 * Threads: the main thread accepts and hands each socket to a worker; a
 * worker owns a libev loop, an ioq, and every connection it was given, so
 * nothing below the server struct is shared or locked except the hand-off
 * queue of new sockets.
 */
#ifndef BIONBD_SERVER_H
#define BIONBD_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include <ev.h>

#include <bionbd/bio.h>
#include <bionbd/ioq.h>
#include <bionbd/ioq_ev.h>
#include <bionbd/target.h>

#include <bionbd/nbd-proto.h>

#define container_of(ptr, type, member)                                        \
	((type *)((char *)(ptr) - offsetof(type, member)))

/* Limits that keep a client from growing the server's memory. */
#define SRV_MAX_PAYLOAD (32u << 20) /* advertised maximum payload */
#define SRV_MIN_BLOCK 512u
#define SRV_PREF_BLOCK 4096u
#define SRV_MAX_OPTION_BYTES (64u << 10) /* larger: drop the client */
#define SRV_MAX_OPTIONS 1024u /* options per handshake */
#define SRV_MAX_INFLIGHT_REQS 256u /* per connection */
#define SRV_MAX_INFLIGHT_BYTES (128u << 20) /* per connection */
#define SRV_RBUF_BYTES (256u << 10) /* per worker */
#define SRV_DIRECT_READ_MIN (64u << 10) /* recv payloads straight in */
#define SRV_UNIX_SNDBUF (4 << 20) /* queued replies per unix socket */
#define SRV_READ_CHUNKS 8 /* content chunks in one structured read */
#define SRV_MAX_EXTENTS (1u << 20) /* descriptors in one block status */

struct export {
	char *name;
	char *description;
	struct target *vol;
	uint64_t size_bytes;
	bool readonly;
};

struct worker;

struct server {
	struct export *exports; /* [0] is the default export */
	unsigned int nr_exports;
	struct worker *workers;
	unsigned int nr_workers;
	enum ioq_backend backend;
	double poll_max; /* seconds; 0 = never busy-poll */
	atomic_bool stopping;
};

/* Size-class cache of page-aligned payload buffers, per worker. */
#define BUF_MIN_SHIFT 12
#define BUF_MAX_SHIFT 25
#define BUF_CLASSES (BUF_MAX_SHIFT - BUF_MIN_SHIFT + 1)

struct buf_cache {
	void *free[BUF_CLASSES]; /* linked through the first word */
	unsigned int nr[BUF_CLASSES];
};

struct conn;
struct nbd_req;

struct worker {
	struct server *srv;
	unsigned int id;
	pthread_t tid;
	struct ev_loop *loop;
	struct ioq *q;
	struct ioq_ev qev;
	ev_async wake; /* new sockets, or stop */

	pthread_mutex_t lock; /* guards new_fds */
	int *new_fds;
	unsigned int nr_new, cap_new;

	struct conn *conns; /* all connections of this worker */
	unsigned int nr_conns;
	struct conn *dirty; /* connections with replies to send */
	bool stopping;
	ev_timer grace; /* shutdown: drop clients that stop reading */
	ev_idle poll;	/* busy-polls the loop until poll_until */
	ev_tstamp poll_until, idle_since, poll_s;

	uint8_t *rbuf;
	struct buf_cache bufs;
	struct nbd_req *free_reqs;
};

/* main.c */
void worker_poll_arrival(struct worker *w);

/* conn.c */
void conn_accept(struct worker *w, int fd);
void worker_send_dirty(struct worker *w);
void worker_begin_stop(struct worker *w);
void worker_close_all(struct worker *w);

#endif /* BIONBD_SERVER_H */
