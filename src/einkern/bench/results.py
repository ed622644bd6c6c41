"""What a benchmark run produces: one :class:`Measurement` per case × implementation,
and the :class:`BenchResult` that holds them with the environment and ceilings."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .case import Case
from .device import Calibration

EINKERN = "einkern"

#: Row status: measured; raised an error; the peer does not compute such a program;
#: the peer cannot run here; the case was not reached before the suite's time limit.
STATUSES = ("ok", "failed", "n/a", "unavailable", "skipped")


@dataclass(frozen=True)
class Measurement:
    """One implementation on one case.

    Times are seconds (median of ``runs`` timed calls after warm-up);
    ``floor_s`` is max(min_bytes / bandwidth, flops / peak) with the ceilings of
    the same run and ``floor_fraction`` = floor_s / median_s; ``error`` is the
    max relative error of the outputs against ``reference``;
    ``einkern_speedup`` = this row's median / einkern's median on the same case
    (above 1: einkern is faster); ``predicted_s`` the cost model's time of
    einkern's kernel (CUDA only)."""

    suite: str
    workload: str
    group: str
    label: str
    size: float
    extents: str
    dtype: str
    implementation: str
    status: str
    reason: str = ""
    runs: int = 0
    median_s: float | None = None
    min_s: float | None = None
    max_s: float | None = None
    gflops: float | None = None
    flops: int = 0
    min_bytes: int = 0
    fused_min_bytes: int = 0
    floor_s: float | None = None
    floor_fraction: float | None = None
    error: float | None = None
    tolerance: float | None = None
    error_ok: bool | None = None
    reference: str = ""
    compile_s: float | None = None
    einkern_speedup: float | None = None
    note: str = ""
    #: einkern rows on the GPU: the cost model's time (einkern.gpu.model) of the
    #: mappings the kernel was compiled with, summed over its statements.
    predicted_s: float | None = None

    @classmethod
    def columns(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def for_case(cls, case: Case, implementation: str, status: str, **values: Any):
        extents = ",".join(f"{name}={value}" for name, value in case.extents)
        note = "; ".join(part for part in (case.note, values.pop("note", "")) if part)
        return cls(
            case.suite,
            case.workload,
            case.group,
            case.label,
            case.size,
            extents,
            values.pop("dtype", ""),
            implementation,
            status,
            note=note,
            **values,
        )


@dataclass(frozen=True)
class BenchResult:
    """A whole run: environment, ceilings, notes and every measurement."""

    environment: dict[str, Any]
    calibration: Calibration
    options: dict[str, Any]
    measurements: tuple[Measurement, ...]
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        calibration = asdict(self.calibration)
        calibration["peak"] = dict(self.calibration.peak)
        calibration["method"] = dict(self.calibration.method)
        calibration["simt_peak"] = dict(self.calibration.simt_peak)
        return {
            "environment": self.environment,
            "calibration": calibration,
            "options": self.options,
            "notes": list(self.notes),
            "measurements": [asdict(m) for m in self.measurements],
        }

    def implementations(self) -> list[str]:
        """einkern first, then peers in order of first appearance."""
        names = [EINKERN]
        for m in self.measurements:
            if m.implementation not in names:
                names.append(m.implementation)
        return names
