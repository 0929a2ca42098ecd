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

#include "log.h"

static enum srv_log_dest dest;
static bool verbose;
static pthread_mutex_t limit_lock = PTHREAD_MUTEX_INITIALIZER;
static double window_start;
static unsigned int in_window, suppressed;

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

static void emit_held(unsigned int held)
{
	char line[128];

	snprintf(line, sizeof(line),
		 "%u more errors not logged (at most %u a second)", held,
		 SRV_LOG_BURST);
	emit(NBDL_ERROR, line);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* An error may go out: not past the burst of its window. */
static bool error_allowed(unsigned int *held)
{
	double t = now_s();
	bool ok;

	pthread_mutex_lock(&limit_lock);
	if (t - window_start >= SRV_LOG_WINDOW_S) {
		window_start = t;
		in_window = 0;
	}
	ok = in_window < SRV_LOG_BURST;
	if (ok) {
		in_window++;
		*held = suppressed;
		suppressed = 0;
	} else {
		suppressed++;
	}
	pthread_mutex_unlock(&limit_lock);
	return ok;
}

static void log_line(enum nbdl_level level, const char *fmt, va_list ap)
{
	unsigned int held = 0;
	char line[1024];

	if (dest == SRV_LOG_NULL || (level == NBDL_DEBUG && !verbose))
		return;
	if (level == NBDL_ERROR && !error_allowed(&held))
		return;
	if (held)
		emit_held(held);
	vsnprintf(line, sizeof(line), fmt, ap);
	emit(level, line);
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
	unsigned int held;

	pthread_mutex_lock(&limit_lock);
	held = suppressed;
	suppressed = 0;
	pthread_mutex_unlock(&limit_lock);
	if (held && dest != SRV_LOG_NULL)
		emit_held(held);
	if (dest == SRV_LOG_SYSLOG)
		closelog();
}
