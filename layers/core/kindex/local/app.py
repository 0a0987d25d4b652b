"""Local mode's equivalent of the CDK API definition: which function serves which route, and start-up."""

from __future__ import annotations

import base64
import fcntl
import hashlib
import logging
import os
import re
from pathlib import Path
from urllib.parse import unquote

from kindex.api.http import error_response
from kindex.local.server import Gateway, LocalServer, Route
from kindex.settings import ENV_NAMES, Settings, SettingsError

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


def upload_route(settings: Settings) -> Route:
    """What S3 does for presigned PUTs: check the signature, store the bytes; the blob store's notification
    then queues the ingest event."""
    from kindex.local.uploads import UPLOAD_PATH
    from kindex.wiring import container

    def handle(event: dict, _context) -> dict:
        key = unquote(event["path"][len(UPLOAD_PATH):])
        query = event.get("queryStringParameters") or {}
        headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
        content_type = headers.get("content-type", "")
        content_length = headers.get("content-length", "")
        if not container().uploads.verify(key, content_type, content_length, query.get("expires", ""),
                                          query.get("signature", "")):
            return error_response(403, "forbidden", "the upload URL is invalid or expired, or Content-Type or "
                                                    "Content-Length differs from the signed one")
        body = event.get("body") or ""
        data = base64.b64decode(body) if event.get("isBase64Encoded") else body.encode("utf-8")
        if len(data) != int(content_length):  # the signed length is the only one S3 would store
            return error_response(403, "forbidden", "the body's length differs from the signed Content-Length")
        container().blobs.put_blob(key, data, content_type)
        return {"statusCode": 200, "headers": {"ETag": f'"{hashlib.md5(data).hexdigest()}"'}, "body": ""}

    return Route("PUT", re.compile(re.escape(UPLOAD_PATH) + ".+"), "local-upload", handle, public=True,
                 max_body_bytes=settings.max_file_bytes)


def build_gateway(settings: Settings) -> Gateway:
    from functions import api, authorizer, query

    routes = [upload_route(settings),
              Route("POST", re.compile(r"/v1/query|/v1/collections/[^/]+/query"), "kindex-query", query.handler),
              Route(None, re.compile(r"/docs|/v1/.*"), "kindex-api", api.handler)]
    return Gateway(authorizer.handler, routes, settings.max_body_bytes)


def build_worker():
    from functions import ingest
    from kindex.local.events import Worker
    from kindex.wiring import container

    return Worker(container().queue, ingest.handler)


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
    handle = open(data_dir / "worker.lock", "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def start(settings: Settings) -> LocalServer:
    """Prepare the data directory, the first admin key, the server (bound, not yet serving) and its worker."""
    from kindex.wiring import container

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    lock = worker_lock(settings.data_dir)
    if lock is None:
        raise SettingsError(f"another kindex process is running on {settings.data_dir}")
    export_settings(settings)
    server = LocalServer(build_gateway(settings), settings.host, settings.port)
    host, port = server.address
    os.environ["KINDEX_PUBLIC_URL"] = settings.public_url or f"http://{host}:{port}"
    container.cache_clear()
    services = container()
    token = services.keys.ensure_bootstrap_key(settings.bootstrap_tenant)
    if token is not None:
        path = write_admin_key(settings.data_dir, token)
        print(f"Created tenant '{settings.bootstrap_tenant}' with an admin API key (shown once, also in {path}):")
        print(token, flush=True)
    recovered = services.queue.recover_in_flight()
    if recovered:
        logger.warning("recovered in-flight messages from a previous run", extra={"messages": recovered})
    worker = build_worker()
    worker.start()
    server.background.append(worker)
    from kindex.local.events import Scheduler

    scheduler = Scheduler(services.reindex, settings.reindex_interval_seconds)
    scheduler.start()
    server.background.append(scheduler)
    server.lock = lock
    return server
