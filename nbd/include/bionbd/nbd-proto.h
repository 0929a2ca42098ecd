/* SPDX-License-Identifier: MIT */
/*
 * nbd-proto.h - NBD protocol constants (fixed newstyle).
 *
 * Values are the protocol's (doc/proto.md of the NBD project).  Only what
 * bionbd speaks is listed.  The byte layouts of the messages on the wire
 * are the native server's business: server/wire.h.
 */
#ifndef BIONBD_NBD_PROTO_H
#define BIONBD_NBD_PROTO_H

#include <stdint.h>

#define NBD_MAGIC 0x4e42444d41474943ull /* "NBDMAGIC" */
#define NBD_IHAVEOPT 0x49484156454f5054ull /* "IHAVEOPT" */
#define NBD_REP_MAGIC 0x0003e889045565a9ull
#define NBD_REQUEST_MAGIC 0x25609513u
#define NBD_SIMPLE_REPLY_MAGIC 0x67446698u
#define NBD_STRUCTURED_REPLY_MAGIC 0x668e33efu

/* Handshake flags (server) and client flags. */
#define NBD_FLAG_FIXED_NEWSTYLE (1u << 0)
#define NBD_FLAG_NO_ZEROES (1u << 1)
#define NBD_FLAG_C_FIXED_NEWSTYLE (1u << 0)
#define NBD_FLAG_C_NO_ZEROES (1u << 1)

/* Transmission flags. */
#define NBD_FLAG_HAS_FLAGS (1u << 0)
#define NBD_FLAG_READ_ONLY (1u << 1)
#define NBD_FLAG_SEND_FLUSH (1u << 2)
#define NBD_FLAG_SEND_FUA (1u << 3)
#define NBD_FLAG_ROTATIONAL (1u << 4)
#define NBD_FLAG_SEND_TRIM (1u << 5)
#define NBD_FLAG_SEND_WRITE_ZEROES (1u << 6)
#define NBD_FLAG_SEND_DF (1u << 7)
#define NBD_FLAG_CAN_MULTI_CONN (1u << 8)
#define NBD_FLAG_SEND_CACHE (1u << 10)
#define NBD_FLAG_SEND_FAST_ZERO (1u << 11)

/* Options. */
#define NBD_OPT_EXPORT_NAME 1u
#define NBD_OPT_ABORT 2u
#define NBD_OPT_LIST 3u
#define NBD_OPT_STARTTLS 5u
#define NBD_OPT_INFO 6u
#define NBD_OPT_GO 7u
#define NBD_OPT_STRUCTURED_REPLY 8u
#define NBD_OPT_LIST_META_CONTEXT 9u
#define NBD_OPT_SET_META_CONTEXT 10u

/* Option replies. */
#define NBD_REP_ACK 1u
#define NBD_REP_SERVER 2u
#define NBD_REP_INFO 3u
#define NBD_REP_META_CONTEXT 4u
#define NBD_REP_ERR(n) ((1u << 31) | (n))
#define NBD_REP_ERR_UNSUP NBD_REP_ERR(1)
#define NBD_REP_ERR_POLICY NBD_REP_ERR(2)
#define NBD_REP_ERR_INVALID NBD_REP_ERR(3)
#define NBD_REP_ERR_PLATFORM NBD_REP_ERR(4)
#define NBD_REP_ERR_TLS_REQD NBD_REP_ERR(5)
#define NBD_REP_ERR_UNKNOWN NBD_REP_ERR(6)
#define NBD_REP_ERR_SHUTDOWN NBD_REP_ERR(7)
#define NBD_REP_ERR_BLOCK_SIZE_REQD NBD_REP_ERR(8)
#define NBD_REP_ERR_TOO_BIG NBD_REP_ERR(9)

/* NBD_REP_INFO types. */
#define NBD_INFO_EXPORT 0u
#define NBD_INFO_NAME 1u
#define NBD_INFO_DESCRIPTION 2u
#define NBD_INFO_BLOCK_SIZE 3u

/* Commands. */
#define NBD_CMD_READ 0u
#define NBD_CMD_WRITE 1u
#define NBD_CMD_DISC 2u
#define NBD_CMD_FLUSH 3u
#define NBD_CMD_TRIM 4u
#define NBD_CMD_CACHE 5u
#define NBD_CMD_WRITE_ZEROES 6u
#define NBD_CMD_BLOCK_STATUS 7u

/* Command flags. */
#define NBD_CMD_FLAG_FUA (1u << 0)
#define NBD_CMD_FLAG_NO_HOLE (1u << 1)
#define NBD_CMD_FLAG_DF (1u << 2)
#define NBD_CMD_FLAG_REQ_ONE (1u << 3)
#define NBD_CMD_FLAG_FAST_ZERO (1u << 4)

/* Structured replies. */
#define NBD_REPLY_FLAG_DONE (1u << 0)
#define NBD_REPLY_TYPE_NONE 0u
#define NBD_REPLY_TYPE_OFFSET_DATA 1u
#define NBD_REPLY_TYPE_OFFSET_HOLE 2u
#define NBD_REPLY_TYPE_BLOCK_STATUS 5u
#define NBD_REPLY_TYPE_ERROR ((1u << 15) | 1u)
#define NBD_REPLY_TYPE_ERROR_OFFSET ((1u << 15) | 2u)

/* Error values. */
#define NBD_EPERM 1u
#define NBD_EIO 5u
#define NBD_ENOMEM 12u
#define NBD_EINVAL 22u
#define NBD_ENOSPC 28u
#define NBD_EOVERFLOW 75u
#define NBD_ENOTSUP 95u
#define NBD_ESHUTDOWN 108u

/* base:allocation flags. */
#define NBD_STATE_HOLE (1u << 0)
#define NBD_STATE_ZERO (1u << 1)

/* Fixed sizes on the wire. */
#define NBD_REQUEST_BYTES 28u
#define NBD_SIMPLE_REPLY_BYTES 16u
#define NBD_CHUNK_HDR_BYTES 20u
#define NBD_OPT_HDR_BYTES 16u
#define NBD_MAX_STRING 4096u

#endif /* BIONBD_NBD_PROTO_H */
