// SPDX-License-Identifier: MIT
/*
 * reply.c - the reply to a finished (or refused) request: header and data
 * iovecs that point at the request's own buffer, so a read's data is never
 * copied, queued in order on the connection for its next send.  A sendfile
 * read's data iovec stands for the volume range that conn.c sends.
 */
#include <stdlib.h>
#include <string.h>

#include "request.h"
#include "stats.h"
#include "wire.h"

static void reply_simple(struct nbd_req *r, bool with_data)
{
	put32(r->hdr + SREP_MAGIC, NBD_SIMPLE_REPLY_MAGIC);
	put32(r->hdr + SREP_ERROR, r->err);
	put64(r->hdr + SREP_COOKIE, r->cookie);
	r->iov[0] = (struct iovec){ r->hdr, NBD_SIMPLE_REPLY_BYTES };
	r->niov = 1;
	/* A sendfile read has no buffer: its data starts at ->fpos[1]. */
	if (with_data && !r->err && r->len) {
		r->fpos[r->niov] = r->offset;
		r->iov[r->niov++] = (struct iovec){ r->buf, r->len };
	}
}

static uint8_t *chunk_hdr(struct nbd_req *r, uint8_t *h, uint16_t flags,
			  uint16_t type, uint32_t len)
{
	put32(h + CHUNK_MAGIC, NBD_STRUCTURED_REPLY_MAGIC);
	put16(h + CHUNK_FLAGS, flags);
	put16(h + CHUNK_TYPE, type);
	put64(h + CHUNK_COOKIE, r->cookie);
	put32(h + CHUNK_LEN, len);
	return h + NBD_CHUNK_HDR_BYTES;
}

/* The error, and for whoever reads it (proto.md: why errors go as chunks). */
static void reply_error_chunk(struct nbd_req *r)
{
	const char *msg = r->why ? r->why : nbdl_error_text(r->err);
	uint16_t n = (uint16_t)strlen(msg);
	uint8_t *p = chunk_hdr(r, r->hdr, NBD_REPLY_FLAG_DONE,
			       NBD_REPLY_TYPE_ERROR, CHUNK_ERROR_BYTES + n);

	put32(p, r->err);
	put16(p + 4, n);
	r->iov[0] = (struct iovec){ r->hdr,
				    NBD_CHUNK_HDR_BYTES + CHUNK_ERROR_BYTES };
	r->iov[1] = (struct iovec){ (void *)msg, n };
	r->niov = 2;
}

static bool is_zero(const uint8_t *p, size_t n)
{
	static const uint8_t z[16];

	if (n < 16)
		return !memcmp(p, z, n);
	/* Compare the buffer with itself shifted: zero if the head is. */
	return !memcmp(p, z, 16) && !memcmp(p, p + 16, n - 16);
}

/* A run of a structured read reply: one data or hole chunk. */
struct read_run {
	uint32_t off, len;
	bool hole;
};

/* Add @len bytes at @off to the runs; false when that needs one too many. */
static bool run_add(struct read_run *run, unsigned int *nr, uint32_t off,
		    uint32_t len, bool hole)
{
	if (*nr && run[*nr - 1].hole == hole) {
		run[*nr - 1].len += len;
		return true;
	}
	if (*nr == SRV_READ_CHUNKS)
		return false;
	run[(*nr)++] = (struct read_run){ off, len, hole };
	return true;
}

/*
 * The runs of a read in ->buf: all-zero 4 KiB blocks of the export are
 * holes.  Blocks are counted from the export's start, not the read's: the
 * spec wants chunk boundaries inside a read on multiples of 512.  DF asks
 * for a single content chunk; too fragmented, it is one data chunk.
 */
static unsigned int buffer_runs(struct nbd_req *r, struct read_run *run)
{
	const uint8_t *buf = r->buf;
	unsigned int nr = 0;

	if (r->flags & NBD_CMD_FLAG_DF) {
		run[0] = (struct read_run){ 0, r->len, is_zero(buf, r->len) };
		return 1;
	}
	for (uint32_t off = 0; off < r->len;) {
		uint32_t n = 4096 - (uint32_t)((r->offset + off) % 4096);

		if (n > r->len - off)
			n = r->len - off;

		if (!run_add(run, &nr, off, n,
			     n == 4096 && is_zero(buf + off, n))) {
			run[0] = (struct read_run){ 0, r->len, false };
			return 1;
		}
		off += n;
	}
	return nr;
}

/* Stripe pieces of a sendfile read looked at for holes (one lseek each). */
#define REPLY_HOLE_PROBES 64

/*
 * The runs of a sendfile read, from the members: one lseek per stripe
 * piece (target_iomap) says whether the piece starts with a hole and where
 * its data starts; the rest of a piece with data counts as data, zeros or
 * not, which the spec allows (the data never reaches user space to be
 * looked at).  Past REPLY_HOLE_PROBES pieces, the rest is data too, so a
 * huge read costs a bounded number of lookups.
 */
static unsigned int sendfile_runs(struct nbd_req *r, struct read_run *run)
{
	struct target *vol = r->c->exp->vol;
	struct target_iomap m;
	unsigned int nr = 0;
	uint32_t pos = 0;

	if (r->flags & NBD_CMD_FLAG_DF)
		goto rest;
	for (unsigned int i = 0; i < REPLY_HOLE_PROBES && pos < r->len; i++) {
		if (target_iomap(vol, r->offset + pos, r->len - pos,
				 TARGET_IOMAP_HOLE, &m))
			break;
		if (!run_add(run, &nr, pos, (uint32_t)m.length, m.hole))
			goto too_many;
		pos += (uint32_t)m.length;
	}
rest:
	if (pos == r->len || run_add(run, &nr, pos, r->len - pos, false))
		return nr;
too_many:
	run[0] = (struct read_run){ 0, r->len, false };
	return 1;
}

/*
 * A structured read reply: a chunk per run.  A data chunk's payload is
 * the request's buffer, or for a sendfile read an iovec with no base that
 * starts at volume offset ->fpos[its index] (see struct nbd_req).  The
 * data of a sendfile read is read from the members while it is sent, when
 * its chunk header is gone already; a chunk that may still fail must not
 * say it is the last (the spec), so such a reply ends with a NONE chunk,
 * which reply_read_failed turns into the error.
 */
static void reply_read_structured(struct nbd_req *r)
{
	struct read_run run[SRV_READ_CHUNKS];
	uint8_t *h = r->hdr;
	unsigned int nr;

	if (r->len == 0) {
		chunk_hdr(r, h, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_NONE, 0);
		r->iov[0] = (struct iovec){ h, NBD_CHUNK_HDR_BYTES };
		r->niov = 1;
		return;
	}
	nr = r->sendfile ? sendfile_runs(r, run) : buffer_runs(r, run);
	r->niov = 0;
	for (unsigned int i = 0; i < nr; i++) {
		uint16_t fl = i + 1 == nr && !r->sendfile ? NBD_REPLY_FLAG_DONE :
							     0;
		uint64_t off = r->offset + run[i].off;
		uint8_t *p;

		if (run[i].hole) {
			p = chunk_hdr(r, h, fl, NBD_REPLY_TYPE_OFFSET_HOLE,
				      CHUNK_OFFSET_HOLE_BYTES);
			put64(p, off);
			put32(p + 8, run[i].len);
			r->iov[r->niov++] = (struct iovec){
				h, NBD_CHUNK_HDR_BYTES + CHUNK_OFFSET_HOLE_BYTES
			};
			h += NBD_CHUNK_HDR_BYTES + CHUNK_OFFSET_HOLE_BYTES;
			continue;
		}
		p = chunk_hdr(r, h, fl, NBD_REPLY_TYPE_OFFSET_DATA,
			      CHUNK_OFFSET_DATA_BYTES + run[i].len);
		put64(p, off);
		r->iov[r->niov++] = (struct iovec){
			h, NBD_CHUNK_HDR_BYTES + CHUNK_OFFSET_DATA_BYTES
		};
		h += NBD_CHUNK_HDR_BYTES + CHUNK_OFFSET_DATA_BYTES;
		r->fpos[r->niov] = off;
		r->iov[r->niov++] = (struct iovec){
			r->buf ? (uint8_t *)r->buf + run[i].off : NULL,
			run[i].len
		};
	}
	if (r->sendfile) {
		chunk_hdr(r, h, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_NONE, 0);
		r->iov[r->niov++] = (struct iovec){ h, NBD_CHUNK_HDR_BYTES };
	}
}

bool reply_read_failed(struct nbd_req *r, uint64_t off, int err)
{
	struct iovec *end = &r->iov[r->niov - 1];
	const char *msg;
	uint16_t n;
	uint8_t *p;

	if (!r->sendfile || !r->c->opts.structured || r->pad)
		return false;
	r->pad = true;
	/* Data chunks after this one have not started: they are left out. */
	for (unsigned int i = r->iov_idx + 1; i + 1 < r->niov; i++)
		r->iov[i] = (struct iovec){ r->hdr, 0 };
	r->err = nbdl_errno_to_nbd(err, NBD_CMD_READ, r->flags);
	msg = nbdl_error_text(r->err);
	n = (uint16_t)strlen(msg);
	/*
	 * The NONE chunk's header becomes the error chunk's; the message
	 * goes between its fixed fields and the offset, which is kept in
	 * the header space after them.
	 */
	p = chunk_hdr(r, end->iov_base, NBD_REPLY_FLAG_DONE,
		      NBD_REPLY_TYPE_ERROR_OFFSET, CHUNK_ERROR_BYTES + n + 8);
	put32(p, r->err);
	put16(p + 4, n);
	put64(p + CHUNK_ERROR_BYTES, off);
	end->iov_len = NBD_CHUNK_HDR_BYTES + CHUNK_ERROR_BYTES;
	r->iov[r->niov++] = (struct iovec){ (void *)msg, n };
	r->iov[r->niov++] = (struct iovec){ p + CHUNK_ERROR_BYTES, 8 };
	return true;
}

/* r->ext is the NBD layer's finished answer: from r->offset, no gaps. */
static void reply_block_status(struct nbd_req *r)
{
	size_t n = r->ext.nr, bytes;
	uint8_t *p;

	bytes = CHUNK_BS_CONTEXT_BYTES + CHUNK_BS_DESC_BYTES * n;
	r->desc = malloc(bytes);
	if (!r->desc || !n) {
		r->err = NBD_EIO;
		reply_error_chunk(r);
		return;
	}
	put32(r->desc, 1); /* the base:allocation context id */
	p = r->desc + CHUNK_BS_CONTEXT_BYTES;
	for (size_t i = 0; i < n; i++) {
		put32(p, (uint32_t)r->ext.v[i].length);
		put32(p + 4,
		      r->ext.v[i].flags & (NBD_STATE_HOLE | NBD_STATE_ZERO));
		p += CHUNK_BS_DESC_BYTES;
	}
	chunk_hdr(r, r->hdr, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_BLOCK_STATUS,
		  (uint32_t)bytes);
	r->iov[0] = (struct iovec){ r->hdr, NBD_CHUNK_HDR_BYTES };
	r->iov[1] = (struct iovec){ r->desc, bytes };
	r->niov = 2;
}

void reply_queue(struct nbd_req *r)
{
	struct conn *c = r->c;

	nbdl_account(c->exp, r->type, r->len, r->err, r->t0);
	srv_stats_conn_count(c, r->type, r->len, r->err);
	r->t0 = 0;

	if (r->type == NBD_CMD_READ) {
		if (!c->opts.structured)
			reply_simple(r, true);
		else if (r->err)
			reply_error_chunk(r);
		else
			reply_read_structured(r);
	} else if (r->type == NBD_CMD_BLOCK_STATUS && c->opts.structured) {
		if (r->err)
			reply_error_chunk(r);
		else
			reply_block_status(r);
	} else if (c->opts.structured && r->err) {
		/* The spec: with structured replies, errors SHOULD be chunks. */
		reply_error_chunk(r);
	} else {
		reply_simple(r, false);
	}
	r->next = NULL;
	/* Something new for the client to read: its stall clock restarts. */
	if (!c->oq_head)
		conn_progress(c);
	*c->oq_tail = r;
	c->oq_tail = &r->next;
	conn_mark_dirty(c);
}
