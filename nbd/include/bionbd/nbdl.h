/* SPDX-License-Identifier: MIT */
/*
 * nbdl.h - the NBD layer: NBD semantics that both front ends share.
 *
 * The nbdkit plugin and bionbd differ only in how bytes reach them (nbdkit
 * callbacks vs. sockets on libev loops).  Everything an NBD request means
 * lives here, once: the export type and how exports are opened ("check all,
 * then open all"), what a request may ask (flags, range, read-only), how it
 * becomes a bio (op and flags, alignment policy), how extents are reported,
 * which NBD error an errno becomes for a given command, the block sizes
 * both advertise, op names, and which member errors are worth an error
 * message.  No sockets, no nbdkit, no event loop: callers pass plain
 * values and get -errno or NBD error codes back.
 *
 * Alignment policy.  Both front ends advertise a minimum block size of 512
 * (the engine addresses sectors) but serve any request correctly, as the
 * spec asks of servers whose clients may not have negotiated block sizes
 * (NBD_OPT_EXPORT_NAME, or NBD_OPT_GO without NBD_INFO_BLOCK_SIZE): reads
 * bounce the partial end sectors, writes and write-zeroes read-modify-write
 * them holding them against other read-modify-writes, trims shrink to the whole sectors inside
 * (a trim is advisory), cache and block status widen to whole sectors.
 * Aligned requests, the only kind well-behaved clients send, never take the
 * lock and become one bio.  An unaligned one is carried out without
 * waiting (nbdl_split_submit: its edge reads and writes are bios that end
 * through bio_endio like any other), so that a front end with many
 * clients per thread goes on serving them meanwhile, however slow the
 * member under its edges.
 *
 * Threads: every function may be called from any thread; the ones that do
 * I/O need a current ioq (ioq_set_current): nbdl_do waits in it,
 * nbdl_split_submit's bios end on it.
 */
#ifndef BIONBD_NBDL_H
#define BIONBD_NBDL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <bionbd/bio.h>
#include <bionbd/config.h>
#include <bionbd/ioq.h>
#include <bionbd/nbd-proto.h>
#include <bionbd/stats.h>
#include <bionbd/target.h>
#include <bionbd/volume.h>

/* Block sizes both front ends advertise (NBD_INFO_BLOCK_SIZE). */
#define NBDL_MIN_BLOCK SECTOR_SIZE
/*
 * "No read-modify-write below this": the stripe has no such penalty at any
 * sector-aligned size, so it is the page size the members' page caches work
 * in, not the chunk (advertising the chunk would invite clients that honour
 * it strictly to read-modify-write every 4K write themselves).
 */
#define NBDL_PREF_BLOCK 4096u
#define NBDL_MAX_PAYLOAD (32u << 20)
/* Largest sector-aligned span one bio can describe (bi_size is 32 bits). */
#define NBDL_MAX_SPAN ((uint64_t)UINT32_MAX & ~(uint64_t)(SECTOR_SIZE - 1))

/* ---- exports ---- */

struct nbdl_split;

/*
 * One partial sector of a read-modify-write (nbd/request.c), in the
 * sector's queue: the head holds the sector and chains the export's
 * bucket; the others wait, first come first served.
 */
struct nbdl_rmw_slot {
	sector_t sector;
	struct nbdl_split *sp;
	struct nbdl_rmw_slot *qnext; /* the next request queued for it */
	struct nbdl_rmw_slot *qtail; /* the head's: the queue's last */
	struct nbdl_rmw_slot *bnext; /* the head's: its bucket's next */
};

/* Buckets of an export's table: 2 KiB, chains short for thousands held. */
#define NBDL_RMW_BUCKET_BITS 8

/* One served export: a striped volume and how it is presented. */
struct nbdl_export {
	char *name; /* NBD export name ("" for a command-line volume) */
	char *description; /* NULL = none */
	struct target *vol;
	uint64_t size_bytes;
	bool readonly;
	bool iomap; /* target_iomap() answers for vol: reads may be sendfile'd */
	struct volume_info info; /* superblocks, member order, data offset */
	/*
	 * The partial sectors of read-modify-writes in flight (see the top),
	 * a queue each, hashed: each request holds its edge sectors until its
	 * writes are done, those after it wait; the lock guards the table
	 * only, never held across I/O.
	 */
	pthread_mutex_t rmw_lock;
	struct nbdl_rmw_slot *rmw_sectors[1u << NBDL_RMW_BUCKET_BITS];
	/* Requests of the export; its members' are its children (stats.h). */
	struct io_stats *stats;
	uint32_t trace_id; /* its name in traces (trace.h) */
	/*
	 * The members its open created or grew, until the front end's start
	 * is over: nbdl_exports_unmake() or nbdl_exports_keep().  NULL: none.
	 */
	struct volume_made *made;
};

/**
 * nbdl_exports_open - check every definition, then open every export
 * @out: receives an array of @nr exports; the caller owns it
 *       (nbdl_exports_close)
 * @defs: @nr export definitions, e.g. a config's exports; not kept
 * @readonly: serve every export read-only whatever its definition says
 * @conf_path: the file @defs came from (for messages), or NULL
 * @errbuf: one line naming the export and the problem on failure, prefixed
 *          "FILE:LINE: [export NAME] " when @conf_path is given
 *
 * Nothing is created, extended or opened unless every export passes
 * volume_check() first and no two exports share storage (volume_overlap;
 * two read-only exports may).  When one export fails to open, the members
 * the others' opens created or grew are taken back (volume_unmake); when
 * all open, each export keeps that record for the front end's start (see
 * nbdl_exports_unmake).  Returns 0 or -errno.
 */
int nbdl_exports_open(struct nbdl_export **out, const struct conf_export *defs,
		      unsigned int nr, bool readonly, const char *conf_path,
		      char *errbuf, size_t errlen);

/**
 * nbdl_exports_close - flush every writable export, then close them all
 * @backend: backend of the temporary ioq made for the flush when the
 *           calling thread has none
 *
 * A failed flush is logged (nbdl_log); closing goes on.  NULL is fine.
 */
void nbdl_exports_close(struct nbdl_export *v, unsigned int nr,
			enum ioq_backend backend);

/**
 * nbdl_exports_unmake - the front end's start failed after the exports
 * opened: remove the members their opens created and cut the ones they
 * grew back to their old size (volume_unmake), leaving the member
 * directories as they were.  Only before any request was served.  The
 * exports stay open; @v NULL is fine.
 */
void nbdl_exports_unmake(struct nbdl_export *v, unsigned int nr);

/**
 * nbdl_exports_keep - the start succeeded: the members made are the
 * exports' for good, and nbdl_exports_unmake() does nothing from now on.
 * Closing the exports never takes them back either.
 */
void nbdl_exports_keep(struct nbdl_export *v, unsigned int nr);

/**
 * nbdl_export_find - the export named @name (@len bytes, not terminated);
 * the empty name is the first (default) export.  NULL when unknown.
 */
struct nbdl_export *nbdl_export_find(struct nbdl_export *v, unsigned int nr,
				     const void *name, size_t len);

/* ---- requests ---- */

/* What a connection negotiated that changes which requests are valid. */
struct nbdl_conn_opts {
	bool structured; /* NBD_OPT_STRUCTURED_REPLY */
	bool meta_alloc; /* base:allocation selected for this export */
};

/**
 * nbdl_transmission_flags - the NBD_FLAG_* an export is served with
 * (NBD_FLAG_SEND_DF only with structured replies).
 */
uint16_t nbdl_transmission_flags(const struct nbdl_export *e,
				 bool structured);

/**
 * nbdl_req_check - the spec's rules for one request header
 *
 * Unknown commands and flags not documented for the command: EINVAL;
 * writes, trims and zeroes on a read-only export: EPERM; ranges past the
 * end: ENOSPC for writes and write-zeroes, EINVAL otherwise; reads above
 * the maximum payload: EOVERFLOW with DF, else EINVAL; block status
 * without base:allocation or of length 0: EINVAL.  Alignment is not
 * checked (see the top).  Returns the NBD error, or 0 to go ahead; on an
 * error, @why says in a few words which rule the request broke (for a
 * human, in the reply's error chunk).
 */
uint32_t nbdl_req_check(const struct nbdl_export *e,
			const struct nbdl_conn_opts *co, uint16_t type,
			uint16_t flags, uint64_t offset, uint32_t len,
			const char **why);

/* What an NBD error value means, for a reply with no better reason. */
const char *nbdl_error_text(uint32_t nbd_err);

/**
 * nbdl_account - count request @type of @len bytes, answered with NBD
 * error @nbd_err (0: success), begun at @t0 (io_stats_start of the
 * export's statistics), in the export's statistics.  A request dropped
 * unanswered (its connection went) passes @type NBDL_ACCT_DROPPED: it only
 * leaves the in-flight count.
 */
#define NBDL_ACCT_DROPPED 0xffffu
void nbdl_account(struct nbdl_export *e, uint16_t type, uint32_t len,
		  uint32_t nbd_err, uint64_t t0);

/*
 * A request as the trace (trace.h) sees it: its Q event fills in @seq
 * (0: not traced) and @t0; its R event reports the rest.
 */
struct nbdl_trace {
	uint64_t seq;
	uint64_t t0; /* trace_now() at the Q event */
	uint64_t offset;
	uint32_t len;
	uint32_t conn; /* the front end's connection number; 0 unknown */
	uint16_t type, flags;
};

/**
 * nbdl_trace_queued - request @t (offset, len, conn, type and flags set)
 * arrived at @e: its Q event when a trace is running; @t->seq 0 else.
 */
void nbdl_trace_queued(const struct nbdl_export *e, struct nbdl_trace *t);

/**
 * nbdl_trace_reply - the reply to traced request @t went out with NBD
 * error @nbd_err, or never will (@dropped: its connection went): its R
 * event.  Clears @t->seq, so a request is replied to once.
 */
void nbdl_trace_reply(const struct nbdl_export *e, struct nbdl_trace *t,
		      uint32_t nbd_err, bool dropped);

/*
 * A front end's own part of the statistics document: called after the
 * exports, it writes `, "key": value` members of the top object.
 */
typedef void nbdl_stats_more_fn(FILE *f, void *arg);

/**
 * nbdl_stats_json - the statistics of @nr exports and their members as
 * one JSON document (docs/stats.md) on @f, with @more's part (may be
 * NULL).
 */
void nbdl_stats_json(FILE *f, struct nbdl_export *v, unsigned int nr,
		     nbdl_stats_more_fn *more, void *arg);

/**
 * nbdl_stats_probe - can the statistics be written to @path as
 * nbdl_stats_write does (its file aside made and removed again)?  For a
 * front end at start, as the user it will write them as: a mistake found
 * then, not when the counts of a whole run are lost at exit.  0 or -errno.
 */
int nbdl_stats_probe(const char *path);

/**
 * nbdl_stats_write - that document into @path, written aside and renamed
 * over it (a reader never sees half of one).  0 or -errno, logged.
 */
int nbdl_stats_write(const char *path, struct nbdl_export *v, unsigned int nr,
		     nbdl_stats_more_fn *more, void *arg);

/** nbdl_json_string - @s as a JSON string, quotes and escapes included. */
void nbdl_json_string(FILE *f, const char *s);

/** nbdl_stats_log - the same, a line per export and member, to the log. */
void nbdl_stats_log(struct nbdl_export *v, unsigned int nr);

/**
 * nbdl_cmd_op - the bio op of NBD command @type; REQ_OP_LAST for
 * NBD_CMD_DISC and types the protocol does not define.
 */
enum req_op nbdl_cmd_op(uint16_t type);

/** nbdl_opf - the bio op and flags for NBD command @type with @flags. */
unsigned int nbdl_opf(uint16_t type, uint16_t flags);

/**
 * nbdl_is_direct - true when the request becomes exactly one bio over
 * [offset, offset + len), i.e. nbdl_bio_alloc() may be used; false when it
 * needs nbdl_do() (unaligned, see the top).  FLUSH is always direct.
 */
bool nbdl_is_direct(uint16_t type, uint64_t offset, uint32_t len);

/**
 * nbdl_bio_alloc - the one bio of a direct request
 * @buf: READ and WRITE: the @len-byte payload, which must outlive the bio
 * @ext: BLOCK_STATUS: where the engine appends extents (offsets relative
 *       to @offset); see nbdl_extents_finish
 *
 * The caller sets bi_private and bi_end_io and submits to the export's
 * volume.  Returns the bio (one reference, the caller's) or NULL (ENOMEM).
 */
struct bio *nbdl_bio_alloc(uint16_t type, uint16_t flags, void *buf,
			   uint64_t offset, uint32_t len,
			   struct bio_extents *ext);

/**
 * nbdl_do - carry out one request synchronously on the current ioq
 * @e: the export (already checked by nbdl_req_check or nbdkit)
 * @buf: READ: receives @len bytes; WRITE: the @len bytes to write
 * @ext: BLOCK_STATUS: receives the extents, finished (nbdl_extents_finish)
 * @max_extents: BLOCK_STATUS: at most this many (REQ_ONE: 1)
 * @trace: the request's trace sequence number (nbdl_trace), 0: untraced
 *
 * Any alignment (see the top).  Returns 0 or -errno.
 */
int nbdl_do(struct nbdl_export *e, uint16_t type, uint16_t flags, void *buf,
	    uint64_t offset, uint32_t len, struct bio_extents *ext,
	    size_t max_extents, uint64_t trace);

/**
 * nbdl_split_start - begin a request nbdl_do would carry out (unaligned,
 * or a block status) without waiting for anything
 * @trace: as nbdl_do's
 * @out: set to the request's state, which nbdl_split_end frees
 * @bio: set to the bio that stands for the request (NULL: nothing to do),
 *       one reference, the caller's; the caller sets its bi_private and
 *       bi_end_io (and may add REQ_ASYNC) and hands it to
 *       nbdl_split_submit; @buf and @ext must outlive it
 *
 * Does no I/O.  Returns 0 or -errno (nothing to end).
 */
int nbdl_split_start(struct nbdl_export *e, uint16_t type, uint16_t flags,
		     void *buf, uint64_t offset, uint32_t len,
		     struct bio_extents *ext, uint64_t trace,
		     struct nbdl_split **out, struct bio **bio);

/**
 * nbdl_split_submit - carry out the request @sp stands for, without
 * waiting: its end_io runs on this thread once everything is done
 * @bio: the bio nbdl_split_start gave
 *
 * Most requests are @bio submitted to the export's volume.  A write or
 * write-zeroes read-modify-writes its partial end sectors: bios of its own,
 * each ending through bio_endio on this thread's ioq, one step after
 * another (a fast zero's whole sectors, which alone may refuse; the edge
 * sectors taken from other read-modify-writes, waiting without blocking
 * for one that holds them; read; merged; written with the whole sectors
 * between), then @bio is ended with the first error.  Nothing is written
 * unless both edges were read.  Needs a current ioq; its end_io may run
 * before this returns (an error found at once).
 */
void nbdl_split_submit(struct nbdl_split *sp, struct bio *bio);

/**
 * nbdl_split_end - finish what nbdl_split_start began, once its bio ended
 * with @err (0 when it made none): a read's edge bytes go into @buf, a
 * block status answer is finished as nbdl_do's.  Frees @sp.  Returns 0 or
 * -errno.
 */
int nbdl_split_end(struct nbdl_split *sp, int err, void *buf,
		   struct bio_extents *ext, size_t max_extents);

/**
 * nbdl_extents_finish - turn what the engine reported into a block status
 * answer
 * @ext: extents with offsets relative to @span_start, as the engine left
 *       them; rewritten to start at @offset (offset 0) and run without
 *       gaps, each of non-zero length, clipped to @count bytes and to
 *       @max_extents entries
 * @span_start: volume offset the engine's offsets count from (<= @offset)
 *
 * A prefix of the range is a valid answer (the spec allows it): it ends at
 * a gap after a member stopped short (@ext->cut, BIO_EXTENTS_MAX).
 * Returns 0, or -EIO when the engine's answer has any other gap, an
 * overlap, or does not reach @offset.
 */
int nbdl_extents_finish(struct bio_extents *ext, uint64_t span_start,
			uint64_t offset, uint64_t count, size_t max_extents);

/**
 * nbdl_errno_to_nbd - the NBD error for a request that failed with -errno
 * @err: 0 or -errno
 *
 * Per the spec's "Error values": EDQUOT and EFBIG are ENOSPC; ENOTSUP only
 * for WRITE_ZEROES with FAST_ZERO (otherwise an unsupported operation is
 * the server's failure: EIO); EOVERFLOW only for READ with DF (otherwise
 * EINVAL); anything unknown is EIO.  ESHUTDOWN too: NBD_ESHUTDOWN says
 * this server is going away and makes the client disconnect, which a
 * member's errno must not.
 */
uint32_t nbdl_errno_to_nbd(int err, uint16_t type, uint16_t flags);

/**
 * nbdl_nbd_to_errno - the errno that stands for NBD error @nbd_err (for
 * front ends, like nbdkit, that take an errno and map it themselves).
 */
int nbdl_nbd_to_errno(uint32_t nbd_err);

/* ---- names and messages ---- */

/** nbdl_op_name - "read", "write", "flush", "trim", "cache",
 *  "write-zeroes", "block-status" for a bio op. */
const char *nbdl_op_name(enum req_op op);

/** nbdl_cmd_name - the same words for an NBD command ("disc" too). */
const char *nbdl_cmd_name(uint16_t type);

enum nbdl_level {
	NBDL_ERROR,
	NBDL_INFO, /* start-up, shutdown: what an operator wants to see */
	NBDL_DEBUG,
};

typedef void nbdl_log_fn(enum nbdl_level level, const char *fmt,
			 va_list ap);

/**
 * nbdl_set_logger - where the layer's messages go (nbdkit_verror /
 * nbdkit_vdebug, or the server's log), and the engine's member-error hook
 * with them.  The policy is the layer's: a member error is one ERROR line
 * "member PATH: OP at offset N length L: REASON", except a refused fast
 * zero, which is an answer and not a failure (DEBUG).  NULL: stderr.
 */
void nbdl_set_logger(nbdl_log_fn *fn);

/**
 * nbdl_log_to_stderr - nbdl_set_logger(NULL), the lines prefixed
 * "@prefix: " (a program name; kept, not copied); debug lines are dropped.
 */
void nbdl_log_to_stderr(const char *prefix);

void nbdl_log(enum nbdl_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif /* BIONBD_NBDL_H */
