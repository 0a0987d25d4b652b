"""An approximate (HNSW) graph over a large partition's rows, with usearch.

The graph only proposes candidates: its keys are the partition's row numbers, its vectors int8 copies, and every
candidate is scored again from the partition's own rows (float16 while it has a graph, see partition.py) and checked
against the live rows. So it can cost recall, never correctness: a deleted chunk has no row, and a stale key names a
live row scored again.

Memory for a million 384-dimension vectors: the graph ~0.75 GiB (int8 copies and links; float32 copies would add
1.1 GiB more), the float16 rows 0.7 GiB. Re-scoring recovers what int8 blurs: measured, the number of candidates
re-scored made no difference to recall, the graph's search breadth (efSearch) did.

The graph is derived data. It is saved beside the partition's snapshot under the snapshot's generation, so a graph
file is only ever loaded with the very snapshot it was built from (the log replayed over both brings them
forward together); a missing or mismatched file is rebuilt from the vectors.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from usearch.index import Index

# Partitions from this many rows get a graph; below half of it (after deletes) they drop it again. Exact search
# over 150k x 384 is ~10 ms on one core with perfect recall; smaller partitions gain too little to pay for a
# graph's build and its recall loss (which is worst on vectors without structure, such as random ones).
MIN_ROWS = 150_000
CONNECTIVITY = 16  # HNSW M: neighbours per node (2M on the base layer)
# Measured on 1M clustered 384-d vectors (raw usearch, 200 queries, 2 shared cores), recall@10 after exact re-scoring:
# efConstruction 64: efSearch 512 0.962 (4.4 ms), 768 0.982 (6.6 ms), 1024 0.987 (8.0 ms), build 431 s;
# efConstruction 128: efSearch 512 0.977 (4.6 ms), 768 0.989 (6.4 ms), 1024 0.994 (8.6 ms), build 812 s.
# The number of candidates re-scored (40 to 200) made no difference: the graph's search, not int8, costs recall.
EXPANSION_ADD = 128  # efConstruction
EXPANSION_SEARCH = 768  # efSearch
CANDIDATES = 40  # at least this many candidates (k * CANDIDATE_FACTOR if more) are re-scored exactly
CANDIDATE_FACTOR = 4
MAX_CANDIDATES = 4_096  # a filtered search asks for more candidates; beyond this it searches exactly instead
BUILD_THREADS = 2  # a bulk build's threads (the machines this runs on are small and shared)
BUILD_BLOCK = 65_536  # rows added per step of a bulk build


class AnnGraph:
    """HNSW over the rows of one partition, keyed by row number (see the module docstring)."""

    def __init__(self, dims: int, index: Index | None = None):
        self.dims = dims
        self.index = index or Index(
            ndim=dims,
            metric="cos",
            dtype="i8",
            connectivity=CONNECTIVITY,
            expansion_add=EXPANSION_ADD,
            expansion_search=EXPANSION_SEARCH,
        )

    @classmethod
    def build(cls, vectors: np.ndarray) -> AnnGraph:
        """A graph over `vectors` (float32 or a partition's float16 rows, widened a block at a time)."""
        graph = cls(vectors.shape[1])
        for start in range(0, len(vectors), BUILD_BLOCK):
            block = np.asarray(vectors[start : start + BUILD_BLOCK], dtype=np.float32)
            graph.index.add(np.arange(start, start + len(block), dtype=np.uint64), block, threads=BUILD_THREADS)
        return graph

    @classmethod
    def load(cls, path: Path, dims: int, rows: int) -> AnnGraph | None:
        """The graph saved at `path`, or None when it is missing or does not fit the partition (then rebuild)."""
        try:
            index = Index.restore(str(path))
        except (OSError, RuntimeError, ValueError):
            return None
        if index is None or index.ndim != dims or len(index) != rows:
            return None
        # usearch's stub declares this property without its setter, which exists (the search reads it).
        index.expansion_search = EXPANSION_SEARCH  # type: ignore[misc]
        return cls(dims, index)

    def save(self, path: Path) -> None:
        """Write the graph to `path` via a temp file, fsynced, then renamed into place."""
        temp = path.with_name(path.name + ".tmp")
        self.index.save(str(temp))
        fd = os.open(temp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(temp, 0o600)
        os.replace(temp, path)

    def __len__(self) -> int:
        return len(self.index)

    # -- keeping up with the partition's rows ---------------------------------------------------------------

    def put(self, rows: np.ndarray, vectors: np.ndarray, replaced: np.ndarray) -> None:
        """Rows written with `vectors`; `replaced` marks the rows that held another vector before."""
        if replaced.any():
            self.index.remove(rows[replaced].astype(np.uint64))
        vectors = np.array(vectors, dtype=np.float32)  # native, writable float32 (a replayed log row is neither)
        self.index.add(rows.astype(np.uint64), vectors, threads=BUILD_THREADS if len(rows) > 1_000 else 1)

    def move_last(self, row: int, last: int) -> None:
        """Row `row` was removed and the last row moved into it."""
        self.index.remove(row)
        if row != last:
            self.index.rename(last, row)

    def renumber(self, kept: np.ndarray, old_size: int) -> None:
        """Only the old rows `kept` (ascending) remain, renumbered 0..len(kept)-1."""
        doomed = np.ones(old_size, dtype=bool)
        doomed[kept] = False
        if doomed.any():
            self.index.remove(np.flatnonzero(doomed).astype(np.uint64))
        moved = np.flatnonzero(kept != np.arange(len(kept)))
        if len(moved):
            # Ascending, one after another: each target was freed by a removal or an earlier rename.
            self.index.rename(kept[moved].astype(np.uint64), moved.astype(np.uint64))

    def candidates(self, query: np.ndarray, count: int) -> np.ndarray:
        """Up to `count` rows near `query` (approximate; to be re-scored and checked by the caller)."""
        matches = self.index.search(query, count, threads=1)
        return np.asarray(matches.keys, dtype=np.int64)
