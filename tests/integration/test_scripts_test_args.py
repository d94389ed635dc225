"""scripts/test's arguments: a stage name it does not know is an error, and
--help lists every stage (and needs no root).

`scripts/test --only pytset` (a typo) used to run nothing, print "all
stages passed" and exit 0; --help left stages out.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "test"


def _run(*args: str, user: list[str] = ()) -> subprocess.CompletedProcess:
    return subprocess.run([*user, str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def _table() -> list[str]:
    """The stage names of the script's STAGES table."""
    text = SCRIPT.read_text()
    body = re.search(r"^STAGES=\(\n(.*?)^\)", text, re.S | re.M)
    assert body, "no STAGES=( ... ) table in scripts/test"
    return re.findall(r'^\s*"(\S+)\s', body.group(1), re.M)


def _run_stages() -> list[str]:
    """The stage names scripts/test runs (`stage NAME ...` lines)."""
    return re.findall(r"^\s*stage (\S+) ", SCRIPT.read_text(), re.M)


def test_the_table_names_every_stage_the_script_runs():
    table = _table()
    assert table == _run_stages(), "STAGES and the stages run differ (or their order does)"
    for name in ("setup", "fmt", "clippy", "build", "cargo", "pytest", "realclient", "locks",
                 "bench-smoke", "cleanup-check"):
        assert name in table


@pytest.mark.parametrize("option", ["--only", "--skip"])
def test_an_unknown_stage_is_an_error(option):
    r = _run(option, "pytset", "--no-setup")
    assert r.returncode == 2, r
    assert "pytset" in r.stderr, r.stderr
    for name in _table():
        assert name in r.stderr, f"{name} not among the stages listed: {r.stderr}"
    assert "passed" not in r.stdout + r.stderr


def test_help_lists_every_stage():
    r = _run("--help")
    assert r.returncode == 0, r
    listed = {line.split()[0] for line in r.stdout.splitlines() if line.startswith("  ") and line.split()}
    for name in _table():
        assert name in listed, f"--help leaves out {name}:\n{r.stdout}"


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_help_needs_no_root():
    r = _run("--help", user=["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
    assert r.returncode == 0, r
    assert "cleanup-check" in r.stdout
