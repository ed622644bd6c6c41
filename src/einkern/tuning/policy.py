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
                    database, and use the best

Every choice comes with a *source* saying where it came from (``"exact
record"``, ``"nearest record i=4000, j=4000, k=4000"``, ``"model"``,
``"tuned now (40 variants)"``, ``"default mapping"``), for the API to report.
A recorded configuration that is not valid for the problem at hand is skipped.
"""

from __future__ import annotations

import os
import random
from typing import Any

from ..errors import UsageError
from ..ir.nodes import Problem
from .canonical import identify, size_distance
from .db import TuningDB, champion, default_path
from .space import space_for
from .strategies import MODEL_CANDIDATES
from .target import Config, TuningTarget
from .tuner import TuneOptions, tune_problem

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
    raise UsageError(f"unknown tuning policy {policy!r}",
                     hint="tune= takes False, True, 'cached', 'model' or 'full'")


def _usable(target: TuningTarget, problem: Problem, position: int, config: Config,
            default: Config) -> bool:
    return set(config) == set(default) and target.violation(problem, position, config) is None


def _open(db: DatabaseArg, create: bool) -> tuple[TuningDB | None, bool]:
    """The database and whether this call opened it (and must close it); None when
    it does not exist and ``create`` is false."""
    if isinstance(db, TuningDB):
        return db, False
    path = default_path() if db is None else db
    if not create and not os.path.exists(path):
        return None, False
    return TuningDB(path, create=create), True


def lookup(target: TuningTarget, problem: Problem, position: int,
           db: TuningDB) -> tuple[Config, str] | None:
    """The confirmed winner usable for this problem, exact or of the nearest size
    (see :meth:`~.db.TuningDB.champion`)."""
    identity = identify(target, problem, position)
    default = target.default_config(problem, position)
    exact = db.champion(identity.key)
    if exact is not None and _usable(target, problem, position, exact.config, default):
        return exact.config, "exact record"
    others = sorted({v.key for v in db.family_verdicts(identity.family)} - {identity.key})
    nearest = []
    for key in others:
        found = champion(db.verdicts(key))
        records = db.records(key)
        if found is not None and records:
            nearest.append((size_distance(records[0].identity.extents, identity.extents), key,
                            found, records[0].identity))
    for _, _, found, other in sorted(nearest, key=lambda item: item[:2]):
        if _usable(target, problem, position, found.config, default):
            return found.config, f"nearest record {other.describe_sizes()}"
    return None


def model_choice(target: TuningTarget, problem: Problem, position: int, seed: int = 0) -> Config:
    """The valid configuration with the lowest predicted time (ties: space order)."""
    space = space_for(target, problem, position)
    candidates = space.candidates(random.Random(seed), MODEL_CANDIDATES)
    if not candidates:
        return target.default_config(problem, position)
    return min(candidates, key=lambda c: target.model_cost(problem, position, c))


def choose_config(target: TuningTarget, problem: Problem, position: int, policy: Policy,
                  db: DatabaseArg = None) -> tuple[Config, str]:
    """The configuration of statement ``position`` under ``policy``, and its source.

    ``db`` is an open :class:`~.db.TuningDB`, a path, or None for the default
    database; ``"cached"`` never creates the file.  Raises
    :class:`~.db.TuningDatabaseError` when the database is unusable."""
    return choose_configs(target, problem, policy, db, positions=(position,))[0]


def choose_configs(target: TuningTarget, problem: Problem, policy: Policy,
                   db: DatabaseArg = None,
                   positions: tuple[int, ...] | None = None,
                   options: TuneOptions | None = None) -> list[tuple[Config, str]]:
    """:func:`choose_config` for every statement (or those at ``positions``); with
    ``"full"`` all of them are tuned in one session (one measuring process)."""
    mode = normalize_policy(policy)
    positions = positions if positions is not None else tuple(
        range(len(problem.program.statements)))
    defaults = {p: target.default_config(problem, p) for p in positions}
    if mode is None:
        return [(defaults[p], DEFAULT_SOURCE) for p in positions]
    if mode == "model":
        return [(model_choice(target, problem, p), "model") for p in positions]
    database, opened = _open(db, create=mode == "full")
    try:
        if mode == "full":
            assert database is not None
            results = tune_problem(target, problem, options or TuneOptions(), database,
                                   positions=positions)
            chosen = []
            for position, result in zip(positions, results, strict=True):
                if result.best is None:
                    chosen.append((defaults[position], f"{DEFAULT_SOURCE} (tuning found no "
                                   "working variant)"))
                elif not result.beats_default:
                    chosen.append((defaults[position], f"{DEFAULT_SOURCE} (no variant beat it "
                                   f"side by side, {result.evaluations} variants)"))
                else:
                    chosen.append((result.best.config,
                                   f"tuned now ({result.evaluations} variants)"))
            return chosen
        chosen = []
        for position in positions:
            found = None
            if database is not None:
                found = lookup(target, problem, position, database)
            chosen.append(found if found is not None else (defaults[position], DEFAULT_SOURCE))
        return chosen
    finally:
        if opened and database is not None:
            database.close()


def tuned_build_argument(backend: str, problem: Problem, policy: Policy,
                         db: DatabaseArg = None) -> tuple[Any, tuple[str, ...]]:
    """What ``Kernel`` passes to ``backend.build(problem, ...)`` under ``policy``, and
    the source of each statement's configuration: a
    :class:`~einkern.backends.cpu.schedule.CpuSchedule` for ``cpu``, a
    ``{statement: configuration}`` dict of mappings for ``cuda``; None (build with
    the defaults) when ``policy`` is off."""
    if normalize_policy(policy) is None:
        return None, ()
    from .target import get_target

    chosen = choose_configs(get_target(backend), problem, policy, db)
    sources = tuple(source for _, source in chosen)
    configs = [config for config, _ in chosen]
    if backend == "cpu":
        from .cpu_target import schedule_from_configs

        return schedule_from_configs(problem, configs), sources
    return dict(enumerate(configs)), sources
