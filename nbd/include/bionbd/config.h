/* SPDX-License-Identifier: MIT */
/*
 * config.h - the volume/export configuration shared by every front end.
 *
 * One parser serves the nbdkit plugin (conf=FILE, and its file=, stripe-size=
 * ... keys) and the native server (-c FILE, and its --stripe-size ...
 * flags): the file parser and the command-line front ends both feed single
 * keys through conf_export_set()/conf_server_set(), so a key means the same
 * thing and is checked the same way wherever it is written.
 *
 * File format (INI, read with libinih; conf/example.conf documents every
 * key):
 *
 *	[server]                   optional, read by the native server
 *	listen = 127.0.0.1
 *	port = 10809
 *	socket = /run/bionbd.sock
 *	threads = 4
 *	backend = io_uring
 *
 *	[export NAME]              one or more; NAME is the NBD export name
 *	file = /data/a.img         repeat: member order = order of the lines
 *	file = /data/b.img
 *	stripe-size = 64K
 *	size = 4G
 *	read-only = false
 *	description = scratch disk
 *
 * Lines may be indented; '#' or ';' starts a comment line, and " ;" starts
 * a comment after a value.  Relative member paths are taken relative to the
 * directory holding the file.  Errors stop at the first problem and come
 * back as one line: "FILE:LINE: [section] key=value: what is wrong".
 *
 * Nothing here opens members: the result is handed to volume_open(), which
 * does the file-system checks (existence, types, sizes) before creating
 * anything.
 */
#ifndef BIONBD_CONFIG_H
#define BIONBD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <bionbd/ioq.h>
#include <bionbd/target.h>
#include <bionbd/volume.h>

#define CONF_DEFAULT_LISTEN "127.0.0.1"
#define CONF_DEFAULT_PORT 10809u
#define CONF_MAX_THREADS 1024u
#define CONF_DEFAULT_POLL_US 200u /* busy-poll window cap, microseconds */
#define CONF_MAX_POLL_US 100000u
/* The NBD protocol's limit for export names and descriptions. */
#define CONF_MAX_NAME_BYTES 4096u

/* One NBD export: a striped volume and how it is presented. */
struct conf_export {
	char *name;	   /* NBD export name; "" for a command-line volume */
	char *description; /* NULL = none */
	char **members;	   /* paths, in member order */
	unsigned int nr_members;
	uint64_t chunk_bytes; /* stripe unit; STRIPE_DEFAULT_CHUNK unless set */
	uint64_t size_bytes;  /* 0 = from the members */
	bool readonly;
	unsigned int
	    line; /* line of its [export] header; 0 = not from a file */
};

/*
 * The [server] section.  Zero/NULL fields were not given: the consumer
 * applies its defaults (CONF_DEFAULT_*) and lets command-line flags win.
 */
struct conf_server {
	char *listen; /* address to listen on */
	unsigned int port;
	char *socket; /* unix socket path */
	unsigned int threads;
	enum ioq_backend backend;
	bool backend_set;
	unsigned int poll_us; /* busy-poll window cap; 0 = never poll */
	bool poll_us_set;
};

struct conf {
	char *path;		     /* as given to conf_load(), for messages */
	struct conf_export *exports; /* in file order; [0] is the default */
	unsigned int nr_exports;
	struct conf_server server;
	bool has_server; /* a [server] section was present */
};

/**
 * conf_load - read and check a configuration file
 * @out: receives the configuration; the caller owns it (conf_free)
 * @path: the file
 * @errbuf: receives a one-line message on failure (file, line, key, value)
 *
 * Checks syntax, keys, values, duplicate exports and duplicate members of
 * an export, and that every export has a member.  Does not touch members.
 * Returns 0, -errno from reading the file, -EINVAL for any content error,
 * or -ENOMEM.
 */
int conf_load(struct conf **out, const char *path, char *errbuf, size_t errlen);

/**
 * conf_parse_string - as conf_load, from memory
 * @name: what messages call the text (e.g. "<string>")
 * @basedir: directory relative member paths are joined to, or NULL to keep
 *           them as written
 */
int conf_parse_string(struct conf **out, const char *text, const char *name,
		      const char *basedir, char *errbuf, size_t errlen);

/** conf_free - free a configuration from conf_load (NULL is fine). */
void conf_free(struct conf *c);

/**
 * conf_find_export - look an export up by NBD name
 * Returns the export (owned by @c) or NULL.
 */
const struct conf_export *conf_find_export(const struct conf *c,
					   const char *name);

/** conf_export_init - an empty export named @name (a copy is made). */
int conf_export_init(struct conf_export *e, const char *name);

/** conf_export_release - free what @e holds; @e itself stays the caller's. */
void conf_export_release(struct conf_export *e);

/**
 * conf_export_set - apply one export key ("file", "stripe-size", "size",
 *                   "read-only", "description")
 * @errbuf: on failure "key=value: reason" (callers add file and line)
 *
 * "file" appends a member (refused when the same path is already there);
 * the other keys overwrite.  Returns 0, -EINVAL (bad value), -ENOENT
 * (unknown key; message written) or -ENOMEM.
 */
int conf_export_set(struct conf_export *e, const char *key, const char *value,
		    char *errbuf, size_t errlen);

/**
 * conf_export_check - what can only be checked once every key is in
 * (at least one member).  Returns 0 or -EINVAL with a message.
 */
int conf_export_check(const struct conf_export *e, char *errbuf, size_t errlen);

/**
 * conf_export_volume - the volume_open() arguments for @e
 * @vc: filled in; points into @e, so @e must outlive the volume_open() call
 */
void conf_export_volume(const struct conf_export *e, struct volume_config *vc);

/** conf_server_release - free what @s holds. */
void conf_server_release(struct conf_server *s);

/**
 * conf_server_set - apply one [server] key ("listen", "port", "socket",
 *                   "threads", "backend", "poll-us"); same conventions as
 *                   conf_export_set.
 */
int conf_server_set(struct conf_server *s, const char *key, const char *value,
		    char *errbuf, size_t errlen);

/**
 * conf_parse_bool - "true/false", "yes/no", "on/off", "1/0" (any case)
 * Returns 0 or -EINVAL.
 */
int conf_parse_bool(const char *s, bool *out);

/**
 * conf_parse_chunk - a stripe size: parse_size() plus the stripe rules
 * (power of two, STRIPE_MIN_CHUNK..STRIPE_MAX_CHUNK).  Returns 0 or -EINVAL
 * with "why" in @errbuf (without the key).
 */
int conf_parse_chunk(const char *s, uint64_t *out, char *errbuf, size_t errlen);

/**
 * parse_size - "4096", "64K", "1M", "4G", "1T" (binary units) to bytes
 * Returns 0 or -EINVAL (empty, junk, overflow).
 */
int parse_size(const char *s, uint64_t *out);

#endif /* BIONBD_CONFIG_H */
