/* SPDX-License-Identifier: MIT */
/*
 * plural.h - counts in messages: "1 member", "2 members".  A message that
 * prints a count the user can make 1 (one member, -t 1, one socket) reads
 * wrong with a fixed plural, so every one takes its ending from here.
 */
#ifndef BIONBD_PLURAL_H
#define BIONBD_PLURAL_H

#include <stdint.h>

/* The ending of a regular noun counted @n times: "" or "s". */
static inline const char *plural(uint64_t n)
{
	return n == 1 ? "" : "s";
}

#endif /* BIONBD_PLURAL_H */
