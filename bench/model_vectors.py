"""Vectors of the default local model over real text, shared by the sections that compare indexes (opensearch,
peers, filtered), cached on disk keyed by model and text.

- `sentences(n)`: the first n SciFact sentences (`real_sentences`, read in place from ../shared/data), each embedded
  alone: the vectors a user's short chunks get.
- `chunks(n)`: the latency section's way to 100k chunks without embedding 100k texts: each chunk is 8 sentences
  drawn from the first 4,000 and its vector the normalised sum of theirs (bench/filtered.py builds the same).
- `queries(n)`: question-like queries (a few content words of a real sentence, `SyntheticCorpus(seed=99)`), embedded.
- `scifact_queries(n)`: the first n of SciFact's real questions (queries.jsonl, read in place), embedded.

The model runs at ~60 sentences/s on 2 quiet cores, so 10,000 sentences take ~3 minutes once and all ~44,000 SciFact
sentences ~12; after that they are read from the cache (`<venv>/share/kindex-bench/vectors`, or KINDEX_BENCH_CACHE),
one .npy file per model and list of texts (the key is a digest of both, so another model or other texts never read a
stale file). Sentences are embedded and cached in blocks of EMBEDDED_SENTENCES, so a section asking for the first
10,000 and one asking for all of them share the first block.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import numpy as np

from bench.common import SyntheticCorpus, log, real_sentences
from kindex.settings import LOCAL_DEFAULT_MODEL

MODEL = LOCAL_DEFAULT_MODEL
SENTENCE_POOL = 4_000  # the sentences chunks are drawn from (bench/filtered.py, bench/query_latency.py)
SENTENCES_PER_CHUNK = 8
# Sentences embedded in one go (and cached as one file): sentence i is in block i // EMBEDDED_SENTENCES, the pool of
# `chunks` is a prefix of the first block, and asking for any count slices whole blocks instead of embedding (and
# caching) another prefix.
EMBEDDED_SENTENCES = 10_000


def cache_dir() -> Path:
    configured = os.environ.get("KINDEX_BENCH_CACHE")
    return Path(configured) if configured else Path(sys.prefix) / "share" / "kindex-bench" / "vectors"


def embedded(texts: list[str], model: str = MODEL) -> np.ndarray:
    """`texts` embedded by `model` (float32, unit rows), from the cache when this model embedded these texts before."""
    digest = hashlib.sha256("\x1f".join([model, *texts]).encode("utf-8")).hexdigest()[:24]
    path = cache_dir() / f"{model.replace(':', '_').replace('/', '_')}-{len(texts)}-{digest}.npy"
    if path.exists():
        return np.load(path)
    from kindex.adapters.embedders.registry import create_embedder

    log(f"embedding {len(texts)} texts with {model} (cached afterwards in {path.parent})")
    vectors = np.asarray(create_embedder(model).embed(texts), dtype=np.float32)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial.npy")  # two runs embedding the same texts never mix
    np.save(partial, vectors)
    partial.replace(path)  # a run stopped while writing leaves no truncated cache file behind
    return vectors


def sentence_texts(count: int | None = None) -> list[str]:
    """The first `count` real sentences (all of them when None)."""
    found = list(real_sentences()[:count])
    if count is not None and len(found) < count:
        raise ValueError(f"only {len(found)} real sentences, {count} asked for")
    return found


def sentences(count: int | None = None, model: str = MODEL) -> np.ndarray:
    """The first `count` real sentences (all ~44,000 when None), each embedded alone, from whole cached blocks of
    EMBEDDED_SENTENCES."""
    texts = sentence_texts()
    wanted = len(texts) if count is None else count
    if wanted > len(texts):
        raise ValueError(f"only {len(texts)} real sentences, {count} asked for")
    blocks = [
        embedded(texts[start : start + EMBEDDED_SENTENCES], model) for start in range(0, wanted, EMBEDDED_SENTENCES)
    ]
    return np.concatenate(blocks)[:wanted]


def chunk_plans(count: int, seed: int = 6) -> np.ndarray:
    """Which pool sentences make up each chunk (count x SENTENCES_PER_CHUNK), seeded."""
    return np.random.default_rng(seed).integers(SENTENCE_POOL, size=(count, SENTENCES_PER_CHUNK))


def chunks(count: int, model: str = MODEL, seed: int = 6) -> np.ndarray:
    """`count` chunk vectors: the normalised sums of their sentences' vectors (see the module docstring)."""
    pool = sentences(SENTENCE_POOL, model)
    vectors = pool[chunk_plans(count, seed)].sum(axis=1)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors.astype(np.float32)


def chunk_texts(count: int, seed: int = 6) -> list[str]:
    pool = sentence_texts(SENTENCE_POOL)
    return [" ".join(pool[i] for i in plan) for plan in chunk_plans(count, seed)]


def query_texts(count: int) -> list[str]:
    corpus = SyntheticCorpus(seed=99)
    return [corpus.query() for _ in range(count)]


def queries(count: int, model: str = MODEL) -> np.ndarray:
    return embedded(query_texts(count), model)


def scifact_query_texts(count: int | None = None) -> list[str]:
    """SciFact's questions in file order (all 1,109 when None), read in place."""
    import json

    from bench.common import SCIFACT_DIR

    with open(SCIFACT_DIR / "queries.jsonl", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    if count is not None and len(texts) < count:
        raise ValueError(f"only {len(texts)} SciFact queries, {count} asked for")
    return texts[:count]


def scifact_queries(count: int, model: str = MODEL) -> np.ndarray:
    """The first `count` SciFact questions embedded: real queries of the sentences' domain (all 1,109 embedded and
    cached once, sliced)."""
    scifact_query_texts(count)  # fewer questions than asked for is an error, not a shorter list
    return embedded(scifact_query_texts(), model)[:count]
