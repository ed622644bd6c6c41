"""The ``contractions`` suite's report: what issue 11's Targets are judged on.

Per class of drawn case (memory-bound fp64, compute-bound fp64, fp32; a case is
memory-bound when its bytes take longer at the measured copy bandwidth than its
flops at the measured SIMT peak), einkern's geometric mean fraction of the
floor, the fraction of cases where einkern is at least as fast as the better
peer, the geometric mean and the worst of einkern's speed relative to the better
peer (better peer's time / einkern's time), the cases below 0.7 of it,
then the per-case table (einkern, the peers, the floor) and the cost model's
Spearman rank correlation between predicted and measured einkern times.

The floor is max(bytes / copy bandwidth, flops / SIMT peak) with the ceilings
of the same run (:meth:`~einkern.bench.device.Calibration.simt_floor`).  An
einkern row counts only when it ran and matched the reference (one that did not
counts as "not at least as fast" and is named); a peer's time counts whenever it
ran, and a peer result above the tolerance is marked (✗) in the per-case table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .results import EINKERN, BenchResult, Measurement

SUITE = "contractions"
#: The peers "the better peer" is taken over, per backend.
BETTER_PEERS = {"cuda": ("torch.einsum", "cuTENSOR"), "cpu": ("numpy.einsum",)}
#: Peers shown in the per-case table when present.
TABLE_PEERS = ("torch.einsum", "cuTENSOR", "cupy.einsum", "cuBLAS (torch.matmul)", "numpy.einsum")
CLASSES = ("memory-bound fp64", "compute-bound fp64", "fp32")


@dataclass(frozen=True)
class CaseResult:
    """One case of the suite: einkern's and each peer's time, the floor and the class."""

    workload: str
    label: str
    drawn: bool
    klass: str
    dtype: str
    flops: int
    min_bytes: int
    floor_s: float
    einkern_s: float | None  # None: einkern failed or did not match the reference
    einkern_status: str
    peers: dict[str, float | None]
    better_peer: str | None
    predicted_s: float | None
    peer_errors: tuple[str, ...] = ()  # peers whose result exceeded the tolerance

    @property
    def better_s(self) -> float | None:
        return None if self.better_peer is None else self.peers[self.better_peer]

    @property
    def ratio(self) -> float | None:
        """Better peer's time / einkern's (at least 1: einkern as fast or faster)."""
        if self.einkern_s is None or self.better_s is None:
            return None
        return self.better_s / self.einkern_s

    @property
    def floor_fraction(self) -> float | None:
        return None if self.einkern_s is None else self.floor_s / self.einkern_s


@dataclass(frozen=True)
class ClassSummary:
    """The Targets' figures for one class of drawn cases."""

    klass: str
    cases: int
    einkern_ok: int
    floor_geomean: float | None  # einkern: geometric mean of floor / time
    peer_floor_geomean: float | None  # the better peer's, the same way
    at_least_peer: float | None  # fraction of cases with a peer time where einkern >= it
    ratio_geomean: float | None
    worst_ratio: float | None
    worst_case: str
    below_07: int  # cases slower than 0.7x the better peer (failures included)


def geomean(values: Sequence[float]) -> float | None:
    """Geometric mean of positive values; None for none."""
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rank correlation (scipy.stats.spearmanr where SciPy is installed,
    else the same formula: Pearson's correlation of average ranks); None for fewer
    than three pairs or a constant side."""
    if len(x) < 3 or len(x) != len(y):
        return None
    try:
        from scipy.stats import spearmanr
    except ImportError:
        rx, ry = _ranks(np.asarray(x, float)), _ranks(np.asarray(y, float))
        if rx.std() == 0 or ry.std() == 0:
            return None
        return float(np.corrcoef(rx, ry)[0, 1])
    value = float(spearmanr(x, y).statistic)
    return None if math.isnan(value) else value


def _ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties given their average rank."""
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(1, len(values) + 1)
    for value in np.unique(values):
        tied = values == value
        ranks[tied] = ranks[tied].mean()
    return ranks


def _time(row: Measurement | None, checked: bool = True) -> float | None:
    """The row's median when it ran (and, ``checked``, did not exceed the tolerance)."""
    if row is None or row.status != "ok" or not row.median_s:
        return None
    return None if checked and row.error_ok is False else row.median_s


def classify(dtype: str, flops: int, nbytes: int, result: BenchResult) -> str:
    """The class of a case under the run's ceilings."""
    if dtype != "float64":
        return "fp32"
    calibration = result.calibration
    peak = calibration.simt_peak.get(dtype) or calibration.peak[dtype]
    memory = nbytes / calibration.bandwidth >= flops / peak
    return "memory-bound fp64" if memory else "compute-bound fp64"


def case_results(result: BenchResult, suite: str = SUITE) -> list[CaseResult]:
    """The suite's cases in run order."""
    backend = result.environment.get("backend") or result.options.get("backend", "cuda")
    better = BETTER_PEERS.get(backend, ())
    grouped: dict[tuple[str, str], dict[str, Measurement]] = {}
    for row in result.measurements:
        if row.suite == suite:
            grouped.setdefault((row.workload, row.extents), {})[row.implementation] = row
    found = []
    for rows in grouped.values():
        base = rows.get(EINKERN) or next(iter(rows.values()))
        peers = {name: _time(row, False) for name, row in rows.items() if name != EINKERN}
        timed = [name for name in better if peers.get(name) is not None]
        found.append(
            CaseResult(
                workload=base.workload,
                label=base.label,
                drawn=base.group.startswith("drawn"),
                klass=classify(base.dtype, base.flops, base.min_bytes, result),
                dtype=base.dtype,
                flops=base.flops,
                min_bytes=base.min_bytes,
                floor_s=result.calibration.simt_floor(base.flops, base.min_bytes, base.dtype)
                if base.min_bytes
                else 0.0,
                einkern_s=_time(rows.get(EINKERN)),
                einkern_status=_status(rows.get(EINKERN)),
                peers=peers,
                better_peer=min(timed, key=lambda name: peers[name] or math.inf) if timed else None,
                predicted_s=rows[EINKERN].predicted_s if EINKERN in rows else None,
                peer_errors=tuple(
                    name for name, row in rows.items() if name != EINKERN and row.error_ok is False
                ),
            )
        )
    return found


def _status(row: Measurement | None) -> str:
    if row is None:
        return "missing"
    if row.status == "ok" and row.error_ok is False:
        return f"wrong (error {row.error:.1e})"
    return row.status if row.status == "ok" else f"{row.status}: {row.reason}"


def class_summary(klass: str, cases: Sequence[CaseResult]) -> ClassSummary:
    """The figures of one class (cases already filtered to it)."""
    compared = [c for c in cases if c.better_s is not None]
    ratios = [(c.ratio, c.workload) for c in compared if c.ratio is not None]
    wins = sum(1 for c in compared if c.ratio is not None and c.ratio >= 1.0)
    worst = min(ratios, default=(None, ""))
    failed = [c.workload for c in compared if c.einkern_s is None]
    return ClassSummary(
        klass=klass,
        cases=len(cases),
        einkern_ok=sum(1 for c in cases if c.einkern_s is not None),
        floor_geomean=geomean([f for c in cases if (f := c.floor_fraction) is not None]),
        peer_floor_geomean=geomean(
            [c.floor_s / c.better_s for c in compared if c.better_s and c.floor_s]
        ),
        at_least_peer=wins / len(compared) if compared else None,
        ratio_geomean=geomean([r for r, _ in ratios]),
        worst_ratio=0.0 if failed else worst[0],
        worst_case=failed[0] + " (einkern failed)" if failed else worst[1],
        below_07=len(failed) + sum(1 for r, _ in ratios if r < 0.7),
    )


def model_correlation(cases: Sequence[CaseResult]) -> tuple[float | None, int]:
    """Spearman's correlation of predicted and measured einkern times, and the pairs."""
    pairs = [(c.predicted_s, c.einkern_s) for c in cases if c.predicted_s and c.einkern_s]
    pairs = [(p, m) for p, m in pairs if math.isfinite(p)]
    return spearman([p for p, _ in pairs], [m for _, m in pairs]), len(pairs)


def summarize(result: BenchResult, suite: str = SUITE) -> dict[str, Any]:
    """Everything the report prints, as JSON-ready data."""
    every = case_results(result, suite)
    cases = [c for c in every if not c.einkern_status.startswith("skipped")]
    drawn = [c for c in cases if c.drawn]
    calibration = result.calibration
    classes = [class_summary(k, [c for c in drawn if c.klass == k]) for k in CLASSES]
    everything = class_summary("all drawn", drawn)
    rho, pairs = model_correlation(cases)
    rho_drawn, pairs_drawn = model_correlation(drawn)
    return {
        "suite": suite,
        "seed": result.options.get("seed"),
        "backend": result.environment.get("backend") or result.options.get("backend"),
        "better_peers": list(
            BETTER_PEERS.get(result.environment.get("backend") or "", ("torch.einsum",))
        ),
        "calibration": {
            "bandwidth": calibration.bandwidth,
            "simt_peak": dict(calibration.simt_peak),
            "peak": dict(calibration.peak),
        },
        "skipped": len(every) - len(cases),
        "unavailable": {
            m.implementation: m.reason
            for m in result.measurements
            if m.suite == suite and m.status == "unavailable"
        },
        "classes": [asdict(c) for c in [*classes, everything]],
        "model_spearman": rho,
        "model_pairs": pairs,
        "model_spearman_drawn": rho_drawn,
        "model_pairs_drawn": pairs_drawn,
        "cases": [dict(asdict(c), ratio=c.ratio, floor_fraction=c.floor_fraction) for c in cases],
    }


def _pct(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.3g} %"


def _x(value: float | None) -> str:
    return "" if value is None else f"{value:.3g}×"


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1e3:.4g}"


def summary_markdown(summary: dict[str, Any]) -> str:
    """The class table, the model's correlation, then the per-case table."""
    better = " / ".join(summary["better_peers"])
    lines = [
        f"## contractions (seed {summary['seed']}): einkern against the better of {better}",
        "",
        _ceilings(summary),
        "",
        "| class | cases | einkern ok | einkern % floor (geomean) | better peer % floor | "
        "einkern ≥ better peer | speed vs better peer (geomean) | worst | worst case | "
        "< 0.7× |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in summary["classes"]:
        lines.append(
            f"| {c['klass']} | {c['cases']} | {c['einkern_ok']} | {_pct(c['floor_geomean'])} | "
            f"{_pct(c['peer_floor_geomean'])} | {_pct(c['at_least_peer'])} | "
            f"{_x(c['ratio_geomean'])} | {_x(c['worst_ratio'])} | {c['worst_case']} | "
            f"{c['below_07']} |"
        )
    rho, rho_drawn = summary["model_spearman"], summary["model_spearman_drawn"]
    lines += [
        "",
        "Cost model (einkern.gpu.model) against measured einkern times, Spearman: "
        + (
            f"{rho:.3f} over {summary['model_pairs']} cases "
            f"({'' if rho_drawn is None else f'{rho_drawn:.3f}'} over the "
            f"{summary['model_pairs_drawn']} drawn)"
            if rho is not None
            else "no predictions (CPU backend, or fewer than three)"
        ),
        "",
    ]
    peers = [p for p in TABLE_PEERS if any(p in c["peers"] for c in summary["cases"])]
    lines += [
        "| case | einsum / shape | class | floor ms | einkern ms | % floor | "
        + " | ".join(f"{p} ms" for p in peers)
        + " | speed vs better peer | predicted ms |",
        "|---" * (7 + len(peers)) + "|---|",
    ]
    for c in summary["cases"]:
        einkern = _ms(c["einkern_s"]) if c["einkern_s"] else c["einkern_status"][:40]
        lines.append(
            f"| {c['workload']} | {c['label']} | {c['klass']} | {_ms(c['floor_s'])} | {einkern} | "
            f"{_pct(c['floor_fraction'])} | "
            + " | ".join(
                _ms(c["peers"].get(p)) + (" ✗" if p in c["peer_errors"] else "") for p in peers
            )
            + f" | {_x(c['ratio'])} | {_ms(c['predicted_s'])} |"
        )
    return "\n".join(lines)


def _ceilings(summary: dict[str, Any]) -> str:
    calibration = summary["calibration"]
    simt = ", ".join(f"{k} {v / 1e12:.3g}" for k, v in calibration["simt_peak"].items())
    text = f"Floor: copy {calibration['bandwidth'] / 1e9:.4g} GB/s, "
    text += f"SIMT peak TFLOP/s {simt}" if simt else "no SIMT peak measured: matrix-product peak"
    if summary["skipped"]:
        text += f"; {summary['skipped']} case(s) skipped (suite time limit), left out below"
    for peer, reason in summary["unavailable"].items():
        text += f"; {peer} unavailable ({reason}): its cells say —"
    return text + "."


def class_table(summary: dict[str, Any]) -> str:
    """Only the class table and the model line (what a terminal shows last)."""
    text = summary_markdown(summary)
    return text.split("\n\n| case |")[0]
