/* SPDX-License-Identifier: MIT */
/*
 * target.h - stackable "block devices" that bios are submitted to.
 *
 * A target is a small ops table plus its size.  The stripe target's members
 * are targets too, so a file, a fault-injecting target (tests/support) or a
 * later remote target slot in under it without the stripe code knowing.
 * Front ends do not assemble targets themselves: volume.h does that.
 */
#ifndef BIONBD_TARGET_H
#define BIONBD_TARGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <bionbd/bio.h>

struct target;

/* Where a range of a target lies: the answer of target_iomap(). */
struct target_iomap {
	int fd; /* a file the caller may read (never close) */
	uint64_t file_offset;
	uint64_t length; /* bytes from the range's start, > 0, <= its length */
	bool hole; /* TARGET_IOMAP_HOLE asked: all of @length reads as zeros */
	struct target *src; /* the target at the bottom that answered, or a
			     * member stacked on it (fault.h) */
};

/* target_iomap flags */
#define TARGET_IOMAP_HOLE 1u /* tell a hole at the start from data */

/*
 * Never reorder: targets outside the engine may fill this in by position.
 * All callbacks run on the submitting thread.
 */
/* A mirror's member as target_member_states() sees it. */
struct target_member_state {
	const char *name; /* the member target's: valid while @t lives */
	enum {
		TARGET_MEMBER_ACTIVE,
		TARGET_MEMBER_FAULTY,
		TARGET_MEMBER_REBUILDING,
	} state;
	/* rebuilding: data bytes copied (its checkpoint while not copying) */
	uint64_t rebuilt;
	uint64_t bytes; /* rebuilding: of this many */
};

struct target_ops {
	/*
	 * Required.  Start @bio (already checked to lie inside the target).
	 * Completion, now or later, is bio_endio() on the submitting thread's
	 * ioq (ioq.h).  Must not fail synchronously other than through
	 * bio_endio().
	 */
	void (*submit)(struct target *t, struct bio *bio);
	/* Required.  Free the target (and, for stacked ones, what they own). */
	void (*destroy)(struct target *t);
	/*
	 * Optional.  Start the @nr bios a plug held back for @t (see
	 * blk_start_plug), in the order they were submitted; neighbours may
	 * go down as one I/O.  Only targets that call blk_plug_add need it.
	 */
	void (*unplug)(struct target *t, struct bio **bios, unsigned int nr);
	/*
	 * Optional.  Where the bytes at @off (in range, @len > 0) lie, for a
	 * caller that moves them itself (sendfile): see target_iomap().
	 * -EOPNOTSUPP if @t never answers, whatever the range.
	 */
	int (*iomap)(struct target *t, uint64_t off, uint64_t len,
		     unsigned int flags, struct target_iomap *m);
	/* Optional.  See target_start(). */
	void (*start)(struct target *t);
	/* Optional.  See target_iomap_short(). */
	int (*iomap_short)(struct target *t, struct target *src,
			   uint64_t off);
	/* Optional.  See target_zero_refused(). */
	bool (*zero_refused)(struct target *t, uint64_t off, uint64_t len,
			     unsigned int opf);
	/* Optional.  See target_lost(). */
	bool (*lost)(struct target *t);
	/* Optional.  See target_member_states(). */
	unsigned int (*member_states)(struct target *t,
				      struct target_member_state *out,
				      unsigned int max);
};

struct target {
	const struct target_ops *ops;
	char *name; /* for messages: a path, or "stripe" */
	uint64_t size_bytes;
	uint32_t trace_id; /* a member's name in the trace (trace.h), or 0 */
	/*
	 * Consistency across connections is not promised below (a remote
	 * member without multi-conn): the export must not advertise
	 * NBD_FLAG_CAN_MULTI_CONN.  Stacked targets inherit it.
	 */
	bool single_conn;
	/* Writes are refused below (a read-only remote): so is the volume. */
	bool readonly;
	/*
	 * Every bio costs a request to another machine (a remote or RBD
	 * member) and nothing below merges neighbours, so a range is better
	 * sent whole than in chunk-sized pieces: a stripe of one such member
	 * passes its bios through unsplit.  Stacked targets inherit it.
	 */
	bool whole_io;
};

/**
 * target_member_states - a mirror's members now, in role order, into @out
 * (at most @max; a role without a member is left out), for statistics.
 * 0 for a target that has no such states (a stripe, a file).
 */
unsigned int target_member_states(struct target *t,
				  struct target_member_state *out,
				  unsigned int max);

/**
 * submit_bio - send @bio to @t
 *
 * The range is checked here, once, for every target: past the end a write
 * or write-zeroes bio ends with -ENOSPC and any other with -EINVAL, as the
 * NBD spec's error rules expect.  Must run on a thread with a current
 * ioq (ioq_set_current).
 */
void submit_bio(struct target *t, struct bio *bio);

/**
 * submit_bio_wait - submit @bio to @t and wait for it on the current ioq
 *
 * Takes over @bio's end_io and private for the duration.  Other bios on the
 * same ioq keep completing meanwhile.  Returns the bio's status (0/-errno).
 */
int submit_bio_wait(struct target *t, struct bio *bio);

/*
 * Plugging, after the kernel's blk_start_plug()/blk_finish_plug(): while a
 * plug is active on a thread, targets that can merge (files done inline,
 * see ioq.h) hold back the reads and writes submitted to them, and
 * blk_finish_plug() hands each target its share at once.  The stripe target
 * plugs around its split loop, so the pieces of one big bio that lie back
 * to back on a member (chunks k, k + N, k + 2N ...) cost one system call
 * instead of one each.  Plugs do not nest: an inner start is a no-op and
 * the outermost finish issues everything.  A plug lives on the stack of
 * one function and never outlives it.
 */
#define BLK_PLUG_MAX 32

struct blk_plug {
	unsigned int nr;
	struct {
		struct target *t;
		struct bio *bio;
	} ent[BLK_PLUG_MAX];
};

void blk_start_plug(struct blk_plug *plug);
void blk_finish_plug(struct blk_plug *plug);
/*
 * For targets' submit: hold @bio for @t (which must have ->unplug) in the
 * thread's active plug.  False when there is none: submit it now.
 */
bool blk_plug_add(struct target *t, struct bio *bio);

/**
 * target_iomap - where the first bytes of [@off, @off + @len) of @t lie
 *
 * For a front end that hands the data of a read to the kernel itself
 * (sendfile from the file to the socket) instead of submitting a bio: @m
 * gets the file, the offset in it, and how many bytes from @off lie there
 * back to back.  Reading past the file's current end gives no bytes
 * (sendfile returns 0): the range reads as zeros, as a bio's would.
 *
 * Only targets whose data is in memory answer (members on tmpfs or ramfs):
 * reading them never waits for storage, so the caller may do it on its
 * event loop, and never fails but for a file shrunk behind the server's
 * back.  With TARGET_IOMAP_HOLE, a range that starts in a hole says so
 * (@m->hole, @m->length the hole's part); data is not looked into.
 *
 * Returns 0, -EINVAL (out of range or @len 0) or -EOPNOTSUPP, which @t
 * gives for every range if it gives it for one.
 */
int target_iomap(struct target *t, uint64_t off, uint64_t len,
		 unsigned int flags, struct target_iomap *m);

/**
 * target_start - start the background work of @t and what is below it (a
 * mirror's rebuild onto spares, an RBD member's cluster connection).
 * Front ends call it once serving, after any fork: threads do not survive
 * one.  Targets without such work ignore it.
 */
void target_start(struct target *t);

/**
 * target_iomap_short - the file of a mapping of @t (@src, from
 * target_iomap) ended before the data at volume offset @off: it was cut
 * behind the server's back.  A mirror takes that member out of service
 * (the next target_iomap maps another copy) and returns 0, or -EIO when it
 * held the last copy (the data cannot be sent); targets that cannot do
 * better return -EOPNOTSUPP: the range reads as zeros.
 */
int target_iomap_short(struct target *t, struct target *src, uint64_t off);

/**
 * target_zero_refused - a fast zero (REQ_OP_WRITE_ZEROES with @opf's
 * REQ_NOFALLBACK, and REQ_NOUNMAP if asked) of @len bytes at @off would
 * certainly be refused (-EOPNOTSUPP), as far as @t knows without trying
 * (an RBD image: not whole objects, or a clone).  False when it would be
 * tried, or @t cannot tell (a file: its file system answers).  A target that cuts a request into pieces asks
 * each member first, so that a refusal changes nothing.
 */
bool target_zero_refused(struct target *t, uint64_t off, uint64_t len,
			 unsigned int opf);

/**
 * target_lost - @t knows it may have lost writes it acknowledged, with no
 * failed request to show for it (a file whose flush failed, a remote
 * that closed a connection holding unflushed writes): its flushes fail
 * from then on.  A mirror takes such a member out before it reads from it
 * again.  False for targets that cannot tell.
 */
bool target_lost(struct target *t);

/** target_destroy - free a target and everything below it. */
void target_destroy(struct target *t);

/*
 * Errors from the bottom of the stack (a member file) are reported once,
 * with the member's name and the offset inside it, through this hook; front
 * ends point it at nbdkit_error or their log.  Called on the completing
 * thread, i.e. the submitter's.  NULL (the default) reports nothing.
 */
typedef void target_error_fn(const struct target *t, enum req_op op,
			     uint64_t offset, uint64_t length, int err);
void target_set_error_reporter(target_error_fn *fn);

/*
 * For targets: report that @bio failed with @err through that hook.  The
 * target at the bottom that saw the error calls it, once.
 */
void target_report_error(const struct target *t, const struct bio *bio,
			 int err);

/* -------- file target -------- */

struct file_target_opts {
	bool readonly;
	bool direct; /* O_DIRECT: buffers and offsets must be 512-aligned */
	bool no_inline; /* use the backend even on tmpfs/ramfs (see ioq.h) */
	/*
	 * A read that meets the end of the file fails with -EIO instead of
	 * reading zeros: for members whose size was checked at open (those
	 * of a self-describing volume), a shorter file now means it was cut
	 * behind the server's back, and a mirror must take the data from
	 * another copy rather than serve zeros.
	 */
	bool eof_error;
	/*
	 * Count this member's I/O (stats.h) in a statistics object of its
	 * own, named by its path, under this one; NULL: not counted.
	 */
	struct io_stats *stats_parent;
	/* The export's trace id: name this member in traces under it. */
	uint32_t trace_parent;
};

/**
 * file_target_open - a target backed by one existing file or block device
 *
 * Reads past the end of a regular file return zeros (unless eof_error),
 * so a short sparse member works.  Returns 0 or -errno (*out untouched on error).
 */
int file_target_open(struct target **out, const char *path,
		     const struct file_target_opts *opts);

/* -------- remote target (another server's NBD export) -------- */

/* Is @member an NBD URI (nbd://, nbds://, nbd+unix://, ...) rather than a path? */
bool remote_uri(const char *member);

/* What a remote export offers, learnt at open. */
struct remote_info {
	uint64_t size_bytes;
	uint32_t max_bytes; /* largest read or write command we send */
	bool readonly, flush, fua, trim, zero, fast_zero, cache, multi_conn;
	bool extents; /* base:allocation */
};

struct remote_opts {
	bool readonly;
	/* A connection or a request older than this fails with EIO (0: 5 s). */
	unsigned int timeout_ms;
	struct io_stats *stats_parent; /* as file_target_opts */
	uint32_t trace_parent;
};

/**
 * remote_probe - connect to @uri once, within @timeout_ms, and learn what
 * it offers.  Returns 0 or -errno with a one-line message naming @uri.
 */
int remote_probe(const char *uri, unsigned int timeout_ms,
		 struct remote_info *info, char *errbuf, size_t errlen);

/**
 * remote_target_open - a target that is the NBD export at @uri (libnbd's
 * URI syntax: nbd://HOST[:PORT]/EXPORT, nbd+unix:///EXPORT?socket=PATH,
 * nbds://... with tls-psk-file= or tls-certificates=)
 *
 * Probes it now (size and flags); each thread that submits later makes its
 * own connection.  A read-only export makes the target read-only
 * (target.readonly, with a notice).
 * What the remote lacks is carried out or answered honestly: FUA becomes
 * a flush after the write, write-zeroes without support writes zeros,
 * trim and cache become no-ops, a fast zero gets EOPNOTSUPP, extents all
 * read as data.  Returns 0 or -errno with a message.
 */
int remote_target_open(struct target **out, const char *uri,
		       const struct remote_opts *opts, char *errbuf,
		       size_t errlen);

/* -------- RBD target (a Ceph RBD image, librbd) -------- */

/*
 * rbd_close_all - close every RBD image handle this process opened, used
 * or not: for a parent about to _exit once it has forked the server.  Its
 * handles hold the images' exclusive locks (a superblock write at open
 * takes one); a process that leaves without closing them makes the
 * server's first write wait ~30 s, until the cluster sees the owner gone.
 * Nothing may use the handles afterwards.
 */
void rbd_close_all(void);

/*
 * rbd_release_locks - give up the exclusive locks this process's RBD
 * handles hold, keeping the handles: for a front end that may fork and
 * leave the parent behind without a hook of its own there (nbdkit); a
 * later write takes the lock again.
 */
void rbd_release_locks(void);

/*
 * rbd_wait_connecting - wait until every RBD member this process started
 * (target_start) has opened its image or given up for now: for a front
 * end about to say it serves, whose parent still holds the images.  An
 * image open for writing is watched, and a watch is what tells a second
 * server that the volume is in use (mdev_claim); were the parent's
 * handles closed before the child's are open, such a server could start
 * in between.
 */
void rbd_wait_connecting(void);

/* Is @member an RBD image (rbd:POOL/IMAGE...) rather than a path? */
bool rbd_member(const char *member);

/* A member on another machine: an NBD export or an RBD image. */
static inline bool member_is_remote(const char *member)
{
	return remote_uri(member) || rbd_member(member);
}

/**
 * rbd_probe - open the image @member names once and learn its size.
 * 0 or -errno with a message.
 */
int rbd_probe(const char *member, unsigned int timeout_ms, uint64_t *size,
	      char *errbuf, size_t errlen);

/**
 * rbd_target_open - a target that is the RBD image @member names:
 * rbd:POOL[/NAMESPACE]/IMAGE[@SNAP][:conf=PATH][:id=USER][:keyring=PATH]
 *
 * conf: a ceph.conf (default: $CEPH_CONF, then /etc/ceph/ceph.conf); id:
 * the client name without "client." (default admin); keyring: its key
 * (default: the conf's keyring).  A snapshot is read-only.  Bios complete
 * on the thread that submitted them; @opts->timeout_ms (0: 30 s) bounds
 * connecting and every request (EIO after it).  0 or -errno with a
 * message.
 */
int rbd_target_open(struct target **out, const char *member,
		    const struct remote_opts *opts, char *errbuf,
		    size_t errlen);

/* -------- stripe target (RAID-0) -------- */

struct stripe_geom {
	unsigned int nr_members;
	uint32_t chunk_bytes; /* power of two, >= 4096 */
	unsigned int chunk_shift;
	uint64_t data_offset; /* member bytes before the data (superblock) */
};

struct stripe_piece {
	unsigned int member;
	uint64_t member_offset;
	uint64_t length; /* bytes, up to the next chunk boundary */
};

/* Member lookups one extents bio may cost before it answers a prefix. */
#define STRIPE_MAX_EXTENT_PIECES 1024u

#define STRIPE_MIN_CHUNK 4096u
#define STRIPE_DEFAULT_CHUNK 65536u
#define STRIPE_MAX_CHUNK (1u << 30)

/**
 * stripe_chunk_valid - the one chunk rule: a power of two from
 * STRIPE_MIN_CHUNK to STRIPE_MAX_CHUNK.
 */
static inline bool stripe_chunk_valid(uint64_t chunk_bytes)
{
	return chunk_bytes >= STRIPE_MIN_CHUNK &&
	       chunk_bytes <= STRIPE_MAX_CHUNK &&
	       !(chunk_bytes & (chunk_bytes - 1));
}

/** stripe_geom_init - validate and precompute; returns 0 or -EINVAL. */
int stripe_geom_init(struct stripe_geom *g, unsigned int nr_members,
		     uint64_t chunk_bytes);

/**
 * stripe_member_bytes - the one per-member size rule: the bytes each member
 * must hold for a volume of @size_bytes (whole chunks: ceil(size / (N x C))
 * of them).  Returns 0 or -EFBIG when that does not fit in an off_t.
 */
int stripe_member_bytes(const struct stripe_geom *g, uint64_t size_bytes,
			uint64_t *out);

/**
 * stripe_map - the one place that maps a volume offset to a member
 * @g: geometry
 * @offset: volume byte offset
 * @length: bytes wanted from @offset on (> 0)
 * @p: filled with the member, the offset inside it and the length of the
 *     piece, which ends at @length or the chunk boundary, whichever is first
 *
 * Chunk k = offset / chunk lives on member k % N at data offset +
 * (k / N) * chunk (docs/format.md; the data offset is 0 for a headerless
 * volume).
 */
static inline void stripe_map(const struct stripe_geom *g, uint64_t offset,
			      uint64_t length, struct stripe_piece *p)
{
	uint64_t k = offset >> g->chunk_shift;
	uint64_t in_chunk = offset & (g->chunk_bytes - 1);
	uint64_t left = g->chunk_bytes - in_chunk;

	p->member = (unsigned int)(k % g->nr_members);
	p->member_offset = g->data_offset +
			   ((k / g->nr_members) << g->chunk_shift) + in_chunk;
	p->length = length < left ? length : left;
}

/**
 * stripe_target_create - RAID-0 over @nr targets
 * @members: array of @nr targets; on success the stripe owns them (the array
 *           itself stays the caller's)
 * @size_bytes: volume size; 0 means N x the smallest member rounded down to
 *              a whole stripe.  Otherwise each member must hold its share.
 * @data_offset: member bytes before the data (a superblock volume's; 0 for
 *               a headerless one), a multiple of @chunk_bytes
 *
 * Returns 0 or -EINVAL (bad geometry, members too small).
 */
int stripe_target_create(struct target **out, struct target **members,
			 unsigned int nr, uint64_t chunk_bytes,
			 uint64_t size_bytes, uint64_t data_offset);

/* -------- mirror target (RAID-1, RAID-10) -------- */

/*
 * md's "near" layout: chunk k of the volume has K copies, copy j at
 * position p = k * K + j of a RAID-0 over the N members, i.e. on member
 * p mod N at data offset + (p div N) * chunk.  RAID-1 is the case K = N:
 * copy j of every chunk is on member j at the volume offset itself, so a
 * RAID-1 bio is never split.
 */
struct mirror_geom {
	unsigned int nr_members; /* N */
	unsigned int copies; /* K, 2 to N */
	uint32_t chunk_bytes;
	unsigned int chunk_shift;
	uint64_t data_offset;
};

/** mirror_geom_init - validate and precompute; returns 0 or -EINVAL. */
int mirror_geom_init(struct mirror_geom *g, unsigned int nr_members,
		     unsigned int copies, uint64_t chunk_bytes);

/**
 * mirror_member_bytes - data bytes each member must hold for a volume of
 * @size_bytes: ceil(ceil(size / C) * K / N) chunks.  0 or -EFBIG.
 */
int mirror_member_bytes(const struct mirror_geom *g, uint64_t size_bytes,
			uint64_t *out);

/** mirror_map - where copy @j of the byte at volume @offset lies. */
static inline void mirror_map(const struct mirror_geom *g, uint64_t offset,
			      unsigned int j, unsigned int *member,
			      uint64_t *member_offset)
{
	uint64_t p = (offset >> g->chunk_shift) * g->copies + j;

	*member = (unsigned int)(p % g->nr_members);
	*member_offset = g->data_offset +
			 ((p / g->nr_members) << g->chunk_shift) +
			 (offset & (g->chunk_bytes - 1));
}

/* Member states, as the superblock's role table has them. */
enum mirror_state {
	MIRROR_ACTIVE = 0,
	MIRROR_FAULTY = 1,
	MIRROR_REBUILDING = 3, /* written like the others, never read */
};

/**
 * mirror_covered - do the members whose @state is MIRROR_ACTIVE hold at
 * least one copy of every chunk?
 */
bool mirror_covered(const struct mirror_geom *g, const uint8_t *state);

/*
 * What the mirror asks of whoever keeps its metadata (volume.c: the
 * superblocks).  Called under the mirror's lock, on the thread that saw
 * the failure, before the I/O that failed completes.
 */
struct mirror_hooks {
	/*
	 * Record @state (one entry per member, enum mirror_state) and the
	 * rebuild checkpoints (member data bytes rebuilt, for members
	 * rebuilding) durably on every member still in service, as a change
	 * of roles.  0 when at least one member has it; else -errno.
	 */
	int (*record)(void *arg, const uint8_t *state,
		      const uint64_t *checkpoint, unsigned int nr);
	/* Record how far member @m's rebuild got; not a change of roles. */
	int (*progress)(void *arg, unsigned int m, uint64_t checkpoint);
	/*
	 * Put a spare in place of faulty member @m: recorded as rebuilding
	 * from 0 (docs/format.md, "Rebuild"), its target in *@out.  -ENOENT
	 * when no spare is left.  Called on the mirror's rebuild thread.
	 */
	int (*spare)(void *arg, unsigned int m, struct target **out);
	/*
	 * Write the write-intent bitmap (@nr regions, bit r of byte r / 8)
	 * durably on every active member; 0 when at least one has it.
	 */
	int (*bitmap_write)(void *arg, const uint8_t *bits, uint32_t nr);
	/* Make every write completed so far durable on every member. */
	int (*sync)(void *arg);
	void *arg;
};

/**
 * mirror_target_create - RAID-1 or RAID-10 over @nr targets
 * @members: by role; NULL for a member that is missing (its @state must be
 *           MIRROR_FAULTY); on success the mirror owns them
 * @state: each member's state at start (enum mirror_state)
 * @checkpoint: members rebuilding: member data bytes already rebuilt (may
 *              be NULL: none)
 * @copies: K (@nr for RAID-1)
 * @size_bytes: the volume's size; every member must hold its share
 * @name: the volume's, for messages
 *
 * Writes go to every live copy and succeed when at least one did and the
 * copies that failed were marked faulty first (through @hooks); reads go
 * to one live copy (in turn) and move to another when one fails.
 * A member marked faulty is never read or written again.  When a failure
 * would leave some data without a live copy, the member is not marked:
 * the volume fails instead, and every later write ends with -EIO.
 *
 * Returns 0 or -EINVAL (bad geometry, members too small, or not a live
 * copy of every chunk) or -ENOMEM.
 */
int mirror_target_create(struct target **out, struct target **members,
			 const uint8_t *state, const uint64_t *checkpoint,
			 unsigned int nr,
			 unsigned int copies, uint64_t chunk_bytes,
			 uint64_t size_bytes, uint64_t data_offset,
			 const char *name);

/** mirror_set_hooks - set (or with NULL clear) the metadata hooks. */
void mirror_set_hooks(struct target *t, const struct mirror_hooks *hooks);

/**
 * mirror_bitmap_enable - keep a write-intent bitmap of regions of
 * 2^@shift volume bytes: before the first write to a clean region its bit
 * is written (hooks->bitmap_write) and synced; a region with no write for
 * a few seconds is cleared again, after hooks->sync.  After a crash, only
 * regions whose bit is set can hold copies that differ.  The hooks must be
 * set first.  Returns 0 or -ENOMEM/-EINVAL.
 */
int mirror_bitmap_enable(struct target *t, unsigned int shift);

/*
 * mirror_read_primary - read only the first live copy of each chunk, so
 * that copies which may differ (a read-only open after an unclean
 * shutdown) still give the same data every time.
 */
void mirror_read_primary(struct target *t);

/**
 * mirror_set_checkpoint - where member @m (rebuilding) resumes: lower only
 * (after an unclean shutdown, back to the first dirty bitmap region).
 */
void mirror_set_checkpoint(struct target *t, unsigned int m,
			   uint64_t checkpoint);

/** mirror_state_get - the current state of every member into @state. */
void mirror_state_get(struct target *t, uint8_t *state, unsigned int nr);

/* -------- notices -------- */

/*
 * Volume-level news for the front end's log: a member marked faulty, a
 * volume that failed, a resync's progress.  NULL (the default) drops them.
 */
enum target_notice_level { TARGET_NOTICE_INFO, TARGET_NOTICE_ERROR };
typedef void target_notice_fn(enum target_notice_level level,
			      const char *msg);
void target_set_notice_reporter(target_notice_fn *fn);
void target_notice(enum target_notice_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif /* BIONBD_TARGET_H */
