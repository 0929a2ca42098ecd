// SPDX-License-Identifier: MIT
/*
 * log.c - bionbd's log (log.h).  Any thread may log: each line is built
 * whole and written with one write(2) (stderr) or one syslog(3) call, and
 * the rate limit's counters sit under a mutex (errors are rare; when they
 * are not, the limit is the point).
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include <bionbd/nbdl.h>
#include <bionbd/plural.h>

#include "log.h"

static enum srv_log_dest dest;
static bool verbose;
static pthread_mutex_t limit_lock = PTHREAD_MUTEX_INITIALIZER;

/*
 * One rate limit (log.h): errors have one, refused clients another, so
 * that a client knocking at the door all day (-v) cannot hold back the
 * errors of the members, nor the other way round.
 */
struct limit {
	enum nbdl_level level; /* of its "held back" line */
	const char *what;      /* "error": counted, with plural() */
	double window_start;
	unsigned int in_window, suppressed;
};

static struct limit errors = { .level = NBDL_ERROR, .what = "error" };
static struct limit refusals = { .level = NBDL_DEBUG,
				 .what = "refused client" };

int srv_log_parse(const char *s, enum srv_log_dest *out)
{
	static const char *const names[] = { "stderr", "syslog", "null" };

	for (int i = 0; i < 3; i++)
		if (!strcmp(s, names[i])) {
			*out = (enum srv_log_dest)i;
			return 0;
		}
	return -EINVAL;
}

static void emit(enum nbdl_level level, const char *line)
{
	char buf[1100];
	int n;

	if (dest == SRV_LOG_SYSLOG) {
		syslog(level == NBDL_ERROR ? LOG_ERR :
		       level == NBDL_INFO  ? LOG_INFO :
					     LOG_DEBUG,
		       "%s", line);
		return;
	}
	n = snprintf(buf, sizeof(buf), "bionbd: %s\n", line);
	if (n > (int)sizeof(buf) - 1) {
		/* Cut, but still one whole line. */
		n = sizeof(buf) - 1;
		buf[n - 1] = '\n';
	}
	(void)!write(STDERR_FILENO, buf, (size_t)n);
}

static void emit_held(const struct limit *l, unsigned int held)
{
	char line[128];

	snprintf(line, sizeof(line),
		 "%u more %s%s not logged (at most %u a second)", held,
		 l->what, plural(held), SRV_LOG_BURST);
	emit(l->level, line);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A line of @l may go out: not past the burst of its window. */
static bool allowed(struct limit *l, unsigned int *held)
{
	double t = now_s();
	bool ok;

	pthread_mutex_lock(&limit_lock);
	if (t - l->window_start >= SRV_LOG_WINDOW_S) {
		l->window_start = t;
		l->in_window = 0;
	}
	ok = l->in_window < SRV_LOG_BURST;
	if (ok) {
		l->in_window++;
		*held = l->suppressed;
		l->suppressed = 0;
	} else {
		l->suppressed++;
	}
	pthread_mutex_unlock(&limit_lock);
	return ok;
}

/* A line at @level, under @l's limit when there is one. */
static void log_limited(struct limit *l, enum nbdl_level level,
			const char *fmt, va_list ap)
{
	unsigned int held = 0;
	char line[1024];

	if (dest == SRV_LOG_NULL || (level == NBDL_DEBUG && !verbose))
		return;
	if (l && !allowed(l, &held))
		return;
	if (held)
		emit_held(l, held);
	vsnprintf(line, sizeof(line), fmt, ap);
	emit(level, line);
}

static void log_line(enum nbdl_level level, const char *fmt, va_list ap)
{
	log_limited(level == NBDL_ERROR ? &errors : NULL, level, fmt, ap);
}

void srv_log_refused(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_limited(&refusals, NBDL_DEBUG, fmt, ap);
	va_end(ap);
}

void srv_log_start(enum srv_log_dest d, bool v)
{
	dest = d;
	verbose = v;
	if (dest == SRV_LOG_SYSLOG)
		openlog("bionbd", LOG_PID | LOG_NDELAY, LOG_DAEMON);
	nbdl_set_logger(log_line);
}

void srv_log_reopen(void)
{
	if (dest != SRV_LOG_SYSLOG)
		return;
	closelog();
	openlog("bionbd", LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

void srv_log_stop(void)
{
	struct limit *const limits[] = { &errors, &refusals };
	unsigned int held[2];

	pthread_mutex_lock(&limit_lock);
	for (unsigned int i = 0; i < 2; i++) {
		held[i] = limits[i]->suppressed;
		limits[i]->suppressed = 0;
	}
	pthread_mutex_unlock(&limit_lock);
	for (unsigned int i = 0; i < 2; i++)
		if (held[i] && dest != SRV_LOG_NULL &&
		    (limits[i]->level != NBDL_DEBUG || verbose))
			emit_held(limits[i], held[i]);
	if (dest == SRV_LOG_SYSLOG)
		closelog();
}
