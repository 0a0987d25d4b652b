"""The keyword half of the embedded index: the FTS5 schema (contentless where SQLite allows) and the query
building (words quoted so no query text is FTS syntax, stopwords left out)."""

from __future__ import annotations

import re

CONTENTLESS_DELETE_MIN_SQLITE = (3, 43, 0)
# Bounds the FTS5 expression size for pathological inputs; a longer query still matches on its first terms.
MAX_QUERY_TERMS = 64
_WORD = re.compile(r"\w+")

META_SCHEMA = """
CREATE TABLE IF NOT EXISTS chunk (
    rowid INTEGER PRIMARY KEY,
    model TEXT NOT NULL, tenant TEXT NOT NULL, collection TEXT NOT NULL,
    chunk_id TEXT NOT NULL, document_id TEXT NOT NULL, language TEXT, mimetype TEXT,
    UNIQUE (model, tenant, collection, chunk_id)
);
CREATE INDEX IF NOT EXISTS chunk_by_document ON chunk (model, tenant, collection, document_id);
"""
CONTENTLESS_SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS chunk_fts USING fts5(
    text, content='', contentless_delete=1, tokenize='unicode61 remove_diacritics 2');
"""
EXTERNAL_CONTENT_SCHEMA = """
CREATE TABLE IF NOT EXISTS chunk_text (rowid INTEGER PRIMARY KEY, text TEXT NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS chunk_fts USING fts5(
    text, content='chunk_text', content_rowid='rowid', tokenize='unicode61 remove_diacritics 2');
"""


# Lucene's classic English stop set. They carry almost no BM25 weight, yet OR-ing them in makes FTS5 score
# nearly every chunk: leaving them out of the query keeps keyword search proportional to the rare terms.
STOPWORDS = frozenset("a an and are as at be but by for if in into is it no not of on or such that the their then "
                      "there these they this to was will with".split())


def fts_query(query: str) -> str | None:
    """An FTS5 MATCH expression for free text: each word quoted (so AND/OR/NOT/NEAR, `*`, `^`, `:`, `-`, quotes
    and parentheses are plain text, never syntax), OR-ed like a BM25 `match` query, stopwords left out unless the
    query has nothing else. None when there is no word."""
    words = list(dict.fromkeys(_WORD.findall(query)))
    terms = ([w for w in words if w.lower() not in STOPWORDS] or words)[:MAX_QUERY_TERMS]
    if not terms:
        return None
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
