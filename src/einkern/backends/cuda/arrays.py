"""Arrays the CUDA backend accepts, and the stream a call launches on.

NumPy arrays are host memory (staged by the executable).  CUDA torch tensors
are read from their attributes (the cheapest way); every other array — CuPy,
Numba, JAX, anything with ``__cuda_array_interface__`` or DLPack — through
``cuda.core``'s :class:`~cuda.core.utils.StridedMemoryView`, which also orders
the consumer's stream after the producer's (an event wait on the GPU, never a
host wait).  Outputs a caller does not pass are new arrays of the same library.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from ...arrays import (
    ArrayInfo,
    contiguous_strides,
    describe_numpy,
    describe_torch_host,
    dtype_name,
    is_torch,
    new_host_array,
)
from ...errors import ArgumentError
from ...ir.nodes import Problem
from ...semantics import NUMPY_DTYPE
from ..binding import article, type_name

#: The legacy default stream's handle; DLPack and ``__cuda_array_interface__``
#: spell it 1 (0 is ambiguous there).
LEGACY_STREAM = 0
_PROTOCOL_LEGACY = 1


def _library(obj: Any) -> str:
    return type(obj).__module__.split(".", 1)[0] or "unknown"


_TORCH_DTYPES: dict[Any, str] = {}


def describe_torch_cuda(tensor: Any) -> ArrayInfo | None:
    """ArrayInfo of a CUDA torch tensor from its attributes, much cheaper than any
    interchange protocol; None for other tensors (CPU, requiring grad), which take
    the general path.  ``stream`` is torch's current stream on the tensor's GPU,
    where torch orders the work that produced it."""
    if not tensor.is_cuda or tensor.requires_grad:
        return None
    if not _TORCH_DTYPES:
        import torch

        _TORCH_DTYPES.update(
            {
                torch.float32: "float32",
                torch.float64: "float64",
                torch.float16: "float16",
                torch.bfloat16: "bfloat16",
            }
        )
    index = tensor.get_device()
    dtype = _TORCH_DTYPES.get(tensor.dtype)
    return ArrayInfo(
        shape=tuple(tensor.shape),
        dtype=dtype if dtype is not None else str(tensor.dtype).removeprefix("torch."),
        strides=tuple(tensor.stride()),
        device=f"cuda:{index}",
        pointer=tensor.data_ptr(),
        library="torch",
        readonly=False,
        stream=torch_current_stream(index),
    )


@functools.cache
def _torch_stream_reader() -> Any:
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda index: torch.cuda.current_stream(index).cuda_stream


def torch_current_stream(index: int) -> int:
    """Handle of torch's current stream on GPU ``index``."""
    return int(_torch_stream_reader()(index))


def describe_view(obj: Any, stream: int | None) -> ArrayInfo:
    """ArrayInfo through ``cuda.core``'s StridedMemoryView (DLPack first, then the CUDA
    array interface).  With ``stream`` (the consumer's), the producer's pending work
    is ordered before it; the view is not kept (``obj`` owns the memory)."""
    from cuda.core.utils import StridedMemoryView

    consumer = -1 if stream is None else (_PROTOCOL_LEGACY if stream == LEGACY_STREAM else stream)
    obj = _as_version_3(obj)
    try:
        view = StridedMemoryView.from_any_interface(obj, stream_ptr=consumer)
    except Exception as error:  # noqa: BLE001 - producers raise what they like
        if consumer == _PROTOCOL_LEGACY:
            raise _unreadable(obj, error) from None
        try:  # producers that know no "-1" (JAX): order on the legacy default stream
            view = StridedMemoryView.from_any_interface(obj, stream_ptr=_PROTOCOL_LEGACY)
        except Exception:  # noqa: BLE001
            raise _unreadable(obj, error) from None
    shape = tuple(int(n) for n in view.shape)
    strides = view.strides
    try:
        dtype = dtype_name(view.dtype)
    except NotImplementedError:
        dtype = "an unsupported element type"
    return ArrayInfo(
        shape=shape,
        dtype=dtype,
        strides=tuple(int(s) for s in strides)
        if strides is not None
        else contiguous_strides(shape, "row"),
        device=f"cuda:{view.device_id}"
        if view.device_id >= 0 and view.is_device_accessible
        else "cpu",
        pointer=int(view.ptr),
        library=_library(getattr(obj, "obj", obj) if isinstance(obj, _Version3) else obj),
        readonly=bool(view.readonly) or _library(obj) in ("jax", "jaxlib"),  # JAX: immutable
    )


class _Version3:
    """A ``__cuda_array_interface__`` of version 2 (torch's, older Numba's) restated
    as version 3 without a stream, which means the same: nothing to wait for.
    ``cuda.core`` reads version 3 only.  (The caller keeps the array alive.)"""

    def __init__(self, obj: Any, interface: dict):
        self.obj = obj
        self.__cuda_array_interface__ = {**interface, "version": 3}


def _as_version_3(obj: Any) -> Any:
    if hasattr(obj, "__dlpack__"):
        return obj  # DLPack is read first
    interface = getattr(obj, "__cuda_array_interface__", None)
    if isinstance(interface, dict) and interface.get("version", 3) < 3:
        return _Version3(obj, interface)
    return obj


def _unreadable(obj: Any, error: Exception) -> ArgumentError:
    return ArgumentError(
        f"cannot read {article(type_name(obj))}: {error}",
        hint="pass a plain dense array (for torch: tensor.detach())",
    )


def describe(obj: Any, stream: int | None = None) -> ArrayInfo | None:
    """Shape, dtype, strides (elements), device and pointer of an array the CUDA
    backend accepts, or None for any other object.  ``stream``: the stream the call
    launches on (see :func:`describe_view`)."""
    if isinstance(obj, np.ndarray):
        return describe_numpy(obj)
    if is_torch(obj):
        info = describe_torch_cuda(obj)
        if info is not None:
            return info
        if str(obj.dtype) == "torch.bfloat16":
            return describe_torch_host(obj)  # on the host: NumPy and DLPack views fail
    if hasattr(obj, "__dlpack__") or hasattr(obj, "__cuda_array_interface__"):
        return describe_view(obj, stream)
    return None


def stream_handle(stream: Any) -> int:
    """The handle of a stream given as ``stream=``: an object with ``__cuda_stream__``
    (cuda.core, recent torch and CuPy), a torch stream (``cuda_stream``), a CuPy
    stream (``ptr``) or an int."""
    if isinstance(stream, int) and not isinstance(stream, bool):
        if stream < 0:
            raise ArgumentError(f"stream handle {stream} is negative")
        return stream
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        try:
            _, handle = protocol()
            return int(handle)
        except Exception as error:  # noqa: BLE001 - a broken producer
            raise ArgumentError(f"stream {stream!r}: __cuda_stream__ failed: {error}") from None
    for attribute in ("cuda_stream", "ptr"):
        handle = getattr(stream, attribute, None)
        if isinstance(handle, int):
            return handle
    raise ArgumentError(
        f"stream= must be a CUDA stream, got {article(type_name(stream))}",
        hint="pass an object with __cuda_stream__ (cuda.core), a torch or CuPy stream, "
        "or a stream handle (int)",
    )


def resolve_stream(stream: Any, arrays: Sequence[Any]) -> int:
    """The stream a call launches on: ``stream`` when given; else the current stream
    of the first GPU array's library (torch's or CuPy's); else the legacy default
    stream (NumPy arrays, or libraries with no notion of a current stream)."""
    if stream is not None:
        return stream_handle(stream)
    for array in arrays:
        library = _library(array)
        if library == "torch" and getattr(array, "is_cuda", False):
            return torch_current_stream(array.get_device())
        if library == "cupy":
            import cupy

            with cupy.cuda.Device(array.device.id):
                return int(cupy.cuda.get_current_stream().ptr)
    return LEGACY_STREAM


def allocate(problem: Problem, tensor: str, like: Sequence[Any]) -> Any:
    """A new array for ``tensor`` in its declared dtype and layout: torch on the
    device of the first CUDA torch tensor in ``like``, else CuPy like the first CuPy
    array, else NumPy."""
    declared = problem.program.tensor(tensor)
    shape = problem.shape(tensor)
    order: Literal["C", "F"] = "F" if declared.layout == "column" else "C"
    for array in like:
        if _library(array) == "torch" and getattr(array, "is_cuda", False):
            import torch

            strides = contiguous_strides(shape, declared.layout)
            return torch.empty_strided(
                shape, strides, dtype=getattr(torch, declared.dtype), device=array.device
            )
    for array in like:
        if _library(array) == "cupy" and declared.dtype in NUMPY_DTYPE:
            import cupy

            with cupy.cuda.Device(array.device.id):
                return cupy.empty(shape, dtype=declared.dtype, order=order)
    return new_host_array(shape, declared.dtype, declared.layout)


class Reader:
    """What the argument check needs of the CUDA backend (its name, how it reads,
    allocates and picks a stream), for callers that hold no backend object."""

    name = "cuda"
    describe = staticmethod(describe)
    allocate = staticmethod(allocate)
    resolve_stream = staticmethod(resolve_stream)


READER = Reader()
