"""PNG plots of bench/results.json (matplotlib, Agg backend): `python -m bench.plots`."""

from __future__ import annotations

import json
from pathlib import Path

from bench.common import BENCH_DIR, RESULTS_PATH

MODES = ("vector", "keyword", "hybrid")


def _by_name(results: dict) -> dict[str, dict]:
    return {f["name"]: f for f in results["figures"]}


def latency_plot(figures: dict[str, dict], path: Path) -> bool:
    import matplotlib.pyplot as plt

    sizes = [s for s in ("10k", "100k") if f"query_p50_ms_{s}_vector" in figures]
    if not sizes:
        return False
    fig, axes = plt.subplots(1, len(sizes), figsize=(6 * len(sizes), 4.2), sharey=True, squeeze=False)
    for ax, size in zip(axes[0], sizes):
        labels, rows = [], {50: [], 95: [], 99: []}
        for rights in ("", "_external"):
            for mode in MODES:
                labels.append(f"{mode}\n{'external' if rights else 'public'}")
                for q in rows:
                    rows[q].append(figures[f"query_p{q}_ms_{size}_{mode}{rights}"]["value"])
        x = range(len(labels))
        width = 0.27
        for offset, q in zip((-width, 0, width), rows):
            ax.bar([i + offset for i in x], rows[q], width, label=f"p{q}")
        ax.set_xticks(list(x), labels, fontsize=8)
        ax.set_title(f"query latency over HTTP, {size} chunks (hash:384)")
        ax.set_ylabel("ms")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def throughput_plot(figures: dict[str, dict], path: Path) -> bool:
    import matplotlib.pyplot as plt

    bars = [
        (name, label)
        for name, label in (
            ("ingest_ratio_minilm", "ingest e2e / raw\nMiniLM"),
            ("ingest_ratio_hash", "ingest e2e / raw\nhash:384"),
            ("maxchars_mb_per_s", "maxChars /\nsemantic-text-splitter"),
            ("maxchars_mb_per_s_vs_langchain", "maxChars /\nlangchain"),
            ("tokens_mb_per_s", "tokens /\nsemantic-text-splitter"),
            ("tokens_mb_per_s_vs_langchain", "tokens /\nlangchain"),
            ("vector_p50_ms_100k", "vector index speed /\nbare numpy (p50)"),
        )
        if name in figures and (name.startswith("ingest_ratio") or figures[name].get("ratio") is not None)
    ]
    if not bars:
        return False
    values = []
    for name, _ in bars:
        figure = figures[name]
        if name.startswith("ingest_ratio"):
            values.append(figure["value"])
        elif name == "vector_p50_ms_100k":
            values.append(1 / figure["ratio"])  # higher is better, like the others
        else:
            values.append(figure["ratio"])
    fig, ax = plt.subplots(figsize=(10, 4.2))
    ax.bar(range(len(bars)), values, color=["#4c72b0" if v >= 0.9 else "#dd8452" for v in values])
    ax.axhline(1.0, color="grey", linewidth=1)
    ax.axhline(0.9, color="red", linestyle="--", linewidth=1, label="ingest goal 0.9 (MiniLM)")
    for i, v in enumerate(values):
        ax.text(i, v, f"{v:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(bars)), [label for _, label in bars], fontsize=8)
    ax.set_ylabel("ratio (kindex / reference, higher is better)")
    ax.set_title("throughput ratios, measured in the same run as their references")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def ndcg_plot(figures: dict[str, dict], path: Path) -> bool:
    import matplotlib.pyplot as plt

    names = [
        (n, label)
        for n, label in (
            ("scifact_ndcg10_keyword", "keyword\n(BM25, FTS5)"),
            ("scifact_ndcg10_vector_local", "vector\nMiniLM"),
            ("scifact_ndcg10_hybrid_local", "hybrid (RRF)\nMiniLM"),
            ("scifact_ndcg10_vector_openai", "vector\n3-small"),
            ("scifact_ndcg10_hybrid_openai", "hybrid\n3-small"),
        )
        if n in figures
    ]
    if not names:
        return False
    fig, ax = plt.subplots(figsize=(8, 4.2))
    values = [figures[n]["value"] for n, _ in names]
    ax.bar(range(len(names)), values, color="#4c72b0")
    for i, v in enumerate(values):
        ax.text(i, v, f"{v:.3f}", ha="center", va="bottom", fontsize=8)
    references = {}
    for n, _ in names:
        if figures[n].get("reference_value") is not None:
            references[figures[n]["reference_name"]] = figures[n]["reference_value"]
    for (label, value), style in zip(sorted(references.items(), key=lambda kv: kv[1]), ("--", ":", "-.", "-")):
        ax.axhline(value, linestyle=style, color="black", linewidth=1, label=f"{label}: {value:.3f}")
    ax.set_xticks(range(len(names)), [label for _, label in names], fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("nDCG@10")
    ax.set_title("BEIR SciFact test (300 queries): kindex vs published figures")
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_plots(results: dict, directory: Path = BENCH_DIR) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    figures = _by_name(results)
    written = []
    for name, draw in (
        ("latency.png", latency_plot),
        ("throughput_ratios.png", throughput_plot),
        ("retrieval_ndcg.png", ndcg_plot),
    ):
        if draw(figures, directory / name):
            written.append(directory / name)
    return written


if __name__ == "__main__":
    for written_path in write_plots(json.loads(RESULTS_PATH.read_text())):
        print(written_path)
