"""What a benchmark runs: :class:`Case` (one program at one size) and the
:class:`Suite` protocol, with a registry of suites by name."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..errors import UsageError


@dataclass(frozen=True)
class Case:
    """One program at one set of extents.

    ``workload`` names the computation (``"dgemm"``, ``"sd_t_d1_1"``); ``group``
    is the figure it is drawn in (cases of a group share an x axis); ``size`` is
    its position on that axis, ``label`` the text for it (``"n=4096"``).  The
    flop and byte counts come from the compiled kernel, not from here."""

    suite: str
    workload: str
    group: str
    program: str
    extents: tuple[tuple[str, int], ...]
    size: float
    label: str
    note: str = ""

    @property
    def key(self) -> str:
        """A unique, stable name of the case (seeds its random inputs)."""
        sizes = ",".join(f"{name}={value}" for name, value in self.extents)
        return f"{self.suite}/{self.workload}/{sizes}"

    @property
    def extent_map(self) -> dict[str, int]:
        return dict(self.extents)


def make_case(
    suite: str,
    workload: str,
    group: str,
    program: str,
    extents: Mapping[str, int],
    size: float,
    label: str,
    note: str = "",
) -> Case:
    """A :class:`Case` from a plain mapping of extents."""
    return Case(suite, workload, group, program, tuple(extents.items()), float(size), label, note)


@runtime_checkable
class Suite(Protocol):
    """A named family of cases.  ``cases(quick=True)`` gives the small sizes
    used in CI (the quick CPU run of every suite takes well under two minutes)."""

    name: str
    description: str

    def cases(self, quick: bool) -> list[Case]: ...


_REGISTRY: dict[str, Callable[[], Suite]] = {}


def register_suite(name: str, factory: Callable[[], Suite]) -> None:
    """Make a suite available to ``einkern bench NAME``."""
    _REGISTRY[name] = factory


def suite_names() -> tuple[str, ...]:
    _load_builtin()
    return tuple(_REGISTRY)


def get_suite(name: str) -> Suite:
    _load_builtin()
    if name not in _REGISTRY:
        raise UsageError(
            f"unknown benchmark suite {name!r}",
            hint=f"choose from: all, {', '.join(_REGISTRY)}",
        )
    return _REGISTRY[name]()


def resolve_suites(names: Sequence[str]) -> list[Suite]:
    """Suites by name, in order, without repeats; ``all`` stands for every suite."""
    wanted: list[str] = []
    for name in names:
        for item in suite_names() if name == "all" else (name,):
            if item not in wanted:
                wanted.append(item)
    return [get_suite(name) for name in wanted]


def _load_builtin() -> None:
    if _REGISTRY:
        return
    from .suites import builtin_suites

    for suite_class in builtin_suites():
        register_suite(suite_class.name, suite_class)
