// SPDX-License-Identifier: MIT
/*
 * splice-bench.c - what an NBD read reply and write payload cost the
 * server thread when the data is copied through user space, and when it
 * is handed to the kernel with sendfile(2) or splice(2).
 *
 * Standalone: it does not link the server.  It mimics the server's data
 * path closely enough that the difference between the methods carries over:
 *
 *  read replies (server -> client)
 *   copy      A  preadv per member into one buffer, then one sendmsg of
 *                header + buffer (two copies on the server thread)
 *   copy-piece A' the same with one pread per stripe piece
 *   sendfile  B  send(header, MSG_MORE), then one sendfile per piece
 *   splice    C  header write()n into a private pipe, pieces spliced from
 *                the member files into it, the pipe spliced to the socket
 *                whenever it is full and at the end of the reply
 *   splice-sephdr C' as C, but the header goes out with send(MSG_MORE)
 *
 *  write payloads (client -> server)
 *   copy      D  recv header, recv payload into a buffer, pwritev per member
 *   copy-piece D' the same with one pwrite per piece
 *   splice    E  recv header, then splice socket -> pipe -> member files
 *
 * Layouts: "single" is one file read as one contiguous range; "stripe" is
 * the server's striping: 4 member files, 64 KiB chunks round-robin, so a
 * 1 MiB request is 16 pieces.  Both hold the same volume image.
 *
 * The peer is a real consumer/producer on its own thread: for reads it
 * recv()s each 16-byte reply header and then the payload into a buffer
 * (MSG_WAITALL), as an NBD client does; for writes it sends a 28-byte NBD
 * request header and the payload in one sendmsg, as fast as it can.
 * Transports: an AF_UNIX socketpair whose server end has SO_SNDBUF 4 MiB
 * (as server/listener.c sets it), and a TCP loopback connection with
 * TCP_NODELAY on the server end and default (autotuned) buffers.
 *
 * Per cell (direction x layout x transport x size x method) it runs
 * --reps runs of --time seconds after --warmup seconds, each on a fresh
 * connection, and prints the median of each figure independently.  The
 * first request of each run is verified (reads: the peer compares the
 * payload with the image; writes: the range is zeroed before the run and
 * read back after the first request), so a method that loses bytes fails
 * instead of looking fast.
 *
 * Reported per cell: throughput, CPU time of the server thread (the
 * event loop that matters) per request and per MiB, the peer's CPU per
 * MiB, the whole machine's busy time per MiB, how much CPU went to
 * anything else meanwhile (runs where that is high are redone), and a
 * memcpy reference speed, because this is meant to run on small shared
 * VMs where neighbours and the host skew single runs.
 *
 * Build: with the project (build/bench/splice-bench), or
 *        gcc -O2 -D_GNU_SOURCE -std=gnu11 -o splice-bench \
 *            bench/splice-bench.c -lpthread
 * Run:   splice-bench /dev/shm; splice-bench /var/tmp   (--help for more)
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#define NR_MEMBERS 4
#define STRIPE_SIZE (64u * 1024)
#define PIPE_WANT (1 << 20)
#define UNIX_SNDBUF (4 << 20)
#define REPLY_HDR 16
#define REQUEST_HDR 28
#define NBD_REPLY_MAGIC 0x67446698u
#define NBD_REQUEST_MAGIC 0x25609513u
/* Not an NBD magic: tells the reading peer that the run is over. */
#define STOP_MAGIC 0x53544f50u
#define CMD_WRITE 1
#define CMD_DISC 2
#define MAX_SIZES 16
#define MAX_REPS 15
#define MIB (1024.0 * 1024.0)
#define GIB (1024.0 * 1024.0 * 1024.0)

enum direction { DIR_READ, DIR_WRITE, NR_DIRS };
enum layout { LAY_SINGLE, LAY_STRIPE, NR_LAYOUTS };
enum transport { TR_UNIX, TR_TCP, NR_TRANSPORTS };
enum method {
	M_COPY,
	M_COPY_PIECE,
	M_SENDFILE,
	M_SPLICE,
	M_SPLICE_SEPHDR,
	NR_METHODS
};

static const char *const dir_names[] = { "read", "write" };
static const char *const layout_names[] = { "single", "stripe" };
static const char *const transport_names[] = { "unix", "tcp" };
static const char *const method_names[] = {
	"copy", "copy-piece", "sendfile", "splice", "splice-sephdr"
};
/* NULL where the method has no meaning in that direction. */
static const char *const method_labels[NR_DIRS][NR_METHODS] = {
	[DIR_READ] = {
		[M_COPY] = "A preadv+sendmsg",
		[M_COPY_PIECE] = "A' pread/piece+sendmsg",
		[M_SENDFILE] = "B sendfile",
		[M_SPLICE] = "C splice (hdr in pipe)",
		[M_SPLICE_SEPHDR] = "C' splice (hdr send)",
	},
	[DIR_WRITE] = {
		[M_COPY] = "D recv+pwritev",
		[M_COPY_PIECE] = "D' recv+pwrite/piece",
		[M_SPLICE] = "E splice",
	},
};

struct cfg {
	const char *dir;
	uint64_t vol_size;
	double run_secs;
	double warm_secs;
	unsigned int reps;
	bool pin;
	bool keep;
	double quiet_wait_secs;
	double quiet_cpus;
	double max_bg;
	unsigned int retries;
	bool want_dir[NR_DIRS];
	bool want_layout[NR_LAYOUTS];
	bool want_transport[NR_TRANSPORTS];
	bool want_method[NR_METHODS];
	size_t sizes[MAX_SIZES];
	unsigned int nr_sizes;
	size_t max_size;
};

struct vol {
	int single;
	int member[NR_MEMBERS];
	uint8_t *image;
	uint64_t size;
	char path[NR_MEMBERS + 1][PATH_MAX];
};

struct piece {
	int fd;
	int member;
	off_t off;
	size_t len;
	size_t boff; /* where the piece lies in the request's buffer */
};

struct sample {
	double gibps;
	double srv_us_req;
	double srv_us_mib;
	double peer_us_mib;
	double all_us_mib;
	double bg_cpus;
	double reqs;
};

struct run {
	const struct cfg *cfg;
	const struct vol *vol;
	enum direction dir;
	enum layout lay;
	enum transport tr;
	enum method m;
	size_t size;
	int srv_fd, peer_fd;
	int pr, pw;
	size_t pipe_cap;
	uint8_t *srv_buf, *peer_buf;
	struct piece *pieces;
	struct iovec *iov;
	uint64_t next_off;
	pthread_t peer;
	atomic_bool stop;
	int peer_err;
	int srv_err;
	struct sample s;
};

static double now_secs(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * Busy time of the whole machine, in seconds.  Thread CPU time misses what
 * the kernel does for us elsewhere: softirq time (TCP loopback delivery)
 * when IRQ time accounting is on, ksoftirqd, writeback kworkers.
 */
static double machine_busy_secs(void)
{
	unsigned long long v[8] = { 0 };
	FILE *f = fopen("/proc/stat", "r");
	int n;

	if (!f)
		return 0;
	n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
		   &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
	fclose(f);
	if (n != 8)
		return 0;
	/* user nice system [idle iowait] irq softirq steal */
	return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) /
	       (double)sysconf(_SC_CLK_TCK);
}

static void iov_advance(struct iovec **iov, int *cnt, size_t n)
{
	while (*cnt && n >= (*iov)->iov_len) {
		n -= (*iov)->iov_len;
		(*iov)++;
		(*cnt)--;
	}
	if (*cnt && n) {
		(*iov)->iov_base = (uint8_t *)(*iov)->iov_base + n;
		(*iov)->iov_len -= n;
	}
}

/* preadv/pwritev (@write) until all of @iov is done. */
static int prwv_full(bool write, int fd, struct iovec *iov, int cnt,
		     off_t off)
{
	while (cnt) {
		int c = cnt > IOV_MAX ? IOV_MAX : cnt;
		ssize_t n = write ? pwritev(fd, iov, c, off) :
				    preadv(fd, iov, c, off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO; /* the file is shorter than the volume */
		off += n;
		iov_advance(&iov, &cnt, (size_t)n);
	}
	return 0;
}

static int sendmsg_full(int fd, struct iovec *iov, int cnt, int flags)
{
	while (cnt) {
		struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)cnt };
		ssize_t n = sendmsg(fd, &mh, flags | MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		iov_advance(&iov, &cnt, (size_t)n);
	}
	return 0;
}

static int send_full(int fd, const void *buf, size_t len, int flags)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };

	return sendmsg_full(fd, &iov, 1, flags);
}

static int recv_full(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = recv(fd, p, len, MSG_WAITALL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ECONNRESET;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * The server's striping (engine/stripe.c): chunk k of the volume is chunk
 * k / N of member k % N.
 */
static size_t map_range(const struct vol *v, enum layout lay, uint64_t off,
			size_t len, struct piece *p)
{
	size_t n = 0, boff = 0;

	if (lay == LAY_SINGLE) {
		p[0] = (struct piece){ v->single, 0, (off_t)off, len, 0 };
		return 1;
	}
	while (len) {
		uint64_t k = off / STRIPE_SIZE;
		size_t in = (size_t)(off % STRIPE_SIZE);
		size_t chunk = STRIPE_SIZE - in < len ? STRIPE_SIZE - in : len;
		int m = (int)(k % NR_MEMBERS);

		p[n++] = (struct piece){ v->member[m], m,
					 (off_t)((k / NR_MEMBERS) * STRIPE_SIZE +
						 in),
					 chunk, boff };
		off += chunk;
		len -= chunk;
		boff += chunk;
	}
	return n;
}

/*
 * Copy between the member files and buf: one preadv/pwritev per member
 * (its pieces lie back to back in the member, scattered in the buffer),
 * or one pread/pwrite per piece.
 */
static int copy_pieces(struct run *r, size_t np, bool write, bool per_piece)
{
	struct iovec *iov = r->iov;
	int ret;

	if (per_piece || np == 1) {
		for (size_t i = 0; i < np; i++) {
			struct piece *p = &r->pieces[i];

			iov[0] = (struct iovec){ r->srv_buf + p->boff, p->len };
			ret = prwv_full(write, p->fd, iov, 1, p->off);
			if (ret)
				return ret;
		}
		return 0;
	}
	for (int m = 0; m < NR_MEMBERS; m++) {
		int cnt = 0, fd = -1;
		off_t start = 0, expect = 0;

		for (size_t i = 0; i < np; i++) {
			struct piece *p = &r->pieces[i];

			if (p->member != m)
				continue;
			if (!cnt) {
				fd = p->fd;
				start = expect = p->off;
			}
			if (p->off != expect)
				return -EINVAL; /* the mapping is wrong */
			iov[cnt++] = (struct iovec){ r->srv_buf + p->boff,
						     p->len };
			expect += (off_t)p->len;
		}
		if (!cnt)
			continue;
		ret = prwv_full(write, fd, iov, cnt, start);
		if (ret)
			return ret;
	}
	return 0;
}

static int drain_pipe_to_sock(struct run *r, size_t *inpipe, bool more)
{
	unsigned int flags = SPLICE_F_MOVE | (more ? SPLICE_F_MORE : 0);

	while (*inpipe) {
		ssize_t n = splice(r->pr, NULL, r->srv_fd, NULL, *inpipe, flags);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		*inpipe -= (size_t)n;
	}
	return 0;
}

static int reply_splice(struct run *r, const uint8_t *hdr, size_t np,
			bool hdr_in_pipe)
{
	size_t inpipe = 0;
	int ret;

	/*
	 * Written into the pipe, the header leaves in the same socket
	 * sendmsg as the first data: no separate skb, no extra wake-up of
	 * the reader for 16 bytes.
	 */
	if (hdr_in_pipe) {
		if (write(r->pw, hdr, REPLY_HDR) != REPLY_HDR)
			return -EIO;
		inpipe = REPLY_HDR;
	} else {
		ret = send_full(r->srv_fd, hdr, REPLY_HDR, MSG_MORE);
		if (ret)
			return ret;
	}
	for (size_t i = 0; i < np; i++) {
		struct piece *p = &r->pieces[i];
		loff_t off = p->off;
		size_t rem = p->len;

		while (rem) {
			/*
			 * NONBLOCK: a full pipe must come back to us to be
			 * drained, since we are its only reader.
			 */
			ssize_t n = splice(p->fd, &off, r->pw, NULL, rem,
					   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && errno == EAGAIN && inpipe) {
				ret = drain_pipe_to_sock(r, &inpipe, true);
				if (ret)
					return ret;
				continue;
			}
			if (n < 0)
				return -errno;
			if (n == 0)
				return -EIO;
			rem -= (size_t)n;
			inpipe += (size_t)n;
		}
	}
	return drain_pipe_to_sock(r, &inpipe, false);
}

static int reply_sendfile(struct run *r, const uint8_t *hdr, size_t np)
{
	int ret = send_full(r->srv_fd, hdr, REPLY_HDR, MSG_MORE);

	if (ret)
		return ret;
	for (size_t i = 0; i < np; i++) {
		struct piece *p = &r->pieces[i];
		off_t off = p->off;
		size_t rem = p->len;

		while (rem) {
			ssize_t n = sendfile(r->srv_fd, p->fd, &off, rem);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return -errno;
			if (n == 0)
				return -EIO;
			rem -= (size_t)n;
		}
	}
	return 0;
}

/* One read reply, at the next offset of a sequential sweep of the volume. */
static int read_step(struct run *r)
{
	uint64_t off = r->next_off;
	uint8_t hdr[REPLY_HDR];
	uint32_t magic = htobe32(NBD_REPLY_MAGIC), err = 0;
	uint64_t handle = htobe64(off);
	size_t np;
	int ret;

	r->next_off = (off + r->size) % r->vol->size;
	memcpy(hdr, &magic, 4);
	memcpy(hdr + 4, &err, 4);
	memcpy(hdr + 8, &handle, 8);
	np = map_range(r->vol, r->lay, off, r->size, r->pieces);

	switch (r->m) {
	case M_COPY:
	case M_COPY_PIECE: {
		struct iovec iov[2] = { { hdr, REPLY_HDR },
					{ r->srv_buf, r->size } };

		ret = copy_pieces(r, np, false, r->m == M_COPY_PIECE);
		if (ret)
			return ret;
		return sendmsg_full(r->srv_fd, iov, 2, 0);
	}
	case M_SENDFILE:
		return reply_sendfile(r, hdr, np);
	case M_SPLICE:
		return reply_splice(r, hdr, np, true);
	case M_SPLICE_SEPHDR:
		return reply_splice(r, hdr, np, false);
	default:
		return -EINVAL;
	}
}

static int splice_pipe_to_pieces(struct run *r, size_t inpipe, size_t *pi,
				 size_t *pdone)
{
	while (inpipe) {
		struct piece *p = &r->pieces[*pi];
		size_t chunk = p->len - *pdone < inpipe ? p->len - *pdone :
							  inpipe;
		loff_t off = p->off + (off_t)*pdone;
		ssize_t n = splice(r->pr, NULL, p->fd, &off, chunk,
				   SPLICE_F_MOVE);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		*pdone += (size_t)n;
		inpipe -= (size_t)n;
		if (*pdone == p->len) {
			(*pi)++;
			*pdone = 0;
		}
	}
	return 0;
}

static int payload_splice(struct run *r, size_t len)
{
	size_t done = 0, pi = 0, pdone = 0;

	while (done < len) {
		size_t inpipe = 0;
		bool first = true;
		int ret;

		/*
		 * Fill the pipe with what the socket has, then empty it into
		 * the files: fewer, larger splices to the files.  Only the
		 * first splice of a round may wait (for data); later ones
		 * stop at a full pipe instead of waiting on ourselves.
		 */
		while (done + inpipe < len && inpipe < r->pipe_cap) {
			size_t want = len - done - inpipe;
			ssize_t n;

			if (want > r->pipe_cap - inpipe)
				want = r->pipe_cap - inpipe;
			n = splice(r->srv_fd, NULL, r->pw, NULL, want,
				   SPLICE_F_MOVE |
					   (first ? 0 : SPLICE_F_NONBLOCK));
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && errno == EAGAIN && !first)
				break;
			if (n < 0)
				return -errno;
			if (n == 0)
				return -ECONNRESET;
			inpipe += (size_t)n;
			first = false;
		}
		ret = splice_pipe_to_pieces(r, inpipe, &pi, &pdone);
		if (ret)
			return ret;
		done += inpipe;
	}
	return 0;
}

/* One write request: header, then the payload into the volume. */
static int write_step(struct run *r, bool *disc)
{
	uint8_t hdr[REQUEST_HDR];
	uint32_t magic, len32;
	uint16_t type;
	uint64_t off;
	size_t np, len;
	int ret = recv_full(r->srv_fd, hdr, REQUEST_HDR);

	if (ret)
		return ret;
	memcpy(&magic, hdr, 4);
	memcpy(&type, hdr + 6, 2);
	memcpy(&off, hdr + 16, 8);
	memcpy(&len32, hdr + 24, 4);
	if (be32toh(magic) != NBD_REQUEST_MAGIC)
		return -EPROTO;
	if (be16toh(type) == CMD_DISC) {
		*disc = true;
		return 0;
	}
	off = be64toh(off);
	len = be32toh(len32);
	if (be16toh(type) != CMD_WRITE || len != r->size ||
	    off > r->vol->size - len)
		return -EPROTO;
	np = map_range(r->vol, r->lay, off, len, r->pieces);

	switch (r->m) {
	case M_COPY:
	case M_COPY_PIECE:
		ret = recv_full(r->srv_fd, r->srv_buf, len);
		if (ret)
			return ret;
		return copy_pieces(r, np, true, r->m == M_COPY_PIECE);
	case M_SPLICE:
		return payload_splice(r, len);
	default:
		return -EINVAL;
	}
}

/* Write direction check: the range at offset 0 holds the image again. */
static int verify_written(struct run *r)
{
	size_t np = map_range(r->vol, r->lay, 0, r->size, r->pieces);
	int ret;

	memset(r->srv_buf, 0xa5, r->size);
	ret = copy_pieces(r, np, false, true);
	if (ret)
		return ret;
	return memcmp(r->srv_buf, r->vol->image, r->size) ? -EILSEQ : 0;
}

static int zero_range(struct run *r)
{
	size_t np = map_range(r->vol, r->lay, 0, r->size, r->pieces);

	memset(r->srv_buf, 0, r->size);
	return copy_pieces(r, np, true, true);
}

static int step(struct run *r, bool *disc)
{
	return r->dir == DIR_READ ? read_step(r) : write_step(r, disc);
}

static int drive(struct run *r)
{
	clockid_t peer_clk;
	double t0, t1, c0, c1, p0, p1, b0, b1, start;
	uint64_t count = 0;
	bool disc = false;
	int ret;

	ret = pthread_getcpuclockid(r->peer, &peer_clk);
	if (ret)
		return -ret;

	start = now_secs(CLOCK_MONOTONIC);
	do {
		ret = step(r, &disc);
		if (ret)
			return ret;
		if (disc)
			return -EPROTO;
		if (!count++ && r->dir == DIR_WRITE) {
			ret = verify_written(r);
			if (ret)
				return ret;
		}
	} while (now_secs(CLOCK_MONOTONIC) - start < r->cfg->warm_secs);

	count = 0;
	b0 = machine_busy_secs();
	p0 = now_secs(peer_clk);
	c0 = now_secs(CLOCK_THREAD_CPUTIME_ID);
	t0 = now_secs(CLOCK_MONOTONIC);
	do {
		ret = step(r, &disc);
		if (ret)
			return ret;
		if (disc)
			return -EPROTO;
		count++;
		t1 = now_secs(CLOCK_MONOTONIC);
	} while (t1 - t0 < r->cfg->run_secs);
	c1 = now_secs(CLOCK_THREAD_CPUTIME_ID);
	p1 = now_secs(peer_clk);
	b1 = machine_busy_secs();

	{
		double mib = (double)count * (double)r->size / MIB;

		r->s.gibps = (double)count * (double)r->size / GIB / (t1 - t0);
		r->s.srv_us_req = (c1 - c0) * 1e6 / (double)count;
		r->s.srv_us_mib = (c1 - c0) * 1e6 / mib;
		r->s.peer_us_mib = (p1 - p0) * 1e6 / mib;
		r->s.all_us_mib = (b1 - b0) * 1e6 / mib;
		/* Anything the two threads' clocks do not account for. */
		r->s.bg_cpus = ((b1 - b0) - (c1 - c0) - (p1 - p0)) / (t1 - t0);
		r->s.reqs = (double)count;
	}

	if (r->dir == DIR_READ) {
		uint8_t hdr[REPLY_HDR] = { 0 };
		uint32_t magic = htobe32(STOP_MAGIC);

		memcpy(hdr, &magic, 4);
		return send_full(r->srv_fd, hdr, REPLY_HDR, 0);
	}
	atomic_store(&r->stop, true);
	while (!disc) {
		ret = step(r, &disc);
		if (ret)
			return ret;
	}
	return 0;
}

static void *server_main(void *arg)
{
	struct run *r = arg;

	r->srv_err = drive(r);
	/* Unblock the peer, which may be waiting for more. */
	if (r->srv_err)
		shutdown(r->srv_fd, SHUT_RDWR);
	return NULL;
}

static int reader_loop(struct run *r)
{
	bool first = true;

	for (;;) {
		uint8_t hdr[REPLY_HDR];
		uint32_t magic, err;
		uint64_t off;
		int ret = recv_full(r->peer_fd, hdr, REPLY_HDR);

		if (ret)
			return ret;
		memcpy(&magic, hdr, 4);
		memcpy(&err, hdr + 4, 4);
		memcpy(&off, hdr + 8, 8);
		if (be32toh(magic) == STOP_MAGIC)
			return 0;
		if (be32toh(magic) != NBD_REPLY_MAGIC || err)
			return -EPROTO;
		off = be64toh(off);
		if (off > r->vol->size - r->size)
			return -EPROTO;
		ret = recv_full(r->peer_fd, r->peer_buf, r->size);
		if (ret)
			return ret;
		if (first && memcmp(r->peer_buf, r->vol->image + off, r->size))
			return -EILSEQ;
		first = false;
	}
}

static int writer_loop(struct run *r)
{
	uint64_t off = 0;
	uint8_t hdr[REQUEST_HDR] = { 0 };
	uint32_t magic = htobe32(NBD_REQUEST_MAGIC);
	uint16_t type = htobe16(CMD_WRITE);
	uint32_t len32 = htobe32((uint32_t)r->size);

	memcpy(hdr, &magic, 4);
	memcpy(hdr + 6, &type, 2);
	memcpy(hdr + 24, &len32, 4);
	/* Starts at offset 0: that is the range verify_written checks. */
	while (!atomic_load(&r->stop)) {
		uint64_t be = htobe64(off);
		struct iovec iov[2] = { { hdr, REQUEST_HDR },
					{ r->vol->image + off, r->size } };
		int ret;

		memcpy(hdr + 8, &be, 8);
		memcpy(hdr + 16, &be, 8);
		ret = sendmsg_full(r->peer_fd, iov, 2, 0);
		if (ret)
			return ret;
		off = (off + r->size) % r->vol->size;
	}
	type = htobe16(CMD_DISC);
	memcpy(hdr + 6, &type, 2);
	memset(hdr + 24, 0, 4);
	return send_full(r->peer_fd, hdr, REQUEST_HDR, 0);
}

static void *peer_main(void *arg)
{
	struct run *r = arg;

	r->peer_err = r->dir == DIR_READ ? reader_loop(r) : writer_loop(r);
	if (r->peer_err)
		shutdown(r->peer_fd, SHUT_RDWR);
	return NULL;
}

static int connect_unix(int *srv, int *peer)
{
	int sv[2], sndbuf = UNIX_SNDBUF;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return -errno;
	/* As the server does; the kernel caps it at wmem_max. */
	setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	*srv = sv[0];
	*peer = sv[1];
	return 0;
}

static int connect_tcp(int *srv, int *peer)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t salen = sizeof(sa);
	int l, c = -1, s = -1, one = 1, ret = 0;

	l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l < 0)
		return -errno;
	if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) || listen(l, 1) ||
	    getsockname(l, (struct sockaddr *)&sa, &salen)) {
		ret = -errno;
		goto out;
	}
	c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c < 0 || connect(c, (struct sockaddr *)&sa, sizeof(sa))) {
		ret = -errno;
		goto out;
	}
	s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	if (s < 0) {
		ret = -errno;
		goto out;
	}
	/* As the server does; buffers are left to autotuning. */
	setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	*srv = s;
	*peer = c;
	s = c = -1;
out:
	if (c >= 0)
		close(c);
	if (s >= 0)
		close(s);
	close(l);
	return ret;
}

static int make_pipe(struct run *r)
{
	int p[2], sz;

	if (pipe2(p, O_CLOEXEC))
		return -errno;
	/* Without the privilege for 1 MiB the default 64 KiB is kept. */
	fcntl(p[1], F_SETPIPE_SZ, PIPE_WANT);
	sz = fcntl(p[1], F_GETPIPE_SZ);
	r->pr = p[0];
	r->pw = p[1];
	r->pipe_cap = sz > 0 ? (size_t)sz : 65536;
	return 0;
}

static int start_thread(pthread_t *t, void *(*fn)(void *), void *arg,
			int cpu, bool pin)
{
	pthread_attr_t attr;
	int ret;

	pthread_attr_init(&attr);
	if (pin && cpu >= 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
	}
	ret = pthread_create(t, &attr, fn, arg);
	pthread_attr_destroy(&attr);
	return -ret;
}

static unsigned int nr_busy_starts, nr_rerun, nr_kept_busy;

/*
 * This VM has 2 CPUs and may be shared: another job's CPU time is taken
 * from either the server or the peer thread.  Wait (boundedly) for a
 * quiet machine before each run, and count the runs that did not get one.
 */
static void wait_quiet(const struct cfg *c)
{
	double start = now_secs(CLOCK_MONOTONIC);
	struct timespec ts = { 0, 50 * 1000 * 1000 };

	for (;;) {
		double b0 = machine_busy_secs(), t0 = now_secs(CLOCK_MONOTONIC);

		nanosleep(&ts, NULL);
		if ((machine_busy_secs() - b0) /
			    (now_secs(CLOCK_MONOTONIC) - t0) <=
		    c->quiet_cpus)
			return;
		if (now_secs(CLOCK_MONOTONIC) - start >= c->quiet_wait_secs) {
			nr_busy_starts++;
			return;
		}
	}
}

/* Fields of r beyond the cell's parameters are set up here. */
static int run_once(struct run *r)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	bool pin = r->cfg->pin && ncpu >= 2;
	pthread_t srv;
	int ret;

	r->pr = r->pw = -1;
	r->next_off = 0;
	r->srv_err = r->peer_err = 0;
	atomic_store(&r->stop, false);
	memset(&r->s, 0, sizeof(r->s));
	ret = r->tr == TR_UNIX ? connect_unix(&r->srv_fd, &r->peer_fd) :
				 connect_tcp(&r->srv_fd, &r->peer_fd);
	if (ret)
		return ret;
	if (r->m == M_SPLICE || r->m == M_SPLICE_SEPHDR) {
		ret = make_pipe(r);
		if (ret)
			goto out;
	}
	if (r->dir == DIR_WRITE) {
		ret = zero_range(r);
		if (ret)
			goto out;
	}
	if (r->cfg->quiet_wait_secs > 0)
		wait_quiet(r->cfg);
	ret = start_thread(&r->peer, peer_main, r, 1, pin);
	if (ret)
		goto out;
	ret = start_thread(&srv, server_main, r, 0, pin);
	if (ret) {
		shutdown(r->peer_fd, SHUT_RDWR);
		pthread_join(r->peer, NULL);
		goto out;
	}
	pthread_join(srv, NULL);
	pthread_join(r->peer, NULL);
	/* The side that failed first; the other one saw the shutdown. */
	ret = r->srv_err;
	if (!ret || ((ret == -EPIPE || ret == -ECONNRESET) && r->peer_err))
		ret = r->peer_err;
out:
	close(r->srv_fd);
	close(r->peer_fd);
	if (r->pr >= 0)
		close(r->pr);
	if (r->pw >= 0)
		close(r->pw);
	return ret;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median_of(const struct sample *s, unsigned int n, size_t field)
{
	double v[MAX_REPS];

	for (unsigned int i = 0; i < n; i++)
		memcpy(&v[i], (const uint8_t *)&s[i] + field, sizeof(double));
	qsort(v, n, sizeof(double), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static struct sample median_sample(const struct sample *s, unsigned int n)
{
	struct sample m;

	m.gibps = median_of(s, n, offsetof(struct sample, gibps));
	m.srv_us_req = median_of(s, n, offsetof(struct sample, srv_us_req));
	m.srv_us_mib = median_of(s, n, offsetof(struct sample, srv_us_mib));
	m.peer_us_mib = median_of(s, n, offsetof(struct sample, peer_us_mib));
	m.all_us_mib = median_of(s, n, offsetof(struct sample, all_us_mib));
	m.bg_cpus = median_of(s, n, offsetof(struct sample, bg_cpus));
	m.reqs = median_of(s, n, offsetof(struct sample, reqs));
	return m;
}

static void fmt_size(size_t v, char *buf, size_t len)
{
	if (v >= (1u << 20) && !(v % (1u << 20)))
		snprintf(buf, len, "%zu MiB", v >> 20);
	else if (v >= 1024 && !(v % 1024))
		snprintf(buf, len, "%zu KiB", v >> 10);
	else
		snprintf(buf, len, "%zu B", v);
}

/*
 * How fast this CPU copies memory right now, in GiB/s of thread CPU time.
 * The VM's vCPUs can be slowed by the host without any steal time showing
 * up, and that inflates every CPU figure of the runs next to it; this puts
 * a number on it.  256 KiB stays in L2, so it measures the core, not DRAM.
 */
static double cpu_ref_gibps(void)
{
	static uint8_t a[256 * 1024], b[256 * 1024];
	double c0 = now_secs(CLOCK_THREAD_CPUTIME_ID), c1;
	unsigned int n = 0;

	memset(a, 1, sizeof(a));
	do {
		for (int i = 0; i < 16; i++, n++) {
			memcpy(b, a, sizeof(a));
			/* Keep the copy from being optimised away. */
			__asm__ volatile("" : : "r"(b) : "memory");
		}
		c1 = now_secs(CLOCK_THREAD_CPUTIME_ID);
	} while (c1 - c0 < 0.02);
	return (double)n * sizeof(a) / GIB / (c1 - c0);
}

/*
 * One size in one layout and transport: every method, --reps times, the
 * methods interleaved within each round so that a slow spell of the host
 * hits them alike instead of one method's three runs.
 */
static int run_group(struct run *r, enum direction d, enum layout l,
		     enum transport t, size_t size)
{
	const struct cfg *c = r->cfg;
	struct sample s[NR_METHODS][MAX_REPS], med[NR_METHODS];
	double ref[MAX_REPS];
	bool have[NR_METHODS] = { false };
	char sz[32];
	int ret = 0;

	fmt_size(size, sz, sizeof(sz));
	r->dir = d;
	r->lay = l;
	r->tr = t;
	r->size = size;
	for (unsigned int k = 0; k < c->reps; k++) {
		ref[k] = cpu_ref_gibps();
		for (int m = 0; m < NR_METHODS; m++) {
			if (!c->want_method[m] || !method_labels[d][m])
				continue;
			r->m = (enum method)m;
			/* A run that shared the CPUs with other work is redone. */
			for (unsigned int n = 0;; n++) {
				ret = run_once(r);
				if (ret || r->s.bg_cpus <= c->max_bg)
					break;
				if (n == c->retries) {
					nr_kept_busy++;
					break;
				}
				nr_rerun++;
			}
			if (ret) {
				fprintf(stderr, "%s %s %s %s %s: %s\n",
					dir_names[d], layout_names[l],
					transport_names[t], sz, method_names[m],
					ret == -EILSEQ ? "data mismatch" :
							 strerror(-ret));
				return ret;
			}
			s[m][k] = r->s;
			have[m] = true;
		}
	}
	qsort(ref, c->reps, sizeof(double), cmp_double);
	for (int m = 0; m < NR_METHODS; m++) {
		char rel_t[32] = "-", rel_c[32] = "-";

		if (!have[m])
			continue;
		med[m] = median_sample(s[m], c->reps);
		if (have[M_COPY] && m != M_COPY) {
			snprintf(rel_t, sizeof(rel_t), "%.2fx",
				 med[m].gibps / med[M_COPY].gibps);
			snprintf(rel_c, sizeof(rel_c), "%.2fx",
				 med[m].srv_us_mib / med[M_COPY].srv_us_mib);
		}
		printf("| %s | %s | %s | %s | %.2f | %.1f | %.1f | %.1f | "
		       "%.1f | %.2f | %.0f | %s | %s | %.0f |\n",
		       layout_names[l], transport_names[t], sz,
		       method_labels[d][m], med[m].gibps, med[m].srv_us_req,
		       med[m].srv_us_mib, med[m].peer_us_mib,
		       med[m].all_us_mib, med[m].bg_cpus, ref[c->reps / 2],
		       rel_t, rel_c, med[m].reqs);
		fprintf(stderr, "%s %s %s %s %s: %.2f GiB/s, %.1f us/MiB\n",
			dir_names[d], layout_names[l], transport_names[t], sz,
			method_names[m], med[m].gibps, med[m].srv_us_mib);
	}
	fflush(stdout);
	return 0;
}

static void fill_random(uint8_t *p, size_t len, uint64_t seed)
{
	uint64_t x = seed | 1;

	/* xorshift64*: incompressible enough, and fast. */
	for (size_t i = 0; i + 8 <= len; i += 8) {
		uint64_t v;

		x ^= x >> 12;
		x ^= x << 25;
		x ^= x >> 27;
		v = x * 0x2545f4914f6cdd1dull;
		memcpy(p + i, &v, 8);
	}
}

static int write_all(int fd, const uint8_t *p, size_t len, off_t off)
{
	while (len) {
		ssize_t n = pwrite(fd, p, len, off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
		off += n;
	}
	return 0;
}

static void vol_close(struct vol *v, bool keep)
{
	if (v->single >= 0)
		close(v->single);
	for (int m = 0; m < NR_MEMBERS; m++)
		if (v->member[m] >= 0)
			close(v->member[m]);
	if (!keep)
		for (int i = 0; i <= NR_MEMBERS; i++)
			if (v->path[i][0])
				unlink(v->path[i]);
	if (v->image)
		munmap(v->image, v->size);
}

/*
 * The image lives in memory too: the read peer checks replies against it
 * and the write peer sends from it, like a client's page cache.  fsync so
 * that ext4 has allocated and written the blocks before the read cells;
 * the pages stay cached.
 */
static int vol_create(struct vol *v, const struct cfg *c)
{
	int ret;

	memset(v, 0, sizeof(*v));
	v->single = -1;
	for (int m = 0; m < NR_MEMBERS; m++)
		v->member[m] = -1;
	v->size = c->vol_size;
	v->image = mmap(NULL, v->size, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (v->image == MAP_FAILED) {
		v->image = NULL;
		return -errno;
	}
	fill_random(v->image, v->size, (uint64_t)time(NULL));

	for (int i = 0; i <= NR_MEMBERS; i++) {
		int fd;

		if (i == 0)
			snprintf(v->path[i], PATH_MAX, "%s/splice-bench.%d.vol",
				 c->dir, (int)getpid());
		else
			snprintf(v->path[i], PATH_MAX, "%s/splice-bench.%d.m%d",
				 c->dir, (int)getpid(), i - 1);
		fd = open(v->path[i], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC,
			  0600);
		if (fd < 0) {
			ret = -errno;
			v->path[i][0] = 0;
			return ret;
		}
		if (i == 0)
			v->single = fd;
		else
			v->member[i - 1] = fd;
	}
	ret = write_all(v->single, v->image, v->size, 0);
	if (ret)
		return ret;
	for (uint64_t k = 0; k < v->size / STRIPE_SIZE; k++) {
		ret = write_all(v->member[k % NR_MEMBERS],
				v->image + k * STRIPE_SIZE, STRIPE_SIZE,
				(off_t)(k / NR_MEMBERS * STRIPE_SIZE));
		if (ret)
			return ret;
	}
	if (fsync(v->single))
		return -errno;
	for (int m = 0; m < NR_MEMBERS; m++)
		if (fsync(v->member[m]))
			return -errno;
	return 0;
}

static int parse_size(const char *s, size_t *out)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	default: break;
	}
	if (end == s || *end || !v)
		return -EINVAL;
	*out = (size_t)v;
	return 0;
}

/* Mark each comma-separated name of s in want[]. */
static int parse_set(const char *s, const char *const *names, size_t n,
		     bool *want)
{
	char buf[256], *save = NULL, *tok;

	if (strlen(s) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, s);
	memset(want, 0, n * sizeof(*want));
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		size_t i;

		for (i = 0; i < n && strcmp(tok, names[i]); i++)
			;
		if (i == n) {
			fprintf(stderr, "unknown name '%s'\n", tok);
			return -EINVAL;
		}
		want[i] = true;
	}
	return 0;
}

static int parse_sizes(const char *s, struct cfg *c)
{
	char buf[256], *save = NULL, *tok;

	if (strlen(s) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, s);
	c->nr_sizes = 0;
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (c->nr_sizes == MAX_SIZES ||
		    parse_size(tok, &c->sizes[c->nr_sizes]))
			return -EINVAL;
		c->nr_sizes++;
	}
	return c->nr_sizes ? 0 : -EINVAL;
}


static void usage(FILE *f)
{
	fprintf(f,
"usage: splice-bench [options] DIR\n"
"  Creates a volume image in DIR (one file + 4 stripe members), times NBD\n"
"  read replies and write payloads moved by each method, prints markdown.\n"
"  -d, --dirs LIST        read,write                      (both)\n"
"  -m, --methods LIST     copy,copy-piece,sendfile,splice,splice-sephdr\n"
"                                                  (copy,sendfile,splice)\n"
"  -l, --layouts LIST     single,stripe                   (both)\n"
"  -t, --transports LIST  unix,tcp                        (both)\n"
"  -s, --sizes LIST       e.g. 4K,64K,256K,1M,4M,32M      (those)\n"
"  -T, --time SECS        timed part of each run          (0.3)\n"
"  -w, --warmup SECS      untimed start of each run       (0.1)\n"
"  -r, --reps N           runs per cell, median reported  (3)\n"
"  -S, --volume-size MiB  image size                      (256)\n"
"      --no-pin           do not pin server/peer threads to CPUs 0/1\n"
"      --keep             leave the data files in DIR\n"
"      --quiet-wait SECS  before each run wait up to SECS for the machine\n"
"                         to be nearly idle        (10; 0 = do not wait)\n"
"      --quiet-cpus X     nearly idle: at most X CPUs busy (0.25)\n"
"      --max-bg X         redo a run whose bg CPUs exceed X (0.3)\n"
"      --retries N        ... at most N times, then keep it (4)\n"
"  Columns: srv = the thread that sends replies / stores payloads (the\n"
"  server's event loop); peer = the client thread; machine = all CPUs\n"
"  (/proc/stat); bg CPUs = machine busy time not on either thread's\n"
"  clock, per second of run (other processes, kworkers); ref = memcpy\n"
"  speed of the main thread's CPU before each round (host slowdowns).\n");
}

static void print_env(const struct cfg *c)
{
	struct utsname u;
	struct statfs sf;
	int srv, peer, sndbuf = 0, p[2], pipe_sz = 0;
	socklen_t sl = sizeof(sndbuf);
	const char *fs = "other";

	uname(&u);
	if (!statfs(c->dir, &sf)) {
		if (sf.f_type == 0x01021994)
			fs = "tmpfs";
		else if (sf.f_type == 0xEF53)
			fs = "ext2/3/4";
		else if (sf.f_type == 0x58465342)
			fs = "xfs";
		else if (sf.f_type == 0x9123683E)
			fs = "btrfs";
	}
	if (!connect_unix(&srv, &peer)) {
		getsockopt(srv, SOL_SOCKET, SO_SNDBUF, &sndbuf, &sl);
		close(srv);
		close(peer);
	}
	if (!pipe2(p, O_CLOEXEC)) {
		fcntl(p[1], F_SETPIPE_SZ, PIPE_WANT);
		pipe_sz = fcntl(p[1], F_GETPIPE_SZ);
		close(p[0]);
		close(p[1]);
	}
	printf("## splice-bench: %s (%s)\n\n", c->dir, fs);
	printf("kernel %s %s, %ld CPUs online, threads %s; volume %" PRIu64
	       " MiB; stripe %u x %u KiB; unix SO_SNDBUF reads back %d; "
	       "pipe %d bytes; %u runs x (%.2f s warm-up + %.2f s timed) per "
	       "cell, medians\n\n",
	       u.release, u.machine, sysconf(_SC_NPROCESSORS_ONLN),
	       c->pin ? "pinned (server CPU 0, peer CPU 1)" : "not pinned",
	       c->vol_size >> 20, NR_MEMBERS, STRIPE_SIZE >> 10, sndbuf,
	       pipe_sz, c->reps, c->warm_secs, c->run_secs);
}

static void print_table_head(enum direction d)
{
	printf("### %s: %s\n\n", d == DIR_READ ? "Read replies" :
						 "Write payloads",
	       d == DIR_READ ? "server sends header + payload, peer recv()s" :
			       "peer sends header + payload, server stores it");
	printf("| layout | transport | size | method | GiB/s | srv CPU "
	       "us/req | srv CPU us/MiB | peer CPU us/MiB | machine CPU "
	       "us/MiB | bg CPUs | ref GiB/s | GiB/s vs copy | srv CPU/MiB vs "
	       "copy | reqs |\n");
	printf("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	       "---:|\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "dirs", required_argument, NULL, 'd' },
		{ "methods", required_argument, NULL, 'm' },
		{ "layouts", required_argument, NULL, 'l' },
		{ "transports", required_argument, NULL, 't' },
		{ "sizes", required_argument, NULL, 's' },
		{ "time", required_argument, NULL, 'T' },
		{ "warmup", required_argument, NULL, 'w' },
		{ "reps", required_argument, NULL, 'r' },
		{ "volume-size", required_argument, NULL, 'S' },
		{ "no-pin", no_argument, NULL, 'P' },
		{ "keep", no_argument, NULL, 'K' },
		{ "quiet-wait", required_argument, NULL, 'Q' },
		{ "quiet-cpus", required_argument, NULL, 'C' },
		{ "max-bg", required_argument, NULL, 'B' },
		{ "retries", required_argument, NULL, 'R' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct cfg c = { .vol_size = 256ull << 20, .run_secs = 0.3,
			 .warm_secs = 0.1, .reps = 3, .pin = true,
			 .quiet_wait_secs = 10, .quiet_cpus = 0.25,
			 .max_bg = 0.3, .retries = 4 };
	struct vol v;
	struct run r;
	unsigned long mib;
	size_t cells = 0;
	int opt, ret = 0;

	for (int i = 0; i < NR_DIRS; i++)
		c.want_dir[i] = true;
	for (int i = 0; i < NR_LAYOUTS; i++)
		c.want_layout[i] = true;
	for (int i = 0; i < NR_TRANSPORTS; i++)
		c.want_transport[i] = true;
	c.want_method[M_COPY] = c.want_method[M_SENDFILE] =
		c.want_method[M_SPLICE] = true;
	parse_sizes("4K,64K,256K,1M,4M,32M", &c);

	while ((opt = getopt_long(argc, argv, "d:m:l:t:s:T:w:r:S:h", opts,
				  NULL)) != -1) {
		switch (opt) {
		case 'd':
			ret = parse_set(optarg, dir_names, NR_DIRS, c.want_dir);
			break;
		case 'm':
			ret = parse_set(optarg, method_names, NR_METHODS,
					c.want_method);
			break;
		case 'l':
			ret = parse_set(optarg, layout_names, NR_LAYOUTS,
					c.want_layout);
			break;
		case 't':
			ret = parse_set(optarg, transport_names, NR_TRANSPORTS,
					c.want_transport);
			break;
		case 's':
			ret = parse_sizes(optarg, &c);
			break;
		case 'T':
			c.run_secs = strtod(optarg, NULL);
			ret = c.run_secs > 0 ? 0 : -EINVAL;
			break;
		case 'w':
			c.warm_secs = strtod(optarg, NULL);
			ret = c.warm_secs >= 0 ? 0 : -EINVAL;
			break;
		case 'r':
			c.reps = (unsigned int)strtoul(optarg, NULL, 10);
			ret = c.reps >= 1 && c.reps <= MAX_REPS ? 0 : -EINVAL;
			break;
		case 'S':
			mib = strtoul(optarg, NULL, 10);
			c.vol_size = (uint64_t)mib << 20;
			ret = mib ? 0 : -EINVAL;
			break;
		case 'P':
			c.pin = false;
			break;
		case 'K':
			c.keep = true;
			break;
		case 'Q':
			c.quiet_wait_secs = strtod(optarg, NULL);
			ret = c.quiet_wait_secs >= 0 ? 0 : -EINVAL;
			break;
		case 'C':
			c.quiet_cpus = strtod(optarg, NULL);
			ret = c.quiet_cpus >= 0 ? 0 : -EINVAL;
			break;
		case 'B':
			c.max_bg = strtod(optarg, NULL);
			ret = c.max_bg > 0 ? 0 : -EINVAL;
			break;
		case 'R':
			c.retries = (unsigned int)strtoul(optarg, NULL, 10);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
		if (ret) {
			fprintf(stderr, "bad value for -%c: %s\n", opt, optarg);
			return 2;
		}
	}
	if (optind != argc - 1) {
		usage(stderr);
		return 2;
	}
	c.dir = argv[optind];
	/*
	 * splice and sendfile take no MSG_NOSIGNAL: a peer that gives up
	 * must show as EPIPE, not kill the run.
	 */
	signal(SIGPIPE, SIG_IGN);
	if (c.vol_size % ((uint64_t)NR_MEMBERS * STRIPE_SIZE)) {
		fprintf(stderr, "volume size must be a multiple of %u KiB\n",
			NR_MEMBERS * STRIPE_SIZE >> 10);
		return 2;
	}
	for (unsigned int i = 0; i < c.nr_sizes; i++) {
		/* Requests sweep the volume back to back and wrap. */
		if (c.sizes[i] > UINT32_MAX || c.vol_size % c.sizes[i]) {
			fprintf(stderr, "size %zu does not divide the volume\n",
				c.sizes[i]);
			return 2;
		}
		if (c.sizes[i] > c.max_size)
			c.max_size = c.sizes[i];
	}
	for (int d = 0; d < NR_DIRS; d++)
		for (int m = 0; m < NR_METHODS; m++)
			if (c.want_dir[d] && c.want_method[m] &&
			    method_labels[d][m])
				cells++;
	cells *= (size_t)(c.want_layout[0] + c.want_layout[1]) *
		 (size_t)(c.want_transport[0] + c.want_transport[1]) *
		 c.nr_sizes;

	memset(&r, 0, sizeof(r));
	r.cfg = &c;
	r.srv_buf = mmap(NULL, c.max_size, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	r.peer_buf = mmap(NULL, c.max_size, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	r.pieces = calloc(c.max_size / STRIPE_SIZE + 2, sizeof(*r.pieces));
	r.iov = calloc(c.max_size / STRIPE_SIZE + 2, sizeof(*r.iov));
	if (r.srv_buf == MAP_FAILED || r.peer_buf == MAP_FAILED ||
	    !r.pieces || !r.iov) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}

	fprintf(stderr, "creating %" PRIu64 " MiB volume in %s ...\n",
		c.vol_size >> 20, c.dir);
	ret = vol_create(&v, &c);
	if (ret) {
		fprintf(stderr, "creating the volume: %s\n", strerror(-ret));
		vol_close(&v, c.keep);
		return 1;
	}
	r.vol = &v;
	if (c.pin && sysconf(_SC_NPROCESSORS_ONLN) >= 2) {
		cpu_set_t set;

		/* The CPU reference is taken on the server thread's CPU. */
		CPU_ZERO(&set);
		CPU_SET(0, &set);
		sched_setaffinity(0, sizeof(set), &set);
	}
	fprintf(stderr, "%zu cells, about %.0f s\n", cells,
		(double)cells * c.reps * (c.run_secs + c.warm_secs + 0.07));
	print_env(&c);

	for (int d = 0; d < NR_DIRS && !ret; d++) {
		bool any = false;

		if (!c.want_dir[d])
			continue;
		for (int m = 0; m < NR_METHODS; m++)
			any |= c.want_method[m] && method_labels[d][m];
		if (!any)
			continue;
		print_table_head((enum direction)d);
		for (int l = 0; l < NR_LAYOUTS && !ret; l++) {
			if (!c.want_layout[l])
				continue;
			for (int t = 0; t < NR_TRANSPORTS && !ret; t++) {
				if (!c.want_transport[t])
					continue;
				for (unsigned int si = 0;
				     si < c.nr_sizes && !ret; si++)
					ret = run_group(&r, (enum direction)d,
							(enum layout)l,
							(enum transport)t,
							c.sizes[si]);
			}
		}
		printf("\n");
	}
	if (c.quiet_wait_secs > 0)
		printf("%u runs started without the machine going quiet "
		       "(under %.2f busy CPUs) within %.0f s\n\n",
		       nr_busy_starts, c.quiet_cpus, c.quiet_wait_secs);
	printf("%u runs redone because other work took over %.2f CPUs "
	       "during them; %u kept anyway after %u retries\n\n",
	       nr_rerun, c.max_bg, nr_kept_busy, c.retries);
	vol_close(&v, c.keep);
	munmap(r.srv_buf, c.max_size);
	munmap(r.peer_buf, c.max_size);
	free(r.pieces);
	free(r.iov);
	return ret ? 1 : 0;
}
