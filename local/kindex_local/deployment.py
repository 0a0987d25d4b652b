"""Local mode's equivalent of the CDK API definition: which function serves which route, and start-up."""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import logging
import os
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

from kindex.adapters.embedders.windows import available_cores
from kindex.adapters.local.private_files import private_data_dir
from kindex.api.http import error_response
from kindex.app.cpu_slots import CpuSlots
from kindex.domain.errors import Conflict
from kindex.domain.usage_plans import NamedPlan
from kindex.settings import ENV_NAMES, Settings, SettingsError
from kindex_local.query_processes import QueryProcesses, default_count
from kindex_local.server import Gateway, LocalServer, Route
from kindex_local.throttle import TenantThrottle

logger = logging.getLogger(__name__)


def export_settings(settings: Settings) -> None:
    """Hand the settings to the functions the way Lambda does: through their environment."""
    # No CloudWatch here: the services log their metrics instead of printing EMF documents.
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")  # no X-Ray daemon here
    for field, name in ENV_NAMES.items():
        value = getattr(settings, field)
        if value is not None:
            os.environ[name] = str(value.resolve() if isinstance(value, Path) else value)


class UploadRoute:
    """What S3 does for presigned PUTs: check the signature (which covers the key, Content-Type, the exact
    Content-Length and `If-None-Match: *`) before reading the body, stream the bytes to the blob store, keep them
    only when exactly the signed length arrived and the key holds no blob yet; the blob store's notification then
    queues the ingest event. A second PUT of one URL, however its bytes differ, gets 412 and changes nothing."""

    method = "PUT"

    def __init__(self, max_body_bytes: int):
        from kindex.adapters.local.upload_signer import UPLOAD_PATH

        self.prefix = UPLOAD_PATH
        self.pattern = re.compile(re.escape(UPLOAD_PATH) + ".+")
        self.max_body_bytes = max_body_bytes

    def _key(self, path: str) -> str:
        return unquote(path[len(self.prefix) :])

    def admit(self, path: str, query: dict[str, str], headers: dict[str, str]) -> dict | None:
        from kindex.compose import container, local_adapters

        # No Content-Length (a chunked body) never verifies: the signature covers the length as sent.
        if not local_adapters(container()).presigner.verify(
            self._key(path),
            headers.get("content-type", ""),
            headers.get("content-length", ""),
            query.get("expires", ""),
            query.get("signature", ""),
            headers.get("if-none-match", ""),
        ):
            return error_response(
                403,
                "forbidden",
                "the upload URL is invalid or expired, or Content-Type, "
                "Content-Length or If-None-Match differs from the signed one",
            )
        if container().adapters.blobs.blob_size(self._key(path)) is not None:
            return _already_uploaded()  # early, to not read a body that will be refused; the commit decides
        return None

    def open(self, path: str, query: dict[str, str], headers: dict[str, str]) -> _UploadSink:
        from kindex.compose import container, local_adapters

        writer = local_adapters(container()).blobs.open_put(
            self._key(path), headers.get("content-type", ""), only_if_absent=True
        )
        return _UploadSink(writer, int(headers["content-length"]))


def _already_uploaded() -> dict:
    return error_response(
        412,
        "precondition_failed",
        "this upload URL was already used: each ticket uploads one file once (ask for a new ticket to upload again)",
    )


class _UploadSink:
    def __init__(self, writer, expected: int):
        self.writer = writer
        self.expected = expected
        self.md5 = hashlib.md5()

    def write(self, data: bytes) -> None:
        self.writer.write(data)
        self.md5.update(data)

    def finish(self) -> dict:
        if self.writer.size != self.expected:  # the signed length is the only one S3 would store
            self.writer.abort()
            return error_response(403, "forbidden", "the body's length differs from the signed Content-Length")
        try:
            self.writer.commit()
        except Conflict:
            return _already_uploaded()  # another PUT of this URL committed first (the writer left nothing)
        return {"statusCode": 200, "headers": {"ETag": f'"{self.md5.hexdigest()}"'}, "body": ""}

    def abort(self) -> None:
        self.writer.abort()


def cluster_address(url: str) -> str:
    """`url` without its user and password, for printing."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
    return f"{parts.scheme}://{host}{port}"


def build_gateway(settings: Settings) -> Gateway:
    from functions import api, authorizer, query
    from kindex.api.routes import api_routes

    handlers = {"query": query.handler, "api": api.handler}
    routes = [
        Route(method, route.pattern, f"kindex-{route.function}", handlers[route.function], public=route.public)
        for route in api_routes({"query": query.resolver, "api": api.resolver}, public_function="api")
        for method in route.methods
    ]
    plans = settings.plans
    throttle = TenantThrottle(plans) if plans is not None else None
    return Gateway(
        authorizer.handler,
        routes,
        settings.max_body_bytes,
        raw_routes=[UploadRoute(settings.max_file_bytes)],
        throttle=throttle,
    )


def build_worker():
    from functions import ingest, reindex_worker
    from kindex.compose import container, local_adapters
    from kindex_local.worker import Worker, by_message_kind

    services = container()
    return Worker(
        local_adapters(services).queue,
        by_message_kind(ingest.handler, reindex_worker.handler),
        threads=services.settings.ingest_workers,
    )


def write_admin_key(data_dir: Path, token: str) -> Path:
    """Write the first admin key where only the owner can read it (0600 from creation, never wider)."""
    path = data_dir / "admin-key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    os.chmod(path, 0o600)
    return path


def worker_lock(data_dir: Path):
    """Only one process at a time runs the worker of a data directory (the embedded index is single-writer).
    Returns the open lock file while held, None when another process holds it."""
    handle = open(data_dir / "worker.lock", "a+", opener=lambda path, flags: os.open(path, flags, 0o600))
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def server_cpu_slots(settings: Settings, query_processes: int = 0) -> CpuSlots | None:
    """The server's CPU slots: `cpu_slots` of them, by default the cores this process may use plus one (the most
    queries/s measured on 2 cores: 3 slots against 2, 4, 6, 8 and 32; docs/decisions.md); 0 is no limit. In one of
    `query_processes` query processes, the default is its share of the cores, at least one: on 2 cores, one slot in
    each of two processes had the shortest tail at 16 clients (p99 271-292 ms against 297-328 with three, the same
    queries/s or more; docs/decisions.md)."""
    if settings.cpu_slots == 0:
        return None
    if settings.cpu_slots:
        return CpuSlots(settings.cpu_slots)
    cores = available_cores()
    return CpuSlots(max(1, cores // query_processes) if query_processes else cores + 1)


def query_process_count(settings: Settings) -> int:
    """How many query processes `kindex serve` runs: `query_processes`, by default one per core this process may
    use when it may use two or more (kindex_local.query_processes)."""
    if settings.query_processes is not None:
        return settings.query_processes
    return default_count(available_cores())


def start_query_processes(server: LocalServer, settings: Settings) -> None:
    """The query function's routes answered by child processes, when there are to be any (after the settings were
    exported: the children inherit them). Stopped with the server."""
    count = query_process_count(settings)
    if count == 0:
        return
    gateway = server.app.gateway
    (local,) = {route.handler for route in gateway.routes if route.function_name == "kindex-query"}
    processes = QueryProcesses(count, settings.request_budget_s, local=local)
    processes.start()
    server.background.append(processes)
    gateway.routes = [
        dataclasses.replace(route, handler=processes.handler) if route.function_name == "kindex-query" else route
        for route in gateway.routes
    ]
    source = ENV_NAMES["query_processes"]
    if settings.query_processes is None:
        source = f"one per core; {source}"
    print(f"Query processes: {count} ({source})", flush=True)


def start(settings: Settings) -> LocalServer:
    """Prepare the data directory, the first admin key, the server (bound, not yet serving), its worker and its
    query processes."""
    from kindex.compose import container, local_adapters

    if settings.index_follower:
        raise SettingsError(f"{ENV_NAMES['index_follower']} is set by kindex serve for its query processes only")
    private_data_dir(settings.data_dir)  # 0700, and a data directory of an older version narrowed (files 0600)
    lock = worker_lock(settings.data_dir)
    if lock is None:
        raise SettingsError(f"another kindex process is running on {settings.data_dir}")
    export_settings(settings)
    server = LocalServer(build_gateway(settings), settings.host, settings.port, cpu_slots=server_cpu_slots(settings))
    host, port = server.address
    os.environ["KINDEX_PUBLIC_URL"] = settings.public_url or f"http://{host}:{port}"
    container.cache_clear()
    services = container()
    token = services.keys.ensure_bootstrap_key(settings.bootstrap_tenant)
    if token is not None:
        path = write_admin_key(settings.data_dir, token)
        print(f"Created tenant '{settings.bootstrap_tenant}' with an admin API key (shown once, also in {path}):")
        print(token, flush=True)
    if settings.search_url:
        # Built now: a missing client library or a damaged data directory id stops the start, not the first query.
        index = local_adapters(services).opensearch_index
        print(
            f"Search index: OpenSearch at {cluster_address(settings.search_url)}, indices "
            f"{local_adapters(services).search_index_prefix}-*, engine {index.engine}",
            flush=True,
        )
    if settings.plans is not None:
        print(
            "Per-tenant limits: "
            + "; ".join(
                f"{name} {plan.rate_limit:g}/s burst {plan.burst_limit}"
                + (f", {plan.quota_per_day}/day" if plan.quota_per_day else "")
                + (f" ({len(plan.tenants)} tenant(s))" if isinstance(plan, NamedPlan) else "")
                for name, plan in settings.plans.all_plans().items()
            ),
            flush=True,
        )
    recovered = local_adapters(services).queue.recover_in_flight()
    if recovered:
        logger.warning("recovered in-flight messages from a previous run", extra={"messages": recovered})
    worker = build_worker()
    worker.start()
    server.background.append(worker)
    from kindex_local.worker import Scheduler

    scheduler = Scheduler(services.reindex_planner, services.model_switch, settings.reindex_interval_seconds)
    scheduler.start()
    server.background.append(scheduler)
    if not settings.search_url:
        # The embedded index compacts its graph partitions when closed, after the worker has stopped (shutdown).
        server.closing.append(local_adapters(services).embedded_index.close)
    start_query_processes(server, settings)
    server.lock = lock
    return server
