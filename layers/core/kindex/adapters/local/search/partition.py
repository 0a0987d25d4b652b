"""One (model, tenant, collection) of vectors in memory: a matrix with row-aligned ids and interned filter columns,
its documents' attributes and access lists, exact cosine top-k with filters."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet

import numpy as np

from kindex.adapters.local.search import ann
from kindex.adapters.local.search.ann import AnnGraph
from kindex.adapters.local.search.filters import DocumentTable
from kindex.domain.filters import Access, AttributeValue
from kindex.domain.types import SearchFilters

DocumentFilters = tuple[Mapping[str, AttributeValue] | None, Access | None]
ACCESS_PARTS = ("users", "groups", "deny_users", "deny_groups")

# Below one matching row in GATHER_RATIO, copying the matching rows out beats scoring the whole partition
# (measured at 100k x 384: gathering 6% of the rows costs about half a full matrix-vector product).
GATHER_RATIO = 16
# A partition with a graph keeps its rows as float16: a million 384-dimension rows are 0.7 GiB instead of 1.4, which
# with the graph's ~0.9 GiB keeps the whole partition within 2 GiB. Scores from float16 rows differ from float32 ones
# by ~1e-4 at most (unit vectors), far below what separates two texts' relevance; small partitions stay float32.
COMPACT_DTYPE = np.float16
# Rows scored per step when a compact matrix is scanned whole (each block is widened to float32 first).
SCORE_BLOCK = 65_536
# A filtered search over a partition with a graph stays exact (over the gathered matching rows) up to this many
# matching rows; above it the graph's over-fetched candidates are cheaper. Measured (docs/scale.md, "Attribute
# filters"): gathering costs ~2 us a row, one graph search ~20-36 ms, so they cross near 20,000 rows.
EXACT_MAX_ROWS = 20_000


def encode_document_filters(documents: Mapping[str, DocumentFilters]) -> dict[str, list]:
    """`{document id: [attributes, access]}` as JSON values (None where a document has none), for logs and snapshots."""
    # Access lists by hand: pydantic's model_dump warns on their tuples (a plain validator hides their type).
    return {
        document_id: [
            dict(attributes) if attributes is not None else None,
            {part: list(getattr(access, part)) for part in ACCESS_PARTS} if access is not None else None,
        ]
        for document_id, (attributes, access) in documents.items()
    }


def decode_document_filters(encoded: Mapping[str, list]) -> dict[str, DocumentFilters]:
    return {
        document_id: (attributes, Access(**access) if access is not None else None)
        for document_id, (attributes, access) in encoded.items()
    }


def normalise_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero) so a dot product is the cosine similarity."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.where(norms > 0, norms, 1.0)).astype(np.float32, copy=False)


class Interned:
    """Strings as small ints, so filter columns are int arrays compared in bulk."""

    def __init__(self, values: Iterable[str] = ()):
        self.values: list[str] = []
        self.codes: dict[str, int] = {}
        for value in values:
            self.code(value)

    def code(self, value: str) -> int:
        code = self.codes.get(value)
        if code is None:
            code = self.codes[value] = len(self.values)
            self.values.append(value)
        return code

    def decode(self, codes: np.ndarray) -> np.ndarray:
        return np.array(self.values, dtype=str)[codes] if len(codes) else np.array([], dtype=str)


class Partition:
    """One (model, tenant, collection) in memory: the first `size` rows of `vectors` align with `chunk_ids` and
    the interned document / language / mimetype codes (None is stored as "", as a filter value never is None).
    `table` holds each document's attributes and access list by document code; every code of a live row is in it
    (a document written without them, or before they existed, has `(None, None)`).

    Storage grows by doubling and a removed row is refilled with the last one, so a write never copies the matrix
    and a search reads it in place. `log_bytes`, `log_records` and `snapshot_bytes` describe the files behind it.
    From `ann.MIN_ROWS` rows a partition also keeps an HNSW graph over its rows (`graph`), kept in step by every
    write, that proposes candidates for unfiltered and broadly filtered searches; everything else stays exact.
    """

    def __init__(self, dims: int):
        self.dims = dims
        self.size = 0
        self.vectors = np.zeros((0, dims), dtype=np.float32)
        self.document_codes = np.zeros(0, dtype=np.int32)
        self.language_codes = np.zeros(0, dtype=np.int32)
        self.mimetype_codes = np.zeros(0, dtype=np.int32)
        self.chunk_ids: list[str] = []
        self.rows: dict[str, int] = {}
        self.documents, self.languages, self.mimetypes = Interned(), Interned(), Interned()
        self.table = DocumentTable()
        self.log_bytes = 0
        self.log_records = 0
        self.snapshot_bytes = 0
        self.graph: AnnGraph | None = None

    @classmethod
    def from_arrays(
        cls,
        vectors: np.ndarray,
        chunk_ids: np.ndarray,
        document_ids: np.ndarray,
        languages: np.ndarray,
        mimetypes: np.ndarray,
        document_filters: np.ndarray | None = None,
    ) -> Partition:
        """A partition from a snapshot's arrays; float16 vectors (a large partition's) stay float16 until
        `fit_graph` decides the partition's precision. `document_filters` is the snapshot's JSON of the documents'
        attributes and access lists (an older snapshot has none: its documents have neither)."""
        partition = cls(vectors.shape[1])
        dtype = COMPACT_DTYPE if vectors.dtype == COMPACT_DTYPE else np.float32
        partition.vectors = np.ascontiguousarray(vectors, dtype=dtype)
        partition.size = len(chunk_ids)
        partition.chunk_ids = [str(chunk_id) for chunk_id in chunk_ids]
        partition.rows = {chunk_id: row for row, chunk_id in enumerate(partition.chunk_ids)}
        for values, attribute in ((document_ids, "document"), (languages, "language"), (mimetypes, "mimetype")):
            unique, codes = np.unique(values, return_inverse=True)
            setattr(partition, f"{attribute}s", Interned(str(value) for value in unique))
            setattr(partition, f"{attribute}_codes", codes.astype(np.int32).reshape(-1))
        stored = decode_document_filters(json.loads(bytes(document_filters))) if document_filters is not None else {}
        for code, document_id in enumerate(partition.documents.values):
            partition.table.put(code, *stored.get(document_id, (None, None)))
        return partition

    def __len__(self) -> int:
        return self.size

    def arrays(self) -> dict[str, np.ndarray]:
        """The snapshot's arrays (the layout older versions wrote, so their files still load, plus
        `document_filters`: UTF-8 JSON of the live documents that have attributes or an access list)."""
        n = self.size
        live = {
            self.documents.values[code]: self.table.values(code) for code in np.unique(self.document_codes[:n]).tolist()
        }
        kept = {document_id: found for document_id, found in live.items() if found != (None, None)}
        encoded = json.dumps(encode_document_filters(kept), separators=(",", ":"), ensure_ascii=False)
        return {
            "vectors": self.vectors[:n],
            "chunk_ids": np.array(self.chunk_ids, dtype=str),
            "document_ids": self.documents.decode(self.document_codes[:n]),
            "languages": self.languages.decode(self.language_codes[:n]),
            "mimetypes": self.mimetypes.decode(self.mimetype_codes[:n]),
            "document_filters": np.frombuffer(encoded.encode("utf-8"), dtype=np.uint8),
        }

    def unchanged(self, fields: Sequence[Sequence[str]], vectors: np.ndarray) -> np.ndarray:
        """Which of the rows `fields` / `vectors` (as `put` takes them) the partition already holds exactly: same
        chunk id, document, language, mimetype and vector (as stored: a float16 row compares rounded). Rewriting a
        document's chunks to change only its attributes or access list writes none of them again."""
        same = np.zeros(len(fields), dtype=bool)
        rows = np.full(len(fields), -1, dtype=np.intp)
        for i, (chunk_id, document_id, language, mimetype) in enumerate(fields):
            row = self.rows.get(chunk_id)
            if row is not None and (
                self.documents.codes.get(document_id) == self.document_codes[row]
                and self.languages.codes.get(language) == self.language_codes[row]
                and self.mimetypes.codes.get(mimetype) == self.mimetype_codes[row]
            ):
                rows[i], same[i] = row, True
        if same.any():
            stored = self.vectors[rows[same]]
            same[same] = (stored == np.asarray(vectors[same]).astype(stored.dtype)).all(axis=1)
        return same

    def put(
        self,
        fields: Sequence[Sequence[str]],
        vectors: np.ndarray,
        documents: Mapping[str, DocumentFilters] | None = None,
    ) -> None:
        """Insert or replace rows; `fields` holds (chunk id, document id, language, mimetype) per row, ids unique;
        `documents` sets those documents' attributes and access lists (for all their rows, written now or not).
        A row rewritten with its own vector leaves the graph alone (re-adding a node is the dear part)."""
        self._reserve(self.size + sum(1 for field in fields if field[0] not in self.rows))
        rows = np.empty(len(fields), dtype=np.intp)
        replaced = np.zeros(len(fields), dtype=bool)
        for i, (chunk_id, _, _, _) in enumerate(fields):
            row = self.rows.get(chunk_id)
            if row is None:
                row = self.rows[chunk_id] = self.size
                self.chunk_ids.append(chunk_id)
                self.size += 1
            else:
                replaced[i] = True
            rows[i] = row
        moved = np.ones(len(fields), dtype=bool)
        if self.graph is not None and replaced.any():
            stored = self.vectors[rows[replaced]]
            moved[replaced] = ~(stored == np.asarray(vectors[replaced]).astype(stored.dtype)).all(axis=1)
        self.vectors[rows] = vectors
        if self.graph is not None and moved.any():
            self.graph.put(rows[moved], np.asarray(vectors)[moved], replaced[moved])
        self.document_codes[rows] = [self.documents.code(field[1]) for field in fields]
        self.language_codes[rows] = [self.languages.code(field[2]) for field in fields]
        self.mimetype_codes[rows] = [self.mimetypes.code(field[3]) for field in fields]
        for document_id, (attributes, access) in (documents or {}).items():
            self.table.put(self.documents.code(document_id), attributes, access)
        for code in np.unique(self.document_codes[rows]).tolist():
            self.table.ensure(code)

    def document_filters(self, document_id: str) -> DocumentFilters:
        """The document's (attributes, access list) as last written ((None, None) for an unknown document)."""
        code = self.documents.codes.get(document_id)
        return self.table.values(code) if code is not None else (None, None)

    def admits(self, document_id: str, filters: SearchFilters, groups: AbstractSet[str] | None = None) -> bool:
        """Do the document's attributes and access list pass `filters.attributes` and `.principals`? False for a
        document the partition does not know (fail closed). `groups`: the principals' groups as a set, built once
        by a caller that checks many hits."""
        code = self.documents.codes.get(document_id)
        if code is None:
            return False
        principals = filters.principals
        return self.table.admits(
            code,
            filters.attributes,
            principals.user if principals else None,
            (principals.groups if groups is None else groups) if principals else (),
            check_access=principals is not None,
            required=principals.required if principals else False,
        )

    def filter_fields(self, chunk_id: str) -> tuple[str | None, str | None]:
        """The (language, mimetype) a chunk was indexed with (None for a missing value or a missing chunk)."""
        row = self.rows.get(chunk_id)
        if row is None:
            return None, None
        return (
            self.languages.values[self.language_codes[row]] or None,
            self.mimetypes.values[self.mimetype_codes[row]] or None,
        )

    def remove(self, chunk_ids: Iterable[str]) -> int:
        doomed = [chunk_id for chunk_id in dict.fromkeys(chunk_ids) if chunk_id in self.rows]
        if len(doomed) * GATHER_RATIO > self.size:  # many rows: one vectorised pass beats row-by-row moves
            keep = np.ones(self.size, dtype=bool)
            keep[[self.rows[chunk_id] for chunk_id in doomed]] = False
            self._keep(np.flatnonzero(keep))
            return len(doomed)
        for chunk_id in doomed:
            row, last = self.rows.pop(chunk_id), self.size - 1
            if self.graph is not None:
                self.graph.move_last(row, last)
            if row != last:
                moved = self.chunk_ids[last]
                self.chunk_ids[row], self.rows[moved] = moved, row
                for column in (self.vectors, self.document_codes, self.language_codes, self.mimetype_codes):
                    column[row] = column[last]
            self.chunk_ids.pop()
            self.size -= 1
        return len(doomed)

    def select(self, document_ids: Sequence[str] | None, chunk_ids: Sequence[str] | None) -> list[str]:
        """The stored chunk ids among `chunk_ids` (all when None) that belong to `document_ids` (any when None)."""
        if chunk_ids is not None:
            found = [chunk_id for chunk_id in dict.fromkeys(chunk_ids) if chunk_id in self.rows]
            if document_ids is None:
                return found
            wanted = {self.documents.codes[d] for d in document_ids if d in self.documents.codes}
            return [chunk_id for chunk_id in found if int(self.document_codes[self.rows[chunk_id]]) in wanted]
        if document_ids is None:
            return list(self.chunk_ids)
        return [self.chunk_ids[row] for row in np.flatnonzero(self._document_mask(document_ids))]

    def mask(self, filters: SearchFilters | None) -> np.ndarray | None:
        """Rows matching the filters, or None when nothing is filtered."""
        if filters is None:
            return None
        n, keep = self.size, None
        if filters.document_ids is not None:
            keep = self._document_mask(filters.document_ids)
        for value, interned, codes in (
            (filters.language, self.languages, self.language_codes),
            (filters.mimetype, self.mimetypes, self.mimetype_codes),
        ):
            if value is None:
                continue
            code = interned.codes.get(value)
            matches = codes[:n] == code if code is not None else np.zeros(n, dtype=bool)
            keep = matches if keep is None else keep & matches
        if filters.attributes is not None or filters.principals is not None:
            # Evaluated once per document (attributes and access lists are a document's), then spread to the rows.
            principals = filters.principals
            documents = self.table.mask(
                filters.attributes,
                principals.user if principals else None,
                principals.groups if principals else (),
                check_access=principals is not None,
                required=principals.required if principals else False,
                documents=len(self.documents.values),
            )
            matches = documents[self.document_codes[:n]]
            keep = matches if keep is None else keep & matches
        return keep

    def fit_graph(self) -> bool:
        """Build the graph once the partition is large enough, drop it once it is small again; True if it built.
        The rows' precision follows: float16 with a graph, float32 without (see COMPACT_DTYPE)."""
        built = False
        if self.graph is None and self.size >= ann.MIN_ROWS:
            self.graph = AnnGraph.build(self.vectors[: self.size])
            built = True
        elif self.graph is not None and self.size < ann.MIN_ROWS // 2:
            self.graph = None
        self._set_precision(COMPACT_DTYPE if self.graph is not None else np.float32)
        return built

    def attach_graph(self, graph: AnnGraph | None) -> None:
        """A graph loaded from disk (None: none usable, `fit_graph` builds one if the partition needs it)."""
        self.graph = graph
        if graph is not None:
            self._set_precision(COMPACT_DTYPE)

    def scores(self, rows: np.ndarray | None, query: np.ndarray) -> np.ndarray:
        """Cosine scores (float32) of `rows` (all live rows when None) against the unit `query`. A float16 matrix
        is widened block by block, never as a whole float32 copy."""
        if self.vectors.dtype == np.float32:
            return self.vectors[: self.size] @ query if rows is None else self.vectors[rows] @ query
        if rows is not None:
            return self.vectors[rows].astype(np.float32) @ query
        found = np.empty(self.size, dtype=np.float32)
        for start in range(0, self.size, SCORE_BLOCK):
            stop = min(self.size, start + SCORE_BLOCK)
            found[start:stop] = self.vectors[start:stop].astype(np.float32) @ query
        return found

    def top(self, query: np.ndarray, k: int, filters: SearchFilters | None) -> list[tuple[float, int]]:
        """(score, row) of the k best rows among those matching the filters, in no particular order: exact, or
        from the graph's candidates (re-scored exactly) when there is a graph and the filters keep many rows
        (unfiltered: `ann.MIN_ROWS`; filtered: more than `EXACT_MAX_ROWS`)."""
        n = self.size
        keep = self.mask(filters)
        matching = n if keep is None else int(np.count_nonzero(keep))
        if not matching:
            return []
        if self.graph is not None and (matching >= ann.MIN_ROWS if keep is None else matching > EXACT_MAX_ROWS):
            found = self._approximate_top(self.graph, query, k, keep, matching)
            if found is not None:
                return found
        # Gathered when few rows match, and always from float16 rows: scoring a whole compact matrix widens every
        # row, 4-2,000x slower than widening the matching ones only (docs/scale.md). Float32 rows score in place.
        if keep is not None and (matching * GATHER_RATIO <= n or self.vectors.dtype != np.float32):
            rows = np.flatnonzero(keep)
            scores = self.scores(rows, query)
        else:
            # The live rows scored in place: no copy of a float32 matrix. Then only the matching rows' scores are
            # ranked (the filter applies before the top k): argpartition over a whole array whose filtered-out rows
            # are -inf is ~10x slower than over the matching ones alone when most rows are filtered out (22 ms
            # against 2 ms for 100k scores, 10 % matching: introselect degrades on many equal values).
            rows = None
            scores = self.scores(None, query)
            if keep is not None and matching < n:  # a filter that keeps every row ranks them all, as none does
                rows = np.flatnonzero(keep)
                scores = scores[rows]
        count = min(k, matching)
        top = (
            np.argpartition(scores, len(scores) - count)[len(scores) - count :]
            if count < len(scores)
            else np.arange(len(scores))
        )
        return [(float(scores[i]), int(rows[i] if rows is not None else i)) for i in top]

    def _approximate_top(
        self, graph: AnnGraph, query: np.ndarray, k: int, keep: np.ndarray | None, matching: int
    ) -> list[tuple[float, int]] | None:
        """The graph's candidates that are live rows matching the filters, re-scored exactly, best k; None when too
        few candidates pass the filters (the caller then searches exactly)."""
        n = self.size
        # A filter keeping a fraction f of the rows lets about f of the candidates through: ask for 1/f as many.
        wanted = max(ann.CANDIDATES, k * ann.CANDIDATE_FACTOR) * -(-n // matching)
        if wanted > ann.MAX_CANDIDATES:
            return None
        rows = graph.candidates(query, min(wanted, n))
        rows = rows[(rows >= 0) & (rows < n)]
        if keep is not None:
            rows = rows[keep[rows]]
        if len(rows) < min(k, matching):
            return None
        rows = np.unique(rows)
        scores = self.scores(rows, query)
        count = min(k, len(rows))
        top = np.argpartition(scores, len(scores) - count)[len(scores) - count :]
        return [(float(scores[i]), int(rows[i])) for i in top]

    def _document_mask(self, document_ids: Iterable[str]) -> np.ndarray:
        codes = [self.documents.codes[d] for d in document_ids if d in self.documents.codes]
        return np.isin(self.document_codes[: self.size], np.array(codes, dtype=np.int32))

    def _reserve(self, rows: int) -> None:
        capacity = len(self.vectors)
        if rows <= capacity:
            return
        capacity = max(rows, 2 * capacity, 64)
        n = self.size
        vectors = np.empty((capacity, self.dims), dtype=self.vectors.dtype)
        vectors[:n] = self.vectors[:n]
        self.vectors = vectors
        for name in ("document_codes", "language_codes", "mimetype_codes"):
            codes = np.empty(capacity, dtype=np.int32)
            codes[:n] = getattr(self, name)[:n]
            setattr(self, name, codes)

    def _set_precision(self, dtype: type) -> None:
        """The live rows converted to `dtype` (the spare capacity is left uninitialised, as `_reserve` leaves it)."""
        if self.vectors.dtype != dtype:
            vectors: np.ndarray = np.empty(self.vectors.shape, dtype=dtype)
            vectors[: self.size] = self.vectors[: self.size]
            self.vectors = vectors

    def _keep(self, rows: np.ndarray) -> None:
        m = len(rows)
        if self.graph is not None:
            self.graph.renumber(rows, self.size)
        for column in (self.vectors, self.document_codes, self.language_codes, self.mimetype_codes):
            column[:m] = column[rows]
        self.chunk_ids = [self.chunk_ids[row] for row in rows]
        self.rows = {chunk_id: row for row, chunk_id in enumerate(self.chunk_ids)}
        self.size = m
