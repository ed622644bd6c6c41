"""What a tuning result is *about*: one task at concrete sizes on one device.

:func:`identify` gives the fields that key a tuning record of a
:class:`~einkern.ir.task.Task`: the target's device and toolchain, the einkern
version, the canonical text of the task's statements with the declarations of
the tensors it touches, its index extents, dtypes, layouts, strides and the
assumed alignment (for a one-statement task, the same fields, hence the same
keys, as the records of a statement written before tasks existed).  Two keys are
derived: ``key`` (the exact problem) and ``family`` (the same problem at any
sizes, for the nearest-size lookup).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass

from ..ir.task import Task
from .target import TuningTarget


def _json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _digest(value: object) -> str:
    return hashlib.sha256(_json(value).encode()).hexdigest()


@dataclass(frozen=True)
class ProblemIdentity:
    """The key fields of a tuning record."""

    backend: str
    device: tuple[tuple[str, str], ...]  # the target's device_key(), sorted
    version: str  # einkern version
    statement: str  # str(statement)
    tensors: tuple[str, ...]  # "name[extent, ...] dtype layout" of each tensor it touches
    extents: tuple[tuple[str, int], ...]  # size of each index of the statement
    dtypes: tuple[str, ...]
    layouts: tuple[str, ...]
    strides: tuple[tuple[int, ...], ...]
    alignment: int  # bytes the kernels assume of array addresses (0: none)

    def _family_fields(self) -> dict[str, object]:
        return {
            "backend": self.backend,
            "device": [list(pair) for pair in self.device],
            "version": self.version,
            "statement": self.statement,
            "tensors": list(self.tensors),
            "dtypes": list(self.dtypes),
            "layouts": list(self.layouts),
            "alignment": self.alignment,
        }

    @property
    def family(self) -> str:
        """Digest of everything but the sizes (extents, strides)."""
        return _digest(self._family_fields())

    @property
    def key(self) -> str:
        """Digest of every field: the exact problem."""
        fields = self._family_fields()
        fields["extents"] = [list(pair) for pair in self.extents]
        fields["strides"] = [list(s) for s in self.strides]
        return _digest(fields)

    @property
    def device_text(self) -> str:
        return _json(dict(self.device))

    def describe_sizes(self) -> str:
        """``i=64, j=64, k=32``."""
        return ", ".join(f"{index}={size}" for index, size in self.extents)


def einkern_version() -> str:
    from .._version import __version__

    return __version__


def identify(target: TuningTarget, task: Task) -> ProblemIdentity:
    """The identity of ``task`` on ``target``."""
    alignment = getattr(target, "alignment", 0)
    if callable(alignment):
        alignment = alignment()
    return make_identity(target.backend, target.device_key(), int(alignment), task)


def make_identity(
    backend: str, device: dict[str, str], alignment: int, task: Task
) -> ProblemIdentity:
    """The identity of ``task`` for an explicit backend and device: its statements'
    text (joined by ``; ``), the tensors it touches in declaration order, and the
    size of each index of each statement (once per name and size)."""
    problem = task.problem
    tensors = task.tensors
    return ProblemIdentity(
        backend=backend,
        device=tuple(sorted((str(k), str(v)) for k, v in device.items())),
        version=einkern_version(),
        statement="; ".join(str(statement) for statement in task.statements),
        tensors=tuple(f"{t.name}[{', '.join(t.shape)}] {t.dtype} {t.layout}" for t in tensors),
        extents=tuple(
            dict.fromkeys(
                (index, problem.index_size(statement, index))
                for statement in task.statements
                for index in statement.indices
            )
        ),
        dtypes=tuple(t.dtype for t in tensors),
        layouts=tuple(t.layout for t in tensors),
        strides=tuple(problem.strides(t.name) for t in tensors),
        alignment=alignment,
    )


def same_problem(left: ProblemIdentity, right: ProblemIdentity) -> bool:
    """Same statement, tensors and sizes, whatever the device, version and alignment."""
    fields = ("backend", "statement", "tensors", "extents", "dtypes", "layouts", "strides")
    return all(getattr(left, name) == getattr(right, name) for name in fields)


def size_distance(left: tuple[tuple[str, int], ...], right: tuple[tuple[str, int], ...]) -> float:
    """Euclidean distance between the log2 extents of two sizings of one statement
    (infinite when they name different indices)."""
    a, b = dict(left), dict(right)
    if set(a) != set(b):
        return math.inf
    return math.sqrt(sum((math.log2(a[i]) - math.log2(b[i])) ** 2 for i in a))
