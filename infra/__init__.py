"""The kindex CDK app: `build_app` is what app.py runs and what tests/infra synthesizes."""

from __future__ import annotations

import os
from typing import Any

# jsii warns on every import under Node 20, which is what these machines have and what it still supports.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import aws_cdk as cdk  # noqa: E402
from cdk_nag import AwsSolutionsChecks  # noqa: E402

from infra.config import StackConfig  # noqa: E402
from infra.layers import ensure_layers  # noqa: E402
from infra.stack import KindexStack  # noqa: E402


def build_app(
    *, context: dict[str, Any] | None = None, outdir: str | None = None, checks: bool = True, build_layers: bool = False
) -> tuple[cdk.App, KindexStack]:
    """One App with one stack, checked by cdk-nag AwsSolutions unless `checks` is false (findings become error and
    warning annotations on the resources; `cdk synth` prints them, tests/infra asserts there are none).

    `context` sets defaults under what the CDK CLI passes (cdk.json and -c), which win. No AWS call is made:
    the stack is environment-agnostic, so nothing is looked up. With `build_layers` (app.py), the Lambda layers in
    `layer_build_dir` are built first when missing or stale (`infra/layers.py`: pip only when their inputs changed).
    """
    app = cdk.App(context=context or {}, outdir=outdir)
    config = StackConfig.from_context(app.node.try_get_context)
    if build_layers:
        ensure_layers(config.layer_build_dir)
    stack = KindexStack(
        app,
        f"kindex-{config.stage}",
        config=config,
        description="kindex: multi-tenant knowledge index for RAG (API, ingest, search, reindex)",
    )
    if checks:
        cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    return app, stack
