"""``trsm``, blocked: ``X`` with ``op(A)·X = alpha·B`` or ``X·op(A) = alpha·B``.

The right side is the left one transposed (``op(A)ᵀ·Xᵀ = alpha·Bᵀ``): ``Bᵀ``
and the result's transpose back are einkern programs (a transposed scaling and
a transposed copy).  On the left, with ``T = op(A)`` lower (solved from the top)
or upper (from the bottom):

1. ``X = alpha·B`` (a raised loop nest);
2. the inverse of every diagonal block of ``T`` of :data:`TRSM_BLOCK` rows, all in
   one call: a loop nest solving ``T_kk·W_k = I`` column by column, which reads
   only ``A``'s stored triangle (on the GPU one thread per column of every block);
3. recursively, rows split in two at a block boundary: solve the first half,
   update the second (``X₂ -= T₂₁·X₁``: an Einstein statement, a GEMM, with
   ``T₂₁`` a dense copy of that block of ``A``), solve the second half; a single
   block is solved by ``X_k = W_k·X_k`` (a copy and a GEMM, one raised loop nest).

Most flops are in the first levels' large products (half in the top one), as
in recursive TRSM; the diagonal blocks cost ``2·n·TRSM_BLOCK`` flops per
right-hand side for their products, and their inverses depend only on ``A``.

Why :data:`TRSM_BLOCK` = 128: each diagonal block's inverse is a chain of
``block²/2`` dependent multiply-adds per GPU thread (one launch for all blocks),
which grows with the square of the block; each block also costs two calls
(update and leaf product, each some tens of µs of host time), which grows as
the block shrinks: at n = 4096, 128 gives 32 blocks (63 calls) and chains of
8192 steps.
"""

from __future__ import annotations

from typing import Any

from .engines import Engine, get_engine, run
from .operands import Operands, c_type, check, operands, shape

#: Rows of the diagonal blocks (see the module's docstring for the rule).
TRSM_BLOCK = 128


def trsm(
    alpha: float,
    a: Any,
    b: Any,
    side: str = "L",
    lower: bool = False,
    trans: bool = False,
    unit: bool = False,
    *,
    block: int | None = None,
    backend: str | None = None,
) -> Any:
    """``X`` with ``op(A)·X = alpha·B`` (``side="L"``) or ``X·op(A) = alpha·B``
    (``side="R"``); ``A`` triangular (``lower`` or upper; only that triangle is
    read; ``unit``: its diagonal is taken as ones, not read), ``op(A)`` ``A`` or
    (``trans``) ``Aᵀ``.  A new array.  ``block`` overrides :data:`TRSM_BLOCK`."""
    ops, (a, b) = operands(a, b, backend=backend)
    check(side in ("L", "R", "l", "r"), f"side must be 'L' or 'R', got {side!r}")
    left = side in ("L", "l")
    m, n = shape(b, 2, "b")
    size = m if left else n
    check(tuple(a.shape) == (size, size), f"a must have shape {(size, size)}, got {a.shape}")
    block = TRSM_BLOCK if block is None else block
    check(block > 0, f"block must be positive, got {block}")
    a, flipped = ops.row_major(a)
    if flipped:  # the transpose stores the other triangle, read transposed
        lower, trans = not lower, not trans
    engine = get_engine(ops.backend)
    solver = _Solver(ops, engine, a, lower, trans if left else not trans, unit, block)
    b = ops.dense(b)
    if left:
        x = ops.empty((m, n))
        _scale(engine, ops, b, x, alpha, False)
        solver.solve(x, 0, m)
        return x
    xt = ops.empty((n, m))
    _scale(engine, ops, b, xt, alpha, True)
    solver.solve(xt, 0, n)
    x = ops.empty((m, n))
    _scale(engine, ops, xt, x, 1.0, True)
    return x


def _scale(engine: Engine, ops: Operands, b: Any, x: Any, alpha: float, transpose: bool) -> None:
    """``X = alpha·B`` (``transpose``: ``X = alpha·Bᵀ``) into ``x``."""
    t = c_type(ops.dtype)
    m, n = (int(e) for e in b.shape)
    x_decl, x_elem = ("X[n][m]", "X[j][i]") if transpose else ("X[m][n]", "X[i][j]")
    text = f"""void scale(int m, int n, {t} alpha, {t} B[m][n], {t} {x_decl}) {{
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                {x_elem} = alpha * B[i][j];
    }}"""
    run(engine, text, {"m": m, "n": n}, B=b, X=x, alpha=alpha)


class _Solver:
    """The left-side solve of one call: ``T = op(A)``, its diagonal blocks'
    inverses, and the recursion over row ranges of ``X``."""

    def __init__(
        self,
        ops: Operands,
        engine: Engine,
        a: Any,
        lower: bool,
        trans: bool,
        unit: bool,
        block: int,
    ):
        self.ops, self.engine, self.a = ops, engine, a
        self.trans, self.block = trans, block
        self.forward = lower != trans  # T lower: the first rows are solved first
        self.t = c_type(ops.dtype)
        size = int(a.shape[0])
        self.full, rest = divmod(size, block)  # blocks of ``block`` rows, and the rest
        self.inverses: list[Any] = []
        if self.full:
            self.inverses.append(self._invert(0, self.full, block, unit))
        if rest:
            self.inverses.append(self._invert(self.full * block, 1, rest, unit))

    # -- the diagonal blocks ----------------------------------------------------------

    def _invert(self, offset: int, count: int, width: int, unit: bool) -> Any:
        """``W[k] = T_kk⁻¹`` for ``count`` blocks of ``width`` rows from row ``offset``."""
        w = self.ops.empty((count, width, width))
        text = inverse_text(self.t, self.forward, self.trans, unit, offset, width)
        run(self.engine, text, {"s": int(self.a.shape[0]), "q": count}, A=self.a, W=w)
        return w

    def _inverse(self, start: int) -> Any:
        k = start // self.block
        return self.inverses[0][k] if k < self.full else self.inverses[-1][0]

    # -- the recursion ------------------------------------------------------------------

    def solve(self, x: Any, start: int, stop: int) -> None:
        """Rows ``start:stop`` of ``x`` (holding ``alpha·B`` less the updates so far)."""
        blocks = -(-(stop - start) // self.block)
        if blocks <= 1:
            self._leaf(x[start:stop], self._inverse(start))
            return
        middle = start + self.block * (-(-blocks // 2))
        first, second = ((start, middle), (middle, stop))
        if not self.forward:
            first, second = second, first
        self.solve(x, *first)
        self._update(x, second, first)
        self.solve(x, *second)

    def _leaf(self, x: Any, w: Any) -> None:
        """``X = W·X`` for one diagonal block's rows."""
        rows, n = (int(e) for e in x.shape)
        t = self.t
        text = f"""void leaf(int r, int n, {t} W[r][r], {t} X[r][n], {t} Y[r][n]) {{
            for (int i = 0; i < r; i++)
                for (int j = 0; j < n; j++)
                    Y[i][j] = X[i][j];
            for (int i = 0; i < r; i++) {{
                for (int j = 0; j < n; j++)
                    X[i][j] = 0;
                for (int q = 0; q < r; q++)
                    for (int j = 0; j < n; j++)
                        X[i][j] += W[i][q] * Y[q][j];
            }}
        }}"""
        run(self.engine, text, {"r": rows, "n": n}, W=w, X=x, Y=self.ops.empty((rows, n)))

    def _update(self, x: Any, rows: tuple[int, int], done: tuple[int, int]) -> None:
        """``X[rows] -= T[rows, done]·X[done]`` (a GEMM on a dense copy of that block)."""
        (r0, r1), (d0, d1) = rows, done
        if self.trans:  # T[rows, done] = A[done, rows]ᵀ
            panel, decl, elem = self.ops.copy(self.a[d0:d1, r0:r1]), "P[k][m]", "P[p][i]"
        else:
            panel, decl, elem = self.ops.copy(self.a[r0:r1, d0:d1]), "P[m][k]", "P[i][p]"
        t, n = self.t, int(x.shape[1])
        text = f"""void update(int m, int n, int k, {t} {decl}, {t} Z[k][n], {t} Y[m][n]) {{
            for (int i = 0; i < m; i++)
                for (int p = 0; p < k; p++)
                    for (int j = 0; j < n; j++)
                        Y[i][j] -= {elem} * Z[p][j];
        }}"""
        sizes = {"m": r1 - r0, "n": n, "k": d1 - d0}
        run(self.engine, text, sizes, P=panel, Z=x[d0:d1], Y=x[r0:r1])


def inverse_text(t: str, forward: bool, trans: bool, unit: bool, offset: int, width: int) -> str:
    """The loop nest inverting ``q`` diagonal blocks of ``T = op(A)`` of ``width``
    rows from row ``offset``: ``W[b]`` solves ``T_bb·W[b] = I`` column by column,
    reading ``T(i, p)`` only for ``p`` on the diagonal's solved side (``A``'s
    stored triangle), the diagonal only when not ``unit``."""

    def T(i: str, p: str) -> str:
        row, col = (p, i) if trans else (i, p)
        return f"A[{offset} + {width} * b + {row}][{offset} + {width} * b + {col}]"

    diagonal = "1" if unit else f"1 / {T('j', 'j')}"
    divide = "" if unit else f"W[b][i][j] /= {T('i', 'i')};"
    rows, terms = (
        (f"for (int i = j + 1; i < {width}; i++)", "for (int p = j; p < i; p++)")
        if forward
        else ("for (int i = j - 1; i >= 0; i--)", "for (int p = i + 1; p <= j; p++)")
    )
    return f"""void inverse(int s, int q, {t} A[s][s], {t} W[q][{width}][{width}]) {{
        for (int b = 0; b < q; b++)
            for (int j = 0; j < {width}; j++) {{
                for (int i = 0; i < {width}; i++)
                    W[b][i][j] = 0;
                W[b][j][j] = {diagonal};
                {rows} {{
                    {terms}
                        W[b][i][j] -= {T("i", "p")} * W[b][p][j];
                    {divide}
                }}
            }}
    }}"""
