"""The package as a whole: one version, the entry points, the typing marker."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import einkern
from einkern import _version

ROOT = Path(__file__).resolve().parents[1]


def test_one_version_from_the_metadata_or_the_source_tree():
    declared = re.search(
        r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE
    )
    assert declared is not None
    assert einkern.__version__ == _version.__version__ == _version.version() == declared[1]
    assert _version._from_source_tree() == declared[1]


def test_python_dash_m_einkern_runs_the_command_line():
    for module in ("einkern", "einkern.cli"):
        proc = subprocess.run(
            [sys.executable, "-m", module, "--version"],
            capture_output=True,
            text=True,
            check=False,
            cwd=ROOT,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == f"einkern {einkern.__version__}"


def test_the_package_is_marked_typed_and_licensed():
    assert (ROOT / "src" / "einkern" / "py.typed").is_file()
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert 'license = { text = "MIT" }' in (ROOT / "pyproject.toml").read_text()


def test_conftest_isolates_the_cache_and_catches_a_leaked_variable(pytester, monkeypatch):
    """A test session gets a private EINKERN_CACHE_DIR; a test that sets an EINKERN_*
    variable without monkeypatch fails, and the variable is gone afterwards."""
    monkeypatch.delenv("EINKERN_TEST_CACHE_DIR", raising=False)
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makepyfile(
        test_probe="""
import os
def test_private_cache():
    assert "einkern-cache" in os.environ["EINKERN_CACHE_DIR"]
    assert os.environ["EINKERN_TUNING_DB"].endswith("tuning.sqlite")
def test_leaks():
    os.environ["EINKERN_PROBE"] = "1"
def test_after():
    assert "EINKERN_PROBE" not in os.environ
"""
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(["*the test changed EINKERN_PROBE in os.environ*"])
