"""Shared test set-up: every test session compiles into a temporary cache.

* ``EINKERN_CACHE_DIR`` (compiled kernels) and ``EINKERN_TUNING_DB`` (the
  tuning database) point into one temporary directory per test session, so no
  test reads or writes the user's real cache; subprocesses inherit them.  Set
  ``EINKERN_TEST_CACHE_DIR`` to reuse one directory across sessions instead.
* Each test runs with the environment it started with: what a test sets in
  ``os.environ`` is undone after it, and setting an ``EINKERN_*`` variable
  without ``monkeypatch`` fails the test.
* Shared helpers: :data:`ROOT`, :data:`EXAMPLES`, :func:`example_paths`,
  :func:`problem_of`; tolerances and random inputs come from
  :mod:`einkern.testing`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def example_paths() -> list[Path]:
    """Every example program (``.ein``, ``.tensor``, ``.mapped``), sorted."""
    return sorted(p for p in EXAMPLES.iterdir() if p.suffix in (".ein", ".tensor", ".mapped"))


def problem_of(text: str, **extents: int):
    """The problem of program ``text`` with ``extents`` bound."""
    from einkern.api import load
    from einkern.ir.bind import make_problem

    return make_problem(load(text), extents)


@pytest.fixture(scope="session", autouse=True)
def einkern_cache(tmp_path_factory) -> Iterator[Path]:
    """The session's private cache directory (kernels and tuning database)."""
    chosen = os.environ.get("EINKERN_TEST_CACHE_DIR")
    root = Path(chosen) if chosen else tmp_path_factory.mktemp("einkern-cache")
    root.mkdir(parents=True, exist_ok=True)
    patch = pytest.MonkeyPatch()
    patch.setenv("EINKERN_CACHE_DIR", str(root))
    patch.setenv("EINKERN_TUNING_DB", str(root / "tuning.sqlite"))
    yield root
    patch.undo()


@pytest.fixture(autouse=True)
def _no_leaked_environment() -> Iterator[None]:
    """Restore ``os.environ`` after each test; fail on a leaked ``EINKERN_*``."""
    before = dict(os.environ)
    yield
    changed = sorted(
        name for name in set(before) | set(os.environ) if before.get(name) != os.environ.get(name)
    )
    for name in changed:  # only what changed: C libraries may hold the others
        if name in before:
            os.environ[name] = before[name]
        else:
            del os.environ[name]
    leaked = [name for name in changed if name.startswith("EINKERN_")]
    assert not leaked, f"the test changed {', '.join(leaked)} in os.environ"
