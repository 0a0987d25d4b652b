"""Which key role may call which route: the table the handler and server tests check every route against.

Every route of the API is in it (a handler test compares it with the OpenAPI document), so a new route cannot
ship without a decision here. README "API keys" shows the same table."""

WRITE, READ, QUERY = {"admin"}, {"admin", "reader"}, {"admin", "reader", "query"}
C, D = "/v1/collections/c", "/v1/collections/c/documents"
ROUTE_ROLES = {
    ("GET", "/v1/collections"): READ,
    ("GET", "/v1/collections/{collection}"): READ,
    ("PUT", "/v1/collections/{collection}"): WRITE,
    ("DELETE", "/v1/collections/{collection}"): WRITE,
    ("GET", "/v1/collections/{collection}/documents"): READ,
    ("GET", "/v1/collections/{collection}/documents/{document}"): READ,
    ("PUT", "/v1/collections/{collection}/documents/{document}"): WRITE,
    ("DELETE", "/v1/collections/{collection}/documents/{document}"): WRITE,
    ("POST", "/v1/collections/{collection}/documents/{document}/upload"): WRITE,
    ("GET", "/v1/collections/{collection}/documents/{document}/chunks"): READ,
    ("POST", "/v1/collections/{collection}/reindex"): WRITE,
    ("GET", "/v1/jobs/{job}"): READ,
    ("GET", "/v1/usage"): READ,
    ("POST", "/v1/rights-check-secret"): WRITE,
    ("POST", "/v1/collections/{collection}/query"): QUERY,
    ("POST", "/v1/query"): QUERY,
    ("POST", "/v1/citations"): QUERY,
    ("GET", "/v1/collections/{collection}/export"): READ,
    ("POST", "/v1/collections/{collection}/import"): WRITE,
}
# One concrete request per route; `{role}` makes each role's destructive call aim at its own target.
REQUESTS = {
    ("GET", "/v1/collections"): ("/v1/collections", None),
    ("GET", "/v1/collections/{collection}"): (C, None),
    ("PUT", "/v1/collections/{collection}"): ("/v1/collections/new-{role}", {"title": "x"}),
    ("DELETE", "/v1/collections/{collection}"): ("/v1/collections/gone-{role}", None),
    ("GET", "/v1/collections/{collection}/documents"): (D, None),
    ("GET", "/v1/collections/{collection}/documents/{document}"): (D + "/d", None),
    ("PUT", "/v1/collections/{collection}/documents/{document}"): (D + "/new-{role}", {"content": "new text"}),
    ("DELETE", "/v1/collections/{collection}/documents/{document}"): (D + "/gone-{role}", None),
    ("POST", "/v1/collections/{collection}/documents/{document}/upload"): (
        D + "/up-{role}/upload",
        {"filename": "f.txt", "size": 5},
    ),
    ("GET", "/v1/collections/{collection}/documents/{document}/chunks"): (D + "/d/chunks", None),
    ("POST", "/v1/collections/{collection}/reindex"): (C + "/reindex", {"clean": False}),
    ("GET", "/v1/jobs/{job}"): ("/v1/jobs/{job}", None),
    ("GET", "/v1/usage"): ("/v1/usage", None),
    ("POST", "/v1/rights-check-secret"): ("/v1/rights-check-secret", {}),
    ("POST", "/v1/collections/{collection}/query"): (C + "/query", {"query": "leave policy"}),
    ("POST", "/v1/query"): ("/v1/query", {"query": "leave policy", "collections": ["c"]}),
    ("POST", "/v1/citations"): ("/v1/citations", {"text": "Leave is 25 days.", "documents": [{"document_id": "d"}]}),
    ("GET", "/v1/collections/{collection}/export"): (C + "/export", None),
    ("POST", "/v1/collections/{collection}/import"): (
        C + "/import",
        {
            "format_version": 1,
            "embedding_model": "hash:384",
            "dimensions": 384,
            "documents": [{"id": "imported", "chunk_count": 1}],
            "chunks": [{"document_id": "imported", "index": 0, "start": 0, "end": 4, "text": "text"}],
        },
    ),
}
ROLES = ("admin", "reader", "query")
