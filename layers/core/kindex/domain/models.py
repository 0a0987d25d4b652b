"""Collections, documents and keys: the resources of the v1 API, with XWiki index field names."""

from __future__ import annotations

import re
import unicodedata
from datetime import datetime, timezone
from enum import Enum
from typing import Annotated, Any, Literal
from urllib.parse import quote, urlparse, urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    ValidationInfo,
    field_validator,
    model_validator,
)

from kindex.domain.embedding_models import EmbeddingModelName, check_embedding_model, parse_embedding_model
from kindex.domain.errors import InvalidInput
from kindex.domain.filters import Access, Attributes
from kindex.domain.media_types import MediaType, StoredMediaType

ID_MAX_LENGTH = 255
ID_MAX_ENCODED_BYTES = 255  # one file name (NAME_MAX) per id in the folder blob store
RIGHTS_CHECK_METHODS = ("public", "external")
#: What a document without an access list means in a collection (domain/filters.py `admits`): visible to whoever
#: passes the collection gate ("optional"), or to nobody ("required": fail closed).
DocumentAccessMode = Literal["optional", "required"]
#: A document's access list as JSON: four lists of up to 1,000 principals of up to 256 characters could reach 1 MB,
#: beyond a DynamoDB item (400 KB) and beyond what a search engine should hold per chunk. 128 KiB keeps a document
#: record well inside one item with its attributes (10 KiB) and every other field.
MAX_ACCESS_JSON_BYTES = 128 * 1024


def utc_now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


def check_stored_id(value: str) -> str:
    """The rule every stored id meets: 1-255 characters, no control characters and no '/' (ids travel URL-encoded
    in paths). Records written before `check_id` tightened still load with it."""
    if not 1 <= len(value) <= ID_MAX_LENGTH:
        raise ValueError(f"must be 1 to {ID_MAX_LENGTH} characters")
    if "/" in value:
        raise ValueError("must not contain '/'")
    if _CONTROL.search(value):
        raise ValueError("must not contain control characters")
    return value


# Unicode's control characters (category Cc) are exactly these 65 code points; one regex search instead of a
# category look-up per character (every stored id of every record read is checked: ~30 records per query).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


# Unicode categories a new id must not hold: control (Cc), format (Cf: zero-width characters, the bidi marks,
# embeddings, overrides and isolates, the BOM, the soft hyphen), line and paragraph separators (Zl, Zp). Each makes
# two ids that look alike, or an id that shows as another, or breaks the line it is printed on.
REFUSED_ID_CATEGORIES = {
    "Cc": "control",
    "Cf": "format or bidi",
    "Zl": "line separator",
    "Zp": "paragraph separator",
    "Cs": "lone surrogate",
}

# Symbols drawn as '/' that NFKC keeps apart (Unicode's confusables of '/' that are no letter of a script): an id
# "hr\u2215policy" would read as a path.
SLASH_LOOKALIKES = frozenset("\u2044\u2215\u29f8\u2571\u27cb")


def normalize_id(value: str) -> str:
    """The one form of an id that is compared and stored: NFC ('café' typed precomposed and the decomposed form a
    macOS file name carries are one id)."""
    return unicodedata.normalize("NFC", value)


def check_id(value: str) -> str:
    """A new tenant, collection or document id, or file name: the stored rule, and it must map to exactly one
    storage path of its own and show as itself. '.' and '..' are path steps, not names; a lone surrogate has no
    UTF-8 form, so no key; a part longer than 255 bytes once URL-encoded cannot be a file name (the blob keys'
    parts, see domain/keys.py). It must be in NFC form (the API normalizes path ids before they get here, so only
    a body can send another form); format, bidi and separator characters are refused, and so is any character
    that compatibility-normalizes to '/' (U+FF0F FULLWIDTH SOLIDUS shows as '/', and NFKC-folding tools make it
    one) or is a slash-like symbol (SLASH_LOOKALIKES)."""
    check_stored_id(value)
    if value in (".", ".."):
        raise ValueError("must not be '.' or '..'")
    for ch in value:
        category = unicodedata.category(ch)
        if category in REFUSED_ID_CATEGORIES:
            name = unicodedata.name(ch, "")
            raise ValueError(
                f"must not contain {REFUSED_ID_CATEGORIES[category]} characters "
                f"(U+{ord(ch):04X}{' ' + name if name else ''})"
            )
        if ch in SLASH_LOOKALIKES or "/" in unicodedata.normalize("NFKC", ch):
            raise ValueError(
                f"must not contain characters that stand for '/' (U+{ord(ch):04X} {unicodedata.name(ch, '')})"
            )
    if normalize_id(value) != value:
        raise ValueError("must be in Unicode NFC form (precomposed characters)")
    encoded = len(quote(value, safe=""))
    if encoded > ID_MAX_ENCODED_BYTES:
        raise ValueError(
            f"is {encoded} bytes once URL-encoded, at most {ID_MAX_ENCODED_BYTES} (each non-ASCII "
            "character counts 6 to 12)"
        )
    return value


SAFE_URL_SCHEMES = ("http", "https")


def is_safe_url(url: str) -> bool:
    """A link a browser may follow from a citation: http(s) with a host, or relative (no scheme). Anything with
    another scheme (`javascript:`, `data:`, `file:`), control characters (browsers drop tabs and newlines inside a
    scheme: `java\tscript:`) or surrounding whitespace (browsers strip it) is not."""
    if not url or url != url.strip() or any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in url):
        return False
    try:
        parts = urlsplit(url)
    except ValueError:
        return False  # e.g. an unbalanced '[' in the host
    if not parts.scheme:
        return ":" not in url.split("/", 1)[0]  # a colon there reads as a scheme to some clients
    return parts.scheme.lower() in SAFE_URL_SCHEMES and bool(parts.netloc)


def check_url(value: str) -> str:
    """A document's `url` as written: empty (no link), http(s) or relative."""
    if value and not is_safe_url(value):
        raise ValueError(
            "must be an http(s) URL or a relative one (no other scheme, no control characters or surrounding spaces)"
        )
    return value


def _drop_unsafe_url(value: Any) -> Any:
    """A stored `url` written before the rule: read as no link, so nothing shows or follows it."""
    return value if not isinstance(value, str) or not value or is_safe_url(value) else ""


DocumentUrl = Annotated[str, Field(max_length=4096), AfterValidator(check_url)]


ResourceId = Annotated[str, AfterValidator(check_stored_id)]


def _split_groups(value: Any) -> Any:
    """`query_groups` may come as a comma-separated string (XWiki form) or a list."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


GroupList = Annotated[list[Annotated[str, Field(min_length=1, max_length=255)]], BeforeValidator(_split_groups)]


#: Whether scanned PDF pages are OCRed (Collection.ocr).
OcrMode = Literal["auto", "off"]


class ChunkingMethod(str, Enum):
    MAX_CHARS = "maxChars"
    TOKENS = "tokens"


CHUNKING_DEFAULTS = {
    ChunkingMethod.MAX_CHARS: {"chunking_max_size": 2000, "chunking_overlap_offset": 0},
    ChunkingMethod.TOKENS: {"chunking_max_size": 800, "chunking_overlap_offset": 400},
}

#: Largest `chunking_max_size` per method. maxChars: a 100,000-character chunk still fits one DynamoDB item (400 KB)
#: in 4-byte characters, and is far beyond what any embedder reads; tokens: OpenAI's per-input limit.
MAX_CHUNK_SIZE = {ChunkingMethod.MAX_CHARS: 100_000, ChunkingMethod.TOKENS: 8192}
# Bounds of what one collection record may hold: it is one DynamoDB item (at most 400 KB), so a save that could
# not be stored is refused as input (422) rather than failing in the store (502).
MAX_DOCUMENT_SPACES = 1000
MAX_QUERY_GROUPS = 1000
MAX_COLLECTION_JSON_BYTES = 128 * 1024

# Validation context of a collection being saved (see Collection._check_rules_on_save).
SAVING_KEY = "saving"
SAVING = {SAVING_KEY: True}

# Paging of every list route: a page is small enough to answer well under API Gateway's and Lambda's 6 MB.
MAX_PAGE_START = 10**9
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


class DocumentStatus(str, Enum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    INDEXED = "indexed"
    FAILED = "failed"


class Role(str, Enum):
    """What an API key may do within its tenant. Each route calls one of kindex/api/http.py's `require_*`, which
    admit a fixed set of roles; README "API keys" has the table."""

    ADMIN = "admin"  # everything
    READER = "reader"  # read collections, documents, content, chunks and jobs; query; render citations
    QUERY = "query"  # query and render citations, nothing else


class Collection(BaseModel):
    """A stored collection. Cross-field rules hold for every stored value (creation and after each update)."""

    model_config = ConfigDict(extra="forbid", use_enum_values=False)

    id: ResourceId
    title: str = Field(default="", max_length=1024)
    embedding_model: str
    chunking_method: ChunkingMethod = ChunkingMethod.MAX_CHARS
    chunking_max_size: int = 2000
    chunking_overlap_offset: int = 0
    # How documents become chunks beyond method and sizes (CHUNKING_VERSION below): 1 for a collection
    # stored before sections and the table rule existed (its chunks have neither), the current version for a new
    # one. A reindex job (POST .../reindex) brings a collection to the current version, bumping config_version.
    chunking_version: int = 1
    # Whether a PDF page without a text layer (a scan) is read by OCR: Tesseract locally, Amazon Textract on AWS.
    # A config field: changing it bumps config_version, and a reindex reads the documents again. A page left unread
    # is named in its document's failure_reason.
    ocr: OcrMode = "auto"
    document_spaces: list[Annotated[str, Field(max_length=1024)]] = Field(default_factory=list)
    allow_guests: bool = False
    query_groups: GroupList = Field(default_factory=list)
    rights_check_method: str = "public"
    rights_check_method_configuration: dict[str, Any] = Field(default_factory=dict)
    document_access: DocumentAccessMode = "optional"
    created_at: datetime = Field(default_factory=utc_now)
    updated_at: datetime = Field(default_factory=utc_now)
    document_count: int = 0
    # Bumped when the chunking or the model changes (documents indexed under an older one need reindexing); only then.
    config_version: int = 1
    active_embedding_model: str | None = None
    # Changes on every committed write of the record (a PUT of any field, a model switch): updates are conditional on
    # the revision they read, so no write can overwrite a record it has not seen. 0 for a record written before
    # collections had revisions.
    revision: int = 0

    @property
    def query_model(self) -> str:
        """The model queries use: the previous one while a model change is being built, else `embedding_model`."""
        return self.active_embedding_model or self.embedding_model

    @property
    def switching(self) -> bool:
        return self.query_model != self.embedding_model

    @model_validator(mode="after")
    def _check_rules(self) -> "Collection":
        size, overlap = self.chunking_max_size, self.chunking_overlap_offset
        if self.chunking_method is ChunkingMethod.MAX_CHARS:
            if size < 10:
                raise ValueError("chunking_max_size must be at least 10 characters for maxChars")
            if not 0 <= 2 * overlap < size:  # integer arithmetic: no float can overflow here
                raise ValueError("chunking_overlap_offset must be at least 0 and less than half of chunking_max_size")
        else:
            if not 100 <= size <= 8192:
                raise ValueError("chunking_max_size must be between 100 and 8192 tokens for tokens")
            if not 0 <= 2 * overlap <= size:
                raise ValueError("chunking_overlap_offset must be between 0 and half of chunking_max_size")
        if self.rights_check_method not in RIGHTS_CHECK_METHODS:
            raise ValueError(f"rights_check_method must be one of {', '.join(RIGHTS_CHECK_METHODS)}")
        if self.rights_check_method == "external":
            url = self.rights_check_method_configuration.get("url")
            parsed = urlparse(url) if isinstance(url, str) else None
            if parsed is None or parsed.scheme not in ("http", "https") or not parsed.netloc:
                raise ValueError("rights_check_method_configuration.url must be an http(s) URL for the external method")
            timeout = self.rights_check_method_configuration.get("timeout", 2)
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 10:
                raise ValueError("rights_check_method_configuration.timeout must be a number of seconds in (0, 10]")
        return self

    @model_validator(mode="after")
    def _check_rules_on_save(self, info: ValidationInfo) -> "Collection":
        """Rules judged when a collection is saved (validation context SAVING), not when a stored one is read:
        a record saved before a rule grew stricter stays readable, and is judged again at its next save."""
        if not (info.context or {}).get(SAVING_KEY):
            return self
        try:
            check_embedding_model(self.embedding_model)
        except ValueError as error:
            raise ValueError(f"embedding_model: {error}") from error
        largest = MAX_CHUNK_SIZE[self.chunking_method]
        if self.chunking_max_size > largest:
            raise ValueError(f"chunking_max_size must be at most {largest} for {self.chunking_method.value}")
        if len(self.model_dump_json().encode("utf-8")) > MAX_COLLECTION_JSON_BYTES:
            raise ValueError(
                f"document_spaces, query_groups, rights_check_method_configuration and title together "
                f"must stay under {MAX_COLLECTION_JSON_BYTES // 1024} KiB of JSON"
            )
        return self


#: Typical English prose: about 4 characters per token (word piece, sentencepiece or cl100k alike; a SciFact
#: abstract of 2,000 characters is ~450 word pieces). Other scripts and digits make more tokens per character.
CHARS_PER_TOKEN_ENGLISH = 4


class EmbeddingWindow(BaseModel):
    """How the collection's chunks fit its embedding model's window (read-only; part of the collection resource).

    `long_chunks` says what the model does with a chunk longer than `window_tokens`: `pooled` (local models embed
    consecutive windows and average them: every token counts), `truncated` (OpenAI reads the first 8,191 tokens),
    `none` (the model has no window). `warning` is set when the chunk size can exceed the window."""

    model: str
    window_tokens: int | None
    chunk_tokens_estimate: int
    exceeds_window: bool
    long_chunks: Literal["pooled", "truncated", "none"]
    warning: str | None = None


def embedding_window(collection: "Collection") -> EmbeddingWindow | None:
    """The window report of the collection's configured model; None for a stored name this version cannot parse."""
    try:
        spec = parse_embedding_model(collection.embedding_model)
    except InvalidInput:
        return None
    size = collection.chunking_max_size
    estimate = size if collection.chunking_method is ChunkingMethod.TOKENS else -(-size // CHARS_PER_TOKEN_ENGLISH)
    window = spec.window_tokens
    long_chunks = "none" if window is None else ("truncated" if spec.family == "openai" else "pooled")
    exceeds = window is not None and estimate > window
    warning = None
    if exceeds:
        unit = "tokens" if collection.chunking_method is ChunkingMethod.TOKENS else "characters"
        effect = (
            "everything past the window is ignored"
            if long_chunks == "truncated"
            else "they are embedded as windows of the model and averaged, so nothing is cut but each vector blurs "
            "its chunk's parts"
        )
        warning = (
            f"chunks of up to {size} {unit} (~{estimate} tokens) exceed the {window}-token window of "
            f"{spec.canonical}: {effect}; a smaller chunking_max_size keeps each chunk in one window"
        )
    return EmbeddingWindow(
        model=spec.canonical,
        window_tokens=window,
        chunk_tokens_estimate=estimate,
        exceeds_window=exceeds,
        long_chunks=long_chunks,
        warning=warning,
    )


COLLECTION_READ_ONLY = frozenset(
    {
        "created_at",
        "updated_at",
        "document_count",
        "config_version",
        "active_embedding_model",
        "embedding_window",
        "revision",
        "chunking_version",
    }
)
#: The chunking version of a new collection (text/chunking.py): 2 adds heading paths and the table rule.
CHUNKING_VERSION = 2

COLLECTION_CONFIG_FIELDS = frozenset(
    # `ocr` too: it changes what text a scanned PDF yields, so a reindex must read the documents again.
    {"embedding_model", "chunking_method", "chunking_max_size", "chunking_overlap_offset", "chunking_version", "ocr"}
)


class CollectionInput(BaseModel):
    """Body of `PUT /v1/collections/{c}`: every field optional, only present ones change, read-only ones ignored."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    title: str | None = None
    embedding_model: EmbeddingModelName | None = None
    chunking_method: ChunkingMethod | None = None
    # JSON integers only ("5", 5.0 and true are refused), within the largest size any method accepts; the
    # per-method bounds are checked on the merged collection.
    chunking_max_size: Annotated[int, Strict(), Field(ge=1, le=max(MAX_CHUNK_SIZE.values()))] | None = None
    chunking_overlap_offset: Annotated[int, Strict(), Field(ge=0, le=max(MAX_CHUNK_SIZE.values()) // 2)] | None = None
    ocr: OcrMode | None = Field(
        default=None,
        description=(
            "Whether PDF pages without a text layer (scans) are read by OCR: `auto` (default: when this deployment "
            "has an OCR engine) or `off` (such pages stay empty and the document's failure_reason names them)"
        ),
    )
    document_spaces: list[Annotated[str, Field(max_length=1024)]] | None = Field(
        default=None, max_length=MAX_DOCUMENT_SPACES
    )
    allow_guests: StrictBool | None = None
    query_groups: Annotated[GroupList, Field(max_length=MAX_QUERY_GROUPS)] | None = None
    rights_check_method: str | None = None
    rights_check_method_configuration: dict[str, Any] | None = None
    document_access: DocumentAccessMode | None = Field(
        default=None,
        description=(
            "What a document without `access` means: `optional` (visible to whoever passes the collection gate) or "
            "`required` (visible to nobody: fail closed)"
        ),
    )
    # Read-only: accepted so that a GET body can be PUT back, then ignored.
    created_at: Any = None
    updated_at: Any = None
    document_count: Any = None
    config_version: Any = None
    active_embedding_model: Any = None
    embedding_window: Any = None
    revision: Any = None
    chunking_version: Any = None  # set by the service: new collections get the current one, a reindex upgrades

    def changes(self) -> dict[str, Any]:
        """The writable fields present in the body (explicit nulls of writable fields are rejected by validation
        later)."""
        return {name: getattr(self, name) for name in self.model_fields_set - COLLECTION_READ_ONLY - {"id"}}


def _check_access_size(access: Access | None) -> Access | None:
    if access is not None:
        size = len(access.model_dump_json().encode("utf-8"))
        if size > MAX_ACCESS_JSON_BYTES:
            raise ValueError(f"{size:,} bytes as JSON, more than the {MAX_ACCESS_JSON_BYTES:,} allowed")
    return access


#: A document's access list in a request body: `Access` and, for the whole list, MAX_ACCESS_JSON_BYTES.
DocumentAccess = Annotated[Access, AfterValidator(_check_access_size)]

#: The document fields the search index filters on: a change of any of them rewrites the document's index entries
#: (never re-embedding, see IngestService), and bumps `fields_version`.
FILTER_FIELDS = frozenset({"attributes", "access", "language", "mimetype"})

ATTRIBUTES_EXAMPLE = {"region": "eu", "year": 2024, "confidential": False, "tags": ["hr", "policy"]}
ACCESS_EXAMPLE = {"users": ["alice"], "groups": ["hr"], "deny_users": [], "deny_groups": ["contractors"]}


class Document(BaseModel):
    """A stored document's metadata. Its text lives in the blob store, not here."""

    model_config = ConfigDict(extra="forbid")

    id: ResourceId
    collection: ResourceId
    title: str = Field(default="", max_length=1024)
    language: str = Field(default="", max_length=64)
    url: Annotated[str, BeforeValidator(_drop_unsafe_url)] = Field(default="", max_length=4096)
    mimetype: StoredMediaType = ""
    status: DocumentStatus = DocumentStatus.PENDING
    failure_reason: str | None = None
    chunk_count: int = 0
    # Progress while `in_progress`: how many of `chunk_count` chunks are embedded and indexed (equal once indexed).
    chunks_done: int = 0
    content_sha256: str | None = None
    content_length: int = 0
    source: str | None = None
    # The content version: changes only with new content (ingest compares it to skip superseded content).
    version: int = 0
    # Changes on every committed write of the record, content or not: updates are conditional on the revision they
    # read, so no write can overwrite a record it has not seen. 0 for a record written before revisions existed.
    revision: int = 0
    indexed_version: int = 0
    indexed_model: str | None = None
    indexed_config_version: int = 0
    indexed_at: datetime | None = None
    failure_retryable: bool = False
    # Filter fields (domain/filters.py): what a query's `filters.attributes` and the access lists read, in the index
    # and again on this record (the truth: a revocation here takes effect at once). None: none at all.
    attributes: Attributes | None = Field(default=None, examples=[ATTRIBUTES_EXAMPLE])
    access: Access | None = Field(default=None, examples=[ACCESS_EXAMPLE])
    # Bumped by every write that changes a filter field (FILTER_FIELDS); `indexed_fields_version` is the one the
    # index entries carry. They differ while the entries are being rewritten (no re-embedding).
    fields_version: int = 0
    indexed_fields_version: int = 0
    created_at: datetime = Field(default_factory=utc_now)
    updated_at: datetime = Field(default_factory=utc_now)

    def content_current(self, collection: Collection, content_sha256: str | None = None) -> bool:
        """Its chunks and vectors are those of its latest version, with the collection's model and chunking (and,
        when given, of exactly this content); only the filter fields of its index entries may still be stale."""
        return (
            self.indexed_version == self.version
            and self.indexed_model == collection.embedding_model
            and self.indexed_config_version == collection.config_version
            and (content_sha256 is None or content_sha256 == self.content_sha256)
            and self.searchable
        )

    @property
    def fields_stale(self) -> bool:
        """A filter field changed since the index entries were written (they are being rewritten)."""
        return self.fields_version != self.indexed_fields_version

    @property
    def searchable(self) -> bool:
        """The index holds this document's current content: indexed, or indexed and its filter fields being
        rewritten (the query checks those on this record, so the older entries may serve meanwhile)."""
        return self.status is DocumentStatus.INDEXED or (
            self.status is DocumentStatus.IN_PROGRESS
            and self.fields_stale
            and self.indexed_version == self.version
            and self.indexed_at is not None
        )

    def is_current(self, collection: Collection, content_sha256: str | None = None) -> bool:
        """Indexed from its latest version with the collection's model and chunking (and, when given, from exactly
        this content), with the current filter fields: the one rule for "there is nothing to redo" that ingest and
        reindex share."""
        return (
            self.status is DocumentStatus.INDEXED
            and not self.fields_stale
            and self.content_current(collection, content_sha256)
        )


class DocumentSummary(BaseModel):
    """What the document list shows of each document: enough to tell what it is and where its indexing stands, so
    that a client showing documents or waiting for them needs no read per document. A subset of what the document's
    GET shows the same caller (never its source blob key or the index internals), read from the same record."""

    id: str
    title: str = ""
    mimetype: str = ""
    status: DocumentStatus
    failure_reason: str | None = None
    failure_retryable: bool = False
    version: int = 0
    chunk_count: int = 0
    chunks_done: int = 0
    content_length: int = 0
    content_sha256: str | None = None
    indexed_at: datetime | None = None
    attributes: Attributes | None = None
    access: Access | None = None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, document: Document) -> "DocumentSummary":
        return cls.model_validate(document.model_dump(include=set(cls.model_fields)))


DOCUMENT_READ_ONLY = frozenset(
    {
        "status",
        "failure_reason",
        "chunk_count",
        "chunks_done",
        "content_sha256",
        "content_length",
        "source",
        "version",
        "revision",
        "indexed_version",
        "indexed_model",
        "indexed_config_version",
        "indexed_at",
        "failure_retryable",
        "fields_version",
        "indexed_fields_version",
        "created_at",
        "updated_at",
    }
)
#: Fields a body may set to null: no attributes, no access list (a null of any other field is refused).
DOCUMENT_NULLABLE = frozenset({"attributes", "access"})


class DocumentInput(BaseModel):
    """Body of `PUT /v1/collections/{c}/documents/{d}`: only present fields change; read-only ones are ignored."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    collection: str | None = None
    title: str | None = Field(default=None, max_length=1024)
    language: str | None = Field(default=None, max_length=64)
    url: DocumentUrl | None = None
    mimetype: MediaType | None = None
    content: str | None = None
    attributes: Attributes | None = Field(
        default=None,
        description=(
            "Key -> string, number, boolean or list of strings (at most 64 keys, 10 KiB); filtered on by a query's "
            "`filters.attributes`. null removes them."
        ),
        examples=[ATTRIBUTES_EXAMPLE],
    )
    access: DocumentAccess | None = Field(
        default=None,
        description=(
            "Who may see the document: a query's `user` in `users` or one of its `groups` in `groups`, and neither in "
            "`deny_users`/`deny_groups` (deny wins). null removes it (the collection's `document_access` decides)."
        ),
        examples=[ACCESS_EXAMPLE],
    )
    status: Any = None
    failure_reason: Any = None
    chunk_count: Any = None
    chunks_done: Any = None
    content_sha256: Any = None
    content_length: Any = None
    source: Any = None
    version: Any = None
    revision: Any = None
    indexed_version: Any = None
    indexed_model: Any = None
    indexed_config_version: Any = None
    indexed_at: Any = None
    failure_retryable: Any = None
    fields_version: Any = None
    indexed_fields_version: Any = None
    created_at: Any = None
    updated_at: Any = None

    def changes(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.model_fields_set - DOCUMENT_READ_ONLY - {"id", "collection"}}


class ApiKey(BaseModel):
    """An API key's stored form: the secret itself is never stored, only its SHA-256."""

    key_id: str
    tenant: ResourceId
    role: Role
    secret_sha256: str
    created_at: datetime = Field(default_factory=utc_now)
    revoked: bool = False
    description: str = ""


class Principal(BaseModel):
    """Who is calling: resolved from the API key by the authorizer."""

    tenant: str
    role: Role
    key_id: str


class PageRequest(BaseModel):
    """XWiki paging (`start`, `number`) or an opaque cursor from a previous page. Pages are bounded: XWiki's
    `number=-1` ("all") asks for the largest page, MAX_PAGE_SIZE; a client follows `next_cursor` for the rest."""

    start: int = Field(default=0, ge=0, le=MAX_PAGE_START)
    number: int = Field(default=DEFAULT_PAGE_SIZE, ge=-1, le=MAX_PAGE_SIZE)
    cursor: str | None = None

    @field_validator("number")
    @classmethod
    def _largest_page_for_all(cls, number: int) -> int:
        if number == 0:
            raise ValueError(f"must be between 1 and {MAX_PAGE_SIZE}, or -1 for the largest page")
        return MAX_PAGE_SIZE if number == -1 else number


class Page(BaseModel):
    ids: list[str]
    next_cursor: str | None = None


class DocumentPage(BaseModel):
    documents: list[DocumentSummary]
    next_cursor: str | None = None


class ReindexJob(BaseModel):
    """A job on one collection, as `GET /v1/jobs/{id}` shows it. `kind` `reindex` (POST .../reindex): progress is
    recomputed from the documents. `delete` (DELETE /v1/collections/{c}): `total` is the number of deletion steps and
    `done` those finished (kindex/app/collection_deletion.py); `completed` once nothing of the collection is left."""

    id: str
    tenant: str
    collection: str
    kind: Literal["reindex", "delete"] = "reindex"
    clean: bool = False
    status: Literal["running", "completed"] = "running"
    total: int = 0
    done: int = 0
    enqueued: int = 0
    repaired: dict[str, int] = Field(default_factory=dict)
    created_at: datetime = Field(default_factory=utc_now)
    updated_at: datetime = Field(default_factory=utc_now)


class PendingDeletion(BaseModel):
    """A collection being deleted (see `CollectionDeletions`): the record as it was when its deletion began (the
    models whose vectors go) and the delete job that does the work."""

    model_config = ConfigDict(extra="forbid")

    collection: Collection
    job: str
