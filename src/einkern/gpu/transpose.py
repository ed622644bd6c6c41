"""einkern's own transpose kernel: a pure permutation statement (``At[k,i] = A[i,k]``,
any rank, ``=``/``+=``/``-=``) through a shared-memory tile, near copy bandwidth.

A statement is a *transpose* when its right-hand side is one access of another
tensor with the output's indices, each once, and the input's stride-1 index
(``x_in``) differs from the output's (``x_out``); a plain copy (same stride-1
index) is coalesced on both sides already and keeps the ordinary mappings.

The mapping (:func:`transpose_mapping`, strategy ``"transpose"``): a block tile
of ``TILE × TILE`` elements (``SMALL_TILE`` for short stride-1 indices) over
``x_out`` (``TILE`` threads, the fastest) and ``x_in`` (``ROWS`` threads,
``TILE / ROWS`` elements each, cyclic); every other
index goes to the grid with tile 1.  The kernel (:func:`build_transpose`, a
builder pass that lowering dispatches to):

1. each thread reads ``TILE / ROWS`` elements with its fast coordinate along
   ``x_in`` (a warp reads one coalesced run of the input) into a shared tile
   ``[x_out][x_in]``, its rows padded by one element (no bank conflicts when
   read across);
2. a barrier;
3. each thread writes its register tile of the mapping (fast coordinate along
   ``x_out``: a warp writes one coalesced run of the output), reading the
   shared tile across.

Edges are guarded (tiles need not divide the extents).
"""

from __future__ import annotations

import math

from ..ir.nodes import Access, Statement
from ..ir.task import Task
from ..semantics import C_TYPE
from . import exprs as E
from . import kir
from .builder import KernelBuilder
from .device import DeviceLimits
from .mapping import Mapping, ParallelTile

STRATEGY = "transpose"
#: The block tile's side (elements) and the threads across it: 32 × 8 threads,
#: 4 elements each; ``SMALL_TILE`` (16 × 8 threads, 2 each) when either stride-1
#: index has at most 16 elements, so that threads are not left idle.
TILE = 32
SMALL_TILE = 16
ROWS = 8


def transpose_indices(task: Task) -> tuple[str, str] | None:
    """``(x_in, x_out)`` when the task is one transpose statement (see the module
    docstring), else None."""
    if not task.single:
        return None
    statement = task.statement
    source = statement.rhs
    if not isinstance(source, Access) or source.tensor == statement.output.tensor:
        return None
    out = statement.output
    if sorted(source.indices) != sorted(out.indices) or len(set(out.indices)) != len(out.indices):
        return None
    program = task.program
    x_in = _stride_one(program.tensor(source.tensor).layout, source.indices)
    x_out = _stride_one(program.tensor(out.tensor).layout, out.indices)
    if x_in is None or x_out is None or x_in == x_out:
        return None
    return x_in, x_out


def _stride_one(layout: str, indices: tuple[str, ...]) -> str | None:
    if not indices:
        return None
    return indices[-1] if layout == "row" else indices[0]


def transpose_mapping(task: Task) -> Mapping | None:
    """The transpose mapping of ``task``, or None when it is not a transpose."""
    found = transpose_indices(task)
    if found is None:
        return None
    x_in, x_out = found
    statement = task.statement
    program = task.program
    problem = task.problem
    small = min(problem.index_size(statement, x_in), problem.index_size(statement, x_out))
    side = SMALL_TILE if small <= SMALL_TILE else TILE
    out = statement.output
    order = out.indices if program.tensor(out.tensor).layout == "column" else out.indices[::-1]
    others = tuple(i for i in order if i not in (x_in, x_out))
    reason = (
        f"transpose: {statement.rhs} is a permutation of {out.tensor}'s indices with "
        f"another stride-1 index ({x_in} in, {x_out} out): {side}×{side} tiles through "
        "shared memory, read coalesced along the input, written coalesced along the output"
    )
    return Mapping(
        STRATEGY,
        (ParallelTile(x_out, side, side), ParallelTile(x_in, side, ROWS, cyclic=True)),
        grid_order=(x_out, x_in, *others),
        boundary="guard",
        reasons=(reason,),
    )


def build_transpose(b: KernelBuilder) -> kir.Kernel:
    """The transpose kernel for the builder's task (module docstring)."""
    statement = b.statement
    found = transpose_indices(b.task)
    if found is None:
        raise ValueError(f"{statement} is not a transpose")
    x_in, x_out = found
    source = statement.rhs
    assert isinstance(source, Access)
    side, rows = b.tiles[x_out].tile, b.tiles[x_in].threads
    fast, slow = f"t_{x_out}", f"t_{x_in}"  # the thread's coordinates (mapping's roles)
    body: list[kir.Stmt] = [
        kir.Assign(fast, E.mod(kir.ThreadIdx(), side)),
        kir.Assign(slow, E.mod(E.div(kir.ThreadIdx(), side), rows)),
    ]
    b.thread_vars += [kir.ThreadVar(fast, b.index_type), kir.ThreadVar(slow, b.index_type)]
    stride = 1
    for index in b.grid_order:
        count = math.ceil(b.size(index) / b.tiles[index].tile)
        b.thread_vars.append(kir.ThreadVar(f"b_{index}", b.index_type))
        coordinate = E.mod(E.div(kir.BlockIdx(), stride), count)
        body.append(kir.Assign(f"b_{index}", E.mul(coordinate, E.const(b.tiles[index].tile))))
        stride *= count
    tile = "tile"
    b.shared.append(kir.SharedArray(tile, b.ctype, side * (side + 1)))
    load: list[kir.Stmt] = []
    store: list[kir.Stmt] = []
    for step in range(side // rows):
        across = E.add(kir.Var(slow), E.const(step * rows))
        # read: the fast coordinate runs along x_in
        coords = _coords(b, {x_in: kir.Var(fast), x_out: across})
        value = kir.Load(f"p_{source.tensor}", _offset(b, source, coords))
        slot = E.add(E.mul(across, E.const(side + 1)), kir.Var(fast))
        load.append(kir.If(_inside(b, coords, (x_in, x_out)), (kir.Store(tile, slot, value),)))
        # write: the fast coordinate runs along x_out
        coords = _coords(b, {x_out: kir.Var(fast), x_in: across})
        slot = E.add(E.mul(kir.Var(fast), E.const(side + 1)), across)
        out = statement.output
        write = kir.Store(
            f"p_{out.tensor}", _offset(b, out, coords), kir.Load(tile, slot), statement.op
        )
        store.append(kir.If(_inside(b, coords, (x_in, x_out)), (write,)))
    sections: tuple[kir.Section, ...] = (
        kir.PerThread(tuple(body) + tuple(load)),
        kir.Barrier(),
        kir.PerThread(tuple(store)),
    )
    return kir.Kernel(
        name=b.name,
        params=_params(b, statement, source),
        threads=b.nthreads,
        blocks=b.blocks(),
        thread_vars=tuple(b.thread_vars),
        shared=tuple(b.shared),
        body=sections,
        index_type=b.index_type,
        comment=f"{statement}  [{STRATEGY}]",
        meta=(("compute_type", b.ctype),),
    )


def _coords(b: KernelBuilder, local: dict[str, kir.Expr]) -> dict[str, kir.Expr]:
    """Global coordinates: block base plus ``local`` along the two tiled indices."""
    return {
        index: E.add(kir.Var(f"b_{index}"), local.get(index, E.const(0))) for index in b.parallel
    }


def _inside(b: KernelBuilder, coords: dict[str, kir.Expr], tiled: tuple[str, ...]) -> kir.Expr:
    conditions = [E.less(coords[i], E.const(b.size(i))) for i in tiled]
    return E.conj(conditions) or kir.Int(1)


def _offset(b: KernelBuilder, access: Access, coords: dict[str, kir.Expr]) -> kir.Expr:
    strides = b.problem.strides(access.tensor)
    return E.linear([(coords[i], s) for i, s in zip(access.indices, strides, strict=True)])


def _params(b: KernelBuilder, statement: Statement, source: Access) -> tuple[kir.Param, ...]:
    used = {statement.output.tensor, source.tensor}
    return tuple(
        kir.Param(
            f"p_{t.name}",
            C_TYPE[t.dtype],
            True,
            b.problem.numel(t.name),
            readonly=t.name != statement.output.tensor,
        )
        for t in b.program.tensors
        if t.name in used
    )


#: Fraction of the DRAM bandwidth a tiled transpose reaches (a copy's, less the
#: edges and the barrier): an estimate until scripts/gpu_rewrite.sh measures it.
BANDWIDTH_FRACTION = 0.8


def predicted_transpose_time(task: Task, limits: DeviceLimits) -> float:
    """Seconds for a transpose on ``limits``: its bytes (the input read, the
    output written, and read for an update) at :data:`BANDWIDTH_FRACTION` of the
    DRAM bandwidth, or its blocks at the GPU's rate of taking blocks in, whichever
    is longer.  Short stride-1 indices make many blocks: a 3 × 4 tile in a
    16 × 16 block moves 12 elements, and 2.8 million such blocks took 1.69 ms on
    an H100 where the bytes alone take 0.09 ms (docs/rewrites.md, "Transposes")."""
    statement = task.statement
    problem = task.problem
    passes = 1 if statement.op == "=" else 2
    moved = problem.nbytes(statement.output.tensor) * passes + sum(
        problem.nbytes(a.tensor) for a in statement.reads() if a != statement.output
    )
    seconds = moved / (limits.dram_bandwidth * BANDWIDTH_FRACTION)
    mapping = transpose_mapping(task)
    if mapping is None:
        return seconds
    blocks = mapping.blocks(problem, statement)
    return max(seconds, blocks * limits.block_seconds / limits.sm_count)
