"""Request and response bodies of the API function that are not domain models (the OpenAPI contract)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from kindex.domain.filters import Attributes
from kindex.domain.media_types import MediaType
from kindex.domain.models import (
    ACCESS_EXAMPLE,
    ATTRIBUTES_EXAMPLE,
    Collection,
    Document,
    DocumentAccess,
    DocumentPage,
    DocumentSummary,
    EmbeddingWindow,
    embedding_window,
)


class CollectionOut(Collection):
    """A collection as the API shows it: the stored fields and the read-only window report of its model."""

    embedding_window: EmbeddingWindow | None = None

    @classmethod
    def of(cls, collection: Collection) -> "CollectionOut":
        return cls.model_validate({**dict(collection), "embedding_window": embedding_window(collection)})


class CollectionList(BaseModel):
    collections: list[str]
    next_cursor: str | None = None


class DocumentList(BaseModel):
    """A page of documents: `documents` their ids (as before summaries came), `items` what each one is, in the same
    order."""

    documents: list[str]
    items: list[DocumentSummary] = Field(default_factory=list)
    next_cursor: str | None = None

    @classmethod
    def of(cls, page: DocumentPage) -> "DocumentList":
        return cls(documents=[d.id for d in page.documents], items=page.documents, next_cursor=page.next_cursor)


class DocumentOut(Document):
    content: str | None = None


class UploadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    filename: str = Field(min_length=1, max_length=255)
    mimetype: MediaType | None = None
    # The exact length of the file to upload: it is signed into the upload URL, and over the file limit is a 413.
    size: int = Field(ge=0, le=2**53, strict=True)
    # The document's filter fields, set with the new file (as `PUT .../documents/{d}` sets them).
    attributes: Attributes | None = Field(default=None, examples=[ATTRIBUTES_EXAMPLE])
    access: DocumentAccess | None = Field(default=None, examples=[ACCESS_EXAMPLE])

    def fields(self) -> dict:
        """The filter fields the body names (an explicit null removes one)."""
        return {name: getattr(self, name) for name in self.model_fields_set & {"attributes", "access"}}


class UploadResponse(BaseModel):
    url: str
    method: str
    headers: dict[str, str]
    expires_at: datetime
    document: DocumentOut


class ChunkOut(BaseModel):
    chunk_id: str
    index: int
    start: int
    end: int
    page_start: int | None
    page_end: int | None
    text: str
    section: str | None = None
    table_header: str | None = None


class ChunkList(BaseModel):
    chunks: list[ChunkOut]
    next_cursor: str | None = None


class RightsSecret(BaseModel):
    secret: str
    header: str
    signature_format: str


class ReindexRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    clean: StrictBool = False
