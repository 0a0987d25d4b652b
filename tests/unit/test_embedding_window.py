"""The window report of a collection (`embedding_window`) and the windowing helpers of the local embedders."""

import numpy as np
import pytest

from kindex.adapters.embedders.windows import length_buckets, pool_windows, split_windows
from kindex.domain.embedding_models import LOCAL_MODELS, parse_embedding_model
from kindex.domain.models import ChunkingMethod, Collection, embedding_window

pytestmark = pytest.mark.unit


def collection(
    model: str, method: ChunkingMethod = ChunkingMethod.MAX_CHARS, size: int = 2000, overlap: int = 0
) -> Collection:
    return Collection(
        id="c", embedding_model=model, chunking_method=method, chunking_max_size=size, chunking_overlap_offset=overlap
    )


@pytest.mark.parametrize(
    ("model", "window"),
    [
        ("local:all-MiniLM-L6-v2", 256),
        ("local:multilingual-e5-small", 512),
        ("openai:text-embedding-3-small", 8191),
        ("local:bge-small-en-v1.5", 512),
        ("local:bge-small-en-v1.5-q", 512),
        ("hash:384", None),
    ],
)
def test_every_model_declares_its_window(model, window):
    assert parse_embedding_model(model).window_tokens == window


def test_every_local_model_is_known_with_its_size():
    for name, local in LOCAL_MODELS.items():
        spec = parse_embedding_model(name)
        assert (spec.family, spec.dimensions, spec.window_tokens) == ("local", local.dimensions, local.window_tokens)


@pytest.mark.parametrize(
    ("model", "method", "size", "exceeds", "long_chunks"),
    [
        # maxChars 2000 is ~500 tokens of English: over MiniLM's 256, within e5's 512
        ("local:all-MiniLM-L6-v2", ChunkingMethod.MAX_CHARS, 2000, True, "pooled"),
        ("local:all-MiniLM-L6-v2", ChunkingMethod.MAX_CHARS, 1024, False, "pooled"),
        ("local:multilingual-e5-small", ChunkingMethod.MAX_CHARS, 2000, False, "pooled"),
        ("local:multilingual-e5-small", ChunkingMethod.TOKENS, 800, True, "pooled"),
        # the local default: the default chunks fit its window (no pooling needed for ordinary English)
        ("local:bge-small-en-v1.5-q", ChunkingMethod.MAX_CHARS, 2000, False, "pooled"),
        ("local:bge-small-en-v1.5", ChunkingMethod.MAX_CHARS, 2000, False, "pooled"),
        ("local:bge-small-en-v1.5", ChunkingMethod.TOKENS, 600, True, "pooled"),
        ("openai:text-embedding-3-small", ChunkingMethod.MAX_CHARS, 100_000, True, "truncated"),
        ("openai:text-embedding-3-small", ChunkingMethod.TOKENS, 8192, True, "truncated"),
        ("openai:text-embedding-3-small", ChunkingMethod.TOKENS, 8191, False, "truncated"),
        ("hash:384", ChunkingMethod.MAX_CHARS, 100_000, False, "none"),
    ],
)
def test_window_report_says_when_chunks_can_exceed_the_window(model, method, size, exceeds, long_chunks):
    report = embedding_window(collection(model, method, size, 0 if method is ChunkingMethod.MAX_CHARS else 100))
    assert (report.exceeds_window, report.long_chunks) == (exceeds, long_chunks)
    assert (report.warning is not None) == exceeds
    if exceeds:
        assert str(report.window_tokens) in report.warning and str(size) in report.warning


def test_window_report_of_a_stored_name_this_version_cannot_parse_is_absent():
    stored = Collection.model_construct(
        id="c",
        embedding_model="local:some-future-model",
        chunking_method=ChunkingMethod.MAX_CHARS,
        chunking_max_size=2000,
    )
    assert embedding_window(stored) is None


def test_split_windows_covers_every_token_once_in_order():
    content = list(range(1000))
    windows = split_windows(content, 254)
    assert [len(w) for w in windows] == [254, 254, 254, 238]
    assert [token for window in windows for token in window] == content
    assert split_windows([], 254) == [[]]
    with pytest.raises(ValueError):
        split_windows(content, 0)


def test_length_buckets_sort_by_length_and_cover_every_index_once():
    lengths = [5, 300, 2, 40, 300, 7, 1]
    batches = length_buckets(lengths, 3)
    assert [list(b) for b in batches] == [[6, 2, 0], [5, 3, 1], [4]]
    assert [list(b) for b in length_buckets(lengths, 3, bucketed=False)] == [[0, 1, 2], [3, 4, 5], [6]]
    with pytest.raises(ValueError):
        length_buckets(lengths, 0)


def test_pooling_is_the_token_weighted_mean_of_windows_then_unit_length():
    # Given text 0 with two windows (3 and 1 tokens) and text 1 with one window
    sums = np.array([[3.0, 0.0], [0.0, 1.0], [2.0, 2.0]], dtype=np.float32)
    tokens = np.array([3, 1, 4])
    owners = np.array([0, 0, 1])
    pooled = pool_windows(sums, tokens, owners, 2)
    # Then text 0 is the mean over its 4 tokens, (3, 1) / 4, normalised; text 1 its own mean, normalised
    np.testing.assert_allclose(pooled[0], np.array([3.0, 1.0]) / np.sqrt(10), rtol=1e-6)
    np.testing.assert_allclose(pooled[1], np.array([1.0, 1.0]) / np.sqrt(2), rtol=1e-6)
    assert pooled.dtype == np.float32


def test_a_new_default_model_leaves_existing_collections_on_theirs():
    from kindex.app.catalog import merge_collection

    # Given a collection created when MiniLM was the default
    old = merge_collection(None, "handbook", {}, "local:all-MiniLM-L6-v2")
    # When the deployment's default becomes e5-small and the old collection is updated (not its model)
    updated = merge_collection(old, "handbook", {"title": "Staff handbook"}, "local:multilingual-e5-small")
    new = merge_collection(None, "wiki", {}, "local:multilingual-e5-small")
    # Then the old one keeps its model (its vectors' partition) and config version; only new ones get the default
    assert (updated.embedding_model, updated.config_version) == ("local:all-MiniLM-L6-v2", old.config_version)
    assert new.embedding_model == "local:multilingual-e5-small"
    assert embedding_window(updated).window_tokens == 256 and embedding_window(new).window_tokens == 512


def test_the_local_default_is_bge_small_int8_and_collections_made_under_minilm_keep_it(tmp_path):
    from kindex.app.catalog import merge_collection
    from kindex.settings import LOCAL_DEFAULT_MODEL, load_settings

    # Given a local deployment with no model configured
    default = load_settings({"KINDEX_BACKEND": "local", "KINDEX_DATA_DIR": str(tmp_path)}).embedding_model
    # Then new collections get bge-small-en-v1.5, and one created under MiniLM keeps MiniLM when it is updated
    assert default == LOCAL_DEFAULT_MODEL == "local:bge-small-en-v1.5-q"
    old = merge_collection(None, "handbook", {}, "local:all-MiniLM-L6-v2")
    updated = merge_collection(old, "handbook", {"title": "Staff handbook"}, default)
    assert updated.embedding_model == "local:all-MiniLM-L6-v2"
    assert merge_collection(None, "wiki", {}, default).embedding_model == "local:bge-small-en-v1.5-q"
    assert embedding_window(merge_collection(None, "wiki", {}, default)).exceeds_window is False
