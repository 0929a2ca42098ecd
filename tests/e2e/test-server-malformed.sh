#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: malformed and hostile NBD traffic against bionbd, written by
# hand over its unix socket (server-malformed.py, standard library only):
# unknown client flags (closed), plain newstyle clients (EXPORT_NAME
# served, other options closed), truncated handshakes and requests,
# absurd option lengths, unknown options (EXTENDED_HEADERS among them:
# NBD_REP_ERR_UNSUP, handshake goes on), malformed
# INFO/GO/LIST/SET_META_CONTEXT (NBD_REP_ERR_INVALID),
# too many options, NBD_OPT_ABORT (ACK, close; also with the client gone
# before the ACK), requests in the GO packet, bad request magic (closed),
# unknown commands (EINVAL), writes past the end with payload (ENOSPC or
# EINVAL, payload skipped, connection stays) and unaligned (served), WRITE over 32 MiB
# (closed), READ over 32 MiB (EINVAL, DF EOVERFLOW), structured reply rules
# (refused READs are error chunks, zero-length READs carry no content
# chunk, DONE only on the last chunk, FUA on block status), 1000 pipelined reads,
# 1000 pipelined writes/reads and five 32 MiB writes in one send (over
# the in-flight limits), NBD_CMD_DISC with 98 requests in flight (all
# answered, then closed, nothing after DISC acted on), and a client
# sending a byte at a time.  After each case the server holds no leftover
# connection and still serves (raw client and nbdinfo); at the end nbdsh
# checks the data and the server must exit 0 on SIGTERM with a clean log.
# Both backends.
source "$(dirname "$0")/functions.sh"

requires_nbdpy
requires nbdinfo
make_tmpdir

SIZE=48M

for be in $BACKENDS; do
    log "backend $be"
    d=$tmp/$be
    mkdir -p "$d"
    start_bionbd -t 2 --backend "$be" --stripe-size 64K --size $SIZE \
        "$d/m0" "$d/m1" "$d/m2"
    NBD_SOCK=$NBD_SOCK SERVER_PID=$SERVER_PID SIZE=$(to_bytes $SIZE) \
        nbdpy "$SRC_DIR/tests/e2e/server-malformed.py" ||
        die "$be: server-malformed.py failed"
    # A real client afterwards: the data of the DISC case is there.
    NBD_URI=$NBD_URI nbdpy - <<'PY' || die "$be: nbdsh check after the raw cases failed"
import os
import nbd
from nbd_raw import pattern
h = nbd.NBD()
h.connect_uri(os.environ["NBD_URI"])
M, K = 1 << 20, 1024
got = h.pread(64 * K, 12 * M + 5 * 64 * K)
if got != pattern(105, 64 * K):
    raise SystemExit("data written before NBD_CMD_DISC is not there")
h.pwrite(b"\x5a" * 4096, 47 * M)
h.flush()
if h.pread(4096, 47 * M) != b"\x5a" * 4096:
    raise SystemExit("write/read after the raw cases failed")
h.shutdown()
PY
    stop_bionbd
done
log "PASS"
