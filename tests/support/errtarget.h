/* SPDX-License-Identifier: MIT */
/*
 * errtarget.h - an error-injecting target for tests: pass bios to the
 * target below, failing those a rule matches.  Lives in tests/support (not
 * the engine) because only tests inject faults this way; real faults below
 * the engine come from nbdfuse + nbdkit's error filter in tests/e2e.
 */
#ifndef BIONBD_TEST_ERRTARGET_H
#define BIONBD_TEST_ERRTARGET_H

#include <stdint.h>

#include <bionbd/target.h>

struct error_rule {
	int op; /* enum req_op, or -1 for any op */
	uint64_t offset; /* bytes; rule matches bios overlapping the range */
	uint64_t length; /* 0 = to the end */
	int error; /* -errno to complete matching bios with */
	unsigned int skip; /* let this many matching bios through first */
	unsigned int count; /* then fail this many; 0 = all */
	/*
	 * With @error 0: called (without the target's lock) before each
	 * matching bio passes, to run something while the caller's bio is
	 * under way (a race made deterministic).
	 */
	void (*before)(void *arg);
	void *arg;
};

/**
 * error_target_create - pass bios to @below, failing those a rule matches
 * Owns @below on success.  Returns 0 or -ENOMEM.
 */
int error_target_create(struct target **out, struct target *below);

/** error_target_add_rule - returns 0, -EINVAL or -ENOMEM. */
int error_target_add_rule(struct target *t, const struct error_rule *rule);

/** error_target_clear - drop every rule. */
void error_target_clear(struct target *t);

#endif /* BIONBD_TEST_ERRTARGET_H */
