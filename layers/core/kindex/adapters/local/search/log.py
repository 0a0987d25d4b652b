"""The write-ahead log of a vector partition: CRC-framed records appended after its snapshot (see index.py's
docstring for the durability argument), and the thresholds that trigger compaction."""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator

import numpy as np

# Log records: a frame (payload length, CRC-32 of the payload), then the payload: one op byte, the length of a
# JSON header, the header, and for upserts the float32 rows (little-endian, row-major).
FRAME = struct.Struct("<II")
HEADER_LENGTH = struct.Struct("<I")
OP_OPEN, OP_UPSERT, OP_DELETE, OP_CLEAR = b"O", b"U", b"D", b"C"
FLOAT32 = np.dtype("<f4")
# Compact when the log outgrows half the snapshot, so rewrites cost O(1) per byte written, but not before it
# holds COMPACT_MIN_LOG_BYTES (small collections would otherwise rewrite all the time); and after
# COMPACT_MAX_RECORDS records whatever their size, which bounds the replay work of a load.
COMPACT_MIN_LOG_BYTES = 4 << 20
COMPACT_MAX_RECORDS = 10_000


def frame_record(op: bytes, header: dict, body: bytes = b"") -> bytes:
    """One log record: (length, CRC-32) then op, header length, JSON header and body."""
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    payload = b"".join((op, HEADER_LENGTH.pack(len(encoded)), encoded, body))
    return FRAME.pack(len(payload), zlib.crc32(payload)) + payload


def read_records(data: bytes) -> Iterator[tuple[bytes, dict, memoryview, int]]:
    """The log's records in order, each as (op, header, body, offset just past it); stops at the first record
    that is cut short or fails its CRC (a crash mid-append tears the last one)."""
    offset = 0
    while offset + FRAME.size <= len(data):
        length, checksum = FRAME.unpack_from(data, offset)
        end = offset + FRAME.size + length
        payload = memoryview(data)[offset + FRAME.size : end]
        if length < 1 + HEADER_LENGTH.size or end > len(data) or zlib.crc32(payload) != checksum:
            return
        (header_length,) = HEADER_LENGTH.unpack_from(payload, 1)
        body = 1 + HEADER_LENGTH.size + header_length
        header = json.loads(bytes(payload[1 + HEADER_LENGTH.size : body]))
        yield bytes(payload[:1]), header, payload[body:], end
        offset = end
