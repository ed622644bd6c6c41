"""The arrays of an ``einkern.blas`` call: which library and device they live on,
their dtype, and the few array operations the routines need besides einkern
programs (new arrays, slices, copies) — done by the arrays' own library, so that
results come back as that library's arrays on the same device.

* NumPy arrays (and array-likes: lists) → the CPU backend;
* torch tensors: CPU tensors → the CPU backend, CUDA tensors → the CUDA backend,
  which computes on the device-resident data (no host copies);
* CuPy arrays → the CUDA backend.

Strides: a routine reads each matrix as a dense row-major array.  A matrix whose
transpose is dense row-major (a Fortran-ordered array, a transposed torch view)
is read as that transpose with the routine's ``trans`` flag (or triangle)
flipped — no copy; any other strided view is copied once into row-major order
(:meth:`Operands.row_major`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ArgumentError

_FLOATS = ("float32", "float64")


def _library(array: Any) -> str:
    module = type(array).__module__.split(".", 1)[0]
    if module == "torch" and type(array).__name__ in ("Tensor", "Parameter"):
        return "torch"
    if module == "cupy":
        return "cupy"
    return "numpy"


@dataclass(frozen=True)
class Operands:
    """The library (``numpy``, ``torch``, ``cupy``), device and dtype of a call's
    arrays, and the array operations on them.  ``backend`` is where einkern runs
    the call's programs: ``cpu`` for host arrays, ``cuda`` for device arrays."""

    library: str
    dtype: str  # float32 | float64
    device: Any  # torch.device / CuPy device; None for NumPy
    backend: str

    # -- making arrays -----------------------------------------------------------

    def empty(self, shape: tuple[int, ...]) -> Any:
        """A new uninitialised row-major array."""
        if self.library == "torch":
            import torch

            return torch.empty(shape, dtype=getattr(torch, self.dtype), device=self.device)
        if self.library == "cupy":
            import cupy

            with self.device:
                return cupy.empty(shape, dtype=self.dtype)
        return np.empty(shape, dtype=self.dtype)

    def zeros(self, shape: tuple[int, ...]) -> Any:
        """A new row-major array of zeros."""
        array = self.empty(shape)
        array[...] = 0
        return array

    def copy(self, array: Any) -> Any:
        """A dense row-major copy."""
        if self.library == "torch":
            return array.clone(memory_format=_contiguous_format())
        if self.library == "cupy":
            import cupy

            return cupy.array(array, copy=True, order="C")
        return np.array(array, copy=True, order="C")

    def row_major(self, array: Any) -> tuple[Any, bool]:
        """``(dense, transposed)``: the array itself when dense row-major
        (``transposed`` False); its transpose view when that is dense row-major
        (``transposed`` True: the caller reads it with its op flipped); else a
        row-major copy."""
        if is_row_major(array):
            return array, False
        if array.ndim == 2 and is_row_major(array.T):
            return array.T, True
        return self.copy(array), False

    def dense(self, array: Any) -> Any:
        """``array`` itself when dense row-major, else a row-major copy."""
        return array if is_row_major(array) else self.copy(array)

    def diagonal_blocks(
        self, matrix: Any, count: int, size: int, step: int, row: int, col: int
    ) -> Any:
        """A writable ``(count, size, size)`` view of the dense row-major ``matrix``:
        block ``t`` is ``matrix[row + t·step :, col + t·step :][:size, :size]`` (blocks
        along a diagonal, e.g. every diagonal block, or every block below one).
        The blocks must lie inside ``matrix``."""
        width = int(matrix.shape[1])
        assert row + (count - 1) * step + size <= int(matrix.shape[0])
        assert col + (count - 1) * step + size <= width
        corner = matrix[row:, col:]  # the view starts at block 0's first element
        shape, strides = (count, size, size), (step * (width + 1), width, 1)
        if self.library == "torch":
            return corner.as_strided(shape, strides)
        itemsize = matrix.dtype.itemsize
        in_bytes = tuple(s * itemsize for s in strides)
        if self.library == "cupy":
            import cupy

            return cupy.lib.stride_tricks.as_strided(corner, shape, in_bytes)
        return np.lib.stride_tricks.as_strided(corner, shape, in_bytes)

    def keep_triangle(self, target: Any, source: Any, lower: bool) -> None:
        """``target``'s lower (or upper) triangle, diagonal included, of every
        trailing square matrix set to ``source``'s; the other triangle kept."""
        size = int(target.shape[-1])
        if self.library == "torch":
            import torch

            ones = torch.ones((size, size), dtype=torch.bool, device=self.device)
            target[...] = torch.where(ones.tril() if lower else ones.triu(), source, target)
        elif self.library == "cupy":
            import cupy

            with self.device:
                mask = cupy.tri(size, dtype=bool)
                target[...] = cupy.where(mask if lower else mask.T, source, target)
        else:
            mask = np.tri(size, dtype=bool)
            target[...] = np.where(mask if lower else mask.T, source, target)


def _contiguous_format() -> Any:
    import torch

    return torch.contiguous_format


def element_strides(array: Any) -> tuple[int, ...]:
    """Strides in elements (torch's ``stride()``, NumPy's and CuPy's bytes divided)."""
    if _library(array) == "torch":
        return tuple(array.stride())
    size = array.dtype.itemsize
    return tuple(s // size if s % size == 0 else -1 for s in array.strides)


def is_row_major(array: Any) -> bool:
    """Dense in row-major order (strides of extent-1 dimensions ignored)."""
    step = 1
    for extent, stride in zip(reversed(array.shape), reversed(element_strides(array)), strict=True):
        if extent != 1 and stride != step:
            return False
        step *= extent
    return True


def operands(*arrays: Any, backend: str | None = None) -> tuple[Operands, list[Any]]:
    """The :class:`Operands` of a call and its arrays (array-likes become NumPy
    arrays; None stays None): one library, one device, one dtype (float32 or
    float64), else an :class:`~einkern.errors.ArgumentError`.  ``backend`` (``cpu``,
    ``cuda`` or an engine's name, see :mod:`.engines`) overrides the device's
    backend for NumPy arrays."""
    given = [a for a in arrays if a is not None]
    libraries = {_library(a) for a in given}
    if len(libraries) > 1:
        raise ArgumentError(
            f"einkern.blas needs arrays of one library, got {', '.join(sorted(libraries))}",
            hint="convert them all to NumPy, torch or CuPy",
        )
    library = libraries.pop() if libraries else "numpy"
    converted = [None if a is None else _convert(a, library) for a in arrays]
    present = [a for a in converted if a is not None]
    dtypes = {_dtype_name(a) for a in present}
    if len(dtypes) != 1 or next(iter(dtypes)) not in _FLOATS:
        raise ArgumentError(
            "einkern.blas needs arrays of one dtype, float32 or float64; got "
            + ", ".join(sorted(dtypes)),
            hint="convert them, e.g. a.astype('float32')",
        )
    device, native = _device(present, library)
    if backend is not None and backend != native and library != "numpy":
        raise ArgumentError(
            f"backend={backend!r}: {library} arrays on {device} run on the {native} backend",
            hint="drop backend=, or move the arrays",
        )
    return Operands(library, dtypes.pop(), device, backend or native), converted


def _convert(array: Any, library: str) -> Any:
    if library != "numpy":
        if _library(array) == "torch" and array.requires_grad:
            raise ArgumentError(
                "einkern.blas does not record gradients", hint="pass tensor.detach()"
            )
        return array
    if isinstance(array, np.ndarray):
        return array
    try:
        return np.asarray(array)
    except (TypeError, ValueError) as error:
        raise ArgumentError(f"einkern.blas cannot read {type(array).__name__}: {error}") from None


def _dtype_name(array: Any) -> str:
    return str(array.dtype).removeprefix("torch.")


def _device(arrays: list[Any], library: str) -> tuple[Any, str]:
    """The one device of the arrays and its backend."""
    if library == "numpy":
        return None, "cpu"
    devices = {str(a.device) for a in arrays}
    if len(devices) != 1:
        raise ArgumentError(
            f"einkern.blas needs arrays on one device, got {', '.join(sorted(devices))}"
        )
    device = arrays[0].device
    if library == "cupy":
        return device, "cuda"
    if device.type not in ("cpu", "cuda"):
        raise ArgumentError(f"einkern.blas runs on CPU and CUDA tensors, not {device.type}")
    return device, "cuda" if device.type == "cuda" else "cpu"


def check(condition: bool, message: str) -> None:
    """An :class:`~einkern.errors.ArgumentError` with ``message`` unless ``condition``."""
    if not condition:
        raise ArgumentError(message)


def shape(array: Any, rank: int, name: str) -> tuple[int, ...]:
    """``array``'s shape, checked to be ``rank``-d and non-empty."""
    found = tuple(int(n) for n in array.shape)
    if len(found) != rank or 0 in found:
        raise ArgumentError(f"{name} must be a non-empty {rank}-d array, got shape {found}")
    return found


def c_type(dtype: str) -> str:
    """The C type of a dtype in the routines' loop nests."""
    return "float" if dtype == "float32" else "double"
