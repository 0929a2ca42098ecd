// SPDX-License-Identifier: MIT
/*
 * conn.c - one NBD connection on a worker's loop, top to bottom: accept,
 * handshake (reading exactly what each step needs, so requests a client
 * pipelines after NBD_OPT_GO stay in the socket), transmission (reading
 * and parsing requests), sending replies, and closing.
 *
 * Reading in transmission: the worker's shared buffer takes a large read
 * that is parsed at once; payloads of writes are copied out of it, or for
 * large ones received straight into the request's buffer.  Bytes that
 * cannot be parsed yet (the connection hit its in-flight limit) move to a
 * per-connection buffer, so a paused client costs at most one read's worth
 * of memory.
 *
 * Writing: all replies a loop iteration produced for a connection leave in
 * one sendmsg, at the end of the iteration (conn_send_dirty), up to a
 * per-turn budget; the data of sendfile reads goes from the member files
 * in between.
 *
 * Closing is deferred to conn_send_dirty too, so no caller up the stack is
 * ever left holding a freed connection.
 *
 * TLS: after NBD_OPT_STARTTLS every byte goes through the connection's
 * GnuTLS session (tls.h) instead of recv/send; sendfile is never chosen
 * (request.c), and replies leave one TLS record at a time (conn_send_tls).
 * Bytes can wait inside the session (decrypted, or read ahead) with the
 * socket itself empty, so wherever reading stops with the watcher on,
 * conn_read_kick makes the loop call the reader again.
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bionbd/trace.h>

#include "handshake.h"
#include "request.h"
#include "stats.h"

static void conn_read_cb(struct ev_loop *loop, ev_io *w, int revents);
static void conn_write_cb(struct ev_loop *loop, ev_io *w, int revents);

/* ---- lifetime ---- */

static bool conn_closeable(const struct conn *c)
{
	return c->draining && !c->inflight && !c->oq_head && !c->olen &&
	       !c->tls_stage_len;
}

static void conn_maybe_close(struct conn *c)
{
	if (conn_closeable(c))
		conn_mark_dirty(c);
}

/*
 * @c's stash (unparsed bytes, tx_parse) becomes @b, @n bytes, counted in
 * its worker's part of the bound for stashes (tx_read_size); the old one
 * is freed.
 */
static void conn_stash_set(struct conn *c, uint8_t *b, size_t n)
{
	struct worker *w = c->w;

	free(c->pend);
	__atomic_store_n(&w->stash_bytes, w->stash_bytes - c->pend_len + n,
			 __ATOMIC_RELAXED);
	c->pend = b;
	c->pend_len = n;
}

/* Only from conn_send_dirty: nothing else holds a pointer to @c then. */
static void conn_free(struct conn *c)
{
	struct worker *w = c->w;

	ev_io_stop(w->loop, &c->rio);
	ev_io_stop(w->loop, &c->wio);
	ev_timer_stop(w->loop, &c->hs_timer);
	assert(!c->held && !c->bwait.queued);
	if (c->yielded) {
		struct conn **pp = &w->yielded;

		while (*pp != c)
			pp = &(*pp)->yield_next;
		*pp = c->yield_next;
	}
	if (c->prev)
		c->prev->next = c->next;
	else
		w->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	w->nr_conns--;
	srv_stats_conn_del(c);
	nbdl_log(NBDL_DEBUG, "connection closed (fd %d)", c->fd);
	tls_session_free(c->tls, c->tls_up && !c->dead);
	close(c->fd);
	free(c->tls_stage);
	free(c->optdata);
	free(c->obuf);
	conn_stash_set(c, NULL, 0);
	free(c);
	srv_conn_gone(w->srv);
	if (w->stopping && !w->conns)
		ev_break(w->loop, EVBREAK_ONE);
}

static void conn_drop_replies(struct conn *c)
{
	struct nbd_req *r;

	while ((r = c->oq_head)) {
		c->oq_head = r->next;
		req_free(r, false);
	}
	c->oq_tail = &c->oq_head;
}

/* The request waiting for buffer room, out of the queue; NULL if none. */
static struct nbd_req *conn_take_held(struct conn *c)
{
	struct nbd_req *r = c->held;

	if (r) {
		inflight_cancel(worker_lane(c->w, c->bwait.need_bytes),
				&c->bwait);
		c->held = NULL;
	}
	return r;
}

/*
 * No more requests: the one waiting for buffer room is dropped unstarted,
 * like those still in pend or the socket.
 */
static void conn_unhold(struct conn *c)
{
	struct nbd_req *r = conn_take_held(c);

	if (r)
		req_free(r, false);
}

/*
 * No more requests will be read: drop the one held for buffer room, a
 * write's payload half received, and the unparsed rest in pend.
 */
static void conn_drop_input(struct conn *c)
{
	conn_unhold(c);
	if (c->rx) {
		req_free(c->rx, false);
		c->rx = NULL;
	}
	conn_stash_set(c, NULL, 0);
}

/* The socket is unusable: drop queued replies; bios in flight finish. */
static void conn_fail(struct conn *c)
{
	c->dead = true;
	c->draining = true;
	ev_io_stop(c->w->loop, &c->rio);
	ev_io_stop(c->w->loop, &c->wio);
	ev_timer_stop(c->w->loop, &c->hs_timer);
	shutdown(c->fd, SHUT_RDWR);
	/*
	 * Unsent handshake bytes can never go either; left counted, they
	 * would keep conn_closeable() false forever (e.g. a client that sends
	 * NBD_OPT_ABORT and closes without reading the ACK: the send fails
	 * with EPIPE), leaking the connection and blocking shutdown.
	 */
	c->olen = c->ooff = 0;
	c->tls_stage_len = 0;
	conn_drop_replies(c);
	conn_drop_input(c);
	conn_maybe_close(c);
}

/*
 * Close now, whatever is queued (a time limit ran out), but end a working
 * TLS session first, as a hang-up does (conn_free would not: the socket is
 * shut down at once).
 */
static void conn_cut(struct conn *c)
{
	if (c->tls_up && !c->dead)
		tls_bye(c->tls);
	conn_fail(c);
}

/* No more requests (DISC, EOF, shutdown): answer those taken, then close. */
static void conn_drain(struct conn *c)
{
	c->draining = true;
	c->paused = true;
	ev_io_stop(c->w->loop, &c->rio);
	conn_drop_input(c);
	conn_maybe_close(c);
}

/*
 * The server stops: as conn_drain, but what was read and not started is
 * answered with NBD_ESHUTDOWN, not dropped: the request waiting for
 * buffer room, a write whose payload is here, and the requests stashed in
 * pend behind a pause or a spent turn.  proto.md: a server shutting down
 * SHOULD serve the requests in flight, and the errors it gives instead
 * SHOULD be NBD_ESHUTDOWN; the client, which sent them, would otherwise
 * see the connection close with no answer to them.  Whatever is still in
 * the socket was never read and is not answered, nor is a write whose
 * payload is partly there (req_answer).
 */
static void conn_stop(struct conn *c)
{
	const uint8_t *p = c->pend;
	size_t n = c->pend_len, skip = 0;
	struct nbd_req *r;
	uint32_t payload;
	bool whole = true; /* the requests read so far were read whole */

	if (c->dead) {
		conn_drain(c);
		return;
	}
	c->draining = true;
	c->paused = true;
	ev_io_stop(c->w->loop, &c->rio);
	if ((r = conn_take_held(c))) {
		/* Held before its payload was taken: pend starts with it. */
		skip = r->type == NBD_CMD_WRITE ? r->len : 0;
		whole = req_answer(r, skip, n, NBD_ESHUTDOWN);
	}
	if ((r = c->rx)) {
		c->rx = NULL;
		skip = r->len - r->have;
		whole = req_answer(r, skip, n, NBD_ESHUTDOWN);
	}
	/* Stops at DISC, lost framing, or a payload cut short. */
	while (whole && p && n >= skip && n - skip >= NBD_REQUEST_BYTES) {
		p += skip;
		n -= skip;
		if (req_answer_hdr(c, p, n - NBD_REQUEST_BYTES, NBD_ESHUTDOWN,
				   &payload))
			break;
		p += NBD_REQUEST_BYTES;
		n -= NBD_REQUEST_BYTES;
		skip = payload;
	}
	conn_stash_set(c, NULL, 0);
	c->hdr_have = 0;
	conn_maybe_close(c);
}

/*
 * We end the session on a socket that still works (a protocol violation,
 * an NBD_OPT_EXPORT_NAME we cannot serve, NBD_OPT_ABORT): as after
 * NBD_CMD_DISC, the requests taken are answered and TLS is shut down
 * before the close, which the spec asks of whoever initiates a disconnect.
 */
static void conn_hangup(struct conn *c)
{
	conn_drain(c);
}

/*
 * @n bytes of requests or replies moved: progress once they add up to
 * what the connection's buffers ask (inflight_progress_bytes).
 */
static void conn_moved(struct conn *c, size_t n)
{
	c->moved_bytes += n;
	if (c->moved_bytes - c->progress_mark >=
	    inflight_progress_bytes(c->inflight_bytes))
		conn_progress(c);
}

/* recv(2), or through TLS: bytes, 0 at EOF, or -1 with errno. */
static ssize_t conn_recv(struct conn *c, void *buf, size_t len)
{
	if (c->tls_up)
		return tls_recv(c->tls, buf, len);
	return recv(c->fd, buf, len, 0);
}

/*
 * Start reading; with TLS, bytes already decrypted would not wake the
 * watcher, so the reader is called for them at the next loop turn.
 */
static void conn_read_kick(struct conn *c)
{
	/*
	 * Not while yielded: the fed event would find nothing to do and
	 * feed itself again, inside this loop iteration, for ever.
	 */
	if (c->tls && !c->yielded && !c->held && ev_is_active(&c->rio) &&
	    tls_pending(c->tls))
		ev_feed_event(c->w->loop, &c->rio, EV_READ);
}

static void conn_read_on(struct conn *c)
{
	ev_io_start(c->w->loop, &c->rio);
	conn_read_kick(c);
}

static void conn_tls_begin(struct conn *c);

/*
 * Send what the handshake queued; returns false if the socket died.  While
 * a reply waits for room the connection reads nothing more, so a client
 * that sends options and never reads the replies holds one reply's worth
 * of memory, not one per option.
 */
static bool obuf_send(struct conn *c)
{
	while (c->ooff < c->olen) {
		size_t len = c->olen - c->ooff;
		ssize_t n;

		/* One record at a time: a retry after EAGAIN is the same. */
		if (c->tls_up)
			n = tls_send(c->tls, c->obuf + c->ooff,
				     len < TLS_RECORD_BYTES ? len :
							      TLS_RECORD_BYTES);
		else
			n = send(c->fd, c->obuf + c->ooff, len, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				ev_io_stop(c->w->loop, &c->rio);
				ev_io_start(c->w->loop, &c->wio);
				return true;
			}
			conn_fail(c);
			return false;
		}
		c->ooff += (size_t)n;
	}
	c->olen = c->ooff = 0;
	ev_io_stop(c->w->loop, &c->wio);
	if (c->close_after_send) {
		conn_hangup(c);
		return false;
	}
	if (c->starttls) {
		conn_tls_begin(c);
		return !c->dead;
	}
	if (!c->paused && !c->draining && c->state != CS_TLS_HANDSHAKE)
		conn_read_on(c);
	return true;
}

static void conn_hs_timeout_cb(struct ev_loop *loop, ev_timer *t,
			       int revents)
{
	/* Still negotiating: a slow or idle client holds no slot forever. */
	conn_cut(container_of(t, struct conn, hs_timer));
}

static int sock_domain(int fd)
{
	int dom = -1;
	socklen_t len = sizeof(dom);

	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &len))
		return -1;
	return dom;
}

void conn_accept(struct worker *w, int fd)
{
	struct conn *c = calloc(1, sizeof(*c));

	if (!c) {
		close(fd);
		srv_conn_gone(w->srv);
		return;
	}
	c->w = w;
	c->fd = fd;
	c->unix_sock = sock_domain(fd) == AF_UNIX;
	c->oq_tail = &c->oq_head;
	srv_stats_conn_add(c);
	nbdl_log(NBDL_DEBUG, "new connection (fd %d, %s)", fd,
		 c->unix_sock ? "unix" : "TCP");
	ev_io_init(&c->rio, conn_read_cb, fd, EV_READ);
	ev_io_init(&c->wio, conn_write_cb, fd, EV_WRITE);
	ev_timer_init(&c->hs_timer, conn_hs_timeout_cb, w->srv->handshake_s,
		      0.);
	c->next = w->conns;
	if (w->conns)
		w->conns->prev = c;
	w->conns = c;
	w->nr_conns++;

	if (w->srv->handshake_s > 0)
		ev_timer_start(w->loop, &c->hs_timer);
	if (hs_start(c)) {
		conn_fail(c);
		return;
	}
	obuf_send(c);
}

/* ---- handshake ---- */

/* The TLS handshake, a step each time the socket is ready. */
static void conn_tls_step(struct conn *c)
{
	bool want_write;
	char desc[256];
	int r = tls_handshake(c->tls, &want_write);

	if (r == -EAGAIN) {
		if (want_write) {
			ev_io_stop(c->w->loop, &c->rio);
			ev_io_start(c->w->loop, &c->wio);
		} else {
			ev_io_stop(c->w->loop, &c->wio);
			conn_read_on(c);
		}
		return;
	}
	if (r) {
		conn_fail(c);
		return;
	}
	c->tls_up = true;
	tls_describe(c->tls, desc, sizeof(desc));
	nbdl_log(NBDL_DEBUG, "TLS on (fd %d): %s", c->fd, desc);
	hs_tls_done(c);
	ev_io_stop(c->w->loop, &c->wio);
	conn_read_on(c);
}

/* NBD_OPT_STARTTLS's ACK is out: from here on, TLS or nothing. */
static void conn_tls_begin(struct conn *c)
{
	c->starttls = false;
	c->tls_stage = malloc(TLS_RECORD_BYTES);
	if (!c->tls_stage ||
	    tls_session_new(c->w->srv->tls, c->fd, &c->tls)) {
		nbdl_log(NBDL_ERROR, "TLS session: out of memory");
		conn_fail(c);
		return;
	}
	c->state = CS_TLS_HANDSHAKE;
	conn_tls_step(c);
}

/* Reading client flags or options (not TLS handshake bytes). */
static bool hs_reading(const struct conn *c)
{
	return c->state == CS_CLIENT_FLAGS || c->state == CS_OPT_HDR ||
	       c->state == CS_OPT_DATA;
}

static void handshake_read(struct conn *c)
{
	while (hs_reading(c)) {
		uint8_t *dst = c->state == CS_OPT_DATA ? c->optdata : c->small;
		ssize_t n = conn_recv(c, dst + c->have, c->need - c->have);

		if (n < 0 && errno == EAGAIN)
			return;
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			conn_fail(c);
			return;
		}
		c->have += (uint32_t)n;
		if (c->have < c->need)
			continue;
		c->have = 0;
		if (hs_step(c)) {
			/*
			 * The step started with nothing queued (the loop reads
			 * no option while a reply waits), so what is queued
			 * now is a reply it failed half way (out of memory):
			 * never to be sent, and left counted it would keep
			 * conn_closeable() false, the connection neither
			 * served nor closed.
			 */
			c->olen = c->ooff = 0;
			conn_hangup(c);
			return;
		}
		if (c->state == CS_TRANSMISSION)
			ev_timer_stop(c->w->loop, &c->hs_timer);
		if (!obuf_send(c) || c->olen)
			return; /* dead, or waiting for the client to read */
	}
	if (c->state == CS_TRANSMISSION)
		ev_timer_stop(c->w->loop, &c->hs_timer);
}

/* ---- transmission: reading requests ---- */

static void conn_pause_check(struct conn *c)
{
	if (c->inflight >= SRV_MAX_INFLIGHT_REQS ||
	    c->inflight_bytes >= SRV_MAX_INFLIGHT_BYTES) {
		c->paused = true;
		ev_io_stop(c->w->loop, &c->rio);
	}
}

/* A whole request (and its payload, for writes) is here. */
static void tx_ready(struct conn *c, struct nbd_req *r)
{
	req_run(r);
	conn_pause_check(c);
}

/*
 * This turn's requests cost @cost more: past SRV_TURN_COST, stop reading
 * and parsing until the next turn, when the worker's other connections
 * have had theirs.  True if it yielded.
 */
static bool conn_turn_spent(struct conn *c, unsigned int cost)
{
	struct worker *w = c->w;

	c->turn_cost += cost;
	if (c->turn_cost < SRV_TURN_COST || c->paused || c->draining ||
	    c->dead)
		return false;
	c->yielded = true;
	io_stats_add(&c->st_yields, 1);
	ev_io_stop(w->loop, &c->rio);
	c->yield_next = w->yielded;
	w->yielded = c;
	ev_idle_start(w->loop, &w->yield_idle);
	return true;
}

/* What starting @r costs of its connection's turn (conn_turn_spent). */
static unsigned int req_cost(const struct nbd_req *r)
{
	/* Refused and empty requests are answered at once (req_run). */
	if (r->err || (!r->len && r->type != NBD_CMD_FLUSH))
		return 1;
	if (r->type == NBD_CMD_BLOCK_STATUS)
		return SRV_COST_BLOCK_STATUS;
	if (r->type == NBD_CMD_CACHE)
		return SRV_COST_CACHE;
	/* Several bios each: their edge sectors read, then written. */
	if ((r->type == NBD_CMD_WRITE || r->type == NBD_CMD_WRITE_ZEROES) &&
	    !nbdl_is_direct(r->type, r->offset, r->len))
		return SRV_COST_UNALIGNED;
	return 1;
}

/*
 * @c waits for buffer room and reads nothing: has its client hung up?
 * The kernel tells, whatever is unread in the socket.  POLLHUP or
 * POLLERR: the peer is gone both ways (closed, reset), no reply can reach
 * it, and the connection fails.  POLLRDHUP alone: the peer sends nothing
 * more but may still read, and it is a hang-up only if nothing it sent is
 * left (the socket at EOF, no stash, no record in the TLS session): EOF
 * right behind the held request, with no NBD_CMD_DISC, is a hard
 * disconnect, and conn_drain leaves the held request unanswered and
 * answers those started.  Bytes left could hold a DISC, after which the
 * spec wants every request before it answered, so that client waits its
 * turn.  Under TLS a peek sees only ciphertext: any bytes, a close_notify
 * too, count as left.  Returns true if it hung up.
 */
static bool conn_held_hangup(struct conn *c)
{
	struct pollfd p = { .fd = c->fd, .events = POLLRDHUP };
	bool gone;
	uint8_t b;
	int n;

	do
		n = poll(&p, 1, 0);
	while (n < 0 && errno == EINTR);
	if (n <= 0 || !(p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
		return false;
	gone = p.revents & (POLLHUP | POLLERR);
	if (!gone && (c->pend || (c->tls && tls_pending(c->tls)) ||
		      recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) != 0))
		return false;
	nbdl_log(NBDL_DEBUG,
		 "connection %" PRIu64 " (%s): the client hung up while its "
		 "request waited for buffer room",
		 c->id, c->peer);
	if (gone)
		conn_fail(c);
	else
		conn_drain(c);
	return true;
}

/*
 * The read watcher of a held connection fired: a hang-up, or bytes (the
 * next requests, or a half-close behind them) that stay unread until it
 * is let in.  Those would fire it every loop turn, so it stops; the stall
 * tick looks again (conn_evict_stalled).
 */
static void conn_held_readable(struct conn *c)
{
	if (!conn_held_hangup(c))
		ev_io_stop(c->w->loop, &c->rio);
}

/*
 * @r, parsed, has no buffer room: stop reading and queue for it, the
 * rest of what was read kept in pend (tx_parse).  The read watcher stays
 * on for a hang-up alone (conn_held_readable): a client that gives up
 * must not keep its place, its socket and its stash until room comes.
 */
static void conn_hold(struct conn *c, struct nbd_req *r)
{
	struct worker *w = c->w;
	size_t n = buf_bytes_for(r->len);

	c->held = r;
	c->paused = true;
	ev_io_start(w->loop, &c->rio);
	inflight_wait(worker_lane(w, n), &c->bwait, n);
	io_stats_add(&c->st_buf_waits, 1);
	if (!ev_is_active(&w->stall))
		ev_timer_again(w->loop, &w->stall);
}

/* @r has its buffer (or needs none).  Returns false to stop parsing. */
static bool tx_start(struct conn *c, struct nbd_req *r)
{
	unsigned int cost;

	c->big_writes = r->type == NBD_CMD_WRITE &&
			r->len >= SRV_DIRECT_READ_MIN;
	if (r->type == NBD_CMD_WRITE && r->len) {
		c->rx = r;
		return true;
	}
	cost = req_cost(r);
	tx_ready(c, r); /* @r may be gone */
	return !c->paused && !conn_turn_spent(c, cost);
}

/* A 28-byte request header arrived.  Returns false to stop parsing. */
static bool tx_header(struct conn *c, const uint8_t *h)
{
	struct nbd_req *r;
	int rc = req_begin(c, h, &r);

	if (rc == REQ_DISC) {
		conn_drain(c);
		return false;
	}
	if (rc == REQ_WAIT) {
		conn_hold(c, r);
		return false;
	}
	if (rc < 0) {
		conn_hangup(c);
		return false;
	}
	return tx_start(c, r);
}

static void tx_stash(struct conn *c, const uint8_t *p, size_t n)
{
	/* Paused mid-buffer: keep the rest for when in-flight work drains. */
	uint8_t *b = malloc(n);

	if (!b) {
		conn_fail(c);
		return;
	}
	memcpy(b, p, n);
	conn_stash_set(c, b, n);
}

static void tx_parse(struct conn *c, const uint8_t *p, size_t n)
{
	while (n && !c->dead) {
		if (c->rx) {
			struct nbd_req *r = c->rx;
			size_t take = r->len - r->have;

			if (take > n)
				take = n;
			memcpy((uint8_t *)r->buf + r->have, p, take);
			r->have += (uint32_t)take;
			p += take;
			n -= take;
			if (r->have == r->len) {
				unsigned int cost = req_cost(r);

				c->rx = NULL;
				tx_ready(c, r);
				if (!c->paused && conn_turn_spent(c, cost))
					break;
			}
		} else if (!c->hdr_have && n >= NBD_REQUEST_BYTES) {
			p += NBD_REQUEST_BYTES;
			n -= NBD_REQUEST_BYTES;
			if (!tx_header(c, p - NBD_REQUEST_BYTES))
				break;
		} else {
			size_t take = NBD_REQUEST_BYTES - c->hdr_have;

			if (take > n)
				take = n;
			memcpy(c->hdr + c->hdr_have, p, take);
			c->hdr_have += (unsigned int)take;
			p += take;
			n -= take;
			if (c->hdr_have < NBD_REQUEST_BYTES)
				break;
			c->hdr_have = 0;
			if (!tx_header(c, c->hdr))
				break;
		}
		if (c->paused || c->yielded)
			break;
	}
	if (n && !c->dead && !c->draining)
		tx_stash(c, p, n);
}

/*
 * How much the next read into the worker's buffer may take.  What a read
 * brings past a request that must wait is stashed (tx_parse), and stashes
 * count under the bound, in their own part of the worker's share: with
 * less room left there than a whole read, a read takes that room at most,
 * or exactly the header or small payload under way, which leaves nothing
 * behind.  So many connections paused at once read a request at a time,
 * and each keeps a few bytes at most.
 */
static size_t tx_read_size(const struct conn *c)
{
	const struct worker *w = c->w;
	const struct nbd_req *r = c->rx;
	size_t exact = r ? r->len - r->have : NBD_REQUEST_BYTES - c->hdr_have;
	size_t room = w->stash_bytes < w->stash_limit ?
			      w->stash_limit - w->stash_bytes :
			      0;

	/*
	 * While big writes stream in, a batch read would pull the next
	 * payload's first 256 KiB through rbuf and cost a second copy of it;
	 * the header alone lets the payload land in its buffer directly.
	 */
	if (c->big_writes && !r)
		return exact;
	if (room >= SRV_RBUF_BYTES)
		return SRV_RBUF_BYTES;
	return room > exact ? room : exact;
}

static void tx_read(struct conn *c)
{
	struct worker *w = c->w;
	size_t budget = worker_turn_bytes(w, c, SRV_TURN_RECV_BYTES);

	c->turn_cost = 0;
	while (!c->paused && !c->dead && !c->yielded) {
		struct nbd_req *r = c->rx;
		ssize_t n;

		if (!budget)
			return; /* the others' turn; the watcher fires again */

		if (r && r->len - r->have >= SRV_DIRECT_READ_MIN) {
			/* Big payload: straight into its buffer, no copy. */
			size_t want = r->len - r->have;

			n = conn_recv(c, (uint8_t *)r->buf + r->have,
				      want < budget ? want : budget);
			if (n > 0) {
				conn_moved(c, (size_t)n);
				budget -= (size_t)n;
				r->have += (uint32_t)n;
				if (r->have == r->len) {
					unsigned int cost = req_cost(r);

					c->rx = NULL;
					tx_ready(c, r);
					if (!c->paused)
						(void)conn_turn_spent(c, cost);
				}
				continue;
			}
		} else {
			size_t want = tx_read_size(c);

			n = conn_recv(c, w->rbuf, want);
			if (n > 0) {
				conn_moved(c, (size_t)n);
				budget -= (size_t)n < budget ? (size_t)n : budget;
				tx_parse(c, w->rbuf, (size_t)n);
				/* TLS gives a record at a time: go on to EAGAIN. */
				if ((size_t)n < want && !c->tls_up)
					return; /* drained; wait for more */
				continue;
			}
		}
		if (n == 0) {
			/* EOF: finish what was asked, then close. */
			conn_drain(c);
			return;
		}
		if (errno == EAGAIN)
			return;
		if (errno != EINTR) {
			conn_fail(c);
			return;
		}
	}
}

/*
 * Reading may go on: parse what was read and stashed, then read more,
 * unless that stopped it again (paused, dead, or its turn spent, for
 * conn_resume_yielded to go on with).
 */
static void conn_take_pend(struct conn *c)
{
	if (c->pend) {
		uint8_t *b = c->pend;
		size_t n = c->pend_len;

		c->pend = NULL; /* parsed below, then freed */
		conn_stash_set(c, NULL, 0);
		tx_parse(c, b, n);
		free(b);
		if (c->paused || c->dead || c->yielded)
			return;
	}
	conn_read_on(c);
}

/* In-flight work drained below the limits: take the stash, then read. */
static void conn_resume(struct conn *c)
{
	/* A request held for buffer room goes first: conn_resume_waiting. */
	if (!c->paused || c->held || c->draining || c->dead ||
	    c->inflight >= SRV_MAX_INFLIGHT_REQS / 2 ||
	    c->inflight_bytes >= SRV_MAX_INFLIGHT_BYTES / 2)
		return;
	c->paused = false;
	conn_take_pend(c);
}

static void conn_read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct conn *c = container_of(w, struct conn, rio);

	if (c->held) {
		conn_held_readable(c);
		return;
	}
	busypoll_arrival(&c->w->poll, loop);
	if (c->state == CS_TLS_HANDSHAKE) {
		conn_tls_step(c);
		if (c->state == CS_TLS_HANDSHAKE || c->dead)
			return;
	}
	if (c->state != CS_TRANSMISSION) {
		handshake_read(c);
		/*
		 * GO may have been followed by pipelined requests; they are
		 * read once its reply is out.
		 */
		if (c->state != CS_TRANSMISSION || c->dead || c->olen) {
			conn_read_kick(c);
			return;
		}
	}
	tx_read(c);
	conn_read_kick(c);
}

/* ---- transmission: sending replies ---- */

/*
 * A traced sendfile read's member events: D before the sendfile of the
 * piece @m maps (@t0 0; returns the time), C after it (@sent bytes, @err):
 * what a bio's issue and completion would be.
 */
static uint64_t sendfile_trace(const struct nbd_req *r,
			       const struct target_iomap *m, uint64_t t0,
			       uint32_t sent, int err)
{
	struct trace_rec ev = { .type = t0 ? TRACE_C : TRACE_D,
				.op = REQ_OP_READ,
				.flags = TRACE_F_SENDFILE,
				.time_ns = trace_now(),
				.seq = r->tr.seq,
				.offset = m->file_offset,
				.size = t0 ? sent : (uint32_t)m->length,
				.obj = m->src->trace_id,
				.status = err };

	uint64_t now = ev.time_ns;

	if (t0)
		ev.lat_ns = now - t0;
	/* It makes ev.time_ns relative to the trace's start: not a t0. */
	if (ev.obj)
		trace_emit(&ev);
	return now;
}

/* Send up to @len zero bytes; as send(2) (-1 and errno), EINTR retried. */
static ssize_t conn_send_zeros(struct conn *c, size_t len)
{
	static const uint8_t zeros[4096];
	struct iovec iov[16];
	struct msghdr msg = { .msg_iov = iov };
	ssize_t n;

	while (msg.msg_iovlen < 16 && len) {
		size_t k = len < sizeof(zeros) ? len : sizeof(zeros);

		iov[msg.msg_iovlen++] = (struct iovec){ (void *)zeros, k };
		len -= k;
	}
	do
		n = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	return n;
}

/*
 * The data of @r's current iovec cannot be sent from @done bytes on
 * (@err): with structured replies, the rest of its chunk goes as zeros
 * and an error chunk ends the reply (reply_read_failed); a simple reply
 * has no way to say it, so the connection goes (as the spec says).
 * Returns what conn_sendfile returns.
 */
static ssize_t conn_sendfile_failed(struct conn *c, struct nbd_req *r,
				    size_t done, size_t left, int err,
				    const char *what)
{
	uint64_t off = r->fpos[r->iov_idx] + done;
	ssize_t n;

	if (!reply_read_failed(r, off, err)) {
		nbdl_log(NBDL_ERROR,
			 "read reply at offset %" PRIu64
			 ": %s: %s; closing the connection",
			 off, what, strerror(-err));
		return done ? (ssize_t)done : err;
	}
	nbdl_log(NBDL_ERROR,
		 "read reply at offset %" PRIu64
		 ": %s: %s; the client gets an error for it",
		 off, what, strerror(-err));
	n = conn_send_zeros(c, left - done);
	if (n < 0)
		return done ? (ssize_t)done : -errno;
	return (ssize_t)(done + (size_t)n);
}

/* sendfile failed because of the socket, not of the member's data? */
static bool sendfile_sock_errno(int e)
{
	switch (e) {
	case EAGAIN:
	case EPIPE:
	case ECONNRESET:
	case ECONNABORTED:
	case ENOTCONN:
	case ETIMEDOUT:
	case EHOSTUNREACH:
	case ENETUNREACH:
		return true;
	default:
		return false;
	}
}

/*
 * The next iovec of @r, the head of the queue, is data still in the
 * volume's files (a sendfile read, reply.c): send up to @budget bytes of
 * it from there, piece by piece as the volume maps it (or zeros, once that
 * failed).  Returns the bytes sent, or -errno (-EAGAIN: the socket is
 * full) if none were.
 */
static ssize_t conn_sendfile(struct conn *c, struct nbd_req *r, size_t budget)
{
	size_t left = r->iov[r->iov_idx].iov_len, done = 0;

	if (left > budget)
		left = budget;
	if (r->pad) {
		ssize_t n = conn_send_zeros(c, left);

		return n < 0 ? -errno : n;
	}
	while (done < left) {
		struct target_iomap m;
		uint64_t t0 = 0;
		ssize_t n;
		off_t off;
		int err;

		err = target_iomap(c->exp->vol, r->fpos[r->iov_idx] + done,
				   left - done, 0, &m);
		if (err)
			return conn_sendfile_failed(c, r, done, left, err,
						    "cannot map the volume");
		off = (off_t)m.file_offset;
		if (r->tr.seq)
			t0 = sendfile_trace(r, &m, 0, 0, 0);
		n = sendfile(c->fd, m.fd, &off, m.length);
		if (r->tr.seq) {
			int e = errno; /* for the checks below */

			sendfile_trace(r, &m, t0, n > 0 ? (uint32_t)n : 0,
				       n < 0 && e != EAGAIN ? -e : 0);
			errno = e;
		}
		/*
		 * A member shrunk behind our back: a mirror maps the data
		 * again from another copy; else it reads as zeros past its
		 * end.
		 */
		if (n == 0) {
			err = target_iomap_short(c->exp->vol, m.src,
						 r->fpos[r->iov_idx] + done);
			if (!err)
				continue;
			if (err != -EOPNOTSUPP)
				return conn_sendfile_failed(
					c, r, done, left, err,
					"no copy left to send");
		}
		if (n == 0)
			n = conn_send_zeros(c, m.length);
		if (n < 0) {
			int e = errno;

			if (e == EINTR)
				continue;
			if (!sendfile_sock_errno(e))
				return conn_sendfile_failed(c, r, done, left,
							    -e, "sendfile");
			return done ? (ssize_t)done : -e;
		}
		done += (size_t)n;
		if ((size_t)n < m.length)
			break; /* the socket is full */
	}
	return (ssize_t)done;
}

/*
 * The first @sent bytes of the queue left: advance the iovecs and free
 * the requests whose replies are complete.
 */
static void conn_sent(struct conn *c, size_t sent)
{
	struct nbd_req *r;

	/* Empty iovecs are passed over even when nothing more went. */
	while ((r = c->oq_head)) {
		struct iovec *v = &r->iov[r->iov_idx];

		if (r->iov_idx < r->niov && sent < v->iov_len) {
			if (!sent)
				return;
			if (v->iov_base)
				v->iov_base = (uint8_t *)v->iov_base + sent;
			else
				r->fpos[r->iov_idx] += sent;
			v->iov_len -= sent;
			return;
		}
		if (r->iov_idx < r->niov)
			sent -= v->iov_len;
		if (r->iov_idx >= r->niov || ++r->iov_idx == r->niov) {
			c->oq_head = r->next;
			if (!c->oq_head)
				c->oq_tail = &c->oq_head;
			req_free(r, true);
		}
	}
}

/*
 * Gather the queue's iovecs from the head, up to @budget bytes and up to
 * the first that stands for file data (*@file_next then).
 */
static unsigned int conn_gather(struct conn *c, struct iovec *iov,
				size_t budget, bool *file_next)
{
	unsigned int n = 0;
	size_t want = 0;

	*file_next = false;
	for (struct nbd_req *r = c->oq_head; r; r = r->next)
		for (unsigned int i = r->iov_idx; i < r->niov; i++) {
			if (n == SRV_SEND_IOVS || want == budget)
				return n;
			if (!r->iov[i].iov_base) {
				*file_next = true;
				return n;
			}
			iov[n] = r->iov[i];
			if (iov[n].iov_len > budget - want)
				iov[n].iov_len = budget - want;
			want += iov[n++].iov_len;
		}
	return n;
}

/*
 * Copy the head of the queue into the stage, up to a record: replies of a
 * few KiB share records and send calls.
 */
static void tls_stage_fill(struct conn *c)
{
	while (c->oq_head && c->tls_stage_len < TLS_RECORD_BYTES) {
		struct nbd_req *r = c->oq_head;
		const struct iovec *v = &r->iov[r->iov_idx];
		size_t n = TLS_RECORD_BYTES - c->tls_stage_len;

		if (n > v->iov_len)
			n = v->iov_len;
		memcpy(c->tls_stage + c->tls_stage_len, v->iov_base, n);
		c->tls_stage_len += n;
		conn_sent(c, n);
	}
}

/*
 * conn_send under TLS: one record per call, from the stage or, for a
 * record's worth of one reply's data, straight from its buffer.  After
 * EAGAIN the same call must come again: the stage stays as it is, and the
 * head of the queue does not move until a record from it went.
 */
static void conn_send_tls(struct conn *c)
{
	size_t budget = SRV_TURN_SEND_BYTES;

	for (;;) {
		const struct iovec *v = NULL;
		ssize_t n;

		if (!c->tls_stage_len) {
			if (!c->oq_head)
				break;
			if (!budget) {
				ev_io_start(c->w->loop, &c->wio);
				return;
			}
			v = &c->oq_head->iov[c->oq_head->iov_idx];
			if (v->iov_len < TLS_RECORD_BYTES) {
				tls_stage_fill(c);
				v = NULL;
			}
		}
		if (v)
			n = tls_send(c->tls, v->iov_base, TLS_RECORD_BYTES);
		else
			n = tls_send(c->tls, c->tls_stage, c->tls_stage_len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				ev_io_start(c->w->loop, &c->wio);
				return;
			}
			conn_fail(c);
			return;
		}
		conn_moved(c, (size_t)n);
		budget -= (size_t)n < budget ? (size_t)n : budget;
		if (v) {
			conn_sent(c, (size_t)n);
		} else {
			/* A client's smaller record size limit sends less. */
			c->tls_stage_len -= (size_t)n;
			memmove(c->tls_stage, c->tls_stage + n, c->tls_stage_len);
		}
	}
	ev_io_stop(c->w->loop, &c->wio);
	conn_resume(c);
	conn_maybe_close(c);
}

/*
 * Send queued replies, at most a turn's budget: memory in one sendmsg for
 * as many iovecs as fit, file data (sendfile reads) by conn_sendfile.
 */
static void conn_send(struct conn *c)
{
	struct iovec iov[SRV_SEND_IOVS];
	size_t budget = SRV_TURN_SEND_BYTES;

	if (c->olen)
		return; /* handshake bytes first; the write watcher is on */
	if (c->tls_up) {
		conn_send_tls(c);
		return;
	}
	while (c->oq_head) {
		struct nbd_req *head = c->oq_head;
		struct msghdr msg = { .msg_iov = iov };
		bool file_next;
		ssize_t sent;

		if (!budget) {
			/* The others' turn: the write watcher fires next. */
			ev_io_start(c->w->loop, &c->wio);
			return;
		}
		if (!head->iov[head->iov_idx].iov_base) {
			sent = conn_sendfile(c, head, budget);
		} else {
			/* At most the budget: the kernel would take up to sndbuf. */
			msg.msg_iovlen = conn_gather(c, iov, budget, &file_next);
			sent = sendmsg(c->fd, &msg,
				       MSG_NOSIGNAL | (file_next ? MSG_MORE : 0));
			if (sent < 0)
				sent = -errno;
		}
		if (sent < 0) {
			if (sent == -EINTR)
				continue;
			if (sent == -EAGAIN) {
				ev_io_start(c->w->loop, &c->wio);
				return;
			}
			conn_fail(c);
			return;
		}
		conn_moved(c, (size_t)sent);
		budget -= (size_t)sent < budget ? (size_t)sent : budget;
		conn_sent(c, (size_t)sent);
	}
	ev_io_stop(c->w->loop, &c->wio);
	conn_resume(c);
	conn_maybe_close(c);
}

static void conn_write_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct conn *c = container_of(w, struct conn, wio);

	if (c->state == CS_TLS_HANDSHAKE) {
		conn_tls_step(c);
		return;
	}
	if (c->olen && (!obuf_send(c) || c->olen))
		return; /* dead, or still waiting for room */
	if (c->state == CS_TRANSMISSION)
		conn_send(c);
	/* obuf_send started reading again: the loop calls conn_read_cb. */
}

/*
 * Connections that spent their turn (conn_turn_spent): parse what they
 * left, once a loop iteration, before the replies go out.
 */
void conn_resume_yielded(struct worker *w)
{
	struct conn *list = w->yielded;
	unsigned int turn = ev_iteration(w->loop);

	if (!list || w->yield_turn == turn)
		return;
	w->yield_turn = turn;
	w->yielded = NULL;
	while (list) {
		struct conn *c = list;

		list = c->yield_next;
		c->yielded = false;
		c->turn_cost = 0;
		if (!c->paused && !c->draining && !c->dead)
			conn_take_pend(c); /* else conn_resume, or closing */
	}
	if (!w->yielded)
		ev_idle_stop(w->loop, &w->yield_idle);
}

/*
 * Buffer room came back: let the connections queued for it in, in order,
 * while their requests fit (inflight_next counts the bytes).  Each starts
 * its held request and parses on; one that meets the queue again goes to
 * its end, so a connection gets a request at a time while others wait.
 */
void conn_resume_waiting(struct worker *w)
{
	struct inflight_waiter *wt;

	while ((wt = inflight_next(&w->lanes[1])) ||
	       (wt = inflight_next(&w->lanes[0]))) {
		struct conn *c = container_of(wt, struct conn, bwait);
		struct nbd_req *r = c->held;

		c->held = NULL;
		c->paused = false;
		c->turn_cost = 0;
		/* Watching for a hang-up alone; reading resumes below. */
		ev_io_stop(w->loop, &c->rio);
		if (req_take_buf(r)) {
			conn_hangup(c); /* a write's payload has nowhere to go */
			continue;
		}
		if (tx_start(c, r))
			conn_take_pend(c);
		/* else paused, yielded or closing: as after any request */
	}
}

/*
 * The stall timer, every SRV_STALL_TICK_S while requests wait for buffer
 * room: close the connections whose clients hold buffers and made no
 * progress for SRV_STALL_S (inflight_stalled), so that a few clients that
 * stop reading replies, or trickle payloads, cannot hold the worker's
 * share while others wait.  Stops once nobody waits.
 */
void conn_evict_stalled(struct worker *w)
{
	ev_tstamp now = ev_now(w->loop);
	struct conn *c;

	if (!worker_buf_waiting(w)) {
		ev_timer_stop(w->loop, &w->stall);
		return;
	}
	for (c = w->conns; c; c = c->next) {
		/* Held with bytes unread: no watcher sees a hang-up. */
		if (c->held && !ev_is_active(&c->rio) && conn_held_hangup(c))
			continue;
		if (c->dead || !inflight_stalled(c->inflight_bytes,
						 c->oq_head || c->rx,
						 now - c->progress_at))
			continue;
		nbdl_log(NBDL_ERROR,
			 "connection %" PRIu64 " (%s): closed: it held %zu KiB "
			 "of request buffers and its client moved less than "
			 "%" PRIu64 " bytes in %.0f s while other requests "
			 "waited for buffer room (--inflight-memory)",
			 c->id, c->peer, c->inflight_bytes >> 10,
			 inflight_progress_bytes(c->inflight_bytes),
			 now - c->progress_at);
		__atomic_store_n(&w->evictions, w->evictions + 1,
				 __ATOMIC_RELAXED);
		conn_fail(c); /* freed later, by conn_send_dirty */
	}
}

void conn_send_dirty(struct worker *w)
{
	while (w->dirty) {
		struct conn *c = w->dirty;

		w->dirty = c->dirty_next;
		c->dirty = false;
		/* Bios that end after the socket died still queue replies. */
		if (c->dead)
			conn_drop_replies(c);
		if (conn_closeable(c))
			conn_free(c);
		/* A reply waiting behind EAGAIN goes when the socket says so. */
		else if (!c->dead && !ev_is_active(&c->wio))
			conn_send(c);
	}
}

/* ---- shutdown ---- */

void conn_stop_all(struct worker *w)
{
	struct conn *c, *next;

	for (c = w->conns; c; c = next) {
		next = c->next;
		/* Stop taking requests; answer every one already read. */
		if (c->state == CS_TRANSMISSION) {
			conn_stop(c);
		} else if (!c->dead) {
			/*
			 * Still negotiating: its options are now refused
			 * with NBD_REP_ERR_SHUTDOWN (handshake.c), which
			 * tells a client to abort; one that does not, or
			 * sends nothing, is cut off soon after.
			 */
			ev_timer_stop(w->loop, &c->hs_timer);
			ev_timer_set(&c->hs_timer, SRV_SHUTDOWN_OPTS_S, 0.);
			ev_timer_start(w->loop, &c->hs_timer);
		}
	}
}

void conn_close_all(struct worker *w)
{
	struct conn *c, *next;

	for (c = w->conns; c; c = next) {
		next = c->next;
		if (!c->dead)
			conn_cut(c);
	}
}
