"""The `kindex export`, `kindex import` and `kindex mcp` subcommands (argument parsing and exit codes); the work is in
transfer_files.py and mcp_server.py. Export and import run like the other remote commands (remote_cli.run: --url/--key,
--profile or the environment; its exit codes), and a bad or truncated file is exit 1."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable


def _remote_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="the deployment's base URL (or KINDEX_URL)")
    parser.add_argument("--key", help="an API key (or KINDEX_API_KEY)")
    parser.add_argument("--profile", help="a [profile] of the profiles file with url and key (or KINDEX_PROFILE)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default 120)")


def add_commands(sub) -> None:
    export = sub.add_parser("export", help="write a collection (documents, chunks, vectors) to a JSON-lines file")
    _remote_flags(export)
    export.add_argument("--collection", required=True)
    export.add_argument("-o", "--output", required=True, help="file to write ('.gz' compresses; '-' for stdout)")
    export.add_argument("--quiet", action="store_true", help="no progress bar")
    export.set_defaults(func=cmd_export)
    load = sub.add_parser("import", help="load an export into a collection (created from the file if missing)")
    _remote_flags(load)
    load.add_argument("file", help="the export file ('-' for stdin)")
    load.add_argument("--collection", required=True)
    load.add_argument("--quiet", action="store_true", help="no progress bar")
    load.set_defaults(func=cmd_import)
    mcp = sub.add_parser("mcp", help="serve the search and cite tools over MCP for one configured end user")
    _remote_flags(mcp)
    mcp.add_argument("--user", help="the end user every search runs for (or KINDEX_MCP_USER)")
    mcp.add_argument("--groups", help="that user's groups, comma-separated (or KINDEX_MCP_GROUPS)")
    mcp.add_argument(
        "--collection",
        action="append",
        dest="collections",
        help="a collection `search` uses by default (repeat; or KINDEX_MCP_COLLECTIONS)",
    )
    mcp.add_argument(
        "--filter",
        metavar="JSON",
        help="an attribute filter every search is ANDed with: the model "
        "may narrow it, never widen it (or KINDEX_MCP_FILTER)",
    )
    mcp.add_argument(
        "--transport",
        choices=("stdio", "http"),
        default="stdio",
        help="stdio (default; the client starts the server) or streamable HTTP",
    )
    mcp.add_argument("--host", default="127.0.0.1", help="interface for --transport http")
    mcp.add_argument("--port", type=int, default=8765, help="port for --transport http (default 8765)")
    mcp.set_defaults(func=cmd_mcp)


def _transfer(work) -> Callable:
    """A remote command (remote_cli.run: profiles, typed errors, exit codes) whose bad file is exit 1."""
    from kindex_local.remote_cli import EXIT_FAILED
    from kindex_local.transfer_files import TransferFailed

    def command(args: argparse.Namespace, client) -> int:
        try:
            return work(args, client)
        except (TransferFailed, OSError) as error:
            print(f"error: {error}", file=sys.stderr)
            return EXIT_FAILED

    return command


def _export(args: argparse.Namespace, client) -> int:
    from kindex_local.transfer_files import export_collection

    done = export_collection(client, args.collection, args.output, progress=not args.quiet)
    out = sys.stderr if args.output == "-" else sys.stdout
    print(f"exported {done['documents']} documents, {done['chunks']} chunks from {args.collection}", file=out)
    if done["skipped"]:
        print(
            f"skipped {len(done['skipped'])} documents that are not indexed: "
            f"{', '.join(done['skipped'][:20])}{' ...' if len(done['skipped']) > 20 else ''}",
            file=out,
        )
    return 0


def _import(args: argparse.Namespace, client) -> int:
    from kindex_local.transfer_files import import_file

    done = import_file(client, args.file, args.collection, progress=not args.quiet)
    created = " (created)" if done["collection_created"] else ""
    print(
        f"imported {done['documents']} documents, {done['chunks']} chunks into {args.collection}{created}; "
        f"{done['texts_embedded']} texts embedded"
    )
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from kindex_local import remote_cli

    return remote_cli.run(_transfer(_export), args)


def cmd_import(args: argparse.Namespace) -> int:
    from kindex_local import remote_cli

    return remote_cli.run(_transfer(_import), args)


def cmd_mcp(args: argparse.Namespace) -> int:
    from kindex_local.remote_cli import EXIT_USAGE, UsageError, target

    try:
        from kindex_local.mcp_server import McpSettings, run
    except ImportError as error:
        print(f"error: the MCP server needs the `mcp` extra (pip install 'kindex[mcp]'): {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        url, key = target(args)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        settings = McpSettings.from_args(
            url, key, args.user, args.groups, args.collections, timeout=args.timeout, filter_json=args.filter
        )
    except ValueError as error:  # a configured filter the API would refuse
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    run(settings, args.transport, host=args.host, port=args.port)
    return 0
