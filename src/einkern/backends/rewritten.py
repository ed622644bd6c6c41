"""Run a rewritten problem (:mod:`einkern.ir.rewrite`) in the CPU emulator: its
temporaries and views as NumPy arrays (:func:`.temporaries.view_arrays`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..gpu.plan import plan_task
from ..ir.nodes import Problem
from ..ir.task import tasks_of
from .emulator import DTYPES, emulate
from .temporaries import view_arrays


def emulate_rewritten(
    problem: Problem,
    mappings: Mapping[int, Any],
    arrays: Mapping[str, np.ndarray],
    scalars: Mapping[str, float],
) -> tuple[dict[str, np.ndarray], int]:
    """Run a rewritten problem's CUDA kernels in the CPU emulator on ``arrays`` (the
    caller's tensors, updated in place), its temporaries and views made by
    :func:`view_arrays`.  Returns every array by name and the count of refused
    (out-of-bounds) accesses."""
    work = view_arrays(problem, arrays)
    values = {f"s_{name}": v for name, v in scalars.items()}
    bad = 0
    for task in tasks_of(problem):
        plan = plan_task(task, mappings[task.position], f"s{task.position}")
        for buffer, ctype, size in plan.temporaries:
            work[buffer] = np.full(size, np.nan, dtype=DTYPES[ctype])
        for launch in plan.launches:
            params = [p.name for p in launch.kernel.params if p.is_array]
            bound = {p: work[b] for p, b in zip(params, launch.buffers, strict=True)}
            bad += emulate([launch.kernel], bound, values).error_count
    return work, bad
