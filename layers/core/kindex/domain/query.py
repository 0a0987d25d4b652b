"""Query request and response models (the API contract of `POST .../query`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, model_validator

from kindex.domain.filters import MAX_PRINCIPAL_CHARS, MAX_PRINCIPALS, FilterExpression

# Numbers in request bodies are JSON numbers of the right kind: "5", 5.0 and true are not a `k`.
StrictCount = Annotated[int, Strict()]
#: Scores are fused ranks (hybrid), cosine similarities (vector) or BM25 scores (keyword): all far inside this.
MAX_ABS_MIN_SCORE = 1e6
MAX_CITED_PAGE = 1_000_000
#: How many neighbouring chunks `expand` may add on each side of a result.
MAX_EXPAND = 3
#: How hybrid mode fuses its legs when a query does not say, and each fusion's default weights: chosen on SciFact's
#: train split (docs/decisions.md, "Ranking controls" and "Hybrid fusion by scores"), never on its test split.
Fusion = Literal["scores", "ranks"]
DEFAULT_FUSION: Fusion = "scores"
DEFAULT_VECTOR_WEIGHT = 1.0
DEFAULT_KEYWORD_WEIGHT = 0.7
#: Weighted reciprocal rank fusion's default weights (`fusion: "ranks"`).
DEFAULT_RANKS_VECTOR_WEIGHT = 1.0
DEFAULT_RANKS_KEYWORD_WEIGHT = 0.5
MAX_WEIGHT = 100.0
Weight = Annotated[float, Strict(), Field(ge=0, le=MAX_WEIGHT, allow_inf_nan=False)]


class QueryFilters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    document_ids: list[str] | None = Field(default=None, max_length=1000)
    language: str | None = None
    mimetype: str | None = None
    attributes: FilterExpression | None = Field(
        default=None,
        description=(
            "Documents whose attributes pass this expression: keys side by side are AND, `$and`/`$or` combine, "
            "operators $eq $ne $gt $gte $lt $lte $in $nin $exists $contains $starts_with (a bare value is $eq). A "
            "document without the key passes only $ne, $nin and `$exists: false`. At most 4 levels, 64 comparisons, "
            "1,000 values in a list."
        ),
        examples=[{"region": "eu", "year": {"$gte": 2020}}, {"$or": [{"tags": {"$contains": "hr"}}, {"public": True}]}],
    )


class Expand(BaseModel):
    """How many chunks of the same document, before and after each result, to merge into its passage."""

    model_config = ConfigDict(extra="forbid")

    before: StrictCount = Field(default=0, ge=0, le=MAX_EXPAND)
    after: StrictCount = Field(default=0, ge=0, le=MAX_EXPAND)


class HybridWeights(BaseModel):
    """How hybrid mode fuses its two legs, and the weight of each. `fusion: "scores"` (the default): each leg's scores
    are min-max scaled over its first 100 hits (its best 1, its 100th or last 0) and a chunk scores
    `vector_weight * its scaled cosine + keyword_weight * its scaled BM25`; `fusion: "ranks"`: weighted reciprocal rank
    fusion, `vector_weight / (RRF k + its vector rank) + keyword_weight / (RRF k + its keyword rank)`. A leg that did
    not find a chunk adds nothing. Weights left out take the fusion's defaults (scores: 1 and 0.7; ranks: 1 and 0.5,
    RRF k 10). Only their ratio changes the order; both scale `score` (and so what `min_score` means)."""

    model_config = ConfigDict(extra="forbid")

    fusion: Fusion = DEFAULT_FUSION
    vector_weight: Weight | None = None
    keyword_weight: Weight | None = None

    @model_validator(mode="after")
    def _some_weight(self) -> HybridWeights:
        if self.weights() == (0, 0):
            raise ValueError("hybrid: vector_weight and keyword_weight cannot both be 0 (use mode instead)")
        return self

    def weights(self) -> tuple[float, float]:
        """(vector, keyword): the given weights, else the fusion's defaults."""
        if self.fusion == "ranks":
            defaults = (DEFAULT_RANKS_VECTOR_WEIGHT, DEFAULT_RANKS_KEYWORD_WEIGHT)
        else:
            defaults = (DEFAULT_VECTOR_WEIGHT, DEFAULT_KEYWORD_WEIGHT)
        return (
            defaults[0] if self.vector_weight is None else self.vector_weight,
            defaults[1] if self.keyword_weight is None else self.keyword_weight,
        )


class QueryRequest(BaseModel):
    """Who asks (the tenant's end user, vouched for by the tenant's backend) and what."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=8000)
    k: StrictCount = Field(default=10, ge=1, le=100)
    user: str | None = Field(
        default=None,
        max_length=1024,
        description=("The end user, as the tenant's backend names them: matched against documents' `access.users`"),
    )
    groups: list[Annotated[str, Field(max_length=MAX_PRINCIPAL_CHARS)]] = Field(
        default_factory=list,
        max_length=MAX_PRINCIPALS,
        description=(
            "The user's groups: the collection gate (`query_groups`) and documents' `access.groups` read them. No "
            "groups match no group."
        ),
    )
    mode: Literal["vector", "keyword", "hybrid"] = "hybrid"
    filters: QueryFilters | None = None
    min_score: (
        Annotated[float, Strict(), Field(ge=-MAX_ABS_MIN_SCORE, le=MAX_ABS_MIN_SCORE, allow_inf_nan=False)] | None
    ) = Field(
        default=None,
        description=(
            "Drop results scoring below this. What a score is depends on `mode`: `vector`, the cosine similarity of "
            "the query's and the chunk's embeddings (-1 to 1); `keyword`, the chunk's BM25 score (0 up, unbounded, "
            'not comparable across queries); `hybrid`, the fused score (see `hybrid`): by default (`fusion: "scores"`) '
            "the weighted sum of each leg's min-max scaled score, at most vector_weight + keyword_weight (1.7 with the "
            "defaults, a chunk best in both legs) and relative to the query's own candidates, so not comparable across "
            'queries either; with `fusion: "ranks"` the weighted reciprocal rank fusion, at most (vector_weight + '
            "keyword_weight) / 11 (RRF k 10, a chunk first in both legs)."
        ),
    )
    max_chunks_per_document: StrictCount | None = Field(
        default=None,
        ge=1,
        le=100,
        description="At most this many results from one document (the best ones); more documents fill the k.",
    )
    hybrid: HybridWeights | None = Field(
        default=None,
        description="How `hybrid` mode fuses its legs and their weights (ignored by the other modes).",
    )
    expand: Expand | None = Field(
        default=None,
        description=(
            "Merge each result with up to `before`/`after` (0 to 3) adjacent chunks of its document into one "
            "passage (`content`, offsets and pages are the passage's); results whose passages overlap or touch are "
            "merged into one, at the better one's rank."
        ),
    )


class MultiQueryRequest(QueryRequest):
    collections: list[str] = Field(min_length=1, max_length=50)


class QueryResult(BaseModel):
    chunk_id: str
    document_id: str
    collection: str
    title: str
    url: str | None
    page_start: int | None
    page_end: int | None
    content: str
    score: float
    citation: int
    # The heading path the chunk sits under ("Title > Chapter > Section") and, for a chunk that continues a table,
    # that table's header row and separator line: context, never part of `content` (whose offsets stay the
    # document's). None for chunks without them (plain text, chunks indexed before sections existed).
    section: str | None = None
    table_header: str | None = None
    # The passage's character offsets in the document's text (the chunk's, or with `expand` the merged chunks').
    start: int | None = None
    end: int | None = None
    # With `expand`: the chunks of this passage, in document order (`chunk_id` is its best-ranked hit's).
    chunk_ids: list[str] | None = None


class Citation(BaseModel):
    n: int
    document_id: str
    collection: str
    title: str
    url: str | None
    # The sections of the document's results, in result order, each once.
    sections: list[str] = Field(default_factory=list)


class QueryWarning(BaseModel):
    """Something that made the answer poorer than it should be, for example a rights check that could not run (its
    collection's results are denied). `code` is stable; `message` says what to do and never names an address."""

    collection: str
    code: str
    message: str


class QueryResponse(BaseModel):
    query_id: str
    results: list[QueryResult]
    citations: list[Citation]
    context: str
    denied_count: int
    denied_collections: list[str] = Field(default_factory=list)
    timing_ms: dict[str, float]
    warnings: list[QueryWarning] = Field(default_factory=list)


class CitationDocument(BaseModel):
    model_config = ConfigDict(extra="forbid")

    document_id: str
    title: str | None = None
    url: str | None = None
    collection: str | None = None
    pages: list[Annotated[StrictCount, Field(ge=1, le=MAX_CITED_PAGE)]] = Field(default_factory=list, max_length=1000)


class CitationsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(max_length=200_000)
    documents: list[CitationDocument] | None = None
    query_id: str | None = None


class CitationReference(BaseModel):
    n: int
    document_id: str
    title: str
    url: str | None
    collection: str | None
    pages: list[int]


class CitationsResponse(BaseModel):
    markdown: str
    html: str
    references: list[CitationReference]
