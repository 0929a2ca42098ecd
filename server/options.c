// SPDX-License-Identifier: MIT
/*
 * options.c - the one setter for bionbd's own settings (options.h).
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bionbd/config.h>
#include <bionbd/nbdl.h>
#include <bionbd/trace.h>

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
	free(o->tls_certificates);
	free(o->tls_psk);
	free(o->user);
	free(o->group);
	free(o->stats_file);
	free(o->control);
	free(o->trace_file);
	memset(o, 0, sizeof(*o));
}

/* The settings that are a string: a path, an address or a name. */
static const struct string_key {
	const char *key;
	size_t offset; /* of the char * in struct srv_options */
} string_keys[] = {
	{ "listen", offsetof(struct srv_options, listen) },
	{ "socket", offsetof(struct srv_options, socket) },
	{ "tls-certificates",
	  offsetof(struct srv_options, tls_certificates) },
	{ "tls-psk", offsetof(struct srv_options, tls_psk) },
	{ "user", offsetof(struct srv_options, user) },
	{ "group", offsetof(struct srv_options, group) },
	{ "stats", offsetof(struct srv_options, stats_file) },
	{ "control", offsetof(struct srv_options, control) },
	{ "trace", offsetof(struct srv_options, trace_file) },
};

/* The settings that are a whole number in a range. */
static const struct uint_key {
	const char *key;
	const char *what; /* "expected WHAT MIN..MAX" */
	unsigned int min, max;
	size_t offset; /* of the unsigned int in struct srv_options */
} uint_keys[] = {
	{ "threads", "a number", 1, SRV_MAX_THREADS,
	  offsetof(struct srv_options, threads) },
	{ "poll-us", "microseconds", 0, SRV_MAX_POLL_US,
	  offsetof(struct srv_options, poll_us) },
	{ "handshake-timeout", "seconds", 0, SRV_MAX_HANDSHAKE_S,
	  offsetof(struct srv_options, handshake_s) },
	{ "max-connections", "a number", 1, SRV_MAX_MAX_CONNS,
	  offsetof(struct srv_options, max_conns) },
	{ "stats-interval", "seconds", 0, SRV_MAX_STATS_INTERVAL,
	  offsetof(struct srv_options, stats_interval) },
};

/* Request sizes, up to the largest request. */
static const struct size_key {
	const char *key;
	const char *zero; /* what 0 means */
	size_t offset, set_offset; /* uint32_t value, bool "given" */
} size_keys[] = {
	{ "async-min", "copy everything on the worker",
	  offsetof(struct srv_options, async_min),
	  offsetof(struct srv_options, async_min_set) },
	{ "sendfile-min", "never",
	  offsetof(struct srv_options, sendfile_min),
	  offsetof(struct srv_options, sendfile_min_set) },
};

int srv_option_set(struct srv_options *o, const char *key, const char *value,
		   char *why, size_t whylen)
{
	unsigned int n;

	for (size_t i = 0; i < sizeof(string_keys) / sizeof(string_keys[0]);
	     i++) {
		if (strcmp(key, string_keys[i].key))
			continue;
		if (!*value) {
			snprintf(why, whylen, "empty value");
			return -EINVAL;
		}
		return conf_set_string(
			(char **)((char *)o + string_keys[i].offset), value);
	}
	if (!strcmp(key, "tls")) {
		if (srv_tls_mode_parse(value, &o->tls)) {
			snprintf(why, whylen, "expected off, on or require");
			return -EINVAL;
		}
		o->tls_set = true;
		return 0;
	}
	if (!strcmp(key, "tls-verify-peer")) {
		if (conf_parse_bool(value, &o->tls_verify_peer)) {
			snprintf(why, whylen, "expected true or false");
			return -EINVAL;
		}
		return 0;
	}
	if (!strcmp(key, "port")) {
		if (conf_parse_uint(value, 1, 65535, &n)) {
			snprintf(why, whylen, "expected a port number 1..65535");
			return -EINVAL;
		}
		return conf_set_string(&o->port, value);
	}
	if (!strcmp(key, "backend")) {
		if (ioq_backend_parse(value, &o->backend)) {
			snprintf(why, whylen, "expected io_uring or threads");
			return -EINVAL;
		}
		o->backend_set = true;
		return 0;
	}
	if (!strcmp(key, "log")) {
		if (srv_log_parse(value, &o->log)) {
			snprintf(why, whylen, "expected stderr, syslog or null");
			return -EINVAL;
		}
		o->log_set = true;
		return 0;
	}
	for (size_t i = 0; i < sizeof(uint_keys) / sizeof(uint_keys[0]); i++) {
		const struct uint_key *u = &uint_keys[i];

		if (strcmp(key, u->key))
			continue;
		if (conf_parse_uint(value, u->min, u->max, &n)) {
			snprintf(why, whylen, "expected %s %u..%u", u->what,
				 u->min, u->max);
			return -EINVAL;
		}
		*(unsigned int *)((char *)o + u->offset) = n;
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
	if (!strcmp(key, "inflight-memory")) {
		uint64_t v;

		/* Two largest requests: one, beside the small requests' part. */
		if (parse_size(value, &v) || v < 2ull * NBDL_MAX_PAYLOAD ||
		    v > (1ull << 50)) {
			snprintf(why, whylen,
				 "expected a size from 64M up to 1P (e.g. 1G)");
			return -EINVAL;
		}
		o->inflight_bytes = v;
		o->inflight_set = true;
		return 0;
	}
	if (!strcmp(key, "trace-buffer")) {
		uint64_t v;

		if (parse_size(value, &v) || v < TRACE_MIN_RING ||
		    v > TRACE_MAX_RING) {
			snprintf(why, whylen,
				 "expected a size from 4K to 1G (e.g. 16M)");
			return -EINVAL;
		}
		o->trace_buffer = (uint32_t)v;
		return 0;
	}
	for (size_t i = 0; i < sizeof(size_keys) / sizeof(size_keys[0]); i++) {
		const struct size_key *k = &size_keys[i];
		uint64_t v;

		if (strcmp(key, k->key))
			continue;
		if (parse_size(value, &v) || v > NBDL_MAX_PAYLOAD) {
			snprintf(why, whylen,
				 "expected a size up to 32M (e.g. 256K; 0 = %s)",
				 k->zero);
			return -EINVAL;
		}
		*(uint32_t *)((char *)o + k->offset) = (uint32_t)v;
		*(bool *)((char *)o + k->set_offset) = true;
		return 0;
	}
	snprintf(why, whylen,
		 "unknown key (server keys: listen, port, socket, threads, "
		 "backend, poll-us, handshake-timeout, max-connections, "
		 "memory, inflight-memory, async-min, sendfile-min, log, tls, "
		 "tls-certificates, tls-psk, tls-verify-peer, user, group, "
		 "stats, stats-interval, control, trace, trace-buffer)");
	return -ENOENT;
}
