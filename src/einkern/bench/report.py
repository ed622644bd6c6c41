"""Writers: ``results.json`` (everything), ``results.csv`` (one line per measurement)
and ``results.md`` (one line per case, einkern against each peer); for the
``contractions`` suite also ``contractions.json`` and ``contractions.md`` (the
generality report, :mod:`einkern.bench.generality`)."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .results import EINKERN, BenchResult, Measurement


def _finite(value: Any) -> Any:
    """JSON has no inf/NaN: such floats are written as the strings "inf", "nan"."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def write_json(result: BenchResult, path: Path) -> None:
    text = json.dumps(_finite(result.to_json()), indent=1, allow_nan=False)
    path.write_text(text + "\n", encoding="utf-8")


def write_csv(result: BenchResult, path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as stream:
        writer = csv.DictWriter(stream, fieldnames=Measurement.columns())
        writer.writeheader()
        for measurement in result.measurements:
            writer.writerow(
                {key: "" if value is None else value for key, value in asdict(measurement).items()}
            )


def _cases(rows: Sequence[Measurement]) -> list[list[Measurement]]:
    """Rows grouped by case, in run order."""
    cases: dict[tuple[str, str, str], list[Measurement]] = {}
    for row in rows:
        cases.setdefault((row.suite, row.workload, row.extents), []).append(row)
    return list(cases.values())


def _ms(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds * 1e3:.4g}"


def _short(text: str, width: int = 48) -> str:
    text = text.replace("|", "/")
    return text if len(text) <= width else text[: width - 1] + "…"


def _peer_cell(row: Measurement | None, base: Measurement | None) -> str:
    if row is None:
        return ""
    if row.status != "ok":
        return row.status
    mark = "" if row.error_ok is not False else " ✗"
    if base is None or base.median_s is None or row.einkern_speedup is None:
        return f"({_ms(row.median_s)} ms){mark}"
    return f"{row.einkern_speedup:.3g}×{mark}"


def markdown_table(result: BenchResult) -> str:
    """One line per case: einkern's time, rate, fraction of the floor and error, then
    einkern's speedup over each peer (peer time / einkern time; ✗ marks an error
    above tolerance)."""
    peers = [name for name in result.implementations() if name != EINKERN]
    header = [
        "suite",
        "workload",
        "size",
        "dtype",
        "einkern ms",
        "GFLOP/s",
        "% floor",
        "max rel. error",
        *(f"× vs {peer}" for peer in peers),
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for rows in _cases(result.measurements):
        by_name = {row.implementation: row for row in rows}
        base = by_name.get(EINKERN)
        first = rows[0]
        if base is not None and base.status == "ok":
            error = "" if base.error is None else f"{base.error:.1e}"
            if base.error_ok is False:
                error += " ✗"
            fraction = base.floor_fraction
            cells = [
                _ms(base.median_s),
                f"{base.gflops:.4g}",
                "" if fraction is None else f"{100 * fraction:.3g}",
                error,
            ]
        else:
            reason = base.reason if base is not None else "not run"
            status = base.status if base is not None else "missing"
            cells = [f"{status}: {_short(reason)}", "", "", ""]
        lines.append(
            "| "
            + " | ".join(
                [
                    first.suite,
                    first.workload,
                    first.label,
                    first.dtype,
                    *cells,
                    *(_peer_cell(by_name.get(peer), base) for peer in peers),
                ]
            )
            + " |"
        )
    return "\n".join(lines)


def summary(result: BenchResult) -> str:
    """Environment, ceilings and notes, as Markdown."""
    env, cal = result.environment, result.calibration
    device = env.get("device") or env.get("cpu")
    lines = [
        "# einkern bench results",
        "",
        f"- date: {env.get('date')}; command: `{env.get('command')}`",
        f"- backend: {env.get('backend')}; device: {device}; driver: {env.get('driver')}; "
        f"CUDA (torch): {env.get('torch_cuda')}; NVRTC: {env.get('nvrtc')}",
        f"- einkern {env.get('einkern')}, numpy {env.get('numpy')}, torch {env.get('torch')}, "
        f"cupy {env.get('cupy')}, opt_einsum {env.get('opt_einsum')}; CPU: {env.get('cpu')}",
        f"- copy bandwidth {cal.bandwidth / 1e9:.4g} GB/s; peak "
        + ", ".join(f"{dtype} {rate / 1e9:.4g} GFLOP/s" for dtype, rate in cal.peak.items())
        + f" ({cal.method.get('peak', '')})",
        "- floor = max(min bytes / bandwidth, flops / peak); `% floor` = floor / einkern's "
        "median time; `× vs P` = P's median / einkern's (above 1: einkern faster)",
    ]
    lines += [f"- note: {note}" for note in result.notes]
    return "\n".join(lines)


def write_markdown(result: BenchResult, path: Path) -> str:
    """Write ``results.md``; returns the table (printed last by the CLI)."""
    table = markdown_table(result)
    path.write_text(summary(result) + "\n\n" + table + "\n", encoding="utf-8")
    return table


def write_generality(result: BenchResult, out: Path) -> str:
    """Write the ``contractions`` suite's report to ``out`` (contractions.json and
    contractions.md); returns its class table and model line (printed last)."""
    from .generality import class_table, summarize, summary_markdown

    summary = summarize(result)
    text = json.dumps(_finite(summary), indent=1, allow_nan=False)
    (out / "contractions.json").write_text(text + "\n", encoding="utf-8")
    (out / "contractions.md").write_text(summary_markdown(summary) + "\n", encoding="utf-8")
    return class_table(summary)
