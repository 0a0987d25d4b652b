"""Chunks that keep tables and sections (issue 28 items 1 and 2): the table rule of the chunker, heading paths per
format on the real documents of ../shared/data/docs (read in place), and what is embedded for a chunk."""

from __future__ import annotations

from pathlib import Path

import pytest

from kindex.app.ingest import embedded_text
from kindex.domain.types import Heading, TableSpan
from kindex.text.chunking import chunk_text
from kindex.text.extract import extract
from kindex.text.extract.structure import Blocks

pytestmark = pytest.mark.unit

DOCS = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "docs"


def _table_document(rows: int, cell: str = "value", intro: str = "Intro paragraph.") -> tuple[str, TableSpan]:
    blocks = Blocks()
    blocks.paragraph(intro)
    blocks.table([["Name", "Amount", "Note"]] + [[f"row {i}", str(1000 + i), cell] for i in range(rows)])
    blocks.paragraph("Closing paragraph.")
    extracted = blocks.join()
    return extracted.text, extracted.tables[0]


def _row_lines(text: str, table: TableSpan) -> set[tuple[int, int]]:
    """(start, end) of every data row of the table."""
    spans, offset = set(), table.header_end
    for line in text[table.header_end : table.end].split("\n"):
        spans.add((offset, offset + len(line)))
        offset += len(line) + 1
    return spans


@pytest.mark.parametrize("overlap", [0, 40])
def test_a_table_longer_than_a_chunk_is_cut_between_rows_and_each_piece_repeats_the_header(overlap):
    # Given a 60-row table, far longer than a 300-character chunk
    text, table = _table_document(60)

    # When it is chunked with the table rule
    chunks = chunk_text(text, method="maxChars", max_size=300, overlap=overlap, tables=(table,))

    # Then no chunk starts or ends inside a row
    rows = _row_lines(text, table)
    for chunk in chunks:
        for start, end in rows:
            assert not (start < chunk.start < end), (chunk, start, end)
            assert not (start < chunk.end < end), (chunk, start, end)
    # And every chunk that starts past the header carries the header row and separator, which is not in its text
    inside = [c for c in chunks if table.header_end <= c.start < table.end]
    assert len(inside) >= 5
    for chunk in inside:
        assert chunk.table_header == "| Name | Amount | Note |\n| --- | --- | --- |"
        assert chunk.text == text[chunk.start : chunk.end]
        assert not chunk.text.startswith("| Name |")
    # And a chunk that starts before the table carries none (its text holds the header)
    assert chunks[0].start < table.start and chunks[0].table_header is None


def test_a_table_wider_than_a_chunk_cuts_only_rows_that_do_not_fit_and_keeps_the_header():
    # Given a table whose rows are each longer than the chunk
    text, table = _table_document(4, cell="x" * 400)

    # When it is chunked
    chunks = chunk_text(text, method="maxChars", max_size=300, overlap=0, tables=(table,))

    # Then every chunk stays within its size (a row longer than a chunk is cut inside, nothing else is)
    assert all(len(c.text) <= 300 for c in chunks)
    assert "".join(c.text for c in chunks) == text
    # And every piece of a row past the header knows its columns
    assert all(
        c.table_header == "| Name | Amount | Note |\n| --- | --- | --- |"
        for c in chunks
        if table.header_end <= c.start < table.end
    )


def test_without_tables_the_chunks_are_the_xwiki_chunks():
    # Given a text with a Markdown-looking table that extraction did not report (a plain-text file)
    text, table = _table_document(60)

    # When it is chunked without tables, and with
    plain = chunk_text(text, method="maxChars", max_size=300, overlap=0)
    kept = chunk_text(text, method="maxChars", max_size=300, overlap=0, tables=(table,))

    # Then the first are XWiki's cuts, unchanged, and carry no context
    assert all(c.table_header is None and c.section is None for c in plain)
    assert [(c.start, c.end) for c in plain] != [] and plain[0].start == 0
    # (the table rule only moves cuts that fall inside a row: where XWiki cut at a row end, both agree)
    assert {c.end for c in kept} & {c.end for c in plain}


def test_sections_follow_the_heading_levels():
    # Given headings of three levels
    text = "# Guide\n\nintro\n\n## Install\n\nsteps\n\n### Linux\n\napt\n\n## Use\n\nrun it\n"
    headings = tuple(
        Heading(start=text.index(marker), level=level, title=title)
        for marker, level, title in (
            ("# Guide", 1, "Guide"),
            ("## Install", 2, "Install"),
            ("### Linux", 3, "Linux"),
            ("## Use", 2, "Use"),
        )
    )

    # When chunked into small chunks
    chunks = chunk_text(text, method="maxChars", max_size=12, overlap=0, headings=headings)

    # Then each chunk has the path of the headings it starts under, a new heading replacing its level and below
    by_start = {c.text.split()[0]: c.section for c in chunks}
    assert by_start["intro"] == "Guide"
    assert by_start["apt"] == "Guide > Install > Linux"
    assert by_start["run"] == "Guide > Use"


@pytest.mark.slow
def test_the_tokens_method_gets_sections_and_table_headers_too():
    text, table = _table_document(200)
    chunks = chunk_text(
        text,
        method="tokens",
        max_size=100,
        overlap=0,
        tables=(table,),
        headings=(Heading(start=0, level=1, title="Report"),),
    )
    assert all(c.section == "Report" for c in chunks)
    assert any(c.table_header for c in chunks)


def test_the_embedded_text_is_section_and_header_then_text_and_the_text_alone_without_them():
    text, table = _table_document(60)
    chunks = chunk_text(
        text,
        method="maxChars",
        max_size=300,
        overlap=0,
        tables=(table,),
        headings=(Heading(start=0, level=1, title="Report"),),
    )
    inside = next(c for c in chunks if c.table_header)
    assert embedded_text(inside) == f"Report\n\n{inside.table_header}\n\n{inside.text}"
    plain = chunk_text("just text", method="maxChars", max_size=300, overlap=0)[0]
    assert embedded_text(plain) == "just text"  # unchanged: its cached vector still serves it


def _sections(relative: str, max_size: int = 2000) -> list:
    extracted = extract((DOCS / relative).read_bytes(), mimetype=None, filename=Path(relative).name)
    return extracted, chunk_text(
        extracted.text,
        method="maxChars",
        max_size=max_size,
        overlap=0,
        pages=extracted.pages,
        headings=extracted.headings,
        tables=extracted.tables,
    )


@pytest.mark.slow
def test_docx_heading_styles_give_sections():
    extracted, chunks = _sections("docx/handbook-872p.docx")
    assert any(h.level == 3 and h.title == "1. CONFLICTS OF INTEREST" for h in extracted.headings)
    surety = next(c for c in chunks if "sufficiency of the surety" in c.text)
    assert surety.section.endswith("E. SURETY BONDS")
    assert surety.section.startswith("CHAPTER 2")


@pytest.mark.slow
def test_html_headings_give_sections():
    extracted, chunks = _sections("html/wiki_duck.html", max_size=1000)
    assert [h.title for h in extracted.headings[:3]] == ["Duck", "Etymology", "Taxonomy"]
    salford = next(c for c in chunks if "University of Salford" in c.text)
    assert salford.section == "Duck > Behaviour > Communication"


def test_markdown_headings_give_sections_and_code_comments_do_not():
    extracted, chunks = _sections("md/pypdf-extract-text.md", max_size=800)
    titles = [h.title for h in extracted.headings]
    assert "extract only text oriented up" not in titles  # a `#` comment inside a code block
    assert "Can we just always use OCR?" in titles
    # A chunk's section is the one it starts under
    ocr = next(h for h in extracted.headings if h.title == "Can we just always use OCR?")
    after = [c for c in chunks if c.start >= ocr.start]
    assert after[0].section == "Extract Text from a PDF > OCR vs. Text Extraction > Can we just always use OCR?"


def test_markdown_front_matter_is_skipped_and_tables_are_found():
    extracted, chunks = _sections("md/opensearch-approximate-knn.md")
    assert extracted.headings[0].title == "Approximate k-NN search"
    assert extracted.headings[0].level == 1
    table = extracted.tables[0]
    assert extracted.text[table.start : table.header_end].startswith("`size`")
    assert extracted.text[table.end - len("8 | 2") : table.end] == "8 | 2"


@pytest.mark.slow
def test_pdf_outline_entries_give_sections():
    extracted, chunks = _sections("pdf/pdflatex-outline.pdf", max_size=500)
    assert [h.title for h in extracted.headings][:3] == ["Foo", "Foo", "Bar"] or {
        h.title for h in extracted.headings
    } == {"Foo", "Bar", "Baz"}
    assert all(h.level == 1 for h in extracted.headings)
    assert all(
        extracted.text.startswith(h.title, h.start) or h.start in {p.start for p in extracted.pages}
        for h in extracted.headings
    )
    assert {c.section for c in chunks} >= {"Foo", "Bar", "Baz"}


@pytest.mark.slow
def test_a_pdf_without_outline_has_no_sections():
    extracted, chunks = _sections("pdf/federal-register-2020-17221.pdf")
    assert extracted.headings == ()
    assert all(c.section is None for c in chunks)


def test_a_docx_table_cell_is_in_a_chunk_with_its_row():
    # Given the sample's food table
    extracted, chunks = _sections("docx/docling-word_sample.docx", max_size=120)
    # Then the row of berries is whole in one chunk, and a chunk continuing the table knows the column names
    assert any("| Berries | Blueberry, Strawberry, Cranberry | 150 |" in c.text for c in chunks)
    assert any(c.table_header and "Calories per portion" in c.table_header for c in chunks)


def test_a_markdown_file_over_the_structure_limit_is_read_as_plain_text():
    from kindex.text.extract import ExtractLimits

    # Given Markdown with headings, and a limit below its size
    data = b"# Title\n\ntext\n\n## Part\n\nmore\n"
    small = ExtractLimits(markdown_structure_max_chars=10)
    # Then its text is the same, without headings: the parse that finds them is bounded
    assert extract(data, mimetype="text/markdown", filename="x.md", limits=small).headings == ()
    assert [h.title for h in extract(data, mimetype="text/markdown", filename="x.md").headings] == ["Title", "Part"]


def test_hostile_markdown_inline_runs_cost_no_inline_parse():
    import time

    # Given 1 MB of "[" (the inline pass is quadratic-prone on it; headings and tables need only the block pass)
    started = time.process_time()
    extracted = extract(b"[" * 1_000_000, mimetype="text/markdown", filename="x.md")
    # Then it is read without headings in well under the time the inline pass took (minutes on 2 MB)
    assert extracted.headings == () and time.process_time() - started < 20
