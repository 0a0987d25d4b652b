"""An in-process OpenSearch test double that plugs into opensearch-py at the connection level.

`OpenSearchDouble().client()` returns a real `opensearchpy.OpenSearch` whose `connection_class` is
`DoubleConnection`: the real client code (helpers.bulk, query params, serialisation, error mapping) builds
every HTTP request, and `DoubleConnection.perform_request` answers it in memory instead of opening a socket.

Every request is checked before it is executed:
- its body against the OpenSearch REST API spec (/work/shared/data/opensearch-api-spec, validated with that
  folder's own `validate_request_body.py`, imported by path), bulk NDJSON action lines included;
- its query parameter names and values against the same operation's spec parameters;
- a failure answers 400 like OpenSearch would and is also appended to `spec_violations`, so a fixture can
  assert the list is empty and the test fails loudly even when an adapter swallows the error.

Semantics implemented (only what the kindex adapter uses; anything else answers 400 so gaps are loud):
indices create / exists / delete / get_alias / refresh / get and put mapping (new properties added, a changed
type refused), aliases given at create time, bulk index/create/delete
with per-action routing, delete_by_query (on the last refreshed snapshot, like the real point-in-time search,
with version conflicts), and search with `query`, `size`, `from`, `_source`, `sort`, `search_after`.
Queries: bool (must/filter/should/must_not), term, terms, range (gt/gte/lt/lte, keyword fields compared in
code point order, which is Lucene's UTF-8 byte order), prefix (keyword), ids, match, match_all, match_none, each
on the stored `_source` values (a field absent from a document, or unmapped, matches no term, range or prefix -
so the attribute and access-list clauses of kindex.adapters.aws.opensearch_filters are interpreted, not
re-implemented, and tests/contract/test_search_filters_opensearch.py holds the double to the node and to
kindex.domain.filters' reference), and a top-level knn with an
efficient `filter` (applied before the k nearest are chosen; exact scoring with the OpenSearch score formula of
the mapping's space: l2 1/(1+d^2); faiss innerproduct 1+dot if dot>=0 else 1/(1-dot); cosinesimil (1+cos)/2).
`match` is BM25 (k1=1.2, b=0.75) over lowercase runs of letters and digits (close to the adapter's
`kindex_text` analyzer without its diacritic folding; not the standard analyzer, which keeps "budget's" as one
token), with corpus statistics over the whole index. Filter-only clauses score 0. The double is stricter than
OpenSearch where that protects us: a bulk write to a missing index fails instead of auto-creating an unmapped
index, and a `knn_vector` mapping needs `index.knn: true`.
Routing as OpenSearch does it (compared with a real node in tests/contract/test_opensearch_double.py): a
document lives on the shard that murmur3(routing, else _id) selects (`number_of_routing_shards` and
`routing_partition_size` included); `_id` is unique per shard, so the same `_id` under two routing values that
land on one shard is one document; a request's `routing` is a comma-separated list, and the request searches the
shards its values select and sees every document there, whatever its routing.
Visibility: writes reach search only after a refresh (`refresh=true|wait_for` or _refresh).
Every request is recorded in `requests` (method, path, params, parsed body) so tests can assert batching.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import importlib.util
import itertools
import json
import math
import os
import pickle
import re
import tempfile
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import unquote

import yaml
from opensearchpy import OpenSearch
from opensearchpy.connection import Connection
from opensearchpy.exceptions import ConnectionError as OpenSearchConnectionError

SHARED_DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
SPEC_DIR = SHARED_DATA / "opensearch-api-spec"
# AWS OpenSearch Service offers 2.19; validate against the spec merged for that version.
SPEC_FILE = SPEC_DIR / "build" / "opensearch-openapi-2.19.0.yaml"
SPEC_ID = "urn:os-spec"

BM25_K1 = 1.2
BM25_B = 0.75
MAX_KNN_K = 10_000
_TOKEN = re.compile(r"[^\W_]+")
_INVALID_INDEX_CHARS = set('\\/*?"<>| ,#:')


class DoubleError(Exception):
    """An OpenSearch-style error response: HTTP status, error type and reason."""

    def __init__(self, status: int, error_type: str, reason: str):
        super().__init__(f"{status} {error_type}: {reason}")
        self.status = status
        self.error_type = error_type
        self.reason = reason

    def body(self) -> dict[str, Any]:
        cause = {"type": self.error_type, "reason": self.reason}
        return {"error": {"root_cause": [cause], **cause}, "status": self.status}


# -- spec validation ---------------------------------------------------------------------------------------------


def _import_by_path(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, f"cannot import {path}"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_spec(spec_file: Path) -> Any:
    """The parsed spec. Parsing the 2.6 MB YAML takes ~2.5 s a process (each pytest worker pays it), so the result
    is kept as a pickle in the user's cache folder, named by the SHA-256 of the YAML it came from: a changed spec
    is parsed again, and a cache file is only ever read by the user who wrote it (owner-only folder)."""
    text = spec_file.read_bytes()
    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kindex-tests"
    cached = folder / f"{spec_file.stem}-{hashlib.sha256(text).hexdigest()[:32]}.pickle"
    try:
        if cached.stat().st_uid == os.getuid() and folder.stat().st_mode & 0o077 == 0:
            return pickle.loads(cached.read_bytes())
    except Exception:  # missing, or unreadable (another Python, a damaged file): parse the YAML again
        pass
    spec = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
        with tempfile.NamedTemporaryFile(dir=folder, suffix=".partial", delete=False) as handle:
            partial = Path(handle.name)
            try:
                handle.write(pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL))
            except BaseException:
                partial.unlink(missing_ok=True)
                raise
        os.replace(partial, cached)  # whole or not at all, whichever worker writes last
    except OSError:
        pass  # a read-only home: parse every time
    return spec


class SpecChecker:
    """Validates request bodies and query parameters against the OpenSearch API spec.

    Uses the spec folder's `validate_request_body.py` (its `body_schema_ref` and the jsonschema/referencing
    classes it imports) the same way its `main()` does, but keeps the 2.6 MB spec loaded once per process.
    """

    def __init__(self, spec_file: Path = SPEC_FILE):
        self._tool = _import_by_path("opensearch_validate_request_body", SPEC_DIR / "validate_request_body.py")
        self.spec = _load_spec(spec_file)
        resource = self._tool.Resource.from_contents(self.spec, default_specification=self._tool.DRAFT202012)
        self._registry = self._tool.Registry().with_resource(SPEC_ID, resource)
        self._validators: dict[str, Any] = {}
        self._action_cache: dict[str, list[str]] = {}

    def _validator(self, ref: str) -> Any:
        if ref not in self._validators:
            self._validators[ref] = self._tool.Draft202012Validator({"$ref": ref}, registry=self._registry)
        return self._validators[ref]

    @staticmethod
    def _format(errors: Any, where: str = "") -> list[str]:
        return [
            f"{where}{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message[:200]}"
            for e in sorted(errors, key=lambda e: list(e.absolute_path))
        ]

    def body_errors(self, method: str, template: str, body: Any) -> list[str]:
        """Spec errors of a JSON body, or of NDJSON lines (a list) for bulk-style endpoints."""
        ref, content_type = self._tool.body_schema_ref(self.spec, method, template)
        if content_type != "application/x-ndjson":
            return self._format(self._validator(ref).iter_errors(body))
        # As validate_request_body.py does: the bulk item schema accepts anything, so only the action lines are
        # checked, against OperationContainer; a delete action has no source line after it.
        action = self._validator(f"{SPEC_ID}#/components/schemas/_core.bulk___OperationContainer")
        errors: list[str] = []
        line = 0
        while line < len(body):
            errors += [f"[line {line}] {error}" for error in self._action_errors(action, body[line])]
            op = next(iter(body[line]), None) if isinstance(body[line], dict) else None
            line += 1 if op == "delete" else 2
        return errors

    def _action_errors(self, validator: Any, line: Any) -> list[str]:
        """Errors of one bulk action line, memoised by its shape: lines differing only in the free-form string
        values `_id`, `_index` and `routing` validate alike (validating 1,000s of lines costs seconds)."""
        shape = line
        if isinstance(line, dict) and len(line) == 1:
            ((op, meta),) = line.items()
            if isinstance(meta, dict):
                shape = {
                    op: {
                        key: (
                            type(value).__name__
                            if key in ("_id", "_index", "routing") and isinstance(value, str)
                            else value
                        )
                        for key, value in meta.items()
                    }
                }
        key = json.dumps(shape, sort_keys=True)
        if key not in self._action_cache:
            self._action_cache[key] = self._format(validator.iter_errors(line))
        return self._action_cache[key]

    def param_errors(self, method: str, template: str, params: dict[str, str]) -> list[str]:
        """Unknown query parameters, or values their spec schema rejects (URL values are strings)."""
        operation = self.spec["paths"][template][method.lower()]
        known: dict[str, Any] = {}
        for entry in operation.get("parameters", []):
            parameter = entry
            if "$ref" in entry:
                parameter = self.spec["components"]["parameters"][entry["$ref"].split("/")[-1]]
            if parameter.get("in") == "query":
                known[parameter["name"]] = entry.get("$ref")
        errors = []
        for name, value in params.items():
            if name not in known:
                errors.append(f"unknown query parameter [{name}] for {method} {template}")
                continue
            if known[name] is None:
                continue
            validator = self._validator(f"{SPEC_ID}{known[name]}/schema")
            candidates: list[Any] = [value]
            if value in ("true", "false"):
                candidates.append(value == "true")
            if re.fullmatch(r"-?\d+", value):
                candidates.append(int(value))
            if not any(validator.is_valid(candidate) for candidate in candidates):
                errors.append(f"query parameter [{name}={value}] does not match the spec for {method} {template}")
        return errors


@functools.lru_cache(maxsize=1)
def spec_checker() -> SpecChecker:
    """The process-wide checker (loading the spec takes a couple of seconds)."""
    return SpecChecker()


# -- storage -----------------------------------------------------------------------------------------------------


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86 32-bit as a signed int, as Lucene's `StringHelper.murmurhash3_x86_32` computes it."""
    c1, c2, mask = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF

    def mix(k: int) -> int:
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        return (k * c2) & mask

    h = seed & mask
    whole = len(data) // 4 * 4
    for i in range(0, whole, 4):
        h ^= mix(int.from_bytes(data[i : i + 4], "little"))
        h = ((h << 13) | (h >> 19)) & mask
        h = (h * 5 + 0xE6546B64) & mask
    if len(data) > whole:
        h ^= mix(int.from_bytes(data[whole:], "little"))
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & mask
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & mask
    h ^= h >> 16
    return h - (1 << 32) if h & 0x80000000 else h


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def routing_hash(value: str) -> int:
    """OpenSearch's `Murmur3HashFunction.hash(String)`: murmur3 over the UTF-16LE code units."""
    return murmur3_32(value.encode("utf-16-le"))


def default_routing_shards(number_of_shards: int) -> int:
    """The default `index.number_of_routing_shards`: number_of_shards * 2^k up to 1024, at least one split."""
    return number_of_shards << max(1, 10 - (number_of_shards - 1).bit_length())


@dataclass
class StoredDoc:
    id: str
    routing: str | None
    source: dict[str, Any]
    seq_no: int
    shard: int = 0


@dataclass
class IndexState:
    name: str
    settings: dict[str, Any]
    properties: dict[str, dict[str, Any]]
    source_excludes: list[str]
    dynamic: str
    routing_required: bool = False
    # Keyed by (shard, _id): `_id` is unique per shard.
    live: dict[tuple[int, str], StoredDoc] = field(default_factory=dict)
    searchable: dict[tuple[int, str], StoredDoc] = field(default_factory=dict)

    @property
    def number_of_shards(self) -> int:
        return int(self.settings.get("number_of_shards", 1))

    @property
    def routing_shards(self) -> int:
        return int(self.settings.get("number_of_routing_shards", default_routing_shards(self.number_of_shards)))

    @property
    def partition_size(self) -> int:
        return int(self.settings.get("routing_partition_size", 1))

    def _scaled(self, hash_value: int) -> int:
        return (hash_value % self.routing_shards) // (self.routing_shards // self.number_of_shards)

    def shard(self, routing: str | None, doc_id: str) -> int:
        """OpenSearch's `OperationRouting.generateShardId`: with a routing partition, the _id picks one of the
        `routing_partition_size` shards next to the routing value's."""
        if routing is None:
            return self._scaled(routing_hash(doc_id))
        offset = routing_hash(doc_id) % self.partition_size if self.partition_size > 1 else 0
        return self._scaled(_int32(routing_hash(routing) + offset))

    def search_shards(self, routing: str) -> set[int]:
        """The shards a search with this routing value visits (all of its partition)."""
        base = routing_hash(routing)
        return {self._scaled(_int32(base + offset)) for offset in range(self.partition_size)}

    def refresh(self) -> None:
        self.searchable = dict(self.live)

    def stored_source(self, doc: StoredDoc) -> dict[str, Any]:
        """`_source` as OpenSearch keeps it: the mapping's `_source.excludes` are dropped at index time."""
        return {
            key: value
            for key, value in doc.source.items()
            if not any(fnmatch.fnmatchcase(key, pattern) for pattern in self.source_excludes)
        }


@dataclass
class RecordedRequest:
    """One request as the client sent it; `body` is parsed JSON, or a list of NDJSON lines."""

    method: str
    path: str
    params: dict[str, str]
    body: Any


def _flatten_settings(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten_settings(value, name + "."))
        else:
            flat[name.removeprefix("index.")] = value
    return flat


def _truthy(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


def tokens(text: str) -> list[str]:
    """The double's analyzer: lowercase word tokens."""
    return _TOKEN.findall(text.lower())


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


# -- query evaluation --------------------------------------------------------------------------------------------


class _Evaluator:
    """Matches and scores query clauses against the documents of one index."""

    def __init__(self, index: IndexState):
        self.index = index
        self._stats: dict[str, tuple[int, float, Counter]] = {}
        # terms lists can hold thousands of ids: build each lookup set once per request, not once per document.
        self._term_sets: dict[int, tuple[list[Any], set[str]]] = {}

    def _field_type(self, name: str) -> str | None:
        return self.index.properties.get(name, {}).get("type")

    def _text_stats(self, name: str) -> tuple[int, float, Counter]:
        if name not in self._stats:
            docs = [tokens(str(doc.source.get(name) or "")) for doc in self.index.searchable.values()]
            frequency: Counter = Counter()
            for doc_tokens in docs:
                frequency.update(set(doc_tokens))
            average = (sum(map(len, docs)) / len(docs)) if docs else 0.0
            self._stats[name] = (len(docs), average, frequency)
        return self._stats[name]

    def evaluate(self, query: dict[str, Any], doc: StoredDoc) -> tuple[bool, float]:
        if not isinstance(query, dict) or len(query) != 1:
            raise DoubleError(400, "parsing_exception", "a query clause must be an object with one key")
        ((kind, spec),) = query.items()
        handler = getattr(self, f"_q_{kind}", None)
        if handler is None:
            raise DoubleError(400, "parsing_exception", f"the double does not implement query [{kind}]")
        return handler(spec, doc)

    def _q_match_all(self, spec: dict[str, Any], doc: StoredDoc) -> tuple[bool, float]:
        return True, 1.0

    def _q_match_none(self, spec: dict[str, Any], doc: StoredDoc) -> tuple[bool, float]:
        return False, 0.0

    def _single_field(self, kind: str, spec: Any) -> tuple[str, Any]:
        fields = {key: value for key, value in spec.items() if key not in ("boost", "_name")}
        if len(fields) != 1:
            raise DoubleError(400, "parsing_exception", f"[{kind}] query must name exactly one field")
        return next(iter(fields.items()))

    def _values_of(self, doc: StoredDoc, name: str) -> list[Any]:
        values = _as_list(doc.source.get(name))
        if self._field_type(name) == "text":
            return [token for value in values for token in tokens(str(value))]
        return values

    def _q_term(self, spec: dict[str, Any], doc: StoredDoc) -> tuple[bool, float]:
        name, value = self._single_field("term", spec)
        if isinstance(value, dict):
            value = value.get("value")
        if self._field_type(name) == "boolean":
            # Like OpenSearch, a boolean field's term is true/false, given as a JSON boolean or its string.
            wanted = value if isinstance(value, bool) else str(value).lower() == "true"
            return any(stored is wanted for stored in self._values_of(doc, name)), 1.0
        return value in self._values_of(doc, name), 1.0

    def _q_prefix(self, spec: dict[str, Any], doc: StoredDoc) -> tuple[bool, float]:
        name, value = self._single_field("prefix", spec)
        if isinstance(value, dict):
            value = value.get("value")
        if self._field_type(name) != "keyword" or not isinstance(value, str):
            raise DoubleError(400, "query_shard_exception", "the double implements [prefix] on keyword fields")
        # A code point prefix is a UTF-8 byte prefix, which is what Lucene's prefix over the term bytes tests.
        return any(isinstance(stored, str) and stored.startswith(value) for stored in self._values_of(doc, name)), 1.0

    def _q_terms(self, spec: dict[str, Any], doc: StoredDoc) -> tuple[bool, float]:
        name, values = self._single_field("terms", spec)
        if not isinstance(values, list):
            raise DoubleError(400, "parsing_exception", "[terms] query needs an array of values")
        # Looked up before it is built: `setdefault(key, build())` would build the set again for every document.
        cached = self._term_sets.get(id(values))
        if cached is None or cached[0] is not values:
            cached = self._term_sets[id(values)] = (values, set(map(json.dumps, values)))
        wanted = cached[1]
        return any(json.dumps(value) in wanted for value in self._values_of(doc, name)), 1.0

    def _q_range(self, spec: dict[str, Any], doc: StoredDoc) -> tuple[bool, float]:
        name, bounds = self._single_field("range", spec)
        if not isinstance(bounds, dict) or not bounds or set(bounds) - {"gt", "gte", "lt", "lte"}:
            raise DoubleError(400, "parsing_exception", "[range] query takes only gt, gte, lt and lte")
        tests = {
            "gt": lambda v, b: v > b,
            "gte": lambda v, b: v >= b,
            "lt": lambda v, b: v < b,
            "lte": lambda v, b: v <= b,
        }
        matched = any(
            all(tests[op](value, bound) for op, bound in bounds.items())
            for value in self._values_of(doc, name)
            if isinstance(value, str)
        )
        return matched, 1.0

    def _q_ids(self, spec: dict[str, Any], doc: StoredDoc) -> tuple[bool, float]:
        return doc.id in spec.get("values", []), 1.0

    def _q_match(self, spec: dict[str, Any], doc: StoredDoc) -> tuple[bool, float]:
        name, value = self._single_field("match", spec)
        options = value if isinstance(value, dict) else {"query": value}
        unknown = set(options) - {"query", "operator"}
        if unknown:
            raise DoubleError(400, "parsing_exception", f"the double does not implement match options {unknown}")
        query_tokens = tokens(str(options["query"]))
        doc_tokens = tokens(str(doc.source.get(name) or ""))
        counts = Counter(doc_tokens)
        matched = [token for token in query_tokens if counts[token]]
        if not matched or (
            str(options.get("operator", "or")).lower() == "and" and len(set(matched)) != len(set(query_tokens))
        ):
            return False, 0.0
        total, average, frequency = self._text_stats(name)
        score = 0.0
        for token in query_tokens:
            tf = counts[token]
            if not tf:
                continue
            n = frequency[token]
            idf = math.log(1 + (total - n + 0.5) / (n + 0.5))
            norm = 1 - BM25_B + BM25_B * (len(doc_tokens) / average if average else 0.0)
            score += idf * tf * (BM25_K1 + 1) / (tf + BM25_K1 * norm)
        return True, score

    def _q_bool(self, spec: dict[str, Any], doc: StoredDoc) -> tuple[bool, float]:
        unknown = set(spec) - {"must", "filter", "should", "must_not", "minimum_should_match", "boost"}
        if unknown:
            raise DoubleError(400, "parsing_exception", f"the double does not implement bool keys {unknown}")
        score = 0.0
        for clause in _as_list(spec.get("must")):
            ok, clause_score = self.evaluate(clause, doc)
            if not ok:
                return False, 0.0
            score += clause_score
        for clause in _as_list(spec.get("filter")):
            if not self.evaluate(clause, doc)[0]:
                return False, 0.0
        for clause in _as_list(spec.get("must_not")):
            if self.evaluate(clause, doc)[0]:
                return False, 0.0
        should = _as_list(spec.get("should"))
        if should:
            results = [self.evaluate(clause, doc) for clause in should]
            required = spec.get("minimum_should_match", 0 if spec.get("must") or spec.get("filter") else 1)
            if sum(ok for ok, _ in results) < int(required):
                return False, 0.0
            score += sum(clause_score for ok, clause_score in results if ok)
        return True, score

    def _q_knn(self, spec: dict[str, Any], doc: StoredDoc) -> tuple[bool, float]:
        raise DoubleError(400, "parsing_exception", "the double supports [knn] only as the top-level query")

    def knn_score(self, name: str, vector: list[float], doc: StoredDoc) -> float | None:
        stored = doc.source.get(name)
        if stored is None:
            return None
        method = self.index.properties[name].get("method", {})
        space = method.get("space_type", self.index.properties[name].get("space_type", "l2"))
        engine = method.get("engine", "faiss")
        dot = sum(a * b for a, b in zip(vector, stored))
        if space == "l2":
            return 1.0 / (1.0 + sum((a - b) ** 2 for a, b in zip(vector, stored)))
        if space == "innerproduct":
            if engine == "lucene":
                return dot + 1.0 if dot > 0 else 1.0 / (1.0 - dot)
            return 1.0 + dot if dot >= 0 else 1.0 / (1.0 - dot)
        if space == "cosinesimil":
            norms = math.sqrt(sum(a * a for a in vector)) * math.sqrt(sum(b * b for b in stored))
            return (1.0 + (dot / norms if norms else 0.0)) / 2.0
        raise DoubleError(400, "illegal_argument_exception", f"the double does not implement space [{space}]")


# -- the double --------------------------------------------------------------------------------------------------


_ROUTES: list[tuple[set[str], re.Pattern[str], str, str]] = [
    ({"GET"}, re.compile(r"^_alias/(?P<name>[^/]+)$"), "/_alias/{name}", "get_alias"),
    ({"POST", "PUT"}, re.compile(r"^_bulk$"), "/_bulk", "bulk"),
    ({"POST", "PUT"}, re.compile(r"^(?P<index>[^_/][^/]*)/_bulk$"), "/{index}/_bulk", "bulk"),
    ({"GET", "POST"}, re.compile(r"^(?P<index>[^_/][^/]*)/_search$"), "/{index}/_search", "search"),
    ({"POST"}, re.compile(r"^(?P<index>[^_/][^/]*)/_delete_by_query$"), "/{index}/_delete_by_query", "delete_by_query"),
    ({"GET", "POST"}, re.compile(r"^(?P<index>[^_/][^/]*)/_refresh$"), "/{index}/_refresh", "refresh"),
    ({"PUT", "POST"}, re.compile(r"^(?P<index>[^_/][^/]*)/_doc/(?P<id>[^/]+)$"), "/{index}/_doc/{id}", "doc"),
    ({"GET", "PUT", "POST"}, re.compile(r"^(?P<index>[^_/][^/]*)/_mapping$"), "/{index}/_mapping", "mapping"),
    ({"PUT", "HEAD", "DELETE"}, re.compile(r"^(?P<index>[^_/][^/]*)$"), "/{index}", "index"),
]

# Parameters whose meaning the double implements; a spec-valid parameter outside this list answers 400 so a
# behaviour the double would silently ignore cannot slip into the adapter unnoticed.
_IMPLEMENTED_PARAMS = {
    "get_alias": set(),
    "bulk": {"refresh", "routing", "timeout"},
    "search": {"routing", "ignore_unavailable"},
    "delete_by_query": {"routing", "refresh", "conflicts"},
    "refresh": set(),
    "doc": {"refresh", "routing"},
    "mapping": {"timeout", "master_timeout", "cluster_manager_timeout"},
    "index": {"timeout", "master_timeout", "cluster_manager_timeout", "wait_for_active_shards"},
}
_SEARCH_BODY_KEYS = {"query", "size", "from", "_source", "sort", "search_after", "track_total_hits"}


class OpenSearchDouble:
    """In-memory OpenSearch cluster; see the module docstring for what it validates and implements."""

    def __init__(self, checker: SpecChecker | None = None):
        self.checker = checker or spec_checker()
        self.indices: dict[str, IndexState] = {}
        self.aliases: dict[str, str] = {}
        self.requests: list[RecordedRequest] = []
        self.spec_violations: list[str] = []
        self._failures: list[int | str] = []
        self._seq = itertools.count(1)
        self._lock = threading.RLock()
        self.before_request: Any = None  # optional hook(method, path) for race tests

    # -- wiring ---------------------------------------------------------------------------------------------------

    def client(self, **kwargs: Any) -> OpenSearch:
        """A real opensearch-py client whose only connection is answered by this double."""
        options = {
            "hosts": [{"host": "opensearch-double.invalid", "port": 9200}],
            "connection_class": DoubleConnection,
            "double": self,
            "max_retries": 0,
        }
        options.update(kwargs)
        return OpenSearch(**options)

    def fail_next(self, count: int = 1, *, status: int | str = 503) -> None:
        """Answer the next `count` requests with an HTTP `status`, or `"connection"` for a network failure."""
        self._failures.extend([status] * count)

    def requests_to(self, action: str) -> list[RecordedRequest]:
        """Recorded requests whose path ends with `action` (e.g. "_bulk", "_search")."""
        return [request for request in self.requests if request.path.rstrip("/").endswith(action)]

    # -- dispatch -------------------------------------------------------------------------------------------------

    def handle(
        self, method: str, url: str, params: dict[str, Any] | None, body: bytes | None
    ) -> tuple[int, dict[str, Any] | None]:
        path = url.split("?", 1)[0]
        # opensearch-py has already turned parameter values into URL form (bytes, "true"/"false").
        params = {
            key: value.decode("utf-8")
            if isinstance(value, bytes)
            else str(value).lower()
            if isinstance(value, bool)
            else str(value)
            for key, value in (params or {}).items()
        }
        with self._lock:
            parsed = self._parse_body(path, body)
            self.requests.append(RecordedRequest(method, path, dict(params), parsed))
            if self.before_request is not None:
                self.before_request(method, path)
            if self._failures:
                failure = self._failures.pop(0)
                if failure == "connection":
                    raise OpenSearchConnectionError("N/A", "injected connection failure", None)
                return int(failure), DoubleError(int(failure), "injected_failure", "injected by the test").body()
            try:
                return self._dispatch(method, path, params, parsed)
            except DoubleError as error:
                return error.status, error.body()

    @staticmethod
    def _parse_body(path: str, body: bytes | str | None) -> Any:
        if body is None:
            return None
        text = body.decode("utf-8") if isinstance(body, bytes) else body
        try:
            if path.rstrip("/").endswith("_bulk"):
                return [json.loads(line) for line in text.splitlines() if line.strip()]
            return json.loads(text)
        except json.JSONDecodeError as error:
            return DoubleError(400, "x_content_parse_exception", f"body is not JSON: {error}")

    def _dispatch(self, method: str, path: str, params: dict[str, str], body: Any) -> tuple[int, Any]:
        if isinstance(body, DoubleError):
            raise body
        relative = path.strip("/")
        for methods, pattern, template, name in _ROUTES:
            match = pattern.match(relative)
            if match and method in methods:
                self._check(method, template, name, params, body)
                args = {key: unquote(value) for key, value in match.groupdict().items()}
                return getattr(self, f"_api_{name}")(method, params, body, **args)
        raise DoubleError(
            405 if any(p.match(relative) for _, p, _, _ in _ROUTES) else 400,
            "illegal_argument_exception",
            f"no handler for [{method} {path}] in the double",
        )

    def _check(self, method: str, template: str, name: str, params: dict[str, str], body: Any) -> None:
        problems = self.checker.param_errors(method, template, params)
        problems += [
            f"the double does not implement query parameter [{key}] of {name}"
            for key in params
            if key not in _IMPLEMENTED_PARAMS[name]
            and not any(f"[{key}]" in problem or f"[{key}=" in problem for problem in problems)
        ]
        if body is not None:
            operation = self.checker.spec["paths"][template][method.lower()]
            if "requestBody" not in operation:
                problems.append(f"{method} {template} takes no request body")
            else:
                problems += self.checker.body_errors(method, template, body)
        if problems:
            self.spec_violations.extend(f"{method} {template}: {problem}" for problem in problems)
            raise DoubleError(
                400,
                "x_content_parse_exception",
                f"request does not match the OpenSearch API spec: {'; '.join(problems)[:2000]}",
            )

    def _resolve(self, expression: str, *, ignore_unavailable: bool = False) -> list[IndexState]:
        found: dict[str, IndexState] = {}
        for name in expression.split(","):
            if any(char in name for char in "*?"):
                for candidate in [*self.indices, *self.aliases]:
                    if fnmatch.fnmatchcase(candidate, name):
                        concrete = self.aliases.get(candidate, candidate)
                        found[concrete] = self.indices[concrete]
            elif name in self.indices:
                found[name] = self.indices[name]
            elif name in self.aliases:
                found[self.aliases[name]] = self.indices[self.aliases[name]]
            elif not ignore_unavailable:
                raise DoubleError(404, "index_not_found_exception", f"no such index [{name}]")
        return list(found.values())

    # -- indices --------------------------------------------------------------------------------------------------

    def _api_index(self, method: str, params: dict[str, str], body: Any, *, index: str) -> tuple[int, Any]:
        if method == "HEAD":
            return (200 if index in self.indices or index in self.aliases else 404), None
        if method == "DELETE":
            for state in self._resolve(index):
                del self.indices[state.name]
                self.aliases = {alias: target for alias, target in self.aliases.items() if target != state.name}
            return 200, {"acknowledged": True}
        return self._create_index(index, body or {})

    def _create_index(self, name: str, body: dict[str, Any]) -> tuple[int, Any]:
        if (
            name != name.lower()
            or name[0] in "_-+"
            or name in (".", "..")
            or set(name) & _INVALID_INDEX_CHARS
            or len(name.encode()) > 255
        ):
            raise DoubleError(400, "invalid_index_name_exception", f"Invalid index name [{name}]")
        if name in self.indices:
            raise DoubleError(400, "resource_already_exists_exception", f"index [{name}] already exists")
        if name in self.aliases:
            raise DoubleError(400, "invalid_index_name_exception", f"[{name}] already exists as alias")
        unknown = set(body) - {"settings", "mappings", "aliases"}
        if unknown:
            raise DoubleError(400, "parsing_exception", f"unknown keys {unknown}")
        settings = _flatten_settings(body.get("settings", {}))
        mappings = body.get("mappings", {})
        self._check_routing_settings(settings, mappings)
        unknown = set(mappings) - {"properties", "_source", "dynamic", "_routing"}
        if unknown:
            raise DoubleError(400, "mapper_parsing_exception", f"the double does not implement mapping keys {unknown}")
        properties = mappings.get("properties", {})
        for field_name, spec in properties.items():
            self._check_property(field_name, spec, settings)
        source = mappings.get("_source", {})
        aliases = body.get("aliases", {})
        for alias in aliases:
            if alias in self.indices or alias in self.aliases:
                raise DoubleError(400, "invalid_alias_name_exception", f"alias [{alias}] already exists")
        self.indices[name] = IndexState(
            name=name,
            settings=settings,
            properties=properties,
            source_excludes=list(source.get("excludes", [])),
            dynamic=str(mappings.get("dynamic", "true")).lower(),
            routing_required=bool(mappings.get("_routing", {}).get("required")),
        )
        for alias in aliases:
            self.aliases[alias] = name
        return 200, {"acknowledged": True, "shards_acknowledged": True, "index": name}

    @staticmethod
    def _check_routing_settings(settings: dict[str, Any], mappings: dict[str, Any]) -> None:
        """The checks OpenSearch makes when an index is created (MetadataCreateIndexService, IndexMetadata)."""
        shards = int(settings.get("number_of_shards", 1))
        routing_shards = int(settings.get("number_of_routing_shards", default_routing_shards(shards)))
        partition = int(settings.get("routing_partition_size", 1))
        if shards < 1 or routing_shards < shards or routing_shards % shards:
            raise DoubleError(
                400,
                "illegal_argument_exception",
                f"the number of source shards [{shards}] must be a factor of [{routing_shards}]",
            )
        if partition < 1 or (partition != 1 and partition >= shards):
            raise DoubleError(
                400,
                "illegal_argument_exception",
                "routing partition size must be 1, or more and less than the number of shards",
            )
        if partition > 1 and not mappings.get("_routing", {}).get("required"):
            raise DoubleError(
                400, "illegal_argument_exception", "mapping type must have routing required for partitioned index"
            )

    @staticmethod
    def _check_property(name: str, spec: dict[str, Any], settings: dict[str, Any]) -> None:
        kind = spec.get("type")
        if kind not in {"keyword", "text", "knn_vector", "integer", "long", "float", "boolean", "date"}:
            raise DoubleError(400, "mapper_parsing_exception", f"the double does not implement type [{kind}]")
        if kind != "knn_vector":
            return
        if not _truthy(settings.get("knn")):
            raise DoubleError(400, "mapper_parsing_exception", f"knn_vector field [{name}] needs index.knn: true")
        dimension = spec.get("dimension")
        if not isinstance(dimension, int) or not 1 <= dimension <= 16_000:
            raise DoubleError(400, "mapper_parsing_exception", f"bad dimension for [{name}]")
        method = spec.get("method", {})
        engine = method.get("engine", "faiss")
        spaces = {
            "faiss": {"l2", "innerproduct", "cosinesimil"},
            "lucene": {"l2", "innerproduct", "cosinesimil"},
            "nmslib": {"l2", "innerproduct", "cosinesimil", "l1", "linf"},
        }
        if method.get("name", "hnsw") != "hnsw" or engine not in spaces:
            raise DoubleError(400, "mapper_parsing_exception", "the double implements hnsw on faiss/lucene/nmslib")
        if method.get("space_type", "l2") not in spaces[engine]:
            raise DoubleError(400, "mapper_parsing_exception", f"space not supported by [{engine}]")
        unknown = set(method.get("parameters", {})) - {"ef_construction", "m", "ef_search", "encoder"}
        if unknown:
            raise DoubleError(400, "mapper_parsing_exception", f"unknown hnsw parameters {unknown}")

    def _api_mapping(self, method: str, params: dict[str, str], body: Any, *, index: str) -> tuple[int, Any]:
        """GET mapping; PUT mapping: new properties are added (documents written before them simply lack the
        field); a property already mapped must come again with its type, as OpenSearch refuses to change one."""
        if method == "GET":
            return 200, {
                state.name: {"mappings": {"dynamic": state.dynamic, "properties": state.properties}}
                for state in self._resolve(index)
            }
        body = body or {}
        if set(body) - {"properties"}:
            raise DoubleError(400, "mapper_parsing_exception", "the double implements put_mapping with properties only")
        states = self._resolve(index)
        for state in states:
            for field_name, spec in body.get("properties", {}).items():
                self._check_property(field_name, spec, state.settings)
                current = state.properties.get(field_name)
                if current is not None and current.get("type") != spec.get("type"):
                    raise DoubleError(
                        400,
                        "illegal_argument_exception",
                        f"mapper [{field_name}] cannot be changed from type [{current.get('type')}] "
                        f"to [{spec.get('type')}]",
                    )
        for state in states:
            state.properties = {**state.properties, **body.get("properties", {})}
        return 200, {"acknowledged": True}

    def _api_get_alias(self, method: str, params: dict[str, str], body: Any, *, name: str) -> tuple[int, Any]:
        matched = {alias: target for alias, target in self.aliases.items() if fnmatch.fnmatchcase(alias, name)}
        if not matched and not any(char in name for char in "*?"):
            return 404, {"error": f"alias [{name}] missing", "status": 404}
        response: dict[str, Any] = {}
        for alias, target in matched.items():
            response.setdefault(target, {"aliases": {}})["aliases"][alias] = {}
        return 200, response

    def _api_refresh(self, method: str, params: dict[str, str], body: Any, *, index: str) -> tuple[int, Any]:
        states = self._resolve(index)
        for state in states:
            state.refresh()
        return 200, {"_shards": {"total": len(states), "successful": len(states), "failed": 0}}

    # -- documents ------------------------------------------------------------------------------------------------

    def _api_bulk(self, method: str, params: dict[str, str], body: Any, *, index: str | None = None) -> tuple[int, Any]:
        lines = list(body or [])
        if not lines:
            raise DoubleError(400, "action_request_validation_exception", "request body is required")
        items: list[dict[str, Any]] = []
        touched: set[str] = set()
        position = 0
        while position < len(lines):
            ((op, meta),) = lines[position].items()
            position += 1
            source = None
            if op != "delete":
                if position >= len(lines):
                    raise DoubleError(400, "illegal_argument_exception", "bulk action without a source line")
                source = lines[position]
                position += 1
            items.append({op: self._bulk_item(op, meta, source, index, params, touched)})
        if params.get("refresh") in ("true", "", "wait_for"):
            for name in touched:
                self.indices[name].refresh()
        errors = any("error" in next(iter(item.values())) for item in items)
        return 200, {"took": 1, "errors": errors, "items": items}

    def _bulk_item(
        self,
        op: str,
        meta: dict[str, Any],
        source: dict[str, Any] | None,
        default_index: str | None,
        params: dict[str, str],
        touched: set[str],
    ) -> dict[str, Any]:
        target = meta.get("_index", default_index)
        doc_id = meta.get("_id")
        result: dict[str, Any] = {"_index": target, "_id": doc_id}

        def failure(status: int, error_type: str, reason: str) -> dict[str, Any]:
            return {**result, "status": status, "error": {"type": error_type, "reason": reason}}

        if op not in ("index", "create", "delete"):
            return failure(400, "illegal_argument_exception", f"the double does not implement bulk [{op}]")
        if target is None or target not in self.indices and target not in self.aliases:
            # Stricter than OpenSearch (which may auto-create an index with dynamic mappings).
            return failure(404, "index_not_found_exception", f"no such index [{target}]")
        state = self.indices[self.aliases.get(target, target)]
        result["_index"] = state.name
        routing = meta.get("routing", params.get("routing"))
        if doc_id is None:
            return failure(400, "action_request_validation_exception", "the double needs an explicit _id")
        if routing is None and state.routing_required:
            return failure(400, "routing_missing_exception", f"routing is required for [{state.name}]/[{doc_id}]")
        key = (state.shard(routing, str(doc_id)), str(doc_id))
        if op == "delete":
            existed = state.live.pop(key, None) is not None
            touched.add(state.name)
            return {**result, "result": "deleted" if existed else "not_found", "status": 200 if existed else 404}
        problem = self._mapping_problem(state, source)
        if problem:
            return failure(400, *problem)
        if op == "create" and key in state.live:
            return failure(409, "version_conflict_engine_exception", "document already exists")
        existed = key in state.live
        state.live[key] = StoredDoc(
            id=str(doc_id), routing=routing, source=dict(source or {}), seq_no=next(self._seq), shard=key[0]
        )
        touched.add(state.name)
        return {**result, "result": "updated" if existed else "created", "status": 200 if existed else 201}

    def _api_doc(self, method: str, params: dict[str, str], body: Any, *, index: str, id: str) -> tuple[int, Any]:
        """Single-document index (PUT/POST /{index}/_doc/{id}): a one-action bulk."""
        touched: set[str] = set()
        item = self._bulk_item("index", {"_index": index, "_id": id}, body, None, params, touched)
        if "error" in item:
            raise DoubleError(item["status"], item["error"]["type"], item["error"]["reason"])
        if params.get("refresh") in ("true", "", "wait_for"):
            for name in touched:
                self.indices[name].refresh()
        return item["status"], item

    @staticmethod
    def _mapping_problem(state: IndexState, source: dict[str, Any] | None) -> tuple[str, str] | None:
        if not isinstance(source, dict):
            return "mapper_parsing_exception", "document source must be an object"
        for name, value in source.items():
            spec = state.properties.get(name)
            if spec is None:
                if state.dynamic == "strict":
                    return "strict_dynamic_mapping_exception", f"mapping set to strict, [{name}] not allowed"
                continue
            if value is None:
                continue
            kind = spec["type"]
            if kind == "knn_vector":
                if (
                    not isinstance(value, list)
                    or len(value) != spec["dimension"]
                    or not all(isinstance(x, (int, float)) and math.isfinite(x) for x in value)
                ):
                    return "mapper_parsing_exception", f"[{name}] needs {spec['dimension']} finite numbers"
            elif kind in ("keyword", "text") and not all(isinstance(v, str) for v in _as_list(value)):
                return "mapper_parsing_exception", f"[{name}] needs strings"
            elif kind == "boolean" and not all(isinstance(v, bool) for v in _as_list(value)):
                # OpenSearch also takes "true"/"false" strings; the adapter never sends them, so refuse them.
                return "mapper_parsing_exception", f"[{name}] needs booleans"
        return None

    # -- search ---------------------------------------------------------------------------------------------------

    def _visible(self, state: IndexState, params: dict[str, str]) -> list[StoredDoc]:
        docs = list(state.searchable.values())
        if "routing" in params:
            # A comma-separated list split like Java's String.split: trailing empty parts are dropped (so ","
            # searches no shard at all), inner ones kept (the shard of ""), nothing is trimmed.
            values = params["routing"].split(",")
            while values and values[-1] == "":
                values.pop()
            shards = set().union(*(state.search_shards(value) for value in values))
            docs = [doc for doc in docs if doc.shard in shards]
        return docs

    def _matches(
        self, state: IndexState, query: dict[str, Any] | None, params: dict[str, str]
    ) -> list[tuple[StoredDoc, float]]:
        evaluator = _Evaluator(state)
        docs = self._visible(state, params)
        if query is None:
            return [(doc, 1.0) for doc in docs]
        if isinstance(query, dict) and set(query) == {"knn"}:
            return self._knn(evaluator, query["knn"], docs)
        matched = []
        for doc in docs:
            ok, score = evaluator.evaluate(query, doc)
            if ok:
                matched.append((doc, score))
        return matched

    def _knn(self, evaluator: _Evaluator, spec: dict[str, Any], docs: list[StoredDoc]) -> list[tuple[StoredDoc, float]]:
        if len(spec) != 1:
            raise DoubleError(400, "parsing_exception", "[knn] query must name exactly one field")
        ((name, options),) = spec.items()
        unknown = set(options) - {"vector", "k", "filter", "method_parameters"}
        if unknown:
            raise DoubleError(400, "parsing_exception", f"the double does not implement knn options {unknown}")
        # The double searches exactly, so the HNSW breadth changes nothing here; its shape is still checked.
        parameters = options.get("method_parameters", {})
        if set(parameters) - {"ef_search"} or not all(isinstance(v, int) and v >= 1 for v in parameters.values()):
            raise DoubleError(400, "illegal_argument_exception", f"invalid method_parameters {parameters}")
        mapping = evaluator.index.properties.get(name, {})
        if mapping.get("type") != "knn_vector":
            raise DoubleError(400, "illegal_argument_exception", f"Field '{name}' is not knn_vector type.")
        vector, k = options["vector"], options.get("k")
        if len(vector) != mapping["dimension"]:
            raise DoubleError(
                400,
                "illegal_argument_exception",
                f"Query vector has invalid dimension: {len(vector)}. Dimension should be: {mapping['dimension']}",
            )
        if not isinstance(k, int) or not 1 <= k <= MAX_KNN_K:
            raise DoubleError(400, "illegal_argument_exception", f"[knn] requires 1 <= k <= {MAX_KNN_K}")
        # Efficient filtering: restrict the candidates first, then take the k nearest among them.
        if "filter" in options:
            docs = [doc for doc in docs if evaluator.evaluate(options["filter"], doc)[0]]
        scored = [(doc, score) for doc in docs if (score := evaluator.knn_score(name, vector, doc)) is not None]
        scored.sort(key=lambda pair: -pair[1])
        return scored[:k]

    @staticmethod
    def _sort_key(sort: list[Any]) -> list[tuple[str, bool]]:
        keys = []
        for entry in sort:
            if isinstance(entry, str):
                keys.append((entry, False))
                continue
            ((name, order),) = entry.items()
            order = order.get("order", "asc") if isinstance(order, dict) else order
            keys.append((name, order == "desc"))
        return keys

    def _api_search(self, method: str, params: dict[str, str], body: Any, *, index: str) -> tuple[int, Any]:
        body = body or {}
        unknown = set(body) - _SEARCH_BODY_KEYS
        if unknown:
            raise DoubleError(400, "parsing_exception", f"the double does not implement search keys {unknown}")
        states = self._resolve(index, ignore_unavailable=params.get("ignore_unavailable") == "true")
        hits: list[tuple[IndexState, StoredDoc, float]] = []
        for state in states:
            hits += [(state, doc, score) for doc, score in self._matches(state, body.get("query"), params)]
        sort = self._sort_key(_as_list(body.get("sort")))
        hits = self._ordered(hits, sort, body)
        start, size = int(body.get("from", 0)), int(body.get("size", 10))
        rendered = [
            self._render_hit(state, doc, score, sort, body.get("_source", True))
            for state, doc, score in hits[start : start + size]
        ]
        max_score = None if sort or not hits else max(score for _, _, score in hits)
        return 200, {
            "took": 1,
            "timed_out": False,
            "_shards": {"total": len(states), "successful": len(states), "skipped": 0, "failed": 0},
            "hits": {"total": {"value": len(hits), "relation": "eq"}, "max_score": max_score, "hits": rendered},
        }

    @staticmethod
    def _ordered(
        hits: list[tuple[IndexState, StoredDoc, float]], sort: list[tuple[str, bool]], body: dict[str, Any]
    ) -> list[tuple[IndexState, StoredDoc, float]]:
        """The hits in the order of `sort` and after `search_after` if given; best score first without a sort."""
        if not sort:
            if "search_after" in body:
                raise DoubleError(400, "illegal_argument_exception", "search_after needs a sort")
            return sorted(hits, key=lambda hit: -hit[2])

        def compare(left: list[Any], right: list[Any]) -> int:
            for (_, descending), a, b in zip(sort, left, right):
                if a != b:
                    return (1 if a > b else -1) * (-1 if descending else 1)
            return 0

        def values(doc: StoredDoc) -> list[Any]:
            # Missing values sort last, as with OpenSearch's default `missing: _last` for ascending order.
            return [(_as_list(doc.source.get(name)) or ["\uffff"])[0] for name, _ in sort]

        hits = sorted(hits, key=functools.cmp_to_key(lambda a, b: compare(values(a[1]), values(b[1]))))
        if "search_after" in body:
            after = list(body["search_after"])
            if len(after) != len(sort):
                raise DoubleError(400, "illegal_argument_exception", "search_after must match the sort")
            hits = [hit for hit in hits if compare(values(hit[1]), after) > 0]
        return hits

    def _render_hit(
        self, state: IndexState, doc: StoredDoc, score: float, sort: list[tuple[str, bool]], source_selector: Any
    ) -> dict[str, Any]:
        hit: dict[str, Any] = {"_index": state.name, "_id": doc.id, "_score": None if sort else score}
        if doc.routing is not None:
            hit["_routing"] = doc.routing
        source = self._filter_source(state.stored_source(doc), source_selector)
        if source is not None:
            hit["_source"] = source
        if sort:
            hit["sort"] = [(_as_list(doc.source.get(name)) or [None])[0] for name, _ in sort]
        return hit

    @staticmethod
    def _filter_source(source: dict[str, Any], selector: Any) -> dict[str, Any] | None:
        if selector is False:
            return None
        if selector is True or selector is None:
            return source
        includes, excludes = (
            (_as_list(selector), [])
            if not isinstance(selector, dict)
            else (_as_list(selector.get("includes")), _as_list(selector.get("excludes")))
        )
        return {
            key: value
            for key, value in source.items()
            if (not includes or any(fnmatch.fnmatchcase(key, p) for p in includes))
            and not any(fnmatch.fnmatchcase(key, p) for p in excludes)
        }

    def _api_delete_by_query(self, method: str, params: dict[str, str], body: Any, *, index: str) -> tuple[int, Any]:
        body = body or {}
        if set(body) - {"query"} or "query" not in body:
            raise DoubleError(400, "parsing_exception", "the double implements delete_by_query with a query only")
        if params.get("refresh") not in (None, "true", "false", ""):
            raise DoubleError(400, "illegal_argument_exception", "delete_by_query refresh must be true or false")
        deleted = conflicts = 0
        failures = []
        for state in self._resolve(index):
            # Like the real API: it deletes what the last refresh made searchable, and a document changed
            # since then is a version conflict.
            for doc, _ in self._matches(state, body["query"], params):
                key = (doc.shard, doc.id)
                current = state.live.get(key)
                if current is not None and current.seq_no != doc.seq_no:
                    conflicts += 1
                    failures.append(
                        {
                            "index": state.name,
                            "id": doc.id,
                            "status": 409,
                            "cause": {"type": "version_conflict_engine_exception"},
                        }
                    )
                    continue
                if current is not None:
                    del state.live[key]
                    deleted += 1
            if params.get("refresh") in ("true", ""):
                state.refresh()
        proceed = params.get("conflicts") == "proceed"
        response = {
            "took": 1,
            "timed_out": False,
            "total": deleted + conflicts,
            "deleted": deleted,
            "batches": 1,
            "version_conflicts": conflicts,
            "noops": 0,
            "failures": [] if proceed else failures,
        }
        return (409 if failures and not proceed else 200), response


class DoubleConnection(Connection):
    """opensearch-py `Connection` whose requests are answered by an `OpenSearchDouble` instead of a socket."""

    def __init__(self, double: OpenSearchDouble, **kwargs: Any):
        kwargs.pop("metrics", None)
        super().__init__(**kwargs)
        self.double = double

    def perform_request(
        self,
        method: str,
        url: str,
        params: Any = None,
        body: bytes | None = None,
        timeout: Any = None,
        ignore: Any = (),
        headers: Any = None,
    ) -> Any:
        status, payload = self.double.handle(method, url, params, body)
        raw = "" if payload is None else json.dumps(payload)
        if not 200 <= status < 300 and status not in ignore:
            self._raise_error(status, raw, "application/json")
        return status, {"content-type": "application/json"}, raw
