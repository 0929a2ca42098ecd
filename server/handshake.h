/* SPDX-License-Identifier: MIT */
/*
 * handshake.h - the fixed-newstyle handshake of one connection: the
 * greeting, client flags and options.  conn.c reads the bytes each step
 * needs and sends what a step queued in the connection's obuf; handshake.c
 * decides what they mean.
 */
#ifndef BIONBD_HANDSHAKE_H
#define BIONBD_HANDSHAKE_H

#include "conn.h"

/**
 * hs_start - queue the greeting and wait for the client flags
 * Returns 0 or -ENOMEM.
 */
int hs_start(struct conn *c);

/**
 * hs_step - the bytes of the current step (c->need) have arrived
 *
 * Queues any reply in c->obuf, sets c->close_after_send when the
 * connection ends once that is sent, and moves c->state on (to
 * CS_TRANSMISSION, with c->exp set, after NBD_OPT_GO or
 * NBD_OPT_EXPORT_NAME).  After NBD_OPT_STARTTLS's ACK it sets
 * c->starttls: conn.c sends the ACK, runs the TLS handshake and calls
 * hs_tls_done.  Returns 0, or -errno to drop the client at once (a
 * protocol violation, a limit, no memory).
 */
int hs_step(struct conn *c);

/*
 * hs_tls_done - the TLS handshake finished: forget what was negotiated
 * before it (the spec's rule for NBD_OPT_STARTTLS) and read options.
 */
void hs_tls_done(struct conn *c);

#endif /* BIONBD_HANDSHAKE_H */
