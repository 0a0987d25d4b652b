"""What `make test` decides before it runs the suite: which system packages it installs, how (root, passwordless
sudo) or which one command it asks for (scripts/provision.py), and which OpenSearch node the suite runs against
(scripts/opensearch.py's choose_node). The decisions are pure, so every branch is checked here without installing
or starting anything; the machine that runs the suite has all the tools, so only these tests reach the branches
that install."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def script(name: str):
    # A name of its own: `opensearch` is also opensearch-py's package.
    spec = importlib.util.spec_from_file_location(f"kindex_script_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # dataclasses look their module up by name
    spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules[spec.name]


provision = script("provision")
opensearch = script("opensearch")
ALL = list(provision.TOOLS)
APT_ENV = ["env", "DEBIAN_FRONTEND=noninteractive"]


def decide(missing, *, root=False, sudo=False, apt=True, man1=True):
    return provision.plan(missing, is_root=root, passwordless_sudo=sudo, has_apt=apt, man1_exists=man1)


def test_nothing_missing_runs_nothing_whoever_the_user_is():
    # Given every tool present / When any user decides / Then nothing runs and nothing fails
    for root, sudo, apt in [(True, False, True), (False, True, True), (False, False, True), (False, False, False)]:
        assert decide([], root=root, sudo=sudo, apt=apt) == provision.Plan()


def test_root_installs_exactly_the_missing_packages_unattended():
    # Given a root user lacking Node.js and Chromium
    plan = decide([provision.NODE, provision.CHROMIUM], root=True)
    # Then apt-get installs those two packages and no question can stop it
    assert plan.failure is None
    assert plan.commands == [
        [*APT_ENV, "apt-get", "update", "-qq"],
        [*APT_ENV, "apt-get", "install", "-y", "-qq", "nodejs", "chromium"],
    ]


def test_a_missing_java_on_a_slim_image_first_makes_the_folder_its_post_install_needs():
    # Given root on an image without /usr/share/man/man1, lacking everything
    plan = decide(ALL, root=True, man1=False)
    # Then the folder is made before apt-get, and all six Debian packages are installed in one go
    assert plan.commands[0] == ["mkdir", "-p", "/usr/share/man/man1"]
    assert plan.commands[-1][-6:] == [
        "nodejs",
        "npm",
        "chromium",
        "openjdk-17-jre-headless",
        "tesseract-ocr",
        "tesseract-ocr-spa",
    ]
    # And without Java missing, or with the folder there, it is not touched
    assert all(c[0] != "mkdir" for c in decide([provision.NPM], root=True, man1=False).commands)
    assert all(c[0] != "mkdir" for c in decide([provision.JAVA], root=True, man1=True).commands)


def test_passwordless_sudo_runs_every_step_through_sudo_without_a_prompt():
    # Given a user with passwordless sudo lacking Java on a slim image
    plan = decide([provision.JAVA], sudo=True, man1=False)
    # Then every step goes through `sudo -n` (never waits for a password)
    assert plan.failure is None and len(plan.commands) == 3
    assert all(command[:2] == ["sudo", "-n"] for command in plan.commands)
    assert plan.commands[-1] == ["sudo", "-n", *APT_ENV, "apt-get", "install", "-y", "-qq", "openjdk-17-jre-headless"]


def test_a_user_who_may_not_install_gets_one_command_and_nothing_runs():
    # Given neither root nor passwordless sudo, lacking npm and Java on a slim image
    plan = decide([provision.NPM, provision.JAVA], man1=False)
    # Then nothing runs, and the failure names what is missing and the one command that installs it
    assert plan.commands == []
    assert "npm, Java 17 (java)" in plan.failure
    assert plan.failure.endswith(
        "sudo sh -c 'mkdir -p /usr/share/man/man1 && apt-get update -qq && "
        "apt-get install -y -qq npm openjdk-17-jre-headless'"
    )


def test_without_apt_get_it_fails_naming_the_tools_and_debians_packages():
    # Given a root user on a system without apt-get
    plan = decide([provision.CHROMIUM], root=True, apt=False)
    # Then it runs nothing and says what to install
    assert plan.commands == [] and "Chromium" in plan.failure and "chromium" in plan.failure


def test_tesseract_data_is_looked_for_where_the_ocr_adapter_reads_it():
    # Given the OCR adapter's folders for Tesseract's language data
    from kindex.adapters.local.tesseract_ocr import TESSDATA_DIRS

    # Then provision checks (and so installs into) the same ones, in the same order
    assert provision.TESSDATA_DIRS == TESSDATA_DIRS


def test_missing_tesseract_data_installs_debians_packages(monkeypatch, tmp_path):
    # Given no Tesseract language data in any folder provision looks in
    monkeypatch.setattr(provision, "TESSDATA_DIRS", (str(tmp_path),))
    # When provision decides, as root
    missing = provision.missing_tools()
    plan = decide([tool for tool in missing if tool in (provision.TESSERACT, provision.TESSERACT_SPANISH)], root=True)
    # Then both the English (tesseract-ocr) and the Spanish data are installed, unattended
    assert {provision.TESSERACT, provision.TESSERACT_SPANISH} <= set(missing)
    assert plan.commands[-1] == [*APT_ENV, "apt-get", "install", "-y", "-qq", "tesseract-ocr", "tesseract-ocr-spa"]
    # And once the data is there, nothing of Tesseract is missing
    (tmp_path / "eng.traineddata").write_bytes(b"x")
    (tmp_path / "spa.traineddata").write_bytes(b"x")
    assert not {provision.TESSERACT, provision.TESSERACT_SPANISH} & set(provision.missing_tools())


def test_missing_tools_checks_the_browser_path_the_browser_test_uses(monkeypatch, tmp_path):
    # Given KINDEX_TEST_CHROMIUM naming a file that does not exist
    monkeypatch.setenv("KINDEX_TEST_CHROMIUM", str(tmp_path / "no-chromium"))
    # Then Chromium counts as missing; once the file is there, it does not
    assert provision.CHROMIUM in provision.missing_tools()
    (tmp_path / "no-chromium").write_text("")
    assert provision.CHROMIUM not in provision.missing_tools()


def free_port() -> int:
    return 54321


@pytest.mark.parametrize(
    ("ours", "owner", "taken", "expected"),
    [
        # this checkout's `make opensearch` node: used, left running
        (True, None, True, (9200, False, False)),
        # this checkout's node that a live run started: used, that run stops it
        (True, True, True, (9200, False, False)),
        # a node a killed run left behind: adopted, stopped at the end
        (True, False, True, (9200, False, True)),
        # nothing on the port: a node of the run's own there, stopped at the end
        (False, None, False, (9200, True, True)),
        # another checkout's node or any other service on the port: left alone, the run's node on a free port
        (False, None, True, (54321, True, True)),
    ],
)
def test_the_suite_gets_a_node_and_stops_only_what_it_started(ours, owner, taken, expected):
    # When the runner chooses for port 9200
    choice = opensearch.choose_node(9200, ours=ours, owner=owner, port_taken=taken, free_port=free_port)
    # Then it uses, starts and stops as the case requires
    assert (choice.port, choice.start, choice.stop_after) == expected
    assert choice.why
