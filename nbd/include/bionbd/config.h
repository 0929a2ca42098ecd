/* SPDX-License-Identifier: MIT */
/*
 * config.h - the volume/export configuration shared by every front end.
 *
 * One parser serves the nbdkit plugin (conf=FILE, and its file=, stripe-size=
 * ... keys) and the native server (-c FILE, and its --stripe-size ...
 * flags): the file parser and the command-line front ends both feed single
 * keys through conf_export_set(), so a key means the same thing and is
 * checked the same way wherever it is written.  The [server] section is not
 * this layer's: its lines are handed over as written (conf->server_keys)
 * to bionbd, whose one setter checks them and its command-line flags alike.
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
 *	fault = member=1 op=write error=EIO range=1G-2G    repeat: rules
 *	delay = op=read ms=5                                stack in order
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
#include <bionbd/size.h>
#include <bionbd/target.h>
#include <bionbd/volume.h>

/* The NBD protocol's limit for export names and descriptions. */
#define CONF_MAX_NAME_BYTES 4096u

/* One NBD export: a striped volume and how it is presented. */
struct conf_export {
	char *name;	   /* NBD export name; "" for a command-line volume */
	char *description; /* NULL = none */
	char **members;	   /* paths, in member order */
	unsigned int nr_members;
	char **spares; /* a mirror's spares (volume_config.spares) */
	unsigned int nr_spares;
	struct fault_text *faults; /* fault = / delay = rules, texts owned */
	unsigned int nr_faults;
	bool level_set; /* level = raid0|raid1|raid10 given */
	uint32_t level; /* enum sb_level */
	uint32_t copies; /* copies = K; 0 = not given */
	uint64_t chunk_bytes; /* stripe unit; STRIPE_DEFAULT_CHUNK unless set */
	uint64_t size_bytes;  /* 0 = from the members */
	/*
	 * size, stripe-size, copies and timeout as given ("128K", not 131072): a
	 * volume's message about one quotes what the user wrote.  NULL when
	 * not given.
	 */
	char *size_text, *chunk_text, *copies_text, *timeout_text;
	bool readonly;
	bool no_statistics; /* statistics = false: nothing counted */
	bool no_lock; /* lock = false: volume_config.no_lock */
	bool degraded; /* degraded = true: volume_config.degraded */
	/* timeout = S: remote members' (volume_config.remote_timeout_ms) */
	unsigned int remote_timeout_ms;
	unsigned int
	    line; /* line of its [export] header; 0 = not from a file */
	/*
	 * From a file, the lines of what a volume's check or open can find
	 * wrong, for its message to cite: members[i] is on member_lines[i],
	 * and so on; NULL or 0 when not from a file (or not given).
	 */
	unsigned int *member_lines, *spare_lines, *fault_lines;
	unsigned int size_line, chunk_line, level_line, copies_line,
		timeout_line;
};

/* A key = value line of a section the NBD layer does not own. */
struct conf_kv {
	char *key;
	char *value;
	unsigned int line;
};

struct conf {
	char *path;		     /* as given to conf_load(), for messages */
	struct conf_export *exports; /* in file order; [0] is the default */
	unsigned int nr_exports;
	char *dir; /* absolute directory of the file; NULL = none */
	/*
	 * The [server] section, as written: it configures bionbd's listeners
	 * and workers, so bionbd checks it (server/options.c); the plugin
	 * reads only "backend" from it.
	 */
	struct conf_kv *server_keys;
	unsigned int nr_server_keys;
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

/**
 * conf_export_init - an empty export named @name (a copy is made)
 * Returns 0 or -ENOMEM; the name's length is conf_export_check()'s.
 */
int conf_export_init(struct conf_export *e, const char *name);

/** conf_export_release - free what @e holds; @e itself stays the caller's. */
void conf_export_release(struct conf_export *e);

/**
 * conf_export_set - apply one export key ("file", "spare", "level",
 *                   "copies", "stripe-size", "size", "read-only",
 *                   "description", "fault", "delay", "statistics",
 *                   "lock", "degraded")
 * @errbuf: on failure "key=value: reason" (callers add file and line)
 *
 * "file" and "spare" append a path (refused when the same path is already
 * there), "fault" and "delay" a rule (fault.h); the other keys overwrite.  Returns 0, -EINVAL (bad value), -ENOENT
 * (unknown key; message written) or -ENOMEM.
 */
int conf_export_set(struct conf_export *e, const char *key, const char *value,
		    char *errbuf, size_t errlen);

/**
 * conf_export_value_absolute - @value of the export key @key with the
 *                              local files it names made absolute
 * @dir: the directory they are relative to (a file's); NULL: the current
 * @out: receives the value; the caller owns it (free)
 *
 * A daemon changes to / (bionbd/path.h): "file" and "spare" go through
 * member_absolute, a "fault" or "delay" rule's file= through
 * fault_rule_absolute; other keys are copied.  Returns 0, -ENOMEM,
 * getcwd's -errno, or -EINVAL (a rule's file= would hold a blank).
 */
int conf_export_value_absolute(const char *key, const char *value,
			       const char *dir, char **out);

/**
 * conf_exports_path_check - refuse a file the server writes (@what, as
 * "--trace " or "trace=", then @path: a pid file, a trace, statistics)
 * that is a member or spare of one of
 * @nr exports: it would overwrite the volume's data.  Call it once the
 * volumes are open (members made by --size exist then).  Returns 0, or
 * -EINVAL with a one-line message.
 */
int conf_exports_path_check(const struct conf_export *defs, unsigned int nr,
			    const char *path, const char *what, char *errbuf,
			    size_t errlen);

/**
 * conf_export_check - what can only be checked once every key is in: at
 * least one member, and a name of at most CONF_MAX_NAME_BYTES (the name
 * comes from conf_export_init(), which only copies it).  Returns 0 or
 * -EINVAL with a message.
 */
int conf_export_check(const struct conf_export *e, char *errbuf, size_t errlen);

/**
 * conf_export_volume - the volume_open() arguments for @e
 * @vc: filled in; points into @e, so @e must outlive the volume_open() call
 */
void conf_export_volume(const struct conf_export *e, struct volume_config *vc);

/**
 * conf_parse_bool - "true/false", "yes/no", "on/off", "1/0" (any case)
 * Returns 0 or -EINVAL.
 */
int conf_parse_bool(const char *s, bool *out);

/** conf_set_string - replace *@slot with a copy of @value; 0 or -ENOMEM. */
int conf_set_string(char **slot, const char *value);

/**
 * conf_parse_uint - a decimal number in [@min, @max]: no sign, no suffix
 * Returns 0 or -EINVAL.
 */
int conf_parse_uint(const char *s, unsigned int min, unsigned int max,
		    unsigned int *out);

/**
 * conf_parse_chunk - a stripe size: parse_size() plus the stripe rules
 * (power of two, STRIPE_MIN_CHUNK..STRIPE_MAX_CHUNK).  Returns 0 or -EINVAL
 * with "why" in @errbuf (without the key).
 */
int conf_parse_chunk(const char *s, uint64_t *out, char *errbuf, size_t errlen);

#endif /* BIONBD_CONFIG_H */
