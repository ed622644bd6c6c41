"""einkern's version, in one place: the installed distribution's metadata.

Run from a source tree (``PYTHONPATH=src``, nothing installed), the version is
read from the tree's ``pyproject.toml`` instead, so both ways give the same
string; ``0+unknown`` when neither can be found.  Base layer: imports nothing
of einkern.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

__all__ = ["__version__", "version"]


def _from_source_tree() -> str | None:
    """The ``version`` of ``[project]`` in ``src/../pyproject.toml``, if there is one."""
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError:
        return None
    if not re.search(r'^name\s*=\s*"einkern"', text, re.MULTILINE):
        return None
    found = re.search(r'^version\s*=\s*"([^"]+)"', text, re.MULTILINE)
    return found.group(1) if found else None


def version() -> str:
    """The version of the einkern distribution (see the module docstring)."""
    try:
        return metadata.version("einkern")
    except metadata.PackageNotFoundError:
        return _from_source_tree() or "0+unknown"


__version__ = version()
