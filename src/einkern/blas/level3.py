"""BLAS level 3 products: :func:`gemm` and :func:`syrk`.

``gemm`` is one loop nest that raises to one Einstein statement
(``D = beta·C + alpha·sum[p](op(A)·op(B))``, the scaling outside the sum).

``syrk`` (``C = alpha·X·Xᵀ + beta·C`` on one triangle, ``X`` the ``n``×``k``
matrix ``A`` or ``Aᵀ``) is **recursive halving, batched per block shape**.  For
rows split in halves ``X₁``, ``X₂`` the lower triangle of ``X·Xᵀ`` is
``[tri(X₁X₁ᵀ); X₂X₁ᵀ, tri(X₂X₂ᵀ)]``: one off-diagonal block and two diagonal
blocks, which are halved again.  At depth ``L`` the ``2^L`` off-diagonal blocks
of ``s = n / 2^(L+1)`` rows all have one shape, so they are *one* call: a loop
nest with a batch loop, raised to one Einstein statement
``P[b,i,j] = alpha·sum[p](L[b,i,p]·R[b,j,p]) (+ beta·C[b,i,j])`` (the
tensor-program path: GETT/split-K/tensor-core mapping on the GPU), whose
operands are the row blocks of ``X`` as ``(2^L, 2, s, k)`` taken at half 1 and
half 0 (dense slices at depth 0, one copy of ``X`` per deeper level).  After
``levels`` halvings the ``2^levels`` diagonal blocks of ``base`` rows have the
shape of the deepest level's ``2^(levels-1)`` off-diagonal blocks, so both are
**one call** of ``3·2^(levels-1)`` blocks: the row blocks are copied once into
``S = [X₁, X₁, X₂, X₂]`` (the deepest pairs' first and second halves, each
twice: two copies of ``X``), and the dense slices ``S[pairs:]`` and
``S[:3·pairs]`` pair up as ``(X₁, X₁)``, ``(X₂, X₁)``, ``(X₂, X₂)``; the diagonal
blocks are computed whole and their triangles written.  Each call's blocks go
into the output through strided views (:meth:`Operands.diagonal_blocks`: one
per level, three for the merged call); with ``beta`` the same views, copied, are
the call's ``C``.  The other triangle is never written: it stays ``C``'s (or
zero).

Why: the triangle is ``max(levels, 1)`` products, the first one a quarter of
the full GEMM's flops and each next one half as large, the last one holding the
deepest level and the whole diagonal blocks (``base/n`` of the triangle's flops
spent on their other halves).  Column panels need one call per panel, each a
narrow product that underfills the GPU; and a batched product of fewer than
about 4M outputs underfills an H100 too (measured: two blocks of 1024×1024×4096
take 0.626 ms, four 0.787 ms), hence the merged last call.
:data:`SYRK_BLOCK` = 1024 was measured best at n = k = 4096 (docs/affine.md).

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
SYRK_BLOCK = 1024


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

    @property
    def calls(self) -> tuple[tuple[int, int], ...]:
        """``(blocks, rows)`` of each batched product, in order: the off-diagonal
        blocks of every depth but the deepest, then one call for the deepest
        depth's ``2^(levels-1)`` off-diagonal blocks and the ``2^levels`` diagonal
        blocks, all of ``base`` rows (without halvings, the one diagonal block)."""
        if self.levels == 0:
            return ((1, self.base),)
        upper = tuple(self.level(depth) for depth in range(self.levels - 1))
        return (*upper, (3 << (self.levels - 1), self.base))


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
    for depth in range(plan.levels - 1):
        steps.off_diagonal(x, *plan.level(depth))
    if plan.levels:
        steps.last_level_and_diagonal(x, *plan.level(plan.levels - 1))
    else:
        steps.diagonal(x, 1, plan.base)
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
        self._call(left, right, [(self._below(count, size), False)])

    def diagonal(self, x: Any, count: int, size: int) -> None:
        """The ``count`` diagonal blocks ``XᵦXᵦᵀ`` of ``size`` rows, computed whole,
        their lower (upper) triangles written."""
        blocks = x.reshape(count, size, int(x.shape[1]))
        target = self.ops.diagonal_blocks(self.out, count, size, size, 0, 0)
        self._call(blocks, blocks, [(target, True)])

    def last_level_and_diagonal(self, x: Any, pairs: int, size: int) -> None:
        """The deepest level's ``pairs`` off-diagonal blocks ``X₂ᵦX₁ᵦᵀ`` and the
        ``2·pairs`` diagonal blocks ``X₁ᵦX₁ᵦᵀ``, ``X₂ᵦX₂ᵦᵀ`` (all ``size`` rows) in
        one call.  The row blocks are copied once into ``S = [X₁, X₁, X₂, X₂]`` (each
        ``(pairs, size, k)``); the pairs of ``S[pairs:]`` and ``S[:3·pairs]``, two
        dense slices, are then ``(X₁, X₁)``, ``(X₂, X₁)``, ``(X₂, X₂)`` — the upper
        triangle takes the slices the other way round."""
        k = int(x.shape[1])
        halves = x.reshape(pairs, 2, size, k)
        stacked = self.ops.empty((4, pairs, size, k))
        for slot, half in enumerate((0, 0, 1, 1)):
            stacked[slot] = halves[:, half]
        stacked = stacked.reshape(4 * pairs, size, k)
        late, early = stacked[pairs:], stacked[: 3 * pairs]
        left, right = (late, early) if self.lower else (early, late)
        first = self.ops.diagonal_blocks(self.out, pairs, size, 2 * size, 0, 0)
        second = self.ops.diagonal_blocks(self.out, pairs, size, 2 * size, size, size)
        self._call(left, right, [(first, True), (self._below(pairs, size), False), (second, True)])

    def _below(self, count: int, size: int) -> Any:
        """The view of the ``count`` off-diagonal blocks of ``size`` rows below
        (upper: right of) the diagonal blocks of ``2·size`` rows."""
        row, col = (size, 0) if self.lower else (0, size)
        return self.ops.diagonal_blocks(self.out, count, size, 2 * size, row, col)

    def _call(self, left: Any, right: Any, targets: list[tuple[Any, bool]]) -> None:
        """One batched product over ``targets`` in order, each a ``(blocks, size,
        size)`` view of ``out`` written whole or, when its flag is set, on its
        lower (upper) triangle; with ``beta`` their copies, stacked, are ``C``."""
        c = None
        if self.beta != 0:
            size = int(left.shape[1])
            c = self.ops.empty((int(left.shape[0]), size, size))
            start = 0
            for view, _ in targets:
                c[start : start + int(view.shape[0])] = view
                start += int(view.shape[0])
        result, start = self._products(left, right, c), 0
        for view, triangle in targets:
            part = result[start : start + int(view.shape[0])]
            start += int(view.shape[0])
            if triangle:
                self.ops.keep_triangle(view, part, self.lower)
            else:
                view[...] = part

    def _products(self, left: Any, right: Any, c: Any) -> Any:
        """``P[b] = alpha·L[b]·R[b]ᵀ + beta·C[b]`` (``C`` not read when beta is 0):
        one raised loop nest with a batch loop."""
        count, m, k = (int(e) for e in left.shape)
        t = c_type(self.ops.dtype)
        declared, first, extra = "", "P[b][i][j] = 0;", {}
        if self.beta != 0:
            declared, first = f", {t} beta, {t} C[q][m][m]", "P[b][i][j] = beta * C[b][i][j];"
            extra = {"C": c, "beta": self.beta}
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
