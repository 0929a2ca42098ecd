// SPDX-License-Identifier: MIT
/*
 * conn.c - one NBD connection on a worker's loop: fixed-newstyle handshake,
 * then transmission, where each request becomes a bio and each completion
 * queues its reply.
 *
 * Reading: the handshake reads exactly what each step needs, so requests a
 * client pipelines after NBD_OPT_GO stay in the socket.  In transmission,
 * the worker's shared buffer takes a large read that is parsed at once;
 * payloads of writes are copied out of it, or for large ones received
 * straight into the request's buffer.  Bytes that cannot be parsed yet
 * (the connection hit its in-flight limit) move to a per-connection
 * buffer, so a paused client costs at most one read's worth of memory.
 *
 * Writing: replies are header + data iovecs pointing at the request's own
 * buffer; all replies a loop iteration produced for a connection leave in
 * one sendmsg.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server.h"

/* ---- byte order ---- */

static inline void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static inline void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)(v >> 16));
	put16(p + 2, (uint16_t)v);
}

static inline void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)(v >> 32));
	put32(p + 4, (uint32_t)v);
}

static inline uint16_t get16(const uint8_t *p)
{
	return (uint16_t)((p[0] << 8) | p[1]);
}

static inline uint32_t get32(const uint8_t *p)
{
	return ((uint32_t)get16(p) << 16) | get16(p + 2);
}

static inline uint64_t get64(const uint8_t *p)
{
	return ((uint64_t)get32(p) << 32) | get32(p + 4);
}

/* ---- structures ---- */

enum conn_state {
	CS_CLIENT_FLAGS, /* 4 bytes of client flags */
	CS_OPT_HDR, /* 16-byte option header */
	CS_OPT_DATA, /* option payload */
	CS_TRANSMISSION,
};

/* Reply header space: a structured read has up to SRV_READ_CHUNKS chunks. */
#define REQ_HDR_BYTES (SRV_READ_CHUNKS * (NBD_CHUNK_HDR_BYTES + 12) + 32)
#define REQ_IOVS (2 * SRV_READ_CHUNKS + 2)

struct nbd_req {
	struct nbd_req *next;
	struct conn *c;
	uint64_t cookie;
	uint64_t offset;
	uint32_t len;
	uint16_t type;
	uint16_t flags;
	uint32_t err; /* NBD error value, 0 = success */
	void *buf; /* payload, from the worker's buffer cache */
	unsigned int buf_class;
	uint32_t have; /* payload bytes received so far */
	struct bio_extents ext;
	uint8_t *desc; /* block status payload (malloc) */
	/* reply, as sent */
	unsigned int niov, iov_idx;
	struct iovec iov[REQ_IOVS];
	uint8_t hdr[REQ_HDR_BYTES];
};

struct conn {
	struct worker *w;
	struct conn *next, *prev; /* worker's list */
	struct conn *dirty_next;
	bool dirty;
	int fd;
	ev_io rio, wio;
	enum conn_state state;

	/* handshake */
	uint8_t small[NBD_OPT_HDR_BYTES];
	uint8_t *optdata;
	uint32_t need, have; /* bytes wanted / read for the current step */
	uint32_t opt, optlen;
	unsigned int nr_opts;
	bool no_zeroes;
	bool structured;
	const struct export *meta_exp; /* export SET_META_CONTEXT named */
	bool meta_alloc; /* base:allocation selected */
	uint8_t *obuf; /* handshake output */
	size_t olen, ooff, ocap;
	bool close_after_send;

	/* transmission */
	const struct export *exp;
	uint16_t tflags;
	uint8_t hdr[NBD_REQUEST_BYTES];
	unsigned int hdr_have;
	struct nbd_req *rx; /* receiving a write payload */
	bool big_writes; /* last request was a big write: read headers alone */
	uint8_t *pend; /* unparsed bytes while paused */
	size_t pend_len, pend_off;
	unsigned int inflight;
	size_t inflight_bytes;
	bool paused; /* not reading: limit reached */
	bool draining; /* DISC, EOF or shutdown: finish, then close */
	bool dead; /* socket failed: never write again */
	struct nbd_req *oq_head, **oq_tail;
};

static void conn_read_cb(struct ev_loop *loop, ev_io *w, int revents);
static void conn_write_cb(struct ev_loop *loop, ev_io *w, int revents);
static void conn_maybe_close(struct conn *c);
static void conn_send(struct conn *c);
static void tx_parse(struct conn *c, const uint8_t *p, size_t n);

/* ---- buffers and requests ---- */

static unsigned int buf_class_of(uint32_t len)
{
	unsigned int shift = BUF_MIN_SHIFT;

	while ((1u << shift) < len)
		shift++;
	return shift - BUF_MIN_SHIFT;
}

static void *buf_get(struct worker *w, uint32_t len, unsigned int *cls)
{
	unsigned int k = buf_class_of(len);
	void *p = w->bufs.free[k];

	*cls = k;
	if (p) {
		w->bufs.free[k] = *(void **)p;
		w->bufs.nr[k]--;
		return p;
	}
	if (posix_memalign(&p, 4096, (size_t)1 << (k + BUF_MIN_SHIFT)))
		return NULL;
	return p;
}

static void buf_put(struct worker *w, void *p, unsigned int k)
{
	/* Keep plenty of small buffers, a few big ones. */
	unsigned int keep = k <= 6 ? 64 : (k <= 10 ? 8 : 2);

	if (w->bufs.nr[k] >= keep) {
		free(p);
		return;
	}
	*(void **)p = w->bufs.free[k];
	w->bufs.free[k] = p;
	w->bufs.nr[k]++;
}

static struct nbd_req *req_get(struct conn *c)
{
	struct worker *w = c->w;
	struct nbd_req *r = w->free_reqs;

	if (r)
		w->free_reqs = r->next;
	else if (!(r = malloc(sizeof(*r))))
		return NULL;
	r->next = NULL;
	r->c = c;
	r->err = 0;
	r->buf = NULL;
	r->have = 0;
	r->desc = NULL;
	r->ext = (struct bio_extents){ 0 };
	r->niov = r->iov_idx = 0;
	c->inflight++;
	return r;
}

static void req_free(struct nbd_req *r)
{
	struct conn *c = r->c;
	struct worker *w = c->w;

	if (r->buf) {
		buf_put(w, r->buf, r->buf_class);
		c->inflight_bytes -= (size_t)1 << (r->buf_class + BUF_MIN_SHIFT);
	}
	free(r->desc);
	bio_extents_free(&r->ext);
	c->inflight--;
	r->next = w->free_reqs;
	w->free_reqs = r;
}

static int req_alloc_buf(struct nbd_req *r, uint32_t len)
{
	struct conn *c = r->c;

	r->buf = buf_get(c->w, len, &r->buf_class);
	if (!r->buf)
		return -ENOMEM;
	c->inflight_bytes += (size_t)1 << (r->buf_class + BUF_MIN_SHIFT);
	return 0;
}

/* ---- connection lifetime ---- */

static void conn_mark_dirty(struct conn *c)
{
	if (c->dirty)
		return;
	c->dirty = true;
	c->dirty_next = c->w->dirty;
	c->w->dirty = c;
}

static bool conn_closeable(const struct conn *c)
{
	return c->draining && !c->inflight && !c->oq_head && !c->olen;
}

/* Only from worker_send_dirty: nothing else holds a pointer to @c then. */
static void conn_free(struct conn *c)
{
	struct worker *w = c->w;

	ev_io_stop(w->loop, &c->rio);
	ev_io_stop(w->loop, &c->wio);
	if (c->prev)
		c->prev->next = c->next;
	else
		w->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	w->nr_conns--;
	if (c->rx)
		req_free(c->rx);
	close(c->fd);
	free(c->optdata);
	free(c->obuf);
	free(c->pend);
	free(c);
	if (w->stopping && !w->conns)
		ev_break(w->loop, EVBREAK_ONE);
}

/* The socket is unusable: drop queued replies; bios in flight finish. */
static void conn_fail(struct conn *c)
{
	struct nbd_req *r;

	c->dead = true;
	c->draining = true;
	ev_io_stop(c->w->loop, &c->rio);
	ev_io_stop(c->w->loop, &c->wio);
	shutdown(c->fd, SHUT_RDWR);
	/*
	 * Unsent handshake bytes can never go either; left counted, they
	 * would keep conn_closeable() false forever (e.g. a client that sends
	 * NBD_OPT_ABORT and closes without reading the ACK: the send fails
	 * with EPIPE), leaking the connection and blocking shutdown.
	 */
	c->olen = c->ooff = 0;
	while ((r = c->oq_head)) {
		c->oq_head = r->next;
		req_free(r);
	}
	c->oq_tail = &c->oq_head;
	if (c->rx) {
		req_free(c->rx);
		c->rx = NULL;
	}
	conn_maybe_close(c);
}

/*
 * Closing is deferred to the end of the loop iteration (worker_send_dirty),
 * so no caller up the stack is left holding a freed connection.
 */
static void conn_maybe_close(struct conn *c)
{
	if (conn_closeable(c))
		conn_mark_dirty(c);
}

void conn_accept(struct worker *w, int fd)
{
	struct conn *c = calloc(1, sizeof(*c));
	uint8_t greet[18];

	if (!c) {
		close(fd);
		return;
	}
	c->w = w;
	c->fd = fd;
	c->oq_tail = &c->oq_head;
	c->state = CS_CLIENT_FLAGS;
	c->need = 4;
	ev_io_init(&c->rio, conn_read_cb, fd, EV_READ);
	ev_io_init(&c->wio, conn_write_cb, fd, EV_WRITE);
	c->next = w->conns;
	if (w->conns)
		w->conns->prev = c;
	w->conns = c;
	w->nr_conns++;

	put64(greet, NBD_MAGIC);
	put64(greet + 8, NBD_IHAVEOPT);
	put16(greet + 16, NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
	if (send(fd, greet, sizeof(greet), MSG_NOSIGNAL) != sizeof(greet)) {
		/* A fresh socket always takes 18 bytes; anything else is dead. */
		conn_fail(c);
		return;
	}
	ev_io_start(w->loop, &c->rio);
}

/* ---- handshake output ---- */

static int obuf_add(struct conn *c, const void *p, size_t n)
{
	/*
	 * Replies without data (ACK) pass p == NULL: memcpy with a NULL
	 * pointer is undefined even for 0 bytes, and UBSan stops the server.
	 */
	if (!n)
		return 0;
	if (c->olen + n > c->ocap) {
		size_t cap = c->ocap ? c->ocap * 2 : 256;
		uint8_t *b;

		while (cap < c->olen + n)
			cap *= 2;
		b = realloc(c->obuf, cap);
		if (!b)
			return -ENOMEM;
		c->obuf = b;
		c->ocap = cap;
	}
	memcpy(c->obuf + c->olen, p, n);
	c->olen += n;
	return 0;
}

static int opt_reply_hdr(struct conn *c, uint32_t type, uint32_t len)
{
	uint8_t h[20];

	put64(h, NBD_REP_MAGIC);
	put32(h + 8, c->opt);
	put32(h + 12, type);
	put32(h + 16, len);
	return obuf_add(c, h, sizeof(h));
}

static int opt_reply(struct conn *c, uint32_t type, const void *data,
		     uint32_t len)
{
	int r = opt_reply_hdr(c, type, len);

	return r ? r : obuf_add(c, data, len);
}

static int opt_error(struct conn *c, uint32_t type, const char *msg)
{
	return opt_reply(c, type, msg, (uint32_t)strlen(msg));
}

/* Send what the handshake queued; returns false if the socket died. */
static bool obuf_send(struct conn *c)
{
	while (c->ooff < c->olen) {
		ssize_t n = send(c->fd, c->obuf + c->ooff, c->olen - c->ooff,
				 MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
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
		c->draining = true;
		conn_fail(c);
		return false;
	}
	return true;
}

/* ---- handshake ---- */

static const struct export *find_export(struct conn *c, const uint8_t *name,
					uint32_t len)
{
	struct server *srv = c->w->srv;

	if (len == 0)
		return &srv->exports[0];
	for (unsigned int i = 0; i < srv->nr_exports; i++) {
		const struct export *e = &srv->exports[i];

		if (strlen(e->name) == len && !memcmp(e->name, name, len))
			return e;
	}
	return NULL;
}

static uint16_t export_tflags(const struct conn *c, const struct export *e)
{
	uint16_t f = NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH |
		     NBD_FLAG_SEND_FUA | NBD_FLAG_CAN_MULTI_CONN |
		     NBD_FLAG_SEND_CACHE;

	if (e->readonly)
		f |= NBD_FLAG_READ_ONLY;
	else
		f |= NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES |
		     NBD_FLAG_SEND_FAST_ZERO;
	/* DF only means something with structured replies. */
	if (c->structured)
		f |= NBD_FLAG_SEND_DF;
	return f;
}

static void enter_transmission(struct conn *c, const struct export *e)
{
	c->exp = e;
	c->tflags = export_tflags(c, e);
	if (c->meta_exp != e)
		c->meta_alloc = false;
	c->state = CS_TRANSMISSION;
	c->hdr_have = 0;
}

static int opt_export_name(struct conn *c)
{
	const struct export *e;
	uint8_t reply[10 + 124];
	size_t n = c->no_zeroes ? 10 : sizeof(reply);

	e = c->optlen <= NBD_MAX_STRING ?
		    find_export(c, c->optdata, c->optlen) :
		    NULL;
	if (!e) {
		/* The option has no error reply: the spec says hang up. */
		c->close_after_send = true;
		return 0;
	}
	memset(reply, 0, sizeof(reply));
	put64(reply, e->size_bytes);
	enter_transmission(c, e);
	put16(reply + 8, c->tflags);
	return obuf_add(c, reply, n);
}

static int opt_info_go(struct conn *c)
{
	const uint8_t *d = c->optdata;
	uint32_t namelen, len = c->optlen;
	uint16_t nreq;
	bool want_name = false, want_desc = false;
	const struct export *e;
	uint8_t info[14];
	int r;

	if (len < 6)
		return opt_error(c, NBD_REP_ERR_INVALID, "option too short");
	namelen = get32(d);
	if (namelen > len - 6)
		return opt_error(c, NBD_REP_ERR_INVALID, "bad name length");
	nreq = get16(d + 4 + namelen);
	if ((uint64_t)namelen + 6 + 2u * nreq != len)
		return opt_error(c, NBD_REP_ERR_INVALID,
				 "option length does not match its contents");
	if (namelen > NBD_MAX_STRING)
		return opt_error(c, NBD_REP_ERR_INVALID, "export name too long");
	for (unsigned int i = 0; i < nreq; i++) {
		uint16_t t = get16(d + 6 + namelen + 2 * i);

		if (t == NBD_INFO_NAME)
			want_name = true;
		else if (t == NBD_INFO_DESCRIPTION)
			want_desc = true;
	}
	e = find_export(c, d + 4, namelen);
	if (!e)
		return opt_error(c, NBD_REP_ERR_UNKNOWN, "unknown export");

	put16(info, NBD_INFO_EXPORT);
	put64(info + 2, e->size_bytes);
	put16(info + 10, export_tflags(c, e));
	r = opt_reply(c, NBD_REP_INFO, info, 12);
	if (!r && want_name) {
		uint32_t n = (uint32_t)strlen(e->name);

		r = opt_reply_hdr(c, NBD_REP_INFO, 2 + n);
		put16(info, NBD_INFO_NAME);
		r = r ?: obuf_add(c, info, 2);
		r = r ?: obuf_add(c, e->name, n);
	}
	if (!r && want_desc && e->description) {
		uint32_t n = (uint32_t)strlen(e->description);

		r = opt_reply_hdr(c, NBD_REP_INFO, 2 + n);
		put16(info, NBD_INFO_DESCRIPTION);
		r = r ?: obuf_add(c, info, 2);
		r = r ?: obuf_add(c, e->description, n);
	}
	if (!r) {
		/* Always sent: clients that did not ask may still use it. */
		put16(info, NBD_INFO_BLOCK_SIZE);
		put32(info + 2, SRV_MIN_BLOCK);
		put32(info + 6, SRV_PREF_BLOCK);
		put32(info + 10, SRV_MAX_PAYLOAD);
		r = opt_reply(c, NBD_REP_INFO, info, 14);
	}
	r = r ?: opt_reply(c, NBD_REP_ACK, NULL, 0);
	if (!r && c->opt == NBD_OPT_GO)
		enter_transmission(c, e);
	return r;
}

static int opt_list(struct conn *c)
{
	struct server *srv = c->w->srv;
	uint8_t len[4];
	int r = 0;

	if (c->optlen)
		return opt_error(c, NBD_REP_ERR_INVALID,
				 "NBD_OPT_LIST takes no data");
	for (unsigned int i = 0; i < srv->nr_exports && !r; i++) {
		const struct export *e = &srv->exports[i];
		uint32_t n = (uint32_t)strlen(e->name);
		uint32_t dn = e->description ? (uint32_t)strlen(e->description) :
					       0;

		put32(len, n);
		r = opt_reply_hdr(c, NBD_REP_SERVER, 4 + n + dn);
		r = r ?: obuf_add(c, len, 4);
		r = r ?: obuf_add(c, e->name, n);
		if (dn)
			r = r ?: obuf_add(c, e->description, dn);
	}
	return r ?: opt_reply(c, NBD_REP_ACK, NULL, 0);
}

static int meta_reply(struct conn *c, uint32_t id)
{
	static const char name[] = "base:allocation";
	uint8_t idb[4];
	int r;

	put32(idb, id);
	r = opt_reply_hdr(c, NBD_REP_META_CONTEXT, 4 + sizeof(name) - 1);
	r = r ?: obuf_add(c, idb, 4);
	return r ?: obuf_add(c, name, sizeof(name) - 1);
}

static int opt_meta_context(struct conn *c)
{
	const uint8_t *d = c->optdata, *end = c->optdata + c->optlen, *p;
	bool set = c->opt == NBD_OPT_SET_META_CONTEXT;
	bool match = false;
	const struct export *e;
	uint32_t namelen, nq;

	if (set) {
		/* Replaces earlier selections even when it fails. */
		c->meta_alloc = false;
		c->meta_exp = NULL;
	}
	if (!c->structured)
		return opt_error(c, NBD_REP_ERR_INVALID,
				 "negotiate structured replies first");
	if (c->optlen < 8)
		return opt_error(c, NBD_REP_ERR_INVALID, "option too short");
	namelen = get32(d);
	if (namelen > c->optlen - 8)
		return opt_error(c, NBD_REP_ERR_INVALID, "bad name length");
	e = namelen <= NBD_MAX_STRING ? find_export(c, d + 4, namelen) : NULL;
	d += 4 + namelen;
	nq = get32(d);
	d += 4;
	/* Check the whole query list before answering any of it. */
	p = d;
	for (uint32_t i = 0; i < nq; i++) {
		uint32_t ql;

		if (end - p < 4 || get32(p) > (size_t)(end - p) - 4)
			return opt_error(c, NBD_REP_ERR_INVALID,
					 "query list does not match its length");
		ql = get32(p);
		if (!memchr(p + 4, ':', ql))
			return opt_error(c, NBD_REP_ERR_INVALID,
					 "query without a namespace");
		p += 4 + ql;
	}
	if (p != end)
		return opt_error(c, NBD_REP_ERR_INVALID,
				 "query list does not match its length");
	if (!e)
		return opt_error(c, NBD_REP_ERR_UNKNOWN, "unknown export");

	if (!nq) {
		/* LIST with no query lists everything; SET selects nothing. */
		match = !set;
	}
	for (uint32_t i = 0; i < nq; i++) {
		uint32_t ql = get32(d);
		const char *q = (const char *)d + 4;

		if (ql == 15 && !memcmp(q, "base:allocation", 15))
			match = true;
		else if (!set && ql == 5 && !memcmp(q, "base:", 5))
			match = true;
		d += 4 + ql;
	}
	if (match) {
		int r = meta_reply(c, set ? 1 : 0);

		if (r)
			return r;
	}
	if (set) {
		c->meta_exp = e;
		c->meta_alloc = match;
	}
	return opt_reply(c, NBD_REP_ACK, NULL, 0);
}

static int handle_option(struct conn *c)
{
	if (c->w->stopping)
		return opt_error(c, NBD_REP_ERR_SHUTDOWN,
				 "server is shutting down");
	switch (c->opt) {
	case NBD_OPT_EXPORT_NAME:
		return opt_export_name(c);
	case NBD_OPT_ABORT:
		c->close_after_send = true;
		return opt_reply(c, NBD_REP_ACK, NULL, 0);
	case NBD_OPT_LIST:
		return opt_list(c);
	case NBD_OPT_INFO:
	case NBD_OPT_GO:
		return opt_info_go(c);
	case NBD_OPT_STRUCTURED_REPLY:
		if (c->optlen)
			return opt_error(c, NBD_REP_ERR_INVALID,
					 "NBD_OPT_STRUCTURED_REPLY takes no data");
		c->structured = true;
		return opt_reply(c, NBD_REP_ACK, NULL, 0);
	case NBD_OPT_LIST_META_CONTEXT:
	case NBD_OPT_SET_META_CONTEXT:
		return opt_meta_context(c);
	default:
		return opt_error(c, NBD_REP_ERR_UNSUP, "option not supported");
	}
}

/* One handshake step finished reading what it needed. */
static bool handshake_step(struct conn *c)
{
	uint32_t cflags;

	switch (c->state) {
	case CS_CLIENT_FLAGS:
		cflags = get32(c->small);
		if (!(cflags & NBD_FLAG_C_FIXED_NEWSTYLE) ||
		    (cflags & ~(NBD_FLAG_C_FIXED_NEWSTYLE |
				NBD_FLAG_C_NO_ZEROES))) {
			/* Old-style clients and unknown flags: hang up. */
			conn_fail(c);
			return false;
		}
		c->no_zeroes = cflags & NBD_FLAG_C_NO_ZEROES;
		c->state = CS_OPT_HDR;
		c->need = NBD_OPT_HDR_BYTES;
		return true;
	case CS_OPT_HDR:
		if (get64(c->small) != NBD_IHAVEOPT ||
		    ++c->nr_opts > SRV_MAX_OPTIONS) {
			conn_fail(c);
			return false;
		}
		c->opt = get32(c->small + 8);
		c->optlen = get32(c->small + 12);
		if (c->optlen > SRV_MAX_OPTION_BYTES) {
			conn_fail(c); /* absurd: not worth reading */
			return false;
		}
		free(c->optdata);
		c->optdata = c->optlen ? malloc(c->optlen) : NULL;
		if (c->optlen && !c->optdata) {
			conn_fail(c);
			return false;
		}
		c->state = CS_OPT_DATA;
		c->need = c->optlen;
		if (c->need)
			return true;
		/* No data to read: handle it now. */
		__attribute__((fallthrough));
	case CS_OPT_DATA:
		c->state = CS_OPT_HDR;
		c->need = NBD_OPT_HDR_BYTES;
		if (handle_option(c)) {
			conn_fail(c);
			return false;
		}
		free(c->optdata);
		c->optdata = NULL;
		return obuf_send(c);
	default:
		return true;
	}
}

static void handshake_read(struct conn *c)
{
	while (c->state != CS_TRANSMISSION) {
		uint8_t *dst = c->state == CS_OPT_DATA ? c->optdata : c->small;
		ssize_t n = recv(c->fd, dst + c->have, c->need - c->have, 0);

		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			conn_fail(c);
			return;
		}
		if (n < 0) {
			if (errno == EAGAIN)
				return;
			continue;
		}
		c->have += (uint32_t)n;
		if (c->have < c->need)
			continue;
		c->have = 0;
		if (!handshake_step(c))
			return;
	}
}

/* ---- transmission: replies ---- */

static uint32_t errno_to_nbd(int err)
{
	switch (err) {
	case 0:
		return 0;
	case -EPERM:
	case -EROFS:
		return NBD_EPERM;
	case -ENOMEM:
		return NBD_ENOMEM;
	case -EINVAL:
		return NBD_EINVAL;
	case -ENOSPC:
	case -EDQUOT:
	case -EFBIG:
		return NBD_ENOSPC;
	case -EOVERFLOW:
		return NBD_EOVERFLOW;
	case -EOPNOTSUPP:
		return NBD_ENOTSUP;
	case -ESHUTDOWN:
		return NBD_ESHUTDOWN;
	default:
		return NBD_EIO;
	}
}

static void reply_queue(struct nbd_req *r)
{
	struct conn *c = r->c;

	if (c->dead) {
		req_free(r);
		conn_maybe_close(c);
		return;
	}
	r->next = NULL;
	*c->oq_tail = r;
	c->oq_tail = &r->next;
	conn_mark_dirty(c);
}

static void reply_simple(struct nbd_req *r, bool with_data)
{
	put32(r->hdr, NBD_SIMPLE_REPLY_MAGIC);
	put32(r->hdr + 4, r->err);
	put64(r->hdr + 8, r->cookie);
	r->iov[0] = (struct iovec){ r->hdr, NBD_SIMPLE_REPLY_BYTES };
	r->niov = 1;
	if (with_data && !r->err && r->len)
		r->iov[r->niov++] = (struct iovec){ r->buf, r->len };
}

static uint8_t *chunk_hdr(struct nbd_req *r, uint8_t *h, uint16_t flags,
			  uint16_t type, uint32_t len)
{
	put32(h, NBD_STRUCTURED_REPLY_MAGIC);
	put16(h + 4, flags);
	put16(h + 6, type);
	put64(h + 8, r->cookie);
	put32(h + 16, len);
	return h + NBD_CHUNK_HDR_BYTES;
}

static void reply_error_chunk(struct nbd_req *r)
{
	uint8_t *p = chunk_hdr(r, r->hdr, NBD_REPLY_FLAG_DONE,
			       NBD_REPLY_TYPE_ERROR, 6);

	put32(p, r->err);
	put16(p + 4, 0);
	r->iov[0] = (struct iovec){ r->hdr, NBD_CHUNK_HDR_BYTES + 6 };
	r->niov = 1;
}

static bool is_zero(const uint8_t *p, size_t n)
{
	static const uint8_t z[16];

	if (n < 16)
		return !memcmp(p, z, n);
	/* Compare the buffer with itself shifted: zero if the head is. */
	return !memcmp(p, z, 16) && !memcmp(p, p + 16, n - 16);
}

/*
 * A structured read reply: data chunks, with all-zero 4 KiB-aligned runs
 * sent as hole chunks (no payload).  DF asks for a single content chunk.
 */
static void reply_read_structured(struct nbd_req *r)
{
	struct { uint32_t off, len; bool hole; } run[SRV_READ_CHUNKS];
	const uint8_t *buf = r->buf;
	unsigned int nr = 0, i;
	uint8_t *h = r->hdr;

	if (r->len == 0) {
		chunk_hdr(r, h, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_NONE, 0);
		r->iov[0] = (struct iovec){ h, NBD_CHUNK_HDR_BYTES };
		r->niov = 1;
		return;
	}
	if (r->flags & NBD_CMD_FLAG_DF) {
		run[0] = (typeof(run[0])){ 0, r->len, is_zero(buf, r->len) };
		nr = 1;
	} else {
		for (uint32_t off = 0; off < r->len;) {
			uint32_t n = r->len - off < 4096 ? r->len - off : 4096;
			bool hole = n == 4096 && is_zero(buf + off, n);

			if (nr && run[nr - 1].hole == hole) {
				run[nr - 1].len += n;
			} else if (nr == SRV_READ_CHUNKS) {
				/* Too fragmented: one data chunk for all. */
				run[0] = (typeof(run[0])){ 0, r->len, false };
				nr = 1;
				break;
			} else {
				run[nr++] = (typeof(run[0])){ off, n, hole };
			}
			off += n;
		}
	}
	r->niov = 0;
	for (i = 0; i < nr; i++) {
		uint16_t fl = i + 1 == nr ? NBD_REPLY_FLAG_DONE : 0;
		uint8_t *p;

		if (run[i].hole) {
			p = chunk_hdr(r, h, fl, NBD_REPLY_TYPE_OFFSET_HOLE, 12);
			put64(p, r->offset + run[i].off);
			put32(p + 8, run[i].len);
			r->iov[r->niov++] = (struct iovec){ h, NBD_CHUNK_HDR_BYTES + 12 };
			h += NBD_CHUNK_HDR_BYTES + 12;
		} else {
			p = chunk_hdr(r, h, fl, NBD_REPLY_TYPE_OFFSET_DATA,
				      8 + run[i].len);
			put64(p, r->offset + run[i].off);
			r->iov[r->niov++] = (struct iovec){ h, NBD_CHUNK_HDR_BYTES + 8 };
			r->iov[r->niov++] = (struct iovec){ (uint8_t *)buf + run[i].off,
							    run[i].len };
			h += NBD_CHUNK_HDR_BYTES + 8;
		}
	}
}

static void reply_block_status(struct nbd_req *r)
{
	size_t n = r->ext.nr, i;
	uint64_t covered = 0;
	uint8_t *p;

	bio_extents_finish(&r->ext);
	n = r->ext.nr;
	if (n > SRV_MAX_EXTENTS)
		n = SRV_MAX_EXTENTS;
	if (r->flags & NBD_CMD_FLAG_REQ_ONE)
		n = n ? 1 : 0;
	r->desc = malloc(4 + 8 * (n ? n : 1));
	if (!r->desc || !n) {
		r->err = NBD_EIO;
		reply_error_chunk(r);
		return;
	}
	put32(r->desc, 1); /* the base:allocation context id */
	p = r->desc + 4;
	for (i = 0; i < n; i++) {
		uint64_t len = r->ext.v[i].length;

		if (covered + len > r->len)
			len = r->len - covered;
		put32(p, (uint32_t)len);
		put32(p + 4, r->ext.v[i].flags & (NBD_STATE_HOLE | NBD_STATE_ZERO));
		p += 8;
		covered += len;
	}
	chunk_hdr(r, r->hdr, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_BLOCK_STATUS,
		  (uint32_t)(4 + 8 * n));
	r->iov[0] = (struct iovec){ r->hdr, NBD_CHUNK_HDR_BYTES };
	r->iov[1] = (struct iovec){ r->desc, 4 + 8 * n };
	r->niov = 2;
}

/* Build the reply for a finished (or refused) request and queue it. */
static void req_reply(struct nbd_req *r)
{
	struct conn *c = r->c;

	if (r->type == NBD_CMD_READ) {
		if (!c->structured)
			reply_simple(r, true);
		else if (r->err)
			reply_error_chunk(r);
		else
			reply_read_structured(r);
	} else if (r->type == NBD_CMD_BLOCK_STATUS && !r->err) {
		reply_block_status(r);
	} else if (r->err && c->structured &&
		   (r->type == NBD_CMD_BLOCK_STATUS)) {
		reply_error_chunk(r);
	} else {
		reply_simple(r, false);
	}
	reply_queue(r);
}

static void req_endio(struct bio *bio)
{
	struct nbd_req *r = bio->bi_private;

	r->err = errno_to_nbd(bio->bi_status);
	bio_put(bio);
	req_reply(r);
}

/* ---- transmission: requests ---- */

static void req_submit(struct nbd_req *r)
{
	const struct export *e = r->c->exp;
	unsigned int opf;
	struct bio *bio;

	switch (r->type) {
	case NBD_CMD_READ:
		opf = REQ_OP_READ;
		break;
	case NBD_CMD_WRITE:
		opf = REQ_OP_WRITE;
		break;
	case NBD_CMD_FLUSH:
		opf = REQ_OP_FLUSH;
		break;
	case NBD_CMD_TRIM:
		opf = REQ_OP_DISCARD;
		break;
	case NBD_CMD_CACHE:
		opf = REQ_OP_CACHE;
		break;
	case NBD_CMD_WRITE_ZEROES:
		opf = REQ_OP_WRITE_ZEROES;
		if (r->flags & NBD_CMD_FLAG_NO_HOLE)
			opf |= REQ_NOUNMAP;
		if (r->flags & NBD_CMD_FLAG_FAST_ZERO)
			opf |= REQ_NOFALLBACK;
		break;
	default: /* NBD_CMD_BLOCK_STATUS */
		opf = REQ_OP_EXTENTS;
		break;
	}
	if (r->flags & NBD_CMD_FLAG_FUA)
		opf |= REQ_FUA;

	bio = bio_alloc(1, opf);
	if (!bio) {
		r->err = NBD_ENOMEM;
		req_reply(r);
		return;
	}
	if (r->type == NBD_CMD_READ || r->type == NBD_CMD_WRITE)
		bio_add_buf(bio, r->buf, r->len);
	else if (r->type != NBD_CMD_FLUSH)
		bio->bi_iter.bi_size = r->len;
	if (r->type == NBD_CMD_BLOCK_STATUS)
		bio->bi_ext = &r->ext;
	bio->bi_iter.bi_sector = r->offset >> SECTOR_SHIFT;
	bio->bi_private = r;
	bio->bi_end_io = req_endio;
	submit_bio(e->vol, bio);
}

/*
 * Check a request against the spec's error rules.  Returns the NBD error
 * to answer with, or 0 to go ahead.
 */
static uint32_t req_check(struct conn *c, const struct nbd_req *r)
{
	const struct export *e = c->exp;
	uint16_t allowed = NBD_CMD_FLAG_FUA;
	bool writes = false, ranged = true;

	switch (r->type) {
	case NBD_CMD_READ:
		if (c->structured)
			allowed |= NBD_CMD_FLAG_DF;
		break;
	case NBD_CMD_WRITE:
	case NBD_CMD_TRIM:
		writes = true;
		break;
	case NBD_CMD_WRITE_ZEROES:
		writes = true;
		allowed |= NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_FAST_ZERO;
		break;
	case NBD_CMD_FLUSH:
		ranged = false;
		break;
	case NBD_CMD_CACHE:
		break;
	case NBD_CMD_BLOCK_STATUS:
		allowed |= NBD_CMD_FLAG_REQ_ONE;
		if (!c->meta_alloc)
			return NBD_EINVAL;
		break;
	default:
		return NBD_EINVAL;
	}
	if (r->flags & ~allowed)
		return NBD_EINVAL;
	if (writes && e->readonly)
		return NBD_EPERM;
	if (!ranged)
		return 0;
	if (r->offset > e->size_bytes || r->len > e->size_bytes - r->offset)
		return (r->type == NBD_CMD_WRITE ||
			r->type == NBD_CMD_WRITE_ZEROES) ? NBD_ENOSPC :
							   NBD_EINVAL;
	if ((r->offset | r->len) & (SRV_MIN_BLOCK - 1))
		return NBD_EINVAL;
	if (r->type == NBD_CMD_READ && r->len > SRV_MAX_PAYLOAD)
		return (r->flags & NBD_CMD_FLAG_DF) ? NBD_EOVERFLOW : NBD_EINVAL;
	if (r->type == NBD_CMD_BLOCK_STATUS && !r->len)
		return NBD_EINVAL;
	return 0;
}

static void conn_pause_check(struct conn *c)
{
	if (c->inflight >= SRV_MAX_INFLIGHT_REQS ||
	    c->inflight_bytes >= SRV_MAX_INFLIGHT_BYTES) {
		c->paused = true;
		ev_io_stop(c->w->loop, &c->rio);
	}
}

/* A whole request (and its payload, for writes) is here. */
static void req_ready(struct nbd_req *r)
{
	if (r->err || r->len == 0)
		req_reply(r);
	else
		req_submit(r);
}

/* A 28-byte request header arrived.  Returns false to stop parsing. */
static bool tx_header(struct conn *c, const uint8_t *h)
{
	struct nbd_req *r;

	if (get32(h) != NBD_REQUEST_MAGIC) {
		conn_fail(c); /* lost framing: nothing else is safe */
		return false;
	}
	if (get16(h + 6) == NBD_CMD_DISC) {
		c->draining = true;
		c->paused = true;
		ev_io_stop(c->w->loop, &c->rio);
		conn_maybe_close(c);
		return false;
	}
	r = req_get(c);
	if (!r) {
		conn_fail(c);
		return false;
	}
	r->flags = get16(h + 4);
	r->type = get16(h + 6);
	r->cookie = get64(h + 8);
	r->offset = get64(h + 16);
	r->len = get32(h + 24);
	r->err = req_check(c, r);
	c->big_writes = r->type == NBD_CMD_WRITE &&
			r->len >= SRV_DIRECT_READ_MIN;

	if (r->type == NBD_CMD_WRITE) {
		if (r->len > SRV_MAX_PAYLOAD) {
			/* Too big to buffer, unsafe to skip: hang up. */
			req_free(r);
			conn_fail(c);
			return false;
		}
		/* The payload comes whether or not the request is valid. */
		if (r->len && req_alloc_buf(r, r->len)) {
			req_free(r);
			conn_fail(c);
			return false;
		}
		if (r->len) {
			c->rx = r;
			return true;
		}
	} else if (r->type == NBD_CMD_READ && !r->err && r->len) {
		if (req_alloc_buf(r, r->len))
			r->err = NBD_ENOMEM;
	}
	req_ready(r);
	conn_pause_check(c);
	return !c->paused;
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
	free(c->pend);
	c->pend = b;
	c->pend_len = n;
	c->pend_off = 0;
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
				c->rx = NULL;
				req_ready(r);
				conn_pause_check(c);
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
		if (c->paused)
			break;
	}
	if (n && !c->dead && !c->draining)
		tx_stash(c, p, n);
}

static void tx_read(struct conn *c)
{
	struct worker *w = c->w;

	while (!c->paused && !c->dead) {
		struct nbd_req *r = c->rx;
		ssize_t n;

		if (r && r->len - r->have >= SRV_DIRECT_READ_MIN) {
			/* Big payload: straight into its buffer, no copy. */
			n = recv(c->fd, (uint8_t *)r->buf + r->have,
				 r->len - r->have, 0);
			if (n > 0) {
				r->have += (uint32_t)n;
				if (r->have == r->len) {
					c->rx = NULL;
					req_ready(r);
					conn_pause_check(c);
				}
				continue;
			}
		} else {
			/*
			 * While big writes stream in, a batch read would pull
			 * the next payload's first 256 KiB through rbuf and
			 * cost a second copy of it; read the header alone so
			 * the payload lands in its buffer directly.
			 */
			size_t want = c->big_writes && !r ?
					      NBD_REQUEST_BYTES - c->hdr_have :
					      SRV_RBUF_BYTES;

			n = recv(c->fd, w->rbuf, want, 0);
			if (n > 0) {
				tx_parse(c, w->rbuf, (size_t)n);
				if ((size_t)n < want)
					return; /* drained; wait for more */
				continue;
			}
		}
		if (n == 0) {
			/* EOF: finish what was asked, then close. */
			c->draining = true;
			c->paused = true;
			ev_io_stop(w->loop, &c->rio);
			if (c->rx) {
				req_free(c->rx);
				c->rx = NULL;
			}
			conn_maybe_close(c);
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

/* In-flight work drained below the limits: take the stash, then read. */
static void conn_resume(struct conn *c)
{
	if (!c->paused || c->draining || c->dead ||
	    c->inflight >= SRV_MAX_INFLIGHT_REQS / 2 ||
	    c->inflight_bytes >= SRV_MAX_INFLIGHT_BYTES / 2)
		return;
	c->paused = false;
	if (c->pend) {
		uint8_t *b = c->pend;
		size_t off = c->pend_off, len = c->pend_len;

		c->pend = NULL;
		tx_parse(c, b + off, len - off);
		free(b);
		if (c->paused || c->dead)
			return;
	}
	ev_io_start(c->w->loop, &c->rio);
}

static void conn_read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct conn *c = container_of(w, struct conn, rio);

	worker_poll_arrival(c->w);
	if (c->state != CS_TRANSMISSION) {
		handshake_read(c);
		/* GO may have been followed by pipelined requests. */
		if (c->state != CS_TRANSMISSION || c->dead)
			return;
	}
	tx_read(c);
}

/* ---- transmission: sending ---- */

static void conn_send(struct conn *c)
{
	struct iovec iov[256];

	if (c->olen)
		return; /* handshake bytes first; the write watcher is on */
	while (c->oq_head) {
		struct msghdr msg = { .msg_iov = iov };
		unsigned int n = 0;
		ssize_t sent;

		for (struct nbd_req *r = c->oq_head; r && n < 256; r = r->next)
			for (unsigned int i = r->iov_idx; i < r->niov && n < 256;
			     i++)
				iov[n++] = r->iov[i];
		msg.msg_iovlen = n;
		sent = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
		if (sent < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				ev_io_start(c->w->loop, &c->wio);
				return;
			}
			conn_fail(c);
			return;
		}
		while (sent > 0) {
			struct nbd_req *r = c->oq_head;
			struct iovec *v = &r->iov[r->iov_idx];

			if ((size_t)sent < v->iov_len) {
				v->iov_base = (uint8_t *)v->iov_base + sent;
				v->iov_len -= (size_t)sent;
				break;
			}
			sent -= (ssize_t)v->iov_len;
			if (++r->iov_idx == r->niov) {
				c->oq_head = r->next;
				if (!c->oq_head)
					c->oq_tail = &c->oq_head;
				req_free(r);
			}
		}
	}
	ev_io_stop(c->w->loop, &c->wio);
	conn_resume(c);
	conn_maybe_close(c);
}

static void conn_write_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct conn *c = container_of(w, struct conn, wio);

	if (c->olen && (!obuf_send(c) || c->olen))
		return; /* dead, or still waiting for room */
	if (c->state == CS_TRANSMISSION)
		conn_send(c);
}

void worker_send_dirty(struct worker *w)
{
	while (w->dirty) {
		struct conn *c = w->dirty;

		w->dirty = c->dirty_next;
		c->dirty = false;
		if (conn_closeable(c))
			conn_free(c);
		/* A reply waiting behind EAGAIN goes when the socket says so. */
		else if (!c->dead && !ev_is_active(&c->wio))
			conn_send(c);
	}
}

/* ---- shutdown ---- */

void worker_begin_stop(struct worker *w)
{
	struct conn *c, *next;

	w->stopping = true;
	for (c = w->conns; c; c = next) {
		next = c->next;
		if (c->state != CS_TRANSMISSION) {
			conn_fail(c);
			continue;
		}
		/* Stop taking requests; answer those already taken. */
		c->draining = true;
		c->paused = true;
		ev_io_stop(w->loop, &c->rio);
		conn_maybe_close(c);
	}
	if (!w->conns)
		ev_break(w->loop, EVBREAK_ONE);
}

void worker_close_all(struct worker *w)
{
	struct conn *c, *next;

	for (c = w->conns; c; c = next) {
		next = c->next;
		if (!c->dead)
			conn_fail(c);
	}
}
