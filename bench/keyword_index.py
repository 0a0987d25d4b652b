"""The keyword index alone, in process: the embedded index's BM25 (tantivy) against the SQLite FTS5 index it
replaced, on the same chunks in the same run.

- SciFact (BEIR, test split, 300 queries, read in place): every corpus document as `title + "\\n\\n" + text`,
  chunked like the default collection (maxChars 2000, no overlap), k = 100 chunks turned into a document ranking
  (first occurrence wins), nDCG@10 and recall@100 with ir-measures. What `make eval` measures for keyword mode,
  without the MiniLM ingest it needs for the other modes.
- 100k chunks of ~900 characters of real sentences (the query section's corpus), 300 synthetic queries, k = 10:
  p50/p99 of `keyword_search` alone. The query section measures the same over HTTP.

The reference is the FTS5 design kindex used before (schema and query as they were: external content, words
quoted and OR-ed, the same stopwords left out, `bm25()` order), kept here only as the yardstick.
"""

from __future__ import annotations

import json
import re
import sqlite3
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import Figure, SyntheticCorpus, log, median, percentile, real_sentences, scifact_corpus

MODEL = "bench:keyword"
TENANT = "t"
COLLECTION = "c"
K_SCIFACT = 100
_WORD = re.compile(r"\w+")


class Fts5Reference:
    """The previous embedded keyword index (SQLite FTS5, bm25()), reduced to one partition."""

    def __init__(self, path: Path):
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.executescript("""
            CREATE TABLE chunk_text (rowid INTEGER PRIMARY KEY, chunk_id TEXT NOT NULL, text TEXT NOT NULL);
            CREATE VIRTUAL TABLE chunk_fts USING fts5(
                text, content='chunk_text', content_rowid='rowid', tokenize='unicode61 remove_diacritics 2');""")

    def add(self, rows: list[tuple[str, str]]) -> None:
        self.db.execute("BEGIN")
        for chunk_id, text in rows:
            rowid = self.db.execute("INSERT INTO chunk_text (chunk_id, text) VALUES (?, ?)", (chunk_id, text)).lastrowid
            self.db.execute("INSERT INTO chunk_fts (rowid, text) VALUES (?, ?)", (rowid, text))
        self.db.execute("COMMIT")

    def search(self, query: str, k: int) -> list[str]:
        from kindex.adapters.local.search.keyword import MAX_QUERY_TERMS, STOPWORDS

        words = list(dict.fromkeys(_WORD.findall(query)))
        terms = ([w for w in words if w.lower() not in STOPWORDS] or words)[:MAX_QUERY_TERMS]
        if not terms:
            return []
        expression = " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
        rows = self.db.execute(
            "SELECT c.chunk_id, bm25(chunk_fts) AS rank FROM chunk_fts JOIN chunk_text c "
            "ON c.rowid = chunk_fts.rowid WHERE chunk_fts MATCH ? ORDER BY rank, c.chunk_id "
            "LIMIT ?",
            (expression, k),
        ).fetchall()
        return [chunk_id for chunk_id, _ in rows]


def _engines(root: Path, rows: list[tuple[str, str, str]]):
    """Both indexes over the same (chunk id, document id, text) rows, written in batches like ingest does."""
    from kindex.adapters.local.search.index import LocalSearchIndex
    from kindex.domain.types import IndexRecord

    index = LocalSearchIndex(root / "index")
    reference = Fts5Reference(root / "fts5.sqlite")
    timings = {}
    for name, write in (
        (
            "tantivy",
            lambda batch: index.upsert(
                MODEL,
                [
                    IndexRecord(tenant=TENANT, collection=COLLECTION, document_id=d, chunk_id=c, vector=(1.0,), text=t)
                    for c, d, t in batch
                ],
            ),
        ),
        ("fts5", lambda batch: reference.add([(c, t) for c, _, t in batch])),
    ):
        started = time.perf_counter()
        for start in range(0, len(rows), 2_000):
            write(rows[start : start + 2_000])
        timings[name] = round(time.perf_counter() - started, 2)
    return index, reference, timings


def scifact() -> list[Figure]:
    import ir_measures
    from ir_measures import R, nDCG

    from bench.eval_retrieval import BEIR_BM25_NDCG10, load_test_queries
    from kindex.text.chunking import chunk_text

    rows = []
    for doc in scifact_corpus():
        content = doc["title"] + "\n\n" + doc["text"]
        for i, chunk in enumerate(chunk_text(content, method="maxChars", max_size=2000, overlap=0)):
            rows.append((f"{doc['_id']}#{i}", doc["_id"], chunk.text))
    queries, qrels = load_test_queries()
    scores, details = {}, {}
    with tempfile.TemporaryDirectory(prefix="kindex-bench-keyword-") as tmp:
        index, reference, build = _engines(Path(tmp), rows)
        search = {
            "tantivy": lambda q: [h.chunk_id for h in index.keyword_search(MODEL, TENANT, [COLLECTION], q, K_SCIFACT)],
            "fts5": lambda q: reference.search(q, K_SCIFACT),
        }
        for name, run_query in search.items():
            run, latencies = [], []
            for query_id, text in queries.items():
                started = time.perf_counter()
                chunk_ids = run_query(text)
                latencies.append((time.perf_counter() - started) * 1000)
                ranked = list(dict.fromkeys(chunk_id.split("#")[0] for chunk_id in chunk_ids))
                run += [
                    ir_measures.ScoredDoc(query_id, doc_id, float(len(ranked) - rank))
                    for rank, doc_id in enumerate(ranked)
                ]
            measured = ir_measures.calc_aggregate([nDCG @ 10, R @ 100], qrels, run)
            scores[name] = (measured[nDCG @ 10], measured[R @ 100])
            details[name] = {
                "ndcg10": round(scores[name][0], 4),
                "recall100": round(scores[name][1], 4),
                "query_ms_p50": round(median(latencies), 3),
                "build_s": build[name],
            }
            log(
                f"keyword scifact {name}: nDCG@10 {scores[name][0]:.4f} R@100 {scores[name][1]:.4f} "
                f"p50 {median(latencies):.2f} ms"
            )
        index.close()
    notes = (
        f"SciFact test queries ({len(queries)}), {len(rows)} chunks (maxChars 2000), k={K_SCIFACT} chunks -> "
        f"documents; reference: the previous SQLite FTS5 bm25() index on the same chunks, same run; the "
        f"published BM25 figure is {BEIR_BM25_NDCG10}"
    )
    return [
        Figure(
            "scifact_ndcg10_keyword_inprocess",
            scores["tantivy"][0],
            "score",
            "SQLite FTS5 bm25() (previous)",
            scores["fts5"][0],
            section="keyword index",
            notes=notes,
            details=details,
        ),
        Figure(
            "scifact_recall100_keyword_inprocess",
            scores["tantivy"][1],
            "score",
            "SQLite FTS5 bm25() (previous)",
            scores["fts5"][1],
            section="keyword index",
            notes=notes,
        ),
    ]


def latency_100k(count: int = 100_000, queries: int = 300) -> list[Figure]:
    sentences = real_sentences()
    rng = np.random.default_rng(6)
    rows = []
    for i in range(count):
        picked, size = [], 0
        while size < 850:
            sentence = sentences[int(rng.integers(len(sentences)))]
            picked.append(sentence)
            size += len(sentence) + 1
        rows.append((f"chunk-{i:06d}", f"doc-{i // 10:06d}", " ".join(picked)))
    corpus = SyntheticCorpus(seed=99)
    texts = [corpus.query() for _ in range(queries)]
    samples: dict[str, list[float]] = {"tantivy": [], "fts5": []}
    with tempfile.TemporaryDirectory(prefix="kindex-bench-keyword-") as tmp:
        index, reference, build = _engines(Path(tmp), rows)
        search = {
            "tantivy": lambda q: index.keyword_search(MODEL, TENANT, [COLLECTION], q, 10),
            "fts5": lambda q: reference.search(q, 10),
        }
        for text in texts[:20]:  # warm both
            for run_query in search.values():
                run_query(text)
        for number, text in enumerate(texts):  # alternated, the order reversed every query: both see the same machine
            for name in ("tantivy", "fts5") if number % 2 == 0 else ("fts5", "tantivy"):
                run_query = search[name]
                started = time.perf_counter()
                run_query(text)
                samples[name].append((time.perf_counter() - started) * 1000)
        size = sum(f.stat().st_size for f in (Path(tmp) / "index" / "keywords").rglob("*") if f.is_file())
        index.close()
    log(f"keyword {count}: tantivy p50 {median(samples['tantivy']):.2f} ms, fts5 p50 {median(samples['fts5']):.2f} ms")
    notes = (
        f"{count} chunks of ~900 characters of real sentences, {queries} synthetic queries, k=10, in process, "
        f"the two engines alternated query by query (order reversed each query); write seconds "
        f"{json.dumps(build)}; tantivy files {size / 2**20:.0f} MiB"
    )
    return [
        Figure(
            "keyword_p50_ms_100k_inprocess",
            median(samples["tantivy"]),
            "ms",
            "SQLite FTS5 bm25() (previous)",
            median(samples["fts5"]),
            section="keyword index",
            notes=notes,
        ),
        Figure(
            "keyword_p99_ms_100k_inprocess",
            percentile(samples["tantivy"], 99),
            "ms",
            "SQLite FTS5 bm25() (previous)",
            percentile(samples["fts5"], 99),
            section="keyword index",
            notes=notes,
        ),
    ]


def run(quick: bool = False) -> list[Figure]:
    return scifact() + latency_100k(count=10_000 if quick else 100_000, queries=50 if quick else 300)
