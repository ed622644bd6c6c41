"""What einkern needs to know about an array passed by the user, whatever its library,
and the host arrays einkern makes: new ones (bfloat16: torch CPU tensors, NumPy having
none), copies, and random inputs (:func:`random_arrays`, the one formula the tests,
benchmarks and tuner draw from; :mod:`einkern.testing` re-exports it)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import AllocationError, ArgumentDtypeError
from .reference import host_values
from .semantics import HALF_DTYPES, ITEMSIZE, NUMPY_DTYPE, bfloat16_bits, round_to

if TYPE_CHECKING:
    from .ir.nodes import Problem

_DTYPE_NAMES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}
_DTYPE_NAMES[np.dtype(np.float16)] = "float16"
#: NumPy has no bfloat16: what the errors say, and how to get one.
NO_NUMPY_BFLOAT16 = (
    "NumPy has no bfloat16: pass a torch.bfloat16 tensor "
    "(torch.from_numpy(a).to(torch.bfloat16)), a bfloat16 GPU array, or declare the "
    "tensor float16 or float32"
)


@dataclass(frozen=True)
class ArrayInfo:
    """Shape, element type and strides (in elements) of an array.

    ``dtype`` is einkern's name (``float32``/``float64``) or the library's own
    name when unsupported; ``device`` is ``"cpu"`` for host memory and
    ``"cuda:N"`` for memory on GPU N; ``pointer`` is the address of element 0;
    ``stream`` is the CUDA stream the producer asks consumers to wait for
    (``__cuda_array_interface__`` version 3), None when there is none."""

    shape: tuple[int, ...]
    dtype: str
    strides: tuple[int, ...]
    device: str
    pointer: int
    library: str  # "numpy", "torch", "cupy", "jax", "dlpack", ...
    readonly: bool = False
    stream: int | None = None


def is_torch(array: Any) -> bool:
    """Whether ``array`` is a torch tensor (without importing torch)."""
    return type(array).__module__ == "torch" and type(array).__name__ == "Tensor"


def dtype_name(dtype: Any) -> str:
    """einkern's name of a NumPy-compatible dtype, else its own string form
    (``bfloat16`` for the dtype of that name that ml_dtypes adds to NumPy)."""
    if getattr(dtype, "name", None) == "bfloat16" and getattr(dtype, "itemsize", 0) == 2:
        return "bfloat16"
    try:
        name = _DTYPE_NAMES.get(dtype if isinstance(dtype, np.dtype) else np.dtype(dtype))
        return name if name is not None else str(dtype)
    except TypeError:
        return str(dtype)


_NUMPY_LAYOUTS: dict[tuple[tuple[int, ...], np.dtype], tuple[str, tuple[int, ...]]] = {}


def describe_numpy(array: np.ndarray) -> ArrayInfo:
    """ArrayInfo of a NumPy array (host memory); called on every kernel call, so kept
    cheap (the dtype's name and the strides in elements are remembered per byte
    strides and dtype)."""
    dtype = array.dtype
    key = (array.strides, dtype)
    known = _NUMPY_LAYOUTS.get(key)
    if known is None:
        itemsize = dtype.itemsize
        name = _DTYPE_NAMES.get(dtype)
        known = (
            name if name is not None else str(dtype),
            tuple(s // itemsize if s % itemsize == 0 else -1 for s in array.strides),
        )
        if len(_NUMPY_LAYOUTS) >= 4096:
            _NUMPY_LAYOUTS.clear()
        _NUMPY_LAYOUTS[key] = known
    return ArrayInfo(
        array.shape,
        known[0],
        known[1],
        "cpu",
        array.ctypes.data,
        "numpy",
        not array.flags.writeable,
    )


def describe_torch_host(tensor: Any) -> ArrayInfo | None:
    """ArrayInfo of a CPU torch tensor read from its attributes (the way for
    bfloat16, which NumPy cannot view); None for tensors on other devices."""
    if tensor.device.type != "cpu":
        return None
    return ArrayInfo(
        shape=tuple(tensor.shape),
        dtype=str(tensor.dtype).removeprefix("torch."),
        strides=tuple(tensor.stride()),
        device="cpu",
        pointer=tensor.data_ptr(),
        library="torch",
        readonly=False,
    )


def storage_view(array: Any) -> np.ndarray:
    """A NumPy array sharing a host array's memory, element for element: the uint16
    encodings for a bfloat16 torch tensor, else the array itself (for the emulator,
    which addresses elements by their bits)."""
    if is_torch(array) and str(array.dtype) == "torch.bfloat16":
        return array.detach().view(_torch().int16).numpy().view(np.uint16)
    return array if isinstance(array, np.ndarray) else host_values(array)


def new_host_array(
    shape: tuple[int, ...], dtype: str, layout: str, values: np.ndarray | None = None
) -> Any:
    """A host array of ``dtype`` in ``layout``: NumPy, or a torch CPU tensor for
    bfloat16 (ArgumentDtypeError without torch), holding ``values`` rounded to the
    dtype (uninitialised when None)."""
    column = layout == "column" and len(shape) > 1
    if dtype in NUMPY_DTYPE:
        out = np.empty(shape, dtype=NUMPY_DTYPE[dtype], order="F" if column else "C")
        if values is not None:
            out[...] = round_to(values, dtype)
        return out
    try:
        torch = _torch()
    except ImportError:
        raise ArgumentDtypeError(f"a {dtype} array is needed: {NO_NUMPY_BFLOAT16}") from None
    strides = contiguous_strides(shape, layout)
    out = torch.empty_strided(shape, strides, dtype=torch.bfloat16)
    if values is not None:
        bits = bfloat16_bits(round_to(values, dtype)).view(np.int16)
        out.view(torch.int16).copy_(torch.from_numpy(np.ascontiguousarray(bits)))
    return out


def copy_host_array(array: Any) -> Any:
    """A copy of a host array in the same library, dtype and layout."""
    if is_torch(array):
        return array.detach().clone(memory_format=_torch().preserve_format)
    return np.array(array, copy=True, order="K")


def _torch() -> Any:
    import torch

    return torch


def contiguous_strides(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """Strides in elements of a dense array of ``shape`` in ``layout`` (row/column)."""
    strides = [0] * len(shape)
    step = 1
    dims = range(len(shape) - 1, -1, -1) if layout == "row" else range(len(shape))
    for dim in dims:
        strides[dim] = step
        step *= shape[dim]
    return tuple(strides)


def strides_match(info: ArrayInfo, layout: str) -> bool:
    """True when the array is dense in ``layout``; strides of size-1 dims are ignored."""
    expected = contiguous_strides(info.shape, layout)
    pairs = zip(info.shape, info.strides, expected, strict=True)
    return all(size == 1 or got == want for size, got, want in pairs)


#: The interval random inputs are drawn from: never zero, safe for sqrt and log.
LOW, HIGH = 0.5, 1.5


def random_array(
    rng: np.random.Generator, shape: tuple[int, ...], dtype: str, layout: str = "row"
) -> Any:
    """An array of ``shape`` uniform in [0.5, 1.5], drawn in ``dtype`` itself (no
    float64 intermediate) and dense in ``layout`` (column: first index stride 1).

    A 16-bit ``dtype`` is drawn in float32 and rounded to it (NumPy draws no
    16-bit values); bfloat16 arrays are torch CPU tensors
    (:func:`new_host_array`).  Raises
    :class:`~einkern.errors.AllocationError`, naming the bytes asked for, when the
    memory cannot be had."""
    shape = tuple(int(size) for size in shape)
    column = layout == "column" and len(shape) > 1
    drawn = "float32" if dtype in HALF_DTYPES else dtype
    try:
        if column:  # row-major of the reversed shape, transposed: column-major
            data = rng.random(shape[::-1], dtype=NUMPY_DTYPE[drawn]).T
        else:
            data = rng.random(shape, dtype=NUMPY_DTYPE[drawn])
        if dtype in HALF_DTYPES:
            data += LOW
            return new_host_array(shape, dtype, layout, data)
    except MemoryError:
        count = int(np.prod(shape, dtype=np.int64))
        raise AllocationError(
            f"cannot allocate a random {dtype} array of shape {shape}: "
            f"{count * ITEMSIZE[dtype]} bytes ({count * ITEMSIZE[dtype] / 2**30:.3g} GiB) "
            "asked for",
            hint="choose smaller extents",
        ) from None
    data += LOW  # in place, in the array's own dtype (float32 may round up to 1.5)
    return data


def random_arrays(
    problem: Problem, seed: int = 0, names: Iterable[str] | None = None
) -> dict[str, Any]:
    """Fresh random values (uniform in [0.5, 1.5]) for the tensors ``names`` of
    ``problem`` (when None, every tensor the caller passes: all but the
    temporaries), each in its declared dtype and layout."""
    rng = np.random.default_rng(seed)
    program = problem.program
    arrays = {}
    every = (t.name for t in program.tensors if not t.temporary)
    for name in names if names is not None else every:
        tensor = program.tensor(name)
        arrays[name] = random_array(rng, problem.shape(name), tensor.dtype, tensor.layout)
    return arrays
