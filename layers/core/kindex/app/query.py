"""Permission-aware retrieval: collection gate -> embed -> k-NN / BM25 / hybrid (fused scores or RRF) -> status and
rights filter with bounded over-fetch -> one batched read of chunk texts -> results, citations and an LLM context."""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import ThreadPoolExecutor
from html import escape

from kindex.app import cpu_slots
from kindex.app.embedding import EmbeddingService
from kindex.app.rights import RightsChecks, RightsSession
from kindex.app.usage import UsageService
from kindex.domain import budget
from kindex.domain.citations import cite_tag
from kindex.domain.errors import Forbidden, NotFound
from kindex.domain.filters import admits, matches
from kindex.domain.metering import QUERIES
from kindex.domain.models import Collection, Document
from kindex.domain.ports import (
    ChunkStore,
    CollectionStore,
    DocumentStore,
    MetricsRecorder,
    QueryLog,
    SearchIndex,
)
from kindex.domain.query import (
    Citation,
    Expand,
    HybridWeights,
    QueryRequest,
    QueryResponse,
    QueryResult,
    QueryWarning,
)
from kindex.domain.quotas import estimated_tokens
from kindex.domain.types import ChunkRange, ChunkRef, Principals, SearchFilters, SearchHit, StoredChunk

logger = logging.getLogger(__name__)

_search_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="keyword-search")

# Reciprocal rank fusion's k, chosen with the legs' default weights on SciFact's train split (docs/decisions.md): a
# small k lets the first ranks of each leg count for more than RRF's customary 60 does.
RRF_K = 10
# Each leg of a hybrid search reads at least this many candidates, whatever k, before the fusion cuts the fused list
# to what the round wants: a chunk a leg ranks 40th can still rise on the other leg's score (SciFact train nDCG@10,
# weighted RRF: 0.764 at the 30 a k = 10 query read, 0.768 at 100; docs/decisions.md). It is also the window the
# score fusion scales each leg's scores over.
HYBRID_LEG_DEPTH = 100
# The over-fetch for what the index cannot filter (the external rights check, documents not indexed, a record that
# changed since its entries were written, min_score): each round asks for what the allow rate seen so far says k
# needs (OVERFETCH_MARGIN more, to land in one more round), at most MAX_CANDIDATES, MAX_ROUNDS rounds, and never a
# round the request's time budget cannot fit (twice the last round's time). At a 1 % allow rate k = 10 takes about
# 1,500 candidates in two or three rounds; what stops short says so in `warnings`.
MAX_ROUNDS = 5
MAX_CANDIDATES = 10_000
FIRST_ROUND_FACTOR = 3
OVERFETCH_MARGIN = 1.5
# With nothing allowed yet, the next round is this many times larger (the rate is below 1 / wanted).
BLIND_GROWTH = 10
QUERY_LOG_TTL = 24 * 3600
STOPPED_EARLY = "stopped_early"
STOPPED_EARLY_MESSAGE = (
    "fewer than k results: the search stopped looking for candidates this user may see (its "
    "rounds or the request's time budget were spent) while more may exist. Narrow the query "
    "with filters.attributes, or give documents access lists, which the index applies itself."
)
CONTEXT_INSTRUCTIONS = (
    "Answer the question using only the excerpts below. Each excerpt begins with the tag that cites its document, "
    "such as <CIT document-id />: after each statement that uses an excerpt, copy that tag exactly as given "
    "(to cite several documents in one tag, list their ids as written in their tags, separated by commas: "
    '<CIT id-1, "id 2" />). Excerpt text is escaped as in XML (&lt; is <, &gt; is >, &amp; is &): '
    "nothing inside it starts or ends an excerpt or cites a document. "
    "If the excerpts do not contain the answer, say so."
)


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[SearchHit]],
    k: int = RRF_K,
    weights: Sequence[float] | None = None,
    limit: int | None = None,
) -> list[SearchHit]:
    """Fuse rankings by weight/(k + rank), never by raw scores (BM25 and cosine are not comparable). `weights`, one
    per ranking, default 1 each; `limit`: only the first that many of the fused ranking (all without it)."""
    scores: dict[str, float] = {}
    first: dict[str, SearchHit] = {}
    for position, ranking in enumerate(rankings):
        weight = 1.0 if weights is None else weights[position]
        for rank, hit in enumerate(ranking, start=1):
            scores[hit.chunk_id] = scores.get(hit.chunk_id, 0.0) + weight / (k + rank)
            first.setdefault(hit.chunk_id, hit)
    return _rescored(first, scores, limit)


def _rescored(first: dict[str, SearchHit], scores: dict[str, float], limit: int | None = None) -> list[SearchHit]:
    """Each chunk's first hit with its fused score, best first (ties by chunk id), the first `limit` of them (all
    without it). Ranked as (-score, chunk id) pairs, and a hit built only for a rank returned: a hybrid query fuses
    ~200 hits a round and reads `wanted` of them (3 k in the first round), and building every hit (a frozen
    dataclass, ~2.5 us each on a 2.4 GHz core) then sorting them by a key function was 0.75 ms of the 9 ms a query
    holds the GIL (16 clients, 2 cores)."""
    ranked = sorted([(-score, chunk_id) for chunk_id, score in scores.items()])
    fused = []
    for negated, chunk_id in ranked if limit is None else ranked[:limit]:
        hit = first[chunk_id]
        score = -negated
        fused.append(SearchHit(chunk_id=chunk_id, document_id=hit.document_id, collection=hit.collection, score=score))
    return fused


def min_max(ranking: Sequence[SearchHit], window: int, floor: float | None = None) -> list[float]:
    """Each hit's score scaled so that the best of the ranking's first `window` hits is 1 and the last of them 0 (all
    1 when they tie); hits past the window keep the same linear scale (below 0). A ranking shorter than the window
    holds every chunk its search matched: then `floor`, when given, is the 0 instead (the score of a chunk the search
    did not match), so that its last hit still counts for more than a chunk it did not find."""
    head = [hit.score for hit in ranking[:window]]
    if not head:
        return []
    low, high = min(head), max(head)
    if floor is not None and len(ranking) < window:
        low = min(low, floor)
    if high <= low:
        return [1.0 for _ in ranking]
    return [(hit.score - low) / (high - low) for hit in ranking]


def score_fusion(
    vector: Sequence[SearchHit],
    keyword: Sequence[SearchHit],
    weights: tuple[float, float],
    window: int | None = None,
    limit: int | None = None,
) -> list[SearchHit]:
    """Fuse the two legs by a weighted sum of their min-max scaled scores: in each leg the best of its first `window`
    hits (HYBRID_LEG_DEPTH) counts 1 and the last of them 0, so cosines and BM25 scores, on unrelated scales, become
    comparable; a keyword leg shorter than the window (every chunk that matches a word) is scaled from BM25's own 0.
    A leg that did not find a chunk adds nothing. The window is fixed, not the depth a round read, so a chunk keeps
    its score from one over-fetch round to the next. `limit`: only the first that many fused hits (all without it)."""
    window = HYBRID_LEG_DEPTH if window is None else window
    scores: dict[str, float] = {}
    first: dict[str, SearchHit] = {}
    for ranking, weight, floor in ((vector, weights[0], None), (keyword, weights[1], 0.0)):
        for hit, scaled in zip(ranking, min_max(ranking, window, floor), strict=True):
            scores[hit.chunk_id] = scores.get(hit.chunk_id, 0.0) + weight * scaled
            first.setdefault(hit.chunk_id, hit)
    return _rescored(first, scores, limit)


def fuse_legs(
    vector: Sequence[SearchHit], keyword: Sequence[SearchHit], request: QueryRequest, limit: int | None = None
) -> list[SearchHit]:
    """Hybrid mode's fusion of one search's legs, as the request asks (`hybrid`), else by the defaults; `limit`:
    only the first that many fused hits (all without it)."""
    hybrid = request.hybrid or HybridWeights()
    if hybrid.fusion == "ranks":
        return reciprocal_rank_fusion([vector, keyword], weights=hybrid.weights(), limit=limit)
    return score_fusion(vector, keyword, hybrid.weights(), limit=limit)


def per_document(hits: Sequence[SearchHit], limit: int | None) -> list[SearchHit]:
    """The hits in order, at most `limit` of each (collection, document) (None: no limit)."""
    if limit is None:
        return list(hits)
    taken: dict[tuple[str, str], int] = {}
    kept = []
    for hit in hits:
        key = (hit.collection, hit.document_id)
        if taken.get(key, 0) < limit:
            taken[key] = taken.get(key, 0) + 1
            kept.append(hit)
    return kept


def next_round_size(wanted: int, k: int, survivors: int, candidates: int) -> int:
    """How many candidates the next over-fetch round asks for: enough for the missing `k - survivors` results at the
    rate seen so far (survivors per candidate), with a margin; a blind jump when nothing survived yet."""
    if survivors <= 0 or candidates <= 0:
        return min(MAX_CANDIDATES, max(wanted * BLIND_GROWTH, wanted + 1))
    rate = survivors / candidates
    needed = math.ceil(k / rate * OVERFETCH_MARGIN)
    return min(MAX_CANDIDATES, max(needed, wanted * 2))


class Passage:
    """A result's text: its hit's chunk, or with `expand` the run of its document's chunks `first`..`last` (indexes)
    around it and around any later hit of the same document that it overlapped or touched."""

    __slots__ = ("hit", "first", "last", "chunks")

    def __init__(self, hit: SearchHit, first: int, last: int, chunks: list[StoredChunk]):
        self.hit, self.first, self.last, self.chunks = hit, first, last, chunks


def plan_passages(hits: Sequence[SearchHit], texts: dict[str, StoredChunk], expand: Expand | None) -> list[Passage]:
    """One passage per hit, best first: without `expand` the hit's chunk; with it the index range `before`..`after`
    around the hit's chunk, merged into the passage of a better hit of the same document that it overlaps or
    touches (so no text is returned twice). Hits whose chunk is gone (deleted between search and fetch) drop out."""
    before, after = (expand.before, expand.after) if expand else (0, 0)
    passages: list[Passage] = []
    for hit in hits:
        chunk = texts.get(hit.chunk_id)
        if chunk is None:
            continue
        first, last = chunk.index - before, chunk.index + after
        if before or after:
            same = [p for p in passages if (p.hit.collection, p.hit.document_id) == (hit.collection, hit.document_id)]
            touching = [p for p in same if first <= p.last + 1 and last >= p.first - 1]
            if touching:
                # The best-ranked passage absorbs this range and every other passage it now reaches.
                keep = touching[0]
                keep.first = max(min([first, *(p.first for p in touching)]), 0)
                keep.last = max([last, *(p.last for p in touching)])
                passages = [p for p in passages if p is keep or p not in touching[1:]]
                continue
        passages.append(Passage(hit, max(first, 0), last, [chunk]))
    return passages


def fill_passages(passages: Sequence[Passage], neighbours: Sequence[StoredChunk]) -> None:
    """Give each passage its chunks from `neighbours` (the chunks read for every passage's range). A passage whose own
    chunk is not among them (its document was rewritten between the two reads) keeps just that chunk."""
    by_document: dict[tuple[str, str], list[StoredChunk]] = {}
    for chunk in neighbours:
        by_document.setdefault((chunk.collection, chunk.document_id), []).append(chunk)
    for passage in passages:
        hit = passage.hit
        run = [
            c
            for c in by_document.get((hit.collection, hit.document_id), ())
            if passage.first <= c.index <= passage.last
        ]
        if any(c.chunk_id == hit.chunk_id for c in run):
            passage.chunks = run


def joined_text(chunks: Sequence[StoredChunk]) -> tuple[str, int]:
    """The text of consecutive chunks and its end offset: an overlap (a collection's chunk overlap) is written once; a
    gap, where the chunker dropped a whitespace-only piece, is filled with as many spaces, so offsets stay true."""
    text, end = chunks[0].text, chunks[0].end
    for chunk in chunks[1:]:
        if chunk.start >= end:
            text += " " * (chunk.start - end) + chunk.text
        else:
            text += chunk.text[end - chunk.start :]
        end = max(end, chunk.end)
    return text, end


def admitted(
    document: Document, request: QueryRequest, collection: Collection, groups: AbstractSet[str] | None = None
) -> bool:
    """Does the document's record, as it is now, admit this query? Its access list for the user and groups (the
    collection's `document_access` for a document without one) and the attribute filter, judged on the record: the
    index applied both on the fields its entries carry, which a PUT may have changed since (a revocation then takes
    effect here at once, before the entries are rewritten). `groups`: the request's groups as a set, built once by
    a caller that checks many records (a user may name 1,000 groups)."""
    named = frozenset(request.groups) if groups is None else groups
    if not admits(document.access, request.user, named, collection.document_access == "required"):
        return False
    expression = request.filters.attributes if request.filters else None
    return expression is None or matches(expression, document.attributes)


def passes_gate(collection: Collection, user: str | None, groups: Sequence[str]) -> bool:
    """XWiki semantics: guests allowed -> anyone; otherwise the user's groups must meet the collection's."""
    if collection.allow_guests:
        return True
    return bool(set(groups) & set(collection.query_groups))


def _attribute(value: str) -> str:
    """An attribute value on one line, with quotes and angle brackets escaped (ids and titles are not markup)."""
    return escape(" ".join(value.split()), quote=True)


def build_context(results: Sequence[QueryResult]) -> str:
    """The instructions and one `<excerpt>` per result. Chunk text is escaped (`&`, `<`, `>`), so that text can
    never close an excerpt, open a forged one under another document's id, or show a citation tag: the only
    markup in the block is what this function writes, and the tag to cite each excerpt with is written by
    `cite_tag`, which the citations renderer reads back exactly for every accepted id."""
    blocks = [CONTEXT_INSTRUCTIONS, ""]
    for result in results:
        page = f' page="{result.page_start}"' if result.page_start else ""
        section = f' section="{_attribute(result.section)}"' if result.section else ""
        # A chunk that continues a table is preceded by the table's header, so its cells keep their column names.
        header = f"{escape(result.table_header, quote=False)}\n" if result.table_header else ""
        blocks.append(
            f'<excerpt document-id="{_attribute(result.document_id)}" title="{_attribute(result.title)}"'
            f"{page}{section}>\n{cite_tag(result.document_id)}\n{header}"
            f"{escape(result.content, quote=False)}\n</excerpt>"
        )
    return "\n".join(blocks)


class QueryService:
    """Answers queries for one tenant's collections on behalf of one end user."""

    def __init__(
        self,
        collections: CollectionStore,
        documents: DocumentStore,
        chunks: ChunkStore,
        index: SearchIndex,
        embeddings: EmbeddingService,
        rights: RightsChecks,
        query_log: QueryLog,
        metrics: MetricsRecorder | None = None,
        clock: Callable[[], float] = time.monotonic,
        usage: UsageService | None = None,
    ):
        self.usage = usage  # meters each query and its embedded query text per tenant (GET /v1/usage)
        self.collections = collections
        self.documents = documents
        self.chunks = chunks
        self.index = index
        self.embeddings = embeddings
        self.rights = rights
        self.query_log = query_log
        self.metrics = metrics
        self.clock = clock

    def query(self, tenant: str, collection_ids: Sequence[str], request: QueryRequest, *, multi: bool) -> QueryResponse:
        timing = {"embed": 0.0, "search": 0.0, "rights": 0.0, "fetch": 0.0}
        allowed_collections, denied_collections = self._gate(tenant, collection_ids, request, multi)
        by_model: dict[str, list[Collection]] = {}
        for collection in allowed_collections:
            by_model.setdefault(collection.query_model, []).append(collection)
        vectors = {}
        if request.mode != "keyword":
            started = time.perf_counter()
            vectors = {model: self.embeddings.embed_query(model, request.query, tenant=tenant) for model in by_model}
            timing["embed"] = (time.perf_counter() - started) * 1000
        survivors, denied_count, documents, warnings = self._retrieve(tenant, request, by_model, vectors, timing)
        started = time.perf_counter()
        refs = [ChunkRef(h.collection, h.document_id, h.chunk_id) for h in survivors]
        texts = self.chunks.get_chunks(tenant, refs) if refs else {}
        passages = plan_passages(survivors, texts, request.expand)
        if request.expand and (request.expand.before or request.expand.after) and passages:
            # The neighbours are chunks of documents already decided (status, access list, attributes, rights): a
            # document is admitted whole, so its neighbours are too, and nothing else is read.
            ranges = [ChunkRange(p.hit.collection, p.hit.document_id, p.first, p.last) for p in passages]
            fill_passages(passages, self.chunks.get_chunk_ranges(tenant, ranges))
        timing["fetch"] = (time.perf_counter() - started) * 1000
        results, citations = self._shape(passages, documents, expanded=request.expand is not None)
        query_id = uuid.uuid4().hex
        self.query_log.put_query(tenant, query_id, self._cited(results, citations), QUERY_LOG_TTL)
        if self.usage is not None:
            self.usage.record_query(tenant, embedding_tokens=estimated_tokens(request.query) * len(vectors))
        if self.metrics:
            self.metrics.count("Queries")
            self.metrics.meter(tenant, QUERIES)
            if denied_count:
                self.metrics.count("RightsDenials", denied_count)
            failures = [w for w in warnings if w.code != STOPPED_EARLY]
            if failures:
                self.metrics.count("RightsCheckFailures", len(failures))
        logger.info(
            "query",
            extra={
                "tenant": tenant,
                "collections": len(allowed_collections),
                "mode": request.mode,
                "results": len(results),
                "denied_count": denied_count,
                "warnings": [w.code for w in warnings],
            },
        )
        return QueryResponse(
            query_id=query_id,
            results=results,
            citations=citations,
            context=build_context(results),
            denied_count=denied_count,
            denied_collections=denied_collections,
            timing_ms={k: round(v, 2) for k, v in timing.items()},
            warnings=warnings,
        )

    def _gate(
        self, tenant: str, collection_ids: Sequence[str], request: QueryRequest, multi: bool
    ) -> tuple[list[Collection], list[str]]:
        allowed, denied = [], []
        for collection_id in dict.fromkeys(collection_ids):
            collection = self.collections.get_collection(tenant, collection_id)
            if collection is None:
                raise NotFound(f"collection {collection_id!r} does not exist")
            if passes_gate(collection, request.user, request.groups):
                allowed.append(collection)
            elif not multi:
                raise Forbidden("this user may not query this collection")
            else:
                denied.append(collection_id)
        return allowed, denied

    def _retrieve(
        self,
        tenant: str,
        request: QueryRequest,
        by_model: dict[str, list[Collection]],
        vectors: dict,
        timing: dict[str, float],
    ) -> tuple[list[SearchHit], int, dict[tuple[str, str], Document], list[QueryWarning]]:
        if not by_model:
            return [], 0, {}, []
        collections = {c.id: c for cs in by_model.values() for c in cs}
        rights = self.rights.session(tenant, list(collections.values()))
        decisions: dict[tuple[str, str], bool] = {}
        documents: dict[tuple[str, str], Document] = {}
        denied: set[tuple[str, str]] = set()
        wanted = min(FIRST_ROUND_FACTOR * request.k, MAX_CANDIDATES)
        survivors: list[SearchHit] = []
        for round_number in range(1, MAX_ROUNDS + 1):
            started = self.clock()
            search_started = time.perf_counter()
            hits, exhausted = self._candidates(tenant, request, by_model, vectors, wanted)
            timing["search"] += (time.perf_counter() - search_started) * 1000
            decide_started = time.perf_counter()
            self._decide(tenant, request, hits, collections, rights, decisions, documents, denied)
            timing["rights"] += (time.perf_counter() - decide_started) * 1000
            survivors = [h for h in hits if decisions.get((h.collection, h.document_id))]
            survivors = per_document(survivors, request.max_chunks_per_document)
            if request.min_score is not None:
                survivors = [h for h in survivors if h.score >= request.min_score]
                # Candidates come best first: once one scores below min_score, no later one can pass.
                exhausted = exhausted or bool(hits and hits[-1].score < request.min_score)
            if len(survivors) >= request.k or exhausted:
                break
            left = budget.remaining(self.clock)
            if (
                wanted >= MAX_CANDIDATES
                or round_number == MAX_ROUNDS
                or (left is not None and left < 2 * (self.clock() - started))
            ):
                self._stopped_early(rights, denied, collections)
                break
            wanted = next_round_size(wanted, request.k, len(survivors), len(hits))
        return survivors[: request.k], len(denied), documents, rights.warnings

    def _stopped_early(self, rights: RightsSession, denied: set, collections: dict[str, Collection]) -> None:
        """One warning per collection that withheld candidates (else per collection searched): the answer has fewer
        than k results though more might exist."""
        names = sorted({collection_id for collection_id, _ in denied}) or sorted(collections)
        for name in names:
            rights.warnings.append(QueryWarning(collection=name, code=STOPPED_EARLY, message=STOPPED_EARLY_MESSAGE))

    @staticmethod
    def _filters(request: QueryRequest, required: bool) -> SearchFilters:
        """What the index applies on every leg of every search: the request's filters, and always the principals
        (with the collection's `document_access`), so access lists are enforced before ranking."""
        f = request.filters
        return SearchFilters(
            document_ids=tuple(f.document_ids) if f and f.document_ids is not None else None,
            language=f.language if f else None,
            mimetype=f.mimetype if f else None,
            attributes=f.attributes if f else None,
            principals=Principals(user=request.user, groups=tuple(request.groups), required=required),
        )

    def _candidates(
        self, tenant: str, request: QueryRequest, by_model: dict[str, list[Collection]], vectors: dict, wanted: int
    ) -> tuple[list[SearchHit], bool]:
        per_group = []
        exhausted = True
        for model, collections in by_model.items():
            # One search per model and `document_access`: the principals' `required` is one value per search.
            by_access: dict[bool, list[str]] = {}
            for collection in collections:
                by_access.setdefault(collection.document_access == "required", []).append(collection.id)
            for required, ids in by_access.items():
                filters = self._filters(request, required)
                if request.mode == "hybrid":
                    depth = max(wanted, HYBRID_LEG_DEPTH)
                    rankings = self._legs(model, tenant, ids, request.query, vectors[model], depth, filters)
                    # One more than the round reads tells whether more exist (below). A chunk is in one group
                    # only (groups split the collections), so each group's first wanted + 1 hold the merged first
                    # wanted + 1 as well.
                    per_group.append(fuse_legs(rankings[0], rankings[1], request, limit=wanted + 1))
                else:
                    depth = wanted
                    if request.mode == "vector":
                        rankings = [self.index.knn_search(model, tenant, ids, vectors[model], wanted, filters)]
                    else:
                        rankings = [self.index.keyword_search(model, tenant, ids, request.query, wanted, filters)]
                    per_group.append(rankings[0])
                exhausted = exhausted and all(len(r) < depth for r in rankings)
        # Searches of different models (or access settings) are merged by rank: cosines of two models do not compare.
        fused = per_group[0] if len(per_group) == 1 else reciprocal_rank_fusion(per_group)
        # The legs' candidates fused may be more than the round wants: they are not all seen until a round wants them.
        return fused[:wanted], exhausted and len(fused) <= wanted

    def _legs(
        self,
        model: str,
        tenant: str,
        ids: list[str],
        query: str,
        vector: Sequence[float],
        depth: int,
        filters: SearchFilters,
    ) -> list[list[SearchHit]]:
        """A hybrid search's vector and keyword rankings. The two are independent: the keyword search runs on a
        second thread while the vector search runs, unless the index computes both here and this request holds a
        CPU slot (kindex.app.cpu_slots), whose share of the cores a second thread would compute outside of: then one
        after the other. Measured with 16 clients on 2 cores, same runs against the reference (docs/decisions.md):
        slots with the legs overlapped 1.35x, with the legs here 1.45-1.49x, and one client no slower (the handover
        to the second thread cost what the overlap saved)."""
        if cpu_slots.holding() and self.index.computes_locally:
            return [
                self.index.knn_search(model, tenant, ids, vector, depth, filters),
                self.index.keyword_search(model, tenant, ids, query, depth, filters),
            ]
        keyword = _search_pool.submit(self.index.keyword_search, model, tenant, ids, query, depth, filters)
        return [self.index.knn_search(model, tenant, ids, vector, depth, filters), keyword.result()]

    def _decide(
        self,
        tenant: str,
        request: QueryRequest,
        hits: Sequence[SearchHit],
        collections: dict[str, Collection],
        rights: RightsSession,
        decisions: dict,
        documents: dict,
        denied: set,
    ) -> None:
        """Decide each new (collection, document) once: its record must say it is searchable and admit the query
        (`admitted`), then the rights check must allow it. The new candidates' records are read in one batch per
        round; one rights call per collection per round, with all its undecided candidates; the calls run in
        parallel."""
        undecided: dict[str, list[str]] = {}
        new = [key for key in dict.fromkeys((hit.collection, hit.document_id) for hit in hits) if key not in decisions]
        records = self.documents.get_documents(tenant, new) if new else {}
        groups = frozenset(request.groups)
        for key in new:
            document = records.get(key)
            if (
                document is None
                or not document.searchable
                or not admitted(document, request, collections[key[0]], groups)
            ):
                decisions[key] = False
                continue
            documents[key] = document
            undecided.setdefault(key[0], []).append(key[1])
        verdicts = rights.allowed(request.user, undecided) if undecided else {}
        for collection_id, doc_ids in undecided.items():
            allowed = verdicts.get(collection_id, set())
            for doc_id in doc_ids:
                decisions[(collection_id, doc_id)] = doc_id in allowed
                if doc_id not in allowed:
                    denied.add((collection_id, doc_id))

    def _shape(
        self, passages: Sequence[Passage], documents: dict, *, expanded: bool
    ) -> tuple[list[QueryResult], list[Citation]]:
        results: list[QueryResult] = []
        numbers: dict[tuple[str, str], int] = {}
        citations: list[Citation] = []
        for passage in passages:
            hit, chunks = passage.hit, passage.chunks
            key = (hit.collection, hit.document_id)
            document = documents[key]
            if key not in numbers:
                numbers[key] = len(numbers) + 1
                citations.append(
                    Citation(
                        n=numbers[key],
                        document_id=hit.document_id,
                        collection=hit.collection,
                        title=document.title or hit.document_id,
                        url=document.url or None,
                    )
                )
            content, end = joined_text(chunks)
            starts = [c.page_start for c in chunks if c.page_start is not None]
            ends = [c.page_end for c in chunks if c.page_end is not None]
            results.append(
                QueryResult(
                    chunk_id=hit.chunk_id,
                    document_id=hit.document_id,
                    collection=hit.collection,
                    title=document.title or hit.document_id,
                    url=document.url or None,
                    page_start=min(starts) if starts else None,
                    page_end=max(ends) if ends else None,
                    content=content,
                    score=round(hit.score, 6),
                    citation=numbers[key],
                    section=chunks[0].section,
                    table_header=chunks[0].table_header,
                    start=chunks[0].start,
                    end=end,
                    chunk_ids=[c.chunk_id for c in chunks] if expanded else None,
                )
            )
            citation = citations[numbers[key] - 1]
            for chunk in chunks:
                if chunk.section and chunk.section not in citation.sections:
                    citation.sections.append(chunk.section)
        return results, citations

    @staticmethod
    def _cited(results: Sequence[QueryResult], citations: Sequence[Citation]) -> list[dict]:
        pages: dict[tuple[str, str], set[int]] = {}
        for result in results:
            if result.page_start:
                pages.setdefault((result.collection, result.document_id), set()).add(result.page_start)
        return [
            {
                "document_id": c.document_id,
                "title": c.title,
                "url": c.url,
                "collection": c.collection,
                "pages": sorted(pages.get((c.collection, c.document_id), ())),
                "sections": c.sections,
            }
            for c in citations
        ]
