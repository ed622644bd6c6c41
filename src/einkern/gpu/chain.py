"""Producer–consumer chains as one kernel: statements that depend on one another
(Fousek's mapped functions: ``M1 = A·B; v1 = M1·c; s1 = ‖v1‖``) run one after
the other in every block of one kernel, a barrier between consecutive members.

The fusion legality (:func:`einkern.ir.fusion.legality`) gives the depth d of a
group: with each member's d outermost output dimensions (its *fused* indices,
outermost in memory first) identified, every dependence between members has
distance 0: a consumer reads, or overwrites, only what its own fused iteration
produced.  A block-local chain realises that on the GPU:

* every member tiles its fused indices alike (the same block tile at the same
  fused position in every member, the same order of them on the grid), so
  block b runs fused tile b of every member;
* every other parallel index of a member is covered whole by the block;
* so whatever a member reads of an earlier member's output was written by the
  same block, before the barrier that precedes the member (``__syncthreads``
  orders global as well as shared memory accesses within a block).

:func:`chain_mappings` gives the members such mappings: fused tiles of
:data:`TILE_CHOICES` (or the whole extent) along the three innermost fused
indices, threads of :data:`THREAD_CHOICES` spread over each member's tile
fastest index first (the rest of the tile becomes the thread's register tile),
no staging; the analytic model predicts each member and the least sum, less
the DRAM reads of what later members read of earlier members' outputs (the
block wrote it: L1/L2), wins.  :func:`why_not_chain` checks given mappings;
:func:`chain_kernel` lowers the members and composes them with
:func:`einkern.gpu.shared_compose.chain` (the block has the most threads of any
member; a member with fewer runs on the first threads).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, replace

from ..ir.fusion import alignment, fusibility
from ..ir.nodes import Problem
from ..ir.task import statement_task
from . import kir
from .builder import OnChipArray
from .chain_barriers import schedule
from .chain_memory import on_chip
from .device import H100, DeviceLimits
from .mapping import Mapping, Staging
from .normalize import reduction_of
from .shared_compose import chain
from .shared_input import thread_split
from .staging import natural_order

#: Block tiles tried along each of the two innermost fused indices.
TILE_CHOICES = (1, 2, 4, 8, 16, 32, 64, 128)

#: Threads per block tried (a member whose tile has fewer outputs gets one
#: thread per output).
THREAD_CHOICES = (64, 128, 256, 512)

#: Most outputs one thread computes in one member.
MAX_OUTPUTS_PER_THREAD = 16


@dataclass(frozen=True)
class Chain:
    """The members' mappings for one block-local chain kernel, its predicted
    seconds, and why it was chosen."""

    positions: tuple[int, ...]
    depth: int
    mappings: tuple[Mapping, ...]
    seconds: float
    reason: str


def dependent(problem: Problem, positions: tuple[int, ...]) -> bool:
    """Whether a dependence joins two of the statements."""
    return fusibility(problem.program).joining(tuple(sorted(positions))) is not None


def chain_depth(problem: Problem, positions: tuple[int, ...]) -> int:
    """Outer output dimensions the statements may share (0: not fusible)."""
    found = fusibility(problem.program).legality(tuple(positions))
    return found.depth if found.legal else 0


def fused_indices(problem: Problem, position: int, depth: int) -> tuple[str, ...]:
    """The statement's ``depth`` outermost output indices (outermost first)."""
    aligned = alignment(problem.program, position)
    assert aligned is not None and len(aligned) >= depth
    return tuple(index for index, _ in aligned[:depth])


def _why_not_members(problem: Problem, positions: tuple[int, ...], depth: int) -> str | None:
    if len(positions) < 2:
        return "one statement"
    if depth < 1:
        return "no legal fused dimension"
    return None


def member_mapping(
    problem: Problem, position: int, depth: int, tiles: tuple[int, ...], threads: int
) -> Mapping | None:
    """The member's mapping for fused tiles ``tiles`` (outermost fused index first)
    and a budget of ``threads``; None when the threads do not spread well."""
    fused = dict(zip(fused_indices(problem, position, depth), tiles, strict=True))
    return block_mapping(problem, position, fused, threads)


def block_mapping(
    problem: Problem, position: int, tiles: dict[str, int], threads: int
) -> Mapping | None:
    """The statement's mapping for block tiles ``tiles`` (output index → tile; an
    index not named is covered whole; a tile above the extent is a guarded one)
    and a budget of ``threads``: threads over the tile fastest index first, the
    rest of the tile the thread's registers; None when the threads do not spread
    well."""
    statement = problem.program.statements[position]
    order = natural_order(problem, statement.output)  # innermost first
    extent = {i: problem.index_size(statement, i) for i in statement.parallel_indices}
    block = [(i, tiles.get(i, extent[i])) for i in order]
    outputs = math.prod(t for _, t in block)
    budget = min(threads, outputs)
    if outputs > budget * MAX_OUTPUTS_PER_THREAD:
        return None
    split = thread_split(block, budget)
    if split is None:
        return None
    exact = all(extent[t.index] % t.tile == 0 for t in split)
    registers = any(t.per_thread > 1 for t in split)
    return Mapping(
        strategy="register" if registers else "direct",
        parallel=tuple(split),
        grid_order=tuple(order),
        reduction_order=statement.reduction_indices,
        unroll=64,
        vector_width=1,
        boundary="exact" if exact else "guard",
    )


def _fused_tile_choices(problem: Problem, position: int, depth: int):
    """Tiles of the fused indices (outermost first): :data:`TILE_CHOICES` or the
    whole extent along the three innermost, 1 along the others."""
    statement = problem.program.statements[position]
    names = fused_indices(problem, position, depth)
    per_index = []
    for n, index in enumerate(names):
        size = problem.index_size(statement, index)
        if n < depth - 3:
            per_index.append([1])
        else:
            per_index.append(sorted({t for t in TILE_CHOICES if t < size} | {size}))
    return itertools.product(*per_index)


def _saved_bytes(problem: Problem, positions: tuple[int, ...], kept: tuple[str, ...]) -> int:
    """Bytes later members read of earlier members' outputs (found on chip), and
    the writes of the temporaries ``kept`` on chip."""
    statements = [problem.program.statements[p] for p in positions]
    saved = sum(problem.nbytes(t) for t in kept)
    for n, s in enumerate(statements):
        produced = {t.output.tensor for t in statements[:n]}
        saved += sum(problem.nbytes(t) for t in {a.tensor for a in s.reads()} & produced)
    return saved


def staged_member(problem: Problem, position: int, mapping: Mapping) -> Mapping:
    """``mapping`` with every input of the member's sums that lives in global
    memory (not a temporary) staged through shared memory whole (one k-step
    over each reduction index): coalesced copies of the block's tiles."""
    statement = problem.program.statements[position]
    groups = reduction_of(statement).groups
    accesses = [
        a for g in groups for a in g.accesses() if not problem.program.tensor(a.tensor).temporary
    ]
    if not accesses:
        return mapping
    steps = tuple((i, problem.index_size(statement, i)) for i in statement.reduction_indices)
    staged = tuple(Staging(str(a)) for a in dict.fromkeys(accesses))
    return replace(mapping, staged=staged, k_step=steps)


def ranked_chains(
    problem: Problem, positions: tuple[int, ...], limits: DeviceLimits = H100
) -> list[tuple[float, tuple[Mapping, ...]]]:
    """Every valid candidate (the members' mappings) with its predicted seconds,
    fastest first (see the module docstring)."""
    from .lower import check_mapping
    from .model import predicted_time

    depth = chain_depth(problem, positions)
    if _why_not_members(problem, positions, depth) is not None:
        return []
    tasks = [statement_task(problem, p) for p in positions]
    ranked = []
    seen: set[tuple[Mapping, ...]] = set()
    for tiles in _fused_tile_choices(problem, positions[0], depth):
        for threads in THREAD_CHOICES:
            mappings = tuple(member_mapping(problem, p, depth, tiles, threads) for p in positions)
            if any(m is None for m in mappings):
                continue
            plain = tuple(m for m in mappings if m is not None)
            # a budget above 64 threads that leaves every member below 64 is not tried
            if max(m.threads for m in plain) < 64 and threads != 64:
                continue
            staged = tuple(
                staged_member(problem, p, m) for p, m in zip(positions, plain, strict=True)
            )
            for chosen in (plain, staged):
                if chosen in seen:
                    continue
                seen.add(chosen)
                if any(
                    check_mapping(task, m, limits.shared_per_block, limits)
                    for task, m in zip(tasks, chosen, strict=True)
                ):
                    continue
                given = dict(zip(positions, chosen, strict=True))
                order, _ = schedule(problem, positions, given)
                kept = tuple(a.tensor for a in kept_on_chip(problem, order, given, limits))
                saved = _saved_bytes(problem, positions, kept) / limits.dram_bandwidth
                alone = sum(
                    predicted_time(task, m, limits) for task, m in zip(tasks, chosen, strict=True)
                )
                ranked.append((max(alone - saved, alone / len(positions)), chosen))
    ranked.sort(key=lambda c: c[0])  # stable: the candidates' order breaks ties
    return ranked


@functools.lru_cache(maxsize=256)
def chain_mappings(
    problem: Problem, positions: tuple[int, ...], limits: DeviceLimits = H100
) -> Chain | None:
    """The members' mappings for one block-local chain kernel: the best of
    :func:`ranked_chains`, or None when there is none.  Cached: the fusion
    planner's prediction and the code generator ask for the same group."""
    ranked = ranked_chains(problem, positions, limits)
    if not ranked:
        return None
    depth = chain_depth(problem, positions)
    seconds, mappings = ranked[0]
    fused = fused_indices(problem, positions[0], depth)
    tiles = ", ".join(f"{i}:{mappings[0].tile_of(i).tile}" for i in fused)
    given = dict(zip(positions, mappings, strict=True))
    order, barriers = schedule(problem, positions, given)
    kept = ", ".join(a.tensor for a in kept_on_chip(problem, order, given, limits)) or "none"
    reason = (
        f"chain: {len(positions)} dependent statements one after the other in each block, "
        f"{sum(barriers)} barrier(s) (only where a read crosses threads), the {depth} outer "
        f"output dimension(s) tiled alike ({tiles}; the rest whole), up to "
        f"{max(m.threads for m in mappings)} threads, temporaries in shared memory: {kept}; "
        f"least predicted time of {len(ranked)} candidates, {seconds * 1e6:.0f} us"
    )
    mappings = tuple(replace(m, reasons=(reason,)) for m in mappings)
    return Chain(tuple(positions), depth, mappings, seconds, reason)


def why_not_chain(
    problem: Problem, positions: tuple[int, ...], mappings: dict[int, Mapping]
) -> str | None:
    """None when ``mappings`` let the statements run as one block-local chain
    kernel (see the module docstring), else why not."""
    depth = chain_depth(problem, positions)
    why = _why_not_members(problem, positions, depth)
    if why is not None:
        return why
    first_tiles = None
    first_grid = None
    for p in positions:
        m = mappings[p]
        statement = problem.program.statements[p]
        if m.mma is not None or m.reduction_threads or m.boundary == "pad":
            return f"S{p} uses tensor cores, reduction threads or padding"
        fused = fused_indices(problem, p, depth)
        tiles = tuple(m.tile_of(i).tile for i in fused)
        grid = tuple(fused.index(i) for i in m.grid_order if i in fused)
        if first_tiles is None:
            first_tiles, first_grid = tiles, grid
        elif (tiles, grid) != (first_tiles, first_grid):
            return "the members tile their fused dimensions differently"
        for index in statement.parallel_indices:
            if index not in fused and m.tile_of(index).tile < problem.index_size(statement, index):
                return f"the block does not cover {index} of S{p} whole"
    return None


def chain_kernel(
    problem: Problem, positions: tuple[int, ...], mappings: dict[int, Mapping], name: str
) -> kir.Kernel:
    """The members lowered under ``mappings`` and chained (raises ValueError when
    :func:`why_not_chain` refuses them)."""
    from .lower import lower

    why = why_not_chain(problem, positions, mappings)
    if why is not None:
        raise ValueError(f"cannot chain S{positions}: {why}")
    order, barriers = schedule(problem, positions, mappings)
    kept = kept_on_chip(problem, order, mappings)
    kernels = [
        lower(statement_task(problem, p), mappings[p], f"{name}_m{i}", on_chip=kept)
        for i, p in enumerate(order)
    ]
    common = tuple(kir.SharedArray(a.name, a.ctype, a.size) for a in kept)
    return chain(kernels, name, barriers, common)


def kept_on_chip(
    problem: Problem,
    order: tuple[int, ...],
    mappings: dict[int, Mapping],
    limits: DeviceLimits = H100,
) -> tuple[OnChipArray, ...]:
    """The temporaries the chain keeps in shared memory (:func:`.chain_memory.on_chip`,
    next to the members' own shared memory)."""
    from .model import shared_bytes

    own = sum(shared_bytes(statement_task(problem, p), mappings[p]) for p in order)
    return on_chip(problem, order, mappings, own, limits)
