"""Bytes -> text: byte-order mark, then strict UTF-8, then the declared charset, then detection; never binary."""

from __future__ import annotations

import re

from kindex.domain.errors import UnsupportedType

_BOMS = (
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe\x00\x00", "utf-32-le"),  # before UTF-16 LE, whose mark it starts with
    (b"\xef\xbb\xbf", "utf-8"),
    (b"\xfe\xff", "utf-16-be"),
    (b"\xff\xfe", "utf-16-le"),
)
# Characters text does not contain: C0 controls other than tab, line and page breaks, DEL, the C1 block
# (only a wrong single-byte decoding produces it) and the replacement character of undecodable bytes.
_BINARY_CHARACTERS = re.compile("[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f-\x9f\ufffd]")
_BINARY_SAMPLE_WINDOWS = 16
_BINARY_SAMPLE_CHARS = 64 * 1024
# A few stray control characters (a NUL, an escape) are tolerated and removed; a binary file has thousands.
_BINARY_MIN_COUNT = 8
_BINARY_MAX_SHARE = 0.01
# Encodings the detector cannot tell apart on short input (it scores them the same): then the web's default
# for undeclared Western text wins, as WHATWG specifies for browsers.
_FALLBACK_ENCODING = "cp1252"
_DETECTION_SAMPLE_BYTES = 256 * 1024


def decode_text(data: bytes, declared: str | None = None) -> str:
    """Bytes -> text by byte-order mark, then strict UTF-8, then the `declared` charset (HTML's meta), then
    charset-normalizer's detection. Raises `UnsupportedType` when the result is not text."""
    text = _decode_by_bom(data)
    if text is None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = _decode_declared(data, declared)
            if text is None:
                text = _decode_detected(data)
    if _looks_binary(text):
        raise UnsupportedType("File content is binary, not text")
    return text


def _decode_by_bom(data: bytes) -> str | None:
    for bom, codec in _BOMS:
        if data.startswith(bom):
            try:
                return data[len(bom) :].decode(codec)
            except UnicodeDecodeError:
                name = codec.upper()
                raise UnsupportedType(f"File starts with a {name} byte-order mark but is not {name} text") from None
    return None


def _decode_declared(data: bytes, declared: str | None) -> str | None:
    if not declared:
        return None
    try:
        return data.decode(declared)
    except (LookupError, UnicodeDecodeError):
        return None  # an unknown or wrong declaration: detect instead


def _decode_detected(data: bytes) -> str:
    from charset_normalizer import from_bytes

    matches = list(from_bytes(data))
    if not matches:
        raise UnsupportedType("File content is binary, not text in any known encoding")
    best = matches[0]
    encoding = best.encoding
    tied = [m.encoding for m in matches if m.chaos == best.chaos and m.coherence == best.coherence]
    # Compared on a prefix: the detector scores a sample too, and decoding the whole file once per tied
    # candidate would cost more than the rest of the extraction.
    sample = data[:_DETECTION_SAMPLE_BYTES]
    fallback = sample.decode(_FALLBACK_ENCODING, errors="replace")
    if any(
        candidate == _FALLBACK_ENCODING or sample.decode(candidate, errors="replace") == fallback for candidate in tied
    ):
        encoding = _FALLBACK_ENCODING
    # A stray byte the encoding lacks becomes U+FFFD, which `_looks_binary` counts, rather than failing the file.
    return data.decode(encoding, errors="replace")


def _looks_binary(text: str) -> bool:
    """True when sampled windows spread over the text hold more than a trace of non-text characters."""
    if len(text) <= _BINARY_SAMPLE_WINDOWS * _BINARY_SAMPLE_CHARS:
        samples = [text]
    else:
        step = (len(text) - _BINARY_SAMPLE_CHARS) // (_BINARY_SAMPLE_WINDOWS - 1)
        samples = [text[i * step : i * step + _BINARY_SAMPLE_CHARS] for i in range(_BINARY_SAMPLE_WINDOWS)]
    sampled = sum(len(sample) for sample in samples)
    found = sum(len(_BINARY_CHARACTERS.findall(sample)) for sample in samples)
    return found > max(_BINARY_MIN_COUNT, _BINARY_MAX_SHARE * sampled)
