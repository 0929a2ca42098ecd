/* SPDX-License-Identifier: MIT */
/*
 * request.h - one NBD request in transmission, from its header to its
 * reply: request.c parses, checks and carries it out (the NBD layer turns
 * it into a bio), reply.c writes the reply and queues it on the
 * connection.
 */
#ifndef BIONBD_REQUEST_H
#define BIONBD_REQUEST_H

#include <stdint.h>
#include <sys/uio.h>

#include <bionbd/bio.h>

#include "conn.h"
#include "wire.h"

/*
 * Reply header space: a structured read has up to SRV_READ_CHUNKS chunks,
 * and a sendfile read a last one that ends it (NONE, or ERROR_OFFSET with
 * an offset when the data could not be sent).
 */
#define REQ_HDR_BYTES                                                          \
	(SRV_READ_CHUNKS * (NBD_CHUNK_HDR_BYTES + 12) + NBD_CHUNK_HDR_BYTES +  \
	 CHUNK_ERROR_BYTES + 8)
/* Two a chunk; the last, an error for an offset, three (reply_read_failed). */
#define REQ_IOVS (2 * SRV_READ_CHUNKS + 3)

struct nbd_req {
	struct nbd_req *next;
	struct conn *c;
	uint64_t cookie;
	uint64_t offset;
	uint32_t len;
	uint16_t type;
	uint16_t flags;
	uint32_t err; /* NBD error value, 0 = success */
	const char *why; /* static: the broken rule, for the error chunk */
	uint64_t t0; /* io_stats_start of the export's, until counted */
	struct nbdl_trace tr; /* tr.seq 0: not traced, or replied to */
	void *buf; /* payload, from the worker's buffer cache */
	unsigned int buf_class;
	uint32_t have; /* payload bytes received so far */
	/*
	 * A read answered with sendfile (no ->buf): each data iovec of its
	 * reply has a NULL base, and conn.c sends that many bytes of the
	 * volume from ->fpos[that iovec's index] on, from the member files.
	 */
	bool sendfile;
	/*
	 * The member data of a sendfile read could not be sent: the rest of
	 * its data chunk goes as zeros, then the error chunk (reply_read_failed).
	 */
	bool pad;
	struct bio_extents ext; /* block status answer */
	struct nbdl_split *split; /* unaligned: its edges, until its bio ends */
	uint8_t *desc; /* block status payload (malloc) */
	/* reply, as sent */
	unsigned int niov, iov_idx;
	struct iovec iov[REQ_IOVS];
	uint64_t fpos[REQ_IOVS];
	uint8_t hdr[REQ_HDR_BYTES];
};

enum {
	REQ_DISC = 1, /* req_begin: NBD_CMD_DISC */
	REQ_WAIT, /* req_begin: no buffer room; req_take_buf once there is */
};

/**
 * req_begin - a 28-byte request header arrived on @c
 * @out: the new request; a WRITE with a payload waits for it (->have counts
 *       the bytes in ->buf), anything else goes to req_run() now
 *
 * Returns 0, REQ_DISC, REQ_WAIT (@out has no buffer yet: the worker's
 * share of --inflight-memory has no room for it, or others wait for
 * room; queue it, and once inflight_next() counted its bytes, give it its
 * buffer with req_take_buf()), or -errno when the connection must be
 * dropped (lost framing, a write payload too large to skip safely, no
 * memory).
 */
int req_begin(struct conn *c, const uint8_t *hdr, struct nbd_req **out);

/**
 * req_take_buf - give @r the payload buffer whose bytes the worker's
 * share counted already.  Out of memory, a READ gets NBD_ENOMEM as its
 * answer (0); a WRITE, whose payload then cannot be taken, is freed and
 * -ENOMEM returned: drop the connection.
 */
int req_take_buf(struct nbd_req *r);

/**
 * req_answer - answer @r, read but never to be started (the server stops),
 * with NBD error @err, unless it was refused already; but if the @missing
 * bytes of its payload still to come are not all in the @have read after
 * it, the client is still sending it, and @r is dropped unanswered (a
 * reply it could not place yet).  Returns whether @r was answered.
 */
bool req_answer(struct nbd_req *r, size_t missing, size_t have,
		uint32_t err);

/**
 * req_answer_hdr - req_answer() for the request whose header @hdr was read
 * on @c but not parsed yet, @have bytes read after it; @payload: the bytes
 * of payload that follow the header (a write's).  Returns 0, REQ_DISC,
 * -EAGAIN (a write whose payload is not all in @have: its client is still
 * sending it, and it is dropped unanswered), or -errno (not a request, or
 * no memory).
 */
int req_answer_hdr(struct conn *c, const uint8_t *hdr, size_t have,
		   uint32_t err, uint32_t *payload);

/** req_run - the whole request is here: answer it or start its I/O. */
void req_run(struct nbd_req *r);

/**
 * req_free - release a request: its reply was sent (@sent), or never will
 * be (the connection went).
 */
void req_free(struct nbd_req *r, bool sent);

/** req_cache_drain - free a worker's cached request structs. */
void req_cache_drain(struct worker *w);

/**
 * reply_queue - write the reply @r has earned (simple or structured, data,
 * holes, block status or error) and queue it on its connection, which
 * sends it at the end of the loop iteration.
 */
void reply_queue(struct nbd_req *r);

/**
 * reply_read_failed - the data of @r, a sendfile read whose reply is partly
 * sent, cannot be read from volume offset @off on (@err): turn the rest of
 * the reply into what the spec asks, the current data chunk completed with
 * zeros (->pad), the chunks after it dropped, and an error chunk for @off
 * that ends the reply.  Returns false where no such reply exists (simple
 * replies, or it failed already): the connection must then be dropped.
 */
bool reply_read_failed(struct nbd_req *r, uint64_t off, int err);

#endif /* BIONBD_REQUEST_H */
