"""How the CPU code generator lays out each statement's loops.

A :class:`CpuSchedule` holds one :class:`LoopSchedule` per statement.  Code
generation takes a schedule as an argument, so the autotuner only has to produce
a different schedule; :func:`default_schedule` derives a sensible one from the
problem alone.

Tiling (optional, off by default).  A tiled parallel index ``p`` of extent ``N``
with tile ``T`` becomes a *tile loop* ``b_p = 0, T, 2T, ...`` in the outer band
and a *point loop* ``p = b_p .. min(b_p + T, N)`` in the inner band, so extents
that ``T`` does not divide are handled by a shorter last tile.  Tiling a
reduction index, or moving parallel point loops inside the reduction loops
(``inner``), makes the statement *buffered*: the outermost sums of the
right-hand side are accumulated per tile in a small per-thread array, one
reduction tile at a time, and the expression is evaluated from it at the end.

Accumulation (``accumulate``, one of :data:`ACCUMULATIONS`).  ``plain``: one
accumulator of the compute type runs over the whole sum (the error of a float32
sum of n terms grows like n·u, u = 2^-24).  ``blocked``: two-level summation,
a partial accumulator per block of about sqrt(n) terms added into the running
sum at the block's end (error ~ (b + n/b)·u); a buffered statement's block is
its reduction tile.  ``wide``: the terms, computed in
the compute type, are accumulated in double (float32 statements only; float64
ones accumulate plainly whatever this says).  Float64 sums are blocked from
:data:`LONG_FLOAT64_TERMS` terms on.  :func:`choose_accumulation` is the
rule the default schedule uses; docs/accuracy.md has the measurements.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ... import semantics
from ...gpu.accumulation import ACCURATE_TERMS  # float32 sums shorter: plain (both backends)
from ...ir.nodes import Expr, Problem, Statement, Sum, children, walk
from . import blas
from .blas import gemm_of

#: Statements doing fewer elementary operations than this run on one thread:
#: starting a parallel region costs more than it saves.
PARALLEL_MIN_WORK = 1 << 15

#: When the parallel loops outside the innermost one have at least this many
#: iterations in all, only they are collapsed into the OpenMP loop, leaving the
#: innermost (contiguous) loop whole inside each thread so it can vectorise.
OUTER_PARALLELISM = 64

#: Most elements of the per-thread sum buffers of one buffered statement
#: (they live on the stack of each OpenMP thread).
TILE_BUFFER_LIMIT = 4096

#: Shortest side (m, n or k of one call) for the ``blas`` rule (:func:`blas_rule`):
#: a GEMM with a shorter side is memory-bound or tiny, and OpenBLAS packs its panels
#: for nothing (docs/tuning.md, "BLAS calls").
BLAS_MIN_SIDE = 16

#: How sums accumulate (see the module docstring).
ACCUMULATIONS = ("plain", "blocked", "wide")

#: Float64 sums of at least this many terms are blocked too (their plain error,
#: 1e-13 at 10^7 terms, is within the tolerance but ~100x NumPy's; blocked: ~20x less).
LONG_FLOAT64_TERMS = 1 << 14


@dataclass(frozen=True)
class LoopSchedule:
    """Loop nest of one statement.

    ``order`` lists the statement's distinct parallel (output) indices, outermost
    loop first.  ``tiles`` gives a tile size to some parallel or reduction
    indices (a tile at least the index's extent means no tiling); ``inner`` is the
    number of innermost parallel point loops placed inside the reduction loops
    (buffered statements only).  The nest is the tile loops of the tiled parallel
    indices, then the point loops, both in ``order``; its first ``collapse``
    loops form the OpenMP ``parallel for`` (``collapse == 0``: one thread).
    Reduction loops always stay inside the parallel loops, so threads never
    write the same element."""

    order: tuple[str, ...]
    collapse: int
    tiles: tuple[tuple[str, int], ...] = ()
    inner: int = 0
    accumulate: str = "plain"
    #: the statement is one BLAS call per batch point (:mod:`.blas`); the loops
    #: above describe the generated code it replaces
    blas: bool = False

    def __post_init__(self) -> None:
        if self.accumulate not in ACCUMULATIONS:
            raise ValueError(f"accumulate {self.accumulate!r} (use {', '.join(ACCUMULATIONS)})")
        if len(set(self.order)) != len(self.order):
            raise ValueError(f"loop order repeats an index: {self.order}")
        tiled = [index for index, _ in self.tiles]
        if len(set(tiled)) != len(tiled):
            raise ValueError(f"tiles repeat an index: {self.tiles}")
        if any(not isinstance(size, int) or size < 1 for _, size in self.tiles):
            raise ValueError(f"tile sizes must be positive integers: {self.tiles}")
        if not 0 <= self.inner <= len(self.order):
            raise ValueError(f"inner {self.inner} out of range for order {self.order}")
        most = len(self.order) + sum(1 for index in tiled if index in self.order)
        if not 0 <= self.collapse <= most:
            raise ValueError(f"collapse {self.collapse} out of range for order {self.order}")

    def tile(self, index: str) -> int | None:
        """The tile size given to ``index``, or None."""
        return dict(self.tiles).get(index)


@dataclass(frozen=True)
class CpuSchedule:
    """One :class:`LoopSchedule` per statement of the program, in order.

    ``nests``: groups of consecutive statements (positions, ascending) compiled as
    one fused loop nest (:mod:`.fused`; the fusion planner chooses them); their
    members' loop schedules are not used."""

    statements: tuple[LoopSchedule, ...]
    nests: tuple[tuple[int, ...], ...] = ()


def parallel_indices(statement: Statement) -> tuple[str, ...]:
    """The statement's distinct output indices, in order of first appearance."""
    return tuple(dict.fromkeys(statement.output.indices))


def default_loop_order(problem: Problem, statement: Statement) -> tuple[str, ...]:
    """Parallel indices ordered by decreasing output stride.

    The innermost loop then walks the output's contiguous dimension, and the
    others follow the output's memory order (an index repeated in the output
    counts with its smallest stride, so it is placed as its innermost use)."""
    strides = problem.strides(statement.output.tensor)
    row = problem.program.tensor(statement.output.tensor).layout == "row"
    keys: dict[str, tuple[int, int]] = {}
    for position, (index, stride) in enumerate(zip(statement.output.indices, strides, strict=True)):
        # Larger stride first; ties (size-1 dimensions) in the layout's memory order.
        key = (-stride, position if row else -position)
        keys[index] = max(key, keys.get(index, key))
    return tuple(sorted(parallel_indices(statement), key=keys.__getitem__))


def statement_work(problem: Problem, statement: Statement) -> int:
    """Rough count of elementary operations the statement performs."""
    iterations = math.prod(problem.index_size(statement, i) for i in parallel_indices(statement))
    return iterations * _expr_work(problem, statement, statement.rhs)


def _expr_work(problem: Problem, statement: Statement, expr: Expr) -> int:
    """One per node, each sum's body counted once per term (without recursion)."""
    work: dict[int, int] = {}
    stack: list[tuple[Expr, bool]] = [(expr, False)]
    while stack:
        node, ready = stack.pop()
        if not ready:
            stack.append((node, True))
            stack.extend((child, False) for child in children(node))
            continue
        inner = 1 + sum(work[id(child)] for child in children(node))
        if isinstance(node, Sum):
            inner *= math.prod(problem.index_size(statement, i) for i in node.indices)
        work[id(node)] = inner
    return work[id(expr)]


#: Long reductions (at least this many terms) get cache tiles by default: parallel
#: tiles of ``PARALLEL_TILE`` and reduction tiles of ``REDUCTION_TILE`` (a GEMM-like
#: statement then reuses its operands from cache: a 512^3 SGEMM ran 22x faster on
#: the development VM; the tuner's best there, with 64/64/16 tiles too, 69x).
LONG_REDUCTION = 64
PARALLEL_TILE = 64
REDUCTION_TILE = 16
#: The smallest parallel tile made by halving a tile that covers its extent.
MIN_HALVED_TILE = 8
#: Sums of at least ``SHORT_SUM`` terms (and under :data:`LONG_REDUCTION`) get
#: register tiles: ``REGISTER_TILE`` on the last two output loops, the innermost
#: one inside the sum (a batched 9x166x112 product over 55 terms: 1.95 -> 0.39
#: ms on 2 cores, the tuner's best of 30 on that shape).
SHORT_SUM = 8
REGISTER_TILE = 8


@dataclass(frozen=True)
class LoopDecision:
    """The default loop schedule of one statement and the reasons for it, in the
    order the rules applied (what ``einkern emit --backend cpu --explain`` prints)."""

    schedule: LoopSchedule
    reasons: tuple[str, ...]


def default_loop_schedule(problem: Problem, statement: Statement) -> LoopSchedule:
    """Memory-order loops; parallel over the outer loops when there is enough work;
    cache tiles for long reductions over several output indices, register tiles
    for short ones and for long ones that cache tiles would not split (docs/tuning.md,
    "The CPU target")."""
    return decide_loop_schedule(problem, statement).schedule


def decide_loop_schedule(problem: Problem, statement: Statement) -> LoopDecision:
    """:func:`default_loop_schedule` with the reason for each choice."""
    loops = _decide_loops(problem, statement)
    accumulate, reason = choose_accumulation(problem, statement, loops.schedule)
    schedule = dataclasses.replace(loops.schedule, accumulate=accumulate)
    use, why = blas_rule(problem, statement)
    return LoopDecision(dataclasses.replace(schedule, blas=use), (*loops.reasons, why, reason))


def blas_rule(problem: Problem, statement: Statement) -> tuple[bool, str]:
    """The ``blas`` rule: a statement that is a GEMM in memory, no side of it shorter
    than :data:`BLAS_MIN_SIDE`, runs as BLAS calls; why, or why not."""
    if not blas.BLAS_ON_CPU:
        return False, "blas: off (einkern.backends.cpu.blas.BLAS_ON_CPU)"
    gemm = gemm_of(problem, statement)
    if isinstance(gemm, str):
        return False, f"blas: not a GEMM in memory ({gemm})"
    side = min(gemm.m, gemm.n, gemm.k)
    if side < BLAS_MIN_SIDE:
        return False, (
            f"blas: a GEMM of {gemm.m} x {gemm.n} x {gemm.k} per call, a side under"
            f" {BLAS_MIN_SIDE}: the generated loops"
        )
    addresses = blas.routine_addresses()
    if isinstance(addresses, str):
        return False, f"blas: {addresses}"
    return True, f"blas: {gemm.describe()}"


def longest_sum(problem: Problem, statement: Statement) -> int:
    """Terms of the statement's longest sum (0: it has none)."""
    return max(
        (
            math.prod(problem.index_size(statement, index) for index in node.indices)
            for node in walk(statement.rhs)
            if isinstance(node, Sum)
        ),
        default=0,
    )


def choose_accumulation(
    problem: Problem, statement: Statement, loops: LoopSchedule
) -> tuple[str, str]:
    """The accumulation rule ("accurate-sums"): float64 sums of fewer than
    :data:`LONG_FLOAT64_TERMS` terms, and float32 sums of fewer than
    :data:`ACCURATE_TERMS`, plain; longer float64 sums blocked where blocking
    splits them; longer float32 sums blocked
    (partials of about sqrt(n) terms, or the reduction tile of a buffered
    statement), except a buffered statement whose reductions are not tiled: wide
    (its buffer holds the running sums, and nothing splits them into blocks).
    Returns the choice and its reason."""
    dtype = semantics.compute_dtype(
        problem.program.tensor(statement.output.tensor).dtype,
        [problem.program.tensor(access.tensor).dtype for access in statement.reads()],
    )
    terms = longest_sum(problem, statement)
    if dtype != "float32":
        if terms < LONG_FLOAT64_TERMS or not _splits(problem, statement, loops):
            return "plain", f"accurate-sums: {dtype} sums of up to {terms:,} terms: plain"
        return "blocked", (
            f"accurate-sums: {dtype} sums of up to {terms:,} terms (at least "
            f"{LONG_FLOAT64_TERMS:,}) blocked as float32 ones are: free, and closer to "
            "NumPy's accuracy"
        )
    if terms < ACCURATE_TERMS:
        return "plain", (
            f"accurate-sums: float32 sums of at most {terms:,} terms (under "
            f"{ACCURATE_TERMS}) accumulate plainly: error bound n·u under the tolerance"
        )
    if not is_buffered(problem, statement, loops):
        return "blocked", (
            f"accurate-sums: float32 sums of up to {terms:,} terms add blocks of about "
            "sqrt(n) terms into partials, each added to the running sum at its end"
        )
    if _splits(problem, statement, loops):
        return "blocked", (
            f"accurate-sums: float32 sums of up to {terms:,} terms: each reduction tile "
            "sums into its own partial, added to the tile buffer at the tile's end (a "
            f"double buffer when it adds {ACCURATE_TERMS} or more partials)"
        )
    return "wide", (
        f"accurate-sums: float32 sums of up to {terms:,} terms in a buffer with untiled "
        "reductions accumulate in double"
    )


def _splits(problem: Problem, statement: Statement, loops: LoopSchedule) -> bool:
    """Whether blocked accumulation splits the statement's sums: always when it is
    not buffered (partials of about sqrt(n) terms), else when a reduction is tiled."""
    if not is_buffered(problem, statement, loops):
        return True
    return any(index not in loops.order for index in effective_tiles(problem, statement, loops))


def with_accumulation(problem: Problem, statement: Statement, loops: LoopSchedule) -> LoopSchedule:
    """``loops`` with the accumulation :func:`choose_accumulation` picks for it (the
    tuner's schedules get it this way: accuracy is not a tuning knob)."""
    return dataclasses.replace(loops, accumulate=choose_accumulation(problem, statement, loops)[0])


def _decide_loops(problem: Problem, statement: Statement) -> LoopDecision:
    """The loop nest of :func:`decide_loop_schedule` (accumulation not chosen yet)."""
    order = default_loop_order(problem, statement)
    output = statement.output.tensor
    if not order:
        return LoopDecision(
            LoopSchedule(order, 0), (f"{output} has no index: one iteration, on one thread",)
        )
    if len(order) == 1:
        reasons = [f"one loop, {order[0]}, over {output}"]
    else:
        reasons = [
            f"loops {', '.join(order)} follow {output}'s memory order (the innermost, "
            f"{order[-1]}, walks its smallest stride)"
        ]
    work = statement_work(problem, statement)
    if work < PARALLEL_MIN_WORK:
        reasons.append(
            f"about {work:,} operations, under {PARALLEL_MIN_WORK:,}: one thread "
            "(starting a parallel region would cost more than it saves)"
        )
        return LoopDecision(LoopSchedule(order, 0), tuple(reasons))
    if len(order) == 1:
        reasons.append(f"about {work:,} operations: OpenMP over the one loop {order[0]}")
        return LoopDecision(LoopSchedule(order, 1), tuple(reasons))
    reductions = tileable_reduction_indices(statement)
    terms = math.prod(problem.index_size(statement, index) for index in reductions)
    if reductions and terms >= LONG_REDUCTION:
        # cache tiles that split no reduction leave the sum innermost and scalar
        if all(problem.index_size(statement, index) <= REDUCTION_TILE for index in reductions):
            blocked = _register_tiles(problem, statement, order)
            if blocked is not None:
                reasons.append(
                    f"sums of {terms:,} terms over indices of at most {REDUCTION_TILE} each: "
                    f"cache tiles would not split them; {_register_reason(blocked, order)}"
                )
                return LoopDecision(blocked, tuple(reasons))
        tiles = {index: PARALLEL_TILE for index in order[-2:]}
        tiles.update({index: REDUCTION_TILE for index in reductions})
        # a tile as large as its extent leaves no tile loop to share out: halve
        # it, so that the threads still get tiles (a 64^3 GEMM: 3x faster)
        halved = []
        for index in order[-2:]:
            extent = problem.index_size(statement, index)
            if PARALLEL_TILE >= extent >= 2 * MIN_HALVED_TILE:
                tiles[index] = math.ceil(extent / 2)
                halved.append(index)
        tiled = LoopSchedule(order, 2, tuple(sorted(tiles.items())))
        refused = schedule_violation(problem, statement, tiled)
        if refused is None:
            reasons.append(
                f"sums of {terms:,} terms (at least {LONG_REDUCTION}): cache tiles of "
                f"{PARALLEL_TILE} on {', '.join(order[-2:])} and {REDUCTION_TILE} on "
                f"{', '.join(reductions)}, so operands are reused from cache; OpenMP over "
                "the two outer tile loops"
                + (
                    f" (halved on {', '.join(halved)}: a tile as large as its extent leaves "
                    "no tile loop to share out)"
                    if halved
                    else ""
                )
            )
            return LoopDecision(tiled, tuple(reasons))
        reasons.append(f"sums of {terms:,} terms, but no cache tiles: {refused}")
    elif reductions and terms >= SHORT_SUM:
        blocked = _register_tiles(problem, statement, order)
        if blocked is not None:
            reasons.append(
                f"sums of {terms:,} terms (from {SHORT_SUM} to {LONG_REDUCTION}): "
                + _register_reason(blocked, order)
            )
            return LoopDecision(blocked, tuple(reasons))
    outer = math.prod(problem.index_size(statement, index) for index in order[:-1])
    loops = "the outer loop has" if len(order) == 2 else "the outer loops have"
    if outer >= OUTER_PARALLELISM:
        reasons.append(
            f"{loops} {outer:,} iterations (at least "
            f"{OUTER_PARALLELISM}): OpenMP collapses them and leaves the innermost "
            f"loop {order[-1]} whole in each thread, to vectorise"
        )
        return LoopDecision(LoopSchedule(order, len(order) - 1), tuple(reasons))
    reasons.append(
        f"{loops} only {outer:,} iterations (under "
        f"{OUTER_PARALLELISM}): OpenMP collapses all {len(order)} loops"
    )
    return LoopDecision(LoopSchedule(order, len(order)), tuple(reasons))


def _register_tiles(
    problem: Problem, statement: Statement, order: tuple[str, ...]
) -> LoopSchedule | None:
    """The register-tiled schedule of a sum, or None when it does not fit: tiles of
    :data:`REGISTER_TILE` on the last two output loops (where their extent exceeds
    it), the innermost inside the sum."""
    tiles = {
        index: REGISTER_TILE
        for index in order[-2:]
        if problem.index_size(statement, index) > REGISTER_TILE
    }
    if not tiles:
        return None
    loops = LoopSchedule(order, 0, tuple(sorted(tiles.items())), inner=1)
    loops = dataclasses.replace(
        loops, collapse=min(2, collapsible_depth(problem, statement, loops))
    )
    return loops if schedule_violation(problem, statement, loops) is None else None


def _register_reason(loops: LoopSchedule, order: tuple[str, ...]) -> str:
    """Why a register-tiled schedule (:func:`_register_tiles`), in words."""
    tiles = ", ".join(f"{size} on {index}" for index, size in loops.tiles)
    return (
        f"register tiles ({tiles}) with the innermost loop {order[-1]} inside the sum, "
        f"so each operand element loaded feeds a vector of {order[-1]} outputs; OpenMP "
        "over the tile loops"
    )


def describe_loops(loops: LoopSchedule) -> str:
    """One line: order, OpenMP collapse, tiles and inner loops of a schedule."""
    parts = [
        f"order {', '.join(loops.order) or '-'}",
        f"OpenMP collapse {loops.collapse}" if loops.collapse else "one thread",
    ]
    if loops.tiles:
        parts.append("tiles " + ", ".join(f"{index}={size}" for index, size in loops.tiles))
    if loops.inner:
        parts.append(f"{loops.inner} point loop(s) inside the sums")
    if loops.accumulate != "plain":
        parts.append(f"{loops.accumulate} accumulation")
    if loops.blas:
        parts.append("BLAS calls instead")
    return "; ".join(parts)


def top_level_sums(expr: Expr) -> tuple[Sum, ...]:
    """Distinct sums of ``expr`` not nested in another sum, in pre-order."""
    found: dict[Sum, None] = {}
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, Sum):
            found.setdefault(node, None)
        else:
            stack.extend(reversed(children(node)))
    return tuple(found)


def tileable_reduction_indices(statement: Statement) -> tuple[str, ...]:
    """Reduction indices bound by the outermost sums (the ones tiling can split)."""
    seen: dict[str, None] = {}
    for node in top_level_sums(statement.rhs):
        for index in node.indices:
            seen.setdefault(index, None)
    return tuple(seen)


def effective_tiles(problem: Problem, statement: Statement, loops: LoopSchedule) -> dict[str, int]:
    """Tiles that split their loop: those smaller than the index's extent."""
    if not loops.tiles:
        return {}
    known = set(statement.indices)
    return {
        index: size
        for index, size in loops.tiles
        if index in known and size < problem.index_size(statement, index)
    }


def _buffered(loops: LoopSchedule, tiles: dict[str, int]) -> bool:
    return loops.inner > 0 or any(index not in loops.order for index in tiles)


def is_buffered(problem: Problem, statement: Statement, loops: LoopSchedule) -> bool:
    """True when the outermost sums are accumulated in per-tile buffers."""
    return _buffered(loops, effective_tiles(problem, statement, loops))


def buffer_shape(problem: Problem, statement: Statement, loops: LoopSchedule) -> tuple[int, ...]:
    """Per-sum buffer dimensions, one per parallel index in ``order``."""
    tiles = effective_tiles(problem, statement, loops)
    return tuple(tiles.get(i, problem.index_size(statement, i)) for i in loops.order)


def _collapsible(loops: LoopSchedule, tiles: dict[str, int]) -> int:
    depth = sum(1 for index in loops.order if index in tiles)
    if _buffered(loops, tiles):
        return depth
    for index in loops.order:
        if index in tiles:
            break
        depth += 1
    return depth


def collapsible_depth(problem: Problem, statement: Statement, loops: LoopSchedule) -> int:
    """How many loops of the nest may be collapsed: the tile loops, then (unbuffered)
    the leading point loops of untiled indices (rectangular, perfectly nested)."""
    return _collapsible(loops, effective_tiles(problem, statement, loops))


def schedule_violation(problem: Problem, statement: Statement, loops: LoopSchedule) -> str | None:
    """Why ``loops`` cannot lay out ``statement``, or None when it can."""
    if loops.blas and isinstance(gemm := gemm_of(problem, statement), str):
        return f"the statement cannot call BLAS: {gemm}"
    parallel = parallel_indices(statement)
    if len(loops.order) != len(parallel) or set(loops.order) != set(parallel):
        return f"loop order {loops.order} is not a permutation of the output indices {parallel}"
    if loops.tiles:
        allowed = set(loops.order) | set(tileable_reduction_indices(statement))
        for index, _ in loops.tiles:
            if index not in allowed:
                return f"index {index!r} cannot be tiled (not a parallel or outermost-sum index)"
    tiles = effective_tiles(problem, statement, loops)
    if _buffered(loops, tiles):
        sums = top_level_sums(statement.rhs)
        if not sums:
            return "tiling reductions or inner > 0 needs a sum in the statement"
        shape = [tiles.get(i, problem.index_size(statement, i)) for i in loops.order]
        elements = len(sums) * math.prod(shape)
        if elements > TILE_BUFFER_LIMIT:
            return (
                f"sum buffers of {elements} elements exceed {TILE_BUFFER_LIMIT}: "
                "tile the parallel indices more"
            )
    depth = _collapsible(loops, tiles)
    if loops.collapse > depth:
        return f"collapse {loops.collapse} exceeds the {depth} collapsible loops"
    return None


def check_schedule(problem: Problem, schedule: CpuSchedule) -> None:
    """Raise ValueError unless ``schedule`` fits the problem's statements."""
    statements = problem.program.statements
    if len(schedule.statements) != len(statements):
        raise ValueError(
            f"schedule has {len(schedule.statements)} loop nests for {len(statements)} statements"
        )
    for number, (loops, statement) in enumerate(zip(schedule.statements, statements, strict=True)):
        problem_found = schedule_violation(problem, statement, loops)
        if problem_found is not None:
            raise ValueError(f"statement {number}: {problem_found}")
