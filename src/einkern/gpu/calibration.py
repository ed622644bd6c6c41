"""Fitting the cost model (:mod:`einkern.gpu.model`) to measurements.

A measurement file has one JSON object per line, for one statement under one
configuration:

* ``measured`` (seconds) or ``measured_ms``;
* either ``terms`` (the model's raw bounds, :meth:`~einkern.gpu.model.Terms.to_json`),
  or what recomputes them: ``program`` (the program's text), ``sizes`` (its
  extents), ``position`` (the statement, default 0) and ``config`` (the
  :class:`~einkern.gpu.config.CudaConfig` JSON form);
* anything else (``predicted``, ``case``, ...) is kept but not read.

:func:`fit` finds the :class:`~einkern.gpu.model.Calibration` (a scale per term,
the overlap of the others) that minimises the squared log error of the
predictions; :func:`rank_correlation` is Spearman's ρ between predicted and
measured times, the figure that matters for choosing among candidates.
``scripts/gett_measurements.py`` writes such a file from BENCHMARKS.md.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..ir.bind import make_problem
from ..ir.build import build_program
from ..ir.task import statement_task
from ..lang import load_program_node
from .config import CudaConfig
from .device import H100, DeviceLimits
from .model import TERMS, Calibration, Terms, cost_terms
from .space import config_to_mapping


@dataclass(frozen=True)
class Sample:
    """One measured statement: the model's bounds and the measured seconds."""

    terms: Terms
    measured: float
    label: str = ""


def read_lines(lines: Iterable[str]) -> list[dict[str, Any]]:
    """The JSON objects of a measurement file's lines (blank lines skipped)."""
    return [json.loads(line) for line in lines if line.strip()]


def load(path: str | Path) -> list[dict[str, Any]]:
    return read_lines(Path(path).read_text(encoding="utf-8").splitlines())


def sample_of(record: dict[str, Any], limits: DeviceLimits = H100) -> Sample:
    """The :class:`Sample` of one measurement record (see the module docstring)."""
    measured = record.get("measured")
    if measured is None:
        measured = float(record["measured_ms"]) * 1e-3
    label = str(record.get("case", ""))
    if "terms" in record:
        data = record["terms"]
        terms = Terms(
            dram=float(data["dram"]),
            l2=float(data["l2"]),
            lsu=float(data["lsu"]),
            arithmetic=float(data["arithmetic"]),
            latency=float(data["latency"]),
            efficiency=float(data.get("efficiency", 1.0)),
            factor=float(data.get("factor", 1.0)),
        )
        return Sample(terms, float(measured), label)
    problem = make_problem(
        build_program(load_program_node(record["program"])), record.get("sizes", {})
    )
    task = statement_task(problem, int(record.get("position", 0)))
    config = CudaConfig.from_json(record["config"])
    terms = cost_terms(task, config_to_mapping(task, config), limits)
    return Sample(terms, float(measured), label)


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2
        i = j + 1
    return ranks


def rank_correlation(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Spearman's ρ (ties share their mean rank); 0 for fewer than two points."""
    if len(predicted) < 2:
        return 0.0
    a, b = _ranks(predicted), _ranks(measured)
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b, strict=True))
    va = math.sqrt(sum((x - ma) ** 2 for x in a))
    vb = math.sqrt(sum((y - mb) ** 2 for y in b))
    return cov / (va * vb) if va > 0 and vb > 0 else 0.0


def log_error(samples: Sequence[Sample], calibration: Calibration) -> float:
    """Root mean square of log(predicted / measured)."""
    errors = [
        math.log(calibration.combine(s.terms) / s.measured) ** 2 for s in samples if s.measured > 0
    ]
    return math.sqrt(sum(errors) / len(errors)) if errors else 0.0


def fit(samples: Sequence[Sample], start: Calibration | None = None) -> Calibration:
    """The calibration of least squared log error over ``samples`` (per-term
    scales between 0.05 and 20, overlap between 0 and 1; Powell then Nelder–Mead,
    restarted)."""
    from scipy.optimize import minimize  # type: ignore[import-untyped]  # only when fitting

    start = start or Calibration()
    usable = [
        s for s in samples if s.measured > 0 and all(math.isfinite(v) for v in s.terms.values())
    ]
    if not usable:
        return start

    def unpack(x) -> Calibration:
        scale = tuple(min(20.0, max(0.05, math.exp(v))) for v in x[: len(TERMS)])
        overlap = min(1.0, max(0.0, float(x[-1])))
        return Calibration(scale, overlap)

    def loss(x) -> float:
        return log_error(usable, unpack(x)) ** 2

    x = [math.log(s) for s in start.scale] + [start.overlap]
    for _ in range(3):  # restarts: the maximum in the model makes the surface kinked
        x = list(minimize(loss, x, method="Powell", options={"maxiter": 20000, "xtol": 1e-5}).x)
        x = list(minimize(loss, x, method="Nelder-Mead", options={"maxiter": 4000}).x)
    return unpack(x)


def summary(samples: Sequence[Sample], calibration: Calibration) -> dict[str, float]:
    """Rank correlation and RMS log error of ``calibration`` on ``samples``."""
    predicted = [calibration.combine(s.terms) for s in samples]
    return {
        "samples": len(samples),
        "rank_correlation": rank_correlation(predicted, [s.measured for s in samples]),
        "rms_log_error": log_error(samples, calibration),
    }
