"""The CUDA cost of a candidate group for the fusion planner
(:mod:`einkern.ir.fusion_plan`): the analytic model (:mod:`einkern.gpu.model`) of
the kernel the decision algorithm maps it to, plus a launch.

A group is one kernel here when it is one statement, a ``merge`` group (updates
of one output, merged by :func:`einkern.ir.fusion.merge_statements` into one
statement, whose kernel keeps the output tile in registers across every
product), a ``nest`` of statements without dependences between them (one
input staged once, or the sibling blocks of :mod:`.siblings`), or a ``nest``
whose members depend on one another run as a block-local chain
(:mod:`einkern.gpu.chain`); other groups give None.
"""

from __future__ import annotations

from dataclasses import replace

from ...gpu.chain import chain_mappings, dependent
from ...ir.fusion import MERGE, merge_statements
from ...ir.nodes import Problem
from ...ir.task import Task, statement_task
from .limits import device_limits

#: Seconds a kernel launch costs beyond its work (H100, driver API).
LAUNCH_SECONDS = 4e-6

#: Whether the planner may run sibling statements as one combined launch (on since
#: ``scripts/gpu_fusion.sh`` passed on an H100: local_grad3 p=12 at 32768 elements
#: 0.916 -> 0.637 ms; docs/fusion.md).  The emulator checks the parts; the block
#: dispatch that joins them is checked by ``pytest -m gpu`` only.
SIBLING_LAUNCHES = True


def group_seconds(
    problem: Problem, positions: tuple[int, ...], kind: str, depth: int
) -> float | None:
    """Predicted seconds of the group's one kernel, or None when the CUDA backend
    does not compile that kind of group as one kernel."""
    from ...gpu.decision import decide
    from ...gpu.model import predicted_time

    limits = device_limits()
    if len(positions) == 1:
        task = statement_task(problem, positions[0])
    elif kind == MERGE:
        task = merged_task(problem, positions)
    elif dependent(problem, positions):
        return chain_seconds(problem, positions)
    elif SIBLING_LAUNCHES:
        return siblings_seconds(problem, positions)
    else:
        return None
    return predicted_time(task, decide(task, limits), limits) + LAUNCH_SECONDS


def chain_seconds(problem: Problem, positions: tuple[int, ...]) -> float | None:
    """Predicted seconds of dependent statements run as one block-local chain
    (:func:`einkern.gpu.chain.chain_mappings`), or None when no chain fits."""
    found = chain_mappings(problem, positions, device_limits())
    return None if found is None else found.seconds + LAUNCH_SECONDS


def siblings_seconds(problem: Problem, positions: tuple[int, ...]) -> float | None:
    """Predicted seconds of statements without dependences between them run as one
    kernel: the shared-input kernel's (:mod:`einkern.gpu.shared_input`: their
    common input staged once per block) where it applies; else the combined launch
    of :mod:`.siblings`, their own predicted times less one launch each but one,
    and less the DRAM reads of the tensors they all read beyond the first
    (interleaved blocks find them in L2).  None when they depend on one another or
    their kernels cannot be combined."""
    from ...gpu.decision import decide
    from ...gpu.model import predicted_time
    from ...gpu.shared_input import shared_input_mappings
    from .generate import sibling_members
    from .siblings import why_not_combined

    if dependent(problem, positions):
        return None
    limits = device_limits()
    shared = shared_input_mappings(problem, positions, limits)
    if shared is not None:
        return shared.seconds + LAUNCH_SECONDS
    chosen = {p: decide(statement_task(problem, p), limits) for p in positions}
    lowered = sibling_members(problem, chosen, positions, "cost")
    if lowered is None or why_not_combined(lowered) is not None:
        return None
    alone = sum(predicted_time(statement_task(problem, p), chosen[p], limits) for p in positions)
    statements = [problem.program.statements[p] for p in positions]
    common = set.intersection(*({a.tensor for a in s.reads()} for s in statements))
    saved = (len(positions) - 1) * sum(problem.nbytes(t) for t in common)
    return max(alone - saved / limits.dram_bandwidth, alone / len(positions)) + LAUNCH_SECONDS


def merged_task(problem: Problem, positions: tuple[int, ...]) -> Task:
    """The one-statement task of a merge group's merged statement."""
    program = problem.program
    merged = merge_statements(program, positions, checked=True)
    alone = replace(program, statements=(merged,))
    return Task(Problem(alone, problem.sizes), (0,))
