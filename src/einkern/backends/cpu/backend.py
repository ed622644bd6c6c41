"""The CPU backend: generated C compiled by the system compiler, run through ctypes."""

from __future__ import annotations

import ctypes
import dataclasses
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ...arrays import ArrayInfo, describe_numpy, describe_torch_host, is_torch, new_host_array
from ...errors import ArgumentError, CompilationError
from ...ir.nodes import Problem
from ...semantics import NUMPY_DTYPE
from ..binding import Call, article, bind_arguments, type_name
from ..temporaries import HostTemporaries, resolve_views
from .blas import hand_routines
from .codegen import ENTRY_POINT
from .compiler import (
    Toolchain,
    cache_directory,
    cached_library,
    compile_library,
    find_compiler,
    toolchain,
)
from .decide import default_schedule
from .fused import emit_program
from .schedule import CpuSchedule

_DLPACK_CPU = 1  # kDLCPU
_LOADED: dict[str, ctypes.CDLL] = {}
_LOADED_LOCK = threading.Lock()


@dataclass(frozen=True, eq=False)
class CpuExecutable:
    """A compiled problem; :meth:`run` calls ``einkern_run`` on the arrays' memory.

    ``library`` is the cached shared object, ``library.with_suffix(".c")`` its source."""

    problem: Problem
    library: Path
    function: Any = dataclasses.field(repr=False)
    #: memory of the problem's temporaries (a rewrite's), reused across calls
    temporaries: HostTemporaries | None = dataclasses.field(default=None, repr=False)

    def run(self, arrays: Mapping[str, Any], scalars: Mapping[str, Any]) -> None:
        """Check ``arrays`` and ``scalars`` by name (the one check,
        :class:`~einkern.backends.binding.Binder`; names the program does not have
        are ignored) and run: see :meth:`run_checked`."""
        self.run_checked(
            bind_arguments(self.problem, CpuBackend(), arrays, scalars, ignore_unknown=True)
        )

    def run_checked(self, call: Call) -> None:
        """Execute every statement in order, in place, on the call's arrays (host
        memory, checked by :class:`~einkern.backends.binding.Binder`)."""
        program = self.problem.program
        infos = call.infos
        values = (ctypes.c_double * max(1, len(program.scalars)))(
            *(call.scalars[scalar.name] for scalar in program.scalars)
        )
        if self.temporaries is None:
            pointers = (ctypes.c_void_p * max(1, len(program.tensors)))(
                *(infos[tensor.name].pointer for tensor in program.tensors)
            )
            self.function(pointers, values)
            return
        taken = self.temporaries.take()
        try:
            addresses = {name: info.pointer for name, info in infos.items()}
            addresses.update((name, array.ctypes.data) for name, array in taken.items())
            resolve_views(self.problem, addresses)
            pointers = (ctypes.c_void_p * max(1, len(program.tensors)))(
                *(addresses[tensor.name] for tensor in program.tensors)
            )
            self.function(pointers, values)
        finally:
            self.temporaries.give_back(taken)


def load_library(path: Path) -> Any:
    """``einkern_run`` from the shared library at ``path`` (loaded once per process).

    Raises OSError or AttributeError when the file is not a usable library."""
    key = str(path)
    with _LOADED_LOCK:
        library = _LOADED.get(key)
        if library is None:
            library = ctypes.CDLL(key)
            hand_routines(library)
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
        return emit_program(problem, schedule)

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
        path, function = load_or_compile(emit_program(problem, schedule), chain, directory)
        holder = HostTemporaries(problem) if problem.program.temporaries else None
        executable = CpuExecutable(problem, path, function, holder)
        with self._lock:
            return self._executables.setdefault(key, executable)

    def describe(self, array: Any) -> ArrayInfo | None:
        """Host arrays: NumPy arrays, objects exposing ``__array_interface__``, and
        DLPack producers in host memory (torch CPU tensors, JAX CPU arrays); None for
        anything else (GPU arrays included).  The ArrayInfo's pointer stays valid
        while ``array`` lives."""
        if isinstance(array, np.ndarray):
            return describe_numpy(array)
        if hasattr(array, "__cuda_array_interface__"):
            return None
        if is_torch(array) and str(array.dtype) == "torch.bfloat16":
            return describe_torch_host(array)  # NumPy cannot view bfloat16
        library = type(array).__module__.partition(".")[0] or "unknown"
        if isinstance(getattr(array, "__array_interface__", None), dict):
            try:
                view = np.asarray(array)
            except (TypeError, ValueError):
                return None
        elif hasattr(array, "__dlpack__") and hasattr(array, "__dlpack_device__"):
            try:
                kind, _ = array.__dlpack_device__()
            except Exception:  # noqa: BLE001 - not a usable DLPack producer
                return None
            if int(kind) != _DLPACK_CPU:
                return None
            try:
                view = np.from_dlpack(array)
            except (BufferError, TypeError, ValueError, RuntimeError) as error:
                raise ArgumentError(
                    f"cannot read {article(type_name(array))} through DLPack: {error}",
                    hint="pass a plain array (for torch: tensor.detach())",
                ) from None
        else:
            return None
        return dataclasses.replace(describe_numpy(view), library=library)

    def allocate(self, problem: Problem, tensor: str, like: Sequence[Any]) -> Any:
        """Uninitialised NumPy array for ``tensor`` in its declared layout (a torch
        CPU tensor for bfloat16, which NumPy does not have)."""
        declared = problem.program.tensor(tensor)
        if declared.dtype in NUMPY_DTYPE:
            order: Literal["C", "F"] = "C" if declared.layout == "row" else "F"
            return np.empty(problem.shape(tensor), dtype=declared.dtype, order=order)
        return new_host_array(problem.shape(tensor), declared.dtype, declared.layout)
