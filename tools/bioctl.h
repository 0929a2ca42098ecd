/* SPDX-License-Identifier: MIT */
/*
 * bioctl.h - the commands of bioctl that live in files of their own.
 */
#ifndef BIONBD_BIOCTL_H
#define BIONBD_BIOCTL_H

#include <stdio.h>

struct option;

/* The usage of every command, on @f. */
void usage(FILE *f);

/* A usage error: "bioctl: " and the message, one line; returns 2. */
int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * getopt_long's '?' or ':' (optstring starting with ':', opterr 0) for
 * command @cmd as one line naming the option; returns 2.
 */
int bad_option(const char *cmd, int ch, char *const *argv,
	       const struct option *longopts);

/* @s as a JSON string, quotes and escapes included, on stdout. */
void json_str(const char *s);

/* bioctl stat [-i SECONDS] [-n COUNT] [--json] SOCKET|PIDFILE */
int cmd_stat(int argc, char **argv);

/* bioctl trace [-m MEMBER] [-e EXPORT] [-o OPS] [-r RANGE] ... FILE */
int cmd_trace(int argc, char **argv);

#endif /* BIONBD_BIOCTL_H */
