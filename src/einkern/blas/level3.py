"""BLAS level 3 products: :func:`gemm` and :func:`syrk`.

``gemm`` is one loop nest that raises to one Einstein statement
(``D = beta·C + alpha·sum[p](op(A)·op(B))``, the scaling outside the sum).
``syrk`` computes only the requested triangle, in column panels (upper: row
panels) of :func:`syrk_panel` columns: each panel's part of the triangle and
the diagonal block it crosses is one product (a raised loop nest, as gemm) into
a new array, whose rows below the diagonal block and the diagonal block's
triangle are then written into the result — the other triangle is never
written.
"""

from __future__ import annotations

from typing import Any

from .engines import get_engine, run
from .operands import Operands, c_type, check, operands, shape

#: syrk computes its triangle in this many panels (at least): the diagonal blocks
#: are computed whole, an excess of 1/PANELS of the triangle's flops, against
#: fewer and larger products (one call and one compiled kernel per panel).
SYRK_PANELS = 8
#: Panel widths are multiples of this many columns (a GPU tile's width).
SYRK_ALIGN = 64


def gemm(
    alpha: float,
    a: Any,
    b: Any,
    beta: float = 0.0,
    c: Any = None,
    trans_a: bool = False,
    trans_b: bool = False,
    *,
    backend: str | None = None,
) -> Any:
    """``alpha·op(A)·op(B) + beta·C``, a new array; ``C`` is not read when ``beta``
    is 0."""
    ops, (a, b, c) = operands(a, b, c, backend=backend)
    shape(a, 2, "a")
    shape(b, 2, "b")
    a, flip_a = ops.row_major(a)
    b, flip_b = ops.row_major(b)
    trans_a, trans_b = trans_a != flip_a, trans_b != flip_b
    m, k = (int(a.shape[1]), int(a.shape[0])) if trans_a else (int(a.shape[0]), int(a.shape[1]))
    k2, n = (int(b.shape[1]), int(b.shape[0])) if trans_b else (int(b.shape[0]), int(b.shape[1]))
    check(k == k2, f"op(a) is {m}x{k} but op(b) is {k2}x{n}")
    d = ops.empty((m, n))
    product(ops, a, b, d, alpha, beta, c, trans_a, trans_b)
    return d


def product(
    ops: Operands,
    a: Any,
    b: Any,
    d: Any,
    alpha: float,
    beta: float,
    c: Any,
    trans_a: bool,
    trans_b: bool,
) -> None:
    """``D = alpha·op(A)·op(B) + beta·C`` into the dense array ``d`` (``a`` and ``b``
    dense row-major; ``C`` not read when ``beta`` is 0 or ``c`` is None)."""
    m, n = (int(e) for e in d.shape)
    k = int(a.shape[0] if trans_a else a.shape[1])
    t = c_type(ops.dtype)
    a_decl, a_elem = ("A[k][m]", "A[p][i]") if trans_a else ("A[m][k]", "A[i][p]")
    b_decl, b_elem = ("B[n][k]", "B[j][p]") if trans_b else ("B[k][n]", "B[p][j]")
    extra: dict[str, Any] = {}
    declared, first = "", "D[i][j] = 0;"
    if c is not None and beta != 0:
        check(tuple(c.shape) == (m, n), f"c must have shape {(m, n)}, got {tuple(c.shape)}")
        declared, first = f", {t} beta, {t} C[m][n]", "D[i][j] = beta * C[i][j];"
        extra = {"C": ops.dense(c), "beta": beta}
    text = f"""void gemm(int m, int n, int k, {t} alpha, {t} {a_decl}, {t} {b_decl},
                        {t} D[m][n]{declared}) {{
        for (int i = 0; i < m; i++) {{
            for (int j = 0; j < n; j++)
                {first}
            for (int p = 0; p < k; p++)
                for (int j = 0; j < n; j++)
                    D[i][j] += alpha * {a_elem} * {b_elem};
        }}
    }}"""
    sizes = {"m": m, "n": n, "k": k}
    run(get_engine(ops.backend), text, sizes, A=a, B=b, D=d, alpha=alpha, **extra)


def syrk_panel(n: int, panels: int = SYRK_PANELS, align: int = SYRK_ALIGN) -> int:
    """The panel width of an ``n``×``n`` syrk: ``n / panels`` rounded up to a
    multiple of ``align`` (at least ``align``)."""
    return max(align, -(-n // (panels * align)) * align)


def syrk(
    alpha: float,
    a: Any,
    beta: float = 0.0,
    c: Any = None,
    trans: bool = False,
    lower: bool = False,
    *,
    panel: int | None = None,
    backend: str | None = None,
) -> Any:
    """``alpha·A·Aᵀ + beta·C`` (``trans``: ``alpha·Aᵀ·A + beta·C``); only the
    ``lower`` (or upper) triangle is computed and written, the other is ``C``'s
    (or zero); a new array.  ``panel`` overrides :func:`syrk_panel`'s width."""
    ops, (a, c) = operands(a, c, backend=backend)
    shape(a, 2, "a")
    a, flipped = ops.row_major(a)
    if trans != flipped:  # the rows of A are to be the columns: one transposed copy
        a = ops.copy(a.T)
    n = int(a.shape[0])
    if c is not None:
        check(tuple(c.shape) == (n, n), f"c must have shape {(n, n)}, got {tuple(c.shape)}")
    out = ops.copy(c) if c is not None else ops.zeros((n, n))
    width = panel or syrk_panel(n)
    check(width > 0, f"panel must be positive, got {width}")
    for start in range(0, n, width):
        stop = min(n, start + width)
        _syrk_panel(ops, a, out, alpha, beta if c is not None else 0.0, start, stop, lower)
    return out


def _syrk_panel(
    ops: Operands, a: Any, out: Any, alpha: float, beta: float, start: int, stop: int, lower: bool
) -> None:
    """Columns (upper: rows) ``start:stop`` of the triangle, from row (column)
    ``start`` on: one product into a new array, then written into ``out``."""
    n, w = int(a.shape[0]), stop - start
    rest = a[start:]  # rows start… of A: dense
    block = a[start:stop]
    if lower:  # P[i, j] = (A[start + i] · A[start + j]) for i ≥ 0, j < w
        part = out[start:, start:stop]
        left, right, shape_ = rest, block, (n - start, w)
    else:  # P[i, j] = A[start + i] · A[start + j] for i < w, j ≥ 0
        part = out[start:stop, start:]
        left, right, shape_ = block, rest, (w, n - start)
    result = ops.empty(shape_)
    product(ops, left, right, result, alpha, beta, ops.copy(part) if beta else None, False, True)
    diagonal = out[start:stop, start:stop]
    if lower:
        out[stop:, start:stop] = result[w:]
        diagonal[...] = ops.tril(result[:w]) + ops.triu(diagonal, 1)
    else:
        out[start:stop, stop:] = result[:, w:]
        diagonal[...] = ops.triu(result[:, :w]) + ops.tril(diagonal, -1)
