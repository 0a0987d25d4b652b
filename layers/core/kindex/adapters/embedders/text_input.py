"""What every embedder does to a text before its tokenizer or provider sees it."""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")


def encodable(text: str) -> str:
    """The text with its surrogates read as UTF-16 would read them: a high surrogate followed by a low one is the
    character the pair encodes, any other (a lone surrogate, e.g. from `surrogateescape` decoding) is U+FFFD.

    A Python string may hold lone surrogates, but UTF-8 cannot: the Rust tokenizers reject such a string (MiniLM's
    with a `TypeError`), the HTTP client cannot encode it for OpenAI and a C engine cannot take it. Valid text comes
    back unchanged (the same object), so its vectors do not change."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
