"""CPU backend: C11 + OpenMP kernels compiled by the system C compiler.

Modules: :mod:`.schedule` (loop order and parallelisation of each statement),
:mod:`.codegen` (C source), :mod:`.compiler` (compiler detection, flags and the
on-disk cache), :mod:`.backend` (:class:`CpuBackend` and :class:`CpuExecutable`).
"""

from .backend import CpuBackend, CpuExecutable
from .codegen import compute_dtype, emit_c
from .compiler import Toolchain, cache_directory
from .decide import default_schedule
from .schedule import CpuSchedule, LoopSchedule

__all__ = [
    "CpuBackend",
    "CpuExecutable",
    "CpuSchedule",
    "LoopSchedule",
    "Toolchain",
    "cache_directory",
    "compute_dtype",
    "default_schedule",
    "emit_c",
]
