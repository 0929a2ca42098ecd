/* SPDX-License-Identifier: MIT */
/*
 * options.h - bionbd's own settings (listeners, workers, backend,
 * busy-polling): the [server] section of a config file and the command-line
 * flags go through the one setter, so a value means the same and is
 * checked the same way wherever it is written.  Export settings are the NBD
 * layer's (config.h).
 */
#ifndef BIONBD_OPTIONS_H
#define BIONBD_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <bionbd/ioq.h>

#include "log.h"
#include "tls.h"

#define SRV_DEFAULT_LISTEN "127.0.0.1"
#define SRV_DEFAULT_PORT "10809"
#define SRV_MAX_THREADS 1024u
#define SRV_DEFAULT_POLL_US 200u /* busy-poll window cap, microseconds */
#define SRV_MAX_POLL_US 100000u
#define SRV_DEFAULT_HANDSHAKE_S 10u /* qemu's since CVE-2024-7409 */
#define SRV_MAX_HANDSHAKE_S 3600u
#define SRV_DEFAULT_MAX_CONNS 1024u
#define SRV_MAX_STATS_INTERVAL 86400u
#define SRV_MAX_MAX_CONNS 1000000u
/* Default buffer cache budget: per worker, and at most 1/8 of the RAM. */
#define SRV_MEMORY_PER_WORKER (128ull << 20)
#define SRV_MEMORY_MIN (64ull << 20)
/*
 * Default bound on payload buffers in flight (--inflight-memory): a
 * quarter of the RAM, but at least SRV_INFLIGHT_WORKER_DEFAULT_MIN a
 * worker (server.h), so that every worker can stream large requests at a
 * deep queue.
 */
#define SRV_INFLIGHT_RAM_SHARE 4
/*
 * Without async-min: requests of at least SRV_AUTO_ASYNC_MIN bytes have
 * their data copied off the worker thread (REQ_ASYNC) on machines with
 * SRV_AUTO_ASYNC_CPUS or more CPUs, where spare cores can run the copies;
 * on smaller ones the worker copies everything, which measured faster and
 * fairer there (docs/design.md, "Large requests and fairness").
 */
#define SRV_AUTO_ASYNC_MIN (1u << 20)
#define SRV_AUTO_ASYNC_CPUS 8
/*
 * Read replies this large on unix sockets go from memory-backed members to
 * the socket with sendfile(2): from 64 KiB up it costs the worker a third
 * to a half of the CPU per byte of reading into a buffer and sending that
 * (bench/splice-bench.c); below, and over TCP, it gains nothing.
 */
#define SRV_DEFAULT_SENDFILE_MIN (64u << 10)

struct srv_options {
	char *listen; /* address; NULL = not given */
	char *port; /* as given (checked); NULL = not given */
	char *socket; /* unix socket path; NULL = none */
	unsigned int threads; /* 0 = one per CPU */
	enum ioq_backend backend;
	bool backend_set; /* given, so no fallback when io_uring fails */
	unsigned int poll_us;
	unsigned int handshake_s; /* 0 = no limit */
	unsigned int max_conns;
	uint32_t async_min; /* bytes; 0 = every copy on the worker */
	bool async_min_set; /* else chosen by the CPU count */
	uint32_t sendfile_min; /* bytes; 0 = never sendfile */
	bool sendfile_min_set; /* else SRV_DEFAULT_SENDFILE_MIN */
	enum srv_log_dest log;
	bool log_set; /* else stderr in the foreground, syslog as a daemon */
	uint64_t memory_bytes; /* buffer cache budget; see memory_set */
	bool memory_set; /* else derived from the worker count */
	uint64_t inflight_bytes; /* bound on buffers in flight, all workers */
	bool inflight_set; /* else derived from the RAM and worker count */
	enum srv_tls_mode tls;
	bool tls_set; /* else require if credentials are given, or off */
	char *tls_certificates; /* directory; NULL = none */
	char *tls_psk; /* psktool file; NULL = none */
	bool tls_verify_peer;
	char *user, *group; /* drop root to these; NULL = stay */
	char *stats_file; /* JSON statistics at exit (and every interval) */
	unsigned int stats_interval; /* seconds; 0 = at exit only */
	char *control; /* the read-only statistics socket; NULL = none */
	char *trace_file; /* the bio trace (trace.h); NULL = none */
	uint32_t trace_buffer; /* bytes per thread; 0 = TRACE_DEFAULT_RING */
};

/*
 * Defaults: nothing given, backend io_uring, poll-us 200, handshake-timeout
 * 10, max-connections 1024, async-min by the CPU count, sendfile-min 64K.
 */
void srv_options_init(struct srv_options *o);

void srv_options_release(struct srv_options *o);

/**
 * srv_option_set - apply one setting: "listen", "port", "socket",
 *                  "threads", "backend", "poll-us", "handshake-timeout",
 *                  "max-connections", "memory", "inflight-memory",
 *                  "async-min",
 *                  "sendfile-min", "log", "tls", "tls-certificates",
 *                  "tls-psk", "tls-verify-peer", "user", "group",
 *                  "stats", "stats-interval", "control", "trace",
 *                  "trace-buffer"
 * @why: on -EINVAL, what is wrong with @value (callers name the key or
 *       flag, and the file and line)
 *
 * Later calls overwrite earlier ones, which is how flags win over the file.
 * Returns 0, -EINVAL, -ENOENT (unknown key) or -ENOMEM.
 */
int srv_option_set(struct srv_options *o, const char *key, const char *value,
		   char *why, size_t whylen);

#endif /* BIONBD_OPTIONS_H */
