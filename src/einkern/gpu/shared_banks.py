"""Bank conflicts of staged shared tiles, and the padding that avoids them.

A staged tile (:mod:`einkern.gpu.staging`) is written by the copy, consecutive
threads taking consecutive elements along the input's contiguous index, and read
by the compute, threads along the output's threaded indices.  Its layout
(``Staging.order``) puts the threaded indices innermost, so where the input's
contiguous index is not among them, a warp's stores step by that index's stride
in the tile: a stride of a multiple of 32 words puts all 32 stores in one bank,
32 wavefronts where 1 would do.  Measured on an H100 (Nsight Compute), 85–97 %
of the shared-store wavefronts of 12 of 14 GETT defaults of the contraction
suites were bank conflicts, and their warps stalled mostly on ``mio_throttle``
(docs/gpu.md, "Conflict-free staged tiles").

:func:`padded_layouts` chooses, for a staging whose padding is automatic, the
dimension whose stride is padded and by how many elements: the layout that
minimises a warp's wavefronts over the first store of the copy plus the first
read of the compute, the read weighted by the threads that read each element
(the reads of a chunk outnumber its stores by that factor).  Shared memory has
32 banks of 4 bytes; one wavefront serves at most one 4-byte word per bank
(threads reading the same word share it) and 128 bytes.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import numpy as np

from ..ir.memo import by_identity
from ..ir.nodes import Access
from ..ir.task import Task
from ..semantics import ITEMSIZE
from .builder import compute_dtype, layout_strides
from .mapping import Mapping, ParallelTile, Staging, first_coordinates
from .normalize import reduction_of
from .staging import natural_order, tile_extents, vector_width_for

BANKS = 32
BANK_BYTES = 4
WARP = 32
#: Paddings tried on the stride of each dimension a warp's stores step along.
PADDINGS = tuple(range(1, 8))


def wavefronts(addresses: list[int], itemsize: int) -> int:
    """Wavefronts of one warp instruction touching the elements at ``addresses``
    (element offsets into a shared array of ``itemsize``-byte elements)."""
    if not addresses:
        return 0
    return int(_wavefronts(np.array([addresses]), itemsize)[0])


def padded_layouts(task: Task, mapping: Mapping) -> Mapping:
    """``mapping`` with every staged tile padded (and on the dimension) so that
    its stores and reads take the fewest wavefronts (see the module docstring),
    and a reason (rule ``conflict-free-tiles``) for each tile it pads.  Padding
    0 where a warp's stores run along the innermost dimension (as before
    automatic padding), or where the mapping splits its reduction over threads
    (the reads then depend on those threads too)."""
    resolved = [_resolve(task, mapping, s) for s in mapping.staged]
    reasons = tuple(why for _, why in resolved if why)
    return replace(
        mapping,
        staged=tuple(s for s, _ in resolved),
        reasons=(*mapping.reasons, *reasons),
    )


def _resolve(task: Task, mapping: Mapping, staging: Staging) -> tuple[Staging, str | None]:
    """One tile's layout for :func:`padded_layouts`, and the reason when it pads."""
    facts = _staged_facts(task).get(staging.access)
    if facts is None or mapping.reduction_threads:
        return replace(staging, padding=0, padded=""), None
    access, memory_order, itemsize = facts
    order = tuple(staging.order or memory_order)
    extent = tile_extents(task, mapping, access)
    width = vector_width_for(task, mapping, access)
    if order[0] == memory_order[0] and extent[order[0]] >= WARP * width:
        # a warp's stores run along the innermost dimension: no conflict
        return replace(staging, padding=0, padded=""), None
    threaded = tuple(t for t in mapping.parallel if t.threads > 1)
    threads = min(WARP, mapping.threads)
    counts = _first_counts(tuple(extent[i] for i in memory_order), width)
    store = _store_pattern(order, memory_order, counts, width, threads)
    read = _read_pattern(order, _first_warp(threaded), threads)
    sharing = mapping.threads / math.prod(t.threads for t in threaded if t.index in extent)
    last = max(store.varying | read.varying, default=0)  # outer extents set no stride used
    extents = tuple(extent[i] if n < last else 1 for n, i in enumerate(order))
    choice = _best_padding(order, extents, store, read, sharing, itemsize)
    resolved = replace(staging, padding=choice.padding, padded=choice.padded)
    if not choice.padding:
        return resolved, None
    return resolved, (
        f"conflict-free-tiles: {staging.access} padded by {choice.padding} on the stride "
        f"of {choice.padded}: a warp's first store {choice.before[0]} -> {choice.after[0]} "
        f"wavefronts, its first read {choice.before[1]} -> {choice.after[1]}"
    )


@dataclass(frozen=True)
class _Choice:
    """A layout's padding and padded dimension, and the (store, read)
    wavefronts of padding 0 and of the choice."""

    padding: int
    padded: str
    before: tuple[int, int]
    after: tuple[int, int]


@by_identity(maxsize=64)
def _staged_facts(task: Task) -> dict[str, tuple[Access, tuple[str, ...], int]]:
    """Each stageable access of the task's sums (by its text): the access, its
    memory order and the tile's itemsize (the computed type)."""
    itemsize = ITEMSIZE[compute_dtype(task)]
    return {
        str(a): (a, natural_order(task.problem, a), itemsize)
        for g in reduction_of(task.statement).groups
        for a in g.accesses()
        if len(set(a.indices)) == len(a.indices) > 1
    }


@dataclass(frozen=True, eq=False)
class _Pattern:
    """The tile coordinates (along a layout's order) one warp instruction
    touches, and the positions of the order along which they vary.  Compared
    by identity: the memoised constructors return one object per pattern."""

    coordinates: tuple[tuple[int, ...], ...]
    varying: frozenset[int]

    @staticmethod
    def of(coordinates: list[tuple[int, ...]]) -> _Pattern:
        rank = len(coordinates[0]) if coordinates else 0
        varying = frozenset(n for n in range(rank) if len({c[n] for c in coordinates}) > 1)
        return _Pattern(tuple(coordinates), varying)

    def least(self, itemsize: int) -> int:
        """The fewest wavefronts its distinct elements need."""
        return -(-len(set(self.coordinates)) * itemsize // (BANKS * BANK_BYTES))


@functools.lru_cache(maxsize=16384)
def _best_padding(
    order: tuple[str, ...],
    extents: tuple[int, ...],
    store: _Pattern,
    read: _Pattern,
    sharing: float,
    itemsize: int,
) -> _Choice:
    """The cheapest layout: the wavefronts of the store plus ``sharing`` times
    those of the read, the least padding among equals.  The candidates pad the
    stride of a dimension the store steps along (not the innermost) by 1 … 7
    elements; none where padding 0 is already the fewest wavefronts the
    elements need."""
    layouts = _layouts(order, store)
    stores = _wavefront_table(order, extents, layouts, store, itemsize)
    reads = _wavefront_table(order, extents, layouts, read, itemsize)
    least = store.least(itemsize) + sharing * read.least(itemsize)
    cost = [s + sharing * r for s, r in zip(stores, reads, strict=True)]
    best = 0
    if cost[0] > least:
        best = min(range(len(layouts)), key=lambda n: (cost[n], layouts[n][0]))
    padding, padded = layouts[best]
    return _Choice(padding, padded, (stores[0], reads[0]), (stores[best], reads[best]))


@functools.lru_cache(maxsize=4096)
def _layouts(order: tuple[str, ...], store: _Pattern) -> tuple[tuple[int, str], ...]:
    """Padding 0, then each of :data:`PADDINGS` on each dimension (not the
    innermost) the store steps along."""
    stepping = sorted(n for n in store.varying if n > 0)
    return ((0, ""), *((p, order[n]) for n in stepping for p in PADDINGS))


@functools.lru_cache(maxsize=16384)
def _wavefront_table(
    order: tuple[str, ...],
    extents: tuple[int, ...],
    layouts: tuple[tuple[int, str], ...],
    pattern: _Pattern,
    itemsize: int,
) -> tuple[int, ...]:
    """The wavefronts of ``pattern`` in each layout (padding, padded
    dimension) of ``layouts``."""
    extent = dict(zip(order, extents, strict=True))
    strides = np.array(
        [[layout_strides(order, extent, p, i)[0][d] for d in order] for p, i in layouts]
    )
    addresses = strides @ np.array(pattern.coordinates).T
    return tuple(int(w) for w in _wavefronts(addresses, itemsize))


def _wavefronts(addresses: np.ndarray, itemsize: int) -> np.ndarray:
    """:func:`wavefronts` of each row of ``addresses`` (one layout each)."""
    words = itemsize // BANK_BYTES
    word = (addresses[:, :, None] * words + np.arange(words)).reshape(len(addresses), -1)
    word = np.sort(word, axis=1)
    distinct = np.ones(word.shape, dtype=bool)
    distinct[:, 1:] = word[:, 1:] != word[:, :-1]
    banks = (word % BANKS)[:, :, None] == np.arange(BANKS)
    busiest = (banks & distinct[:, :, None]).sum(axis=1).max(axis=1)
    return np.maximum(busiest, -(-distinct.sum(axis=1) * BANK_BYTES // (BANKS * BANK_BYTES)))


def _first_counts(counts: tuple[int, ...], width: int) -> tuple[int, ...]:
    """``counts`` (extents along the memory order) up to the first dimension the
    first warp's 32 vectors of ``width`` do not reach: the others are 0 in
    every coordinate of its first store, so stand as 1."""
    first, covered = [], 1
    for position, count in enumerate(counts):
        first.append(count if covered < WARP else 1)
        covered *= max(1, count // width) if position == 0 else count
    return tuple(first)


@functools.lru_cache(maxsize=4096)
def _store_pattern(
    order: tuple[str, ...],
    memory_order: tuple[str, ...],
    counts: tuple[int, ...],
    width: int,
    threads: int,
) -> _Pattern:
    """The first warp's first store of the copy: element ``t`` numbered along the
    input's memory order (extents ``counts``) in vectors of ``width``
    (:func:`einkern.gpu.staging.tile_copy`), the first of each vector's lanes
    (the others are the same pattern shifted)."""
    vectors = [max(1, counts[0] // width), *counts[1:]]
    found = []
    for thread in range(min(threads, math.prod(vectors))):
        coordinate, rest = {}, thread
        for position, (index, count) in enumerate(zip(memory_order, vectors, strict=True)):
            digit, rest = rest % count, rest // count
            coordinate[index] = digit * width if position == 0 else digit
        found.append(tuple(coordinate[i] for i in order))
    return _Pattern.of(found)


def _first_warp(threaded: tuple[ParallelTile, ...]) -> tuple[ParallelTile, ...]:
    """The threaded tiles whose digits vary within the first warp."""
    covered, first = 1, []
    for tile in threaded:
        if covered >= WARP:
            break
        first.append(tile)
        covered *= tile.threads
    return tuple(first)


@functools.lru_cache(maxsize=4096)
def _read_pattern(
    order: tuple[str, ...], threaded: tuple[ParallelTile, ...], threads: int
) -> _Pattern:
    """The distinct coordinates the first warp reads with the first element of
    its register tile: each thread's along the threaded indices (threadIdx's
    digits, the first tile fastest), 0 along the others."""
    found = set()
    for thread in range(threads):
        coordinate: dict[str, int] = {}
        first_coordinates(threaded, thread, coordinate)
        found.add(tuple(coordinate.get(i, 0) for i in order))
    return _Pattern.of(sorted(found))
