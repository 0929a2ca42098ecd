// SPDX-License-Identifier: MIT
/*
 * main.c - bionbd: the command line, exports, daemonizing, start-up and
 * orderly shutdown.
 *
 * SIGTERM/SIGINT stop accepting, let every worker answer what it has taken
 * (clients that stop reading are cut off after a grace period), flush
 * every export, and exit 0; so does SIGQUIT, and the end of a --run
 * command, with the command's exit status.  SIGHUP reopens the log.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <inttypes.h>
#include <libgen.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bionbd/config.h>
#include <bionbd/nbdl.h>
#include <bionbd/path.h>
#include <bionbd/plural.h>
#include <bionbd/trace.h>

#include "listener.h"
#include "log.h"
#include "options.h"
#include "run.h"
#include "stats.h"
#include "server.h"
#include "tls.h"
#include "worker.h"

/* Command-line flags that set a srv_options key, kept in order. */
struct flag_setting {
	const char *flag; /* as typed, for messages */
	const char *key;
	const char *value;
};

struct cmdline {
	bool foreground;
	bool exit_with_parent;
	bool verbose;
	const char *run; /* --run CMD */
	bool readonly;
	const char *export_name;
	const char *description;
	const char *pidfile;
	const char *conf_path;
	const char *stripe_size;
	const char *size;
	const char *level, *copies;
	const char *timeout; /* --timeout: remote members' */
	const char *spares[64]; /* --spare, in order */
	unsigned int nr_spares;
	struct {
		const char *key; /* "fault" or "delay" */
		const char *rule;
	} faults[64]; /* --fault, --delay, in order */
	unsigned int nr_faults;
	bool no_statistics;
	bool no_lock;
	bool degraded;
	struct flag_setting settings[32];
	unsigned int nr_settings;
	char **members;
	int nr_members;
};

static struct server srv;
static int exit_status; /* --run: the command's */
static char *private_dir; /* --run with nowhere to listen: our socket's */

/* With no member files and no -c: the installed configuration. */
#ifndef BIONBD_DEFAULT_CONF
#define BIONBD_DEFAULT_CONF "/etc/bionbd/bionbd.conf"
#endif

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/*
 * The exports are open and no worker uses them yet: a start that fails
 * now closes its RBD images, whose watches would otherwise stay with the
 * cluster for ~30 s and refuse the next start (sbvol: "in use by another
 * client").
 */
static bool die_closes_images;

/*
 * From the exports' open until the server serves, a start that fails
 * takes back the members the opens created or grew: the member
 * directories are left as they were found.  Nothing writes to such a
 * member meanwhile: no request is read before ev_run, and the only
 * background writer, a mirror's rebuild (target_start), writes only to
 * members with superblocks, which an open never grows (a new mirror's are
 * created, and removed whole).
 */
static bool die_unmakes;
/* ... and the trace file, when this start made it. */
static const char *die_unmakes_trace;
/*
 * The pidfile, once written: a start that fails after it, like one that
 * fails after binding its sockets, leaves nothing behind that names a
 * server which is not there.
 */
static const char *die_unlinks_pidfile;

static void die(const char *fmt, ...)
{
	va_list ap;

	fputs("bionbd: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	listeners_unlink();
	srv_stats_unlink();
	if (die_unlinks_pidfile)
		unlink(die_unlinks_pidfile);
	if (die_unmakes) {
		nbdl_exports_unmake(srv.exports, srv.nr_exports);
		if (die_unmakes_trace)
			unlink(die_unmakes_trace);
	}
	if (die_closes_images)
		rbd_close_all();
	exit(1);
}

/*
 * Relative paths from the command line, made absolute at start (path.h:
 * the daemon changes to /); kept until exit.
 */
static char **abs_paths;
static unsigned int nr_abs_paths;

static const char *keep_path(char *abs)
{
	char **v = realloc(abs_paths, (nr_abs_paths + 1) * sizeof(*v));

	if (!v) {
		free(abs);
		die("out of memory");
	}
	abs_paths = v;
	abs_paths[nr_abs_paths++] = abs;
	return abs;
}

static const char *start_path(const char *flag, const char *path)
{
	char *abs;
	int r;

	if (!path || !*path || *path == '/')
		return path;
	r = path_absolute(path, NULL, &abs);
	if (r)
		die("%s %s: the current directory: %s", flag, path,
		    strerror(-r));
	return keep_path(abs);
}

/* An export key's value, its local files made absolute as start_path's. */
static const char *start_value(const char *flag, const char *key,
			       const char *value)
{
	char *abs;
	int r;

	r = conf_export_value_absolute(key, value, NULL, &abs);
	if (r == -EINVAL)
		die("%s %s: file=: the current directory holds a blank: give "
		    "the file whole",
		    flag, value);
	if (r)
		die("%s %s: the current directory: %s", flag, value,
		    strerror(-r));
	return keep_path(abs);
}

static void start_paths_free(void)
{
	while (nr_abs_paths)
		free(abs_paths[--nr_abs_paths]);
	free(abs_paths);
	abs_paths = NULL;
}

static void usage(void)
{
	fputs("Usage: bionbd [-f] [-U SOCK] [-i ADDR] [-p PORT] [-r] [-t THREADS]\n"
	      "              [-e EXPORTNAME] [--description TEXT] [-P PIDFILE]\n"
	      "              [--stripe-size SIZE] [--spare FILE]\n"
	      "              [--level raid0|raid1|raid10] [--copies K]\n"
	      "              [--fault RULE] [--delay RULE] [--timeout S]\n"
	      "              [--size SIZE] [--backend io_uring|threads]\n"
	      "              [--poll-us N] [--handshake-timeout S]\n"
	      "              [--max-connections N] [--memory SIZE]\n"
	      "              [--inflight-memory SIZE]\n"
	      "              [--async-min SIZE] [--sendfile-min SIZE]\n"
	      "              [--run CMD] [--exit-with-parent] [--log DEST] [-v]\n"
	      "              [--tls MODE] [--tls-certificates DIR] [--tls-psk FILE]\n"
	      "              [--tls-verify-peer] [-u USER] [-g GROUP]\n"
	      "              [--stats FILE] [--stats-interval S] [--control SOCK]\n"
	      "              [--trace FILE] [--trace-buffer SIZE]\n"
	      "              [--no-statistics] [--no-lock] [--degraded] MEMBER...\n"
	      "       bionbd [-f] [-U SOCK] [-i ADDR] [-p PORT] [-r] [-t THREADS]\n"
	      "              [-P PIDFILE] [--backend io_uring|threads]\n"
	      "              [--poll-us N] [--handshake-timeout S]\n"
	      "              [--max-connections N] [--memory SIZE]\n"
	      "              [--inflight-memory SIZE]\n"
	      "              [--async-min SIZE] [--sendfile-min SIZE]\n"
	      "              [--run CMD] [--exit-with-parent] [--log DEST] [-v]\n"
	      "              [--tls MODE] [--tls-certificates DIR] [--tls-psk FILE]\n"
	      "              [--tls-verify-peer] [-u USER] [-g GROUP]\n"
	      "              [--stats FILE] [--stats-interval S] [--control SOCK]\n"
	      "              [--trace FILE] [--trace-buffer SIZE] [-c FILE.conf]\n"
	      "\n"
	      "Serve a volume over NBD: striped (raid0) over MEMBER files, or a\n"
	      "raid1/raid10 mirror when they hold its superblocks (or the exports\n"
	      "of FILE.conf; with neither, of " BIONBD_DEFAULT_CONF ").\n"
	      "Listens on 127.0.0.1:10809 unless -U, -i or -p say otherwise (-U\n"
	      "alone: the unix socket only), or on the sockets a service manager\n"
	      "passes (LISTEN_PID/LISTEN_FDS).\n"
	      "\n"
	      "  -f, --foreground       do not fork into the background\n"
	      "  -U, --unix SOCK        listen on a unix socket\n"
	      "  -i, --ipaddr ADDR      listen on ADDR (default 127.0.0.1)\n"
	      "  -p, --port PORT        TCP port (default 10809)\n"
	      "  -r, --readonly         refuse writes, trims and zeroes (EPERM)\n"
	      "  -t, --threads N        worker threads (default: number of CPUs)\n"
	      "  -e, --exportname NAME  export name (default \"\")\n"
	      "      --description TEXT what NBD_INFO_DESCRIPTION tells clients\n"
	      "  -P, --pidfile FILE     write the pid once ready to serve\n"
	      "  -c, --config FILE      exports (and [server] defaults) from FILE\n"
	      "      --stripe-size SIZE stripe unit, a power of two 4K..1G (default 64K)\n"
	      "      --size SIZE        volume size; creates/extends members\n"
	      "      --spare FILE       a spare for a raid1/raid10 volume: takes\n"
	      "                         over a member that fails (repeat)\n"
	      "      --level LEVEL      raid0, raid1 or raid10: must match the\n"
	      "                         superblocks; new members (with --size)\n"
	      "                         become a new raid1/raid10 volume\n"
	      "      --copies K         raid10's copies of each chunk (default 2)\n"
	      "      --fault RULE       fail a member's I/O, e.g. \"member=1 op=write\n"
	      "                         error=EIO rate=1%\" (repeat; docs/faults.md)\n"
	      "      --delay RULE       delay a member's I/O, e.g. \"op=read ms=5\"\n"
	      "                         (repeat; docs/faults.md)\n"
	      "      --timeout S        remote members (nbd://... URIs, rbd:...):\n"
	      "                         a request or connection unanswered for\n"
	      "                         S seconds fails with EIO (default 5,\n"
	      "                         30 for RBD images; docs/remote.md)\n"
	      "      --backend NAME     io_uring (default) or threads\n"
	      "      --poll-us N        busy-poll up to N microseconds for the next\n"
	      "                         request after replying (adaptive; default\n"
	      "                         200, 0 = always sleep)\n"
	      "      --handshake-timeout S  drop clients still negotiating after\n"
	      "                         S seconds (default 10, 0 = never)\n"
	      "      --max-connections N  refuse clients beyond N connections\n"
	      "                         (default 1024)\n"
	      "      --memory SIZE      payload buffers cached for reuse, all\n"
	      "                         workers together (default 128M a worker,\n"
	      "                         at most 1/8 of the RAM, at least 64M)\n"
	      "      --inflight-memory SIZE  payload buffers of requests in\n"
	      "                         flight, all workers together, 64M a\n"
	      "                         worker at least (default 1/4 of the\n"
	      "                         RAM, at least 256M a worker)\n"
	      "      --async-min SIZE   copy the data of requests this large on\n"
	      "                         other threads, not the worker (default\n"
	      "                         1M with 8 CPUs or more, else 0 = never)\n"
	      "      --sendfile-min SIZE  send reads this large on unix sockets\n"
	      "                         with sendfile(2) from tmpfs/ramfs members\n"
	      "                         (default 64K, 0 = never)\n"
	      "      --run CMD          run CMD (with sh -c) once serving, $uri,\n"
	      "                         $unixsocket, $port and $exportname set;\n"
	      "                         exit when it does, with its status (with\n"
	      "                         no -U, -i or -p: a private unix socket)\n"
	      "      --exit-with-parent exit when the parent process does\n"
	      "      --log DEST         stderr, syslog or null (default stderr in\n"
	      "                         the foreground: -f, --run,\n"
	      "                         --exit-with-parent, socket activation;\n"
	      "                         else syslog)\n"
	      "      --tls MODE         off (default), on (clients may upgrade with\n"
	      "                         STARTTLS) or require (they must); with\n"
	      "                         credentials and no --tls: require\n"
	      "      --tls-certificates DIR  X.509: DIR/server-cert.pem,\n"
	      "                         server-key.pem, and ca-cert.pem, ca-crl.pem\n"
	      "      --tls-psk FILE     pre-shared keys (psktool's identity:hexkey)\n"
	      "      --tls-verify-peer  clients need a certificate ca-cert.pem signed\n"
	      "  -u, --user USER        drop root to USER once listening, members\n"
	      "                         and credentials open\n"
	      "  -g, --group GROUP      drop root's group to GROUP (default: USER's)\n"
	      "      --stats FILE       write statistics (JSON) to FILE at exit\n"
	      "      --stats-interval S and every S seconds (0 = at exit only)\n"
	      "      --control SOCK     a unix socket (mode 0600) that answers\n"
	      "                         every connection with the statistics\n"
	      "                         (bioctl stat); with -P PIDFILE, default\n"
	      "                         PIDFILE.ctl\n"
	      "      --no-statistics    count nothing (statistics = false)\n"
	      "      --no-lock          do not lock the members of a volume\n"
	      "                         without superblocks (lock = false)\n"
	      "      --degraded         start a mirror with members left out\n"
	      "                         (degraded = true)\n"
	      "      --trace FILE       record every request and bio event in FILE\n"
	      "                         (bioctl trace reads it; docs/trace.md)\n"
	      "      --trace-buffer SIZE  each thread's trace buffer (default 4M);\n"
	      "                         events that find it full are lost, counted\n"
	      "  -v, --verbose          debug messages too\n"
	      "  -h, --help             this text\n"
	      "  -V, --version          print the version\n",
	      stdout);
}

/* The end of --trace: its totals logged, a loss or a failure as an error. */
static void trace_finish(const char *path)
{
	uint64_t written = 0, lost = 0;
	int r = trace_stop(&written, &lost);

	if (r)
		nbdl_log(NBDL_ERROR, "trace %s: %s: the trace is incomplete",
			 path, strerror(-r));
	nbdl_log(lost ? NBDL_ERROR : NBDL_INFO,
		 "trace %s: %" PRIu64 " event%s written, %" PRIu64
		 " lost%s",
		 path, written, plural(written), lost,
		 lost ? " (the buffers were full: a larger --trace-buffer "
			"keeps them)" :
			"");
}

static void add_setting(struct cmdline *cl, const char *flag, const char *key,
			const char *value)
{
	char why[512];
	struct srv_options scratch;
	int r;

	/* Checked now, so a bad flag stops us before anything is read. */
	srv_options_init(&scratch);
	r = srv_option_set(&scratch, key, value, why, sizeof(why));
	srv_options_release(&scratch);
	if (r == -ENOMEM)
		die("out of memory");
	/* A blank value shows quoted: '' (an unset shell variable). */
	if (r)
		die(strspn(value, " \t") == strlen(value) ? "%s '%s': %s" :
							  "%s %s: %s",
		    flag, value, why);
	if (cl->nr_settings == sizeof(cl->settings) / sizeof(cl->settings[0]))
		die("%s: too many flags", flag);
	cl->settings[cl->nr_settings++] =
		(struct flag_setting){ flag, key, value };
}

static void parse_args(int argc, char **argv, struct cmdline *cl)
{
	static const struct option longopts[] = {
		{ "foreground", no_argument, NULL, 'f' },
		{ "unix", required_argument, NULL, 'U' },
		{ "ipaddr", required_argument, NULL, 'i' },
		{ "port", required_argument, NULL, 'p' },
		{ "readonly", no_argument, NULL, 'r' },
		{ "read-only", no_argument, NULL, 'r' },
		{ "threads", required_argument, NULL, 't' },
		{ "exportname", required_argument, NULL, 'e' },
		{ "export-name", required_argument, NULL, 'e' },
		{ "pidfile", required_argument, NULL, 'P' },
		{ "config", required_argument, NULL, 'c' },
		{ "stripe-size", required_argument, NULL, 'S' },
		{ "spare", required_argument, NULL, 'Z' },
		{ "fault", required_argument, NULL, 'J' },
		{ "delay", required_argument, NULL, 'j' },
		{ "level", required_argument, NULL, 'W' },
		{ "copies", required_argument, NULL, 'k' },
		{ "timeout", required_argument, NULL, 'o' },
		{ "size", required_argument, NULL, 's' },
		{ "backend", required_argument, NULL, 'b' },
		{ "poll-us", required_argument, NULL, 'L' },
		{ "handshake-timeout", required_argument, NULL, 'H' },
		{ "max-connections", required_argument, NULL, 'M' },
		{ "memory", required_argument, NULL, 'm' },
		{ "inflight-memory", required_argument, NULL, 'y' },
		{ "async-min", required_argument, NULL, 'A' },
		{ "sendfile-min", required_argument, NULL, 'F' },
		{ "run", required_argument, NULL, 'R' },
		{ "exit-with-parent", no_argument, NULL, 'X' },
		{ "log", required_argument, NULL, 'O' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "description", required_argument, NULL, 'D' },
		{ "tls", required_argument, NULL, 'T' },
		{ "tls-certificates", required_argument, NULL, 'C' },
		{ "tls-psk", required_argument, NULL, 'K' },
		{ "tls-verify-peer", no_argument, NULL, 'Y' },
		{ "stats", required_argument, NULL, 'I' },
		{ "no-statistics", no_argument, NULL, 'q' },
		{ "no-lock", no_argument, NULL, 'n' },
		{ "degraded", no_argument, NULL, 'G' },
		{ "stats-interval", required_argument, NULL, 'N' },
		{ "control", required_argument, NULL, 'Q' },
		{ "trace", required_argument, NULL, 'E' },
		{ "trace-buffer", required_argument, NULL, 'B' },
		{ "user", required_argument, NULL, 'u' },
		{ "group", required_argument, NULL, 'g' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	while ((ch = getopt_long(argc, argv, "fU:i:p:rt:e:P:c:u:g:vhV", longopts,
				 NULL)) != -1) {
		switch (ch) {
		case 'f': cl->foreground = true; break;
		case 'U': add_setting(cl, "-U", "socket", optarg); break;
		case 'i': add_setting(cl, "-i", "listen", optarg); break;
		case 'p': add_setting(cl, "-p", "port", optarg); break;
		case 'r': cl->readonly = true; break;
		case 't': add_setting(cl, "-t", "threads", optarg); break;
		case 'e': cl->export_name = optarg; break;
		case 'P': cl->pidfile = optarg; break;
		case 'c': cl->conf_path = optarg; break;
		case 'S': cl->stripe_size = optarg; break;
		case 'W': cl->level = optarg; break;
		case 'k': cl->copies = optarg; break;
		case 'o': cl->timeout = optarg; break;
		case 'Z':
			if (cl->nr_spares == sizeof(cl->spares) / sizeof(cl->spares[0]))
				die("--spare %s: more than %zu spares", optarg,
				    sizeof(cl->spares) / sizeof(cl->spares[0]));
			cl->spares[cl->nr_spares++] = optarg;
			break;
		case 'J':
		case 'j':
			if (cl->nr_faults == sizeof(cl->faults) / sizeof(cl->faults[0]))
				die("--%s %s: more than %zu rules",
				    ch == 'J' ? "fault" : "delay", optarg,
				    sizeof(cl->faults) / sizeof(cl->faults[0]));
			cl->faults[cl->nr_faults].key = ch == 'J' ? "fault" :
								   "delay";
			cl->faults[cl->nr_faults++].rule = optarg;
			break;
		case 's': cl->size = optarg; break;
		case 'b': add_setting(cl, "--backend", "backend", optarg); break;
		case 'L': add_setting(cl, "--poll-us", "poll-us", optarg); break;
		case 'H':
			add_setting(cl, "--handshake-timeout", "handshake-timeout",
				    optarg);
			break;
		case 'M':
			add_setting(cl, "--max-connections", "max-connections",
				    optarg);
			break;
		case 'm': add_setting(cl, "--memory", "memory", optarg); break;
		case 'y':
			add_setting(cl, "--inflight-memory", "inflight-memory",
				    optarg);
			break;
		case 'A': add_setting(cl, "--async-min", "async-min", optarg); break;
		case 'F':
			add_setting(cl, "--sendfile-min", "sendfile-min", optarg);
			break;
		case 'R': cl->run = optarg; break;
		case 'X': cl->exit_with_parent = true; break;
		case 'O': add_setting(cl, "--log", "log", optarg); break;
		case 'v': cl->verbose = true; break;
		case 'D': cl->description = optarg; break;
		case 'T': add_setting(cl, "--tls", "tls", optarg); break;
		case 'C':
			add_setting(cl, "--tls-certificates", "tls-certificates",
				    optarg);
			break;
		case 'K': add_setting(cl, "--tls-psk", "tls-psk", optarg); break;
		case 'Y':
			add_setting(cl, "--tls-verify-peer", "tls-verify-peer",
				    "true");
			break;
		case 'I': add_setting(cl, "--stats", "stats", optarg); break;
		case 'q': cl->no_statistics = true; break;
		case 'n': cl->no_lock = true; break;
		case 'G': cl->degraded = true; break;
		case 'N':
			add_setting(cl, "--stats-interval", "stats-interval",
				    optarg);
			break;
		case 'Q': add_setting(cl, "--control", "control", optarg); break;
		case 'E': add_setting(cl, "--trace", "trace", optarg); break;
		case 'B':
			add_setting(cl, "--trace-buffer", "trace-buffer", optarg);
			break;
		case 'u': add_setting(cl, "-u", "user", optarg); break;
		case 'g': add_setting(cl, "-g", "group", optarg); break;
		case 'h': usage(); exit(0);
		case 'V': printf("bionbd %s\n", BIONBD_VERSION); exit(0);
		default:
			/*
			 * getopt named the option; a hundred lines of help
			 * after it would scroll it away.
			 */
			fputs("Try 'bionbd --help'.\n", stderr);
			exit(1);
		}
	}
	cl->members = argv + optind;
	cl->nr_members = argc - optind;
}

/* ---- exports ---- */

/*
 * A message "key=value: why" (the config file's spelling, which the
 * shared setter and the exports' open use) about @key given as @flag
 * @value: said as the user typed it, "--flag value: why".  Returns if
 * @err is about something else.
 */
static void die_as_flag(const char *flag, const char *key, const char *value,
			const char *err)
{
	size_t klen = strlen(key), vlen = strlen(value);

	if (!strncmp(err, key, klen) && err[klen] == '=' &&
	    !strncmp(err + klen + 1, value, vlen) &&
	    !strncmp(err + klen + 1 + vlen, ": ", 2))
		/* A blank value shows quoted: '' (an unset shell variable). */
		die(strspn(value, " \t") == vlen ? "%s '%s': %s" : "%s %s: %s",
		    flag, value, err + klen + vlen + 3);
}

/* @flag (NULL for a member) as the user typed it: die_as_flag. */
static void set_export_key(struct conf_export *e, const char *flag,
			   const char *key, const char *value)
{
	char err[512];
	int r = conf_export_set(e, key, value, err, sizeof(err));

	if (!r)
		return;
	if (r == -ENOMEM)
		die("out of memory");
	die_as_flag(flag ? flag : "member", key, value, err);
	die("%s", err);
}

/* The volume's open failed on @err: a flag it is about named as typed. */
static void __attribute__((noreturn))
die_open(const struct cmdline *cl, const char *err)
{
	const struct {
		const char *flag, *key, *value;
	} flags[] = {
		{ "--size", "size", cl->size },
		{ "--stripe-size", "stripe-size", cl->stripe_size },
		{ "--copies", "copies", cl->copies },
		{ "--level", "level", cl->level },
		{ "--timeout", "timeout", cl->timeout },
	};

	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
		if (flags[i].value)
			die_as_flag(flags[i].flag, flags[i].key,
				    flags[i].value, err);
	die("%s", err);
}

/* The command line's export, kept for the start-up line. */
static struct conf_export cmdline_export;

/* The files bionbd writes (set once the options are known). */
static const char *own_files[3];

/*
 * A pid file, trace or statistics file that is a member would overwrite
 * the volume: refused before the volume is opened (which writes its
 * superblocks) and once more after (members it made).
 */
static void check_own_files(const struct conf_export *defs, unsigned int nr)
{
	static const char *const what[3] = { "-P ", "--trace ", "--stats " };
	char err[1024];

	for (unsigned int i = 0; i < 3; i++)
		if (conf_exports_path_check(defs, nr, own_files[i], what[i],
					    err, sizeof(err)))
			die("%s", err);
}

static void exports_from_cmdline(const struct cmdline *cl)
{
	struct conf_export *ce = &cmdline_export;
	char err[1024];

	if (!cl->nr_members)
		/* The file it would have served, had it been there. */
		die("no member files given, no -c, and no %s (see --help)",
		    BIONBD_DEFAULT_CONF);
	if (conf_export_init(ce, cl->export_name ? cl->export_name : ""))
		die("out of memory");
	for (int i = 0; i < cl->nr_members; i++)
		set_export_key(ce, NULL, "file",
			       start_value("member", "file", cl->members[i]));
	for (unsigned int i = 0; i < cl->nr_spares; i++)
		set_export_key(ce, "--spare", "spare",
			       start_value("--spare", "spare", cl->spares[i]));
	for (unsigned int i = 0; i < cl->nr_faults; i++) {
		const char *flag = cl->faults[i].key[0] == 'f' ? "--fault" :
								 "--delay";

		set_export_key(ce, flag, cl->faults[i].key,
			       start_value(flag, cl->faults[i].key,
					   cl->faults[i].rule));
	}
	if (cl->no_statistics)
		set_export_key(ce, "--no-statistics", "statistics", "false");
	if (cl->no_lock)
		set_export_key(ce, "--no-lock", "lock", "false");
	if (cl->degraded)
		set_export_key(ce, "--degraded", "degraded", "true");
	if (cl->stripe_size)
		set_export_key(ce, "--stripe-size", "stripe-size",
			       cl->stripe_size);
	if (cl->level)
		set_export_key(ce, "--level", "level", cl->level);
	if (cl->copies)
		set_export_key(ce, "--copies", "copies", cl->copies);
	if (cl->timeout)
		set_export_key(ce, "--timeout", "timeout", cl->timeout);
	if (cl->size)
		set_export_key(ce, "--size", "size", cl->size);
	if (cl->description)
		set_export_key(ce, "--description", "description",
			       cl->description);
	if (conf_export_check(ce, err, sizeof(err)))
		die("%s", err);
	check_own_files(ce, 1);
	if (nbdl_exports_open(&srv.exports, ce, 1, cl->readonly, NULL, err,
			      sizeof(err)))
		die_open(cl, err);
	srv.nr_exports = 1;
}

/*
 * The start-up lines: each export with its size and layout, then where
 * the server listens.
 */
/*
 * @v as a setting is written ("64M", "4G"): the largest unit that divides
 * it, so that a logged bound can be compared with what was given.
 */
static void size_text(uint64_t v, char *buf, size_t len)
{
	static const char units[] = "KMGTP";
	int u = -1;

	while (v && u + 1 < (int)sizeof(units) - 1 && !(v & 1023)) {
		v >>= 10;
		u++;
	}
	if (u < 0)
		snprintf(buf, len, "%" PRIu64 " bytes", v);
	else
		snprintf(buf, len, "%" PRIu64 "%c", v, units[u]);
}

/* Member @i of @d as volume_info.order counts them: spares after members. */
static const char *member_path(const struct conf_export *d, unsigned int i)
{
	return i < d->nr_members ? d->members[i] : d->spares[i - d->nr_members];
}

/*
 * Role @m of export @e as the start-up line shows it: its member, and
 * whether it is out of service.  A member given but too short to serve
 * is named with its size, not "(missing)": the user would look for a
 * file that is there.
 */
static size_t member_text(const struct nbdl_export *e,
			  const struct conf_export *d, unsigned int m,
			  char *buf, size_t len)
{
	unsigned int at = e->info.order[m];
	unsigned int cut = e->info.cut[m];

	if (at == VOLUME_NO_MEMBER && cut != VOLUME_NO_MEMBER)
		return (size_t)snprintf(buf, len,
					"%s (too short: %" PRIu64
					" bytes, needs %" PRIu64 ")",
					member_path(d, cut),
					e->info.cut_bytes[m],
					e->info.member_bytes);
	if (at == VOLUME_NO_MEMBER)
		return (size_t)snprintf(buf, len, "(missing)");
	return (size_t)snprintf(buf, len, "%s%s", member_path(d, at),
				e->info.rebuilding[m] ? " (rebuilding)" :
				!e->info.active[m]    ? " (faulty)" :
							"");
}

static void log_startup(const struct conf_export *defs,
			const struct srv_options *o, int activated)
{
	char where[768], inflight[32];

	for (unsigned int i = 0; i < srv.nr_exports; i++) {
		const struct nbdl_export *e = &srv.exports[i];
		const struct conf_export *d = &defs[i];
		char members[512], layout[128], volume[160], chunk[32];
		size_t n = 0;

		members[0] = 0;
		/*
		 * In stripe order: a self-describing volume's is its roles';
		 * a mirror's members out of service say so.
		 */
		for (unsigned int m = 0;
		     m < e->info.nr_members && n < sizeof(members); m++) {
			if (m)
				n += (size_t)snprintf(members + n,
						      sizeof(members) - n, ", ");
			if (n < sizeof(members))
				n += member_text(e, d, m, members + n,
						 sizeof(members) - n);
		}
		/*
		 * The geometry: "4 members, stripe 64K" or a mirror's, in the
		 * unit it was given in ("1G", not "1048576K").
		 */
		size_text(e->info.chunk_bytes, chunk, sizeof(chunk));
		if (e->info.level)
			snprintf(layout, sizeof(layout),
				 "%s, %u copies, %u member%s, chunk %s",
				 e->info.level == 1 ? "raid1" : "raid10",
				 e->info.copies, e->info.nr_members,
				 plural(e->info.nr_members), chunk);
		else
			snprintf(layout, sizeof(layout),
				 "%u member%s, stripe %s", e->info.nr_members,
				 plural(e->info.nr_members), chunk);
		if (e->info.superblocks)
			snprintf(volume, sizeof(volume),
				 ", volume '%s' (%s)", e->info.name,
				 e->info.uuid);
		else
			volume[0] = 0;
		if (e->info.superblocks) {
			size_text(e->info.data_offset, chunk, sizeof(chunk));
			snprintf(layout + strlen(layout),
				 sizeof(layout) - strlen(layout),
				 ", data offset %s", chunk);
		}
		nbdl_log(NBDL_INFO, "export '%s': %" PRIu64 " bytes%s%s, %s: %s",
			 e->name, e->size_bytes,
			 e->readonly ? ", read-only" : "", volume, layout,
			 members);
	}
	if (activated)
		snprintf(where, sizeof(where),
			 "%d socket%s passed by the service manager", activated,
			 plural((uint64_t)activated));
	else if (o->socket && !o->listen && !o->port)
		snprintf(where, sizeof(where), "unix socket %s", o->socket);
	else
		snprintf(where, sizeof(where), "%s%s%s%s:%s",
			 o->socket ? "unix socket " : "",
			 o->socket ? o->socket : "", o->socket ? ", TCP " : "TCP ",
			 o->listen ? o->listen : SRV_DEFAULT_LISTEN,
			 o->port ? o->port : SRV_DEFAULT_PORT);
	size_text(srv.inflight_limit_bytes, inflight, sizeof(inflight));
	nbdl_log(NBDL_INFO,
		 "serving on %s; %u worker%s, buffers in flight up to %s, "
		 "backend %s, TLS %s%s%s (pid %d)",
		 where, srv.nr_workers, plural(srv.nr_workers), inflight, ioq_backend_name(srv.backend),
		 srv_tls_mode_name(srv.tls_mode),
		 srv.tls_mode && o->tls_psk ? ", PSK" : "",
		 srv.tls_mode && o->tls_certificates ? ", X.509" : "",
		 (int)getpid());
}

/*
 * Where the settings that must agree with others were last given, for
 * messages that name what the user wrote: "--tls off: ..." or
 * "FILE:LINE: [server] tls=off: ...".
 */
struct origin {
	const char *key;
	const char *flag;  /* as typed; NULL: a line of the file */
	const char *value;
	unsigned int line; /* of the file; with no flag, 0: not given */
};

static struct origin origins[] = {
	{ .key = "tls" },	      { .key = "tls-certificates" },
	{ .key = "tls-psk" },	      { .key = "tls-verify-peer" },
	{ .key = "stats" },	      { .key = "stats-interval" },
	{ .key = "user" },	      { .key = "group" },
	{ .key = "listen" },	      { .key = "port" },
	{ .key = "socket" },	      { .key = "control" },
	{ .key = "trace" },	      { .key = "inflight-memory" },
	{ .key = "trace-buffer" },
};
static const char *origin_file; /* the config file's path */

static struct origin *origin(const char *key)
{
	for (size_t i = 0; i < sizeof(origins) / sizeof(origins[0]); i++)
		if (!strcmp(origins[i].key, key))
			return &origins[i];
	return NULL;
}

static void origin_note(const char *key, const char *flag, const char *value,
			unsigned int line)
{
	struct origin *w = origin(key);

	if (w) {
		w->flag = flag;
		w->value = value;
		w->line = line;
	}
}

static bool given(const char *key)
{
	const struct origin *w = origin(key);

	return w->flag || w->line;
}

/*
 * @key's setting as the user wrote it (--tls-verify-peer takes no
 * value); a line of the file @inner, to be named inside a message.
 */
static void origin_name(const char *key, bool inner, char *buf, size_t len)
{
	const struct origin *w = origin(key);

	if (w->flag && !strcmp(key, "tls-verify-peer"))
		snprintf(buf, len, "%s", w->flag);
	else if (w->flag)
		snprintf(buf, len, "%s %s", w->flag, w->value);
	else if (inner)
		snprintf(buf, len, "%s=%s (%s:%u)", key, w->value,
			 origin_file, w->line);
	else
		snprintf(buf, len, "%s:%u: [server] %s=%s", origin_file,
			 w->line, key, w->value);
}

/* Fail on @key, as given: the flag, or the file's line. */
static void __attribute__((format(printf, 2, 3), noreturn))
die_setting(const char *key, const char *fmt, ...)
{
	char name[1024], why[1024];
	va_list ap;

	origin_name(key, false, name, sizeof(name));
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	die("%s: %s", name, why);
}

/*
 * Fail on @key with @msg, which names the value already (a path, an
 * address): set by a line of the file, that line goes in front of it
 * ("FILE:LINE: [server] key=value: msg"); a flag, or no setting at all (a
 * default), leaves @msg as it is.
 */
static void __attribute__((noreturn)) die_at(const char *key, const char *msg)
{
	const struct origin *w = origin(key);

	if (!w->flag && w->line)
		die_setting(key, "%s", msg);
	die("%s", msg);
}

/*
 * How to name another setting in a message about @key: in the same
 * spelling (a flag, or a key of the file).
 */
static const char *spelling(const char *key, const char *flag,
			    const char *file_key)
{
	return origin(key)->flag ? flag : file_key;
}

/*
 * Settings that mean nothing, or the opposite, without others: refused,
 * since accepted they would let the user believe they work.
 */
static void check_settings(void)
{
	if (given("stats-interval") && !given("stats"))
		die_setting("stats-interval", "needs %s (the file it rewrites)",
			    spelling("stats-interval", "--stats FILE",
				     "stats = FILE"));
	if (given("trace-buffer") && !given("trace"))
		die_setting("trace-buffer", "needs %s (the trace it buffers)",
			    spelling("trace-buffer", "--trace FILE",
				     "trace = FILE"));
}

/* The [server] keys that name files. */
static bool setting_is_path(const char *key)
{
	return !strcmp(key, "socket") || !strcmp(key, "stats") ||
	       !strcmp(key, "control") || !strcmp(key, "trace") ||
	       !strcmp(key, "tls-certificates") || !strcmp(key, "tls-psk");
}

/* The [server] lines of @c, then the flags, through the one setter. */
static void apply_settings(struct srv_options *o, const struct conf *c,
			   const struct cmdline *cl)
{
	char why[512];
	char *path = NULL;
	int r;

	for (unsigned int i = 0; c && i < c->nr_server_keys; i++) {
		const struct conf_kv *kv = &c->server_keys[i];
		const char *value = kv->value;

		/* Paths in a file are relative to the file. */
		if (setting_is_path(kv->key) && value[0] && value[0] != '/' &&
		    c->dir) {
			if (asprintf(&path, "%s/%s", c->dir, value) < 0)
				die("out of memory");
			value = path;
		}
		r = srv_option_set(o, kv->key, value, why, sizeof(why));
		free(path);
		path = NULL;
		if (r == -ENOMEM)
			die("out of memory");
		if (r)
			die("%s:%u: [server] %s=%s: %s", c->path, kv->line,
			    kv->key, kv->value, why);
		origin_file = c->path;
		origin_note(kv->key, NULL, kv->value, kv->line);
	}
	for (unsigned int i = 0; i < cl->nr_settings; i++) {
		const char *key = cl->settings[i].key;
		const char *value = cl->settings[i].value;

		/* As the file's are joined to the file's directory, above. */
		if (setting_is_path(key))
			value = start_path(cl->settings[i].flag, value);
		if (srv_option_set(o, key, value, why, sizeof(why)))
			die("%s %s: %s", cl->settings[i].flag,
			    cl->settings[i].value, why);
		origin_note(cl->settings[i].key, cl->settings[i].flag,
			    cl->settings[i].value, 0);
	}
	check_settings();
}

/* ---- running ---- */

/*
 * The buffer caches' budget: --memory, or enough per worker for large
 * requests at a deep queue (128 MiB: 32 x 1 MiB with room), but never more
 * than an eighth of the machine.
 */
static size_t memory_budget(const struct srv_options *o, unsigned int workers)
{
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	uint64_t v = SRV_MEMORY_PER_WORKER * workers;

	if (o->memory_set)
		return (size_t)o->memory_bytes;
	if (pages > 0 && psize > 0 && v > (uint64_t)pages * psize / 8)
		v = (uint64_t)pages * psize / 8;
	return (size_t)(v < SRV_MEMORY_MIN ? SRV_MEMORY_MIN : v);
}

/*
 * The bound on buffers in flight: --inflight-memory, or a quarter of the
 * machine, but enough for every worker to stream large requests at a deep
 * queue (server.h); either way never under SRV_INFLIGHT_WORKER_MIN a
 * worker, which log_startup tells when it raised a given value.  The
 * workers' shares add up to it (worker_init).
 */
static size_t inflight_limit(const struct srv_options *o,
			     unsigned int workers)
{
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	uint64_t v = 0, min = SRV_INFLIGHT_WORKER_DEFAULT_MIN * workers;

	if (o->inflight_set) {
		v = o->inflight_bytes;
		min = (uint64_t)SRV_INFLIGHT_WORKER_MIN * workers;
	} else if (pages > 0 && psize > 0) {
		/* Whole MiB: the start-up line shows it as a setting is written. */
		v = (uint64_t)pages * psize / SRV_INFLIGHT_RAM_SHARE &
		    ~(uint64_t)((1u << 20) - 1);
	}
	return (size_t)(v < min ? min : v);
}

/*
 * A given bound below SRV_INFLIGHT_WORKER_MIN a worker was raised
 * (inflight_limit): say so, or the operator believes memory is bounded
 * tighter than it is.
 */
static void log_inflight_raised(const struct srv_options *o)
{
	char name[1024], bound[32];

	if (!o->inflight_set || o->inflight_bytes >= srv.inflight_limit_bytes)
		return;
	origin_name("inflight-memory", false, name, sizeof(name));
	size_text(srv.inflight_limit_bytes, bound, sizeof(bound));
	nbdl_log(NBDL_INFO,
		 "warning: %s is less than %zuM for each of %u workers: "
		 "buffers in flight up to %s",
		 name, SRV_INFLIGHT_WORKER_MIN >> 20, srv.nr_workers, bound);
}

/*
 * -P's directory, before any member is touched: the pid is written last,
 * and the default control socket (PIDFILE.ctl) goes beside it.
 */
static void check_pidfile(const struct srv_options *o, const char *path)
{
	struct stat st;
	char *copy, *dir, err[1024];

	if (!path)
		return;
	if (!*path)
		die("-P '': empty path");
	copy = strdup(path);
	if (!copy)
		die("out of memory");
	dir = dirname(copy);
	if (stat(dir, &st))
		die("-P %s: directory %s: %s", path, dir, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		die("-P %s: %s is not a directory", path, dir);
	if (access(dir, W_OK | X_OK))
		die("-P %s: directory %s: %s", path, dir, strerror(errno));
	free(copy);
	/* The pid is renamed over it at the end: what rename cannot replace. */
	if (!stat(path, &st) && S_ISDIR(st.st_mode))
		die("-P %s: is a directory", path);
	if (o->control)
		return;
	if (snprintf(err, sizeof(err), "%s.ctl", path) >= (int)sizeof(err))
		die("-P %s: path too long", path);
	copy = strdup(err);
	if (!copy)
		die("out of memory");
	if (listen_unix_check(copy, err, sizeof(err)))
		die("-P %s: the control socket beside it (--control puts it "
		    "elsewhere): %s",
		    path, err);
	free(copy);
}

/*
 * The files bionbd makes destroy each other at one path, and nothing
 * would say so: the pidfile, renamed over the unix socket or the control
 * socket, leaves no client a way in while the start-up line says it
 * serves there; the pidfile or a socket, removed at exit, takes the
 * statistics or the trace with it; and the statistics, renamed over the
 * trace or the keys file, replace them.  Refused before any member is
 * touched, naming both as the user gave them.
 */
static void check_path_clashes(const struct srv_options *o,
			       const char *pidfile)
{
	static const char *const keys[] = { "socket", "control", "stats",
					    "trace", "tls-psk" };
	enum { N = 2 + sizeof(keys) / sizeof(keys[0]) };
	const char *paths[N] = { pidfile, NULL, o->socket, o->control,
				 o->stats_file, o->trace_file, o->tls_psk };
	char *ctl = NULL, first[1100], second[1100];

	/* The control socket a pidfile brings when --control is not given. */
	if (pidfile && !o->control) {
		if (asprintf(&ctl, "%s.ctl", pidfile) < 0)
			die("out of memory");
		paths[1] = ctl;
	}
	/* j from 2: a pidfile and its .ctl never share a name. */
	for (unsigned int i = 0; i < N; i++)
		for (unsigned int j = i < 2 ? 2 : i + 1; j < N; j++) {
			if (!paths[i] || !paths[j] ||
			    !path_same_name(paths[i], paths[j]))
				continue;
			if (i == 0)
				snprintf(first, sizeof(first), "-P %s", pidfile);
			else if (i == 1)
				snprintf(first, sizeof(first),
					 "-P %s: its control socket %s",
					 pidfile, ctl);
			else
				origin_name(keys[i - 2], false, first,
					    sizeof(first));
			origin_name(keys[j - 2], true, second, sizeof(second));
			die("%s: the same file as %s; give each a path of its "
			    "own",
			    first, second);
		}
	free(ctl);
}

/* Another server on our socket: say so before any member is touched. */
static void check_socket(const struct srv_options *o)
{
	char err[512];

	if (o->socket && listen_unix_check(o->socket, err, sizeof(err)))
		die_at("socket", err);
}

/*
 * Fail now, while the user is watching, if io_uring cannot be used; fall
 * back to the thread pool when no backend was asked for (as the plugin
 * does).
 */
static enum ioq_backend choose_backend(const struct srv_options *o)
{
	struct ioq *q;
	int r;

	if (o->backend != IOQ_IO_URING)
		return o->backend;
	r = ioq_create(&q, IOQ_IO_URING, 0);
	if (!r) {
		ioq_destroy(q);
		return IOQ_IO_URING;
	}
	if (o->backend_set)
		die("--backend io_uring: %s", strerror(-r));
	fprintf(stderr, "bionbd: io_uring not usable (%s): using backend threads\n",
		strerror(-r));
	return IOQ_THREADS;
}

static void write_pidfile(const char *path)
{
	FILE *f;
	char tmp[4096];

	/* Write then rename: whoever sees the file sees a whole pid. */
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		die("pidfile %s: path too long", path);
	f = fopen(tmp, "w");
	if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) ||
	    rename(tmp, path)) {
		int e = errno;

		/* The half-made file is ours, and no pidfile. */
		if (f)
			unlink(tmp);
		die("-P %s: %s", path, strerror(e));
	}
	die_unlinks_pidfile = path;
}

/* Fork; the parent exits 0 once the child says it is serving. */
static int daemonize(void)
{
	int p[2];
	pid_t pid;
	char c;

	if (pipe(p))
		die("pipe: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid > 0) {
		int status;

		/*
		 * _exit: what the process holds (stdio buffers, atexit work,
		 * members' handles) is the child's now, not the parent's to
		 * flush, undo or close.  Except RBD images: their exclusive
		 * locks would stay with a client that is gone (see
		 * rbd_close_all), while the child opens them afresh.  The
		 * locks go now, for the child to take; the images (their
		 * watches) only once the child has its own, so that no second
		 * server finds them unused in between.
		 */
		close(p[1]);
		rbd_release_locks();
		status = read(p[0], &c, 1) == 1 ? 0 : 1;
		rbd_close_all();
		_exit(status);
	}
	close(p[0]);
	setsid();
	/*
	 * Not to hold the directory we were started in (its file system
	 * could not be unmounted while we run): every path we use from now
	 * on was made absolute at start (start_path, conf_load).
	 */
	if (chdir("/"))
		die("chdir /: %s", strerror(errno));
	return p[1];
}

static void detach_stdio(int ready_fd)
{
	int devnull = open("/dev/null", O_RDWR);

	if (devnull >= 0) {
		dup2(devnull, 0);
		dup2(devnull, 1);
		dup2(devnull, 2);
		if (devnull > 2)
			close(devnull);
	}
	(void)!write(ready_fd, "", 1);
	close(ready_fd);
}

static void server_stop(struct ev_loop *loop)
{
	if (atomic_exchange(&srv.stopping, true))
		return;
	listeners_close(loop);
	for (unsigned int i = 0; i < srv.nr_workers; i++)
		worker_stop(&srv.workers[i]);
	ev_break(loop, EVBREAK_ALL);
}

static void stop_cb(struct ev_loop *loop, ev_signal *s, int revents)
{
	if (atomic_load(&srv.stopping)) {
		server_stop(loop);
		return;
	}
	/*
	 * With --run the exit status is the command's: stopped before the
	 * command ended, the server has none to give, and 0 would tell a CI
	 * job that its command succeeded.  A shell says the same of a job a
	 * signal ended.
	 */
	if (run_running()) {
		/* It needs the server, and must not outlive it. */
		bool passed = run_signal(s->signum);

		exit_status = 128 + s->signum;
		nbdl_log(NBDL_INFO,
			 "%s: shutting down before the --run command ended "
			 "(exit status %d)%s",
			 strsignal(s->signum), exit_status,
			 passed ? "; passed on to the command" : "");
	} else {
		nbdl_log(NBDL_INFO, "%s: shutting down", strsignal(s->signum));
	}
	server_stop(loop);
}

/*
 * SIGHUP never stops the server nor drops a request: exports are read at
 * start only, so it reconnects the log (a restarted syslog daemon).
 */
static void hup_cb(struct ev_loop *loop, ev_signal *s, int revents)
{
	srv_log_reopen();
	nbdl_log(NBDL_INFO, "SIGHUP: log reopened; exports unchanged");
}

/* The --run command ended: so does the server, with its status. */
static void run_done(struct ev_loop *loop, int status)
{
	nbdl_log(NBDL_INFO, "--run command exited with status %d: shutting down",
		 status);
	exit_status = status;
	server_stop(loop);
}

/* At exit, however it comes (die() too): the private socket's directory. */
static void private_dir_remove(void)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/socket", private_dir);
	unlink(path);
	rmdir(private_dir);
	free(private_dir);
	private_dir = NULL;
}

/*
 * How we listen: sockets a service manager passed exclude our own; --run
 * with nowhere to listen gets a unix socket in a private directory.
 */
static void listen_plan(struct srv_options *o, const struct cmdline *cl,
			bool activated)
{
	if (activated && (o->socket || o->listen || o->port))
		die("socket activation (LISTEN_FDS): -U, -i and -p (and the "
		    "[server] socket, listen and port keys) cannot be used "
		    "with it");
	if (activated && cl->run)
		die("--run: not with socket activation (LISTEN_FDS)");
	if (!cl->run || o->socket || o->listen || o->port)
		return;
	private_dir = strdup("/tmp/bionbd-XXXXXX");
	if (!private_dir || !mkdtemp(private_dir))
		die("--run: private socket directory: %s", strerror(errno));
	atexit(private_dir_remove);
	if (asprintf(&o->socket, "%s/socket", private_dir) < 0)
		die("out of memory");
}

/*
 * TLS: credentials make it "require" unless --tls says otherwise; a key
 * given is never silently unused by a plaintext server (--tls off with
 * credentials is refused, as is --tls-verify-peer without the X.509 CA
 * that would check the clients); everything is read now, before -u/-g.
 */
static void tls_setup(const struct srv_options *o)
{
	bool creds = o->tls_certificates || o->tls_psk;
	char err[1024], other[1024];
	const char *which;

	if (o->tls_verify_peer && !o->tls_certificates)
		die_setting("tls-verify-peer",
			    "needs %s (its ca-cert.pem signs the client "
			    "certificates)",
			    spelling("tls-verify-peer",
				     "--tls-certificates DIR",
				     "tls-certificates = DIR"));
	if (o->tls_set && o->tls == SRV_TLS_OFF && creds) {
		origin_name(o->tls_psk ? "tls-psk" : "tls-certificates", true,
			    other, sizeof(other));
		die_setting("tls", "contradicts %s: credentials are for TLS; "
			    "drop one or the other",
			    other);
	}
	srv.tls_mode = o->tls_set ? o->tls :
		       creds	 ? SRV_TLS_REQUIRE :
				   SRV_TLS_OFF;
	if (srv.tls_mode == SRV_TLS_OFF)
		return;
	if (!creds)
		die_setting("tls", "needs %s",
			    spelling("tls",
				     "--tls-certificates DIR or --tls-psk FILE",
				     "tls-certificates = DIR or tls-psk = "
				     "FILE"));
	if (srv_tls_load(&srv.tls, o->tls_certificates, o->tls_psk,
			 o->tls_verify_peer, &which, err, sizeof(err))) {
		if (which)
			die_setting(which, "%s", err);
		die("%s", err);
	}
}

/* A user or group by name, or by number. */
static bool lookup_id(const char *s, bool group, unsigned int *id,
		      unsigned int *primary_gid)
{
	struct passwd *pw;
	char *end;
	unsigned long v;

	if (group) {
		struct group *g = getgrnam(s);

		if (g) {
			*id = g->gr_gid;
			return true;
		}
	} else {
		pw = getpwnam(s);
		if (pw) {
			*id = pw->pw_uid;
			*primary_gid = pw->pw_gid;
			return true;
		}
	}
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v >= (unsigned int)-1)
		return false;
	*id = (unsigned int)v;
	if (group)
		return true;
	/*
	 * A number the user database knows is that user, with its primary
	 * group (not the group that happens to have the same number: -u 102
	 * ran as nbd with group messagebus).  One it does not know has no
	 * group of its own: the same number, unless -g names one.
	 */
	pw = getpwuid((uid_t)v);
	*primary_gid = pw ? (unsigned int)pw->pw_gid : (unsigned int)v;
	return true;
}

/* -u/-g, resolved before anything is opened so that a typo costs nothing. */
struct run_as {
	bool set;
	const char *user; /* NULL: -g alone */
	unsigned int uid, gid;
	/* USER's supplementary groups: read once, for us and --run's child. */
	gid_t *groups;
	int nr_groups;
};

static bool user_name(const struct run_as *ra, char *buf, size_t len);

/*
 * USER's supplementary groups (initgroups' list), also when USER was
 * given as a number; -g alone, or a number the user database does not
 * know: the group alone.  None of root's either way.
 */
static void run_as_groups(struct run_as *ra)
{
	char name[256];
	int n = 16;

	for (;;) {
		int got = n;

		free(ra->groups);
		ra->groups = calloc((size_t)n, sizeof(*ra->groups));
		if (!ra->groups)
			die("out of memory");
		if (!user_name(ra, name, sizeof(name))) {
			ra->groups[0] = ra->gid;
			ra->nr_groups = 1;
			return;
		}
		if (getgrouplist(name, ra->gid, ra->groups, &got) >= 0) {
			ra->nr_groups = got;
			return;
		}
		if (got <= n) /* no larger size to try: not a full list */
			die_setting("user", "its groups cannot be read");
		n = got;
	}
}

static void run_as_resolve(const struct srv_options *o, struct run_as *ra)
{
	unsigned int pgid = 0;

	*ra = (struct run_as){ .set = o->user || o->group, .user = o->user };
	if (!ra->set)
		return;
	if (o->user && !lookup_id(o->user, false, &ra->uid, &pgid))
		die_setting("user", "no such user");
	ra->gid = pgid;
	if (o->group && !lookup_id(o->group, true, &ra->gid, &pgid))
		die_setting("group", "no such group");
	if (geteuid() != 0)
		die_setting(o->user ? "user" : "group",
			    "bionbd must be started as root to change user");
	run_as_groups(ra);
}

/*
 * -u's name in the user database, into @buf (initgroups reads the group
 * file by name): as given, or the name of the number given; false for
 * -g alone or a number the database does not know.
 */
static bool user_name(const struct run_as *ra, char *buf, size_t len)
{
	struct passwd *pw;

	if (!ra->user)
		return false;
	pw = getpwnam(ra->user);
	if (!pw)
		pw = getpwuid(ra->uid);
	if (!pw || snprintf(buf, len, "%s", pw->pw_name) >= (int)len)
		return false;
	return true;
}

/* USER's supplementary groups (run_as_groups). */
static int set_groups(const struct run_as *ra)
{
	if (setgroups((size_t)ra->nr_groups, ra->groups))
		return -errno;
	return 0;
}

/*
 * The statistics file is written at exit, as USER: checked at start as
 * root already, and now as USER, but while root can still come back
 * (effective ids only).  A start refused here takes back what it made
 * (die_unmakes) as root: USER may not be allowed to remove a member made
 * in a directory only root writes, nor shrink one root owns.
 */
static int probe_as_user(const struct run_as *ra, const char *stats)
{
	int n = getgroups(0, NULL), r, back = 0;
	gid_t egid = getegid();
	gid_t *saved = n >= 0 ? calloc((size_t)n + 1, sizeof(*saved)) : NULL;

	if (!saved)
		return n < 0 ? -errno : -ENOMEM;
	n = getgroups(n, saved);
	if (n < 0) {
		r = -errno;
		goto out;
	}
	r = set_groups(ra);
	if (!r && setegid(ra->gid))
		r = -errno;
	if (!r && ra->user && seteuid(ra->uid))
		r = -errno;
	if (!r)
		r = nbdl_stats_probe(stats);
	/* Root again; a step that cannot be undone ends the start. */
	if ((ra->user && seteuid(0)) || setegid(egid) ||
	    setgroups((size_t)n, saved))
		back = -errno;
	if (back)
		die("-u/-g: back to root for the rest of the start: %s",
		    strerror(-back));
out:
	free(saved);
	return r;
}

/*
 * After the listeners, members and credentials are open (their
 * descriptors stay usable), root goes for good.  What we made that is
 * removed at exit is handed over first, so that it can be where the
 * directory lets USER (a sticky /tmp, a directory USER owns).  Nothing
 * after this refuses the start: --run's command was forked before, as
 * root, and took USER's ids itself.
 */
static void drop_privileges(const struct run_as *ra, const char *socket,
			    const char *pidfile, const char *stats)
{
	uid_t owner = ra->user ? ra->uid : (uid_t)-1;
	int r;

	if (!ra->set)
		return;
	if (stats && (r = probe_as_user(ra, stats)))
		die_setting("stats", "%s (as uid %u)", strerror(-r),
			    (unsigned int)(ra->user ? ra->uid : getuid()));
	if (private_dir && chown(private_dir, owner, ra->gid))
		die("--run: chown %s: %s", private_dir, strerror(errno));
	if (socket && chown(socket, owner, ra->gid))
		die("-u/-g: chown %s: %s", socket, strerror(errno));
	if (pidfile && chown(pidfile, owner, ra->gid))
		die("-u/-g: chown %s: %s", pidfile, strerror(errno));
	if (srv_stats_control_path() &&
	    chown(srv_stats_control_path(), owner, ra->gid))
		die("-u/-g: chown %s: %s", srv_stats_control_path(),
		    strerror(errno));
	if ((r = set_groups(ra)))
		die("-u/-g: setgroups: %s", strerror(-r));
	if (setgid(ra->gid))
		die("-g: setgid %u: %s", ra->gid, strerror(errno));
	if (ra->user && setuid(ra->uid))
		die("-u: setuid %u: %s", ra->uid, strerror(errno));
	/* Paranoia: a setuid that did not take must not go unnoticed. */
	if (ra->user && ra->uid != 0 && (setuid(0) == 0 || geteuid() == 0))
		die("-u %s: could not drop root", ra->user);
	nbdl_log(NBDL_INFO, "running as uid %u, gid %u", (unsigned int)getuid(),
		 (unsigned int)getgid());
}

/* --exit-with-parent: SIGTERM when the parent goes (it may be gone). */
static void exit_with_parent(void)
{
	pid_t parent = getppid();

	if (prctl(PR_SET_PDEATHSIG, SIGTERM))
		die("--exit-with-parent: %s", strerror(errno));
	if (getppid() != parent)
		exit(0);
}

int main(int argc, char **argv)
{
	struct cmdline cl = { 0 };
	struct srv_options o;
	struct run_as run_as;
	struct conf *conf = NULL;
	struct ev_loop *loop;
	ev_signal sigterm, sigint, sigquit, sighup;
	sigset_t stopsigs;
	char err[1024];
	int ready_fd = -1, r;
	int activated; /* sockets the service manager passed */
	long ncpu;

	/* Until the log starts: what opening the volumes says (a resync). */
	nbdl_log_to_stderr("bionbd");
	parse_args(argc, argv, &cl);
	cl.pidfile = start_path("-P", cl.pidfile);
	if (cl.exit_with_parent)
		exit_with_parent();
	activated = listen_activated(err, sizeof(err));
	if (activated < 0)
		die("%s", err);
	/* The captive, the activated and the parent's child stay ours. */
	cl.foreground |= cl.run || cl.exit_with_parent || activated;
	/* Nothing to serve named: the installed configuration, if there is. */
	if (!cl.conf_path && !cl.nr_members && !access(BIONBD_DEFAULT_CONF, F_OK))
		cl.conf_path = BIONBD_DEFAULT_CONF;
	srv_options_init(&o);
	if (cl.conf_path) {
		if (!*cl.conf_path)
			die("-c '': empty path");
		if (cl.nr_members || cl.nr_spares || cl.stripe_size || cl.size ||
		    cl.level || cl.copies || cl.export_name ||
		    cl.description || cl.nr_faults || cl.no_statistics ||
		    cl.no_lock || cl.degraded || cl.timeout)
			die("-c %s: member files, --spare, --level, --copies, --stripe-size, --size, --fault, --delay, --timeout, --no-statistics, --no-lock, --degraded, -e and --description belong in the config file",
			    cl.conf_path);
		if (conf_load(&conf, cl.conf_path, err, sizeof(err)))
			die("%s", err);
		apply_settings(&o, conf, &cl);
		listen_plan(&o, &cl, activated);
		run_as_resolve(&o, &run_as);
		tls_setup(&o);
		check_path_clashes(&o, cl.pidfile);
		check_socket(&o);
		check_pidfile(&o, cl.pidfile);
		own_files[0] = cl.pidfile;
		own_files[1] = o.trace_file;
		own_files[2] = o.stats_file;
		check_own_files(conf->exports, conf->nr_exports);
		if (nbdl_exports_open(&srv.exports, conf->exports,
				      conf->nr_exports, cl.readonly, conf->path,
				      err, sizeof(err)))
			die("%s", err);
		srv.nr_exports = conf->nr_exports;
	} else {
		apply_settings(&o, NULL, &cl);
		listen_plan(&o, &cl, activated);
		run_as_resolve(&o, &run_as);
		tls_setup(&o);
		check_path_clashes(&o, cl.pidfile);
		check_socket(&o);
		check_pidfile(&o, cl.pidfile);
		own_files[0] = cl.pidfile;
		own_files[1] = o.trace_file;
		own_files[2] = o.stats_file;
		exports_from_cmdline(&cl);
	}
	die_closes_images = die_unmakes = true;
	/* Again: members --size made at open exist only now. */
	check_own_files(conf ? conf->exports : &cmdline_export,
			conf ? conf->nr_exports : 1);
	srv.backend = choose_backend(&o);
	srv.poll_max_s = o.poll_us / 1e6;
	srv.handshake_s = o.handshake_s;
	srv.max_conns = o.max_conns;
	ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	srv.nr_workers = o.threads ? o.threads :
				     (ncpu > 0 ? (unsigned int)ncpu : 1);
	srv.bufs.budget_bytes = memory_budget(&o, srv.nr_workers);
	srv.inflight_limit_bytes = inflight_limit(&o, srv.nr_workers);
	if (o.async_min_set)
		srv.async_min = o.async_min;
	else if (ncpu >= SRV_AUTO_ASYNC_CPUS)
		srv.async_min = SRV_AUTO_ASYNC_MIN;
	srv.sendfile_min = o.sendfile_min_set ? o.sendfile_min :
						SRV_DEFAULT_SENDFILE_MIN;

	signal(SIGPIPE, SIG_IGN);
	srv_log_start(o.log_set ? o.log :
		      cl.foreground ? SRV_LOG_STDERR : SRV_LOG_SYSLOG,
		      cl.verbose);

	/*
	 * Before the listeners: a bad path leaves no socket behind.  The
	 * statistics are written at exit: a mistake is found now, not when
	 * a whole run's counts are lost.
	 */
	if (o.stats_file && (r = nbdl_stats_probe(o.stats_file)))
		die_setting("stats", "%s", strerror(-r));
	if (o.trace_file) {
		bool made = access(o.trace_file, F_OK) != 0;
		char msg[1100];

		if (trace_open(o.trace_file, o.trace_buffer, err, sizeof(err))) {
			snprintf(msg, sizeof(msg), "trace: %s", err);
			die_at("trace", msg);
		}
		if (made)
			die_unmakes_trace = o.trace_file;
	}
	if (!activated && o.socket && listen_unix(o.socket, err, sizeof(err)))
		die_at("socket", err);
	if (!activated && (!o.socket || o.listen || o.port) &&
	    listen_tcp(o.listen ? o.listen : SRV_DEFAULT_LISTEN,
		       o.port ? o.port : SRV_DEFAULT_PORT, err, sizeof(err)))
		die_at(given("listen") ? "listen" : "port", err);

	if (srv_stats_open(&o, cl.pidfile, err, sizeof(err))) {
		char msg[1100];

		if (!o.control && cl.pidfile)
			die("-P %s: the control socket beside it (--control "
			    "puts it elsewhere): %s",
			    cl.pidfile, err);
		snprintf(msg, sizeof(msg), "control socket: %s", err);
		die_at("control", msg);
	}

	if (!cl.foreground)
		ready_fd = daemonize();

	/* The writer is a thread: after any fork (daemonize). */
	if (o.trace_file && (r = trace_run()))
		die("trace: %s: %s", o.trace_file, strerror(-r));
	srv.workers = calloc(srv.nr_workers, sizeof(*srv.workers));
	if (!srv.workers)
		die("out of memory");
	for (unsigned int i = 0; i < srv.nr_workers; i++) {
		r = worker_init(&srv.workers[i], &srv);
		if (r)
			die("worker %u: %s%s", i, strerror(-r),
			    srv.backend == IOQ_IO_URING ?
				    " (try --backend threads)" : "");
	}
	/* Workers inherit a mask without these: only main takes them. */
	sigemptyset(&stopsigs);
	sigaddset(&stopsigs, SIGTERM);
	sigaddset(&stopsigs, SIGINT);
	sigaddset(&stopsigs, SIGQUIT);
	sigaddset(&stopsigs, SIGHUP);
	sigaddset(&stopsigs, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &stopsigs, NULL);
	die_closes_images = false;
	for (unsigned int i = 0; i < srv.nr_workers; i++) {
		r = worker_start(&srv.workers[i]);
		if (r)
			die("pthread_create: %s", strerror(-r));
	}

	loop = ev_default_loop(EVFLAG_AUTO);
	listeners_start(loop, &srv);
	ev_signal_init(&sigterm, stop_cb, SIGTERM);
	ev_signal_init(&sigint, stop_cb, SIGINT);
	ev_signal_init(&sigquit, stop_cb, SIGQUIT);
	ev_signal_init(&sighup, hup_cb, SIGHUP);
	ev_signal_start(loop, &sigterm);
	ev_signal_start(loop, &sigint);
	ev_signal_start(loop, &sigquit);
	ev_signal_start(loop, &sighup);
	srv_stats_start(loop, &srv, &o);
	pthread_sigmask(SIG_UNBLOCK, &stopsigs, NULL);

	if (cl.pidfile)
		write_pidfile(cl.pidfile);
	/*
	 * Forked while root: as USER, a fork could fail (USER at its
	 * process limit, counting our threads) after the start made
	 * members, grew files or a trace that only root can take back.  It
	 * runs once the server serves (run_go).
	 */
	if (cl.run) {
		struct run_addr ra = {
			.socket = o.socket,
			.host = o.listen ? o.listen : SRV_DEFAULT_LISTEN,
			.port = o.port ? o.port : SRV_DEFAULT_PORT,
			.export_name = srv.exports[0].name,
			.tls = srv.tls_mode == SRV_TLS_REQUIRE,
		};
		struct run_creds rc = {
			.set = run_as.set,
			.set_uid = run_as.user != NULL,
			.uid = run_as.uid,
			.gid = run_as.gid,
			.groups = run_as.groups,
			.nr_groups = (size_t)run_as.nr_groups,
		};

		if (o.socket && !o.listen && !o.port)
			ra.host = ra.port = NULL;
		r = run_start(loop, cl.run, &ra, &rc, run_done);
		if (r)
			die("--run: %s", strerror(-r));
	}
	drop_privileges(&run_as, o.socket, cl.pidfile, o.stats_file);
	log_startup(conf ? conf->exports : &cmdline_export, &o, activated);
	log_inflight_raised(&o);
	/* After any fork (daemonize): a mirror's rebuild is a thread. */
	for (unsigned int i = 0; i < srv.nr_exports; i++)
		target_start(srv.exports[i].vol);
	/* Our RBD images open before the parent closes its own. */
	rbd_wait_connecting();
	if (ready_fd >= 0)
		detach_stdio(ready_fd);
	if (cl.run)
		run_go();

	/* Serving: the members made are the volumes' for good. */
	die_unmakes = false;
	nbdl_exports_keep(srv.exports, srv.nr_exports);
	ev_run(loop, 0);

	for (unsigned int i = 0; i < srv.nr_workers; i++)
		worker_join(&srv.workers[i]);
	/* Signalled with the server (stop_cb), it had the drain to end in. */
	run_finish(SRV_RUN_GRACE_MS);
	/* Every request answered: the final counts. */
	(void)srv_stats_write();
	if (o.trace_file)
		trace_finish(o.trace_file);
	srv_stats_stop(loop);
	for (unsigned int i = 0; i < srv.nr_workers; i++)
		worker_fini(&srv.workers[i]);
	free(srv.workers);
	nbdl_exports_close(srv.exports, srv.nr_exports, srv.backend);
	srv_tls_free(srv.tls);
	conf_free(conf);
	srv_options_release(&o);
	free(run_as.groups);
	if (cl.pidfile)
		unlink(cl.pidfile);
	listeners_close(loop);
	bio_pool_drain();
	if (!conf)
		conf_export_release(&cmdline_export);
	srv_stats_release();
	srv_log_stop();
	start_paths_free();
	return exit_status;
}
