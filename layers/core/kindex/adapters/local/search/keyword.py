"""The keyword half of the embedded index: BM25 over chunk text with tantivy (Rust, block-max WAND), persisted in
`root/keyword/`.

Why tantivy and not SQLite FTS5 (measured, 100k chunks of ~900 characters, 200 synthetic queries, one process):
FTS5's bm25() is computed for every chunk that matches any query word (p50 27 ms, p99 75 ms); tantivy skips the
blocks that cannot reach the top k (p50 0.9 ms, p99 2.2 ms), with the same BM25 (k1 1.2, b 0.75). Words are
stemmed (English Snowball), which FTS5's unicode61 could not do: SciFact nDCG@10 0.690 against FTS5's 0.667.

One index for every (model, tenant, collection): the partition, the document and the chunk are `raw` key fields
(JSON arrays, so no id can forge another's key), filters are zero-scored clauses of the same query, so they apply
before the top k and never change a score. Text is indexed but not stored. Durability is tantivy's: a commit writes
new segment files, then atomically replaces `meta.json`, so a crash leaves the last committed state. Every upsert or
delete call is one commit, and the searcher is reloaded before the call returns (a deleted chunk is never found
again once `delete` has returned). One process owns the folder (tantivy's writer lock).

An upsert may also leave its commit to later (`commit=False`, an ingest batch's writes): a commit costs ~17 ms
(fsync-bound) whatever it carries, so a batch of small documents commits once. Such an upsert returns a sequence
number; `commit_through` returns once every write up to the numbers it is given is committed (any later commit,
a delete's included, carries the pending writes along) and raises `KeywordWritesLost` when a failed commit rolled
them back: until then they are neither durable nor visible, and whoever deferred them must not report them done.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import tantivy

from kindex.adapters.local.private_files import private_dir, restrict_tree
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

# Lucene's classic English stop set. They carry almost no BM25 weight, yet OR-ing them in makes the engine score
# nearly every chunk: leaving them out of the query keeps keyword search proportional to the rare terms.
STOPWORDS = frozenset("a an and are as at be but by for if in into is it no not of on or such that the their then "
                      "there these they this to was will with".split())


def word_analyzer() -> tantivy.TextAnalyzer:
    """Letters and digits (Unicode), lower-cased and folded to ASCII: the words of FTS5's `unicode61
    remove_diacritics 2` and of the OpenSearch adapter's `kindex_text` analyzer."""
    return (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
            .filter(tantivy.Filter.remove_long(MAX_TOKEN_BYTES))
            .filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.ascii_fold())
            .build())


def text_analyzer() -> tantivy.TextAnalyzer:
    """The indexed terms: `word_analyzer`'s words reduced to their English (Snowball) stems. Stemming took SciFact
    nDCG@10 from 0.663 to 0.690 (FTS5 without it: 0.667, measured in one run); other languages' words pass through
    it mostly unchanged."""
    return (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
            .filter(tantivy.Filter.remove_long(MAX_TOKEN_BYTES))
            .filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.ascii_fold())
            .filter(tantivy.Filter.stemmer("english"))
            .build())


def query_terms(words: tantivy.TextAnalyzer, terms: tantivy.TextAnalyzer, query: str) -> list[str]:
    """The query's distinct terms as the index holds them; stopwords (judged on the words, before stemming) are
    left out unless nothing else is left."""
    found = list(dict.fromkeys(words.analyze(query)))
    kept = ([word for word in found if word not in STOPWORDS] or found)[:MAX_QUERY_TERMS]
    return list(dict.fromkeys(term for word in kept for term in terms.analyze(word)))


def _key(*parts: str) -> str:
    return json.dumps(parts, ensure_ascii=False, separators=(",", ":"))


def build_schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("text", tokenizer_name=ANALYZER, index_option="freq")
    builder.add_text_field("partition", tokenizer_name="raw", index_option="basic")
    builder.add_text_field("document", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("chunk", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("language", tokenizer_name="raw", index_option="basic")
    builder.add_text_field("mimetype", tokenizer_name="raw", index_option="basic")
    return builder.build()


def _document(model: str, record: IndexRecord) -> dict[str, str]:
    fields = {"text": record.text, "partition": _key(model, record.tenant, record.collection),
              "document": _key(model, record.tenant, record.collection, record.document_id),
              "chunk": _key(model, record.tenant, record.collection, record.chunk_id)}
    # A missing value is a missing field, so a filter never matches it (as SQL's NULL never did).
    if record.language is not None:
        fields["language"] = record.language
    if record.mimetype is not None:
        fields["mimetype"] = record.mimetype
    return fields


class KeywordWritesLost(DependencyFailed):
    """Deferred keyword writes were rolled back by a failed commit (or dropped by `close`): they must be redone."""


class KeywordIndex:
    """BM25 over chunk texts in one tantivy index under `path`; the keyword half of `LocalSearchIndex`."""

    def __init__(self, path: Path):
        self.path = private_dir(path)
        self._schema = build_schema()
        self._index = tantivy.Index(self._schema, path=str(self.path), reuse=True)
        self._analyzer = text_analyzer()
        self._words = word_analyzer()
        self._index.register_tokenizer(ANALYZER, self._analyzer)
        # Opened at the first write: a process that only reads (`kindex reindex` beside a running server) must
        # not take the writer lock the server holds.
        self._writer: tantivy.IndexWriter | None = None
        self._lock = threading.Lock()
        # Sequence numbers of the writes: the last one made, the last one a commit covered, and the ranges
        # (after, through] that a failed commit rolled back (rare: a disk error), for `commit_through`.
        self._written = 0
        self._committed = 0
        self._lost: list[tuple[int, int]] = []
        restrict_tree(self.path)

    def close(self) -> None:
        with self._lock:
            if self._writer is not None:
                self._writer.wait_merging_threads()  # also releases the writer lock, dropping uncommitted writes
                self._writer = None
            self._forget_uncommitted()

    # -- writes ---------------------------------------------------------------------------------------------

    def upsert(self, model: str, records: Sequence[IndexRecord], *, commit: bool = True) -> int:
        """Replace each record's chunk (by model, tenant, collection, chunk id); one commit for the call, or none
        with `commit=False` (see `commit_through`). Returns the write's sequence number."""
        with self._lock:
            writer = self._open_writer()
            for record in records:
                document = _document(model, record)
                # A delete applies to the documents added before it, so the new version below survives it.
                writer.delete_documents_by_term("chunk", document["chunk"])
                writer.add_document(tantivy.Document(**document))
            self._written += 1
            written = self._written
            if commit:
                self._commit()
        return written

    def commit_through(self, sequences: Iterable[int]) -> None:
        """Return once the writes numbered `sequences` are committed and searchable: at once when a commit since
        covered them, else after one commit now. KeywordWritesLost when any of them was rolled back."""
        wanted = set(sequences)
        with self._lock:
            self._raise_if_lost(wanted)
            if wanted and max(wanted) > self._committed:
                self._commit()
            self._raise_if_lost(wanted)

    def _raise_if_lost(self, sequences: set[int]) -> None:
        if any(after < sequence <= through for after, through in self._lost for sequence in sequences):
            raise KeywordWritesLost("deferred keyword writes were rolled back before their commit")

    def delete(self, model: str, tenant: str, collection: str, document_ids: Sequence[str] | None,
               chunk_ids: Sequence[str] | None) -> None:
        """Remove the collection's chunks named by chunk id, by document, by both (the chunks among `chunk_ids`
        that belong to `document_ids`) or, with neither, all of them; one commit for the call."""
        with self._lock:
            writer = self._open_writer()
            if chunk_ids is not None and document_ids is not None:
                writer.delete_documents_by_query(tantivy.Query.boolean_query([
                    (tantivy.Occur.Must, self._terms("chunk", [_key(model, tenant, collection, c) for c in chunk_ids])),
                    (tantivy.Occur.Must, self._terms("document", [_key(model, tenant, collection, d)
                                                                  for d in document_ids]))]))
            elif chunk_ids is not None:
                for chunk_id in dict.fromkeys(chunk_ids):
                    writer.delete_documents_by_term("chunk", _key(model, tenant, collection, chunk_id))
            elif document_ids is not None:
                for document_id in dict.fromkeys(document_ids):
                    writer.delete_documents_by_term("document", _key(model, tenant, collection, document_id))
            else:
                writer.delete_documents_by_term("partition", _key(model, tenant, collection))
            self._commit()

    def replace_all(self, rows: Iterable[tuple[str, IndexRecord]]) -> int:
        """Drop everything and index (model, record) rows in one commit (the migration from the FTS5 index)."""
        count = 0
        with self._lock:
            writer = self._open_writer()
            writer.delete_all_documents()
            for model, record in rows:
                writer.add_document(tantivy.Document(**_document(model, record)))
                count += 1
            self._commit()
        return count

    def _forget_uncommitted(self) -> None:
        """The writes since the last commit are gone (rolled back or dropped): `commit_through` says so."""
        if self._written > self._committed:
            self._lost.append((self._committed, self._written))
            self._committed = self._written

    def _open_writer(self) -> tantivy.IndexWriter:
        if self._writer is None:
            self._writer = self._index.writer(WRITER_HEAP_BYTES, 1)
        return self._writer

    def _commit(self) -> None:
        if self._writer is None:  # writes pending in a writer that `close` dropped: nothing left to commit
            self._forget_uncommitted()
            return
        try:
            self._writer.commit()
        except BaseException:
            self._writer.rollback()  # nothing of a failed call may ride along with the next one's commit
            self._forget_uncommitted()
            raise
        self._committed = self._written
        # Segment merges run on tantivy's threads after a commit and write files with the process umask: wait for
        # them (which also releases the writer; the next write opens it again), then narrow every file to 0600.
        # The folder is 0700 anyway; this keeps the files owner-only too when used as a library without umask 077.
        self._writer.wait_merging_threads()
        self._writer = None
        self._index.reload()  # read-your-writes: the call returns only once searches see it
        restrict_tree(self.path)

    # -- reads ----------------------------------------------------------------------------------------------

    def search(self, model: str, tenant: str, collections: Sequence[str], query: str, k: int,
               filters: SearchFilters | None) -> list[SearchHit]:
        terms = query_terms(self._words, self._analyzer, query)
        if not terms or k <= 0 or not collections:
            return []
        words = tantivy.Query.boolean_query([(tantivy.Occur.Should, tantivy.Query.term_query(self._schema, "text", t))
                                             for t in terms])
        clauses = [(tantivy.Occur.Must, words),
                   (tantivy.Occur.Must, self._terms("partition", [_key(model, tenant, c) for c in collections]))]
        if filters is not None and filters.document_ids is not None:
            clauses.append((tantivy.Occur.Must, self._terms(
                "document", [_key(model, tenant, c, d) for c in collections for d in filters.document_ids])))
        for field, value in (("language", filters and filters.language), ("mimetype", filters and filters.mimetype)):
            if value is not None:
                clauses.append((tantivy.Occur.Must, self._terms(field, [value])))
        searcher = self._index.searcher()
        found = searcher.search(tantivy.Query.boolean_query(clauses), k, count=False).hits
        hits = []
        for score, address in found:
            document = searcher.doc(address)
            _, _, collection, chunk_id = json.loads(document["chunk"][0])
            document_id = json.loads(document["document"][0])[3]
            hits.append(SearchHit(chunk_id=chunk_id, document_id=document_id, collection=collection, score=score))
        hits.sort(key=lambda hit: (-hit.score, hit.chunk_id))  # ties in a stable order, as the FTS5 index had
        return hits

    def chunk_ids(self, model: str, tenant: str, collection: str,
                  document_in_range: Callable[[str], bool] | None = None) -> set[str]:
        """The partition's chunk ids, of the documents `document_in_range` admits (all without it). It reads every
        document of the partition: fine for one machine's drift pages, not for a cluster."""
        if self._writer is None:
            self._index.reload()  # a reading process sees the writing process's last commit, not its own opening
        searcher = self._index.searcher()
        if not searcher.num_docs:
            return set()
        found = searcher.search(self._terms("partition", [_key(model, tenant, collection)]), searcher.num_docs,
                                count=False).hits
        chunks = set()
        for _, address in found:
            document = searcher.doc(address)
            if document_in_range is None or document_in_range(json.loads(document["document"][0])[3]):
                chunks.add(json.loads(document["chunk"][0])[3])
        return chunks

    def _terms(self, field: str, values: Sequence[str]) -> tantivy.Query:
        """Documents whose raw `field` is one of `values`, scored 0 so that a filter never changes a rank."""
        return tantivy.Query.const_score_query(
            tantivy.Query.term_set_query(self._schema, field, list(dict.fromkeys(values))), 0.0)


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
        rows = db.execute("SELECT c.model, c.tenant, c.collection, c.chunk_id, c.document_id, c.language, "
                          "c.mimetype, t.text FROM chunk c JOIN chunk_text t ON t.rowid = c.rowid").fetchall()
    finally:
        db.close()
    return [(model, IndexRecord(tenant=tenant, collection=collection, document_id=document_id, chunk_id=chunk_id,
                                vector=(), text=text, language=language, mimetype=mimetype))
            for model, tenant, collection, chunk_id, document_id, language, mimetype, text in rows], True
