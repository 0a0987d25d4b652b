"""The one rule for a document's `mimetype`: a well-formed media type, because it is stored, shown, and sent back as
the Content-Type header an upload must carry (a value with CR/LF or a path in it would be a header to inject or a
name to misread).

Well-formed is RFC 6838's `type "/" subtype`, each a restricted-name (a letter or digit, then at most 126 letters,
digits or ``!#$&-^_.+``), without parameters: nothing reads them (extraction takes the charset from the bytes, and
picks the format by type and subtype), and a parameter's quoted-string would let spaces, quotes and semicolons into
a value that travels as a header. The empty string stays allowed: it means "not given" (guess from the file name)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field

MAX_LENGTH = 255
_RESTRICTED_NAME = r"[A-Za-z0-9][A-Za-z0-9!#$&\-^_.+]{0,126}"
_MEDIA_TYPE = re.compile(f"{_RESTRICTED_NAME}/{_RESTRICTED_NAME}")


def is_media_type(value: str) -> bool:
    """True for `type/subtype` under RFC 6838's restricted-name rule (no parameters, no spaces)."""
    return len(value) <= MAX_LENGTH and _MEDIA_TYPE.fullmatch(value) is not None


def check_media_type(value: str) -> str:
    """A mimetype given by a client: '' (not given) or a well-formed media type."""
    if value and not is_media_type(value):
        raise ValueError(
            "must be a media type such as text/plain: type/subtype of letters, digits and !#$&-^_.+ "
            "(each starting with a letter or digit), without parameters or spaces"
        )
    return value


def _stored_media_type(value: object) -> object:
    # Before the rule, any text up to 255 characters was accepted and stored: a stored value that is not a media
    # type reads as '' (unknown, so the file name decides), and is never shown or sent as a header again.
    return value if not isinstance(value, str) or not value or is_media_type(value) else ""


#: A mimetype in a request (upload ticket, document PUT, import): refused with 422 when not well-formed.
MediaType = Annotated[str, Field(max_length=MAX_LENGTH), AfterValidator(check_media_type)]
#: A stored document's mimetype: records written before the rule load, with a malformed value read as ''.
StoredMediaType = Annotated[str, BeforeValidator(_stored_media_type), Field(max_length=MAX_LENGTH)]
