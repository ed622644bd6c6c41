"""``einkern.blas``: MAGMA's BLAS set — :func:`axpy`, :func:`gemv`, :func:`symv`,
:func:`gemm`, :func:`syrk`, :func:`trsm` — in float32 and float64 on NumPy
arrays, torch tensors (CPU or CUDA) and CuPy arrays, with SciPy's argument
conventions (``scipy.linalg.blas``).

Each routine is einkern programs — C loop nests (:mod:`einkern.lang.cfront`)
generated for its variant and dtype and compiled for the call's sizes, raised to
Einstein statements where they are products (the tensor-program path: fusion,
the CUDA mapping decision, tuning), run as affine programs where they are not
(symv's triangles, trsm's diagonal blocks) — never a hand-written kernel; see
docs/affine.md.

* Arrays: NumPy arrays run on the CPU backend (``backend="cuda"`` runs them on
  the GPU, copied there and back); torch CPU tensors on the CPU backend; torch
  CUDA tensors and CuPy arrays on the CUDA backend, on their device, without
  host copies.  The result is a new array of the same library and device.
* Conventions: results are new arrays (inputs are never modified);
  ``trans``/``trans_a``/``trans_b`` transpose, ``lower`` picks the triangle read
  (symv, trsm) or written (syrk), ``side`` ``"L"``/``"R"`` and ``unit`` (unit
  diagonal, not read) for trsm; ``beta = 0`` means ``y``/``C`` is not read.
* Strides: a matrix whose transpose is dense (Fortran order, a transposed torch
  view) is read as that transpose with the op flipped, without a copy; other
  strided views are copied to row-major once (:mod:`.operands`).
"""

from .engines import get_engine, register_engine
from .level3 import SYRK_BLOCK, SyrkBlocking, gemm, syrk, syrk_blocking
from .level12 import axpy, gemv, symv
from .triangular import TRSM_BLOCK, trsm

__all__ = [
    "SYRK_BLOCK",
    "TRSM_BLOCK",
    "SyrkBlocking",
    "axpy",
    "gemm",
    "gemv",
    "get_engine",
    "register_engine",
    "symv",
    "syrk",
    "syrk_blocking",
    "trsm",
]
