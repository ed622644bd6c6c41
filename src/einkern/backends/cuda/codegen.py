"""The CUDA source of a problem and its kernels' launch specifications: what
:func:`.generate.generate` produces and :class:`.executable.CudaExecutable` runs."""

from __future__ import annotations

from dataclasses import dataclass

from ...gpu.kir import TensorMap
from ...gpu.mapping import Mapping


@dataclass(frozen=True)
class KernelSpec:
    """One generated kernel and how to launch it."""

    name: str
    statement: int  # position in the program
    tensors: tuple[str, ...]  # pointer parameters, in order (the output first)
    scalars: tuple[str, ...]  # double parameters after the pointers
    output: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    mapping: Mapping  # the mapping the kernel was lowered under
    shared_bytes: int = 0  # dynamic shared memory of the launch
    #: TMA tensor maps after the scalars, each with the buffer it describes
    maps: tuple[tuple[str, TensorMap], ...] = ()


@dataclass(frozen=True)
class CudaSource:
    """The CUDA C of a whole problem and its kernels, in statement order."""

    text: str
    kernels: tuple[KernelSpec, ...]
    temporaries: tuple[tuple[str, int], ...] = ()  # device buffers (name, bytes) of the launches
