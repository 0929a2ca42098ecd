/* SPDX-License-Identifier: MIT */
/*
 * size.h - human sizes, spelt the same on the command line, in config files
 * and in fault rules.
 */
#ifndef BIONBD_SIZE_H
#define BIONBD_SIZE_H

#include <stdint.h>

/**
 * parse_size - "4096", "64K", "1M", "4G", "1T" (binary units) to bytes
 * Returns 0 or -EINVAL (empty, junk, overflow).
 */
int parse_size(const char *s, uint64_t *out);

#endif /* BIONBD_SIZE_H */
