"""The keyword half of the embedded index: BM25 over chunk text with tantivy (Rust, block-max WAND), one tantivy
index per tenant under `root/keywords/<sha-256 of the tenant id>/`.

Why tantivy and not SQLite FTS5 (measured, 100k chunks of ~900 characters, 200 synthetic queries, one process):
FTS5's bm25() is computed for every chunk that matches any query word (p50 27 ms, p99 75 ms); tantivy skips the
blocks that cannot reach the top k (p50 0.9 ms, p99 2.2 ms), with the same BM25 (k1 1.2, b 0.75). Words are
stemmed (English Snowball), which FTS5's unicode61 could not do: SciFact nDCG@10 0.690 against FTS5's 0.667.

Why one index per tenant: tantivy's BM25 takes its statistics (document frequency of a term, document count,
average length) from the searcher, summed over every segment of the index, deleted documents included until a
merge drops them. In one shared index a tenant's score therefore moved with every other tenant's documents: it
told a tenant how many chunks in the whole deployment held a word, and made its ranking depend on corpora it
cannot see. Per tenant, every statistic is the tenant's own (its collections and models together, so a query over
several collections ranks them on one scale). At most `MAX_OPEN_TENANTS` indices stay open (least recently used
first out), never one with a writer or uncommitted writes; a tenant without an index has no keywords.

Within a tenant's index the partition, the document and the chunk are still `raw` key fields naming (model,
tenant, collection) (JSON arrays, so no id can forge another's key), filters are zero-scored clauses of the same
query, so they apply before the top k and never change a score. Text is indexed but not stored. Durability is
tantivy's, per tenant: a commit writes new segment files, then atomically replaces that index's `meta.json`, so a
crash leaves each tenant's last committed state. Every upsert or delete call commits the indices it touched, and
their searchers are reloaded before the call returns (a deleted chunk is never found again once `delete` has
returned). One process owns the folder: each tenant's index has tantivy's writer lock, taken at the first write
and released once its commit is done.

An upsert may also leave its commit to later (`commit=False`, an ingest batch's writes): a commit costs ~17 ms
(fsync-bound) whatever it carries, so a batch of small documents commits once per tenant. Such an upsert returns a
sequence number (one numbering for every tenant); `commit_through` returns once every write numbered as it is given
is committed (any later commit of that tenant's index, a delete's included, carries its pending writes along) and
raises `KeywordWritesLost` when a failed commit rolled any of them back: until then they are neither durable nor
visible, and whoever deferred them must not report them done.

Each chunk document also carries its document's attributes and access list as the typed terms of filters.py
(`add_schema_fields`); `SearchFilters.attributes` and `.principals` are zero-scored clauses of the query, so they
apply before the top k. A tenant index written before those fields existed cannot be opened with this schema
(tantivy refuses a schema that differs): `outdated_tenant_indices` finds them and `replace_tenant` swaps in a
rebuilt one (index.py takes the texts from the chunk store).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Literal, overload

import tantivy

from kindex.adapters.local.private_files import private_dir, restrict_tree
from kindex.adapters.local.search.filters import HAS_ACCESS, TantivyFilters, add_schema_fields, tantivy_fields
from kindex.domain.errors import DependencyFailed
from kindex.domain.types import IndexRecord, SearchFilters, SearchHit

logger = logging.getLogger(__name__)

# Bounds the query's size for pathological inputs; a longer query still matches on its first terms.
MAX_QUERY_TERMS = 64
# Tokens longer than this are dropped (base64 blobs, hashes): they never match a typed query.
MAX_TOKEN_BYTES = 64
# The writer's indexing memory: a commit per call keeps segments small, so a modest arena is enough.
WRITER_HEAP_BYTES = 32_000_000
ANALYZER = "kindex_text_en"
# Tenant indices kept open at once (each holds its segment files mapped); more are reopened from disk as needed.
MAX_OPEN_TENANTS = 64
# A follower's reload that fails (a segment removed by a merge between its read of meta.json and its opening) is
# tried again this many times in all.
RELOAD_ATTEMPTS = 5

# Lucene's classic English stop set. They carry almost no BM25 weight, yet OR-ing them in makes the engine score
# nearly every chunk: leaving them out of the query keeps keyword search proportional to the rare terms.
STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with".split()
)


def word_analyzer() -> tantivy.TextAnalyzer:
    """Letters and digits (Unicode), lower-cased and folded to ASCII: the words of FTS5's `unicode61
    remove_diacritics 2` and of the OpenSearch adapter's `kindex_text` analyzer."""
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(MAX_TOKEN_BYTES))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
        .build()
    )


def text_analyzer() -> tantivy.TextAnalyzer:
    """The indexed terms: `word_analyzer`'s words reduced to their English (Snowball) stems. Stemming took SciFact
    nDCG@10 from 0.663 to 0.690 (FTS5 without it: 0.667, measured in one run); other languages' words pass through
    it mostly unchanged."""
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(MAX_TOKEN_BYTES))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def query_terms(words: tantivy.TextAnalyzer, terms: tantivy.TextAnalyzer, query: str) -> list[str]:
    """The query's distinct terms as the index holds them; stopwords (judged on the words, before stemming) are
    left out unless nothing else is left."""
    found = list(dict.fromkeys(words.analyze(query)))
    kept = ([word for word in found if word not in STOPWORDS] or found)[:MAX_QUERY_TERMS]
    return list(dict.fromkeys(term for word in kept for term in terms.analyze(word)))


def _key(*parts: str) -> str:
    return json.dumps(parts, ensure_ascii=False, separators=(",", ":"))


def base_schema_builder() -> tantivy.SchemaBuilder:
    """The fields every keyword index has had: text, the keys and the language/mimetype filters (an index written
    before attribute filters has exactly these, and is rebuilt at open)."""
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("text", tokenizer_name=ANALYZER, index_option="freq")
    builder.add_text_field("partition", tokenizer_name="raw", index_option="basic")
    builder.add_text_field("document", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("chunk", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("language", tokenizer_name="raw", index_option="basic")
    builder.add_text_field("mimetype", tokenizer_name="raw", index_option="basic")
    return builder


def build_schema() -> tantivy.Schema:
    builder = base_schema_builder()
    add_schema_fields(builder)
    return builder.build()


def _document(model: str, record: IndexRecord) -> dict[str, str | list[str]]:
    fields: dict[str, str | list[str]] = {
        "text": record.text,
        "partition": _key(model, record.tenant, record.collection),
        "document": _key(model, record.tenant, record.collection, record.document_id),
        "chunk": _key(model, record.tenant, record.collection, record.chunk_id),
    }
    # A missing value is a missing field, so a filter never matches it (as SQL's NULL never did).
    if record.language is not None:
        fields["language"] = record.language
    if record.mimetype is not None:
        fields["mimetype"] = record.mimetype
    fields.update(tantivy_fields(record.attributes, record.access))
    return fields


class KeywordWritesLost(DependencyFailed):
    """Deferred keyword writes were rolled back by a failed commit (or dropped by `close`): they must be redone."""


def tenant_folder(tenant: str) -> str:
    """The folder name of a tenant's index: a hash, so that any tenant id makes a safe name of fixed length."""
    return hashlib.sha256(tenant.encode("utf-8")).hexdigest()[:40]


class TenantKeywords:
    """One tenant's tantivy index: its searcher, its writer (open while writes are pending or being committed) and
    the sequence numbers of the writes it holds uncommitted. A follower's (another process writes it) opens no
    writer and changes no file mode."""

    def __init__(self, path: Path, schema: tantivy.Schema, *, follower: bool = False):
        self.path = path if follower else private_dir(path)
        self.index = tantivy.Index(schema, path=str(self.path), reuse=True)
        self.index.register_tokenizer(ANALYZER, text_analyzer())
        self.writer: tantivy.IndexWriter | None = None
        self.pending: set[int] = set()
        self.held = False  # a write call is using it: it must not be evicted meanwhile
        self.meta: bytes | None = None  # a follower's: the commit (meta.json) its searcher was last reloaded at
        if not follower:
            restrict_tree(self.path)

    def follow(self) -> None:
        """A follower's searcher moved to the writer's last commit, if it has a newer one than the last reload saw:
        tantivy replaces `meta.json` (a new file) at every commit, so equal bytes are the same commit. Read before
        the reload: a commit landing in between is seen by the next search. A reload that meets a segment the
        writer's merge has just removed (it read an older `meta.json`) tries again."""
        meta = (self.path / "meta.json").read_bytes()
        if meta == self.meta:
            return
        for attempt in range(RELOAD_ATTEMPTS):
            try:
                self.index.reload()
                break
            except ValueError:
                if attempt == RELOAD_ATTEMPTS - 1:
                    raise
        self.meta = meta

    @property
    def idle(self) -> bool:
        """Nothing would be lost by dropping this object: a new one opened on the folder sees the same commits."""
        return self.writer is None and not self.pending and not self.held

    def open_writer(self) -> tantivy.IndexWriter:
        if self.writer is None:
            self.writer = self.index.writer(WRITER_HEAP_BYTES, 1)
        return self.writer


class KeywordIndex:
    """BM25 over chunk texts, one tantivy index per tenant under `path`; the keyword half of `LocalSearchIndex`."""

    def __init__(self, path: Path, *, follower: bool = False):
        """`follower`: read an index another process writes (LocalSearchIndex `follower`); no write is made."""
        self.follower = follower
        self.path = path if follower else private_dir(path)
        self._schema = build_schema()
        self._filters = TantivyFilters(self._schema)
        self._analyzer = text_analyzer()
        self._words = word_analyzer()
        # The open tenant indices by folder, least recently used first. Their own lock guards only this map, so a
        # search never waits for another tenant's commit; writes and commits are serialised by `_lock`.
        self._tenants: OrderedDict[str, TenantKeywords] = OrderedDict()
        self._tenants_lock = threading.Lock()
        self._lock = threading.Lock()
        # Sequence numbers of the writes (the last one made, and those a failed commit rolled back: rare, a disk
        # error) for `commit_through`; the pending ones are on the tenant indices that hold them.
        self._written = 0
        self._lost: set[int] = set()

    def close(self) -> None:
        with self._lock:
            for tenant in self._open_tenants():
                if tenant.writer is not None:
                    tenant.writer.wait_merging_threads()  # also releases the writer lock, dropping uncommitted writes
                    tenant.writer = None
                self._forget_uncommitted(tenant)

    # -- writes ---------------------------------------------------------------------------------------------

    def upsert(self, model: str, records: Sequence[IndexRecord], *, commit: bool = True) -> int:
        """Replace each record's chunk (by model, tenant, collection, chunk id); one commit per tenant of the call,
        or none with `commit=False` (see `commit_through`). Returns the write's sequence number."""
        by_tenant: dict[str, list[IndexRecord]] = {}
        for record in records:
            by_tenant.setdefault(record.tenant, []).append(record)
        with self._lock:
            self._written += 1
            written = self._written
            touched: list[TenantKeywords] = []
            try:
                for tenant, group in by_tenant.items():
                    keywords = self._tenant(tenant, create=True, hold=True)
                    touched.append(keywords)
                    keywords.pending.add(written)
                    writer = keywords.open_writer()
                    for record in group:
                        document = _document(model, record)
                        # A delete applies to the documents added before it, so the new version below survives it.
                        writer.delete_documents_by_term("chunk", document["chunk"])
                        writer.add_document(tantivy.Document(**document))
                if commit:
                    self._commit_each(touched)
            finally:
                self._release(touched)
        return written

    def commit_through(self, sequences: Iterable[int]) -> None:
        """Return once the writes numbered `sequences` are committed and searchable: at once when commits since
        covered them, else after one commit of each tenant index holding some. KeywordWritesLost when any of them
        was rolled back."""
        wanted = set(sequences)
        with self._lock:
            self._raise_if_lost(wanted)
            # An index with pending writes is never evicted, so every uncommitted wanted write is on one of these.
            due = [keywords for keywords in self._open_tenants() if keywords.pending & wanted]
            self._hold(due)
            try:
                self._commit_each(due)
            finally:
                self._release(due)
            self._raise_if_lost(wanted)

    def _raise_if_lost(self, sequences: set[int]) -> None:
        if sequences & self._lost:
            raise KeywordWritesLost("deferred keyword writes were rolled back before their commit")

    def delete(
        self,
        model: str,
        tenant: str,
        collection: str,
        document_ids: Sequence[str] | None,
        chunk_ids: Sequence[str] | None,
    ) -> None:
        """Remove the collection's chunks named by chunk id, by document, by both (the chunks among `chunk_ids`
        that belong to `document_ids`) or, with neither, all of them; one commit for the call (none when the
        tenant has no keyword index)."""
        with self._lock:
            keywords = self._tenant(tenant, create=False, hold=True)
            if keywords is None:
                return
            try:
                writer = keywords.open_writer()
                if chunk_ids is not None and document_ids is not None:
                    writer.delete_documents_by_query(
                        tantivy.Query.boolean_query(
                            [
                                (
                                    tantivy.Occur.Must,
                                    self._terms("chunk", [_key(model, tenant, collection, c) for c in chunk_ids]),
                                ),
                                (
                                    tantivy.Occur.Must,
                                    self._terms("document", [_key(model, tenant, collection, d) for d in document_ids]),
                                ),
                            ]
                        )
                    )
                elif chunk_ids is not None:
                    for chunk_id in dict.fromkeys(chunk_ids):
                        writer.delete_documents_by_term("chunk", _key(model, tenant, collection, chunk_id))
                elif document_ids is not None:
                    for document_id in dict.fromkeys(document_ids):
                        writer.delete_documents_by_term("document", _key(model, tenant, collection, document_id))
                else:
                    writer.delete_documents_by_term("partition", _key(model, tenant, collection))
                self._commit(keywords)
            finally:
                self._release([keywords])

    def rebuild(self, rows: Iterable[tuple[str, IndexRecord]]) -> int:
        """Drop every tenant's index and index the (model, record) rows anew, one commit per run of one tenant's
        rows (so rows grouped by tenant keep one writer open at a time). For the migrations from older layouts,
        at open: a crash midway leaves their source in place, and the rebuild starts from nothing again."""
        count = 0
        with self._lock:
            with self._tenants_lock:
                if any(not keywords.idle for keywords in self._tenants.values()):
                    raise RuntimeError("keyword index rebuilt while writes are pending")
                self._tenants.clear()
            shutil.rmtree(self.path)
            private_dir(self.path)
            current: TenantKeywords | None = None
            try:
                for model, record in rows:
                    name = tenant_folder(record.tenant)
                    if current is None or current.path.name != name:
                        if current is not None:
                            self._commit(current)
                            self._release([current])
                        current = self._tenant(record.tenant, create=True, hold=True)
                    current.open_writer().add_document(tantivy.Document(**_document(model, record)))
                    count += 1
                if current is not None:
                    self._commit(current)
            finally:
                if current is not None:
                    self._release([current])
        return count

    def finish_interrupted_upgrades(self) -> None:
        """Complete or undo what a `replace_tenant` cut short by a crash: a complete new index left beside the
        old one goes in place, a half-built one is removed (the old index is still there to rebuild from)."""
        for old in self.path.glob("*.old"):
            current, new = self.path / old.name.removesuffix(".old"), self.path / old.name.replace(".old", ".new")
            if not current.exists():
                os.replace(new if new.exists() else old, current)  # the new one was committed before the swap
            shutil.rmtree(old, ignore_errors=True)
        for new in self.path.glob("*.new"):
            shutil.rmtree(new)
        _sync(self.path)

    def replace_tenant(self, folder: str, rows: Iterable[tuple[str, IndexRecord]]) -> int:
        """Index the (model, record) rows into a new index and swap it for the tenant index in `folder`: built
        and committed as `<folder>.new`, then the old one renamed to `<folder>.old`, the new one into place, the
        old one removed (`finish_interrupted_upgrades` finishes any of these steps after a crash)."""
        count = 0
        with self._lock:
            with self._tenants_lock:
                if folder in self._tenants:
                    raise RuntimeError("a tenant's keyword index replaced while it is open")
            new = self.path / f"{folder}.new"
            shutil.rmtree(new, ignore_errors=True)
            keywords = TenantKeywords(new, self._schema)
            writer = keywords.open_writer()
            for model, record in rows:
                writer.add_document(tantivy.Document(**_document(model, record)))
                count += 1
            writer.commit()
            writer.wait_merging_threads()
            keywords.writer = None
            restrict_tree(new)
            _sync(new)
            os.replace(self.path / folder, self.path / f"{folder}.old")
            os.replace(new, self.path / folder)
            _sync(self.path)
            shutil.rmtree(self.path / f"{folder}.old")
        return count

    def _forget_uncommitted(self, keywords: TenantKeywords) -> None:
        """The index's writes since its last commit are gone (rolled back or dropped): `commit_through` says so."""
        self._lost |= keywords.pending
        keywords.pending.clear()

    def _commit_each(self, indices: Sequence[TenantKeywords]) -> None:
        """Commit every one of `indices`, even after one failed (each carries only its own tenant's writes), then
        raise the first failure."""
        failure: BaseException | None = None
        for keywords in indices:
            try:
                self._commit(keywords)
            except BaseException as error:
                failure = failure or error
        if failure is not None:
            raise failure

    def _commit(self, keywords: TenantKeywords) -> None:
        if keywords.writer is None:  # writes pending in a writer that `close` dropped: nothing left to commit
            self._forget_uncommitted(keywords)
            return
        try:
            keywords.writer.commit()
        except BaseException:
            keywords.writer.rollback()  # nothing of a failed call may ride along with the next one's commit
            self._forget_uncommitted(keywords)
            raise
        keywords.pending.clear()
        # Segment merges run on tantivy's threads after a commit and write files with the process umask: wait for
        # them (which also releases the writer; the next write opens it again), then narrow every file to 0600.
        # The folder is 0700 anyway; this keeps the files owner-only too when used as a library without umask 077.
        keywords.writer.wait_merging_threads()
        keywords.writer = None
        keywords.index.reload()  # read-your-writes: the call returns only once searches see it
        restrict_tree(keywords.path)

    # -- tenant indices -------------------------------------------------------------------------------------

    @overload
    def _tenant(self, tenant: str, *, create: Literal[True], hold: bool = False) -> TenantKeywords: ...
    @overload
    def _tenant(self, tenant: str, *, create: bool, hold: bool = False) -> TenantKeywords | None: ...
    def _tenant(self, tenant: str, *, create: bool, hold: bool = False) -> TenantKeywords | None:
        """The tenant's index, opened if need be (and created, with `create`); None when it has none. `hold` keeps
        it from eviction until `_release` (a writer's call: taken in the same step, so no search evicts it first)."""
        name = tenant_folder(tenant)
        with self._tenants_lock:
            keywords = self._tenants.get(name)
            if keywords is None:
                if not create and not (self.path / name / "meta.json").exists():
                    return None
                keywords = self._tenants[name] = TenantKeywords(self.path / name, self._schema, follower=self.follower)
            self._tenants.move_to_end(name)
            keywords.held = keywords.held or hold
            self._evict()
        return keywords

    def _hold(self, indices: Sequence[TenantKeywords]) -> None:
        with self._tenants_lock:
            for keywords in indices:
                keywords.held = True

    def _release(self, indices: Sequence[TenantKeywords]) -> None:
        with self._tenants_lock:
            for keywords in indices:
                keywords.held = False
            self._evict()

    def _evict(self) -> None:
        """Close the least recently used idle indices beyond `MAX_OPEN_TENANTS` (under `_tenants_lock`); a search
        still running on one keeps its searcher."""
        excess = len(self._tenants) - MAX_OPEN_TENANTS
        if excess > 0:
            for name in [name for name, keywords in self._tenants.items() if keywords.idle][:excess]:
                del self._tenants[name]

    def _open_tenants(self) -> list[TenantKeywords]:
        with self._tenants_lock:
            return list(self._tenants.values())

    def sweep(self) -> None:
        """A follower's open tenant indices moved to the writer's last commit, searched or not: the segments the
        writer's merges removed are let go (an old searcher keeps their files mapped, and so on the disk)."""
        if self.follower:
            for keywords in self._open_tenants():
                keywords.follow()

    # -- reads ----------------------------------------------------------------------------------------------

    def search(
        self, model: str, tenant: str, collections: Sequence[str], query: str, k: int, filters: SearchFilters | None
    ) -> list[SearchHit]:
        """The top k chunks of the tenant's collections, by BM25 over the tenant's own documents only."""
        terms = query_terms(self._words, self._analyzer, query)
        if not terms or k <= 0 or not collections:
            return []
        keywords = self._tenant(tenant, create=False)
        if keywords is None:
            return []
        if self.follower:
            keywords.follow()
        words = tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, tantivy.Query.term_query(self._schema, "text", t)) for t in terms]
        )
        clauses = [
            (tantivy.Occur.Must, words),
            (tantivy.Occur.Must, self._terms("partition", [_key(model, tenant, c) for c in collections])),
        ]
        if filters is not None and filters.document_ids is not None:
            clauses.append(
                (
                    tantivy.Occur.Must,
                    self._terms(
                        "document", [_key(model, tenant, c, d) for c in collections for d in filters.document_ids]
                    ),
                )
            )
        for field, value in (
            ("language", filters.language if filters is not None else None),
            ("mimetype", filters.mimetype if filters is not None else None),
        ):
            if value is not None:
                clauses.append((tantivy.Occur.Must, self._terms(field, [value])))
        if filters is not None and filters.attributes is not None:
            clauses.append((tantivy.Occur.Must, self._filters.attributes(filters.attributes)))
        if filters is not None and filters.principals is not None:
            principals = filters.principals
            clauses.append(
                (
                    tantivy.Occur.Must,
                    self._filters.access(principals.user, principals.groups, required=principals.required),
                )
            )
        searcher = keywords.index.searcher()
        found = searcher.search(tantivy.Query.boolean_query(clauses), k, count=False).hits
        stored = [searcher.doc(address) for _, address in found]
        # Each stored key is a JSON array (`_key`): all of them parsed as one array, one parse per search.
        keys = json.loads("[" + ",".join(f"{d['chunk'][0]},{d['document'][0]}" for d in stored) + "]")
        hits = [
            SearchHit(chunk_id=chunk[3], document_id=document[3], collection=chunk[2], score=score)
            for (score, _), chunk, document in zip(found, keys[0::2], keys[1::2])
        ]
        hits.sort(key=lambda hit: (-hit.score, hit.chunk_id))  # ties in a stable order, as the FTS5 index had
        return hits

    def chunk_ids(
        self, model: str, tenant: str, collection: str, document_in_range: Callable[[str], bool] | None = None
    ) -> set[str]:
        """The partition's chunk ids, of the documents `document_in_range` admits (all without it). It reads every
        document of the partition: fine for one machine's drift pages, not for a cluster."""
        keywords = self._tenant(tenant, create=False)
        if keywords is None:
            return set()
        if keywords.writer is None:
            keywords.index.reload()  # a reading process sees the writing process's last commit, not its own opening
        searcher = keywords.index.searcher()
        if not searcher.num_docs:
            return set()
        found = searcher.search(
            self._terms("partition", [_key(model, tenant, collection)]), searcher.num_docs, count=False
        ).hits
        chunks = set()
        for _, address in found:
            document = searcher.doc(address)
            if document_in_range is None or document_in_range(json.loads(document["document"][0])[3]):
                chunks.add(json.loads(document["chunk"][0])[3])
        return chunks

    def _terms(self, field: str, values: Sequence[str]) -> tantivy.Query:
        """Documents whose raw `field` is one of `values`, scored 0 so that a filter never changes a rank."""
        return tantivy.Query.const_score_query(
            tantivy.Query.term_set_query(self._schema, field, list(dict.fromkeys(values))), 0.0
        )


def _sync(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def outdated_tenant_indices(path: Path) -> list[Path]:
    """The tenant index folders under `path` whose schema lacks the filter fields (written by an older version)."""
    outdated = []
    for meta in sorted(path.glob("*/meta.json")):
        if meta.parent.name.endswith((".new", ".old")):
            continue
        fields = {field["name"] for field in json.loads(meta.read_text(encoding="utf-8")).get("schema", [])}
        if HAS_ACCESS not in fields:
            outdated.append(meta.parent)
    return outdated


def legacy_shared_chunks(path: Path) -> list[tuple[str, str, str, str, str]]:
    """(model, tenant, collection, document id, chunk id) of every chunk in a tantivy index of an older version
    in `path`: the one all tenants shared, or a tenant's written before the filter fields. Opened with its own
    schema (it may lack fields this version has); it never stored texts: the chunk store has them."""
    index = tantivy.Index.open(str(path))
    searcher = index.searcher()
    if not searcher.num_docs:
        return []
    chunks = []
    for _, address in searcher.search(tantivy.Query.all_query(), searcher.num_docs, count=False).hits:
        document = searcher.doc(address)
        model, tenant, collection, chunk_id = json.loads(document["chunk"][0])
        chunks.append((model, tenant, collection, json.loads(document["document"][0])[3], chunk_id))
    return chunks


def legacy_fts_rows(database: Path) -> tuple[list[tuple[str, IndexRecord]], bool]:
    """The chunks of an FTS5 keyword index written by an older version, as (model, record) rows with empty
    vectors, and whether their texts were there: a contentless FTS5 table (SQLite >= 3.43) kept none."""
    db = sqlite3.connect(database)
    try:
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "chunk" not in tables:
            return [], True
        if "chunk_text" not in tables:
            count = db.execute("SELECT count(*) FROM chunk").fetchone()[0]
            return [], count == 0
        # By tenant: `KeywordIndex.rebuild` then writes one tenant's index at a time.
        rows = db.execute(
            "SELECT c.model, c.tenant, c.collection, c.chunk_id, c.document_id, c.language, "
            "c.mimetype, t.text FROM chunk c JOIN chunk_text t ON t.rowid = c.rowid "
            "ORDER BY c.tenant"
        ).fetchall()
    finally:
        db.close()
    return [
        (
            model,
            IndexRecord(
                tenant=tenant,
                collection=collection,
                document_id=document_id,
                chunk_id=chunk_id,
                vector=(),
                text=text,
                language=language,
                mimetype=mimetype,
            ),
        )
        for model, tenant, collection, chunk_id, document_id, language, mimetype, text in rows
    ], True
