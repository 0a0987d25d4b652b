"""Embedded adapter of the `SearchIndex` port: numpy k-NN (exact, or HNSW candidates re-scored exactly for large
partitions) plus tantivy BM25, persisted under one folder.

Layout under `root`:
- `vectors/<key>.npz` + `vectors/<key>.log`: one partition per (model, tenant, collection). The npz is a
  snapshot (the L2-normalised float32 matrix and the chunk id / document id / language / mimetype arrays
  row-aligned with it); the log is an append-only list of the writes made since that snapshot (upserts carry
  their ids, filter fields and float32 rows; deletes carry the chunk ids they removed). A write appends one
  record and fsyncs once, so its cost is the size of the write, not of the partition; loading replays the log
  over the snapshot. Each record is framed as (payload length, CRC-32, payload): a record torn by a crash
  mid-append fails the check and is dropped with everything after it (only the last, unacknowledged write can
  be torn). Once the log outgrows half the snapshot (or holds too many records) the partition is compacted: a
  new snapshot is written via temp-then-rename and the log removed. Every record is idempotent (set or remove
  by chunk id), so a crash between the rename and the removal only replays writes the snapshot already holds.
  A search loads (lazily, then keeps in memory) only the partitions of the collections it names; the memory
  copy is authoritative for reads. Exact brute-force cosine is ~7 ms for 100k x 384 but ~70 ms for 1M, so a
  partition of `ann.MIN_ROWS` rows or more also keeps an HNSW graph (usearch, see ann.py) that proposes
  candidates; they are re-scored exactly, so the graph can cost recall but never return a deleted chunk.
  Filtered searches that keep few rows stay exact. The graph is saved as `vectors/<key>.<generation>.usearch`
  just before the snapshot that names its generation, so a snapshot loads only its own graph; without one (a
  crash in between, an older version) the graph is rebuilt from the vectors at load and saved again.
- `keywords/<tenant hash>/`: one tantivy index per tenant for BM25 over chunk text, so that every statistic a
  score uses is the tenant's own (see keyword.py). Older data directories are migrated on open: keywords kept in
  SQLite FTS5 (`keyword.sqlite`, which stored the texts), or in the one tantivy index all tenants shared
  (`keyword/`, which did not: its chunks' texts come from the chunk store, their filter fields from the vector
  partitions). The rebuild starts from nothing, and the old files go only once it is committed, so a crash
  midway repeats it.
  An ingest batch writes with `upsert_deferred` and commits once with `commit_deferred` (the optional
  `DeferredKeywordCommits` capability): the vector half of such a write is durable at once, the keyword half at
  that commit (or any earlier one: every other write still commits on return).

Attributes and access lists (issue 23) are a document's: a partition keeps them per document (`Partition.table`,
in the snapshot as `document_filters` and in each upsert record as `documents`, so a restart or a crash keeps
them), and the tantivy chunk documents carry the same terms (filters.py). `SearchFilters.attributes` and
`.principals` apply inside both searches, before the top k. A keyword hit is also checked against its partition's
table, whose per-document values are written before the keyword half: a document whose chunks are being rewritten
with a narrower access list is never found through a chunk not yet rewritten (it may be missing meanwhile, never
shown to someone the new list excludes). Rewriting a document's chunks with their own vectors (only its attributes,
access list, language or mimetype changed) appends no vector rows and leaves the graph alone.

One process owns the folder. Writers are serialised by one lock; each partition has a reader/writer lock, taken
alone by a write only while it changes that partition, shared by searches, so searches of one collection run side
by side and a write to one collection never waits for searches of another.

Other processes may read the folder as followers (`follower=True`: `kindex serve`'s query processes,
kindex_local.query_processes). A follower never writes a file. Before it searches a partition it looks at the
partition's snapshot and log and applies what the writer added since (follow.py); before it searches a tenant's
keywords it reloads them if the index has a newer commit. A write acknowledged before a follower's search began is
therefore seen by it, as in the writer's own process.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import secrets
import shutil
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from kindex.adapters.local.private_files import FILE_MODE, private_dir, restrict_tree
from kindex.adapters.local.search import ann, follow
from kindex.adapters.local.search import log as vector_log
from kindex.adapters.local.search.ann import AnnGraph
from kindex.adapters.local.search.keyword import (
    KeywordIndex,
    legacy_fts_rows,
    legacy_shared_chunks,
    outdated_tenant_indices,
)
from kindex.adapters.local.search.locks import ReadWriteLock
from kindex.adapters.local.search.log import (
    FLOAT32,
    OP_CLEAR,
    OP_DELETE,
    OP_OPEN,
    OP_UPSERT,
    frame_record,
    read_records,
)
from kindex.adapters.local.search.partition import (
    DocumentFilters,
    Partition,
    decode_document_filters,
    encode_document_filters,
    normalise_rows,
)
from kindex.domain.errors import InvalidInput
from kindex.domain.ports import ChunkStore
from kindex.domain.types import ChunkRef, IndexRecord, Principals, SearchFilters, SearchHit

logger = logging.getLogger(__name__)

# Chunk texts read from the chunk store per call while migrating the shared keyword index.
MIGRATION_BATCH = 500
# The keyword leg leaves the attribute and access filter to the partitions' values, over-fetching, when the filter
# admits at least this share of the collections' chunks (bench filtered_http, a user in 1,000 groups: 15.4 ms of
# search against 5.7 unfiltered with the filter in tantivy); it fetches `WIDE_FETCH * k / share` hits.
WIDE_FILTER_SHARE = 0.5
WIDE_FETCH = 1.5
Key = tuple[str, str, str]


class _Slot:
    """One (model, tenant, collection)'s place: its reader/writer lock and, once loaded, its partition (None: no
    data); in a follower, also the files it was read from. Slots are never replaced, so a search and a write always
    agree on which lock guards a partition."""

    __slots__ = ("followed", "lock", "loaded", "partition")

    def __init__(self) -> None:
        self.lock = ReadWriteLock()
        self.loaded = False
        self.partition: Partition | None = None
        self.followed: follow.Followed | None = None


class _GraphGone(Exception):
    """A follower found the graph its snapshot names removed: a newer compaction replaced both; read them again."""


class FollowerWrite(RuntimeError):
    """A write was asked of a follower (a query process), which only reads the writer's files."""


class LocalSearchIndex:
    """`SearchIndex` for the local deployment: exact cosine k-NN (numpy) and BM25 (tantivy) under `root`."""

    computes_locally = True  # both legs compute on this machine's cores

    def __init__(self, root: Path | str, chunks: ChunkStore | None = None, *, follower: bool = False):
        """`chunks` (the chunk store) is needed only to migrate a data directory whose keyword index all tenants
        shared; opening one without it raises before anything is changed. `follower`: read a folder another
        process (the writer, which opened it first) writes, and follow its writes (the module docstring)."""
        self.root = Path(root)
        self.follower = follower
        if follower:
            self._vector_dir = self.root / "vectors"
        else:
            self._vector_dir = private_dir(self.root / "vectors")
            restrict_tree(self.root)  # files written by a version that did not set modes (a few per collection)
        # Writers take `_lock` then `_keyword_lock` (a deferred commit only the latter), and each partition's slot
        # lock alone while they change it. Searches take no index-wide lock: the slot's lock, shared (a tantivy
        # searcher is a consistent snapshot by itself).
        self._lock = threading.RLock()
        self._keyword_lock = threading.RLock()
        self._slots: dict[Key, _Slot] = {}
        self._path_names: dict[Key, tuple[Path, Path]] = {}  # a pure function of the key: racing writes store equals
        self._slots_lock = threading.Lock()
        self._load_lock = threading.Lock()
        self._keywords = KeywordIndex(self.root / "keywords", follower=follower)
        if not follower:
            self._migrate_keywords(chunks)

    def close(self) -> None:
        """A clean shutdown: compact every loaded partition that has an HNSW graph and writes in its log (so the next
        open loads the saved graph instead of adding the log's rows to it one by one: a 1M-row partition opened in
        34 s that way), then release the keyword index's writer; the folder can then be reopened by a new
        instance. A compaction that fails leaves its partition as it was (the log replays at the next open). A
        follower closes the files it follows."""
        if self.follower:
            for slot in list(self._slots.values()):
                with slot.lock.writing():
                    if slot.followed is not None:
                        slot.followed.close()
                    slot.followed, slot.partition, slot.loaded = None, None, False
            return
        with self._lock, self._keyword_lock:
            for key, slot in list(self._slots.items()):
                partition = slot.partition
                if partition is None or partition.graph is None or not partition.log_records:
                    continue
                try:
                    with slot.lock.writing():
                        self._maybe_compact(key, partition, force=True)
                except Exception:  # the keyword writer below must still be released; the log stays replayable
                    logger.exception(
                        "search index: compaction at close failed; the log replays at the next open",
                        extra={"rows": len(partition)},
                    )
            self._keywords.close()

    # -- port -------------------------------------------------------------------------------------------------

    def upsert(self, model: str, records: Sequence[IndexRecord]) -> None:
        self._upsert(model, records, commit=True)

    def upsert_deferred(self, model: str, records: Sequence[IndexRecord]) -> int:
        """`upsert`, but the keyword half is not committed yet (the vector half is durable and visible as ever):
        `commit_deferred` with the returned number makes it so. One keyword commit costs ~17 ms whatever it carries,
        so an ingest batch commits its documents' chunks once."""
        return self._upsert(model, records, commit=False)

    def commit_deferred(self, writes: Sequence[int]) -> None:
        """Return once the deferred writes numbered `writes` are durable and visible to keyword search (one commit,
        or none when a later commit already carried them). KeywordWritesLost when a failed commit lost them."""
        self._refuse_follower_write()
        with self._keyword_lock:
            self._keywords.commit_through(writes)

    def _refuse_follower_write(self) -> None:
        if self.follower:
            raise FollowerWrite("this search index follows another process's writes; it does not write")

    def _upsert(self, model: str, records: Sequence[IndexRecord], *, commit: bool) -> int:
        self._refuse_follower_write()
        if not records:
            return 0
        latest: dict[tuple[str, str, str], IndexRecord] = {}
        for record in records:  # the last record wins for a repeated chunk id
            key = (record.tenant, record.collection, record.chunk_id)
            latest.pop(key, None)
            latest[key] = record
        dims = {len(record.vector) for record in latest.values()}
        if len(dims) != 1 or 0 in dims:
            raise InvalidInput("all vectors in one upsert must have the same non-zero length")
        matrix = np.asarray([record.vector for record in latest.values()], dtype=np.float32)
        if not np.isfinite(matrix).all():
            raise InvalidInput("vectors contain non-finite values")
        matrix = normalise_rows(matrix)
        groups: dict[tuple[str, str], list[int]] = {}
        for row, record in enumerate(latest.values()):
            groups.setdefault((record.tenant, record.collection), []).append(row)
        recs = list(latest.values())
        with self._lock:
            # Every partition is checked before any is written, so a dimension mismatch writes nothing.
            for tenant, collection in groups:
                key = (model, tenant, collection)
                with self._slot(key).lock.reading():
                    partition = self._loaded(key)
                if partition is not None and partition.dims != matrix.shape[1]:
                    raise InvalidInput(f"vectors have {matrix.shape[1]} dimensions, model {model} has {partition.dims}")
            for (tenant, collection), rows in groups.items():
                key = (model, tenant, collection)
                with self._slot(key).lock.writing():
                    self._upsert_vectors(key, [recs[row] for row in rows], matrix[rows])
            # The documents' filter values are in the partitions before the keyword half changes: a keyword hit
            # checked against them is never more visible than the latest write allows (see the module docstring).
            with self._keyword_lock:
                written = self._keywords.upsert(model, recs, commit=commit)
        logger.info(
            "search index upsert",
            extra={"model": model, "records": len(recs), "partitions": len(groups), "committed": commit},
        )
        return written

    def delete(
        self,
        model: str,
        tenant: str,
        collection: str,
        *,
        document_ids: Sequence[str] | None = None,
        chunk_ids: Sequence[str] | None = None,
    ) -> None:
        self._refuse_follower_write()
        # An empty list means "nothing", never "everything": only (None, None) deletes the whole collection.
        if (document_ids is not None and not document_ids) or (chunk_ids is not None and not chunk_ids):
            return
        key = (model, tenant, collection)
        with self._lock, self._keyword_lock:
            with self._slot(key).lock.writing():
                removed = self._delete_vectors(key, document_ids, chunk_ids)
            self._keywords.delete(model, tenant, collection, document_ids, chunk_ids)
        logger.info(
            "search index delete",
            extra={"model": model, "tenant": tenant, "collection": collection, "deleted": removed},
        )

    def knn_search(
        self,
        model: str,
        tenant: str,
        collections: Sequence[str],
        vector: Sequence[float],
        k: int,
        filters: SearchFilters | None = None,
    ) -> list[SearchHit]:
        if k <= 0 or not collections:
            return []
        filters = with_principals(filters)
        query = normalise_rows(np.asarray([vector], dtype=np.float32))[0]
        candidates: list[tuple[float, str, str, str]] = []
        # Per partition top k, then one merge: exact, as every partition contributes its own best k. Each partition
        # is read under its own shared lock, one after another.
        for collection in dict.fromkeys(collections):
            key = (model, tenant, collection)
            with self._reading(key) as partition:
                if partition is None or not len(partition):
                    continue
                if partition.dims != len(query):
                    raise InvalidInput(f"query vector has {len(query)} dimensions, the index has {partition.dims}")
                documents = partition.documents.values
                candidates += [
                    (score, partition.chunk_ids[row], documents[partition.document_codes[row]], collection)
                    for score, row in partition.top(query, k, filters)
                ]
        candidates.sort(key=lambda hit: (-hit[0], hit[3], hit[1]))
        return [
            SearchHit(chunk_id=chunk_id, document_id=document_id, collection=collection, score=score)
            for score, chunk_id, document_id, collection in candidates[:k]
        ]

    def keyword_search(
        self,
        model: str,
        tenant: str,
        collections: Sequence[str],
        query: str,
        k: int,
        filters: SearchFilters | None = None,
    ) -> list[SearchHit]:
        collections = list(dict.fromkeys(collections))
        filters = with_principals(filters)
        share = self._admitted_share(model, tenant, collections, filters) if _set_filtered(filters) else 0.0
        if share >= WIDE_FILTER_SHARE:
            # A filter that admits most chunks costs tantivy more as a filter (a user in 1,000 groups: a bit set
            # over every posting of the 1,000 terms) than it removes: the word query alone over-fetches, and the
            # partitions' values (below) keep what they admit. The same top k when enough are admitted (a filter
            # never changes a score); otherwise the filtered query runs after all, so k come back whenever k exist.
            wide = dataclasses.replace(filters, attributes=None, principals=None)
            fetch = math.ceil(k * WIDE_FETCH / share)
            found = self._keywords.search(model, tenant, collections, query, fetch, wide)
            kept = self._admitted_hits(model, tenant, found, filters)
            if len(kept) >= k or len(found) < fetch:  # enough, or every chunk the words match was seen
                return kept[:k]
        hits = self._keywords.search(model, tenant, collections, query, k, filters)
        kept = self._admitted_hits(model, tenant, hits, filters)
        if len(kept) < len(hits):
            logger.info(
                "search index: keyword hits whose document no longer passes the filter dropped",
                extra={"dropped": len(hits) - len(kept)},
            )
        return kept

    def _admitted_share(self, model: str, tenant: str, collections: Sequence[str], filters: SearchFilters) -> float:
        """The share of the collections' chunks that the filters' attributes and principals admit, by the
        partitions' per-document values (0 for a partition not loaded: fail closed, the filtered query runs)."""
        admitted = total = 0
        for collection in collections:
            key = (model, tenant, collection)
            with self._reading(key) as partition:
                if partition is None or not partition.size:
                    continue
                mask = partition.mask(filters)
                total += partition.size
                admitted += partition.size if mask is None else int(np.count_nonzero(mask))
        return admitted / total if total else 0.0

    def _admitted_hits(self, model: str, tenant: str, hits: list[SearchHit], filters: SearchFilters) -> list[SearchHit]:
        """The hits whose document the partition's values admit, in order (none of a partition not loaded)."""
        if not hits:
            return hits
        # tantivy applied the filter to each chunk's own terms; the partition's per-document values are the
        # latest word (written first), so a chunk whose rewrite has not reached the keyword half yet is dropped.
        groups = frozenset(filters.principals.groups) if filters.principals is not None else frozenset()
        admitted: set[tuple[str, str]] = set()
        for collection in {hit.collection for hit in hits}:
            key = (model, tenant, collection)
            with self._reading(key) as partition:
                if partition is not None:
                    admitted.update(
                        (collection, hit.document_id)
                        for hit in hits
                        if hit.collection == collection and partition.admits(hit.document_id, filters, groups)
                    )
        return [hit for hit in hits if (hit.collection, hit.document_id) in admitted]

    def chunk_ids(
        self,
        model: str,
        tenant: str,
        collection: str,
        *,
        after_document: str | None = None,
        through_document: str | None = None,
    ) -> set[str]:
        def in_range(document_id: str) -> bool:
            return (after_document is None or document_id > after_document) and (
                through_document is None or document_id <= through_document
            )

        ranged = after_document is not None or through_document is not None
        key = (model, tenant, collection)
        with self._lock, self._keyword_lock:
            found: set[str] = set()
            with self._reading(key) as partition:
                if partition is not None:
                    # Python compares str by code point, as the metadata stores order document ids.
                    found.update(
                        partition.select([d for d in partition.documents.codes if in_range(d)], None)
                        if ranged
                        else partition.chunk_ids
                    )
            # The union: drift repair must see a chunk that only one of the two stores still holds.
            found.update(self._keywords.chunk_ids(model, tenant, collection, in_range if ranged else None))
        return found

    # -- vectors ----------------------------------------------------------------------------------------------

    def _paths(self, key: tuple[str, str, str]) -> tuple[Path, Path]:
        """The partition's snapshot and log files (named once per key: a follower looks at them every search)."""
        paths = self._path_names.get(key)
        if paths is None:
            name = hashlib.sha256(json.dumps(list(key)).encode("utf-8")).hexdigest()[:40]
            paths = self._path_names[key] = (self._vector_dir / f"{name}.npz", self._vector_dir / f"{name}.log")
        return paths

    def _slot(self, key: Key) -> _Slot:
        with self._slots_lock:
            slot = self._slots.get(key)
            if slot is None:
                slot = self._slots[key] = _Slot()
            return slot

    @contextmanager
    def _reading(self, key: Key) -> Iterator[Partition | None]:
        """The partition of `key` under its lock, shared; a follower first applies what the writer added since it
        last looked (under the lock alone, and only when the files changed: looking costs a few system calls)."""
        slot = self._slot(key)
        if self.follower:
            with slot.lock.reading():
                fresh = slot.loaded and follow.current(slot.followed, *self._paths(key)) == "same"
            if not fresh:
                with slot.lock.writing():
                    self._follow(key, slot)
            with slot.lock.reading():
                yield slot.partition
            return
        with slot.lock.reading():
            yield self._loaded(key)

    def sweep(self) -> int:
        """A follower lets go of the partitions whose files the writer replaced or removed since it last searched
        them: the log it holds open (so a deleted collection's bytes leave the disk) and the rows in memory; the next
        search of one reads its files again. Its keyword indices move to their last commits (KeywordIndex.sweep).
        How many partitions it let go (the writer: none)."""
        if not self.follower:
            return 0
        released = 0
        for key, slot in list(self._slots.items()):
            snapshot, log = self._paths(key)
            with slot.lock.reading():
                stale = slot.loaded and follow.current(slot.followed, snapshot, log) == "reload"
            if not stale:
                continue
            with slot.lock.writing():
                if slot.loaded and follow.current(slot.followed, snapshot, log) == "reload":
                    if slot.followed is not None:
                        slot.followed.close()
                    slot.followed, slot.partition, slot.loaded = None, None, False
                    released += 1
        self._keywords.sweep()
        return released

    def _follow(self, key: Key, slot: _Slot) -> None:
        """Bring a follower's partition up to the files (the caller holds the slot's lock alone): replay the log's
        new records, or read snapshot and log again when they were replaced (follow.py). A failure leaves the slot
        to be read again from the files by the next search."""
        snapshot, log = self._paths(key)
        state = follow.current(slot.followed, snapshot, log) if slot.loaded else "reload"
        if state == "same":
            return
        try:
            if state == "tail" and slot.followed is not None:
                slot.partition = self._follow_log(key, slot.followed, slot.partition)
            else:
                self._follow_anew(key, slot)
        except BaseException:
            if slot.followed is not None:
                slot.followed.close()
            slot.followed, slot.partition, slot.loaded = None, None, False
            raise
        if slot.partition is not None and not len(slot.partition):
            slot.partition = None
        slot.loaded = True

    def _follow_anew(self, key: Key, slot: _Slot) -> None:
        snapshot, log = self._paths(key)
        for _ in range(follow.ATTEMPTS):
            pair, snapshot_fd = follow.open_pair(snapshot, log)
            try:
                partition = None
                if snapshot_fd is not None:
                    partition = self._snapshot_partition(key, snapshot_fd, pair, snapshot)
                if pair.log is not None:
                    partition = self._follow_log(key, pair, partition)
            except _GraphGone:
                pair.close()
                continue
            except BaseException:
                pair.close()
                raise
            finally:
                if snapshot_fd is not None:
                    os.close(snapshot_fd)
            if slot.followed is not None:
                slot.followed.close()
            slot.followed, slot.partition = pair, partition
            return
        raise RuntimeError(f"vector partition {snapshot.name} kept changing while a follower read it")

    def _snapshot_partition(self, key: Key, fd: int, pair: follow.Followed, snapshot: Path) -> Partition:
        """A follower's partition from the snapshot open as `fd`, with the graph it names (none when that graph is
        missing: searched exactly, as the writer rebuilds and saves it)."""
        with os.fdopen(os.dup(fd), "rb") as handle, np.load(handle, allow_pickle=False) as data:
            partition, generation = _from_snapshot(key, data, snapshot)
        if generation is not None and len(partition) >= ann.MIN_ROWS:
            graph = AnnGraph.load(self._graph_path(key, generation), partition.dims, len(partition))
            if graph is None and follow.identity(snapshot) != pair.snapshot:
                raise _GraphGone
            partition.attach_graph(graph)
        return partition

    def _follow_log(self, key: Key, followed: follow.Followed, partition: Partition | None) -> Partition | None:
        """`partition` after the complete records of the followed log past what was applied (never truncated)."""
        assert followed.log is not None
        base = followed.applied
        data = follow.read_from(followed.log, base)
        start = 0
        log = self._paths(key)[1]
        for op, header, body, end in read_records(data):
            partition = _apply_record(key, log, partition, op, header, body)
            followed.last_record = (base + start, data[start : start + vector_log.FRAME.size])
            followed.applied = base + end
            start = end
        followed.seen_size = base + len(data)
        return partition

    def _loaded(self, key: Key) -> Partition | None:
        """The partition of `key`, loaded from disk the first time (the caller holds the slot's lock, shared or
        alone: two readers loading at once would both load, so the first load is made under a load lock)."""
        slot = self._slot(key)
        if not slot.loaded:
            with self._load_lock:
                if not slot.loaded:
                    slot.partition = self._load(key)
                    slot.loaded = True
        return slot.partition

    def _set(self, key: Key, partition: Partition | None) -> None:
        """Replace the partition of `key` (the caller holds the slot's lock alone)."""
        slot = self._slot(key)
        slot.partition, slot.loaded = partition, True

    def _partition(self, model: str, tenant: str, collection: str) -> Partition | None:
        """The partition, loaded if need be, without taking its lock: for writers under `_lock`, and tests."""
        return self._loaded((model, tenant, collection))

    def _load(self, key: tuple[str, str, str]) -> Partition | None:
        snapshot, log = self._paths(key)
        partition = None
        if snapshot.exists():
            with np.load(snapshot, allow_pickle=False) as data:
                partition, generation = _from_snapshot(key, data, snapshot)
            partition.snapshot_bytes = snapshot.stat().st_size
            if generation is not None and len(partition) >= ann.MIN_ROWS:
                # The graph saved with this very snapshot; the log replayed below updates both alike.
                partition.attach_graph(AnnGraph.load(self._graph_path(key, generation), partition.dims, len(partition)))
        if log.exists():
            partition = self._replay(key, log, partition)
        if partition is not None and not len(partition):
            # Only after a crash between the last delete and the removal of the files: finish the removal.
            self._remove_files(key)
            return None
        if partition is not None and partition.fit_graph():
            # No usable graph file (a crash before it was saved, or an older version): rebuilt, and saved now.
            logger.warning("search index graph rebuilt from the vectors", extra={"rows": len(partition)})
            self._maybe_compact(key, partition, force=True)
        return partition

    def _replay(self, key: tuple[str, str, str], log: Path, partition: Partition | None) -> Partition | None:
        data = log.read_bytes()
        offset = records = 0
        for op, header, body, end in read_records(data):
            partition = _apply_record(key, log, partition, op, header, body)
            offset, records = end, records + 1
        if offset < len(data):
            # A crash mid-append leaves a torn last record; that write never returned, so dropping it loses
            # nothing acknowledged. Cut it off so that the next append does not land behind unreadable bytes.
            logger.warning(
                "search index log has a torn tail, ignored",
                extra={"log": log.name, "kept_bytes": offset, "dropped_bytes": len(data) - offset},
            )
            with open(log, "r+b") as handle:
                handle.truncate(offset)
                os.fsync(handle.fileno())
        if offset == 0:
            log.unlink()
        if partition is not None:
            partition.log_bytes, partition.log_records = offset, records
        return partition

    def _append(
        self, key: tuple[str, str, str], partition: Partition, op: bytes, header: dict, body: bytes = b""
    ) -> None:
        """Append one record to the partition's log and fsync: the write is durable once this returns."""
        frames = []
        if partition.log_bytes == 0:  # a new log names its partition, as the snapshot does
            frames.append(frame_record(OP_OPEN, {"key": list(key), "dims": partition.dims}))
        frames.append(frame_record(op, header, body))
        data = b"".join(frames)
        log = self._paths(key)[1]
        # A new log is started truncated: whatever an earlier failed attempt left there is not part of it.
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if partition.log_bytes == 0 else 0)
        fd = os.open(log, flags, FILE_MODE)
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
            os.fsync(fd)
        except BaseException:
            # A failed append must not leave half a record for the next one to land behind.
            try:
                os.ftruncate(fd, partition.log_bytes)
            except OSError:
                pass
            raise
        finally:
            os.close(fd)
        if partition.log_bytes == 0:
            self._sync_dir()
        partition.log_bytes += len(data)
        partition.log_records += len(frames)

    def _upsert_vectors(self, key: tuple[str, str, str], records: list[IndexRecord], vectors: np.ndarray) -> None:
        partition = self._partition(*key)
        if partition is None:
            partition = Partition(vectors.shape[1])
        fields = [
            (record.chunk_id, record.document_id, record.language or "", record.mimetype or "") for record in records
        ]
        # Each record carries its document's attributes and access list: the last record of a document wins.
        documents: dict[str, DocumentFilters] = {}
        for record in records:
            documents[record.document_id] = (record.attributes, record.access)
        # Compared as JSON: Python's `True == 1` must not hide a change of type.
        encoded = encode_document_filters(documents)
        held = encode_document_filters(
            {document_id: partition.document_filters(document_id) for document_id in documents}
        )
        changed_documents = {
            document_id: documents[document_id]
            for document_id in documents
            if document_id not in partition.documents.codes
            or json.dumps(encoded[document_id]) != json.dumps(held[document_id])
        }
        changed = ~partition.unchanged(fields, vectors)
        if not changed.any() and not changed_documents:
            return  # the partition holds exactly this already: nothing to log
        # Rows the partition already holds exactly are left out: a document whose attributes or access list
        # changed costs one small record, not its vectors again.
        fields = [field for field, keep in zip(fields, changed) if keep]
        vectors = vectors[changed]
        self._append(
            key,
            partition,
            OP_UPSERT,
            {"rows": fields, "documents": encode_document_filters(changed_documents)},
            np.ascontiguousarray(vectors, dtype=FLOAT32).tobytes(),
        )
        partition.put(fields, vectors, changed_documents)
        self._set(key, partition)
        built = partition.fit_graph()
        if built:
            logger.info("search index graph built", extra={"rows": len(partition)})
        # A new graph is saved with a snapshot at once, so a restart does not have to build it again.
        self._maybe_compact(key, partition, force=built)

    def _delete_vectors(
        self, key: tuple[str, str, str], document_ids: Sequence[str] | None, chunk_ids: Sequence[str] | None
    ) -> int:
        partition = self._partition(*key)
        if partition is None:
            return 0
        if document_ids is None and chunk_ids is None:
            removed = len(partition)
            self._append(key, partition, OP_CLEAR, {})
            partition = Partition(partition.dims)
        else:
            doomed = partition.select(document_ids, chunk_ids)
            if not doomed:
                return 0
            self._append(key, partition, OP_DELETE, {"ids": doomed})
            removed = partition.remove(doomed)
        if not len(partition):
            # The delete record is durable first, so a crash between the two removals replays to empty too.
            self._remove_files(key)
            self._set(key, None)
        else:
            partition.fit_graph()
            self._maybe_compact(key, partition)
        return removed

    def _maybe_compact(self, key: tuple[str, str, str], partition: Partition, force: bool = False) -> None:
        if not force and (
            partition.log_records < vector_log.COMPACT_MAX_RECORDS
            and partition.log_bytes <= max(vector_log.COMPACT_MIN_LOG_BYTES, partition.snapshot_bytes // 2)
        ):
            return
        snapshot, log = self._paths(key)
        generation = secrets.token_hex(8)
        if partition.graph is not None:
            # The graph first, named by the snapshot that follows: until that snapshot is in place no snapshot
            # names this graph, and afterwards the graph it names exists.
            partition.graph.save(self._graph_path(key, generation))
        temp = snapshot.with_name(f"{snapshot.stem}.{os.getpid()}.{threading.get_ident()}.tmp")
        with open(temp, "wb", opener=lambda path, flags: os.open(path, flags, FILE_MODE)) as handle:
            # Any: numpy's stub reads a ** of arrays as a possible `allow_pickle: bool` (the names are array names).
            arrays: dict[str, Any] = {
                "key": np.array(list(key), dtype=str),
                "generation": np.array(generation),
                **partition.arrays(),
            }
            np.savez(handle, **arrays)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, snapshot)
        self._sync_dir()
        log.unlink(missing_ok=True)
        self._sync_dir()
        self._remove_graphs(key, keep=generation)
        logger.info(
            "search index partition compacted",
            extra={
                "rows": len(partition),
                "log_bytes": partition.log_bytes,
                "log_records": partition.log_records,
                "graph": partition.graph is not None,
            },
        )
        partition.snapshot_bytes = snapshot.stat().st_size
        partition.log_bytes = partition.log_records = 0

    def _graph_path(self, key: tuple[str, str, str], generation: str) -> Path:
        snapshot = self._paths(key)[0]
        return snapshot.with_name(f"{snapshot.stem}.{generation}.usearch")

    def _remove_graphs(self, key: tuple[str, str, str], keep: str | None = None) -> None:
        """The partition's graph files (and their temp files) but the one of generation `keep`."""
        stem = self._paths(key)[0].stem
        for path in self._vector_dir.glob(f"{stem}.*.usearch*"):
            if keep is None or path.name != f"{stem}.{keep}.usearch":
                path.unlink(missing_ok=True)

    def _remove_files(self, key: tuple[str, str, str]) -> None:
        snapshot, log = self._paths(key)
        snapshot.unlink(missing_ok=True)  # the snapshot first: the log alone replays to the same state
        self._sync_dir()
        log.unlink(missing_ok=True)
        self._remove_graphs(key)
        self._sync_dir()

    def _sync_dir(self, folder: Path | None = None) -> None:
        """Make file creations, renames and removals in the vector folder (or `folder`) durable."""
        fd = os.open(folder or self._vector_dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- keywords ---------------------------------------------------------------------------------------------

    def _migrate_keywords(self, chunks: ChunkStore | None) -> None:
        """Per-tenant keyword indices from an older version's layout, if the folder has one (see the module doc)."""
        database, shared = self.root / "keyword.sqlite", self.root / "keyword"
        if database.exists():
            # FTS5 comes first: its rows hold the texts. A `keyword/` beside it is a migration of it cut short.
            self._migrate_fts(database)
        elif shared.exists():
            self._migrate_shared_keywords(shared, chunks)
        self._upgrade_tenant_keywords(chunks)

    def _migrate_fts(self, database: Path) -> None:
        """Move the keywords of an older version's SQLite FTS5 index into per-tenant tantivy indices, then remove
        the SQLite files (and what an interrupted migration of them into a shared tantivy index left)."""
        rows, complete = legacy_fts_rows(database)
        migrated = self._keywords.rebuild(rows)
        if not complete:
            # A contentless FTS5 table (SQLite >= 3.43) kept no text to move: those chunks need a full reindex.
            logger.warning(
                "search index: the old keyword index kept no chunk text; keyword search misses its "
                "chunks until they are indexed again",
                extra={"path": str(database)},
            )
        shutil.rmtree(self.root / "keyword", ignore_errors=True)
        for suffix in ("-wal", "-shm", ""):
            Path(f"{database}{suffix}").unlink(missing_ok=True)
        self._sync_dir(self.root)
        logger.info("search index: keywords migrated from SQLite FTS5", extra={"chunks": migrated})

    def _migrate_shared_keywords(self, folder: Path, chunks: ChunkStore | None) -> None:
        """Rebuild the keywords of the tantivy index older versions shared between tenants (whose BM25 statistics
        mixed every tenant's documents) as one index per tenant, then remove the shared one."""
        groups = _grouped_chunks(legacy_shared_chunks(folder))
        if groups and chunks is None:
            raise RuntimeError(
                f"{folder} is a keyword index shared by all tenants: rebuilding it per tenant needs "
                "the chunk store (open the data directory through kindex's composition root)"
            )
        lost = [0]
        with self._lock:
            rows = self._keyword_rows(groups, chunks, lost) if chunks is not None else iter(())  # no groups then
            migrated = self._keywords.rebuild(rows)
        shutil.rmtree(folder)
        self._sync_dir(self.root)
        logger.info(
            "search index: keywords rebuilt per tenant from the shared index",
            extra={"chunks": migrated, "tenants": len({tenant for tenant, _, _ in groups}), "without_text": lost[0]},
        )

    def _upgrade_tenant_keywords(self, chunks: ChunkStore | None) -> None:
        """Rebuild each tenant keyword index written before the filter fields existed (tantivy cannot add fields
        to an index, nor open it with a schema that has more): texts from the chunk store, language, mimetype,
        attributes and access lists from the vector partitions - which hold none for such chunks either (their
        documents were written before attributes existed), so the rebuilt chunks have "no attributes, no access
        list" as before, until their documents are written again. A crash midway leaves the old index, or the new
        one complete (keyword.py `KeywordIndex.replace_tenant`), and the next open goes on."""
        self._keywords.finish_interrupted_upgrades()
        outdated = outdated_tenant_indices(self._keywords.path)
        if not outdated:
            return
        if chunks is None:
            raise RuntimeError(
                f"{len(outdated)} keyword indices under {self._keywords.path} predate attribute "
                "filters: rebuilding them needs the chunk store (open the data directory through "
                "kindex's composition root)"
            )
        for folder in outdated:
            groups = _grouped_chunks(legacy_shared_chunks(folder))
            lost = [0]
            with self._lock:
                rebuilt = self._keywords.replace_tenant(folder.name, self._keyword_rows(groups, chunks, lost))
            logger.info(
                "search index: a tenant's keyword index rebuilt with the filter fields",
                extra={"chunks": rebuilt, "without_text": lost[0]},
            )

    def _keyword_rows(
        self, groups: dict[tuple[str, str, str], list[tuple[str, str]]], chunks: ChunkStore, lost: list[int]
    ) -> Iterator[tuple[str, IndexRecord]]:
        """(model, record) for each listed chunk, by tenant: the text from the chunk store, the filter fields from
        the vector partition (one in memory at a time, unless a query had loaded it); `lost[0]` counts the chunks
        the store no longer has."""
        for tenant, model, collection in sorted(groups):  # by tenant: one tenant's index written at a time
            key = (model, tenant, collection)
            cached = key in self._slots and self._slots[key].loaded
            partition = self._partition(model, tenant, collection)
            members = groups[(tenant, model, collection)]
            for start in range(0, len(members), MIGRATION_BATCH):
                part = members[start : start + MIGRATION_BATCH]
                stored = chunks.get_chunks(
                    tenant,
                    [
                        ChunkRef(collection=collection, document_id=document_id, chunk_id=chunk_id)
                        for document_id, chunk_id in part
                    ],
                )
                for document_id, chunk_id in part:
                    chunk = stored.get(chunk_id)
                    if chunk is None:  # a chunk the index kept after the store dropped it: drift, not data
                        lost[0] += 1
                        continue
                    # A chunk without vectors (drift too) gets no filter fields: only unfiltered searches find it
                    # (and its document is unknown to the partition, so a filtered search drops it: fail closed).
                    language, mimetype = partition.filter_fields(chunk_id) if partition else (None, None)
                    attributes, access = partition.document_filters(document_id) if partition else (None, None)
                    yield (
                        model,
                        IndexRecord(
                            tenant=tenant,
                            collection=collection,
                            document_id=document_id,
                            chunk_id=chunk_id,
                            vector=(),
                            text=chunk.text,
                            language=language,
                            mimetype=mimetype,
                            attributes=attributes,
                            access=access,
                        ),
                    )
            if not cached:
                self._slots.pop(key, None)  # one partition in memory at a time; queries load theirs


def _grouped_chunks(
    listed: Iterable[tuple[str, str, str, str, str]],
) -> dict[tuple[str, str, str], list[tuple[str, str]]]:
    """(model, tenant, collection, document id, chunk id) rows as {(tenant, model, collection): [(document, chunk)]}."""
    groups: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
    for model, tenant, collection, document_id, chunk_id in listed:
        groups.setdefault((tenant, model, collection), []).append((document_id, chunk_id))
    return groups


def _from_snapshot(key: Key, data: Mapping[str, Any], snapshot: Path) -> tuple[Partition, str | None]:
    """The partition a snapshot's arrays hold, and the generation of the graph saved with it (None: none)."""
    if list(data["key"]) != list(key):
        raise RuntimeError(f"vector partition {snapshot.name} belongs to another key")
    partition = Partition.from_arrays(
        data["vectors"],
        data["chunk_ids"],
        data["document_ids"],
        data["languages"],
        data["mimetypes"],
        data["document_filters"] if "document_filters" in data else None,
    )
    return partition, str(data["generation"]) if "generation" in data else None


def _apply_record(
    key: tuple[str, str, str], log: Path, partition: Partition | None, op: bytes, header: dict, body: memoryview
) -> Partition | None:
    """The partition after one replayed log record (a new one when the record opens or clears it)."""
    if op == OP_OPEN:
        if header["key"] != list(key):
            raise RuntimeError(f"vector log {log.name} belongs to another key")
        if partition is None:
            partition = Partition(header["dims"])
    elif op == OP_UPSERT:
        # `documents` (absent in an older version's records: its documents had no attributes or access list)
        documents = decode_document_filters(header.get("documents", {}))
        if not header["rows"]:
            if partition is not None:  # a record that only changed documents' filter values
                partition.put([], np.zeros((0, partition.dims), dtype=np.float32), documents)
            return partition
        rows = np.frombuffer(body, dtype=FLOAT32).reshape(len(header["rows"]), -1)
        if partition is None:
            partition = Partition(rows.shape[1])
        partition.put(header["rows"], rows, documents)
    elif op == OP_DELETE and partition is not None:
        partition.remove(header["ids"])
    elif op == OP_CLEAR and partition is not None:
        partition = Partition(partition.dims)
    return partition


def _set_filtered(filters: SearchFilters) -> bool:
    """Does tantivy evaluate the filter as set queries (an attribute expression, several groups), which build a bit
    set over every posting of their terms? A lone user or group is a term query the words skip through, cheaper
    than the share `keyword_search` would compute to leave it out (a row mask on every keyword query)."""
    principals = filters.principals
    return filters.attributes is not None or (principals is not None and len(principals.groups) > 1)


def with_principals(filters: SearchFilters | None) -> SearchFilters:
    """The filters with their principals, `Principals()` (no user, no group) when none are given: a search that
    names nobody sees only documents without an access list, as on every engine (SearchFilters)."""
    if filters is None:
        return SearchFilters(principals=Principals())
    if filters.principals is None:
        return dataclasses.replace(filters, principals=Principals())
    return filters
