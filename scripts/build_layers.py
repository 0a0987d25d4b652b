"""Build the two Lambda layers without Docker (only what changed) and print their unzipped sizes.

    .venv/bin/python scripts/build_layers.py [--out build/layers] [--force]

The synth (app.py, so also `npx cdk synth` and `npx cdk deploy`) does the same by itself; this command is for
building ahead of time and for seeing the sizes. Exits 1 when pip fails or when function code and layers together
exceed Lambda's 250 MB unzipped limit. The build itself is `infra/layers.py`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: make the repository importable

from infra.layers import LAMBDA_UNZIPPED_LIMIT, REPO_ROOT, LayerBuildFailed, ensure_layers  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the kindex Lambda layers (no Docker).")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "build" / "layers")
    parser.add_argument("--force", action="store_true", help="rebuild both layers even if their inputs are unchanged")
    args = parser.parse_args(argv)
    out = args.out if args.out.is_absolute() else Path.cwd() / args.out
    if args.force:
        for name in ("deps", "core"):
            (out / f"{name}.inputs-sha256").unlink(missing_ok=True)
            shutil.rmtree(out / name, ignore_errors=True)
    try:
        build = ensure_layers(out)
    except LayerBuildFailed as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for name, size in build.sizes.items():
        print(f"{name:>14}: {size / 1_048_576:8.1f} MiB unzipped")
    print(f"{'total':>14}: {build.total / 1_048_576:8.1f} MiB of {LAMBDA_UNZIPPED_LIMIT / 1_048_576:.0f} MiB allowed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
