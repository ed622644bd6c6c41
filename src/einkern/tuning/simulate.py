"""Replaying a tuning database: compare search strategies without the device.

A :class:`SimulatedTarget` answers ``measure`` by looking up the recorded
outcome of the configuration (a recorded failure fails the same way; a
configuration that was never recorded fails as ``invalid``).  Its search space
is the real target's when that can be built here (CPU always; CUDA when its
target does not need a GPU to describe the space), else one derived from the
recorded configurations (each parameter's recorded values, sorted).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from ..ir.task import Task
from .canonical import ProblemIdentity, make_identity, same_problem
from .db import TuningDB, TuningRecord
from .search import canonical
from .target import (
    Config,
    ConfigType,
    Parameter,
    ParameterConfig,
    Timing,
    TuningTarget,
    VariantError,
)


def _sort_key(value: Any) -> tuple:
    if isinstance(value, bool):
        return (1, float(value), "")
    if isinstance(value, (int, float)):
        return (0, float(value), "")
    return (2, 0.0, json.dumps(value, sort_keys=True))


@dataclass(frozen=True)
class SimulatedTarget:
    """A target whose measurements are the records of one problem.

    ``base`` (optional) provides the search space, default and cost model."""

    records: tuple[TuningRecord, ...]
    base: TuningTarget | None = None

    @property
    def backend(self) -> str:
        return self.records[0].identity.backend if self.records else "simulated"

    @property
    def config_type(self) -> ConfigType:
        """The base target's configuration record, else named JSON values."""
        return self.base.config_type if self.base is not None else ParameterConfig

    def device_key(self) -> dict[str, str]:
        return dict(self.records[0].identity.device) if self.records else {}

    def _by_config(self) -> dict[str, TuningRecord]:
        return {record.config_key: record for record in self.records}

    def parameters(self, task: Task) -> tuple[Parameter, ...]:
        if self.base is not None:
            return self.base.parameters(task)
        values: dict[str, dict[str, Any]] = defaultdict(dict)
        for record in self.records:
            for name, value in record.config.items():
                values[name][json.dumps(value, sort_keys=True)] = value
        return tuple(
            Parameter(name, tuple(sorted(found.values(), key=_sort_key)))
            for name, found in sorted(values.items())
        )

    def violation(self, task: Task, config: Config) -> str | None:
        if self.base is not None:
            return self.base.violation(task, config)
        return None

    def default_config(self, task: Task) -> Config:
        if self.base is not None:
            return self.base.default_config(task)
        for record in self.records:
            if record.default:
                return self.config_type.from_json(record.config)
        if not self.records:
            raise UsageError("nothing recorded to simulate")
        return self.config_type.from_json(self.records[0].config)

    def compile(self, task: Task, config: Config) -> str:
        return canonical(config)

    def measure(self, task: Task, config: Config, compiled: Any, repeats: int, seed: int) -> Timing:
        record = self._by_config().get(canonical(config))
        if record is None:
            raise VariantError("invalid", "not recorded in the simulated database")
        if not record.ok:
            raise VariantError(record.status, record.reason or "recorded failure")
        error = record.error if record.error is not None and math.isfinite(record.error) else 0.0
        return Timing(record.times, error, record.resources)

    def model_cost(self, task: Task, config: Config) -> float:
        if self.base is None:
            raise UsageError("no cost model to simulate with for this backend here")
        return self.base.model_cost(task, config)


@dataclass(frozen=True)
class Recorded:
    """The records of one problem found in a database, and where they came from."""

    identity: ProblemIdentity | None
    records: tuple[TuningRecord, ...]


def recorded_task(db: TuningDB, backend: str, task: Task) -> Recorded:
    """The records of ``task`` in ``db``: of the device and einkern version with the
    most records of it."""
    wanted = make_identity(backend, {}, 0, task)
    groups: dict[str, list[TuningRecord]] = defaultdict(list)
    for record in db.records():
        if same_problem(record.identity, wanted):
            groups[record.identity.key].append(record)
    if not groups:
        return Recorded(None, ())
    chosen = max(groups.values(), key=lambda rs: (len(rs), rs[0].identity.key))
    return Recorded(chosen[0].identity, tuple(chosen))


def simulated_targets(
    db: TuningDB, backend: str, base: TuningTarget | None, tasks: Sequence[Task]
) -> list[tuple[SimulatedTarget, Recorded]]:
    """One simulated target per task (UsageError when one has no records)."""
    found = []
    for task in tasks:
        recorded = recorded_task(db, backend, task)
        if not recorded.records:
            raise UsageError(
                f"{db.path} has no {backend} records of {task.name} at these sizes",
                hint="simulate with the database, program and extents that were tuned",
            )
        found.append((SimulatedTarget(recorded.records, base), recorded))
    return found
