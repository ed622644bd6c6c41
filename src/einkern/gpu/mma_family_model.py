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
  accumulator layout; one relayout per group where terms share accumulators,
  ``MmaConfig.group_terms``) at :data:`WAVEFRONT_SECONDS` each (a load and an
  add-store of 8-byte elements);
* the staging copies' shared-store wavefronts beyond the conflict-free number
  (:func:`staging_conflicts`, counted exactly from the copies' addresses) at the
  same rate: the kernels are bound by the shared-memory pipe (ncu, d1 at
  T = 16: L1/shared 83 % busy);
* a pointwise term's loads (one per factor and box element, L1 hits: a box's
  slice of each factor is small) at :data:`POINTWISE_SECONDS` each.

DRAM (the output read and written once, the operands once) bounds it from
below.  As for :mod:`.mma_model` the times are multiplied by the SIMT model's
predicted-over-measured ratio, so that the decision compares them with the
SIMT mappings on one scale.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache

import numpy as np

from ..ir.task import Task
from .contraction import NotAContraction
from .device import DeviceLimits
from .mma import SHAPES
from .mma_config import MmaConfig
from .mma_family import (
    Family,
    _box,
    _layouts,
    _lead,
    _orientations,
    _sizes,
    box_order,
    family_of,
    problems,
    relayouts,
    shared_bytes,
    tile_layout,
)
from .mma_family_groups import staging_order
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
    waves = None
    if not optimistic:
        waves = tile_layout(family, config)[2] + staging_conflicts(family, config)
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
        waves = 2 * (relayouts(family, config) or len(family.terms)) * size // 32
    work += size * sum(len(p.factors) for p in family.pointwise) * POINTWISE_SECONDS
    return work + waves * WAVEFRONT_SECONDS


@lru_cache(maxsize=4096)
def staging_conflicts(family: Family, config: MmaConfig) -> int:
    """Shared-memory wavefronts of one block's staging copies beyond the
    conflict-free two per warp-wide copy of 8-byte elements (per half-warp, the
    most addresses on one of 16 banks), every k-step of a term counted as its
    first; the copies' shared indices as :meth:`.mma_family._Builder.tile_elements`
    computes them (a test checks that they agree)."""
    laid, _ = _layouts(family, config)
    lda, ldb = _lead(config), _sizes(family, config)[3]
    extra = 0
    for term in laid:
        steps = math.ceil(term.c.size(term.c.k) / config.k_step)
        for which in "ab":
            target = staging_targets(term, which, config.k_step, lda, ldb)
            lanes = np.full(-(-len(target) // 32) * 32, -1, dtype=np.int64)
            lanes[: len(target)] = target
            extra += steps * (_bank_wavefronts(lanes) - 2 * (len(lanes) // 32))
    return max(0, extra)


def staging_targets(term, which: str, k_step: int, lda: int, ldb: int) -> np.ndarray:
    """Shared indices (in a stage's buffer) of the elements of term ``term``'s A
    (``which`` "a") or B tile in the order the block's threads copy them."""
    operand, width = (term.a, term.m) if which == "a" else (term.b, term.n)
    along_k = operand.contiguous() in term.c.k
    e = np.arange(width * k_step, dtype=np.int64)
    r, kk = (e // k_step, e % k_step) if along_k else (e % width, e // width)
    if term.bits is not None:
        view = term.bits.rows if which == "a" else term.bits.cols
        walk = staging_order(view, operand.contiguous(), along_k)
        position = np.zeros_like(r)
        for p, bit in enumerate(walk):
            position |= ((r >> p) & 1) << view.index(bit)
        r = position
    return r * lda + kk if which == "a" else kk * ldb + r


def _bank_wavefronts(addresses: np.ndarray) -> int:
    """Per half-warp of ``addresses`` (8-byte elements; -1: an idle lane), the
    most on one of 16 banks, summed."""
    halves = addresses.reshape(-1, 16)
    slots = np.arange(len(halves))[:, None] * 16 + halves % 16
    counts = np.bincount(slots[halves >= 0].ravel(), minlength=len(halves) * 16)
    return int(counts.reshape(-1, 16).max(axis=1).sum())


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

    def evaluate(config: MmaConfig) -> None:
        if config in found or problems(task, config, family):
            return
        if shared_bytes(task, config, family) > limits.shared_per_block_optin:
            return
        terms = family_terms(task, config, limits, family=family)
        found[config] = max(terms.dram, terms.arithmetic)

    for box in sorted(bounds, key=lambda b: bounds[b]):
        for wm, wn in WARPS:
            if count is not None and len(found) >= count:
                break
            evaluate(replace(BASE, warps_m=wm, warps_n=wn, box=box))
    for config in list(found):  # each beside its twin with shared accumulators
        twin = replace(config, group_terms=True)
        if relayouts(family, twin) is not None:
            evaluate(twin)
    ranked = sorted(found, key=lambda c: found[c])
    return ranked if count is None else ranked[:count]


def grouping_note(
    task: Task,
    config: MmaConfig,
    limits: DeviceLimits,
    predict: Callable[[MmaConfig], float] | None = None,
) -> str:
    """Why the family kernel of ``config`` does or does not share accumulators
    between terms (``MmaConfig.group_terms``): its groups, the relayouts per
    block and the predicted times of both kernels (``predict``'s seconds, the
    decision's scale; None: the family model's larger term)."""
    family = family_of(task)
    grouped = replace(config, group_terms=True)
    plain = replace(config, group_terms=False)
    count = len(family.terms)
    if relayouts(family, grouped) is None:
        return (
            f"each of the {count} terms relaid into the box: they share accumulators "
            "only with power-of-two box extents and warps"
        )
    laid, _ = _layouts(family, grouped)
    parts, current = [], []
    for term in laid:
        current.append(str(family.terms.index(term.c) + 1))
        if term.relay is not None:
            parts.append(",".join(current))
            current = []
    times = []
    for candidate in (grouped, plain):
        if predict is not None:
            seconds = predict(candidate)
        else:
            terms = family_terms(task, candidate, limits, family=family)
            seconds = max(terms.dram, terms.arithmetic)
        times.append(f"{seconds * 1e6:.3g} µs")
    groups = f"terms {' | '.join(parts)} sharing accumulators"
    if config.group_terms:
        return (
            f"{groups}: {len(parts)} relayouts per block instead of {count} "
            f"(predicted {times[0]} against {times[1]})"
        )
    return (
        f"each of the {count} terms relaid: {groups} ({len(parts)} relayouts) "
        f"predicted {times[0]} against {times[1]}"
    )


#: Most elements of a candidate box (8192 doubles: 64 KiB of shared memory, more
#: with the layout's padding).
MAX_BOX = 8192
