"""Value types shared by the ingestion pipeline, the embedders and the search index ports."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kindex.domain.filters import Access, AttributeValue, Expression


@dataclass(frozen=True, slots=True)
class PageSpan:
    """Page `number` (1-based) starts at character `start` of the extracted text."""

    start: int
    number: int


@dataclass(frozen=True, slots=True)
class Heading:
    """A heading of level `level` (1 = the document's title or top heading) whose line starts at character `start`
    of the extracted text; `title` is its text on one line."""

    start: int
    level: int
    title: str


@dataclass(frozen=True, slots=True)
class TableSpan:
    """A Markdown table at `text[start:end]`; its header row and separator line are `text[start:header_end]`, and
    each further line up to `end` is one row."""

    start: int
    end: int
    header_end: int


@dataclass(frozen=True, slots=True)
class ExtractedText:
    """Text extracted from a file. `pages` is None for formats without pages (txt, md, html, docx); `headings` and
    `tables` are what the format knows of the text's structure, in text order (empty when it knows none)."""

    text: str
    pages: tuple[PageSpan, ...] | None = None
    headings: tuple[Heading, ...] = ()
    tables: tuple[TableSpan, ...] = ()
    #: What the text lacks that the file holds (scanned pages left unread, and why), for the document's
    #: failure_reason once it is indexed; None when the text is all there is.
    warning: str | None = None


@dataclass(frozen=True, slots=True)
class OcrOutcome:
    """What OCR made of the pages it was asked to read, by 0-based page index: `texts` for the pages it read
    ("" for a page where it found no words), `unread` with the reason for each page it would not or could not read
    (too many pixels to render, an engine error)."""

    texts: Mapping[int, str]
    unread: Mapping[int, str]


@dataclass(frozen=True, slots=True)
class TextChunk:
    """One chunk: `text == source[start:end]` of the extracted text; pages are 1-based and None without pages.
    `section` is the heading path the chunk starts under ("Title > Chapter > Section"), `table_header` the header
    row and separator line of the table a chunk continues (it starts past them): context for embedding, keyword
    search and readers, never part of `text`. Both None without structure."""

    index: int
    start: int
    end: int
    text: str
    page_start: int | None = None
    page_end: int | None = None
    section: str | None = None
    table_header: str | None = None


@dataclass(frozen=True, slots=True)
class Principals:
    """On whose behalf a query searches, for the documents' access lists (domain/filters.py `admits`): the end
    user and their groups as the tenant's backend names them, and whether the collection requires an access list
    (`document_access: "required"`: a document without one is visible to nobody). No groups match no group."""

    user: str | None = None
    groups: tuple[str, ...] = ()
    required: bool = False


@dataclass(frozen=True, slots=True)
class SearchFilters:
    """Optional narrowing of a search; None means 'no constraint', except for `principals`: without them a search
    names no user and no group (as `Principals()`), so it sees only documents without an access list - a caller that
    forgets them never widens what is seen. `attributes` (a parsed filter expression) and the principals are applied
    inside the index, before ranking, on every leg of a search: a hit always satisfies them, so k results come back
    whenever k exist."""

    document_ids: tuple[str, ...] | None = None
    language: str | None = None
    mimetype: str | None = None
    attributes: Expression | None = None
    principals: Principals | None = None


@dataclass(frozen=True, slots=True)
class IndexRecord:
    """What the search index holds for one chunk: ids and filter fields, the vector, and text for BM25.

    The text is indexed for keyword search but never returned by the index: the metadata store is the
    single source of truth for chunk text.
    """

    tenant: str
    collection: str
    document_id: str
    chunk_id: str
    vector: tuple[float, ...] | list[float]
    text: str
    language: str | None = None
    mimetype: str | None = None
    # The document's attributes and access list (domain/filters.py), for `SearchFilters.attributes`/`principals`;
    # None: the document has none (every attribute missing; visible unless the collection requires a list).
    attributes: Mapping[str, AttributeValue] | None = None
    access: Access | None = None


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One ranked result of a search: ids and a score (higher is better), never text."""

    chunk_id: str
    document_id: str
    collection: str
    score: float


@dataclass(frozen=True, slots=True)
class StoredChunk:
    """A chunk as the metadata store keeps it: the single source of truth for chunk text."""

    chunk_id: str
    collection: str
    document_id: str
    index: int
    start: int
    end: int
    text: str
    page_start: int | None = None
    page_end: int | None = None
    # TextChunk's context; None for chunks stored before chunks had it, and for imported chunks.
    section: str | None = None
    table_header: str | None = None


@dataclass(frozen=True, slots=True)
class ChunkRange:
    """A run of one document's chunks by index, `first` to `last` inclusive (the neighbours `expand` reads)."""

    collection: str
    document_id: str
    first: int
    last: int


@dataclass(frozen=True, slots=True)
class ChunkRef:
    """Enough to find one stored chunk (search hits carry all three)."""

    collection: str
    document_id: str
    chunk_id: str


@dataclass(frozen=True, slots=True)
class QueueMessage:
    """A message received from a queue; `receive_count` counts deliveries including this one."""

    message_id: str
    body: str
    receive_count: int
