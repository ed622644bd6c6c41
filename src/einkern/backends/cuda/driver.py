"""The CUDA driver API through ``cuda.bindings.driver``, checked call by call.

What ``cuda.core`` does not cover for einkern: device properties for planning,
stream-capture status, the dynamic shared memory opt-in, asynchronous host
copies, and the raw module/launch/event calls of the CUDA tuning target (which
times one kernel on buffers it owns, flushing L2 between runs).

Kernels run in each device's *primary* context (the one the CUDA runtime, and
so PyTorch and CuPy, use), so device pointers from those libraries are valid
here.  ``cuda-bindings`` is imported lazily: importing this module needs
neither it nor a GPU.  Every failing call raises :class:`BackendError` naming
the call and the driver's error.
"""

from __future__ import annotations

import ctypes
import functools
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import BackendError

_LOCK = threading.Lock()
_DOUBLE, _DOUBLE_BITS = struct.Struct("<d"), struct.Struct("<Q")
_CONTEXTS: dict[int, Any] = {}


@functools.cache  # imported once; a failed import is not cached, and raises again
def core() -> Any:
    """The ``cuda.core`` module (NVRTC programs, launches, streams, buffers), or a
    :class:`BackendError` saying how to install it."""
    try:
        import cuda.core as module
    except ImportError as error:  # pragma: no cover - depends on the installation
        raise BackendError(
            "the CUDA backend needs cuda-core, which is not installed",
            hint="pip install 'einkern[cuda]'",
        ) from error
    return module


@functools.cache  # imported once; a failed import is not cached, and raises again
def _cuda():
    try:
        from cuda.bindings import driver
    except ImportError as error:
        raise BackendError(
            "the CUDA backend needs cuda-bindings, which is not installed",
            hint="pip install 'einkern[cuda]'",
        ) from error
    return driver


def check(result: Any, call: str) -> Any:
    """The values of a driver call's result tuple; BackendError when it failed."""
    cuda = _cuda()
    status, *values = result if isinstance(result, tuple) else (result,)
    if status != cuda.CUresult.CUDA_SUCCESS:
        raise BackendError(f"{call} failed: {_describe_error(status)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _describe_error(status: Any) -> str:
    cuda = _cuda()
    try:
        _, name = cuda.cuGetErrorName(status)
        _, text = cuda.cuGetErrorString(status)
        return f"{name.decode()} ({text.decode()})"
    except Exception:  # noqa: BLE001 - the error text is best effort
        return str(status)


@functools.cache
def initialize() -> None:
    """``cuInit`` once; BackendError when there is no driver or no GPU."""
    try:
        result = _cuda().cuInit(0)
    except BackendError:
        raise
    except Exception as error:  # the bindings raise when libcuda itself is missing
        raise BackendError(
            f"cuInit failed: the NVIDIA driver cannot be loaded ({error})",
            hint="the CUDA backend needs an NVIDIA GPU and driver; use backend='cpu' "
            "(`--backend cpu` on the command line)",
        ) from error
    check(result, "cuInit")


def device_count() -> int:
    initialize()
    return check(_cuda().cuDeviceGetCount(), "cuDeviceGetCount")


def device(ordinal: int) -> Any:
    initialize()
    count = device_count()
    if not 0 <= ordinal < count:
        raise BackendError(f"no CUDA device {ordinal} ({count} present)")
    return check(_cuda().cuDeviceGet(ordinal), "cuDeviceGet")


def activate(ordinal: int = 0) -> Any:
    """Make device ``ordinal``'s primary context current (retaining it once per
    process) and return it."""
    with _LOCK:
        context = _CONTEXTS.get(ordinal)
        if context is None:
            context = check(
                _cuda().cuDevicePrimaryCtxRetain(device(ordinal)), "cuDevicePrimaryCtxRetain"
            )
            _CONTEXTS[ordinal] = context
    check(_cuda().cuCtxSetCurrent(context), "cuCtxSetCurrent")
    return context


@dataclass(frozen=True)
class DeviceProperties:
    """What einkern needs to know about a GPU."""

    ordinal: int
    name: str
    compute_capability: tuple[int, int]
    multiprocessors: int
    max_threads_per_block: int
    max_threads_per_multiprocessor: int
    max_grid: tuple[int, int, int]
    warp_size: int
    shared_memory_per_block: int  # bytes, without opt-in
    shared_memory_per_block_optin: int
    shared_memory_per_multiprocessor: int
    registers_per_block: int
    registers_per_multiprocessor: int
    l2_cache_bytes: int
    total_memory_bytes: int

    @property
    def arch(self) -> str:
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"


@functools.cache
def device_properties(ordinal: int = 0) -> DeviceProperties:
    """Properties of device ``ordinal``."""
    cuda = _cuda()
    dev = device(ordinal)
    attribute = cuda.CUdevice_attribute

    def get(name: str) -> int:
        value = check(
            cuda.cuDeviceGetAttribute(getattr(attribute, f"CU_DEVICE_ATTRIBUTE_{name}"), dev),
            f"cuDeviceGetAttribute({name})",
        )
        return int(value)

    raw_name = check(cuda.cuDeviceGetName(256, dev), "cuDeviceGetName")
    return DeviceProperties(
        ordinal=ordinal,
        name=bytes(raw_name).split(b"\0", 1)[0].decode(errors="replace"),
        compute_capability=(get("COMPUTE_CAPABILITY_MAJOR"), get("COMPUTE_CAPABILITY_MINOR")),
        multiprocessors=get("MULTIPROCESSOR_COUNT"),
        max_threads_per_block=get("MAX_THREADS_PER_BLOCK"),
        max_threads_per_multiprocessor=get("MAX_THREADS_PER_MULTIPROCESSOR"),
        max_grid=(get("MAX_GRID_DIM_X"), get("MAX_GRID_DIM_Y"), get("MAX_GRID_DIM_Z")),
        warp_size=get("WARP_SIZE"),
        shared_memory_per_block=get("MAX_SHARED_MEMORY_PER_BLOCK"),
        shared_memory_per_block_optin=get("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
        shared_memory_per_multiprocessor=get("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"),
        registers_per_block=get("MAX_REGISTERS_PER_BLOCK"),
        registers_per_multiprocessor=get("MAX_REGISTERS_PER_MULTIPROCESSOR"),
        l2_cache_bytes=get("L2_CACHE_SIZE"),
        total_memory_bytes=int(check(cuda.cuDeviceTotalMem(dev), "cuDeviceTotalMem")),
    )


# ---- modules and launches ----------------------------------------------------


@dataclass(frozen=True)
class LoadedModule:
    """A CUBIN loaded into a context, with its kernels by name."""

    ordinal: int
    handle: Any
    functions: dict[str, Any]


def load_module(cubin: bytes, names: Sequence[str], ordinal: int = 0) -> LoadedModule:
    """``cuModuleLoadData`` and ``cuModuleGetFunction`` for each kernel name."""
    cuda = _cuda()
    activate(ordinal)
    handle = check(cuda.cuModuleLoadData(cubin), "cuModuleLoadData")
    functions = {
        name: check(cuda.cuModuleGetFunction(handle, name.encode()), f"cuModuleGetFunction({name})")
        for name in names
    }
    return LoadedModule(ordinal, handle, functions)


def _parameters(pointers: Sequence[int], scalars: Sequence[float], maps: Sequence[bytes]):
    """(buffer, table) of a launch's parameters: pointers and ``double`` scalars of
    8 bytes, then 128-byte TMA tensor maps aligned to 64 bytes, in one buffer the
    table points into (both must live until the launch call returns)."""
    count = len(pointers) + len(scalars)
    words = (*pointers, *(_DOUBLE_BITS.unpack(_DOUBLE.pack(s))[0] for s in scalars))
    first = -(-8 * count // 64) * 64  # the first map's offset from an aligned base
    buffer = (ctypes.c_uint8 * (first + 128 * len(maps) + 64 + 8))()
    base = -(-ctypes.addressof(buffer) // 64) * 64
    ctypes.memmove(base, struct.pack(f"<{count}Q", *words), 8 * count)
    for i, tmap in enumerate(maps):
        if len(tmap) != 128:
            raise ValueError(f"a tensor map is 128 bytes, not {len(tmap)}")
        ctypes.memmove(base + first + 128 * i, tmap, 128)
    offsets = [base + 8 * i for i in range(count)]
    offsets += [base + first + 128 * i for i in range(len(maps))]
    table = (ctypes.c_void_p * max(1, len(offsets)))(*offsets)
    return buffer, table


class PreparedLaunch:
    """One kernel launched by ``cuLaunchKernel`` again and again: the function
    (of a library's ``CUkernel``, for the current context) and its dynamic shared
    memory set once, the parameter table kept while the arguments repeat."""

    def __init__(
        self,
        function: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_bytes: int = 0,
        name: str = "kernel",
    ):
        cuda = _cuda()
        if isinstance(function, cuda.CUkernel):  # a library's kernel (cuda.core's handles)
            function = check(cuda.cuKernelGetFunction(function), f"cuKernelGetFunction({name})")
        if shared_bytes > 48 * 1024:
            attribute = cuda.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            check(
                cuda.cuFuncSetAttribute(function, attribute, shared_bytes),
                f"cuFuncSetAttribute({name})",
            )
        self.function, self.grid, self.block = function, grid, block
        self.shared_bytes, self.name = shared_bytes, name
        self._cached: tuple | None = None  # (arguments, buffer, table), replaced whole

    def __call__(
        self,
        pointers: Sequence[int],
        scalars: Sequence[float] = (),
        maps: Sequence[bytes] = (),
        stream: Any = 0,
    ) -> None:
        key = (tuple(pointers), tuple(scalars), tuple(maps))
        cached = self._cached
        if cached is None or cached[0] != key:
            cached = (key, *_parameters(pointers, scalars, maps))
            self._cached = cached
        table = cached[2]
        check(
            _cuda().cuLaunchKernel(
                self.function,
                *self.grid,
                *self.block,
                self.shared_bytes,
                stream,
                ctypes.addressof(table),
                0,
            ),
            f"cuLaunchKernel({self.name})",
        )


def launch(
    function: Any,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    pointers: Sequence[int],
    scalars: Sequence[float],
    stream: Any = 0,
    name: str = "kernel",
    shared_bytes: int = 0,
    maps: Sequence[bytes] = (),
) -> None:
    """``cuLaunchKernel`` with device pointers, then ``double`` scalars, then the
    128-byte TMA tensor maps ``maps`` (:mod:`.tensor_maps`) as parameters, and
    ``shared_bytes`` of dynamic shared memory (opted in above 48 KiB)."""
    PreparedLaunch(function, grid, block, shared_bytes, name)(pointers, scalars, maps, stream)


def synchronize(what: str = "the kernels") -> None:
    """``cuCtxSynchronize``; reports errors of kernels launched before."""
    try:
        check(_cuda().cuCtxSynchronize(), "cuCtxSynchronize")
    except BackendError as error:
        raise BackendError(f"{error.message} while running {what}") from error


def is_capturing(stream: Any) -> bool:
    """True while ``stream`` (a handle) is being captured into a CUDA graph."""
    cuda = _cuda()
    status = check(cuda.cuStreamIsCapturing(stream), "cuStreamIsCapturing")
    return status != cuda.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE


def keep_pool_memory(pool: Any) -> None:
    """Let the memory pool ``pool`` keep its freed memory (no release threshold)."""
    cuda = _cuda()
    attribute = cuda.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
    check(
        cuda.cuMemPoolSetAttribute(pool, attribute, cuda.cuuint64_t(2**64 - 1)),
        "cuMemPoolSetAttribute(RELEASE_THRESHOLD)",
    )


def allow_dynamic_shared(kernel: Any, nbytes: int, ordinal: int, name: str = "kernel") -> None:
    """Opt a kernel (a ``CUkernel`` of a library, or a ``CUfunction``) in to
    ``nbytes`` of dynamic shared memory on device ``ordinal`` (needed above 48 KiB)."""
    cuda = _cuda()
    attribute = cuda.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    if isinstance(kernel, cuda.CUkernel):
        check(
            cuda.cuKernelSetAttribute(attribute, nbytes, kernel, device(ordinal)),
            f"cuKernelSetAttribute({name})",
        )
    else:
        check(cuda.cuFuncSetAttribute(kernel, attribute, nbytes), f"cuFuncSetAttribute({name})")


# ---- memory --------------------------------------------------------------------


def alloc(nbytes: int) -> int:
    """``cuMemAlloc``: a device pointer (free it with :func:`free`)."""
    return int(check(_cuda().cuMemAlloc(max(1, nbytes)), "cuMemAlloc"))


def free(pointer: int) -> None:
    check(_cuda().cuMemFree(pointer), "cuMemFree")


def copy_to_device(destination: int, source: int, nbytes: int) -> None:
    check(_cuda().cuMemcpyHtoD(destination, source, nbytes), "cuMemcpyHtoD")


def copy_to_host(destination: int, source: int, nbytes: int) -> None:
    check(_cuda().cuMemcpyDtoH(destination, source, nbytes), "cuMemcpyDtoH")


def copy_to_device_async(destination: int, source: int, nbytes: int, stream: Any) -> None:
    """``cuMemcpyHtoDAsync`` ordered on ``stream`` (from pageable memory it returns
    once the source has been read)."""
    check(_cuda().cuMemcpyHtoDAsync(destination, source, nbytes, stream), "cuMemcpyHtoDAsync")


def copy_async(destination: int, source: int, nbytes: int, stream: Any) -> None:
    """``cuMemcpyAsync`` between any two addresses (unified addressing: device to
    device here) ordered on ``stream``."""
    check(_cuda().cuMemcpyAsync(destination, source, nbytes, stream), "cuMemcpyAsync")


def copy_to_host_async(destination: int, source: int, nbytes: int, stream: Any) -> None:
    """``cuMemcpyDtoHAsync`` ordered on ``stream``; synchronise the stream before
    reading ``destination``."""
    check(_cuda().cuMemcpyDtoHAsync(destination, source, nbytes, stream), "cuMemcpyDtoHAsync")


# ---- timing ----------------------------------------------------------------------


class EventTimer:
    """Elapsed GPU time between two recorded events, in milliseconds."""

    def __init__(self) -> None:
        cuda = _cuda()
        flags = cuda.CUevent_flags.CU_EVENT_DEFAULT
        self._start = check(cuda.cuEventCreate(flags), "cuEventCreate")
        self._end = check(cuda.cuEventCreate(flags), "cuEventCreate")

    def start(self, stream: Any = 0) -> None:
        check(_cuda().cuEventRecord(self._start, stream), "cuEventRecord")

    def stop(self, stream: Any = 0) -> float:
        cuda = _cuda()
        check(cuda.cuEventRecord(self._end, stream), "cuEventRecord")
        check(cuda.cuEventSynchronize(self._end), "cuEventSynchronize")
        return float(check(cuda.cuEventElapsedTime(self._start, self._end), "cuEventElapsedTime"))

    def close(self) -> None:
        cuda = _cuda()
        for event in (self._start, self._end):
            check(cuda.cuEventDestroy(event), "cuEventDestroy")
