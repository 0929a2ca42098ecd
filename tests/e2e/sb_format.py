# SPDX-License-Identifier: MIT
"""sb_format.py - the member superblock's checksum, written from
docs/format.md independently of engine/superblock.c, for the e2e tests
that forge or edit superblocks and bioctl checkpoints, and, run as
"sb_format.py FILE FIELD=VALUE...", their editor (functions.sh: sb_edit).
Not a test itself.
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


# Fields the tests edit: (offset, struct format).  Role K's state is at
# ROLES_AT + K * ROLE_BYTES + 16 (1 = faulty).
FIELDS = {"version": (8, "<I"), "flags": (108, "<I"), "events": (136, "<Q")}
ROLES_AT, ROLE_BYTES = 256, 32


def edit(path, changes):
    """Rewrite @path's superblock with @changes applied and reseal it.
    A change is "FIELD=VALUE" (FIELD: version, flags, events, clean,
    roleK.state); VALUE may be "+N" or "-N", relative to the old value."""
    with open(path, "r+b") as f:
        sb = bytearray(f.read(SB_BYTES))
        for ch in changes:
            name, value = ch.split("=", 1)
            if name == "clean":
                off, fmt = FIELDS["flags"]
                flags = struct.unpack_from(fmt, sb, off)[0]
                struct.pack_into(fmt, sb, off,
                                 flags | 1 if value == "1" else flags & ~1)
                continue
            if name.startswith("role") and name.endswith(".state"):
                k = int(name[4:-len(".state")])
                off, fmt = ROLES_AT + k * ROLE_BYTES + 16, "<I"
            else:
                off, fmt = FIELDS[name]
            v = int(value)
            if value[0] in "+-":
                v += struct.unpack_from(fmt, sb, off)[0]
            struct.pack_into(fmt, sb, off, v)
        reseal(sb)
        f.seek(0)
        f.write(sb)


if __name__ == "__main__":
    import sys
    edit(sys.argv[1], sys.argv[2:])
