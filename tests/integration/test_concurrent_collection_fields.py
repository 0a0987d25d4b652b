"""Concurrent writes of one collection never lose each other's fields, on SQLite and on DynamoDB (moto).

Every committed write bumps the collection record's `revision`; every update is conditional on the revision it read,
and a writer that finds the record changed reads it again and applies only its own change on top. The written
records therefore form one chain: revisions follow each other without a gap, and each record is its predecessor with
exactly that write's change. `config_version` keeps its meaning: a chunking or model change bumps it (once per such
write), a title or access change never does. A model switch takes part in the same chain: it neither undoes a PUT
nor is undone by one, and it does not happen over a record that changed model or configuration since it was judged.
"""

from __future__ import annotations

import pytest

from kindex.domain.errors import Conflict
from kindex.domain.models import COLLECTION_CONFIG_FIELDS, Collection, CollectionInput, DocumentInput
from tests.integration.test_ingest_aws import Deployment, deploy  # noqa: F401 (the moto deployment fixture)
from tests.integration.test_linearizable_writes_aws import atomic_requests  # noqa: F401 (atomic moto requests)
from tests.support.together import run_together

pytestmark = pytest.mark.integration

WRITERS = 16
ROUNDS = 6
FIELDS = ("title", "document_spaces", "query_groups", "allow_guests", "chunking_max_size", "chunking_overlap_offset")


def start_fields(tenant: str, round_: int) -> dict:
    return {
        "title": f"{tenant}-start-{round_}",
        "document_spaces": [],
        "query_groups": [f"{tenant}-start"],
        "allow_guests": round_ % 2 == 1,
        "chunking_max_size": 200,
        "chunking_overlap_offset": 0,
    }


def writer_value(field: str, tenant: str, round_: int, writer: int):
    """A value of the writer's own, different from the start and from every other writer's (allow_guests has two
    values: every writer of it flips the start)."""
    return {
        "title": f"{tenant}-r{round_}-w{writer}",
        "document_spaces": [f"{tenant}-space-{writer}"],
        "query_groups": [f"{tenant}-group-{round_}-{writer}"],
        "allow_guests": round_ % 2 == 0,
        "chunking_max_size": 300 + writer,
        "chunking_overlap_offset": 1 + writer,
    }[field]


def write_together(catalog, writes: list[tuple[str, dict]]) -> list:
    """Each (tenant, fields) PUT of collection "c" from its own thread, all released by one barrier; returns what each
    PUT returned (the collection) or raised."""
    return run_together(
        [
            lambda t=tenant, f=fields: catalog.put_collection(t, "c", CollectionInput(**f))[0]
            for tenant, fields in writes
        ]
    )


def assert_one_chain(start: Collection, written: list[Collection], changed: list[dict], final: Collection) -> None:
    """The written records, in revision order, follow `start` one revision at a time, each being its predecessor with
    exactly its own write's fields changed, and `config_version` bumped by one exactly when that write changed a
    chunking field; `final` (read afterwards) is the last of them."""
    order = sorted(range(len(written)), key=lambda i: written[i].revision)
    assert [written[i].revision for i in order] == list(range(start.revision + 1, start.revision + 1 + len(written)))
    previous = start
    for i in order:
        bumps = any(changed[i][name] != getattr(previous, name) for name in COLLECTION_CONFIG_FIELDS & set(changed[i]))
        expected = previous.model_copy(
            update={
                **changed[i],
                "revision": previous.revision + 1,
                "config_version": previous.config_version + bumps,
                "updated_at": written[i].updated_at,
            }
        )
        assert written[i] == expected, (i, changed[i])
        previous = written[i]
    assert final.model_copy(update={"document_count": 0}) == previous


def sixteen_writers_round(catalog, tenants: list[str], round_: int, field_of) -> None:
    """One round: WRITERS PUTs of collection "c" at the same instant, spread over `tenants` (same collection id),
    each setting `field_of(writer)` to a value of its own; then every change is checked to be present."""
    starts = {
        tenant: catalog.put_collection(tenant, "c", CollectionInput(**start_fields(tenant, round_)))[0]
        for tenant in tenants
    }
    writes = []
    for i in range(WRITERS):
        tenant = tenants[i % len(tenants)]
        field = field_of(i // len(tenants))
        writes.append((tenant, {field: writer_value(field, tenant, round_, i)}))
    # When all of them PUT at once
    outcomes = write_together(catalog, writes)
    # Then every PUT succeeded (none lost a race for good)
    assert all(isinstance(o, Collection) for o in outcomes), outcomes
    for tenant in tenants:
        mine = [i for i in range(WRITERS) if writes[i][0] == tenant]
        final = catalog.get_collection(tenant, "c")
        # And every field that was written holds the value of one of its own tenant's writers: none kept its start
        # value (a revoked or replaced group never comes back), none has another tenant's value
        for name in {name for i in mine for name in writes[i][1]}:
            assert getattr(final, name) in [writes[i][1][name] for i in mine if name in writes[i][1]], (tenant, name)
        # And config_version moved once per chunking write, never for the others
        chunking_writes = sum(1 for i in mine if COLLECTION_CONFIG_FIELDS & set(writes[i][1]))
        assert final.config_version == starts[tenant].config_version + chunking_writes
        # And each change was applied on top of all the earlier ones: one chain of revisions, nothing lost
        assert_one_chain(starts[tenant], [outcomes[i] for i in mine], [writes[i][1] for i in mine], final)


def each_writer_its_field(writer: int) -> str:
    return FIELDS[writer % len(FIELDS)]


def every_writer_the_groups(writer: int) -> str:
    return "query_groups"


# SQLite (the local backend)
def test_sixteen_writers_of_different_fields_all_land(local_container):
    for round_ in range(ROUNDS):
        sixteen_writers_round(local_container.catalog, ["t"], round_, each_writer_its_field)


def test_sixteen_writers_of_the_same_field_make_one_chain(local_container):
    for round_ in range(ROUNDS):
        sixteen_writers_round(local_container.catalog, ["t"], round_, every_writer_the_groups)


def test_two_tenants_with_the_same_collection_id_never_mix(local_container):
    for round_ in range(ROUNDS):
        sixteen_writers_round(local_container.catalog, ["t", "u"], round_, each_writer_its_field)


class AfterRead:
    """Wraps the catalog's collection store: runs `hook()` once, just after the first read of a collection (the
    read a PUT merges into), so that another write commits between that read and the PUT's commit."""

    def __init__(self, inner, hook):
        self.inner, self.hook, self.fired = inner, hook, False

    def get_collection(self, tenant, collection_id):
        found = self.inner.get_collection(tenant, collection_id)
        if not self.fired:
            self.fired = True
            self.hook()
        return found

    def __getattr__(self, name):
        return getattr(self.inner, name)


def put(services, tenant="t", **fields) -> Collection:
    return services.catalog.put_collection(tenant, "c", CollectionInput(**fields))[0]


def put_between_read_and_commit(services, hook, **fields) -> Collection:
    """A PUT of `fields` whose read is followed by `hook()` (another write) before it commits."""
    catalog = services.catalog
    store = catalog.collections
    catalog.collections = AfterRead(store, hook)
    try:
        return put(services, **fields)
    finally:
        assert catalog.collections.fired
        catalog.collections = store


@pytest.mark.parametrize(
    "first, second",
    [
        ({"title": "Handbook"}, {"chunking_max_size": 500}),
        ({"chunking_max_size": 500}, {"title": "Handbook"}),
        ({"query_groups": []}, {"chunking_overlap_offset": 10}),
        ({"chunking_method": "tokens"}, {"allow_guests": True}),
    ],
)
def test_a_put_racing_a_config_change_keeps_both_and_bumps_config_version_once(local_container, first, second):
    # Given a collection at config_version 1
    start = put(local_container, title="start", query_groups=["staff"])
    assert start.config_version == 1
    # When `first` commits between `second`'s read and its commit
    written = put_between_read_and_commit(local_container, lambda: put(local_container, **first), **second)
    # Then the stored collection has both changes, and config_version moved once: for the chunking change only
    stored = local_container.adapters.metadata.get_collection("t", "c")
    for name, value in {**first, **second}.items():
        assert getattr(stored, name) == value, name
    assert (stored.config_version, stored.revision) == (2, start.revision + 2)
    assert written.model_copy(update={"document_count": 0}) == stored


def test_a_put_racing_a_put_that_changes_nothing_of_the_config_leaves_config_version(local_container):
    start = put(local_container, title="start")
    put_between_read_and_commit(
        local_container, lambda: put(local_container, query_groups=["a", "b"]), title="Handbook", allow_guests=True
    )
    stored = local_container.adapters.metadata.get_collection("t", "c")
    assert (stored.title, stored.allow_guests, stored.query_groups) == ("Handbook", True, ["a", "b"])
    assert (stored.config_version, stored.revision) == (start.config_version, start.revision + 2)


# Model switches
@pytest.fixture
def switching(local_container) -> tuple:
    """A collection with an indexed document whose model was just changed (hash:384 -> hash:256), and the document
    indexed under the new model too: the record the reindex would find complete, and switch."""
    services = local_container
    put(services, chunking_max_size=200, query_groups=["staff"])
    document, _ = services.catalog.put_document("t", "c", "d", DocumentInput(content="The leave policy: 25 days."))
    services.ingest.object_created(document.source)
    changed = put(services, embedding_model="hash:256")
    assert changed.switching and changed.query_model == "hash:384" and changed.config_version == 2
    services.ingest.object_created(services.adapters.metadata.get_document("t", "c", "d").source)
    return services, services.adapters.metadata.get_collection("t", "c")


def test_a_put_that_commits_before_a_switch_is_kept_by_it(switching):
    services, judged = switching
    # Given the reindex judged the switching collection complete, and a PUT that revokes a group commits after that
    put(services, query_groups=[], title="Handbook")
    # When the switch commits over the record it judged
    services.model_switch.switch("t", judged)
    # Then the new model is the query model, and the PUT's change stays (the revoked group does not come back)
    stored = services.adapters.metadata.get_collection("t", "c")
    assert (stored.query_model, stored.switching) == ("hash:256", False)
    assert (stored.query_groups, stored.title, stored.config_version) == ([], "Handbook", judged.config_version)
    assert stored.revision == judged.revision + 2
    # And the old model's vectors are gone
    assert services.adapters.search_index.chunk_ids("hash:384", "t", "c") == set()


def test_a_switch_that_commits_between_a_puts_read_and_commit_is_kept_by_it(switching):
    services, judged = switching
    # When the switch commits between a PUT's read and its commit
    written = put_between_read_and_commit(services, lambda: services.model_switch.switch("t", judged), query_groups=[])
    # Then the PUT applied its groups on top of the switched record: the query model is the new one (the PUT did
    # not write the old one back, whose vectors the switch deleted)
    stored = services.adapters.metadata.get_collection("t", "c")
    assert (stored.query_model, stored.switching, stored.query_groups) == ("hash:256", False, [])
    assert stored.config_version == judged.config_version and stored.revision == judged.revision + 2
    assert written.query_model == "hash:256"
    assert services.adapters.search_index.chunk_ids("hash:256", "t", "c")


@pytest.mark.parametrize("change", [{"embedding_model": "hash:128"}, {"chunking_max_size": 300}])
def test_a_switch_does_not_happen_over_a_model_or_config_change_since_it_was_judged(switching, change):
    services, judged = switching
    # Given the model or the chunking changed again after the reindex judged the collection complete
    put(services, **change)
    # When the switch comes / Then it does not switch: the documents are not complete under the new configuration
    services.model_switch.switch("t", judged)
    stored = services.adapters.metadata.get_collection("t", "c")
    assert (stored.query_model, stored.switching, stored.config_version) == ("hash:384", True, 3)
    for name, value in change.items():
        assert getattr(stored, name) == value
    # And the old model's vectors, which queries still use, are kept
    assert services.adapters.search_index.chunk_ids("hash:384", "t", "c")


def test_switching_twice_does_nothing_the_second_time(switching):
    services, judged = switching
    services.model_switch.switch("t", judged)
    switched = services.adapters.metadata.get_collection("t", "c")
    services.model_switch.switch("t", judged)
    assert services.adapters.metadata.get_collection("t", "c") == switched


# Creates and deletes
def test_a_create_that_finds_the_collection_created_meanwhile_is_a_conflict(local_container):
    # When another PUT creates the collection between a creating PUT's read (nothing) and its commit
    with pytest.raises(Conflict):
        put_between_read_and_commit(
            local_container, lambda: put(local_container, title="first"), title="second", query_groups=["x"]
        )
    # Then the first one's collection stands, untouched (as before revisions: a create never merges into another)
    stored = local_container.adapters.metadata.get_collection("t", "c")
    assert (stored.title, stored.query_groups, stored.revision) == ("first", [], 1)


def test_a_put_racing_a_delete_is_refused_until_the_deletion_ends_then_creates_afresh(local_container):
    from kindex_local.deployment import build_worker

    # Given a collection with groups, a chunking of its own and a document, deleted between a PUT's read and its
    # commit
    put(local_container, query_groups=["staff"], chunking_max_size=500, title="old")
    local_container.catalog.put_document("t", "c", "d1", DocumentInput(content="old text"))
    catalog = local_container.catalog
    store = catalog.collections
    catalog.collections = AfterRead(store, lambda: catalog.delete_collection("t", "c"))
    # When the PUT commits / Then it is refused (409) while the delete job runs: creating the collection now would
    # show the old documents again
    with pytest.raises(Conflict, match="being deleted"):
        catalog.put_collection("t", "c", CollectionInput(title="new"))
    catalog.collections = store
    assert local_container.adapters.metadata.get_collection("t", "c") is None
    # When the job has run / Then the same PUT creates a fresh collection with only its fields: nothing of the
    # deleted one comes back
    build_worker().drain()
    written, created = catalog.put_collection("t", "c", CollectionInput(title="new"))
    stored = local_container.adapters.metadata.get_collection("t", "c")
    assert created and written.model_copy(update={"document_count": 0}) == stored
    assert (stored.title, stored.query_groups, stored.chunking_max_size, stored.revision, stored.config_version) == (
        "new",
        [],
        2000,
        1,
        1,
    )
    assert local_container.adapters.metadata.list_documents("t", "c", after=None, offset=0, limit=None) == []


def test_a_refused_change_is_not_retried_and_writes_nothing(local_container):
    # Given a collection / When a PUT asks for an external rights check without the tenant's secret / Then the
    # refusal (Conflict naming the secret route) ends the write at once, and nothing changed
    start = put(local_container, title="start")
    with pytest.raises(Conflict, match="secret"):
        put(
            local_container,
            title="never",
            rights_check_method="external",
            rights_check_method_configuration={"url": "https://rights.example/check"},
        )
    assert local_container.adapters.metadata.get_collection("t", "c") == start.model_copy(update={"document_count": 0})


# DynamoDB (the AWS backend, moto)
@pytest.fixture
def aws(deploy, atomic_requests) -> Deployment:  # noqa: F811
    return deploy()


def test_sixteen_writers_of_different_fields_all_land_on_dynamodb(aws):
    for round_ in range(3):
        sixteen_writers_round(aws.services.catalog, ["t", "u"], round_, each_writer_its_field)


def test_a_put_racing_a_config_change_keeps_both_on_dynamodb(aws):
    services = aws.services
    start = put(services, title="start", query_groups=["staff"])
    put_between_read_and_commit(services, lambda: put(services, chunking_max_size=500), query_groups=[])
    stored = services.adapters.metadata.get_collection("t", "c")
    assert (stored.query_groups, stored.chunking_max_size, stored.config_version, stored.revision) == (
        [],
        500,
        start.config_version + 1,
        start.revision + 2,
    )
