#!/usr/bin/env python3
"""The system tools `make test` needs beside Python, installed when missing (`make test-tools`; `make test` runs it).

    python3 scripts/provision.py

- Node.js: jsii, which the CDK synth tests (tests/infra) run, is a Node program.
- npm: installs playwright-core into tests/browser/node_modules (it never downloads a browser).
- Debian's Chromium at /usr/bin/chromium (KINDEX_TEST_CHROMIUM overrides): the console's browser test drives it.
- Java 17 (11+; JAVA_HOME or the `java` on PATH): the real OpenSearch node that `make test` starts
  (scripts/opensearch.py).
- Tesseract's English and Spanish language data (Debian's tesseract-ocr, which brings -eng, and tesseract-ocr-spa):
  local mode OCRs scanned PDF pages with it (kindex/adapters/local/tesseract_ocr.py), and its tests read real scans.

Whatever is missing is installed with apt-get when this user may: as root, or through passwordless sudo
(`sudo -n`). Otherwise the script fails at once, before anything is downloaded, printing the one command that
installs it all. Standard library only: it runs before any virtualenv exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

MAN1 = Path("/usr/share/man/man1")


@dataclass(frozen=True)
class Tool:
    what: str  # as the messages name it
    package: str  # Debian's package


NODE = Tool("Node.js (node)", "nodejs")
NPM = Tool("npm", "npm")
CHROMIUM = Tool("Chromium", "chromium")
JAVA = Tool("Java 17 (java)", "openjdk-17-jre-headless")
TESSERACT = Tool("Tesseract OCR (English data)", "tesseract-ocr")
TESSERACT_SPANISH = Tool("Tesseract's Spanish data", "tesseract-ocr-spa")
TOOLS = (NODE, NPM, CHROMIUM, JAVA, TESSERACT, TESSERACT_SPANISH)
# Where Debian puts Tesseract's language data: the same folders, in the same order, as TESSDATA_DIRS in
# kindex/adapters/local/tesseract_ocr.py (tests/unit/test_provision.py checks that they agree).
TESSDATA_DIRS = ("/usr/share/tesseract-ocr/5/tessdata", "/usr/share/tesseract-ocr/4.00/tessdata", "/usr/share/tessdata")


def chromium_path() -> Path:
    return Path(os.environ.get("KINDEX_TEST_CHROMIUM") or "/usr/bin/chromium")


def has_java() -> bool:
    """The same rule as scripts/opensearch.py's java_home(): JAVA_HOME's java, else one on PATH."""
    home = os.environ.get("JAVA_HOME")
    return bool(home and os.access(Path(home) / "bin" / "java", os.X_OK)) or shutil.which("java") is not None


def has_tessdata(language: str) -> bool:
    return any((Path(folder) / f"{language}.traineddata").is_file() for folder in TESSDATA_DIRS)


def missing_tools() -> list[Tool]:
    present = {
        NODE: shutil.which("node") is not None,
        NPM: shutil.which("npm") is not None,
        CHROMIUM: chromium_path().is_file(),
        JAVA: has_java(),
        TESSERACT: has_tessdata("eng"),
        TESSERACT_SPANISH: has_tessdata("spa"),
    }
    return [tool for tool in TOOLS if not present[tool]]


@dataclass(frozen=True)
class Plan:
    """What to do about the missing tools: run `commands` in order, or, when `failure` is set, stop and print it."""

    commands: list[list[str]] = field(default_factory=list)
    failure: str | None = None


def plan(missing: list[Tool], *, is_root: bool, passwordless_sudo: bool, has_apt: bool, man1_exists: bool) -> Plan:
    """The decision alone, so every branch is tested without installing anything (tests/unit/test_provision.py)."""
    if not missing:
        return Plan()
    names = ", ".join(tool.what for tool in missing)
    packages = [tool.package for tool in missing]
    if not has_apt:
        return Plan(
            failure=f"make test needs {names}, and there is no apt-get here to install them: install them "
            f"with this system's package manager (Debian's packages: {' '.join(packages)})"
        )
    steps = []
    # Slim Debian images drop /usr/share/man, and the JRE's post-install script fails without this folder.
    if JAVA in missing and not man1_exists:
        steps.append(["mkdir", "-p", str(MAN1)])
    steps.append(["apt-get", "update", "-qq"])
    steps.append(["apt-get", "install", "-y", "-qq", *packages])
    if is_root:
        return Plan(commands=[with_env(step) for step in steps])
    if passwordless_sudo:
        return Plan(commands=[["sudo", "-n", *with_env(step)] for step in steps])
    one_command = "sudo sh -c '" + " && ".join(" ".join(step) for step in steps) + "'"
    return Plan(
        failure=f"make test needs {names}; this user may not install packages (not root, no passwordless "
        f"sudo). Run this once (it needs root), then make test again:\n  {one_command}"
    )


def with_env(step: list[str]) -> list[str]:
    # apt-get must never stop at a question (tzdata, a changed config file): make test may run unattended.
    return ["env", "DEBIAN_FRONTEND=noninteractive", *step] if step[0] == "apt-get" else step


def may_sudo() -> bool:
    if shutil.which("sudo") is None:
        return False
    return (
        subprocess.run(
            ["sudo", "-n", "true"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        ).returncode
        == 0
    )


def main() -> int:
    missing = missing_tools()
    if not missing:
        return 0
    is_root = os.geteuid() == 0
    decided = plan(
        missing,
        is_root=is_root,
        passwordless_sudo=not is_root and may_sudo(),
        has_apt=shutil.which("apt-get") is not None,
        man1_exists=MAN1.is_dir(),
    )
    if decided.failure:
        print(f"provision: {decided.failure}", file=sys.stderr)
        return 1
    print(f"provision: installing {' '.join(tool.package for tool in missing)} with apt-get", flush=True)
    for command in decided.commands:
        if subprocess.run(command, stdin=subprocess.DEVNULL).returncode != 0:
            print(f"provision: `{' '.join(command)}` failed", file=sys.stderr)
            return 1
    still = missing_tools()
    if still:
        print(f"provision: still missing after apt-get: {', '.join(tool.what for tool in still)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
