/* SPDX-License-Identifier: MIT */
/*
 * log.h - where bionbd's messages go (--log): stderr, syslog or nowhere;
 * debug lines only with -v; errors, and refused clients, rate-limited.  Every part of the server
 * and the NBD layer logs through nbdl_log(), which this module serves.
 */
#ifndef BIONBD_LOG_H
#define BIONBD_LOG_H

#include <stdbool.h>

enum srv_log_dest {
	SRV_LOG_STDERR,
	SRV_LOG_SYSLOG,
	SRV_LOG_NULL,
};

/*
 * Errors beyond SRV_LOG_BURST in one SRV_LOG_WINDOW_S are counted, not
 * written; the count is written with the next one that goes out (or at
 * exit), so a member failing every request costs a few lines a second.
 */
#define SRV_LOG_BURST 20u
#define SRV_LOG_WINDOW_S 1.0

/** srv_log_parse - "stderr", "syslog" or "null"; 0 or -EINVAL. */
int srv_log_parse(const char *s, enum srv_log_dest *out);

/**
 * srv_log_start - send nbdl_log() lines to @dest from now on (syslog:
 * ident "bionbd", facility daemon); debug lines too when @verbose.
 */
void srv_log_start(enum srv_log_dest dest, bool verbose);

/**
 * srv_log_refused - a client refused (an export name not served, ...): a
 * debug line (-v), under a rate limit of its own, SRV_LOG_BURST in each
 * SRV_LOG_WINDOW_S, so that a client retrying in a loop costs a few lines
 * a second and never holds back the errors.
 */
void srv_log_refused(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/** srv_log_reopen - SIGHUP: reconnect to syslog (a restarted daemon). */
void srv_log_reopen(void);

/** srv_log_stop - write what the rate limit held back; close syslog. */
void srv_log_stop(void);

#endif /* BIONBD_LOG_H */
