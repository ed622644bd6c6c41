"""Which configuration to compile with: the ``tune=`` policy of ``einkern.compile``.

``False``/``None``  the target's default (its decision algorithm)
``"cached"``/``True``  the confirmed winner of this exact problem on this
                    device; else that of the nearest problem size (same
                    statement, dtypes, layouts, device and einkern version;
                    nearest by the distance of log extents, as Kernel
                    Launcher's wisdom files do); else the default.  A winner
                    is *confirmed* when it beat the default side by side at
                    the end of its tuning run (:mod:`.verdict`); a record
                    that never did is never used
``"model"``         the configuration the target's cost model ranks first
``"full"``          tune now (default strategy and budget), recording into the
                    database, and use the winner if it beat the default side by
                    side, else the default

Every choice comes with a *source* saying where it came from (``"exact
record"``, ``"nearest record i=4000, j=4000, k=4000"``, ``"model"``,
``"tuned now (40 variants)"``, ``"default mapping"``), for the API to report.
A recorded configuration that is not valid for the problem at hand is skipped.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError
from ..ir.nodes import Problem
from ..ir.task import Task, tasks_of
from .canonical import identify, size_distance
from .db import TuningDB, TuningRecord, champion, default_path
from .ranking import Timed
from .search import space_for
from .strategies import MODEL_CANDIDATES
from .target import Config, TuningTarget
from .tuner import TuneOptions, tune_problem
from .verdict import Verdict

Policy = bool | str | None
DatabaseArg = TuningDB | str | os.PathLike | None
POLICIES = ("cached", "model", "full")
DEFAULT_SOURCE = "default mapping"


def normalize_policy(policy: Policy) -> str | None:
    """``"cached"``, ``"model"``, ``"full"``, or None for the default."""
    if policy is None or policy is False:
        return None
    if policy is True:
        return "cached"
    if isinstance(policy, str) and policy in POLICIES:
        return policy
    raise UsageError(
        f"unknown tuning policy {policy!r}",
        hint="tune= takes False, True, 'cached', 'model' or 'full'",
    )


def _recorded(target: TuningTarget, record: TuningRecord | Timed | Verdict | None) -> Config | None:
    """The record's configuration as the target's own type (None: not one of its)."""
    if record is None:
        return None
    try:
        return target.config_type.from_json(json.loads(record.config_key))
    except (KeyError, TypeError, ValueError):
        return None


def _usable(target: TuningTarget, task: Task, config: Config | None, default: Config) -> bool:
    return (
        config is not None
        and set(config.values()) == set(default.values())
        and target.violation(task, config) is None
    )


def _open(db: DatabaseArg, create: bool) -> tuple[TuningDB | None, bool]:
    """The database and whether this call opened it (and must close it); None when
    it does not exist and ``create`` is false."""
    if isinstance(db, TuningDB):
        return db, False
    path = default_path() if db is None else db
    if not create and not os.path.exists(path):
        return None, False
    return TuningDB(path, create=create), True


def lookup(target: TuningTarget, task: Task, db: TuningDB) -> tuple[Config, str] | None:
    """The confirmed winner usable for this task, exact or of the nearest size
    (see :meth:`~.db.TuningDB.champion`)."""
    identity = identify(target, task)
    default = target.default_config(task)
    exact = _recorded(target, db.champion(identity.key))
    if exact is not None and _usable(target, task, exact, default):
        return exact, "exact record"
    others = sorted({v.key for v in db.family_verdicts(identity.family)} - {identity.key})
    nearest = []
    for key in others:
        found = _recorded(target, champion(db.verdicts(key)))
        records = db.records(key)
        if found is not None and records:
            nearest.append(
                (
                    size_distance(records[0].identity.extents, identity.extents),
                    key,
                    found,
                    records[0].identity,
                )
            )
    for _, _, found, other in sorted(nearest, key=lambda item: item[:2]):
        if _usable(target, task, found, default):
            return found, f"nearest record {other.describe_sizes()}"
    return None


def model_choice(target: TuningTarget, task: Task, seed: int = 0) -> Config:
    """The valid configuration with the lowest predicted time (ties: space order)."""
    space = space_for(target, task)
    candidates = space.candidates(random.Random(seed), MODEL_CANDIDATES)
    if not candidates:
        return target.default_config(task)
    return min(candidates, key=lambda c: target.model_cost(task, c))


def choose_config(
    target: TuningTarget, task: Task, policy: Policy, db: DatabaseArg = None
) -> tuple[Config, str]:
    """The configuration of ``task`` under ``policy``, and its source.

    ``db`` is an open :class:`~.db.TuningDB`, a path, or None for the default
    database; ``"cached"`` never creates the file.  Raises
    :class:`~.db.TuningDatabaseError` when the database is unusable."""
    return choose_configs(target, task.problem, policy, db, tasks=(task,))[0]


def choose_configs(
    target: TuningTarget,
    problem: Problem,
    policy: Policy,
    db: DatabaseArg = None,
    tasks: Sequence[Task] | None = None,
    options: TuneOptions | None = None,
) -> list[tuple[Config, str]]:
    """:func:`choose_config` for every task of ``problem`` (or those given); with
    ``"full"`` all of them are tuned in one session (one measuring process)."""
    mode = normalize_policy(policy)
    tasks = tuple(tasks) if tasks is not None else tasks_of(problem)
    defaults = {task: target.default_config(task) for task in tasks}
    if mode is None:
        return [(defaults[task], DEFAULT_SOURCE) for task in tasks]
    if mode == "model":
        return [(model_choice(target, task), "model") for task in tasks]
    database, opened = _open(db, create=mode == "full")
    try:
        if mode == "full":
            assert database is not None
            results = tune_problem(target, problem, options or TuneOptions(), database, tasks=tasks)
            chosen = []
            for task, result in zip(tasks, results, strict=True):
                if result.best is None:
                    chosen.append(
                        (defaults[task], f"{DEFAULT_SOURCE} (tuning found no working variant)")
                    )
                elif not result.beats_default:
                    chosen.append(
                        (
                            defaults[task],
                            f"{DEFAULT_SOURCE} (no variant beat it "
                            f"side by side, {result.evaluations} variants)",
                        )
                    )
                else:
                    chosen.append(
                        (result.best.config, f"tuned now ({result.evaluations} variants)")
                    )
            return chosen
        chosen = []
        for task in tasks:
            found = None
            if database is not None:
                found = lookup(target, task, database)
            chosen.append(found if found is not None else (defaults[task], DEFAULT_SOURCE))
        return chosen
    finally:
        if opened and database is not None:
            database.close()


def tuned_build_argument(
    backend: str, problem: Problem, policy: Policy, db: DatabaseArg = None
) -> tuple[Any, tuple[str, ...]]:
    """What ``Kernel`` passes to ``backend.build(problem, ...)`` under ``policy``, and
    the source of each statement's configuration: a
    :class:`~einkern.backends.cpu.schedule.CpuSchedule` for ``cpu``, a
    ``{statement: configuration}`` dict of mappings for ``cuda``; None (build with
    the defaults) when ``policy`` is off."""
    if normalize_policy(policy) is None:
        return None, ()
    from .target import get_target

    tasks = tasks_of(problem)
    chosen = choose_configs(get_target(backend), problem, policy, db, tasks=tasks)
    sources = tuple(source for _, source in chosen)
    configs = [config for config, _ in chosen]
    if backend == "cpu":
        from .cpu_target import schedule_from_configs

        return schedule_from_configs(problem, configs), sources
    # the API's mappings= names statements: each one-statement task by its position
    return {task.position: config for task, config in zip(tasks, configs, strict=True)}, sources
