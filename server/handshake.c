// SPDX-License-Identifier: MIT
/*
 * handshake.c - what the client's handshake bytes mean: client flags, then
 * options (EXPORT_NAME, ABORT, LIST, INFO, GO, STRUCTURED_REPLY,
 * LIST/SET_META_CONTEXT) until one of them starts transmission.  Replies
 * go to the connection's obuf; conn.c sends them.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handshake.h"
#include "log.h"
#include "wire.h"

/* ---- output ---- */

static int obuf_add(struct conn *c, const void *p, size_t n)
{
	/*
	 * Replies without data (ACK) pass p == NULL: memcpy with a NULL
	 * pointer is undefined even for 0 bytes, and UBSan stops the server.
	 */
	if (!n)
		return 0;
	if (c->olen + n > c->ocap) {
		size_t cap = c->ocap ? c->ocap * 2 : 256;
		uint8_t *b;

		while (cap < c->olen + n)
			cap *= 2;
		b = realloc(c->obuf, cap);
		if (!b)
			return -ENOMEM;
		c->obuf = b;
		c->ocap = cap;
	}
	memcpy(c->obuf + c->olen, p, n);
	c->olen += n;
	return 0;
}

static int opt_reply_hdr(struct conn *c, uint32_t type, uint32_t len)
{
	uint8_t h[OREP_BYTES];

	put64(h + OREP_MAGIC, NBD_REP_MAGIC);
	put32(h + OREP_OPTION, c->opt);
	put32(h + OREP_TYPE, type);
	put32(h + OREP_LEN, len);
	return obuf_add(c, h, sizeof(h));
}

static int opt_reply(struct conn *c, uint32_t type, const void *data,
		     uint32_t len)
{
	int r = opt_reply_hdr(c, type, len);

	return r ? r : obuf_add(c, data, len);
}

static int opt_error(struct conn *c, uint32_t type, const char *msg)
{
	return opt_reply(c, type, msg, (uint32_t)strlen(msg));
}

/* An NBD_REP_INFO of @type carrying a string. */
static int info_string(struct conn *c, uint16_t type, const char *s)
{
	uint32_t n = (uint32_t)strlen(s);
	uint8_t t[2];
	int r;

	put16(t, type);
	r = opt_reply_hdr(c, NBD_REP_INFO, 2 + n);
	r = r ?: obuf_add(c, t, 2);
	return r ?: obuf_add(c, s, n);
}

/* ---- options ---- */

static struct nbdl_export *find_export(struct conn *c, const uint8_t *name,
				       uint32_t len)
{
	struct server *srv = c->w->srv;

	if (len > NBD_MAX_STRING)
		return NULL;
	return nbdl_export_find(srv->exports, srv->nr_exports, name, len);
}

/* Of a name a client asked for, the bytes a log line shows. */
#define NAME_SHOWN 64

/*
 * An export name not served, refused: said (-v) with the client, since a
 * misspelt name in a client's configuration shows nowhere else.  The name
 * is the client's bytes, up to 4096 of anything: printable ASCII as it
 * is, any other byte (and the quote, the backslash) escaped, and cut.
 */
static void log_unknown_export(const struct conn *c, const char *opt,
			       const uint8_t *name, uint32_t len)
{
	char text[NAME_SHOWN * 4 + 1], size[32] = "";
	size_t n = 0;

	for (uint32_t i = 0; i < len && i < NAME_SHOWN; i++) {
		uint8_t b = name[i];

		if (b == '\'' || b == '\\')
			n += (size_t)snprintf(text + n, sizeof(text) - n,
					      "\\%c", b);
		else if (b < 0x20 || b > 0x7e)
			n += (size_t)snprintf(text + n, sizeof(text) - n,
					      "\\x%02x", b);
		else
			text[n++] = (char)b;
	}
	text[n] = '\0';
	if (len > NAME_SHOWN)
		snprintf(size, sizeof(size), " (%" PRIu32 " bytes)", len);
	srv_log_refused("connection %" PRIu64 " (%s): %s: no export '%s%s'%s: "
			"refused",
			c->id, c->peer, opt, text, size[0] ? "..." : "", size);
}

static void enter_transmission(struct conn *c, struct nbdl_export *e)
{
	/* Read by the statistics (main thread) without the worker. */
	__atomic_store_n(&c->exp, e, __ATOMIC_RELAXED);
	if (c->meta_exp != e)
		c->opts.meta_alloc = false;
	c->state = CS_TRANSMISSION;
	c->hdr_have = 0;
}

static int opt_export_name(struct conn *c)
{
	struct nbdl_export *e = find_export(c, c->optdata, c->optlen);
	uint8_t reply[EXPNAME_BYTES + EXPNAME_ZEROES];

	if (!e) {
		log_unknown_export(c, "NBD_OPT_EXPORT_NAME", c->optdata,
				   c->optlen);
		/* The option has no error reply: the spec says hang up. */
		c->close_after_send = true;
		return 0;
	}
	memset(reply, 0, sizeof(reply));
	put64(reply + EXPNAME_SIZE, e->size_bytes);
	put16(reply + EXPNAME_FLAGS,
	      nbdl_transmission_flags(e, c->opts.structured));
	enter_transmission(c, e);
	return obuf_add(c, reply,
			c->no_zeroes ? EXPNAME_BYTES : sizeof(reply));
}

static int opt_info_go(struct conn *c)
{
	const uint8_t *d = c->optdata;
	uint32_t namelen, len = c->optlen;
	uint16_t nreq;
	bool want_name = false, want_desc = false;
	struct nbdl_export *e;
	uint8_t info[INFO_BS_BYTES];
	int r;

	if (len < 6)
		return opt_error(c, NBD_REP_ERR_INVALID, "option too short");
	namelen = get32(d);
	if (namelen > len - 6)
		return opt_error(c, NBD_REP_ERR_INVALID, "bad name length");
	nreq = get16(d + 4 + namelen);
	if ((uint64_t)namelen + 6 + 2u * nreq != len)
		return opt_error(c, NBD_REP_ERR_INVALID,
				 "option length does not match its contents");
	if (namelen > NBD_MAX_STRING)
		return opt_error(c, NBD_REP_ERR_INVALID, "export name too long");
	for (unsigned int i = 0; i < nreq; i++) {
		uint16_t t = get16(d + 6 + namelen + 2 * i);

		if (t == NBD_INFO_NAME)
			want_name = true;
		else if (t == NBD_INFO_DESCRIPTION)
			want_desc = true;
	}
	e = find_export(c, d + 4, namelen);
	if (!e) {
		log_unknown_export(c,
				   c->opt == NBD_OPT_GO ? "NBD_OPT_GO" :
							  "NBD_OPT_INFO",
				   d + 4, namelen);
		return opt_error(c, NBD_REP_ERR_UNKNOWN, "unknown export");
	}

	put16(info + INFO_TYPE, NBD_INFO_EXPORT);
	put64(info + INFO_EXPORT_SIZE, e->size_bytes);
	put16(info + INFO_EXPORT_FLAGS,
	      nbdl_transmission_flags(e, c->opts.structured));
	r = opt_reply(c, NBD_REP_INFO, info, INFO_EXPORT_BYTES);
	if (!r && want_name)
		r = info_string(c, NBD_INFO_NAME, e->name);
	if (!r && want_desc && e->description)
		r = info_string(c, NBD_INFO_DESCRIPTION, e->description);
	if (!r) {
		/* Always sent: clients that did not ask may still use it. */
		put16(info + INFO_TYPE, NBD_INFO_BLOCK_SIZE);
		put32(info + INFO_BS_MIN, NBDL_MIN_BLOCK);
		put32(info + INFO_BS_PREF, NBDL_PREF_BLOCK);
		put32(info + INFO_BS_MAX, NBDL_MAX_PAYLOAD);
		r = opt_reply(c, NBD_REP_INFO, info, INFO_BS_BYTES);
	}
	r = r ?: opt_reply(c, NBD_REP_ACK, NULL, 0);
	if (!r && c->opt == NBD_OPT_GO)
		enter_transmission(c, e);
	return r;
}

static int opt_list(struct conn *c)
{
	struct server *srv = c->w->srv;
	uint8_t len[4];
	int r = 0;

	if (c->optlen)
		return opt_error(c, NBD_REP_ERR_INVALID,
				 "NBD_OPT_LIST takes no data");
	for (unsigned int i = 0; i < srv->nr_exports && !r; i++) {
		const struct nbdl_export *e = &srv->exports[i];
		uint32_t n = (uint32_t)strlen(e->name);
		uint32_t dn = e->description ? (uint32_t)strlen(e->description) :
					       0;

		put32(len, n);
		r = opt_reply_hdr(c, NBD_REP_SERVER, 4 + n + dn);
		r = r ?: obuf_add(c, len, 4);
		r = r ?: obuf_add(c, e->name, n);
		if (dn)
			r = r ?: obuf_add(c, e->description, dn);
	}
	return r ?: opt_reply(c, NBD_REP_ACK, NULL, 0);
}

static int meta_reply(struct conn *c, uint32_t id)
{
	static const char name[] = "base:allocation";
	uint8_t idb[4];
	int r;

	put32(idb, id);
	r = opt_reply_hdr(c, NBD_REP_META_CONTEXT, 4 + sizeof(name) - 1);
	r = r ?: obuf_add(c, idb, 4);
	return r ?: obuf_add(c, name, sizeof(name) - 1);
}

static int opt_meta_context(struct conn *c)
{
	const uint8_t *d = c->optdata, *end, *p;
	bool set = c->opt == NBD_OPT_SET_META_CONTEXT;
	bool match = false;
	const struct nbdl_export *e;
	uint32_t namelen, nq;

	if (set) {
		/* Replaces earlier selections even when it fails. */
		c->opts.meta_alloc = false;
		c->meta_exp = NULL;
	}
	if (!c->opts.structured)
		return opt_error(c, NBD_REP_ERR_INVALID,
				 "negotiate structured replies first");
	if (c->optlen < 8)
		return opt_error(c, NBD_REP_ERR_INVALID, "option too short");
	/* Only now: without data, optdata is NULL and NULL + 0 is undefined. */
	end = d + c->optlen;
	namelen = get32(d);
	if (namelen > c->optlen - 8)
		return opt_error(c, NBD_REP_ERR_INVALID, "bad name length");
	e = find_export(c, d + 4, namelen);
	d += 4 + namelen;
	nq = get32(d);
	d += 4;
	/* Check the whole query list before answering any of it. */
	p = d;
	for (uint32_t i = 0; i < nq; i++) {
		uint32_t ql;

		if (end - p < 4 || get32(p) > (size_t)(end - p) - 4)
			return opt_error(c, NBD_REP_ERR_INVALID,
					 "query list does not match its length");
		ql = get32(p);
		if (!memchr(p + 4, ':', ql))
			return opt_error(c, NBD_REP_ERR_INVALID,
					 "query without a namespace");
		p += 4 + ql;
	}
	if (p != end)
		return opt_error(c, NBD_REP_ERR_INVALID,
				 "query list does not match its length");
	if (!e)
		return opt_error(c, NBD_REP_ERR_UNKNOWN, "unknown export");

	/* LIST with no query lists everything; SET selects nothing. */
	if (!nq)
		match = !set;
	for (uint32_t i = 0; i < nq; i++) {
		uint32_t ql = get32(d);
		const char *q = (const char *)d + 4;

		if (ql == 15 && !memcmp(q, "base:allocation", 15))
			match = true;
		else if (!set && ql == 5 && !memcmp(q, "base:", 5))
			match = true;
		d += 4 + ql;
	}
	if (match) {
		int r = meta_reply(c, set ? 1 : 0);

		if (r)
			return r;
	}
	if (set) {
		c->meta_exp = e;
		c->opts.meta_alloc = match;
	}
	return opt_reply(c, NBD_REP_ACK, NULL, 0);
}

static int opt_starttls(struct conn *c)
{
	if (c->optlen)
		return opt_error(c, NBD_REP_ERR_INVALID,
				 "NBD_OPT_STARTTLS takes no data");
	if (c->w->srv->tls_mode == SRV_TLS_OFF)
		return opt_error(c, NBD_REP_ERR_POLICY,
				 "TLS is not enabled on this server");
	if (c->tls)
		return opt_error(c, NBD_REP_ERR_INVALID, "TLS is already on");
	c->starttls = true;
	return opt_reply(c, NBD_REP_ACK, NULL, 0);
}

/*
 * Refuse an option with @err; NBD_OPT_EXPORT_NAME has no error reply, so
 * the connection ends instead.
 */
static int opt_refuse(struct conn *c, uint32_t err, const char *msg)
{
	if (c->opt == NBD_OPT_EXPORT_NAME) {
		c->close_after_send = true;
		return 0;
	}
	return opt_error(c, err, msg);
}

/*
 * Options the server will not take now, whatever they are: all but ABORT
 * (a client told to go must be able to say goodbye) while the server shuts
 * down, and, with --tls=require (FORCEDTLS), all but STARTTLS and ABORT
 * before the upgrade.  Returns true if the option was dealt with here.
 */
static bool opt_refused(struct conn *c, int *r)
{
	if (c->opt == NBD_OPT_ABORT)
		return false;
	if (c->w->stopping) {
		/* proto.md: SHOULD error further options with ERR_SHUTDOWN. */
		*r = opt_refuse(c, NBD_REP_ERR_SHUTDOWN,
				"server is shutting down");
		return true;
	}
	if (c->w->srv->tls_mode != SRV_TLS_REQUIRE || c->tls ||
	    c->opt == NBD_OPT_STARTTLS)
		return false;
	nbdl_log(NBDL_DEBUG, "option %u before NBD_OPT_STARTTLS: refused",
		 c->opt);
	*r = opt_refuse(c, NBD_REP_ERR_TLS_REQD,
			"TLS is required: send NBD_OPT_STARTTLS first");
	return true;
}

static int handle_option(struct conn *c)
{
	int r;

	if (opt_refused(c, &r))
		return r;
	switch (c->opt) {
	case NBD_OPT_EXPORT_NAME:
		return opt_export_name(c);
	case NBD_OPT_ABORT:
		c->close_after_send = true;
		return opt_reply(c, NBD_REP_ACK, NULL, 0);
	case NBD_OPT_LIST:
		return opt_list(c);
	case NBD_OPT_INFO:
	case NBD_OPT_GO:
		return opt_info_go(c);
	case NBD_OPT_STRUCTURED_REPLY:
		if (c->optlen)
			return opt_error(c, NBD_REP_ERR_INVALID,
					 "NBD_OPT_STRUCTURED_REPLY takes no data");
		c->opts.structured = true;
		return opt_reply(c, NBD_REP_ACK, NULL, 0);
	case NBD_OPT_LIST_META_CONTEXT:
	case NBD_OPT_SET_META_CONTEXT:
		return opt_meta_context(c);
	case NBD_OPT_STARTTLS:
		return opt_starttls(c);
	default:
		return opt_error(c, NBD_REP_ERR_UNSUP, "option not supported");
	}
}

/* ---- steps ---- */

int hs_start(struct conn *c)
{
	uint8_t greet[GREET_BYTES];

	put64(greet + GREET_MAGIC, NBD_MAGIC);
	put64(greet + GREET_IHAVEOPT, NBD_IHAVEOPT);
	put16(greet + GREET_FLAGS,
	      NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
	c->state = CS_CLIENT_FLAGS;
	c->need = CLIENT_FLAGS_BYTES;
	return obuf_add(c, greet, sizeof(greet));
}

void hs_tls_done(struct conn *c)
{
	c->opts = (struct nbdl_conn_opts){ 0 };
	c->meta_exp = NULL;
	c->state = CS_OPT_HDR;
	c->need = NBD_OPT_HDR_BYTES;
	c->have = 0;
}

int hs_step(struct conn *c)
{
	uint32_t cflags;
	int r;

	switch (c->state) {
	case CS_CLIENT_FLAGS:
		cflags = get32(c->small);
		/* Unknown flags: the spec says drop the connection. */
		if (cflags &
		    ~(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES))
			return -EPROTO;
		/*
		 * Without FIXED_NEWSTYLE the client speaks plain newstyle:
		 * a legal client (the bit is only a SHOULD), which may still
		 * send NBD_OPT_EXPORT_NAME, so it is served, not dropped.
		 */
		c->fixed = cflags & NBD_FLAG_C_FIXED_NEWSTYLE;
		c->no_zeroes = cflags & NBD_FLAG_C_NO_ZEROES;
		c->state = CS_OPT_HDR;
		c->need = NBD_OPT_HDR_BYTES;
		return 0;
	case CS_OPT_HDR:
		if (get64(c->small + OPT_MAGIC) != NBD_IHAVEOPT ||
		    ++c->nr_opts > SRV_MAX_OPTIONS_BASE +
					   SRV_MAX_OPTIONS_PER_EXPORT *
						   c->w->srv->nr_exports)
			return -EPROTO;
		c->opt = get32(c->small + OPT_OPTION);
		c->optlen = get32(c->small + OPT_LEN);
		/*
		 * Plain newstyle has no other option and no option replies
		 * to refuse one with: hang up, as servers before fixed
		 * newstyle did.
		 */
		if (!c->fixed && c->opt != NBD_OPT_EXPORT_NAME)
			return -EPROTO;
		if (c->optlen > SRV_MAX_OPTION_BYTES)
			return -EPROTO; /* absurd: not worth reading */
		free(c->optdata);
		c->optdata = c->optlen ? malloc(c->optlen) : NULL;
		if (c->optlen && !c->optdata)
			return -ENOMEM;
		c->state = CS_OPT_DATA;
		c->need = c->optlen;
		if (c->need)
			return 0;
		/* No data to read: handle it now. */
		__attribute__((fallthrough));
	case CS_OPT_DATA:
		c->state = CS_OPT_HDR;
		c->need = NBD_OPT_HDR_BYTES;
		r = handle_option(c);
		free(c->optdata);
		c->optdata = NULL;
		return r;
	default:
		return 0;
	}
}
