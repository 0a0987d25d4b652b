"""Chunking speed (MB/s of UTF-8 input) on 5 MB of real text, beside semantic-text-splitter and
langchain-text-splitters on the same input and settings, the three alternated round by round (`alternate`: the
order reversed every round, until each has worked MIN_SECONDS, at least 3 rounds; a round is as many passes over the
text as make ~1/4 of that), so that a busy moment hits all three alike. Figures: the median MB/s with min / median /
max, the ratio the median of the per-round paired ratios.

The text: SciFact abstracts (read in place) shaped as Markdown documents (title heading, paragraphs).
- maxChars (1000 characters, overlap 100) vs semantic-text-splitter `TextSplitter(1000, overlap=100)` and
  langchain `RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=100)`.
- tokens (256 cl100k tokens, overlap 32) vs semantic-text-splitter `TextSplitter.from_tiktoken_model(
  "gpt-3.5-turbo", 256, overlap=32)` (cl100k) and langchain `from_tiktoken_encoder` with the same encoding
  (kindex's tokens method is that splitter plus exact offsets, so this reference shows the offset cost).
"""

from __future__ import annotations

import math
import time

from bench.common import Figure, alternate, log, median, paired_ratios, real_text, spread, timed

MEGABYTES = 5.0
# Per candidate and method (issue 14: >= 20 s of work per measurement); 3 candidates x 2 methods x 20 s is ~2.5 min.
MIN_SECONDS = 20.0
MIN_ROUNDS = 3
MAX_CHARS, CHAR_OVERLAP = 1000, 100
MAX_TOKENS, TOKEN_OVERLAP = 256, 32


def _candidates():
    from langchain_text_splitters import RecursiveCharacterTextSplitter
    from semantic_text_splitter import TextSplitter

    from kindex.text.chunking import TOKEN_ENCODING, chunk_text

    return {
        "maxChars": {
            "kindex": lambda text: chunk_text(text, method="maxChars", max_size=MAX_CHARS, overlap=CHAR_OVERLAP),
            "semantic-text-splitter": lambda text: TextSplitter(MAX_CHARS, overlap=CHAR_OVERLAP).chunks(text),
            "langchain-text-splitters": lambda text: RecursiveCharacterTextSplitter(
                chunk_size=MAX_CHARS, chunk_overlap=CHAR_OVERLAP
            ).split_text(text),
        },
        "tokens": {
            "kindex": lambda text: chunk_text(text, method="tokens", max_size=MAX_TOKENS, overlap=TOKEN_OVERLAP),
            "semantic-text-splitter": lambda text: TextSplitter.from_tiktoken_model(
                "gpt-3.5-turbo", MAX_TOKENS, overlap=TOKEN_OVERLAP
            ).chunks(text),
            "langchain-text-splitters": lambda text: RecursiveCharacterTextSplitter.from_tiktoken_encoder(
                encoding_name=TOKEN_ENCODING, chunk_size=MAX_TOKENS, chunk_overlap=TOKEN_OVERLAP, disallowed_special=()
            ).split_text(text),
        },
    }


def _passes(split, text: str, round_seconds: float) -> int:
    """How many passes over `text` one round of a candidate makes: about `round_seconds` of work (one pass of the
    fastest candidate is ~0.1 s on 5 MB, too short to time against a busy machine's noise)."""
    one = min(timed(lambda: split(text)) for _ in range(2))  # the first full pass may still be warming up
    return max(1, math.ceil(round_seconds / max(one, 1e-6)))


def measure(candidates: dict, text: str, *, min_seconds: float = MIN_SECONDS, min_rounds: int = MIN_ROUNDS) -> dict:
    """MB/s of each candidate, the candidates alternated round by round (`alternate`), with their chunk counts."""
    size_mb = len(text.encode("utf-8")) / 1_000_000
    counts = {name: len(split(text[:50_000])) for name, split in candidates.items()}  # warm up (imports, tokenizer)
    passes = {name: _passes(split, text, min_seconds / (min_rounds + 1)) for name, split in candidates.items()}

    def side(name: str):
        split = candidates[name]

        def one_round() -> dict:
            started = time.perf_counter()
            for _ in range(passes[name]):
                counts[name] = len(split(text))
            return {"mb_per_s": passes[name] * size_mb / (time.perf_counter() - started)}

        return one_round

    runs = alternate({name: side(name) for name in candidates}, min_seconds=min_seconds, min_rounds=min_rounds)
    return {
        "size_mb": size_mb,
        "counts": counts,
        "passes": passes,
        "speeds": {name: [r["mb_per_s"] for r in found] for name, found in runs.items()},
        "seconds": {name: round(sum(r["seconds"] for r in found), 1) for name, found in runs.items()},
    }


def run(megabytes: float = MEGABYTES, min_seconds: float = MIN_SECONDS) -> list[Figure]:
    text = real_text(megabytes)
    figures = []
    for method, candidates in _candidates().items():
        log(
            f"chunking {method}: {len(candidates)} candidates alternated, >= {min_seconds:.0f} s each (about "
            f"{len(candidates) * min_seconds * 1.3:.0f} s)"
        )
        found = measure(candidates, text, min_seconds=min_seconds)
        speeds, counts = found["speeds"], found["counts"]
        log(
            f"chunking {method}: "
            + ", ".join(f"{n} {median(s):.2f} MB/s ({counts[n]} chunks)" for n, s in speeds.items())
        )
        settings = (
            f"{MAX_CHARS} chars, overlap {CHAR_OVERLAP}"
            if method == "maxChars"
            else f"{MAX_TOKENS} cl100k tokens, overlap {TOKEN_OVERLAP}"
        )
        rounds = len(speeds["kindex"])
        notes = (
            f"{found['size_mb']:.1f} MB of real text (SciFact abstracts as Markdown), {settings}; the three "
            f"splitters alternated over {rounds} rounds (order reversed each round), each round "
            f"{', '.join(f'{n} {p}' for n, p in found['passes'].items())} passes, seconds in all "
            f"{found['seconds']}; value = median MB/s, ratio = median of the per-round paired ratios; chunks: "
            + ", ".join(f"{n} {c}" for n, c in counts.items())
        )
        prefix = "maxchars" if method == "maxChars" else "tokens"
        for suffix, reference in (("", "semantic-text-splitter"), ("_vs_langchain", "langchain-text-splitters")):
            paired = paired_ratios(speeds["kindex"], speeds[reference])
            figures.append(
                Figure(
                    f"{prefix}_mb_per_s{suffix}",
                    median(speeds["kindex"]),
                    "MB/s",
                    reference,
                    median(speeds[reference]),
                    ratio=round(median(paired), 4),
                    section="chunking",
                    notes=notes,
                    details={"chunks": counts, "mb_per_s": speeds} if not suffix else {},
                    spread=spread(speeds["kindex"]),
                    ratio_spread=spread(paired),
                )
            )
    return figures
