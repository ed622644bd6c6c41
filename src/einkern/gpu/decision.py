"""The decision algorithm: a good mapping without any timing, as an ordered table
of small named rules (:data:`RULES`, the rules themselves in
:mod:`einkern.gpu.rules`).

:func:`explain` applies the rules in order from :func:`start_config` and records
each applied rule's name and reason; rules of one ``group`` exclude each other
(the first that applies wins), and a rule's change may end the decision
(``final``).  Why each rule is what it is, and the measurements behind it, are in
``docs/rules.md`` under the rule's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..ir.task import Task
from .config import SCALAR_CONFIG, CudaConfig
from .device import H100, DeviceLimits
from .lower import preload_applies
from .mapping import Mapping
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
from .space import config_to_mapping, spreads
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


def default_config(task: Task, limits: DeviceLimits = H100) -> tuple[CudaConfig, list[str]]:
    """The decision's configuration of ``task`` and its reasons ("rule: reason")."""
    decision = explain(task, limits)
    return decision.config, list(decision.reasons)


def decide(task: Task, limits: DeviceLimits = H100) -> Mapping:
    """The default mapping of ``task``, with the reasons for it."""
    transpose = transpose_mapping(task)  # a pure permutation: einkern's transpose kernel
    if transpose is not None:
        return transpose
    decision = explain(task, limits)
    return config_to_mapping(task, decision.config, decision.reasons)
