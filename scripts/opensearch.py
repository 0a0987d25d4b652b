#!/usr/bin/env python3
"""A real single-node OpenSearch with the k-NN plugin for the tests, assembled from Maven Central only.

    python3 scripts/opensearch.py start | stop | status | install
    python3 scripts/opensearch.py run -- COMMAND...   (what `make test` runs pytest with)

`start` downloads the artifacts once into `.opensearch/downloads/` (checked against pinned SHA-256 sums),
assembles a node home once (`.opensearch/opensearch-<version>-knn/`), starts it on 127.0.0.1 with an empty data
folder and waits until the cluster is green or yellow with the k-NN plugin and the modules loaded. It is
idempotent: a node already running on the port is left alone. `stop` stops the node this script started (and
only that process). The node's output goes to `.opensearch/node-<port>/console.log`, its own logs to
`.opensearch/node-<port>/logs/`. Standard library only, so it runs before any virtualenv exists.

`run` runs COMMAND with KINDEX_TEST_OPENSEARCH_URL naming a node, which makes the real-node tests required (a
node that is not usable fails them, never skips them). The node is the one KINDEX_TEST_OPENSEARCH_URL already
names, else one of this checkout's on the port (`make opensearch`: reused and left running), else one it starts
for the run and stops when COMMAND ends, whether it passed, failed or was interrupted (Ctrl-C, SIGTERM, SIGHUP).
When the port is taken by anything else (another checkout's node, an unrelated service) it starts its node on a
free port instead and leaves the other process alone: the tests drop their indices, but a node another run may
stop or a cluster configured differently would make this run differ from CI's.

Why this assembly: no PyPI, npm or Debian package ships a real OpenSearch, and the Maven Central artifacts are
the only route on the build machines. The integ-test zip is the core server with no module but transport-netty4,
so three modules of the full distribution (and of every Amazon OpenSearch Service domain) are assembled from their
Maven jars: `lang-painless`, which the k-NN plugin extends; `reindex`, which serves `_delete_by_query` and
`_reindex`; and `analysis-common`, whose char filters and token filters the adapter's text analyzer uses. The
k-NN zip on Maven carries no faiss/nmslib native libraries (opensearch-project/k-NN#2643), so on this node only
the `lucene` engine can build vector indices. A faiss index is worse than an error there: the missing library
is a fatal error that stops the node at the first refresh (and again at every restart while the index is on
disk, hence the empty data folder).

Environment:
  OPENSEARCH_PORT        HTTP port on 127.0.0.1 (default 9200); each port has its own data and logs
  OPENSEARCH_JAVA_OPTS   JVM options (default "-Xms1g -Xmx1g", the upstream default heap)
  OPENSEARCH_USER        user the node runs as when this script runs as root (default "opensearch", created
                         if missing: OpenSearch refuses to run as root)
  OPENSEARCH_CACHE_DIR   cache folder (default <repo>/.opensearch)
  OPENSEARCH_START_TIMEOUT  seconds to wait for the cluster (default 180)
  MAVEN_REPOSITORY_URL   Maven repository to download from (default https://repo1.maven.org/maven2)
  JAVA_HOME              Java 11+ (17 recommended); else the `java` on PATH
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OPENSEARCH_VERSION = "2.19.1"
KNN_VERSION = "2.19.1.0"
CLUSTER_NAME = "kindex-test"
DEFAULT_REPOSITORY = "https://repo1.maven.org/maven2"


@dataclass(frozen=True)
class Artifact:
    group: str
    name: str
    version: str
    extension: str
    sha256: str

    @property
    def file_name(self) -> str:
        return f"{self.name}-{self.version}.{self.extension}"

    def url(self, repository: str) -> str:
        return f"{repository.rstrip('/')}/{self.group.replace('.', '/')}/{self.name}/{self.version}/{self.file_name}"


# Pinned: Maven Central artifacts are immutable, so a changed checksum means a corrupted or tampered download.
# (Each was also checked against the repository's own .sha1 when pinned.)
SERVER = Artifact(
    "org.opensearch.distribution.integ-test-zip",
    "opensearch",
    OPENSEARCH_VERSION,
    "zip",
    "af7152d8b7f6f1cee09d47276b32b70479fe6dd8cdbb61213f84eb7f8098b261",
)
KNN = Artifact(
    "org.opensearch.plugin",
    "opensearch-knn",
    KNN_VERSION,
    "zip",
    "eab8c9818865bc035212eab5068cdacae164baa09d4c152f49b736d6f6b0e85c",
)
# Each module's jar and exactly the dependencies its POM names, one by one: a transitive closure would also bring
# jars already on the node's classpath (the server, opensearch-common, reactor), and the jar-hell check refuses
# duplicates. lang-painless: antlr 4.13.1 and asm 9.7.
PAINLESS = (
    Artifact(
        "org.opensearch.plugin",
        "lang-painless",
        OPENSEARCH_VERSION,
        "jar",
        "3cf5e02efa40ff5b88e74e1ab66a0bc462de3509fab4a6a4ffe90b8d13777a9a",
    ),
    Artifact(
        "org.opensearch.plugin",
        "opensearch-scripting-painless-spi",
        OPENSEARCH_VERSION,
        "jar",
        "c2598797a5f6f897ce7e8d05f593ff96de3fbc56c52f299d63cddcae41556dda",
    ),
    Artifact(
        "org.antlr",
        "antlr4-runtime",
        "4.13.1",
        "jar",
        "54665d2838cc66458343468efc539e454fc95b46a8a04b13c6ac43fc9be63505",
    ),
    Artifact("org.ow2.asm", "asm", "9.7", "jar", "adf46d5e34940bdf148ecdd26a9ee8eea94496a72034ff7141066b3eea5c4e9d"),
    Artifact(
        "org.ow2.asm", "asm-commons", "9.7", "jar", "389bc247958e049fc9a0408d398c92c6d370c18035120395d4cba1d9d9304b7a"
    ),
    Artifact(
        "org.ow2.asm", "asm-tree", "9.7", "jar", "62f4b3bc436045c1acb5c3ba2d8ec556ec3369093d7f5d06c747eb04b56d52b1"
    ),
    Artifact(
        "org.ow2.asm", "asm-analysis", "9.7", "jar", "7bc6bcbc21379948a0c8c467fb0f864206e5b818f6bc0b546872f5c9f941556f"
    ),
    Artifact(
        "org.ow2.asm", "asm-util", "9.7", "jar", "37a6414d36641973f1af104937c95d6d921b2ddb4d612c66c5a9f2b13fc14211"
    ),
)
# reindex: the REST client it reindexes from remote clusters with, and that client's Apache HTTP libraries
# (reactor and reactive-streams, which the client also names, are in the server's lib/ already).
ANALYSIS_COMMON = (
    Artifact(
        "org.opensearch.plugin",
        "analysis-common",
        OPENSEARCH_VERSION,
        "jar",
        "13fdc1071af42946b13153a62491a5e9b0ad214d44f7c8153d3afef60f558821",
    ),
)
REINDEX = (
    Artifact(
        "org.opensearch.plugin",
        "reindex-client",
        OPENSEARCH_VERSION,
        "jar",
        "eb2056ee54ac367f8820d5c13fa5cea2d10bb492b01f4d1a15a6dce163bf82ce",
    ),
    Artifact(
        "org.opensearch.client",
        "opensearch-rest-client",
        OPENSEARCH_VERSION,
        "jar",
        "6ab691dc6cb2c12802bb9024df3379bd1779a2b626d3bd7b27ed5f974cbc1708",
    ),
    Artifact(
        "org.opensearch",
        "opensearch-ssl-config",
        OPENSEARCH_VERSION,
        "jar",
        "30fe6a20a08004044be90abdf0e711313b7dfe2e5c7b12ac32498ae8e1cae927",
    ),
    Artifact(
        "org.apache.httpcomponents",
        "httpclient",
        "4.5.14",
        "jar",
        "c8bc7e1c51a6d4ce72f40d2ebbabf1c4b68bfe76e732104b04381b493478e9d6",
    ),
    Artifact(
        "org.apache.httpcomponents",
        "httpcore",
        "4.4.16",
        "jar",
        "6c9b3dd142a09dc468e23ad39aad6f75a0f2b85125104469f026e52a474e464f",
    ),
    Artifact(
        "org.apache.httpcomponents",
        "httpasyncclient",
        "4.1.5",
        "jar",
        "0c1877489a9d1ba4fa50f6cfcab11d1123618858cb31d56afaab5afdd5064d99",
    ),
    Artifact(
        "org.apache.httpcomponents",
        "httpcore-nio",
        "4.4.16",
        "jar",
        "4018736ede2d321034e8517ea90baefb31831a8608afccc446d8a699fb1d00d4",
    ),
    Artifact(
        "commons-codec",
        "commons-codec",
        "1.16.1",
        "jar",
        "ec87bfb55f22cbd1b21e2190eeda28b2b312ed2a431ee49fbdcc01812d04a5e4",
    ),
    Artifact(
        "commons-logging",
        "commons-logging",
        "1.2",
        "jar",
        "daddea1ea0be0f56978ab3006b8ac92834afeefbd9b7e4e6316fca57df0fa636",
    ),
)


@dataclass(frozen=True)
class Module:
    """A module folder as the upstream build writes it (modules/<name>/build.gradle and
    src/main/plugin-metadata/plugin-security.policy of OpenSearch 2.19)."""

    name: str
    description: str
    classname: str
    jars: tuple[Artifact, ...]
    policy: str | None = None
    extends: str = ""

    def descriptor(self) -> str:
        return (
            f"description={self.description}\nversion={OPENSEARCH_VERSION}\nname={self.name}\n"
            f"classname={self.classname}\njava.version=11\nopensearch.version={OPENSEARCH_VERSION}\n"
            f"custom.foldername=\nextended.plugins={self.extends}\nhas.native.controller=false\n"
        )


MODULES = (
    Module(
        "lang-painless",
        "An easy, safe and fast scripting language for OpenSearch",
        "org.opensearch.painless.PainlessPlugin",
        PAINLESS,
        """\
grant {
  // needed to generate runtime classes
  permission java.lang.RuntimePermission "createClassLoader";

  // needed to find the classloader to load whitelisted classes from
  permission java.lang.RuntimePermission "getClassLoader";
};
""",
    ),
    Module(
        "reindex",
        "The Reindex module adds APIs to reindex from one index to another or update documents in place.",
        "org.opensearch.index.reindex.ReindexPlugin",
        REINDEX,
        """\
grant {
   // reindex opens socket connections using the rest client
   permission java.net.SocketPermission "*", "connect";
};

grant codeBase "${codebase.opensearch-rest-client}" {
  // rest client uses system properties which gets the default proxy
  permission java.net.NetPermission "getProxySelector";
};

grant codeBase "${codebase.httpasyncclient}" {
  // rest client uses system properties which gets the default proxy
  permission java.net.NetPermission "getProxySelector";
};
""",
    ),
    Module(
        "analysis-common",
        'Adds "built in" analyzers to OpenSearch.',
        "org.opensearch.analysis.common.CommonAnalysisPlugin",
        ANALYSIS_COMMON,
        extends="lang-painless",
    ),
)
ARTIFACTS = (SERVER, KNN, *PAINLESS, *REINDEX, *ANALYSIS_COMMON)


class Failure(Exception):
    """Something the operator must fix; printed without a traceback."""


def log(message: str) -> None:
    print(f"opensearch: {message}", flush=True)


# -- paths and configuration ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    cache: Path  # downloads and the lock
    runtime: Path  # the node home and each port's data and logs: `cache`, unless the node's user cannot reach it
    port: int
    java_opts: str
    user: str
    start_timeout: float
    repository: str

    @property
    def downloads(self) -> Path:
        return self.cache / "downloads"

    @property
    def home(self) -> Path:
        return self.runtime / f"opensearch-{OPENSEARCH_VERSION}-knn"

    @property
    def node_dir(self) -> Path:
        return self.runtime / f"node-{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.node_dir / "opensearch.pid"

    @property
    def console_log(self) -> Path:
        return self.node_dir / "console.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def load_config() -> Config:
    env = os.environ
    try:
        port = int(env.get("OPENSEARCH_PORT", "9200"))
        timeout = float(env.get("OPENSEARCH_START_TIMEOUT", "180"))
    except ValueError as error:
        raise Failure(f"OPENSEARCH_PORT and OPENSEARCH_START_TIMEOUT must be numbers ({error})") from error
    if not 1 <= port <= 65535:
        raise Failure(f"OPENSEARCH_PORT must be 1-65535, not {port}")
    cache = Path(env.get("OPENSEARCH_CACHE_DIR") or REPO / ".opensearch").resolve()
    return Config(
        cache=cache,
        runtime=runtime_folder(cache),
        port=port,
        java_opts=env.get("OPENSEARCH_JAVA_OPTS") or "-Xms1g -Xmx1g",
        user=env.get("OPENSEARCH_USER") or "opensearch",
        start_timeout=timeout,
        repository=env.get("MAVEN_REPOSITORY_URL") or DEFAULT_REPOSITORY,
    )


@contextlib.contextmanager
def locked(config: Config):
    """One start/stop at a time per cache folder (two `make opensearch` in parallel must not both assemble)."""
    config.cache.mkdir(parents=True, exist_ok=True)
    with open(config.cache / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


# -- downloads --------------------------------------------------------------------------------------------------


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(artifact: Artifact, config: Config) -> Path:
    """The artifact in the download cache, fetched once and verified against its pinned checksum."""
    target = config.downloads / artifact.file_name
    if target.exists() and sha256_of(target) == artifact.sha256:
        return target
    config.downloads.mkdir(parents=True, exist_ok=True)
    url = artifact.url(config.repository)
    last_error: Exception | None = None
    for attempt in range(1, 4):
        log(f"downloading {url}")
        partial = target.with_suffix(target.suffix + ".part")
        try:
            with urllib.request.urlopen(url, timeout=60) as response, open(partial, "wb") as out:
                shutil.copyfileobj(response, out, 1 << 20)
        except (urllib.error.URLError, OSError) as error:
            last_error = error
            partial.unlink(missing_ok=True)
            time.sleep(2 * attempt)
            continue
        actual = sha256_of(partial)
        if actual != artifact.sha256:
            partial.unlink(missing_ok=True)
            raise Failure(f"{url}: SHA-256 {actual} is not the pinned {artifact.sha256}; refusing to use it")
        partial.replace(target)
        return target
    raise Failure(
        f"cannot download {url} ({last_error}); is Maven Central reachable? (MAVEN_REPOSITORY_URL selects a mirror)"
    )


# -- java -------------------------------------------------------------------------------------------------------


def java_home() -> Path:
    """JAVA_HOME if it holds a java, else the installation behind the `java` on PATH (OpenSearch's scripts need
    a JAVA_HOME: the integ-test zip bundles no JDK)."""
    candidates = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(Path(os.environ["JAVA_HOME"]))
    on_path = shutil.which("java")
    if on_path:
        candidates.append(Path(os.path.realpath(on_path)).parent.parent)
    for home in candidates:
        if os.access(home / "bin" / "java", os.X_OK):
            return home
    raise Failure("no Java found: install Java 17 (Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME")


# -- the user the node runs as ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunAs:
    name: str
    uid: int
    gid: int

    def popen_args(self) -> dict:
        if os.geteuid() != 0:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


def run_as(config: Config) -> RunAs:
    """The node's user: the caller, unless the caller is root (OpenSearch refuses root), then a dedicated
    system user, created when missing."""
    if os.geteuid() != 0:
        entry = pwd.getpwuid(os.geteuid())
        return RunAs(entry.pw_name, entry.pw_uid, entry.pw_gid)
    try:
        entry = pwd.getpwnam(config.user)
    except KeyError:
        if not shutil.which("useradd"):
            raise Failure(
                f"running as root and user {config.user!r} does not exist; create it "
                f"(OpenSearch refuses to run as root) or set OPENSEARCH_USER"
            ) from None
        log(f"creating system user {config.user!r} (OpenSearch refuses to run as root)")
        subprocess.run(
            [
                "useradd",
                "--system",
                "--user-group",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                config.user,
            ],
            check=True,
        )
        entry = pwd.getpwnam(config.user)
    if entry.pw_uid == 0:
        raise Failure(f"OPENSEARCH_USER={config.user} is root; OpenSearch refuses to run as root")
    return RunAs(entry.pw_name, entry.pw_uid, entry.pw_gid)


def chown_tree(path: Path, user: RunAs) -> None:
    if os.geteuid() != 0:
        return
    for root, dirs, files in os.walk(path):
        os.chown(root, user.uid, user.gid)
        for name in dirs + files:
            os.chown(os.path.join(root, name), user.uid, user.gid, follow_symlinks=False)


def runtime_folder(cache: Path) -> Path:
    """Where the node's files live. Run by root, the node runs as another user, who must be able to enter every
    folder above them: a checkout under a 0700 home folder (/root) is not reachable, so the node's files then go
    to a folder of their own under /var/tmp (the downloads stay cached in `cache`)."""
    if os.geteuid() != 0:
        return cache
    blocked = [
        parent for parent in (cache, *cache.parents) if parent.exists() and not parent.stat().st_mode & stat.S_IXOTH
    ]
    if not blocked:
        return cache
    digest = hashlib.sha256(str(cache).encode()).hexdigest()[:12]
    return Path("/var/tmp") / f"kindex-opensearch-{digest}"


# -- assembly -----------------------------------------------------------------------------------------------------


def extract(archive: Path, target: Path) -> None:
    """Unzip keeping the Unix modes (zipfile drops them, and bin/ must stay executable)."""
    with zipfile.ZipFile(archive) as zipped:
        for info in zipped.infolist():
            destination = (target / info.filename).resolve()
            if target.resolve() not in destination.parents and destination != target.resolve():
                raise Failure(f"{archive.name}: entry {info.filename!r} escapes the target folder")
            zipped.extract(info, target)
            mode = info.external_attr >> 16
            if mode and not info.is_dir():
                os.chmod(destination, stat.S_IMODE(mode))


def manifest() -> str:
    return json.dumps({a.file_name: a.sha256 for a in ARTIFACTS}, sort_keys=True)


def assemble(config: Config, java: Path) -> None:
    """The node home: the core server, the modules assembled from their jars, and the k-NN plugin installed by
    OpenSearch's own plugin tool. Built in a temporary folder and renamed, so an interrupted run leaves nothing
    half-made; a marker records which artifacts it was made from."""
    marker = config.home / ".kindex-assembled"
    if marker.exists() and marker.read_text() == manifest():
        return
    files = {artifact: download(artifact, config) for artifact in ARTIFACTS}
    log(f"assembling {config.home}")
    config.runtime.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="assemble-", dir=config.runtime))
    try:
        extract(files[SERVER], work)
        home = work / f"opensearch-{OPENSEARCH_VERSION}"
        for module in MODULES:
            folder = home / "modules" / module.name
            folder.mkdir()
            for artifact in module.jars:
                shutil.copy2(files[artifact], folder / artifact.file_name)
            (folder / "plugin-descriptor.properties").write_text(module.descriptor())
            if module.policy is not None:
                (folder / "plugin-security.policy").write_text(module.policy)
        result = subprocess.run(
            [str(home / "bin" / "opensearch-plugin"), "install", "--batch", files[KNN].resolve().as_uri()],
            env={**os.environ, "JAVA_HOME": str(java), "OPENSEARCH_JAVA_OPTS": ""},
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise Failure(f"installing the k-NN plugin failed:\n{result.stdout}{result.stderr}")
        (home / ".kindex-assembled").write_text(manifest())
        if config.home.exists():
            shutil.rmtree(config.home)
        home.rename(config.home)
    finally:
        shutil.rmtree(work, ignore_errors=True)


# -- the running node ---------------------------------------------------------------------------------------------


def http_json(url: str, timeout: float = 2.0) -> dict | list | None:
    """GET a JSON document, or None when nothing (or nothing that speaks JSON) answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def our_pid(config: Config) -> int | None:
    """The pid in the pid file if that process is still this cache's OpenSearch (a reused pid is not)."""
    try:
        pid = int(config.pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    if (
        b"org.opensearch.bootstrap.OpenSearch" in cmdline
        and f"-Dopensearch.path.home={config.home}".encode() in cmdline
    ):
        return pid
    return None


def missing_components(config: Config) -> list[str]:
    """Modules and plugins this script installs that the running node did not load."""
    answer = http_json(f"{config.url}/_nodes/_local/plugins")
    nodes = list(answer.get("nodes", {}).values()) if isinstance(answer, dict) else []
    loaded = {item.get("name") for node in nodes for item in node.get("modules", []) + node.get("plugins", [])}
    return [name for name in (*(m.name for m in MODULES), "opensearch-knn") if name not in loaded]


def health(config: Config, timeout: float = 2.0) -> dict | None:
    answer = http_json(f"{config.url}/_cluster/health", timeout=timeout)
    return answer if isinstance(answer, dict) and "status" in answer else None


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start(config: Config) -> None:
    with locked(config):
        if our_pid(config) is not None:
            state = health(config)
            if state and state["status"] in ("green", "yellow"):
                log(f"already running at {config.url} (status {state['status']})")
                return
            log("a node started earlier is still starting; waiting for it")
            wait_ready(config, our_pid(config))
            return
        if port_in_use(config.port):
            raise Failure(
                f"port {config.port} is already in use by a process this script did not start; "
                f"stop it or choose another port with OPENSEARCH_PORT"
            )
        java = java_home()
        user = run_as(config)
        if config.runtime != config.cache:
            log(f"{config.cache} is not reachable by user {user.name!r}; the node's files go to {config.runtime}")
            config.runtime.mkdir(mode=0o755, parents=True, exist_ok=True)
        assemble(config, java)
        # Every start is an empty cluster: test runs cannot see each other's leftovers, and an index the node
        # cannot open (a faiss one: no native library here, and that error is fatal) cannot stop it restarting.
        shutil.rmtree(config.node_dir / "data", ignore_errors=True)
        for folder in (config.node_dir / "data", config.node_dir / "logs"):
            folder.mkdir(parents=True, exist_ok=True)
        # config/ too: the node writes its keystore there on first start.
        chown_tree(config.home, user)
        chown_tree(config.node_dir, user)
        settings = {
            "cluster.name": CLUSTER_NAME,
            "node.name": f"{CLUSTER_NAME}-{config.port}",
            "discovery.type": "single-node",
            "network.host": "127.0.0.1",
            "http.port": str(config.port),
            "path.data": str(config.node_dir / "data"),
            "path.logs": str(config.node_dir / "logs"),
            # A shared CI disk above 85-90 % full would otherwise leave new indices unassigned (red).
            "cluster.routing.allocation.disk.threshold_enabled": "false",
            # Like the test double: a write to a missing index fails instead of creating an unmapped one, so an
            # adapter bug that writes before creating its index shows up in the tests.
            "action.auto_create_index": "false",
        }
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(config.node_dir),
            "JAVA_HOME": str(java),
            "OPENSEARCH_JAVA_OPTS": config.java_opts,
            "LANG": "C.UTF-8",
        }
        command = [str(config.home / "bin" / "opensearch"), *(f"-E{key}={value}" for key, value in settings.items())]
        log(
            f"starting OpenSearch {OPENSEARCH_VERSION} with k-NN {KNN_VERSION} on {config.url} as {user.name} "
            f"(log: {config.console_log})"
        )
        with open(config.console_log, "ab") as console:
            process = subprocess.Popen(
                command,
                cwd=config.node_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **user.popen_args(),
            )
        # bin/opensearch execs java, so this pid is the node's for its whole life.
        config.pid_file.write_text(f"{process.pid}\n")
        wait_ready(config, process.pid, process)


def wait_ready(config: Config, pid: int | None, process: subprocess.Popen | None = None) -> None:
    started = time.monotonic()
    deadline = started + config.start_timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            config.pid_file.unlink(missing_ok=True)
            raise Failure(
                f"OpenSearch exited with status {process.returncode} while starting; "
                f"last lines of {config.console_log}:\n{tail(config.console_log)}"
            )
        if process is None and (pid is None or not Path(f"/proc/{pid}").exists()):
            raise Failure(f"OpenSearch exited while starting; see {config.console_log}")
        state = health(config)
        if state and state["status"] in ("green", "yellow"):
            missing = missing_components(config)
            if missing:
                stop(config, quiet=True)
                raise Failure(f"OpenSearch started without {', '.join(missing)} (stopped it); see {config.console_log}")
            log(f"ready at {config.url} (status {state['status']}, {time.monotonic() - started:.1f} s)")
            return
        time.sleep(0.5)
    stop(config, quiet=True)
    raise Failure(
        f"OpenSearch was not ready within {config.start_timeout:.0f} s (stopped it); last lines of "
        f"{config.console_log}:\n{tail(config.console_log)}"
    )


def stop(config: Config, quiet: bool = False) -> None:
    pid = our_pid(config)
    if pid is None:
        config.pid_file.unlink(missing_ok=True)
        if not quiet:
            suffix = " (but something else answers on that port)" if port_in_use(config.port) else ""
            log(f"no node started by this script is running on port {config.port}{suffix}")
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists() and our_pid(config) == pid:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.2)
    if our_pid(config) == pid:
        log("no clean shutdown within 60 s; killing it")
        os.kill(pid, signal.SIGKILL)
    config.pid_file.unlink(missing_ok=True)
    if not quiet:
        log(f"stopped the node on port {config.port}")


def status(config: Config) -> int:
    pid = our_pid(config)
    state = health(config)
    if pid is None:
        log(f"not running on port {config.port}" + (" (another process answers there)" if state else ""))
        return 1
    if state is None:
        log(f"process {pid} is running but {config.url} does not answer yet")
        return 1
    info = http_json(config.url)
    version = info.get("version", {}).get("number", "?") if isinstance(info, dict) else "?"
    missing = missing_components(config)
    log(
        f"running at {config.url}: OpenSearch {version}, status {state['status']}, pid {pid}"
        + (f", MISSING {', '.join(missing)}" if missing else ", k-NN and modules loaded")
    )
    return 0 if not missing else 1


# -- `run`: a command (the test suite) against a node -------------------------------------------------------------

TEST_URL_ENV = "KINDEX_TEST_OPENSEARCH_URL"


@dataclass(frozen=True)
class NodeChoice:
    port: int
    start: bool  # start a node on `port` (start(), which downloads and assembles first when needed)
    stop_after: bool  # stop it when the command ends
    why: str


def choose_node(port: int, *, ours: bool, owner: bool | None, port_taken: bool, free_port) -> NodeChoice:
    """Which node `run` uses. `ours`: a node of this checkout runs on `port`; `owner`: for that node, None when
    `make opensearch` started it, else whether the `run` that started it is still alive; `port_taken`: something
    else answers on `port`. Pure, so each branch has a unit test (tests/unit/test_provision.py)."""
    if ours and owner is None:
        return NodeChoice(port, start=False, stop_after=False, why="using this checkout's node (make opensearch)")
    if ours and owner:
        return NodeChoice(
            port,
            start=False,
            stop_after=False,
            why="using this checkout's node, which the run that started it will stop",
        )
    if ours:
        return NodeChoice(
            port, start=False, stop_after=True, why="using the node a killed run left running; stopping it afterwards"
        )
    if port_taken:
        free = free_port()
        return NodeChoice(
            free,
            start=True,
            stop_after=True,
            why=f"port {port} is taken by a process this checkout did not start; using port {free}",
        )
    return NodeChoice(port, start=True, stop_after=True, why=f"starting a node on port {port} for this run")


def owner_file(config: Config) -> Path:
    return config.node_dir / "started-by-run.pid"


def owner_alive(config: Config) -> bool | None:
    """None: the node has no owner (`make opensearch` started it); else whether the `run` that started it lives."""
    try:
        pid = int(owner_file(config).read_text().strip())
    except (OSError, ValueError):
        return None
    return Path(f"/proc/{pid}").exists()


def pick_free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def raise_interrupted(signum, frame) -> None:
    raise Interrupted(signum)


def run(config: Config, command: list[str]) -> int:
    """COMMAND's exit status; a node this started (or adopted) is stopped however COMMAND ends."""
    if os.environ.get(TEST_URL_ENV, "").strip():
        log(f"{TEST_URL_ENV}={os.environ[TEST_URL_ENV]} names the node; starting none")
        return run_command(command, dict(os.environ))
    with locked(config):
        ours = our_pid(config) is not None
        choice = choose_node(
            config.port,
            ours=ours,
            owner=owner_alive(config) if ours else None,
            port_taken=not ours and port_in_use(config.port),
            free_port=pick_free_port,
        )
    node = replace(config, port=choice.port)
    log(choice.why)
    # Until the command runs, SIGTERM and SIGHUP end this process through `finally` (Ctrl-C does by itself), so
    # a node that was starting is stopped too; run_command passes them on to the command instead.
    previous = {signum: signal.signal(signum, raise_interrupted) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        if choice.start:
            start(node)
        if choice.stop_after:
            owner_file(node).write_text(f"{os.getpid()}\n")
        return run_command(command, {**os.environ, TEST_URL_ENV: node.url})
    except Interrupted as signalled:
        log(f"{signalled}: stopping")
        return 128 + signalled.signum
    except KeyboardInterrupt:
        log("interrupted: stopping")
        return 128 + signal.SIGINT
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if choice.stop_after:
            with locked(node):
                was_running = our_pid(node) is not None
                stop(node, quiet=True)
                owner_file(node).unlink(missing_ok=True)
                shutil.rmtree(node.node_dir / "data", ignore_errors=True)
            if was_running:
                log(f"stopped the node on port {node.port} that this run used")


def run_command(command: list[str], env: dict[str, str]) -> int:
    """COMMAND in the foreground, its exit status as a shell gives it. Ctrl-C reaches it from the terminal itself
    (same process group), so this process ignores SIGINT and waits for the command's own shutdown; SIGTERM and
    SIGHUP are passed on."""
    child = subprocess.Popen(command, env=env)

    def forward(signum, frame) -> None:
        child.send_signal(signum)

    previous = {
        signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN),
        signal.SIGTERM: signal.signal(signal.SIGTERM, forward),
        signal.SIGHUP: signal.signal(signal.SIGHUP, forward),
    }
    try:
        status = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 128 - status if status < 0 else status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "command",
        choices=["start", "stop", "status", "install", "run"],
        help="install = download and assemble only; run -- COMMAND... = COMMAND against a node",
    )
    parser.add_argument("argv", nargs=argparse.REMAINDER, help="for run: the command, after --")
    args = parser.parse_args(argv)
    run_argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if (args.command == "run") != bool(run_argv):
        parser.error("run takes a command (run -- COMMAND...); the other commands take none")
    try:
        config = load_config()
        if args.command == "start":
            start(config)
        elif args.command == "stop":
            with locked(config):
                stop(config)
        elif args.command == "status":
            return status(config)
        elif args.command == "run":
            return run(config, run_argv)
        else:
            with locked(config):
                assemble(config, java_home())
            log(f"assembled in {config.home}")
        return 0
    except Failure as error:
        print(f"opensearch: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
