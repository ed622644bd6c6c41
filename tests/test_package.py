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
    declared = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(),
                         re.MULTILINE)
    assert declared is not None
    assert einkern.__version__ == _version.__version__ == _version.version() == declared[1]
    assert _version._from_source_tree() == declared[1]


def test_python_dash_m_einkern_runs_the_command_line():
    for module in ("einkern", "einkern.cli"):
        proc = subprocess.run([sys.executable, "-m", module, "--version"],
                              capture_output=True, text=True, check=False, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == f"einkern {einkern.__version__}"


def test_the_package_is_marked_typed_and_licensed():
    assert (ROOT / "src" / "einkern" / "py.typed").is_file()
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert 'license = { text = "MIT" }' in (ROOT / "pyproject.toml").read_text()
