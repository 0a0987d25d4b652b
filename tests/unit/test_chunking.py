"""Chunking. The maxChars expectations are computed by hand from XWiki's rule (see kindex.text.chunking)."""

from __future__ import annotations

import random
import re
import socket
from pathlib import Path

import pytest

from kindex.domain.errors import InvalidInput
from kindex.domain.types import PageSpan
from kindex.text import chunking
from kindex.text.chunking import TOKEN_ENCODING, chunk_text

pytestmark = pytest.mark.unit

DOCS = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "docs"


def _spans(text: str, max_size: int, overlap: int = 0) -> list[tuple[int, int, str]]:
    return [(c.start, c.end, c.text) for c in chunk_text(text, method="maxChars", max_size=max_size, overlap=overlap)]


# ------------------------------------------------------------------------------ maxChars: end of chunk


def test_cut_before_an_xwiki_heading_rather_than_at_a_later_line_break():
    # Given a "= H =" line at 18 (> 30 // 2) and a later line break at 23
    text = "aaaa bbbb cccc dd\n= H =\neee fff ggg hhh"

    # When / Then the chunk ends where the heading line starts
    assert _spans(text, 30) == [(0, 18, "aaaa bbbb cccc dd\n"), (18, 39, "= H =\neee fff ggg hhh")]


def test_cut_before_an_indented_xwiki_subheading():
    # Given "  == Sub ==" starting at 17 (> 15) and a line break at 28
    text = "alpha beta gamma\n  == Sub ==\nmore words here ok"

    # When / Then
    assert _spans(text, 30) == [(0, 17, "alpha beta gamma\n"), (17, 47, "  == Sub ==\nmore words here ok")]


def test_cut_before_a_markdown_heading():
    # Given "## Part" at 19 (> 15) and a line break at 26
    text = "one two three four\n## Part\nfive six seven"

    # When / Then
    assert _spans(text, 30) == [(0, 19, "one two three four\n"), (19, 41, "## Part\nfive six seven")]


@pytest.mark.parametrize("underline", ["=====", "-----"])
def test_cut_before_a_setext_heading(underline):
    # Given "Title" underlined, starting at 22 (> 36 // 2), and a line break at 33
    text = f"lorem ipsum dolor sit\nTitle\n{underline}\nbody text goes on"

    # When / Then the cut is at the title line, not at the underline or the last line break
    assert _spans(text, 36) == [(0, 22, "lorem ipsum dolor sit\n"), (22, 51, f"Title\n{underline}\nbody text goes on")]


def test_a_heading_in_the_first_half_is_ignored_and_a_separator_is_used():
    # Given "# A" at 8 (not > 10) and a line break at 18
    text = "aaaa bb\n# Ab cc dd\nee ff gg"

    # When / Then the cut falls after the line break
    assert _spans(text, 20) == [(0, 19, "aaaa bb\n# Ab cc dd\n"), (19, 27, "ee ff gg")]


def test_a_heading_exactly_at_half_the_size_is_not_used():
    # Given "# H" at 10 == 20 // 2 (XWiki wants strictly more than half) and a line break at 13
    text = "aaaaaaaaa\n# H\nbbbbbbbb cccc"

    # When / Then the cut falls after that line break instead
    assert _spans(text, 20) == [(0, 14, "aaaaaaaaa\n# H\n"), (14, 27, "bbbbbbbb cccc")]


def test_last_heading_is_the_highest_start_even_inside_a_setext_match():
    # Given a title underlined by "=====" and then "-----": XWiki's greedy `.*` finds the heading that
    # STARTS last, which is the "=====" line (underlined by "-----"), not "Title" (24 vs 18)
    text = "aaaa bbbb cccc dd\nTitle\n=====\n-----\nrest of text"

    # When / Then
    assert _spans(text, 40) == [(0, 24, "aaaa bbbb cccc dd\nTitle\n"), (24, 48, "=====\n-----\nrest of text")]


def test_crlf_setext_heading_is_found_like_java_does():
    # Given CRLF text: Java's `$` matches before "\r", so "Title\r\n-----" is a heading at 19
    text = "aaaa bbbb cccc dd\r\nTitle\r\n-----\r\nbody text goes on"

    # When / Then (Python's plain `$` would miss it and cut after the last "\n", at 33)
    assert _spans(text, 36) == [(0, 19, "aaaa bbbb cccc dd\r\n"), (19, 50, "Title\r\n-----\r\nbody text goes on")]


def test_paragraph_break_wins_over_a_later_line_break():
    # Given "\n\n" at 15 (cut 17 > 14) and a later "\n" at 24
    text = "aaa bbb ccc ddd\n\neee fff\nggg hhh iii"

    # When / Then
    assert _spans(text, 28) == [(0, 17, "aaa bbb ccc ddd\n\n"), (17, 36, "eee fff\nggg hhh iii")]


def test_line_break_wins_over_a_later_sentence_end():
    # Given "\n" at 15 (cut 16 > 14) and ". " at 23
    text = "aaa bbb ccc ddd\neee fff. ggg hhh iii"

    # When / Then
    assert _spans(text, 28) == [(0, 16, "aaa bbb ccc ddd\n"), (16, 36, "eee fff. ggg hhh iii")]


def test_sentence_end_wins_over_a_later_space():
    # Given ". " at 11 (cut 13 > 10) and a later space at 16
    text = "aaa bbb ccc. ddd eee fff ggg"

    # When / Then
    assert _spans(text, 20) == [(0, 13, "aaa bbb ccc. "), (13, 28, "ddd eee fff ggg")]


def test_word_cut_at_the_last_space():
    # Given spaces only, the last one in the window at 11 (cut 12 > 7)
    text = "aaa bbb ccc ddd eee fff"

    # When / Then
    assert _spans(text, 14) == [(0, 12, "aaa bbb ccc "), (12, 23, "ddd eee fff")]


def test_hard_cut_without_any_separator():
    # Given no separator at all
    text = "x" * 25

    # When / Then chunks are exactly max_size long
    assert _spans(text, 10) == [(0, 10, "x" * 10), (10, 20, "x" * 10), (20, 25, "x" * 5)]


def test_hard_cut_when_the_only_separator_is_in_the_first_half():
    # Given a space at 2 (cut 3, not > 5)
    text = "ab cdefghijklmnop"

    # When / Then
    assert _spans(text, 10) == [(0, 10, "ab cdefghi"), (10, 17, "jklmnop")]


def test_text_shorter_than_max_is_one_chunk():
    # When / Then
    assert _spans("= Title =\nshort", 100, 10) == [(0, 15, "= Title =\nshort")]


# ----------------------------------------------------------------------------------- maxChars: overlap


def test_overlap_moves_forward_to_a_separator_near_its_start():
    # Given max 14 and overlap 6 (half 3); every tail has a space at 1, so the next chunk starts 2 later
    text = "aaa bbb ccc ddd eee fff"

    # When / Then: 12-6+2 = 8, then 20-6+2 = 16
    assert _spans(text, 14, 6) == [(0, 12, "aaa bbb ccc "), (8, 20, "ccc ddd eee "), (16, 23, "eee fff")]


def test_overlap_moves_to_a_heading_before_an_earlier_separator():
    # Given chunk 0 cut at the "# K" heading (29), its 12-character tail is "z\n\nb\n# H\nkk\n":
    # "\n\n" at 1 would give 3, but the heading at 5 (< 12 // 2) comes first in XWiki's order
    text = "intro words here z\n\nb\n# H\nkk\n# K\nmore text at the end of it"

    # When / Then the second chunk starts at 29 - 12 + 5 = 22, on the "# H" line
    assert _spans(text, 40, 12) == [
        (0, 29, "intro words here z\n\nb\n# H\nkk\n"),
        (22, 59, "# H\nkk\n# K\nmore text at the end of it"),
    ]


def test_overlap_ignores_a_heading_exactly_at_half_the_overlap():
    # Given chunk 0 cut at the "# K" heading (30), its 13-character tail "z\n\nbb\n# H\nkk\n" has the
    # heading "# H" at 6 == 13 // 2 (not used) and "\n\n" at 1
    text = "intro words here z\n\nbb\n# H\nkk\n# K\nmore text at the end of it"

    # When / Then the blank line decides: the next chunk starts at 30 - 13 + 3 = 20
    assert _spans(text, 40, 13) == [
        (0, 30, "intro words here z\n\nbb\n# H\nkk\n"),
        (20, 60, "bb\n# H\nkk\n# K\nmore text at the end of it"),
    ]


def test_overlap_with_a_heading_and_separators_over_several_chunks():
    # Given max 20, overlap 8 (half 4): chunk 0 ends at the "# B" heading (13); its tail "bb\n# A\n\n" has
    # the heading "# A" at 3; chunk 1 ends after the space at 25; its tail "c dd ee " has a space at 1
    text = "aaaa bb\n# A\n\n# B\ncc dd ee ff gg hh"

    # When / Then: 13-8+3 = 8, then 26-8+2 = 20
    assert _spans(text, 20, 8) == [
        (0, 13, "aaaa bb\n# A\n\n"),
        (8, 26, "# A\n\n# B\ncc dd ee "),
        (20, 34, "dd ee ff gg hh"),
    ]


def test_overlap_without_heading_or_separator_steps_back_exactly_the_overlap():
    # Given no separators: every chunk is a hard cut and the next starts `overlap` before its end
    text = "x" * 30

    # When / Then
    assert [(s, e) for s, e, _ in _spans(text, 10, 4)] == [(0, 10), (6, 16), (12, 22), (18, 28), (24, 30)]


def test_overlap_ignores_a_separator_in_the_second_half_of_the_tail():
    # Given tails "xxxxx yy" whose only space is at 5 (not < 8 // 2)
    text = "xxxxxxxxxxxxx yyyyyyyyyyyyy"

    # When it is chunked with max 16 (half 8) and overlap 8 (half 4)
    spans = _spans(text, 16, 8)

    # Then chunk 0 ends after the space (14 > 8); its tail "xxxxxxx " has the space at 7, not < 4, so the
    # next chunk starts exactly 8 back, at 6; its space gives 8 (not > 8), so it hard-cuts at 22, and the
    # last chunk starts at 22 - 8 = 14
    assert spans == [(0, 14, "xxxxxxxxxxxxx "), (6, 22, "xxxxxxx yyyyyyyy"), (14, 27, "yyyyyyyyyyyyy")]


def test_overlap_ignores_a_separator_exactly_at_half_the_overlap():
    # Given chunk 0 = "aaaaaaaaaaaa bb " (cut after the space at 15), whose 8-character tail "aaaa bb " has its
    # first space at 4 == 8 // 2 (XWiki wants strictly less)
    text = "aaaaaaaaaaaa bb cccccccccccccccc"

    # When / Then the next chunk starts exactly 8 back (16 - 8), then hard cuts follow
    assert _spans(text, 16, 8) == [
        (0, 16, "aaaaaaaaaaaa bb "),
        (8, 24, "aaaa bb cccccccc"),
        (16, 32, "cccccccccccccccc"),
    ]


# ------------------------------------------------------------------------------------ maxChars: output


def test_whitespace_only_chunks_are_skipped_and_indices_stay_contiguous():
    # Given ten "a", twelve "\n" and ten "b": the second window [10, 20) is only line breaks
    text = "a" * 10 + "\n" * 12 + "b" * 10

    # When
    chunks = chunk_text(text, method="maxChars", max_size=10, overlap=0)

    # Then that chunk is dropped and the others are numbered 0, 1, 2
    assert [(c.index, c.start, c.end) for c in chunks] == [(0, 0, 10), (1, 20, 30), (2, 30, 32)]
    assert chunks[1].text == "\n\nbbbbbbbb"


def test_chunks_carry_the_pages_of_their_first_and_last_character():
    # Given three pages starting at 0, 10 and 20
    pages = (PageSpan(0, 1), PageSpan(10, 2), PageSpan(20, 3))
    text = "x" * 30

    # When
    chunks = chunk_text(text, method="maxChars", max_size=15, overlap=0, pages=pages)

    # Then [0, 15) spans pages 1-2 and [15, 30) pages 2-3
    assert [(c.page_start, c.page_end) for c in chunks] == [(1, 2), (2, 3)]
    # And without pages they are None
    assert chunk_text(text, method="maxChars", max_size=15, overlap=0)[0].page_start is None


def test_chunk_ending_exactly_at_a_page_start_stays_on_the_previous_page():
    # Given pages starting at 0 and 10 and a chunk [0, 10)
    chunks = chunk_text("x" * 20, method="maxChars", max_size=10, overlap=0, pages=(PageSpan(0, 1), PageSpan(10, 2)))

    # Then its last character (9) is on page 1
    assert [(c.page_start, c.page_end) for c in chunks] == [(1, 1), (2, 2)]


@pytest.mark.parametrize(
    ("method", "max_size", "overlap"),
    [("maxChars", 0, 0), ("maxChars", 10, -1), ("maxChars", 10, 10), ("tokens", 5, 6), ("sentences", 100, 0)],
)
def test_invalid_parameters_are_invalid_input(method, max_size, overlap):
    # When / Then
    with pytest.raises(InvalidInput):
        chunk_text("some text", method=method, max_size=max_size, overlap=overlap)


def test_maxchars_always_advances_even_when_overlap_exceeds_a_chunk():
    # Given an overlap larger than half of max (XWiki would refuse it) and short chunks
    text = "a b c d e f g h i j k l m n o p q r s t u v w x y z " * 5

    # When
    chunks = chunk_text(text, method="maxChars", max_size=12, overlap=11)

    # Then it terminates with strictly increasing starts that cover the text
    starts = [c.start for c in chunks]
    assert all(b > a for a, b in zip(starts, starts[1:]))
    assert chunks[-1].end == len(text)


# ---------------------------------------------------------------------------- maxChars: property check

_WORDS = ["alpha", "beta", "gamma", "delta", "x", "quite-long-word", "end.", "C#", "a=b", "--", "=="]
_HEADINGS = ["= Title =", "== Sub ==", "  === Deep ===", "# One", "## Two", "Setext\n=====", "Other\n-----"]


def _random_text(rng: random.Random) -> str:
    parts: list[str] = []
    for _ in range(rng.randint(0, 120)):
        roll = rng.random()
        if roll < 0.08:
            parts.append("\n" + rng.choice(_HEADINGS) + "\n")
        elif roll < 0.18:
            parts.append(rng.choice(["\n", "\n\n", "\n\n\n", ". ", "  "]))
        else:
            parts.append(rng.choice(_WORDS) + rng.choice([" ", " ", " ", "", "\n"]))
    return "".join(parts)


@pytest.mark.parametrize("seed", range(200))
def test_maxchars_properties_on_random_text(seed):
    # Given random text of words, separators and headings, and random sizes
    rng = random.Random(seed)
    text = _random_text(rng)
    max_size = rng.randint(10, 120)

    # When it is chunked without overlap
    chunks = chunk_text(text, method="maxChars", max_size=max_size, overlap=0)

    # Then offsets are exact, sizes bounded, starts strictly increasing and indices contiguous
    assert all(c.text == text[c.start : c.end] for c in chunks)
    assert all(0 < len(c.text) <= max_size for c in chunks)
    assert all(b.start > a.start for a, b in zip(chunks, chunks[1:]))
    assert [c.index for c in chunks] == list(range(len(chunks)))
    # And the chunks tile the text: anything between them (or around them) is skipped whitespace
    position = 0
    for chunk in chunks:
        assert chunk.start >= position and not text[position : chunk.start].strip()
        position = chunk.end
    assert not text[position:].strip()

    # When it is chunked again with an overlap below half the size (XWiki's valid range)
    overlap = rng.randint(1, max(1, max_size // 2 - 1))
    overlapping = chunk_text(text, method="maxChars", max_size=max_size, overlap=overlap)

    # Then offsets stay exact, sizes bounded, starts strictly increasing and nothing is lost
    assert all(c.text == text[c.start : c.end] for c in overlapping)
    assert all(len(c.text) <= max_size for c in overlapping)
    assert all(b.start > a.start for a, b in zip(overlapping, overlapping[1:]))
    covered = [False] * len(text)
    for chunk in overlapping:
        covered[chunk.start : chunk.end] = [True] * (chunk.end - chunk.start)
    assert all(covered[i] or text[i].isspace() for i in range(len(text)))


def test_maxchars_fast_path_matches_the_xwiki_pattern():
    # Given random windows with headings; the \n-only fast path must agree with XWiki's greedy regex
    rng = random.Random(7)
    atoms = ["word", "Title", "\n", "\n\n", " ", ". ", "= H =", "== S ==", "# md", "\n=====", "\n-----", "=", "-"]
    for _ in range(2000):
        text = "".join(rng.choice(atoms) for _ in range(rng.randint(1, 30)))
        minimum = rng.randint(0, len(text))
        # When both ways look for the last heading after `minimum`
        fast = chunking._last_heading_start(text, 0, len(text), minimum, True)
        slow = chunking._last_heading_start(text, 0, len(text), minimum, False)
        # Then they agree
        assert fast == slow, (text, minimum)


# --------------------------------------------------------------------------------------------- tokens


@pytest.fixture(scope="module")
def encoding():
    import tiktoken

    return tiktoken.get_encoding(TOKEN_ENCODING)


@pytest.fixture(scope="module")
def prose() -> str:
    return (DOCS / "md" / "eng_spa_mult.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_tokens_chunks_fit_the_token_budget_and_offsets_are_exact(encoding):
    # Given real Markdown documentation
    text = (DOCS / "md" / "pypdf-extract-text.md").read_text(encoding="utf-8")

    # When it is chunked by tokens
    chunks = chunk_text(text, method="tokens", max_size=64, overlap=16)

    # Then no chunk exceeds 64 cl100k tokens, offsets are exact and starts increase
    assert len(chunks) > 10
    assert all(len(encoding.encode(c.text)) <= 64 for c in chunks)
    assert all(c.text == text[c.start : c.end] and c.text.strip() for c in chunks)
    assert all(b.start > a.start for a, b in zip(chunks, chunks[1:]))
    assert [c.index for c in chunks] == list(range(len(chunks)))


def test_tokens_consecutive_chunks_overlap(encoding):
    # Given one long paragraph of prose (the recursive splitter only overlaps inside a paragraph)
    text = " ".join((DOCS / "md" / "docling-wiki-ibm.md").read_text(encoding="utf-8").split())

    # When it is chunked with a 20-token overlap
    chunks = chunk_text(text, method="tokens", max_size=80, overlap=20)

    # Then each chunk starts inside the previous one, sharing about 20 tokens with it
    assert len(chunks) > 5
    for previous, current in zip(chunks, chunks[1:]):
        assert previous.start < current.start < previous.end
        shared = text[current.start : previous.end]
        assert previous.text.endswith(shared) and current.text.startswith(shared)
        assert 0 < len(encoding.encode(shared)) <= 2 * 20


def test_tokens_without_overlap_do_not_overlap(prose):
    # When
    chunks = chunk_text(prose, method="tokens", max_size=80, overlap=0)

    # Then consecutive chunks are disjoint
    assert all(b.start >= a.end for a, b in zip(chunks, chunks[1:]))


def test_tokens_offsets_are_exact_on_repeated_text():
    # Given text made of one sentence repeated, so every chunk's text occurs many times
    text = "The same sentence again. " * 200

    # When
    chunks = chunk_text(text, method="tokens", max_size=30, overlap=5)

    # Then offsets are exact and still move forward through the text
    assert all(c.text == text[c.start : c.end] for c in chunks)
    assert all(b.start > a.start for a, b in zip(chunks, chunks[1:]))
    assert chunks[-1].end >= len(text) - 1


def test_tokens_text_quoting_special_tokens_is_chunked_as_text():
    # Given text about LLMs that quotes a special token literally
    text = "A model emits <|endoftext|> when it is done. " * 20

    # When / Then it is chunked like any other text instead of raising
    chunks = chunk_text(text, method="tokens", max_size=20, overlap=0)
    assert "<|endoftext|>" in chunks[0].text
    assert all(c.text == text[c.start : c.end] for c in chunks)


def test_tokens_chunks_carry_pages(prose):
    # Given the prose split into two "pages" at a paragraph boundary
    middle = prose.index("\n\n", len(prose) // 2) + 2
    pages = (PageSpan(0, 1), PageSpan(middle, 2))

    # When
    chunks = chunk_text(prose, method="tokens", max_size=60, overlap=0, pages=pages)

    # Then each chunk's pages are those of its first and last character
    for chunk in chunks:
        assert chunk.page_start == (1 if chunk.start < middle else 2)
        assert chunk.page_end == (1 if chunk.end - 1 < middle else 2)
    assert {c.page_start for c in chunks} == {1, 2}


def test_token_encoding_loads_offline(monkeypatch, tmp_path):
    # Given an empty tiktoken cache, no splitter built yet and every network connection refused
    import tiktoken.registry

    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    chunking._token_splitter.cache_clear()
    try:
        # When the encoding is loaded and text is chunked by tokens
        encoding = tiktoken.get_encoding(TOKEN_ENCODING)
        chunks = chunk_text("hello world " * 50, method="tokens", max_size=20, overlap=0)
    finally:
        chunking._token_splitter.cache_clear()

    # Then it is the real cl100k_base vocabulary ("hello", " world"), loaded from the bundled file
    assert encoding.encode("hello world") == [15339, 1917]
    assert len(chunks) >= 5


def test_token_splitter_is_built_once_per_size(monkeypatch):
    # Given a cleared cache
    chunking._token_splitter.cache_clear()

    # When the same sizes are used twice and other sizes once
    chunk_text("one two three", method="tokens", max_size=50, overlap=5)
    chunk_text("four five six", method="tokens", max_size=50, overlap=5)
    chunk_text("seven", method="tokens", max_size=40, overlap=5)

    # Then two splitters were built
    assert chunking._token_splitter.cache_info().misses == 2
    assert chunking._token_splitter.cache_info().hits == 1


def test_heading_pattern_is_xwikis():
    # Given XWiki's pattern in Python syntax; Then ours accepts the same headings on \n-only text
    xwiki = re.compile(r"^( *=+[^=\n]|#+|(?:[^\n]*\n(?:=+|-+)$))", re.MULTILINE)
    samples = ["= A =", "  == B", "=x", "#", "### c", "T\n===", "T\n---", "\n---", "==", "a = b", " #", "T\n=-"]
    for sample in samples:
        assert bool(xwiki.match(sample)) == bool(chunking._HEADING_PATTERN.match(sample)), sample
