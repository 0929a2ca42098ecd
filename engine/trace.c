// SPDX-License-Identifier: MIT
/*
 * trace.c - the bio trace (trace.h): per-thread event rings and the
 * writer thread that empties them into the file.
 *
 * A ring has one producer (its thread) and one consumer (the writer):
 * the producer publishes records by a release store of ->head, the
 * writer frees their slots by a release store of ->tail, so neither ever
 * waits for the other or takes a lock.  Rings are made on a thread's
 * first event and registered under trace_lock; a ring whose thread has
 * exited is freed by the writer once it is empty.
 *
 * Names are rare and must never be lost: they go to a list under the
 * lock instead of a ring, and the writer puts them in the file before the
 * events of the same round (an event may still come before its name in
 * the file: readers resolve names at the end).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bionbd/bio.h>
#include <bionbd/trace.h>

#include "internal.h"

/* How often the writer empties the rings. */
#define TRACE_WRITE_INTERVAL_NS (10 * 1000 * 1000)
#define TRACE_OUT_BYTES (1u << 20)

struct trace_ring {
	struct trace_ring *next;
	uint16_t id;
	bool orphan; /* its thread exited (under trace_lock) */
	uint64_t mask; /* slots - 1, slots a power of two */
	uint64_t head; /* next slot to fill: the producer's */
	uint64_t tail; /* next slot to write out: the writer's */
	uint64_t lost; /* events dropped: the producer's */
	uint64_t lost_seen; /* of those, recorded in the file: the writer's */
	uint64_t seq; /* the producer's last request number */
	struct trace_rec *v;
};

struct trace_namebuf {
	struct trace_namebuf *next;
	size_t bytes;
	uint8_t rec[]; /* a struct trace_name and its name, padded */
};

int trace_enabled;

static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t trace_cond = PTHREAD_COND_INITIALIZER;
static struct trace_ring *rings;
/* Every name ever added (a trace started later has them all too). */
static struct trace_namebuf *names, **names_tail = &names;
static uint32_t nr_objs;
static unsigned int names_written; /* into the current file */
static unsigned int gen; /* of the current trace; rings know theirs */
static bool running, stopping;
static pthread_t writer;
static int trace_fd = -1;
static int write_err;
static uint64_t start_ns, ring_slots, nr_written;
static uint64_t nr_lost_closed; /* events the failed file did not take */
static uint64_t nr_lost_retired; /* drops of rings freed already */
static uint64_t nr_lost_noring, noring_seen; /* threads without a ring */
static uint16_t nr_rings;
static uint8_t *out;
static size_t out_len;

static pthread_key_t ring_key;
static pthread_once_t ring_once = PTHREAD_ONCE_INIT;
static __thread struct trace_ring *my_ring;
static __thread unsigned int my_gen;

uint64_t trace_now(void)
{
	return engine_now_ns();
}

/* A thread with a ring exits: the writer frees it once it is empty. */
static void ring_exit(void *arg)
{
	/* A ring of an earlier trace is gone (its address may be reused). */
	if (arg != my_ring || my_gen != __atomic_load_n(&gen, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&trace_lock);
	for (struct trace_ring *r = rings; r; r = r->next)
		if (r == arg)
			r->orphan = true;
	pthread_mutex_unlock(&trace_lock);
}

static void ring_key_init(void)
{
	/* Without the key, an exited thread's ring lives until the stop. */
	(void)pthread_key_create(&ring_key, ring_exit);
}

static __attribute__((noinline)) struct trace_ring *ring_slow(void)
{
	struct trace_ring *r = NULL;

	pthread_once(&ring_once, ring_key_init);
	pthread_mutex_lock(&trace_lock);
	if (!running || stopping || nr_rings == UINT16_MAX)
		goto out;
	r = calloc(1, sizeof(*r));
	if (r)
		r->v = malloc(ring_slots * sizeof(*r->v));
	if (!r || !r->v) {
		free(r);
		r = NULL;
		goto out;
	}
	r->mask = ring_slots - 1;
	r->id = ++nr_rings;
	r->next = rings;
	rings = r;
	my_ring = r;
	my_gen = gen;
	pthread_setspecific(ring_key, r);
out:
	pthread_mutex_unlock(&trace_lock);
	return r;
}

static inline struct trace_ring *ring(void)
{
	if (__builtin_expect(my_ring && my_gen == __atomic_load_n(
						      &gen, __ATOMIC_RELAXED),
			     1))
		return my_ring;
	return ring_slow();
}

void trace_emit(struct trace_rec *ev)
{
	struct trace_ring *r;
	uint64_t head;

	if (!trace_on())
		return;
	if (!(r = ring())) {
		/* No ring for this thread (no memory): rare, so shared. */
		__atomic_fetch_add(&nr_lost_noring, 1, __ATOMIC_RELAXED);
		return;
	}
	head = r->head;
	if (head - __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE) > r->mask) {
		io_stats_add(&r->lost, 1);
		return;
	}
	ev->len = TRACE_REC_BYTES;
	ev->thread = r->id;
	ev->time_ns = ev->time_ns > start_ns ? ev->time_ns - start_ns : 0;
	r->v[head & r->mask] = *ev;
	__atomic_store_n(&r->head, head + 1, __ATOMIC_RELEASE);
}

uint64_t trace_seq_next(void)
{
	struct trace_ring *r;

	if (!trace_on() || !(r = ring()))
		return 0;
	/* Unique without sharing a counter: the ring's id, then its count. */
	return ((uint64_t)r->id << 40) | ++r->seq;
}

uint64_t trace_bio_issue(const struct bio *bio, uint32_t obj)
{
	struct trace_rec ev = {
		.type = TRACE_D,
		.op = (uint8_t)bio_op(bio),
		.flags = bio->bi_opf & REQ_FUA ? TRACE_F_FUA : 0,
		.time_ns = trace_now(),
		.seq = bio->bi_trace,
		.offset = bio_offset_bytes(bio),
		.size = bio->bi_iter.bi_size,
		.obj = obj,
	};
	uint64_t t0 = ev.time_ns;

	trace_emit(&ev);
	return t0;
}

void trace_bio_complete(const struct bio *bio)
{
	uint64_t now = trace_now();
	/* bio_endio moved the iterator: the range is the one issued. */
	struct trace_rec ev = {
		.type = TRACE_C,
		.op = (uint8_t)bio_op(bio),
		.time_ns = now,
		.seq = bio->bi_trace,
		.offset = bio->bi_trace_off,
		.size = bio->bi_trace_bytes,
		.obj = bio->bi_trace_obj,
		.status = bio->bi_status,
		.lat_ns = now - bio->bi_trace_t0,
	};

	trace_emit(&ev);
}

/* ---- names ---- */

uint32_t trace_obj_add(unsigned int kind, uint32_t parent, const char *name)
{
	size_t nlen = strnlen(name, TRACE_NAME_MAX);
	size_t bytes = (sizeof(struct trace_name) + nlen + 7) & ~(size_t)7;
	struct trace_namebuf *nb = calloc(1, sizeof(*nb) + bytes);
	struct trace_name h = { .type = TRACE_N,
				.kind = (uint8_t)kind,
				.len = (uint16_t)bytes,
				.parent = parent,
				.name_len = (uint32_t)nlen };

	if (!nb)
		return 0;
	nb->bytes = bytes;
	pthread_mutex_lock(&trace_lock);
	h.obj = ++nr_objs;
	memcpy(nb->rec, &h, sizeof(h));
	memcpy(nb->rec + sizeof(h), name, nlen);
	*names_tail = nb;
	names_tail = &nb->next;
	pthread_mutex_unlock(&trace_lock);
	return h.obj;
}

/* ---- the writer ---- */

static void out_flush(void)
{
	size_t done = 0;

	while (done < out_len && !write_err) {
		ssize_t n = write(trace_fd, out + done, out_len - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			/* Nothing more gets in: every later event is lost. */
			write_err = n < 0 ? -errno : -EIO;
			__atomic_store_n(&trace_enabled, 0, __ATOMIC_RELAXED);
			break;
		}
		done += (size_t)n;
	}
	out_len = 0;
}

static void out_put(const void *p, size_t n)
{
	if (out_len + n > TRACE_OUT_BYTES)
		out_flush();
	memcpy(out + out_len, p, n);
	out_len += n;
}

static void put_marker(uint8_t type, uint64_t a, uint64_t b,
		       uint16_t thread)
{
	struct trace_rec ev = { .type = type,
				.len = TRACE_REC_BYTES,
				.thread = thread,
				.time_ns = trace_now() - start_ns,
				.offset = a,
				.lat_ns = b };

	out_put(&ev, sizeof(ev));
}

/* Write what @r holds; true when it is empty and orphaned (free it). */
static bool ring_drain(struct trace_ring *r, bool orphan)
{
	uint64_t head = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE);
	uint64_t tail = r->tail, lost;

	while (tail != head) {
		uint64_t at = tail & r->mask;
		uint64_t n = head - tail;

		if (n > r->mask + 1 - at)
			n = r->mask + 1 - at; /* up to the ring's end */
		if (n > TRACE_OUT_BYTES / TRACE_REC_BYTES)
			n = TRACE_OUT_BYTES / TRACE_REC_BYTES;
		if (write_err) {
			nr_lost_closed += n; /* the file failed */
		} else {
			out_put(r->v + at, n * sizeof(*r->v));
			nr_written += n;
		}
		tail += n;
		__atomic_store_n(&r->tail, tail, __ATOMIC_RELEASE);
	}
	lost = io_stats_read(&r->lost);
	if (lost != r->lost_seen) {
		put_marker(TRACE_L, lost - r->lost_seen, 0, r->id);
		r->lost_seen = lost;
	}
	return orphan && __atomic_load_n(&r->head, __ATOMIC_ACQUIRE) == tail;
}

static void write_round(void)
{
	struct trace_namebuf *nb;
	struct trace_ring *r, **pp;
	unsigned int i = 0;
	uint64_t lost;

	/* Names are only appended: those counted written stay so. */
	pthread_mutex_lock(&trace_lock);
	for (nb = names; nb; nb = nb->next, i++)
		if (i >= names_written)
			out_put(nb->rec, nb->bytes);
	names_written = i;
	pthread_mutex_unlock(&trace_lock);
	/*
	 * Rings are only added at the head and only freed here, so the list
	 * can be walked without the lock; ->orphan is read under it.
	 */
	pthread_mutex_lock(&trace_lock);
	r = rings;
	pthread_mutex_unlock(&trace_lock);
	for (; r; r = r->next) {
		bool orphan;

		pthread_mutex_lock(&trace_lock);
		orphan = r->orphan;
		pthread_mutex_unlock(&trace_lock);
		if (ring_drain(r, orphan)) {
			pthread_mutex_lock(&trace_lock);
			r->mask = UINT64_MAX; /* marks it for freeing below */
			pthread_mutex_unlock(&trace_lock);
		}
	}
	lost = __atomic_load_n(&nr_lost_noring, __ATOMIC_RELAXED);
	if (lost != noring_seen) {
		put_marker(TRACE_L, lost - noring_seen, 0, 0);
		noring_seen = lost;
	}
	pthread_mutex_lock(&trace_lock);
	for (pp = &rings; (r = *pp);) {
		if (r->mask == UINT64_MAX) {
			*pp = r->next;
			nr_lost_retired += r->lost;
			free(r->v);
			free(r);
		} else {
			pp = &r->next;
		}
	}
	pthread_mutex_unlock(&trace_lock);
	out_flush();
}

static void *writer_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&trace_lock);
	while (!stopping) {
		struct timespec ts;
		uint64_t when;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		when = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec +
		       TRACE_WRITE_INTERVAL_NS;
		ts.tv_sec = (time_t)(when / 1000000000u);
		ts.tv_nsec = (long)(when % 1000000000u);
		pthread_cond_timedwait(&trace_cond, &trace_lock, &ts);
		pthread_mutex_unlock(&trace_lock);
		write_round();
		pthread_mutex_lock(&trace_lock);
	}
	pthread_mutex_unlock(&trace_lock);
	return NULL;
}

int trace_open(const char *path, size_t ring_bytes, char *errbuf,
	       size_t errlen)
{
	struct trace_file_hdr h = { .version = TRACE_VERSION,
				    .hdr_bytes = TRACE_HDR_BYTES };
	struct timespec rt;
	uint64_t slots;
	int r;

	if (trace_fd >= 0)
		return verr(errbuf, errlen, -EBUSY, "a trace is open");
	if (!ring_bytes)
		ring_bytes = TRACE_DEFAULT_RING;
	if (ring_bytes < TRACE_MIN_RING || ring_bytes > TRACE_MAX_RING)
		return verr(errbuf, errlen, -EINVAL,
			    "a trace buffer of %zu bytes: it must be from 4K to 1G",
			    ring_bytes);
	/* Slots: a power of two, so that a position is a mask away. */
	for (slots = 1; slots * 2 * TRACE_REC_BYTES <= ring_bytes; slots *= 2)
		;
	out = malloc(TRACE_OUT_BYTES);
	if (!out)
		return verr(errbuf, errlen, -ENOMEM, "out of memory");
	trace_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (trace_fd < 0) {
		r = -errno;
		free(out);
		out = NULL;
		return verr(errbuf, errlen, r, "%s: %s", path, strerror(-r));
	}
	clock_gettime(CLOCK_REALTIME, &rt);
	start_ns = trace_now();
	memcpy(h.magic, TRACE_MAGIC, sizeof(h.magic));
	h.realtime_ns = (uint64_t)rt.tv_sec * 1000000000u + (uint64_t)rt.tv_nsec;
	h.start_ns = start_ns;
	h.ring_bytes = (uint32_t)(slots * TRACE_REC_BYTES);
	ring_slots = slots;
	out_len = 0;
	write_err = 0;
	nr_written = nr_lost_closed = nr_lost_retired = 0;
	__atomic_store_n(&nr_lost_noring, 0, __ATOMIC_RELAXED);
	noring_seen = 0;
	nr_rings = 0;
	names_written = 0;
	out_put(&h, sizeof(h));
	/* The pid and the names: written by trace_run, after any fork. */
	return 0;
}

int trace_run(void)
{
	pthread_condattr_t ca;
	int r;

	if (trace_fd < 0 || running)
		return -EINVAL;
	((struct trace_file_hdr *)out)->pid = (uint32_t)getpid();
	out_flush();
	if (write_err)
		return write_err;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_destroy(&trace_cond);
	pthread_cond_init(&trace_cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_lock(&trace_lock);
	__atomic_store_n(&gen, gen + 1, __ATOMIC_RELAXED);
	running = true;
	stopping = false;
	pthread_mutex_unlock(&trace_lock);
	__atomic_store_n(&trace_enabled, 1, __ATOMIC_RELAXED);
	r = -pthread_create(&writer, NULL, writer_main, NULL);
	if (r) {
		__atomic_store_n(&trace_enabled, 0, __ATOMIC_RELAXED);
		pthread_mutex_lock(&trace_lock);
		running = false;
		pthread_mutex_unlock(&trace_lock);
	}
	return r;
}

int trace_stop(uint64_t *written, uint64_t *lost)
{
	uint64_t nlost = 0;
	int r;

	if (trace_fd < 0)
		return 0;
	pthread_mutex_lock(&trace_lock);
	stopping = true;
	pthread_cond_signal(&trace_cond);
	pthread_mutex_unlock(&trace_lock);
	if (running)
		pthread_join(writer, NULL);
	/* The writer is gone: what the rings still hold is ours to write. */
	__atomic_store_n(&trace_enabled, 0, __ATOMIC_RELAXED);
	if (running)
		write_round();
	pthread_mutex_lock(&trace_lock);
	nlost = nr_lost_closed + nr_lost_retired + noring_seen;
	for (struct trace_ring *ring = rings; ring; ring = ring->next)
		nlost += io_stats_read(&ring->lost);
	pthread_mutex_unlock(&trace_lock);
	if (!write_err) {
		put_marker(TRACE_E, nr_written, nlost, 0);
		out_flush();
	}
	if (!write_err && fsync(trace_fd) && errno != EINVAL)
		write_err = -errno;
	if (close(trace_fd) && !write_err)
		write_err = -errno;
	trace_fd = -1;
	r = write_err;
	pthread_mutex_lock(&trace_lock);
	while (rings) {
		struct trace_ring *next = rings->next;

		free(rings->v);
		free(rings);
		rings = next;
	}
	running = false;
	pthread_mutex_unlock(&trace_lock);
	free(out);
	out = NULL;
	if (written)
		*written = nr_written;
	if (lost)
		*lost = nlost;
	return r;
}
