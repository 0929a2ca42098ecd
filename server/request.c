// SPDX-License-Identifier: MIT
/*
 * request.c - one NBD request: parse its header, check it (the NBD layer's
 * rules), and carry it out: a direct request becomes one bio submitted to
 * the export's volume, whose completion queues the reply; an unaligned one
 * (which only clients that ignore the advertised block size send) goes
 * the same way through nbdl_split_submit, which read-modify-writes its
 * edge sectors with bios of its own, waiting for none of them.
 * A large read on a unix socket may need neither: its reply is queued at
 * once and conn.c sends the data from the member files with sendfile.
 */
#include <errno.h>
#include <stdlib.h>

#include <bionbd/trace.h>

#include "request.h"
#include "wire.h"

/* ---- lifetime ---- */

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
	r->why = NULL;
	r->buf = NULL;
	r->have = 0;
	r->sendfile = false;
	r->pad = false;
	r->desc = NULL;
	r->split = NULL;
	r->ext = (struct bio_extents){ 0 };
	r->niov = r->iov_idx = 0;
	r->tr.seq = 0;
	c->inflight++;
	return r;
}

void req_free(struct nbd_req *r, bool sent)
{
	struct conn *c = r->c;
	struct worker *w = c->w;

	if (r->t0) /* never answered: the connection went */
		nbdl_account(c->exp, NBDL_ACCT_DROPPED, 0, 0, r->t0);
	if (r->tr.seq)
		nbdl_trace_reply(c->exp, &r->tr, r->err, !sent);
	if (r->buf) {
		size_t n = buf_class_bytes(r->buf_class);

		buf_put(&w->bufs, r->buf, r->buf_class);
		conn_add_inflight_bytes(c, -n);
		/* Waiters are let in once a loop turn (conn_resume_waiting). */
		inflight_release(worker_lane(w, n), n);
	}
	free(r->desc);
	bio_extents_free(&r->ext);
	c->inflight--;
	r->next = w->free_reqs;
	w->free_reqs = r;
}

void req_cache_drain(struct worker *w)
{
	while (w->free_reqs) {
		struct nbd_req *r = w->free_reqs;

		w->free_reqs = r->next;
		free(r);
	}
}

int req_take_buf(struct nbd_req *r)
{
	struct conn *c = r->c;
	struct worker *w = c->w;

	r->buf = buf_get(&w->bufs, r->len, &r->buf_class);
	if (!r->buf) {
		size_t n = buf_bytes_for(r->len);

		inflight_release(worker_lane(w, n), n);
		if (r->type == NBD_CMD_WRITE) {
			/* Its payload cannot be received: the caller hangs up. */
			req_free(r, false);
			return -ENOMEM;
		}
		r->err = NBD_ENOMEM;
		return 0;
	}
	conn_add_inflight_bytes(c, buf_class_bytes(r->buf_class));
	return 0;
}

/*
 * A read whose reply can take its data straight from the member files
 * (target_iomap): on unix sockets, where it measured cheaper (options.h).
 */
static bool req_sendfile_ok(const struct conn *c, uint32_t len)
{
	uint32_t min = c->w->srv->sendfile_min;

	return c->unix_sock && !c->tls && min && len >= min && c->exp->iomap;
}

/* ---- parsing ---- */

/* @h as a request of @c (not yet checked), or REQ_DISC, or -errno. */
static int req_new(struct conn *c, const uint8_t *h, struct nbd_req **out)
{
	struct nbd_req *r;

	if (get32(h + REQ_MAGIC) != NBD_REQUEST_MAGIC)
		return -EPROTO; /* lost framing: nothing else is safe */
	if (get16(h + REQ_TYPE) == NBD_CMD_DISC)
		return REQ_DISC;
	r = req_get(c);
	if (!r)
		return -ENOMEM;
	r->flags = get16(h + REQ_FLAGS);
	r->type = get16(h + REQ_TYPE);
	r->cookie = get64(h + REQ_COOKIE);
	r->offset = get64(h + REQ_OFFSET);
	r->len = get32(h + REQ_LEN);
	r->t0 = io_stats_start(c->exp->stats);
	if (trace_on()) {
		r->tr = (struct nbdl_trace){ .offset = r->offset,
					     .len = r->len,
					     .conn = (uint32_t)c->id,
					     .type = r->type,
					     .flags = r->flags };
		nbdl_trace_queued(c->exp, &r->tr);
	}
	*out = r;
	return 0;
}

int req_begin(struct conn *c, const uint8_t *h, struct nbd_req **out)
{
	struct nbd_req *r;
	bool need = false; /* a payload buffer */
	size_t n;
	int rc = req_new(c, h, &r);

	if (rc)
		return rc;
	r->err = nbdl_req_check(c->exp, &c->opts, r->type, r->flags, r->offset,
				r->len, &r->why);
	if ((r->type != NBD_CMD_READ && r->type != NBD_CMD_WRITE) ||
	    r->len <= SRV_SMALL_REQ_BYTES)
		worker_small_seen(c->w, c);
	if (r->type == NBD_CMD_WRITE) {
		/* The payload comes whether or not the request is valid. */
		if (r->len > NBDL_MAX_PAYLOAD) {
			/* Too big to buffer, unsafe to skip: hang up. */
			req_free(r, false);
			return -EPROTO;
		}
		need = r->len > 0;
	} else if (r->type == NBD_CMD_READ && !r->err && r->len) {
		if (req_sendfile_ok(c, r->len))
			r->sendfile = true;
		else
			need = true;
	}
	*out = r;
	if (!need)
		return 0;
	/* Checked before the buffer is taken, so the bound holds. */
	n = buf_bytes_for(r->len);
	if (!inflight_admit(worker_lane(c->w, n), n))
		return REQ_WAIT;
	return req_take_buf(r);
}

bool req_answer(struct nbd_req *r, size_t missing, size_t have,
		uint32_t err)
{
	/*
	 * A reply before its request was all sent is one the client cannot
	 * place (libnbd: "no matching cookie found for server reply"), and
	 * cannot obey either (NBD_ESHUTDOWN asks for NBD_CMD_DISC, which
	 * cannot come before the payload).
	 */
	if (missing > have) {
		req_free(r, false);
		return false;
	}
	/* One refused already keeps its reason: its answer needs no payload. */
	if (!r->err) {
		r->err = err;
		r->why = NULL;
	}
	reply_queue(r);
	return true;
}

int req_answer_hdr(struct conn *c, const uint8_t *h, size_t have,
		   uint32_t err, uint32_t *payload)
{
	struct nbd_req *r;
	int rc = req_new(c, h, &r);

	if (rc)
		return rc;
	*payload = r->type == NBD_CMD_WRITE ? r->len : 0;
	return req_answer(r, *payload, have, err) ? 0 : -EAGAIN;
}

/* ---- carrying out ---- */

static void req_endio(struct bio *bio)
{
	struct nbd_req *r = bio->bi_private;
	int err = bio->bi_status;

	bio_put(bio);
	if (r->split) {
		err = nbdl_split_end(r->split, err, r->buf, &r->ext,
				     SRV_MAX_EXTENTS);
		r->split = NULL;
	} else if (!err && r->type == NBD_CMD_BLOCK_STATUS)
		err = nbdl_extents_finish(&r->ext, r->offset, r->offset,
					  r->len,
					  r->flags & NBD_CMD_FLAG_REQ_ONE ?
						  1 :
						  SRV_MAX_EXTENTS);
	r->err = nbdl_errno_to_nbd(err, r->type, r->flags);
	reply_queue(r);
}

void req_run(struct nbd_req *r)
{
	struct nbdl_export *e = r->c->exp;
	const struct server *srv = r->c->w->srv;
	struct bio *bio;
	int err;

	/*
	 * A sendfile read has nothing to do until its reply goes out: the
	 * kernel reads the page cache then, which holds every write answered
	 * before this request came.
	 */
	if (r->err || r->sendfile ||
	    (r->len == 0 && r->type != NBD_CMD_FLUSH)) {
		reply_queue(r);
		return;
	}
	if (!nbdl_is_direct(r->type, r->offset, r->len)) {
		/* Nothing waits here: its edges are bios like any other. */
		err = nbdl_split_start(e, r->type, r->flags, r->buf, r->offset,
				       r->len, &r->ext, r->tr.seq, &r->split,
				       &bio);
		if (!err && !bio)
			err = nbdl_split_end(r->split, 0, r->buf, &r->ext,
					     SRV_MAX_EXTENTS);
		if (err || !bio) {
			r->split = NULL;
			r->err = nbdl_errno_to_nbd(err, r->type, r->flags);
			reply_queue(r);
			return;
		}
	} else {
		bio = nbdl_bio_alloc(r->type, r->flags, r->buf, r->offset,
				     r->len, &r->ext);
		if (!bio) {
			r->err = NBD_ENOMEM;
			reply_queue(r);
			return;
		}
	}
	/*
	 * A large copy on the worker would hold up every other connection on
	 * it for its whole length; elsewhere it also runs beside them.
	 */
	if (srv->async_min && r->len >= srv->async_min &&
	    (r->type == NBD_CMD_READ || r->type == NBD_CMD_WRITE))
		bio->bi_opf |= REQ_ASYNC;
	bio->bi_private = r;
	bio->bi_end_io = req_endio;
	bio->bi_trace = r->tr.seq;
	if (r->split)
		nbdl_split_submit(r->split, bio);
	else
		submit_bio(e->vol, bio);
}
