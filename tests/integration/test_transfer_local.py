"""Export and import of a collection on the local backend, in process: vectors move without being embedded again
when the models match (counted at the embedder), and are re-embedded when they do not."""

import pytest

from kindex.app.embedding import text_sha256
from kindex.app.transfer import imported_vectors_key
from kindex.domain.errors import Conflict, InvalidInput, NotFound
from kindex.domain.models import CollectionInput, DocumentInput, DocumentStatus, PageRequest
from kindex.domain.query import QueryRequest
from kindex.domain.transfer import ImportRequest
from kindex.domain.validation import validated
from kindex_local.deployment import build_worker

pytestmark = pytest.mark.integration

TEXTS = {
    "volcano": "Volcano eruptions send lava down the slopes. " * 4,
    "penguin": "Penguin colonies huddle on the antarctic ice. " * 5,
    "violin": "A violin concerto needs an orchestra and a soloist. " * 3,
}


class CountingEmbeddings:
    """Counts the texts that reach an embedder (the provider call), whatever the cache does."""

    def __init__(self, services):
        self.texts = 0
        original = services.embeddings.embedder_for

        def embedder_for(model):
            embedder = original(model)
            counter = self

            class Counted:
                model = embedder.model
                dimensions = embedder.dimensions

                def embed(self, texts):
                    counter.texts += len(texts)
                    return embedder.embed(texts)

                def embed_queries(self, texts):
                    counter.texts += len(texts)
                    return embedder.embed_queries(texts)

            return Counted()

        services.embeddings.embedder_for = embedder_for


@pytest.fixture
def env(local_container):
    services = local_container
    services.catalog.put_collection("t", "src", CollectionInput(chunking_max_size=60, query_groups=["staff"]))
    for name, text in TEXTS.items():
        services.catalog.put_document(
            "t", "src", name, DocumentInput(content=text, title=name.title(), url=f"https://example.com/{name}")
        )
    build_worker().drain()
    services.counter = CountingEmbeddings(services)
    return services


def export_all(services, tenant, collection, size=4):
    pages, cursor = [], None
    while True:
        page = services.transfer.export_page(tenant, collection, cursor, size)
        pages.append(page)
        cursor = page.next_cursor
        if cursor is None:
            return pages


def import_pages(services, tenant, collection, pages):
    results = []
    for page in pages:
        request = ImportRequest(
            format_version=1,
            embedding_model=page.embedding_model,
            dimensions=page.dimensions,
            chunking=chunking_of(page.collection),
            documents=page.documents,
            chunks=page.chunks,
        )
        results.append(services.transfer.import_batch(tenant, collection, request))
    return results


def chunking_of(collection):
    data = collection.model_dump(mode="json")
    return {name: data[name] for name in ("chunking_method", "chunking_max_size", "chunking_overlap_offset")}


def chunks_of(services, tenant, collection, document):
    return services.catalog.list_chunks(tenant, collection, document, PageRequest(number=1000)).chunks


def ranked(services, tenant, collection, text, mode="hybrid"):
    response = services.query.query(
        tenant, [collection], QueryRequest(query=text, groups=["staff"], k=5, mode=mode), multi=False
    )
    return [(r.document_id, r.content, round(r.score, 5)) for r in response.results]


def test_export_pages_hold_every_indexed_chunk_with_its_cached_vector(env):
    # When the collection is exported four chunks a page
    pages = export_all(env, "t", "src")
    # Then the pages hold each document once, before its chunks, and every chunk with a vector of the model
    documents = [d.id for p in pages for d in p.documents]
    chunks = [c for p in pages for c in p.chunks]
    assert documents == sorted(TEXTS)
    assert len(pages) > 2 and all(len(p.chunks) <= 4 for p in pages)
    for name in TEXTS:
        stored = chunks_of(env, "t", "src", name)
        assert [(c.chunk_id, c.start, c.end, c.text) for c in chunks if c.document_id == name] == [
            (c.chunk_id, c.start, c.end, c.text) for c in stored
        ]
    assert all(c.vector is not None and len(c.vector) == 384 for c in chunks)
    assert pages[0].embedding_model == "hash:384" and pages[0].collection.chunking_max_size == 60
    assert env.counter.texts == 0


def test_round_trip_into_another_collection_and_tenant_embeds_nothing_and_answers_the_same(env):
    # Given the export and two empty collections with the same model (one of them in another tenant)
    pages = export_all(env, "t", "src")
    for tenant, name in (("t", "copy"), ("u", "src")):
        env.catalog.put_collection(tenant, name, CollectionInput(chunking_max_size=60, query_groups=["staff"]))
    # When it is imported into both
    results = import_pages(env, "t", "copy", pages) + import_pages(env, "u", "src", pages)
    build_worker().drain()  # the content blobs' events find the documents current: nothing to do
    # Then no text reached the embedder, and every document is indexed
    assert env.counter.texts == 0
    assert sum(r.texts_embedded for r in results) == 0
    assert sum(r.documents_completed for r in results) == 2 * len(TEXTS)
    for tenant, name in (("t", "copy"), ("u", "src")):
        for document_id in TEXTS:
            document, _ = env.catalog.get_document(tenant, name, document_id)
            assert document.status is DocumentStatus.INDEXED and document.indexed_config_version == 1
            assert document.title == document_id.title() and document.url == f"https://example.com/{document_id}"
            source = chunks_of(env, "t", "src", document_id)
            copied = chunks_of(env, tenant, name, document_id)
            # the chunk viewer shows the same offsets and texts, under the importing tenant's own chunk ids
            assert [(c.index, c.start, c.end, c.page_start, c.text) for c in copied] == [
                (c.index, c.start, c.end, c.page_start, c.text) for c in source
            ]
            # (an import run's own ids, never the exporter's: see import_chunk_id)
            assert len({c.chunk_id for c in copied}) == len(copied)
            assert not {c.chunk_id for c in copied} & {c.chunk_id for c in source}
    # And queries answer the same in every copy
    before = env.counter.texts
    for question in ("penguin antarctic", "orchestra soloist", "lava slopes"):
        assert ranked(env, "t", "copy", question) == ranked(env, "t", "src", question)
        assert ranked(env, "u", "src", question) == ranked(env, "t", "src", question)
    assert env.counter.texts - before == 12  # the questions only: one text per query, four queries each


def test_import_under_another_model_re_embeds_every_text_and_still_finds_the_documents(env):
    # Given the export of a hash:384 collection and a hash:256 collection
    pages = export_all(env, "t", "src")
    env.catalog.put_collection(
        "t", "small", CollectionInput(embedding_model="hash:256", chunking_max_size=60, query_groups=["staff"])
    )
    # When it is imported there
    results = import_pages(env, "t", "small", pages)
    # Then every chunk text went through the embedding service (the embedder saw each distinct text once)
    chunks = [c for p in pages for c in p.chunks]
    assert sum(r.texts_embedded for r in results) == len(chunks)
    assert env.counter.texts == len({c.text for c in chunks})
    # And the new vectors answer queries
    assert ranked(env, "t", "small", "penguin antarctic")[0][0] == "penguin"
    assert env.catalog.get_document("t", "small", "violin")[0].indexed_model == "hash:256"


def test_an_import_that_is_cut_short_leaves_documents_in_progress_and_a_rerun_completes_them(env):
    pages = export_all(env, "t", "src", size=2)
    env.catalog.put_collection("t", "copy", CollectionInput(chunking_max_size=60, query_groups=["staff"]))
    import_pages(env, "t", "copy", pages[:2])
    first = pages[0].documents[0].id
    document, _ = env.catalog.get_document("t", "copy", first)
    assert document.status is DocumentStatus.IN_PROGRESS and 0 < document.chunks_done < document.chunk_count
    import_pages(env, "t", "copy", pages)  # the whole import again: documents are replaced, then completed
    assert env.catalog.get_document("t", "copy", first)[0].status is DocumentStatus.INDEXED
    assert len(chunks_of(env, "t", "copy", first)) == document.chunk_count
    assert env.counter.texts == 0


def test_a_document_still_being_imported_is_never_served(env):
    pages = export_all(env, "t", "src", size=2)
    env.catalog.put_collection("t", "copy", CollectionInput(chunking_max_size=60, query_groups=["staff"]))
    import_pages(env, "t", "copy", pages[:1])
    first = pages[0].documents[0].id
    assert env.catalog.get_document("t", "copy", first)[0].status is DocumentStatus.IN_PROGRESS
    assert ranked(env, "t", "copy", TEXTS[first]) == []


def test_a_rebuild_of_an_imported_document_reads_the_text_its_chunks_cover(env):
    # Given an imported collection whose chunking then changes
    env.catalog.put_collection("t", "copy", CollectionInput(chunking_max_size=60, query_groups=["staff"]))
    import_pages(env, "t", "copy", export_all(env, "t", "src"))
    env.catalog.put_collection("t", "copy", CollectionInput(chunking_max_size=100))
    # When reindex rebuilds it
    env.reindex_jobs.start("t", "copy", clean=False)
    build_worker().drain()
    # Then the documents are indexed again from their content, under the new chunking
    document, content = env.catalog.get_document("t", "copy", "penguin")
    assert document.status is DocumentStatus.INDEXED and document.indexed_config_version == 2
    assert content == TEXTS["penguin"]  # the chunks covered the whole text: it is rebuilt exactly
    assert max(c.end - c.start for c in chunks_of(env, "t", "copy", "penguin")) > 60


def request(**fields):
    body = {
        "format_version": 1,
        "embedding_model": "hash:384",
        "dimensions": 384,
        "documents": [{"id": "d", "chunk_count": 1}],
        "chunks": [
            {"document_id": "d", "index": 0, "start": 0, "end": 5, "text": "hello", "vector": [1.0] + [0.0] * 383}
        ],
    }
    for name, value in fields.items():
        if name.startswith("chunk_"):
            body["chunks"][0][name.removeprefix("chunk_")] = value
        else:
            body[name] = value
    return validated(lambda: ImportRequest.model_validate(body))


@pytest.mark.parametrize(
    "fields, error",
    [
        ({"chunk_vector": [1.0] * 10}, "chunks[0].vector: 10 values"),
        ({"dimensions": 256}, "dimensions"),
        ({"chunk_index": 1}, "chunks[0].index"),
        ({"chunk_document_id": "other"}, "not being imported"),
        ({"documents": [{"id": "..", "chunk_count": 1}]}, "documents[0].id"),
        ({"documents": [{"id": "d", "chunk_count": 1}, {"id": "d", "chunk_count": 1}]}, "twice"),
        ({"documents": [{"id": "d", "chunk_count": 10**5}]}, "chunk_count"),
    ],
)
def test_hostile_batches_are_refused_and_change_nothing(env, fields, error):
    env.catalog.put_collection("t", "copy", CollectionInput())
    with pytest.raises((InvalidInput, Conflict)) as raised:
        env.transfer.import_batch("t", "copy", request(**fields))
    assert error in raised.value.message
    assert env.catalog.list_documents("t", "copy", PageRequest()).documents == []


@pytest.mark.parametrize(
    "fields, error",
    [
        ({"chunk_vector": [float("nan")] * 384}, "finite"),
        ({"chunk_vector": [1e39] * 384}, "finite"),
        ({"chunk_vector": [0.0] * 384}, "all zeros"),
        ({"chunk_vector": [True] * 384}, "vector"),
        ({"chunk_vector": ["0.5"] * 384}, "vector"),
        ({"chunk_end": 6}, "end - start"),
        ({"chunk_page_start": 2}, "page_start and page_end"),
        ({"chunk_index": -1}, "index"),
        (
            {"chunks": [{"document_id": "d", "index": i, "start": 0, "end": 1, "text": "x"} for i in range(1001)]},
            "chunks",
        ),
        ({"format_version": 2}, "format_version"),
        ({"embedding_model": "nope:1"}, "embedding_model"),
    ],
)
def test_malformed_batches_are_invalid_input(fields, error):
    with pytest.raises(InvalidInput) as raised:
        request(**fields)
    assert error in raised.value.message


def test_tenants_and_missing_collections(env):
    with pytest.raises(NotFound):
        env.transfer.export_page("u", "src", None)  # another tenant's collection is missing, like any other
    with pytest.raises(NotFound):
        env.transfer.import_batch("u", "src", request())
    with pytest.raises(InvalidInput):
        env.transfer.export_page("t", "src", "not-a-cursor")


def test_chunks_cut_by_other_rules_are_re_chunked_by_the_next_reindex(env):
    # Given an export of a collection chunked at 60 characters, imported into one that chunks at 100
    env.catalog.put_collection("t", "wide", CollectionInput(chunking_max_size=100, query_groups=["staff"]))
    import_pages(env, "t", "wide", export_all(env, "t", "src"))
    imported, _ = env.catalog.get_document("t", "wide", "penguin")
    assert imported.status is DocumentStatus.INDEXED and imported.indexed_config_version == 0
    # When reindex runs / Then the document is rebuilt under the collection's own chunking
    env.reindex_jobs.start("t", "wide", clean=False)
    build_worker().drain()
    rebuilt, _ = env.catalog.get_document("t", "wide", "penguin")
    assert rebuilt.indexed_config_version == 1 and rebuilt.chunk_count < imported.chunk_count


def test_chunks_imported_without_a_chunking_are_kept_as_they_are_and_never_embedded_again(env):
    # Given an export imported into a collection that chunks at 100 characters, its batches naming no chunking (as
    # chunks made elsewhere, by rules kindex cannot know), with their vectors
    env.catalog.put_collection("t", "own", CollectionInput(chunking_max_size=100, query_groups=["staff"]))
    pages = export_all(env, "t", "src")
    for page in pages:
        request = ImportRequest(
            format_version=1,
            embedding_model=page.embedding_model,
            dimensions=page.dimensions,
            documents=page.documents,
            chunks=page.chunks,
        )
        assert env.transfer.import_batch("t", "own", request).texts_embedded == 0
    given = {name: [(c.index, c.start, c.end, c.text) for c in chunks_of(env, "t", "src", name)] for name in TEXTS}
    # When the content blobs' events and a reindex job have run
    env.reindex_jobs.start("t", "own", clean=False)
    build_worker().drain()
    # Then every document is indexed, current under the collection's config, with the very chunks it was given, and
    # no text reached the embedder
    for name in TEXTS:
        document, _ = env.catalog.get_document("t", "own", name)
        assert document.status is DocumentStatus.INDEXED and document.indexed_config_version == 1
        assert [(c.index, c.start, c.end, c.text) for c in chunks_of(env, "t", "own", name)] == given[name]
    assert env.counter.texts == 0
    # And a clean reindex cuts them by the collection's own rules
    env.reindex_jobs.start("t", "own", clean=True)
    build_worker().drain()
    assert max(c.end - c.start for c in chunks_of(env, "t", "own", "penguin")) > 60


def test_imported_vectors_never_stand_in_for_embeddings(env):
    # Given a tenant that imports a made-up vector for a text nobody has embedded yet
    env.catalog.put_collection("u", "c", CollectionInput(query_groups=["staff"]))
    text = "A sentence no one embedded before."
    bogus = [1.0] + [0.0] * 383
    env.transfer.import_batch(
        "u",
        "c",
        ImportRequest(
            format_version=1,
            embedding_model="hash:384",
            dimensions=384,
            documents=[{"id": "d", "chunk_count": 1}],
            chunks=[{"document_id": "d", "index": 0, "start": 0, "end": len(text), "text": text, "vector": bogus}],
        ),
    )
    # Then no cache holds it as the model's embedding, neither u's nor another tenant's
    assert env.adapters.embedding_cache.get_vectors("u", "hash:384", [text_sha256(text)]) == {}
    assert env.adapters.embedding_cache.get_vectors("t", "hash:384", [text_sha256(text)]) == {}
    # (it is kept apart for u's own exports only)
    assert env.adapters.embedding_cache.get_vectors("u", imported_vectors_key("hash:384"), [text_sha256(text)])
    assert env.adapters.embedding_cache.get_vectors("t", imported_vectors_key("hash:384"), [text_sha256(text)]) == {}
    # And u's own ingest of that text gets the real embedding
    env.catalog.put_collection("u", "other", CollectionInput())
    env.catalog.put_document("u", "other", "d", DocumentInput(content=text))
    build_worker().drain()
    cached = env.adapters.embedding_cache.get_vectors("u", "hash:384", [text_sha256(text)])[text_sha256(text)]
    assert cached.tolist() != bogus


def test_vectors_of_a_remote_model_move_without_building_its_embedder(env):
    # Given an OpenAI-model collection on a deployment whose embedder must not be reached (no provider key)
    def unreachable(model):
        raise AssertionError(f"the embedder of {model} was built")

    env.embeddings.embedder_for = unreachable
    env.catalog.put_collection(
        "t", "remote", CollectionInput(embedding_model="openai:text-embedding-3-small", query_groups=["staff"])
    )
    text = "Vectors made elsewhere."
    # When a batch with its vectors is imported, and the collection exported again
    result = env.transfer.import_batch(
        "t",
        "remote",
        ImportRequest(
            format_version=1,
            embedding_model="openai:text-embedding-3-small",
            dimensions=1536,
            documents=[{"id": "d", "chunk_count": 1}],
            chunks=[
                {
                    "document_id": "d",
                    "index": 0,
                    "start": 0,
                    "end": len(text),
                    "text": text,
                    "vector": [0.0] * 1535 + [1.0],
                }
            ],
        ),
    )
    page = env.transfer.export_page("t", "remote", None)
    # Then neither needed the embedder (the dimensions come from the model's name)
    assert result.texts_embedded == 0 and result.documents_completed == 1
    assert (page.embedding_model, page.dimensions, [d.id for d in page.documents]) == (
        "openai:text-embedding-3-small",
        1536,
        ["d"],
    )
    # And the export carries the imported vector again (kept in the tenant's own namespace of the cache)
    assert page.chunks[0].vector == [0.0] * 1535 + [1.0]
    assert env.adapters.embedding_cache.get_vectors("t", "openai:text-embedding-3-small", [text_sha256(text)]) == {}


def test_an_import_that_must_embed_never_reuses_another_tenants_embedding(env):
    # Given tenant t has indexed a text (its "src" documents), and tenant evil imports that very text under a model
    # whose vectors it does not send
    counter = CountingEmbeddings(env)
    env.catalog.put_collection("evil", "probe", CollectionInput())
    text = TEXTS["violin"]
    # When evil's import has to embed it
    result = env.transfer.import_batch(
        "evil",
        "probe",
        ImportRequest(
            format_version=1,
            embedding_model="hash:16",
            dimensions=16,
            documents=[{"id": "guess", "chunk_count": 1}],
            chunks=[{"document_id": "guess", "index": 0, "start": 0, "end": len(text), "text": text}],
        ),
    )
    # Then the text reached the embedder: t's cached vector did not answer for evil (a cache hit would have told evil,
    # by the import's speed, that someone indexed this exact text)
    assert result.texts_embedded == 1 and counter.texts == 1
    # And a second import of the same text by evil is its own cache hit (never embedded twice for one tenant)
    env.transfer.import_batch(
        "evil",
        "probe",
        ImportRequest(
            format_version=1,
            embedding_model="hash:16",
            dimensions=16,
            documents=[{"id": "again", "chunk_count": 1}],
            chunks=[{"document_id": "again", "index": 0, "start": 0, "end": len(text), "text": text}],
        ),
    )
    assert counter.texts == 1


MARKDOWN = (
    "# Staff handbook\n\n## Leave\n\nEvery employee gets twenty-five days of paid leave a year.\n\n"
    "## Rates\n\n| grade | daily rate |\n| --- | --- |\n"
    + "".join(f"| grade {i} | {100 + i} euros |\n" for i in range(12))
)


def test_sections_and_table_headers_survive_export_and_import(env):
    # Given a Markdown document whose chunks carry heading paths and a table header
    env.catalog.put_collection("t", "md", CollectionInput(chunking_max_size=120, query_groups=["staff"]))
    env.catalog.put_document("t", "md", "handbook", DocumentInput(content=MARKDOWN, mimetype="text/markdown"))
    build_worker().drain()
    source = chunks_of(env, "t", "md", "handbook")
    assert any(c.section for c in source) and any(c.table_header for c in source)
    pages = export_all(env, "t", "md")
    # When it is exported and imported into another tenant with the same model, and into one with another model
    env.catalog.put_collection("u", "md", CollectionInput(chunking_max_size=120, query_groups=["staff"]))
    env.catalog.put_collection(
        "u", "small", CollectionInput(embedding_model="hash:256", chunking_max_size=120, query_groups=["staff"])
    )
    same = import_pages(env, "u", "md", pages)
    other = import_pages(env, "u", "small", pages)
    # Then every chunk keeps its section and table header
    context = [(c.index, c.section, c.table_header) for c in source]
    assert [(c.index, c.section, c.table_header) for c in chunks_of(env, "u", "md", "handbook")] == context
    assert [(c.index, c.section, c.table_header) for c in chunks_of(env, "u", "small", "handbook")] == context
    # And the same model's vectors moved as they were (nothing embedded), and the copy answers as the source does
    assert sum(r.texts_embedded for r in same) == 0
    question = "daily rate of grade 7"
    assert [(d, t) for d, t, _ in ranked(env, "u", "md", question)] == [
        (d, t) for d, t, _ in ranked(env, "t", "md", question)
    ]
    # (hybrid scores carry each tenant's own BM25 statistics, which differ between u and t; cosines do not)
    assert ranked(env, "u", "md", question, "vector") == ranked(env, "t", "md", question, "vector")
    # And the other model embedded each chunk's context with its text, as ingest does
    assert sum(r.texts_embedded for r in other) == len(source)
    response = env.query.query(
        "u", ["small"], QueryRequest(query="Rates grade daily rate", groups=["staff"], mode="keyword"), multi=False
    )
    assert response.results and response.results[0].section and response.results[0].section.endswith("Rates")
    # And a second export of the copy carries the context again
    assert [(c.section, c.table_header) for p in export_all(env, "u", "md") for c in p.chunks] == [
        (c.section, c.table_header) for c in source
    ]
