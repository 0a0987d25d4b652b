"""What a non-editable install (a wheel of this repository) ships: every package of the layer, and the console."""

import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def test_every_package_directory_and_the_console_files_are_declared():
    # Given the setuptools configuration (packages are listed by hand, so a new folder is easy to forget)
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    core = REPO / setuptools["package-dir"]["kindex"]
    # Then every folder of the kindex package that holds Python code or the console is listed
    folders = {p.parent for p in core.rglob("*.py") if "__pycache__" not in p.parts} | {core / "console"}
    expected = {".".join(("kindex", *folder.relative_to(core).parts)) for folder in folders}
    assert expected <= set(setuptools["packages"]), sorted(expected - set(setuptools["packages"]))
    # And the console's files are package data of a type the console route serves
    patterns = setuptools["package-data"]["kindex.console"]
    shipped = {p.name for pattern in patterns for p in (core / "console").glob(pattern)}
    assert shipped == {p.name for p in (core / "console").iterdir() if p.is_file()}
