/* SPDX-License-Identifier: MIT */
/*
 * bioctl.h - the commands of bioctl that live in files of their own.
 */
#ifndef BIONBD_BIOCTL_H
#define BIONBD_BIOCTL_H

/* bioctl stat [-i SECONDS] [-n COUNT] [--json] SOCKET|PIDFILE */
int cmd_stat(int argc, char **argv);

#endif /* BIONBD_BIOCTL_H */
