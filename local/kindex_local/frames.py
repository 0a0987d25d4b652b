"""The frames `kindex serve` and its query processes exchange over a socket pair: two 4-byte big-endian lengths,
then that many bytes of JSON (one object) and of raw text (the body of its event or response). Both sides bound
what they read, so a peer that goes wrong cannot make the other allocate without limit."""

from __future__ import annotations

import json
import socket
import struct
from typing import Any, BinaryIO

# A frame's head: the byte lengths of its JSON and of its raw text.
_LENGTHS = struct.Struct(">II")
# A query's answer is at most k = 100 passages with their context; far below this. Events are smaller still (the
# server refuses bodies over max_body_bytes before a function sees them).
MAX_FRAME_BYTES = 64 * 1024 * 1024
# The members whose `body` (a string: an API request's or answer's JSON) travels as raw text after the frame's JSON
# instead of inside it: escaped into a JSON string it cost a query process ~0.35 ms an answer to encode, and the
# server as much to decode.
_CARRIERS = ("event", "response")


class FrameTooLarge(Exception):
    """The peer announced a frame over the limit: the connection cannot be trusted any more."""


def encode_frame(message: dict[str, Any]) -> bytes:
    """One frame: the two lengths, the message as ASCII JSON without its carried body, then that body as UTF-8 (lone
    surrogates, which strict UTF-8 cannot carry, pass through: the body round-trips exactly)."""
    text = None
    for name in _CARRIERS:
        inner = message.get(name)
        if isinstance(inner, dict) and isinstance(inner.get("body"), str):
            text = inner["body"]
            message = {**message, name: {key: value for key, value in inner.items() if key != "body"}, "raw": name}
            break
    head = json.dumps(message, separators=(",", ":")).encode("ascii")
    raw = text.encode("utf-8", "surrogatepass") if text is not None else b""
    if len(head) + len(raw) > MAX_FRAME_BYTES:
        raise FrameTooLarge(f"frame of {len(head) + len(raw)} bytes exceeds {MAX_FRAME_BYTES}")
    return b"".join((_LENGTHS.pack(len(head), len(raw)), head, raw))


def send_frame(sock: socket.socket, message: dict[str, Any]) -> None:
    """Write one whole frame; the caller holds the socket's send lock (frames of two threads must not interleave)."""
    sock.sendall(encode_frame(message))


def read_frame(stream: BinaryIO, limit: int = MAX_FRAME_BYTES) -> dict[str, Any] | None:
    """The next frame's object (its carried body back in place), or None at the end of the stream (the peer closed
    it, also in the middle of a frame). Raises FrameTooLarge before reading a frame over `limit`, ValueError on one
    that is not a JSON object or names no carrier its text could go back to."""
    lengths = _read_exactly(stream, _LENGTHS.size)
    if lengths is None:
        return None
    head_length, raw_length = _LENGTHS.unpack(lengths)
    if head_length + raw_length > limit:
        raise FrameTooLarge(f"frame of {head_length + raw_length} bytes exceeds {limit}")
    payload = _read_exactly(stream, head_length + raw_length)
    if payload is None:
        return None
    message = json.loads(payload[:head_length])
    if not isinstance(message, dict):
        raise ValueError("a frame holds a JSON object")
    carrier = message.pop("raw", None)
    if carrier is not None:
        if carrier not in _CARRIERS or not isinstance(message.get(carrier), dict):
            raise ValueError("a frame's raw text belongs to its event or its response")
        message[carrier]["body"] = payload[head_length:].decode("utf-8", "surrogatepass")
    elif raw_length:
        raise ValueError("a frame carries raw text but names no carrier")
    return message


def _read_exactly(stream: BinaryIO, size: int) -> bytes | None:
    data = stream.read(size)  # a buffered stream returns fewer bytes only at its end
    return data if len(data) == size else None
