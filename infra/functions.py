"""Lambda functions: the two shared layers and one function construct (own role, own log group) per entry point.

Layers are read from `<layer_build_dir>/core` and `<layer_build_dir>/deps`, the directories that
`infra/layers.py` fills (app.py runs it before the stack, when they are missing or stale). Nothing here runs pip or
Docker; tests point `layer_build_dir` at small placeholder directories so they never need the real build.
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.config import REPO_ROOT

FUNCTIONS_DIR = REPO_ROOT / "functions"
RUNTIME = lambda_.Runtime.PYTHON_3_12
ARCHITECTURE = lambda_.Architecture.ARM_64
METRICS_NAMESPACE = "kindex"
# Never shipped: bytecode caches and any test module that might sit next to the handlers.
CODE_EXCLUDES = ["__pycache__", "*.pyc", "tests", "test_*.py"]


class LayersMissing(FileNotFoundError):
    """The layer build directories do not exist: synthesize through app.py (`npx cdk synth`, `make synth`), which
    builds them, or run `scripts/build_layers.py`."""


class SharedLayers(Construct):
    """The `kindex` core layer and the third-party dependency layer (no boto3: Lambda's runtime provides it)."""

    def __init__(self, scope: Construct, construct_id: str, *, build_dir: Path) -> None:
        super().__init__(scope, construct_id)
        missing = [
            str(build_dir / name / "python") for name in ("core", "deps") if not (build_dir / name / "python").is_dir()
        ]
        if missing:
            raise LayersMissing(
                f"layer directories missing: {', '.join(missing)}; synthesize with app.py "
                f"(`npx cdk synth`, `make synth`), which builds them, or run "
                f"`.venv/bin/python scripts/build_layers.py` first"
            )
        self.core = self._layer("Core", build_dir / "core", "kindex core package (domain, services, adapters)")
        self.deps = self._layer("Deps", build_dir / "deps", "kindex third-party dependencies (arm64, CPython 3.12)")

    def _layer(self, construct_id: str, path: Path, description: str) -> lambda_.LayerVersion:
        return lambda_.LayerVersion(
            self,
            construct_id,
            code=lambda_.Code.from_asset(str(path), exclude=["__pycache__", "*.pyc"]),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description=description,
            removal_policy=RemovalPolicy.DESTROY,
        )

    @property
    def all(self) -> list[lambda_.ILayerVersion]:
        return [self.deps, self.core]


class KindexFunction(Construct):
    """One entry point of `functions/`: Python 3.12 on arm64, active tracing, Powertools settings, its own role.

    The role starts empty apart from writing to the function's own log group (no AWS managed policy);
    the stack adds exactly the data permissions the function needs (see `infra/permissions.py`).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        handler: str,
        service: str,
        layers: SharedLayers,
        environment: dict[str, str],
        timeout: Duration,
        memory_mb: int,
        description: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"kindex {service}: least privilege for this function only",
        )
        self.log_group = logs.LogGroup(
            self, "Logs", retention=logs.RetentionDays.ONE_MONTH, removal_policy=RemovalPolicy.DESTROY
        )
        self.log_group.grant_write(self.role)
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=handler,
            code=lambda_.Code.from_asset(str(FUNCTIONS_DIR), exclude=CODE_EXCLUDES),
            layers=layers.all,
            role=self.role,
            log_group=self.log_group,
            timeout=timeout,
            memory_size=memory_mb,
            tracing=lambda_.Tracing.ACTIVE,
            description=description,
            environment={
                **environment,
                "POWERTOOLS_SERVICE_NAME": service,
                "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
                "POWERTOOLS_LOG_LEVEL": "INFO",
            },
        )

    def add_to_role(self, *statements: iam.PolicyStatement) -> None:
        for statement in statements:
            self.role.add_to_principal_policy(statement)
