"""What einkern needs to know about an array passed by the user, whatever its library."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .ir.nodes import Problem

_DTYPE_NAMES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}


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


def dtype_name(dtype: Any) -> str:
    """einkern's name of a NumPy-compatible dtype, else its own string form."""
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


def random_arrays(
    problem: Problem, seed: int = 0, names: Iterable[str] | None = None
) -> dict[str, np.ndarray]:
    """Random inputs: :func:`einkern.testing.random_arrays` (kept here for callers
    of this name)."""
    from .testing import random_arrays as draw

    return draw(problem, seed, names)
