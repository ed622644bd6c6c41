"""PNG figures (matplotlib, Agg, 100 dpi): GFLOP/s against problem size with one line
per implementation for each group of cases, and einkern's speedup over each peer
for each suite."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from .results import EINKERN, BenchResult, Measurement

DPI = 100
CASES_PER_CHART = 30
_STYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_") or "group"


def _pyplot():
    """matplotlib's pyplot on the Agg backend; an ImportError that says which extra
    installs it when matplotlib is missing (it is not a core dependency)."""
    try:
        import matplotlib
    except ImportError as error:
        raise ImportError(
            "the PNG figures need matplotlib: pip install 'einkern[bench]'"
        ) from error

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _colors(result: BenchResult) -> dict[str, str]:
    names = result.implementations()
    return {name: f"C{position % 10}" for position, name in enumerate(names)}


def _title(result: BenchResult, text: str) -> str:
    env = result.environment
    where = env.get("device") or env.get("cpu") or env.get("backend")
    return f"{text} — {where}"


def gflops_figure(result: BenchResult, group: str, rows: Sequence[Measurement], path: Path):
    """GFLOP/s of every implementation over the cases of one group."""
    plt = _pyplot()
    colors = _colors(result)
    workloads = list(dict.fromkeys(row.workload for row in rows))
    per_workload = {w: {row.extents for row in rows if row.workload == w} for w in workloads}
    categorical = all(len(sizes) == 1 for sizes in per_workload.values())
    figure, axes = plt.subplots(figsize=(7, 4.2), dpi=DPI)
    for position, name in enumerate(result.implementations()):
        mine = [row for row in rows if row.implementation == name and row.gflops]
        if not mine:
            continue
        marker = _MARKERS[position % len(_MARKERS)]
        if categorical:
            points = [(workloads.index(row.workload), row.gflops) for row in mine]
            xs, ys = zip(*sorted(points), strict=True)
            axes.plot(xs, ys, marker=marker, color=colors[name], label=name)
            continue
        for number, workload in enumerate(workloads):
            sized = sorted((row.size, row.gflops) for row in mine if row.workload == workload)
            if not sized:
                continue
            xs, ys = zip(*sized, strict=True)
            label = name if len(workloads) == 1 else f"{name} · {workload}"
            axes.plot(
                xs,
                ys,
                marker=marker,
                linestyle=_STYLES[number % len(_STYLES)],
                color=colors[name],
                label=label,
            )
    if categorical:
        axes.set_xticks(range(len(workloads)))
        axes.set_xticklabels(workloads, rotation=45, ha="right", fontsize=7)
    else:
        sizes = [row.size for row in rows]
        if sizes and min(sizes) > 0 and max(sizes) / min(sizes) >= 8:
            axes.set_xscale("log", base=2)
        axes.set_xlabel(rows[0].label.split("=")[0] if "=" in rows[0].label else "size")
    axes.set_ylabel("GFLOP/s")
    axes.set_title(_title(result, group), fontsize=9)
    axes.grid(True, alpha=0.3)
    if axes.lines:
        axes.legend(fontsize=6, ncol=2 if len(axes.lines) > 6 else 1)
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    plt.close(figure)


def speedup_figure(result: BenchResult, title: str, rows: Sequence[Measurement], path: Path):
    """Horizontal bars: for each case, einkern's speedup over each peer (log scale)."""
    plt = _pyplot()
    colors = _colors(result)
    timed = {row.implementation for row in rows if row.einkern_speedup}
    peers = [name for name in result.implementations() if name != EINKERN and name in timed]
    cases = list(dict.fromkeys((row.workload, row.label, row.extents) for row in rows))
    height = 0.8 / max(len(peers), 1)
    figure, axes = plt.subplots(
        figsize=(7, 1.2 + 0.32 * len(cases) * max(1, len(peers)) / 3), dpi=DPI
    )
    for number, peer in enumerate(peers):
        ys, widths = [], []
        for position, key in enumerate(cases):
            for row in rows:
                if (
                    (row.workload, row.label, row.extents) == key
                    and row.implementation == peer
                    and row.einkern_speedup
                ):
                    ys.append(position + number * height)
                    widths.append(row.einkern_speedup)
        if ys:
            axes.barh(ys, widths, height=height, color=colors[peer], label=peer)
    axes.axvline(1.0, color="black", linewidth=0.8)
    axes.set_xscale("log")
    axes.set_yticks([position + 0.4 - height / 2 for position in range(len(cases))])
    axes.set_yticklabels([f"{w} {label}" for w, label, _ in cases], fontsize=6)
    axes.invert_yaxis()
    axes.set_xlabel("einkern speedup (peer time / einkern time; > 1: einkern faster)")
    axes.set_title(_title(result, title), fontsize=9)
    axes.grid(True, axis="x", alpha=0.3)
    if axes.patches:
        axes.legend(fontsize=6, loc="best")
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    plt.close(figure)


def write_plots(result: BenchResult, directory: Path) -> list[Path]:
    """Every figure of a run; returns the paths written."""
    written: list[Path] = []
    groups: dict[tuple[str, str], list[Measurement]] = {}
    suites: dict[str, list[Measurement]] = {}
    for row in result.measurements:
        groups.setdefault((row.suite, row.group), []).append(row)
        suites.setdefault(row.suite, []).append(row)
    for (suite, group), rows in groups.items():
        if any(row.gflops for row in rows):
            path = directory / f"gflops_{_slug(suite)}_{_slug(group)}.png"
            gflops_figure(result, group, rows, path)
            written.append(path)
    for suite, rows in suites.items():
        timed = [row for row in rows if row.einkern_speedup and row.implementation != EINKERN]
        if not timed:
            continue
        cases = list(dict.fromkeys((row.workload, row.extents) for row in timed))
        chunks = [cases[i : i + CASES_PER_CHART] for i in range(0, len(cases), CASES_PER_CHART)]
        for number, chunk in enumerate(chunks, start=1):
            keep = set(chunk)
            part = [row for row in timed if (row.workload, row.extents) in keep]
            suffix = f"_{number}" if len(chunks) > 1 else ""
            path = directory / f"speedup_{_slug(suite)}{suffix}.png"
            title = f"{suite}: einkern speedup" + (f" ({number}/{len(chunks)})" if suffix else "")
            speedup_figure(result, title, part, path)
            written.append(path)
    return written
