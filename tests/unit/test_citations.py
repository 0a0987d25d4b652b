"""Citation rendering: `<CIT id />` -> footnotes, as Open Chat Studio does it."""

import pytest

from kindex.app.citations import render_html
from kindex.domain.citations import CitedDocument, render_citations

pytestmark = pytest.mark.unit

DOCS = [CitedDocument("a", "Alpha", "https://a.example/x"), CitedDocument("b", "Beta", "https://b.example"),
        CitedDocument("doc-with-dashes", None, None)]


def test_first_seen_numbering_and_reuse():
    text, refs = render_citations("One <CIT b />. Two <CIT a />. Again <CIT b/>.", DOCS)
    assert text.startswith("One[^1]. Two[^2]. Again[^1].")
    assert [(r.n, r.document_id) for r in refs] == [(1, "b"), (2, "a")]
    assert text.endswith("\n\n[^1]: [Beta](https://b.example)\n[^2]: [Alpha](https://a.example/x)\n")


def test_several_ids_in_one_tag_become_adjacent_footnotes():
    text, _ = render_citations("First <CIT a />. Both <CIT b, a />.", DOCS)
    assert text.startswith("First[^1]. Both[^2][^1].")


def test_unknown_ids_are_dropped_with_the_space_before_them():
    text, refs = render_citations("Fake <CIT zzz />. Real <CIT zzz, a />.", DOCS)
    assert text.startswith("Fake. Real[^1].")
    assert [r.document_id for r in refs] == ["a"]


def test_no_known_citation_means_no_reference_list():
    assert render_citations("Nothing here <CIT nope />.", DOCS) == ("Nothing here.", [])


def test_ids_with_dashes_and_title_fallback_and_whitespace_forms():
    text, refs = render_citations("See <CIT   doc-with-dashes    />", DOCS)
    assert text == "See[^1]\n\n[^1]: doc-with-dashes\n"
    assert refs[0].title == "doc-with-dashes"


def test_adjacent_tags():
    text, _ = render_citations("X<CIT a /><CIT b />", DOCS)
    assert text.startswith("X[^1][^2]")


def test_markdown_breaking_titles_and_urls_are_escaped():
    docs = [CitedDocument("x", "Evil] (title) [x", "https://e.example/a b)c")]
    text, _ = render_citations("Hi <CIT x />", docs)
    assert "[^1]: [Evil\\] (title) \\[x](https://e.example/a%20b%29c)" in text
    html = render_html(text)
    assert 'href="https://e.example/a%20b%29c"' in html and "Evil] (title) [x" in html


def test_pages_are_appended():
    text, _ = render_citations("P <CIT p />", [CitedDocument("p", "Paper", None, pages=(3, 1, 3))])
    assert "[^1]: Paper, pp. 1, 3" in text


def test_html_is_sanitized():
    text, _ = render_citations("<script>alert(1)</script> [x](javascript:alert(1)) <CIT a />", DOCS)
    html = render_html(text)
    assert "<script" not in html and "javascript:" not in html
    assert 'class="footnote-ref"' in html and "https://a.example/x" in html
