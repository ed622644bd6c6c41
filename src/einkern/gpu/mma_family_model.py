"""The cost model of product-family tensor-core kernels (:mod:`.mma_family`) and
the configurations the decision and the tuner offer for them.

A block's time is the sum of its terms' work on one SM, with three rates
fitted on an H100 (``scripts/gpu_mma_family.py --grid``, the 40 kernels of the
candidate space — k-step 8, 3 stages, m16n8k4, any box and warp shape — of the
d1 and d2 families at T = 16 and 24; measured over predicted 0.64-1.31,
docs/tensor_cores.md#without-spills-fifteenth-session):

* multiply-adds (the box times each term's K, rounded up to the instruction's
  k) at :data:`MAC_SECONDS` each: 68 TFLOP/s over 132 SMs, DMMA's peak;
* staged operand elements (every step's M + N rows of k-step elements) at
  :data:`STAGE_SECONDS` each: about 8 TB/s, the operands come from L2;
* relayout wavefronts (:func:`.mma_family.tile_layout`, counted exactly from the
  accumulator layout) at :data:`WAVEFRONT_SECONDS` each (a load and an
  add-store of 8-byte elements);
* a pointwise term's loads (one per factor and box element, L1 hits: a box's
  slice of each factor is small) at :data:`POINTWISE_SECONDS` each.

DRAM (the output read and written once, the operands once) bounds it from
below.  As for :mod:`.mma_model` the times are multiplied by the SIMT model's
predicted-over-measured ratio, so that the decision compares them with the
SIMT mappings on one scale.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..ir.task import Task
from .contraction import NotAContraction
from .device import DeviceLimits
from .mma import SHAPES
from .mma_config import MmaConfig
from .mma_family import (
    Family,
    _box,
    _orientations,
    box_order,
    family_of,
    problems,
    shared_bytes,
    tile_layout,
)
from .mma_model import MIN_FLOPS, SIMT_MODEL_SCALE
from .terms import Terms

MAC_SECONDS = 3.87e-12
WAVEFRONT_SECONDS = 1.76e-9
STAGE_SECONDS = 1.31e-10
#: Per box element and factor of a pointwise term: the 27 CCSD(T) statements in one
#: kernel less their 18 doubles alone on an H100, T = 16 and 24 (1.4e-11, 1.1e-11;
#: the factors' values loaded once per thread where its elements share them).
POINTWISE_SECONDS = 1.2e-11
#: The SMs of the H100 the rates were fitted on (blocks per SM scale with it).
FITTED_SMS = 132


def family_terms(
    task: Task,
    config: MmaConfig,
    limits: DeviceLimits,
    optimistic: bool = False,
    family: Family | None = None,
) -> Terms:
    """The model's terms of the family kernel of ``config`` (arithmetic: the
    fitted per-block work; dram: the bytes once).  ``optimistic``: the relayout
    without bank conflicts (a lower bound, without the layout search);
    ``family``: the task's, when the caller has it."""
    family = family or family_of(task)
    box = tuple(_box(config, family).items())
    waves = None if optimistic else tile_layout(family, config)[2]
    work = _block_work(family, box, config, waves)
    scale = SIMT_MODEL_SCALE["f64"]
    dram = _dram_seconds(task, family, limits)
    return Terms(dram * scale, 0.0, 0.0, _per_sm(family, box, limits) * work * scale, 0.0)


def _block_work(
    family: Family, box: tuple[tuple[str, int], ...], config: MmaConfig, waves: int | None
) -> float:
    """Seconds of one block's terms on one SM: multiply-adds (K rounded up to the
    instruction's k: the kernel skips a last step's padding), staged elements
    (M + N per k of every step, the same in either orientation) and relayout
    wavefronts (``waves``; None: conflict-free, two per warp-wide access of 32
    elements)."""
    size = math.prod(e for _, e in box)
    views = _orientations(family, box)
    step, instruction = config.k_step, SHAPES[config.shape].k
    work = 0.0
    for term, term_views in zip(family.terms, views, strict=True):
        K = term.size(term.k)
        m, n = term_views[0][4], term_views[0][5]
        work += size * math.ceil(K / instruction) * instruction * MAC_SECONDS
        work += (m + n) * math.ceil(K / step) * step * STAGE_SECONDS
    if waves is None:
        waves = 2 * len(family.terms) * size // 32
    work += size * sum(len(p.factors) for p in family.pointwise) * POINTWISE_SECONDS
    return work + waves * WAVEFRONT_SECONDS


def _per_sm(family: Family, box: tuple[tuple[str, int], ...], limits: DeviceLimits) -> float:
    """Blocks per SM of the grid of ``box``."""
    extents = dict(box)
    return math.prod(math.ceil(e / extents[i]) for i, e in family.extents) / limits.sm_count


def _dram_seconds(task: Task, family: Family, limits: DeviceLimits) -> float:
    """The tensors read once and the output written once (read too for an update)."""
    problem = task.problem
    moved = sum(
        problem.numel(t) * problem.program.tensor(t).itemsize for t in task.statement.tensors()
    )
    output = family.output.tensor
    if family.op != "=":
        moved += problem.numel(output) * problem.program.tensor(output).itemsize
    return moved / limits.dram_bandwidth


#: Warps (m, n) and the pipeline the candidates take: 3 cp.async stages of
#: k-steps of 8 were the fastest measured, and the 4^6 box with these within 3 %
#: of 82 sampled variants (docs/tensor_cores.md#without-spills-fifteenth-session).
WARPS = ((2, 2), (1, 2), (2, 1), (1, 1))
BASE = MmaConfig("m16n8k4_f64", 2, 2, 1, 1, 8, 0, 3, "async")
#: The candidates the decision ranks: the optimistic model's best, its layout
#: searched (one: the fusion planner prices hundreds of merged groups).
DECISION_COUNT = 1


def _boxes(extents: dict[str, int], order: tuple[str, ...]) -> list[dict[str, int]]:
    """Boxes of every output index at 4 or 2 (its extent when smaller), and each
    with the contiguous or the slowest index doubled and another halved."""
    boxes = []
    for e in (4, 2):
        base = {i: min(e, extents[i]) for i in order}
        boxes.append(base)
        for up in (order[-1], order[0]):
            for down in order:
                if up != down and base[down] > 1 and base[up] * 2 <= extents[up]:
                    boxes.append({**base, up: base[up] * 2, down: base[down] // 2})
    return boxes


def family_candidates(
    task: Task, limits: DeviceLimits, count: int | None = None
) -> list[MmaConfig]:
    """Family configurations for ``task`` (an fp64 product family) that fit,
    ranked by :func:`family_terms`; the best ``count`` (all when None).  The
    layout search runs only for the ``count`` best by the optimistic model
    (a lower bound): the fusion planner prices hundreds of merged groups."""
    try:
        family = family_of(task)
    except NotAContraction:
        return []
    if family.flops < MIN_FLOPS:  # launch- and latency-bound: the model says nothing
        return []
    # the optimistic bound depends on the box alone (M + N and the relayout's
    # ideal are the same for every warp shape): boxes by bound, warps in order
    scale = SIMT_MODEL_SCALE["f64"]
    dram = _dram_seconds(task, family, limits) * scale
    bounds: dict[tuple[tuple[str, int], ...], float] = {}
    for choice in _boxes(dict(family.extents), box_order(family)):
        box = tuple(sorted(choice.items()))
        if box not in bounds and math.prod(choice.values()) <= MAX_BOX:
            work = _block_work(family, box, BASE, None)
            bounds[box] = max(dram, _per_sm(family, box, limits) * work * scale)
    found: dict[MmaConfig, float] = {}
    for box in sorted(bounds, key=lambda b: bounds[b]):
        for wm, wn in WARPS:
            if count is not None and len(found) >= count:
                break
            config = replace(BASE, warps_m=wm, warps_n=wn, box=box)
            if problems(task, config, family):
                continue
            if shared_bytes(task, config, family) > limits.shared_per_block_optin:
                continue
            terms = family_terms(task, config, limits, family=family)
            found[config] = max(terms.dram, terms.arithmetic)
    ranked = sorted(found, key=lambda c: found[c])
    return ranked if count is None else ranked[:count]


#: Most elements of a candidate box (8192 doubles: 64 KiB of shared memory, more
#: with the layout's padding).
MAX_BOX = 8192
