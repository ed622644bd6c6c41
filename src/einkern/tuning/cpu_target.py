"""The CPU backend as a tuning target.

Parameters of one statement (a configuration is a JSON dict):

``order``       the parallel loops, outermost first (a list of index names; all
                permutations for up to three indices, else the most promising
                :data:`MAX_ORDERS`, the default's always among them)
``collapse``    loops of the nest in the OpenMP ``parallel for`` (0: one thread)
``tile_<idx>``  tile size of a parallel or outermost-sum reduction index
                (0: untiled); the largest few indices only
``inner``       parallel point loops moved inside the reduction loops
                (statements with a sum only)
``blas``        1: the statement is BLAS calls (:mod:`einkern.backends.cpu.blas`;
                statements that are a GEMM in memory only), 0: generated loops

:func:`schedule_from_configs` turns chosen configurations into the
:class:`~einkern.backends.cpu.schedule.CpuSchedule` that
``CpuBackend.build(problem, schedule)`` takes.
"""

from __future__ import annotations

import ctypes
import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from ..arrays import copy_host_array
from ..backends.cpu.backend import CpuExecutable, load_library
from ..backends.cpu.blas import SETTLE_S, blas_available, gemm_of
from ..backends.cpu.codegen import emit_c
from ..backends.cpu.compiler import cache_directory, cached_library, compile_library, toolchain
from ..backends.cpu.decide import decide_schedule
from ..backends.cpu.model import predicted_seconds, threads
from ..backends.cpu.schedule import (
    CpuSchedule,
    LoopSchedule,
    default_loop_order,
    default_loop_schedule,
    parallel_indices,
    schedule_violation,
    tileable_reduction_indices,
    top_level_sums,
    with_accumulation,
)
from ..ir.nodes import Problem, Statement
from ..ir.task import Task
from ..reference import evaluate
from .target import Config, ConfigType, Parameter, ParameterConfig, Timing, VariantError

MAX_ORDERS = 6
TILE_SIZES = (4, 8, 16, 32, 64, 128, 256)
MAX_TILE_CHOICES = 5  # tile sizes offered per index, besides 0 (untiled)
MAX_TILED_PARALLEL = 3
MAX_TILED_REDUCTION = 2
MAX_COLLAPSE = 3
MAX_INNER = 2
MIN_REPEATS = 10
#: Warm-up before timing: runs until this many seconds have passed (idle cores and
#: OpenMP threads take a few milliseconds to come up to speed).
WARMUP_S = 0.03
#: Short kernels are timed until this many seconds have passed (10x the runs at most).
MIN_TIMED_S = 0.03


def loop_schedule(config: Config | Mapping[str, Any]) -> LoopSchedule:
    """The loop schedule a configuration (or its JSON form) describes
    (ValueError/KeyError/TypeError if malformed)."""
    values = dict(config) if isinstance(config, Mapping) else config.values()
    tiles = tuple(
        sorted(
            (name[len("tile_") :], int(value))
            for name, value in values.items()
            if name.startswith("tile_") and value
        )
    )
    order = values["order"]
    if not isinstance(order, (list, tuple)) or not all(isinstance(i, str) for i in order):
        raise TypeError(f"order must be a list of index names, got {order!r}")
    return LoopSchedule(
        tuple(order),
        int(values["collapse"]),
        tiles,
        int(values.get("inner", 0)),
        blas=bool(values.get("blas", 0)),
    )


def schedule_from_configs(
    problem: Problem, configs: Sequence[Config | Mapping[str, Any] | None]
) -> CpuSchedule:
    """A CPU schedule with one loop schedule per statement: from its configuration,
    or the default when it is None.  Raises ValueError for an invalid one."""
    statements = problem.program.statements
    if len(configs) != len(statements):
        raise ValueError(f"{len(configs)} configurations for {len(statements)} statements")
    defaults = decide_schedule(problem)
    loops = []
    for position, (statement, config) in enumerate(zip(statements, configs, strict=True)):
        if config is None:
            loops.append(defaults[position].schedule)
            continue
        schedule = loop_schedule(config)
        reason = schedule_violation(problem, statement, schedule)
        if reason is not None:
            raise ValueError(f"statement {position}: {reason}")
        loops.append(with_accumulation(problem, statement, schedule))
    return CpuSchedule(tuple(loops))


def _order_rank(problem: Problem, statement: Statement, order: tuple[str, ...]) -> tuple:
    """Sort key of a loop order, most promising first: accesses contiguous or
    invariant in the innermost loop, then closeness to the memory order."""
    default = default_loop_order(problem, statement)
    innermost = order[-1] if order else None
    contiguous = 0
    for access in (statement.output, *statement.reads()):
        dim = problem.program.tensor(access.tensor).contiguous_dim()
        if innermost not in access.indices:
            contiguous += 1
        elif dim is not None and access.indices[dim] == innermost:
            contiguous += 2
    agree = sum(a == b for a, b in zip(order, default, strict=True))
    return (-contiguous, -agree, order)


def _tile_values(extent: int) -> tuple[int, ...]:
    sizes = [size for size in TILE_SIZES if size < extent]
    return (0, *sizes[-MAX_TILE_CHOICES:])


def _largest(
    problem: Problem, statement: Statement, indices: Sequence[str], count: int
) -> list[str]:
    """Up to ``count`` of ``indices`` worth tiling, largest extent first (ties: inner first)."""
    worth = [i for i in indices if problem.index_size(statement, i) > TILE_SIZES[0]]
    ranked = sorted(
        worth, key=lambda i: (-problem.index_size(statement, i), -list(indices).index(i))
    )
    chosen = set(ranked[:count])
    return [i for i in indices if i in chosen]


_REFERENCE: dict[tuple[Problem, int], tuple[dict, dict, dict]] = {}


def _reference(problem: Problem, seed: int) -> tuple[dict, dict, dict]:
    """Random inputs, scalars and the reference outputs of a one-statement problem,
    computed once per worker for the statement being tuned."""
    from ..testing import random_arrays, random_scalars

    key = (problem, seed)
    if key not in _REFERENCE:
        inputs = random_arrays(problem, seed)
        scalars = random_scalars(problem, seed)
        _REFERENCE.clear()
        _REFERENCE[key] = (inputs, scalars, evaluate(problem, inputs, scalars))
    return _REFERENCE[key]


@dataclass(frozen=True)
class CpuTarget:
    """Tuning target of the CPU backend (see the module docstring)."""

    backend: str = "cpu"
    alignment: int = 0  # the generated C assumes nothing about array addresses
    #: A loop schedule's parameters are named values already (order, collapse,
    #: tile_<index>, inner): no positional lists to give names to.
    config_type: ClassVar[ConfigType] = ParameterConfig

    def device_key(self) -> dict[str, str]:
        chain = toolchain(cache_directory())
        return {
            "cpu": chain.cpu,
            "compiler": chain.version.splitlines()[0] if chain.version else chain.command[0],
            "flags": " ".join(chain.flags),
            "threads": str(threads()),
        }

    def parameters(self, task: Task) -> tuple[Parameter, ...]:
        problem = task.problem
        statement = task.statement
        indices = parallel_indices(statement)
        default = default_loop_schedule(problem, statement)
        orders = sorted(
            itertools.permutations(indices), key=lambda o: _order_rank(problem, statement, o)
        )
        if len(orders) > MAX_ORDERS:
            kept = orders[:MAX_ORDERS]
            if default.order not in kept:
                kept[-1] = default.order
            orders = sorted(kept, key=lambda o: _order_rank(problem, statement, o))
        parallel = _largest(problem, statement, default.order, MAX_TILED_PARALLEL)
        reduction = _largest(
            problem, statement, tileable_reduction_indices(statement), MAX_TILED_REDUCTION
        )
        most = min(MAX_COLLAPSE, len(indices) + len(parallel))
        collapse = sorted(set(range(most + 1)) | {default.collapse})
        result = [
            Parameter("order", tuple(list(order) for order in orders)),
            Parameter("collapse", tuple(collapse)),
        ]
        tiled = dict.fromkeys([*parallel, *reduction, *(i for i, _ in default.tiles)])
        for index in tiled:  # the default's own tiles are always tunable
            extent = problem.index_size(statement, index)
            values = _tile_values(extent)
            own = default.tile(index)
            if own and own not in values:
                values = tuple(sorted({*values, own}))
            result.append(Parameter(f"tile_{index}", values))
        if top_level_sums(statement.rhs) and indices:
            result.append(Parameter("inner", tuple(range(min(MAX_INNER, len(indices)) + 1))))
        if blas_available() and not isinstance(gemm_of(problem, statement), str):
            result.append(Parameter("blas", (0, 1)))
        return tuple(result)

    def violation(self, task: Task, config: Config) -> str | None:
        problem = task.problem
        try:
            loops = loop_schedule(config)
        except (KeyError, TypeError, ValueError) as error:
            return f"malformed configuration: {error}"
        return schedule_violation(problem, task.statement, loops)

    def default_config(self, task: Task) -> Config:
        problem = task.problem
        loops = decide_schedule(problem)[task.positions[0]].schedule
        values: dict[str, Any] = {"order": list(loops.order), "collapse": loops.collapse}
        for parameter in self.parameters(task):
            if parameter.name.startswith("tile_"):
                values[parameter.name] = loops.tile(parameter.name[len("tile_") :]) or 0
            elif parameter.name == "inner":
                values["inner"] = loops.inner
            elif parameter.name == "blas":
                values["blas"] = int(loops.blas)
        return ParameterConfig.from_values(values)

    def compile(self, task: Task, config: Config) -> str:
        """Compile the task's view (a one-statement program) into the kernel cache; the
        library's path."""
        reason = self.violation(task, config)
        if reason is not None:
            raise VariantError("invalid", reason)
        single = task.view
        loops = with_accumulation(single, single.program.statements[0], loop_schedule(config))
        source = emit_c(single, CpuSchedule((loops,)))
        directory = cache_directory()
        chain = toolchain(directory)
        path = cached_library(source, chain, directory)
        if path is None:
            path = compile_library(source, chain, directory)
        return str(path)

    def measure(self, task: Task, config: Config, compiled: Any, repeats: int, seed: int) -> Timing:
        """Run once on random inputs drawn from ``seed`` and compare with the reference
        (computed once per worker and seed), warm up, then time ``max(repeats, 10)``
        calls of the kernel itself (more for short kernels, up to :data:`MIN_TIMED_S`)."""
        from ..testing import relative_error

        single = task.view
        program = single.program
        path = Path(compiled)
        executable = CpuExecutable(single, path, load_library(path))
        inputs, scalars, expected = _reference(single, seed)
        arrays = {name: copy_host_array(array) for name, array in inputs.items()}
        for tensor in program.tensors:
            if tensor.name not in arrays:
                order: Literal["C", "F"] = "C" if tensor.layout == "row" else "F"
                arrays[tensor.name] = np.zeros(single.shape(tensor.name), tensor.dtype, order=order)
        executable.run(arrays, scalars)
        error = max(
            (relative_error(arrays[name], expected[name]) for name in program.outputs), default=0.0
        )
        pointers = (ctypes.c_void_p * len(program.tensors))(
            *(arrays[t.name].ctypes.data for t in program.tensors)
        )
        values = (ctypes.c_double * max(1, len(program.scalars)))(
            *(scalars[s.name] for s in program.scalars)
        )
        function = executable.function
        # BLAS and loop variants alternate: let OpenBLAS's idle threads stop spinning
        settle = SETTLE_S if "blas" in config.values() else WARMUP_S
        began = time.perf_counter()
        while time.perf_counter() - began < settle:
            function(pointers, values)
        runs = max(repeats, MIN_REPEATS)
        times: list[float] = []
        while len(times) < runs or (sum(times) < MIN_TIMED_S and len(times) < 10 * runs):
            start = time.perf_counter()
            function(pointers, values)
            times.append(time.perf_counter() - start)
        return Timing(tuple(times), float(error))

    def model_cost(self, task: Task, config: Config) -> float:
        problem = task.problem
        statement = task.statement
        return predicted_seconds(problem, statement, loop_schedule(config))
