"""bench.model_vectors caches sentence vectors in fixed blocks, so any count reads the same files (real hash
embedder, real SciFact text read in place, a temporary cache folder)."""

import numpy as np
import pytest

MODEL = "hash:32"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KINDEX_BENCH_CACHE", str(tmp_path))
    return tmp_path


def test_sentences_are_whole_cached_blocks_whatever_the_count(cache):
    from bench import model_vectors

    block = model_vectors.EMBEDDED_SENTENCES
    texts = model_vectors.sentence_texts(block + 5)
    asked = model_vectors.sentences(block + 5, MODEL)
    assert asked.shape == (block + 5, 32)
    files = sorted(cache.iterdir())
    assert len(files) == 2 and not any("partial" in f.name for f in files)  # two whole blocks, no leftovers
    # Row i is sentence i embedded alone: the same as embedding the texts in one list.
    assert np.allclose(asked, model_vectors.embedded(texts, MODEL))
    assert len(list(cache.iterdir())) == 3
    # A shorter prefix is a slice of the first block's file, never another embedding.
    assert np.array_equal(model_vectors.sentences(7, MODEL), asked[:7])
    assert len(list(cache.iterdir())) == 3
    with pytest.raises(ValueError, match="real sentences"):
        model_vectors.sentences(len(model_vectors.sentence_texts()) + 1, MODEL)


def test_scifact_queries_are_the_real_questions_sliced_from_one_cached_embedding(cache):
    from bench import model_vectors

    texts = model_vectors.scifact_query_texts()
    assert len(texts) == 1109 and texts[0] == "0-dimensional biomaterials lack inductive properties."
    few = model_vectors.scifact_queries(5, MODEL)
    assert np.array_equal(few, model_vectors.scifact_queries(1109, MODEL)[:5])
    assert len(list(cache.iterdir())) == 1
    with pytest.raises(ValueError, match="SciFact queries"):
        model_vectors.scifact_queries(1110, MODEL)
