"""GETT points of a statement's mapping space: general contraction tilings over
index *groups*, generated for any index structure (COGENT/TBLIS style).

The main product's indices are classified as batch, M (output ∩ A), N
(output ∩ B) and K (contracted) by :func:`einkern.gpu.space.roles`.  The group
holding the output's contiguous index goes first on the threads (coalesced
stores); each group's block tile (16 … 128 elements) is split over its indices
in the output's memory order: an index is taken whole while it fits, the rest
of the tile goes to the next index, so extents of 16–24 still give 64-wide
tiles.  The group's threads are spread the same way and the rest of each
index's tile becomes the thread's register tile.  The K chunk (4 … 32 elements)
is split over the reduction indices, an index contiguous in one of the inputs
first (its tile copy is then coalesced).  Batch indices go to the grid
(or join M when one is the output's contiguous index); where there are batch
indices the tilings are also made with them joining M and joining N, so that a
batch of small products (M and N of a few elements, or one of them empty) fills
a block (:func:`joins_batch` tells those points apart: the decision wants them
predicted clearly faster, ``decision.BATCH_JOIN_MARGIN``).

Every point is a :class:`~einkern.gpu.config.CudaConfig` with a
:class:`~einkern.gpu.config.GettTiling`, staged through shared memory in the
compute layout, prefetched, the chunk loop unrolled, and filtered by
:func:`~einkern.gpu.space.violation`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Iterator

from ..ir.nodes import Access, Binary, Neg, signed_terms
from ..ir.task import Task
from .config import AUTO_PADDING, CudaConfig, GettTiling, StagingConfig
from .device import H100, DeviceLimits
from .lower import compute_dtype, preload_applies
from .normalize import reduction_of
from .space import (
    chunk_fits,
    config_to_mapping,
    lane_index,
    roles,
    spreads,
    vector_runs,
    violation,
)
from .staging import natural_order

#: Block tile of the first (stored) group and of the second, in elements.
FIRST_TILES = (16, 32, 64, 128)
SECOND_TILES = (8, 16, 32, 64, 128)
#: Threads along the first group and the second.
THREADS = ((16, 4), (16, 8), (16, 16), (32, 2), (32, 4), (32, 8), (64, 2), (64, 4))
#: Reduction elements staged per chunk.
K_CHUNKS = (4, 8, 16, 32)

#: A batch-joined group's head (the output's contiguous index) capped at this
#: many elements, the rest of the group's tile going to its next indices
#: (:func:`_capped`), and the (first, second) thread counts tried with them.
HEAD_CAPS = (16, 32)
CAPPED_THREADS = ((128, 2), (128, 4), (128, 8), (256, 1), (256, 2), (256, 4))


def _factors(body) -> list[Access] | None:
    """The two accesses of a product ``A * B`` (possibly negated), else None."""
    if isinstance(body, Neg):
        return _factors(body.operand)
    if isinstance(body, Binary) and body.op == "*":
        if isinstance(body.left, Access) and isinstance(body.right, Access):
            return [body.left, body.right]
    return None


def gett_applies(task: Task) -> bool:
    """Whether the statement is one binary contraction GETT points are made for:
    one reduction group whose body is one product of two tensors, and output
    indices on both sides."""
    statement = task.statement
    groups = reduction_of(statement).groups
    if len(groups) != 1 or spreads(statement):
        return False
    terms = signed_terms(groups[0].body)
    if len(terms) != 1 or _factors(terms[0][1]) is None:
        return False
    r = roles(task)
    if not (r.k and (r.m or r.n)) or r.output_contiguous not in r.m + r.n + r.batch:
        return False
    if not (r.m and r.n) and not r.batch:  # one group and no batch to join the other
        return False
    accesses = [a for a in (r.a, r.b) if a is not None]
    return all(len(set(a.indices)) == len(a.indices) for a in accesses)


def split(extents: list[tuple[str, int]], target: int) -> list[tuple[str, int]]:
    """``target`` elements spread over ``extents`` (index, extent), in order: an
    index whole while it fits, else the largest power of two (or divisor of its
    extent, when that is at least as large) that fits the rest."""
    found = []
    rest = target
    for index, extent in extents:
        if rest <= 1:
            break
        if extent <= rest:
            take = extent
        else:
            power = 1 << (rest.bit_length() - 1)
            divisor = max(d for d in range(1, rest + 1) if extent % d == 0)
            take = max(power, divisor)
        if take > 1:
            found.append((index, take))
        rest //= take
    return found


def _capped(order: list[str], size: dict[str, int]) -> list[tuple[tuple[str, int], ...]]:
    """Tiles of a group whose head (``order[0]``, the output's contiguous index)
    is capped at :data:`HEAD_CAPS` elements, enough for whole 128-byte lines, and
    whose next indices take the rest of a tile of :data:`FIRST_TILES`: a batch
    of small products whose block covers a few of the batch and the whole of a
    product (seed 47's ``mgaeqx,gxaeqn->axmn``, 23850 products of 42 × 14 × 12:
    blocks of 32 of ``a`` × 32 of ``m`` × 7 of ``n`` run 0.19 ms, where the best
    point without the cap ran 0.77; docs/gpu.md "Capped batch heads")."""
    head, rest = order[0], order[1:]
    found = []
    for cap in HEAD_CAPS:
        if size[head] <= cap or not rest:
            continue
        for target in FIRST_TILES:
            tail = split([(i, size[i]) for i in rest], target)
            if tail:
                found.append(((head, cap), *tail))
    return found


def _threaded(tiles: list[tuple[str, int]], threads: int) -> list[tuple[str, int, int]]:
    """(index, threads, regs) for a group's tiles, about ``threads`` threads placed
    from the first index on: a tile's every element on a thread while they fit,
    else the largest divisor of the tile that fits; the rest of each tile is the
    thread's register tile."""
    found = []
    rest = threads
    for index, tile in tiles:
        along = tile if tile <= rest else max(d for d in range(1, rest + 1) if tile % d == 0)
        found.append((index, along, tile // along))
        rest //= along
    return found


def _k_order(task: Task) -> list[str]:
    """The main reduction's indices, those contiguous in an input first."""
    problem = task.problem
    r = roles(task)
    contiguous = [natural_order(problem, a)[0] for a in (r.a, r.b) if a is not None]
    first = [k for k in contiguous if k in r.k]
    memory = [i for a in (r.a, r.b) if a is not None for i in natural_order(problem, a)]
    rest = sorted((k for k in r.k if k not in first), key=memory.index)
    return list(dict.fromkeys(first + rest))


def _group_orders(
    task: Task, groupings: list[tuple[tuple[str, ...], tuple[str, ...]]]
) -> list[tuple[list[list[str]], list[list[str]]]]:
    """Orders to fill the tiles of the stored group (holding the output's
    contiguous index) and of the other one, per way of grouping the indices
    (``groupings``): the output's memory order, and the same with the
    contiguous index of the group's input pulled to the front (after the
    output's), so that the input's tile copy is coalesced too."""
    problem = task.problem
    r = roles(task)
    memory = natural_order(problem, task.statement.output)
    found = []
    for m, n in groupings:
        orders = []
        for group, access in ((m, r.a), (n, r.b)):
            ordered = [i for i in memory if i in group]
            inner = natural_order(problem, access)[0] if access is not None else ""
            head = [i for i in (r.output_contiguous, inner) if i in group]
            pinned = list(dict.fromkeys(head + ordered))
            orders.append([ordered] if pinned == ordered else [ordered, pinned])
        first, second = orders
        found.append((first, second) if r.output_contiguous in m else (second, first))
    return found


def _base_grouping(task: Task) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The plain (M, N) groups: batch indices on the grid, or joining M when one is
    the output's contiguous index; None when M or N is empty."""
    r = roles(task)
    if not (r.m and r.n):
        return None
    return (r.m + r.batch, r.n) if r.output_contiguous in r.batch else (r.m, r.n)


def _groupings(task: Task) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """The (M, N) groups tiled: the plain ones (:func:`_base_grouping`) and, where
    there are batch indices, the batch joining M and joining N, so that a batch of
    small products (M and N of a few elements, or one of them empty) still fills a
    block's threads."""
    r = roles(task)
    base = _base_grouping(task)
    found = [] if base is None else [base]
    if r.batch:
        found += [(r.m + r.batch, r.n), (r.m, r.n + r.batch)]
    return list(dict.fromkeys(found))


def joins_batch(task: Task, config: CudaConfig) -> bool:
    """Whether ``config`` is a GETT point of a grouping with the batch joined to M or
    N (:func:`_groupings`) that the plain grouping does not make (its block tile
    spans batch indices)."""
    return config.gett is not None and config.gett not in _plain_tilings(task)


@functools.lru_cache(maxsize=256)
def _plain_tilings(task: Task) -> frozenset[GettTiling]:
    base = _base_grouping(task)
    return frozenset(tilings(task, [base])) if base is not None else frozenset()


def tilings(
    task: Task, groupings: list[tuple[tuple[str, ...], tuple[str, ...]]] | None = None
) -> list[GettTiling]:
    """Every GETT tiling of the generator's grid (unchecked, distinct), of
    ``groupings`` (default: :func:`_groupings`), with the tiles of :func:`_capped`
    where a batch index is in the first group."""
    problem = task.problem
    statement = task.statement
    size = {i: problem.index_size(statement, i) for i in statement.indices}
    memory = natural_order(problem, statement.output)
    k_order = _k_order(task)
    limit = 64 if compute_dtype(task) == "float32" else 32
    found: dict[GettTiling, None] = {}
    steps = {tuple(split([(k, size[k]) for k in k_order], c)) for c in K_CHUNKS}
    pairs: dict[tuple[tuple[tuple[str, int], ...], ...], tuple[tuple[int, int], ...]] = {}
    batch = set(roles(task).batch)
    for first_orders, second_orders in _group_orders(task, groupings or _groupings(task)):
        firsts = {
            tuple(split([(i, size[i]) for i in order], t))
            for order in first_orders
            for t in FIRST_TILES
        }
        seconds = {
            tuple(split([(i, size[i]) for i in order], t))
            for order in second_orders
            for t in SECOND_TILES
        }
        for pair in ((t1, t2) for t1 in firsts for t2 in seconds):
            pairs.setdefault(pair, THREADS)
        if batch & set(first_orders[0]):  # a batch joined: the head capped as well
            capped = {tile for order in first_orders for tile in _capped(order, size)} - firsts
            for pair in ((t1, t2) for t1 in capped for t2 in seconds):
                pairs.setdefault(pair, CAPPED_THREADS)
    for (tiles1, tiles2), thread_counts in pairs.items():
        for h1, h2 in thread_counts:
            a = _threaded(list(tiles1), h1)
            b = _threaded(list(tiles2), h2)
            threads = math.prod(t[1] for t in a + b)
            regs = math.prod(t[2] for t in a + b)
            if regs > limit or not 32 <= threads <= 1024:
                continue
            # threads numbered along the output's memory order, across groups
            tiles = tuple(sorted(a + b, key=lambda t: memory.index(t[0])))
            for k in steps:
                found[GettTiling(tiles, tuple(k))] = None
    return sorted(found, key=lambda g: (g.tiles, g.k))


#: Staged elements a GETT thread may copy per k-step (summed over the operands);
#: points with more are not offered.  On the GETT points measured for 29 cases of
#: the contractions suite's seed 2 (H100), measured over predicted time was 0.8 up
#: to 16 elements, 1.0 at 16–32, 1.25 at 32–48, 1.5–2 at 48–96 and 5–14 above (the
#: prefetch array spills, and the model does not charge the copies' index
#: arithmetic); ``wateik,kgoawe->aotiwg`` at 131 elements a thread ran in 5.6 ms
#: against 0.17 ms predicted.  Chosen on seed 2 (docs/gpu.md).
STAGED_PER_THREAD = 32


def candidates(task: Task, limits: DeviceLimits = H100) -> list[CudaConfig]:
    """The valid GETT points of ``task`` (empty when :func:`gett_applies` is false)."""
    return list(_candidates(task, limits))


@functools.lru_cache(maxsize=256)
def _candidates(task: Task, limits: DeviceLimits) -> tuple[CudaConfig, ...]:
    from .model import staged_per_thread  # staging geometry, not ranking

    if not gett_applies(task):
        return ()
    statement = task.statement
    size = {i: task.problem.index_size(statement, i) for i in statement.indices}
    preload = False if preload_applies(statement) else None
    found = []
    for tiling in tilings(task):
        divisible = all(size[i] % (t * g) == 0 for i, t, g in tiling.tiles) and all(
            size[i] % s == 0 for i, s in tiling.k
        )
        assigns = ["cyclic"]
        if chunk_fits(task, tiling.tiles[0][2]):
            assigns.append("chunked")
        for assign in assigns:
            config = CudaConfig(
                x=tiling.first,
                assign=assign,
                staging=StagingConfig("all", 1, True, AUTO_PADDING, "compute"),
                unroll=-1,
                boundary="exact" if divisible else "guard",
                preload=preload,
                gett=tiling,
            )
            if staged_per_thread(task, config_to_mapping(task, config)) > STAGED_PER_THREAD:
                continue
            if violation(task, config, limits) is None:
                found.append(config)
    return tuple(found)


#: Threads per output along a long reduction (``split``), and the output blocks
#: they are tried with: (threads along x, along y, register tile along x, y).
SPLITS = (4, 8, 16, 32, 64, 128, 256)
SPLIT_BLOCKS = (
    (32, 1, 1, 1),
    (16, 2, 1, 1),
    (8, 4, 1, 1),
    (8, 8, 1, 1),
    (16, 1, 1, 1),
    (8, 1, 1, 1),
    (4, 4, 1, 1),
    (16, 4, 1, 1),
    (8, 2, 2, 2),
    (4, 4, 2, 2),
)
#: Reductions of at least this many terms get ``split`` points (64: the sum of
#: split-K's partial sums, often a hundred terms onto a few thousand outputs,
#: runs latency-bound with one thread per output; docs/rewrites.md).
SPLIT_TERMS = 64
#: ``lanes`` points: reduction threads (the fastest digits), output blocks
#: (threads along x, along y, register tile along x, y), independent accumulators.
LANE_SPLITS = (8, 16, 32, 64, 128, 256)
LANE_BLOCKS = (
    (1, 1, 1, 1),
    (2, 1, 1, 1),
    (4, 1, 1, 1),
    (8, 1, 1, 1),
    (16, 1, 1, 1),
    (2, 1, 2, 1),
    (4, 1, 2, 1),
    (8, 1, 2, 1),
    (2, 2, 1, 1),
    (4, 2, 1, 1),
)
LANE_ACCUMULATORS = (1, 2, 4)


def split_candidates(task: Task, limits: DeviceLimits = H100) -> list[CudaConfig]:
    """Points with threads along the main reduction (``split``): for one sum of at
    least :data:`SPLIT_TERMS` terms, small output blocks (x the output's
    contiguous index, y the largest other output index) with 4 … 256 threads per
    output summing every split-th term, combined in shared memory; and when the
    sum runs along its largest input's stride-1 index, ``lanes`` points: 8 … 256
    reduction threads as the fastest thread digits (a warp reads whole lines),
    runs of one vector or single terms, 1, 2 or 4 independent accumulators."""
    return list(_split_candidates(task, limits))


@functools.lru_cache(maxsize=256)
def _split_candidates(task: Task, limits: DeviceLimits) -> tuple[CudaConfig, ...]:
    statement = task.statement
    groups = reduction_of(statement).groups
    if len(groups) != 1 or groups[0].has_nested_sum() or not statement.parallel_indices:
        return ()
    problem = task.problem
    size = {i: problem.index_size(statement, i) for i in statement.indices}
    terms = math.prod(size[i] for i in groups[0].indices)
    if terms < SPLIT_TERMS:
        return ()
    r = roles(task)
    x = r.output_contiguous if r.output_contiguous and size[r.output_contiguous] > 1 else None
    x = x or max(statement.parallel_indices, key=lambda i: size[i])
    others = [i for i in statement.parallel_indices if i != x and size[i] > 1]
    y = max(others, key=lambda i: size[i]) if others else ""
    preload = False if preload_applies(statement) else None
    found = _split_points(task, (x, y, preload), SPLIT_BLOCKS, SPLITS, (None,), terms, limits)
    lane = lane_index(task)
    if lane is not None:
        # widest runs and most accumulators first; no more lanes than the lane index
        # has terms, rounded up to a power of two (the others would idle)
        lanes = [
            (run, count) for run in (vector_runs(task), 1) for count in reversed(LANE_ACCUMULATORS)
        ]
        along = 1 << (size[lane] - 1).bit_length()
        splits = [s for s in LANE_SPLITS if s <= along]
        found += _split_points(task, (x, y, preload), LANE_BLOCKS, splits, lanes, terms, limits)
    return tuple(found)


def _split_shapes(
    blocks: Iterable[tuple[int, int, int, int]],
    splits: Iterable[int],
    two_dimensional: bool,
    terms: int,
    limits: DeviceLimits,
) -> Iterator[tuple[int, int, int, int, int]]:
    """``(tx, ty, rx, ry, split)`` of ``blocks`` x ``splits`` that fit a block of
    threads and a sum of ``terms`` (a second thread dimension only with a ``y``
    index)."""
    for tx, ty, rx, ry in blocks:
        if not two_dimensional and (ty > 1 or ry > 1):
            continue
        for split in splits:
            if tx * ty * split <= limits.max_threads_per_block and split <= 2 * terms:
                yield tx, ty, rx, ry, split


def _first_valid(task: Task, base: CudaConfig, limits: DeviceLimits) -> list[CudaConfig]:
    """``base`` with an exact boundary, else guarded, if valid."""
    for boundary in ("exact", "guard"):
        config = CudaConfig.from_values({**base.values(), "boundary": boundary})
        if violation(task, config, limits) is None:
            return [config]
    return []


def _split_points(
    task: Task,
    indices: tuple[str, str, bool | None],
    blocks: Iterable[tuple[int, int, int, int]],
    splits: Iterable[int],
    lanes: Iterable[tuple[int, int] | None],
    terms: int,
    limits: DeviceLimits,
) -> list[CudaConfig]:
    """The valid split points of ``blocks`` x ``splits`` x ``lanes`` (``indices``:
    the ``x`` and ``y`` index and the preload setting of every point)."""
    x, y, preload = indices
    found = []
    for tx, ty, rx, ry, split in _split_shapes(blocks, splits, bool(y), terms, limits):
        for lane in lanes:
            base = CudaConfig(
                x=x,
                y=y,
                block=(tx, ty),
                regs=(rx, ry, 1),
                assign="cyclic",
                preload=preload,
                split=split,
                lanes=lane,
            )
            found += _first_valid(task, base, limits)
    return found


def best_points(task: Task, limits: DeviceLimits = H100, count: int = 4) -> list[CudaConfig]:
    """The ``count`` best GETT points under the cost model, one per tiling (the
    tuner's space lists them: ``tuning/cuda_target.py``)."""
    from .model import predicted_time  # the model ranks; it does not generate
    from .space import config_to_mapping

    ranked = sorted(
        candidates(task, limits),
        key=lambda c: predicted_time(task, config_to_mapping(task, c), limits),
    )
    found: dict[GettTiling | None, CudaConfig] = {}
    for config in ranked:
        found.setdefault(config.gett, config)
    return list(found.values())[:count]
