// SPDX-License-Identifier: MIT
/*
 * Description: sockets watched by an ioq (struct ioq_poll, engine-internal:
 * what a remote member's connection rides on), on each backend (io_uring,
 * threads; a backend the machine lacks is skipped with a note):
 *
 *  - nothing ready: a reap runs no callback;
 *  - data on the socket: the next reap runs the callback once, with
 *    POLLIN, on this thread; one-shot: without ioq_poll_set again, more
 *    data runs nothing, and after it the pending data is reported at once;
 *  - the event fd becomes readable for it (a loop blocked on it wakes);
 *  - POLLOUT on a socket with room is reported, and only when asked for;
 *  - ioq_poll_del, then the same poll on another socket (a reconnect):
 *    data on the old socket never reaches the callback, data on the new
 *    one does;
 *  - ioq_poll_del, then the poll freed at once (a remote connection
 *    replaced on its queue): what was armed, fired or cancelled, never
 *    reaches the freed memory (ASan) nor a callback;
 *  - two polls ready in the same reap, the first one's callback deleting
 *    and freeing the other (a connection replaced on its queue): the
 *    other's event goes nowhere;
 *  - io_uring: a poll the kernel cancels by itself (here through
 *    IORING_REGISTER_SYNC_CANCEL on the ring, from outside the backend)
 *    is armed again: data after it still runs the callback;
 *  - the peer closing the socket is reported (POLLIN or POLLERR: the owner
 *    reads and sees the end);
 *  - io_uring: a burst of sockets ready at once, more than the CQ ring
 *    holds (a ring of depth 1: two CQEs), runs every callback, and no
 *    completion ever waits in the kernel's overflow list (the ring's
 *    fdinfo), which neither a CQ walk nor the event fd reports.
 */
#define BIONBD_INTERNAL 1
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <liburing.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include "../../engine/internal.h"
#include "unit.h"

static unsigned int calls, last_events;
static struct ioq_poll *last_poll;

static void poll_cb(struct ioq_poll *p, unsigned int revents)
{
	calls++;
	last_events = revents;
	last_poll = p;
}

/* Two polls; the first to be called deletes and frees the other. */
static struct ioq_poll *pair[2];
static struct ioq *pair_q;

static void pair_cb(struct ioq_poll *p, unsigned int revents)
{
	struct ioq_poll *other = pair[p == pair[0]];

	poll_cb(p, revents);
	ioq_poll_del(pair_q, other);
	free(other);
}

static bool fd_readable(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	return poll(&pfd, 1, 200) == 1;
}

/* Reap until the callback ran or a second has passed. */
static void reap_until_called(struct ioq *q, unsigned int want)
{
	for (int i = 0; i < 100 && calls < want; i++) {
		ioq_flush(q);
		ioq_reap(q);
		if (calls < want)
			usleep(10000);
	}
}

/* This process's io_uring ring: the one queue's. */
static int ring_fd(void)
{
	struct dirent *d;
	int ring = -1;
	DIR *dir;

	dir = opendir("/proc/self/fd");
	CHECK(dir);
	while ((d = readdir(dir))) {
		char path[PATH_MAX], link[64];
		ssize_t n;

		snprintf(path, sizeof(path), "/proc/self/fd/%s", d->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n < 0)
			continue;
		link[n] = 0;
		if (!strcmp(link, "anon_inode:[io_uring]"))
			ring = atoi(d->d_name);
	}
	closedir(dir);
	CHECK(ring >= 0);
	return ring;
}

/*
 * Cancel every request on @fd in this process's io_uring ring, as the
 * kernel may on its own: the count, or -errno.
 */
static int cancel_from_outside(int fd)
{
	struct io_uring_sync_cancel_reg reg = {
		.fd = fd,
		.flags = IORING_ASYNC_CANCEL_FD | IORING_ASYNC_CANCEL_ALL,
		.timeout = { .tv_sec = -1, .tv_nsec = -1 },
	};
	int r;

	r = (int)syscall(__NR_io_uring_register, ring_fd(),
			 IORING_REGISTER_SYNC_CANCEL, &reg, 1);
	return r < 0 ? -errno : r;
}

/*
 * Completions in the kernel's overflow list of this process's ring, from
 * its fdinfo; -1 where the kernel does not show the list.
 */
static int ring_overflowed(void)
{
	char path[64], line[256];
	bool in_list = false;
	int n = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", ring_fd());
	f = fopen(path, "r");
	CHECK(f);
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "CqOverflowList:", 15)) {
			in_list = true;
			n = 0;
		} else if (in_list && line[0] == ' ') {
			n++;
		} else {
			in_list = false;
		}
	}
	fclose(f);
	return n;
}

static void settle(struct ioq *q)
{
	for (int i = 0; i < 5; i++) {
		ioq_flush(q);
		ioq_reap(q);
		usleep(5000);
	}
}

/* @msg sent to @sp[0] makes the @want'th call, with POLLIN; then read. */
static void data_reported(struct ioq *q, const int sp[2], const char *msg,
			  unsigned int want)
{
	ssize_t len = (ssize_t)strlen(msg);
	char buf[64];

	CHECK_EQ(write(sp[1], msg, len), len);
	reap_until_called(q, want);
	CHECK_EQ(calls, want);
	CHECK(last_events & POLLIN);
	CHECK_EQ(read(sp[0], buf, sizeof(buf)), len);
}

static void run(enum ioq_backend be)
{
	struct ioq_poll p = { .fd = -1, .fn = poll_cb };
	struct ioq_poll *hp;
	unsigned int before;
	int a[2], b[2], c[2], d[2], efd;
	struct ioq *q;
	char buf[64];
	int r;

	r = ioq_create(&q, be, 0);
	if (r == -ENOSYS || r == -EPERM) {
		printf("ioq-poll: %s not available, skipped\n",
		       ioq_backend_name(be));
		return;
	}
	CHECK_EQ(r, 0);
	ioq_set_current(q);
	efd = ioq_event_fd(q);
	CHECK(efd >= 0);
	CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, a), 0);
	CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, b), 0);
	CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, c), 0);
	CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, d), 0);
	calls = 0;

	/* Nothing ready. */
	p.fd = a[0];
	p.events = POLLIN;
	CHECK_EQ(ioq_poll_set(q, &p), 0);
	settle(q);
	CHECK_EQ(calls, 0);

	/* Data: one call, POLLIN; the event fd woke for it. */
	CHECK_EQ(write(a[1], "x", 1), 1);
	ioq_flush(q);
	CHECK(fd_readable(efd));
	reap_until_called(q, 1);
	CHECK_EQ(calls, 1);
	CHECK(last_events & POLLIN);

	/* One-shot: more data, no call until asked again. */
	CHECK_EQ(write(a[1], "y", 1), 1);
	settle(q);
	CHECK_EQ(calls, 1);
	CHECK_EQ(ioq_poll_set(q, &p), 0);
	reap_until_called(q, 2);
	CHECK_EQ(calls, 2);
	CHECK_EQ(read(a[0], buf, sizeof(buf)), 2);

	/* POLLOUT only when asked: a socket with room is writable. */
	p.events = POLLIN | POLLOUT;
	CHECK_EQ(ioq_poll_set(q, &p), 0);
	reap_until_called(q, 3);
	CHECK_EQ(calls, 3);
	CHECK(last_events & POLLOUT);
	CHECK(!(last_events & POLLIN));

	/*
	 * A reconnect: off the old socket, onto a new one.  (POLLIN may
	 * still be armed on the old one from the last call: io_uring arms
	 * directions apart.)
	 */
	ioq_poll_del(q, &p);
	p.fd = b[0];
	p.events = POLLIN;
	CHECK_EQ(ioq_poll_set(q, &p), 0);
	CHECK_EQ(write(a[1], "old", 3), 3);
	settle(q);
	CHECK_EQ(calls, 3);
	data_reported(q, b, "new", 4);

	/*
	 * Deleted and freed at once: POLLOUT has fired (its completion
	 * waits in the ring), POLLIN is out and gets cancelled.  Neither
	 * completion may touch the poll (ASan sees it if one does).
	 */
	hp = calloc(1, sizeof(*hp));
	CHECK(hp);
	hp->fd = c[0];
	hp->events = POLLIN | POLLOUT;
	hp->fn = poll_cb;
	CHECK_EQ(ioq_poll_set(q, hp), 0);
	ioq_flush(q);
	usleep(10000);
	ioq_poll_del(q, hp);
	free(hp);
	CHECK_EQ(write(c[1], "gone", 4), 4);
	settle(q);
	CHECK_EQ(calls, 4);

	/* Two ready at once, the first deleting the second. */
	CHECK_EQ(read(c[0], buf, sizeof(buf)), 4); /* "gone", above */
	pair_q = q;
	for (int i = 0; i < 2; i++) {
		pair[i] = calloc(1, sizeof(*pair[i]));
		CHECK(pair[i]);
		pair[i]->fd = i ? d[0] : c[0];
		pair[i]->events = POLLIN;
		pair[i]->fn = pair_cb;
		CHECK_EQ(ioq_poll_set(q, pair[i]), 0);
	}
	ioq_flush(q);
	CHECK_EQ(write(c[1], "1", 1), 1);
	CHECK_EQ(write(d[1], "2", 1), 1);
	usleep(10000);
	reap_until_called(q, 5);
	settle(q);
	CHECK_EQ(calls, 5);
	ioq_poll_del(q, last_poll);
	free(last_poll);
	CHECK_EQ(read(c[0], buf, sizeof(buf)), 1);
	CHECK_EQ(read(d[0], buf, sizeof(buf)), 1);

	/* Cancelled, but not by its owner: still watched. */
	if (be == IOQ_IO_URING) {
		CHECK_EQ(ioq_poll_set(q, &p), 0);
		ioq_flush(q);
		r = cancel_from_outside(b[0]);
		if (r == -EINVAL || r == -EOPNOTSUPP) {
			printf("ioq-poll: no IORING_REGISTER_SYNC_CANCEL here, "
			       "the kernel's cancel not tried\n");
			ioq_poll_del(q, &p);
		} else {
			CHECK(r >= 1);
			settle(q);
			CHECK_EQ(calls, 5);
			data_reported(q, b, "again", 6);
		}
	}

	/* The peer goes away: reported, so the owner reads the end. */
	before = calls;
	CHECK_EQ(ioq_poll_set(q, &p), 0);
	close(b[1]);
	reap_until_called(q, before + 1);
	CHECK_EQ(calls, before + 1);
	CHECK(last_events & (POLLIN | POLLERR | POLLHUP));
	CHECK_EQ(read(b[0], buf, sizeof(buf)), 0);

	ioq_poll_del(q, &p);
	settle(q);
	CHECK_EQ(calls, before + 1);
	close(a[0]);
	close(a[1]);
	close(b[0]);
	close(c[0]);
	close(c[1]);
	close(d[0]);
	close(d[1]);
	ioq_set_current(NULL);
	ioq_destroy(q);
	printf("ioq-poll: %s ok\n", ioq_backend_name(be));
}

/* More ready at once than the CQ ring holds: all called, none overflows. */
static void burst(void)
{
	enum { N = 8 };
	struct ioq_poll p[N];
	int sp[N][2], over;
	struct ioq *q;
	int r;

	r = ioq_create(&q, IOQ_IO_URING, 1);
	if (r == -ENOSYS || r == -EPERM)
		return;
	CHECK_EQ(r, 0);
	ioq_set_current(q);
	calls = 0;
	for (int i = 0; i < N; i++) {
		CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0,
				    sp[i]),
			 0);
		/* Room to write: ready the moment the kernel looks. */
		p[i] = (struct ioq_poll){ .fd = sp[i][0],
					  .events = POLLOUT,
					  .fn = poll_cb };
		CHECK_EQ(ioq_poll_set(q, &p[i]), 0);
	}
	over = ring_overflowed();
	if (over < 0)
		printf("ioq-poll: no CqOverflowList in the ring's fdinfo, "
		       "the overflow not checked\n");
	for (int i = 0; i < 100 && calls < N; i++) {
		ioq_flush(q);
		usleep(2000);
		if (over >= 0)
			CHECK_EQ(ring_overflowed(), 0);
		ioq_reap(q);
	}
	CHECK_EQ(calls, N);
	for (int i = 0; i < N; i++) {
		ioq_poll_del(q, &p[i]);
		close(sp[i][0]);
		close(sp[i][1]);
	}
	ioq_set_current(NULL);
	ioq_destroy(q);
	printf("ioq-poll: io_uring burst ok\n");
}

int main(void)
{
	burst();
	run(IOQ_IO_URING);
	run(IOQ_THREADS);
	return 0;
}
