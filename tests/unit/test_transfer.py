"""The pure parts of export/import: the text rebuilt from chunk offsets, the export cursor."""

import base64

import pytest

from kindex.app.transfer import _Cursor, rebuilt_text
from kindex.domain.errors import InvalidInput
from kindex.domain.types import StoredChunk

pytestmark = pytest.mark.unit


def chunk(start, text, index=0):
    return StoredChunk(
        chunk_id=f"c{index}",
        collection="c",
        document_id="d",
        index=index,
        start=start,
        end=start + len(text),
        text=text,
    )


def test_rebuilt_text_puts_each_chunk_at_its_offsets():
    # overlapping chunks agree on their shared characters; a gap no chunk covers becomes spaces
    source = "The quick brown fox jumps over the lazy dog."
    chunks = [chunk(0, source[0:15], 0), chunk(10, source[10:25], 1), chunk(30, source[30:], 2)]
    rebuilt = rebuilt_text(chunks[::-1])
    assert len(rebuilt) == len(source)
    assert rebuilt[:25] == source[:25] and rebuilt[25:30] == "     " and rebuilt[30:] == source[30:]
    assert rebuilt_text([chunk(3, "abc")]) == "   abc"
    assert rebuilt_text([chunk(0, "abcdef", 0), chunk(2, "cd", 1)]) == "abcdef"  # a chunk inside another


def test_export_cursors_round_trip_and_tampered_ones_are_invalid_input():
    for cursor in (_Cursor(after_document="d 1"), _Cursor(document="d/é", after_chunk=(3, "abc"))):
        assert _Cursor.decode(cursor.encode()) == cursor
    assert _Cursor.decode(None) == _Cursor()
    for value in (
        '{"after": "[\\"in\\", \\"d\\", \\"3\\", \\"x\\"]"}',
        '{"after": "[]"}',
        '{"after": "{}"}',
        '{"after": "[\\"after\\", 5]"}',
        '{"after": "not json"}',
    ):
        tampered = base64.urlsafe_b64encode(value.encode()).decode().rstrip("=")
        with pytest.raises(InvalidInput):
            _Cursor.decode(tampered)
    with pytest.raises(InvalidInput):
        _Cursor.decode("%%%")
