/* SPDX-License-Identifier: MIT */
/*
 * bioctl.h - the commands of bioctl that live in files of their own.
 */
#ifndef BIONBD_BIOCTL_H
#define BIONBD_BIOCTL_H

/* @s as a JSON string, quotes and escapes included, on stdout. */
void json_str(const char *s);

/* bioctl stat [-i SECONDS] [-n COUNT] [--json] SOCKET|PIDFILE */
int cmd_stat(int argc, char **argv);

/* bioctl trace [-m MEMBER] [-e EXPORT] [-o OPS] [-r RANGE] ... FILE */
int cmd_trace(int argc, char **argv);

#endif /* BIONBD_BIOCTL_H */
