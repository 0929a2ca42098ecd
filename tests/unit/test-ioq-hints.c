// SPDX-License-Identifier: MIT
/*
 * Description: CACHE bios (hints) on a file target whose file is on disk,
 * not tmpfs: the backend does the readahead off the submitting thread, at
 * most IOQ_MAX_HINTS at a time per queue; more end at once, successful.
 * For each ioq backend (io_uring, threads; io_uring skipped with a note
 * where the machine lacks it), three rounds of 16 hints over a 64 MiB
 * file: right after submission exactly IOQ_MAX_HINTS are in flight (so a
 * round whose count of held hints leaked from the one before would hold
 * fewer, or none), the others have ended already, and every one of them
 * ends with 0 and its whole size.  A hint and a read submitted after the
 * queue is full: the hint ends at once, the read goes to the backend and
 * returns the file's data.
 *
 * The file lies in $TMPDIR (ctest points it at the build directory); on a
 * tmpfs every hint ends at once, which the test cannot tell from a
 * regression, so there it skips (77).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdbool.h>
#include <string.h>
#include <sys/vfs.h>

#include <bionbd/bio.h>
#include <bionbd/ioq.h>
#include <bionbd/target.h>

#include "unit.h"

#define FILE_BYTES (64u << 20)
#define NR_HINTS 16u
#define HINT_BYTES (4u << 20)

struct done {
	unsigned int calls;
	int err;
	uint32_t bytes;
};

static void done_end_io(struct bio *bio)
{
	struct done *d = bio->bi_private;

	d->calls++;
	d->err = bio->bi_status;
	bio_put(bio);
}

static struct bio *hint(struct target *t, uint64_t off, struct done *d)
{
	struct bio *bio = bio_alloc(0, REQ_OP_CACHE);

	CHECK(bio);
	bio->bi_iter.bi_sector = off >> SECTOR_SHIFT;
	bio->bi_iter.bi_size = HINT_BYTES;
	bio->bi_private = d;
	bio->bi_end_io = done_end_io;
	submit_bio(t, bio);
	return bio;
}

static void wait_all(struct ioq *q)
{
	while (ioq_inflight(q) || ioq_has_ready(q))
		CHECK(ioq_wait(q) >= 0);
	CHECK(ioq_reap(q) >= 0);
}

static void round_of_hints(struct target *t, struct ioq *q, unsigned int no)
{
	struct done d[NR_HINTS];
	unsigned int ended = 0;

	memset(d, 0, sizeof(d));
	for (unsigned int i = 0; i < NR_HINTS; i++)
		hint(t, (uint64_t)i * HINT_BYTES, &d[i]);
	CHECK_EQ(ioq_inflight(q), IOQ_MAX_HINTS);
	for (unsigned int i = 0; i < NR_HINTS; i++)
		ended += d[i].calls;
	CHECK_EQ(ended, NR_HINTS - IOQ_MAX_HINTS);
	wait_all(q);
	for (unsigned int i = 0; i < NR_HINTS; i++) {
		CHECK_EQ(d[i].calls, 1);
		CHECK_EQ(d[i].err, 0);
	}
	printf("  round %u: %u of %u hints held, the rest ended at once\n",
	       no, IOQ_MAX_HINTS, NR_HINTS);
}

static bool run_backend(struct target *t, enum ioq_backend be,
			const uint8_t *img)
{
	struct ioq *q;
	struct done d[IOQ_MAX_HINTS + 1], late = { 0 }, rd = { 0 };
	static uint8_t buf[64 << 10];
	struct bio *bio;

	if (!unit_ioq_create(&q, be))
		return false;
	ioq_set_current(q);
	printf("%s:\n", ioq_backend_name(be));
	for (unsigned int no = 1; no <= 3; no++)
		round_of_hints(t, q, no);

	/* Full of hints: another hint ends at once, a read still goes. */
	memset(d, 0, sizeof(d));
	for (unsigned int i = 0; i < IOQ_MAX_HINTS; i++)
		hint(t, (uint64_t)i * HINT_BYTES, &d[i]);
	hint(t, 0, &late);
	CHECK_EQ(late.calls, 1);
	CHECK_EQ(late.err, 0);
	bio = bio_alloc(1, REQ_OP_READ);
	CHECK(bio);
	CHECK_EQ(bio_add_buf(bio, buf, sizeof(buf)), 0);
	bio->bi_iter.bi_sector = (uint64_t)(FILE_BYTES / 2) >> SECTOR_SHIFT;
	bio->bi_private = &rd;
	bio->bi_end_io = done_end_io;
	submit_bio(t, bio);
	CHECK_EQ(ioq_inflight(q), IOQ_MAX_HINTS + 1);
	wait_all(q);
	CHECK_EQ(rd.calls, 1);
	CHECK_EQ(rd.err, 0);
	CHECK(!memcmp(buf, img + FILE_BYTES / 2, sizeof(buf)));
	printf("  full: a hint ended at once, a read was served\n");

	ioq_set_current(NULL);
	ioq_destroy(q);
	return true;
}

int main(void)
{
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	char path[4096];
	struct statfs sfs;
	struct target *t;
	uint8_t *img;
	bool uring;
	int fd;

	setvbuf(stdout, NULL, _IOLBF, 0);
	CHECK_EQ(statfs(dir, &sfs), 0);
	if (sfs.f_type == TMPFS_MAGIC) {
		printf("%s is a tmpfs: hints end at once there, skipped\n",
		       dir);
		return 77;
	}
	snprintf(path, sizeof(path), "%s/ioq-hints.XXXXXX", dir);
	fd = mkstemp(path);
	CHECK(fd >= 0);
	img = malloc(FILE_BYTES);
	CHECK(img);
	for (uint32_t i = 0; i < FILE_BYTES; i++)
		img[i] = (uint8_t)(i * 7 + (i >> 12));
	CHECK_EQ(pwrite(fd, img, FILE_BYTES, 0), FILE_BYTES);
	CHECK_EQ(file_target_open(&t, path, NULL), 0);
	/* The target keeps the file; an abort leaves nothing behind. */
	CHECK_EQ(unlink(path), 0);

	uring = run_backend(t, IOQ_IO_URING, img);
	CHECK(run_backend(t, IOQ_THREADS, img));
	if (!uring)
		printf("note: only the threads backend ran\n");

	target_destroy(t);
	close(fd);
	free(img);
	printf("ok\n");
	return 0;
}
