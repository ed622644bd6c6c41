"""BLAS levels 1 and 2: :func:`axpy`, :func:`gemv`, :func:`symv`.

``axpy`` and ``gemv`` are loop nests that raise to Einstein statements (the
tensor-program path on every backend); ``symv`` reads one triangle, so it is
a loop nest over triangles, run as an affine program.
"""

from __future__ import annotations

from typing import Any

from .engines import get_engine, run
from .operands import Operands, c_type, check, operands, shape


def axpy(alpha: float, x: Any, y: Any, *, backend: str | None = None) -> Any:
    """``alpha·x + y``, a new array (``x`` and ``y`` are not modified)."""
    ops, (x, y) = operands(x, y, backend=backend)
    (n,) = shape(x, 1, "x")
    check(tuple(y.shape) == (n,), f"y must have shape ({n},), got {tuple(y.shape)}")
    t = c_type(ops.dtype)
    text = f"""void axpy(int n, {t} alpha, {t} x[n], {t} y[n], {t} z[n]) {{
        for (int i = 0; i < n; i++) z[i] = alpha * x[i] + y[i];
    }}"""
    z = ops.empty((n,))
    run(get_engine(ops.backend), text, {"n": n}, x=ops.dense(x), y=ops.dense(y), z=z, alpha=alpha)
    return z


def _vector_start(ops: Operands, y: Any, rows: int, extent: str, beta: float):
    """The declaration and first statement of ``z = beta·y + …`` (``y[extent]``, of
    ``rows`` elements) and the arguments they need; ``y`` is not read when
    ``beta`` is 0 (BLAS's rule)."""
    t = c_type(ops.dtype)
    if y is None or beta == 0:
        return "", "z[i] = 0;", {}
    check(tuple(y.shape) == (rows,), f"y must have shape ({rows},), got {tuple(y.shape)}")
    return f", {t} beta, {t} y[{extent}]", "z[i] = beta * y[i];", {"y": ops.dense(y), "beta": beta}


def gemv(
    alpha: float,
    a: Any,
    x: Any,
    beta: float = 0.0,
    y: Any = None,
    trans: bool = False,
    *,
    backend: str | None = None,
) -> Any:
    """``alpha·op(A)·x + beta·y`` with ``op(A)`` ``A`` or (``trans``) ``Aᵀ``; a new
    array.  ``y`` is not read when ``beta`` is 0."""
    ops, (a, x, y) = operands(a, x, y, backend=backend)
    shape(a, 2, "a")
    a, flipped = ops.row_major(a)
    trans = trans != flipped
    m, n = (int(e) for e in a.shape)
    rows, cols = (n, m) if trans else (m, n)
    check(tuple(x.shape) == (cols,), f"x must have shape ({cols},), got {tuple(x.shape)}")
    rows_name, cols_name = ("n", "m") if trans else ("m", "n")
    declared, first, extra = _vector_start(ops, y, rows, rows_name, beta)
    t = c_type(ops.dtype)
    element = "A[j][i]" if trans else "A[i][j]"
    text = f"""void gemv(int m, int n, {t} alpha, {t} A[m][n], {t} x[{cols_name}],
                        {t} z[{rows_name}]{declared}) {{
        for (int i = 0; i < {rows_name}; i++) {{
            {first}
            for (int j = 0; j < {cols_name}; j++)
                z[i] += alpha * {element} * x[j];
        }}
    }}"""
    z = ops.empty((rows,))
    sizes = {"m": m, "n": n}
    run(get_engine(ops.backend), text, sizes, A=a, x=ops.dense(x), z=z, alpha=alpha, **extra)
    return z


def symv(
    alpha: float,
    a: Any,
    x: Any,
    beta: float = 0.0,
    y: Any = None,
    lower: bool = False,
    *,
    backend: str | None = None,
) -> Any:
    """``alpha·A·x + beta·y`` for symmetric ``A`` stored in one triangle (``lower``,
    or upper: SciPy's default); the other triangle is never read.  A new array."""
    ops, (a, x, y) = operands(a, x, y, backend=backend)
    n, n2 = shape(a, 2, "a")
    check(n == n2, f"a must be square, got {(n, n2)}")
    a, flipped = ops.row_major(a)
    lower = lower != flipped  # the transpose stores the other triangle
    check(tuple(x.shape) == (n,), f"x must have shape ({n},), got {tuple(x.shape)}")
    declared, first, extra = _vector_start(ops, y, n, "n", beta)
    run(
        get_engine(ops.backend),
        symv_text(c_type(ops.dtype), lower, declared, first),
        {"n": n},
        A=a,
        x=ops.dense(x),
        z=(z := ops.empty((n,))),
        alpha=alpha,
        **extra,
    )
    return z


def symv_text(t: str, lower: bool, declared: str = "", first: str = "z[i] = 0;") -> str:
    """symv's loop nest: ``z`` set first, then one pass over the stored triangle in
    which each element ``A[i][j]`` adds to ``z[i]`` (times ``x[j]``) and, off the
    diagonal, to ``z[j]`` (times ``x[i]``): the triangle is read once.  On the GPU
    it runs as reduction tiles (:mod:`einkern.gpu.affine_reduce`)."""
    columns = "for (int j = 0; j <= i; j++)" if lower else "for (int j = i; j < n; j++)"
    off_diagonal = "j < i" if lower else "j > i"
    return f"""void symv(int n, {t} alpha, {t} A[n][n], {t} x[n], {t} z[n]{declared}) {{
        for (int i = 0; i < n; i++)
            {first}
        for (int i = 0; i < n; i++)
            {columns} {{
                z[i] += alpha * A[i][j] * x[j];
                if ({off_diagonal})
                    z[j] += alpha * A[i][j] * x[i];
            }}
    }}"""
