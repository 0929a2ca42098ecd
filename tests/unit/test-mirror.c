// SPDX-License-Identifier: MIT
/*
 * Description: the mirror target (RAID-1, RAID-10) on real member files.
 * Layout: mirror_map against the placement rule written out by position
 * (copy j of chunk k at position kK + j) for every N and K up to 6,
 * mirror_member_bytes, and which failed members still leave a copy of
 * every chunk (mirror_covered).  Data: random writes, write-zeroes and
 * discards of every size up to 1 MiB through raid1 (2 and 3 members) and
 * raid10 (4 members 2 copies, 3 members 2 copies, 5 members 3 copies)
 * read back equal to a model, and every copy in the member files equal
 * to the model too.  Faults, with an error target under one member: a
 * write that one copy fails succeeds, the member is recorded faulty
 * (through the hook, before the write completes) and never read or
 * written again; a read that fails is answered from another copy and
 * marks its member faulty; a write whose every copy fails returns the
 * error and marks nothing; a failure that would leave some chunk without
 * a copy fails the volume (that write and every later one: EIO; reads
 * still work); a fast zero refused by one copy is done the slow way there
 * (copies stay equal).  Bitmap: the first write to a region writes its
 * bit before the data goes out, later writes to it do not; after the
 * daemon's delay with no writes the bit is cleared, after a sync.
 * Rebuild: resumed at its checkpoint, flushed before it is active, its
 * progress seen by the statistics as it copies (before any checkpoint).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <bionbd/bio.h>
#include <bionbd/ioq.h>
#include <bionbd/target.h>

#include "bioio_sync.h"
#include "errtarget.h"
#include "unit.h"

#define CHUNK (64u * 1024)
#define DOFF (1u << 20)
#define MAXN 6

/* ------------------------------------------------------------ layout */

static void case_layout(void)
{
	for (unsigned int n = 2; n <= MAXN; n++) {
		for (unsigned int k = 2; k <= n; k++) {
			struct mirror_geom g;
			uint64_t bytes;

			CHECK_EQ(mirror_geom_init(&g, n, k, CHUNK), 0);
			g.data_offset = DOFF;
			for (uint64_t c = 0; c < 50; c++) {
				for (unsigned int j = 0; j < k; j++) {
					uint64_t p = c * k + j, moff;
					unsigned int m;

					mirror_map(&g, c * CHUNK + 512, j, &m,
						   &moff);
					CHECK_EQ(m, p % n);
					CHECK_EQ(moff, DOFF + (p / n) * CHUNK + 512);
				}
			}
			/* 10 chunks: 10k positions, ceil(10k / n) rows. */
			CHECK_EQ(mirror_member_bytes(&g, 10 * CHUNK - 512,
						     &bytes),
				 0);
			CHECK_EQ(bytes, (10 * k + n - 1) / n * CHUNK);
		}
	}
	{
		struct mirror_geom g;
		uint8_t st[4] = { 0 };

		CHECK(mirror_geom_init(&g, 4, 1, CHUNK) != 0);
		CHECK(mirror_geom_init(&g, 4, 5, CHUNK) != 0);
		CHECK(mirror_geom_init(&g, 1, 1, CHUNK) != 0);
		CHECK(mirror_geom_init(&g, 4, 2, 1000) != 0);
		CHECK_EQ(mirror_geom_init(&g, 4, 2, CHUNK), 0);
		/* Pairs {0,1} and {2,3}. */
		st[0] = st[2] = MIRROR_FAULTY;
		CHECK(mirror_covered(&g, st));
		st[2] = MIRROR_ACTIVE;
		st[1] = MIRROR_FAULTY;
		CHECK(!mirror_covered(&g, st));
		/* 3 members, 2 copies: {0,1} {2,0} {1,2}: any two lose data. */
		CHECK_EQ(mirror_geom_init(&g, 3, 2, CHUNK), 0);
		memset(st, 0, sizeof(st));
		st[2] = MIRROR_FAULTY;
		CHECK(mirror_covered(&g, st));
		st[0] = MIRROR_FAULTY;
		CHECK(!mirror_covered(&g, st));
	}
}

/* ------------------------------------------------------------ fixture */

struct hook_log {
	unsigned int records;
	uint8_t last_state[MAXN];
	/* Written by the bitmap daemon's thread while a case looks on. */
	atomic_uint bitmap_writes, syncs;
	_Atomic uint8_t bits[64];
	bool fail_record;
	/*
	 * Fail this many records more; the first one failed also writes
	 * 0x55 over the first 4 KiB of the data of member file
	 * @scribble_path, behind the mirror's back, to see a copy redone.
	 */
	atomic_uint fail_records;
	const char *scribble_path;
	unsigned int progress;
	uint64_t last_checkpoint[MAXN];
	char spare_path[PATH_MAX + 16];
	uint64_t spare_bytes; /* 0: no spare */
	bool spare_taken;
	unsigned int spare_role;
};

static int hook_record(void *arg, const uint8_t *state,
		       const uint64_t *checkpoint, unsigned int nr)
{
	(void)checkpoint;
	struct hook_log *h = arg;

	h->records++;
	memcpy(h->last_state, state, nr);
	if (h->fail_records) {
		h->fail_records--;
		if (h->scribble_path) {
			unsigned char junk[4096];
			int fd = open(h->scribble_path, O_WRONLY);

			memset(junk, 0x55, sizeof(junk));
			CHECK(fd >= 0);
			CHECK_EQ(pwrite(fd, junk, sizeof(junk), DOFF),
				 (ssize_t)sizeof(junk));
			close(fd);
			h->scribble_path = NULL;
		}
		return -EIO;
	}
	return h->fail_record ? -EIO : 0;
}

static int hook_progress(void *arg, unsigned int m, uint64_t checkpoint)
{
	struct hook_log *h = arg;

	h->progress++;
	h->last_checkpoint[m] = checkpoint;
	return 0;
}

/* The spare: a fresh file as large as a member, once. */
static int hook_spare(void *arg, unsigned int m, struct target **out)
{
	struct hook_log *h = arg;
	struct file_target_opts fo = { 0 };
	int fd;

	if (!h->spare_bytes || h->spare_taken)
		return -ENOENT;
	fd = open(h->spare_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0);
	CHECK_EQ(ftruncate(fd, (off_t)h->spare_bytes), 0);
	close(fd);
	CHECK_EQ(file_target_open(out, h->spare_path, &fo), 0);
	h->spare_taken = true;
	h->spare_role = m;
	return 0;
}

static int hook_bitmap(void *arg, const uint8_t *bits, uint32_t nr)
{
	struct hook_log *h = arg;

	for (uint32_t i = 0; i < (nr + 7) / 8; i++)
		h->bits[i] = bits[i];
	h->bitmap_writes++;
	return 0;
}

static int hook_sync(void *arg)
{
	((struct hook_log *)arg)->syncs++;
	return 0;
}

struct fixture {
	unsigned int n, k;
	uint64_t size;
	char path[MAXN][PATH_MAX];
	struct target *err[MAXN]; /* the error target over each file */
	struct target *t;
	struct mirror_geom g;
	struct hook_log hooks;
	unsigned char *model;
};

static void fixture_setup_state(struct fixture *f, unsigned int n,
				unsigned int k, uint64_t size,
				const uint8_t *start_state,
				const uint64_t *checkpoint)
{
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	struct file_target_opts fo = { 0 };
	struct target *m[MAXN];
	uint8_t state[MAXN] = { 0 };
	struct mirror_hooks h = { .record = hook_record,
				  .progress = hook_progress,
				  .spare = hook_spare,
				  .bitmap_write = hook_bitmap,
				  .sync = hook_sync };
	uint64_t need;

	memset(f, 0, sizeof(*f));
	f->n = n;
	f->k = k;
	f->size = size;
	CHECK_EQ(mirror_geom_init(&f->g, n, k, CHUNK), 0);
	f->g.data_offset = DOFF;
	CHECK_EQ(mirror_member_bytes(&f->g, size, &need), 0);
	for (unsigned int i = 0; i < n; i++) {
		struct target *file;
		int fd;

		snprintf(f->path[i], sizeof(f->path[i]),
			 "%s/test-mirror-%d-%u", dir, (int)getpid(), i);
		fd = open(f->path[i], O_RDWR | O_CREAT | O_TRUNC, 0600);
		CHECK(fd >= 0);
		CHECK_EQ(ftruncate(fd, (off_t)(DOFF + need)), 0);
		close(fd);
		CHECK_EQ(file_target_open(&file, f->path[i], &fo), 0);
		CHECK_EQ(error_target_create(&f->err[i], file), 0);
		m[i] = f->err[i];
	}
	if (start_state)
		memcpy(state, start_state, n);
	CHECK_EQ(mirror_target_create(&f->t, m, state, checkpoint, n, k, CHUNK,
				      size, DOFF, "test"),
		 0);
	h.arg = &f->hooks;
	mirror_set_hooks(f->t, &h);
	f->model = calloc(1, size);
	CHECK(f->model);
}

static void fixture_setup(struct fixture *f, unsigned int n, unsigned int k,
			  uint64_t size)
{
	fixture_setup_state(f, n, k, size, NULL, NULL);
}

static void fixture_teardown(struct fixture *f)
{
	target_destroy(f->t);
	for (unsigned int i = 0; i < f->n; i++)
		unlink(f->path[i]);
	free(f->model);
}

static int do_io(struct target *t, unsigned int opf, uint64_t off,
		 uint32_t len, void *buf)
{
	return test_bio_io(t, opf, off, len, buf);
}

static void member_pread(struct fixture *f, unsigned int m, void *buf,
			 size_t len, uint64_t off)
{
	int fd = open(f->path[m], O_RDONLY);
	ssize_t got;

	CHECK(fd >= 0);
	got = pread(fd, buf, len, (off_t)off);
	CHECK(got >= 0);
	if ((size_t)got < len)
		memset((char *)buf + got, 0, len - (size_t)got);
	close(fd);
}

/* Every copy of [off, off + len) in the files of live members = model. */
static void expect_copies(struct fixture *f, uint64_t off, uint64_t len,
			  const uint8_t *skip)
{
	unsigned char *buf = malloc(CHUNK);

	CHECK(buf);
	while (len) {
		uint64_t in = off % CHUNK, n = CHUNK - in < len ? CHUNK - in : len;

		for (unsigned int j = 0; j < f->k; j++) {
			unsigned int m;
			uint64_t moff;

			mirror_map(&f->g, off, j, &m, &moff);
			if (skip && skip[m])
				continue;
			member_pread(f, m, buf, n, moff);
			if (memcmp(buf, f->model + off, n)) {
				fprintf(stderr, "copy %u (member %u) of %" PRIu64
					" differs\n", j, m, off);
				abort();
			}
		}
		off += n;
		len -= n;
	}
	free(buf);
}

static void expect_read(struct fixture *f, uint64_t off, uint32_t len)
{
	unsigned char *buf = malloc(len);

	CHECK(buf);
	CHECK_EQ(do_io(f->t, REQ_OP_READ, off, len, buf), 0);
	CHECK(!memcmp(buf, f->model + off, len));
	free(buf);
}

/* ------------------------------------------------------------ data */

static void case_random(unsigned int n, unsigned int k)
{
	struct fixture f;
	unsigned char *buf = malloc(1u << 20);

	fixture_setup(&f, n, k, 8u << 20);
	CHECK(buf);
	for (unsigned int i = 0; i < 300; i++) {
		uint32_t len = (uint32_t)(1 + rnd() % 2048) * 512;
		uint64_t off;
		unsigned int what = (unsigned int)(rnd() % 8);

		if (len > f.size)
			len = (uint32_t)f.size;
		off = (rnd() % ((f.size - len) / 512 + 1)) * 512;
		if (what == 0) {
			CHECK_EQ(do_io(f.t, REQ_OP_WRITE_ZEROES, off, len, NULL),
				 0);
			memset(f.model + off, 0, len);
		} else if (what == 1) {
			/* Discard leaves the range unspecified: zero it. */
			CHECK_EQ(do_io(f.t, REQ_OP_DISCARD, off, len, NULL), 0);
			CHECK_EQ(do_io(f.t, REQ_OP_WRITE_ZEROES, off, len, NULL),
				 0);
			memset(f.model + off, 0, len);
		} else if (what < 5) {
			expect_read(&f, off, len);
		} else {
			for (uint32_t b = 0; b < len; b++)
				buf[b] = (unsigned char)rnd();
			CHECK_EQ(do_io(f.t, REQ_OP_WRITE | (what == 5 ? REQ_FUA : 0),
				       off, len, buf),
				 0);
			memcpy(f.model + off, buf, len);
		}
	}
	CHECK_EQ(do_io(f.t, REQ_OP_FLUSH, 0, 0, NULL), 0);
	expect_copies(&f, 0, f.size, NULL);
	expect_read(&f, 0, (uint32_t)f.size);
	CHECK_EQ(f.hooks.records, 0);
	/* Past the end: the NBD errors, as on every target. */
	CHECK_EQ(do_io(f.t, REQ_OP_WRITE, f.size, 4096, buf), -ENOSPC);
	CHECK_EQ(do_io(f.t, REQ_OP_READ, f.size, 4096, buf), -EINVAL);
	fixture_teardown(&f);
	free(buf);
	printf("random n=%u k=%u: ok\n", n, k);
}

/* ------------------------------------------------------------ faults */

static void fail_member(struct fixture *f, unsigned int m, int op, int err,
			unsigned int count)
{
	struct error_rule rule = { .op = op, .offset = 0, .length = 0,
				   .error = err, .count = count };

	CHECK_EQ(error_target_add_rule(f->err[m], &rule), 0);
}

static void fill(struct fixture *f, uint64_t off, uint32_t len, int seed)
{
	unsigned char *buf = malloc(len);

	CHECK(buf);
	for (uint32_t i = 0; i < len; i++)
		buf[i] = (unsigned char)(i * 7 + (unsigned int)seed);
	CHECK_EQ(do_io(f->t, REQ_OP_WRITE, off, len, buf), 0);
	memcpy(f->model + off, buf, len);
	free(buf);
}

/* raid1 on 2 and raid10 on 4: one failing member, writes and reads go on. */
static void case_write_fault(unsigned int n, unsigned int k)
{
	struct fixture f;
	uint8_t skip[MAXN] = { 0 };
	unsigned char *buf = malloc(1u << 20);

	fixture_setup(&f, n, k, 4u << 20);
	fill(&f, 0, 1u << 20, 1);
	fail_member(&f, 1, REQ_OP_WRITE, -EIO, 0);
	fill(&f, 0, 1u << 20, 2); /* member 1 fails its part */
	CHECK_EQ(f.hooks.records, 1);
	CHECK_EQ(f.hooks.last_state[1], MIRROR_FAULTY);
	CHECK_EQ(f.hooks.last_state[0], MIRROR_ACTIVE);
	/* From now on member 1 is out: reads failing there would show. */
	error_target_clear(f.err[1]);
	fail_member(&f, 1, -1, -EIO, 0);
	expect_read(&f, 0, 1u << 20);
	fill(&f, 512 * 1024, 256 * 1024, 3);
	CHECK_EQ(do_io(f.t, REQ_OP_FLUSH, 0, 0, NULL), 0);
	CHECK_EQ(f.hooks.records, 1); /* nothing new */
	skip[1] = 1;
	expect_copies(&f, 0, 1u << 20, skip);
	{
		uint8_t st[MAXN];

		mirror_state_get(f.t, st, n);
		CHECK_EQ(st[1], MIRROR_FAULTY);
	}
	fixture_teardown(&f);
	free(buf);
	printf("write fault n=%u k=%u: ok\n", n, k);
}

static void case_read_fault(void)
{
	struct fixture f;
	uint8_t st[MAXN];

	fixture_setup(&f, 2, 2, 4u << 20);
	fill(&f, 0, 1u << 20, 4);
	fail_member(&f, 0, REQ_OP_READ, -EIO, 0);
	fail_member(&f, 1, REQ_OP_READ, -EIO, 0);
	/* Both copies fail: the read fails, one member stays live. */
	{
		unsigned char *buf = malloc(65536);

		CHECK_EQ(do_io(f.t, REQ_OP_READ, 0, 65536, buf), -EIO);
		free(buf);
	}
	mirror_state_get(f.t, st, 2);
	CHECK(st[0] == MIRROR_ACTIVE || st[1] == MIRROR_ACTIVE);
	fixture_teardown(&f);

	fixture_setup(&f, 2, 2, 4u << 20);
	fill(&f, 0, 1u << 20, 5);
	fail_member(&f, 0, REQ_OP_READ, -EIO, 0);
	/* Every read is answered, whichever copy it tries first. */
	for (int i = 0; i < 8; i++)
		expect_read(&f, (uint64_t)i * 65536, 65536);
	mirror_state_get(f.t, st, 2);
	CHECK_EQ(st[0], MIRROR_FAULTY);
	CHECK_EQ(f.hooks.records, 1);
	fixture_teardown(&f);
	printf("read fault: ok\n");
}

static void case_all_copies_fail(void)
{
	struct fixture f;
	unsigned char buf[4096] = { 1 };

	fixture_setup(&f, 2, 2, 4u << 20);
	fail_member(&f, 0, REQ_OP_WRITE, -ENOSPC, 0);
	fail_member(&f, 1, REQ_OP_WRITE, -ENOSPC, 0);
	CHECK_EQ(do_io(f.t, REQ_OP_WRITE, 0, sizeof(buf), buf), -ENOSPC);
	CHECK_EQ(f.hooks.records, 0);
	error_target_clear(f.err[0]);
	error_target_clear(f.err[1]);
	CHECK_EQ(do_io(f.t, REQ_OP_WRITE, 0, sizeof(buf), buf), 0);
	fixture_teardown(&f);
	printf("all copies fail: ok\n");
}

/* 3 members, 2 copies: member 0 gone, then 2 fails a write to {1,2}. */
static void case_volume_fails(void)
{
	struct fixture f;
	unsigned char *buf = malloc(CHUNK);
	uint64_t chunk2 = 2 * CHUNK; /* positions 4, 5: members 1, 2 */
	unsigned int m;
	uint64_t moff;

	CHECK(buf);
	fixture_setup(&f, 3, 2, 4u << 20);
	mirror_map(&f.g, chunk2, 0, &m, &moff);
	CHECK_EQ(m, 1);
	mirror_map(&f.g, chunk2, 1, &m, &moff);
	CHECK_EQ(m, 2);
	fill(&f, 0, 6 * CHUNK, 6);
	fail_member(&f, 0, REQ_OP_WRITE, -EIO, 0);
	fill(&f, 0, CHUNK, 7); /* chunk 0 on {0,1}: 0 marked faulty */
	CHECK_EQ(f.hooks.records, 1);
	fail_member(&f, 2, REQ_OP_WRITE, -EIO, 0);
	memset(buf, 0xee, CHUNK);
	/* 2 holds the last copy of chunk 1 ({2,0}): refused, volume fails. */
	CHECK_EQ(do_io(f.t, REQ_OP_WRITE, chunk2, CHUNK, buf), -EIO);
	CHECK_EQ(f.hooks.records, 1);
	error_target_clear(f.err[2]);
	CHECK_EQ(do_io(f.t, REQ_OP_WRITE, 3 * CHUNK, 4096, buf), -EIO);
	CHECK_EQ(do_io(f.t, REQ_OP_WRITE_ZEROES, 0, 4096, NULL), -EIO);
	/* Reads still work where the data is whole. */
	expect_read(&f, CHUNK, CHUNK);
	fixture_teardown(&f);
	free(buf);
	printf("volume fails: ok\n");
}

static void case_fast_zero(void)
{
	struct fixture f;

	fixture_setup(&f, 2, 2, 4u << 20);
	fill(&f, 0, 1u << 20, 8);
	fail_member(&f, 1, REQ_OP_WRITE_ZEROES, -EOPNOTSUPP, 1);
	CHECK_EQ(do_io(f.t, REQ_OP_WRITE_ZEROES | REQ_NOFALLBACK, 4096,
		       65536, NULL),
		 0);
	memset(f.model + 4096, 0, 65536);
	expect_copies(&f, 0, 1u << 20, NULL);
	CHECK_EQ(f.hooks.records, 0);
	/* Refused by both: refused, nothing changed, nobody faulty. */
	fail_member(&f, 0, REQ_OP_WRITE_ZEROES, -EOPNOTSUPP, 1);
	fail_member(&f, 1, REQ_OP_WRITE_ZEROES, -EOPNOTSUPP, 1);
	CHECK_EQ(do_io(f.t, REQ_OP_WRITE_ZEROES | REQ_NOFALLBACK, 0, 4096,
		       NULL),
		 -EOPNOTSUPP);
	expect_copies(&f, 0, 1u << 20, NULL);
	CHECK_EQ(f.hooks.records, 0);
	fixture_teardown(&f);
	printf("fast zero: ok\n");
}

/* ------------------------------------------------------------ bitmap */

static void case_bitmap(void)
{
	struct fixture f;

	fixture_setup(&f, 2, 2, 8u << 20);
	CHECK_EQ(mirror_bitmap_enable(f.t, 20), 0); /* 8 regions of 1 MiB */
	fill(&f, (3u << 20) + 4096, 8192, 9);
	CHECK_EQ(f.hooks.bitmap_writes, 1);
	CHECK_EQ(f.hooks.bits[0], 1u << 3);
	fill(&f, 3u << 20, 4096, 10);
	CHECK_EQ(f.hooks.bitmap_writes, 1);
	/* Across regions 4 and 5. */
	fill(&f, (5u << 20) - 4096, 8192, 11);
	CHECK_EQ(f.hooks.bitmap_writes, 2);
	CHECK_EQ(f.hooks.bits[0], (1u << 3) | (1u << 4) | (1u << 5));
	/* Idle for two daemon periods: cleared, after a sync. */
	sleep(11);
	CHECK(f.hooks.syncs >= 1);
	CHECK_EQ(f.hooks.bits[0], 0);
	CHECK_EQ(f.hooks.bitmap_writes, 3);
	fill(&f, 3u << 20, 4096, 12);
	CHECK_EQ(f.hooks.bitmap_writes, 4);
	CHECK_EQ(f.hooks.bits[0], 1u << 3);
	expect_copies(&f, 0, f.size, NULL);
	fixture_teardown(&f);
	printf("bitmap: ok\n");
}

/* Wait (10 s at most) until member @m is active again. */
static void wait_active(struct fixture *f, unsigned int m)
{
	uint8_t st[MAXN];

	for (int i = 0; i < 1000; i++) {
		mirror_state_get(f->t, st, f->n);
		if (st[m] == MIRROR_ACTIVE)
			return;
		usleep(10000);
	}
	fprintf(stderr, "member %u not rebuilt after 10 s (state %u)\n", m,
		st[m]);
	abort();
}

/*
 * Member 1 rebuilding from half-way: what lies below the checkpoint is
 * left as it is (resumed, not restarted), what lies above is copied.
 */
static void case_rebuild_resume(void)
{
	uint8_t state[2] = { MIRROR_ACTIVE, MIRROR_REBUILDING };
	uint64_t cp[2] = { 0, 2u << 20 };
	unsigned char *buf = malloc(4u << 20);
	struct fixture f;
	int fd;

	CHECK(buf);
	fixture_setup_state(&f, 2, 2, 4u << 20, state, cp);
	/* Member 1's first half: garbage the rebuild must not touch. */
	memset(buf, 0x77, 2u << 20);
	fd = open(f.path[1], O_RDWR);
	CHECK(fd >= 0);
	CHECK_EQ(pwrite(fd, buf, 2u << 20, DOFF), 2u << 20);
	close(fd);
	fill(&f, 0, 4u << 20, 21); /* reaches member 1 too: rebuilding */
	memset(buf, 0x77, 2u << 20);
	fd = open(f.path[1], O_RDWR);
	CHECK(fd >= 0);
	CHECK_EQ(pwrite(fd, buf, 2u << 20, DOFF), 2u << 20);
	/* Second half: stale, the rebuild must copy it. */
	CHECK_EQ(pwrite(fd, buf, 2u << 20, DOFF + (2u << 20)), 2u << 20);
	close(fd);
	target_start(f.t);
	wait_active(&f, 1);
	CHECK(f.hooks.records >= 1);
	CHECK_EQ(f.hooks.last_state[1], MIRROR_ACTIVE);
	member_pread(&f, 1, buf, 2u << 20, DOFF);
	for (uint32_t i = 0; i < 2u << 20; i++)
		CHECK_EQ(buf[i], 0x77);
	member_pread(&f, 1, buf, 2u << 20, DOFF + (2u << 20));
	CHECK(!memcmp(buf, f.model + (2u << 20), 2u << 20));
	fixture_teardown(&f);
	free(buf);
	printf("rebuild resume: ok\n");
}

/*
 * The rebuilt member is flushed before it is recorded active (its copies
 * must be on storage before the others say so): with its flushes failing
 * it ends faulty, never active.
 */
static void case_rebuild_flush(void)
{
	uint8_t state[2] = { MIRROR_ACTIVE, MIRROR_REBUILDING }, st[MAXN];
	struct fixture f;
	int i;

	fixture_setup_state(&f, 2, 2, 4u << 20, state, NULL);
	fill(&f, 0, 4u << 20, 41);
	fail_member(&f, 1, REQ_OP_FLUSH, -EIO, 0);
	target_start(f.t);
	for (i = 0; i < 1000; i++) {
		mirror_state_get(f.t, st, f.n);
		if (st[1] != MIRROR_REBUILDING)
			break;
		usleep(10000);
	}
	CHECK_EQ(st[1], MIRROR_FAULTY);
	CHECK_EQ(f.hooks.last_state[1], MIRROR_FAULTY);
	fixture_teardown(&f);
	printf("rebuild flush: ok\n");
}

/*
 * A rebuilt role whose record (active) fails stays rebuilding, copied in
 * full: the statistics say so, the record is tried again, and the copy is
 * not redone (what was scribbled over its first block after the copy
 * stays there).
 */
static void case_rebuild_record_retry(void)
{
	uint8_t state[2] = { MIRROR_ACTIVE, MIRROR_REBUILDING };
	struct target_member_state ms[2];
	unsigned char buf[4096];
	struct fixture f;

	fixture_setup_state(&f, 2, 2, 4u << 20, state, NULL);
	fill(&f, 0, 4u << 20, 51);
	f.hooks.fail_records = 1;
	f.hooks.scribble_path = f.path[1];
	target_start(f.t);
	for (int i = 0; i < 1000 && f.hooks.fail_records; i++)
		usleep(10000);
	CHECK_EQ(f.hooks.fail_records, 0);
	CHECK_EQ(target_member_states(f.t, ms, 2), 2);
	CHECK_EQ(ms[1].state, TARGET_MEMBER_REBUILDING);
	CHECK_EQ(ms[1].rebuilt, ms[1].bytes);
	wait_active(&f, 1);
	CHECK_EQ(f.hooks.records, 2);
	CHECK_EQ(f.hooks.last_state[1], MIRROR_ACTIVE);
	member_pread(&f, 1, buf, sizeof(buf), DOFF);
	for (size_t i = 0; i < sizeof(buf); i++)
		CHECK_EQ(buf[i], 0x55);
	fixture_teardown(&f);
	printf("rebuild record retry: ok\n");
}

/*
 * A client write that fails on the rebuilt member while the rebuild's
 * last flush of it is under way: the write's thread, with its own queue.
 */
static void *failing_write_main(void *arg)
{
	struct fixture *f = arg;
	unsigned char buf[4096];
	struct ioq *q = NULL;

	CHECK_EQ(ioq_create(&q, IOQ_THREADS, 0), 0);
	ioq_set_current(q);
	memset(buf, 0x77, sizeof(buf));
	fail_member(f, 1, REQ_OP_WRITE, -EIO, 0);
	/* Member 0 took it: the write succeeds, member 1 is marked faulty. */
	CHECK_EQ(do_io(f->t, REQ_OP_WRITE, 0, sizeof(buf), buf), 0);
	memcpy(f->model, buf, sizeof(buf));
	ioq_set_current(NULL);
	ioq_destroy(q);
	return NULL;
}

static void failing_write_during_flush(void *arg)
{
	pthread_t th;

	CHECK_EQ(pthread_create(&th, NULL, failing_write_main, arg), 0);
	CHECK_EQ(pthread_join(th, NULL), 0);
}

/*
 * The rebuilt member faulted by a client write between the rebuild's last
 * copy step and its record (here: during the final flush) stays faulty:
 * the record must not make it active again, with the write it missed.
 */
static void case_rebuild_fault_before_record(void)
{
	uint8_t state[2] = { MIRROR_ACTIVE, MIRROR_REBUILDING }, st[MAXN];
	struct fixture f;
	struct error_rule rule = { .op = REQ_OP_FLUSH, .count = 1,
				   .before = failing_write_during_flush,
				   .arg = &f };

	fixture_setup_state(&f, 2, 2, 4u << 20, state, NULL);
	fill(&f, 0, 4u << 20, 61);
	CHECK_EQ(error_target_add_rule(f.err[1], &rule), 0);
	target_start(f.t);
	for (int i = 0; i < 1000; i++) {
		mirror_state_get(f.t, st, f.n);
		if (st[1] != MIRROR_REBUILDING)
			break;
		usleep(10000);
	}
	/* Time for a record that would override the fault. */
	usleep(200000);
	mirror_state_get(f.t, st, f.n);
	CHECK_EQ(st[1], MIRROR_FAULTY);
	CHECK_EQ(f.hooks.last_state[1], MIRROR_FAULTY);
	fixture_teardown(&f);
	printf("rebuild fault before record: ok\n");
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * The statistics see a rebuild move as it copies, not only at its
 * checkpoints (every second): a poller in its first 0.9 s, before any
 * checkpoint could be taken, sees it move, never back nor past the end.
 */
static void case_rebuild_progress(void)
{
	uint8_t state[2] = { MIRROR_ACTIVE, MIRROR_REBUILDING };
	struct target_member_state ms[2];
	uint64_t last = 0;
	unsigned int moves = 0;
	struct fixture f;
	double t0;

	fixture_setup_state(&f, 2, 2, 64u << 20, state, NULL);
	t0 = now_s();
	target_start(f.t);
	for (;;) {
		CHECK_EQ(target_member_states(f.t, ms, 2), 2);
		if (ms[1].state != TARGET_MEMBER_REBUILDING)
			break;
		CHECK(ms[1].rebuilt >= last && ms[1].rebuilt <= ms[1].bytes);
		if (ms[1].rebuilt != last && now_s() - t0 < 0.9)
			moves++;
		last = ms[1].rebuilt;
		usleep(500);
	}
	if (!moves) {
		fprintf(stderr, "rebuild progress: no move seen in 0.9 s\n");
		abort();
	}
	wait_active(&f, 1);
	fixture_teardown(&f);
	printf("rebuild progress: ok (%u moves)\n", moves);
}

/*
 * A member fails, the spare hook gives a new one, it is rebuilt while
 * writes go on, and then it alone (the other copy failing) serves reads.
 */
static void case_spare_takeover(unsigned int n, unsigned int k)
{
	struct fixture f;
	uint64_t need;
	unsigned int fail_m = 1, other;

	fixture_setup(&f, n, k, 8u << 20);
	CHECK_EQ(mirror_member_bytes(&f.g, f.size, &need), 0);
	snprintf(f.hooks.spare_path, sizeof(f.hooks.spare_path), "%s.spare",
		 f.path[0]);
	f.hooks.spare_bytes = DOFF + need;
	target_start(f.t);
	fill(&f, 0, 8u << 20, 31);
	fail_member(&f, fail_m, REQ_OP_WRITE, -EIO, 0);
	fill(&f, 0, 1u << 20, 32); /* member 1 fails: faulty, spare in */
	for (int i = 0; i < 20; i++)
		fill(&f, (uint64_t)(rnd() % 8) << 20, 1u << 20, 33 + i);
	wait_active(&f, fail_m);
	CHECK(f.hooks.spare_taken);
	CHECK_EQ(f.hooks.spare_role, fail_m);
	/* The copy that shared member 1's chunks with it goes away. */
	other = k == n ? 0 : (fail_m ^ 1);
	fail_member(&f, other, -1, -EIO, 0);
	expect_read(&f, 0, (uint32_t)f.size);
	fixture_teardown(&f);
	unlink(f.hooks.spare_path);
	printf("spare takeover n=%u k=%u: ok\n", n, k);
}

int main(void)
{
	struct ioq *q;

	unit_seed("mirror");
	case_layout();
	CHECK_EQ(ioq_create(&q, IOQ_THREADS, 0), 0);
	ioq_set_current(q);
	case_random(2, 2);
	case_random(3, 3);
	case_random(4, 2);
	case_random(3, 2);
	case_random(5, 3);
	case_write_fault(2, 2);
	case_write_fault(4, 2);
	case_read_fault();
	case_all_copies_fail();
	case_volume_fails();
	case_fast_zero();
	case_rebuild_resume();
	case_rebuild_flush();
	case_rebuild_record_retry();
	case_rebuild_fault_before_record();
	case_rebuild_progress();
	case_spare_takeover(2, 2);
	case_spare_takeover(4, 2);
	case_bitmap();
	ioq_set_current(NULL);
	ioq_destroy(q);
	return 0;
}
