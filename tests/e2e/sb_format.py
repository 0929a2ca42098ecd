# SPDX-License-Identifier: MIT
"""sb_format.py - the member superblock's checksum, written from
docs/format.md independently of engine/superblock.c, for the e2e tests
that forge or edit superblocks and bioctl checkpoints.  Not a test itself.
"""
import struct

SB_BYTES = 4096
CRC_AT = SB_BYTES - 4


def crc32c(data):
    """CRC-32C (Castagnoli), bit by bit: slow, and plainly the spec's."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def reseal(block):
    """Give a superblock (bytearray of SB_BYTES) its checksum again."""
    struct.pack_into("<I", block, CRC_AT, crc32c(bytes(block[:CRC_AT])))
