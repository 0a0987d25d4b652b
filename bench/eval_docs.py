"""Retrieval quality on real documents: the question set bench/docs_questions.json over every file of
../shared/data/docs (read in place, never copied), with and without the structure of issue 28.

`python -m bench.eval_docs` (what `make eval-docs` runs):
1. puts every file into one collection per variant of a fresh local data dir through the real ingest path (catalog ->
   blob -> durable queue -> ingest function: extract, chunk, embed, index, status). The variants are the chunker with
   and without each piece of structure: `none` (version 1's chunks of the same extracted text), `tables` (the table
   rule and table headers only), `sections` (heading paths only) and `both` (what a new collection gets). They share
   one tenant, so its embedding cache serves every text a variant embeds that an earlier one embedded already: the
   count of texts each variant embedded is the re-embedding a reindex from `none` to it costs;
2. asks every question in keyword, vector and hybrid mode (k = 10) and scores, per variant and mode:
   answer-in-top-3 (a result among the first 3 is relevant), MRR@10 and recall@10 (relevant results among the first
   10 over min(10, relevant chunks)). A chunk is relevant when it belongs to one of the question's files and its text
   holds every answer string (case-folded, whitespace collapsed); a question whose answer no chunk holds whole (cut
   between chunks) scores 0 in every mode, and the count of such questions is a figure too;
3. writes bench/docs_results.json (every question's ranks) and folds its figures into bench/results.json (section
   "document questions (make eval-docs)"), replacing that section's previous figures.

The questions were written by reading the documents before any query was run, and are never tuned afterwards.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import (
    BENCH_DIR,
    RESULTS_PATH,
    SHARED_DATA,
    Figure,
    drain_worker,
    local_deployment,
    log,
    machine_info,
    versions,
)

DOCS_DIR = SHARED_DATA / "docs"
QUESTIONS_PATH = BENCH_DIR / "docs_questions.json"
DOCS_RESULTS_PATH = BENCH_DIR / "docs_results.json"
SECTION = "document questions (make eval-docs)"
TENANT = "default"
MODEL = "local:bge-small-en-v1.5-q"  # the local default (kindex/settings.py)
MODES = ("keyword", "vector", "hybrid")
K = 10
# Which structure the chunker is given, per variant (the extraction is the same for all).
VARIANTS = {"none": (), "tables": ("tables",), "sections": ("headings",), "both": ("headings", "tables")}
# The query option of issue 28 item 3, measured on the variant a new collection gets (`both`): one neighbouring chunk
# on each side of every result.
EXPAND_VARIANT = "both"
EXPAND = {"before": 1, "after": 1}


def normalise(text: str) -> str:
    return " ".join(text.split()).casefold()


def relevant(text: str, answers: list[str]) -> bool:
    """Whether a chunk's text holds every answer string."""
    held = normalise(text)
    return all(normalise(answer) in held for answer in answers)


def document_id(relative: str) -> str:
    """A document id from a file's path under docs/ (`docx/handbook-872p.docx` -> `docx-handbook-872p.docx`)."""
    return relative.replace("/", "-")


def score(ranked: list[bool], total_relevant: int) -> dict[str, float]:
    """answer-in-top-3, reciprocal rank within 10 and recall@10 of one ranking (True: that result is relevant)."""
    top = ranked[:K]
    first = next((rank for rank, hit in enumerate(top, start=1) if hit), None)
    return {
        "top3": float(any(top[:3])),
        "mrr10": 1.0 / first if first else 0.0,
        "recall10": sum(top) / min(K, total_relevant) if total_relevant else 0.0,
    }


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _chunker(structure: tuple[str, ...]) -> Callable:
    """chunk_text given only the variant's structure: what the ingest would chunk without the rest."""
    from kindex.text import chunking

    original = chunking.chunk_text

    def chunk(text, **options):
        for name in ("headings", "tables"):
            if name not in structure:
                options.pop(name, None)
        return original(text, **options)

    return chunk


def files() -> list[str]:
    return sorted(
        str(path.relative_to(DOCS_DIR)) for path in DOCS_DIR.glob("*/*") if path.suffix not in (".txt", ".tsv")
    )


def index_variant(services, variant: str, counted) -> dict:
    """Every file into the variant's collection; returns counts and timings."""
    from kindex.domain.models import CollectionInput
    from kindex.text import chunking

    services.catalog.put_collection(
        TENANT, variant, CollectionInput(title=f"docs ({variant})", allow_guests=True, embedding_model=MODEL)
    )
    before = counted.counts.get("ChunksEmbedded", 0)
    original = chunking.chunk_text
    chunking.chunk_text = _chunker(VARIANTS[variant])  # read by the ingest at each call
    started = time.perf_counter()
    try:
        for relative in files():
            services.catalog.put_file(
                TENANT, variant, document_id(relative), Path(relative).name, (DOCS_DIR / relative).read_bytes()
            )
        drain_worker()
    finally:
        chunking.chunk_text = original
    seconds = time.perf_counter() - started
    statuses: dict[str, int] = {}
    chunks = 0
    for relative in files():
        document = services.adapters.metadata.get_document(TENANT, variant, document_id(relative))
        statuses[document.status.value] = statuses.get(document.status.value, 0) + 1
        chunks += document.chunk_count or 0
    embedded = counted.counts.get("ChunksEmbedded", 0) - before
    return {
        "documents": len(files()),
        "chunks": chunks,
        "statuses": statuses,
        "ingest_seconds": round(seconds, 2),
        "texts_embedded": embedded,
    }


def evaluate_variant(services, variant: str, questions: list[dict], expand: dict | None = None) -> dict:
    """Every question in every mode over the variant's collection; with `expand`, each result is its passage (the
    hit with its neighbours, overlapping passages merged) and a passage is relevant when its text holds the answer."""
    from kindex.domain.query import QueryRequest

    store = services.adapters.chunks
    chunks = {relative: store.list_chunks(TENANT, variant, document_id(relative)) for relative in files()}
    results: dict[str, dict] = {mode: {"questions": {}} for mode in MODES}
    unanswerable = []
    for question in questions:
        wanted = {document_id(f) for f in question["files"]}
        total = sum(1 for f in question["files"] for c in chunks.get(f, []) if relevant(c.text, question["answer"]))
        if not total:
            unanswerable.append(question["id"])
        for mode in MODES:
            response = services.query.query(
                TENANT,
                [variant],
                QueryRequest(query=question["question"], k=K, mode=mode, expand=expand),
                multi=False,
            )
            ranked = [r.document_id in wanted and relevant(r.content, question["answer"]) for r in response.results]
            scores = score(ranked, total)
            results[mode]["questions"][question["id"]] = {
                **scores,
                "relevant_chunks": total,
                "sections": [r.section for r in response.results[:3]],
            }
    for mode in MODES:
        per_question = results[mode]["questions"].values()
        for metric in ("top3", "mrr10", "recall10"):
            results[mode][metric] = round(mean([q[metric] for q in per_question]), 4)
        by_kind: dict[str, list[float]] = {}
        for question in questions:
            for kind in question["kinds"]:
                by_kind.setdefault(kind, []).append(results[mode]["questions"][question["id"]]["top3"])
        results[mode]["top3_by_kind"] = {kind: round(mean(values), 4) for kind, values in sorted(by_kind.items())}
    return {"modes": results, "unanswerable": unanswerable}


def figures_of(details: dict, questions: int) -> list[Figure]:
    figures: list[Figure] = []
    expanded = details.get("expand")
    if expanded:
        notes = (
            f"{questions} questions; variant {expanded['variant']} queried with expand {json.dumps(expanded['expand'])}"
            f" (passages of the hit and its neighbours, overlapping ones merged; a passage is relevant when it holds"
            f" the answer); compare docs_*_{expanded['variant']}; {MODEL}; k={K}"
        )
        for mode in MODES:
            for metric in ("top3", "mrr10", "recall10"):
                figures.append(
                    Figure(
                        f"docs_{metric}_{mode}_{expanded['variant']}_expand",
                        expanded["modes"][mode][metric],
                        "score",
                        section=SECTION,
                        notes=notes,
                    )
                )
    for variant, found in details["variants"].items():
        notes = (
            f"{questions} questions over every file of ../shared/data/docs; chunker given "
            f"{'+'.join(VARIANTS[variant]) or 'no structure (version 1 chunks)'}; maxChars 2000; {MODEL}; k={K}"
        )
        for mode in MODES:
            for metric in ("top3", "mrr10", "recall10"):
                figures.append(
                    Figure(
                        f"docs_{metric}_{mode}_{variant}",
                        found["modes"][mode][metric],
                        "score",
                        section=SECTION,
                        notes=notes,
                    )
                )
        figures.append(
            Figure(
                f"docs_unanswerable_{variant}",
                len(found["unanswerable"]),
                "questions",
                section=SECTION,
                notes="questions whose answer no chunk holds whole",
            )
        )
        ingest = found["ingest"]
        figures.append(
            Figure(
                f"docs_reembedded_share_{variant}",
                ingest["texts_embedded"] / max(ingest["chunks"], 1),
                "share",
                section=SECTION,
                notes="chunks this variant embedded that the variants before it had not (cache misses)"
                f"; order {', '.join(VARIANTS)}",
            )
        )
    return figures


def fold_into_results(figures: list[Figure], path: Path = RESULTS_PATH) -> None:
    """Replace this section's figures in bench/results.json, keeping every other section's."""
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError):
        results = {"figures": []}
    results["figures"] = [f for f in results.get("figures", []) if f.get("section") != SECTION]
    results["figures"] += [f.to_json() for f in figures]
    path.write_text(json.dumps(results, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated variants, in order")
    parser.add_argument("--output", type=Path, default=DOCS_RESULTS_PATH)
    parser.add_argument("--no-fold", action="store_true", help="do not write the figures into bench/results.json")
    args = parser.parse_args(argv)
    from bench.eval_retrieval import CountingMetrics

    questions = json.loads(QUESTIONS_PATH.read_text())["questions"]
    started = time.perf_counter()
    details: dict = {"model": MODEL, "questions": len(questions), "files": files(), "variants": {}}
    with tempfile.TemporaryDirectory(prefix="kindex-docs-") as tmp:
        with local_deployment(Path(tmp) / "data", MODEL) as services:
            counted = CountingMetrics()
            services.adapters.__dict__["metrics"] = counted  # before the services that record metrics are built
            for variant in args.variants.split(","):
                log(f"docs: indexing every file for variant {variant}")
                ingest = index_variant(services, variant, counted)
                log(
                    f"docs {variant}: {ingest['chunks']} chunks, {ingest['texts_embedded']} embedded, "
                    f"{ingest['ingest_seconds']} s, {ingest['statuses']}"
                )
                found = evaluate_variant(services, variant, questions)
                details["variants"][variant] = {"ingest": ingest, **found}
                for mode in MODES:
                    m = found["modes"][mode]
                    log(f"docs {variant} {mode}: top3 {m['top3']:.3f} MRR@10 {m['mrr10']:.3f} R@10 {m['recall10']:.3f}")
                if variant == EXPAND_VARIANT:
                    details["expand"] = {
                        "variant": variant,
                        "expand": EXPAND,
                        **evaluate_variant(services, variant, questions, EXPAND),
                    }
    figures = figures_of(details, len(questions))
    wall = time.perf_counter() - started
    args.output.write_text(
        json.dumps(
            {
                "produced_by": "make eval-docs (python -m bench.eval_docs)",
                "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "wall_seconds": round(wall, 1),
                "machine": machine_info(),
                "versions": versions(),
                "figures": [f.to_json() for f in figures],
                "details": details,
            },
            indent=2,
        )
        + "\n"
    )
    if not args.no_fold:
        fold_into_results(figures)
    print(f"{'variant':9} {'mode':8} {'top3':>6} {'MRR@10':>7} {'R@10':>6}")
    for variant, found in details["variants"].items():
        for mode in MODES:
            m = found["modes"][mode]
            print(f"{variant:9} {mode:8} {m['top3']:6.3f} {m['mrr10']:7.3f} {m['recall10']:6.3f}")
        if variant == details.get("expand", {}).get("variant"):
            for mode in MODES:
                m = details["expand"]["modes"][mode]
                name = f"{variant}+exp"
                print(f"{name:9} {mode:8} {m['top3']:6.3f} {m['mrr10']:7.3f} {m['recall10']:6.3f}")
    print(f"wrote {args.output} in {wall:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
