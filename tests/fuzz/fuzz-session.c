// SPDX-License-Identifier: MIT
/*
 * fuzz-session.c - libFuzzer harness for bionbd's handshake (option
 * parsing) and transmission (request parsing), through the real server
 * code.
 *
 * Each input is everything one client sends after it has read the
 * greeting: client flags, options, then requests and write payloads.  The
 * harness plays that client over a socketpair against one worker of a
 * real struct server:
 *
 *  - LLVMFuzzerInitialize opens three exports with nbdl_exports_open
 *    (members on tmpfs where there is one, so file I/O is done inline and
 *    ends at the next reap) and sets up one worker with worker_init, whose
 *    loop is run here, on the fuzzing thread, instead of on a thread of
 *    its own (ioq_set_current is this thread's).
 *  - Each input: socketpair; the server end goes to conn_accept() exactly
 *    as the listener's hand-off does; the input is written to the client
 *    end at once or in pieces, over a small or a large socket buffer (see
 *    session_plan(): chosen from the input itself, so a run replays),
 *    with one non-blocking run of the worker's loop after each piece
 *    (ev_run EVRUN_NOWAIT: the ioq_ev prepare watcher reaps the I/O done
 *    so far and its after_reap hook sends the queued replies, then the
 *    read callbacks take what arrived), and whatever the server sends is
 *    read and thrown away so it never blocks on a full socket.  Then the
 *    client shuts its writing side (EOF) or hangs up, the loop runs until
 *    the connection is freed, and the client reads the last replies and
 *    closes its end.
 *  - A connection that stops making progress (nothing sent or received,
 *    no I/O in flight, for STUCK_RUNS loop runs in a row) while the client
 *    reads everything, would be a client the real server hangs or a slot
 *    it holds forever: the harness aborts with the connection's state, and
 *    libFuzzer saves the input.  Anything the server leaks shows up in
 *    LeakSanitizer (each input whose mallocs outnumber its frees, and at
 *    exit, after clean_up).
 *
 * The exports are described above their table, exports[].  Their files are
 * unlinked once open, so nothing is left behind whatever way the fuzzer
 * ends.
 *
 * BIONBD_FUZZ_REPLIES=FILE: everything the server sends (greeting, option
 * replies, transmission replies) is also written to FILE, input after
 * input, to check what a seed or a saved input does: run the binary on
 * that one file.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bionbd/bio.h>
#include <bionbd/config.h>
#include <bionbd/ioq.h>
#include <bionbd/nbdl.h>

#include "conn.h"
#include "server.h"
#include "worker.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Loop runs in a row in which nothing moved: the connection is stuck. */
#define STUCK_RUNS 64

static struct server srv;
static struct worker wk;
static uint8_t sink[256 << 10]; /* what the server sends goes here */
static int replies_fd = -1; /* BIONBD_FUZZ_REPLIES: ...and to this file */

static void die(const char *fmt, const char *arg)
{
	fprintf(stderr, "fuzz-session: ");
	fprintf(stderr, fmt, arg);
	fputc('\n', stderr);
	exit(1);
}

/* ---- set-up ---- */

static const char *scratch_base(void)
{
	const char *d = getenv("BIONBD_FUZZ_DIR");
	struct stat st;

	if (d && *d)
		return d;
	/* tmpfs: inline I/O, no io_uring or thread pool round trips. */
	if (!stat("/dev/shm", &st) && S_ISDIR(st.st_mode) &&
	    !access("/dev/shm", W_OK))
		return "/dev/shm";
	d = getenv("TMPDIR");
	return d && *d ? d : "/tmp";
}

/*
 * The exports, all striped over 2 members in 64 KiB chunks:
 *  - "disk", the default: writable, 2 MiB, created empty (sparse);
 *  - "ro": read-only, 512 KiB, with a description; in the first 64 KiB
 *    every other 4 KiB block holds data and the others are holes (as is
 *    the rest), so reads of it come back in data and hole chunks and block
 *    status has many extents;
 *  - "big": read-only and all holes, 128 MiB: reads above the 32 MiB
 *    maximum payload are in range there (and refused), block status stops
 *    at its limit of chunk lookups.  Read-only and sparse, so it costs no
 *    memory whatever the fuzzer asks.
 */
#define NR_EXPORTS 3
static const struct {
	const char *name;
	uint64_t member_bytes; /* 0: created by the volume ("size") */
	bool readonly;
	const char *size, *description;
} exports[NR_EXPORTS] = {
	{ "disk", 0, false, "2M", NULL },
	{ "ro", 256u << 10, true, NULL, "read-only fuzz export" },
	{ "big", 64u << 20, true, NULL, NULL },
};

static void make_member(const char *path, uint64_t bytes, bool data)
{
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	uint8_t buf[4096];

	if (fd < 0 || ftruncate(fd, (off_t)bytes))
		die("cannot create %s", path);
	for (unsigned int i = 0; data && i < (64u << 10) / sizeof(buf);
	     i += 2) {
		memset(buf, 0x5a ^ (int)i, sizeof(buf));
		if (pwrite(fd, buf, sizeof(buf), (off_t)(i * sizeof(buf))) !=
		    (ssize_t)sizeof(buf))
			die("cannot write %s", path);
	}
	close(fd);
}

static void export_key(struct conf_export *e, const char *key,
		       const char *value)
{
	char err[512];

	if (value && conf_export_set(e, key, value, err, sizeof(err)))
		die("export key: %s", err);
}

static void open_exports(void)
{
	char dir[4096], path[NR_EXPORTS][2][4200];
	struct conf_export defs[NR_EXPORTS];
	char err[1024];
	int n;

	n = snprintf(dir, sizeof(dir), "%s/bionbd-fuzz.XXXXXX",
		     scratch_base());
	if (n < 0 || (size_t)n >= sizeof(dir) || !mkdtemp(dir))
		die("cannot make a scratch directory under %s",
		    scratch_base());
	for (int i = 0; i < NR_EXPORTS; i++) {
		if (conf_export_init(&defs[i], exports[i].name))
			die("%s", "out of memory");
		for (int m = 0; m < 2; m++) {
			snprintf(path[i][m], sizeof(path[i][m]), "%s/%s%d", dir,
				 exports[i].name, m);
			if (exports[i].member_bytes)
				make_member(path[i][m], exports[i].member_bytes,
					    i == 1 && m == 0);
			export_key(&defs[i], "file", path[i][m]);
		}
		export_key(&defs[i], "stripe-size", "64K");
		export_key(&defs[i], "size", exports[i].size);
		export_key(&defs[i], "read-only",
			   exports[i].readonly ? "true" : NULL);
		export_key(&defs[i], "description", exports[i].description);
	}
	if (nbdl_exports_open(&srv.exports, defs, NR_EXPORTS, false, NULL, err,
			      sizeof(err)))
		die("exports: %s", err);
	srv.nr_exports = NR_EXPORTS;

	/* The targets hold the files open; the names can go now. */
	for (int i = 0; i < NR_EXPORTS; i++) {
		conf_export_release(&defs[i]);
		unlink(path[i][0]);
		unlink(path[i][1]);
	}
	rmdir(dir);
}

static enum ioq_backend pick_backend(void)
{
	struct ioq *q;

	/* As bionbd does: io_uring if it can be had, else the thread pool. */
	if (ioq_create(&q, IOQ_IO_URING, 0))
		return IOQ_THREADS;
	ioq_destroy(q);
	return IOQ_IO_URING;
}

static void clean_up(void)
{
	/* Everything must go back cleanly: LeakSanitizer looks after this. */
	worker_fini(&wk);
	ioq_set_current(NULL);
	nbdl_exports_close(srv.exports, srv.nr_exports, srv.backend);
	bio_pool_drain();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *replies = getenv("BIONBD_FUZZ_REPLIES");
	int r;

	signal(SIGPIPE, SIG_IGN);
	open_exports();
	srv.backend = pick_backend();
	srv.poll_max_s = 0; /* no busy-polling: nothing would wait for it */
	srv.handshake_s = 0; /* no timers: a run is a few loop iterations */
	srv.max_conns = 1024;
	/*
	 * Payload buffers are cached and reused as in bionbd (which allows
	 * 128 MiB a worker), so requests also get buffers that earlier ones
	 * wrote into; and it is faster than a map and unmap per request.
	 */
	srv.bufs.budget_bytes = 64u << 20;
	srv.workers = &wk;
	srv.nr_workers = 1;
	r = worker_init(&wk, &srv);
	if (r)
		die("worker_init: %s", strerror(-r));
	/* The worker's loop runs on this thread: so do its submissions. */
	ioq_set_current(wk.q);
	atexit(clean_up);
	/* To look at what the server answered (for one input at a time). */
	if (replies && *replies) {
		replies_fd = open(replies, O_WRONLY | O_CREAT | O_TRUNC |
						   O_APPEND | O_CLOEXEC, 0644);
		if (replies_fd < 0)
			die("BIONBD_FUZZ_REPLIES: %s", strerror(errno));
	}
	return 0;
}

/* ---- one session ---- */

/* Read and drop whatever the server sent; returns the bytes read. */
static size_t drain(int fd)
{
	size_t total = 0;

	for (;;) {
		ssize_t n = recv(fd, sink, sizeof(sink), MSG_DONTWAIT);

		if (n > 0) {
			total += (size_t)n;
			if (replies_fd >= 0 &&
			    write(replies_fd, sink, (size_t)n) != n)
				die("BIONBD_FUZZ_REPLIES: %s", strerror(errno));
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		return total;
	}
}

/* One non-blocking run of the worker's loop; waits for real async I/O. */
static void loop_once(void)
{
	ev_run(wk.loop, EVRUN_NOWAIT);
	if (ioq_inflight(wk.q) && !ioq_has_ready(wk.q)) {
		/* Members not on tmpfs: let io_uring or the pool finish. */
		struct pollfd p = { .fd = ioq_event_fd(wk.q), .events = POLLIN };

		poll(&p, 1, 10);
	}
}

static void stuck(size_t sent, size_t size, bool hung_up)
{
	const struct conn *c = wk.conns;

	fprintf(stderr,
		"fuzz-session: connection stuck: %zu of %zu input bytes sent%s; "
		"state %d paused %d draining %d dead %d inflight %u "
		"inflight_bytes %zu olen %zu replies queued %d rx %d pend %zu; "
		"ioq inflight %u\n",
		sent, size,
		hung_up ? ", client hung up" : (sent == size ? ", then EOF" : ""),
		(int)c->state, c->paused, c->draining, c->dead, c->inflight,
		c->inflight_bytes, c->olen, c->oq_head != NULL, c->rx != NULL,
		c->pend ? c->pend_len : 0, ioq_inflight(wk.q));
	abort();
}

/* How one input is delivered; derived from it, so a saved input replays. */
struct plan {
	size_t piece; /* bytes per send */
	int sndbuf; /* the server socket's SO_SNDBUF; 0 = the default */
	bool hang_up; /* at the end close at once, replies unread */
};

/*
 * Half the inputs go in at once; a quarter in pieces of 1..97 bytes (at
 * most 256 pieces), so option headers, request headers and payloads split
 * across reads are exercised too; a quarter in 2 to 4 large pieces, so a
 * connection that paused at its in-flight limit in the middle of a large
 * batch has more to read once it resumes.  The server's send buffer:
 * mostly 4 MiB, as the listener sets on unix sockets; the system default
 * for a quarter, as TCP clients get; the smallest there is for another
 * quarter, so replies, even the handshake's, meet a full socket and wait
 * for the write watcher.  A quarter of the clients hang up once they have
 * sent everything, without reading the rest of the replies (the server
 * then sees ECONNRESET or EPIPE, with I/O still in flight); the others
 * shut their writing side and read every reply.
 */
static struct plan session_plan(const uint8_t *d, size_t n)
{
	uint32_t h = 2166136261u ^ (uint32_t)n;
	struct plan p;

	for (size_t i = 0; i < n && i < 64; i++)
		h = (h ^ d[i]) * 16777619u;
	switch (h % 4) {
	case 2:
		p.piece = 1 + (h >> 2) % 97;
		if (p.piece < n / 256)
			p.piece = n / 256;
		break;
	case 3:
		p.piece = n / (2 + (h >> 2) % 3) + 1;
		break;
	default:
		p.piece = n ? n : 1;
		break;
	}
	switch ((h >> 8) % 4) {
	case 0: p.sndbuf = 1; break; /* the kernel rounds it up */
	case 1: p.sndbuf = 0; break;
	default: p.sndbuf = SRV_UNIX_SNDBUF; break;
	}
	p.hang_up = (h >> 12) % 4 == 0;
	return p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct plan plan = session_plan(data, size);
	size_t sent = 0, piece = plan.piece;
	unsigned int idle = 0;
	bool eof = false;
	int sv[2], cfd;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
		       sv))
		die("socketpair: %s", strerror(errno));
	cfd = sv[0];
	/* Set up as the listener would, then handed over to the worker. */
	if (plan.sndbuf)
		setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &plan.sndbuf,
			   sizeof(plan.sndbuf));
	atomic_fetch_add(&srv.nr_conns, 1);
	conn_accept(&wk, sv[1]);

	while (wk.conns) {
		bool moved = false;

		if (cfd >= 0 && sent < size) {
			size_t want = size - sent < piece ? size - sent : piece;
			ssize_t n = send(cfd, data + sent, want, MSG_NOSIGNAL);

			if (n > 0) {
				sent += (size_t)n;
				moved = true;
			} else if (n < 0 && errno != EAGAIN && errno != EINTR) {
				sent = size; /* the server hung up */
			}
		}
		if (cfd >= 0 && sent == size) {
			if (plan.hang_up) {
				close(cfd);
				cfd = -1;
			} else if (!eof) {
				shutdown(cfd, SHUT_WR);
			}
			moved = moved || !eof;
			eof = true;
		}
		if (cfd >= 0 && drain(cfd))
			moved = true;
		loop_once();
		if (moved || ioq_inflight(wk.q))
			idle = 0;
		else if (++idle == STUCK_RUNS)
			stuck(sent, size, cfd < 0);
	}

	/* Freed, its socket closed: the client reads the last replies, goes. */
	if (cfd >= 0) {
		drain(cfd);
		close(cfd);
	}
	/* The next input must start from nothing in flight. */
	if (atomic_load(&srv.nr_conns) || ioq_inflight(wk.q)) {
		fprintf(stderr,
			"fuzz-session: after the connection: %u counted, "
			"%u I/Os in flight\n",
			atomic_load(&srv.nr_conns), ioq_inflight(wk.q));
		abort();
	}
	return 0;
}
