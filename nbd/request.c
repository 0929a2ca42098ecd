// SPDX-License-Identifier: MIT
/*
 * request.c - one NBD request: is it valid, what bio it becomes, how it is
 * carried out when it is not one plain bio (unaligned), what its extents
 * answer is, and which NBD error a failure is.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <bionbd/nbdl.h>
#include <bionbd/trace.h>

#define SECTOR_MASK ((uint64_t)SECTOR_SIZE - 1)

/* ---- names ---- */

const char *nbdl_op_name(enum req_op op)
{
	/* clang-format off */
	static const char *const names[] = {
		[REQ_OP_READ] = "read",
		[REQ_OP_WRITE] = "write",
		[REQ_OP_FLUSH] = "flush",
		[REQ_OP_DISCARD] = "trim",
		[REQ_OP_CACHE] = "cache",
		[REQ_OP_WRITE_ZEROES] = "write-zeroes",
		[REQ_OP_EXTENTS] = "block-status",
	};
	/* clang-format on */

	return (unsigned int)op < REQ_OP_LAST ? names[op] : "unknown";
}

enum req_op nbdl_cmd_op(uint16_t type)
{
	if (type == NBD_CMD_DISC || type > NBD_CMD_BLOCK_STATUS)
		return REQ_OP_LAST;
	return (enum req_op)(nbdl_opf(type, 0) & REQ_OP_MASK);
}

const char *nbdl_cmd_name(uint16_t type)
{
	return type == NBD_CMD_DISC ? "disc" : nbdl_op_name(nbdl_cmd_op(type));
}

void nbdl_account(struct nbdl_export *e, uint16_t type, uint32_t len,
		  uint32_t nbd_err, uint64_t t0)
{
	/* REQ_OP_LAST (unknown, or dropped): only leaves the flight. */
	enum req_op op = nbdl_cmd_op(type);

	io_stats_done(e->stats, op, op == REQ_OP_FLUSH ? 0 : len,
		      -nbdl_nbd_to_errno(nbd_err), t0);
}

void nbdl_trace_queued(const struct nbdl_export *e, struct nbdl_trace *t)
{
	enum req_op op = nbdl_cmd_op(t->type);
	struct trace_rec ev = { .type = TRACE_Q,
				.op = (uint8_t)op,
				.flags = t->flags & TRACE_F_NBD_MASK,
				.offset = t->offset,
				.size = t->len,
				.obj = e->trace_id,
				.conn = t->conn };

	t->seq = 0;
	if (!trace_on() || !e->trace_id || !(t->seq = trace_seq_next()))
		return;
	ev.seq = t->seq;
	ev.time_ns = t->t0 = trace_now();
	trace_emit(&ev);
}

void nbdl_trace_reply(const struct nbdl_export *e, struct nbdl_trace *t,
		      uint32_t nbd_err, bool dropped)
{
	struct trace_rec ev = { .type = TRACE_R,
				.op = (uint8_t)nbdl_cmd_op(t->type),
				.flags = (t->flags & TRACE_F_NBD_MASK) |
					 (dropped ? TRACE_F_DROPPED : 0),
				.time_ns = trace_now(),
				.seq = t->seq,
				.offset = t->offset,
				.size = t->len,
				.obj = e->trace_id,
				.status = dropped ? -ESHUTDOWN :
						    -nbdl_nbd_to_errno(nbd_err),
				.conn = t->conn };

	ev.lat_ns = ev.time_ns - t->t0;
	t->seq = 0;
	trace_emit(&ev);
}

/* ---- checks ---- */

uint16_t nbdl_transmission_flags(const struct nbdl_export *e, bool structured)
{
	uint16_t f = NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH |
		     NBD_FLAG_SEND_FUA | NBD_FLAG_SEND_CACHE;

	/* A remote member without multi-conn takes it from the volume. */
	if (!e->vol || !e->vol->single_conn)
		f |= NBD_FLAG_CAN_MULTI_CONN;

	if (e->readonly)
		f |= NBD_FLAG_READ_ONLY;
	else
		f |= NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES |
		     NBD_FLAG_SEND_FAST_ZERO;
	/* DF only means something with structured replies. */
	if (structured)
		f |= NBD_FLAG_SEND_DF;
	return f;
}

uint32_t nbdl_req_check(const struct nbdl_export *e,
			const struct nbdl_conn_opts *co, uint16_t type,
			uint16_t flags, uint64_t offset, uint32_t len,
			const char **why)
{
	uint16_t allowed = NBD_CMD_FLAG_FUA;
	bool writes = false, ranged = true;

	switch (type) {
	case NBD_CMD_READ:
		if (co->structured)
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
		if (!co->meta_alloc) {
			*why = "block status without base:allocation selected";
			return NBD_EINVAL;
		}
		break;
	default:
		*why = "unknown command";
		return NBD_EINVAL;
	}
	if (flags & ~allowed) {
		*why = "a flag this command does not take";
		return NBD_EINVAL;
	}
	if (writes && e->readonly) {
		*why = "the export is read-only";
		return NBD_EPERM;
	}
	if (!ranged)
		return 0;
	if (offset > e->size_bytes || len > e->size_bytes - offset) {
		*why = "the request goes past the end of the export";
		return (type == NBD_CMD_WRITE || type == NBD_CMD_WRITE_ZEROES) ?
			       NBD_ENOSPC :
			       NBD_EINVAL;
	}
	if (type == NBD_CMD_READ && len > NBDL_MAX_PAYLOAD) {
		*why = "a read longer than the 32 MiB maximum block size";
		return (flags & NBD_CMD_FLAG_DF) ? NBD_EOVERFLOW : NBD_EINVAL;
	}
	if (type == NBD_CMD_BLOCK_STATUS && !len) {
		*why = "block status of length 0";
		return NBD_EINVAL;
	}
	return 0;
}

/* ---- errors ---- */

uint32_t nbdl_errno_to_nbd(int err, uint16_t type, uint16_t flags)
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
		return type == NBD_CMD_READ && (flags & NBD_CMD_FLAG_DF) ?
			       NBD_EOVERFLOW :
			       NBD_EINVAL;
	case -EOPNOTSUPP:
		return type == NBD_CMD_WRITE_ZEROES &&
				       (flags & NBD_CMD_FLAG_FAST_ZERO) ?
			       NBD_ENOTSUP :
			       NBD_EIO;
	default:
		return NBD_EIO;
	}
}

const char *nbdl_error_text(uint32_t nbd_err)
{
	switch (nbd_err) {
	case NBD_EPERM:
		return "operation not permitted";
	case NBD_EIO:
		return "input/output error";
	case NBD_ENOMEM:
		return "the server is out of memory";
	case NBD_EINVAL:
		return "invalid request";
	case NBD_ENOSPC:
		return "no space left";
	case NBD_EOVERFLOW:
		return "value too large";
	case NBD_ENOTSUP:
		return "no fast way to do this";
	case NBD_ESHUTDOWN:
		return "the server is shutting down";
	default:
		return "error";
	}
}

int nbdl_nbd_to_errno(uint32_t nbd_err)
{
	switch (nbd_err) {
	case 0:
		return 0;
	case NBD_EPERM:
		return EPERM;
	case NBD_ENOMEM:
		return ENOMEM;
	case NBD_EINVAL:
		return EINVAL;
	case NBD_ENOSPC:
		return ENOSPC;
	case NBD_EOVERFLOW:
		return EOVERFLOW;
	case NBD_ENOTSUP:
		return EOPNOTSUPP;
	case NBD_ESHUTDOWN:
		return ESHUTDOWN;
	default:
		return EIO;
	}
}

/* ---- request -> bio ---- */

unsigned int nbdl_opf(uint16_t type, uint16_t flags)
{
	unsigned int opf;

	switch (type) {
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
		if (flags & NBD_CMD_FLAG_NO_HOLE)
			opf |= REQ_NOUNMAP;
		if (flags & NBD_CMD_FLAG_FAST_ZERO)
			opf |= REQ_NOFALLBACK;
		break;
	default: /* NBD_CMD_BLOCK_STATUS */
		opf = REQ_OP_EXTENTS;
		break;
	}
	if (flags & NBD_CMD_FLAG_FUA)
		opf |= REQ_FUA;
	return opf;
}

bool nbdl_is_direct(uint16_t type, uint64_t offset, uint32_t len)
{
	return type == NBD_CMD_FLUSH || !((offset | len) & SECTOR_MASK);
}

struct bio *nbdl_bio_alloc(uint16_t type, uint16_t flags, void *buf,
			   uint64_t offset, uint32_t len,
			   struct bio_extents *ext)
{
	bool data = type == NBD_CMD_READ || type == NBD_CMD_WRITE;
	struct bio *bio = bio_alloc(data ? 1 : 0, nbdl_opf(type, flags));

	if (!bio)
		return NULL;
	if (data) {
		if (len && bio_add_buf(bio, buf, len)) {
			bio_put(bio);
			return NULL;
		}
	} else if (type != NBD_CMD_FLUSH) {
		bio->bi_iter.bi_size = len;
	}
	if (type == NBD_CMD_BLOCK_STATUS) {
		bio->bi_ext = ext;
		/* One is the most REQ_ONE lets us send: no more lookups. */
		ext->max = flags & NBD_CMD_FLAG_REQ_ONE ? 1 : 0;
	}
	bio->bi_iter.bi_sector = offset >> SECTOR_SHIFT;
	return bio;
}

/*
 * The trace sequence number of the request nbdl_do is carrying out on this
 * thread: its bios, however many an unaligned request takes, carry it.
 */
static __thread uint64_t cur_trace;

/* One direct request, submitted and waited for on this thread's ioq. */
static int do_direct(struct nbdl_export *e, unsigned int opf, void *buf,
		     uint64_t offset, uint64_t len, struct bio_extents *ext)
{
	struct bio *bio;
	int r;

	bio = bio_alloc(buf ? 1 : 0, opf);
	if (!bio)
		return -ENOMEM;
	bio->bi_iter.bi_sector = offset >> SECTOR_SHIFT;
	if (buf) {
		r = bio_add_buf(bio, buf, (unsigned int)len);
		if (r)
			goto out;
	} else {
		bio->bi_iter.bi_size = (uint32_t)len;
	}
	bio->bi_ext = ext;
	bio->bi_trace = cur_trace;
	r = submit_bio_wait(e->vol, bio);
out:
	bio_put(bio);
	return r;
}

/* ---- unaligned requests ---- */

/*
 * How an unaligned request [off, off + count) sits on sectors: the span of
 * whole sectors it touches, the whole sectors inside it, and the partial
 * sector at each end (which may be the same sector).
 */
struct span {
	uint64_t start, end; /* sector-aligned span covering the request */
	uint64_t mid_start, mid_end; /* whole sectors inside; may be empty */
	bool head, tail;	     /* partial first / last sector */
	bool one;		     /* head and tail are the same sector */
};

static void span_of(uint64_t off, uint64_t count, struct span *s)
{
	uint64_t end = off + count;

	s->start = off & ~SECTOR_MASK;
	s->end = (end + SECTOR_MASK) & ~SECTOR_MASK;
	s->mid_start = (off + SECTOR_MASK) & ~SECTOR_MASK;
	s->mid_end = end & ~SECTOR_MASK;
	s->head = off != s->start;
	s->tail = end != s->end;
	s->one = s->head && s->tail && s->end - s->start == SECTOR_SIZE;
	if (s->mid_end < s->mid_start)
		s->mid_end = s->mid_start; /* inside one sector */
}

/*
 * An unaligned request between nbdl_split_start and nbdl_split_end: what
 * the end needs, the partial end sectors a read bounces through, and for
 * a write or write-zeroes its read-modify-write (nbdl_split_submit).
 */
struct nbdl_split {
	struct ioq_call call; /* first: a waiter resumes through it */
	uint16_t type;
	uint64_t offset;
	uint32_t len; /* block status: what the span could cover */
	bool req_one;
	bool rmw; /* a write or write-zeroes: nbdl_split_submit carries it out */
	struct span s;
	struct nbdl_export *e;
	unsigned int opf;
	const char *src; /* write: the payload; NULL: zeroes */
	struct bio *parent; /* the caller's bio, ended once all is done */
	struct ioq *q; /* the submitting thread's: its bios end there */
	unsigned int pending; /* bios of the current step in flight */
	int err; /* the first of theirs to fail */
	/*
	 * The partial end sectors it holds or waits for (their queues), and
	 * their copies; @ahead: those where another is before it.
	 */
	struct nbdl_rmw_slot lk[2];
	char *lk_buf[2];
	unsigned int nr_lk;
	unsigned int ahead;
	struct nbdl_split *grant_next; /* rmw_unlock_edges' list */
	char hb[SECTOR_SIZE], tb[SECTOR_SIZE];
};

/*
 * A data bio over the span: the partial sectors come from @hb/@tb, the
 * whole ones straight from the caller's buffer.
 */
static struct bio *span_bio(unsigned int opf, const struct span *s, char *buf,
			    uint64_t off, char *hb, char *tb)
{
	struct bio *bio;
	int r = 0;

	bio = bio_alloc(3, opf);
	if (!bio)
		return NULL;
	bio->bi_iter.bi_sector = s->start >> SECTOR_SHIFT;
	if (s->head || s->one)
		r = bio_add_buf(bio, hb, SECTOR_SIZE);
	if (!r && s->mid_end > s->mid_start)
		r = bio_add_buf(bio, buf + (s->mid_start - off),
				(unsigned int)(s->mid_end - s->mid_start));
	if (!r && s->tail && !s->one)
		r = bio_add_buf(bio, tb, SECTOR_SIZE);
	if (r) {
		bio_put(bio);
		return NULL;
	}
	return bio;
}

/* A bio over [start, start + len) of the volume, with @buf's bytes or none. */
static struct bio *range_bio(unsigned int opf, void *buf, uint64_t start,
			     uint64_t len)
{
	struct bio *bio = bio_alloc(buf ? 1 : 0, opf);

	if (!bio)
		return NULL;
	bio->bi_iter.bi_sector = start >> SECTOR_SHIFT;
	if (!buf) {
		bio->bi_iter.bi_size = (uint32_t)len;
	} else if (bio_add_buf(bio, buf, (unsigned int)len)) {
		bio_put(bio);
		return NULL;
	}
	return bio;
}

/* Fill the request's part of the edge sectors from @src, or with zeroes. */
static void patch_edges(const struct span *s, const char *src, uint64_t off,
			uint64_t count, char *hb, char *tb)
{
	uint64_t end = off + count, n, tail_start;

	if (s->one || s->head) {
		n = (s->one ? end : s->mid_start) - off;
		if (src)
			memcpy(hb + (off - s->start), src, n);
		else
			memset(hb + (off - s->start), 0, n);
	}
	if (s->tail && !s->one) {
		tail_start = s->end - SECTOR_SIZE;
		if (src)
			memcpy(tb, src + (tail_start - off), end - tail_start);
		else
			memset(tb, 0, end - tail_start);
	}
}

/*
 * The read-modify-write of an unaligned write or write-zeroes, carried out
 * without waiting: bios that end through bio_endio on the submitting
 * thread, one step after another, the caller's bio (the parent) ended
 * last.  The steps:
 *
 *  1. (a fast zero only) the whole sectors, which alone may refuse, so
 *     that a refusal changes nothing;
 *  2. take the partial end sectors (rmw_lock_edges), queueing for
 *     each, first come first served, behind other read-modify-writes;
 *  3. read them (rmw_read_endio), then patch in the request's bytes;
 *  4. write them and the whole sectors between: for a write the parent's
 *     own vector, one bio over the span; for zeroes the edge sectors and
 *     the whole ones, apart (rmw_write_endio); then let the sectors go,
 *     each to the next request in its queue.
 *
 * Two unaligned writes into one sector must not lose each other's bytes:
 * each holds its edge sectors from before its read until after its write,
 * so no other read-modify-write of them comes between.  Nothing is
 * written before both edges were read: a failed read fails the request
 * with the data as it was.  The whole sectors of a request overlap
 * byte-wise any other request into them, aligned or not, and NBD leaves
 * the order of overlapping requests in flight unspecified: they need no
 * lock, and aligned requests never take one.
 */
_Static_assert(offsetof(struct nbdl_split, call) == 0,
	       "rmw_of_call: the call comes first");
#define rmw_of_call(c) ((struct nbdl_split *)(c))

static void rmw_end(struct nbdl_split *sp, int err)
{
	struct bio *parent = sp->parent;

	/* The caller's end_io frees @sp (nbdl_split_end). */
	bio_endio(parent, parent->bi_iter.bi_size, err);
}

/* The sectors that only part of the request covers. */
static void rmw_edges_of(struct nbdl_split *sp)
{
	const struct span *s = &sp->s;

	sp->nr_lk = 0;
	if (s->head || s->one) {
		sp->lk[sp->nr_lk].sector = s->start >> SECTOR_SHIFT;
		sp->lk_buf[sp->nr_lk++] = sp->hb;
	}
	if (s->tail && !s->one) {
		sp->lk[sp->nr_lk].sector = (s->end >> SECTOR_SHIFT) - 1;
		sp->lk_buf[sp->nr_lk++] = sp->tb;
	}
}

/*
 * The export's table of partial sectors in read-modify-writes: each
 * bucket chains the heads of their queues (rmw_slot's), the request that
 * holds the sector.  A multiplicative hash: neighbouring sectors, which
 * unaligned writes along a file touch, go to different buckets.
 */
static struct nbdl_rmw_slot **rmw_bucket(struct nbdl_export *e, sector_t s)
{
	return &e->rmw_sectors[(uint64_t)s * 0x9e3779b97f4a7c15ull >>
			       (64 - NBDL_RMW_BUCKET_BITS)];
}

/* Caller holds rmw_lock: the queue of sector @s (its head), or NULL. */
static struct nbdl_rmw_slot *rmw_queue(struct nbdl_export *e, sector_t s)
{
	struct nbdl_rmw_slot *h;

	for (h = *rmw_bucket(e, s); h; h = h->bnext)
		if (h->sector == s)
			return h;
	return NULL;
}
/* Send @n bios of one step, each ending in @end_io, @sp's next step. */
static void rmw_submit(struct nbdl_split *sp, struct bio **bio, unsigned int n,
		       bio_end_io_t *end_io)
{
	struct target *vol = sp->e->vol;
	unsigned int i;

	sp->pending = n;
	for (i = 0; i < n; i++) {
		bio[i]->bi_private = sp;
		bio[i]->bi_end_io = end_io;
		bio[i]->bi_trace = sp->parent->bi_trace;
	}
	/* The last one may end at once and free @sp: only @bio from here. */
	for (i = 0; i < n; i++)
		submit_bio(vol, bio[i]);
}

/* A bio of the step ended: true when it was the last one. */
static bool rmw_bio_done(struct bio *bio, struct nbdl_split **out)
{
	struct nbdl_split *sp = bio->bi_private;

	if (bio->bi_status && !sp->err)
		sp->err = bio->bi_status;
	bio_put(bio);
	*out = sp;
	return !--sp->pending;
}

/* One bio per edge sector, over its copy; 0 or -ENOMEM (none made). */
static int rmw_edge_bios(struct nbdl_split *sp, unsigned int opf,
			 struct bio **bio)
{
	for (unsigned int i = 0; i < sp->nr_lk; i++) {
		bio[i] = range_bio(opf, sp->lk_buf[i],
				   (uint64_t)sp->lk[i].sector << SECTOR_SHIFT,
				   SECTOR_SIZE);
		if (!bio[i]) {
			while (i--)
				bio_put(bio[i]);
			return -ENOMEM;
		}
	}
	return 0;
}

static void rmw_read_edges(struct nbdl_split *sp);

/*
 * Take @sp's edge sectors, or queue for them: each sector has its queue,
 * first come first served, whose head holds it; @sp goes on (reads them)
 * once it heads the queues of both, handed them by whoever let them go
 * (rmw_unlock_edges), on its own thread (rmw_resume).  It joins both
 * queues at once, under the lock, so the queues agree on who came first
 * and a request waits only for older ones: no two wait for each other.
 */
static void rmw_lock_edges(struct nbdl_split *sp)
{
	struct nbdl_export *e = sp->e;
	struct nbdl_rmw_slot *sl, *h, **pp;
	unsigned int i, ahead = 0;
	int r = 0;

	pthread_mutex_lock(&e->rmw_lock);
	for (i = 0; i < sp->nr_lk; i++)
		ahead += rmw_queue(e, sp->lk[i].sector) != NULL;
	/* Before queueing: a request that cannot be woken must not wait. */
	if (ahead)
		r = ioq_call_expect(sp->q);
	for (i = 0; !r && i < sp->nr_lk; i++) {
		sl = &sp->lk[i];
		sl->sp = sp;
		sl->qnext = NULL;
		h = rmw_queue(e, sl->sector);
		if (h) {
			h->qtail->qnext = sl;
			h->qtail = sl;
		} else {
			sl->qtail = sl;
			pp = rmw_bucket(e, sl->sector);
			sl->bnext = *pp;
			*pp = sl;
		}
	}
	sp->ahead = ahead;
	pthread_mutex_unlock(&e->rmw_lock);
	if (r)
		rmw_end(sp, r);
	else if (!ahead)
		rmw_read_edges(sp);
}

/* Handed its sectors by the request that let them go (rmw_unlock_edges). */
static void rmw_resume(struct ioq_call *c)
{
	rmw_read_edges(rmw_of_call(c));
}

/*
 * Let @sp's edge sectors go: each passes to the next in its queue, and a
 * request that now heads the queues of all its sectors goes on, on its
 * own thread.  However many wait for a sector, letting it go is the same
 * work.
 */
static void rmw_unlock_edges(struct nbdl_split *sp)
{
	struct nbdl_export *e = sp->e;
	struct nbdl_split *granted = NULL, *w;
	struct nbdl_rmw_slot *sl, *next, **pp;

	pthread_mutex_lock(&e->rmw_lock);
	for (unsigned int i = 0; i < sp->nr_lk; i++) {
		sl = &sp->lk[i];
		for (pp = rmw_bucket(e, sl->sector); *pp != sl;
		     pp = &(*pp)->bnext)
			;
		next = sl->qnext;
		if (!next) {
			*pp = sl->bnext;
			continue;
		}
		/* The next one heads the queue, in @sl's place. */
		next->qtail = sl->qtail;
		next->bnext = sl->bnext;
		*pp = next;
		if (!--next->sp->ahead) {
			next->sp->grant_next = granted;
			granted = next->sp;
		}
	}
	pthread_mutex_unlock(&e->rmw_lock);
	/* Posted, a request may end and be freed at once: its next first. */
	while (granted) {
		w = granted;
		granted = w->grant_next;
		ioq_call_post(w->q, &w->call);
	}
}

static void rmw_write_endio(struct bio *bio)
{
	struct nbdl_split *sp;

	if (!rmw_bio_done(bio, &sp))
		return;
	rmw_unlock_edges(sp);
	rmw_end(sp, sp->err);
}

/* The edges are merged: write them and the whole sectors between. */
static void rmw_write(struct nbdl_split *sp)
{
	const struct span *s = &sp->s;
	struct bio *bio[3];
	unsigned int n = 0;
	int r = 0;

	if (sp->type == NBD_CMD_WRITE) {
		/* The parent's vector: the edge copies and the payload. */
		bio[n] = bio_clone(sp->parent);
		if (bio[n])
			n++;
		else
			r = -ENOMEM;
	} else {
		r = rmw_edge_bios(sp, REQ_OP_WRITE | (sp->opf & REQ_FUA), bio);
		if (!r)
			n = sp->nr_lk;
		/* A fast zero's whole sectors are zeroed already. */
		if (!r && !(sp->opf & REQ_NOFALLBACK) &&
		    s->mid_end > s->mid_start) {
			bio[n] = range_bio(sp->opf, NULL, s->mid_start,
					   s->mid_end - s->mid_start);
			if (bio[n]) {
				n++;
			} else {
				r = -ENOMEM;
				while (n--)
					bio_put(bio[n]);
			}
		}
	}
	if (r) {
		rmw_unlock_edges(sp);
		rmw_end(sp, r);
		return;
	}
	rmw_submit(sp, bio, n, rmw_write_endio);
}

static void rmw_read_endio(struct bio *bio)
{
	struct nbdl_split *sp;

	if (!rmw_bio_done(bio, &sp))
		return;
	/* Nothing written yet: the request fails with the data as it was. */
	if (sp->err) {
		rmw_unlock_edges(sp);
		rmw_end(sp, sp->err);
		return;
	}
	patch_edges(&sp->s, sp->src, sp->offset, sp->len, sp->hb, sp->tb);
	rmw_write(sp);
}

/* Holding the edge sectors: read them into their copies. */
static void rmw_read_edges(struct nbdl_split *sp)
{
	struct bio *bio[2];
	int r;

	r = rmw_edge_bios(sp, REQ_OP_READ, bio);
	if (r) {
		rmw_unlock_edges(sp);
		rmw_end(sp, r);
		return;
	}
	rmw_submit(sp, bio, sp->nr_lk, rmw_read_endio);
}

static void rmw_zero_mid_endio(struct bio *bio)
{
	struct nbdl_split *sp;

	if (!rmw_bio_done(bio, &sp))
		return;
	if (sp->err)
		rmw_end(sp, sp->err); /* refused (or failed): nothing else */
	else
		rmw_lock_edges(sp);
}

/*
 * A fast zero must refuse before anything has changed, and only its whole
 * sectors can refuse: they go first, the edges after them.
 */
static void rmw_zero_mid(struct nbdl_split *sp)
{
	const struct span *s = &sp->s;
	struct bio *bio;

	/* Only edges: nothing faster than a write is possible. */
	if (s->mid_end == s->mid_start) {
		rmw_end(sp, -EOPNOTSUPP);
		return;
	}
	bio = range_bio(sp->opf, NULL, s->mid_start, s->mid_end - s->mid_start);
	if (!bio) {
		rmw_end(sp, -ENOMEM);
		return;
	}
	rmw_submit(sp, &bio, 1, rmw_zero_mid_endio);
}

int nbdl_split_start(struct nbdl_export *e, uint16_t type, uint16_t flags,
		     void *buf, uint64_t offset, uint32_t len,
		     struct bio_extents *ext, uint64_t trace,
		     struct nbdl_split **out, struct bio **biop)
{
	unsigned int opf = nbdl_opf(type, flags);
	struct nbdl_split *sp;
	struct bio *bio = NULL;
	const struct span *s;
	uint64_t n;
	int r = 0;

	*out = NULL;
	*biop = NULL;
	sp = calloc(1, sizeof(*sp));
	if (!sp)
		return -ENOMEM;
	sp->call.fn = rmw_resume;
	sp->e = e;
	sp->type = type;
	sp->opf = opf;
	sp->offset = offset;
	sp->len = len;
	sp->req_one = flags & NBD_CMD_FLAG_REQ_ONE;
	span_of(offset, len, &sp->s);
	s = &sp->s;
	switch (type) {
	case NBD_CMD_READ:
		bio = span_bio(opf, s, buf, offset, sp->hb, sp->tb);
		if (!bio)
			r = -ENOMEM;
		break;
	case NBD_CMD_WRITE:
		/* The write itself, once its edge copies are merged. */
		sp->rmw = true;
		sp->src = buf;
		bio = span_bio(opf, s, buf, offset, sp->hb, sp->tb);
		if (!bio)
			r = -ENOMEM;
		break;
	case NBD_CMD_WRITE_ZEROES:
		/* Stands for the request: never submitted itself. */
		sp->rmw = true;
		n = s->end - s->start;
		bio = range_bio(opf, NULL, s->start,
				n < NBDL_MAX_SPAN ? n : NBDL_MAX_SPAN);
		if (!bio)
			r = -ENOMEM;
		break;
	case NBD_CMD_TRIM:
		/* Advisory: only the whole sectors inside may go. */
		if (s->mid_end > s->mid_start) {
			bio = range_bio(opf, NULL, s->mid_start,
					s->mid_end - s->mid_start);
			if (!bio)
				r = -ENOMEM;
		}
		break;
	case NBD_CMD_CACHE:
		/* A hint: widened to sectors, and it may fall short. */
		n = s->end - s->start;
		bio = range_bio(opf, NULL, s->start,
				n < NBDL_MAX_SPAN ? n : NBDL_MAX_SPAN);
		if (!bio)
			r = -ENOMEM;
		break;
	case NBD_CMD_BLOCK_STATUS:
		n = s->end - s->start;
		/* An answer may cover less than was asked. */
		if (n > NBDL_MAX_SPAN)
			n = NBDL_MAX_SPAN;
		if (s->start + n - offset < len)
			sp->len = (uint32_t)(s->start + n - offset);
		ext->max = sp->req_one ? 1 : 0;
		bio = range_bio(opf, NULL, s->start, n);
		if (!bio)
			r = -ENOMEM;
		else
			bio->bi_ext = ext;
		break;
	default:
		r = -EINVAL;
		break;
	}
	if (r) {
		free(sp);
		return r;
	}
	if (sp->rmw)
		rmw_edges_of(sp);
	if (bio)
		bio->bi_trace = trace;
	*out = sp;
	*biop = bio;
	return 0;
}

void nbdl_split_submit(struct nbdl_split *sp, struct bio *bio)
{
	if (!sp->rmw) {
		submit_bio(sp->e->vol, bio);
		return;
	}
	sp->parent = bio;
	sp->q = ioq_current();
	if (!sp->q)
		rmw_end(sp, -ENXIO);
	else if (sp->opf & REQ_NOFALLBACK)
		rmw_zero_mid(sp);
	else
		rmw_lock_edges(sp);
}

int nbdl_split_end(struct nbdl_split *sp, int err, void *buf,
		   struct bio_extents *ext, size_t max_extents)
{
	const struct span *s = &sp->s;
	uint64_t end = sp->offset + sp->len, tail_start;
	char *dst = buf;

	if (!err && sp->type == NBD_CMD_READ) {
		if (s->one) {
			memcpy(dst, sp->hb + (sp->offset - s->start), sp->len);
		} else {
			if (s->head)
				memcpy(dst, sp->hb + (sp->offset - s->start),
				       s->mid_start - sp->offset);
			if (s->tail) {
				tail_start = s->end - SECTOR_SIZE;
				memcpy(dst + (tail_start - sp->offset), sp->tb,
				       end - tail_start);
			}
		}
	} else if (!err && sp->type == NBD_CMD_BLOCK_STATUS) {
		err = nbdl_extents_finish(ext, s->start, sp->offset, sp->len,
					  sp->req_one ? 1 : max_extents);
	}
	free(sp);
	return err;
}

/* ---- extents ---- */

int nbdl_extents_finish(struct bio_extents *ext, uint64_t span_start,
			uint64_t offset, uint64_t count, size_t max_extents)
{
	uint64_t skip = offset - span_start, next = 0, covered = 0;
	size_t i, n = 0;

	bio_extents_finish(ext);
	for (i = 0; i < ext->nr && n < max_extents && covered < count; i++) {
		struct bio_extent x = ext->v[i];

		if (x.offset != next || !x.length) {
			/* After a piece that stopped short, a gap ends it. */
			if (ext->cut && x.offset > next && n)
				break;
			return -EIO; /* a gap or an overlap */
		}
		next = x.offset + x.length;
		if (next <= skip)
			continue; /* wholly before @offset (widened span) */
		if (x.offset < skip) {
			x.length -= skip - x.offset;
			x.offset = skip;
		}
		if (x.length > count - covered)
			x.length = count - covered;
		ext->v[n++] = (struct bio_extent){ .offset = covered,
						   .length = x.length,
						   .flags = x.flags };
		covered += x.length;
	}
	ext->nr = n;
	return n ? 0 : -EIO;
}

/* ---- synchronous requests ---- */

static void split_wait_endio(struct bio *bio)
{
	*(bool *)bio->bi_private = true;
}

/* nbdl_split_submit, waited for on this thread's ioq (nbdkit's threads). */
static int split_submit_wait(struct nbdl_split *sp, struct bio *bio)
{
	struct ioq *q = ioq_current();
	bool done = false;

	if (!q)
		return -ENXIO;
	bio->bi_private = &done;
	bio->bi_end_io = split_wait_endio;
	nbdl_split_submit(sp, bio);
	ioq_wait_for(q, &done);
	return bio->bi_status;
}

static int do_request(struct nbdl_export *e, uint16_t type, uint16_t flags,
		      void *buf, uint64_t offset, uint32_t len,
		      struct bio_extents *ext, size_t max_extents)
{
	unsigned int opf = nbdl_opf(type, flags);
	struct nbdl_split *sp;
	struct bio *bio;
	int r;

	if (type == NBD_CMD_FLUSH)
		return do_direct(e, opf, NULL, 0, 0, NULL);
	if (!len)
		return 0;
	if (nbdl_is_direct(type, offset, len) && type != NBD_CMD_BLOCK_STATUS)
		return do_direct(e, opf,
				 type == NBD_CMD_READ || type == NBD_CMD_WRITE ?
					 buf :
					 NULL,
				 offset, len, NULL);
	r = nbdl_split_start(e, type, flags, buf, offset, len, ext, cur_trace,
			     &sp, &bio);
	if (r)
		return r;
	if (bio) {
		r = split_submit_wait(sp, bio);
		bio_put(bio);
	}
	return nbdl_split_end(sp, r, buf, ext, max_extents);
}

int nbdl_do(struct nbdl_export *e, uint16_t type, uint16_t flags, void *buf,
	    uint64_t offset, uint32_t len, struct bio_extents *ext,
	    size_t max_extents, uint64_t trace)
{
	int r;

	cur_trace = trace;
	r = do_request(e, type, flags, buf, offset, len, ext, max_extents);
	cur_trace = 0;
	return r;
}
