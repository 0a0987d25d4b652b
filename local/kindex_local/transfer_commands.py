"""The `kindex export`, `kindex import` and `kindex mcp` subcommands (argument parsing and exit codes); the work is in
transfer_cli.py and mcp_server.py. Exit codes: 0 done, 1 the deployment or the file refused, 2 usage."""

from __future__ import annotations

import argparse
import sys


def _remote_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="the deployment's base URL (or KINDEX_URL)")
    parser.add_argument("--key", help="an API key (or KINDEX_API_KEY)")


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
    mcp.add_argument("--collection", action="append", dest="collections",
                     help="a collection `search` uses by default (repeat; or KINDEX_MCP_COLLECTIONS)")
    mcp.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                     help="stdio (default; the client starts the server) or streamable HTTP")
    mcp.add_argument("--host", default="127.0.0.1", help="interface for --transport http")
    mcp.add_argument("--port", type=int, default=8765, help="port for --transport http (default 8765)")
    mcp.set_defaults(func=cmd_mcp)


def _remote(args: argparse.Namespace):
    from kindex_local.remote_http import Remote, RemoteConfig

    return Remote(RemoteConfig.from_args(args.url, args.key, timeout=120.0))


def _run(args: argparse.Namespace, work) -> int:
    from kindex_local.remote_http import ConfigurationMissing, RemoteError
    from kindex_local.transfer_cli import TransferFailed

    try:
        remote = _remote(args)
    except ConfigurationMissing as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        return work(remote)
    except (RemoteError, TransferFailed) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        remote.close()


def cmd_export(args: argparse.Namespace) -> int:
    from kindex_local.transfer_cli import export_collection

    def work(remote) -> int:
        done = export_collection(remote, args.collection, args.output, progress=not args.quiet)
        out = sys.stderr if args.output == "-" else sys.stdout
        print(f"exported {done['documents']} documents, {done['chunks']} chunks from {args.collection}", file=out)
        if done["skipped"]:
            print(f"skipped {len(done['skipped'])} documents that are not indexed: "
                  f"{', '.join(done['skipped'][:20])}{' ...' if len(done['skipped']) > 20 else ''}", file=out)
        return 0

    return _run(args, work)


def cmd_import(args: argparse.Namespace) -> int:
    from kindex_local.transfer_cli import import_file

    def work(remote) -> int:
        done = import_file(remote, args.file, args.collection, progress=not args.quiet)
        created = " (created)" if done["collection_created"] else ""
        print(f"imported {done['documents']} documents, {done['chunks']} chunks into {args.collection}{created}; "
              f"{done['texts_embedded']} texts embedded")
        return 0

    return _run(args, work)


def cmd_mcp(args: argparse.Namespace) -> int:
    from kindex_local.remote_http import ConfigurationMissing

    try:
        from kindex_local.mcp_server import McpSettings, run
    except ImportError as error:
        print(f"error: the MCP server needs the `mcp` extra (pip install 'kindex[mcp]'): {error}", file=sys.stderr)
        return 2
    try:
        settings = McpSettings.from_args(args.url, args.key, args.user, args.groups, args.collections)
    except ConfigurationMissing as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    run(settings, args.transport, host=args.host, port=args.port)
    return 0
