"""The cost model of product-family tensor-core kernels (:mod:`.mma_family`) and
the configurations the decision and the tuner offer for them.

A block's time is the sum of its terms' work on one SM, with three rates
fitted on an H100 (``scripts/gpu_mma_family.py``, 44 kernels: the d1 and d2
families at T = 16 and 24, eleven box, warp and pipeline shapes each; measured
over predicted 0.76-1.23, docs/tensor_cores.md#product-families):

* multiply-adds (the box times each term's padded K) at
  :data:`MAC_SECONDS` each: 21 TFLOP/s over 132 SMs, a third of the DMMA
  instruction's peak — the kernel waits on its cp.async steps between terms;
* relayout wavefronts (:func:`.mma_family.tile_layout`, counted exactly from the
  accumulator layout) at :data:`WAVEFRONT_SECONDS` each (a load and an add-store
  of 8-byte elements);
* staged operand elements at :data:`STAGE_SECONDS` each.

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
from .mma_config import MmaConfig
from .mma_family import (
    Family,
    _box,
    _layouts,
    box_order,
    family_of,
    problems,
    shared_bytes,
    tile_layout,
)
from .mma_model import MIN_FLOPS, SIMT_MODEL_SCALE
from .terms import Terms

MAC_SECONDS = 1.26e-11
WAVEFRONT_SECONDS = 2.39e-9
STAGE_SECONDS = 6.0e-12
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
    laid, _ = _layouts(family, config)
    box = _box(config, family)
    size = math.prod(box.values())
    blocks = math.prod(math.ceil(e / box[i]) for i, e in family.extents)
    per_sm = blocks / limits.sm_count
    work = 0.0
    for term in laid:
        k = math.ceil(term.c.size(term.c.k) / config.k_step) * config.k_step
        work += size * k * MAC_SECONDS + (term.m + term.n) * k * STAGE_SECONDS
    # a conflict-free relayout: two wavefronts per warp-wide access of 32 elements
    waves = 2 * len(laid) * size // 32 if optimistic else tile_layout(family, config)[2]
    work += waves * WAVEFRONT_SECONDS
    problem = task.problem
    tensors = task.statement.tensors()
    moved = sum(problem.numel(t) * problem.program.tensor(t).itemsize for t in tensors)
    output = family.output.tensor
    if family.op != "=":
        moved += problem.numel(output) * problem.program.tensor(output).itemsize
    scale = SIMT_MODEL_SCALE["f64"]
    dram = moved / limits.dram_bandwidth
    return Terms(dram * scale, 0.0, 0.0, per_sm * work * scale, 0.0)


#: Warps (m, n) and the pipeline the candidates take: 3 cp.async stages of
#: k-steps of 8 were the fastest measured (docs/tensor_cores.md#product-families).
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
    extents = dict(family.extents)
    bounds: dict[MmaConfig, float] = {}
    for box in _boxes(extents, box_order(family)):
        if math.prod(box.values()) > MAX_BOX:
            continue
        for wm, wn in WARPS:
            config = replace(BASE, warps_m=wm, warps_n=wn, box=tuple(sorted(box.items())))
            if config not in bounds and not problems(task, config, family):
                terms = family_terms(task, config, limits, True, family)
                bounds[config] = max(terms.dram, terms.arithmetic)
    found: dict[MmaConfig, float] = {}
    for config in sorted(bounds, key=lambda c: bounds[c]):
        if count is not None and len(found) >= count:
            break
        if shared_bytes(task, config, family) > limits.shared_per_block_optin:
            continue
        terms = family_terms(task, config, limits, family=family)
        found[config] = max(terms.dram, terms.arithmetic)
    ranked = sorted(found, key=lambda c: found[c])
    return ranked if count is None else ranked[:count]


#: Most elements of a candidate box (8192 doubles: 64 KiB of shared memory, more
#: with the layout's padding).
MAX_BOX = 8192
