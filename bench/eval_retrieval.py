"""Retrieval quality on BEIR SciFact (test split, 300 queries), beside the published figures.

`python -m bench.eval_retrieval` (what `make eval` runs):
1. puts every corpus document into a collection of a fresh local data dir through the real ingest path
   (catalog -> blob -> durable queue -> ingest function: extract, chunk, embed, index, status), content
   `title + "\\n\\n" + text`, the collection's default chunking (maxChars 2000, no overlap);
2. asks every test query through `QueryService` in keyword, vector and hybrid mode (k = 100 chunks, the API's
   maximum), turns the chunk ranking into a document ranking (first occurrence wins);
3. scores nDCG@10 and recall@100 with ir-measures (pytrec_eval underneath), never by hand.

With every local model (`--models` to choose; the default local model's figures are named `_local`, the others'
`_<short name>`) and `openai:text-embedding-3-small` too when OPENAI_API_KEY is set; each model's ingest chunks/s
through the same path is a figure too (same run, same machine, models one after the other).
The data is read in place from ../shared/data/scifact (CC BY-NC: never copied into the repo); the index
lives in a temp dir that is deleted afterwards. Writes bench/retrieval_results.json, which `make bench` folds
into bench/results.json.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import tempfile
import time
from pathlib import Path

from bench.common import (
    RESULTS_PATH,
    SCIFACT_DIR,
    SCIFACT_RESULTS_PATH,
    SHARED_DATA,
    Figure,
    drain_worker,
    local_deployment,
    log,
    machine_info,
    median,
    percentile,
    scifact_corpus,
    versions,
)

TENANT = "default"
COLLECTION = "scifact"
MODES = ("keyword", "vector", "hybrid")
# Hybrid mode with weighted RRF (`hybrid.fusion: "ranks"`, the default before the score fusion): asked of the
# default local model beside the default fusion, so that the two compare in one run.
HYBRID_RANKS = "hybrid_ranks"
LOCAL_MODEL = "local:bge-small-en-v1.5-q"  # the local default (kindex/settings.py)
LOCAL_MODELS = ("local:bge-small-en-v1.5-q", "local:all-MiniLM-L6-v2", "local:multilingual-e5-small")
SHORT_NAMES = {
    "local:multilingual-e5-small": "e5small",
    "local:all-MiniLM-L6-v2": "minilm",
    "local:bge-small-en-v1.5": "bgefp32",
    "local:bge-small-en-v1.5-q": "bge",
}
OPENAI_MODEL = "openai:text-embedding-3-small"
K_CHUNKS = 100
MTEB_DIR = SHARED_DATA / "reference_scores" / "mteb_results"
# ../shared/data/reference_scores/SCORES.md: BEIR paper Table 2 (BM25, Elasticsearch multifield) and the
# Anserini regression (BM25 flat, R@100). The MTEB figures are read from the result files beside it.
BEIR_BM25_NDCG10 = 0.665
ANSERINI_BM25_FLAT_RECALL100 = 0.9253


def mteb_reference(filename: str, metric: str) -> float | None:
    path = MTEB_DIR / filename
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    scores = data["scores"]["test"][0] if "scores" in data else data.get("test", {})
    value = scores.get(metric)
    return float(value) if value is not None else None


def references(model: str) -> dict[tuple[str, str], tuple[str, float | None]]:
    """(mode, metric) -> (reference name, published value) for the figures of one embedding model. Local models are
    set beside MiniLM's published figures (the model they replace); ../shared has no MTEB file for e5-small."""
    if model.startswith("local:"):
        dense = ("all-MiniLM-L6-v2 (MTEB)", "sentence-transformers__all-MiniLM-L6-v2__SciFact.json")
    else:
        dense = ("text-embedding-3-small (MTEB)", "openai__text-embedding-3-small__SciFact.json")
    dense_ndcg = mteb_reference(dense[1], "ndcg_at_10")
    dense_recall = mteb_reference(dense[1], "recall_at_100")
    refs = {
        ("keyword", "ndcg10"): ("BM25 (BEIR paper)", BEIR_BM25_NDCG10),
        ("keyword", "recall100"): ("BM25 flat (Anserini)", ANSERINI_BM25_FLAT_RECALL100),
        ("vector", "ndcg10"): (dense[0], dense_ndcg),
        ("vector", "recall100"): (dense[0], dense_recall),
        # No published hybrid figure: compare with the stronger of the two single published baselines.
        ("hybrid", "ndcg10"): max(
            [("BM25 (BEIR paper)", BEIR_BM25_NDCG10), (dense[0], dense_ndcg)], key=lambda item: item[1] or 0.0
        ),
        ("hybrid", "recall100"): ("BM25 flat (Anserini)", ANSERINI_BM25_FLAT_RECALL100),
    }
    return refs


def load_test_queries() -> tuple[dict[str, str], list]:
    return load_queries("test")


def load_queries(split: str) -> tuple[dict[str, str], list]:
    """The queries judged in one split (`train` or `test`) and their judgements."""
    import ir_measures

    qrels = []
    with open(SCIFACT_DIR / "qrels" / f"{split}.tsv", encoding="utf-8") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            qrels.append(ir_measures.Qrel(row["query-id"], row["corpus-id"], int(row["score"])))
    wanted = {qrel.query_id for qrel in qrels}
    queries = {}
    with open(SCIFACT_DIR / "queries.jsonl", encoding="utf-8") as handle:
        for line in handle:
            item = json.loads(line)
            if item["_id"] in wanted:
                queries[item["_id"]] = item["text"]
    return queries, qrels


class CountingMetrics:
    """A MetricsRecorder that keeps the counts (how many texts the run embedded)."""

    def __init__(self):
        self.counts: dict[str, float] = {}

    def count(self, name: str, value: float = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + value

    def meter(self, tenant: str, name: str, value: float = 1) -> None:
        pass  # per-tenant usage: the evaluation has one tenant and reads the counts


def select_corpus(limit: int | None = None, distractors: int | None = None) -> list[dict]:
    """The corpus to index: all of it; its first `limit` documents (a smoke run); or, with `distractors`, every
    document some test query is judged against plus the first `distractors` others in corpus order (a reduced
    corpus: the same for every model, so models compare fairly, but scores run higher than on the full corpus)."""
    corpus = scifact_corpus()
    if distractors is not None:
        _, qrels = load_test_queries()
        judged = {qrel.doc_id for qrel in qrels}
        others = [doc for doc in corpus if doc["_id"] not in judged][:distractors]
        keep = judged | {doc["_id"] for doc in others}
        return [doc for doc in corpus if doc["_id"] in keep]
    return corpus[:limit] if limit else corpus


# How a SciFact document's title reaches its chunks (the context study, `--context-study`):
# - inline: content `title + "\n\n" + text`, no heading (what make eval indexes): plain text has no headings, so no
#   chunk has a section; the title is in the first chunk's text once and in no later chunk's;
# - title_context: content `text`, the title a level-1 heading at its start, so every chunk's section (heading path)
#   is the title, prepended to its text in the embedded and keyword-indexed text (`embedded_text`): the title as
#   context, as a DOCX Title or an HTML h1 would give it;
# - bare: content `text` alone, the title nowhere.
LAYOUT_INLINE = "inline"
LAYOUT_TITLE_CONTEXT = "title_context"
LAYOUT_BARE = "bare"
CONTENT_LAYOUTS = (LAYOUT_INLINE, LAYOUT_TITLE_CONTEXT, LAYOUT_BARE)


def document_content(doc: dict, layout: str = LAYOUT_INLINE) -> str:
    """A corpus document's content under `layout` (CONTENT_LAYOUTS)."""
    return doc["title"] + "\n\n" + doc["text"] if layout == LAYOUT_INLINE else doc["text"]


def titled_extract(titles: dict[str, str]):
    """The ingest's extraction, with a level-1 heading at offset 0 for a text whose title `titles` knows (keyed by
    the text): how the title_context layout gives every chunk the title as its heading path. A bench switch only:
    the product takes headings from the file's own structure."""
    from dataclasses import replace

    from kindex.domain.types import Heading
    from kindex.text.extract import extract

    def extract_with_title(data: bytes, **options):
        extracted = extract(data, **options)
        title = titles.get(extracted.text)
        if not title:
            return extracted
        return replace(extracted, headings=(Heading(start=0, level=1, title=title), *extracted.headings))

    return extract_with_title


def index_corpus(
    services, model: str, limit: int | None, distractors: int | None = None, layout: str = LAYOUT_INLINE
) -> dict:
    """Every selected corpus document through the real ingest path; returns counts and timings."""
    from kindex.domain.models import CollectionInput, DocumentInput

    corpus = select_corpus(limit, distractors)
    counted = CountingMetrics()
    services.adapters.__dict__["metrics"] = counted  # before the services that record metrics are built
    if layout == LAYOUT_TITLE_CONTEXT:
        services.ingest._extract = titled_extract({document_content(d, layout): d["title"] for d in corpus})
    services.catalog.put_collection(
        TENANT, COLLECTION, CollectionInput(title="BEIR SciFact", allow_guests=True, embedding_model=model)
    )
    started = time.perf_counter()
    for doc in corpus:
        services.catalog.put_document(
            TENANT, COLLECTION, doc["_id"], DocumentInput(title=doc["title"], content=document_content(doc, layout))
        )
    put_seconds = time.perf_counter() - started
    drain_worker()
    seconds = time.perf_counter() - started
    statuses: dict[str, int] = {}
    chunks = 0
    for doc in corpus:
        document = services.adapters.metadata.get_document(TENANT, COLLECTION, doc["_id"])
        statuses[document.status.value] = statuses.get(document.status.value, 0) + 1
        chunks += document.chunk_count or 0
    return {
        "documents": len(corpus),
        "chunks": chunks,
        "statuses": statuses,
        "put_seconds": round(put_seconds, 2),
        "ingest_seconds": round(seconds, 2),
        "chunks_per_s": round(chunks / seconds, 2),
        "texts_embedded": counted.counts.get("ChunksEmbedded", 0),
    }


def indexed_before(services, data_dir: Path) -> dict | None:
    """The ingest figures of a corpus indexed into `data_dir` by an earlier `--keep` run, if it finished."""
    try:
        return json.loads((data_dir / "scifact-ingest.json").read_text())
    except (OSError, ValueError):
        return None


def run_queries(services, queries: dict[str, str], mode: str) -> tuple[list, list[float]]:
    """Every query through QueryService in `mode` (or HYBRID_RANKS: hybrid with weighted RRF)."""
    import ir_measures

    from kindex.domain.query import HybridWeights, QueryRequest

    run = []
    latencies = []
    hybrid = HybridWeights(fusion="ranks") if mode == HYBRID_RANKS else None
    for query_id, text in queries.items():
        started = time.perf_counter()
        request = QueryRequest(
            query=text[:8000],
            k=K_CHUNKS,
            mode="hybrid" if hybrid else mode,
            hybrid=hybrid,  # type: ignore[arg-type]
        )
        response = services.query.query(TENANT, [COLLECTION], request, multi=False)
        latencies.append((time.perf_counter() - started) * 1000)
        seen: list[str] = []
        for result in response.results:
            if result.document_id not in seen:
                seen.append(result.document_id)
        # Rank-derived scores keep the service's order exactly (ir-measures sorts by score).
        run += [ir_measures.ScoredDoc(query_id, doc_id, float(len(seen) - rank)) for rank, doc_id in enumerate(seen)]
    return run, latencies


def document_run(query_id: str, hits) -> list:
    """A chunk ranking as an ir-measures run of documents (first occurrence wins, rank-derived scores)."""
    import ir_measures

    seen = list(dict.fromkeys(hit.document_id for hit in hits))
    return [ir_measures.ScoredDoc(query_id, doc_id, float(len(seen) - rank)) for rank, doc_id in enumerate(seen)]


def leg_rankings(services, model: str, queries: dict[str, str], depth: int) -> dict[str, tuple[list, list]]:
    """Each query's (vector, keyword) chunk rankings, `depth` deep, from the index with the filters the service
    passes: the rankings hybrid mode fuses, searched once so that fusion parameters can be swept over them."""
    from kindex.app.query import QueryService
    from kindex.domain.query import QueryRequest

    legs = {}
    index = services.adapters.search_index
    for query_id, text in queries.items():
        request = QueryRequest(query=text[:8000], k=K_CHUNKS)
        filters = QueryService._filters(request, required=False)
        vector = services.query.embeddings.embed_query(model, request.query)
        legs[query_id] = (
            index.knn_search(model, TENANT, [COLLECTION], vector, depth, filters),
            index.keyword_search(model, TENANT, [COLLECTION], request.query, depth, filters),
        )
    return legs


def fusion_ndcg(
    legs: dict[str, tuple[list, list]],
    qrels: list,
    weights: tuple[float, float],
    rrf_k: int = 10,
    fusion: str = "ranks",
) -> float:
    """nDCG@10 of hybrid mode's fusion over cached leg rankings (`ranks`: weighted RRF with `rrf_k`; `scores`: the
    weighted sum of the legs' min-max scaled scores), cut at K_CHUNKS chunks as a query is."""
    import ir_measures
    from ir_measures import nDCG

    from kindex.app.query import reciprocal_rank_fusion, score_fusion

    run = []
    for query_id, (vector, keyword) in legs.items():
        if fusion == "scores":
            fused = score_fusion(vector, keyword, weights)
        else:
            fused = reciprocal_rank_fusion([vector, keyword], k=rrf_k, weights=weights)
        run += document_run(query_id, fused[:K_CHUNKS])
    return ir_measures.calc_aggregate([nDCG @ 10], qrels, run)[nDCG @ 10]


# The grids swept on the train split: the keyword leg's weight against a vector weight of 1, and for weighted RRF its k.
SWEEP_KEYWORD_WEIGHTS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2, 1.5)
SWEEP_RRF_KS = (1, 5, 10, 20, 30, 40, 60, 80, 100)
SWEEP_SCORE_KEYWORD_WEIGHTS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2, 1.5)


def sweep_fusion(services, model: str) -> dict:
    """Hybrid fusion swept on SciFact's train split (never the test split), over leg rankings searched once (depth:
    the first over-fetch round of a k = K_CHUNKS query): weighted RRF's weights and k, and the score fusion's
    keyword weight."""
    from kindex.app.query import FIRST_ROUND_FACTOR, HYBRID_LEG_DEPTH, RRF_K
    from kindex.domain.query import (
        DEFAULT_FUSION,
        DEFAULT_KEYWORD_WEIGHT,
        DEFAULT_RANKS_KEYWORD_WEIGHT,
        DEFAULT_RANKS_VECTOR_WEIGHT,
        DEFAULT_VECTOR_WEIGHT,
    )

    queries, qrels = load_queries("train")
    started = time.perf_counter()
    depth = max(FIRST_ROUND_FACTOR * K_CHUNKS, HYBRID_LEG_DEPTH)
    legs = leg_rankings(services, model, queries, depth)
    log(f"scifact: {len(legs)} train queries' leg rankings in {time.perf_counter() - started:.0f} s")
    grid = [
        {"vector_weight": 1.0, "keyword_weight": w, "rrf_k": k, "ndcg10": fusion_ndcg(legs, qrels, (1.0, w), k)}
        for w in SWEEP_KEYWORD_WEIGHTS
        for k in SWEEP_RRF_KS
    ]
    score_grid = [
        {"vector_weight": 1.0, "keyword_weight": w, "ndcg10": fusion_ndcg(legs, qrels, (1.0, w), fusion="scores")}
        for w in SWEEP_SCORE_KEYWORD_WEIGHTS
    ]
    ranks = (DEFAULT_RANKS_VECTOR_WEIGHT, DEFAULT_RANKS_KEYWORD_WEIGHT)
    chosen = (DEFAULT_VECTOR_WEIGHT, DEFAULT_KEYWORD_WEIGHT)
    return {
        "split": "train",
        "queries": len(queries),
        "judgements": len(qrels),
        "depth": depth,
        "grid": grid,
        "best": max(grid, key=lambda row: row["ndcg10"]),
        "score_grid": score_grid,
        "score_best": max(score_grid, key=lambda row: row["ndcg10"]),
        "defaults": {"fusion": DEFAULT_FUSION, "vector_weight": chosen[0], "keyword_weight": chosen[1]},
        "ranks_defaults": {"vector_weight": ranks[0], "keyword_weight": ranks[1], "rrf_k": RRF_K},
        "ndcg10_defaults": fusion_ndcg(legs, qrels, chosen, fusion=DEFAULT_FUSION),
        "ndcg10_ranks": fusion_ndcg(legs, qrels, ranks, RRF_K),
        "ndcg10_before": fusion_ndcg(legs, qrels, (1.0, 1.0), 60),
        "ndcg10_vector": fusion_ndcg(legs, qrels, (1.0, 0.0), RRF_K),
        "ndcg10_keyword": fusion_ndcg(legs, qrels, (0.0, 1.0), RRF_K),
    }


def sweep_figures(fusion: dict) -> list[Figure]:
    """The train split's figures: hybrid at the chosen defaults beside weighted RRF at its defaults (the fusion before
    this one), equal-weight RRF k 60 (before that) and each leg alone. Train figures only: they chose the defaults, so
    they are not the reported quality (test is)."""
    section = "retrieval quality (make eval)"
    defaults, ranks = fusion["defaults"], fusion["ranks_defaults"]
    notes = (
        f"SciFact TRAIN split ({fusion['queries']} queries, {fusion['judgements']} judgements), used to choose the "
        f"fusion defaults ({defaults['fusion']}, weights {defaults['vector_weight']}/{defaults['keyword_weight']}; "
        f"the grids are in details.fusion_sweep); not a test figure"
    )
    return [
        Figure(
            "scifact_train_ndcg10_hybrid_local",
            fusion["ndcg10_defaults"],
            "score",
            f"weighted RRF {ranks['vector_weight']}/{ranks['keyword_weight']}, k {ranks['rrf_k']} (before)",
            fusion["ndcg10_ranks"],
            section=section,
            notes=notes,
        ),
        Figure(
            "scifact_train_ndcg10_hybrid_ranks_local",
            fusion["ndcg10_ranks"],
            "score",
            "equal weights, RRF k 60",
            fusion["ndcg10_before"],
            section=section,
            notes=notes,
        ),
        Figure("scifact_train_ndcg10_vector_local", fusion["ndcg10_vector"], "score", section=section, notes=notes),
        Figure("scifact_train_ndcg10_keyword", fusion["ndcg10_keyword"], "score", section=section, notes=notes),
    ]


# Which index each leg of a variant searches: (the vector leg's layout, the keyword leg's layout). title_context and
# bare index the same content, so their chunks have the same ids and one variant can take its vector leg from one
# and its keyword leg from the other: exactly the legs an index would hold that gave the heading path to one leg only.
CONTEXT_VARIANTS = {
    "inline": (LAYOUT_INLINE, LAYOUT_INLINE),
    "title_context_both": (LAYOUT_TITLE_CONTEXT, LAYOUT_TITLE_CONTEXT),
    "title_context_keyword_only": (LAYOUT_BARE, LAYOUT_TITLE_CONTEXT),
    "title_context_vector_only": (LAYOUT_TITLE_CONTEXT, LAYOUT_BARE),
    "no_title": (LAYOUT_BARE, LAYOUT_BARE),
}


def seed_embedding_cache(data_dir: Path, sources: list[Path], model: str) -> int:
    """Copy `model`'s cached vectors of other data dirs (their kindex.sqlite3, read only) into `data_dir`'s cache,
    so that a layout embeds only the texts no earlier layout embedded. Returns how many rows the cache gained."""
    import sqlite3

    from kindex.adapters.local.sqlite_embedding_cache import SCHEMA

    target = sqlite3.connect(data_dir / "kindex.sqlite3")
    try:
        target.executescript(SCHEMA)  # the cache's own schema, as the deployment creates it
        before = target.execute("SELECT count(*) FROM tenant_embedding_cache").fetchone()[0]
        for number, source in enumerate(s for s in sources if s.exists() and s.parent != data_dir):
            target.execute(f"ATTACH DATABASE ? AS source{number}", (f"file:{source}?mode=ro",))
            target.execute(
                f"INSERT OR IGNORE INTO tenant_embedding_cache SELECT * FROM source{number}.tenant_embedding_cache"
                " WHERE model = ?",
                (model,),
            )
            target.commit()
            target.execute(f"DETACH DATABASE source{number}")
        return target.execute("SELECT count(*) FROM tenant_embedding_cache").fetchone()[0] - before
    finally:
        target.close()


def variant_scores(legs: dict[str, dict[str, tuple[list, list]]], variant: str, qrels: list, sweep: bool) -> dict:
    """A context variant's nDCG@10 from the leg rankings of each layout (`legs[layout][query]`: vector, keyword): its
    vector leg from one layout, its keyword leg from another, fused with the default fusion and weights; with
    `sweep` (the train split only, never test), the score fusion's keyword weight swept over that variant too."""
    from kindex.domain.query import DEFAULT_FUSION, DEFAULT_KEYWORD_WEIGHT, DEFAULT_VECTOR_WEIGHT

    vector_layout, keyword_layout = CONTEXT_VARIANTS[variant]
    combined = {q: (legs[vector_layout][q][0], legs[keyword_layout][q][1]) for q in legs[vector_layout]}
    scores = {
        "vector_leg": vector_layout,
        "keyword_leg": keyword_layout,
        "hybrid": fusion_ndcg(combined, qrels, (DEFAULT_VECTOR_WEIGHT, DEFAULT_KEYWORD_WEIGHT), fusion=DEFAULT_FUSION),
        "vector": fusion_ndcg(combined, qrels, (1.0, 0.0)),
        "keyword": fusion_ndcg(combined, qrels, (0.0, 1.0)),
    }
    if sweep:
        grid = {w: fusion_ndcg(combined, qrels, (1.0, w), fusion="scores") for w in SWEEP_SCORE_KEYWORD_WEIGHTS}
        best = max(grid, key=lambda w: grid[w])
        scores.update(best_keyword_weight=best, hybrid_at_best_weight=grid[best])
    return scores


def context_study(
    keep: Path,
    split: str = "train",
    variants: list[str] | None = None,
    seeds: list[Path] | None = None,
    model: str = LOCAL_MODEL,
    limit: int | None = None,
) -> dict:
    """How much of the title goes into each leg, measured on one split: each layout the variants need is indexed
    into keep/<layout> (reused when a run indexed it before; the embedding cache seeded from the other layouts' and
    `seeds`, so only new texts are embedded), its legs searched once, then every variant's hybrid (the default
    fusion and weights), vector and keyword nDCG@10 computed from its two legs."""
    from kindex.app.query import FIRST_ROUND_FACTOR, HYBRID_LEG_DEPTH
    from kindex.domain.query import DEFAULT_FUSION, DEFAULT_KEYWORD_WEIGHT, DEFAULT_VECTOR_WEIGHT

    chosen = [name for name in variants or CONTEXT_VARIANTS]
    layouts = [layout for layout in CONTENT_LAYOUTS if any(layout in CONTEXT_VARIANTS[name] for name in chosen)]
    queries, qrels = load_queries(split)
    depth = max(FIRST_ROUND_FACTOR * K_CHUNKS, HYBRID_LEG_DEPTH)
    legs: dict[str, dict[str, tuple[list, list]]] = {}
    ingests: dict[str, dict] = {}
    for layout in layouts:
        data_dir = keep / layout
        with local_deployment(data_dir, model) as services:
            ingest = indexed_before(services, data_dir)
            if ingest is None:
                others = [keep / other / "kindex.sqlite3" for other in CONTENT_LAYOUTS] + list(seeds or [])
                seeded = seed_embedding_cache(data_dir, others, model)
                log(f"scifact: indexing the {layout} layout with {model} ({seeded} cached vectors seeded)")
                ingest = index_corpus(services, model, limit, layout=layout)
                ingest["cache_seeded"] = seeded
                chunks = [
                    c
                    for doc in select_corpus(limit)
                    for c in services.adapters.chunks.list_chunks(TENANT, COLLECTION, doc["_id"])
                ]
                ingest["chunks_with_section"] = sum(1 for c in chunks if c.section)
                (data_dir / "scifact-ingest.json").write_text(json.dumps(ingest))
            log(f"scifact {layout}: {ingest}")
            ingests[layout] = ingest
            started = time.perf_counter()
            legs[layout] = leg_rankings(services, model, queries, depth)
            log(f"scifact {layout}: {len(queries)} {split} queries' legs in {time.perf_counter() - started:.0f} s")
    results = {}
    for name in chosen:
        results[name] = variant_scores(legs, name, qrels, sweep=split == "train")
        log(f"scifact {split} {name}: {results[name]}")
    return {
        "split": split,
        "queries": len(queries),
        "judgements": len(qrels),
        "depth": depth,
        "fusion": {
            "fusion": DEFAULT_FUSION,
            "vector_weight": DEFAULT_VECTOR_WEIGHT,
            "keyword_weight": DEFAULT_KEYWORD_WEIGHT,
        },
        "ingest": ingests,
        "variants": results,
    }


def evaluate(
    model: str,
    limit: int | None = None,
    extra_env: dict[str, str] | None = None,
    distractors: int | None = None,
    sweep: bool = True,
    keep: Path | None = None,
) -> tuple[list[Figure], dict]:
    import ir_measures
    from ir_measures import R, nDCG

    queries, qrels = load_test_queries()
    suffix = "local" if model == LOCAL_MODEL else SHORT_NAMES.get(model, "openai")
    refs = references(model)
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="kindex-scifact-") as tmp:
        data_dir = keep / SHORT_NAMES.get(model, "openai") if keep else Path(tmp) / "data"
        with local_deployment(data_dir, model, extra_env) as services:
            ingest = indexed_before(services, data_dir) if keep else None
            if ingest is None:
                log(f"scifact: indexing the corpus with {model}")
                ingest = index_corpus(services, model, limit, distractors)
                if keep:
                    (data_dir / "scifact-ingest.json").write_text(json.dumps(ingest))
                reused = False
            else:
                log(f"scifact: reusing the corpus indexed in {data_dir} with {model}")
                reused = True
            log(
                f"scifact: indexed {ingest['documents']} documents, {ingest['chunks']} chunks in "
                f"{ingest['ingest_seconds']} s"
            )
            details = {"model": model, "ingest": ingest, "queries": len(queries), "modes": {}}
            if sweep and model == LOCAL_MODEL:
                details["fusion_sweep"] = fusion = sweep_fusion(services, model)
                figures += sweep_figures(fusion)
            # A reused index was timed by another run (another load): its ingest speed is not this run's figure.
            figures += (
                []
                if reused
                else [
                    Figure(
                        f"scifact_ingest_chunks_per_s_{suffix}",
                        ingest["chunks_per_s"],
                        "chunks/s",
                        None,
                        None,
                        section="retrieval quality (make eval)",
                        notes=f"{model}: the whole corpus through the ingest path, put_document to indexed",
                    )
                ]
            )
            # The RRF run first, so that the default fusion's figure can stand beside it.
            modes = ("keyword", "vector", HYBRID_RANKS, "hybrid") if model == LOCAL_MODEL else MODES
            for mode in modes:
                if mode == "keyword" and model != LOCAL_MODEL:
                    continue  # BM25 does not depend on the embedding model
                run, latencies = run_queries(services, queries, mode)
                scores = ir_measures.calc_aggregate([nDCG @ 10, R @ 100], qrels, run)
                ndcg, recall = scores[nDCG @ 10], scores[R @ 100]
                details["modes"][mode] = {
                    "ndcg10": ndcg,
                    "recall100": recall,
                    "query_ms_p50": round(median(latencies), 2),
                    "query_ms_p95": round(percentile(latencies, 95), 2),
                }
                log(f"scifact {model} {mode}: nDCG@10 {ndcg:.4f} R@100 {recall:.4f}")
                name_suffix = "" if mode == "keyword" else f"_{suffix}"
                notes = (
                    f"{len(queries)} test queries; {ingest['documents']} documents indexed through the ingest "
                    f"path ({ingest['chunks']} chunks, maxChars 2000); k={K_CHUNKS} chunks -> documents by first "
                    "occurrence; ir-measures"
                    + ("" if distractors is None else f"; REDUCED corpus: judged documents + {distractors} others")
                )
                for metric, value in (("ndcg10", ndcg), ("recall100", recall)):
                    if mode == "hybrid" and HYBRID_RANKS in details["modes"]:
                        ref_name, ref_value = (
                            "weighted RRF (hybrid_ranks, same run)",
                            details["modes"][HYBRID_RANKS][metric],
                        )
                    else:
                        ref_name, ref_value = refs[("hybrid" if mode == HYBRID_RANKS else mode, metric)]
                    figures.append(
                        Figure(
                            f"scifact_{metric}_{mode}{name_suffix}",
                            value,
                            "score",
                            ref_name,
                            ref_value,
                            section="retrieval quality (make eval)",
                            notes=notes,
                        )
                    )
    return figures, details


def fold_into_results(figures: list[Figure], path: Path = RESULTS_PATH) -> None:
    """Replace the figures of the same names in bench/results.json, keeping every other figure (those of models
    this run did not evaluate too)."""
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError):
        results = {"figures": []}
    names = {f.name for f in figures}
    results["figures"] = [f for f in results.get("figures", []) if f.get("name") not in names]
    results["figures"] += [f.to_json() for f in figures]
    path.write_text(json.dumps(results, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, help="index only the first N corpus documents (a quick smoke run)")
    parser.add_argument(
        "--distractors", type=int, help="index only the judged documents and the first N others (a reduced corpus)"
    )
    parser.add_argument("--output", type=Path, default=SCIFACT_RESULTS_PATH)
    parser.add_argument(
        "--models",
        default=",".join(LOCAL_MODELS),
        help="comma-separated local models to evaluate (the default local model always comes first)",
    )
    parser.add_argument("--no-fold", action="store_true", help="do not write the figures into bench/results.json")
    parser.add_argument(
        "--keep",
        type=Path,
        help="index into (and on later runs reuse) DIR/<model> instead of a temp dir: the corpus is embedded once "
        "per model, and a run after a change of query code only searches (its ingest figures are the first run's)",
    )
    parser.add_argument(
        "--context-study",
        action="store_true",
        help="measure how much of the title goes into each leg (CONTEXT_VARIANTS) on --split, indexing each layout "
        "into --keep DIR/<layout> (required); writes only --output",
    )
    parser.add_argument("--split", choices=("train", "test"), default="train", help="the context study's split")
    parser.add_argument("--variants", help="comma-separated CONTEXT_VARIANTS to measure (default: all)")
    parser.add_argument(
        "--seed-cache",
        type=Path,
        action="append",
        default=[],
        help="a kindex.sqlite3 whose cached vectors the context study's layouts start from (read only; repeatable)",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.context_study:
        if args.keep is None:
            parser.error("--context-study needs --keep DIR")
        variants = [v for v in (args.variants or "").split(",") if v] or None
        unknown = [v for v in variants or [] if v not in CONTEXT_VARIANTS]
        if unknown:
            parser.error(f"unknown variants {unknown}; expected some of {', '.join(CONTEXT_VARIANTS)}")
        load_at_start = [round(x, 2) for x in os.getloadavg()]
        study = context_study(args.keep, args.split, variants, args.seed_cache, limit=args.limit)
        study.update(
            load_average_at_start=load_at_start,
            load_average_at_end=[round(x, 2) for x in os.getloadavg()],
            produced_by=f"python -m bench.eval_retrieval --context-study --split {args.split}",
            generated_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            wall_seconds=round(time.perf_counter() - started, 1),
            machine=machine_info(),
            versions=versions(),
        )
        args.output.write_text(json.dumps(study, indent=2) + "\n")
        print(f"{'variant (' + args.split + ')':34} {'hybrid':>8} {'vector':>8} {'keyword':>8}")
        for name, row in study["variants"].items():
            print(f"{name:34} {row['hybrid']:8.4f} {row['vector']:8.4f} {row['keyword']:8.4f}")
        print(f"wrote {args.output} in {study['wall_seconds']:.0f} s")
        return 0
    models = [LOCAL_MODEL] + [m for m in args.models.split(",") if m and m != LOCAL_MODEL]
    runs: list[tuple[str, dict[str, str] | None]] = [(model, None) for model in models]
    if os.environ.get("OPENAI_API_KEY"):
        runs.append((OPENAI_MODEL, {"OPENAI_API_KEY": os.environ["OPENAI_API_KEY"]}))
    else:
        log("scifact: OPENAI_API_KEY is not set, skipping openai:text-embedding-3-small")
    figures, all_details = [], []
    limit_flag = (f" --limit {args.limit}" if args.limit else "") + (
        f" --distractors {args.distractors}" if args.distractors is not None else ""
    )
    for model, extra_env in runs:
        model_figures, details = evaluate(model, args.limit, extra_env, args.distractors, keep=args.keep)
        figures += model_figures
        all_details.append(details)
        # Written after each model: a long run that stops early keeps what it measured.
        wall = time.perf_counter() - started
        result = {
            "produced_by": f"make eval (python -m bench.eval_retrieval{limit_flag})",
            "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "wall_seconds": round(wall, 1),
            "machine": machine_info(),
            "versions": versions(),
            "figures": [f.to_json() for f in figures],
            "details": all_details,
        }
        args.output.write_text(json.dumps(result, indent=2) + "\n")
    if not args.no_fold:
        fold_into_results(figures)
    print(f"{'figure':34} {'value':>8} {'reference':>10}  reference name")
    for f in figures:
        ref = f"{f.reference_value:.4f}" if f.reference_value is not None else "-"
        print(f"{f.name:34} {f.value:8.4f} {ref:>10}  {f.reference_name or ''}")
    print(f"wrote {args.output} in {wall:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
