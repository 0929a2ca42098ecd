// SPDX-License-Identifier: MIT
/*
 * Description: fault and delay rules (fault.h) on real volumes opened with
 * volume_open.  Parsing: good rules pass, each kind of mistake is refused
 * naming the word at fault.  Ranges: a volume range rule fails exactly the
 * writes that overlap it, on raid0 (3 members), raid1 and raid10 (every
 * copy fails, so the write does), against a plain interval test; a member
 * range rule fails exactly the reads with a piece on that member inside
 * it (stripe_map as the oracle).  Counting: after=/count=, rate= within a
 * binomial tolerance, the same seed giving the same faults and another
 * seed other ones; a trigger file switching a rule on and off.  Torn
 * writes: exactly the first K sectors reach the member file.  Stacking:
 * the first error wins, delays add up.  Delays and stalls (both ioq
 * backends): a bio is held at least the delay, a stall until its file is
 * removed, and the bio then completes normally.  Reads a rule may touch
 * never take the sendfile path (target_iomap), writes-only rules keep it.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <bionbd/bio.h>
#include <bionbd/fault.h>
#include <bionbd/ioq.h>
#include <bionbd/superblock.h>
#include <bionbd/target.h>
#include <bionbd/volume.h>

#include "bioio_sync.h"
#include "unit.h"

#define CHUNK 4096u
#define VOL (256u * 1024)

static char dir[256];
static char paths[4][300];
static const char *members[4];

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void make_members(const char *tag, unsigned int n, bool create)
{
	for (unsigned int i = 0; i < n; i++) {
		snprintf(paths[i], sizeof(paths[i]), "%s/%s-%u.img", dir, tag,
			 i);
		members[i] = paths[i];
		if (create) {
			int fd = open(paths[i], O_RDWR | O_CREAT | O_TRUNC,
				      0600);

			CHECK(fd >= 0);
			CHECK_EQ(ftruncate(fd, VOL), 0);
			close(fd);
		}
	}
}

static void remove_members(unsigned int n)
{
	for (unsigned int i = 0; i < n; i++)
		unlink(paths[i]);
}

/* Open the volume on members[0..n) with the given rules; NULL kind ends. */
static struct target *open_with(unsigned int n, const struct fault_text *f,
				unsigned int nr, uint32_t level, bool mirror_new)
{
	struct volume_config cfg = {
		.members = members,
		.nr_members = n,
		.chunk_bytes = CHUNK,
		.faults = f,
		.nr_faults = nr,
	};
	struct target *t = NULL;
	char err[512];
	int r;

	if (level != SB_LEVEL_RAID0 || mirror_new) {
		cfg.level_set = true;
		cfg.level = level;
		cfg.size_bytes = mirror_new ? VOL : 0;
	}
	r = volume_open(&t, &cfg, err, sizeof(err));
	if (r)
		fprintf(stderr, "volume_open: %s\n", err);
	CHECK_EQ(r, 0);
	return t;
}

static int do_io(struct target *t, unsigned int opf, uint64_t off,
		 uint32_t len, void *buf)
{
	return test_bio_io(t, opf, off, len, buf);
}

/* ------------------------------------------------------------ parsing */

static void expect_refused(enum fault_kind kind, const char *text,
			   unsigned int nr, const char *needle)
{
	char err[512] = "";

	if (fault_rule_check(kind, text, nr, err, sizeof(err)) != -EINVAL ||
	    !strstr(err, needle)) {
		fprintf(stderr, "rule '%s': expected a refusal naming '%s', got '%s'\n",
			text, needle, err);
		abort();
	}
}

static void case_parse(void)
{
	static const char *const good_faults[] = {
		"member=2 op=write error=EIO rate=1% range=1G-2G",
		"member=0,3 op=read,trim error=ENOSPC after=10 count=2",
		"op=write torn=3 member-range=64K+4K seed=7",
		"rate=0.25 file=/tmp/x range=0-",
		"member=* op=* error=EROFS",
	};
	static const char *const good_delays[] = {
		"member=* op=read ms=5",
		"ms=0.5",
		"ms=2-8",
		"ms=3 dist=exp",
		"ms=2-8 dist=uniform seed=1",
		"dist=uniform ms=2-8",
		"op=write stall file=/tmp/stall",
	};
	char err[256];

	for (size_t i = 0; i < sizeof(good_faults) / sizeof(*good_faults); i++)
		CHECK_EQ(fault_rule_check(FAULT_ERROR, good_faults[i], 4, err,
					  sizeof(err)),
			 0);
	for (size_t i = 0; i < sizeof(good_delays) / sizeof(*good_delays); i++)
		CHECK_EQ(fault_rule_check(FAULT_DELAY, good_delays[i], 4, err,
					  sizeof(err)),
			 0);
	expect_refused(FAULT_ERROR, "", 4, "empty rule");
	expect_refused(FAULT_ERROR, " \t ", 4, "empty rule");
	expect_refused(FAULT_DELAY, "", 4, "empty rule");
	expect_refused(FAULT_ERROR, "member=4", 4, "member=4");
	expect_refused(FAULT_ERROR, "member=4", 4, "does not exist");
	expect_refused(FAULT_ERROR, "member=x", 0, "member=x");
	expect_refused(FAULT_ERROR, "op=rename", 0, "op=rename");
	expect_refused(FAULT_ERROR, "error=EWHATEVER", 0, "error=EWHATEVER");
	expect_refused(FAULT_ERROR, "rate=150%", 0, "rate=150%");
	expect_refused(FAULT_ERROR, "rate=2", 0, "rate=2");
	expect_refused(FAULT_ERROR, "range=2G-1G", 0, "range=2G-1G");
	expect_refused(FAULT_ERROR, "range=1Q-2G", 0, "range=1Q-2G");
	expect_refused(FAULT_ERROR, "count=0", 0, "count=0");
	expect_refused(FAULT_ERROR, "torn=3", 0, "only writes");
	expect_refused(FAULT_ERROR, "ms=5", 0, "unknown key");
	expect_refused(FAULT_ERROR, "stall", 0, "expected key=value");
	expect_refused(FAULT_ERROR, "color=red", 0, "color=red");
	expect_refused(FAULT_DELAY, "op=read", 0, "ms=");
	expect_refused(FAULT_DELAY, "stall", 0, "file=");
	expect_refused(FAULT_DELAY, "ms=5 stall file=/x", 0, "either");
	expect_refused(FAULT_DELAY, "ms=-1", 0, "ms=-1");
	expect_refused(FAULT_DELAY, "ms=9999999999", 0, "an hour");
	expect_refused(FAULT_DELAY, "ms=5 dist=uniform", 0, "needs a range");
	expect_refused(FAULT_DELAY, "ms=2-8 dist=exp", 0, "a range is uniform");
	/* Words in any order: dist= before ms= is checked the same. */
	expect_refused(FAULT_DELAY, "dist=exp ms=2-8", 0, "a range is uniform");
	expect_refused(FAULT_DELAY, "dist=fixed ms=2-8", 0, "a range is uniform");
	expect_refused(FAULT_DELAY, "dist=uniform ms=5", 0, "needs a range");
	expect_refused(FAULT_DELAY, "error=EIO ms=1", 0, "unknown key");
	/* The second would replace the first: writes only, not reads too. */
	expect_refused(FAULT_ERROR, "op=read op=write", 0, "op: given twice");
	expect_refused(FAULT_ERROR, "member=0 rate=1% member=1", 4,
		       "member: given twice");
	expect_refused(FAULT_DELAY, "ms=1 stall ms=2", 0, "ms: given twice");
}

/* ------------------------------------------------------------- ranges */

/* A rule over a random volume range fails exactly the writes touching it. */
static void case_volume_range(const char *tag, unsigned int n, uint32_t level)
{
	static char buf[64 * 1024];

	make_members(tag, n, level == SB_LEVEL_RAID0);
	if (level != SB_LEVEL_RAID0) /* a new mirror: superblocks first */
		target_destroy(open_with(n, NULL, 0, level, true));
	for (int round = 0; round < 12; round++) {
		uint64_t r0 = rnd_below(VOL / 2 / 512) * 512;
		uint64_t r1 = r0 + rnd_range(1, 24) * 512 *
					   (rnd_below(3) ? 1 : 16);
		char text[128];
		struct fault_text f = { FAULT_ERROR, text };
		struct target *t;

		if (r1 > VOL / 2)
			r1 = VOL / 2;
		snprintf(text, sizeof(text), "op=write range=%llu-%llu",
			 (unsigned long long)r0, (unsigned long long)r1);
		t = open_with(n, &f, 1, level, false);
		for (int i = 0; i < 80; i++) {
			uint64_t size = t->size_bytes;
			uint32_t len = (uint32_t)rnd_range(1, 32) * 512 *
				       (rnd_below(4) ? 1 : 4);
			uint64_t off = rnd_below((size - len) / 512 + 1) * 512;
			bool hit = off < r1 && off + len > r0;
			int r = do_io(t, REQ_OP_WRITE, off, len, buf);

			if (r != (hit ? -EIO : 0)) {
				fprintf(stderr, "%s: rule %s, write %llu+%u: %d\n",
					tag, text, (unsigned long long)off,
					len, r);
				abort();
			}
		}
		target_destroy(t);
	}
	remove_members(n);
}

/* A member range rule on member 1 of a raid0: reads with a piece there. */
static void case_member_range(void)
{
	static char buf[64 * 1024];
	struct stripe_geom g;

	make_members("mrange", 3, true);
	CHECK_EQ(stripe_geom_init(&g, 3, CHUNK), 0);
	for (int round = 0; round < 8; round++) {
		uint64_t m0 = rnd_below(VOL / 8 / 512) * 512;
		uint64_t m1 = m0 + rnd_range(1, 20) * 512;
		char text[128];
		struct fault_text f = { FAULT_ERROR, text };
		struct target *t;

		snprintf(text, sizeof(text),
			 "member=1 op=read error=EIO member-range=%llu-%llu",
			 (unsigned long long)m0, (unsigned long long)m1);
		t = open_with(3, &f, 1, SB_LEVEL_RAID0, false);
		for (int i = 0; i < 100; i++) {
			uint32_t len = (uint32_t)rnd_range(1, 64) * 512;
			uint64_t off = rnd_below((VOL / 2 - len) / 512 + 1) * 512;
			uint64_t at = off, left = len;
			bool hit = false;
			struct stripe_piece p;

			while (left) {
				stripe_map(&g, at, left, &p);
				if (p.member == 1 && p.member_offset < m1 &&
				    p.member_offset + p.length > m0)
					hit = true;
				at += p.length;
				left -= p.length;
			}
			CHECK_EQ(do_io(t, REQ_OP_READ, off, len, buf),
				 hit ? -EIO : 0);
		}
		target_destroy(t);
	}
	remove_members(3);
}

/* ---------------------------------------------------------- counting */

static void case_after_count(void)
{
	static char buf[4096];
	struct fault_text f = { FAULT_ERROR, "op=write after=5 count=3" };
	struct target *t;

	make_members("count", 2, true);
	t = open_with(2, &f, 1, SB_LEVEL_RAID0, false);
	for (int i = 1; i <= 12; i++)
		CHECK_EQ(do_io(t, REQ_OP_WRITE, 0, sizeof(buf), buf),
			 i > 5 && i <= 8 ? -EIO : 0);
	/* Reads are not counted: op=write only. */
	CHECK_EQ(do_io(t, REQ_OP_READ, 0, sizeof(buf), buf), 0);
	target_destroy(t);
	remove_members(2);
}

/* Which of 2000 reads a rate rule failed, as a bit pattern. */
static unsigned int rate_run(const char *text, uint8_t *pattern)
{
	static char buf[4096];
	struct fault_text f = { FAULT_ERROR, text };
	struct target *t = open_with(2, &f, 1, SB_LEVEL_RAID0, false);
	unsigned int failed = 0;

	memset(pattern, 0, 2000 / 8);
	for (int i = 0; i < 2000; i++) {
		int r = do_io(t, REQ_OP_READ, (uint64_t)(i % 64) * 4096,
			      sizeof(buf), buf);

		CHECK(r == 0 || r == -EIO);
		if (r) {
			pattern[i / 8] |= 1u << (i % 8);
			failed++;
		}
	}
	target_destroy(t);
	return failed;
}

static void case_rate_seed(void)
{
	uint8_t a[250], b[250], c[250];
	unsigned int na, nb, nc;

	make_members("rate", 2, true);
	na = rate_run("op=read error=EIO rate=30% seed=42", a);
	nb = rate_run("op=read error=EIO rate=30% seed=42", b);
	nc = rate_run("op=read error=EIO rate=0.3 seed=43", c);
	/* 600 expected; the standard deviation is about 20. */
	CHECK(na >= 500 && na <= 700);
	CHECK(nc >= 500 && nc <= 700);
	CHECK_EQ(na, nb);
	CHECK(!memcmp(a, b, sizeof(a)));
	CHECK(memcmp(a, c, sizeof(a)));
	CHECK_EQ(rate_run("op=read error=EIO rate=0%", a), 0);
	remove_members(2);
}

static void case_trigger_file(void)
{
	static char buf[4096];
	char trigger[300], text[400];
	struct fault_text f = { FAULT_ERROR, text };
	struct target *t;
	int fd;

	snprintf(trigger, sizeof(trigger), "%s/trigger", dir);
	unlink(trigger);
	snprintf(text, sizeof(text), "op=read error=ENOSPC file=%s", trigger);
	make_members("trigger", 2, true);
	t = open_with(2, &f, 1, SB_LEVEL_RAID0, false);
	CHECK_EQ(do_io(t, REQ_OP_READ, 0, sizeof(buf), buf), 0);
	fd = open(trigger, O_CREAT | O_WRONLY, 0600);
	CHECK(fd >= 0);
	close(fd);
	CHECK_EQ(do_io(t, REQ_OP_READ, 0, sizeof(buf), buf), -ENOSPC);
	CHECK_EQ(do_io(t, REQ_OP_READ, 8192, sizeof(buf), buf), -ENOSPC);
	unlink(trigger);
	CHECK_EQ(do_io(t, REQ_OP_READ, 0, sizeof(buf), buf), 0);
	target_destroy(t);
	remove_members(2);
}

/* ------------------------------------------------------------- torn */

static void case_torn(void)
{
	static char buf[16384], back[16384];
	struct fault_text f[] = {
		{ FAULT_ERROR, "member=0 op=write torn=3" },
		{ FAULT_ERROR, "member=1 op=write torn=2 error=ENOSPC" },
	};
	struct target *t;
	int fd;

	make_members("torn", 2, true);
	memset(buf, 0xa5, sizeof(buf));
	t = open_with(2, f, 2, SB_LEVEL_RAID0, false);
	/* 16 KiB inside chunk 0 (member 0): 3 sectors land, EIO. */
	CHECK_EQ(do_io(t, REQ_OP_WRITE, 0, CHUNK, buf), -EIO);
	/* Chunk 1 is member 1's first: 2 sectors land, ENOSPC. */
	CHECK_EQ(do_io(t, REQ_OP_WRITE, CHUNK, CHUNK, buf), -ENOSPC);
	/* A write smaller than K sectors lands whole and still fails. */
	CHECK_EQ(do_io(t, REQ_OP_WRITE, 2 * CHUNK, 512, buf), -EIO);
	target_destroy(t);
	for (int m = 0; m < 2; m++) {
		unsigned int landed = m ? 2 * 512 : 3 * 512;

		fd = open(paths[m], O_RDONLY);
		CHECK(fd >= 0);
		CHECK_EQ(pread(fd, back, 2 * CHUNK, 0), 2 * CHUNK);
		close(fd);
		for (unsigned int i = 0; i < 2 * CHUNK; i++) {
			/* Member 0's second chunk is volume chunk 2. */
			bool written = i < landed ||
				       (!m && i >= CHUNK && i < CHUNK + 512);

			CHECK_EQ((uint8_t)back[i], written ? 0xa5 : 0);
		}
	}
	remove_members(2);
}

/* ---------------------------------------------------------- stacking */

static void case_stacking(void)
{
	static char buf[4096];
	struct fault_text f[] = {
		{ FAULT_DELAY, "op=read ms=20" },
		{ FAULT_ERROR, "op=write error=ENOSPC range=0-8K" },
		{ FAULT_ERROR, "op=write error=EIO" },
		{ FAULT_DELAY, "op=read ms=30" },
	};
	struct target *t;
	double t0;

	make_members("stack", 2, true);
	t = open_with(2, f, 4, SB_LEVEL_RAID0, false);
	CHECK_EQ(do_io(t, REQ_OP_WRITE, 0, sizeof(buf), buf), -ENOSPC);
	CHECK_EQ(do_io(t, REQ_OP_WRITE, 65536, sizeof(buf), buf), -EIO);
	t0 = now_ms();
	CHECK_EQ(do_io(t, REQ_OP_READ, 0, sizeof(buf), buf), 0);
	CHECK(now_ms() - t0 >= 50);
	target_destroy(t);
	remove_members(2);
}

/* ------------------------------------------------------ delays, stall */

struct unlinker {
	const char *path;
	unsigned int ms;
};

static void *unlink_later(void *arg)
{
	struct unlinker *u = arg;
	struct timespec ts = { .tv_sec = u->ms / 1000,
			       .tv_nsec = (long)(u->ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
	unlink(u->path);
	return NULL;
}

static void case_delay_stall(enum ioq_backend backend)
{
	static char buf[65536];
	char trigger[300], stall[400];
	struct fault_text f[] = {
		{ FAULT_DELAY, "member=0 op=read ms=40" },
		{ FAULT_DELAY, stall },
		{ FAULT_DELAY, "op=flush ms=10-20" },
	};
	struct unlinker u = { trigger, 150 };
	struct ioq *q;
	struct target *t;
	pthread_t tid;
	double t0;
	int fd;

	CHECK_EQ(ioq_create(&q, backend, 0), 0);
	ioq_set_current(q);
	snprintf(trigger, sizeof(trigger), "%s/stall", dir);
	snprintf(stall, sizeof(stall), "op=write stall file=%s", trigger);
	make_members("delay", 2, true);
	t = open_with(2, f, 3, SB_LEVEL_RAID0, false);

	/* Chunk 0 is member 0's: held 40 ms.  Chunk 1 is not. */
	t0 = now_ms();
	CHECK_EQ(do_io(t, REQ_OP_READ, 0, 4096, buf), 0);
	CHECK(now_ms() - t0 >= 40);
	/* A read over both members waits for the delayed piece. */
	t0 = now_ms();
	CHECK_EQ(do_io(t, REQ_OP_READ, 0, 2 * CHUNK, buf), 0);
	CHECK(now_ms() - t0 >= 40);
	/* Flushes go to both members, each held 10-20 ms. */
	t0 = now_ms();
	CHECK_EQ(do_io(t, REQ_OP_FLUSH, 0, 0, NULL), 0);
	CHECK(now_ms() - t0 >= 10);

	/* No trigger file: writes pass. */
	unlink(trigger);
	memset(buf, 0x3c, sizeof(buf));
	CHECK_EQ(do_io(t, REQ_OP_WRITE, 0, 4096, buf), 0);
	/* With it: held until it goes away, then written. */
	fd = open(trigger, O_CREAT | O_WRONLY, 0600);
	CHECK(fd >= 0);
	close(fd);
	CHECK_EQ(pthread_create(&tid, NULL, unlink_later, &u), 0);
	t0 = now_ms();
	CHECK_EQ(do_io(t, REQ_OP_WRITE, 8192, 8192, buf), 0);
	CHECK(now_ms() - t0 >= 150);
	pthread_join(tid, NULL);
	memset(buf, 0, sizeof(buf));
	CHECK_EQ(do_io(t, REQ_OP_READ, 8192, 8192, buf), 0);
	CHECK_EQ((uint8_t)buf[0], 0x3c);
	CHECK_EQ((uint8_t)buf[8191], 0x3c);
	CHECK_EQ(ioq_inflight(q), 0);
	target_destroy(t);
	remove_members(2);
	ioq_set_current(NULL);
	ioq_destroy(q);
}

/* ------------------------------------------------------------ iomap */

static void case_iomap(void)
{
	struct fault_text reads = { FAULT_ERROR, "member=1 op=read" };
	struct fault_text writes = { FAULT_ERROR, "member=1 op=write" };
	struct target_iomap m;
	struct target *t;
	char saved[256];

	if (access("/dev/shm", W_OK))
		return; /* no tmpfs: nothing answers iomap anyway */
	snprintf(saved, sizeof(saved), "%s", dir);
	snprintf(dir, sizeof(dir), "/dev/shm");
	make_members("bionbd-fault-iomap", 2, true);
	t = open_with(2, &writes, 1, SB_LEVEL_RAID0, false);
	CHECK_EQ(target_iomap(t, CHUNK, 4096, 0, &m), 0);
	target_destroy(t);
	t = open_with(2, &reads, 1, SB_LEVEL_RAID0, false);
	CHECK_EQ(target_iomap(t, CHUNK, 4096, 0, &m), -EOPNOTSUPP);
	target_destroy(t);
	remove_members(2);
	snprintf(dir, sizeof(dir), "%s", saved);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	struct ioq *q;

	unit_seed("fault");
	snprintf(dir, sizeof(dir), "%s/bionbd-fault-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	CHECK(mkdtemp(dir));
	case_parse();
	CHECK_EQ(ioq_create(&q, IOQ_THREADS, 0), 0);
	ioq_set_current(q);
	case_volume_range("raid0", 3, SB_LEVEL_RAID0);
	case_volume_range("raid1", 2, SB_LEVEL_RAID1);
	case_volume_range("raid10", 4, SB_LEVEL_RAID10);
	case_member_range();
	case_after_count();
	case_rate_seed();
	case_trigger_file();
	case_torn();
	case_stacking();
	case_iomap();
	ioq_set_current(NULL);
	ioq_destroy(q);
	case_delay_stall(IOQ_THREADS);
	if (ioq_create(&q, IOQ_IO_URING, 0) == 0) {
		ioq_destroy(q);
		case_delay_stall(IOQ_IO_URING);
	}
	rmdir(dir);
	return 0;
}
