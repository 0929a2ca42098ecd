// SPDX-License-Identifier: MIT
/*
 * remote.c - the remote target: a member that is another server's NBD
 * export, reached with libnbd's asynchronous API.
 *
 * Every thread that submits to the member gets its own connection (an
 * ioq_slot of the thread's ioq), made on its first bio and driven by that
 * ioq: the socket is an ioq_poll, so the worker's io_uring ring (or the
 * thread pool's epoll set) wakes for replies like for any completion, and
 * libnbd's completion callbacks run inside the reap, on the submitting
 * thread.  No thread of our own, no hop, no lock on the data path.
 *
 * Failure is never a hang: a connection that dies fails what it had in
 * flight with EIO; a request older than the timeout closes the connection
 * (EIO for all of it); a connection that cannot be made fails the bios
 * waiting for it, and the next attempt waits for a backoff that doubles up
 * to REMOTE_BACKOFF_MAX (bios meanwhile fail at once).  The member's state
 * changes are logged once for all threads, not per bio.
 *
 * Nor is a lost write ever hidden.  A write the remote acknowledged may
 * live in its cache until a flush; if the remote closes the connection
 * that carried it first (it crashed or restarted), it may be gone, and a
 * flush on the next connection would succeed all the same.  So a
 * connection the remote closed with such writes marks the member
 * (->lost): every flush fails with EIO from then on, as a file's would
 * after its fsync failed (file.c), and a mirror takes the member out
 * before it reads from it again, or re-reads what it read from it while
 * finding out (target_lost).  Reads and writes go on otherwise: the
 * service resumes, the flushes say what may be missing.  A connection this side closes (a
 * request past the timeout) is no loss by itself: the remote is there and
 * keeps what it acknowledged, unless it then goes away before a flush
 * covered that, which its socket, kept open meanwhile, shows (orphan_fd).
 */
#include <errno.h>
#include <fcntl.h>
#include <libnbd.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bionbd/mdev.h>

#include "internal.h"

#define REMOTE_TIMEOUT_MS_DEFAULT 5000u
#define REMOTE_BACKOFF_MIN_NS 100000000ull /* 0.1 s */
#define REMOTE_BACKOFF_MAX_NS 5000000000ull /* 5 s */
/* Largest command when the remote names no maximum (the NBD spec's 32M). */
#define REMOTE_CMD_MAX (32u << 20)
/* Trim and zero commands: libnbd and most servers take 32-bit lengths. */
#define REMOTE_RANGE_MAX (1u << 30)

struct remote_target {
	struct target t;
	char *uri;
	struct remote_info info;
	unsigned int timeout_ms;
	uint32_t cmd_max; /* bytes per read or write command */
	struct io_stats *stats;
	/* Down since a connection failed, until one is made again. */
	atomic_bool down;
	/*
	 * A write, zero or trim was sent: until then a flush has nothing of
	 * ours to make durable, and answering it here spares a volume that
	 * was only read a connection made just to flush it at close.
	 */
	atomic_bool written;
	/*
	 * Lost-write tracking (see the top): each write the remote may hold
	 * in its cache takes a number from @wseq when it completes; a flush
	 * covers the numbers taken before it was sent: on every connection
	 * where the remote allows multi-conn (@flushed), else on its own
	 * (remote_conn.flushed_w).  Only when the remote can flush at all.
	 */
	atomic_uint_fast64_t wseq;
	atomic_uint_fast64_t flushed;
	atomic_bool lost; /* sticky: every flush fails with EIO */
	/*
	 * Block status goes over connections of its own (one a thread, made
	 * on the first such request) with structured replies, so that the
	 * data connections can do without: libnbd reads a simple reply in two
	 * recv calls, a structured read reply in four, and on a 4 KiB read
	 * those calls are most of what a request costs us.  Only where the
	 * remote allows multi-conn (a second connection sees what the first
	 * wrote); otherwise one connection does both.
	 */
	bool status_conns;
	/* The connections of every thread, under remote_lock. */
	struct remote_conn *conns;
};

enum remote_state {
	RC_IDLE, /* no handle: connect on the next bio */
	RC_CONNECTING,
	RC_READY,
	RC_BACKOFF, /* the last attempt failed: bios fail until @deadline */
};

struct remote_io;

/* One thread's connection to one remote member. */
struct remote_conn {
	struct ioq_slot slot; /* key: the target, +1 for a status conn */
	bool status; /* block status only (see status_conns) */
	struct ioq_poll poll;
	/*
	 * libnbd is in nbd_aio_notify_read; and it may have read from the
	 * socket elsewhere since the last POLLIN was handled, so the POLLIN
	 * armed meanwhile may report data that is gone (conn_poll_fn).
	 */
	bool in_notify_read, read_elsewhere;
	struct ioq_timer timer; /* connect or request deadline, if on */
	bool timer_on;
	enum remote_state state;
	struct ioq *q;
	struct nbd_handle *h;
	/* NULL once the target was destroyed first (under remote_lock). */
	struct remote_target *rt;
	struct remote_conn *next; /* in rt->conns */
	uint64_t deadline_ns; /* connecting: give up; backoff: retry after */
	uint64_t idle_ns; /* when the last bio in flight ended */
	uint64_t backoff_ns;
	struct bio *wait_head, **wait_tail; /* waiting for the connection */
	/* In flight, oldest first (the timeout looks at the head). */
	struct remote_io *head, *tail;
	struct remote_io *free_ios;
	/*
	 * Bios whose writes are done and that wait for the flush that makes
	 * them FUA: issued once libnbd has returned (never from inside its
	 * callbacks).
	 */
	struct remote_io *flush_head;
	/*
	 * Our latest unflushed write's number, and what our flushes covered;
	 * written by this thread only, read by others (remote_look_around).
	 */
	atomic_uint_fast64_t last_w, flushed_w;
	/*
	 * A second descriptor of the connected socket, under remote_lock, for
	 * other threads to look at (remote_look_around); -1 when none.
	 */
	int watch_fd;
	/*
	 * The socket of a connection this side gave up on (a request past
	 * the timeout) while it carried writes no flush covered, kept open
	 * with their last number until a flush covers them: if the remote
	 * closes it meanwhile, it went away (hung, then restarted) and may
	 * have taken them along.  Under remote_lock; -1 when none.
	 */
	int orphan_fd;
	uint64_t orphan_w;
};

/*
 * Reads and writes a plug held back that follow each other on the remote
 * (the pieces of a large request on one member of a stripe: chunks k,
 * k + N, ...) go as one command through a buffer of their own, up to this
 * much: a command costs the remote a request, a copy costs us a memcpy.
 */
#define REMOTE_MERGE_MAX (4u << 20)

/*
 * One bio in flight, or a run of them merged (see REMOTE_MERGE_MAX): one
 * or more commands.
 */
struct remote_io {
	struct remote_io *next, *prev;
	struct remote_conn *c;
	struct bio *bio; /* the first */
	unsigned int nr_bios; /* 1, or a merged run in bios[] */
	struct bio *bios[BLK_PLUG_MAX];
	char *bounce; /* a merged run's data, len bytes */
	uint64_t len;
	unsigned int pending; /* commands out, plus one while issuing */
	int err;
	bool quiet; /* the connection failed: logged once for the member */
	bool then_flush; /* FUA the remote lacks: a flush after the writes */
	struct remote_io *next_flush; /* in conn->flush_head */
	uint64_t t0;
	uint64_t ext_start, ext_end; /* extents: bio range, covered up to */
	uint64_t wseq_at; /* a flush: the write numbers taken when it left */
};

/* Guards every rt->conns list and every conn's rt. */
static pthread_mutex_t remote_lock = PTHREAD_MUTEX_INITIALIZER;

static inline struct remote_target *to_rt(struct target *t)
{
	return container_of(t, struct remote_target, t);
}

bool remote_uri(const char *member)
{
	static const char *const schemes[] = { "nbd://", "nbds://",
					       "nbd+unix://", "nbds+unix://",
					       "nbd+vsock://", "nbds+vsock://" };

	for (unsigned int i = 0; member && i < ARRAY_SIZE(schemes); i++)
		if (!strncmp(member, schemes[i], strlen(schemes[i])))
			return true;
	return false;
}

/* libnbd's query parameters that name local files. */
static bool uri_param_is_path(const char *param, size_t len)
{
	static const char *const names[] = { "socket", "tls-psk-file",
					     "tls-certificates" };

	for (unsigned int i = 0; i < ARRAY_SIZE(names); i++) {
		size_t n = strlen(names[i]);

		if (len > n && !strncmp(param, names[i], n) && param[n] == '=')
			return true;
	}
	return false;
}

/* libnbd decodes the value: one that starts %2F is absolute too. */
static bool uri_value_relative(const char *v, size_t len)
{
	return len && v[0] != '/' && (len < 3 || strncasecmp(v, "%2f", 3));
}

int remote_uri_absolute(const char *uri, const char *dir, char **out)
{
	const char *q = strchr(uri, '?'), *end, *p;
	size_t len = 0;
	char *buf = NULL;
	FILE *f;

	*out = NULL;
	if (!q) {
		*out = strdup(uri);
		return *out ? 0 : -ENOMEM;
	}
	f = open_memstream(&buf, &len);
	if (!f)
		return -ENOMEM;
	fwrite(uri, 1, (size_t)(q + 1 - uri), f);
	end = q + 1 + strcspn(q + 1, "#");
	for (p = q + 1; p < end;) {
		size_t plen = strcspn(p, "&#");
		const char *eq = memchr(p, '=', plen);

		if (eq && uri_param_is_path(p, plen) &&
		    uri_value_relative(eq + 1, plen - (size_t)(eq + 1 - p))) {
			fwrite(p, 1, (size_t)(eq + 1 - p), f);
			/* The directory's bytes as libnbd will decode them. */
			for (const char *d = dir; *d; d++) {
				if (strchr("-._~/", *d) ||
				    (*d >= 'a' && *d <= 'z') ||
				    (*d >= 'A' && *d <= 'Z') ||
				    (*d >= '0' && *d <= '9'))
					fputc(*d, f);
				else
					fprintf(f, "%%%02X", (unsigned char)*d);
			}
			if (dir[0] && dir[strlen(dir) - 1] != '/')
				fputc('/', f);
			fwrite(eq + 1, 1, plen - (size_t)(eq + 1 - p), f);
		} else {
			fwrite(p, 1, plen, f);
		}
		p += plen;
		if (p < end) /* the '&' */
			fputc(*p++, f);
	}
	fputs(end, f);
	return memstream_end(f, &buf, 0, out);
}

/* libnbd's errno for a failed call; EIO when it names none. */
static int remote_errno(void)
{
	int e = nbd_get_errno();

	return e > 0 ? -e : -EIO;
}

/* Did @e come from the connection rather than from the remote's answer? */
static bool remote_conn_errno(int e)
{
	switch (e) {
	case ENOTCONN:
	case ESHUTDOWN:
	case ECONNRESET:
	case ECONNREFUSED:
	case EPIPE:
	case ETIMEDOUT:
	case EPROTO:
	case EBADMSG:
	case 0:
		return true;
	default:
		return false;
	}
}

/*
 * What the client is told of a command that failed: the remote's own
 * error where it sent one; losing the connection is EIO.
 */
static int remote_cmd_err(int e)
{
	return remote_conn_errno(e) ? -EIO : -e;
}

/*
 * A handle set up the same way for the probe and for every connection;
 * @status: with structured replies and base:allocation.
 */
static struct nbd_handle *remote_handle(char *errbuf, size_t errlen,
					const char *uri, bool status)
{
	struct nbd_handle *h = nbd_create();

	if (!h) {
		verr(errbuf, errlen, -ENOMEM, "member %s: %s", uri,
		     nbd_get_error());
		return NULL;
	}
	/* Our buffers are the client's data: no need to clear them first. */
	nbd_set_pread_initialize(h, false);
	if (status)
		(void)nbd_add_meta_context(h, LIBNBD_CONTEXT_BASE_ALLOCATION);
	else
		(void)nbd_set_request_structured_replies(h, false);
	/*
	 * A member's URI is the administrator's, not a client's: its
	 * tls-psk-file= and tls-certificates= may name local files.
	 */
	(void)nbd_set_uri_allow_local_file(h, true);
	if (nbd_aio_connect_uri(h, uri) == -1) {
		verr(errbuf, errlen, remote_errno(), "member %s: %s", uri,
		     nbd_get_error());
		nbd_close(h);
		return NULL;
	}
	return h;
}

static int remote_info_read(struct nbd_handle *h, struct remote_info *info)
{
	int64_t size = nbd_get_size(h), max;

	if (size < 0)
		return remote_errno();
	memset(info, 0, sizeof(*info));
	info->size_bytes = (uint64_t)size;
	info->readonly = nbd_is_read_only(h) == 1;
	info->flush = nbd_can_flush(h) == 1;
	info->fua = nbd_can_fua(h) == 1;
	info->trim = nbd_can_trim(h) == 1;
	info->zero = nbd_can_zero(h) == 1;
	info->fast_zero = nbd_can_fast_zero(h) == 1;
	info->cache = nbd_can_cache(h) == 1;
	info->multi_conn = nbd_can_multi_conn(h) == 1;
	info->extents =
		nbd_can_meta_context(h, LIBNBD_CONTEXT_BASE_ALLOCATION) == 1;
	max = nbd_get_block_size(h, LIBNBD_SIZE_MAXIMUM);
	info->max_bytes = max > 0 && max < REMOTE_CMD_MAX ? (uint32_t)max :
							    REMOTE_CMD_MAX;
	return 0;
}

/*
 * Run @h until it is connected (@cookie 0) or command @cookie is done, but
 * not past @end_ns.  0, or -errno: -ETIMEDOUT, the connection's error, or
 * the command's.
 */
static int handle_wait(struct nbd_handle *h, int64_t cookie, uint64_t end_ns)
{
	for (;;) {
		uint64_t now = engine_now_ns();

		if (cookie) {
			int done = nbd_aio_command_completed(h, cookie);

			if (done == 1)
				return 0;
			if (done == -1)
				return remote_errno();
		} else if (nbd_aio_is_ready(h)) {
			return 0;
		}
		if (nbd_aio_is_dead(h) || nbd_aio_is_closed(h))
			return remote_errno();
		if (now >= end_ns)
			return -ETIMEDOUT;
		if (nbd_poll(h, (int)((end_ns - now + 999999) / 1000000)) == -1)
			return remote_errno();
	}
}

static unsigned int timeout_or_default(unsigned int timeout_ms)
{
	return timeout_ms ? timeout_ms : REMOTE_TIMEOUT_MS_DEFAULT;
}

/*
 * Checking and opening volumes asks every remote member the same things
 * several times: the checks of all exports before any of them opens, the
 * superblocks, the size, the target.  Each was a connection and a
 * handshake of its own (five a member, a TLS handshake each with
 * nbds://).  Between remote_hold and remote_release (nested), a
 * synchronous connection that is done with is parked instead of closed,
 * and the next one to the same URI takes it; the last release closes what
 * is parked, before any data connection is made, so a remote that allows
 * one client at a time sees one.
 */
struct parked {
	struct parked *next;
	char *uri;
	struct nbd_handle *h;
};

static struct {
	pthread_mutex_t lock;
	unsigned int holds;
	struct parked *list;
} reuse = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void handle_close(struct nbd_handle *h)
{
	(void)nbd_aio_disconnect(h, 0);
	nbd_close(h);
}

void remote_hold(void)
{
	pthread_mutex_lock(&reuse.lock);
	reuse.holds++;
	pthread_mutex_unlock(&reuse.lock);
}

void remote_release(void)
{
	struct parked *list = NULL;

	pthread_mutex_lock(&reuse.lock);
	if (reuse.holds && !--reuse.holds) {
		list = reuse.list;
		reuse.list = NULL;
	}
	pthread_mutex_unlock(&reuse.lock);
	while (list) {
		struct parked *p = list;

		list = p->next;
		handle_close(p->h);
		free(p->uri);
		free(p);
	}
}

/*
 * The remote closed (or broke) the connection on @fd, which nobody has
 * read for a while: EOF or an error is waiting there.  Bytes waiting are
 * no sign (a TLS server may send session tickets after the handshake).
 */
static bool peer_closed(int fd)
{
	char byte;
	ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);

	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
			  errno != EINTR);
}

/*
 * The remote shut down its side of the socket @fd (FIN, reset), whatever
 * bytes wait before that (a reply, a TLS close_notify): for sockets this
 * thread does not read (remote_look_around).
 */
static bool sock_gone(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };

	return poll(&p, 1, 0) == 1 &&
	       (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Connected, nothing in flight, and not closed by the remote meanwhile. */
static bool handle_idle(struct nbd_handle *h)
{
	int64_t fd = nbd_aio_get_fd(h);

	return nbd_aio_is_ready(h) && nbd_aio_in_flight(h) == 0 && fd >= 0 &&
	       !peer_closed((int)fd);
}

/* Done with @h (connected to @uri): parked while held, else closed. */
static void handle_release(const char *uri, struct nbd_handle *h)
{
	struct parked *p;

	/* Only a handle between commands can serve the next caller. */
	if (!handle_idle(h))
		goto close;
	p = malloc(sizeof(*p));
	if (!p || !(p->uri = strdup(uri)))
		goto free_p;
	p->h = h;
	pthread_mutex_lock(&reuse.lock);
	if (reuse.holds) {
		p->next = reuse.list;
		reuse.list = p;
		pthread_mutex_unlock(&reuse.lock);
		return;
	}
	pthread_mutex_unlock(&reuse.lock);
	free(p->uri);
free_p:
	free(p);
close:
	handle_close(h);
}

/* A parked handle to @uri that is still usable, or NULL. */
static struct nbd_handle *handle_take(const char *uri)
{
	struct nbd_handle *h = NULL;
	struct parked **pp, *p = NULL;

	pthread_mutex_lock(&reuse.lock);
	for (pp = &reuse.list; *pp; pp = &(*pp)->next)
		if (!strcmp((*pp)->uri, uri)) {
			p = *pp;
			*pp = p->next;
			break;
		}
	pthread_mutex_unlock(&reuse.lock);
	if (!p)
		return NULL;
	/* A remote that went away while it was parked: connect anew. */
	if (handle_idle(p->h))
		h = p->h;
	else
		handle_close(p->h);
	free(p->uri);
	free(p);
	return h;
}

/* A handle connected within @timeout_ms, or NULL with a message. */
static struct nbd_handle *remote_connect_sync(const char *uri,
					      unsigned int timeout_ms,
					      int *err, char *errbuf,
					      size_t errlen)
{
	uint64_t end = engine_now_ns() + (uint64_t)timeout_ms * 1000000u;
	struct nbd_handle *h = handle_take(uri);
	int r;

	if (h)
		return h;
	h = remote_handle(errbuf, errlen, uri, true);
	if (!h) {
		*err = -EIO;
		return NULL;
	}
	r = handle_wait(h, 0, end);
	if (!r)
		return h;
	if (r == -ETIMEDOUT)
		verr(errbuf, errlen, r, "member %s: no answer within %u ms",
		     uri, timeout_ms);
	else
		verr(errbuf, errlen, r, "member %s: %s", uri, nbd_get_error());
	*err = r;
	nbd_close(h);
	return NULL;
}

int remote_probe(const char *uri, unsigned int timeout_ms,
		 struct remote_info *info, char *errbuf, size_t errlen)
{
	struct nbd_handle *h;
	int r = 0;

	h = remote_connect_sync(uri, timeout_or_default(timeout_ms), &r,
				errbuf, errlen);
	if (!h)
		return r;
	r = remote_info_read(h, info);
	if (r) {
		verr(errbuf, errlen, r, "member %s: %s", uri, nbd_get_error());
		nbd_close(h);
	} else {
		handle_release(uri, h);
	}
	return r;
}

/* ---- per-thread connections ---- */

static void conn_timer_fn(struct ioq_timer *tm);
static void conn_poll_fn(struct ioq_poll *p, unsigned int revents);
static void conn_issue(struct remote_conn *c, struct bio *bio);

static void conn_timer_stop(struct remote_conn *c)
{
	if (c->timer_on)
		ioq_timer_del(c->q, &c->timer);
	c->timer_on = false;
}

static void conn_timer_at(struct remote_conn *c, uint64_t deadline_ns)
{
	conn_timer_stop(c);
	c->timer.deadline_ns = deadline_ns;
	c->timer.fn = conn_timer_fn;
	ioq_timer_add(c->q, &c->timer);
	c->timer_on = true;
}

/*
 * Watch the socket for what libnbd waits for now.  0, or -errno when the
 * queue cannot watch it: then nothing would ever move the connection, and
 * the caller drops it (conn_watch).
 */
static int conn_rearm(struct remote_conn *c)
{
	unsigned int dir;

	if (!c->h)
		return 0;
	dir = nbd_aio_get_direction(c->h);
	c->poll.events = (dir & LIBNBD_AIO_DIRECTION_READ ? POLLIN : 0) |
			 (dir & LIBNBD_AIO_DIRECTION_WRITE ? POLLOUT : 0);
	/* Always listen: a remote that closes an idle connection says so. */
	c->poll.events |= POLLIN;
	return ioq_poll_set(c->q, &c->poll);
}

static struct remote_io *io_get(struct remote_conn *c)
{
	struct remote_io *io = c->free_ios;

	if (io)
		c->free_ios = io->next;
	else if (!(io = malloc(sizeof(*io))))
		return NULL;
	memset(io, 0, sizeof(*io));
	io->c = c;
	return io;
}

static void io_unlink(struct remote_conn *c, struct remote_io *io)
{
	if (io->prev)
		io->prev->next = io->next;
	else
		c->head = io->next;
	if (io->next)
		io->next->prev = io->prev;
	else
		c->tail = io->prev;
}

/* Copy between a merged run's bios and its buffer, in order. */
static void io_run_copy(struct remote_io *io, bool to_bounce)
{
	char *p = io->bounce;

	for (unsigned int i = 0; i < io->nr_bios; i++) {
		struct bvec_iter iter;
		struct bio_vec bv;

		bio_for_each_segment(bv, io->bios[i], iter) {
			if (to_bounce)
				memcpy(p, bvec_virt(&bv), bv.bv_len);
			else
				memcpy(bvec_virt(&bv), p, bv.bv_len);
			p += bv.bv_len;
		}
	}
}

/* A merged run is done: its data out to the bios, and each one ended. */
static void io_end_run(struct remote_conn *c, struct remote_io *io)
{
	if (!io->err && bio_op(io->bio) == REQ_OP_READ)
		io_run_copy(io, false);
	free(io->bounce);
	io->bounce = NULL;
	for (unsigned int i = 0; i < io->nr_bios; i++) {
		if (io->err && !io->quiet && c->rt)
			target_report_error(&c->rt->t, io->bios[i], io->err);
		ioq_defer_end(c->q, io->bios[i], io->err);
	}
}

/* @io succeeded: what it means for lost-write tracking (see the top). */
static void io_track(struct remote_conn *c, const struct remote_io *io)
{
	struct remote_target *rt = c->rt;
	const struct bio *bio = io->bio;
	uint64_t f;

	if (!rt->info.flush)
		return; /* the remote keeps nothing a flush would save */
	switch (bio_op(bio)) {
	case REQ_OP_FLUSH:
		if (!rt->info.multi_conn) {
			if (io->wseq_at > atomic_load(&c->flushed_w))
				atomic_store(&c->flushed_w, io->wseq_at);
			break;
		}
		f = atomic_load(&rt->flushed);
		while (f < io->wseq_at &&
		       !atomic_compare_exchange_weak(&rt->flushed, &f,
						     io->wseq_at))
			;
		break;
	case REQ_OP_WRITE:
	case REQ_OP_WRITE_ZEROES:
	case REQ_OP_DISCARD:
		/* FUA, native or a flush after it (then_flush): durable. */
		if (!(bio->bi_opf & REQ_FUA))
			atomic_store(&c->last_w,
				     atomic_fetch_add(&rt->wseq, 1) + 1);
		break;
	default:
		break;
	}
}

/* Mark @rt lost (see the top); true if it was not before. */
static bool rt_mark_lost(struct remote_target *rt)
{
	if (atomic_exchange(&rt->lost, true))
		return false;
	target_notice(TARGET_NOTICE_ERROR,
		      "member %s: the remote closed a connection that carried "
		      "writes not yet flushed, which it may have lost; every "
		      "flush to it fails with EIO from now on (restart the "
		      "server once its data is checked)",
		      rt->uri);
	return true;
}

/* Write numbers up to this are covered by a flush, for @c's writes. */
static uint64_t conn_covered(const struct remote_conn *c)
{
	return c->rt->info.multi_conn ? atomic_load(&c->rt->flushed) :
					atomic_load(&c->flushed_w);
}

/* Did @c carry writes no flush has covered yet? */
static bool conn_unflushed(const struct remote_conn *c)
{
	uint64_t mine = atomic_load(&c->last_w);

	return mine && mine > conn_covered(c);
}

/*
 * The remote closed @c's connection (or would not take a new one): if it
 * carried writes no flush covered, they may be lost (see the top).  True
 * when that is news (the member was not marked before).
 */
static bool conn_lost_writes(struct remote_conn *c)
{
	bool lost = c->rt && conn_unflushed(c) && rt_mark_lost(c->rt);

	atomic_store(&c->last_w, 0);
	atomic_store(&c->flushed_w, 0);
	return lost;
}

/*
 * Another thread's connection that the remote closed (it restarted) may
 * carry writes a flush would be taken to cover, or that a read would miss,
 * and that thread notices only at its next request (an nbdkit thread waits
 * for its client, not for its sockets).  So before a flush, and when this
 * thread finds its own connection closed, look at every connection of
 * the member (a peek at each one's watch_fd), once something was written.
 * True when that marked the member lost.
 */
static bool remote_look_around(struct remote_target *rt)
{
	bool found = false;

	if (atomic_load(&rt->lost) || !atomic_load(&rt->wseq))
		return false;
	pthread_mutex_lock(&remote_lock);
	for (struct remote_conn *c = rt->conns; c && !found; c = c->next) {
		if (c->watch_fd >= 0 && conn_unflushed(c) &&
		    sock_gone(c->watch_fd))
			found = rt_mark_lost(rt);
		if (c->orphan_fd < 0)
			continue;
		if (c->orphan_w > conn_covered(c)) {
			if (!sock_gone(c->orphan_fd))
				continue; /* the remote still holds them */
			found = rt_mark_lost(rt) || found;
		}
		close(c->orphan_fd); /* covered, or gone */
		c->orphan_fd = -1;
		c->orphan_w = 0;
	}
	pthread_mutex_unlock(&remote_lock);
	return found;
}

/*
 * @c is given up on by this side (see remote_conn.orphan_fd): keep its
 * socket while its writes are not covered.  Before conn_close.
 */
static void conn_orphan(struct remote_conn *c)
{
	pthread_mutex_lock(&remote_lock);
	if (c->rt && c->watch_fd >= 0 && conn_unflushed(c)) {
		uint64_t w = atomic_load(&c->last_w);

		/* One kept at a time: the newest, with every number. */
		if (c->orphan_fd >= 0)
			close(c->orphan_fd);
		c->orphan_fd = c->watch_fd;
		c->orphan_w = w > c->orphan_w ? w : c->orphan_w;
		c->watch_fd = -1;
		atomic_store(&c->last_w, 0);
	}
	pthread_mutex_unlock(&remote_lock);
}

static void conn_watch_close(struct remote_conn *c)
{
	pthread_mutex_lock(&remote_lock);
	if (c->watch_fd >= 0)
		close(c->watch_fd);
	c->watch_fd = -1;
	pthread_mutex_unlock(&remote_lock);
}

/* One command of @io less; the last one ends the bio (at the next reap). */
static void io_put(struct remote_io *io)
{
	struct remote_conn *c = io->c;
	struct bio *bio = io->bio;

	if (--io->pending)
		return;
	if (io->then_flush && !io->err && c->h) {
		/* Still in flight (and under the timeout) meanwhile. */
		io->then_flush = false;
		io->pending = 1;
		io->next_flush = c->flush_head;
		c->flush_head = io;
		return;
	}
	io_unlink(c, io);
	if (!io->err && c->rt)
		io_track(c, io);
	if (io->nr_bios > 1) {
		io_end_run(c, io);
	} else {
		if (io->err && io->err != -EOPNOTSUPP && !io->quiet && c->rt)
			target_report_error(&c->rt->t, bio, io->err);
		ioq_defer_end(c->q, bio, io->err);
	}
	c->q->inflight--;
	io->next = c->free_ios;
	c->free_ios = io;
	if (!c->head) {
		conn_timer_stop(c);
		c->idle_ns = engine_now_ns();
	}
}

static int io_cmd_cb(void *user_data, int *error)
{
	struct remote_io *io = user_data;

	/* A reply read outside notify_read (TLS: from its buffer). */
	if (!io->c->in_notify_read)
		io->c->read_elsewhere = true;
	if (*error && !io->err) {
		io->err = remote_cmd_err(*error);
		io->quiet = remote_conn_errno(*error);
	}
	io_put(io);
	return 1; /* retire the command */
}

/* The flushes that make emulated FUA writes durable (see flush_head). */
static void conn_run_flushes(struct remote_conn *c)
{
	while (c->flush_head) {
		struct remote_io *io = c->flush_head;

		c->flush_head = io->next_flush;
		if (!c->h || nbd_aio_flush(c->h,
					   (nbd_completion_callback){
						   .callback = io_cmd_cb,
						   .user_data = io },
					   0) == -1) {
			if (!io->err)
				io->err = -EIO;
			io_put(io);
		}
	}
}

static int io_extent_cb(void *user_data, const char *metacontext,
			uint64_t offset, uint32_t *entries, size_t nr,
			int *error)
{
	struct remote_io *io = user_data;
	struct bio *bio = io->bio;
	uint64_t base = bio->bi_iter.bi_done;

	if (strcmp(metacontext, LIBNBD_CONTEXT_BASE_ALLOCATION))
		return 0;
	for (size_t i = 0; i + 1 < nr && io->ext_end < io->ext_start +
						bio->bi_iter.bi_size; i += 2) {
		uint64_t len = entries[i];
		uint64_t left = io->ext_start + bio->bi_iter.bi_size -
				io->ext_end;

		if (offset != io->ext_end)
			break; /* out of order: the rest reads as data */
		if (len > left)
			len = left;
		if (bio_extents_add(bio->bi_ext,
				    base + io->ext_end - io->ext_start, len,
				    entries[i + 1] &
					    (BIO_EXT_HOLE | BIO_EXT_ZERO))) {
			*error = ENOMEM;
			return -1;
		}
		io->ext_end += len;
		offset += len;
	}
	return 0;
}

static int io_extents_done_cb(void *user_data, int *error)
{
	struct remote_io *io = user_data;
	struct bio *bio = io->bio;
	uint64_t end = io->ext_start + bio->bi_iter.bi_size;

	/* What the remote left unsaid is data: never wrongly zero. */
	if (!*error && io->ext_end < end &&
	    bio_extents_add(bio->bi_ext,
			    bio->bi_iter.bi_done + io->ext_end - io->ext_start,
			    end - io->ext_end, 0))
		*error = ENOMEM;
	return io_cmd_cb(user_data, error);
}

/* Take the next bio waiting for the connection (no longer in flight). */
static struct bio *conn_take_waiting(struct remote_conn *c)
{
	struct bio *bio = c->wait_head;

	if (!bio)
		return NULL;
	c->wait_head = bio->bi_next;
	if (!c->wait_head)
		c->wait_tail = &c->wait_head;
	bio->bi_next = NULL;
	c->q->inflight--;
	return bio;
}

/* Fail every bio waiting for the connection with @err. */
static void conn_fail_waiting(struct remote_conn *c, int err)
{
	struct bio *bio;

	while ((bio = conn_take_waiting(c)))
		ioq_defer_end(c->q, bio, err);
}

static const char *conn_name(const struct remote_conn *c)
{
	return c->rt ? c->rt->uri : "(closed)";
}

/* The member is down: say so once, whichever thread sees it first. */
static void member_down(struct remote_conn *c, const char *why)
{
	if (c->rt && !atomic_exchange(&c->rt->down, true))
		target_notice(TARGET_NOTICE_ERROR,
			      "member %s: %s; its requests fail with EIO until it is back",
			      conn_name(c), why);
}

static void member_up(struct remote_conn *c)
{
	if (c->rt && atomic_exchange(&c->rt->down, false))
		target_notice(TARGET_NOTICE_INFO, "member %s: connected again",
			      conn_name(c));
}

/* Close the handle; what was in flight stays on the list. */
static void conn_close(struct remote_conn *c)
{
	struct nbd_handle *h = c->h;

	if (!h)
		return;
	conn_watch_close(c);
	ioq_poll_del(c->q, &c->poll);
	c->poll.fd = -1;
	c->h = NULL;
	/*
	 * Closing may run the callbacks of what was in flight (with an
	 * error): each ends its bio as usual.
	 */
	nbd_close(h);
}

/*
 * Drop the connection: everything in flight and waiting fails with EIO.
 * @by_remote: the remote closed it, or would not take a new one (writes
 * no flush covered may be lost), rather than this side giving up on it.
 * A connection that was up is made again by the next bio; one that could
 * not be made is tried again after the backoff, which doubles.
 */
static void conn_drop(struct remote_conn *c, const char *why, bool by_remote)
{
	bool was_up = c->state == RC_READY;
	struct remote_io *io;

	member_down(c, why);
	conn_timer_stop(c);
	c->state = RC_BACKOFF;
	/* Before the close: its watch_fd is what other threads look at. */
	if (!by_remote)
		conn_orphan(c);
	else if (c->rt && !conn_lost_writes(c))
		(void)remote_look_around(c->rt);
	conn_close(c);
	/* What the close did not end, ends here. */
	c->flush_head = NULL;
	while ((io = c->head)) {
		if (!io->err) {
			io->err = -EIO;
			io->quiet = true;
		}
		io->then_flush = false;
		io->pending = 1;
		io_put(io);
	}
	conn_fail_waiting(c, -EIO);
	if (was_up) {
		c->state = RC_IDLE;
		c->backoff_ns = 0;
		return;
	}
	c->state = RC_BACKOFF;
	c->backoff_ns = c->backoff_ns ? c->backoff_ns * 2 :
					REMOTE_BACKOFF_MIN_NS;
	if (c->backoff_ns > REMOTE_BACKOFF_MAX_NS)
		c->backoff_ns = REMOTE_BACKOFF_MAX_NS;
	c->deadline_ns = engine_now_ns() + c->backoff_ns;
}

/* conn_rearm, or the connection goes when its socket cannot be watched. */
static void conn_watch(struct remote_conn *c)
{
	char why[120];
	int r = conn_rearm(c);

	if (likely(!r))
		return;
	snprintf(why, sizeof(why), "its socket cannot be watched: %s",
		 strerror(-r));
	conn_drop(c, why, false);
}

static void conn_ready(struct remote_conn *c)
{
	struct remote_info now;
	struct blk_plug plug;
	struct bio *bio;
	char why[160];

	if (remote_info_read(c->h, &now) ||
	    now.size_bytes != c->rt->info.size_bytes) {
		snprintf(why, sizeof(why),
			 "its size is now %llu bytes, was %llu",
			 (unsigned long long)now.size_bytes,
			 (unsigned long long)c->rt->info.size_bytes);
		conn_drop(c, why, true);
		return;
	}
	c->state = RC_READY;
	c->backoff_ns = 0;
	c->idle_ns = engine_now_ns();
	conn_timer_stop(c);
	member_up(c);
	/* Without it, only this thread sees the connection go: no worse. */
	pthread_mutex_lock(&remote_lock);
	c->watch_fd = fcntl(c->poll.fd, F_DUPFD_CLOEXEC, 0);
	pthread_mutex_unlock(&remote_lock);
	/* Plugged, so that the pieces of a large request go merged. */
	blk_start_plug(&plug);
	while ((bio = conn_take_waiting(c))) {
		if (unlikely(c->state != RC_READY)) /* it died under the first */
			ioq_defer_end(c->q, bio, -EIO);
		else if (!bio_has_data(bio) || !blk_plug_add(&c->rt->t, bio))
			conn_issue(c, bio);
	}
	blk_finish_plug(&plug);
}

/* Where libnbd stands after it ran: act on a change of state. */
static void conn_check(struct remote_conn *c)
{
	if (!c->h)
		return;
	if (nbd_aio_is_dead(c->h) || nbd_aio_is_closed(c->h)) {
		char why[200];

		snprintf(why, sizeof(why), "%s",
			 c->state == RC_CONNECTING ? nbd_get_error() :
						     "connection lost");
		if (!why[0])
			snprintf(why, sizeof(why), "connection lost");
		conn_drop(c, why, true);
		return;
	}
	if (c->state == RC_CONNECTING && nbd_aio_is_ready(c->h))
		conn_ready(c);
	conn_run_flushes(c);
	conn_watch(c);
}

static bool conn_readable(const struct remote_conn *c)
{
	struct pollfd pfd = { .fd = c->poll.fd, .events = POLLIN };

	return poll(&pfd, 1, 0) > 0;
}

/*
 * May libnbd be told that the socket is readable, on an event that said
 * so?  The event tells what was there when it was posted, and libnbd may
 * have read it since (@stale: see remote_conn.read_elsewhere).  A stale
 * "readable" is harmless where libnbd merely tries a recv and waits on
 * (during the handshake, in the middle of a reply), but two of its states
 * take it as a promise: between commands (READY) it starts a reply, and
 * finding nothing it stays in REPLY.START, where the commands we issue
 * queue unsent until some reply comes, which none may (nothing in
 * flight); and with a request half sent it pauses the send to read a
 * reply, while the remote waits for the rest of the request.  So in those
 * states, look again first.  A fresh event needs no look between commands
 * (that would be a poll on every reply); a half-sent request always gets
 * one, since libnbd sends from many calls of ours.
 */
static bool conn_may_read(const struct remote_conn *c, bool stale)
{
	if (nbd_aio_get_direction(c->h) & LIBNBD_AIO_DIRECTION_WRITE)
		return conn_readable(c);
	if (stale && nbd_aio_is_ready(c->h))
		return conn_readable(c);
	return true;
}

static void conn_poll_fn(struct ioq_poll *p, unsigned int revents)
{
	struct remote_conn *c = container_of(p, struct remote_conn, poll);
	bool stale = c->read_elsewhere;

	if (!c->h)
		return;
	/* The POLLIN armed from now on sees only what libnbd leaves. */
	if (revents & POLLIN)
		c->read_elsewhere = false;
	if ((revents & (POLLIN | POLLERR | POLLHUP)) &&
	    conn_may_read(c, stale)) {
		c->in_notify_read = true;
		(void)nbd_aio_notify_read(c->h);
		c->in_notify_read = false;
	}
	if (c->h && (revents & POLLOUT) &&
	    (nbd_aio_get_direction(c->h) & LIBNBD_AIO_DIRECTION_WRITE)) {
		/* The handshake reads here too (the greeting, ...). */
		c->read_elsewhere = true;
		(void)nbd_aio_notify_write(c->h);
	}
	conn_check(c);
}

static void conn_timer_fn(struct ioq_timer *tm)
{
	struct remote_conn *c = container_of(tm, struct remote_conn, timer);
	uint64_t now = engine_now_ns(), limit;
	char why[120];

	c->timer_on = false;
	if (c->state == RC_CONNECTING) {
		snprintf(why, sizeof(why), "no answer within %u ms",
			 c->rt ? c->rt->timeout_ms : 0);
		conn_drop(c, why, false);
		return;
	}
	if (!c->head || !c->rt)
		return;
	limit = (uint64_t)c->rt->timeout_ms * 1000000u;
	if (now - c->head->t0 >= limit) {
		snprintf(why, sizeof(why),
			 "a request got no reply within %u ms",
			 c->rt->timeout_ms);
		conn_drop(c, why, false);
		return;
	}
	conn_timer_at(c, c->head->t0 + limit);
}

static void conn_connect(struct remote_conn *c)
{
	struct remote_target *rt = c->rt;
	char why[256];

	c->h = remote_handle(why, sizeof(why), rt->uri,
			     c->status || !rt->status_conns);
	if (!c->h) {
		conn_drop(c, why, false);
		return;
	}
	c->state = RC_CONNECTING;
	c->poll.fd = nbd_aio_get_fd(c->h);
	c->poll.fn = conn_poll_fn;
	c->read_elsewhere = false;
	conn_timer_at(c, engine_now_ns() +
				 (uint64_t)rt->timeout_ms * 1000000u);
	conn_check(c);
}

/*
 * A thread's connection closes for good with writes no flush covered: a
 * disconnect does not ask the remote to make them durable, and the flush
 * at the volume's close goes over another connection, which covers them
 * only where the remote allows multi-conn.  So flush them here (within
 * the timeout), or mark them lost.  The wait is outside remote_lock (other
 * threads' flushes look around under it); @c->rt is looked at under it.
 */
static void conn_flush_at_close(struct remote_conn *c)
{
	unsigned int timeout_ms = 0;
	int64_t cookie;
	int r = -EIO;

	pthread_mutex_lock(&remote_lock);
	if (c->rt && c->state == RC_READY && conn_unflushed(c)) {
		if (c->watch_fd >= 0 && sock_gone(c->watch_fd))
			(void)conn_lost_writes(c); /* closed under us */
		else
			timeout_ms = c->rt->timeout_ms;
	}
	pthread_mutex_unlock(&remote_lock);
	if (!timeout_ms)
		return;
	cookie = nbd_aio_flush(c->h, NBD_NULL_COMPLETION, 0);
	if (cookie != -1)
		r = handle_wait(c->h, cookie,
				engine_now_ns() + (uint64_t)timeout_ms * 1000000u);
	/* Slow is not gone: this side gives up, as on a request's timeout. */
	if (!r || r == -ETIMEDOUT)
		return;
	pthread_mutex_lock(&remote_lock);
	(void)conn_lost_writes(c);
	pthread_mutex_unlock(&remote_lock);
}

static void conn_destroy(struct ioq_slot *s)
{
	struct remote_conn *c = container_of(s, struct remote_conn, slot);

	/* Nothing is in flight: ioq_destroy's caller drained the queue. */
	if (c->h) {
		ioq_poll_del(c->q, &c->poll);
		conn_flush_at_close(c);
		conn_watch_close(c);
		(void)nbd_aio_disconnect(c->h, 0); /* never blocks */
		nbd_close(c->h);
	}
	conn_timer_stop(c);
	pthread_mutex_lock(&remote_lock);
	if (c->orphan_fd >= 0) {
		/* Its writes are the flush at the volume's close's to cover. */
		close(c->orphan_fd);
		c->orphan_fd = -1;
	}
	if (c->rt) {
		for (struct remote_conn **pp = &c->rt->conns; *pp;
		     pp = &(*pp)->next) {
			if (*pp == c) {
				*pp = c->next;
				break;
			}
		}
	}
	pthread_mutex_unlock(&remote_lock);
	while (c->free_ios) {
		struct remote_io *io = c->free_ios;

		c->free_ios = io->next;
		free(io);
	}
	free(c);
}

static struct remote_conn *conn_get(struct remote_target *rt, struct ioq *q,
				    bool status)
{
	void *key = (char *)rt + status;
	struct ioq_slot *s = ioq_slot_find(q, key);
	struct remote_conn *c;

	if (likely(s)) {
		c = container_of(s, struct remote_conn, slot);
		if (likely(c->rt == rt))
			return c;
		/* A target gone and another at its address: start afresh. */
		ioq_slot_remove(q, s);
		conn_destroy(s);
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->slot.key = key;
	c->status = status;
	c->slot.destroy = conn_destroy;
	c->q = q;
	c->rt = rt;
	c->poll.fd = -1;
	c->watch_fd = -1;
	c->orphan_fd = -1;
	c->wait_tail = &c->wait_head;
	c->state = RC_IDLE;
	ioq_slot_add(q, &c->slot);
	pthread_mutex_lock(&remote_lock);
	c->next = rt->conns;
	rt->conns = c;
	pthread_mutex_unlock(&remote_lock);
	return c;
}

/* ---- issuing ---- */

#define CB(fn, io) ((nbd_completion_callback){ .callback = (fn), .user_data = (io) })

static void io_cmd_failed(struct remote_io *io)
{
	struct nbd_handle *h = io->c->h;

	/*
	 * A handle found dead only now (its thread had not reaped the
	 * news): the connection's failure, logged once, not this bio's.
	 */
	if (nbd_aio_is_dead(h) || nbd_aio_is_closed(h)) {
		if (!io->err)
			io->err = -EIO;
		io->quiet = true;
	} else if (!io->err) {
		io->err = remote_cmd_err(nbd_get_errno());
	}
	io->pending--;
}

/* Reads and writes: one command per segment piece of at most cmd_max. */
static void issue_rw(struct remote_conn *c, struct remote_io *io,
		     bool write, uint32_t flags)
{
	struct bio *bio = io->bio;
	uint64_t off = bio_offset_bytes(bio);
	uint32_t max = c->rt->cmd_max;
	struct bvec_iter iter;
	struct bio_vec bv;

	bio_for_each_segment(bv, bio, iter) {
		char *buf = bvec_virt(&bv);

		for (uint32_t done = 0; done < bv.bv_len && !io->err;) {
			uint32_t n = bv.bv_len - done < max ? bv.bv_len - done :
							      max;
			int64_t r;

			io->pending++;
			r = write ? nbd_aio_pwrite(c->h, buf + done, n, off,
						   CB(io_cmd_cb, io), flags) :
				    nbd_aio_pread(c->h, buf + done, n, off,
						  CB(io_cmd_cb, io), 0);
			if (r == -1)
				io_cmd_failed(io);
			done += n;
			off += n;
		}
		if (io->err)
			break;
	}
}

/* A merged run: its buffer, in commands of at most cmd_max. */
static void issue_run(struct remote_conn *c, struct remote_io *io, bool write,
		      uint32_t flags)
{
	uint64_t off = bio_offset_bytes(io->bio);
	uint32_t max = c->rt->cmd_max;

	if (write)
		io_run_copy(io, true);
	for (uint64_t done = 0; done < io->len && !io->err;) {
		uint32_t n = io->len - done < max ? (uint32_t)(io->len - done) :
						    max;
		char *buf = io->bounce + done;
		int64_t r;

		io->pending++;
		r = write ? nbd_aio_pwrite(c->h, buf, n, off + done,
					   CB(io_cmd_cb, io), flags) :
			    nbd_aio_pread(c->h, buf, n, off + done,
					  CB(io_cmd_cb, io), 0);
		if (r == -1)
			io_cmd_failed(io);
		done += n;
	}
}

/* Trim or zero: ranges of at most REMOTE_RANGE_MAX. */
static void issue_range(struct remote_conn *c, struct remote_io *io,
			bool zero, uint32_t flags)
{
	struct bio *bio = io->bio;
	uint64_t off = bio_offset_bytes(bio), left = bio->bi_iter.bi_size;

	while (left && !io->err) {
		uint64_t n = left < REMOTE_RANGE_MAX ? left : REMOTE_RANGE_MAX;
		int64_t r;

		io->pending++;
		r = zero ? nbd_aio_zero(c->h, n, off, CB(io_cmd_cb, io), flags) :
			   nbd_aio_trim(c->h, n, off, CB(io_cmd_cb, io), flags);
		if (r == -1)
			io_cmd_failed(io);
		off += n;
		left -= n;
	}
}

/* Zeroes for a remote that cannot write them itself: written out. */
static void issue_zero_writes(struct remote_conn *c, struct remote_io *io,
			      uint32_t flags)
{
	struct bio *bio = io->bio;
	uint64_t off = bio_offset_bytes(bio), left = bio->bi_iter.bi_size;
	const void *zeros = zero_buf();

	if (!zeros) {
		io->err = -ENOMEM;
		return;
	}
	while (left && !io->err) {
		uint64_t n = left < ZERO_BUF_BYTES ? left : ZERO_BUF_BYTES;

		io->pending++;
		if (nbd_aio_pwrite(c->h, zeros, n, off, CB(io_cmd_cb, io),
				   flags) == -1)
			io_cmd_failed(io);
		off += n;
		left -= n;
	}
}

/*
 * Send @nr bios: one, or (reads and writes only) a run that follows each
 * other on the remote, same op and flags, merged through a buffer.
 */
static void conn_issue_run(struct remote_conn *c, struct bio **bios,
			   unsigned int nr)
{
	const struct remote_info *in = &c->rt->info;
	struct bio *bio = bios[0];
	bool fua = bio->bi_opf & REQ_FUA;
	struct remote_io *io;
	uint32_t flags;

	io = io_get(c);
	if (io && nr > 1) {
		for (unsigned int i = 0; i < nr; i++) {
			io->bios[i] = bios[i];
			io->len += bios[i]->bi_iter.bi_size;
		}
		io->bounce = malloc(io->len);
		if (!io->bounce) {
			io->next = c->free_ios;
			c->free_ios = io;
			io = NULL;
		}
	}
	if (!io) {
		for (unsigned int i = 0; i < nr; i++)
			ioq_defer_end(c->q, bios[i], -ENOMEM);
		return;
	}
	io->nr_bios = nr;
	io->bio = bio;
	io->pending = 1; /* ours, while issuing */
	c->q->inflight++;
	io->t0 = engine_now_ns();
	io->prev = c->tail;
	if (c->tail)
		c->tail->next = io;
	else
		c->head = io;
	c->tail = io;
	flags = fua && in->fua ? LIBNBD_CMD_FLAG_FUA : 0;
	io->then_flush = fua && !in->fua && in->flush;

	switch (bio_op(bio)) {
	case REQ_OP_READ:
		if (nr > 1)
			issue_run(c, io, false, 0);
		else
			issue_rw(c, io, false, 0);
		break;
	case REQ_OP_WRITE:
		if (nr > 1)
			issue_run(c, io, true, flags);
		else
			issue_rw(c, io, true, flags);
		break;
	case REQ_OP_FLUSH:
		/* Lost since remote_submit looked (by another thread). */
		if (atomic_load(&c->rt->lost)) {
			io->err = -EIO;
			io->quiet = true;
			break;
		}
		io->wseq_at = atomic_load(&c->rt->wseq);
		io->pending++;
		if (nbd_aio_flush(c->h, CB(io_cmd_cb, io), 0) == -1)
			io_cmd_failed(io);
		break;
	case REQ_OP_DISCARD:
		issue_range(c, io, false, flags);
		break;
	case REQ_OP_WRITE_ZEROES:
		if (bio->bi_opf & REQ_NOFALLBACK)
			flags |= LIBNBD_CMD_FLAG_FAST_ZERO;
		if (bio->bi_opf & REQ_NOUNMAP)
			flags |= LIBNBD_CMD_FLAG_NO_HOLE;
		if (in->zero)
			issue_range(c, io, true, flags);
		else
			issue_zero_writes(c, io, flags & LIBNBD_CMD_FLAG_FUA);
		break;
	case REQ_OP_CACHE:
		io->pending++;
		if (nbd_aio_cache(c->h, bio->bi_iter.bi_size,
				  bio_offset_bytes(bio), CB(io_cmd_cb, io),
				  0) == -1)
			io_cmd_failed(io);
		break;
	case REQ_OP_EXTENTS:
		io->ext_start = io->ext_end = bio_offset_bytes(bio);
		io->pending++;
		if (nbd_aio_block_status(
			    c->h, bio->bi_iter.bi_size, bio_offset_bytes(bio),
			    (nbd_extent_callback){ .callback = io_extent_cb,
						   .user_data = io },
			    CB(io_extents_done_cb, io), 0) == -1)
			io_cmd_failed(io);
		break;
	default:
		io->err = -EOPNOTSUPP;
		break;
	}
	if (c->rt->timeout_ms && !c->timer_on && c->head)
		conn_timer_at(c, c->head->t0 +
					 (uint64_t)c->rt->timeout_ms * 1000000u);
	io_put(io);
	if (unlikely(nbd_aio_is_dead(c->h) || nbd_aio_is_closed(c->h))) {
		conn_drop(c, "connection lost", true);
		return;
	}
	conn_run_flushes(c);
	/* The commands may not all have fit in the socket: watch for room. */
	conn_watch(c);
}

static void conn_issue(struct remote_conn *c, struct bio *bio)
{
	conn_issue_run(c, &bio, 1);
}

/*
 * What the remote cannot do and the NBD rules let us answer here: trim and
 * cache are hints, a flush with no cache to flush (or before anything was
 * written) has nothing to do, and a fast zero the remote cannot promise
 * is "not supported".  -1: send it.
 */
static int remote_answer_here(const struct remote_target *rt,
			      const struct bio *bio)
{
	const struct remote_info *in = &rt->info;

	switch (bio_op(bio)) {
	case REQ_OP_DISCARD:
		return in->trim ? -1 : 0;
	case REQ_OP_CACHE:
		return in->cache ? -1 : 0;
	case REQ_OP_FLUSH:
		if (atomic_load_explicit(&rt->lost, memory_order_relaxed))
			return -EIO; /* said once, by rt_mark_lost */
		if (!in->flush ||
		    !atomic_load_explicit(&rt->written, memory_order_relaxed))
			return 0;
		return -1;
	case REQ_OP_WRITE_ZEROES:
		return (bio->bi_opf & REQ_NOFALLBACK) && !in->fast_zero ?
			       -EOPNOTSUPP :
			       -1;
	case REQ_OP_EXTENTS:
		if (in->extents)
			return -1;
		return bio_extents_add(bio->bi_ext, bio->bi_iter.bi_done,
				       bio->bi_iter.bi_size, 0);
	default:
		return -1;
	}
}

/*
 * An idle connection's thread may not have reaped for a long time (an
 * nbdkit thread waits for its client, not in its ring): the remote may
 * have closed it meanwhile, or restarted.  Rather than fail the next bio
 * on a dead socket, look first (MSG_PEEK), once the connection has been
 * idle for a while: a restarted remote is reconnected to with no error.
 */
#define REMOTE_IDLE_CHECK_NS 200000000ull /* 0.2 s */

static bool conn_idle_dead(struct remote_conn *c)
{
	return engine_now_ns() - c->idle_ns >= REMOTE_IDLE_CHECK_NS &&
	       peer_closed(c->poll.fd);
}

static void remote_queue(struct remote_target *rt, struct ioq *q,
			 struct bio *bio);

static void remote_submit(struct target *t, struct bio *bio)
{
	struct remote_target *rt = to_rt(t);
	struct ioq *q = ioq_current();
	int r;

	member_acct_start(t, rt->stats, bio);
	if (unlikely(!q)) {
		bio_io_error(bio, -ENXIO);
		return;
	}
	if (unlikely(rt->info.readonly && op_is_write(bio_op(bio)))) {
		ioq_defer_end(q, bio, -EPERM);
		return;
	}
	if (bio_op(bio) == REQ_OP_FLUSH)
		(void)remote_look_around(rt);
	if (op_is_write(bio_op(bio)) &&
	    !atomic_load_explicit(&rt->written, memory_order_relaxed))
		atomic_store_explicit(&rt->written, true, memory_order_relaxed);
	r = remote_answer_here(rt, bio);
	if (r != -1) {
		ioq_defer_end(q, bio, r);
		return;
	}
	if (bio_has_data(bio) && blk_plug_add(t, bio))
		return;
	remote_queue(rt, q, bio);
}

/* @bio to its connection: sent now, or once the connection is made. */
static void remote_queue(struct remote_target *rt, struct ioq *q,
			 struct bio *bio)
{
	struct remote_conn *c = conn_get(rt, q, rt->status_conns &&
						    bio_op(bio) == REQ_OP_EXTENTS);

	if (unlikely(!c)) {
		ioq_defer_end(q, bio, -ENOMEM);
		return;
	}
	if (likely(c->state == RC_READY)) {
		if (likely(c->head) || !conn_idle_dead(c)) {
			conn_issue(c, bio);
			return;
		}
		(void)conn_lost_writes(c);
		conn_close(c); /* a new one, quietly: see conn_idle_dead */
		c->state = RC_IDLE;
	}
	if (c->state == RC_BACKOFF) {
		if (engine_now_ns() < c->deadline_ns) {
			ioq_defer_end(q, bio, -EIO);
			return;
		}
		c->state = RC_IDLE;
	}
	/*
	 * A new connection, after ours was closed or as this thread's first:
	 * the remote may have restarted under the other threads' too.
	 */
	if (c->state == RC_IDLE)
		(void)remote_look_around(rt);
	/* Wait for the connection (counted in flight: ioq_wait waits). */
	bio->bi_next = NULL;
	*c->wait_tail = bio;
	c->wait_tail = &bio->bi_next;
	q->inflight++;
	if (c->state == RC_IDLE)
		conn_connect(c);
}

/*
 * Plugged reads and writes: a run that follows each other on the remote
 * goes as one command when the connection is up; anything else the usual
 * way, bio by bio.
 */
static void remote_unplug(struct target *t, struct bio **bios,
			  unsigned int nr)
{
	struct remote_target *rt = to_rt(t);
	struct ioq *q = ioq_current();
	struct remote_conn *c = conn_get(rt, q, false);
	unsigned int i = 0;

	while (i < nr) {
		unsigned int n = bio_run_len(bios + i, nr - i,
					     REMOTE_MERGE_MAX);

		if (n > 1 && c && c->state == RC_READY &&
		    (c->head || !conn_idle_dead(c))) {
			conn_issue_run(c, bios + i, n);
			i += n;
			continue;
		}
		for (unsigned int end = i + n; i < end; i++)
			remote_queue(rt, q, bios[i]);
	}
}

static void remote_destroy(struct target *t)
{
	struct remote_target *rt = to_rt(t);

	/*
	 * Connections live with their threads' queues; those still alive
	 * forget the target and close when their queue goes.
	 */
	pthread_mutex_lock(&remote_lock);
	for (struct remote_conn *c = rt->conns; c; c = c->next)
		c->rt = NULL;
	rt->conns = NULL;
	pthread_mutex_unlock(&remote_lock);
	io_stats_destroy(rt->stats);
	free(rt->uri);
	free(rt->t.name);
	free(rt);
}

static bool remote_lost(struct target *t)
{
	return atomic_load_explicit(&to_rt(t)->lost, memory_order_relaxed);
}

static const struct target_ops remote_target_ops = {
	.submit = remote_submit,
	.destroy = remote_destroy,
	.unplug = remote_unplug,
	.lost = remote_lost,
};

struct io_stats *remote_target_stats(struct target *t)
{
	return t->ops == &remote_target_ops ? to_rt(t)->stats : NULL;
}

int remote_target_open(struct target **out, const char *uri,
		       const struct remote_opts *opts, char *errbuf,
		       size_t errlen)
{
	struct remote_opts none = { 0 };
	struct remote_target *rt;
	int r;

	if (!opts)
		opts = &none;
	rt = calloc(1, sizeof(*rt));
	if (!rt)
		return verr(errbuf, errlen, -ENOMEM, "out of memory");
	rt->timeout_ms = opts->timeout_ms ? opts->timeout_ms :
					    REMOTE_TIMEOUT_MS_DEFAULT;
	r = remote_probe(uri, rt->timeout_ms, &rt->info, errbuf, errlen);
	if (r)
		goto err;
	if (rt->info.readonly && !opts->readonly)
		target_notice(TARGET_NOTICE_INFO,
			      "member %s: the remote export is read-only, and so is the volume",
			      uri);
	rt->uri = strdup(uri);
	rt->t.name = strdup(uri);
	if (!rt->uri || !rt->t.name) {
		r = verr(errbuf, errlen, -ENOMEM, "out of memory");
		goto err;
	}
	rt->t.ops = &remote_target_ops;
	rt->t.size_bytes = rt->info.size_bytes;
	rt->t.single_conn = !rt->info.multi_conn;
	rt->t.whole_io = true;
	rt->t.readonly = rt->info.readonly;
	rt->cmd_max = rt->info.max_bytes;
	rt->status_conns = rt->info.extents && rt->info.multi_conn;
	if (opts->readonly)
		rt->info.readonly = true;
	if (opts->stats_parent)
		rt->stats = io_stats_create(uri, opts->stats_parent);
	if (opts->trace_parent)
		rt->t.trace_id = trace_obj_add(TRACE_OBJ_MEMBER,
					       opts->trace_parent, uri);
	*out = &rt->t;
	return 0;
err:
	free(rt->uri);
	free(rt->t.name);
	free(rt);
	return r;
}

/* ---- metadata I/O (mdev.h) ---- */

/*
 * One synchronous connection, made on open and again after a failure.
 * Calls are serialized: each drives the handle with nbd_poll itself, and
 * the mirror's hooks and its bitmap daemon may call from two threads.
 */
struct remote_mdev {
	struct mdev m;
	pthread_mutex_t lock;
	struct nbd_handle *h; /* NULL: connect on the next call */
	char *uri;
	bool write;
	unsigned int timeout_ms;
	struct remote_info info; /* of the first connection */
};

enum rm_op { RM_READ, RM_WRITE, RM_ZERO, RM_FLUSH };

static int rm_connect(struct remote_mdev *rm, char *why, size_t whylen)
{
	struct remote_info info;
	struct nbd_handle *h;
	int r = 0;

	if (rm->h)
		return 0;
	h = remote_connect_sync(rm->uri, rm->timeout_ms, &r, why, whylen);
	if (!h)
		return r;
	r = remote_info_read(h, &info);
	if (r)
		verr(why, whylen, r, "member %s: %s", rm->uri,
		     nbd_get_error());
	else if (rm->write && info.readonly)
		r = verr(why, whylen, -EROFS,
			 "member %s: the remote export is read-only", rm->uri);
	else if (rm->info.size_bytes &&
		 info.size_bytes != rm->info.size_bytes)
		r = verr(why, whylen, -ESTALE,
			 "member %s: %llu bytes now, %llu before: refused",
			 rm->uri, (unsigned long long)info.size_bytes,
			 (unsigned long long)rm->info.size_bytes);
	if (r) {
		nbd_close(h);
		return r;
	}
	rm->info = info;
	rm->h = h;
	return 0;
}

/* One command on the connected handle, waited for up to the timeout. */
static int rm_cmd(struct remote_mdev *rm, enum rm_op op, void *buf,
		  uint64_t len, uint64_t off)
{
	uint64_t end = engine_now_ns() + (uint64_t)rm->timeout_ms * 1000000u;
	int64_t cookie = -1;

	switch (op) {
	case RM_READ:
		cookie = nbd_aio_pread(rm->h, buf, len, off,
				       NBD_NULL_COMPLETION, 0);
		break;
	case RM_WRITE:
		cookie = nbd_aio_pwrite(rm->h, buf, len, off,
					NBD_NULL_COMPLETION, 0);
		break;
	case RM_ZERO:
		cookie = nbd_aio_zero(rm->h, len, off, NBD_NULL_COMPLETION, 0);
		break;
	case RM_FLUSH:
		cookie = nbd_aio_flush(rm->h, NBD_NULL_COMPLETION, 0);
		break;
	}
	return cookie == -1 ? remote_errno() : handle_wait(rm->h, cookie, end);
}

/* @op over [off, off + len) on the connected handle, in commands it takes. */
static int rm_run(struct remote_mdev *rm, enum rm_op op, void *buf,
		  uint64_t len, uint64_t off)
{
	static const char zeros[65536];
	uint64_t size = rm->info.size_bytes;
	/* A remote without WRITE_ZEROES is written zeros, a buffer a time. */
	bool fill = op == RM_ZERO && !rm->info.zero;
	uint64_t max = fill ? sizeof(zeros) :
		       op == RM_ZERO ? REMOTE_RANGE_MAX : rm->info.max_bytes;
	int r = 0;

	if (op == RM_FLUSH)
		return rm->info.flush ? rm_cmd(rm, op, NULL, 0, 0) : 0;
	if (off > size || len > size - off) {
		if (op != RM_READ)
			return -ENOSPC;
		/* Past the end reads as zeros, as a file does. */
		memset(buf, 0, len);
		len = off < size ? size - off : 0;
	}
	if (fill && max > rm->info.max_bytes)
		max = rm->info.max_bytes;
	for (uint64_t done = 0; done < len && !r;) {
		uint64_t n = len - done < max ? len - done : max;

		if (fill)
			r = rm_cmd(rm, RM_WRITE, (void *)zeros, n, off + done);
		else
			r = rm_cmd(rm, op, op == RM_ZERO ? NULL : (char *)buf + done,
				   n, off + done);
		done += n;
	}
	return r;
}

static int rm_call(struct mdev *m, enum rm_op op, void *buf, uint64_t len,
		   uint64_t off)
{
	struct remote_mdev *rm = container_of(m, struct remote_mdev, m);
	char why[256];
	int r;

	pthread_mutex_lock(&rm->lock);
	for (int tries = 0;; tries++) {
		bool fresh = !rm->h;

		r = rm_connect(rm, why, sizeof(why));
		if (r)
			break;
		r = rm_run(rm, op, buf, len, off);
		/*
		 * A remote that closed the connection cleanly leaves libnbd
		 * with no errno (EIO here) but a dead handle: that one must
		 * go too, or every later call fails on it.
		 */
		if (!r || (!remote_conn_errno(-r) && !nbd_aio_is_dead(rm->h) &&
			   !nbd_aio_is_closed(rm->h)))
			break;
		nbd_close(rm->h);
		rm->h = NULL;
		/*
		 * A connection kept since the last call may have been closed
		 * by a remote that restarted meanwhile: once more on a new
		 * one (every op here may be repeated), unless it timed out.
		 */
		if (fresh || tries || r == -ETIMEDOUT)
			break;
	}
	pthread_mutex_unlock(&rm->lock);
	return r;
}

static int rm_pread(struct mdev *m, void *buf, size_t len, uint64_t off)
{
	return rm_call(m, RM_READ, buf, len, off);
}

static int rm_pwrite(struct mdev *m, const void *buf, size_t len,
		     uint64_t off)
{
	/* libnbd only reads a write's buffer. */
	return rm_call(m, RM_WRITE, (void *)buf, len, off);
}

static int rm_zero(struct mdev *m, uint64_t off, uint64_t len)
{
	return rm_call(m, RM_ZERO, NULL, len, off);
}

static int rm_sync(struct mdev *m)
{
	return rm_call(m, RM_FLUSH, NULL, 0, 0);
}

static int rm_size(struct mdev *m, uint64_t *bytes)
{
	struct remote_mdev *rm = container_of(m, struct remote_mdev, m);

	/* Checked again on every connection: it cannot change. */
	*bytes = rm->info.size_bytes;
	return 0;
}

static void rm_close(struct mdev *m)
{
	struct remote_mdev *rm = container_of(m, struct remote_mdev, m);

	if (rm->h)
		handle_release(rm->uri, rm->h);
	pthread_mutex_destroy(&rm->lock);
	free(rm->uri);
	free(rm);
}

static const struct mdev_ops remote_mdev_ops = {
	.pread = rm_pread,
	.pwrite = rm_pwrite,
	.zero = rm_zero,
	.sync = rm_sync,
	.size = rm_size,
	.close = rm_close,
};

int remote_mdev_open(struct mdev **out, const char *uri, bool write,
		     unsigned int timeout_ms, char *why, size_t whylen)
{
	struct remote_mdev *rm = calloc(1, sizeof(*rm));
	int r;

	if (!rm || !(rm->uri = strdup(uri))) {
		free(rm);
		return verr(why, whylen, -ENOMEM, "out of memory");
	}
	rm->m.ops = &remote_mdev_ops;
	rm->m.fd = -1;
	rm->write = write;
	rm->timeout_ms = timeout_or_default(timeout_ms);
	pthread_mutex_init(&rm->lock, NULL);
	/* Connected now: an unreachable member shows at open. */
	r = rm_connect(rm, why, whylen);
	if (r) {
		rm_close(&rm->m);
		return r;
	}
	*out = &rm->m;
	return 0;
}
