// SPDX-License-Identifier: MIT
/*
 * Description: a remote member's connection driven by an ioq (remote.c),
 * against a small NBD server of the test's own whose timing the test
 * controls, on each backend (io_uring, threads):
 *
 *  - readiness gone stale over the handshake: the server sends its
 *    greeting and its option replies at once, after the connection's
 *    POLLOUT has fired and while its POLLIN is armed, so libnbd reads all
 *    of the handshake inside nbd_aio_notify_write and the POLLIN event
 *    that follows finds nothing.  Told "readable" all the same, libnbd
 *    would wait in REPLY.START and keep the next request unsent until
 *    the server answered the first one: the server holds its answer to
 *    the first request until the second arrives (or two seconds pass),
 *    and the second must arrive first.
 */
#define BIONBD_INTERNAL 1
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <bionbd/bio.h>
#include <bionbd/target.h>

#include "../../engine/internal.h"
#include "unit.h"

#define EXPORT_BYTES (1u << 20)
#define HOLD_MS 2000
#define MAX_OPTS 16

#define NBD_OPT_MAGIC 0x49484156454F5054ull /* "IHAVEOPT" */
#define NBD_REP_MAGIC 0x0003e889045565a9ull
#define NBD_REQUEST_MAGIC 0x25609513u
#define NBD_SIMPLE_REPLY_MAGIC 0x67446698u
#define NBD_OPT_ABORT 2
#define NBD_OPT_INFO 6
#define NBD_OPT_GO 7
#define NBD_REP_ACK 1
#define NBD_REP_INFO 3
#define NBD_REP_ERR_UNSUP 0x80000001u
#define NBD_CMD_READ 0
#define NBD_CMD_WRITE 1
#define NBD_CMD_DISC 2

struct fake {
	int lfd;
	struct sockaddr_un addr;
	pthread_t thread;
	atomic_bool stop;
	/* The options of the first connection (the probe), in order. */
	uint32_t opts[MAX_OPTS];
	unsigned int nr_opts;
	/* Connection number @ahead (from 0) is answered ahead, on "go". */
	int ahead;
	int go[2], sent[2];
	atomic_bool second_early; /* the 2nd request came before we answered */
	atomic_int requests;
};

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = v >> 8;
	p[1] = v & 0xff;
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = v >> (24 - 8 * i);
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = v >> (56 - 8 * i);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) << 32 | get32(p + 4);
}

/* All of @len, or false at the end or an error. */
static bool read_all(int fd, void *buf, size_t len)
{
	for (size_t done = 0; done < len;) {
		ssize_t n = read(fd, (char *)buf + done, len - done);

		if (n <= 0)
			return false;
		done += (size_t)n;
	}
	return true;
}

static bool write_all(int fd, const void *buf, size_t len)
{
	for (size_t done = 0; done < len;) {
		ssize_t n = send(fd, (const char *)buf + done, len - done,
				 MSG_NOSIGNAL);

		if (n <= 0)
			return false;
		done += (size_t)n;
	}
	return true;
}

/* The server's reply to option @opt, appended at @p; its length. */
static size_t opt_reply(uint8_t *p, uint32_t opt)
{
	size_t n = 0;
	bool ok;

	if (opt == NBD_OPT_GO || opt == NBD_OPT_INFO) {
		put64(p, NBD_REP_MAGIC);
		put32(p + 8, opt);
		put32(p + 12, NBD_REP_INFO);
		put32(p + 16, 12);
		put16(p + 20, 0); /* NBD_INFO_EXPORT */
		put64(p + 22, EXPORT_BYTES);
		put16(p + 30, 1); /* NBD_FLAG_HAS_FLAGS */
		n = 32;
	}
	put64(p + n, NBD_REP_MAGIC);
	put32(p + n + 8, opt);
	ok = opt == NBD_OPT_GO || opt == NBD_OPT_INFO || opt == NBD_OPT_ABORT;
	put32(p + n + 12, ok ? NBD_REP_ACK : NBD_REP_ERR_UNSUP);
	put32(p + n + 16, 0);
	return n + 20;
}

static size_t greeting(uint8_t *p)
{
	memcpy(p, "NBDMAGIC", 8);
	put64(p + 8, NBD_OPT_MAGIC);
	put16(p + 16, 3); /* FIXED_NEWSTYLE | NO_ZEROES */
	return 18;
}

/* Options up to NBD_OPT_GO; true when transmission follows. */
static bool serve_options(struct fake *f, int fd, bool record, bool answered)
{
	uint8_t hdr[16], buf[512];

	if (!read_all(fd, buf, 4)) /* client flags */
		return false;
	for (;;) {
		uint32_t opt, len;

		if (!read_all(fd, hdr, sizeof(hdr)))
			return false;
		CHECK_EQ(get64(hdr), NBD_OPT_MAGIC);
		opt = get32(hdr + 8);
		len = get32(hdr + 12);
		CHECK(len <= sizeof(buf));
		if (!read_all(fd, buf, len))
			return false;
		if (record) {
			CHECK(f->nr_opts < MAX_OPTS);
			f->opts[f->nr_opts++] = opt;
		}
		if (!answered && !write_all(fd, buf, opt_reply(buf, opt)))
			return false;
		if (opt == NBD_OPT_ABORT)
			return false;
		if (opt == NBD_OPT_GO)
			return true;
	}
}

static void serve_requests(struct fake *f, int fd, bool hold)
{
	static uint8_t data[64 << 10];
	uint8_t req[28], rep[16];

	for (;;) {
		uint32_t len;
		uint16_t type;

		if (!read_all(fd, req, sizeof(req)))
			return;
		CHECK_EQ(get32(req), NBD_REQUEST_MAGIC);
		type = (uint16_t)(req[6] << 8 | req[7]);
		len = get32(req + 24);
		if (type == NBD_CMD_DISC)
			return;
		CHECK(len <= sizeof(data));
		if (type == NBD_CMD_WRITE && !read_all(fd, data, len))
			return;
		if (hold && atomic_fetch_add(&f->requests, 1) == 0) {
			struct pollfd pfd = { .fd = fd, .events = POLLIN };

			if (poll(&pfd, 1, HOLD_MS) == 1)
				atomic_store(&f->second_early, true);
		}
		put32(rep, NBD_SIMPLE_REPLY_MAGIC);
		put32(rep + 4, 0);
		memcpy(rep + 8, req + 8, 8);
		if (!write_all(fd, rep, sizeof(rep)))
			return;
		if (type == NBD_CMD_READ) {
			memset(data, 0xab, len);
			if (!write_all(fd, data, len))
				return;
		}
	}
}

/*
 * Connection @n.  Served ahead: once the test says "go", the greeting and
 * the replies to the options the probe sent, all in one write, before
 * reading anything.
 */
static void serve(struct fake *f, int fd, int n)
{
	uint8_t buf[1024];
	bool ahead = n == f->ahead;
	size_t len;
	char c;

	if (ahead) {
		CHECK_EQ(read(f->go[0], &c, 1), 1);
		len = greeting(buf);
		for (unsigned int i = 0; i < f->nr_opts; i++)
			len += opt_reply(buf + len, f->opts[i]);
		CHECK(write_all(fd, buf, len));
		CHECK_EQ(write(f->sent[1], "s", 1), 1);
	} else if (!write_all(fd, buf, greeting(buf))) {
		return;
	}
	if (serve_options(f, fd, n == 0, ahead))
		serve_requests(f, fd, ahead);
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;

	for (int n = 0; !atomic_load(&f->stop);) {
		struct pollfd pfd = { .fd = f->lfd, .events = POLLIN };
		int fd;

		if (poll(&pfd, 1, 50) != 1)
			continue;
		fd = accept(f->lfd, NULL, NULL);
		if (fd < 0)
			continue;
		serve(f, fd, n++);
		close(fd);
	}
	return NULL;
}

static void fake_start(struct fake *f, int ahead)
{
	memset(f, 0, sizeof(*f));
	f->ahead = ahead;
	f->addr.sun_family = AF_UNIX;
	snprintf(f->addr.sun_path, sizeof(f->addr.sun_path),
		 "%s/test-remote.%d.sock",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
	unlink(f->addr.sun_path);
	f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(f->lfd >= 0);
	CHECK_EQ(bind(f->lfd, (struct sockaddr *)&f->addr, sizeof(f->addr)), 0);
	CHECK_EQ(listen(f->lfd, 8), 0);
	CHECK_EQ(pipe(f->go), 0);
	CHECK_EQ(pipe(f->sent), 0);
	CHECK_EQ(pthread_create(&f->thread, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f)
{
	atomic_store(&f->stop, true);
	CHECK_EQ(pthread_join(f->thread, NULL), 0);
	close(f->lfd);
	unlink(f->addr.sun_path);
	close(f->go[0]);
	close(f->go[1]);
	close(f->sent[0]);
	close(f->sent[1]);
}

static atomic_int ended;
static int statuses[2];

static void end_io(struct bio *bio)
{
	int *status = bio->bi_private;

	*status = bio->bi_status;
	atomic_fetch_add(&ended, 1);
	bio_put(bio);
}

static void submit_read(struct target *t, uint64_t off, void *buf, int *status)
{
	struct bio *bio = bio_alloc(1, REQ_OP_READ);

	CHECK(bio);
	CHECK_EQ(bio_add_buf(bio, buf, 4096), 0);
	bio->bi_iter.bi_sector = off >> SECTOR_SHIFT;
	bio->bi_end_io = end_io;
	bio->bi_private = status;
	submit_bio(t, bio);
}

static void stale_after_handshake(enum ioq_backend be)
{
	static char a[4096], b[4096];
	struct remote_opts opts = { .timeout_ms = 10000 };
	char uri[200], err[256];
	struct target *t;
	struct fake f;
	struct ioq *q;
	uint64_t end;
	char c;
	int r;

	if (!unit_ioq_create(&q, be))
		return;
	fake_start(&f, 1);
	snprintf(uri, sizeof(uri), "nbd+unix:///?socket=%s", f.addr.sun_path);
	r = remote_target_open(&t, uri, &opts, err, sizeof(err));
	if (r)
		fprintf(stderr, "%s\n", err);
	CHECK_EQ(r, 0);
	CHECK(f.nr_opts > 0 && f.opts[f.nr_opts - 1] == NBD_OPT_GO);
	ioq_set_current(q);
	ended = 0;
	statuses[0] = statuses[1] = 1;

	/*
	 * The first bio makes the connection: on a Unix socket the connect
	 * is done at once (the listener's backlog), so POLLOUT fires when
	 * submitted and POLLIN waits.
	 */
	submit_read(t, 0, a, &statuses[0]);
	ioq_flush(q);
	usleep(20000);
	/* Everything of the handshake arrives while POLLIN is armed. */
	CHECK_EQ(write(f.go[1], "g", 1), 1);
	CHECK_EQ(read(f.sent[0], &c, 1), 1);
	usleep(20000);
	/* POLLOUT's event, then POLLIN's, in one reap. */
	ioq_reap(q);
	/* It must go out while the first is unanswered. */
	submit_read(t, 4096, b, &statuses[1]);
	ioq_flush(q);
	end = engine_now_ns() + 20000000000ull;
	while (ended < 2 && engine_now_ns() < end)
		CHECK(ioq_wait(q) >= 0);
	CHECK_EQ(ended, 2);
	CHECK_EQ(statuses[0], 0);
	CHECK_EQ(statuses[1], 0);
	CHECK_EQ((unsigned char)a[0], 0xab);
	CHECK_EQ((unsigned char)b[4095], 0xab);
	if (!atomic_load(&f.second_early))
		fprintf(stderr, "remote: %s: the second request waited "
				"for the first's reply\n",
			ioq_backend_name(be));
	CHECK(atomic_load(&f.second_early));

	target_destroy(t);
	ioq_set_current(NULL);
	ioq_destroy(q);
	fake_stop(&f);
	printf("remote: %s: stale readiness after the handshake ok\n",
	       ioq_backend_name(be));
}

int main(void)
{
	stale_after_handshake(IOQ_IO_URING);
	stale_after_handshake(IOQ_THREADS);
	return 0;
}
