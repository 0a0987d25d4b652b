"""No input produces a 5xx: random and hostile bodies, ids and query strings against every route of the server."""

import json
import random

import pytest

pytestmark = pytest.mark.e2e

VALUES = [None, True, 0, -1, 10**12, 1.5, "", "x", "x" * 5000, "ü\u202e\x00", [], [1, "a"], {}, {"a": {"b": []}}]
FIELDS = [
    "title",
    "content",
    "query",
    "k",
    "mode",
    "filters",
    "groups",
    "user",
    "filename",
    "mimetype",
    "clean",
    "text",
    "documents",
    "query_id",
    "collections",
    "embedding_model",
    "chunking_method",
    "chunking_max_size",
    "chunking_overlap_offset",
    "query_groups",
    "allow_guests",
    "rights_check_method",
    "size",
    "rights_check_method_configuration",
    "document_spaces",
    "language",
    "url",
    "min_score",
    "bogus",
]
IDS = ["c", "%00", "%2e%2e", "a%20b", "%F0%9F%98%80", "x" * 300, "%ZZ", "%C3%28"]
ROUTES = [
    ("PUT", "/v1/collections/{id}"),
    ("GET", "/v1/collections/{id}"),
    ("DELETE", "/v1/collections/{id}"),
    ("GET", "/v1/collections"),
    ("PUT", "/v1/collections/c/documents/{id}"),
    ("GET", "/v1/collections/c/documents/{id}"),
    ("POST", "/v1/collections/c/documents/{id}/upload"),
    ("GET", "/v1/collections/c/documents/{id}/chunks"),
    ("POST", "/v1/collections/{id}/query"),
    ("POST", "/v1/query"),
    ("POST", "/v1/citations"),
    ("POST", "/v1/collections/{id}/reindex"),
    ("GET", "/v1/jobs/{id}"),
    ("GET", "/v1/collections/c/documents"),
    ("PATCH", "/v1/collections/c"),
]


def test_random_requests_never_get_5xx(server):
    admin = server.session(server.admin_key)
    admin.put(server.url("/v1/collections/c"), json={"allow_guests": True})
    rng = random.Random(20261130)
    for _ in range(400):
        method, template = rng.choice(ROUTES)
        path = template.format(id=rng.choice(IDS))
        body = {rng.choice(FIELDS): rng.choice(VALUES) for _ in range(rng.randint(0, 4))}
        data = json.dumps(body) if rng.random() < 0.8 else rng.choice(["{", "[]", "null", '"s"', "\xff"])
        query = rng.choice(["", "?start=-5", "?number=x", "?cursor=%00", "?start=1&number=1"])
        response = admin.request(method, server.url(path + query), data=data.encode("utf-8", "surrogatepass"))
        assert response.status_code < 500, (method, path, data[:200], response.status_code, response.text[:300])
        if response.status_code >= 400:
            assert set(response.json()) == {"error", "message"}, response.text


HOSTILE_BODIES = [
    "[" * 10_000 + "]" * 10_000,
    '{"title": ' + "{" * 5_000 + "}" * 5_000 + "}",
    '{"k": 1, "k": 2}',
    '{"k": NaN}',
    '{"min_score": Infinity}',
    '{"chunking_max_size": -Infinity}',
    '{"k": 1e999}',
    '{"chunking_max_size": ' + "9" * 4000 + "}",
    '{"k": ' + "9" * 5000 + "}",
    '{"k": "5"}',
    '{"k": true}',
    '{"k": 5.0}',
    '{"query": "q", "k": 5.0}',
    '{"content": "a\\ud800"}',
    '{"embedding_model": "local:foo"}',
    '{"pages": [1e400]}',
    '{"documents": [{"document_id": "d", "pages": ["1"]}], "text": "x"}',
    '"' + '\\"' * 100_000,
]
HOSTILE_QUERIES = [
    "?start=" + str(2**63),
    "?number=" + str(2**63),
    "?number=-1",
    "?number=1001",
    "?number=0",
    "?start=" + "9" * 5000,
    "?cursor=" + "A" * 9000,
    "?start=1e3",
    "?number=5.0",
]


def test_hostile_shapes_never_get_5xx(server):
    admin = server.session(server.admin_key)
    admin.put(server.url("/v1/collections/c"), json={"allow_guests": True})
    rng = random.Random(20261201)
    for method, template in ROUTES:
        for body in HOSTILE_BODIES:
            path = template.format(id=rng.choice(IDS)) + rng.choice(HOSTILE_QUERIES)
            response = admin.request(
                method, server.url(path), data=body.encode("utf-8"), headers={"Content-Type": "application/json"}
            )
            assert response.status_code < 500, (method, path, body[:80], response.status_code, response.text[:300])
            if response.status_code >= 400:
                assert set(response.json()) == {"error", "message"}, response.text
