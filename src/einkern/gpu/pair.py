"""Paired terms as one kernel: ``R = Y ± Y[p<->q]`` with ``Y`` computed once per
block and kept in shared memory (:mod:`einkern.ir.pairing` finds the pairing).

A statement whose terms pair under the exchange σ of two output indices ``p``
and ``q`` (the Riemann–Christoffel statement: σ = (j l), sign −1) is lowered as
the two statements of :func:`einkern.ir.pairing.paired_problem` chained in one
kernel (:func:`einkern.gpu.shared_compose.chain`):

1. the *producer* ``Y = kept terms`` under the mapping's own tiles, staging and
   reduction order, its output tile stored to shared memory instead of global
   memory (:class:`~einkern.gpu.builder.OnChipArray`, each row padded by one
   element when the innermost dimension is ``p`` or ``q``, so that the exchanged
   read below spreads over the banks);
2. a barrier (the exchanged read crosses threads: :mod:`.chain_barriers`);
3. the *consumer* ``R op Y ± Y[σ]``, the same threads over the same tile, both
   reads from shared memory.

It is legal because the block tile covers ``p`` and ``q`` whole: every element
of ``Y[σ(x)]`` a block reads for its outputs ``x`` lies in its own tile (σ moves
only the ``p`` and ``q`` coordinates).  Each input is read once, ``Y`` never
reaches global memory, and the kept terms' arithmetic is done once, not twice.

A mapping asks for it with ``pair=(p, q)`` (:class:`~einkern.gpu.mapping.Mapping`);
its other fields are the producer's.  :func:`candidates` proposes such mappings
(tiles of 1, 2 or 4 along the two innermost other output indices, 64–512
threads, the producer's inputs staged whole or not) and :func:`best` the one the
model (:func:`pair_terms`: the producer's DRAM traffic, which writes a tile of
``R``'s size and layout, and both members' other terms added) predicts fastest;
the decision (:func:`einkern.gpu.decision.decide`) takes it where it beats the
statement's own default.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace

from ..ir.nodes import Problem
from ..ir.pairing import CONSUMER, PRODUCER, PairSplit, pair_split, paired_problem
from ..ir.task import Task, statement_task
from . import kir
from .builder import OnChipArray
from .chain_barriers import schedule
from .chain_memory import on_chip
from .device import H100, DeviceLimits
from .mapping import Mapping
from .shared_compose import chain
from .staging import staged_bytes
from .terms import Terms

#: ``check_mapping(task, mapping, max_shared, limits)``: a one-statement mapping's problems.
Check = Callable[..., list[str]]


@functools.lru_cache(maxsize=256)
def split_of(task: Task) -> PairSplit | None:
    """The statement's pairing (:func:`einkern.ir.pairing.pair_split`), or None."""
    if not task.single:
        return None
    view = task.view
    return pair_split(view, view.program.statements[0])


@functools.lru_cache(maxsize=256)
def paired_of(task: Task) -> Problem:
    """The statement as ``Y = ...`` and ``R op Y ± Y[σ]`` (:func:`paired_problem`)."""
    split = split_of(task)
    assert split is not None
    return paired_problem(task.view, 0, split)


def members(task: Task, mapping: Mapping) -> tuple[Problem, Mapping, Mapping]:
    """The paired problem and the producer's and consumer's mappings."""
    paired = paired_of(task)
    producer = paired.program.statements[PRODUCER]
    reductions = producer.reduction_indices
    reads = {str(a) for a in producer.reads()}
    made = replace(
        mapping,
        pair=(),
        reasons=(),
        reduction_order=tuple(i for i in mapping.reduction_order if i in reductions),
        k_step=tuple((i, s) for i, s in mapping.k_step if i in reductions),
        staged=tuple(s for s in mapping.staged if s.access in reads),
    )
    used = Mapping(
        strategy="register" if mapping.register_tile > 1 else "direct",
        parallel=mapping.parallel,
        grid_order=mapping.grid_order,
        boundary=mapping.boundary,
        min_blocks=mapping.min_blocks,
    )
    return paired, made, used


def _kept(
    paired: Problem, made: Mapping, used: Mapping, max_shared: int, swap: tuple[str, ...]
) -> tuple[OnChipArray, ...]:
    """``Y``'s shared tile (padded), or () when it cannot stay on chip (in
    ``max_shared`` bytes beside the producer's staging)."""
    mappings = {PRODUCER: made, CONSUMER: used}
    own = staged_bytes(statement_task(paired, PRODUCER), made)
    room = replace(H100, shared_per_block=max_shared)  # on_chip reads only this
    kept = on_chip(paired, (PRODUCER, CONSUMER), mappings, own, room)
    if not kept:
        return ()
    (tile,) = kept
    # the tile's last dimension is exchanged: the read of Y[σ] walks it across rows
    last = paired.program.statements[PRODUCER].output.indices[-1]
    pad = 1 if tile.extents[-1] > 1 and last in swap else 0
    padded = replace(tile, padding=pad)
    item = paired.program.tensor(tile.tensor).itemsize
    return (padded,) if own + padded.size * item <= max_shared else ()


def why_not(
    task: Task, mapping: Mapping, max_shared: int | None, limits: DeviceLimits, check: Check
) -> list[str]:
    """Every reason why ``mapping`` (with ``pair`` set) cannot be lowered as a
    paired kernel (empty: fine); ``check`` checks the members' own mappings
    (:func:`einkern.gpu.lower.check_mapping`, passed by it)."""
    split = split_of(task)
    if split is None:
        return ["the statement's terms do not pair under an exchange of two output indices"]
    if set(mapping.pair) != set(split.swap) or len(mapping.pair) != 2:
        return [f"the terms pair under {' <-> '.join(split.swap)}, not {mapping.pair}"]
    if mapping.mma is not None or mapping.reduction_threads or mapping.boundary == "pad":
        return ["a paired kernel has no tensor cores, reduction threads or padding"]
    statement = task.statement
    problems = [
        f"the block must cover {i} whole (tile {mapping.tile_of(i).tile})"
        for i in split.swap
        if mapping.tile_of(i).tile < task.problem.index_size(statement, i)
    ]
    if problems:
        return problems
    budget = limits.shared_per_block if max_shared is None else max_shared
    paired, made, used = members(task, mapping)
    for position, member in ((PRODUCER, made), (CONSUMER, used)):
        found = check(statement_task(paired, position), member, budget, limits)
        problems += [f"{'producer' if position == PRODUCER else 'consumer'}: {p}" for p in found]
    if not problems and not _kept(paired, made, used, budget, split.swap):
        problems.append("the kept terms' tile does not fit in shared memory beside the staging")
    return problems


def pair_kernel(
    task: Task, mapping: Mapping, name: str, max_shared: int, lower: Callable[..., kir.Kernel]
) -> kir.Kernel:
    """The paired kernel (module docstring), its members lowered by ``lower``
    (:func:`einkern.gpu.lower.lower`, which checked the mapping)."""
    paired, made, used = members(task, mapping)
    mappings = {PRODUCER: made, CONSUMER: used}
    order, barriers = schedule(paired, (PRODUCER, CONSUMER), mappings)
    split = split_of(task)
    assert split is not None  # lower checked the mapping (why_not)
    kept = _kept(paired, made, used, max_shared, split.swap)
    kernels = [
        lower(statement_task(paired, p), mappings[p], f"{name}_m{n}", max_shared, on_chip=kept)
        for n, p in enumerate(order)
    ]
    common = tuple(kir.SharedArray(a.name, a.ctype, a.size) for a in kept)
    return chain(kernels, name, barriers, common)


def pair_terms(
    task: Task, mapping: Mapping, limits: DeviceLimits, cost_terms: Callable[..., Terms]
) -> Terms:
    """The model's terms of a paired kernel: the producer's DRAM traffic (its
    inputs, and a write of ``R``'s size and layout), both members' L2, load/store,
    arithmetic and latency terms added (``cost_terms``: the model's, passed by it)."""
    paired, made, used = members(task, mapping)
    first = cost_terms(statement_task(paired, PRODUCER), made, limits)
    second = cost_terms(statement_task(paired, CONSUMER), used, limits)
    return Terms(
        first.dram,
        first.l2 + second.l2,
        first.lsu + second.lsu,
        first.arithmetic + second.arithmetic,
        first.latency + second.latency,
        min(first.efficiency, second.efficiency),
    )
