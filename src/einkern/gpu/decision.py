"""The decision algorithm: a good mapping without any timing.  An ordered table
of small named rules (:data:`RULES`, the rules themselves in
:mod:`einkern.gpu.rules`) proposes one configuration; for a binary contraction
the GETT generator (:mod:`einkern.gpu.gett`) proposes its points, and the cost
model (:mod:`einkern.gpu.model`) chooses (:func:`choose`): the rules' proposal
stays unless a GETT point is predicted at least :data:`MARGIN` times faster
(the rules' choices were measured near the hardware limit on the workloads they
were written for, and most of the model is not yet calibrated on measurements;
a point of a family whose model is, the fp64 tensor-core tiles, needs only
:data:`CALIBRATED_MARGIN`).  Given a register probe (the CUDA backend's compiles
with NVRTC), the best points are re-ranked with their compiled register counts
before the choice (:func:`register_check`).

:func:`explain` applies the rules in order from :func:`start_config` and records
each applied rule's name and reason; rules of one ``group`` exclude each other
(the first that applies wins), and a rule's change may end the decision
(``final``).  Why each rule is what it is, and the measurements behind it, are in
``docs/rules.md`` under the rule's name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..ir.task import Task
from . import gett, pair, pair_space
from .block_order import batch_order, block_order
from .config import SCALAR_CONFIG, CudaConfig
from .device import H100, DeviceLimits
from .lower import preload_applies
from .mapping import Mapping
from .mma_config import MmaConfig
from .mma_family_model import DECISION_COUNT as FAMILY_DECISION_COUNT
from .mma_family_model import family_candidates, grouping_note
from .mma_lower import f64_pipeline
from .mma_model import fitted_efficiency, mma_bounds, mma_candidates
from .model import cost_terms, estimated_registers, predicted_time
from .rules import (
    Change,
    Facts,
    block_shape,
    boundary,
    broadcast_operand,
    clip_register_tile,
    coalesced_x,
    coalescing_weights_note,
    direct_fallback,
    fill_machine,
    gemm_register_tile,
    no_reuse,
    preload_output,
    product_family,
    rank0_output,
    second_index,
    short_reduction_cache,
    short_reduction_registers,
    simplify,
    staged_faces,
    unrolled_reduction,
    vector_runs_fit,
    whole_small_extents,
)
from .space import config_to_mapping, spreads, violation
from .transpose import transpose_mapping

RuleFunction = Callable[[Facts, CudaConfig], Change | None]


@dataclass(frozen=True)
class Rule:
    """A named step of the decision; of the rules sharing a ``group``, only the
    first that applies does."""

    name: str
    apply: RuleFunction = field(repr=False)
    group: str = ""


@dataclass(frozen=True)
class Decision:
    """The default configuration of a task and the rules that made it."""

    config: CudaConfig
    steps: tuple[tuple[str, str], ...]  # (rule name, reason), in order

    @property
    def reasons(self) -> tuple[str, ...]:
        return tuple(f"{name}: {reason}" for name, reason in self.steps)


# ---- the table ---------------------------------------------------------------

#: The decision, in order (docs/rules.md has a section per name).
RULES: tuple[Rule, ...] = (
    Rule("rank0-output", rank0_output),
    Rule("coalesced-x", coalesced_x),
    Rule("coalescing-weights", coalescing_weights_note),
    Rule("second-index", second_index),
    Rule("block-shape", block_shape),
    Rule("whole-small-extents", whole_small_extents),
    Rule("unrolled-reduction", unrolled_reduction),
    Rule("gemm-register-tile", gemm_register_tile, "reuse"),
    Rule("product-family", product_family, "reuse"),
    Rule("broadcast-operand", broadcast_operand, "reuse"),
    Rule("short-reduction-registers", short_reduction_registers, "reuse"),
    Rule("staged-faces", staged_faces, "reuse"),
    Rule("short-reduction-cache", short_reduction_cache, "reuse"),
    Rule("no-reuse", no_reuse, "reuse"),
    Rule("clip-register-tile", clip_register_tile),
    Rule("preload-output", preload_output),
    Rule("fill-machine", fill_machine),
    Rule("vector-runs", vector_runs_fit),
    Rule("boundary", boundary),
    Rule("simplify", simplify),
    Rule("direct-fallback", direct_fallback),
)


def _check_table(rules: tuple[Rule, ...]) -> None:
    names = [rule.name for rule in rules]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"decision rules named twice: {duplicates}")


_check_table(RULES)


def start_config(task: Task) -> CudaConfig:
    """The configuration the rules start from: nothing chosen, and the knobs this
    task's space has (``spread``, ``preload``) off."""
    statement = task.statement
    if not statement.parallel_indices:
        return SCALAR_CONFIG
    return replace(
        SCALAR_CONFIG,
        spread=0 if spreads(statement) else None,
        preload=False if preload_applies(statement) else None,
    )


def explain(task: Task, limits: DeviceLimits = H100, rules: tuple[Rule, ...] = RULES) -> Decision:
    """Apply ``rules`` in order; the configuration and the (rule, reason) pairs."""
    facts = Facts(task, limits)
    config = start_config(task)
    steps: list[tuple[str, str]] = []
    taken: set[str] = set()
    for rule in rules:
        if rule.group and rule.group in taken:
            continue
        change = rule.apply(facts, config)
        if change is None:
            continue
        config = replace(config, **change.values)
        steps.append((rule.name, change.reason))
        if rule.group:
            taken.add(rule.group)
        if change.final:
            break
    return Decision(config, tuple(steps))


#: A GETT point replaces the rules' proposal when predicted faster than this
#: share of the proposal's predicted time.  0.8 until the twenty-eighth session;
#: 0.9 with the staged chunks' cost (``model.STEP_CYCLES``) and the output's
#: sector efficiency in the tensor-core model: on the 77 suite cases whose
#: defaults the three changes move (H100, same run), 1.26× faster on geometric
#: mean, 1.25× on the held-out seed 47 (docs/gpu.md#the-cost-of-a-chunk).
MARGIN = 0.9
#: The same for a point of a family whose model is fitted to measurements (the
#: fp64 tensor-core tiles, ``mma_model.F64_TILE_EFFICIENCY``): predicted faster
#: at all.  Against the rules' SIMT proposal on 102 measured fp64 contractions
#: (H100, scripts/gpu_f64_tiles.py and fit_f64_tiles.py, seeds 41 and 43), the
#: kernels chosen at this margin took 1.093 and 1.051 times the best measured
#: kernel; at :data:`MARGIN`, 1.158 and 1.051 (docs/tensor_cores.md).
CALIBRATED_MARGIN = 1.0


def _calibrated(config: CudaConfig) -> bool:
    """Whether ``config``'s family has a model fitted to measurements."""
    return config.mma is not None and fitted_efficiency(config.mma) > 0


def _predict(task: Task, config: CudaConfig, limits: DeviceLimits) -> float:
    return predicted_time(task, config_to_mapping(task, config), limits)


def _bound(task: Task, config: CudaConfig, limits: DeviceLimits) -> str:
    """The term that dominates the config's predicted time, in words."""
    terms = cost_terms(task, config_to_mapping(task, config), limits)
    return f"{terms.dominant()}-bound"


@functools.lru_cache(maxsize=256)
def _family(config: CudaConfig) -> str:
    if config.mma is not None:
        return "mma"
    if config.lanes is not None:
        return "lanes"
    return "gett" if config.gett is not None else "split" if config.split else "rules"


def _describe(config: CudaConfig) -> str:
    if config.mma is not None:
        return config.mma.describe()
    if config.gett is not None:
        return config.gett.describe()
    tx, ty = config.block
    lanes = ""
    if config.lanes is not None:
        run, count = config.lanes
        lanes = (
            f" as the fastest thread digits (runs of {run}, {count} accumulators, warp shuffles)"
        )
    return (
        f"{config.split} threads per output along the reduction{lanes}, "
        f"{tx}×{ty} output threads on {config.x}" + (f", {config.y}" if config.y else "")
    )


def choose(task: Task, limits: DeviceLimits = H100, probe: RegisterProbe | None = None) -> Decision:
    """The default configuration of ``task``: the rules' proposal, or the best GETT
    point under the cost model when it is predicted :data:`MARGIN` times faster
    (:data:`CALIBRATED_MARGIN` for a point whose model is fitted to measurements);
    the last step (``model-choice``) says which family won, why, and the runner-up.
    With a register ``probe`` the best points are compiled and re-ranked with their
    real register counts first (:func:`register_check`)."""
    proposal = explain(task, limits)
    points = gett.candidates(task, limits) + gett.split_candidates(task, limits)
    points += [
        config
        for config in (
            CudaConfig(x="", mma=tile)
            for tile in mma_candidates(task, arch=limits.arch, sm_count=limits.sm_count)
        )
        if violation(task, config, limits) is None
    ]
    points += [
        CudaConfig(x="", mma=tile)
        for tile in family_candidates(task, limits, FAMILY_DECISION_COUNT)
    ]
    if not points:
        return proposal
    ranked = sorted(
        ((_predict(task, c, limits), number, c) for number, c in enumerate(points)),
        key=_rank_key(task),
    )
    checked = register_check(task, ranked, limits, probe)
    if checked is not None:
        ranked, note = checked
        proposal = Decision(proposal.config, (*proposal.steps, ("register-check", note)))
    best_time, _, best = ranked[0]
    best, tie = _lanes_tie_break(ranked)
    rules_time = _predict(task, proposal.config, limits)
    family = _family(best)
    described = (
        f"{len(points)} GETT/split/MMA points of {best_time * 1e6:.3g} µs and up "
        f"(best: {_describe(best)}, {_bound(task, best, limits)})"
    )
    margin = MARGIN
    if best_time >= MARGIN * rules_time:  # a calibrated point at its own margin
        fitted = [(t, c) for t, _, c in ranked if _calibrated(c)]
        if fitted and fitted[0][0] < CALIBRATED_MARGIN * rules_time:
            (best_time, best), margin, tie = fitted[0], CALIBRATED_MARGIN, ""
            family = _family(best)
            described = (
                f"{len(points)} GETT/split/MMA points, the best with a model fitted to "
                f"measurements at {best_time * 1e6:.3g} µs ({_describe(best)}, "
                f"{_bound(task, best, limits)})"
            )
    tie += _batch_note(task, ranked, best)
    if best_time < margin * rules_time:
        runner = f"the rules' proposal at {rules_time * 1e6:.3g} µs"
        if len(ranked) > 1:
            runner += f"; next point {ranked[1][0] * 1e6:.3g} µs ({_family(ranked[1][2])})"
        reason = (
            f"family {family} won: {described} against {runner} (predicted, "
            + (
                f"a point must be {1 / margin:.3g}× faster"
                if margin < 1
                else "a point of a fitted model need only be faster"
            )
            + f"){tie}"
        )
        steps = (*proposal.steps, ("model-choice", reason))
        if best.mma is not None and not best.mma.box:
            group, why = block_order(task, best.mma, limits, mma_bounds(task, best.mma, limits)[2])
            tile = replace(best.mma, group_m=group)
            best = replace(best, mma=tile)
            steps = (*steps, ("block-order", why))
            order = batch_order(task, tile, limits)
            if order is not None:
                tile = replace(tile, batch_inner=order[0])
                best = replace(best, mma=tile)
                steps = (*steps, ("batch-order", order[1]))
            pipeline = f64_pipeline(task, tile)
            if pipeline is not None:
                steps = (*steps, ("mma-pipeline", pipeline))
        if best.mma is not None and best.mma.box:
            chosen = best

            def predict(tile: MmaConfig) -> float:
                return _predict(task, replace(chosen, mma=tile), limits)

            note = grouping_note(task, best.mma, limits, predict)
            steps = (*steps, ("shared-accumulators", note))
        return Decision(best, steps)
    reason = (
        f"family rules kept: predicted {rules_time * 1e6:.3g} µs "
        f"({_bound(task, proposal.config, limits)}); runner-up: {described}, not "
        f"{1 / MARGIN:.3g}× faster"
    )
    return Decision(proposal.config, (*proposal.steps, ("model-choice", reason)))


#: Compiles a mapping's kernel and returns its registers per thread (None when
#: it does not compile); the CUDA backend's is NVRTC's count, no GPU needed.
RegisterProbe = Callable[[Task, Mapping], int | None]

#: At most this many points are compiled by :func:`register_check`.
REGISTER_CHECKS = 8

#: :func:`register_check` runs only when the best point is predicted to take at
#: least this long: below it a kernel's launch dominates and a compile per point
#: (about 0.2 s with NVRTC) would cost more than a wrong estimate does.
REGISTER_CHECK_SECONDS = 10e-6

Ranked = list[tuple[float, int, CudaConfig]]


def register_check(
    task: Task, ranked: Ranked, limits: DeviceLimits, probe: RegisterProbe | None
) -> tuple[Ranked, str] | None:
    """``ranked`` with its best SIMT point chosen again with compiled register
    counts, and what was found, in words; None when there is no probe or the best
    SIMT point is predicted under :data:`REGISTER_CHECK_SECONDS`.

    The estimate (:func:`einkern.gpu.model.estimated_registers`) misses large
    register tiles by 30 % and more (seed 47's ``ebr,imb->emri``: 135
    estimated, 203 compiled), and the occupancy it implies decides between
    points.  The best SIMT point is compiled and re-predicted with its real
    count, the SIMT points re-sorted, and so on until the best is one already
    compiled (at most :data:`REGISTER_CHECKS` compiles).  That point replaces
    the model's first when it is predicted :data:`MARGIN` times faster than the
    first's re-prediction (near-ties stay in the model's order), and takes the
    first's place and estimated time: which family wins (tensor-core points,
    the rules' proposal) stays as the margins were measured, against the
    estimate.  docs/gpu.md "Register check"."""
    simt = [item for item in ranked if item[2].mma is None]
    if probe is None or not simt or simt[0][0] < REGISTER_CHECK_SECONDS:
        return None
    first_time, first_number, first = simt[0]
    counts: dict[int, tuple[int | None, int, float]] = {}  # compiled, estimated, time
    key = _rank_key(task)
    while len(counts) < REGISTER_CHECKS and simt[0][1] not in counts:
        time, number, config = simt[0]
        mapping = config_to_mapping(task, config)
        registers = probe(task, mapping)
        if registers is not None:
            time = predicted_time(task, mapping, limits, registers=registers)
        counts[number] = (registers, estimated_registers(task, mapping), time)
        simt[0] = (time, number, config)
        simt.sort(key=key)
    _, number, best = simt[0]
    found = "; ".join(
        f"{_describe(c)}: {counts[n][0]} registers (estimated {counts[n][1]}), "
        f"{counts[n][2] * 1e6:.3g} µs"
        for _, n, c in sorted(ranked, key=lambda item: item[:2])
        if n in counts
    )
    note = f"compiled the {len(counts)} best SIMT points: {found}"
    first_checked = (counts[first_number][2], first_number, first)
    if number == first_number or key(simt[0])[0] > MARGIN * key(first_checked)[0]:
        return ranked, note + "; the model's first point kept"
    rest = [item for item in ranked if item[1] != number]
    place = next(i for i, item in enumerate(rest) if item[1] == first_number)
    rest[place] = (first_time, number, best)
    rest.append(first_checked)
    rest.sort(key=key)
    return rest, note + f"; chosen: {_describe(best)}, {1 / MARGIN:.3g}× faster or more"


#: How much faster than every other point the model must predict a GETT point whose
#: block tile spans a batch index (:func:`einkern.gpu.gett.joins_batch`: a batch
#: of small products in one block).  Chosen on an H100 (thirty-third session,
#: docs/gpu.md "Batch indices in the block tile"): of the 69 contractions of seeds
#: 2, 41 and 43 whose plan such points changed, taken without a margin they ran
#: 1.36x faster on geometric mean but 11 ran below 0.8x, 9 of those predicted
#: less than 1.3x faster than the plan they replaced; with it 45 change, 1.62x
#: faster, 2 below 0.8x (held-out seed 47: 1.08x and 6 without, 1.41x and 2 with).
BATCH_JOIN_MARGIN = 1.3


def _rank_key(task: Task) -> Callable[[tuple[float, int, CudaConfig]], tuple[float, int]]:
    """The order points are ranked in: predicted time times :func:`_handicap`,
    then generation order."""
    return lambda item: (item[0] * _handicap(task, item[2]), item[1])


def _handicap(task: Task, config: CudaConfig) -> float:
    """The factor a point's predicted time is ranked by (:data:`BATCH_JOIN_MARGIN`
    for a point whose tile spans a batch index, else 1)."""
    return BATCH_JOIN_MARGIN if gett.joins_batch(task, config) else 1.0


def _batch_note(task: Task, ranked: list[tuple[float, int, CudaConfig]], best: CudaConfig) -> str:
    """What :data:`BATCH_JOIN_MARGIN` did to the choice, in words ("" when nothing)."""
    fastest_time, _, fastest = min(ranked, key=lambda item: item[:2])
    if gett.joins_batch(task, best):
        return (
            f"; its block tile spans a batch index: it had to be predicted "
            f"{BATCH_JOIN_MARGIN:.3g}× faster than every point whose tile does not"
        )
    if fastest is not best and gett.joins_batch(task, fastest):
        return (
            f"; a point whose block tile spans a batch index was predicted at "
            f"{fastest_time * 1e6:.3g} µs, not {BATCH_JOIN_MARGIN:.3g}× faster"
        )
    return ""


#: Lanes points predicted within this share of the best are ties for the model
#: (its DRAM term is the same for all of them; measured, they differ by up to
#: 10 % for reasons it does not model), broken by :func:`_lanes_key`.
LANES_TIE = 0.1


def _lanes_key(config: CudaConfig) -> tuple[int, ...]:
    """Rank of a lanes point among ties: a warp per row of the summed operand (32
    lanes: each load instruction reads one row's consecutive bytes, neither runs
    of several rows nor a row shared by warps that then combine through shared
    memory), then the longest runs (widest loads), then the fewest accumulators
    and outputs per thread (the model found the bytes in flight sufficient for
    all of them: more only cost registers), then blocks of at least four warps
    (fewer than 16 blocks fill an SM's threads, under its cap of resident blocks)
    with the fewest outputs (more, shorter blocks: a shorter tail)."""
    assert config.lanes is not None
    run, accumulators = config.lanes
    per_thread = config.regs[0] * config.regs[1]
    outputs = config.block[0] * max(1, config.block[1])
    lanes = config.split or 1
    four_warps = outputs * lanes >= 128
    per_block = per_thread * outputs
    return (
        -abs(lanes.bit_length() - 6),
        run,
        -accumulators,
        -per_thread,
        four_warps,
        -per_block,
    )


def _lanes_tie_break(ranked: list[tuple[float, int, CudaConfig]]) -> tuple[CudaConfig, str]:
    """The best point, or among lanes points predicted within :data:`LANES_TIE`
    of a lanes best the one :func:`_lanes_key` ranks first (ties keep the
    model's order), and what to say about it (docs/gpu.md, "Reduction lanes")."""
    best_time, _, best = ranked[0]
    if best.lanes is None:
        return best, ""
    ties = [c for t, _, c in ranked if c.lanes is not None and t <= best_time * (1 + LANES_TIE)]
    chosen = max(ties, key=_lanes_key)  # max keeps the first of equal keys
    if chosen == best:
        return best, ""
    run, count = chosen.lanes or (1, 1)
    return chosen, (
        f"; {len(ties)} lanes points within {LANES_TIE:.0%} of the best are ties for the "
        f"model: chosen is the one whose warps each read one row in the longest runs, "
        "with the fewest accumulators and outputs per thread, in blocks of four warps or "
        "more with the fewest outputs "
        f"({chosen.split} lanes, runs of {run}, {count} accumulators)"
    )


def default_config(
    task: Task, limits: DeviceLimits = H100, probe: RegisterProbe | None = None
) -> tuple[CudaConfig, list[str]]:
    """The default configuration of ``task`` (:func:`choose`) and its reasons
    ("rule: reason")."""
    decision = choose(task, limits, probe)
    return decision.config, list(decision.reasons)


def decide(task: Task, limits: DeviceLimits = H100, probe: RegisterProbe | None = None) -> Mapping:
    """The default mapping of ``task``, with the reasons for it (``probe``: see
    :func:`register_check`)."""
    transpose = transpose_mapping(task)  # a pure permutation: einkern's transpose kernel
    if transpose is not None:
        return transpose
    decision = choose(task, limits, probe)
    mapping = config_to_mapping(task, decision.config, decision.reasons)
    return _paired(task, mapping, limits) or mapping


def _paired(task: Task, mapping: Mapping, limits: DeviceLimits) -> Mapping | None:
    """The best paired-terms mapping (:mod:`einkern.gpu.pair`) when the statement's
    terms pair and it is predicted :data:`MARGIN` times faster than ``mapping``."""
    found = pair_space.best(task, limits)
    if found is None:
        return None
    seconds, paired, count = found
    split = pair.split_of(task)
    assert split is not None
    own = predicted_time(task, mapping, limits)
    if seconds >= MARGIN * own:
        return replace(
            mapping,
            reasons=(
                *mapping.reasons,
                f"paired terms not taken: {split.reason}; the best of {count} paired "
                f"mappings is predicted {seconds * 1e6:.3g} µs against {own * 1e6:.3g} µs, "
                f"not {1 / MARGIN:.3g}× faster",
            ),
        )
    why = (
        f"paired terms: {split.reason}; one block covers {' and '.join(split.swap)} whole, "
        "computes Y into shared memory, then writes every output from Y and its exchange; "
        f"the best of {count} paired mappings, predicted {seconds * 1e6:.3g} µs against "
        f"{own * 1e6:.3g} µs for the statement as written"
    )
    return replace(paired, reasons=(*mapping.reasons, why))
