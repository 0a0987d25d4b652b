"""The SciFact context study (bench/eval_retrieval.py --context-study): where each layout puts a document's title,
which index each variant's legs come from, and the cache seeding that spares re-embedding."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from bench import eval_retrieval
from kindex.adapters.local.sqlite_db import SqliteDatabase
from kindex.adapters.local.sqlite_embedding_cache import SqliteEmbeddingCache
from kindex.app.ingest import embedded_text
from kindex.domain.types import SearchHit
from kindex.text.chunking import chunk_text

pytestmark = pytest.mark.unit

DOC = {"_id": "1", "title": "Aspirin and platelets", "text": "First sentence. " * 200}


def chunks_of(layout: str):
    """The chunks the ingest makes of DOC under `layout`: the bench's extraction (the title as a heading only in the
    title_context layout), then the chunker with the headings it found."""
    content = eval_retrieval.document_content(DOC, layout)
    titles = {content: DOC["title"]} if layout == eval_retrieval.LAYOUT_TITLE_CONTEXT else {}
    extracted = eval_retrieval.titled_extract(titles)(content.encode(), mimetype="text/plain", filename="content.txt")
    return chunk_text(extracted.text, method="maxChars", max_size=2000, overlap=0, headings=extracted.headings)


def test_inline_puts_the_title_in_the_first_chunk_only_and_no_chunk_has_a_section():
    # Given today's layout (title + text, plain text: no headings)
    chunks = chunks_of(eval_retrieval.LAYOUT_INLINE)
    # Then the title is once in the first chunk's embedded text, and a later chunk has no title at all
    assert len(chunks) >= 2
    assert all(c.section is None for c in chunks)
    assert embedded_text(chunks[0]).count(DOC["title"]) == 1
    assert DOC["title"] not in embedded_text(chunks[1])


def test_title_context_gives_every_chunk_the_title_as_its_section_before_its_text_and_not_in_its_text():
    chunks = chunks_of(eval_retrieval.LAYOUT_TITLE_CONTEXT)
    assert len(chunks) >= 2
    for chunk in chunks:
        assert chunk.section == DOC["title"]
        assert DOC["title"] not in chunk.text  # the returned text (and its offsets) stay the document's own
        assert embedded_text(chunk) == f"{DOC['title']}\n\n{chunk.text}"


def test_bare_has_the_title_nowhere_and_chunks_exactly_as_title_context_does():
    bare, titled = chunks_of(eval_retrieval.LAYOUT_BARE), chunks_of(eval_retrieval.LAYOUT_TITLE_CONTEXT)
    assert all(DOC["title"] not in embedded_text(c) for c in bare)
    # Same content, same cuts: the chunk ids two layouts' legs are combined on are the same chunks
    assert [(c.start, c.end) for c in bare] == [(c.start, c.end) for c in titled]


def test_a_text_the_title_map_does_not_know_gets_no_heading():
    extract = eval_retrieval.titled_extract({"another text": "Another title"})
    assert extract(b"plain words", mimetype="text/plain", filename="content.txt").headings == ()


def hits(*documents: str) -> list[SearchHit]:
    return [SearchHit(f"c{d}", d, "scifact", float(len(documents) - i)) for i, d in enumerate(documents)]


def test_a_variant_takes_its_vector_leg_and_its_keyword_leg_from_the_layouts_it_names():
    import ir_measures

    qrels = [ir_measures.Qrel("q", "good", 1)]
    # Given a layout whose vector leg finds the judged document and another whose keyword leg does
    legs = {
        eval_retrieval.LAYOUT_TITLE_CONTEXT: {"q": (hits("good", "bad"), hits("bad", "good"))},
        eval_retrieval.LAYOUT_BARE: {"q": (hits("bad", "good"), hits("good", "bad"))},
    }
    # When the vector-only variant (vector leg from title_context, keyword leg from bare) is scored
    vector_only = eval_retrieval.variant_scores(legs, "title_context_vector_only", qrels, sweep=False)
    # Then both of its legs rank the judged document first; the keyword-only variant's rank it second
    assert (vector_only["vector"], vector_only["keyword"], vector_only["hybrid"]) == (1.0, 1.0, 1.0)
    keyword_only = eval_retrieval.variant_scores(legs, "title_context_keyword_only", qrels, sweep=False)
    assert keyword_only["vector"] < 1.0 and keyword_only["keyword"] < 1.0
    # And only a train run (sweep) sweeps the keyword weight
    assert "best_keyword_weight" not in keyword_only
    assert "best_keyword_weight" in eval_retrieval.variant_scores(legs, "no_title", qrels, sweep=True)


def test_every_variant_names_two_known_layouts_and_mixes_only_layouts_of_the_same_content():
    for vector_layout, keyword_layout in eval_retrieval.CONTEXT_VARIANTS.values():
        assert {vector_layout, keyword_layout} <= set(eval_retrieval.CONTENT_LAYOUTS)
        if vector_layout != keyword_layout:
            assert eval_retrieval.document_content(DOC, vector_layout) == eval_retrieval.document_content(
                DOC, keyword_layout
            )


def test_seeding_copies_one_models_vectors_once_and_leaves_the_source_untouched(tmp_path: Path):
    # Given a data dir whose cache holds vectors of two models
    source_dir, target_dir = tmp_path / "a", tmp_path / "b"
    source_dir.mkdir()
    target_dir.mkdir()
    cache = SqliteEmbeddingCache(SqliteDatabase(source_dir / "kindex.sqlite3"))
    vector = np.arange(4, dtype=np.float32)
    cache.put_vectors("default", "local:m", {"h1": vector, "h2": vector})
    cache.put_vectors("default", "local:other", {"h3": vector})
    # When a new data dir is seeded from it, twice
    source = source_dir / "kindex.sqlite3"
    assert eval_retrieval.seed_embedding_cache(target_dir, [source, tmp_path / "missing.sqlite3"], "local:m") == 2
    assert eval_retrieval.seed_embedding_cache(target_dir, [source], "local:m") == 0
    # Then the new cache serves that model's vectors, and only those
    seeded = SqliteEmbeddingCache(SqliteDatabase(target_dir / "kindex.sqlite3"))
    found = seeded.get_vectors("default", "local:m", ["h1", "h2"])
    assert set(found) == {"h1", "h2"} and np.array_equal(found["h1"], vector)
    assert seeded.get_vectors("default", "local:other", ["h3"]) == {}
    with sqlite3.connect(source) as conn:
        assert conn.execute("SELECT count(*) FROM tenant_embedding_cache").fetchone()[0] == 3
