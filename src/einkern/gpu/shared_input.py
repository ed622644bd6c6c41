"""Sibling statements that read one input, staged in shared memory once.

Siblings (statements without dependences between them) that all read one input
X, such as local_grad3's three derivatives of ``u``, can run as one kernel in
which every block stages its tile of X once and each member computes its own
outputs from that tile.  One tile serves every member when:

* the members have the same parallel indices (names and extents), read X
  through one access each, and are one product each (one reduction group);
* a *batch* dimension of X (the same parallel index at the same position of X
  in every member) is tiled alike in every member; every other dimension of X
  is covered whole by the block (a parallel index: its tile is its extent; a
  reduction index: one k-step covers it, so the chunk loop runs once);
* every member stages X first, in X's memory order, without prefetch, with the
  same block tiles, threads, grid order and boundary policy.

Then block b's tile of X is the same region of X in every member, stored at
the same shared-memory offsets.  :func:`shared_input_mappings` gives the
members such mappings (candidate tiles and thread counts over the parallel
indices; the one with the least predicted time under the analytic model, less
the reads of X that the shared tile saves); :func:`why_not_shared` checks given
mappings; :func:`einkern.gpu.shared_compose.compose` joins the members' lowered
kernels into one kernel: member 0 stages X, the later members drop their copy of
X and read member 0's tile, their names prefixed so that nothing clashes.  The
result is an ordinary kernel IR kernel, which the emulator runs whole.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, replace

from ..ir.nodes import Access, Problem, signed_terms
from ..ir.task import statement_task
from ..semantics import ITEMSIZE
from . import kir
from .builder import compute_dtype
from .device import H100, DeviceLimits
from .mapping import Mapping, ParallelTile, Staging
from .shared_compose import compose
from .staging import natural_order

#: Block tiles tried along each parallel index that the block need not cover whole.
TILE_CHOICES = (1, 2, 4, 8, 16, 32, 64)

#: Threads per block tried (a block tile of fewer outputs than the first gets
#: one thread per output).
THREAD_CHOICES = (64, 128, 256)

#: Most outputs a thread computes per member (its accumulators).
MAX_OUTPUTS_PER_THREAD = 32


@dataclass(frozen=True)
class SharedInput:
    """The members' mappings for one kernel staging ``tensor`` once, its predicted
    seconds, and why it was chosen."""

    tensor: str
    positions: tuple[int, ...]
    mappings: tuple[Mapping, ...]
    seconds: float
    reason: str


# -- which input, and which of its dimensions are batch dimensions -------------------


def _one_product(problem: Problem, position: int) -> bool:
    return len(signed_terms(problem.program.statements[position].rhs)) == 1


def _access_of(problem: Problem, position: int, tensor: str) -> Access | None:
    """The statement's one read of ``tensor`` (None when it reads it not exactly
    once, or through a repeated index)."""
    found = [a for a in problem.program.statements[position].reads() if a.tensor == tensor]
    if len(found) != 1 or len(set(found[0].indices)) != len(found[0].indices):
        return None
    return found[0]


def common_input(problem: Problem, positions: tuple[int, ...]) -> str | None:
    """The largest tensor that every statement of ``positions`` reads exactly once
    (None when there is none)."""
    statements = [problem.program.statements[p] for p in positions]
    common = set.intersection(*({a.tensor for a in s.reads()} for s in statements))
    outputs = {s.output.tensor for s in statements}
    usable = [
        t for t in common - outputs if all(_access_of(problem, p, t) is not None for p in positions)
    ]
    if not usable:
        return None
    return max(sorted(usable), key=problem.nbytes)


def _batch_dims(problem: Problem, positions: tuple[int, ...], tensor: str) -> set[int]:
    """Dimensions of ``tensor`` that every member reads through one parallel index."""
    accesses = [_access_of(problem, p, tensor) for p in positions]
    statements = [problem.program.statements[p] for p in positions]
    dims = set()
    for d, index in enumerate(accesses[0].indices):  # type: ignore[union-attr]
        if all(
            a.indices[d] == index and index in s.parallel_indices  # type: ignore[union-attr]
            for a, s in zip(accesses, statements, strict=True)
        ):
            dims.add(d)
    return dims


def whole_indices(problem: Problem, positions: tuple[int, ...], tensor: str) -> set[str]:
    """Parallel indices the block must cover whole: those that read a dimension of
    ``tensor`` other than a batch dimension in some member."""
    batch = _batch_dims(problem, positions, tensor)
    whole = set()
    for p in positions:
        statement = problem.program.statements[p]
        access = _access_of(problem, p, tensor)
        assert access is not None
        for d, index in enumerate(access.indices):
            if d not in batch and index in statement.parallel_indices:
                whole.add(index)
    return whole


def _why_not_members(problem: Problem, positions: tuple[int, ...]) -> str | None:
    """Why the statements cannot share a staged input whatever their mappings."""
    if len(positions) < 2:
        return "one statement"
    statements = [problem.program.statements[p] for p in positions]
    first = statements[0]
    sizes = {i: problem.index_size(first, i) for i in first.parallel_indices}
    for s in statements[1:]:
        if set(s.parallel_indices) != set(sizes) or any(
            problem.index_size(s, i) != n for i, n in sizes.items()
        ):
            return "the statements' parallel indices differ"
    if not all(_one_product(problem, p) for p in positions):
        return "a statement is not one product"
    if common_input(problem, positions) is None:
        return "no input that every statement reads once"
    return None


# -- mappings ----------------------------------------------------------------------


def thread_split(tiles: list[tuple[str, int]], threads: int) -> list[ParallelTile] | None:
    """Threads over the tiles, fastest index first (each the largest divisor of its
    tile within what is left of ``threads``); None when they make less than half
    of ``threads``."""
    out = []
    left = threads
    for index, tile in tiles:
        t = max(d for d in range(1, tile + 1) if tile % d == 0 and d <= left)
        out.append(ParallelTile(index, tile, t, cyclic=True))
        left //= t
    made = math.prod(t.threads for t in out)
    return out if 2 * made > min(threads, math.prod(t for _, t in tiles)) else None


def _member_mapping(
    problem: Problem, position: int, tensor: str, parallel: tuple[ParallelTile, ...], width: int
) -> Mapping:
    statement = problem.program.statements[position]
    access = _access_of(problem, position, tensor)
    reductions = statement.reduction_indices
    exact = all(problem.index_size(statement, t.index) % t.tile == 0 for t in parallel)
    return Mapping(
        strategy="gett",
        parallel=parallel,
        grid_order=tuple(t.index for t in parallel),
        reduction_order=reductions,
        k_step=tuple((k, problem.index_size(statement, k)) for k in reductions),
        staged=(Staging(str(access)),),
        prefetch=False,
        unroll=64,
        vector_width=width,
        boundary="exact" if exact else "guard",
    )


def candidates(problem: Problem, positions: tuple[int, ...], tensor: str):
    """Parallel tilings (fastest index first) that cover the whole indices whole:
    along the three fastest other indices, tiles of :data:`TILE_CHOICES` or the
    whole extent (1 along the rest); threads of :data:`THREAD_CHOICES`."""
    first = problem.program.statements[positions[0]]
    order = natural_order(problem, first.output)
    whole = whole_indices(problem, positions, tensor)
    free = [i for i in order if i not in whole][:3]
    choices = []
    for i in free:
        size = problem.index_size(first, i)
        choices.append(
            sorted({t for t in TILE_CHOICES if t < size} | {min(size, TILE_CHOICES[-1])})
        )
    seen = set()
    for picked in itertools.product(*choices):
        tile_of = dict(zip(free, picked, strict=True))
        tiles = [
            (
                i,
                problem.index_size(first, i) if i in whole else tile_of.get(i, 1),
            )
            for i in order
        ]
        outputs = math.prod(t for _, t in tiles)
        for threads in THREAD_CHOICES:
            if outputs > threads * MAX_OUTPUTS_PER_THREAD:
                continue
            if outputs < threads and threads != THREAD_CHOICES[0]:
                continue
            split = thread_split(tiles, threads)
            if split is None:
                continue
            key = tuple(split)
            if key not in seen:
                seen.add(key)
                yield key


def ranked_candidates(
    problem: Problem, positions: tuple[int, ...], limits: DeviceLimits = H100
) -> list[tuple[float, tuple[Mapping, ...]]]:
    """Every valid candidate (the members' mappings) with its predicted seconds:
    the members' predicted times less the reads of the common input beyond the
    first (each at least 1/n of the sum), fastest first."""
    from .lower import check_mapping
    from .model import predicted_time

    if _why_not_members(problem, positions) is not None:
        return []
    tensor = common_input(problem, positions)
    assert tensor is not None
    tasks = [statement_task(problem, p) for p in positions]
    width = 16 // ITEMSIZE[compute_dtype(tasks[0])]
    saved = (len(positions) - 1) * problem.nbytes(tensor) / limits.dram_bandwidth
    ranked = []
    for parallel in candidates(problem, positions, tensor):
        for w in (width, 1):
            mappings = tuple(_member_mapping(problem, p, tensor, parallel, w) for p in positions)
            if any(
                check_mapping(task, m, limits.shared_per_block, limits)
                for task, m in zip(tasks, mappings, strict=True)
            ):
                continue
            alone = sum(
                predicted_time(task, m, limits) for task, m in zip(tasks, mappings, strict=True)
            )
            ranked.append((max(alone - saved, alone / len(positions)), mappings))
            break
    ranked.sort(key=lambda c: c[0])  # stable: the candidates' order breaks ties
    return ranked


@functools.lru_cache(maxsize=256)
def shared_input_mappings(
    problem: Problem, positions: tuple[int, ...], limits: DeviceLimits = H100
) -> SharedInput | None:
    """The members' mappings for one kernel that stages their common input once
    (see the module docstring): the best of :func:`ranked_candidates`, or None
    when no candidate is valid.  Cached: the fusion planner's prediction and the
    code generator ask for the same group."""
    ranked = ranked_candidates(problem, positions, limits)
    if not ranked:
        return None
    tensor = common_input(problem, positions)
    assert tensor is not None
    seconds, mappings = ranked[0]
    tiles = ", ".join(f"{t.index}:{t.tile}/{t.threads}" for t in mappings[0].parallel)
    reason = (
        f"shared-input: {tensor} staged once per block for {len(positions)} statements "
        f"(tiles/threads {tiles}); least predicted time of {len(ranked)} candidates, "
        f"{seconds * 1e6:.0f} us"
    )
    mappings = tuple(replace(m, reasons=(reason,)) for m in mappings)
    return SharedInput(tensor, positions, mappings, seconds, reason)


def why_not_shared(
    problem: Problem, positions: tuple[int, ...], mappings: dict[int, Mapping]
) -> str | None:
    """None when the members' ``mappings`` let one kernel stage their common input
    once (see the module docstring), else why not."""
    why = _why_not_members(problem, positions)
    if why is not None:
        return why
    tensor = common_input(problem, positions)
    assert tensor is not None
    first = mappings[positions[0]]
    whole = whole_indices(problem, positions, tensor)
    for p in positions:
        m = mappings[p]
        statement = problem.program.statements[p]
        access = _access_of(problem, p, tensor)
        assert access is not None  # _why_not_members found it
        if m.mma is not None or m.strategy not in ("gett", "register"):
            return f"S{p} has strategy {m.strategy}"
        if (m.parallel, m.grid_order, m.boundary) != (
            first.parallel,
            first.grid_order,
            first.boundary,
        ):
            return "the members' block tiles differ"
        if m.boundary == "pad" or m.prefetch or m.reduction_threads:
            return f"S{p} prefetches, pads or splits its reduction over threads"
        if not m.staged or m.staged[0].access != str(access):
            return f"S{p} does not stage {access} first"
        if m.staged[0].order not in ((), natural_order(problem, access)):
            return f"S{p} stages {access} out of its memory order"
        if m.staged[0].padding != first.staged[0].padding:
            return "the members pad the shared tile differently"
        tiles = {t.index: t.tile for t in m.parallel}
        for index in whole:
            if tiles.get(index) != problem.index_size(statement, index):
                return f"the block does not cover {index} whole"
        for k in statement.reduction_indices:
            if m.step_of(k, problem.index_size(statement, k)) != problem.index_size(statement, k):
                return f"S{p}'s k-step does not cover {k} whole"
    return None


# -- the kernel --------------------------------------------------------------------


def shared_input_kernel(
    problem: Problem, positions: tuple[int, ...], mappings: dict[int, Mapping], name: str
) -> kir.Kernel:
    """The members lowered under ``mappings`` and composed (raises ValueError when
    :func:`why_not_shared` refuses them)."""
    from .lower import lower

    why = why_not_shared(problem, positions, mappings)
    if why is not None:
        raise ValueError(f"cannot stage one input for S{positions}: {why}")
    tensor = common_input(problem, positions)
    assert tensor is not None
    kernels = [
        lower(statement_task(problem, p), mappings[p], f"{name}_m{i}")
        for i, p in enumerate(positions)
    ]
    return compose(kernels, tensor, name)
