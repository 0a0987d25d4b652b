"""The `kindex` command: serve locally, manage API keys, ingest, reindex, redrive; `smoke`, an end-to-end check
of any deployment over HTTP(S); and the commands that work any deployment through the SDK (remote_cli.py)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from kindex.domain.models import Role
from kindex.settings import SettingsError, load_settings

if TYPE_CHECKING:
    from kindex.app.keys import KeyService
    from kindex.compose import Services


def _settings(args: argparse.Namespace):
    from kindex.adapters.local.private_files import PRIVATE_UMASK

    # Every command opens a data directory, which holds every tenant's data: whatever it (or a library it calls)
    # creates there is owner-only. The adapters set their modes themselves too; this covers everything else.
    os.umask(PRIVATE_UMASK)
    return load_settings(
        data_dir=getattr(args, "data_dir", None), port=getattr(args, "port", None), host=getattr(args, "host", None)
    )


def cmd_serve(args: argparse.Namespace) -> int:
    # Before numpy loads OpenBLAS: one BLAS thread per call. The embedded index scores a query with one matrix-vector
    # product (memory-bound: 0.1 ms for 10k x 384 with OpenBLAS's threads, 0.2 ms without), but the server makes
    # such calls from up to 32 request threads at once, and OpenBLAS's shared pool then serialises and spins: 16
    # threads' calls took 18.6 ms each against 0.17 ms single-threaded (2 cores). OPENBLAS_NUM_THREADS set by the
    # user is kept.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from kindex_local.deployment import start

    settings = _settings(args)
    try:
        server = start(settings)
    except OSError as error:
        print(f"error: cannot listen on {settings.host}:{settings.port}: {error.strerror}", file=sys.stderr)
        return 2

    # SIGTERM and a first Ctrl-C stop the same way: finish requests, stop the worker and the query processes. Our own
    # SIGINT handler, not asyncio's: asyncio.run's cancels the serving task, which a cancellation caught inside the
    # HTTP layer could swallow (the likely cause of a Ctrl-C that one test run saw unanswered for 30 s), and a
    # KeyboardInterrupt raised between two statements could skip the shutdown. A second Ctrl-C interrupts at once.
    def interrupt(*_: object) -> None:
        if server.stop_requested:
            raise KeyboardInterrupt
        server.request_stop()

    signal.signal(signal.SIGTERM, lambda *_: server.request_stop())
    signal.signal(signal.SIGINT, interrupt)
    host, port = server.address
    print(
        f"kindex listening on http://{host}:{port} (docs: http://{host}:{port}/docs, console: "
        f"http://{host}:{port}/console)",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
    return 0


def _local_services(args: argparse.Namespace) -> Services:
    """The services of the local deployment the arguments name: its data directory made private, its settings
    exported the way the functions read them, and a container built from them (not one of an earlier command)."""
    from kindex.adapters.local.private_files import private_data_dir
    from kindex.compose import container
    from kindex_local.deployment import export_settings

    settings = _settings(args)
    private_data_dir(settings.data_dir)
    export_settings(settings)
    container.cache_clear()
    return container()


def _keys(args: argparse.Namespace) -> KeyService:
    return _local_services(args).keys


NO_PLAN_KEYS = (
    "the tenant's API Gateway key was not put into a usage plan: set KINDEX_USAGE_PLANS to the stack's "
    "UsagePlans output (docs/aws.md, 'How usage plans are assigned'), then run `kindex keys sync-plans`; "
    "until then API Gateway answers this tenant 403 no_usage_plan"
)


def cmd_keys_create(args: argparse.Namespace) -> int:
    keys = _keys(args)
    key, token = keys.create(args.tenant, args.role, args.description or "")
    if keys.usage_plans is not None:
        plan, _ = keys.usage_plans.plans.plan_for(key.tenant)
        print(f"Tenant '{key.tenant}' is on usage plan '{plan}'.")
    elif keys_backend_is_aws():
        print(f"warning: {NO_PLAN_KEYS}", file=sys.stderr)
    print(f"Created {key.role.value} key {key.key_id} for tenant '{key.tenant}'. It is shown once:")
    print(token)
    return 0


def keys_backend_is_aws() -> bool:
    from kindex.compose import container

    return container().settings.backend == "aws"


def cmd_keys_sync_plans(args: argparse.Namespace) -> int:
    """Put every tenant with a live key into its configured usage plan (after a deployment changed the plans)."""
    keys = _keys(args)
    if keys.usage_plans is None:
        if keys_backend_is_aws():
            print(f"error: {NO_PLAN_KEYS}", file=sys.stderr)
            return 2
        print("Nothing to do: `kindex serve` applies KINDEX_USAGE_PLANS itself when it starts.")
        return 0
    tenants = [args.tenant] if args.tenant else keys.tenants()
    changed = 0
    for tenant, plan, moved in keys.usage_plans.assign_all(tenants):
        changed += moved
        print(f"{tenant}\t{plan}\t{'changed' if moved else 'unchanged'}")
    print(f"{len(tenants)} tenant(s), {changed} changed")
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    for key in _keys(args).list(args.tenant):
        state = "revoked" if key.revoked else "active"
        print(f"{key.key_id}\t{key.tenant}\t{key.role.value}\t{state}\t{key.created_at.isoformat()}\t{key.description}")
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    _keys(args).revoke(args.key_id)
    print(f"Revoked key {args.key_id}")
    return 0


def _remote(args: argparse.Namespace, command: str) -> int | None:
    """Run `ingest`/`reindex` against a deployment when one is named; None to run them locally."""
    from kindex_local import remote_cli

    if not remote_cli.remote_requested(args):
        return None
    if args.data_dir is not None or getattr(args, "tenant", "default") != "default":
        print("error: --data-dir and --tenant are for the local data directory, not with a deployment", file=sys.stderr)
        return 2
    return remote_cli.run(getattr(remote_cli, command), args)


def cmd_ingest(args: argparse.Namespace) -> int:
    if (code := _remote(args, "ingest")) is not None:
        return code
    from kindex.compose import local_adapters
    from kindex_local.deployment import build_worker, worker_lock
    from kindex_local.ingest_cli import document_metadata, ingest_path

    metadata = document_metadata(args)  # a bad --attribute stops here, before anything is written
    services = _local_services(args)
    if not args.path.exists():
        print(f"error: {args.path} does not exist", file=sys.stderr)
        return 2
    lock = worker_lock(services.settings.data_dir)
    worker = build_worker() if lock is not None else None
    if worker is None:
        print("A kindex server is running on this data directory; its worker indexes the files.")
    try:
        outcome = ingest_path(
            services, args.tenant, args.collection, args.path, worker=worker, progress=not args.quiet, metadata=metadata
        )
    finally:
        if worker is not None and not services.settings.search_url:
            # this process wrote the embedded index: compact it like a server stop
            local_adapters(services).embedded_index.close()
    print(
        f"indexed {len(outcome['indexed'])}, unchanged {len(outcome['unchanged'])}, "
        f"failed {len(outcome['failed'])}, still pending {len(outcome['timed_out'])}"
    )
    for line in outcome["failed"]:
        print(f"  failed {line}")
    return 1 if outcome["failed"] or outcome["timed_out"] else 0


def cmd_redrive(args: argparse.Namespace) -> int:
    from kindex.compose import local_adapters

    moved = local_adapters(_local_services(args)).queue.redrive()
    print(f"Moved {moved} dead-lettered message(s) back to the queue")
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    if (code := _remote(args, "reindex")) is not None:
        return code
    if args.collection or args.clean:
        print("error: --collection and --clean need a deployment (--url, --profile or KINDEX_URL)", file=sys.stderr)
        return 2
    from kindex_local.deployment import build_worker, worker_lock

    services = _local_services(args)
    summary = services.reindex_planner.plan(full=args.full)
    print(
        f"reindex: {summary['tenants']} tenant(s), {summary['collections']} collection(s), {summary['tasks']} "
        "task(s) queued"
    )
    lock = worker_lock(services.settings.data_dir)
    if lock is None:
        print("the running server's worker does the tasks")
        return 0
    build_worker().drain(timeout=3600)
    switched = services.model_switch.finish_switches()
    print(f"processed the queue; {switched} model switch(es) completed")
    return 0


def cmd_usage(args: argparse.Namespace) -> int:
    """The tenant's usage and limits: from a deployment (its key's tenant) when one is named, else from the local
    data directory (--tenant)."""
    from kindex_local import remote_cli

    if remote_cli.remote_requested(args):
        if args.data_dir is not None or args.tenant is not None:
            print(
                "error: --data-dir and --tenant are for the local data directory, not with a deployment",
                file=sys.stderr,
            )
            return 2
        return remote_cli.run(remote_cli.usage, args)
    _keys(args)
    from kindex.compose import container

    report = container().usage.report(args.tenant or "default")
    if args.json:
        remote_cli.emit_json(report)
    else:
        print(remote_cli.render_usage(report))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from kindex_local import remote_cli

    parser = argparse.ArgumentParser(
        prog="kindex",
        description="Knowledge index for retrieval-augmented generation",
        epilog=remote_cli.epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def with_data_dir(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--data-dir", type=Path, help="data directory (default ./.kindex or $KINDEX_DATA_DIR)")
        return p

    serve = with_data_dir(sub.add_parser("serve", help="run the local server and its worker"))
    serve.add_argument("--port", type=int, help="port (default 8080 or $KINDEX_PORT; 0 picks a free one)")
    serve.add_argument("--host", help="interface (default 127.0.0.1)")
    serve.set_defaults(func=cmd_serve)

    keys = sub.add_parser("keys", help="manage API keys").add_subparsers(dest="keys_command", required=True)
    create = with_data_dir(keys.add_parser("create", help="create a key; prints it once, alone on the last line"))
    create.add_argument("--tenant", required=True)
    create.add_argument(
        "--role",
        required=True,
        choices=[role.value for role in Role],
        help="admin: everything; reader: read, query and cite; query: query and cite only",
    )
    create.add_argument("--description")
    create.set_defaults(func=cmd_keys_create)
    listing = with_data_dir(keys.add_parser("list", help="list keys (never their secrets)"))
    listing.add_argument("--tenant")
    listing.set_defaults(func=cmd_keys_list)
    sync = with_data_dir(
        keys.add_parser(
            "sync-plans",
            help="AWS: put every tenant's API Gateway key into the usage plan the configuration names for it",
        )
    )
    sync.add_argument("--tenant", help="only this tenant")
    sync.set_defaults(func=cmd_keys_sync_plans)
    revoke = with_data_dir(keys.add_parser("revoke", help="revoke a key by id"))
    revoke.add_argument("key_id")
    revoke.set_defaults(func=cmd_keys_revoke)
    ingest = with_data_dir(sub.add_parser("ingest", help="index a file or a whole folder into a collection"))
    ingest.add_argument("path", type=Path)
    ingest.add_argument("--collection", required=True)
    ingest.add_argument("--tenant", default="default")
    ingest.add_argument("--quiet", action="store_true", help="no progress bar")
    from kindex_local.ingest_cli import add_metadata_options

    add_metadata_options(ingest)
    remote_cli.add_ingest_options(ingest)
    ingest.set_defaults(func=cmd_ingest)
    reindex = with_data_dir(
        sub.add_parser(
            "reindex",
            help="run the reindex pass once (the server runs it hourly); "
            "with a deployment, start a reindex job of one collection",
        )
    )
    reindex.add_argument(
        "--full",
        action="store_true",
        help="sweep every document of every collection now (after moving a data directory to a "
        "cluster), instead of one bounded drift page per collection",
    )
    remote_cli.add_reindex_options(reindex)
    reindex.set_defaults(func=cmd_reindex)
    redrive = with_data_dir(sub.add_parser("redrive", help="retry the dead-lettered ingest messages"))
    redrive.set_defaults(func=cmd_redrive)
    smoke = sub.add_parser("smoke", help="end-to-end check of a deployment over HTTP(S) with an admin key")
    smoke.add_argument("--url", help="the deployment's base URL (or KINDEX_URL)")
    smoke.add_argument("--key", help="an admin API key of the tenant to run under (or KINDEX_API_KEY)")
    smoke.add_argument("--file", type=Path, help="the file to upload (default: a short built-in markdown text)")
    smoke.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for indexing (default 300)")
    smoke.set_defaults(func=cmd_smoke)
    usage = with_data_dir(
        sub.add_parser("usage", help="a tenant's documents, chunks, bytes, collections, queries and tokens, and limits")
    )
    usage.add_argument("--tenant", help="the tenant of the local data directory (default: default)")
    usage.add_argument("--json", action="store_true", help="JSON instead of the readable form")
    remote_cli.add_connection_options(usage)
    usage.set_defaults(func=cmd_usage)
    remote_cli.add_commands(sub)
    from kindex_local import transfer_commands

    transfer_commands.add_commands(sub)
    return parser


def cmd_smoke(args: argparse.Namespace) -> int:
    from kindex_local.smoke import run

    url, key = args.url or os.environ.get("KINDEX_URL"), args.key or os.environ.get("KINDEX_API_KEY")
    if not url or not key:
        print("error: give --url and --key (or KINDEX_URL and KINDEX_API_KEY)", file=sys.stderr)
        return 2
    return run(url, key, file=args.file, timeout=args.timeout)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    args = build_parser().parse_args(argv)
    from kindex.domain.errors import KindexError

    try:
        return args.func(args)
    except (SettingsError, KindexError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
