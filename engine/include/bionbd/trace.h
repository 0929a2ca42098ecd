/* SPDX-License-Identifier: MIT */
/*
 * trace.h - the bio trace: every request and bio event, blktrace-style,
 * written to one binary file (docs/trace.md has its layout).
 *
 * Events are produced on the I/O path by whichever thread handles the
 * request: each such thread appends to a ring of its own, without locks or
 * atomic read-modify-write; a writer thread empties the rings into the
 * file every few milliseconds.  A full ring drops the event and counts
 * it: the I/O never waits for the trace.  The writer records each drop
 * count in the file ('L' records) and the totals at the end ('E').
 *
 * A request's events share a sequence number (struct trace_rec.seq),
 * carried by its bio and every clone and split of it (bio->bi_trace), so
 * the parser can put a request's stages together: queued (Q), split (X),
 * issued to a member (D), completed by it (C), reply sent (R).
 */
#ifndef BIONBD_TRACE_H
#define BIONBD_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct bio;

/* ---- the file format (little-endian; docs/trace.md) ---- */

#define TRACE_MAGIC "BIONBDTR"
#define TRACE_VERSION 1
#define TRACE_HDR_BYTES 64
#define TRACE_REC_BYTES 56 /* an event record; 'N' records vary */
#define TRACE_NAME_MAX 4096

/* The file header. */
struct trace_file_hdr {
	char magic[8]; /* TRACE_MAGIC, no NUL */
	uint32_t version; /* TRACE_VERSION */
	uint32_t hdr_bytes; /* TRACE_HDR_BYTES */
	uint64_t realtime_ns; /* CLOCK_REALTIME when time 0 was */
	uint64_t start_ns; /* CLOCK_MONOTONIC of time 0 (for reference) */
	uint32_t pid;
	uint32_t ring_bytes; /* each thread's ring */
	uint8_t reserved[24];
};

/* Record types (trace_rec.type). */
enum {
	TRACE_Q = 'Q', /* request queued: the NBD request arrived */
	TRACE_X = 'X', /* a piece of it cut for one member (split/clone) */
	TRACE_D = 'D', /* a bio issued to a member */
	TRACE_C = 'C', /* that bio completed: status, latency since D */
	TRACE_R = 'R', /* the reply sent: status, latency since Q */
	TRACE_N = 'N', /* a name: an export or a member (struct trace_name) */
	TRACE_L = 'L', /* events lost: a ring was full (count in .offset) */
	TRACE_E = 'E', /* the end: events written (.offset), lost (.lat_ns) */
};

/* trace_rec.op: enum req_op's values (bio.h). */

/* trace_rec.flags: the low byte is the NBD command flags' (Q, R). */
enum {
	TRACE_F_FUA = 1u << 0,
	TRACE_F_NO_HOLE = 1u << 1, /* write-zeroes may not punch */
	TRACE_F_DF = 1u << 2, /* read: don't fragment */
	TRACE_F_REQ_ONE = 1u << 3, /* block status: one extent */
	TRACE_F_FAST_ZERO = 1u << 4,
	TRACE_F_NBD_MASK = 0xffu,
	TRACE_F_DROPPED = 1u << 8, /* R: never sent, the connection went */
	TRACE_F_SENDFILE = 1u << 9, /* D/C: sent from the member file */
};

/* One event: TRACE_REC_BYTES bytes. */
struct trace_rec {
	uint8_t type; /* TRACE_Q ... */
	uint8_t op; /* enum req_op */
	uint16_t len; /* of this record, bytes */
	uint16_t thread; /* the ring: 1, 2 ... in the order threads began */
	uint16_t flags; /* TRACE_F_* */
	uint64_t time_ns; /* since the header's start_ns */
	uint64_t seq; /* the request's; 0 when not a request's (L, E) */
	uint64_t offset; /* Q, X, R: volume bytes; D, C: member bytes */
	uint32_t size; /* bytes */
	uint32_t obj; /* Q, R: export; X, D, C: member (an 'N' id) */
	int32_t status; /* C, R: 0 or -errno */
	uint32_t conn; /* Q, R: the connection (1, 2 ...; 0 unknown) */
	uint64_t lat_ns; /* C: since D; R: since Q */
};

/* A name record, followed by @name_len bytes and zeros to 8 bytes. */
struct trace_name {
	uint8_t type; /* TRACE_N */
	uint8_t kind; /* TRACE_OBJ_* */
	uint16_t len; /* the whole record, a multiple of 8 */
	uint32_t obj; /* the id events use, from 1 */
	uint32_t parent; /* a member's export; 0 for an export */
	uint32_t name_len;
};

enum { TRACE_OBJ_EXPORT = 1, TRACE_OBJ_MEMBER = 2 };

_Static_assert(sizeof(struct trace_file_hdr) == TRACE_HDR_BYTES,
	       "trace header layout");
_Static_assert(sizeof(struct trace_rec) == TRACE_REC_BYTES,
	       "trace record layout");
_Static_assert(sizeof(struct trace_name) == 16, "trace name layout");

/* ---- recording ---- */

/* Nonzero while a trace is being written; tested before any event. */
extern int trace_enabled;

static inline bool trace_on(void)
{
	return __builtin_expect(__atomic_load_n(&trace_enabled,
						__ATOMIC_RELAXED),
				0);
}

#define TRACE_DEFAULT_RING (4u << 20)
#define TRACE_MIN_RING (4u << 10)

#define TRACE_MAX_RING (1u << 30)

/**
 * trace_open - create (or truncate) @path, mode 0600, for a trace with a
 * ring of @ring_bytes (0: TRACE_DEFAULT_RING) per thread that produces
 * events.  Nothing is recorded before trace_run(): open before forking
 * (so that a bad path is a message on the terminal), run after.  Returns
 * 0 or -errno, with a one-line reason in @errbuf.
 */
int trace_open(const char *path, size_t ring_bytes, char *errbuf,
	       size_t errlen);

/** trace_run - start recording: the writer thread.  0 or -errno. */
int trace_run(void);

/**
 * trace_stop - write what the rings hold and the end record, close the
 * file.  @written and @lost (may be NULL) get the event totals.  Call it
 * once no thread produces events any more (after the workers are joined).
 * Returns 0, or the -errno of the first failed write (the trace is cut
 * short then, and every later event counted lost).
 */
int trace_stop(uint64_t *written, uint64_t *lost);

/**
 * trace_obj_add - name an export (@parent 0) or a member of export
 * @parent, whether a trace is open or not (a later trace names it too):
 * returns the id its events carry, or 0 without memory (then its events
 * are not recorded).  Names last as long as the process.
 */
uint32_t trace_obj_add(unsigned int kind, uint32_t parent, const char *name);

/** trace_seq_next - a new request's sequence number, unique in the trace. */
uint64_t trace_seq_next(void);

/** trace_now - the trace's clock (CLOCK_MONOTONIC ns). */
uint64_t trace_now(void);

/**
 * trace_emit - record one event (time_ns an absolute trace_now() time,
 * which it may rewrite in @ev, relative to the trace's start; len and
 * thread are filled in).  Drops it, counted, when this thread's ring is
 * full or the trace has stopped.
 */
void trace_emit(struct trace_rec *ev);

/*
 * A traced bio's member events: D when it reaches member @obj (returns
 * the time, bio->bi_trace_t0), C when it completes (from bio_endio, with
 * what the bio's bi_trace_* fields kept of the issue).
 */
uint64_t trace_bio_issue(const struct bio *bio, uint32_t obj);
void trace_bio_complete(const struct bio *bio);

#endif /* BIONBD_TRACE_H */
