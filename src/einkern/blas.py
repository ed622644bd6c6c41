"""``einkern.blas``: MAGMA's BLAS set on NumPy arrays (CPU), each routine an einkern
loop-nest program (C text, :mod:`einkern.lang.cfront`) compiled for the call's
sizes and dtype — not a hand-written kernel.

SciPy's conventions (``scipy.linalg.blas``): results are returned as new arrays
(the inputs are never modified); ``trans``/``trans_a``/``trans_b`` apply the
transpose, ``lower`` picks the triangle read (symv, trsm) or written (syrk),
``side`` (``"L"``/``"R"``) and ``unit`` (unit diagonal, not read) for trsm.
Arrays of float32 or float64 (all of one dtype), any strides (they are copied
to row-major when needed).

* :func:`axpy` ``y + alpha x``; :func:`gemv` ``alpha op(A) x + beta y``;
* :func:`symv` ``alpha A x + beta y`` with ``A`` symmetric, one triangle read;
* :func:`gemm` ``alpha op(A) op(B) + beta C``, all four op combinations;
* :func:`syrk` ``alpha A Aᵀ + beta C`` (``trans``: ``Aᵀ A``), only the requested
  triangle of the result computed (the other is ``C``'s, or zero);
* :func:`trsm` ``X`` with ``op(A) X = alpha B`` (left) or ``X op(A) = alpha B``
  (right).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .api import compile_loops
from .errors import ArgumentError

_C = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}


def _dtype(*arrays: Any) -> tuple[str, list[np.ndarray]]:
    converted = [np.asarray(a) for a in arrays]
    kinds = {a.dtype for a in converted}
    if len(kinds) != 1 or next(iter(kinds)) not in _C:
        raise ArgumentError(
            f"einkern.blas needs arrays of one dtype, float32 or float64; got "
            f"{', '.join(sorted(str(k) for k in kinds))}"
        )
    return _C[next(iter(kinds))], [np.ascontiguousarray(a) for a in converted]


def _shape(array: np.ndarray, rank: int, name: str) -> tuple[int, ...]:
    if array.ndim != rank or 0 in array.shape:
        raise ArgumentError(f"{name} must be a non-empty {rank}-d array, got shape {array.shape}")
    return array.shape


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ArgumentError(message)


@functools.lru_cache(maxsize=256)
def _kernel(text: str, sizes: tuple[tuple[str, int], ...]) -> Any:
    given: dict[str, Any] = dict(sizes)
    return compile_loops(text, **given)


def _run(text: str, sizes: dict[str, int], **arguments: Any) -> Any:
    return _kernel(text, tuple(sorted(sizes.items())))(**arguments)


# ---- level 1 and 2 -------------------------------------------------------------------------


def axpy(alpha: float, x: Any, y: Any) -> np.ndarray:
    """``y + alpha·x`` (a new array)."""
    t, (x, y) = _dtype(x, y)
    (n,) = _shape(x, 1, "x")
    _check(y.shape == (n,), f"y must have shape ({n},), got {y.shape}")
    text = f"""void axpy(int n, {t} alpha, {t} x[n], {t} y[n]) {{
        for (int i = 0; i < n; i++) y[i] += alpha * x[i];
    }}"""
    out = y.copy()
    _run(text, {"n": n}, x=x, y=out, alpha=alpha)
    return out


def _vector_out(y: Any, n: int, t: str, beta: float) -> np.ndarray:
    if y is None:
        return np.zeros(n, dtype=np.float32 if t == "float" else np.float64)
    out = np.array(y, dtype=np.float32 if t == "float" else np.float64, copy=True)
    _check(out.shape == (n,), f"y must have shape ({n},), got {out.shape}")
    return out


def gemv(
    alpha: float, a: Any, x: Any, beta: float = 0.0, y: Any = None, trans: bool = False
) -> np.ndarray:
    """``alpha·op(A)·x + beta·y`` with ``op(A)`` ``A`` or ``Aᵀ``."""
    t, (a, x) = _dtype(a, x)
    m, n = _shape(a, 2, "a")
    rows, cols = (n, m) if trans else (m, n)
    _check(x.shape == (cols,), f"x must have shape ({cols},), got {x.shape}")
    out = _vector_out(y, rows, t, beta)
    element = "A[j][i]" if trans else "A[i][j]"
    text = f"""void gemv(int m, int n, {t} alpha, {t} beta, {t} A[m][n], {t} x[{_cols(trans)}],
                        {t} y[{_rows(trans)}]) {{
        for (int i = 0; i < {_rows(trans)}; i++) {{
            y[i] *= beta;
            for (int j = 0; j < {_cols(trans)}; j++)
                y[i] += alpha * {element} * x[j];
        }}
    }}"""
    _run(text, {"m": m, "n": n}, A=a, x=x, y=out, alpha=alpha, beta=beta)
    return out


def _rows(trans: bool) -> str:
    return "n" if trans else "m"


def _cols(trans: bool) -> str:
    return "m" if trans else "n"


def symv(
    alpha: float, a: Any, x: Any, beta: float = 0.0, y: Any = None, lower: bool = False
) -> np.ndarray:
    """``alpha·A·x + beta·y`` for symmetric ``A`` stored in one triangle (``lower``
    or upper, SciPy's default); the other triangle is never read."""
    t, (a, x) = _dtype(a, x)
    n, n2 = _shape(a, 2, "a")
    _check(n == n2, f"a must be square, got {a.shape}")
    _check(x.shape == (n,), f"x must have shape ({n},), got {x.shape}")
    out = _vector_out(y, n, t, beta)
    # element (i, j) of A, read from the stored triangle only
    before, after = ("A[i][j]", "A[j][i]") if lower else ("A[j][i]", "A[i][j]")
    text = f"""void symv(int n, {t} alpha, {t} beta, {t} A[n][n], {t} x[n], {t} y[n]) {{
        for (int i = 0; i < n; i++) {{
            y[i] *= beta;
            for (int j = 0; j <= i; j++)
                y[i] += alpha * {before} * x[j];
            for (int j = i + 1; j < n; j++)
                y[i] += alpha * {after} * x[j];
        }}
    }}"""
    _run(text, {"n": n}, A=a, x=x, y=out, alpha=alpha, beta=beta)
    return out


# ---- level 3 --------------------------------------------------------------------------------


def _matrix_out(c: Any, shape: tuple[int, int], t: str) -> np.ndarray:
    dtype = np.float32 if t == "float" else np.float64
    if c is None:
        return np.zeros(shape, dtype=dtype)
    out = np.array(c, dtype=dtype, copy=True, order="C")
    _check(out.shape == shape, f"c must have shape {shape}, got {out.shape}")
    return out


def gemm(
    alpha: float,
    a: Any,
    b: Any,
    beta: float = 0.0,
    c: Any = None,
    trans_a: bool = False,
    trans_b: bool = False,
) -> np.ndarray:
    """``alpha·op(A)·op(B) + beta·C``."""
    t, (a, b) = _dtype(a, b)
    a_rows, a_cols = _shape(a, 2, "a")
    b_rows, b_cols = _shape(b, 2, "b")
    m, k = (a_cols, a_rows) if trans_a else (a_rows, a_cols)
    k2, n = (b_cols, b_rows) if trans_b else (b_rows, b_cols)
    _check(k == k2, f"op(a) is {m}x{k} but op(b) is {k2}x{n}")
    out = _matrix_out(c, (m, n), t)
    a_decl, a_elem = ("A[k][m]", "A[p][i]") if trans_a else ("A[m][k]", "A[i][p]")
    b_decl, b_elem = ("B[n][k]", "B[j][p]") if trans_b else ("B[k][n]", "B[p][j]")
    text = f"""void gemm(int m, int n, int k, {t} alpha, {t} beta,
                        {t} {a_decl}, {t} {b_decl}, {t} C[m][n]) {{
        for (int i = 0; i < m; i++) {{
            for (int j = 0; j < n; j++)
                C[i][j] *= beta;
            for (int p = 0; p < k; p++)
                for (int j = 0; j < n; j++)
                    C[i][j] += alpha * {a_elem} * {b_elem};
        }}
    }}"""
    _run(text, {"m": m, "n": n, "k": k}, A=a, B=b, C=out, alpha=alpha, beta=beta)
    return out


def syrk(
    alpha: float, a: Any, beta: float = 0.0, c: Any = None, trans: bool = False, lower: bool = False
) -> np.ndarray:
    """``alpha·A·Aᵀ + beta·C`` (``trans``: ``alpha·Aᵀ·A + beta·C``); only the
    ``lower`` (or upper) triangle is computed, the other is ``C``'s (or zero)."""
    t, (a,) = _dtype(a)
    rows, cols = _shape(a, 2, "a")
    n, k = (cols, rows) if trans else (rows, cols)
    out = _matrix_out(c, (n, n), t)
    decl, left, right = (
        ("A[k][n]", "A[p][i]", "A[p][j]") if trans else ("A[n][k]", "A[i][p]", "A[j][p]")
    )
    low, high = ("0", "i") if lower else ("i", "n - 1")
    text = f"""void syrk(int n, int k, {t} alpha, {t} beta, {t} {decl}, {t} C[n][n]) {{
        for (int i = 0; i < n; i++) {{
            for (int j = {low}; j <= {high}; j++)
                C[i][j] *= beta;
            for (int p = 0; p < k; p++)
                for (int j = {low}; j <= {high}; j++)
                    C[i][j] += alpha * {left} * {right};
        }}
    }}"""
    _run(text, {"n": n, "k": k}, A=a, C=out, alpha=alpha, beta=beta)
    return out


def trsm(
    alpha: float,
    a: Any,
    b: Any,
    side: str = "L",
    lower: bool = False,
    trans: bool = False,
    unit: bool = False,
) -> np.ndarray:
    """``X`` with ``op(A)·X = alpha·B`` (``side="L"``) or ``X·op(A) = alpha·B``
    (``side="R"``); ``A`` triangular (``lower`` or upper, ``unit`` diagonal not
    read), ``op(A)`` ``A`` or ``Aᵀ``."""
    t, (a, b) = _dtype(a, b)
    _check(side in ("L", "R", "l", "r"), f"side must be 'L' or 'R', got {side!r}")
    left = side in ("L", "l")
    m, n = _shape(b, 2, "b")
    size = m if left else n
    _check(a.shape == (size, size), f"a must have shape ({size}, {size}), got {a.shape}")
    out = _matrix_out(b, (m, n), t)
    text = _trsm_text(t, left, lower != trans, trans, unit)
    _run(text, {"m": m, "n": n, "s": size}, A=a, B=out, alpha=alpha)
    return out


def _trsm_text(t: str, left: bool, forward_lower: bool, trans: bool, unit: bool) -> str:
    """The loop nest of one trsm variant: ``T = op(A)`` is lower when
    ``forward_lower`` (solved first row/column first for the left side)."""

    def T(r: str, c: str) -> str:
        return f"A[{c}][{r}]" if trans else f"A[{r}][{c}]"

    scale = "for (int i = 0; i < m; i++) for (int j = 0; j < n; j++) B[i][j] *= alpha;"
    if left:  # rows of X, in order of the triangle: forward for lower T
        rows = (
            "for (int i = 0; i < m; i++)" if forward_lower else "for (int i = m - 1; i >= 0; i--)"
        )
        others = (
            "for (int p = 0; p < i; p++)" if forward_lower else "for (int p = i + 1; p < m; p++)"
        )
        divide = "" if unit else f"for (int j = 0; j < n; j++) B[i][j] /= {T('i', 'i')};"
        body = f"""{rows} {{
            {others}
                for (int j = 0; j < n; j++)
                    B[i][j] -= {T("i", "p")} * B[p][j];
            {divide}
        }}"""
    else:  # columns of X: X T = B, forward when T is upper
        cols = (
            "for (int j = n - 1; j >= 0; j--)" if forward_lower else "for (int j = 0; j < n; j++)"
        )
        others = (
            "for (int p = j + 1; p < n; p++)" if forward_lower else "for (int p = 0; p < j; p++)"
        )
        divide = "" if unit else f"for (int i = 0; i < m; i++) B[i][j] /= {T('j', 'j')};"
        body = f"""{cols} {{
            {others}
                for (int i = 0; i < m; i++)
                    B[i][j] -= B[i][p] * {T("p", "j")};
            {divide}
        }}"""
    return f"""void trsm(int m, int n, int s, {t} alpha, {t} A[s][s], {t} B[m][n]) {{
        {scale}
        {body}
    }}"""
