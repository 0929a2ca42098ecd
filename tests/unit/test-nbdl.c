/*
 * Description: the NBD layer's pure rules (nbd/request.c), which both front
 * ends share: errno -> NBD error by command and flags (the spec's "Error
 * values": ENOTSUP only for a fast zero, EOVERFLOW only for a DF read,
 * EDQUOT/EFBIG are ENOSPC, unknown errors EIO) and back; request checks
 * (unknown commands and flags, flags not documented for the command,
 * read-only, out of range with wrap-around, payload limits, block status
 * without a context); NBD flags -> bio op and flags; which requests are one
 * direct bio; op names; finishing block status answers (a widened span
 * cut back to the request, clipping, REQ_ONE, gaps and overlaps refused);
 * and what an unaligned read, trim, cache or block status becomes
 * (nbdl_split_start: one bio, nothing waited for) and how its end puts
 * the edge bytes of a read in place (nbdl_split_end).
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <bionbd/nbdl.h>

#include "unit.h"

static void test_errors(void)
{
	const uint16_t F = NBD_CMD_FLAG_FAST_ZERO, DF = NBD_CMD_FLAG_DF;

	CHECK_EQ(nbdl_errno_to_nbd(0, NBD_CMD_READ, 0), 0);
	CHECK_EQ(nbdl_errno_to_nbd(-EPERM, NBD_CMD_WRITE, 0), NBD_EPERM);
	CHECK_EQ(nbdl_errno_to_nbd(-EROFS, NBD_CMD_TRIM, 0), NBD_EPERM);
	CHECK_EQ(nbdl_errno_to_nbd(-EIO, NBD_CMD_READ, 0), NBD_EIO);
	CHECK_EQ(nbdl_errno_to_nbd(-ENOMEM, NBD_CMD_READ, 0), NBD_ENOMEM);
	CHECK_EQ(nbdl_errno_to_nbd(-EINVAL, NBD_CMD_READ, 0), NBD_EINVAL);
	CHECK_EQ(nbdl_errno_to_nbd(-ENOSPC, NBD_CMD_WRITE, 0), NBD_ENOSPC);
	CHECK_EQ(nbdl_errno_to_nbd(-EDQUOT, NBD_CMD_WRITE, 0), NBD_ENOSPC);
	CHECK_EQ(nbdl_errno_to_nbd(-EFBIG, NBD_CMD_WRITE_ZEROES, 0),
		 NBD_ENOSPC);
	/* A member's ESHUTDOWN must not make the client disconnect. */
	CHECK_EQ(nbdl_errno_to_nbd(-ESHUTDOWN, NBD_CMD_FLUSH, 0), NBD_EIO);
	/* ENOTSUP only where the spec allows it: a fast zero */
	CHECK_EQ(nbdl_errno_to_nbd(-EOPNOTSUPP, NBD_CMD_WRITE_ZEROES, F),
		 NBD_ENOTSUP);
	CHECK_EQ(nbdl_errno_to_nbd(-EOPNOTSUPP, NBD_CMD_WRITE_ZEROES, 0),
		 NBD_EIO);
	CHECK_EQ(nbdl_errno_to_nbd(-EOPNOTSUPP, NBD_CMD_TRIM, F), NBD_EIO);
	CHECK_EQ(nbdl_errno_to_nbd(-EOPNOTSUPP, NBD_CMD_FLUSH, 0), NBD_EIO);
	/* EOVERFLOW only for a DF read */
	CHECK_EQ(nbdl_errno_to_nbd(-EOVERFLOW, NBD_CMD_READ, DF),
		 NBD_EOVERFLOW);
	CHECK_EQ(nbdl_errno_to_nbd(-EOVERFLOW, NBD_CMD_READ, 0), NBD_EINVAL);
	CHECK_EQ(nbdl_errno_to_nbd(-EOVERFLOW, NBD_CMD_WRITE, 0), NBD_EINVAL);
	CHECK_EQ(nbdl_errno_to_nbd(-ENXIO, NBD_CMD_READ, 0), NBD_EIO);
	CHECK_EQ(nbdl_errno_to_nbd(-12345, NBD_CMD_READ, 0), NBD_EIO);

	/* and back: the errno nbdkit maps to the same NBD error */
	CHECK_EQ(nbdl_nbd_to_errno(0), 0);
	CHECK_EQ(nbdl_nbd_to_errno(NBD_EPERM), EPERM);
	CHECK_EQ(nbdl_nbd_to_errno(NBD_EIO), EIO);
	CHECK_EQ(nbdl_nbd_to_errno(NBD_ENOMEM), ENOMEM);
	CHECK_EQ(nbdl_nbd_to_errno(NBD_EINVAL), EINVAL);
	CHECK_EQ(nbdl_nbd_to_errno(NBD_ENOSPC), ENOSPC);
	CHECK_EQ(nbdl_nbd_to_errno(NBD_EOVERFLOW), EOVERFLOW);
	CHECK_EQ(nbdl_nbd_to_errno(NBD_ENOTSUP), EOPNOTSUPP);
	CHECK_EQ(nbdl_nbd_to_errno(NBD_ESHUTDOWN), ESHUTDOWN);
}

/* nbdl_req_check, and a reason with every refusal, none with a go-ahead. */
static uint32_t req_check(const struct nbdl_export *e,
			  const struct nbdl_conn_opts *co, uint16_t type,
			  uint16_t flags, uint64_t offset, uint32_t len)
{
	const char *why = NULL;
	uint32_t err = nbdl_req_check(e, co, type, flags, offset, len, &why);

	CHECK(err ? why && *why : !why);
	return err;
}

static void test_checks(void)
{
	struct nbdl_export rw = { .name = "", .size_bytes = 1 << 20 };
	struct nbdl_export ro = { .name = "", .size_bytes = 1 << 20,
				  .readonly = true };
	struct nbdl_conn_opts plain = { 0 };
	struct nbdl_conn_opts sr = { .structured = true, .meta_alloc = true };
	const uint64_t S = 1 << 20;

	CHECK_EQ(req_check(&rw, &plain, NBD_CMD_READ, 0, 0, 4096), 0);
	CHECK_EQ(req_check(&rw, &plain, NBD_CMD_READ, 0, 100, 1), 0);
	CHECK_EQ(req_check(&rw, &plain, 8, 0, 0, 4096), NBD_EINVAL);
	CHECK_EQ(req_check(&rw, &plain, NBD_CMD_READ, 1 << 7, 0, 512),
		 NBD_EINVAL);
	/* DF needs structured replies; NO_HOLE is not a read flag */
	CHECK_EQ(req_check(&rw, &plain, NBD_CMD_READ, NBD_CMD_FLAG_DF, 0,
				512),
		 NBD_EINVAL);
	CHECK_EQ(req_check(&rw, &sr, NBD_CMD_READ, NBD_CMD_FLAG_DF, 0,
				512),
		 0);
	CHECK_EQ(req_check(&rw, &sr, NBD_CMD_READ, NBD_CMD_FLAG_NO_HOLE,
				0, 512),
		 NBD_EINVAL);
	CHECK_EQ(req_check(&rw, &sr, NBD_CMD_WRITE_ZEROES,
				NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_FAST_ZERO |
					NBD_CMD_FLAG_FUA,
				0, 512),
		 0);
	CHECK_EQ(req_check(&rw, &sr, NBD_CMD_TRIM, NBD_CMD_FLAG_NO_HOLE, 0,
				512),
		 NBD_EINVAL);
	/* read-only */
	CHECK_EQ(req_check(&ro, &plain, NBD_CMD_WRITE, 0, 0, 512),
		 NBD_EPERM);
	CHECK_EQ(req_check(&ro, &plain, NBD_CMD_TRIM, 0, 0, 512),
		 NBD_EPERM);
	CHECK_EQ(req_check(&ro, &plain, NBD_CMD_WRITE_ZEROES, 0, 0, 512),
		 NBD_EPERM);
	CHECK_EQ(req_check(&ro, &plain, NBD_CMD_READ, 0, 0, 512), 0);
	CHECK_EQ(req_check(&ro, &plain, NBD_CMD_FLUSH, 0, 0, 0), 0);
	/* range: ENOSPC for writes and zeroes, EINVAL otherwise; no wrap */
	CHECK_EQ(req_check(&rw, &plain, NBD_CMD_WRITE, 0, S - 512, 1024),
		 NBD_ENOSPC);
	CHECK_EQ(req_check(&rw, &plain, NBD_CMD_WRITE_ZEROES, 0, S, 512),
		 NBD_ENOSPC);
	CHECK_EQ(req_check(&rw, &plain, NBD_CMD_READ, 0, S, 512),
		 NBD_EINVAL);
	CHECK_EQ(req_check(&rw, &plain, NBD_CMD_READ, 0, UINT64_MAX - 511,
				4096),
		 NBD_EINVAL);
	CHECK_EQ(req_check(&rw, &plain, NBD_CMD_WRITE, 0,
				UINT64_MAX - 511, 4096),
		 NBD_ENOSPC);
	CHECK_EQ(req_check(&rw, &plain, NBD_CMD_READ, 0, S - 512, 512),
		 0);
	/* a flush has no range */
	CHECK_EQ(req_check(&rw, &plain, NBD_CMD_FLUSH, 0, UINT64_MAX, 7),
		 0);
	/* reads above the maximum payload */
	{
		struct nbdl_export big = { .name = "", .size_bytes = 1ull << 40 };

		CHECK_EQ(req_check(&big, &sr, NBD_CMD_READ, 0, 0,
					NBDL_MAX_PAYLOAD),
			 0);
		CHECK_EQ(req_check(&big, &sr, NBD_CMD_READ, 0, 0,
					NBDL_MAX_PAYLOAD + 512),
			 NBD_EINVAL);
		CHECK_EQ(req_check(&big, &sr, NBD_CMD_READ,
					NBD_CMD_FLAG_DF, 0,
					NBDL_MAX_PAYLOAD + 512),
			 NBD_EOVERFLOW);
		/* a trim or zero of any length is fine */
		CHECK_EQ(req_check(&big, &sr, NBD_CMD_TRIM, 0, 0,
					UINT32_MAX),
			 0);
	}
	/* block status: needs base:allocation and a length */
	CHECK_EQ(req_check(&rw, &plain, NBD_CMD_BLOCK_STATUS, 0, 0, 512),
		 NBD_EINVAL);
	CHECK_EQ(req_check(&rw, &sr, NBD_CMD_BLOCK_STATUS,
				NBD_CMD_FLAG_REQ_ONE, 0, 512),
		 0);
	CHECK_EQ(req_check(&rw, &sr, NBD_CMD_BLOCK_STATUS, 0, 0, 0),
		 NBD_EINVAL);

	/* transmission flags */
	CHECK(nbdl_transmission_flags(&ro, false) & NBD_FLAG_READ_ONLY);
	CHECK(!(nbdl_transmission_flags(&ro, false) & NBD_FLAG_SEND_TRIM));
	CHECK(nbdl_transmission_flags(&rw, false) & NBD_FLAG_SEND_FAST_ZERO);
	CHECK(!(nbdl_transmission_flags(&rw, false) & NBD_FLAG_SEND_DF));
	CHECK(nbdl_transmission_flags(&rw, true) & NBD_FLAG_SEND_DF);
}

static void test_bios(void)
{
	struct bio_extents ext = { 0 };
	char buf[4096];
	struct bio *bio;

	CHECK_EQ(nbdl_opf(NBD_CMD_READ, 0), REQ_OP_READ);
	CHECK_EQ(nbdl_opf(NBD_CMD_WRITE, NBD_CMD_FLAG_FUA),
		 REQ_OP_WRITE | REQ_FUA);
	CHECK_EQ(nbdl_opf(NBD_CMD_TRIM, 0), REQ_OP_DISCARD);
	CHECK_EQ(nbdl_opf(NBD_CMD_CACHE, 0), REQ_OP_CACHE);
	CHECK_EQ(nbdl_opf(NBD_CMD_FLUSH, 0), REQ_OP_FLUSH);
	CHECK_EQ(nbdl_opf(NBD_CMD_BLOCK_STATUS, 0), REQ_OP_EXTENTS);
	/* NO_HOLE keeps allocation; FAST_ZERO forbids the slow fallback */
	CHECK_EQ(nbdl_opf(NBD_CMD_WRITE_ZEROES, 0), REQ_OP_WRITE_ZEROES);
	CHECK_EQ(nbdl_opf(NBD_CMD_WRITE_ZEROES,
			  NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_FAST_ZERO |
				  NBD_CMD_FLAG_FUA),
		 REQ_OP_WRITE_ZEROES | REQ_NOUNMAP | REQ_NOFALLBACK | REQ_FUA);

	CHECK(nbdl_is_direct(NBD_CMD_READ, 4096, 512));
	CHECK(!nbdl_is_direct(NBD_CMD_READ, 4096, 100));
	CHECK(!nbdl_is_direct(NBD_CMD_WRITE, 100, 512));
	CHECK(nbdl_is_direct(NBD_CMD_FLUSH, 1, 1));

	bio = nbdl_bio_alloc(NBD_CMD_WRITE, NBD_CMD_FLAG_FUA, buf, 8192,
			     sizeof(buf), NULL);
	CHECK(bio);
	CHECK_EQ(bio->bi_opf, REQ_OP_WRITE | REQ_FUA);
	CHECK_EQ(bio->bi_iter.bi_sector, 16);
	CHECK_EQ(bio->bi_iter.bi_size, sizeof(buf));
	CHECK_EQ(bio->bi_vcnt, 1);
	CHECK_PTR_EQ(bio_data(bio), buf);
	bio_put(bio);
	bio = nbdl_bio_alloc(NBD_CMD_BLOCK_STATUS, 0, NULL, 512, 1024, &ext);
	CHECK(bio);
	CHECK_EQ(bio->bi_iter.bi_size, 1024);
	CHECK_EQ(bio->bi_vcnt, 0);
	CHECK_PTR_EQ(bio->bi_ext, &ext);
	bio_put(bio);
	bio = nbdl_bio_alloc(NBD_CMD_FLUSH, 0, NULL, 0, 0, NULL);
	CHECK(bio);
	CHECK_EQ(bio->bi_iter.bi_size, 0);
	bio_put(bio);

	CHECK(!strcmp(nbdl_op_name(REQ_OP_DISCARD), "trim"));
	CHECK(!strcmp(nbdl_op_name(REQ_OP_WRITE_ZEROES), "write-zeroes"));
	CHECK(!strcmp(nbdl_op_name(REQ_OP_EXTENTS), "block-status"));
	CHECK(!strcmp(nbdl_op_name(REQ_OP_LAST), "unknown"));
	CHECK(!strcmp(nbdl_cmd_name(NBD_CMD_TRIM), "trim"));
	CHECK(!strcmp(nbdl_cmd_name(NBD_CMD_DISC), "disc"));
	CHECK(!strcmp(nbdl_cmd_name(99), "unknown"));
}

static void add(struct bio_extents *e, uint64_t off, uint64_t len,
		uint32_t flags)
{
	CHECK_EQ(bio_extents_add(e, off, len, flags), 0);
}

/* The byte a made-up volume holds at @off. */
static char vol_byte(uint64_t off)
{
	return (char)(off * 7 + off / 512);
}

/*
 * An unaligned read as a front end with many clients a thread runs it:
 * nbdl_split_start waits for nothing and gives one bio over the whole
 * sectors it touches, through the caller's buffer where it can; the bio
 * "completes" here (its segments filled as a volume would); nbdl_split_end
 * puts the edge bytes in place.
 */
static void split_read(uint64_t off, uint32_t len, unsigned int vcnt)
{
	uint64_t start = off & ~511ull, end = (off + len + 511) & ~511ull;
	struct nbdl_split *sp;
	struct bvec_iter it;
	struct bio_vec bv;
	struct bio *bio;
	char buf[8192];
	uint64_t pos;

	memset(buf, 0x55, sizeof(buf));
	CHECK_EQ(nbdl_split_start(NULL, NBD_CMD_READ, 0, buf, off, len, NULL,
				  0, &sp, &bio),
		 0);
	CHECK(bio);
	CHECK_EQ(bio->bi_iter.bi_sector, start / 512);
	CHECK_EQ(bio->bi_iter.bi_size, end - start);
	CHECK_EQ(bio->bi_vcnt, vcnt);
	pos = start;
	bio_for_each_segment(bv, bio, it) {
		for (unsigned int i = 0; i < bv.bv_len; i++)
			((char *)bvec_virt(&bv))[i] = vol_byte(pos + i);
		pos += bv.bv_len;
	}
	bio_put(bio);
	CHECK_EQ(nbdl_split_end(sp, 0, buf, NULL, 0), 0);
	for (uint32_t i = 0; i < len; i++)
		CHECK_EQ(buf[i], vol_byte(off + i));
	CHECK_EQ(buf[len], 0x55); /* not a byte past the request */
}

/* One bio over [@start, @start + @size), or none when @size is 0. */
static void split_range(uint16_t type, uint64_t off, uint32_t len,
			uint64_t start, uint32_t size)
{
	struct bio_extents ext = { 0 };
	struct nbdl_split *sp;
	struct bio *bio;

	CHECK_EQ(nbdl_split_start(NULL, type, 0, NULL, off, len, &ext, 0, &sp,
				  &bio),
		 0);
	if (!size) {
		CHECK(!bio);
	} else {
		CHECK(bio);
		CHECK_EQ(bio->bi_iter.bi_sector, start / 512);
		CHECK_EQ(bio->bi_iter.bi_size, size);
		CHECK_EQ(bio->bi_vcnt, 0);
		if (type == NBD_CMD_BLOCK_STATUS) {
			CHECK_PTR_EQ(bio->bi_ext, &ext);
			/* The engine answers for the span, from its start. */
			add(&ext, 0, size, 0);
		}
		bio_put(bio);
	}
	CHECK_EQ(nbdl_split_end(sp, 0, NULL, &ext, SIZE_MAX), 0);
	if (type == NBD_CMD_BLOCK_STATUS) {
		CHECK_EQ(ext.nr, 1);
		CHECK_EQ(ext.v[0].offset, 0);
		CHECK_EQ(ext.v[0].length, len);
	}
	bio_extents_free(&ext);
}

static void test_split(void)
{
	split_read(1000, 3000, 3); /* edge, whole sectors, edge */
	split_read(10, 100, 1);	   /* inside one sector */
	split_read(500, 30, 2);	   /* across one sector edge */
	split_read(512, 1000, 2);  /* whole sectors, then an edge */
	split_read(100, 924, 2);   /* an edge, then whole sectors */
	/* Trims shrink to the whole sectors inside; none inside, nothing. */
	split_range(NBD_CMD_TRIM, 1000, 3000, 1024, 2560);
	split_range(NBD_CMD_TRIM, 10, 100, 0, 0);
	/* Cache and block status widen to whole sectors. */
	split_range(NBD_CMD_CACHE, 1000, 3000, 512, 3584);
	split_range(NBD_CMD_BLOCK_STATUS, 1000, 3000, 512, 3584);
	split_range(NBD_CMD_BLOCK_STATUS, 10, 100, 0, 512);
}

static void test_extents(void)
{
	struct bio_extents e = { 0 };
	const uint32_t H = BIO_EXT_HOLE | BIO_EXT_ZERO;

	/* a span widened from 1000 to sectors: [512, 4608) answered as data
	 * [0, 1024) then hole; the answer starts at 1000 */
	add(&e, 1024, 3584, H); /* out of order, as split pieces append */
	add(&e, 0, 1024, 0);
	CHECK_EQ(nbdl_extents_finish(&e, 512, 1000, 3000, SIZE_MAX), 0);
	CHECK_EQ(e.nr, 2);
	CHECK_EQ(e.v[0].offset, 0);
	CHECK_EQ(e.v[0].length, 536); /* 1000 .. 1536 */
	CHECK_EQ(e.v[0].flags, 0);
	CHECK_EQ(e.v[1].offset, 536);
	CHECK_EQ(e.v[1].length, 3000 - 536); /* clipped to the request */
	CHECK_EQ(e.v[1].flags, H);
	bio_extents_free(&e);

	/* REQ_ONE and max_extents keep a prefix */
	add(&e, 0, 512, 0);
	add(&e, 512, 512, H);
	add(&e, 1024, 512, 0);
	CHECK_EQ(nbdl_extents_finish(&e, 0, 0, 1536, 1), 0);
	CHECK_EQ(e.nr, 1);
	CHECK_EQ(e.v[0].length, 512);
	bio_extents_free(&e);

	/* neighbours with equal flags merge */
	add(&e, 0, 512, H);
	add(&e, 512, 512, H);
	CHECK_EQ(nbdl_extents_finish(&e, 0, 0, 1024, SIZE_MAX), 0);
	CHECK_EQ(e.nr, 1);
	CHECK_EQ(e.v[0].length, 1024);
	bio_extents_free(&e);

	/* a gap is an engine bug: EIO, not a wrong answer */
	add(&e, 0, 512, 0);
	add(&e, 1024, 512, H);
	CHECK_EQ(nbdl_extents_finish(&e, 0, 0, 1536, SIZE_MAX), -EIO);
	bio_extents_free(&e);
	/* unless a member stopped short there (BIO_EXTENTS_MAX): a prefix */
	add(&e, 0, 512, 0);
	add(&e, 1024, 512, H);
	e.cut = true;
	CHECK_EQ(nbdl_extents_finish(&e, 0, 0, 1536, SIZE_MAX), 0);
	CHECK_EQ(e.nr, 1);
	CHECK_EQ(e.v[0].length, 512);
	bio_extents_free(&e);
	e.cut = false;
	/* an overlap stays an error, cut or not */
	add(&e, 0, 1024, 0);
	add(&e, 512, 1024, H);
	e.cut = true;
	CHECK_EQ(nbdl_extents_finish(&e, 0, 0, 1536, SIZE_MAX), -EIO);
	bio_extents_free(&e);
	e.cut = false;
	/* so is an answer that does not start at the span */
	add(&e, 512, 512, 0);
	CHECK_EQ(nbdl_extents_finish(&e, 0, 0, 1024, SIZE_MAX), -EIO);
	bio_extents_free(&e);
	/* or ends before the request begins */
	add(&e, 0, 512, 0);
	CHECK_EQ(nbdl_extents_finish(&e, 0, 600, 100, SIZE_MAX), -EIO);
	bio_extents_free(&e);
}

int main(void)
{
	test_errors();
	test_checks();
	test_bios();
	test_extents();
	test_split();
	printf("test-nbdl: ok\n");
	return 0;
}
