"""The `kindex` commands that talk to a deployment over HTTP(S) through the SDK (`kindex.client`): `collections`,
`documents`, `query`, `cite`, `jobs`, and `ingest`/`reindex` when a deployment is named (--url, --profile,
KINDEX_URL or KINDEX_PROFILE; without one those two keep working on the local data directory). This module parses
the arguments, connects and prints; a folder's ingest is remote_ingest.py.

Output is for scripts first: results on stdout (`--json` where a table is the default), nothing else unless asked;
progress and notes on stderr (the progress bar only on a terminal); errors on stderr as `error: <code>: <message>`
with the exit codes of EXIT_CODES."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from kindex.client import errors
from kindex.client.sync import Kindex
from kindex.domain.errors import InvalidInput
from kindex.domain.models import DocumentStatus
from kindex_local.ingest_cli import add_metadata_options, document_metadata
from kindex_local.remote_ingest import put_metadata

if TYPE_CHECKING:
    from kindex_local.remote_ingest import IngestOutcome

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_AUTH, EXIT_NOT_FOUND, EXIT_CONFLICT, EXIT_UNAVAILABLE = 0, 1, 2, 3, 4, 5, 6
#: Exit codes a script can rely on (docs/clients.md lists them).
EXIT_CODES = {
    EXIT_OK: "success (ingest: every file indexed or unchanged)",
    EXIT_FAILED: "the command failed (ingest: a file failed or was still pending at the timeout; a 5xx answer)",
    EXIT_USAGE: "usage: bad arguments, no URL or key, an unknown profile, or a value the API refused (400, 413, 422)",
    EXIT_AUTH: "the key is missing, unknown or revoked (401) or its role may not do this (403)",
    EXIT_NOT_FOUND: "no such collection, document or job (404)",
    EXIT_CONFLICT: "a write raced another one (409): read and retry",
    EXIT_UNAVAILABLE: "the deployment could not be reached, or still answered 429/503 after the retries",
}
_EXIT_BY_ERROR: tuple[tuple[type[BaseException], int], ...] = (
    (errors.ConfigurationError, EXIT_USAGE),
    (errors.BadRequest, EXIT_USAGE),
    (errors.InvalidInput, EXIT_USAGE),
    (errors.PayloadTooLarge, EXIT_USAGE),
    (errors.Unauthorized, EXIT_AUTH),
    (errors.Forbidden, EXIT_AUTH),
    (errors.NotFound, EXIT_NOT_FOUND),
    (errors.Conflict, EXIT_CONFLICT),
    (errors.Throttled, EXIT_UNAVAILABLE),
    (errors.ServiceUnavailable, EXIT_UNAVAILABLE),
    (errors.ConnectionFailed, EXIT_UNAVAILABLE),
    (TimeoutError, EXIT_UNAVAILABLE),
)


def epilog() -> str:
    codes = "\n".join(f"  {code}  {meaning}" for code, meaning in EXIT_CODES.items())
    return (
        "collections, documents, query, cite and jobs work against a deployment (--url and --key, --profile, or\n"
        "KINDEX_URL and KINDEX_API_KEY); so do ingest and reindex when one is named.\n\nexit codes:\n" + codes
    )


class UsageError(Exception):
    """Arguments that parse but do not make sense together, or a profile that cannot be used (exit 2)."""


# -- where to connect -----------------------------------------------------------------------------------------------


def profiles_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "kindex" / "profiles.toml"


def load_profile(name: str) -> dict[str, str]:
    """`[name]` of profiles.toml: `url` and `key` (strings)."""
    path = profiles_path()
    try:
        profiles = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        raise UsageError(f"profile {name!r}: {path} does not exist") from error
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise UsageError(f"{path} is not valid TOML: {error}") from error
    profile = profiles.get(name)
    if not isinstance(profile, dict):
        raise UsageError(f"no profile {name!r} in {path} (profiles: {', '.join(sorted(profiles)) or 'none'})")
    if path.stat().st_mode & 0o077 and "key" in profile:
        print(f"warning: {path} holds API keys and is readable by others (chmod 600 it)", file=sys.stderr)
    unknown = set(profile) - {"url", "key"}
    if unknown or not all(isinstance(v, str) for v in profile.values()):
        raise UsageError(f"profile {name!r}: only string values `url` and `key` are allowed")
    return profile


def remote_requested(args: argparse.Namespace) -> bool:
    """Whether `ingest`/`reindex` go to a deployment rather than the local data directory."""
    return bool(
        getattr(args, "url", None)
        or getattr(args, "profile", None)
        or os.environ.get("KINDEX_URL")
        or os.environ.get("KINDEX_PROFILE")
    )


def target(args: argparse.Namespace) -> tuple[str, str]:
    """(url, key): --url/--key first, then the profile (--profile or KINDEX_PROFILE), then KINDEX_URL and
    KINDEX_API_KEY."""
    profile_name = args.profile or os.environ.get("KINDEX_PROFILE")
    profile = load_profile(profile_name) if profile_name else {}
    url = args.url or profile.get("url") or os.environ.get("KINDEX_URL")
    key = args.key or profile.get("key") or os.environ.get("KINDEX_API_KEY")
    if not url or not key:
        raise UsageError("name a deployment: --url and --key, --profile NAME, or KINDEX_URL and KINDEX_API_KEY")
    return url, key


def connect(args: argparse.Namespace) -> Kindex:
    url, key = target(args)
    return Kindex(url, key, timeout=args.timeout)


def run(command: Callable[[argparse.Namespace, Kindex], int], args: argparse.Namespace) -> int:
    """Run a remote command; every expected failure becomes one line on stderr and its exit code."""
    try:
        with connect(args) as client:
            return command(args, client)
    except UsageError as error:
        return _fail(f"error: {error}", EXIT_USAGE)
    except InvalidInput as error:  # an argument checked like the API checks it (--attribute, --access-group, ...)
        return _fail(f"error: invalid_input: {error}", EXIT_USAGE)
    except ValidationError as error:  # the API's own model refused an argument before any request
        from kindex.domain.validation import describe

        return _fail(f"error: invalid_input: {describe(error)}", EXIT_USAGE)
    except errors.ApiError as error:
        return _fail(f"error: {error.error}: {error.message}", _exit_code(error))
    except (errors.KindexClientError, TimeoutError) as error:
        return _fail(f"error: {error}", _exit_code(error))
    except BrokenPipeError:  # `kindex collections list | head -1`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _exit_code(error: BaseException) -> int:
    return next((code for kind, code in _EXIT_BY_ERROR if isinstance(error, kind)), EXIT_FAILED)


def _fail(line: str, code: int) -> int:
    print(line, file=sys.stderr)
    return code


# -- output ---------------------------------------------------------------------------------------------------------


def emit_json(value: Any) -> None:
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    elif isinstance(value, list):
        value = [v.model_dump(mode="json") if isinstance(v, BaseModel) else v for v in value]
    print(json.dumps(value, indent=2, ensure_ascii=False))


def one_line(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: max(0, width - 1)] + "…"


def pages(start: int | None, end: int | None) -> str:
    if start is None:
        return "-"
    return str(start) if end in (None, start) else f"{start}-{end}"


def table(rows: list[list[str]], header: list[str], last_column_min: int = 20) -> str:
    """Columns padded to their widest cell; the last one (free text) cut to the terminal's width."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header) - 1)]
    room = max(last_column_min, shutil.get_terminal_size((120, 24)).columns - sum(widths) - 2 * len(widths))
    lines = []
    for row in [header, *rows]:
        cells = [str(cell).ljust(width) for cell, width in zip(row, widths)]
        lines.append("  ".join([*cells, one_line(str(row[-1]), room)]).rstrip())
    return "\n".join(lines)


# -- collections and documents --------------------------------------------------------------------------------------


def json_argument(text: str, flag: str = "--body") -> dict[str, Any]:
    """`--body` (or `flag`): JSON text, `@file` or `-` (stdin)."""
    if text == "-":
        text = sys.stdin.read()
    elif text.startswith("@"):
        text = Path(text[1:]).read_text(encoding="utf-8")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"{flag} is not JSON: {error}") from error
    if not isinstance(value, dict):
        raise UsageError(f"{flag} must be a JSON object")
    return value


def _fields(args: argparse.Namespace, names: dict[str, str]) -> dict[str, Any]:
    """The body of a put: --body, then the flags given (`names`: field -> argparse dest)."""
    body = json_argument(args.body) if getattr(args, "body", None) else {}
    body.update({name: getattr(args, dest) for name, dest in names.items() if getattr(args, dest, None) is not None})
    return body


COLLECTION_FIELDS = {
    name: name
    for name in (
        "title",
        "embedding_model",
        "chunking_method",
        "chunking_max_size",
        "chunking_overlap_offset",
        "query_groups",
        "allow_guests",
        "document_access",
    )
}
# --url names the deployment: the document's link is --document-url.
DOCUMENT_FIELDS = {
    "title": "title",
    "url": "document_url",
    "language": "language",
    "mimetype": "mimetype",
    "content": "content",
}


def _ids(ids: list[str], as_json: bool) -> int:
    if as_json:
        emit_json(ids)
    elif ids:
        print("\n".join(ids))
    return EXIT_OK


def collections_list(args: argparse.Namespace, client: Kindex) -> int:
    return _ids(list(client.iter_collections(page_size=args.page_size)), args.json)


def collections_get(args: argparse.Namespace, client: Kindex) -> int:
    emit_json(client.get_collection(args.collection))
    return EXIT_OK


def collections_put(args: argparse.Namespace, client: Kindex) -> int:
    emit_json(client.put_collection(args.collection, _fields(args, COLLECTION_FIELDS)))
    return EXIT_OK


def collections_delete(args: argparse.Namespace, client: Kindex) -> int:
    job = client.delete_collection(args.collection, wait=args.wait, timeout=args.wait_timeout)
    if args.json:
        emit_json(job)
    else:
        print(_job_line(job) if args.wait else job.id)
    return EXIT_OK


def documents_list(args: argparse.Namespace, client: Kindex) -> int:
    if not (args.long or args.status):
        return _ids(list(client.iter_documents(args.collection, page_size=args.page_size)), args.json)
    summaries = [
        s
        for s in client.iter_document_summaries(args.collection, page_size=args.page_size)
        if not args.status or s.status.value in args.status
    ]
    if not args.long:
        return _ids([s.id for s in summaries], args.json)
    if args.json:
        emit_json(summaries)
    else:
        for s in summaries:
            progress = f"{s.chunks_done}/{s.chunk_count}" if s.status.value == "in_progress" else str(s.chunk_count)
            # Ids hold no control characters; title and reason are flattened, so a line is always one document.
            print(
                "\t".join(
                    [
                        s.id,
                        s.status.value,
                        progress,
                        str(s.content_length),
                        " ".join(s.title.split()),
                        " ".join((s.failure_reason or "").split()),
                    ]
                )
            )
    return EXIT_OK


def documents_get(args: argparse.Namespace, client: Kindex) -> int:
    document = client.get_document(args.collection, args.document)
    if not args.content:
        document = document.model_copy(update={"content": None})
    emit_json(document)
    return EXIT_OK


def documents_put(args: argparse.Namespace, client: Kindex) -> int:
    fields = {**_fields(args, DOCUMENT_FIELDS), **document_metadata(args)}
    if args.file is not None:
        if "content" in fields:
            raise UsageError("give --file or --content, not both")
        # attributes and access go with the upload ticket: the file is never indexed without them
        stored = client.upload_file(
            args.collection,
            args.document,
            args.file,
            mimetype=fields.pop("mimetype", None),
            attributes=fields.pop("attributes", None),
            access=fields.pop("access", None),
        )
        if fields:  # metadata beside the file (title, url, language)
            stored = put_metadata(client, args.collection, args.document, fields)
    else:
        stored = client.put_document(args.collection, args.document, fields)
    if args.wait:
        stored = client.wait_for_document(args.collection, args.document, timeout=args.wait_timeout)
    emit_json(stored.model_copy(update={"content": None}))
    return EXIT_FAILED if args.wait and stored.status.value == "failed" else EXIT_OK


def documents_delete(args: argparse.Namespace, client: Kindex) -> int:
    client.delete_document(args.collection, args.document)
    return EXIT_OK


def documents_chunks(args: argparse.Namespace, client: Kindex) -> int:
    chunks = list(client.iter_chunks(args.collection, args.document, page_size=args.page_size))
    if args.json:
        emit_json(chunks)
    elif chunks:
        print(
            table(
                [[str(c.index), pages(c.page_start, c.page_end), f"{c.start}-{c.end}", c.text] for c in chunks],
                ["#", "pages", "chars", "text"],
            )
        )
    return EXIT_OK


# -- query, cite, jobs, reindex -------------------------------------------------------------------------------------


def query(args: argparse.Namespace, client: Kindex) -> int:
    options: dict[str, Any] = {"k": args.k, "mode": args.mode, "groups": args.group or []}
    if args.user is not None:
        options["user"] = args.user
    if args.filter is not None:  # the API checks the expression and names the place at fault (exit 2)
        options["filters"] = {"attributes": json_argument(args.filter, "--filter")}
    if len(args.collection) == 1:
        answer = client.query(args.collection[0], args.text, **options)
    else:
        answer = client.query_collections(args.collection, args.text, **options)
    if args.json:
        emit_json(answer)
        return EXIT_OK
    for warning in answer.warnings:
        print(f"warning: {warning.collection}: {warning.code}: {warning.message}", file=sys.stderr)
    if answer.denied_collections:
        print(f"warning: refused collections: {', '.join(answer.denied_collections)}", file=sys.stderr)
    print(f"query_id {answer.query_id}: {len(answer.results)} result(s), {answer.denied_count} denied")
    if answer.results:
        rows = [
            [f"[{r.citation}]", f"{r.score:.4f}", r.document_id, pages(r.page_start, r.page_end), r.content]
            for r in answer.results
        ]
        print(table(rows, ["cite", "score", "document", "pages", "text"]))
    return EXIT_OK


def cite(args: argparse.Namespace, client: Kindex) -> int:
    text = sys.stdin.read() if args.text == "-" else args.text
    rendered = client.render_citations(text, query_id=args.query_id)
    if args.json:
        emit_json(rendered)
    else:
        print(rendered.html if args.html else rendered.markdown, end="")
    return EXIT_OK


def _job_line(job) -> str:
    return f"{job.id}\t{job.collection}\t{job.status}\t{job.done}/{job.total}"


def jobs(args: argparse.Namespace, client: Kindex) -> int:
    job = client.wait_for_job(args.job, timeout=args.wait_timeout) if args.wait else client.get_job(args.job)
    if args.json:
        emit_json(job)
    else:
        print(_job_line(job))
    return EXIT_OK


def reindex(args: argparse.Namespace, client: Kindex) -> int:
    if not args.collection:
        raise UsageError("reindex on a deployment needs --collection")
    job = client.start_reindex(args.collection, clean=args.clean)
    if args.wait:
        job = client.wait_for_job(job.id, timeout=args.wait_timeout)
    if args.json:
        emit_json(job)
    else:
        print(_job_line(job) if args.wait else job.id)
    return EXIT_OK


def render_usage(report) -> str:
    """A `UsageReport` as `kindex usage` prints it: each stored quantity against its limit, then the metered counts."""
    rows = [
        [name, f"{getattr(report, name):,}", "-" if (limit := getattr(report.limits, name)) is None else f"{limit:,}"]
        for name in ("documents", "chunks", "bytes", "collections")
    ]
    return (
        f"plan: {report.plan}\n"
        + table(rows, ["", "used", "limit"], last_column_min=5)
        + f"\nqueries today ({report.day}): {report.queries_today:,}"
        + f"\nembedding tokens this month ({report.month}, estimated): {report.embedding_tokens_month:,}"
    )


def usage(args: argparse.Namespace, client: Kindex) -> int:
    report = client.get_usage()
    if args.json:
        emit_json(report)
    else:
        print(render_usage(report))
    return EXIT_OK


# -- ingest ---------------------------------------------------------------------------------------------------------


def ingest(args: argparse.Namespace, client: Kindex) -> int:
    """`kindex ingest PATH --collection C` on a deployment: the arguments checked, the folder sent by remote_ingest."""
    from kindex_local.remote_ingest import ingest_folder

    if not args.path.exists():
        raise UsageError(f"{args.path} does not exist")
    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    metadata = document_metadata(args)  # a bad --attribute stops here, before anything is sent
    outcome = ingest_folder(
        client,
        args.collection,
        args.path,
        jobs=args.jobs,
        query_groups=args.query_groups,
        metadata=metadata,
        wait=args.wait,
        wait_timeout=args.wait_timeout,
        poll_interval=args.poll_interval,
        progress=sys.stderr.isatty() and not args.quiet,
    )
    return _report(outcome, args)


def _report(outcome: IngestOutcome, args: argparse.Namespace) -> int:
    if args.json:
        emit_json(outcome.as_json())
    else:
        pending = (
            f", {'not yet indexed' if args.wait else 'uploaded'} {len(outcome.pending)}" if outcome.pending else ""
        )
        print(
            f"indexed {len(outcome.indexed)}, unchanged {len(outcome.unchanged)}, failed {len(outcome.failed)}{pending}"
        )
        for doc_id, reason in sorted(outcome.failed):
            print(f"  failed {doc_id}: {reason}")
    return EXIT_FAILED if outcome.failed or (args.wait and outcome.pending) else EXIT_OK


# -- the parser -----------------------------------------------------------------------------------------------------


def add_connection_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    group = parser.add_argument_group("deployment")
    group.add_argument("--url", help="the deployment's base URL (or $KINDEX_URL)")
    group.add_argument("--key", help="an API key (or $KINDEX_API_KEY)")
    group.add_argument("--profile", help=f"a profile of {profiles_path()} with url and key (or $KINDEX_PROFILE)")
    group.add_argument("--timeout", type=float, default=30.0, help="seconds per request (default 30)")
    return parser


def _remote(sub, name: str, command, help_text: str, *, json_flag: bool = False) -> argparse.ArgumentParser:
    parser = add_connection_options(sub.add_parser(name, help=help_text))
    if json_flag:
        parser.add_argument("--json", action="store_true", help="JSON instead of the readable form")
    parser.set_defaults(func=lambda args: run(command, args))
    return parser


def _paged(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--page-size", type=int, default=1000, help="ids asked for per request (default 1000)")
    return parser


def add_wait_options(parser: argparse.ArgumentParser, default_wait: bool) -> None:
    if default_wait:
        parser.add_argument("--no-wait", dest="wait", action="store_false", help="do not wait for indexing")
    else:
        parser.add_argument("--wait", action="store_true", help="wait until done")
    parser.add_argument("--wait-timeout", type=float, default=3600.0, help="seconds to wait at most (default 3600)")


def add_commands(sub) -> None:
    """`collections`, `documents`, `query`, `cite` and `jobs` (always against a deployment)."""
    collections = sub.add_parser("collections", help="list, read, create/change or delete collections (remote)")
    col = collections.add_subparsers(dest="collections_command", required=True)
    _paged(_remote(col, "list", collections_list, "every collection id, one a line", json_flag=True))
    _remote(col, "get", collections_get, "one collection as JSON").add_argument("collection")
    put = _remote(col, "put", collections_put, "create a collection, or change the fields given")
    put.add_argument("collection")
    put.add_argument("--title")
    put.add_argument("--embedding-model")
    put.add_argument("--chunking-method", choices=["maxChars", "tokens"])
    put.add_argument("--chunking-max-size", type=int)
    put.add_argument("--chunking-overlap-offset", type=int)
    put.add_argument("--query-groups", help="comma-separated groups whose users may query")
    put.add_argument("--allow-guests", type=_boolean, metavar="{true,false}")
    put.add_argument(
        "--document-access",
        choices=["optional", "required"],
        help="what a document without an access list means: optional (default) - visible to whoever "
        "may query the collection; required - visible to nobody (fail closed)",
    )
    put.add_argument("--body", help="more fields as a JSON object (text, @file or - for stdin)")
    delete = _remote(
        col,
        "delete",
        collections_delete,
        "delete a collection with all its documents (prints its delete job's id; gone from reads at once)",
        json_flag=True,
    )
    delete.add_argument("collection")
    add_wait_options(delete, default_wait=False)

    documents = sub.add_parser("documents", help="list, read, write or delete documents, read chunks (remote)")
    doc = documents.add_subparsers(dest="documents_command", required=True)
    dlist = _paged(
        _remote(doc, "list", documents_list, "every document id of a collection (--long: what each is)", json_flag=True)
    )
    dlist.add_argument("collection")
    dlist.add_argument(
        "--long",
        "-l",
        action="store_true",
        help="a line per document: id, status, chunks, bytes, title, failure (tab-separated; with "
        "--json, the summaries)",
    )
    dlist.add_argument(
        "--status",
        action="append",
        choices=[s.value for s in DocumentStatus],
        help="only documents with this status (repeat for several)",
    )
    get = _remote(doc, "get", documents_get, "one document as JSON (with --content, its text)")
    get.add_argument("collection")
    get.add_argument("document")
    get.add_argument("--content", action="store_true", help="include the document's text")
    dput = _remote(doc, "put", documents_put, "create or change a document: a file (--file) or text (--content)")
    dput.add_argument("collection")
    dput.add_argument("document")
    dput.add_argument("--file", type=Path, help="upload this file through a presigned URL")
    for name, dest in DOCUMENT_FIELDS.items():
        dput.add_argument(
            f"--{dest.replace('_', '-')}", dest=dest, help="the link citations point to" if name == "url" else None
        )
    dput.add_argument("--body", help="more fields as a JSON object (text, @file or - for stdin)")
    add_metadata_options(dput)
    add_wait_options(dput, default_wait=False)
    ddel = _remote(doc, "delete", documents_delete, "delete a document everywhere")
    ddel.add_argument("collection")
    ddel.add_argument("document")
    chunks = _paged(_remote(doc, "chunks", documents_chunks, "a document's chunks in order", json_flag=True))
    chunks.add_argument("collection")
    chunks.add_argument("document")

    q = _remote(sub, "query", query, "search one or more collections (remote)", json_flag=True)
    q.add_argument("text")
    q.add_argument("--collection", "-c", action="append", required=True, help="a collection (repeat for several)")
    q.add_argument("-k", type=int, default=10, help="results (default 10)")
    q.add_argument("--mode", choices=["hybrid", "vector", "keyword"], default="hybrid")
    q.add_argument("--user", help="the end user the query is for")
    q.add_argument("--group", action="append", help="a group of the end user (repeat for several)")
    q.add_argument(
        "--filter",
        metavar="JSON",
        help='an attribute filter (filters.attributes), e.g. \'{"region": '
        '"eu", "year": {"$gte": 2020}}\' (text, @file or - for stdin; docs/clients.md has the language)',
    )

    c = _remote(sub, "cite", cite, "turn <CIT id /> tags of an answer into footnotes (remote)", json_flag=True)
    c.add_argument("text", help="the answer's text, or - to read it from stdin")
    c.add_argument("--query-id", required=True, help="query_id of the query the answer came from")
    c.add_argument("--html", action="store_true", help="print the sanitized HTML instead of markdown")

    j = _remote(sub, "jobs", jobs, "a reindex job's progress (remote)", json_flag=True)
    j.add_argument("job")
    add_wait_options(j, default_wait=False)


def add_ingest_options(parser: argparse.ArgumentParser) -> None:
    """What `kindex ingest` takes on top of its local options when it goes to a deployment."""
    add_connection_options(parser)
    parser.add_argument("--jobs", type=int, default=4, help="concurrent uploads to a deployment (default 4)")
    parser.add_argument(
        "--query-groups",
        help="comma-separated groups whose users may query the collection "
        "(deployment only; set whether the collection is new or not)",
    )
    parser.add_argument("--json", action="store_true", help="the summary as JSON (deployment only)")
    parser.add_argument("--poll-interval", type=float, default=1.0, help=argparse.SUPPRESS)
    add_wait_options(parser, default_wait=True)


def add_reindex_options(parser: argparse.ArgumentParser) -> None:
    add_connection_options(parser)
    parser.add_argument("--collection", help="the collection to reindex (deployment only)")
    parser.add_argument("--clean", action="store_true", help="rebuild from scratch (deployment only)")
    parser.add_argument("--json", action="store_true", help="the job as JSON (deployment only)")
    add_wait_options(parser, default_wait=False)


def _boolean(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError("true or false")
    return text.lower() == "true"
