"""CDK entry point: builds the kindex stack from `infra/`, configured only by cdk.json context.

`python app.py [--outdir DIR]` synthesizes without the CDK CLI (cdk.json's context is read here) and exits 1
when cdk-nag reports an unsuppressed finding; under `cdk synth/deploy` the CLI passes cdk.json and `-c`
values itself (they take precedence) and prints the findings. Either way the Lambda layers are built first when
missing or stale (no Docker; pip runs only when their inputs changed, so a repeated synth stays offline).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from infra import build_app
from infra.layers import LayerBuildFailed

CDK_JSON = Path(__file__).resolve().parent / "cdk.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--outdir",
        default=os.environ.get("CDK_OUTDIR") or "cdk.out",
        help="cloud assembly directory (default: cdk.out)",
    )
    args = parser.parse_args()
    started = time.monotonic()
    context = json.loads(CDK_JSON.read_text())["context"]
    try:
        app, stack = build_app(context=context, outdir=args.outdir, build_layers=True)
    except LayerBuildFailed as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    assembly = app.synth()
    messages = assembly.get_stack_artifact(stack.artifact_id).messages
    findings = [m for m in messages if m.level.name in ("ERROR", "WARNING") and "AwsSolutions-" in str(m.entry.data)]
    for message in findings:
        print(f"{message.level.name} {message.id}: {str(message.entry.data).splitlines()[0]}", file=sys.stderr)
    if stack.capacity is not None:
        print(stack.capacity.describe(), file=sys.stderr)
    print(
        f"synthesized {stack.stack_name} into {assembly.directory} in {time.monotonic() - started:.1f} s",
        file=sys.stderr,
    )
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
