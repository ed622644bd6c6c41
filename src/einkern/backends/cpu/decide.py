"""The default schedule of a whole program (:mod:`.schedule` decides each
statement's loops alone): each statement's :func:`~.schedule.decide_loop_schedule`,
then the ``blas-alone`` choice between BLAS calls and OpenMP loops, which needs
the cost model (:mod:`.model`)."""

from __future__ import annotations

import dataclasses

from ...ir.nodes import Problem
from .model import predicted_seconds
from .schedule import CpuSchedule, LoopDecision, decide_loop_schedule


def default_schedule(problem: Problem) -> CpuSchedule:
    """The schedule used when none is given."""
    return CpuSchedule(tuple(d.schedule for d in decide_schedule(problem)))


def decide_schedule(problem: Problem) -> tuple[LoopDecision, ...]:
    """Each statement's :func:`decide_loop_schedule`, then the ``blas-alone`` choice
    for a program that has both BLAS calls and OpenMP loops: OpenMP's threads keep
    spinning for a while after their loops and starve BLAS's (and the reverse), so
    either the other statements run on one thread or every statement runs as
    loops, whichever :mod:`.model` predicts faster (docs/tuning.md, "BLAS calls")."""
    statements = problem.program.statements
    decisions = [decide_loop_schedule(problem, s) for s in statements]
    calls = [d.schedule.blas for d in decisions]
    threaded = [not d.schedule.blas and d.schedule.collapse > 0 for d in decisions]
    if not any(calls) or not any(threaded):
        return tuple(decisions)
    alone = [
        dataclasses.replace(d.schedule, collapse=0) if t else d.schedule
        for d, t in zip(decisions, threaded, strict=True)
    ]
    loops = [dataclasses.replace(d.schedule, blas=False) for d in decisions]
    with_blas, without = (
        sum(predicted_seconds(problem, s, x) for s, x in zip(statements, chosen, strict=True))
        for chosen in (alone, loops)
    )
    figures = f"predicted {with_blas * 1e3:.3g} ms, against {without * 1e3:.3g} ms"
    if with_blas <= without:
        why = f"blas-alone: one thread beside the program's BLAS calls ({figures} as loops only)"
        chosen, marked = alone, threaded
    else:
        why = (
            "blas-alone: loops, not BLAS, beside the program's OpenMP loops (BLAS and"
            f" one-thread loops {figures})"
        )
        chosen, marked = loops, calls
    return tuple(
        LoopDecision(x, (*d.reasons, why)) if m else d
        for d, x, m in zip(decisions, chosen, marked, strict=True)
    )
