"""The CPU backend: generated C compiled by the system compiler, run through ctypes."""

from __future__ import annotations

import ctypes
import dataclasses
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...arrays import ArrayInfo, describe_numpy
from ...errors import ArgumentError, CompilationError
from ...ir.nodes import Problem
from .codegen import ENTRY_POINT, emit_c
from .compiler import (
    Toolchain,
    cache_directory,
    cached_library,
    compile_library,
    find_compiler,
    toolchain,
)
from .schedule import CpuSchedule, default_schedule

_LOADED: dict[str, ctypes.CDLL] = {}
_LOADED_LOCK = threading.Lock()


@dataclass(frozen=True, eq=False)
class CpuExecutable:
    """A compiled problem; :meth:`run` calls ``einkern_run`` on the arrays' memory.

    ``library`` is the cached shared object, ``library.with_suffix(".c")`` its source."""

    problem: Problem
    library: Path
    function: Any = dataclasses.field(repr=False)

    #: ``run`` takes the ArrayInfo of arrays einkern.Kernel has already checked.
    accepts_infos = True

    def run(self, arrays: Mapping[str, Any], scalars: Mapping[str, float],
            infos: Mapping[str, ArrayInfo] | None = None) -> None:
        """Execute every statement in order, in place.  ``arrays`` maps each tensor name
        to a NumPy array (or an object exposing ``__array_interface__``) in the
        declared shape, dtype and layout; ``scalars`` maps scalar names to values
        (declared defaults fill in missing ones).  ``infos``: the arrays that the
        caller has already checked against the program (their checks are skipped)."""
        program = self.problem.program
        names = [tensor.name for tensor in program.tensors]
        outputs = program.outputs
        checked = infos or {}
        views = [
            _as_ndarray(arrays[name]) if name in checked and name in arrays
            else self._array(name, arrays, name in outputs)
            for name in names
        ]
        _check_overlap(outputs, names, views)
        pointers = (ctypes.c_void_p * max(1, len(views)))(*(v.ctypes.data for v in views))
        values = (ctypes.c_double * max(1, len(program.scalars)))(
            *(_scalar_value(scalar, scalars) for scalar in program.scalars)
        )
        self.function(pointers, values)

    def _array(self, name: str, arrays: Mapping[str, Any], written: bool) -> np.ndarray:
        if name not in arrays:
            raise ArgumentError(f"no array given for tensor {name!r}")
        array = arrays[name]
        if not isinstance(array, np.ndarray):
            array = np.asarray(array)  # shares memory for __array_interface__ objects
        tensor = self.problem.program.tensor(name)
        shape = self.problem.shape(name)
        if array.dtype != np.dtype(tensor.dtype) or array.shape != shape:
            raise ArgumentError(
                f"tensor {name!r} needs a {tensor.dtype} array of shape {shape}, "
                f"got {array.dtype} {array.shape}"
            )
        itemsize = array.dtype.itemsize
        expected = self.problem.strides(name)
        pairs = zip(shape, array.strides, expected, strict=True)
        if any(n != 1 and got != want * itemsize for n, got, want in pairs):
            raise ArgumentError(f"array for tensor {name!r} is not dense in {tensor.layout} layout")
        if written and not array.flags.writeable:
            raise ArgumentError(f"array for output tensor {name!r} is read-only")
        return array


def _as_ndarray(array: Any) -> np.ndarray:
    return array if isinstance(array, np.ndarray) else np.asarray(array)


def _scalar_value(scalar, given: Mapping[str, float]) -> float:
    value = given.get(scalar.name, scalar.default)
    if value is None:
        raise ArgumentError(f"no value given for scalar {scalar.name!r}")
    return float(value)


def _check_overlap(outputs: Sequence[str], names: Sequence[str], views: Sequence[np.ndarray]):
    """Kernels assume a written tensor shares memory with no other tensor (``restrict``)."""
    for written in outputs:
        mine = views[names.index(written)]
        for name, other in zip(names, views, strict=True):
            if name != written and np.may_share_memory(mine, other):
                raise ArgumentError(
                    f"arrays for tensors {written!r} and {name!r} overlap in memory, "
                    f"but {written!r} is written"
                )


def load_library(path: Path) -> Any:
    """``einkern_run`` from the shared library at ``path`` (loaded once per process).

    Raises OSError or AttributeError when the file is not a usable library."""
    key = str(path)
    with _LOADED_LOCK:
        library = _LOADED.get(key)
        if library is None:
            library = ctypes.CDLL(key)
            _LOADED[key] = library
    function = getattr(library, ENTRY_POINT)
    function.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_double)]
    function.restype = None
    return function


def load_or_compile(source: str, chain: Toolchain, directory: Path) -> tuple[Path, Any]:
    """The cached library for ``source``, compiled first if missing, not verified
    against its key, or unloadable."""
    path = cached_library(source, chain, directory)
    if path is not None:
        try:
            return path, load_library(path)
        except (OSError, AttributeError):
            pass  # corrupt or truncated: rebuild below, replacing it atomically
    path = compile_library(source, chain, directory)
    try:
        return path, load_library(path)
    except (OSError, AttributeError) as error:
        raise CompilationError(
            f"the freshly compiled library {path} cannot be loaded: {error}",
            hint="this is a bug in einkern; please report it with the saved source",
        ) from error


class CpuBackend:
    """C11/OpenMP kernels built with the system C compiler (``$CC`` or ``cc``)."""

    name = "cpu"

    def __init__(self) -> None:
        self._executables: dict[tuple[Any, ...], CpuExecutable] = {}
        self._lock = threading.Lock()

    def available(self) -> bool:
        """True when a C compiler is on the PATH (or named by ``$CC``)."""
        return find_compiler() is not None

    def emit(self, problem: Problem, schedule: CpuSchedule | None = None) -> str:
        """The C source for ``problem`` (default schedule when none is given)."""
        return emit_c(problem, schedule)

    def build(self, problem: Problem, schedule: CpuSchedule | None = None) -> CpuExecutable:
        """An executable for ``problem``: from memory, else the disk cache, else compiled.

        Raises BackendError when there is no usable C compiler, CompilationError
        when the generated code does not compile."""
        directory = cache_directory()
        chain = toolchain(directory)
        schedule = schedule if schedule is not None else default_schedule(problem)
        key = (problem, schedule, chain, directory)
        with self._lock:
            found = self._executables.get(key)
        if found is not None:
            return found
        path, function = load_or_compile(emit_c(problem, schedule), chain, directory)
        executable = CpuExecutable(problem, path, function)
        with self._lock:
            return self._executables.setdefault(key, executable)

    def describe(self, array: Any) -> ArrayInfo | None:
        """Host arrays: NumPy arrays and objects exposing ``__array_interface__``;
        None for anything else (GPU arrays with ``__cuda_array_interface__`` included)."""
        if isinstance(array, np.ndarray):
            return describe_numpy(array)
        if hasattr(array, "__cuda_array_interface__"):
            return None
        if not isinstance(getattr(array, "__array_interface__", None), dict):
            return None
        try:
            view = np.asarray(array)
        except (TypeError, ValueError):
            return None
        library = type(array).__module__.partition(".")[0] or "unknown"
        return dataclasses.replace(describe_numpy(view), library=library)

    def allocate(self, problem: Problem, tensor: str, like: Sequence[Any]) -> np.ndarray:
        """Uninitialised NumPy array for ``tensor`` in its declared layout."""
        declared = problem.program.tensor(tensor)
        order = "C" if declared.layout == "row" else "F"
        return np.empty(problem.shape(tensor), dtype=declared.dtype, order=order)
