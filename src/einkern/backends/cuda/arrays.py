"""Arrays the CUDA backend accepts: NumPy (host), ``__cuda_array_interface__``
(PyTorch, CuPy, Numba) and DLPack (JAX and others), all without copies; and new
arrays of the same library for outputs.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...arrays import ArrayInfo, contiguous_strides, describe_numpy
from ...errors import ArgumentError, BackendError
from ...ir.nodes import Problem

_TYPESTRS = {"<f4": "float32", "<f8": "float64", "=f4": "float32", "=f8": "float64"}

# DLPack (dlpack.h, ABI of DLManagedTensor, version 0.x)
KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
KDL_FLOAT = 2


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", _DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _library(obj: Any) -> str:
    return type(obj).__module__.split(".", 1)[0] or "unknown"


def _device_of(pointer: int) -> int:
    """GPU ordinal of a device pointer; 0 when it cannot be asked (no GPU here)."""
    if not pointer:
        return 0
    try:
        from . import driver

        return driver.pointer_device(pointer)
    except BackendError:
        return 0


def describe_cuda_array_interface(obj: Any, interface: dict) -> ArrayInfo:
    """ArrayInfo from a ``__cuda_array_interface__`` dict (versions 2 and 3)."""
    if interface.get("mask") is not None:
        raise ArgumentError(f"masked {_library(obj)} arrays are not supported")
    shape = tuple(int(n) for n in interface["shape"])
    typestr = interface["typestr"]
    dtype = _TYPESTRS.get(typestr, typestr)
    itemsize = int(typestr[2:]) if typestr[2:].isdigit() else 1
    pointer, readonly = interface["data"]
    stream = interface.get("stream")
    raw = interface.get("strides")
    if raw is None:
        strides = contiguous_strides(shape, "row")
    else:
        strides = tuple(int(s) // itemsize if int(s) % itemsize == 0 else -1 for s in raw)
    return ArrayInfo(
        shape=shape,
        dtype=dtype,
        strides=strides,
        device=f"cuda:{_device_of(int(pointer or 0))}",
        pointer=int(pointer or 0),
        library=_library(obj),
        readonly=bool(readonly),
        stream=_producer_stream(stream),
    )


def _producer_stream(stream: Any) -> int | None:
    """A stream handle to wait for: neither absent nor one of the default streams
    (0, 1 = legacy, 2 = per-thread), which einkern's launches are ordered with."""
    return int(stream) if isinstance(stream, int) and stream > 2 else None


_TORCH_DTYPES: dict[Any, str] = {}


def describe_torch_cuda(tensor: Any) -> ArrayInfo | None:
    """ArrayInfo of a CUDA torch tensor from its attributes, which is much cheaper
    than building its ``__cuda_array_interface__``; None for other tensors (CPU,
    requiring grad), which take the general path."""
    if not tensor.is_cuda or tensor.requires_grad:
        return None
    import torch

    if not _TORCH_DTYPES:
        _TORCH_DTYPES.update({torch.float32: "float32", torch.float64: "float64"})
    index = tensor.get_device()
    return ArrayInfo(
        shape=tuple(tensor.shape),
        dtype=_TORCH_DTYPES.get(tensor.dtype, str(tensor.dtype).removeprefix("torch.")),
        strides=tuple(tensor.stride()),
        device=f"cuda:{index}",
        pointer=tensor.data_ptr(),
        library="torch",
        readonly=False,
        stream=_producer_stream(_torch_current_stream(torch, index)),
    )


def _torch_current_stream(torch: Any, index: int) -> int:
    """Handle of torch's current stream on GPU ``index`` (what torch's
    ``__cuda_array_interface__`` reports), through the raw accessor when it exists."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return int(raw(index))
    return int(torch.cuda.current_stream(index).cuda_stream)


def describe_dlpack(obj: Any) -> ArrayInfo:
    """ArrayInfo from ``__dlpack_device__``/``__dlpack__``.

    The capsule is only read, never consumed: when it is dropped, the producer's
    destructor releases its DLManagedTensor, and the memory stays owned by
    ``obj`` (which the caller keeps alive)."""
    device_type, device_id = (int(v) for v in obj.__dlpack_device__())
    capsule = None
    if device_type in (KDL_CUDA, KDL_CUDA_MANAGED):
        try:
            capsule = obj.__dlpack__(stream=1)  # einkern works on the legacy default stream
        except Exception:  # noqa: BLE001 - a producer without stream support
            capsule = None
    if capsule is None:
        capsule = obj.__dlpack__()
    address = _capsule_pointer(capsule, b"dltensor")
    if not address:
        raise ArgumentError(f"{_library(obj)} array: unreadable DLPack capsule")
    tensor = _DLManagedTensor.from_address(address).dl_tensor
    ndim = tensor.ndim
    shape = tuple(int(tensor.shape[d]) for d in range(ndim))
    if tensor.strides:
        strides = tuple(int(tensor.strides[d]) for d in range(ndim))
    else:
        strides = contiguous_strides(shape, "row")
    code, bits, lanes = tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes
    if code == KDL_FLOAT and lanes == 1 and bits in (32, 64):
        dtype = f"float{bits}"
    else:
        dtype = f"dlpack(code={code}, bits={bits}, lanes={lanes})"
    pointer = int(tensor.data or 0) + int(tensor.byte_offset)
    kind = tensor.device.device_type
    if kind in (KDL_CUDA, KDL_CUDA_MANAGED):
        where = f"cuda:{tensor.device.device_id}"
    elif kind in (KDL_CPU, KDL_CUDA_HOST):
        where = "cpu"
    else:
        where = f"dlpack-device-{kind}:{tensor.device.device_id}"
    del tensor, capsule  # the producer's capsule destructor frees the managed tensor
    library = _library(obj)
    return ArrayInfo(
        shape=shape,
        dtype=dtype,
        strides=strides,
        device=where,
        pointer=pointer,
        library=library,
        readonly=library in ("jax", "jaxlib"),  # JAX arrays are immutable
    )


def describe(obj: Any) -> ArrayInfo | None:
    """Shape, dtype, strides (elements), device and pointer of an array the CUDA
    backend accepts, or None for any other object."""
    if isinstance(obj, np.ndarray):
        return describe_numpy(obj)
    if type(obj).__module__ == "torch" and type(obj).__name__ == "Tensor":
        info = describe_torch_cuda(obj)
        if info is not None:
            return info
    try:
        interface = obj.__cuda_array_interface__
    except AttributeError:
        interface = None
    except Exception as error:  # e.g. a torch tensor that requires grad
        if not hasattr(obj, "__dlpack__"):
            raise ArgumentError(f"cannot read {_library(obj)} array: {error}") from error
        interface = None
    if isinstance(interface, dict):
        return describe_cuda_array_interface(obj, interface)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return describe_dlpack(obj)
    return None


def allocate(problem: Problem, tensor: str, like: Sequence[Any]) -> Any:
    """A new array for ``tensor`` in its declared dtype and layout: torch on the
    device of the first torch tensor in ``like``, else CuPy like the first CuPy
    array, else NumPy."""
    declared = problem.program.tensor(tensor)
    shape = problem.shape(tensor)
    order = "F" if declared.layout == "column" else "C"
    for array in like:
        if _library(array) == "torch":
            import torch

            strides = contiguous_strides(shape, declared.layout)
            return torch.empty_strided(
                shape, strides, dtype=getattr(torch, declared.dtype), device=array.device
            )
    for array in like:
        if _library(array) == "cupy":
            import cupy

            with cupy.cuda.Device(array.device.id):
                return cupy.empty(shape, dtype=declared.dtype, order=order)
    return np.empty(shape, dtype=declared.dtype, order=order)
