"""The CUDA cost of a candidate group for the fusion planner
(:mod:`einkern.ir.fusion_plan`): the analytic model (:mod:`einkern.gpu.model`) of
the kernel the decision algorithm maps it to, plus a launch.

The CUDA backend compiles one statement per kernel, so a group is a kernel here
when it is one statement or a ``merge`` group (updates of one output, merged by
:func:`einkern.ir.fusion.merge_statements` into one statement, whose kernel keeps
the output tile in registers across every product); other kinds give None.
"""

from __future__ import annotations

from ...ir.fusion import MERGE, merge_statements
from ...ir.nodes import Problem, Program
from ...ir.task import Task, statement_task
from .limits import device_limits

#: Seconds a kernel launch costs beyond its work (H100, driver API).
LAUNCH_SECONDS = 4e-6


def group_seconds(
    problem: Problem, positions: tuple[int, ...], kind: str, depth: int
) -> float | None:
    """Predicted seconds of the group's one kernel, or None when the CUDA backend
    does not compile that kind of group as one kernel."""
    from ...gpu.decision import decide
    from ...gpu.model import predicted_time

    if len(positions) == 1:
        task = statement_task(problem, positions[0])
    elif kind == MERGE:
        task = merged_task(problem, positions)
    else:
        return None
    limits = device_limits()
    return predicted_time(task, decide(task, limits), limits) + LAUNCH_SECONDS


def merged_task(problem: Problem, positions: tuple[int, ...]) -> Task:
    """The one-statement task of a merge group's merged statement."""
    program = problem.program
    merged = merge_statements(program, positions, checked=True)
    alone = Program(program.name, program.extents, program.tensors, program.scalars, (merged,))
    return Task(Problem(alone, problem.sizes), (0,))
