/* SPDX-License-Identifier: MIT */
/*
 * wire.h - the byte layouts of NBD messages, one place for every offset.
 *
 * All wire integers are big-endian.  Messages are built and parsed through
 * the named offsets below rather than packed structs: the reply headers are
 * written into request-owned buffers at arbitrary alignment, and one helper
 * per width keeps every access explicit.
 */
#ifndef BIONBD_WIRE_H
#define BIONBD_WIRE_H

#include <stdint.h>

#include <bionbd/nbd-proto.h>

/* Server greeting: "NBDMAGIC", "IHAVEOPT", handshake flags. */
#define GREET_MAGIC 0
#define GREET_IHAVEOPT 8
#define GREET_FLAGS 16
#define GREET_BYTES 18

/* Client flags, right after the greeting. */
#define CLIENT_FLAGS_BYTES 4

/* Option request header; the option's data follows. */
#define OPT_MAGIC 0 /* NBD_IHAVEOPT */
#define OPT_OPTION 8
#define OPT_LEN 12
/* NBD_OPT_HDR_BYTES (16) */

/* Option reply header; the reply's data follows. */
#define OREP_MAGIC 0 /* NBD_REP_MAGIC */
#define OREP_OPTION 8
#define OREP_TYPE 12
#define OREP_LEN 16
#define OREP_BYTES 20

/* NBD_OPT_EXPORT_NAME's reply: size, transmission flags, 124 zero bytes. */
#define EXPNAME_SIZE 0
#define EXPNAME_FLAGS 8
#define EXPNAME_BYTES 10
#define EXPNAME_ZEROES 124

/* NBD_INFO_EXPORT payload. */
#define INFO_TYPE 0
#define INFO_EXPORT_SIZE 2
#define INFO_EXPORT_FLAGS 10
#define INFO_EXPORT_BYTES 12
/* NBD_INFO_BLOCK_SIZE payload. */
#define INFO_BS_MIN 2
#define INFO_BS_PREF 6
#define INFO_BS_MAX 10
#define INFO_BS_BYTES 14

/* Request header. */
#define REQ_MAGIC 0
#define REQ_FLAGS 4
#define REQ_TYPE 6
#define REQ_COOKIE 8
#define REQ_OFFSET 16
#define REQ_LEN 24
/* NBD_REQUEST_BYTES (28) */

/* Simple reply. */
#define SREP_MAGIC 0
#define SREP_ERROR 4
#define SREP_COOKIE 8
/* NBD_SIMPLE_REPLY_BYTES (16) */

/* Structured reply chunk header; the chunk's payload follows. */
#define CHUNK_MAGIC 0
#define CHUNK_FLAGS 4
#define CHUNK_TYPE 6
#define CHUNK_COOKIE 8
#define CHUNK_LEN 16
/* NBD_CHUNK_HDR_BYTES (20) */

/* Chunk payloads. */
#define CHUNK_OFFSET_DATA_BYTES 8 /* offset; the data follows */
#define CHUNK_OFFSET_HOLE_BYTES 12 /* offset, length */
#define CHUNK_ERROR_BYTES 6 /* error, message length; the message follows */
#define CHUNK_BS_CONTEXT_BYTES 4 /* context id; descriptors follow */
#define CHUNK_BS_DESC_BYTES 8 /* length, flags */

static inline void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static inline void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)(v >> 16));
	put16(p + 2, (uint16_t)v);
}

static inline void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)(v >> 32));
	put32(p + 4, (uint32_t)v);
}

static inline uint16_t get16(const uint8_t *p)
{
	return (uint16_t)((p[0] << 8) | p[1]);
}

static inline uint32_t get32(const uint8_t *p)
{
	return ((uint32_t)get16(p) << 16) | get16(p + 2);
}

static inline uint64_t get64(const uint8_t *p)
{
	return ((uint64_t)get32(p) << 32) | get32(p + 4);
}

#endif /* BIONBD_WIRE_H */
