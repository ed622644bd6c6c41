"""An analytic time model of one CPU loop nest (for model-guided search).

The nest is flattened into loops, outermost first (tile loops, then point
loops, reduction loops where the schedule puts them).  Going outwards from the
innermost loop, the bytes each access touches grow; the outermost level whose
total footprint still fits in the cache bounds reuse, and every access is
re-read once per iteration of the loops outside it.  Time is the larger of
compute (flops at a scalar or vector rate: the innermost loop vectorises when
every access is contiguous or invariant in it and it is not a floating-point
reduction) and memory traffic over bandwidth, on the threads the OpenMP loop
keeps busy, plus loop and parallel-region overheads.  A statement the schedule
runs as BLAS calls (:mod:`.blas`) takes its flops at :data:`BLAS_FLOPS` per
thread, or its three tensors once over the bandwidth when that is longer, plus
:data:`BLAS_CALL_S` per call; a copy (a permutation, such as TTGT's) streams both
tensors (:func:`copy_seconds`).  The constants describe a generic core; only the
ranking of variants (and of the rewrite plan's candidates) matters.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from ...ir.analysis import statement_flops
from ...ir.nodes import Access, Problem, Statement
from .blas import Gemm, gemm_of
from .schedule import (
    LoopSchedule,
    effective_tiles,
    is_buffered,
    top_level_sums,
)

CACHE_BYTES = 1 << 20  # per core
LINE_BYTES = 64
VECTOR_BYTES = 32
SCALAR_FLOPS = 2e9  # per core
CORE_BANDWIDTH = 10e9  # bytes/s
TOTAL_BANDWIDTH = 40e9
LOOP_OVERHEAD_S = 1e-9  # per execution of the innermost loop
PARALLEL_OVERHEAD_S = 3e-6
#: BLAS's rate per thread by routine: two FMA units of 4 doubles at 2 GHz
#: (4x the generated loops' vector rate; the 2-core development machine's
#: OpenBLAS ran 35-70 GFLOP/s per core in float64, AVX-512)
BLAS_FLOPS = {"dgemm": 32e9, "sgemm": 64e9}
BLAS_CALL_S = 1e-6


@dataclass(frozen=True)
class Loop:
    index: str
    trip: int  # iterations


def threads() -> int:
    """OpenMP threads: ``$OMP_NUM_THREADS`` when set, else the usable CPUs."""
    configured = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def loop_nest(problem: Problem, statement: Statement, loops: LoopSchedule) -> list[Loop]:
    """The loops of the schedule, outermost first (sums of a buffered statement are
    treated as one nest)."""
    size = {i: problem.index_size(statement, i) for i in statement.indices}
    tiles = effective_tiles(problem, statement, loops)

    def point(index: str) -> Loop:
        return Loop(index, tiles.get(index, size[index]))

    tile_loops = [Loop(i, -(-size[i] // tiles[i])) for i in loops.order if i in tiles]
    reductions = list(dict.fromkeys(statement.reduction_indices))
    if not is_buffered(problem, statement, loops):
        return tile_loops + [point(i) for i in loops.order] + [Loop(r, size[r]) for r in reductions]
    top = {i for s in top_level_sums(statement.rhs) for i in s.indices}
    reduction_tiles = [Loop(r, -(-size[r] // tiles[r])) for r in reductions if r in tiles]
    split = len(loops.order) - loops.inner
    return (
        tile_loops
        + reduction_tiles
        + [point(i) for i in loops.order[:split]]
        + [point(r) if r in top else Loop(r, size[r]) for r in reductions]
        + [point(i) for i in loops.order[split:]]
    )


def _footprint(problem: Problem, access, spans: dict[str, int]) -> float:
    """Bytes of ``access`` touched when each index covers ``spans[index]`` values."""
    tensor = problem.program.tensor(access.tensor)
    dim = tensor.contiguous_dim()
    total = 1.0
    for position, index in enumerate(access.indices):
        if position == dim:
            total *= math.ceil(spans.get(index, 1) * tensor.itemsize / LINE_BYTES) * LINE_BYTES
        else:
            total *= spans.get(index, 1)
    return total if dim is not None else max(total, float(LINE_BYTES))


def _vector_width(problem: Problem, statement: Statement, nest: list[Loop]) -> int:
    if not nest:
        return 1
    index = nest[-1].index
    if index not in statement.output.indices:
        return 1  # a floating-point reduction: not vectorised without -ffast-math
    widest = 1
    for access in (statement.output, *statement.reads()):
        if index not in access.indices:
            continue
        tensor = problem.program.tensor(access.tensor)
        dim = tensor.contiguous_dim()
        if dim is None or access.indices[dim] != index:
            return 1
        widest = max(widest, VECTOR_BYTES // tensor.itemsize)
    return widest


def _busy_threads(iterations: int) -> float:
    """Threads kept busy on average by ``iterations`` shared out statically."""
    return iterations / math.ceil(iterations / threads())


def blas_seconds(problem: Problem, gemm: Gemm) -> float:
    """Predicted run time of a statement's BLAS calls (module docstring)."""
    compute = gemm.flops / (BLAS_FLOPS[gemm.routine] * threads())
    tensors = sum(problem.nbytes(t) for t in (gemm.a, gemm.b, gemm.c))
    return max(compute, tensors / TOTAL_BANDWIDTH) + gemm.calls * BLAS_CALL_S


def copy_seconds(problem: Problem, statement: Statement, loops: LoopSchedule) -> float | None:
    """Predicted run time of a copy (the right-hand side one access, a permutation
    of the output's indices): both tensors once over the bandwidth of the threads
    used, twice that when the innermost loop is not contiguous in both (a
    transpose); None for any other statement.  (The nest model charges a transpose
    a cache line per element once the tensor passes :data:`CACHE_BYTES`, 5-10x
    what the TTGT copies took on the development machine.)"""
    source = statement.rhs
    if not isinstance(source, Access) or sorted(source.indices) != sorted(statement.output.indices):
        return None
    nbytes = problem.nbytes(statement.output.tensor) + problem.nbytes(source.tensor)
    workers = 1.0
    if loops.collapse > 0:
        workers = _busy_threads(
            math.prod(problem.index_size(statement, i) for i in loops.order[: loops.collapse])
        )
    innermost = loops.order[-1] if loops.order else None
    strided = any(
        (dim := problem.program.tensor(a.tensor).contiguous_dim()) is not None
        and a.indices[dim] != innermost
        for a in (statement.output, source)
    )
    seconds = nbytes * (2 if strided else 1) / min(CORE_BANDWIDTH * workers, TOTAL_BANDWIDTH)
    return seconds + (PARALLEL_OVERHEAD_S if loops.collapse > 0 else 0.0)


def predicted_seconds(problem: Problem, statement: Statement, loops: LoopSchedule) -> float:
    """Predicted run time of ``statement`` under ``loops``."""
    if loops.blas and not isinstance(gemm := gemm_of(problem, statement), str):
        return blas_seconds(problem, gemm)
    copy = copy_seconds(problem, statement, loops)
    if copy is not None:
        return copy
    nest = loop_nest(problem, statement, loops)
    accesses = (statement.output, *statement.reads())
    level = len(nest)  # outermost loop whose footprint fits in cache
    spans: dict[str, int] = {}
    for depth in range(len(nest) - 1, -1, -1):
        loop = nest[depth]
        trial = {
            **spans,
            loop.index: min(
                spans.get(loop.index, 1) * loop.trip, problem.index_size(statement, loop.index)
            ),
        }
        if sum(_footprint(problem, a, trial) for a in accesses) > CACHE_BYTES:
            break
        spans, level = trial, depth
    outer = math.prod(loop.trip for loop in nest[:level])
    traffic = outer * sum(_footprint(problem, a, spans) for a in accesses)

    workers = 1.0
    if loops.collapse > 0:
        workers = _busy_threads(math.prod(loop.trip for loop in nest[: loops.collapse]))
    flops = statement_flops(problem, statement)
    compute = flops / (SCALAR_FLOPS * _vector_width(problem, statement, nest) * workers)
    memory = traffic / min(CORE_BANDWIDTH * workers, TOTAL_BANDWIDTH)
    innermost_runs = math.prod(loop.trip for loop in nest[:-1]) if nest else 1
    overhead = innermost_runs * LOOP_OVERHEAD_S / workers
    if loops.collapse > 0:
        overhead += PARALLEL_OVERHEAD_S
    return max(compute, memory) + overhead
