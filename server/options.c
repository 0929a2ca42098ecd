// SPDX-License-Identifier: MIT
/*
 * options.c - the one setter for bionbd's own settings (options.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bionbd/config.h>

#include "options.h"

void srv_options_init(struct srv_options *o)
{
	memset(o, 0, sizeof(*o));
	o->backend = IOQ_IO_URING;
	o->poll_us = SRV_DEFAULT_POLL_US;
	o->handshake_s = SRV_DEFAULT_HANDSHAKE_S;
	o->max_conns = SRV_DEFAULT_MAX_CONNS;
}

void srv_options_release(struct srv_options *o)
{
	free(o->listen);
	free(o->port);
	free(o->socket);
	memset(o, 0, sizeof(*o));
}

int srv_option_set(struct srv_options *o, const char *key, const char *value,
		   char *why, size_t whylen)
{
	unsigned int n;

	if (!strcmp(key, "listen") || !strcmp(key, "socket")) {
		if (!*value) {
			snprintf(why, whylen, "empty value");
			return -EINVAL;
		}
		return conf_set_string(key[0] == 'l' ? &o->listen : &o->socket,
				  value);
	}
	if (!strcmp(key, "port")) {
		if (conf_parse_uint(value, 1, 65535, &n)) {
			snprintf(why, whylen, "expected a port number 1..65535");
			return -EINVAL;
		}
		return conf_set_string(&o->port, value);
	}
	if (!strcmp(key, "threads")) {
		if (conf_parse_uint(value, 1, SRV_MAX_THREADS, &n)) {
			snprintf(why, whylen, "expected a number 1..%u",
				 SRV_MAX_THREADS);
			return -EINVAL;
		}
		o->threads = n;
		return 0;
	}
	if (!strcmp(key, "backend")) {
		if (ioq_backend_parse(value, &o->backend)) {
			snprintf(why, whylen, "expected io_uring or threads");
			return -EINVAL;
		}
		o->backend_set = true;
		return 0;
	}
	if (!strcmp(key, "poll-us")) {
		if (conf_parse_uint(value, 0, SRV_MAX_POLL_US, &n)) {
			snprintf(why, whylen, "expected microseconds 0..%u",
				 SRV_MAX_POLL_US);
			return -EINVAL;
		}
		o->poll_us = n;
		return 0;
	}
	if (!strcmp(key, "handshake-timeout")) {
		if (conf_parse_uint(value, 0, SRV_MAX_HANDSHAKE_S, &n)) {
			snprintf(why, whylen, "expected seconds 0..%u",
				 SRV_MAX_HANDSHAKE_S);
			return -EINVAL;
		}
		o->handshake_s = n;
		return 0;
	}
	if (!strcmp(key, "max-connections")) {
		if (conf_parse_uint(value, 1, SRV_MAX_MAX_CONNS, &n)) {
			snprintf(why, whylen, "expected a number 1..%u",
				 SRV_MAX_MAX_CONNS);
			return -EINVAL;
		}
		o->max_conns = n;
		return 0;
	}
	if (!strcmp(key, "memory")) {
		uint64_t v;

		if (parse_size(value, &v) || v > (1ull << 50)) {
			snprintf(why, whylen,
				 "expected a size up to 1P (e.g. 512M, 4G; 0 = "
				 "cache no buffers)");
			return -EINVAL;
		}
		o->memory_bytes = v;
		o->memory_set = true;
		return 0;
	}
	snprintf(why, whylen,
		 "unknown key (server keys: listen, port, socket, threads, "
		 "backend, poll-us, handshake-timeout, max-connections, "
		 "memory)");
	return -ENOENT;
}
