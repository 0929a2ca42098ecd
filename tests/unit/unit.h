/*
 * Description: helpers shared by the unit tests (not a test itself): checks
 * that print both values when they fail, a seeded per-thread PRNG so a
 * failing random case can be replayed with BIONBD_TEST_SEED=<seed>, and an
 * ioq for each backend the machine has.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef BIONBD_TESTS_UNIT_H
#define BIONBD_TESTS_UNIT_H

#undef NDEBUG
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bionbd/ioq.h>

/*
 * abort() rather than exit(1): a core or a backtrace under gdb shows the
 * state, and ctest reports the failure either way.
 */
#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "%s:%d: %s: check failed: %s\n",       \
				__FILE__, __LINE__, __func__, #cond);          \
			abort();                                               \
		}                                                              \
	} while (0)

/*
 * Compare as 64-bit values and print both in hex and signed decimal, so
 * -errno values, sizes and sectors all read naturally.
 */
#define CHECK_EQ(a, b)                                                         \
	do {                                                                   \
		uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);               \
		if (a_ != b_) {                                                \
			fprintf(stderr,                                        \
				"%s:%d: %s: %s == %s failed: 0x%" PRIx64       \
				" (%" PRId64 ") != 0x%" PRIx64 " (%" PRId64    \
				")\n",                                         \
				__FILE__, __LINE__, __func__, #a, #b, a_,      \
				(int64_t)a_, b_, (int64_t)b_);                 \
			abort();                                               \
		}                                                              \
	} while (0)

#define CHECK_PTR_EQ(a, b)                                                     \
	do {                                                                   \
		const void *a_ = (a), *b_ = (b);                               \
		if (a_ != b_) {                                                \
			fprintf(stderr,                                        \
				"%s:%d: %s: %s == %s failed: %p != %p\n",      \
				__FILE__, __LINE__, __func__, #a, #b, a_, b_); \
			abort();                                               \
		}                                                              \
	} while (0)

/* xorshift64*: tiny, fast and good enough to pick sizes and orders. */
static __thread uint64_t unit_rng_state = 0x9e3779b97f4a7c15ull;

static inline uint64_t rnd(void)
{
	uint64_t x = unit_rng_state;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	unit_rng_state = x;
	return x * 0x2545f4914f6cdd1dull;
}

/* Uniform enough in [0, n) for test purposes; n > 0. */
static inline uint64_t rnd_below(uint64_t n)
{
	return rnd() % n;
}

/* [lo, hi], inclusive. */
static inline uint64_t rnd_range(uint64_t lo, uint64_t hi)
{
	return lo + rnd_below(hi - lo + 1);
}

static inline void unit_seed_thread(uint64_t seed)
{
	/* splitmix64 step: nearby seeds (clock ^ pid) give unrelated states. */
	uint64_t z = seed + 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	/* xorshift must never hold 0. */
	unit_rng_state = z ? z : 0x9e3779b97f4a7c15ull;
}

/*
 * Seed from BIONBD_TEST_SEED or the clock, and print it: a failure in a
 * random case is only useful if it can be run again.
 */
static inline uint64_t unit_seed(const char *name)
{
	const char *env = getenv("BIONBD_TEST_SEED");
	uint64_t seed;

	if (env && *env)
		seed = strtoull(env, NULL, 0);
	else
		seed = (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid();
	printf("%s: seed %" PRIu64 " (set BIONBD_TEST_SEED to replay)\n", name,
	       seed);
	fflush(stdout);
	unit_seed_thread(seed);
	return seed;
}

static inline void shuffle_int(int *v, size_t n)
{
	for (size_t i = n; i > 1; i--) {
		size_t j = rnd_below(i);
		int t = v[i - 1];

		v[i - 1] = v[j];
		v[j] = t;
	}
}

/*
 * ioq_create for a test that runs each backend: false (said on stdout)
 * when io_uring is not available here, which skips that backend only.
 */
static inline bool unit_ioq_create(struct ioq **q, enum ioq_backend be)
{
	int r = ioq_create(q, be, 0);

	if (be == IOQ_IO_URING &&
	    (r == -ENOSYS || r == -EPERM || r == -EOPNOTSUPP)) {
		printf("%s: not available here (%s), skipped\n",
		       ioq_backend_name(be), strerror(-r));
		return false;
	}
	CHECK_EQ(r, 0);
	return true;
}

#endif /* BIONBD_TESTS_UNIT_H */
