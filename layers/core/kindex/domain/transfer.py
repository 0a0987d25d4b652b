"""Export and import of one collection: the records of the versioned export format (`kindex export` writes them as
JSON lines, `GET .../export` serves them in pages, `POST .../import` takes them back in batches).

A document travels with its metadata and the number of its chunks; a chunk with its position (index, offsets,
pages), its text and its vector under the export's model (None when the exporting deployment had none at hand).
The same two records are read and written, so an exported line can be sent back as it is."""

from __future__ import annotations

import math
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, StrictFloat, StrictInt, model_validator

from kindex.domain.embedding_models import HASH_MAX_DIMENSIONS, EmbeddingModelName
from kindex.domain.filters import Attributes
from kindex.domain.media_types import MediaType
from kindex.domain.models import Collection, DocumentAccess, DocumentUrl, ResourceId

FORMAT: Final = "kindex-export"
FORMAT_VERSION = 1
#: Bounds of one import batch and one export page (each also stays under the 10 MiB request / 6 MB response limits).
MAX_BATCH_DOCUMENTS = 1000
MAX_BATCH_CHUNKS = 1000
DEFAULT_EXPORT_CHUNKS = 500
#: A chunk's text: the largest maxChars chunk (a tokens chunk of 8,192 tokens is shorter in practice).
MAX_CHUNK_TEXT = 100_000
#: A document's text, rebuilt from its chunks' offsets on import: the file limit's order of magnitude.
MAX_DOCUMENT_CHARS = 64 * 1024 * 1024
#: What one import batch may send to the embedding model (chunks without a vector, or every chunk when the export's
#: model is not the collection's): the embedding runs inside the request, which must answer within its budget
#: (KINDEX_REQUEST_BUDGET_S, 25 s; API Gateway gives up at 29 s). The local int8 model embeds about 65,000
#: characters a second on one idle 2-core machine and 16,000 under load, so 100,000 characters take 2-7 s; a
#: provider embeds them in one or two calls. A larger batch is 413 `payload_too_large`: split it
#: (`split_for_embedding`; `kindex import` and the SDK's `import_batch` do).
MAX_EMBED_TEXTS = 100
MAX_EMBED_CHARS = 100_000

Count = Annotated[int, Strict(), Field(ge=0, le=MAX_DOCUMENT_CHARS)]
PageNumber = Annotated[int, Strict(), Field(ge=1, le=10**6)]


class TransferDocument(BaseModel):
    """One document of an export: its metadata and how many chunks follow for it."""

    model_config = ConfigDict(extra="forbid")

    id: ResourceId
    title: str = Field(default="", max_length=1024)
    language: str = Field(default="", max_length=64)
    url: DocumentUrl = ""
    mimetype: MediaType = ""  # of the source it was indexed from (informative on import)
    content_sha256: str | None = Field(default=None, max_length=64)
    chunk_count: Annotated[int, Strict(), Field(ge=1, le=10**6)]
    # Its filter fields (an export of a version before them has none: no attributes, no access list).
    attributes: Attributes | None = None
    access: DocumentAccess | None = None


# As long as the chunker writes them (kindex.text.chunking), with room for an exporter's own.
MAX_SECTION_CHARS = 1000
MAX_TABLE_HEADER_CHARS = 2000


class TransferChunk(BaseModel):
    """One chunk: `text` is `source[start:end]` of the document's extracted text, so its length is `end - start`."""

    model_config = ConfigDict(extra="forbid")

    document_id: ResourceId
    chunk_id: str | None = Field(default=None, max_length=255)  # the exporter's id; the importer derives its own
    index: Annotated[int, Strict(), Field(ge=0, lt=10**6)]
    start: Count
    end: Count
    page_start: PageNumber | None = None
    page_end: PageNumber | None = None
    text: str = Field(min_length=1, max_length=MAX_CHUNK_TEXT)
    # The chunk's context (its heading path; the header of the table it continues): embedded and keyword-indexed
    # with the text, never part of it. Absent in exports of versions before chunks had them.
    section: str | None = Field(default=None, min_length=1, max_length=MAX_SECTION_CHARS)
    table_header: str | None = Field(default=None, min_length=1, max_length=MAX_TABLE_HEADER_CHARS)
    vector: list[StrictFloat | StrictInt] | None = Field(default=None, min_length=1, max_length=HASH_MAX_DIMENSIONS)

    @model_validator(mode="after")
    def _check_position(self) -> "TransferChunk":
        if self.end - self.start != len(self.text):
            raise ValueError("end - start must equal the length of text")
        if (self.page_start is None) != (self.page_end is None):
            raise ValueError("page_start and page_end are both given or both null")
        if self.page_start is not None and self.page_end is not None and self.page_end < self.page_start:
            raise ValueError("page_end must not be before page_start")
        if self.vector is not None:
            # JSON has no NaN or Infinity (the API refuses them), but 1e39 is finite in JSON and infinite in float32.
            if not all(math.isfinite(v) and abs(v) < 3.4e38 for v in self.vector):
                raise ValueError("vector values must be finite float32 numbers")
            if not any(self.vector):
                raise ValueError("vector must not be all zeros")
        return self


class ExportPage(BaseModel):
    """One page of `GET /v1/collections/{c}/export`: the header fields on every page, then documents and chunks in
    document id order (a document before its chunks; a large document's chunks continue on the next pages)."""

    format: Literal["kindex-export"] = FORMAT
    format_version: int = FORMAT_VERSION
    collection: Collection
    embedding_model: str
    dimensions: int
    documents: list[TransferDocument]
    chunks: list[TransferChunk]
    #: Documents not exported because they are not indexed (pending, in progress or failed).
    skipped_documents: list[str] = Field(default_factory=list)
    next_cursor: str | None = None


class ImportRequest(BaseModel):
    """Body of `POST /v1/collections/{c}/import`: one batch of an export. A document's line must come in the same
    batch as its first chunks or an earlier one; its chunks may spread over several batches."""

    model_config = ConfigDict(extra="forbid")

    format_version: Literal[1]
    embedding_model: EmbeddingModelName
    dimensions: Annotated[int, Strict(), Field(ge=1, le=HASH_MAX_DIMENSIONS)]
    #: The exporting collection's chunking (`chunking_method`, `chunking_max_size`, `chunking_overlap_offset`):
    #: when it differs from the importing collection's, the imported documents are re-chunked by the collection's
    #: rules once imported (their chunks embedded again; the imported ones serve until then). None: chunks cut
    #: elsewhere, kept as they are.
    chunking: dict[str, Any] | None = Field(default=None, max_length=3)
    documents: list[TransferDocument] = Field(default_factory=list, max_length=MAX_BATCH_DOCUMENTS)
    chunks: list[TransferChunk] = Field(default_factory=list, max_length=MAX_BATCH_CHUNKS)


def must_embed(chunk: dict[str, Any] | TransferChunk, reuse: bool) -> bool:
    """Whether the importing collection embeds this chunk's text: its vector is not usable there."""
    vector = chunk.vector if isinstance(chunk, TransferChunk) else chunk.get("vector")
    return not reuse or vector is None


def split_for_embedding(documents: list, chunks: list, reuse: bool) -> list[tuple[list, list]]:
    """The batch as (documents, chunks) parts, in order, each within MAX_EMBED_TEXTS and MAX_EMBED_CHARS of texts to
    embed (`reuse`: the export's model is the collection's, so given vectors are kept); the documents go with the
    first part (a document's line must come no later than its first chunks). One part when the batch fits."""
    parts: list[tuple[list, list]] = []
    current: list = []
    texts = chars = 0
    for chunk in chunks:
        text = chunk.text if isinstance(chunk, TransferChunk) else str(chunk.get("text", ""))
        if must_embed(chunk, reuse):
            if current and (texts + 1 > MAX_EMBED_TEXTS or chars + len(text) > MAX_EMBED_CHARS):
                parts.append((documents if not parts else [], current))
                current, texts, chars = [], 0, 0
            texts += 1
            chars += len(text)
        current.append(chunk)
    parts.append((documents if not parts else [], current))
    return parts


class ImportResult(BaseModel):
    documents_started: int = 0
    documents_completed: int = 0
    chunks_written: int = 0
    #: Chunk texts this batch sent to the embedding service (0 when the models match and every vector was given).
    texts_embedded: int = 0
    #: Imported documents still waiting for chunks (ids), after this batch.
    incomplete_documents: list[str] = Field(default_factory=list)
