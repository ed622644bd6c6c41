"""Reduction tiles: the CUDA kernel of a two-deep loop nest whose loops carry
only reductions.

symv's loop nest over one stored triangle is the example::

    for (i = 0; i < n; i++)
        for (j = 0; j <= i; j++) {
            z[i] += alpha * A[i][j] * x[j];
            if (j < i) z[j] += alpha * A[i][j] * x[i];
        }

Neither loop is parallel (``z[j]`` is updated by every ``i``, ``z[i]`` by every
``j``), but every dependence they carry orders two accumulations into one
array (:func:`einkern.ir.affine.reduction_dependence`): the instances may run in
any order if the updates are combined.  Such a nest — every statement a
``+=``/``-=`` whose target is indexed by the outer iterator alone (a *row*
reduction) or by the inner one alone (a *column* reduction), no statement
reading an array the nest accumulates into — is mapped like MAGMA's symv:

* the domain is cut into tiles of :data:`TILE_ROWS` x (32·:data:`COLUMNS_PER_THREAD`)
  iterations, only the tiles that hold a point launched
  (:func:`einkern.gpu.affine_tiles.tile_plan`); a block of 8 warps reads its tile
  row by row, a warp along the contiguous inner index (coalesced), each thread
  :data:`ROWS_PER_THREAD` rows apart by 8 (independent loads in flight);
* each thread keeps a partial sum per row (row reductions) and per column
  (column reductions) in registers — so every element is read once even when
  two statements use it (symv's ``A[i][j]``);
* the partial sums meet in shared memory (one barrier), and one thread per row
  and per column of the tile adds the tile's sum to the target with one
  ``atomicAdd`` (the order of the additions varies from run to run: results
  agree to rounding).

The statements' guards and bounds are tested per point, so the tiles on a
triangle's edge are exact.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import islpy as isl

from ..ir import affine as A
from ..lang import cfront_nodes as N
from . import kir
from .affine_exprs import (
    INDEX,
    affine_value,
    element_offset,
    kernel_params,
    plus,
    statement_store,
)
from .affine_tiles import TilePlan, select_tree, tile_plan
from .ctext import mangle

LANES = 32
WARPS = 8
THREADS = LANES * WARPS
#: Rows of the tile each thread reads (8 apart): that many loads in flight.
ROWS_PER_THREAD = 8
TILE_ROWS = WARPS * ROWS_PER_THREAD
#: Consecutive tiles of one tile row a block reads: the row sums stay in registers
#: across them, and the block's combine step and atomics are shared by them.
TILES_PER_BLOCK = 1
#: Columns of the tile each thread reads (32 apart): with 8 rows, 16 loads in
#: flight per thread (H100: 16 loads beat 8 and 32 in fp32 and fp64, docs/affine.md).
COLUMNS_PER_THREAD = 2
_PAD = LANES + 1  # shared row length of the row partials (no bank conflicts)


@dataclass(frozen=True)
class ReductionNest:
    """A nest that reduction tiles can run: its two iterators and its statements
    split into row reductions (target indexed by ``outer``) and column
    reductions (by ``inner``)."""

    outer: str
    inner: str
    rows: tuple[N.AStatement, ...]
    columns: tuple[N.AStatement, ...]

    @property
    def statements(self) -> tuple[N.AStatement, ...]:
        return self.rows + self.columns


def reduction_nest(
    problem: A.AffineProblem, statements: tuple[N.AStatement, ...]
) -> ReductionNest | str:
    """The nest of ``statements`` (one outer nest of the program) as a
    :class:`ReductionNest`, or the sentence saying why it is not one."""
    function = problem.function
    if not statements or any(len(s.loops) != 2 for s in statements):
        return "not a two-deep loop nest"
    outer, inner = statements[0].loops[0].iterator, statements[0].loops[1].iterator
    if any(s.iterators != (outer, inner) for s in statements):
        return "its statements do not share the two loops' iterators"
    written = {s.target.array for s in statements}
    rows, columns = [], []
    for s in statements:
        if s.op not in ("+=", "-="):
            return f"{s.name} is not an accumulation (+= or -=)"
        if function.array(s.target.array).dtype not in ("float32", "float64"):
            return f"{s.name} accumulates into a {function.array(s.target.array).dtype} array"
        if any(r.array in written for r in N.refs(s.rhs)):
            return f"{s.name} reads an array the nest accumulates into"
        used = {n for aff in s.target.subscripts for n in aff.names()} - set(function.sizes)
        if used == {outer}:
            rows.append(s)
        elif used == {inner}:
            columns.append(s)
        else:
            return f"{s.name}'s target is not indexed by exactly one of {outer}, {inner}"
    keys = {A.loop_key(s, d) for s in statements for d in (1, 2)}
    if not all(A.loop_parallel(function, key, reductions=True) for key in keys):
        return "its loops carry dependences other than reductions"
    return ReductionNest(outer, inner, tuple(rows), tuple(columns))


@functools.lru_cache(maxsize=64)
def _bounds(problem: A.AffineProblem, statement: N.AStatement, keep: str) -> tuple[int, int] | None:
    """The smallest and largest value of iterator ``keep`` over the statement's
    instances (None when it has none)."""
    domain = A.statement_instances(problem, statement)
    position = statement.iterators.index(keep)
    other = 1 - position
    line = domain.project_out(isl.dim_type.set, other, 1)
    if line.is_empty():
        return None
    low = line.lexmin().sample_point().get_coordinate_val(isl.dim_type.set, 0)
    high = line.lexmax().sample_point().get_coordinate_val(isl.dim_type.set, 0)
    return int(low.to_python()), int(high.to_python())


def _row_ranges(problem: A.AffineProblem, nest: ReductionNest, start: int, stop: int):
    """Each outer value's ``[low, high)`` of the inner iterator over the nest's
    loop bounds (guards ignored: a superset)."""
    ranges = []
    env = dict(problem.sizes)
    for value in range(start, stop):
        low, high = None, None
        env[nest.outer] = value
        for s in nest.statements:
            loop = s.loops[1]
            first = max(a.value(env) for a in loop.lower)
            last = min(a.value(env) for a in loop.upper)
            if last >= first:
                low = first if low is None else min(low, first)
                high = last + 1 if high is None else max(high, last + 1)
        ranges.append((low, high) if low is not None and high is not None else (0, 0))
    return ranges


def _inside(problem: A.AffineProblem, s: N.AStatement, values: dict[str, kir.Expr]) -> kir.Expr:
    """The statement's loop bounds and guards at the point ``values``."""
    tests: list[kir.Expr] = []
    for loop in s.loops:
        it = values[loop.iterator]
        tests += [kir.Op(">=", it, affine_value(problem, a, values)) for a in loop.lower]
        tests += [kir.Op("<=", it, affine_value(problem, a, values)) for a in loop.upper]
    for guard in s.guards:
        value = affine_value(problem, guard.aff, values)
        tests.append(kir.Op("==" if guard.equal else ">=", value, kir.Int(0)))
    return _all(tests)


def reduction_kernel(
    problem: A.AffineProblem, nest: ReductionNest, name: str, ctype: str
) -> kir.Kernel | None:
    """The reduction-tile kernel of ``nest``, its comment saying why (None when the
    nest has no instance)."""
    live = [s for s in nest.statements if _bounds(problem, s, nest.outer) is not None]
    if not live:
        return None
    outer_loop = live[0].loops[0]
    env = dict(problem.sizes)
    start = max(a.value(env) for a in outer_loop.lower)
    stop = min(a.value(env) for a in outer_loop.upper) + 1
    per_thread = COLUMNS_PER_THREAD
    columns = LANES * per_thread
    ranges = _row_ranges(problem, nest, start, stop)
    plan = tile_plan(ranges, TILE_ROWS, columns, TILES_PER_BLOCK)
    if plan is None:
        return None
    rows = tuple(s for s in nest.rows if s in live)
    cols = tuple(s for s in nest.columns if s in live)
    largest = max([problem.numel(a.name) for a in problem.function.arrays] + [stop, plan.origin])
    index = "int" if largest + (TILE_ROWS + columns) * plan.run < 2**31 else INDEX
    layout = _Layout(start, plan.origin, columns, per_thread, plan, index)
    body = (
        kir.PerThread(_accumulate(problem, nest, rows, cols, layout)),
        kir.PerThread(_spill_rows(rows)),
        kir.Barrier(),
        kir.PerThread(_combine(problem, nest, rows, cols, layout, ctype)),
    )
    thread_vars = tuple(
        v
        for v in (
            kir.ThreadVar("row_sum", ctype, ROWS_PER_THREAD * len(rows)) if rows else None,
            kir.ThreadVar("column_sum", ctype, per_thread * len(cols)) if cols else None,
        )
        if v is not None
    )
    shared = tuple(
        [kir.SharedArray(f"rows_{k}", ctype, TILE_ROWS * _PAD) for k in range(len(rows))]
        + [
            kir.SharedArray(f"columns_{k}", ctype, WARPS * columns * plan.run)
            for k in range(len(cols))
        ]
    )
    per_block = (
        f"{plan.run} consecutive tiles of a tile row per block (row sums kept in "
        "registers across them)"
        if plan.run > 1
        else "one tile per block"
    )
    reason = (
        f"loops {nest.outer} x {nest.inner} carry only reductions (+= into "
        f"{', '.join(sorted({s.target.array for s in live}))}): reduction tiles of "
        f"{TILE_ROWS} x {columns} iterations, {THREADS} threads ({nest.inner} along the "
        f"warps, {ROWS_PER_THREAD} rows per thread), {per_block}; partial sums per row "
        "and column combined in shared memory and added with one atomicAdd per row and "
        f"column; {plan.tiles} of the bounding box's {plan.box} tiles in {plan.blocks} "
        "blocks"
    )
    params = kernel_params(problem, {s.target.array for s in live}, ())
    return kir.Kernel(
        name, params, THREADS, plan.blocks, thread_vars, shared, body, index, comment=reason
    )


@dataclass(frozen=True)
class _Layout:
    start: int  # outer value of tile row 0
    origin: int  # inner value of tile column 0
    columns: int  # tile width
    per_thread: int  # columns per thread (32 apart)
    plan: TilePlan
    index: str  # C type of indices: int when every offset fits

    def declare(self) -> tuple[kir.Stmt, ...]:
        """``tile_row``, ``tile_first`` and ``tile_end``: the first outer value of
        this block's tiles, the first inner value of its first tile and of its tile
        row's last tile (declared at the start of a section that uses them)."""
        plan = self.plan
        b = kir.BlockIdx()
        starts = [first for first, _, _ in plan.entries]
        q = select_tree(b, starts, [t for _, t, _ in plan.entries])
        shift = select_tree(b, starts, [d for _, _, d in plan.entries])
        last = select_tree(b, starts, list(plan.lasts))
        row = plus(kir.Op("*", q, kir.Int(TILE_ROWS)), kir.Int(self.start))
        first = kir.Op("+", kir.Op("*", b, kir.Int(plan.run)), shift)
        width = kir.Int(self.columns)
        return (
            kir.Declare("tile_row", self.index, row),
            kir.Declare(
                "tile_first", self.index, plus(kir.Op("*", first, width), kir.Int(self.origin))
            ),
            kir.Declare(
                "tile_end", self.index, plus(kir.Op("*", last, width), kir.Int(self.origin))
            ),
        )

    def column_of(self, t: kir.Expr) -> kir.Expr:
        """The first inner value of the block's tile ``t``."""
        return plus(kir.Var("tile_first"), kir.Op("*", t, kir.Int(self.columns)))

    @staticmethod
    def tile() -> tuple[kir.Expr, kir.Expr]:
        return kir.Var("tile_row"), kir.Var("tile_column")


def _unrolled(var: str, count: int, body: tuple[kir.Stmt, ...]) -> kir.For:
    """``for var in [0, count)``, fully unrolled."""
    return kir.For(var, kir.Int(0), kir.Int(count), 1, body, -1)


def _warp() -> kir.Expr:
    return kir.Op("/", kir.ThreadIdx(), kir.Int(LANES))


def _lane() -> kir.Expr:
    return kir.Op("%", kir.ThreadIdx(), kir.Int(LANES))


def _accumulate(problem, nest: ReductionNest, rows, cols, layout: _Layout) -> tuple[kir.Stmt, ...]:
    """Zero the row sums, then for each of the block's tiles that exists: zero the
    column sums, add every point of the thread's rows and columns, and put the
    column sums in shared memory."""
    row0, column0 = layout.tile()
    out: list[kir.Stmt] = list(layout.declare())
    if rows:
        out.append(_zero("row_sum", ROWS_PER_THREAD * len(rows)))
    corners = [
        {nest.outer: plus(row0, kir.Int(di)), nest.inner: plus(column0, kir.Int(dj))}
        for di in (0, TILE_ROWS - 1)
        for dj in (0, layout.columns - 1)
    ]
    # the constraints are affine: a tile whose corners are inside every statement's
    # domain is inside it everywhere, and runs without per-point tests
    full = _all([_inside(problem, s, corner) for s in (*rows, *cols) for corner in corners])
    loops = [_points(problem, nest, rows, cols, layout, guarded) for guarded in (False, True)]
    tile: list[kir.Stmt] = []
    if cols:
        tile.append(_zero("column_sum", layout.per_thread * len(cols)))
    tile.append(kir.If(full, (loops[0],), (loops[1],)))
    tile += _spill_columns(cols, layout)
    t = kir.Var("t")
    body = (
        kir.Declare("tile_column", layout.index, layout.column_of(t)),
        kir.If(kir.Op("<=", kir.Var("tile_column"), kir.Var("tile_end")), tuple(tile)),
    )
    run = layout.plan.run
    out.append(kir.For("t", kir.Int(0), kir.Int(run), 1, body, -1 if run == 1 else 0))
    return tuple(out)


def _zero(array: str, count: int) -> kir.For:
    return _unrolled("z", count, (kir.Store(array, kir.Var("z"), kir.Float(0.0)),))


def _all(tests: list[kir.Expr]) -> kir.Expr:
    result = tests[0]
    for test in tests[1:]:
        result = kir.Op("&&", result, test)
    return result


def _points(problem, nest: ReductionNest, rows, cols, layout: _Layout, guarded: bool) -> kir.For:
    """The loops over the thread's points, adding each statement's value to its
    partial sum (``guarded``: where the point is one of the statement's instances)."""
    row0, column0 = layout.tile()
    i, j = kir.Var(nest.outer), kir.Var(nest.inner)
    values: dict[str, kir.Expr] = {nest.outer: i, nest.inner: j}
    point: list[kir.Stmt] = []
    for k, s in enumerate(rows):
        slot = plus(kir.Op("*", kir.Int(k), kir.Int(ROWS_PER_THREAD)), kir.Var("r"))
        point.append(_add(problem, s, values, "row_sum", slot, guarded))
    for k, s in enumerate(cols):
        slot = plus(kir.Op("*", kir.Int(k), kir.Int(layout.per_thread)), kir.Var("c"))
        point.append(_add(problem, s, values, "column_sum", slot, guarded))
    row = plus(kir.Op("+", row0, _warp()), kir.Op("*", kir.Var("r"), kir.Int(WARPS)))
    row_loop = _unrolled(
        "r",
        ROWS_PER_THREAD,
        (kir.Declare(nest.outer, layout.index, row), *point),
    )
    column = plus(kir.Op("+", column0, _lane()), kir.Op("*", kir.Var("c"), kir.Int(LANES)))
    return _unrolled(
        "c",
        layout.per_thread,
        (kir.Declare(nest.inner, layout.index, column), row_loop),
    )


def _add(problem, s: N.AStatement, values, sums: str, slot: kir.Expr, guarded: bool) -> kir.Stmt:
    """``sums[slot] += rhs`` (``-=``: minus), if ``guarded`` where the point is an
    instance of ``s``."""
    value = statement_store(problem, s, values).value
    add = kir.Store(sums, slot, value, s.op)
    return kir.If(_inside(problem, s, values), (add,)) if guarded else add


def _spill_rows(rows) -> tuple[kir.Stmt, ...]:
    """Every thread's row partial sums into shared memory."""
    out: list[kir.Stmt] = []
    for k in range(len(rows)):
        row = plus(_warp(), kir.Op("*", kir.Var("r"), kir.Int(WARPS)))
        value = kir.Load("row_sum", plus(kir.Int(k * ROWS_PER_THREAD), kir.Var("r")))
        store = kir.Store(f"rows_{k}", plus(kir.Op("*", row, kir.Int(_PAD)), _lane()), value)
        out.append(_unrolled("r", ROWS_PER_THREAD, (store,)))
    return tuple(out)


def _spill_columns(cols, layout: _Layout) -> list[kir.Stmt]:
    """The thread's column partial sums of tile ``t`` into shared memory (slot
    ``(t·warps + warp)·columns + column``)."""
    out: list[kir.Stmt] = []
    slot = kir.Op("+", kir.Op("*", kir.Var("t"), kir.Int(WARPS)), _warp())
    for k in range(len(cols)):
        column = plus(_lane(), kir.Op("*", kir.Var("c"), kir.Int(LANES)))
        value = kir.Load("column_sum", plus(kir.Int(k * layout.per_thread), kir.Var("c")))
        index = plus(kir.Op("*", slot, kir.Int(layout.columns)), column)
        out.append(_unrolled("c", layout.per_thread, (kir.Store(f"columns_{k}", index, value),)))
    return out


def _combine(problem, nest: ReductionNest, rows, cols, layout: _Layout, ctype: str):
    """Thread ``t`` sums row ``t`` of the block's rows, and entry ``t`` (``t +``
    threads, …) of its tiles' columns, and adds each to the target atomically where
    that row (column) holds instances of the statement."""
    row0, _ = layout.tile()
    t = kir.ThreadIdx()
    types = (ctype, layout.index)
    out: list[kir.Stmt] = list(layout.declare())
    for k, s in enumerate(rows):
        total = _sum(f"rows_{k}", kir.Op("*", t, kir.Int(_PAD)), 1, LANES)
        first = kir.Op("<", t, kir.Int(TILE_ROWS))
        out += _atomic(problem, s, nest.outer, plus(row0, t), total, first, types, k)
    entries = layout.plan.run * layout.columns
    for k, s in enumerate(cols):
        e = plus(t, kir.Op("*", kir.Var("e"), kir.Int(THREADS)))
        tile = kir.Op("/", e, kir.Int(layout.columns))
        column = kir.Op("%", e, kir.Int(layout.columns))
        j = plus(layout.column_of(tile), column)
        first = kir.Op("*", kir.Op("*", tile, kir.Int(WARPS)), kir.Int(layout.columns))
        total = _sum(f"columns_{k}", plus(first, column), layout.columns, WARPS)
        exists = kir.Op(
            "&&",
            kir.Op("<", e, kir.Int(entries)),
            kir.Op("<=", layout.column_of(tile), kir.Var("tile_end")),
        )
        body = _atomic(problem, s, nest.inner, j, total, exists, types, k)
        out.append(_unrolled("e", -(-entries // THREADS), tuple(body)))
    return tuple(out)


def _sum(array: str, first: kir.Expr, stride: int, count: int) -> kir.Expr:
    total: kir.Expr = kir.Load(array, first)
    for m in range(1, count):
        total = kir.Op("+", total, kir.Load(array, plus(first, kir.Int(m * stride))))
    return total


def _atomic(problem, s, iterator, value, total, exists, types, k) -> list[kir.Stmt]:
    """``if (exists && low <= value <= high) atomicAdd(target, ±total)``: the
    target's element at iterator value ``value``, when some instance has it."""
    bounds = _bounds(problem, s, iterator)
    assert bounds is not None
    low, high = bounds
    ctype, index_type = types
    var = f"{'row' if iterator == s.loops[0].iterator else 'column'}_{k}"
    index = element_offset(problem, s.target, {iterator: kir.Var(var)})
    amount: kir.Expr = kir.Var(f"{var}_sum")
    if s.op == "-=":
        amount = kir.Neg(amount)
    inside = kir.Op(
        "&&",
        exists,
        kir.Op(
            "&&",
            kir.Op(">=", kir.Var(var), kir.Int(low)),
            kir.Op("<=", kir.Var(var), kir.Int(high)),
        ),
    )
    atomic = (
        kir.Declare(f"{var}_sum", ctype, total),
        kir.Store(mangle("t", s.target.array), index, amount, kir.ATOMIC_ADD),
    )
    return [kir.Declare(var, index_type, value), kir.If(inside, atomic)]
