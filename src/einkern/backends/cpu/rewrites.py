"""The CPU backend's model for the rewrite plan (:mod:`einkern.ir.rewrite_plan`).

On the CPU the plan offers ``split_products`` and ``ttgt``: a binary contraction
whose operands are not in GEMM order is permuted into it when the copies and
the BLAS calls (:mod:`.blas`) are predicted, by :mod:`.model`, to take at most
:data:`~einkern.ir.rewrite_plan.MARGIN` of the statement's own loops.
``split_k`` and ``relayout`` are GPU rewrites (the CPU's threads already split
the output loops, and its loops read any layout through the cache).
"""

from __future__ import annotations

from ...ir.nodes import Problem
from .decide import decide_schedule
from .model import predicted_seconds, threads

#: The rewrites the CPU backend plans.
CPU_REWRITES = ("split_products", "ttgt")


class CpuRewriteModel:
    """Predicted seconds of statements under their default schedules."""

    @property
    def sm_count(self) -> int:
        """The OpenMP threads (the plan's split-K, which would use it, is not offered)."""
        return threads()

    def time(self, problem: Problem, positions: range) -> float:
        statements = problem.program.statements
        decisions = decide_schedule(problem)
        return sum(
            predicted_seconds(problem, statements[p], decisions[p].schedule) for p in positions
        )

    def blocks(self, problem: Problem, position: int) -> int:
        return threads()

    def tensor_cores(self, problem: Problem, position: int) -> bool:
        return False

    def details(self, problem: Problem, position: int) -> str:
        return "BLAS" if decide_schedule(problem)[position].schedule.blas else "generated loops"
