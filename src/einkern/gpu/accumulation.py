"""How a CUDA kernel's reductions accumulate: the ``accurate-sums`` rule.

One float32 accumulator running over n terms has an error that grows like
n·u (u = 2^-24; about sqrt(n)·u on random data), past float32's 1e-5 tolerance
for long sums.  :attr:`einkern.gpu.mapping.Mapping.accumulate` picks one of:

* ``plain``: one accumulator per output element (float64 kernels, and float32
  sums of fewer than :data:`ACCURATE_TERMS` terms, whose bound n·u stays under
  the tolerance);
* ``blocked``: a staged reduction sums runs of k-step chunks of about sqrt(n)
  terms into a partial per output, added to the accumulator at the run's end
  (two-level summation: error ~ (b + n/b)·u, b the run's terms); costs one
  register per output and one add per output per run;
* ``wide``: double accumulators (each term still computed in float32): error
  ~ u whatever n; chosen for unstaged reductions, whose per-thread loops read
  every operand from memory and do not feel the slower double adds.

:func:`accurate_sums` is applied to every mapping the configuration space
makes (:func:`einkern.gpu.space.config_to_mapping`): the decision's, the
tuner's and the model's alike; a mapping file states its own (``plain`` when
absent).  docs/accuracy.md has the measurements behind the choice.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..ir.task import Task
from ..semantics import compute_dtype
from .device import H100, DeviceLimits
from .mapping import Mapping
from .normalize import reduction_of

#: Float32 sums of fewer terms than this accumulate plainly: the worst-case error
#: bound n·u (u = 2^-24) stays under float32's 1e-5 tolerance.
ACCURATE_TERMS = 128

#: Registers the rule leaves unused: extra accumulators must fit the estimate
#: (:func:`einkern.gpu.space.violation`'s) under the device limit minus this.
REGISTER_MARGIN = 0


def _dtype(task: Task) -> str:
    statement = task.statement
    tensor = task.program.tensor
    return compute_dtype(
        tensor(statement.output.tensor).dtype, [tensor(a.tensor).dtype for a in statement.reads()]
    )


def reduction_terms(task: Task) -> int:
    """Terms per accumulator of the task's longest reduction group (0: none)."""
    size = task.problem.index_size
    statement = task.statement
    return max(
        (
            math.prod(size(statement, i) for i in group.indices)
            for group in reduction_of(statement).groups
        ),
        default=0,
    )


def _registers(mapping: Mapping, words: int, extra: int) -> int:
    """The register estimate of :func:`einkern.gpu.space.violation` plus ``extra``
    words per register-tile element."""
    per_thread = [tile.per_thread for tile in mapping.parallel]
    return words * (math.prod(per_thread) + sum(per_thread)) + extra * math.prod(per_thread) + 32


def accurate_sums(
    task: Task, mapping: Mapping, limits: DeviceLimits = H100
) -> tuple[str, str | None]:
    """The accumulation for ``task`` under ``mapping`` and why (None: nothing to
    say, a float64 kernel or one without a sum)."""
    dtype = _dtype(task)
    terms = reduction_terms(task)
    if dtype != "float32" or terms == 0:
        return "plain", None
    if terms < ACCURATE_TERMS:
        return "plain", (
            f"float32 sums of {terms:,} terms (under {ACCURATE_TERMS}) accumulate "
            "plainly: error bound n·u under the tolerance"
        )
    budget = limits.max_registers_per_thread - REGISTER_MARGIN
    staged = bool(mapping.staged)
    chunk = math.prod(step for _, step in mapping.k_step) if staged else terms
    if staged and chunk < terms and _registers(mapping, 1, 1) <= budget:
        return "blocked", (
            f"float32 sums of {terms:,} terms: runs of k-step chunks ({chunk} terms "
            "each) of about sqrt(n) terms sum into a partial per output, added at the "
            f"run's end ({mapping.register_tile} more registers)"
        )
    if _registers(mapping, 1, 1) <= budget:
        return "wide", (
            f"float32 sums of {terms:,} terms accumulate in double "
            + ("(the chunk is the whole sum)" if staged else "(unstaged: memory-bound loads)")
        )
    return "plain", (
        f"float32 sums of {terms:,} terms, but no registers for wider accumulators: plain"
    )


def with_accumulation(task: Task, mapping: Mapping, limits: DeviceLimits = H100) -> Mapping:
    """``mapping`` with the accumulation :func:`accurate_sums` picks; its reason
    joins the mapping's reasons when it has some (a decision's mapping)."""
    choice, reason = accurate_sums(task, mapping, limits)
    reasons = mapping.reasons
    if reasons and reason is not None:
        reasons = (*reasons, f"accurate-sums: {reason}")
    if choice == mapping.accumulate and reasons == mapping.reasons:
        return mapping
    return replace(mapping, accumulate=choice, reasons=reasons)
