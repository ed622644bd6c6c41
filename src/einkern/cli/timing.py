"""How ``einkern run`` times a kernel.

On the CPU backend a call is timed with the host clock on NumPy arrays (fresh
copies of the inputs before every run).  On the CUDA backend the arrays are
made device-resident first: every tensor is allocated on the GPU and the inputs
are copied there once; the kernels are timed with CUDA events around each call
after a warm-up call, and the copies to and from the GPU are timed (host clock,
synchronous copies) and reported apart.  The device part is
:class:`CudaMemory`, a few driver calls; the rest works on any
:class:`DeviceMemory` and is tested with one made of NumPy arrays.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from ..arrays import copy_host_array
from ..errors import AllocationError
from .common import format_bytes


@dataclass(frozen=True)
class Copies:
    """Copies between host and GPU made by one timing: how many, bytes, seconds."""

    count: int
    nbytes: int
    seconds: float


@dataclass(frozen=True)
class Timing:
    """The seconds of each timed call, the outputs of the first call (host arrays,
    for ``--check``), what was timed, and the copies kept out of the times."""

    seconds: tuple[float, ...]
    outputs: Mapping[str, np.ndarray]
    method: str
    to_device: Copies | None = None
    to_host: Copies | None = None


def time_on_host(
    kernel: Any,
    originals: Mapping[str, np.ndarray],
    scalars: Mapping[str, Any],
    repeat: int,
    clock: Callable[[], float] = time.perf_counter,
    step: Callable[[int], None] = lambda run: None,
) -> Timing:
    """``repeat`` calls on fresh copies of ``originals``, after a warm-up call
    whose outputs are returned; each call timed with ``clock``.  ``step(run)`` is
    called before each call (0: the warm-up)."""
    times = []
    outputs: dict[str, np.ndarray] = {}
    for run in range(repeat + 1):  # the first run is a warm-up
        step(run)
        work = {name: copy_host_array(array) for name, array in originals.items()}
        start = clock()
        result = kernel(**work, **scalars)
        elapsed = clock() - start
        if run:
            times.append(elapsed)
        else:
            results = result if isinstance(result, tuple) else (result,)
            outputs = dict(zip(kernel.outputs, results, strict=True))
        del work, result  # before the next run's copies: a smaller peak of memory
    return Timing(tuple(times), outputs, "host clock, arrays in host memory")


class DeviceMemory(Protocol):
    """Device arrays and a GPU clock: what :func:`time_device_resident` needs."""

    def upload(self, array: np.ndarray) -> Any:
        """A device copy of a contiguous host array (same shape, dtype, strides);
        returns when the copy is complete."""
        ...

    def empty_like(self, array: np.ndarray) -> Any:
        """An uninitialised device array shaped and strided like ``array``."""
        ...

    def download(self, source: Any, destination: np.ndarray) -> None:
        """Copy a device array into a host array of the same layout; returns when done."""
        ...

    def elapsed(self, fn: Callable[[], Any]) -> float:
        """Seconds of GPU time of the work ``fn`` launches (events around it)."""
        ...

    def release(self) -> None:
        """Free every array made here."""
        ...


def host_tensors(problem: Any, originals: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A host array for every tensor of the program: the inputs given, and zeros in
    the declared dtype and layout for tensors only written."""
    arrays = dict(originals)
    for tensor in problem.program.tensors:
        if tensor.name not in arrays:
            order: Literal["C", "F"] = "F" if tensor.layout == "column" else "C"
            arrays[tensor.name] = np.zeros(
                problem.shape(tensor.name), dtype=tensor.dtype, order=order
            )
    return arrays


def time_device_resident(
    kernel: Any,
    originals: Mapping[str, np.ndarray],
    scalars: Mapping[str, Any],
    repeat: int,
    memory: DeviceMemory,
    clock: Callable[[], float] = time.perf_counter,
    step: Callable[[int], None] = lambda run: None,
) -> Timing:
    """Copy the inputs to the device once, make device arrays for the tensors only
    written, run one warm-up call and copy its outputs back (for checking), then
    time ``repeat`` calls with ``memory.elapsed``.  ``+=`` outputs keep
    accumulating during the timed calls; the checked outputs are the warm-up's.
    ``step(run)`` is called before each call (0: the warm-up)."""
    host = host_tensors(kernel.problem, originals)
    try:
        start = clock()
        device = {name: memory.upload(host[name]) for name in originals}
        uploaded = Copies(len(device), sum(host[n].nbytes for n in device), clock() - start)
        for name, array in host.items():
            if name not in device:
                device[name] = memory.empty_like(array)
        call = kernel.bind(**device, **scalars)  # checked once, outside the timed calls
        step(0)
        memory.elapsed(lambda: kernel.executable.run_checked(call))  # warm-up
        outputs = {name: np.empty_like(host[name], order="K") for name in kernel.outputs}
        start = clock()
        for name, array in outputs.items():
            memory.download(device[name], array)
        downloaded = Copies(len(outputs), sum(a.nbytes for a in outputs.values()), clock() - start)
        times = []
        for run in range(1, repeat + 1):
            step(run)
            times.append(memory.elapsed(lambda: kernel.executable.run_checked(call)))
    finally:
        memory.release()
    method = "CUDA events around each call, arrays resident on the GPU"
    return Timing(tuple(times), outputs, method, uploaded, downloaded)


class _DeviceArray:
    """Device memory described by ``__cuda_array_interface__`` (version 3), which
    the CUDA backend reads like any GPU library's array."""

    def __init__(self, pointer: int, like: np.ndarray):
        self.pointer = pointer
        self.nbytes = like.nbytes
        self.__cuda_array_interface__ = {
            "version": 3,
            "shape": like.shape,
            "typestr": like.dtype.str,
            "strides": like.strides,
            "data": (pointer, False),
            "stream": None,  # nothing pending: the copies here are synchronous
        }


class CudaMemory:
    """:class:`DeviceMemory` on GPU 0 through the driver API: ``cuMemAlloc``,
    synchronous ``cuMemcpy`` and events on the legacy default stream (the
    stream a call on arrays without a stream of their own launches on)."""

    def __init__(self, driver: Any = None) -> None:
        if driver is None:
            from ..backends.cuda import driver
        self.driver = driver
        driver.activate(0)
        self.timer = driver.EventTimer()
        self.pointers: list[int] = []

    def _alloc(self, like: np.ndarray) -> _DeviceArray:
        if not (like.flags.c_contiguous or like.flags.f_contiguous):
            raise ValueError("device copies need contiguous host arrays")
        try:
            pointer = self.driver.alloc(like.nbytes)
        except Exception as error:  # BackendError: out of memory, most likely
            raise AllocationError(
                f"cannot allocate {format_bytes(like.nbytes)} on the GPU "
                f"for a {like.dtype} array of shape {like.shape}: {error}",
                hint="choose smaller extents (-e NAME=VALUE)",
            ) from None
        self.pointers.append(pointer)
        return _DeviceArray(pointer, like)

    def upload(self, array: np.ndarray) -> _DeviceArray:
        device = self._alloc(array)
        self.driver.copy_to_device(device.pointer, array.ctypes.data, array.nbytes)
        return device

    def empty_like(self, array: np.ndarray) -> _DeviceArray:
        return self._alloc(array)

    def download(self, source: _DeviceArray, destination: np.ndarray) -> None:
        self.driver.copy_to_host(destination.ctypes.data, source.pointer, destination.nbytes)

    def elapsed(self, fn: Callable[[], Any]) -> float:
        self.timer.start(0)
        fn()
        return self.timer.stop(0) / 1e3  # waits for the end event

    def release(self) -> None:
        self.driver.synchronize("the timed kernels")
        for pointer in self.pointers:
            self.driver.free(pointer)
        self.pointers.clear()
        self.timer.close()


def describe_copies(timing: Timing) -> list[str]:
    """Lines naming the copies a device-resident timing kept out of its times."""
    lines = []
    for direction, copies in (("to the GPU", timing.to_device), ("to the host", timing.to_host)):
        if copies is not None and copies.count:
            lines.append(
                f"  copies {direction}: {_plural(copies.count, 'array')}, "
                f"{format_bytes(copies.nbytes)}, "
                f"{copies.seconds * 1e3:.3f} ms (host clock; not in the kernel time)"
            )
    return lines


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
