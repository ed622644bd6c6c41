"""How a CUDA kernel's reductions accumulate: the ``accurate-sums`` rule.

One float32 accumulator running over n terms has an error that grows like
n·u (u = 2^-24; about sqrt(n)·u on random data), past float32's 1e-5 tolerance
for long sums.  :attr:`einkern.gpu.mapping.Mapping.accumulate` picks one of:

* ``plain``: one accumulator per output element (float64 kernels, float32
  sums of fewer than :data:`ACCURATE_TERMS` terms, whose bound n·u stays under
  the tolerance, and sums of fewer than :data:`PLAIN_LIMIT_TERMS` terms whose
  extra accumulators would cost resident blocks per SM);
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
from collections.abc import Sequence
from dataclasses import replace

from ..ir.task import Task
from ..semantics import compute_dtype
from .device import H100, DeviceLimits
from .mapping import Mapping
from .normalize import reduction_of

#: Float32 sums of fewer terms than this accumulate plainly: the worst-case error
#: bound n·u (u = 2^-24) stays under float32's 1e-5 tolerance.
ACCURATE_TERMS = 128

#: From this many terms on, a float32 plain sum's error on random data nears the
#: tolerance (5e-6 to 1e-5 measured at 2^14 to 2^17 terms, docs/accuracy.md): the
#: rule then takes more accumulators even when they cost occupancy.
PLAIN_LIMIT_TERMS = 1 << 14


def sum_block(sizes: Sequence[int]) -> tuple[int, int | None] | None:
    """Where a blocked sum over loops of ``sizes`` (outermost first) starts its
    partial sums: (position of the block's loop, its tile, or None when the whole
    loop is in the block), aiming at blocks of about sqrt(n) terms (error
    ~ (b + n/b)·u, smallest at b = sqrt(n)); None when the sum is one block or
    shorter than :data:`ACCURATE_TERMS` terms.  The CPU backend's blocked sums
    and the CUDA backend's blocked serial groups split their loops here."""
    terms = math.prod(sizes)
    if terms < ACCURATE_TERMS:
        return None
    target = 1 << round(math.log2(terms) / 2)
    inside = 1
    for position in range(len(sizes) - 1, -1, -1):
        if inside * sizes[position] >= target:
            tile = math.ceil(target / inside)
            if tile >= sizes[position]:
                return None if position == 0 else (position, None)
            return position, tile
        inside *= sizes[position]
    return None


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


def _registers(mapping: Mapping, extra: int) -> int:
    """The float32 register estimate of :func:`einkern.gpu.space.violation` plus
    ``extra`` registers per register-tile element."""
    per_thread = [tile.per_thread for tile in mapping.parallel]
    return math.prod(per_thread) * (1 + extra) + sum(per_thread) + 32


def _blocks_per_sm(mapping: Mapping, registers: int, limits: DeviceLimits) -> int:
    """Resident blocks per SM that threads and (estimated) registers allow."""
    threads = max(mapping.threads, 1)
    return min(
        limits.max_blocks_per_sm,
        limits.max_threads_per_sm // threads,
        limits.registers_per_sm // (threads * max(registers, 1)),
    )


def _affordable(mapping: Mapping, extra: int, terms: int, limits: DeviceLimits) -> bool:
    """Whether ``extra`` more registers per output fit: under the per-thread limit,
    and without fewer resident blocks unless the sum has :data:`PLAIN_LIMIT_TERMS`."""
    more = _registers(mapping, extra)
    if more > limits.max_registers_per_thread:
        return False
    if terms >= PLAIN_LIMIT_TERMS:
        return True
    before = _blocks_per_sm(mapping, _registers(mapping, 0), limits)
    return _blocks_per_sm(mapping, more, limits) >= before


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
    staged = bool(mapping.staged)
    chunk = math.prod(step for _, step in mapping.k_step) if staged else terms
    if staged and chunk < terms and _affordable(mapping, 1, terms, limits):
        return "blocked", (
            f"float32 sums of {terms:,} terms: runs of k-step chunks ({chunk} terms "
            "each) of about sqrt(n) terms sum into a partial per output, added at the "
            f"run's end ({mapping.register_tile} more registers)"
        )
    if _affordable(mapping, 1, terms, limits):
        return "wide", (
            f"float32 sums of {terms:,} terms accumulate in double "
            + ("(the chunk is the whole sum)" if staged else "(unstaged: memory-bound loads)")
        )
    return "plain", (
        f"float32 sums of {terms:,} terms (under {PLAIN_LIMIT_TERMS:,}) accumulate plainly: "
        "more accumulators would cost resident blocks"
        if terms < PLAIN_LIMIT_TERMS
        else f"float32 sums of {terms:,} terms, but no registers for more accumulators: plain"
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
