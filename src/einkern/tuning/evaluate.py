"""Evaluating variants: compile in parallel, measure serially, record everything.

An :class:`Evaluator` owns the shared resources (a thread pool for compiling,
the measurer); a :class:`Session` evaluates the configurations of one statement
that a search strategy proposes, within a :class:`Budget`, consulting and
filling a :class:`Store` (the tuning database) so a resumed run never measures
a recorded variant again.  :meth:`Evaluator.side_by_side` measures the
default and the winner in interleaved rounds at the end of a run (see
:mod:`.verdict`).  Each evaluated variant becomes an :class:`Outcome`:
``ok`` with its timing, or a failure kind from
:data:`~.target.FAILURE_KINDS`.  A variant whose result differs from the
reference by more than the dtype's tolerance is ``wrong`` and can never win.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..ir.task import Task
from .canonical import ProblemIdentity
from .db import TuningDB, TuningRecord
from .ranking import pick_best
from .search import SearchSpace, canonical
from .target import Config, ParameterConfig, Timing, TuningTarget, VariantError
from .verdict import ROUNDS, Verdict, judge
from .worker import InProcessMeasurer, Job, Measured, Measurer, ProcessMeasurer

DEFAULT_REPEATS = 10
DEFAULT_TIMEOUT_S = 60.0


def default_workers() -> int:
    """Compile threads: the CPU count, between 2 and 8."""
    return max(2, min(8, os.cpu_count() or 2))


def tolerance(task: Task) -> float:
    """Accepted relative error of ``task``: the loosest tolerance of its outputs'
    dtypes (:func:`einkern.semantics.tolerance`)."""
    program = task.program
    return max(program.tolerance(name) for name in task.outputs())


@dataclass(frozen=True)
class Outcome:
    """The result of evaluating one configuration."""

    config: Config = field(compare=False)
    config_key: str
    status: str  # "ok" or a failure kind
    reason: str = ""
    timing: Timing | None = None
    resumed: bool = False  # taken from the store, not measured by this run
    default: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def times(self) -> tuple[float, ...]:
        return self.timing.times if self.timing is not None else ()

    @property
    def resources(self) -> tuple[tuple[str, Any], ...]:
        return self.timing.resources if self.timing is not None else ()

    @property
    def median(self) -> float | None:
        return self.timing.median if self.timing is not None and self.times else None

    @property
    def cost(self) -> float:
        """The median time when successful, else infinity (what strategies minimise)."""
        return self.median if self.ok and self.median is not None else math.inf


@dataclass(frozen=True)
class SideBySide:
    """Times of the final interleaved measurement: every time of each variant, and
    each round's (default, winner) median."""

    default: tuple[float, ...] = ()
    winner: tuple[float, ...] = ()
    rounds: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class Budget:
    """Stop after ``evaluations`` variants or ``seconds`` of wall time (either, both
    or neither)."""

    evaluations: int | None = None
    seconds: float | None = None


class Store(Protocol):
    """Where outcomes (and the verdicts of finished runs) are kept between runs."""

    def get(self, config_key: str) -> Outcome | None: ...

    def put(self, outcome: Outcome) -> None: ...

    def put_verdict(self, verdict: Verdict) -> None: ...


class MemoryStore:
    """Outcomes in a dict (tests, simulation, runs without a database)."""

    def __init__(self) -> None:
        self.outcomes: dict[str, Outcome] = {}
        self.verdicts: list[Verdict] = []

    def put_verdict(self, verdict: Verdict) -> None:
        self.verdicts.append(verdict)

    def get(self, config_key: str) -> Outcome | None:
        found = self.outcomes.get(config_key)
        return None if found is None else dataclasses.replace(found, resumed=True)

    def put(self, outcome: Outcome) -> None:
        self.outcomes.setdefault(outcome.config_key, outcome)


def record_outcome(record: TuningRecord) -> Outcome:
    timing = None
    if record.times or record.error is not None:
        timing = Timing(
            record.times, record.error if record.error is not None else math.nan, record.resources
        )
    # the record's JSON form, as generic named values: a session puts the target's
    # own record in its place (Session.evaluate)
    return Outcome(
        ParameterConfig.from_json(record.config),
        record.config_key,
        record.status,
        record.reason,
        timing,
        resumed=True,
        default=record.default,
    )


@dataclass(frozen=True)
class DbStore:
    """Outcomes of one problem in a :class:`~.db.TuningDB`."""

    db: TuningDB
    identity: ProblemIdentity

    def get(self, config_key: str) -> Outcome | None:
        record = self.db.get(self.identity.key, config_key)
        return None if record is None else record_outcome(record)

    def put(self, outcome: Outcome) -> None:
        timing = outcome.timing
        self.db.add(
            TuningRecord(
                identity=self.identity,
                config_key=outcome.config_key,
                default=outcome.default,
                status=outcome.status,
                reason=outcome.reason,
                median=outcome.median,
                times=outcome.times,
                error=None if timing is None else timing.max_relative_error,
                resources=outcome.resources,
                timestamp=time.time(),
            )
        )

    def put_verdict(self, verdict: Verdict) -> None:
        self.db.add_verdict(verdict)


class Evaluator:
    """Compiles in a thread pool and measures in a worker process (``isolate``) or
    in this one.  Use as a context manager."""

    def __init__(
        self,
        target: TuningTarget,
        *,
        workers: int | None = None,
        isolate: bool = True,
        timeout: float = DEFAULT_TIMEOUT_S,
        repeats: int = DEFAULT_REPEATS,
        seed: int = 0,
    ):
        self.target = target
        self.timeout = timeout
        self.repeats = repeats
        self.seed = seed
        self.workers = workers or default_workers()
        self._pool = ThreadPoolExecutor(
            max_workers=self.workers, thread_name_prefix="einkern-compile"
        )
        self._measurer: Measurer = ProcessMeasurer() if isolate else InProcessMeasurer()

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._measurer.close()

    def compile(self, task: Task, configs: Sequence[Config]) -> list[tuple[Any, str | None, str]]:
        """Compile configurations in parallel: ``(handle, failure, reason)`` each."""

        def one(config: Config) -> tuple[Any, str | None, str]:
            try:
                return self.target.compile(task, config), None, ""
            except VariantError as error:
                return None, error.failure, error.message
            except Exception as error:  # noqa: BLE001 - a variant's failure is data
                last = traceback.format_exception_only(type(error), error)[-1].strip()
                return None, "compile", last

        return list(self._pool.map(one, configs))

    def measure(self, task: Task, config: Config, compiled: Any) -> Measured:
        """Measure one compiled variant.  Its inputs are drawn from a seed fixed per
        run and statement, so every variant of a statement is checked on the same
        inputs and targets may compute the reference once per worker."""
        job = Job(
            self.target,
            task,
            config,
            compiled,
            self.repeats,
            self.seed * 1_000_003 + task.positions[0],
        )
        return self._measurer.measure(job, self.timeout)

    def side_by_side(
        self, task: Task, default: Config, winner: Config, rounds: int = ROUNDS
    ) -> tuple[bool, float | None, str, SideBySide]:
        """Measure ``default`` and ``winner`` in ``rounds`` interleaved rounds (the
        order alternating) and judge them (:func:`.verdict.judge`): ``(beats,
        speedup, reason, times)``.  A winner that fails now does not beat the
        default; a default that fails now is beaten by a winner that works."""
        configs = {"default": default, "winner": winner}
        compiled = dict(zip(configs, self.compile(task, list(configs.values())), strict=True))
        for name, (_, failure, reason) in compiled.items():
            if failure is not None:
                return (
                    name == "default",
                    None,
                    f"the {name} failed to compile again ({failure}: {reason})",
                    SideBySide(),
                )
        times: dict[str, list[float]] = {name: [] for name in configs}
        medians: list[tuple[float, float]] = []
        for number in range(rounds):
            order = list(configs) if number % 2 == 0 else list(configs)[::-1]
            this_round: dict[str, float] = {}
            for name in order:
                measured = self.measure(task, configs[name], compiled[name][0])
                if measured.timing is None or not measured.timing.times:
                    why = measured.reason or measured.failure or "no timed runs"
                    partial = SideBySide(
                        tuple(times["default"]), tuple(times["winner"]), tuple(medians)
                    )
                    return (
                        name == "default",
                        None,
                        f"the {name} failed when measured again ({why})",
                        partial,
                    )
                times[name].extend(measured.timing.times)
                this_round[name] = measured.timing.median
            medians.append((this_round["default"], this_round["winner"]))
        result = SideBySide(tuple(times["default"]), tuple(times["winner"]), tuple(medians))
        beats, speedup, reason = judge(result.default, result.winner, result.rounds)
        return beats, speedup, reason, result


class Session:
    """Evaluations of one statement: what strategies call."""

    def __init__(
        self,
        evaluator: Evaluator,
        task: Task,
        space: SearchSpace,
        store: Store,
        budget: Budget,
        default_key: str = "",
        on_outcome: Callable[[Outcome], None] | None = None,
    ):
        self.evaluator = evaluator
        self.task = task
        self.space = space
        self.store = store
        self.budget = budget
        self.default_key = default_key
        self.on_outcome = on_outcome
        self.outcomes: dict[str, Outcome] = {}  # in evaluation order
        self.started = time.monotonic()
        self.tolerance = tolerance(task)

    # -- budget ---------------------------------------------------------------

    @property
    def used(self) -> int:
        return len(self.outcomes)

    def remaining(self) -> int | None:
        """Evaluations left (None: no count limit)."""
        if self.budget.evaluations is None:
            return None
        return max(0, self.budget.evaluations - self.used)

    def out_of_time(self) -> bool:
        seconds = self.budget.seconds
        return seconds is not None and time.monotonic() - self.started >= seconds

    @property
    def exhausted(self) -> bool:
        """No evaluation may follow: budget spent, or every valid variant of a space
        small enough to count evaluated (strategies stop by themselves otherwise)."""
        if self.remaining() == 0 or self.out_of_time():
            return True
        size = self.space.bounded_size()
        return size is not None and self.used >= size

    # -- evaluating -----------------------------------------------------------

    def outcome(self, config: Config) -> Outcome | None:
        return self.outcomes.get(canonical(config))

    def evaluate(self, configs: Sequence[Config]) -> list[Outcome]:
        """Evaluate configurations (already evaluated ones are returned again, free);
        fewer outcomes come back when the budget runs out."""
        wanted: dict[str, Config] = {}
        for config in configs:
            wanted.setdefault(canonical(config), config)
        to_compile: list[tuple[str, Config]] = []
        for key, config in wanted.items():
            if key in self.outcomes:
                continue
            remaining = self.remaining()
            if remaining is not None and len(to_compile) >= remaining:
                break
            if self.out_of_time():
                break
            recorded = self.store.get(key)
            if recorded is not None:  # the store holds the JSON form: keep the record
                self._finish(dataclasses.replace(recorded, config=config))
                continue
            invalid = self.space.runnable(config)
            if invalid is not None:
                self._finish(Outcome(config, key, "invalid", invalid))
                continue
            to_compile.append((key, config))
        limit = self.remaining()
        if limit is not None:
            to_compile = to_compile[:limit]
        compiled = self.evaluator.compile(self.task, [config for _, config in to_compile])
        for (key, config), (handle, failure, reason) in zip(to_compile, compiled, strict=True):
            if self.remaining() == 0 or self.out_of_time():
                break
            recorded = self.store.get(key)  # another tuner may have measured it meanwhile
            if recorded is not None:
                self._finish(dataclasses.replace(recorded, config=config))
            elif failure is not None:
                self._finish(Outcome(config, key, failure, reason))
            else:
                measured = self.evaluator.measure(self.task, config, handle)
                self._finish(self._judge(config, key, measured))
        return [self.outcomes[key] for key in wanted if key in self.outcomes]

    def _judge(self, config: Config, key: str, measured: Measured) -> Outcome:
        timing = measured.timing
        if timing is None:
            return Outcome(config, key, measured.failure or "crash", measured.reason)
        if not timing.times or not all(math.isfinite(t) and t >= 0 for t in timing.times):
            return Outcome(config, key, "crash", "no valid timed runs", timing)
        error = timing.max_relative_error
        if not math.isfinite(error) or error > self.tolerance:
            return Outcome(
                config,
                key,
                "wrong",
                f"max relative error {error:.3g} > tolerance {self.tolerance:g}",
                timing,
            )
        return Outcome(config, key, "ok", "", timing)

    def _finish(self, outcome: Outcome) -> None:
        if outcome.config_key == self.default_key and not outcome.default:
            outcome = Outcome(
                outcome.config,
                outcome.config_key,
                outcome.status,
                outcome.reason,
                outcome.timing,
                outcome.resumed,
                default=True,
            )
        self.outcomes[outcome.config_key] = outcome
        if not outcome.resumed:
            self.store.put(outcome)
        if self.on_outcome is not None:
            self.on_outcome(outcome)

    # -- results --------------------------------------------------------------

    def best(self) -> Outcome | None:
        """The winner among this session's successful outcomes (see :mod:`.ranking`)."""
        return pick_best(o for o in self.outcomes.values() if o.ok)  # type: ignore[return-value]
