// SPDX-License-Identifier: MIT
/*
 * tls.c - GnuTLS behind tls.h: credentials (X.509 from a directory laid
 * out as nbdkit and qemu expect, and psktool's PSK files), and the
 * non-blocking session calls conn.c makes.
 *
 * GnuTLS reports its own errors as negative codes; here they become the
 * errno values the rest of the server already handles for plain sockets,
 * so conn.c has one path with a different pair of calls under it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <gnutls/gnutls.h>

#include <bionbd/nbdl.h>

#include "tls.h"

/* psktool's format: "identity:hexkey" per line. */
struct psk_entry {
	char *identity;
	unsigned char *key;
	unsigned int key_len;
};

struct srv_tls {
	gnutls_certificate_credentials_t x509; /* NULL: no certificates */
	gnutls_psk_server_credentials_t psk; /* NULL: no PSK */
	gnutls_priority_t prio;
	bool verify_peer;
	struct psk_entry *keys;
	unsigned int nr_keys;
};

/* PSK lookups have no user pointer: the one table, read-only once loaded. */
static const struct srv_tls *psk_table;

int srv_tls_mode_parse(const char *s, enum srv_tls_mode *mode)
{
	if (!strcmp(s, "off"))
		*mode = SRV_TLS_OFF;
	else if (!strcmp(s, "on"))
		*mode = SRV_TLS_ON;
	else if (!strcmp(s, "require"))
		*mode = SRV_TLS_REQUIRE;
	else
		return -EINVAL;
	return 0;
}

const char *srv_tls_mode_name(enum srv_tls_mode mode)
{
	return mode == SRV_TLS_REQUIRE ? "require" :
	       mode == SRV_TLS_ON      ? "on" :
					 "off";
}

/* ---- credentials ---- */

static int hexval(int ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

static int psk_add(struct srv_tls *t, const char *id, const char *hex)
{
	size_t n = strlen(hex);
	struct psk_entry *k, *tab;

	tab = realloc(t->keys, (t->nr_keys + 1) * sizeof(*tab));
	if (!tab)
		return -ENOMEM;
	t->keys = tab;
	k = &tab[t->nr_keys];
	k->identity = strdup(id);
	k->key = malloc(n / 2);
	if (!k->identity || !k->key) {
		free(k->identity);
		free(k->key);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n / 2; i++)
		k->key[i] = (unsigned char)(hexval(hex[2 * i]) << 4 |
					    hexval(hex[2 * i + 1]));
	k->key_len = (unsigned int)(n / 2);
	t->nr_keys++;
	return 0;
}

/*
 * Every line checked: a typo in a key file is a start-up error, not a
 * client that mysteriously cannot connect.
 */
static int psk_load(struct srv_tls *t, const char *path, char *err,
		    size_t errlen)
{
	FILE *f = fopen(path, "r");
	char line[1024];
	unsigned int lineno = 0;
	int r = 0;

	if (!f) {
		r = -errno;
		snprintf(err, errlen, "%s", strerror(-r));
		return r;
	}
	while (fgets(line, sizeof(line), f)) {
		char *colon, *hex;
		size_t n;

		lineno++;
		n = strcspn(line, "\r\n");
		if (line[n] == 0 && !feof(f)) {
			snprintf(err, errlen, "line %u: too long", lineno);
			r = -EINVAL;
			goto out;
		}
		line[n] = 0;
		if (!line[0] || line[0] == '#')
			continue;
		colon = strrchr(line, ':');
		hex = colon ? colon + 1 : NULL;
		n = hex ? strlen(hex) : 0;
		if (!colon || colon == line || !n || n % 2 ||
		    strspn(hex, "0123456789abcdefABCDEF") != n) {
			snprintf(err, errlen,
				 "line %u: expected identity:hexkey (as "
				 "psktool writes)",
				 lineno);
			r = -EINVAL;
			goto out;
		}
		*colon = 0;
		r = psk_add(t, line, hex);
		if (r) {
			snprintf(err, errlen, "out of memory");
			goto out;
		}
	}
	if (ferror(f)) {
		r = -EIO;
		snprintf(err, errlen, "read error");
	} else if (!t->nr_keys) {
		r = -EINVAL;
		snprintf(err, errlen, "no keys in the file");
	}
out:
	fclose(f);
	return r;
}

static int psk_lookup(gnutls_session_t s, const char *identity,
		      gnutls_datum_t *key)
{
	const struct srv_tls *t = psk_table;

	for (unsigned int i = 0; t && i < t->nr_keys; i++) {
		if (strcmp(t->keys[i].identity, identity))
			continue;
		key->data = gnutls_malloc(t->keys[i].key_len);
		if (!key->data)
			return -1;
		memcpy(key->data, t->keys[i].key, t->keys[i].key_len);
		key->size = t->keys[i].key_len;
		return 0;
	}
	nbdl_log(NBDL_DEBUG, "TLS: unknown PSK identity '%s'", identity);
	return -1;
}

static bool exists(const char *path)
{
	return access(path, F_OK) == 0;
}

static int x509_load(struct srv_tls *t, const char *dir, bool verify_peer,
		     const char **which, char *err, size_t errlen)
{
	char cert[4096], key[4096], ca[4096], crl[4096];
	struct stat st;
	int r;

	errno = 0;
	st.st_mode = 0;
	if (stat(dir, &st) || !S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "%s",
			 errno ? strerror(errno) : "not a directory");
		return -EINVAL;
	}
	snprintf(cert, sizeof(cert), "%s/server-cert.pem", dir);
	snprintf(key, sizeof(key), "%s/server-key.pem", dir);
	snprintf(ca, sizeof(ca), "%s/ca-cert.pem", dir);
	snprintf(crl, sizeof(crl), "%s/ca-crl.pem", dir);
	if (gnutls_certificate_allocate_credentials(&t->x509)) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	r = gnutls_certificate_set_x509_key_file(t->x509, cert, key,
						 GNUTLS_X509_FMT_PEM);
	if (r < 0) {
		snprintf(err, errlen, "server-cert.pem and server-key.pem: %s",
			 gnutls_strerror(r));
		return -EINVAL;
	}
	if (exists(ca)) {
		r = gnutls_certificate_set_x509_trust_file(t->x509, ca,
							   GNUTLS_X509_FMT_PEM);
		/*
		 * A file with no certificate in it is no CA: with
		 * --tls-verify-peer every client would be refused, for a
		 * reason found only when one connects.
		 */
		if (r <= 0) {
			snprintf(err, errlen, "ca-cert.pem: %s",
				 r ? gnutls_strerror(r) :
				     "no certificate in it");
			return -EINVAL;
		}
	} else if (verify_peer) {
		*which = "tls-verify-peer";
		snprintf(err, errlen,
			 "%s missing: nothing to verify client certificates "
			 "against",
			 ca);
		return -EINVAL;
	}
	if (exists(crl)) {
		r = gnutls_certificate_set_x509_crl_file(t->x509, crl,
							 GNUTLS_X509_FMT_PEM);
		if (r < 0) {
			snprintf(err, errlen, "ca-crl.pem: %s",
				 gnutls_strerror(r));
			return -EINVAL;
		}
	}
	return 0;
}

/* AES and carry-less multiply in hardware: AES-GCM beats ChaCha20. */
static bool cpu_fast_aes(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_cpu_init();
	return __builtin_cpu_supports("aes") && __builtin_cpu_supports("pclmul");
#elif defined(__aarch64__)
	return (getauxval(AT_HWCAP) & (1ul << 3)) && /* HWCAP_AES */
	       (getauxval(AT_HWCAP) & (1ul << 4)); /* HWCAP_PMULL */
#else
	return false;
#endif
}

int srv_tls_load(struct srv_tls **out, const char *certdir,
		 const char *pskfile, bool verify_peer, const char **which,
		 char *err, size_t errlen)
{
	struct srv_tls *t = calloc(1, sizeof(*t));
	char prio[128];
	int r;

	*which = NULL;
	if (!t) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	t->verify_peer = verify_peer;
	if (verify_peer && !certdir) {
		*which = "tls-verify-peer";
		snprintf(err, errlen,
			 "needs a certificate directory (its ca-cert.pem "
			 "signs the client certificates)");
		r = -EINVAL;
		goto fail;
	}
	if (certdir) {
		*which = "tls-certificates";
		r = x509_load(t, certdir, verify_peer, which, err, errlen);
		if (r)
			goto fail;
	}
	if (pskfile) {
		*which = "tls-psk";
		r = psk_load(t, pskfile, err, errlen);
		if (r)
			goto fail;
		*which = NULL;
		if (gnutls_psk_allocate_server_credentials(&t->psk)) {
			snprintf(err, errlen, "out of memory");
			r = -ENOMEM;
			goto fail;
		}
		gnutls_psk_set_server_credentials_function(t->psk, psk_lookup);
		psk_table = t;
	}
	/*
	 * PSK key exchanges are not in NORMAL; certificates' are.  GnuTLS
	 * follows the client's cipher order, and libnbd's first choice that
	 * a PSK (bound to SHA-256) allows is ChaCha20: where the CPU does AES
	 * in hardware, AES-GCM costs a tenth of that per byte, so there the
	 * server's order decides, with ChaCha20 last.
	 */
	snprintf(prio, sizeof(prio), "NORMAL%s%s",
		 pskfile ? ":+ECDHE-PSK:+DHE-PSK:+PSK" : "",
		 cpu_fast_aes() ? ":%SERVER_PRECEDENCE:-CHACHA20-POLY1305"
				  ":+CHACHA20-POLY1305" :
				  "");
	*which = NULL;
	r = gnutls_priority_init(&t->prio, prio, NULL);
	if (r < 0) {
		snprintf(err, errlen, "TLS priority: %s", gnutls_strerror(r));
		r = -EINVAL;
		goto fail;
	}
	*out = t;
	return 0;
fail:
	srv_tls_free(t);
	return r;
}

void srv_tls_free(struct srv_tls *t)
{
	if (!t)
		return;
	if (psk_table == t)
		psk_table = NULL;
	if (t->prio)
		gnutls_priority_deinit(t->prio);
	if (t->x509)
		gnutls_certificate_free_credentials(t->x509);
	if (t->psk)
		gnutls_psk_free_server_credentials(t->psk);
	for (unsigned int i = 0; i < t->nr_keys; i++) {
		free(t->keys[i].identity);
		/* Key material does not linger in freed heap. */
		explicit_bzero(t->keys[i].key, t->keys[i].key_len);
		free(t->keys[i].key);
	}
	free(t->keys);
	free(t);
}

/* ---- sessions ---- */

/*
 * Bytes read from the socket ahead of GnuTLS.  Left to itself it reads a
 * record's 5-byte header, then its body: two recv calls per record.  Here
 * one recv takes whatever is there, up to two full records, and GnuTLS
 * takes its pieces from that: a stream of 16 KiB records costs one call
 * per record, a pipeline of 4 KiB writes one call for several.
 */
#define TLS_READAHEAD_BYTES (2 * (TLS_RECORD_BYTES + 512))

struct tls_io {
	int fd;
	size_t off, len;
	uint8_t buf[TLS_READAHEAD_BYTES];
};

static ssize_t tls_pull(gnutls_transport_ptr_t p, void *data, size_t len)
{
	struct tls_io *io = p;
	size_t n;

	if (io->off == io->len) {
		ssize_t r = recv(io->fd, io->buf, sizeof(io->buf), 0);

		if (r <= 0)
			return r; /* errno tells GnuTLS EAGAIN from a failure */
		io->off = 0;
		io->len = (size_t)r;
	}
	n = io->len - io->off < len ? io->len - io->off : len;
	memcpy(data, io->buf + io->off, n);
	io->off += n;
	return (ssize_t)n;
}

static ssize_t tls_push(gnutls_transport_ptr_t p, const void *data,
			size_t len)
{
	return send(((struct tls_io *)p)->fd, data, len, MSG_NOSIGNAL);
}

/* A record's header and body in one call. */
static ssize_t tls_vec_push(gnutls_transport_ptr_t p, const giovec_t *iov,
			    int iovcnt)
{
	struct msghdr msg = { .msg_iov = (struct iovec *)iov,
			      .msg_iovlen = (size_t)iovcnt };

	return sendmsg(((struct tls_io *)p)->fd, &msg, MSG_NOSIGNAL);
}

int tls_session_new(struct srv_tls *t, int fd, tls_session *out)
{
	struct tls_io *io = malloc(sizeof(*io));
	gnutls_session_t s;
	int r;

	if (!io)
		return -ENOMEM;
	if (gnutls_init(&s, GNUTLS_SERVER | GNUTLS_NONBLOCK)) {
		free(io);
		return -ENOMEM;
	}
	io->fd = fd;
	io->off = io->len = 0;
	gnutls_transport_set_ptr(s, io);
	gnutls_transport_set_pull_function(s, tls_pull);
	gnutls_transport_set_push_function(s, tls_push);
	gnutls_transport_set_vec_push_function(s, tls_vec_push);
	r = gnutls_priority_set(s, t->prio);
	if (!r && t->x509)
		r = gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, t->x509);
	if (!r && t->psk)
		r = gnutls_credentials_set(s, GNUTLS_CRD_PSK, t->psk);
	if (r) {
		gnutls_deinit(s);
		free(io);
		return -ENOMEM;
	}
	if (t->verify_peer) {
		gnutls_certificate_server_set_request(s, GNUTLS_CERT_REQUIRE);
		gnutls_session_set_verify_cert(s, NULL, 0);
	}
	/* The connection's handshake timer bounds it, not GnuTLS. */
	gnutls_handshake_set_timeout(s, 0);
	*out = s;
	return 0;
}

void tls_bye(tls_session s)
{
	gnutls_bye(s, GNUTLS_SHUT_WR);
}

void tls_session_free(tls_session s, bool say_bye)
{
	if (!s)
		return;
	if (say_bye)
		tls_bye(s);
	free(gnutls_transport_get_ptr(s));
	gnutls_deinit(s);
}

int tls_handshake(tls_session s, bool *want_write)
{
	for (;;) {
		int r = gnutls_handshake(s);

		if (r == GNUTLS_E_SUCCESS)
			return 0;
		if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED) {
			*want_write = gnutls_record_get_direction(s) == 1;
			return -EAGAIN;
		}
		if (!gnutls_error_is_fatal(r))
			continue; /* a warning alert: go on */
		/* A client that just went is not worth an error line. */
		nbdl_log(r == GNUTLS_E_PREMATURE_TERMINATION ||
					 r == GNUTLS_E_PULL_ERROR ||
					 r == GNUTLS_E_PUSH_ERROR ?
				 NBDL_DEBUG :
				 NBDL_ERROR,
			 "TLS handshake failed: %s", gnutls_strerror(r));
		return -EPROTO;
	}
}

static ssize_t tls_errno(ssize_t r)
{
	if (r == GNUTLS_E_AGAIN)
		errno = EAGAIN;
	else if (r == GNUTLS_E_INTERRUPTED)
		errno = EINTR;
	else {
		nbdl_log(NBDL_DEBUG, "TLS: %s", gnutls_strerror((int)r));
		errno = ECONNRESET;
	}
	return -1;
}

ssize_t tls_recv(tls_session s, void *buf, size_t len)
{
	ssize_t r = gnutls_record_recv(s, buf, len);

	/* A client that hangs up without close_notify is still just gone. */
	if (r == GNUTLS_E_PREMATURE_TERMINATION)
		return 0;
	return r >= 0 ? r : tls_errno(r);
}

ssize_t tls_send(tls_session s, const void *buf, size_t len)
{
	ssize_t r = gnutls_record_send(s, buf, len);

	return r >= 0 ? r : tls_errno(r);
}

bool tls_pending(tls_session s)
{
	const struct tls_io *io = gnutls_transport_get_ptr(s);

	return gnutls_record_check_pending(s) > 0 || io->off < io->len;
}

void tls_describe(tls_session s, char *buf, size_t len)
{
	char *desc = gnutls_session_get_desc(s);
	const char *who = NULL;

	if (gnutls_auth_get_type(s) == GNUTLS_CRD_PSK)
		who = gnutls_psk_server_get_username(s);
	snprintf(buf, len, "%s%s%s%s", desc ? desc : "TLS",
		 who ? ", PSK identity '" : "", who ? who : "",
		 who ? "'" : "");
	gnutls_free(desc);
}
