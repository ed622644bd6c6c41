"""How the CPU code generator lays out each statement's loops.

A :class:`CpuSchedule` holds one :class:`LoopSchedule` per statement.  Code
generation takes a schedule as an argument, so tuning (a later concern) only
has to produce a different schedule; :func:`default_schedule` derives a sensible
one from the problem alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...ir.nodes import Expr, Problem, Statement, Sum, children

#: Statements doing fewer elementary operations than this run on one thread:
#: starting a parallel region costs more than it saves.
PARALLEL_MIN_WORK = 1 << 15

#: When the parallel loops outside the innermost one have at least this many
#: iterations in all, only they are collapsed into the OpenMP loop, leaving the
#: innermost (contiguous) loop whole inside each thread so it can vectorise.
OUTER_PARALLELISM = 64


@dataclass(frozen=True)
class LoopSchedule:
    """Loop nest of one statement.

    ``order`` lists the statement's distinct parallel (output) indices, outermost
    loop first.  The first ``collapse`` loops form the OpenMP ``parallel for``;
    ``collapse == 0`` runs the statement on one thread.  Reduction loops always
    stay inside the parallel loops, so threads never write the same element."""

    order: tuple[str, ...]
    collapse: int

    def __post_init__(self) -> None:
        if len(set(self.order)) != len(self.order):
            raise ValueError(f"loop order repeats an index: {self.order}")
        if not 0 <= self.collapse <= len(self.order):
            raise ValueError(f"collapse {self.collapse} out of range for order {self.order}")


@dataclass(frozen=True)
class CpuSchedule:
    """One :class:`LoopSchedule` per statement of the program, in order."""

    statements: tuple[LoopSchedule, ...]


def parallel_indices(statement: Statement) -> tuple[str, ...]:
    """The statement's distinct output indices, in order of first appearance."""
    return tuple(dict.fromkeys(statement.output.indices))


def default_loop_order(problem: Problem, statement: Statement) -> tuple[str, ...]:
    """Parallel indices ordered by decreasing output stride.

    The innermost loop then walks the output's contiguous dimension, and the
    others follow the output's memory order (an index repeated in the output
    counts with its smallest stride, so it is placed as its innermost use)."""
    strides = problem.strides(statement.output.tensor)
    row = problem.program.tensor(statement.output.tensor).layout == "row"
    keys: dict[str, tuple[int, int]] = {}
    for position, (index, stride) in enumerate(zip(statement.output.indices, strides, strict=True)):
        # Larger stride first; ties (size-1 dimensions) in the layout's memory order.
        key = (-stride, position if row else -position)
        keys[index] = max(key, keys.get(index, key))
    return tuple(sorted(parallel_indices(statement), key=keys.__getitem__))


def statement_work(problem: Problem, statement: Statement) -> int:
    """Rough count of elementary operations the statement performs."""
    iterations = math.prod(problem.index_size(statement, i) for i in parallel_indices(statement))
    return iterations * _expr_work(problem, statement, statement.rhs)


def _expr_work(problem: Problem, statement: Statement, expr: Expr) -> int:
    inner = 1 + sum(_expr_work(problem, statement, child) for child in children(expr))
    if isinstance(expr, Sum):
        return inner * math.prod(problem.index_size(statement, i) for i in expr.indices)
    return inner


def default_loop_schedule(problem: Problem, statement: Statement) -> LoopSchedule:
    """Memory-order loops; parallel over the outer loops when there is enough work."""
    order = default_loop_order(problem, statement)
    if not order or statement_work(problem, statement) < PARALLEL_MIN_WORK:
        return LoopSchedule(order, 0)
    if len(order) == 1:
        return LoopSchedule(order, 1)
    outer = math.prod(problem.index_size(statement, index) for index in order[:-1])
    collapse = len(order) - 1 if outer >= OUTER_PARALLELISM else len(order)
    return LoopSchedule(order, collapse)


def default_schedule(problem: Problem) -> CpuSchedule:
    """The schedule used when none is given."""
    return CpuSchedule(tuple(default_loop_schedule(problem, s) for s in problem.program.statements))


def check_schedule(problem: Problem, schedule: CpuSchedule) -> None:
    """Raise ValueError unless ``schedule`` fits the problem's statements."""
    statements = problem.program.statements
    if len(schedule.statements) != len(statements):
        raise ValueError(
            f"schedule has {len(schedule.statements)} loop nests for {len(statements)} statements"
        )
    for number, (loops, statement) in enumerate(zip(schedule.statements, statements, strict=True)):
        if set(loops.order) != set(parallel_indices(statement)):
            raise ValueError(
                f"statement {number}: loop order {loops.order} is not a permutation of "
                f"the output indices {parallel_indices(statement)}"
            )
