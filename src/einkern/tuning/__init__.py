"""The autotuner: search spaces, strategies, evaluation, the tuning database.

Modules: :mod:`.target` (what a backend provides: the ``TuningTarget``
protocol and its registry, the ``Configuration`` protocol of typed configuration
records), :mod:`.search` (constrained search spaces, generated lazily),
:mod:`.strategies` (search strategies by name), :mod:`.evaluate` and
:mod:`.worker` (compiling in threads, measuring in an isolated process),
:mod:`.ranking` (ties and winners), :mod:`.canonical` and :mod:`.record`
(what a record is about), :mod:`.db` (the SQLite database), :mod:`.tuner`
(tuning a problem), :mod:`.policy` (the ``tune=`` choice at compile time),
:mod:`.simulate` (replaying a database), :mod:`.cpu_target` (the CPU backend's
target; its model is :mod:`einkern.backends.cpu.model`), :mod:`.cuda_target` (the CUDA
backend's), :mod:`.cli` and :mod:`.report` (``einkern tune`` and ``einkern
db``).  Everything is per :class:`~einkern.ir.task.Task` (the statements one
kernel computes).  See ``docs/tuning.md``.

The names below are imported on first use, so importing this package (for
example for :mod:`.target`) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Budget": "evaluate",
    "CpuTarget": "cpu_target",
    "CudaTarget": "cuda_target",
    "TuneOptions": "tuner",
    "TuningDB": "db",
    "TuningRecord": "record",
    "choose_config": "policy",
    "choose_configs": "policy",
    "get_target": "target",
    "schedule_from_configs": "cpu_target",
    "tune_problem": "tuner",
    "tune_task": "tuner",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
