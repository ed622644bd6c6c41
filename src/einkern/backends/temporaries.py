"""Memory of the temporaries a program rewrite introduces (:mod:`einkern.ir.rewrite`).

A temporary is a tensor of the rewritten program that the caller never passes
nor receives; a *view* is a temporary that names another tensor's memory (the
same elements, dense in the view's own shape and layout).  The
:class:`~.binding.Binder` leaves them out of a call; the executables give each
temporary that is not a view its own memory (:class:`HostTemporaries` on the
CPU, stream-ordered buffers of the call on the GPU) and every view the address
of the tensor at the end of its chain of views (:func:`resolve_views`).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, MutableMapping
from typing import Literal

import numpy as np

from ..ir.nodes import Problem
from ..semantics import STORAGE_NAN, STORAGE_NUMPY_DTYPE


def owned(problem: Problem) -> tuple[str, ...]:
    """Temporaries that need memory of their own (not views), in declaration order."""
    program = problem.program
    return tuple(t.name for t in program.tensors if t.temporary and t.view_of is None)


def views(problem: Problem) -> tuple[str, ...]:
    """The views of the program, in declaration order."""
    return tuple(t.name for t in problem.program.tensors if t.view_of is not None)


def resolve_views(problem: Problem, pointers: MutableMapping[str, int]) -> None:
    """Give every view the address of its storage (which ``pointers`` must hold)."""
    program = problem.program
    for name in views(problem):
        pointers[name] = pointers[program.storage(name)]


def roots(problem: Problem, names: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` with each view replaced by its storage, without repeats, in order."""
    program = problem.program
    return tuple(dict.fromkeys(program.storage(name) for name in names))


class HostTemporaries:
    """Host arrays for a problem's owned temporaries, reused across calls: a call
    takes a set (a new one only when every set is in use by another call, so
    concurrent calls never share one) and gives it back when it ends.  Freed with
    the executable that holds this object."""

    def __init__(self, problem: Problem):
        self.problem = problem
        self.names = owned(problem)
        self._free: list[dict[str, np.ndarray]] = []
        self._lock = threading.Lock()

    def take(self) -> dict[str, np.ndarray]:
        with self._lock:
            if self._free:
                return self._free.pop()
        return {name: self._new(name) for name in self.names}

    def give_back(self, arrays: dict[str, np.ndarray]) -> None:
        with self._lock:
            self._free.append(arrays)

    def _new(self, name: str) -> np.ndarray:
        tensor = self.problem.program.tensor(name)
        order: Literal["C", "F"] = "C" if tensor.layout == "row" else "F"
        dtype = STORAGE_NUMPY_DTYPE[tensor.dtype]
        return np.empty(self.problem.shape(name), dtype=dtype, order=order)


def view_arrays(problem: Problem, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """NumPy arrays of every temporary for ``arrays`` (the other tensors, dense):
    new ones (NaN) for owned temporaries (bfloat16 ones as uint16 encodings, as the
    emulator takes them), and for views the storage's memory reshaped (no copy).
    For running a rewritten problem in the emulator."""
    program = problem.program
    result = dict(arrays)
    for name in owned(problem):
        tensor = program.tensor(name)
        order: Literal["C", "F"] = "C" if tensor.layout == "row" else "F"
        poison = STORAGE_NAN.get(tensor.dtype, np.nan)  # bfloat16: the bits of a NaN
        dtype = STORAGE_NUMPY_DTYPE[tensor.dtype]
        result[name] = np.full(problem.shape(name), poison, dtype=dtype, order=order)
    for name in views(problem):
        base = result[program.storage(name)]
        flat = np.ravel(base, order="K")
        if not np.shares_memory(flat, base):
            raise ValueError(f"the storage of view {name!r} is not dense")
        layout = program.tensor(name).layout
        result[name] = flat.reshape(problem.shape(name), order="C" if layout == "row" else "F")
    return result
