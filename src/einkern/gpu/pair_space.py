"""The paired-terms mappings of a statement (:mod:`einkern.gpu.pair`): the candidates
the decision ranks by the model.

:func:`candidates`: the exchanged indices covered whole (rounded up to a
multiple of 8 when that spreads threads better: a guarded tile), tiles of
:data:`TILE_CHOICES` along the two innermost other output indices (1 along the
rest), :data:`THREAD_CHOICES` threads over the tile fastest index first, the
producer's inputs staged whole or not.  :func:`best`: the one the model
predicts fastest.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from ..ir.nodes import Problem
from ..ir.pairing import PRODUCER
from ..ir.task import Task
from .chain import block_mapping, staged_member
from .device import H100, DeviceLimits
from .lower import check_mapping
from .mapping import Mapping
from .model import predicted_time
from .pair import paired_of, split_of
from .staging import natural_order

#: Block tiles tried along each of the two innermost output indices other than
#: the exchanged pair (the pair is covered whole; outer indices get 1).
TILE_CHOICES = (1, 2, 4)

#: Threads per block tried.
THREAD_CHOICES = (64, 128, 256, 512)

#: k-steps of the staged inputs tried besides the whole reduction (smaller
#: staging buffers: more blocks per SM beside the kept terms' tile).
K_STEPS = (8, 16)


def candidates(task: Task, limits: DeviceLimits = H100) -> list[Mapping]:
    """Valid paired mappings of the statement (module docstring); [] when its terms
    do not pair."""
    split = split_of(task)
    if split is None:
        return []
    paired = paired_of(task)
    producer = paired.program.statements[PRODUCER]
    others = [i for i in natural_order(paired, producer.output) if i not in split.swap]
    inner, outer = others[:2], others[2:]
    size = paired.index_size(producer, split.swap[0])
    covers = sorted({size, -(-size // 8) * 8})
    found: list[Mapping] = []
    for cover, tiles in itertools.product(
        covers, itertools.product(TILE_CHOICES, repeat=len(inner))
    ):
        wanted = {
            **{
                i: min(t, paired.index_size(producer, i)) for i, t in zip(inner, tiles, strict=True)
            },
            **{i: 1 for i in outer},
            **{i: cover for i in split.swap},
        }
        for threads in THREAD_CHOICES:
            plain = block_mapping(paired, PRODUCER, wanted, threads)
            if plain is None:
                continue
            for made in _variants(paired, plain):
                mapping = replace(made, pair=split.swap)
                if mapping not in found and not check_mapping(
                    task, mapping, limits.shared_per_block_optin, limits
                ):
                    found.append(mapping)
    return found


def _variants(paired: Problem, plain: Mapping) -> list[Mapping]:
    """``plain`` unstaged, and with the producer's inputs staged whole or in
    k-steps of :data:`K_STEPS`."""
    whole = staged_member(paired, PRODUCER, plain)
    found = [plain, whole]
    for step in K_STEPS:
        if any(step < size for _, size in whole.k_step):
            found.append(replace(whole, k_step=tuple((i, min(step, s)) for i, s in whole.k_step)))
    return list(dict.fromkeys(found))


def best(task: Task, limits: DeviceLimits = H100) -> tuple[float, Mapping, int] | None:
    """The fastest of :func:`candidates` under the model: its predicted seconds,
    the mapping and the number of candidates; None when there are none."""
    found = candidates(task, limits)
    if not found:
        return None
    timed = [(predicted_time(task, m, limits), n, m) for n, m in enumerate(found)]
    seconds, _, mapping = min(timed, key=lambda t: t[:2])
    return seconds, mapping, len(found)
