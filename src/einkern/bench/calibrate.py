"""``einkern bench ... --calibrate FILE``: the cost model's predictions beside
measured times, for fitting the model (einkern.gpu.model) on many shapes.

For each case of one statement, a handful of configurations of its mapping
space (einkern.gpu.space through the CUDA tuning target): the decision's
default, the model's best few of a random sample of the valid space, and a few
random valid points.  Each is compiled, checked against the case's reference
and timed exactly as the benchmark times einkern (same inputs, same timer);
one JSON line per configuration:

``{"case", "workload", "program", "extents", "position", "task", "dtype",
"flops", "min_bytes", "config", "canonical", "origin", "predicted_s",
"measured_s", "runs", "error", "error_ok", "status", "reason", "device"}``

``program`` + ``extents`` rebuild the problem (``einkern.ir.bind.make_problem``)
and ``position`` the task (``einkern.ir.task.statement_task``); ``config`` is the
configuration's JSON form (``CudaConfig.from_json``).
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from ..ir.nodes import Problem
from ..ir.task import Task, statement_task
from .case import Case

#: Configurations per case: the default, the model's best, random valid points.
MODEL_BEST = 3
RANDOM = 2
SAMPLE = 48


def candidates(task: Task, seed: int, best: int = MODEL_BEST, spread: int = RANDOM) -> list:
    """``(origin, config)`` pairs: the default, the ``best`` configurations the model
    ranks first among ``SAMPLE`` valid random ones, and ``spread`` of the others,
    without repeats, deterministic per seed."""
    from ..tuning.cuda_target import CudaTarget
    from ..tuning.search import canonical, space_for

    target = CudaTarget()
    space = space_for(target, task)
    rng = random.Random(seed)
    default = target.default_config(task)
    sample = space.candidates(rng, SAMPLE)
    ranked = sorted(sample, key=lambda config: target.model_cost(task, config))
    chosen: dict[str, tuple[str, Any]] = {canonical(default): ("default", default)}
    for config in ranked[:best]:
        chosen.setdefault(canonical(config), ("model", config))
    rest = ranked[best:]
    rng.shuffle(rest)
    for config in rest[:spread]:
        chosen.setdefault(canonical(config), ("random", config))
    return list(chosen.values())


def calibrate_case(
    runner, case: Case, stream: IO[str], einkern_run: Callable, device_name: str = ""
) -> int:
    """Write the JSON lines of one case to ``stream``; returns how many.  ``runner``
    is the benchmark's :class:`~einkern.bench.runner.Runner` (inputs, reference,
    timing) and ``einkern_run(kernel, scalars)`` how it runs an einkern kernel.
    Cases of several statements are left out (a line per statement would time
    the others)."""
    from .. import api
    from ..ir.bind import make_problem
    from ..tuning.cuda_target import CudaTarget
    from ..tuning.search import canonical

    problem = make_problem(api.load(case.program), case.extent_map)
    if len(problem.program.statements) != 1:
        return 0
    task = statement_task(problem, 0)
    target = CudaTarget()
    common, inputs, scalars, reference = runner.prepare_case(case, problem)
    seed = zlib.crc32(f"calibrate/{case.key}".encode())
    written = 0
    for origin, config in candidates(task, seed):
        predicted = target.model_cost(task, config)
        name = f"einkern {canonical(config)}"
        extents: dict[str, Any] = dict(case.extent_map)
        try:
            kernel = api.compile(problem.program, backend="cuda", mappings={0: config}, **extents)
        except Exception as error:  # noqa: BLE001 - a configuration that fails is a record
            row = None
            status, reason = "failed", f"compile: {type(error).__name__}: {error}"
        else:
            row = runner._measure(
                case,
                name,
                einkern_run(kernel, scalars),
                problem.program.outputs,
                inputs,
                reference,
                common,
            )
            status, reason = row.status, row.reason
        record = record_line(case, problem, task, config, origin, predicted, row, device_name)
        record.update(status=status, reason=reason[:300])
        stream.write(json.dumps(record, allow_nan=False, default=str) + "\n")
        stream.flush()
        written += 1
    return written


def record_line(
    case: Case,
    problem: Problem,
    task: Task,
    config: Any,
    origin: str,
    predicted: float,
    row,
    device_name: str,
) -> dict[str, Any]:
    """One JSON line's fields (``row``: the Measurement, or None when it did not compile)."""
    from ..ir.analysis import kernel_floor_bytes, program_flops
    from ..tuning.search import canonical

    tensor = problem.program.tensor(problem.program.outputs[0])
    finite = predicted if predicted == predicted and predicted not in (float("inf"),) else None
    return {
        "case": case.key,
        "workload": case.workload,
        "program": case.program,
        "extents": case.extent_map,
        "position": task.positions[0],
        "task": str(task),
        "dtype": tensor.dtype,
        "flops": program_flops(problem),
        "min_bytes": kernel_floor_bytes(problem),
        "config": config.to_json(),
        "canonical": canonical(config),
        "origin": origin,
        "predicted_s": finite,
        "measured_s": None if row is None else row.median_s,
        "runs": 0 if row is None else row.runs,
        "error": None if row is None or row.error is None else float(row.error),
        "error_ok": None if row is None else row.error_ok,
        "device": device_name,
    }


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The records of a calibration file (for fitting, and for the tests)."""
    lines: Sequence[str] = Path(path).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]
