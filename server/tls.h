/* SPDX-License-Identifier: MIT */
/*
 * tls.h - TLS for bionbd's connections (GnuTLS): the credentials loaded
 * once at start-up, and per connection a non-blocking session that
 * conn.c reads and writes through once NBD_OPT_STARTTLS succeeded.
 *
 * Everything a handshake needs is in memory before the server drops root
 * (-u/-g): certificates, keys and the PSK table are read at start-up, never
 * again.
 */
#ifndef BIONBD_TLS_H
#define BIONBD_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/*
 * The largest TLS record's payload: writes of this much are one record, so
 * a write retried after -EAGAIN (which GnuTLS requires to be the same)
 * needs nothing remembered but its length.
 */
#define TLS_RECORD_BYTES 16384u

enum srv_tls_mode {
	SRV_TLS_OFF, /* NBD_OPT_STARTTLS gets NBD_REP_ERR_POLICY */
	SRV_TLS_ON, /* clients may upgrade (SELECTIVETLS, no TLS-only export) */
	SRV_TLS_REQUIRE, /* clients must upgrade first (FORCEDTLS) */
};

struct srv_tls;
struct gnutls_session_int;
typedef struct gnutls_session_int *tls_session;

int srv_tls_mode_parse(const char *s, enum srv_tls_mode *mode);
const char *srv_tls_mode_name(enum srv_tls_mode mode);

/**
 * srv_tls_load - read the credentials
 * @certdir: NULL, or a directory with server-cert.pem and server-key.pem,
 *           and ca-cert.pem (needed by @verify_peer) and ca-crl.pem if
 *           present
 * @pskfile: NULL, or a psktool file: lines of "identity:hexkey"
 * @verify_peer: clients must present a certificate ca-cert.pem signed
 *
 * At least one of @certdir and @pskfile.  On failure *@which is the
 * setting at fault ("tls-certificates", "tls-psk", "tls-verify-peer"; NULL
 * for none of them) and @err says what is wrong, for the caller to put
 * after that setting as the user gave it (a flag, or a line of the
 * configuration file).  Returns 0 or -errno.
 */
int srv_tls_load(struct srv_tls **out, const char *certdir,
		 const char *pskfile, bool verify_peer, const char **which,
		 char *err, size_t errlen);
void srv_tls_free(struct srv_tls *t);

/* A server session on @fd (non-blocking).  Returns 0 or -errno. */
int tls_session_new(struct srv_tls *t, int fd, tls_session *out);
/* @say_bye: tls_bye first. */
void tls_session_free(tls_session s, bool say_bye);
/*
 * One try at ending the session (close_notify) without waiting: the
 * socket is non-blocking and the client may not be reading.
 */
void tls_bye(tls_session s);

/*
 * One step of the handshake: 0 when done, -EAGAIN to be called again when
 * the socket is readable (*@want_write false) or writable, or -EPROTO
 * (already logged, once per client).
 */
int tls_handshake(tls_session s, bool *want_write);

/*
 * recv(2) and send(2) through the session: bytes, 0 at the end of the
 * stream, or -1 with errno set (EAGAIN, EINTR, or ECONNRESET for anything
 * fatal).  After EAGAIN, tls_send must be called again with the same
 * buffer and length.
 */
ssize_t tls_recv(tls_session s, void *buf, size_t len);
ssize_t tls_send(tls_session s, const void *buf, size_t len);

/*
 * Bytes waiting in the session, decrypted or read ahead from the socket:
 * the socket itself may not say so.
 */
bool tls_pending(tls_session s);

/* "TLS1.3 PSK 'alice'" or similar, for the log. */
void tls_describe(tls_session s, char *buf, size_t len);

#endif /* BIONBD_TLS_H */
