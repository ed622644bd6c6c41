"""Run kernel-IR kernels on the CPU, MCUDA style, with every access bounds-checked.

:func:`emulate` prints each kernel as C (:func:`print_emulation_c`; the
execution model is described in :mod:`.emulator_c`), compiles it with the CPU
backend's toolchain at -O1 (:data:`EMULATION_OPTIMISATION`) into its on-disk
cache, and runs the kernels in order on NumPy arrays, in place.  Each array is
addressed flat from its data pointer by the kernel's own index arithmetic,
whatever its layout (it must be dense: C or Fortran order).  A bad access is
never performed: it is reported in the returned :class:`EmulationReport`.

:func:`drop_barrier` removes one barrier (fault injection for tests).
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ArgumentError, BackendError
from ..gpu import kir
from ..gpu.emulator_c import KINDS, MAX_ERRORS, RECORD, EmulationSource, emulation_source
from ..gpu.emulator_c import print_emulation_c as print_emulation_c
from ..semantics import C_TYPE, STORAGE_NUMPY_DTYPE
from .cpu.backend import load_or_compile
from .cpu.compiler import Toolchain, cache_directory, toolchain

#: NumPy dtype of each C type a kernel declares (bfloat16 elements: their uint16
#: encodings, :func:`einkern.arrays.storage_view`).
DTYPES = {C_TYPE[d]: STORAGE_NUMPY_DTYPE[d].type for d in C_TYPE} | {
    "int": np.int32,
    "long long": np.int64,
}


@dataclass(frozen=True)
class AccessError:
    """One access the emulator refused to perform."""

    kernel: str
    array: str
    space: str  # "global" | "shared" | "thread"
    access: str  # "load" | "store" | "vector load" | "vector copy" | "ldmatrix row"
    index: int
    size: int  # elements of the array
    block: int
    thread: int
    problem: str = "out of bounds"  # or "misaligned" (vector loads)

    def __str__(self) -> str:
        return (
            f"{self.kernel}: {self.access} of {self.space} {self.array}[{self.index}] "
            f"{self.problem} (size {self.size}) in block {self.block}, thread {self.thread}"
        )


@dataclass(frozen=True)
class EmulationReport:
    """What went wrong in an emulation: the first few bad accesses of every kernel
    (``errors``, sorted by block and thread) and how many each kernel made."""

    kernels: tuple[str, ...]
    counts: tuple[int, ...]  # bad accesses per kernel, all of them
    errors: tuple[AccessError, ...]  # at most MAX_ERRORS per kernel
    libraries: tuple[Path, ...]  # cached shared libraries (sources beside them, .c)

    @property
    def ok(self) -> bool:
        return not any(self.counts)

    @property
    def error_count(self) -> int:
        return sum(self.counts)

    def __str__(self) -> str:
        if self.ok:
            return f"emulated {len(self.kernels)} kernel(s): no bad access"
        lines = [f"{self.error_count} bad access(es) in {len(self.kernels)} kernel(s):"]
        return "\n".join(lines + [f"  {e}" for e in self.errors])


def emulate(
    kernels: Sequence[kir.Kernel], arrays: Mapping[str, np.ndarray], scalars: Mapping[str, float]
) -> EmulationReport:
    """Run ``kernels`` in order on ``arrays`` (modified in place) and ``scalars``.

    Raises :class:`ArgumentError` for a missing, mistyped, too small or read-only
    (but written) array or a missing scalar, :class:`BackendError` without a C
    compiler, :class:`CompilationError` if the generated C does not compile."""
    sources = [emulation_source(kernel) for kernel in kernels]
    built = _build([source.text for source in sources])
    counts, errors = [], []
    for source in sources:
        views = [_buffer(param, arrays) for param in source.arrays]
        values = [_scalar(param, scalars) for param in source.scalars]
        record = np.zeros(2 + RECORD * MAX_ERRORS, dtype=np.int64)
        pointers = (ctypes.c_void_p * (len(views) + 1))(
            *(view.ctypes.data for view in views), record.ctypes.data
        )
        numbers = (ctypes.c_double * max(1, len(values)))(*values)
        built[source.text][1](pointers, numbers)
        if record[1]:
            raise BackendError(f"emulating kernel {source.kernel.name}: out of memory")
        counts.append(int(record[0]))
        errors += _errors(source, record)
    return EmulationReport(
        tuple(k.name for k in kernels),
        tuple(counts),
        tuple(errors),
        tuple(built[source.text][0] for source in sources),
    )


#: Optimisation level of emulation libraries: their sources run to thousands of
#: lines of unrolled warp loops (a 128×256 bf16 tile: 4700), which gcc compiles
#: in 3.4 s at -O1 and 43 s at -O3; the emulated problems are small.
EMULATION_OPTIMISATION = "-O1"


def emulation_toolchain(chain: Toolchain) -> Toolchain:
    """``chain`` with :data:`EMULATION_OPTIMISATION` in place of its -O flag."""
    flags = tuple(EMULATION_OPTIMISATION if f.startswith("-O") else f for f in chain.flags)
    return dataclasses.replace(chain, flags=flags)


def _build(texts: Sequence[str]) -> dict[str, tuple[Path, Any]]:
    """Every distinct source compiled (in parallel) or found in the cache, and loaded."""
    directory = cache_directory()
    chain = emulation_toolchain(toolchain(directory))
    unique = list(dict.fromkeys(texts))
    workers = max(1, min(len(unique), os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        built = list(pool.map(lambda text: load_or_compile(text, chain, directory), unique))
    return dict(zip(unique, built, strict=True))


def _buffer(param: kir.Param, arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    if param.name not in arrays:
        raise ArgumentError(f"no array given for kernel parameter {param.name!r}")
    array = arrays[param.name]
    if not isinstance(array, np.ndarray):
        array = np.asarray(array)  # shares memory for __array_interface__ objects
    wanted = np.dtype(DTYPES[param.ctype])
    if array.dtype != wanted:
        raise ArgumentError(f"parameter {param.name!r} needs {wanted} elements, got {array.dtype}")
    if not (array.flags.c_contiguous or array.flags.f_contiguous):
        raise ArgumentError(f"array for parameter {param.name!r} is not dense")
    if array.size < param.size:
        raise ArgumentError(
            f"parameter {param.name!r} has {param.size} elements, the array only {array.size}"
        )
    if not param.readonly and not array.flags.writeable:
        raise ArgumentError(f"array for written parameter {param.name!r} is read-only")
    return array


def _scalar(param: kir.Param, scalars: Mapping[str, float]) -> float:
    if param.name not in scalars:
        raise ArgumentError(f"no value given for scalar parameter {param.name!r}")
    return float(scalars[param.name])


def _errors(source: EmulationSource, record: np.ndarray) -> list[AccessError]:
    found = []
    for n in range(min(int(record[0]), MAX_ERRORS)):
        site, index, block, thread, kind = (int(x) for x in record[2 + RECORD * n :][:RECORD])
        where = source.sites[site]
        found.append(
            AccessError(
                source.kernel.name,
                where.array,
                where.space,
                where.access,
                index,
                where.size,
                block,
                thread,
                KINDS[kind],
            )
        )
    return sorted(found, key=lambda e: (e.block, e.thread, e.array, e.index))


# ---- fault injection ---------------------------------------------------------


def count_barriers(kernel: kir.Kernel) -> int:
    """Barriers in the kernel's text (a barrier in a loop counts once)."""

    def count(sections: Sequence[kir.Section]) -> int:
        return sum(
            1 if isinstance(s, kir.Barrier) else count(s.body) if isinstance(s, kir.Uniform) else 0
            for s in sections
        )

    return count(kernel.body)


def drop_barrier(kernel: kir.Kernel, n: int) -> kir.Kernel:
    """The same kernel without its ``n``-th barrier (0-based, in program order);
    IndexError when it has no such barrier."""
    if not 0 <= n < count_barriers(kernel):
        raise IndexError(f"kernel {kernel.name} has {count_barriers(kernel)} barriers, not {n + 1}")

    def drop(sections: tuple[kir.Section, ...], left: int) -> tuple[tuple[kir.Section, ...], int]:
        out: list[kir.Section] = []
        for s in sections:
            if isinstance(s, kir.Barrier):
                left -= 1
                if left == -1:
                    continue
            elif isinstance(s, kir.Uniform):
                body, left = drop(s.body, left)
                s = dataclasses.replace(s, body=body)
            out.append(s)
        return tuple(out), left

    return dataclasses.replace(kernel, body=drop(kernel.body, n)[0])
