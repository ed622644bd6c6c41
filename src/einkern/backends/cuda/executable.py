"""A compiled problem on the GPU: stage host arrays, launch the kernels in order.

Device arrays (torch, CuPy, JAX, anything with ``__cuda_array_interface__`` or
DLPack) are used in place through their pointers.  Host arrays are copied to
the device, and the ones the program writes are copied back into the same
host memory, so in-place semantics hold for both.  Kernels run on the legacy
default stream of the device's primary context, then the context is
synchronised and checked.
"""

from __future__ import annotations

import functools
import os
import statistics
from collections.abc import Mapping
from typing import Any

from ...arrays import ArrayInfo, strides_match
from ...errors import ArgumentError, DtypeError, LayoutError
from ...ir.nodes import Problem
from . import driver
from .arrays import describe
from .codegen import CudaSource
from .nvrtc import CompiledModule, KernelResources, arch_for, compile_cubin

STREAM = 0  # the legacy default stream: ordered with torch's and CuPy's default streams
#: EINKERN_SYNC=1 waits for the kernels after every call (errors at the call that caused them).
SYNCHRONIZE = os.environ.get("EINKERN_SYNC", "") not in ("", "0")


class CudaExecutable:
    """The kernels of one problem; the CUBIN is loaded into each device on first use."""

    def __init__(self, problem: Problem, source: CudaSource, compiled: CompiledModule):
        self.problem = problem
        self.source = source
        self._compiled = {compiled.arch: compiled}
        self._modules: dict[int, driver.LoadedModule] = {}
        self._buffers: dict[int, dict[str, int]] = {}

    @property
    def resources(self) -> tuple[KernelResources, ...]:
        """ptxas' report for each kernel, for the architecture first built."""
        return next(iter(self._compiled.values())).resources

    def module(self, ordinal: int) -> driver.LoadedModule:
        """The kernels loaded on device ``ordinal`` (compiled for its architecture)."""
        if ordinal not in self._modules:
            arch = arch_for(*driver.device_properties(ordinal).compute_capability)
            if arch not in self._compiled:
                self._compiled[arch] = compile_cubin(self.source.text, arch)
            names = [k.name for k in self.source.kernels]
            self._modules[ordinal] = driver.load_module(self._compiled[arch].cubin, names, ordinal)
        return self._modules[ordinal]

    #: ``run`` takes the ArrayInfo of each array when the caller (einkern.Kernel)
    #: has already described and checked them, so that a call reads each array's
    #: interface once.
    accepts_infos = True

    def run(self, arrays: Mapping[str, Any], scalars: Mapping[str, float],
            infos: Mapping[str, ArrayInfo] | None = None) -> None:
        """Run every statement in order, updating the arrays in place.  ``infos``:
        the arrays already described and checked against the program."""
        self._execute(arrays, scalars, repeat=0, infos=infos)

    def profile(
        self, arrays: Mapping[str, Any], scalars: Mapping[str, float], repeat: int = 10
    ) -> list[float]:
        """Median milliseconds of each kernel over ``repeat`` launches (after one
        warm-up).  Kernels of ``+=`` statements accumulate into their outputs."""
        return self._execute(arrays, scalars, repeat=max(1, repeat))

    # -- implementation ------------------------------------------------------

    def _temporaries(self, ordinal: int) -> dict[str, int]:
        """Device buffers of the padded copies (``pad`` boundary policy), allocated on
        first use and kept with the executable."""
        if not self.source.temporaries:
            return {}
        if ordinal not in self._buffers:
            self._buffers[ordinal] = {name: driver.alloc(nbytes)
                                      for name, nbytes in self.source.temporaries}
        return self._buffers[ordinal]

    def __del__(self) -> None:
        for buffers in getattr(self, "_buffers", {}).values():
            for pointer in buffers.values():
                try:
                    driver.free(pointer)
                except Exception:  # noqa: BLE001 - interpreter shutdown, context gone
                    pass

    def _execute(self, arrays, scalars, repeat: int,
                 infos: Mapping[str, ArrayInfo] | None = None) -> list[float]:
        if infos is None:
            infos = self._describe_all(arrays)
        else:
            infos = {name: infos[name] for name in self._used if name in infos}
            if len(infos) != len(self._used):
                infos = self._describe_all(arrays)
            for name, info in infos.items():
                _check_device(name, info)
        ordinal = _device_ordinal(infos)
        driver.activate(ordinal)
        module = self.module(ordinal)
        values = self._scalar_values(scalars)
        streams = {info.stream for info in infos.values()}
        for stream in streams - {None}:
            driver.wait_for_stream(stream)  # work pending on the producers' streams
        staged: dict[str, int] = {}
        times: list[float] = []
        try:
            pointers = {}
            for name, info in infos.items():
                if info.device == "cpu":
                    nbytes = self.problem.nbytes(name)
                    staged[name] = driver.alloc(nbytes)
                    driver.copy_to_device(staged[name], info.pointer, nbytes)
                    pointers[name] = staged[name]
                else:
                    pointers[name] = info.pointer
            pointers.update(self._temporaries(ordinal))
            for kernel in self.source.kernels:
                function = module.functions[kernel.name]
                args = (
                    function,
                    kernel.grid,
                    kernel.block,
                    [pointers[t] for t in kernel.tensors],
                    [values[s] for s in kernel.scalars],
                    STREAM,
                    kernel.name,
                    kernel.shared_bytes,
                )
                if repeat:
                    times.append(_time(args, repeat))
                else:
                    driver.launch(*args)
            if staged or repeat or SYNCHRONIZE:
                # Host arrays are copied back below; device arrays follow stream
                # semantics (like torch and CuPy): errors surface at the next sync.
                driver.synchronize(f"program {self.problem.program.name}")
            for name in self.problem.program.outputs:
                if name in staged:
                    driver.copy_to_host(infos[name].pointer, staged[name],
                                        self.problem.nbytes(name))
        finally:
            for pointer in staged.values():
                driver.free(pointer)
        return times

    @functools.cached_property
    def _used(self) -> tuple[str, ...]:
        """The tensors the kernels touch, in declaration order."""
        program = self.problem.program
        used = {t for s in program.statements for t in s.tensors()}
        return tuple(t.name for t in program.tensors if t.name in used)

    def _describe_all(self, arrays: Mapping[str, Any]) -> dict[str, ArrayInfo]:
        written = set(self.problem.program.outputs)
        infos = {}
        for name in self._used:
            if name not in arrays:
                raise ArgumentError(f"no array given for tensor {name!r}")
            info = describe(arrays[name])
            if info is None:
                raise ArgumentError(
                    f"{name!r}: the CUDA backend cannot use a {type(arrays[name]).__name__}",
                    hint="pass a NumPy array or a GPU array (torch, CuPy, JAX)",
                )
            _check_array(self.problem, name, info, name in written)
            infos[name] = info
        return infos

    def _scalar_values(self, scalars: Mapping[str, float]) -> dict[str, float]:
        values = {}
        for scalar in self.problem.program.scalars:
            value = scalars.get(scalar.name, scalar.default)
            if value is None:
                raise ArgumentError(f"missing value for scalar {scalar.name!r}")
            values[scalar.name] = float(value)
        return values


def _check_array(problem: Problem, name: str, info: ArrayInfo, written: bool) -> None:
    tensor = problem.program.tensor(name)
    if info.shape != problem.shape(name):
        raise ArgumentError(f"{name!r} has shape {info.shape}, expected {problem.shape(name)}")
    if info.dtype != tensor.dtype:
        raise DtypeError(f"{name!r} has dtype {info.dtype}, expected {tensor.dtype}")
    if not strides_match(info, tensor.layout):
        raise LayoutError(
            f"{name!r} is not a dense {tensor.layout}-major array (strides {info.strides})"
        )
    if written and info.readonly:
        raise ArgumentError(f"{name!r} is written by the program but is read-only")
    _check_device(name, info)


def _check_device(name: str, info: ArrayInfo) -> None:
    if info.device != "cpu" and not info.device.startswith("cuda:"):
        raise ArgumentError(f"{name!r} is on device {info.device}, not a CUDA GPU or the host")


def _device_ordinal(infos: Mapping[str, ArrayInfo]) -> int:
    devices = {info.device for info in infos.values() if info.device.startswith("cuda:")}
    if len(devices) > 1:
        raise ArgumentError(
            f"arrays on several GPUs ({', '.join(sorted(devices))})",
            hint="move them to one device",
        )
    return int(devices.pop().split(":")[1]) if devices else 0


def _time(args: tuple, repeat: int) -> float:
    timer = driver.EventTimer()
    try:
        driver.launch(*args)  # warm-up
        samples = []
        for _ in range(repeat):
            timer.start(STREAM)
            driver.launch(*args)
            samples.append(timer.stop(STREAM))
        return statistics.median(samples)
    finally:
        timer.close()
