"""What a benchmark runs: :class:`Case` (one program at one size) and the
:class:`Suite` protocol (the registry of suites by name is
:mod:`einkern.bench.registry`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


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
    #: Check against a float64 computation on the device (when the device has one)
    #: even where the NumPy reference would be quick: cheap for large drawn cases.
    device_reference: bool = False
    #: An ``einkern.blas`` routine and variant (``"gemm:NT"``, ``"trsm:LLNN"``; see
    #: :mod:`einkern.bench.routines`) run instead of ``program`` (then empty).
    routine: str = ""

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
