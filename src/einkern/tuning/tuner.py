"""Tuning a problem: every task, one search each, results in the database.

:func:`tune_problem` opens one :class:`~.evaluate.Evaluator` (compile threads
and the measuring process) for all tasks and runs :func:`tune_task` on each
(today a task is one statement): build the task's search space, evaluate the default
configuration first, then let the strategy search within the budget.
Outcomes go to the store as they arrive, so a killed run loses at most the
variant being measured, and a re-run resumes from what is recorded.  Finally
the winner and the default are measured again side by side and the
:class:`~.verdict.Verdict` goes to the store: the speedup reported is that
same-run ratio, and only a winner that beat the default there is ever used by
``tune="cached"``.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..ir.nodes import Problem
from ..ir.task import Task, tasks_of
from .canonical import ProblemIdentity, identify
from .db import TuningDB
from .evaluate import (
    DEFAULT_REPEATS,
    DEFAULT_TIMEOUT_S,
    Budget,
    DbStore,
    Evaluator,
    MemoryStore,
    Outcome,
    Session,
    Store,
)
from .search import SearchSpace, canonical, space_for
from .strategies import SearchContext, get_strategy
from .target import Config, TuningTarget
from .verdict import Verdict

DEFAULT_STRATEGY = "annealing"
DEFAULT_BUDGET = 40


@dataclass(frozen=True)
class TuneOptions:
    """How to tune: strategy by name, budget, seed and evaluation settings.

    ``isolate=False`` measures in this process (no crash isolation, no timeout)."""

    strategy: str = DEFAULT_STRATEGY
    budget: Budget = field(default_factory=lambda: Budget(evaluations=DEFAULT_BUDGET))
    seed: int = 0
    workers: int | None = None
    isolate: bool = True
    timeout: float = DEFAULT_TIMEOUT_S
    repeats: int = DEFAULT_REPEATS


@dataclass(frozen=True)
class Progress:
    """Reported after every evaluated variant."""

    position: int
    done: int
    total: int | None  # evaluations this search may make (None: unknown)
    best: Outcome | None
    default: Outcome | None
    last: Outcome


@dataclass(frozen=True)
class StatementResult:
    """What tuning one statement found."""

    position: int
    statement: str
    identity: ProblemIdentity
    default: Outcome | None
    best: Outcome | None
    evaluations: int
    resumed: int  # of which taken from the store
    failures: tuple[tuple[str, int], ...]  # kind, count
    seconds: float
    space_size: int | None  # valid variants (None: too many to count)
    estimated_size: tuple[int, int] | None = None  # (estimate, ± 95 %) when not counted
    verdict: Verdict | None = None  # the final side-by-side comparison (None: no winner)

    @property
    def speedup(self) -> float | None:
        """The default's median over the winner's, both measured side by side at the
        end of this run (None when not measured)."""
        return self.verdict.speedup if self.verdict is not None else None

    @property
    def beats_default(self) -> bool:
        """Whether the winner beat the default in the same run (see :mod:`.verdict`)."""
        return self.verdict is not None and self.verdict.beats


def total_evaluations(space: SearchSpace, budget: Budget) -> int | None:
    """Evaluations a search may make: the budget, or fewer in a small space; None
    when neither bounds it (a time budget on a space too large to count)."""
    size = space.bounded_size()
    if budget.evaluations is None:
        return size
    return budget.evaluations if size is None else min(size, budget.evaluations)


def tune_task(
    target: TuningTarget,
    task: Task,
    evaluator: Evaluator,
    options: TuneOptions,
    store: Store | None = None,
    progress: Callable[[Progress], None] | None = None,
    identity: ProblemIdentity | None = None,
) -> StatementResult:
    """Search ``task`` with ``evaluator``; outcomes go to ``store`` (an in-memory
    one when None)."""
    position = task.positions[0]
    started = time.monotonic()
    identity = identity if identity is not None else identify(target, task)
    store = store if store is not None else MemoryStore()
    space = space_for(target, task)
    default = target.default_config(task)
    total = total_evaluations(space, options.budget)
    session: Session

    def report(outcome: Outcome) -> None:
        if progress is not None:
            default_outcome = session.outcomes.get(canonical(default))
            progress(
                Progress(position, session.used, total, session.best(), default_outcome, outcome)
            )

    session = Session(
        evaluator,
        task,
        space,
        store,
        options.budget,
        default_key=canonical(default),
        on_outcome=report,
    )

    def model(config: Config) -> float:
        return target.model_cost(task, config)

    strategy = get_strategy(options.strategy)
    context = SearchContext(space, default, model, batch=evaluator.workers)
    rng = random.Random(f"{options.seed}:{position}")
    session.evaluate([default])
    strategy.search(context, session, rng)
    best = session.best()
    verdict = None
    if best is not None:
        verdict = confirm(evaluator, task, identity, default, best.config)
        store.put_verdict(verdict)
    outcomes = list(session.outcomes.values())
    failures = Counter(o.status for o in outcomes if not o.ok)
    size = space.bounded_size()
    return StatementResult(
        position=position,
        statement="; ".join(str(statement) for statement in task.statements),
        identity=identity,
        default=session.outcomes.get(canonical(default)),
        best=best,
        evaluations=len(outcomes),
        resumed=sum(o.resumed for o in outcomes),
        failures=tuple(sorted(failures.items())),
        seconds=time.monotonic() - started,
        space_size=size,
        estimated_size=None if size is not None else space.estimated_size(),
        verdict=verdict,
    )


def confirm(
    evaluator: Evaluator, task: Task, identity: ProblemIdentity, default: Config, winner: Config
) -> Verdict:
    """Measure the default beside the winner and judge them (see :mod:`.verdict`).
    The default itself as winner is recorded as not beating it (speedup 1)."""
    default_key, winner_key = canonical(default), canonical(winner)
    if winner_key == default_key:
        return Verdict(
            identity.key,
            identity.family,
            winner_key,
            default_key,
            False,
            1.0,
            "the default is the best variant",
            timestamp=time.time(),
        )
    beats, speedup, reason, times = evaluator.side_by_side(task, default, winner)
    return Verdict(
        identity.key,
        identity.family,
        winner_key,
        default_key,
        beats,
        speedup,
        reason,
        times.default,
        times.winner,
        times.rounds,
        time.time(),
    )


def tune_problem(
    target: TuningTarget,
    problem: Problem,
    options: TuneOptions,
    db: TuningDB | None = None,
    progress: Callable[[Progress], None] | None = None,
    tasks: Sequence[Task] | None = None,
) -> tuple[StatementResult, ...]:
    """Tune every task of ``problem`` (or those given), recording into ``db``."""
    tasks = tuple(tasks) if tasks is not None else tasks_of(problem)
    results = []
    with Evaluator(
        target,
        workers=options.workers,
        isolate=options.isolate,
        timeout=options.timeout,
        repeats=options.repeats,
        seed=options.seed,
    ) as evaluator:
        for task in tasks:
            identity = identify(target, task)
            store: Store = DbStore(db, identity) if db is not None else MemoryStore()
            results.append(tune_task(target, task, evaluator, options, store, progress, identity))
    return tuple(results)
