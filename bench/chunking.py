"""Chunking speed (MB/s of UTF-8 input) on 5 MB of real text, beside semantic-text-splitter and
langchain-text-splitters on the same input and settings.

The text: SciFact abstracts (read in place) shaped as Markdown documents (title heading, paragraphs).
- maxChars (1000 characters, overlap 100) vs semantic-text-splitter `TextSplitter(1000, overlap=100)` and
  langchain `RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=100)`.
- tokens (256 cl100k tokens, overlap 32) vs semantic-text-splitter `TextSplitter.from_tiktoken_model(
  "gpt-3.5-turbo", 256, overlap=32)` (cl100k) and langchain `from_tiktoken_encoder` with the same encoding
  (kindex's tokens method is that splitter plus exact offsets, so this reference shows the offset cost).
"""

from __future__ import annotations

from bench.common import Figure, log, median, real_text, timed

MEGABYTES = 5.0
REPEATS = 3
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
                chunk_size=MAX_CHARS, chunk_overlap=CHAR_OVERLAP).split_text(text),
        },
        "tokens": {
            "kindex": lambda text: chunk_text(text, method="tokens", max_size=MAX_TOKENS, overlap=TOKEN_OVERLAP),
            "semantic-text-splitter": lambda text: TextSplitter.from_tiktoken_model(
                "gpt-3.5-turbo", MAX_TOKENS, overlap=TOKEN_OVERLAP).chunks(text),
            "langchain-text-splitters": lambda text: RecursiveCharacterTextSplitter.from_tiktoken_encoder(
                encoding_name=TOKEN_ENCODING, chunk_size=MAX_TOKENS, chunk_overlap=TOKEN_OVERLAP,
                disallowed_special=()).split_text(text),
        },
    }


def run(megabytes: float = MEGABYTES, repeats: int = REPEATS) -> list[Figure]:
    text = real_text(megabytes)
    size_mb = len(text.encode("utf-8")) / 1_000_000
    figures = []
    for method, candidates in _candidates().items():
        speeds, counts = {}, {}
        for name, split in candidates.items():
            counts[name] = len(split(text[:50_000]))  # warm up (imports, tokenizer load)

            def split_all(name: str = name, split=split, counts: dict[str, int] = counts) -> None:
                counts[name] = len(split(text))

            seconds = [timed(split_all) for _ in range(repeats)]
            speeds[name] = size_mb / median(seconds)
        log(f"chunking {method}: " + ", ".join(f"{n} {s:.2f} MB/s ({counts[n]} chunks)" for n, s in speeds.items()))
        settings = (f"{MAX_CHARS} chars, overlap {CHAR_OVERLAP}" if method == "maxChars"
                    else f"{MAX_TOKENS} cl100k tokens, overlap {TOKEN_OVERLAP}")
        notes = (f"{size_mb:.1f} MB of real text (SciFact abstracts as Markdown), {settings}, median of {repeats}; "
                 "chunks: " + ", ".join(f"{n} {c}" for n, c in counts.items()))
        prefix = "maxchars" if method == "maxChars" else "tokens"
        figures.append(Figure(f"{prefix}_mb_per_s", speeds["kindex"], "MB/s", "semantic-text-splitter",
                              speeds["semantic-text-splitter"], section="chunking", notes=notes,
                              details={"chunks": counts}))
        figures.append(Figure(f"{prefix}_mb_per_s_vs_langchain", speeds["kindex"], "MB/s", "langchain-text-splitters",
                              speeds["langchain-text-splitters"], section="chunking", notes=notes))
    return figures
