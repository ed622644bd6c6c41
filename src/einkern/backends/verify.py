"""Check generated CUDA kernels without a GPU: lower every statement with its
mapping, run the kernels in the CPU emulator, compare with the NumPy reference."""

from __future__ import annotations

from collections.abc import Mapping as MappingType
from dataclasses import dataclass

import numpy as np

from ..arrays import random_arrays, storage_view
from ..gpu.mapping import Mapping
from ..gpu.plan import Launch, plan_task
from ..ir.nodes import Problem
from ..ir.task import tasks_of
from ..reference import evaluate, relative_error
from ..semantics import bfloat16_values
from ..testing import random_scalars
from .emulator import DTYPES, AccessError, emulate
from .temporaries import view_arrays


@dataclass(frozen=True)
class Verification:
    """Outcome of one emulated run: the largest relative error over the outputs and
    every refused (out-of-bounds) access."""

    max_relative_error: float
    errors: tuple[AccessError, ...]
    bad_accesses: int

    def ok(self, tolerance: float) -> bool:
        return self.bad_accesses == 0 and self.max_relative_error <= tolerance


def random_inputs(problem: Problem, seed: int) -> dict[str, np.ndarray]:
    """Uniform [0.5, 1.5) values (never zeros) for every tensor, in its layout."""
    return random_arrays(problem, seed)


def emulate_problem(
    problem: Problem,
    mappings: MappingType[int, Mapping],
    arrays: MappingType[str, np.ndarray],
    scalars: MappingType[str, float],
    kernels=None,
):
    """Run every statement (its plan of launches: see :mod:`.plan`) in the emulator
    on copies of ``arrays``.  Returns (final arrays, refused accesses, their count);
    bfloat16 arrays come back as float32 arrays of their values.
    ``kernels`` (one per statement) replaces the plans, for fault injection."""
    work = {name: np.array(storage_view(a), copy=True, order="K") for name, a in arrays.items()}
    if any(name not in work for name in problem.program.temporaries):
        work = {**view_arrays(problem, work), **work}  # memory of the temporaries (NaN)
    values = {f"s_{name}": v for name, v in scalars.items()}
    launches = []
    if kernels is not None:
        launches = [Launch(k, tuple(p.name[2:] for p in k.params if p.is_array)) for k in kernels]
    else:
        for task in tasks_of(problem):
            position = task.position
            plan = plan_task(task, mappings[position], f"s{position}")
            for buffer, ctype, size in plan.temporaries:
                work[buffer] = np.full(size, np.nan, dtype=DTYPES[ctype])
            launches.extend(plan.launches)
    errors: list = []
    bad = 0
    for launch in launches:
        params = [p.name for p in launch.kernel.params if p.is_array]
        bound = {param: work[buffer] for param, buffer in zip(params, launch.buffers, strict=True)}
        report = emulate([launch.kernel], bound, values)
        errors.extend(report.errors)
        bad += sum(report.counts)
    dtypes = {t.name: t.dtype for t in problem.program.tensors}
    final = {  # the arrays given, and the program's temporaries
        name: bfloat16_values(work[name]) if dtypes.get(name) == "bfloat16" else work[name]
        for name in work
        if name in arrays or name in problem.program.temporaries
    }
    return final, tuple(errors), bad


def verify(
    problem: Problem,
    mappings: MappingType[int, Mapping],
    seed: int = 0,
    scalars: MappingType[str, float] | None = None,
    kernels=None,
) -> Verification:
    """Emulate the problem under ``mappings`` and compare with the reference."""
    arrays = random_inputs(problem, seed)
    scalars = random_scalars(problem, seed, scalars)
    reference = evaluate(problem, arrays, scalars)
    result, errors, bad = emulate_problem(problem, mappings, arrays, scalars, kernels)
    worst = max(
        (relative_error(result[name], reference[name]) for name in problem.program.outputs),
        default=0.0,
    )
    return Verification(worst, errors, bad)
