"""What every benchmark shares: paths, the figure record, percentiles, machine and version facts, the local
server as a subprocess, and text read in place from ../shared/data (never copied into the repo)."""

from __future__ import annotations

import gzip
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH_DIR = REPO / "bench"
SHARED_DATA = REPO.parent / "shared" / "data"
SCIFACT_DIR = SHARED_DATA / "scifact"
KNN_TESTDATA = SHARED_DATA / "knn-examples" / "knn-plugin-testdata" / "src" / "test" / "resources" / "data"
RESULTS_PATH = BENCH_DIR / "results.json"
# Written by `make eval` (python -m bench.eval_retrieval); `make bench` folds it into results.json.
SCIFACT_RESULTS_PATH = BENCH_DIR / "retrieval_results.json"

VERSIONED_PACKAGES = (
    "kindex",
    "numpy",
    "onnxruntime",
    "tokenizers",
    "tiktoken",
    "pydantic",
    "aws-lambda-powertools",
    "boto3",
    "langchain-text-splitters",
    "semantic-text-splitter",
    "ir-measures",
    "pytrec-eval-terrier",
    "matplotlib",
    "httpx",
    "requests",
    "openai",
)


@dataclass
class Figure:
    """One measured number, with the reference measured in the same run (ratio = value / reference).

    `spread` holds min / median / max (and n) of the samples behind `value`, `ratio_spread` those of the paired
    per-round ratios when the two sides were alternated (`alternate`); `load_average` is the 1-minute load when the
    figure was recorded; `valid` is False (with `invalid_reason`) when the figure cannot be right - a ratio that is
    impossible, such as an ingest faster than its own embedder - and the README marks it so."""

    name: str
    value: float | None
    unit: str
    reference_name: str | None = None
    reference_value: float | None = None
    ratio: float | None = None
    section: str = ""
    notes: str = ""
    details: dict = field(default_factory=dict)
    spread: dict | None = None
    ratio_spread: dict | None = None
    load_average: float | None = None
    valid: bool = True
    invalid_reason: str = ""

    def __post_init__(self) -> None:
        if self.value is not None:
            self.value = round(float(self.value), 6)
        if self.reference_value is not None:
            self.reference_value = round(float(self.reference_value), 6)
        if self.ratio is None and self.value is not None and self.reference_value:
            self.ratio = round(self.value / self.reference_value, 4)
        if self.load_average is None and hasattr(os, "getloadavg"):
            self.load_average = round(os.getloadavg()[0], 2)

    def invalid_unless(self, condition: bool, reason: str) -> Figure:
        """Flag the figure invalid, saying why, when `condition` does not hold."""
        if not condition:
            self.valid = False
            self.invalid_reason = reason
        return self

    def to_json(self) -> dict:
        """The figure with the run that measured it: commit (`+dirty` with uncommitted changes), the run's start and
        its command, so a figure folded into or kept in bench/results.json always says where it came from."""
        return asdict(self) | this_run()


def spread(samples: Sequence[float]) -> dict:
    """min / median / max and the number of samples, rounded for results.json."""
    return {
        "min": round(min(samples), 6),
        "median": round(statistics.median(samples), 6),
        "max": round(max(samples), 6),
        "n": len(samples),
    }


def paired_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Round i of one side over round i of the other (the pairs `alternate` makes), for the ratio's spread."""
    if len(numerators) != len(denominators):
        raise ValueError(f"{len(numerators)} and {len(denominators)} rounds cannot be paired")
    return [n / d for n, d in zip(numerators, denominators)]


def alternate(
    sides: dict[str, Callable[[], dict]],
    *,
    min_seconds: float = 20.0,
    min_rounds: int = 3,
    max_rounds: int = 40,
    timed: Sequence[str] | None = None,
) -> dict[str, list[dict]]:
    """Measure two (or more) sides fairly: one run of each side per round, the order reversed every round (A B,
    B A, A B ...), until every side has worked `min_seconds` in all and at least `min_rounds` rounds ran. Each
    side returns a dict of its measurements; its wall time is added as `seconds`. Returns each side's runs, in
    round order, so that round i of one side pairs with round i of the other (a busy moment hits both).

    `timed` names the sides that must reach `min_seconds` (all by default): the others run once every round too,
    paired with them, but do not prolong the measurement (a fast yardstick measured beside a slower figure)."""
    names = list(sides)
    gated = list(timed) if timed is not None else names
    if not set(gated) <= set(names) or not gated:
        raise ValueError(f"timed sides {gated} must be some of {names}")
    runs: dict[str, list[dict]] = {name: [] for name in names}
    spent = dict.fromkeys(names, 0.0)
    for round_index in range(max_rounds):
        for name in names if round_index % 2 == 0 else names[::-1]:
            started = time.perf_counter()
            measured = dict(sides[name]())
            measured["seconds"] = time.perf_counter() - started
            spent[name] += measured["seconds"]
            runs[name].append(measured)
        if round_index + 1 >= min_rounds and min(spent[name] for name in gated) >= min_seconds:
            break
    return runs


def percentile(samples: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), without importing numpy for it."""
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    position = (len(ordered) - 1) * q / 100.0
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- machine and versions -----------------------------------------------------------------------------------------


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def _cpu_model(cpuinfo: str) -> str:
    for line in cpuinfo.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


# The x86 vector extensions the model kernels choose between (onnxruntime's int8 GEMMs, OpenBLAS): two "AMD EPYC"
# machines differed 2-3x in embedding speed, and in int8 rounding, by these alone (docs/decisions.md, 2026-12-03).
VECTOR_FLAGS = ("avx2", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8")


def cpu_vector_flags(cpuinfo: str) -> list[str]:
    """Which of VECTOR_FLAGS the CPU has, from /proc/cpuinfo's first `flags` line (empty where there is none)."""
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            present = set(line.split(":", 1)[1].split())
            return [flag for flag in VECTOR_FLAGS if flag in present]
    return []


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def machine_info() -> dict:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    cpuinfo = _cpuinfo()
    return {
        "cpu_model": _cpu_model(cpuinfo),
        "cpu_vector_flags": cpu_vector_flags(cpuinfo),
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "os": platform.platform(),
        "machine": platform.machine(),
        "load_average_at_start": [round(x, 2) for x in load] if load else None,
    }


_STARTED_AT = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@lru_cache(maxsize=1)
def this_run() -> dict:
    """commit, measured_at (this process's start) and produced_by of the figures this process measures."""
    found = versions()
    commit = found.get("git_commit")
    if commit and found.get("git_dirty"):
        commit += "+dirty"
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    command = f"python -m {spec.name}" if spec is not None else f"python {sys.argv[0]}"
    return {"commit": commit, "measured_at": _STARTED_AT, "produced_by": " ".join([command, *sys.argv[1:]])}


def versions() -> dict:
    found = {}
    for package in VERSIONED_PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    import sqlite3

    found["sqlite"] = sqlite3.sqlite_version
    try:
        found["git_commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout
        found["git_dirty"] = bool(dirty.strip())
    except (OSError, subprocess.CalledProcessError):
        found["git_commit"] = None
    return found


def document_chunks(tenant: str, collection: str, document_id: str, texts: Sequence[str]) -> list:
    """The `StoredChunk`s of a document whose content is `texts` joined by blank lines (offsets into that content,
    ids as ingest derives them), for the sections that write corpora straight into the stores."""
    from kindex.app.embedding import text_sha256
    from kindex.app.ingest import chunk_id
    from kindex.domain.types import StoredChunk

    stored, offset = [], 0
    for index, text in enumerate(texts):
        stored.append(
            StoredChunk(
                chunk_id=chunk_id(tenant, collection, document_id, index, text_sha256(text)),
                collection=collection,
                document_id=document_id,
                index=index,
                start=offset,
                end=offset + len(text),
                text=text,
            )
        )
        offset += len(text) + 2
    return stored


# -- text read in place -------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def scifact_corpus() -> list[dict]:
    """The SciFact corpus ({_id, title, text}), read from ../shared/data in place."""
    path = SCIFACT_DIR / "corpus.jsonl"
    opener = open if path.exists() else None
    if opener is None:
        path = SCIFACT_DIR / "corpus.jsonl.gz"
    with open(path, encoding="utf-8") if path.suffix == ".jsonl" else gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@lru_cache(maxsize=1)
def real_sentences() -> tuple[str, ...]:
    """Real English sentences (SciFact abstracts), the raw material of the synthetic corpora."""
    splitter = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")
    sentences = []
    for doc in scifact_corpus():
        sentences.extend(s.strip() for s in splitter.split(doc["text"]) if 20 <= len(s.strip()) <= 400)
    return tuple(sentences)


def real_text(megabytes: float) -> str:
    """About `megabytes` MB (UTF-8) of real text shaped like documents: each SciFact abstract under a Markdown
    heading made of its title, paragraphs split every few sentences."""
    limit = int(megabytes * 1_000_000)
    parts: list[str] = []
    size = 0
    splitter = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")
    while size < limit:
        for doc in scifact_corpus():
            sentences = splitter.split(doc["text"])
            paragraphs = [" ".join(sentences[i : i + 4]) for i in range(0, len(sentences), 4)]
            block = f"# {doc['title'].strip()}\n\n" + "\n\n".join(paragraphs) + "\n\n"
            parts.append(block)
            size += len(block.encode("utf-8"))
            if size >= limit:
                break
    text = "".join(parts)
    return text.encode("utf-8")[:limit].decode("utf-8", errors="ignore")


class SyntheticCorpus:
    """Synthetic but realistic documents: real sentences in a seeded random order, grouped in paragraphs under
    headings. Deterministic for a seed."""

    def __init__(self, seed: int = 7):
        import random

        self.random = random.Random(seed)
        self.sentences = real_sentences()
        self.words = [w for s in self.sentences[:5000] for w in re.findall(r"[A-Za-z]{5,}", s)]

    def paragraph(self, approx_chars: int) -> str:
        out: list[str] = []
        size = 0
        while size < approx_chars:
            sentence = self.random.choice(self.sentences)
            out.append(sentence)
            size += len(sentence) + 1
        return " ".join(out)

    def document(self, approx_chars: int, paragraph_chars: int = 450) -> str:
        blocks = [f"# {self.title()}"]
        size = 0
        while size < approx_chars:
            if blocks and self.random.random() < 0.15:
                blocks.append(f"## {self.title()}")
            paragraph = self.paragraph(paragraph_chars)
            blocks.append(paragraph)
            size += len(paragraph) + 2
        return "\n\n".join(blocks) + "\n"

    def title(self) -> str:
        return " ".join(self.random.choice(self.words) for _ in range(self.random.randint(2, 5))).capitalize()

    def query(self) -> str:
        """A question-like query: a few content words of a real sentence."""
        words = re.findall(r"[A-Za-z]{4,}", self.random.choice(self.sentences))
        picked = self.random.sample(words, min(len(words), self.random.randint(3, 6))) if words else ["protein"]
        return " ".join(picked)


# -- the local server ---------------------------------------------------------------------------------------------


@contextmanager
def running_server(data_dir: Path, extra_env: dict[str, str] | None = None) -> Iterator:
    """`kindex serve --port 0 --data-dir D` as a subprocess (hash:384 by default), stopped on exit."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.conftest import start_server

    server = start_server(data_dir, extra_env)
    try:
        yield server
    finally:
        server.process.terminate()
        try:
            server.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait(timeout=5)


def wait_indexed(
    session, collection_url: str, document_ids: Sequence[str], timeout: float = 600.0, poll: float = 0.5
) -> dict[str, str]:
    """Poll the documents' statuses until none is pending or in progress."""
    deadline = time.monotonic() + timeout
    remaining = list(document_ids)
    statuses: dict[str, str] = {}
    while remaining and time.monotonic() < deadline:
        still = []
        for document_id in remaining:
            status = session.get(f"{collection_url}/documents/{document_id}").json()["status"]
            statuses[document_id] = status
            if status not in ("indexed", "failed"):
                still.append(document_id)
                break  # documents are processed in order: no need to ask about the later ones yet
        if still:
            index = remaining.index(still[0])
            remaining = remaining[index:]
            time.sleep(poll)
        else:
            remaining = []
    if remaining:
        raise TimeoutError(f"{len(remaining)} documents still not indexed")
    return statuses


# -- an in-process local deployment -------------------------------------------------------------------------------


@contextmanager
def local_deployment(data_dir: Path, model: str, extra_env: dict[str, str] | None = None) -> Iterator:
    """The container `kindex serve` would build for `data_dir` (SQLite + folder + local index), in this process.

    Entry points (the ingest function, the worker) read the process-wide container, so the environment is
    set the way `kindex serve` sets it, and restored afterwards."""
    from kindex.compose import container

    env = {
        "KINDEX_BACKEND": "local",
        "KINDEX_DATA_DIR": str(data_dir),
        "KINDEX_DEFAULT_EMBEDDING_MODEL": model,
        **(extra_env or {}),
    }
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    container.cache_clear()
    data_dir.mkdir(parents=True, exist_ok=True)
    services = container()
    try:
        yield services
    finally:
        if "embedded_index" in services.adapters.__dict__:  # a cluster's index (KINDEX_SEARCH_URL) has nothing to close
            services.adapters.embedded_index.close()
        container.cache_clear()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def drain_worker(timeout: float = 3600.0) -> None:
    """Run the local ingest worker (the ingest function behind the durable queue) until the queue is empty."""
    from kindex_local.deployment import build_worker

    build_worker().drain(timeout=timeout)
