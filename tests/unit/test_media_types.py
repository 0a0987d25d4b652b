"""The mimetype rule (domain/media_types.py): RFC 6838 `type/subtype` without parameters in every request model that
takes one, and stored records written before the rule still load, their malformed value read as unknown."""

import pytest
from pydantic import ValidationError

from kindex.api.models import UploadRequest
from kindex.domain.media_types import is_media_type
from kindex.domain.models import Document, DocumentInput
from kindex.domain.transfer import TransferDocument
from kindex.domain.validation import describe

pytestmark = pytest.mark.unit

WELL_FORMED = [
    "text/plain",
    "application/pdf",
    "text/markdown",
    "image/svg+xml",
    "application/vnd.ms-excel",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "a/b",
    "TEXT/HTML",
    "application/x.custom!#$&^_",
    "x" * 127 + "/" + "y" * 127,
]
HOSTILE = [
    "text/plain\r\nX-Evil: 1",
    "../../etc",
    "text/plain; charset=utf-8",
    "text/plain ",
    " text/plain",
    "text",
    "text/",
    "/plain",
    "text/plain/x",
    "text/pl ain",
    "text/*",
    "*/*",
    "-text/plain",
    "text/.plain",
    "text/plain\x00",
    "text/plaïn",
    "text\\plain",
    '"text/plain"',
    "x" * 128 + "/y",
    "text/" + "y" * 128,
    "text/plain\n",
    "text/<script>",
]

REQUEST_MODELS = {
    "upload request": lambda mimetype: UploadRequest(filename="a.txt", size=1, mimetype=mimetype),
    "document PUT": lambda mimetype: DocumentInput(mimetype=mimetype),
    "import document": lambda mimetype: TransferDocument(id="d", chunk_count=1, mimetype=mimetype),
}


@pytest.mark.parametrize("value", WELL_FORMED)
@pytest.mark.parametrize("model", REQUEST_MODELS)
def test_well_formed_media_types_are_accepted_as_given(model, value):
    assert REQUEST_MODELS[model](value).mimetype == value


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize("model", REQUEST_MODELS)
def test_anything_else_is_refused_naming_the_field(model, value):
    # When a request model is given a value that is not type/subtype / Then validation fails on `mimetype`
    with pytest.raises(ValidationError) as caught:
        REQUEST_MODELS[model](value)
    assert describe(caught.value).startswith("mimetype: must be a media type such as text/plain")


@pytest.mark.parametrize("model", REQUEST_MODELS)
def test_empty_means_not_given(model):
    assert REQUEST_MODELS[model]("").mimetype == ""


def test_a_stored_record_from_before_the_rule_loads_with_its_mimetype_unknown():
    # Given records stored when any text was accepted / When they are read / Then they load; a malformed
    # mimetype reads as '' (never shown, exported or sent as a header again), a well-formed one as it was
    for stored, read in (
        ("text/plain\r\nX-Evil: 1", ""),
        ("../../etc", ""),
        ("\U0001f600" * 255, ""),
        ("text/markdown", "text/markdown"),
        ("", ""),
    ):
        assert Document.model_validate({"id": "d", "collection": "c", "mimetype": stored}).mimetype == read
    # And the export record built from such a document validates
    legacy = Document.model_validate({"id": "d", "collection": "c", "mimetype": "../../etc"})
    assert TransferDocument(id=legacy.id, chunk_count=1, mimetype=legacy.mimetype).mimetype == ""


def test_is_media_type_matches_the_request_rule():
    assert all(is_media_type(v) for v in WELL_FORMED) and not any(is_media_type(v) for v in HOSTILE + [""])
