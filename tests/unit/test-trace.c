// SPDX-License-Identifier: MIT
/*
 * Description: the bio trace's recording (trace.h).  Four threads emit
 * numbered events as fast as they can into rings of the smallest size,
 * so that some find their ring full: the file then holds, per thread,
 * a strictly increasing subsequence of what it emitted, its 'L' records
 * add up to what it lost, written + lost equals emitted exactly, and the
 * end record says the same totals as trace_stop.  Names added before the
 * trace started, and during it, are all in the file with their parents.
 * Request numbers are unique across threads.  A second trace in the same
 * process starts afresh (its own header, every name again, no events of
 * the first), and nothing is recorded before trace_run or after
 * trace_stop.  Then through a volume: a traced bio split over members
 * yields X, D and C events whose member ranges follow the stripe layout.
 * A bad buffer size and an unwritable path are refused with a message.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>

#include <bionbd/bio.h>
#include <bionbd/ioq.h>
#include <bionbd/trace.h>
#include <bionbd/volume.h>

#include "bioio_sync.h"
#include "unit.h"

#define THREADS 4
#define EVENTS_PER_THREAD 200000

static uint64_t emitted[THREADS];
static uint64_t seqs[THREADS][64];

static void *producer(void *arg)
{
	unsigned int t = (unsigned int)(uintptr_t)arg;

	for (unsigned int i = 0; i < 64; i++)
		seqs[t][i] = trace_seq_next();
	for (uint64_t i = 0; i < EVENTS_PER_THREAD; i++) {
		struct trace_rec ev = { .type = TRACE_D,
					.time_ns = trace_now(),
					.seq = seqs[t][0],
					.offset = i,
					.conn = t };

		trace_emit(&ev);
		emitted[t]++;
	}
	return NULL;
}

struct parsed {
	struct trace_file_hdr hdr;
	uint64_t events, lost, names;
	uint64_t per_thread_events[THREADS + 1];
	uint64_t per_thread_lost[THREADS + 1];
	bool ended;
	uint64_t end_written, end_lost;
	char name_of[16][64];
	uint32_t parent_of[16];
};

/* Read @path as a reader would; checks order per thread on the way. */
static void parse(const char *path, struct parsed *p)
{
	int fd = open(path, O_RDONLY);
	struct stat st;
	uint8_t *buf;
	uint64_t last[THREADS + 1];
	size_t off;

	memset(p, 0, sizeof(*p));
	memset(last, 0xff, sizeof(last));
	CHECK(fd >= 0);
	CHECK(!fstat(fd, &st));
	buf = malloc((size_t)st.st_size);
	CHECK(buf);
	CHECK_EQ(read(fd, buf, (size_t)st.st_size), st.st_size);
	close(fd);
	CHECK((size_t)st.st_size >= TRACE_HDR_BYTES);
	memcpy(&p->hdr, buf, sizeof(p->hdr));
	CHECK(!memcmp(p->hdr.magic, TRACE_MAGIC, 8));
	CHECK_EQ(p->hdr.version, TRACE_VERSION);
	CHECK_EQ(p->hdr.pid, getpid());
	for (off = TRACE_HDR_BYTES; off < (size_t)st.st_size;) {
		struct trace_rec ev;
		struct trace_name nm;

		if (buf[off] == TRACE_N) {
			memcpy(&nm, buf + off, sizeof(nm));
			CHECK(nm.obj < 16 && nm.name_len < 64);
			memcpy(p->name_of[nm.obj], buf + off + sizeof(nm),
			       nm.name_len);
			p->parent_of[nm.obj] = nm.parent;
			p->names++;
			off += nm.len;
			continue;
		}
		memcpy(&ev, buf + off, sizeof(ev));
		CHECK_EQ(ev.len, TRACE_REC_BYTES);
		off += ev.len;
		if (ev.type == TRACE_L) {
			CHECK(ev.thread <= THREADS);
			p->lost += ev.offset;
			p->per_thread_lost[ev.thread] += ev.offset;
		} else if (ev.type == TRACE_E) {
			p->ended = true;
			p->end_written = ev.offset;
			p->end_lost = ev.lat_ns;
		} else {
			CHECK_EQ(ev.type, TRACE_D);
			CHECK(ev.thread >= 1 && ev.thread <= THREADS);
			/* A thread's events arrive in the order it made them. */
			if (last[ev.thread] != UINT64_MAX)
				CHECK(ev.offset > last[ev.thread]);
			last[ev.thread] = ev.offset;
			p->events++;
			p->per_thread_events[ev.thread]++;
		}
	}
	CHECK_EQ(off, (size_t)st.st_size);
	free(buf);
}

static void test_threads(const char *path)
{
	pthread_t th[THREADS];
	uint64_t written, lost, total = 0;
	struct parsed p;
	char err[256];
	uint32_t exp, m0, m1;

	exp = trace_obj_add(TRACE_OBJ_EXPORT, 0, "disk");
	m0 = trace_obj_add(TRACE_OBJ_MEMBER, exp, "/m/zero");
	CHECK(exp && m0 && m0 != exp);
	CHECK_EQ(trace_open(path, TRACE_MIN_RING, err, sizeof(err)), 0);
	/* Not running yet: nothing is recorded, no request is numbered. */
	CHECK(!trace_on());
	CHECK_EQ(trace_seq_next(), 0);
	CHECK_EQ(trace_run(), 0);
	CHECK(trace_on());
	m1 = trace_obj_add(TRACE_OBJ_MEMBER, exp, "/m/one");
	for (uintptr_t t = 0; t < THREADS; t++)
		CHECK(!pthread_create(&th[t], NULL, producer, (void *)t));
	for (unsigned int t = 0; t < THREADS; t++)
		CHECK(!pthread_join(th[t], NULL));
	CHECK_EQ(trace_stop(&written, &lost), 0);
	CHECK(!trace_on());
	for (unsigned int t = 0; t < THREADS; t++)
		total += emitted[t];
	fprintf(stderr, "emitted %" PRIu64 ", written %" PRIu64
			", lost %" PRIu64 "\n",
		total, written, lost);
	CHECK_EQ(written + lost, total);
	CHECK(lost > 0); /* 73 slots against four busy threads */
	CHECK(written > 0);

	parse(path, &p);
	CHECK_EQ(p.events, written);
	CHECK_EQ(p.lost, lost);
	CHECK(p.ended);
	CHECK_EQ(p.end_written, written);
	CHECK_EQ(p.end_lost, lost);
	for (unsigned int t = 1; t <= THREADS; t++)
		CHECK_EQ(p.per_thread_events[t] + p.per_thread_lost[t],
			 EVENTS_PER_THREAD);
	CHECK(p.names >= 3);
	CHECK(!strcmp(p.name_of[exp], "disk"));
	CHECK(!strcmp(p.name_of[m0], "/m/zero"));
	CHECK(!strcmp(p.name_of[m1], "/m/one"));
	CHECK_EQ(p.parent_of[m1], exp);
	CHECK_EQ(p.parent_of[exp], 0);
	/* Request numbers: unique across and within threads. */
	for (unsigned int a = 0; a < THREADS; a++)
		for (unsigned int i = 0; i < 64; i++) {
			CHECK(seqs[a][i]);
			for (unsigned int b = 0; b < THREADS; b++)
				for (unsigned int j = 0; j < 64; j++)
					CHECK(seqs[a][i] != seqs[b][j] ||
					      (a == b && i == j));
		}
	/* Stopped: events go nowhere. */
	{
		struct trace_rec ev = { .type = TRACE_Q };

		trace_emit(&ev);
	}
}

static void test_second_trace(const char *path)
{
	struct parsed p;
	uint64_t written, lost;
	char err[256];
	struct trace_rec ev = { .type = TRACE_D, .offset = 1 };

	CHECK_EQ(trace_open(path, 0, err, sizeof(err)), 0);
	CHECK_EQ(trace_run(), 0);
	ev.time_ns = trace_now();
	ev.seq = trace_seq_next();
	CHECK(ev.seq);
	trace_emit(&ev);
	CHECK_EQ(trace_stop(&written, &lost), 0);
	CHECK_EQ(written, 1);
	CHECK_EQ(lost, 0);
	parse(path, &p);
	CHECK_EQ(p.events, 1);
	CHECK_EQ(p.lost, 0);
	CHECK_EQ(p.names, 3); /* all of them again */
	CHECK_EQ(p.hdr.ring_bytes, 65536 * TRACE_REC_BYTES);
}

static void test_refusals(const char *dir)
{
	char err[256], path[512];

	CHECK_EQ(trace_open("/nonexistent/dir/t", 0, err, sizeof(err)),
		 -ENOENT);
	CHECK(strstr(err, "/nonexistent/dir/t"));
	snprintf(path, sizeof(path), "%s/t", dir);
	CHECK_EQ(trace_open(path, 1024, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "4K"));
	CHECK_EQ(trace_run(), -EINVAL); /* nothing open */
}

/* A traced 192 KiB write from 32 KiB on 4 members of 64 KiB chunks. */
static void test_volume(const char *dir)
{
	struct volume_config cfg = { .nr_members = 4, .chunk_bytes = 65536 };
	char paths[4][512], tpath[600], err[256];
	const char *members[4];
	struct target *vol;
	struct ioq *q;
	struct bio *bio;
	uint8_t *buf = calloc(1, 192 << 10), *raw;
	uint64_t written, lost;
	int fd;
	struct stat st;
	size_t off;
	unsigned int x = 0, d = 0, c = 0;
	/* (member, member offset, bytes) of each piece, in order */
	static const uint64_t want[4][3] = {
		{ 0, 32768, 32768 }, { 1, 0, 65536 }, { 2, 0, 65536 },
		{ 3, 0, 32768 },
	};
	uint32_t ids[4] = { 0 };

	CHECK(buf);
	for (int i = 0; i < 4; i++) {
		snprintf(paths[i], sizeof(paths[i]), "%s/trace-m%d", dir, i);
		fd = open(paths[i], O_RDWR | O_CREAT | O_TRUNC, 0600);
		CHECK(fd >= 0);
		CHECK(!ftruncate(fd, 1 << 20));
		close(fd);
		members[i] = paths[i];
	}
	cfg.members = members;
	cfg.trace_id = trace_obj_add(TRACE_OBJ_EXPORT, 0, "vol");
	CHECK_EQ(volume_open(&vol, &cfg, err, sizeof(err)), 0);
	snprintf(tpath, sizeof(tpath), "%s/vol.trace", dir);
	CHECK_EQ(trace_open(tpath, 0, err, sizeof(err)), 0);
	CHECK_EQ(trace_run(), 0);
	CHECK_EQ(ioq_create(&q, IOQ_THREADS, 8), 0);
	ioq_set_current(q);
	bio = bio_alloc(1, REQ_OP_WRITE);
	CHECK(bio);
	CHECK_EQ(bio_add_buf(bio, buf, 192 << 10), 0);
	bio->bi_iter.bi_sector = 32768 >> SECTOR_SHIFT;
	bio->bi_trace = trace_seq_next();
	CHECK(bio->bi_trace);
	CHECK_EQ(submit_bio_wait(vol, bio), 0);
	bio_put(bio);
	CHECK_EQ(trace_stop(&written, &lost), 0);
	CHECK_EQ(lost, 0);
	CHECK_EQ(written, 12); /* X, D, C for each of 4 pieces */

	fd = open(tpath, O_RDONLY);
	CHECK(fd >= 0 && !fstat(fd, &st));
	raw = malloc((size_t)st.st_size);
	CHECK(raw);
	CHECK_EQ(read(fd, raw, (size_t)st.st_size), st.st_size);
	close(fd);
	for (off = TRACE_HDR_BYTES; off < (size_t)st.st_size;) {
		struct trace_rec ev;
		struct trace_name nm;

		if (raw[off] == TRACE_N) {
			memcpy(&nm, raw + off, sizeof(nm));
			if (nm.parent == cfg.trace_id && nm.kind ==
			    TRACE_OBJ_MEMBER) {
				for (int i = 0; i < 4; i++)
					if ((size_t)nm.name_len ==
						    strlen(paths[i]) &&
					    !memcmp(raw + off + sizeof(nm),
						    paths[i], nm.name_len))
						ids[i] = nm.obj;
			}
			off += nm.len;
			continue;
		}
		memcpy(&ev, raw + off, sizeof(ev));
		off += ev.len;
		if (ev.type == TRACE_E)
			continue;
		CHECK(ev.type == TRACE_X || ev.type == TRACE_D ||
		      ev.type == TRACE_C);
		CHECK_EQ(ev.op, REQ_OP_WRITE);
		if (ev.type == TRACE_X) {
			/* Volume range of piece x. */
			uint64_t at = x == 0 ? 32768 : (uint64_t)x * 65536;

			CHECK(x < 4);
			CHECK_EQ(ev.offset, at);
			CHECK_EQ(ev.size, want[x][2]);
			CHECK_EQ(ev.obj, ids[want[x][0]]);
			x++;
		} else {
			unsigned int i;

			for (i = 0; i < 4; i++)
				if (ev.obj == ids[i])
					break;
			CHECK(i < 4);
			CHECK_EQ(ev.offset, want[i][1]);
			CHECK_EQ(ev.size, want[i][2]);
			if (ev.type == TRACE_C) {
				CHECK_EQ(ev.status, 0);
				CHECK(ev.lat_ns > 0);
				c++;
			} else {
				d++;
			}
		}
	}
	CHECK_EQ(x, 4);
	CHECK_EQ(d, 4);
	CHECK_EQ(c, 4);
	for (int i = 0; i < 4; i++)
		CHECK(ids[i]);
	free(raw);
	ioq_set_current(NULL);
	ioq_destroy(q);
	target_destroy(vol);
	free(buf);
	for (int i = 0; i < 4; i++)
		unlink(paths[i]);
	unlink(tpath);
}

int main(void)
{
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	char path[512];

	snprintf(path, sizeof(path), "%s/unit-trace.%d", dir, (int)getpid());
	test_refusals(dir);
	test_threads(path);
	test_second_trace(path);
	unlink(path);
	test_volume(dir);
	bio_pool_drain();
	return 0;
}
