// SPDX-License-Identifier: MIT
/*
 * sbvol.c - the superblock side of an open self-describing volume.
 *
 * A target stacked on the stripe or the mirror that bios pass straight
 * through; what it adds is a metadata handle (mdev.h) per active member
 * (opened before a front end drops privileges; a local one holds an
 * exclusive flock(2) so that a second writer is refused) and everything
 * written through them, whatever the member is (a file, an NBD export or
 * an RBD image):
 *
 *  - the clean flag: cleared while the volume is open, set again when it
 *    is closed after its final flush, so that an unclean shutdown shows;
 *  - for a mirror, the role states: a member found faulty, stale or
 *    missing at start, or marked faulty while serving, is recorded in the
 *    superblocks of the members still active (the event counter bumped,
 *    so that the faulty one reads as stale if it comes back);
 *  - the write-intent bitmap the mirror keeps (mirror_bitmap_enable);
 *  - the resync after an unclean shutdown, before the volume serves: the
 *    regions the bitmap says were being written (every region when there
 *    is no valid bitmap) are compared copy by copy and made equal to the
 *    first live copy.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bionbd/mdev.h>
#include <bionbd/superblock.h>

#include "internal.h"

struct sbvol {
	struct target t;
	struct target *inner;
	bool mirror;
	unsigned int nr;
	uint64_t events; /* the superblocks' event counter */
	/*
	 * The members' handles, and the spares' below: the mirror calls its
	 * hooks from workers (a fault, under its lock), from its bitmap
	 * daemon and its rebuild thread, and a fault closes a handle that
	 * another hook may be using.  Every hook holds this while it looks.
	 */
	pthread_mutex_t md_lock;
	struct mdev *md[SB_MAX_ROLES]; /* by role; NULL: not in service */
	/*
	 * Spares not taken yet (NULL once taken or found unusable).  Each
	 * is opened whole at start, its data target too, and held until it
	 * takes a role over: after -u/-g the server may no longer be allowed
	 * to open it, and a mistake in its path or mode is said at start,
	 * not found at the fault it was there for.
	 */
	unsigned int nr_spares;
	char *spare_path[SB_MAX_ROLES];
	struct mdev *spare_md[SB_MAX_ROLES];
	struct target *spare_t[SB_MAX_ROLES];
	struct file_target_opts fopts; /* to count a spare's target with */
	uint32_t bitmap_regions; /* a mirror with a bitmap: its regions */
};

static void sbvol_submit(struct target *t, struct bio *bio)
{
	struct sbvol *sv = container_of(t, struct sbvol, t);

	sv->inner->ops->submit(sv->inner, bio);
}

static int sbvol_iomap(struct target *t, uint64_t off, uint64_t len,
		       unsigned int flags, struct target_iomap *m)
{
	struct sbvol *sv = container_of(t, struct sbvol, t);

	return target_iomap(sv->inner, off, len, flags, m);
}

/*
 * Read, change with @edit and write back the superblock of every member
 * in service.  Returns how many took it; *err gets the first failure.
 */
static unsigned int sb_rewrite(struct sbvol *sv,
			       void (*edit)(struct superblock *, void *),
			       void *arg, int *err)
{
	unsigned int written = 0;
	char why[256];

	*err = 0;
	for (unsigned int i = 0; i < sv->nr; i++) {
		struct superblock sb;
		int e;

		if (!sv->md[i])
			continue;
		e = sb_read(sv->md[i], &sb, why, sizeof(why));
		if (!e) {
			edit(&sb, arg);
			sb.utime = (uint64_t)time(NULL);
			e = sb_write(sv->md[i], &sb);
		}
		if (!e)
			written++;
		else if (!*err)
			*err = e;
	}
	return written;
}

struct clean_edit {
	bool clean;
	uint64_t events; /* 0: keep */
};

static void edit_clean(struct superblock *sb, void *arg)
{
	const struct clean_edit *ce = arg;

	if (ce->clean)
		sb->flags |= SB_FLAG_CLEAN;
	else
		sb->flags &= ~SB_FLAG_CLEAN;
	if (ce->events)
		sb->events = ce->events;
}

/*
 * Set or clear the clean flag on every member in service.  For a mirror
 * each mark (the start's dirty one, the clean stop's two) also moves the
 * event counter on, so that a member which missed a run (put back from an
 * old copy of its file) is two or more behind the others at the next
 * start: stale, rebuilt, never read.  A crash between two members' writes
 * of one mark leaves some one behind with the same roles: sb_assemble
 * keeps those, and resyncs.
 */
static int sb_mark(struct sbvol *sv, bool clean)
{
	struct clean_edit ce = { .clean = clean };
	int err;

	pthread_mutex_lock(&sv->md_lock);
	if (sv->mirror)
		ce.events = ++sv->events;
	sb_rewrite(sv, edit_clean, &ce, &err);
	pthread_mutex_unlock(&sv->md_lock);
	return err;
}

/* ---- mirror hooks ---- */

struct state_edit {
	const uint8_t *state;
	const uint64_t *checkpoint;
	unsigned int nr;
	uint64_t events;
};

static void edit_states(struct superblock *sb, void *arg)
{
	const struct state_edit *se = arg;

	for (unsigned int k = 0; k < se->nr && k < sb->nr_roles; k++) {
		struct sb_role *r = &sb->roles[k];

		r->state = se->state[k] == MIRROR_ACTIVE ? SB_ROLE_ACTIVE :
			   se->state[k] == MIRROR_REBUILDING ?
							   SB_ROLE_REBUILDING :
							   SB_ROLE_FAULTY;
		r->checkpoint = r->state == SB_ROLE_REBUILDING ?
					se->checkpoint[k] :
					0;
	}
	sb->events = se->events;
}

/*
 * The role table @state goes to every member still in service, with the
 * event counter one up; members out of service are closed (they are
 * never written again).  Runs under the mirror's lock.
 */
static int sb_record(void *arg, const uint8_t *state,
		     const uint64_t *checkpoint, unsigned int nr)
{
	struct sbvol *sv = arg;
	struct state_edit se = { .state = state, .checkpoint = checkpoint,
				 .nr = nr, .events = ++sv->events };
	unsigned int written;
	int err;

	pthread_mutex_lock(&sv->md_lock);
	for (unsigned int i = 0; i < nr && i < sv->nr; i++) {
		if (state[i] == MIRROR_FAULTY && sv->md[i]) {
			mdev_close(sv->md[i]);
			sv->md[i] = NULL;
		}
	}
	written = sb_rewrite(sv, edit_states, &se, &err);
	pthread_mutex_unlock(&sv->md_lock);
	if (written)
		return 0;
	return err ? err : -EIO;
}

struct role_edit {
	unsigned int role;
	uint8_t uuid[16]; /* all zero: keep */
	uint64_t checkpoint;
	uint64_t events; /* 0: keep */
};

static void edit_role(struct superblock *sb, void *arg)
{
	const struct role_edit *re = arg;
	static const uint8_t keep[16];

	if (memcmp(re->uuid, keep, 16)) {
		memcpy(sb->roles[re->role].uuid, re->uuid, 16);
		sb->roles[re->role].state = SB_ROLE_REBUILDING;
	}
	sb->roles[re->role].checkpoint = re->checkpoint;
	if (re->events)
		sb->events = re->events;
}

/* A rebuild's checkpoint: not a change of roles, the counter stays. */
static int sb_progress(void *arg, unsigned int m, uint64_t checkpoint)
{
	struct sbvol *sv = arg;
	struct role_edit re = { .role = m, .checkpoint = checkpoint };
	unsigned int written;
	int err;

	pthread_mutex_lock(&sv->md_lock);
	written = sb_rewrite(sv, edit_role, &re, &err);
	pthread_mutex_unlock(&sv->md_lock);
	if (written)
		return 0;
	return err ? err : -EIO;
}

/* The bitmap block on every member in service, each synced. */
static int sb_bitmap_write(void *arg, const uint8_t *bits, uint32_t nr)
{
	struct sbvol *sv = arg;
	uint8_t block[SB_BITMAP_BYTES];
	unsigned int written = 0;
	int r = -EIO;

	sb_bitmap_encode(bits, nr, block);
	pthread_mutex_lock(&sv->md_lock);
	for (unsigned int i = 0; i < sv->nr; i++) {
		int e;

		if (!sv->md[i])
			continue;
		e = mdev_pwrite(sv->md[i], block, sizeof(block),
				SB_BITMAP_OFFSET) ?:
		    mdev_sync(sv->md[i]);
		if (!e)
			written++;
		else
			r = e;
	}
	pthread_mutex_unlock(&sv->md_lock);
	return written ? 0 : r;
}

/* Data written so far is durable on every member in service. */
static int sb_sync(void *arg)
{
	struct sbvol *sv = arg;
	int r = 0;

	pthread_mutex_lock(&sv->md_lock);
	for (unsigned int i = 0; i < sv->nr; i++) {
		int e = sv->md[i] ? mdev_sync(sv->md[i]) : 0;

		r = r ? r : e;
	}
	pthread_mutex_unlock(&sv->md_lock);
	return r;
}

/* ---- spares ---- */

/* The header of a spare taking over @role, as a new member's. */
static int spare_write(struct sbvol *sv, struct mdev *m, unsigned int role,
		       const uint8_t uuid[16])
{
	struct superblock sb;
	char why[256];
	int r = -EIO;

	/* A member in service has the role table the spare must carry. */
	for (unsigned int i = 0; i < sv->nr && r; i++)
		if (sv->md[i])
			r = sb_read(sv->md[i], &sb, why, sizeof(why));
	if (r)
		return r;
	sb.role = role;
	memcpy(sb.member_uuid, uuid, 16);
	sb.utime = (uint64_t)time(NULL);
	return sb_write_member(m, &sb);
}

/*
 * The mirror's spare hook: the next spare takes over @role, in the order
 * of docs/format.md ("Rebuild"): the role table of the members in service
 * first (so that a crash in between leaves the role with a member nobody
 * holds, i.e. faulty), then the spare's own superblock.
 */
static int spare_take(struct sbvol *sv, unsigned int role,
		      struct target **out)
{

	for (unsigned int i = 0; i < sv->nr_spares; i++) {
		struct role_edit re = { .role = role };
		struct target *t = sv->spare_t[i];
		struct mdev *m = sv->spare_md[i];
		int r;

		if (!m)
			continue;
		/* tried: whatever happens, once */
		sv->spare_md[i] = NULL;
		sv->spare_t[i] = NULL;
		r = sb_uuid_generate(re.uuid);
		if (!r) {
			re.events = ++sv->events;
			if (!sb_rewrite(sv, edit_role, &re, &r))
				r = r ? r : -EIO;
			else
				r = spare_write(sv, m, role, re.uuid);
		}
		if (r) {
			target_notice(TARGET_NOTICE_ERROR,
				      "volume '%s': spare %s cannot take over "
				      "role %u: %s",
				      sv->t.name, sv->spare_path[i], role,
				      strerror(-r));
			target_destroy(t);
			mdev_close(m);
			continue;
		}
		mdev_close(sv->md[role]);
		sv->md[role] = m;
		file_target_account(t, &sv->fopts);
		target_notice(TARGET_NOTICE_INFO,
			      "volume '%s': spare %s takes over role %u",
			      sv->t.name, sv->spare_path[i], role);
		*out = t;
		return 0;
	}
	target_notice(TARGET_NOTICE_ERROR,
		      "volume '%s': no spare left for role %u: serving "
		      "degraded until a member is rebuilt (bioctl rebuild)",
		      sv->t.name, role);
	return -ENOENT;
}

static int sb_spare(void *arg, unsigned int role, struct target **out)
{
	struct sbvol *sv = arg;
	int r;

	pthread_mutex_lock(&sv->md_lock);
	r = spare_take(sv, role, out);
	pthread_mutex_unlock(&sv->md_lock);
	return r;
}

/* ---- resync ---- */


/*
 * The regions to resync: the union of the bitmaps of the members in
 * service (a bitmap write that a crash cut short may have reached some
 * members only).  Returns false when some member has no valid bitmap: then
 * every region is resynced.
 */
static bool dirty_regions(struct sbvol *sv, uint32_t nr, uint8_t *dirty)
{
	uint8_t block[SB_BITMAP_BYTES], bits[SB_BITMAP_BYTES];

	memset(dirty, 0, (nr + 7) / 8);
	for (unsigned int i = 0; i < sv->nr; i++) {
		if (!sv->md[i])
			continue;
		if (mdev_pread(sv->md[i], block, sizeof(block),
			       SB_BITMAP_OFFSET) ||
		    sb_bitmap_decode(block, nr, bits))
			return false;
		for (uint32_t b = 0; b < (nr + 7) / 8; b++)
			dirty[b] |= bits[b];
	}
	return true;
}

/*
 * Make every live copy of [off, off + len) (inside one chunk) equal to the
 * first live copy.  @a, @b: two buffers of @len.  Adds the bytes compared
 * and rewritten to *compared and *fixed (nothing to compare with a single
 * live copy).
 */
static int resync_piece(struct sbvol *sv, const struct mirror_geom *g,
			const uint32_t *state, uint64_t off, size_t len,
			char *a, char *b, uint64_t *compared, uint64_t *fixed,
			char *errbuf, size_t errlen, const char *const *paths)
{
	unsigned int member[SB_MAX_ROLES], nr = 0, m = 0;
	uint64_t moff[SB_MAX_ROLES];
	int r = 0;

	for (unsigned int j = 0; j < g->copies; j++) {
		mirror_map(g, off, j, &member[nr], &moff[nr]);
		if (state[member[nr]] == SB_ROLE_ACTIVE)
			nr++;
	}
	if (nr < 2)
		return 0;
	r = mdev_pread(sv->md[member[0]], a, len, moff[0]);
	for (unsigned int i = 1; i < nr && !r; i++) {
		m = i;
		r = mdev_pread(sv->md[member[i]], b, len, moff[i]);
		if (r || !memcmp(a, b, len))
			continue;
		r = mdev_pwrite(sv->md[member[i]], a, len, moff[i]);
		*fixed += len;
	}
	if (!r) {
		*compared += len;
		return 0;
	}
	return verr(errbuf, errlen, r,
		     "resync: member %s at offset %" PRIu64 ": %s",
		     paths[member[m]], moff[m], strerror(-r));
}

#define RESYNC_STEP (1u << 20)

/*
 * @first_dirty: the volume offset of the first region that may differ (0
 * without a valid bitmap; the size when none), where a rebuild that was
 * going on must go back to.
 */
static int resync(struct sbvol *sv, const struct sb_volume *v,
		  const char *const *paths, uint64_t *first_dirty,
		  char *errbuf, size_t errlen)
{
	const struct superblock *sb = &v->sb;
	uint32_t nr = sb->bitmap_shift ? sb_bitmap_regions(sb) : 1;
	unsigned int shift = sb->bitmap_shift ? sb->bitmap_shift : 63;
	uint8_t dirty[SB_BITMAP_BYTES];
	uint64_t fixed = 0, compared = 0;
	struct mirror_geom g;
	size_t step = sb->chunk_bytes < RESYNC_STEP ? sb->chunk_bytes :
						      RESYNC_STEP;
	char *a = NULL, *b = NULL;
	double t0 = engine_now_s();
	bool bitmap;
	int r = 0;

	bitmap = sb->bitmap_shift && dirty_regions(sv, nr, dirty);
	*first_dirty = bitmap ? sb->size_bytes : 0;
	for (uint32_t reg = 0; bitmap && reg < nr; reg++)
		if (dirty[reg / 8] >> (reg % 8) & 1) {
			*first_dirty = (uint64_t)reg << shift;
			break;
		}
	if (mirror_geom_init(&g, sb->nr_roles, sb->copies, sb->chunk_bytes))
		return verr(errbuf, errlen, -EINVAL, "bad mirror geometry");
	g.data_offset = sb->data_offset;
	a = malloc(step);
	b = malloc(step);
	if (!a || !b) {
		r = verr(errbuf, errlen, -ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t reg = 0; reg < nr; reg++) {
		uint64_t off = (uint64_t)reg << shift, end;

		if (bitmap && !(dirty[reg / 8] >> (reg % 8) & 1))
			continue;
		if (!sb->bitmap_shift)
			off = 0;
		end = sb->bitmap_shift && reg + 1 < nr ?
			      (uint64_t)(reg + 1) << shift :
			      sb->size_bytes;
		while (off < end) {
			uint64_t left = g.chunk_bytes -
					(off & (g.chunk_bytes - 1));
			size_t len = (size_t)(end - off < step ? end - off : step);

			if (len > left)
				len = (size_t)left;
			r = resync_piece(sv, &g, v->state, off, len, a, b,
					 &compared, &fixed, errbuf, errlen,
					 paths);
			if (r)
				goto out;
			off += len;
		}
	}
	r = sb_sync(sv);
	if (r) {
		verr(errbuf, errlen, r, "resync: sync: %s",
		      strerror(-r));
		goto out;
	}
	target_notice(TARGET_NOTICE_INFO,
		      "volume '%s': resync after an unclean shutdown (%s): "
		      "%" PRIu64 " MiB compared, %" PRIu64 " KiB rewritten, "
		      "%.2f s",
		      sb->name, bitmap ? "regions in the write-intent bitmap" :
					 "every region, no bitmap",
		      compared >> 20, fixed >> 10, engine_now_s() - t0);
out:
	free(a);
	free(b);
	return r;
}

/* ---- life cycle ---- */

static void sbvol_free(struct sbvol *sv)
{
	for (unsigned int i = 0; i < SB_MAX_ROLES; i++)
		mdev_close(sv->md[i]);
	for (unsigned int i = 0; i < sv->nr_spares; i++) {
		mdev_close(sv->spare_md[i]);
		target_destroy(sv->spare_t[i]);
		free(sv->spare_path[i]);
	}
	pthread_mutex_destroy(&sv->md_lock);
	free(sv->t.name);
	free(sv);
}

static void sbvol_destroy(struct target *t)
{
	struct sbvol *sv = container_of(t, struct sbvol, t);
	static const uint8_t none[SB_BITMAP_BITS / 8];

	/* The mirror's bitmap daemon stops with it: nothing writes now. */
	target_destroy(sv->inner);
	/*
	 * Clean only once every write is on storage: a member whose sync
	 * fails leaves the flag cleared, an unclean shutdown whose bitmap
	 * regions the next start resyncs.  A member that cannot be marked
	 * keeps its flag cleared too: the safe side.  The bitmap goes clear
	 * first.
	 */
	if (!sb_sync(sv)) {
		if (sv->bitmap_regions)
			(void)sb_bitmap_write(sv, none, sv->bitmap_regions);
		/*
		 * A mirror's stop is two marks, each on every member before
		 * the next: a copy of a member taken while it ran holds this
		 * run's start mark and would be one behind a one-mark stop,
		 * which sb_assemble must keep (a stop cut short by a crash
		 * looks the same), and its older data would be served.  Two
		 * behind, it is stale; a crash in either pass still leaves
		 * members one behind.  The first mark stays dirty, so a crash
		 * after it resyncs.
		 */
		if (!sv->mirror || !sb_mark(sv, false))
			(void)sb_mark(sv, true);
	}
	sbvol_free(sv);
}

static void sbvol_start(struct target *t)
{
	target_start(container_of(t, struct sbvol, t)->inner);
}

static int sbvol_iomap_short(struct target *t, struct target *src,
			     uint64_t off)
{
	return target_iomap_short(container_of(t, struct sbvol, t)->inner, src,
				  off);
}

static unsigned int sbvol_member_states(struct target *t,
					struct target_member_state *out,
					unsigned int max)
{
	return target_member_states(container_of(t, struct sbvol, t)->inner,
				    out, max);
}

static const struct target_ops sbvol_ops = {
	.submit = sbvol_submit,
	.destroy = sbvol_destroy,
	.iomap = sbvol_iomap,
	.start = sbvol_start,
	.iomap_short = sbvol_iomap_short,
	.member_states = sbvol_member_states,
};

/*
 * Open @path for writing, locked: one writer a volume.  An RBD image
 * cannot be locked, but another client that has it open shows (a second
 * server, or bioctl rewriting it): mdev_claim.  An NBD export can show
 * neither (docs/remote.md: one server a volume is then the
 * administrator's to keep).
 */
static int open_locked(const char *what, const char *path,
		       unsigned int timeout_ms, struct mdev **mp,
		       char *errbuf, size_t errlen)
{
	char why[256];
	int r = mdev_open(mp, path, true, timeout_ms, why, sizeof(why));

	if (r)
		return verr(errbuf, errlen, r, "%s", why);
	if ((*mp)->ops->claim)
		return mdev_claim(*mp, path, errbuf, errlen);
	return mdev_lock_say(*mp, what, path, errbuf, errlen);
}

int sbvol_create(struct target **out, struct target *inner,
		 const struct sb_volume *v, const char *const *paths,
		 const char *const *spares, unsigned int nr_spares,
		 const struct file_target_opts *fopts, unsigned int timeout_ms,
		 char *errbuf, size_t errlen)
{
	const struct superblock *sb = &v->sb;
	bool mirror = sb_redundant(sb->level);
	struct sbvol *sv = calloc(1, sizeof(*sv));
	uint64_t first_dirty = 0;
	int r = 0;

	if (!sv)
		return verr(errbuf, errlen, -ENOMEM, "out of memory");
	sv->t.ops = &sbvol_ops;
	sv->t.size_bytes = inner->size_bytes;
	sv->t.name = strdup(inner->name);
	sv->mirror = mirror;
	sv->nr = sb->nr_roles;
	sv->events = sb->events;
	sv->fopts = *fopts;
	pthread_mutex_init(&sv->md_lock, NULL);
	if (mirror && sb->bitmap_shift)
		sv->bitmap_regions = sb_bitmap_regions(sb);
	if (!sv->t.name) {
		r = verr(errbuf, errlen, -ENOMEM, "out of memory");
		goto fail;
	}
	for (unsigned int i = 0; i < sv->nr && !r; i++)
		if (v->state[i] == SB_ROLE_ACTIVE ||
		    v->state[i] == SB_ROLE_REBUILDING)
			r = open_locked("member", paths[i], timeout_ms,
					&sv->md[i], errbuf, errlen);
	for (unsigned int i = 0; i < nr_spares && !r; i++, sv->nr_spares++) {
		struct file_target_opts uncounted = *fopts;

		sv->spare_path[i] = strdup(spares[i]);
		r = sv->spare_path[i] ?
			    open_locked("spare", spares[i], timeout_ms,
					&sv->spare_md[i], errbuf, errlen) :
			    verr(errbuf, errlen, -ENOMEM, "out of memory");
		uncounted.stats_parent = NULL;
		uncounted.trace_parent = 0;
		if (!r && (r = file_target_open(&sv->spare_t[i], spares[i],
						&uncounted)))
			verr(errbuf, errlen, r, "spare %s: %s", spares[i],
			     strerror(-r));
	}
	if (r)
		goto fail;
	if (mirror && v->degraded) {
		uint8_t state[SB_MAX_ROLES];
		uint64_t cp[SB_MAX_ROLES];
		char roles[512];
		size_t at = 0;

		roles[0] = '\0';
		for (unsigned int i = 0; i < sv->nr && at < sizeof(roles); i++) {
			if (!(v->degraded >> i & 1))
				continue;
			/*
			 * A member there but cut short is not "missing" (the
			 * line before names it: @paths has no path for it).
			 */
			if (v->order[i] == SB_ROLE_NONE &&
			    v->cut[i] != SB_ROLE_NONE)
				at += (size_t)snprintf(
					roles + at, sizeof(roles) - at,
					"%srole %u (its member too short)",
					at ? ", " : "", i);
			else
				at += (size_t)snprintf(
					roles + at, sizeof(roles) - at,
					"%srole %u (%s)", at ? ", " : "", i,
					v->order[i] == SB_ROLE_NONE ?
						"missing" :
						"stale: it missed writes");
		}
		target_notice(TARGET_NOTICE_ERROR,
			      "volume '%s': starting degraded, %s out of "
			      "service until rebuilt",
			      inner->name, roles);
		for (unsigned int i = 0; i < sv->nr; i++) {
			state[i] = v->state[i] == SB_ROLE_ACTIVE ?
					   MIRROR_ACTIVE :
				   v->state[i] == SB_ROLE_REBUILDING ?
					   MIRROR_REBUILDING :
					   MIRROR_FAULTY;
			cp[i] = sb->roles[i].checkpoint;
		}
		r = sb_record(sv, state, cp, sv->nr);
		if (r) {
			verr(errbuf, errlen, r,
			     "volume '%s': recording the faulty members: %s",
			     inner->name, strerror(-r));
			goto fail;
		}
	}
	if (mirror && !v->clean) {
		r = resync(sv, v, paths, &first_dirty, errbuf, errlen);
		if (r)
			goto fail;
		/* Writes in flight there may have missed a rebuilding one. */
		for (unsigned int i = 0; i < sv->nr; i++) {
			uint64_t chunk = first_dirty / sb->chunk_bytes;

			if (v->state[i] == SB_ROLE_REBUILDING)
				mirror_set_checkpoint(
					inner, i,
					chunk * sb->copies / sb->nr_roles *
						sb->chunk_bytes);
		}
	}
	r = sb_mark(sv, false);
	if (r) {
		verr(errbuf, errlen, r,
		     "volume '%s': writing the superblocks: %s", inner->name,
		     strerror(-r));
		goto fail;
	}
	if (mirror) {
		struct mirror_hooks h = { .record = sb_record,
					  .progress = sb_progress,
					  .spare = nr_spares ? sb_spare : NULL,
					  .bitmap_write = sb_bitmap_write,
					  .sync = sb_sync,
					  .arg = sv };

		mirror_set_hooks(inner, &h);
		if (sb->bitmap_shift) {
			r = mirror_bitmap_enable(inner, sb->bitmap_shift);
			if (r) {
				verr(errbuf, errlen, r, "out of memory");
				goto fail;
			}
		}
	}
	sv->inner = inner;
	*out = &sv->t;
	return 0;
fail:
	if (mirror)
		mirror_set_hooks(inner, NULL);
	sbvol_free(sv);
	return r;
}
