"""Fake tuning targets shared by the tuning tests (and importable by the spawned
measuring process, which is why they live in a module of their own).

:class:`Synthetic` has three integer parameters ``a``, ``b``, ``c`` in
``0..size-1`` with the constraint ``a + b + c <= limit``; its "time" is a
deterministic bowl with a unique minimum at ``optimum``, and chosen
configurations misbehave on purpose: a wrong result, a dead process
(``os._exit``), a segfault, a hang, an exception.
"""

from __future__ import annotations

import ctypes
import os
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

import einkern
from einkern.ir.nodes import Problem
from einkern.ir.task import Task, statement_task
from einkern.tuning.search import canonical
from einkern.tuning.target import Config, ConfigType, Parameter, ParameterConfig, Timing

Point = tuple[int, int, int]

PROGRAM = """
program fake
dims n = 64
tensor A[n, n], B[n, n], C[n, n]
C[i,j] = A[i,k] * B[k,j]
"""


def fake_problem(n: int = 64) -> Problem:
    return einkern.make_problem(einkern.load(PROGRAM), {"n": n})


def C(**values: Any) -> ParameterConfig:  # noqa: N802 - reads like a constructor
    """A configuration of named values."""
    return ParameterConfig.from_values(values)


def point(config: Config) -> Point:
    return (config["a"], config["b"], config["c"])


@dataclass(frozen=True)
class Synthetic:
    """A deterministic target (see the module docstring)."""

    size: int = 6
    limit: int = 10
    optimum: Point = (4, 1, 3)
    wrong: tuple[Point, ...] = ()  # measured fastest, but with a large error
    exits: tuple[Point, ...] = ()  # os._exit in the worker
    segfaults: tuple[Point, ...] = ()
    hangs: tuple[Point, ...] = ()
    raises: tuple[Point, ...] = ()
    spread: float = 0.0  # relative jitter added to the timed runs (deterministic)
    backend: str = "synthetic"
    config_type: ClassVar[ConfigType] = ParameterConfig

    def device_key(self) -> dict[str, str]:
        return {"name": "synthetic device", "version": "1"}

    def parameters(self, task: Task) -> tuple[Parameter, ...]:
        values = tuple(range(self.size))
        return (Parameter("a", values), Parameter("b", values), Parameter("c", values))

    def violation(self, task: Task, config: Config) -> str | None:
        if sum(point(config)) > self.limit:
            return f"a + b + c > {self.limit}"
        return None

    def default_config(self, task: Task) -> Config:
        return ParameterConfig.from_values({"a": 0, "b": 0, "c": 0})

    def compile(self, task: Task, config: Config) -> Any:
        if self.violation(task, config) is not None:
            raise AssertionError(f"invalid variant compiled: {config}")
        return canonical(config)

    def cost(self, config: Config) -> float:
        a, b, c = point(config)
        oa, ob, oc = self.optimum
        return 1e-3 * (1 + (a - oa) ** 2 + 2 * (b - ob) ** 2 + 0.5 * (c - oc) ** 2)

    def measure(self, task: Task, config: Config, compiled: Any, repeats: int, seed: int) -> Timing:
        here = point(config)
        if here in self.exits:
            os._exit(3)
        if here in self.segfaults:
            ctypes.string_at(0)
        if here in self.hangs:
            time.sleep(60)
        if here in self.raises:
            raise RuntimeError("device fault")
        cost = self.cost(config)
        if here in self.wrong:
            return Timing((cost / 10,) * repeats, 0.5)
        jitter = [1 + self.spread * ((k * 7) % 5 - 2) / 2 for k in range(repeats)]
        return Timing(tuple(cost * j for j in jitter), 0.0)

    def model_cost(self, task: Task, config: Config) -> float:
        return self.cost(config)


@dataclass(frozen=True)
class Noisy:
    """A target measured under load, as a shared machine is.

    One parameter ``v`` in ``0..5``, default 0; the true time of ``v`` is
    ``costs[v]`` milliseconds.  Timed run ``k`` of a measurement is multiplied by
    ``load[k % len(load)]`` (a heavy-tailed pattern makes a wide, slow spread), and
    the first measurement an instance makes (the default's, in a tuning run) by
    ``first_load`` too.  ``model`` is the analytic cost of each ``v`` (what the
    ``model`` strategy measures first)."""

    costs: tuple[float, ...] = (1.0,) * 6
    load: tuple[float, ...] = (1.0,)
    first_load: float = 1.0
    model: tuple[float, ...] = (0.0, 1.0, 2.0, 3.0, 4.0, 5.0)
    backend: str = "noisy"
    measured: list = field(default_factory=list, compare=False, hash=False, repr=False)
    config_type: ClassVar[ConfigType] = ParameterConfig

    def device_key(self) -> dict[str, str]:
        return {"name": "noisy device", "version": "1"}

    def parameters(self, task: Task) -> tuple[Parameter, ...]:
        return (Parameter("v", tuple(range(len(self.costs)))),)

    def violation(self, task: Task, config: Config) -> str | None:
        return None

    def default_config(self, task: Task) -> Config:
        return C(v=0)

    def compile(self, task: Task, config: Config) -> Any:
        return canonical(config)

    def measure(self, task: Task, config: Config, compiled: Any, repeats: int, seed: int) -> Timing:
        burst = self.first_load if not self.measured else 1.0
        self.measured.append(config["v"])
        cost = 1e-3 * self.costs[config["v"]] * burst
        return Timing(tuple(cost * self.load[k % len(self.load)] for k in range(repeats)), 0.0)

    def model_cost(self, task: Task, config: Config) -> float:
        return self.model[config["v"]]


def test_synthetic_optimum_is_valid_and_unique():
    target = Synthetic()
    problem = fake_problem()
    best = {"a": 4, "b": 1, "c": 3}
    assert target.violation(statement_task(problem, 0), best) is None
    others = [
        {"a": a, "b": b, "c": c}
        for a in range(6)
        for b in range(6)
        for c in range(6)
        if (a, b, c) != (4, 1, 3)
    ]
    assert all(target.cost(other) > target.cost(best) for other in others)
