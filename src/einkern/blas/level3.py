"""BLAS level 3 products: :func:`gemm` and :func:`syrk`.

``gemm`` is one loop nest that raises to one Einstein statement
(``D = beta·C + alpha·sum[p](op(A)·op(B))``, the scaling outside the sum).

``syrk`` (``C = alpha·X·Xᵀ + beta·C`` on one triangle, ``X`` the ``n``×``k``
matrix ``A`` or ``Aᵀ``) is **recursive halving, batched per level**.  For rows
split in halves ``X₁``, ``X₂`` the lower triangle of ``X·Xᵀ`` is
``[tri(X₁X₁ᵀ); X₂X₁ᵀ, tri(X₂X₂ᵀ)]``: one off-diagonal block and two diagonal
blocks, which are halved again.  At depth ``L`` the ``2^L`` off-diagonal blocks
of ``s = n / 2^(L+1)`` rows all have one shape, so they are *one* call: a loop
nest with a batch loop, raised to one Einstein statement
``P[b,i,j] = alpha·sum[p](Xbot[b,i,p]·Xtop[b,j,p]) (+ beta·C[b,i,j])`` (the
tensor-program path: GETT/split-K/tensor-core mapping on the GPU), whose
operands are the row blocks of ``X`` as ``(2^L, 2, s, k)`` taken at half 1 and
half 0 (dense slices at depth 0, one copy of ``X`` per deeper level).  After
``levels`` halvings the ``2^levels`` diagonal blocks of ``base`` rows are one
more such call (``Xbot = Xtop = X`` as ``(2^levels, base, k)``, no copy),
computed whole, and their triangles written.  Each level's result goes into the
output through one strided view of its blocks (:meth:`Operands.diagonal_blocks`);
with ``beta`` the same view, copied, is the call's ``C``.  The other triangle is
never written: it stays ``C``'s (or zero).

Why: the triangle is ``levels + 1`` products, the first one a quarter of the
full GEMM's flops and each next one half as large — the flops of the triangle
plus ``base/n`` of it for the whole diagonal blocks — where column panels need
one call per panel, each a narrow product that underfills the GPU.  Smaller
diagonal blocks mean more, smaller calls and one more copy of ``X`` per level;
larger ones more wasted flops: :data:`SYRK_BLOCK` = 512 has the least predicted
time at n = k = 4096 (the cost model's per-level times are in docs/affine.md).

Sizes: ``n`` that ``2^levels`` does not divide is padded with zero rows to
``base·2^levels`` (fewer than ``2^levels`` rows; the padded rows' results are
dropped), so every level has blocks of one shape; ``block=`` overrides
:data:`SYRK_BLOCK` (tests use small blocks to run several levels).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .engines import Engine, get_engine, run
from .operands import Operands, c_type, check, operands, shape

#: syrk halves its rows until the diagonal blocks have at most this many rows
#: (see the module's docstring for the rule).
SYRK_BLOCK = 512


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


@dataclass(frozen=True)
class SyrkBlocking:
    """How :func:`syrk` blocks ``n`` rows: ``levels`` halvings down to diagonal
    blocks of ``base`` rows, the rows padded with zero rows to :attr:`padded`."""

    n: int
    levels: int
    base: int

    @property
    def padded(self) -> int:
        """``base·2^levels``: ``n`` and fewer than ``2^levels`` zero rows."""
        return self.base << self.levels

    def level(self, depth: int) -> tuple[int, int]:
        """``(count, size)`` of the off-diagonal blocks at ``depth``: ``2^depth``
        blocks of ``padded / 2^(depth+1)`` rows."""
        return 1 << depth, self.padded >> (depth + 1)


def syrk_blocking(n: int, block: int = SYRK_BLOCK) -> SyrkBlocking:
    """The fewest halvings of ``n`` rows that leave diagonal blocks of at most
    ``block`` rows (each ``ceil(n / 2^levels)``)."""
    check(block > 0, f"block must be positive, got {block}")
    levels = 0
    while -(-n // (1 << levels)) > block:
        levels += 1
    return SyrkBlocking(n, levels, -(-n // (1 << levels)))


def syrk(
    alpha: float,
    a: Any,
    beta: float = 0.0,
    c: Any = None,
    trans: bool = False,
    lower: bool = False,
    *,
    block: int | None = None,
    backend: str | None = None,
) -> Any:
    """``alpha·A·Aᵀ + beta·C`` (``trans``: ``alpha·Aᵀ·A + beta·C``); only the
    ``lower`` (or upper) triangle is computed and written, the other is ``C``'s
    (or zero); a new array.  ``block`` overrides :data:`SYRK_BLOCK`, the most rows
    of the diagonal blocks (see the module's docstring)."""
    ops, (a, c) = operands(a, c, backend=backend)
    shape(a, 2, "a")
    a, flipped = ops.row_major(a)
    x = a.T if trans != flipped else a  # the rows whose products are wanted
    n, k = (int(e) for e in x.shape)
    if c is not None:
        check(tuple(c.shape) == (n, n), f"c must have shape {(n, n)}, got {tuple(c.shape)}")
    plan = syrk_blocking(n, SYRK_BLOCK if block is None else block)
    x = _padded(ops, x, (plan.padded, k), copy=False)
    out = _padded(ops, c, (plan.padded, plan.padded), copy=True)
    steps = _Steps(ops, get_engine(ops.backend), out, alpha, beta if c is not None else 0.0, lower)
    for depth in range(plan.levels):
        steps.off_diagonal(x, *plan.level(depth))
    steps.diagonal(x, 1 << plan.levels, plan.base)
    return out if plan.padded == n else ops.copy(out[:n, :n])


def _padded(ops: Operands, array: Any, extents: tuple[int, int], copy: bool) -> Any:
    """``array`` as a dense row-major array of ``extents``, zero rows and columns
    appended (None: zeros); a new array when ``copy`` or padded, else ``array``
    itself where it is dense."""
    if array is None:
        return ops.zeros(extents)
    if tuple(int(e) for e in array.shape) == extents:
        return ops.copy(array) if copy else ops.dense(array)
    padded = ops.zeros(extents)
    padded[: array.shape[0], : array.shape[1]] = array
    return padded


class _Steps:
    """The calls of one :func:`syrk`: each computes same-shaped blocks of the
    triangle in one batched product and writes them into ``out``."""

    def __init__(
        self, ops: Operands, engine: Engine, out: Any, alpha: float, beta: float, lower: bool
    ):
        self.ops, self.engine, self.out = ops, engine, out
        self.alpha, self.beta, self.lower = alpha, beta, lower

    def off_diagonal(self, x: Any, count: int, size: int) -> None:
        """The ``count`` blocks ``X₂ᵦX₁ᵦᵀ`` (upper: ``X₁ᵦX₂ᵦᵀ``) of ``size`` rows
        where ``X`` as ``(count, 2, size, k)`` holds ``X₁ᵦ`` at half 0, ``X₂ᵦ`` at 1."""
        halves = x.reshape(count, 2, size, int(x.shape[1]))
        top, bottom = self.ops.dense(halves[:, 0]), self.ops.dense(halves[:, 1])
        left, right = (bottom, top) if self.lower else (top, bottom)
        row, col = (size, 0) if self.lower else (0, size)
        target = self.ops.diagonal_blocks(self.out, count, size, 2 * size, row, col)
        target[...] = self._products(left, right, target)

    def diagonal(self, x: Any, count: int, size: int) -> None:
        """The ``count`` diagonal blocks ``XᵦXᵦᵀ`` of ``size`` rows, computed whole,
        their lower (upper) triangles written."""
        blocks = x.reshape(count, size, int(x.shape[1]))
        target = self.ops.diagonal_blocks(self.out, count, size, size, 0, 0)
        self.ops.keep_triangle(target, self._products(blocks, blocks, target), self.lower)

    def _products(self, left: Any, right: Any, target: Any) -> Any:
        """``P[b] = alpha·L[b]·R[b]ᵀ + beta·C[b]``, ``C`` a dense copy of ``target``
        (not read when beta is 0): one raised loop nest with a batch loop."""
        count, m, k = (int(e) for e in left.shape)
        t = c_type(self.ops.dtype)
        declared, first, extra = "", "P[b][i][j] = 0;", {}
        if self.beta != 0:
            declared, first = f", {t} beta, {t} C[q][m][m]", "P[b][i][j] = beta * C[b][i][j];"
            extra = {"C": self.ops.copy(target), "beta": self.beta}
        text = f"""void syrk_blocks(int q, int m, int k, {t} alpha, {t} L[q][m][k],
                                {t} R[q][m][k], {t} P[q][m][m]{declared}) {{
            for (int b = 0; b < q; b++)
                for (int i = 0; i < m; i++) {{
                    for (int j = 0; j < m; j++)
                        {first}
                    for (int p = 0; p < k; p++)
                        for (int j = 0; j < m; j++)
                            P[b][i][j] += alpha * L[b][i][p] * R[b][j][p];
                }}
        }}"""
        result = self.ops.empty((count, m, m))
        sizes = {"q": count, "m": m, "k": k}
        run(self.engine, text, sizes, L=left, R=right, P=result, alpha=self.alpha, **extra)
        return result
