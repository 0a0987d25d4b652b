"""Billable usage per tenant: the events services meter (MetricsRecorder.meter) and the fields each usage record
carries, which the monthly billing query of docs/aws.md ("Reading a month's usage per tenant") sums."""

from __future__ import annotations

EMBEDDING_TOKENS = "EmbeddingTokens"  # tokens sent to a provider that bills by token (OpenAI), cache misses only
EMBEDDED_TEXTS = "EmbeddedTexts"  # texts embedded (any model; cache hits are not embedded and not metered)
CHUNKS_WRITTEN = "ChunksWritten"  # chunks of a document indexed by ingest, or written by an import
QUERIES = "Queries"  # queries answered
RIGHTS_CHECK_CALLS = "RightsCheckCalls"  # calls to a tenant's external rights endpoint
USAGE_EVENTS = (EMBEDDING_TOKENS, EMBEDDED_TEXTS, CHUNKS_WRITTEN, QUERIES, RIGHTS_CHECK_CALLS)

# The fields of a usage record besides the metric itself: a billing job sums QUANTITY by TENANT and USAGE.
TENANT = "tenant"
USAGE = "usage"
QUANTITY = "usage_quantity"
