"""CDK entry point: builds the kindex stack from `infra/`, configured only by cdk.json context.

`python app.py [--outdir DIR]` synthesizes without the CDK CLI (cdk.json's context is read here);
under `cdk synth/deploy` the CLI passes cdk.json and `-c` values itself, and they take precedence.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from infra import build_app

CDK_JSON = Path(__file__).resolve().parent / "cdk.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outdir", default=os.environ.get("CDK_OUTDIR") or "cdk.out",
                        help="cloud assembly directory (default: cdk.out)")
    args = parser.parse_args()
    context = json.loads(CDK_JSON.read_text())["context"]
    app, _ = build_app(context=context, outdir=args.outdir)
    app.synth()


if __name__ == "__main__":
    main()
