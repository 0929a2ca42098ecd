/* SPDX-License-Identifier: MIT */
/*
 * run.h - captive mode (--run): a command that runs once the server
 * serves, with the server's address in its environment; the server lives
 * as long as the command does and exits with its status.
 */
#ifndef BIONBD_RUN_H
#define BIONBD_RUN_H

#include <stdbool.h>
#include <sys/types.h>

#include <ev.h>

/* Where the server listens, as the command is told (NULL: not there). */
struct run_addr {
	const char *socket; /* unix socket path */
	const char *host; /* TCP address as given to -i */
	const char *port; /* TCP port, when it listens on TCP (also $port) */
	const char *export_name; /* the default export's name */
	bool tls; /* --tls=require: nbds:// and nbds+unix:// */
};

/**
 * run_uri - the NBD URI of @a (unix socket first, else TCP), with the
 * export name and socket path percent-encoded.  Returns a malloc'd string
 * or NULL (ENOMEM).
 */
char *run_uri(const struct run_addr *a);

/* Who the command runs as (-u/-g), resolved before the fork. */
struct run_creds {
	bool set; /* false: as the server */
	bool set_uid; /* false: -g alone */
	uid_t uid;
	gid_t gid;
	const gid_t *groups; /* supplementary groups */
	size_t nr_groups;
};

/**
 * run_start - fork "/bin/sh -c @cmd" with $uri, $unixsocket, $port and
 * $exportname (nbdkit's names) set for @a, and every other variable of
 * ours, as @creds says (NULL: as the server), but run it only at
 * run_go(): called while the server may still refuse its start as root,
 * so that no fork is left to fail after root went, with what the start
 * made and only root could take back.  On @loop (the default loop, which
 * alone sees children) @done is called once it has exited, with the
 * status the server should exit with: its exit status, or 128 + the
 * signal that killed it.  Returns 0 or -errno (the fork, or the child
 * could not take @creds).
 */
int run_start(struct ev_loop *loop, const char *cmd, const struct run_addr *a,
	      const struct run_creds *creds,
	      void (*done)(struct ev_loop *loop, int status));

/**
 * run_go - the server serves: the command forked by run_start runs now.
 * A server that exits before this call never runs it (the child sees
 * its pipe close and exits).
 */
void run_go(void);

/** run_running - the command was started and has not exited yet. */
bool run_running(void);

/**
 * run_signal - pass @sig, which stops the server, on to the command that
 * still runs: to its process group, or where standard input is a
 * terminal (the command then shares the server's group), to it alone,
 * and not SIGINT or SIGQUIT, which a key sent it already.  Returns
 * whether it was sent.
 */
bool run_signal(int sig);

/**
 * run_finish - after the loop: wait up to @grace_ms for a command that
 * was signalled (run_signal) to exit, with all of its process group when
 * it has one, then kill what is left (SIGKILL, the same way) and reap the
 * command, so that none of it outlives the server.
 */
void run_finish(unsigned int grace_ms);

#endif /* BIONBD_RUN_H */
