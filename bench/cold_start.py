"""Cold start: import time of each Lambda function's entry module, in a fresh interpreter per sample
(`python -X importtime -c "import <module>"`, median of 9), beside a bare `import boto3` and a bare Powertools
import, the samples interleaved round by round (every module once a round, the order reversed each round). The
figure is the sum of the cumulative times of the statement's top-level imports (the module and its parent
package), as -X importtime reports them; interpreter start-up (site) is excluded."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from bench.common import REPO, Figure, alternate, log, median, paired_ratios, spread

REPEATS = 9  # ~1 s a round (7 fresh processes); 9 rounds keep the section under 15 s
FUNCTIONS = ("api", "authorizer", "ingest", "query", "reindex")
REFERENCES = {"boto3": "import boto3", "aws_lambda_powertools": "import aws_lambda_powertools"}
POWERTOOLS = "aws_lambda_powertools"
# A function that loads Powertools cannot import in less than a bare Powertools import (noise allowed for).
IMPOSSIBLE_BELOW = 0.9
_LINE = re.compile(r"import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)")


def import_ms(module: str) -> float:
    """Milliseconds to import `module` (and its parents) in a fresh process."""
    return import_profile(module)[0]


def import_profile(module: str) -> tuple[float, frozenset[str]]:
    """Milliseconds to import `module` (and its parents) in a fresh process, and every module that import loaded."""
    # As a Lambda sees it: none of the bench's own quieting switches.
    env = {name: value for name, value in os.environ.items() if not name.startswith("POWERTOOLS_")}
    env["KINDEX_BACKEND"] = "local"
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return parse_importtime(done.stderr, module)


def parse_importtime(stderr: str, module: str) -> tuple[float, frozenset[str]]:
    """From `-X importtime` output: the cumulative ms of `module`'s statement (its top-level line plus its parent
    packages' when they have their own line) and the names of every module imported."""
    top_level, names = {}, set()
    for line in stderr.splitlines():
        match = _LINE.match(line)
        if match:
            names.add(match.group(4))
            if match.group(3) == " ":  # one space: a top-level import, not a nested one
                top_level[match.group(4)] = int(match.group(2))
    parts = module.split(".")
    wanted = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    if module not in top_level:
        raise RuntimeError(f"no importtime line for {module} in:\n{stderr[-2000:]}")
    # A parent package appears on its own line only when it was not already imported at start-up.
    return sum(top_level[name] for name in wanted if name in top_level) / 1000.0, frozenset(names)


def run(repeats: int = REPEATS) -> list[Figure]:
    modules = [f"functions.{function}" for function in FUNCTIONS] + list(REFERENCES)
    # One sample of every module a round, the order reversed every round (api ... boto3 powertools, powertools
    # boto3 ... api, ...), so that a busy moment hits the functions and the references alike. Not 20 s of work a
    # side: a sample is one fresh process (~0.5 s), and more samples would only lengthen the section.
    log(
        f"cold start: {len(modules)} modules x {repeats} rounds, interleaved "
        f"(about {len(modules) * repeats * 0.4:.0f} s)"
    )
    runs = alternate(
        {module: (lambda module=module: dict(zip(("ms", "loaded"), import_profile(module)))) for module in modules},
        min_seconds=0.0,
        min_rounds=repeats,
        max_rounds=repeats,
    )
    samples = {module: [r["ms"] for r in found] for module, found in runs.items()}
    loads_powertools = {module: any(POWERTOOLS in r["loaded"] for r in found) for module, found in runs.items()}
    references = {name: median(samples[name]) for name in REFERENCES}
    log("cold start references: " + ", ".join(f"{n} {v:.0f} ms" for n, v in references.items()))
    figures = []
    for function in FUNCTIONS:
        mine = samples[f"functions.{function}"]
        paired = paired_ratios(mine, samples["boto3"])
        log(f"cold start functions.{function}: {median(mine):.0f} ms")
        notes = (
            f"python -X importtime -c 'import functions.{function}', fresh process, median of {repeats} "
            f"(samples {', '.join(f'{s:.0f}' for s in mine)} ms), interleaved with the references round by "
            f"round; ratio = median of the per-round ratios to bare import boto3; bare import "
            f"aws_lambda_powertools {references['aws_lambda_powertools']:.0f} ms"
        )
        figure = Figure(
            f"cold_import_ms_{function}",
            median(mine),
            "ms",
            "import boto3",
            references["boto3"],
            ratio=round(median(paired), 4),
            section="cold start",
            notes=notes,
            spread=spread(mine),
            ratio_spread=spread(paired),
        )
        if loads_powertools[f"functions.{function}"]:
            # Its import includes Powertools' (nested), so it cannot take less than a bare Powertools import.
            against = median(paired_ratios(mine, samples[POWERTOOLS]))
            figure.invalid_unless(
                against >= IMPOSSIBLE_BELOW,
                f"it imports aws_lambda_powertools yet took "
                f"{against:.2f} x a bare import of it (median of the per-round ratios)",
            )
        figures.append(figure)
    figures.append(
        Figure(
            "cold_import_ms_boto3",
            references["boto3"],
            "ms",
            section="cold start",
            spread=spread(samples["boto3"]),
            notes=f"bare import boto3, median of {repeats}",
        )
    )
    figures.append(
        Figure(
            "cold_import_ms_powertools",
            references["aws_lambda_powertools"],
            "ms",
            section="cold start",
            spread=spread(samples["aws_lambda_powertools"]),
            notes=f"bare import aws_lambda_powertools, median of {repeats}",
        )
    )
    return figures
