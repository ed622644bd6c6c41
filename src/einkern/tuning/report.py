"""What ``einkern tune`` and ``einkern db show`` print.

The progress bar goes to standard error and only when it is a terminal; the
tables go to standard output (plain text when it is not a terminal).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from ..ir.nodes import Problem
from .db import TuningDB, TuningRecord, champion
from .ranking import Timed, pick_best
from .tuner import Progress as TuneProgress
from .tuner import StatementResult
from .verdict import Verdict


def speedup_text(verdict: Verdict | None) -> str:
    """A same-run speedup: ``1.52x``; ``0.98x (default kept)`` when the winner did not
    beat the default side by side; ``-`` when there is no verdict."""
    if verdict is None or verdict.speedup is None:
        return "-" if verdict is None or not verdict.beats else "default failed"
    text = f"{verdict.speedup:.2f}x"
    return text if verdict.beats else f"{text} (default kept)"


def _median(times: Sequence[float]) -> float | None:
    ordered = sorted(times)
    if not ordered:
        return None
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else 0.5 * (ordered[middle - 1] + ordered[middle])


def seconds_text(value: float | None) -> str:
    """``1.23 ms``, ``45.6 µs``, ``2.01 s``; ``-`` for None."""
    if value is None:
        return "-"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value * 1e9:.3g} ns"


def _console(stream) -> Console:
    terminal = stream.isatty()
    return Console(
        file=stream, width=None if terminal else 160, no_color=not terminal, highlight=False
    )


class ProgressDisplay:
    """A rich progress bar per statement on stderr: evaluations done/total, ETA, best so
    far and its speedup over the default.  Does nothing when stderr is not a terminal."""

    def __init__(self, problem: Problem, positions: Sequence[int]):
        self.enabled = sys.stderr.isatty()
        self._progress = Progress(
            TextColumn("[bold]S{task.fields[position]}[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[best]}"),
            console=Console(file=sys.stderr),
            disable=not self.enabled,
        )
        self._tasks: dict[int, TaskID] = {}
        self.positions = tuple(positions)

    def __enter__(self) -> ProgressDisplay:
        self._progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.__exit__(None, None, None)

    def update(self, event: TuneProgress) -> None:
        if not self.enabled:
            return
        task = self._tasks.get(event.position)
        if task is None:
            task = self._progress.add_task("", total=event.total, position=event.position, best="")
            self._tasks[event.position] = task
        best = ""
        if event.best is not None:
            best = f"best {seconds_text(event.best.median)}"
            if event.default is not None and event.default.ok and event.best.cost > 0:
                best += f" ({event.default.cost / event.best.cost:.2f}x default so far)"
        self._progress.update(task, completed=event.done, total=event.total, best=best)


def _failures(pairs: Sequence[tuple[str, int]]) -> str:
    return ", ".join(f"{kind} {count}" for kind, count in pairs) or "-"


def print_results(
    problem: Problem,
    results: Sequence[StatementResult],
    *,
    explain: bool = False,
    database: Path | None = None,
    simulated: Sequence[Timed | None] | None = None,
    rules: Sequence[tuple[tuple[str, str], ...]] | None = None,
) -> None:
    """The summary table of a tuning run (``simulated``: the best recorded per statement;
    ``rules``: with ``explain``, the (rule, reason) pairs of each default configuration)."""
    console = _console(sys.stdout)
    title = f"{problem.program.name}: tuning" + (" (simulated)" if simulated is not None else "")
    table = Table(title=Text(title))
    for column in (
        "#",
        "statement",
        "default",
        "best",
        "speedup",
        "evaluations",
        "failures",
        "time",
    ):
        table.add_column(column, overflow="fold")
    if simulated is not None:
        table.add_column("best recorded")
    for number, result in enumerate(results):
        evaluations = str(result.evaluations)
        if result.space_size is not None:
            evaluations += f"/{result.space_size}"
        elif result.estimated_size is not None:
            estimate, spread = result.estimated_size
            evaluations += f" of ≈{estimate:,} (±{spread:,}, sampled)"
        if result.resumed:
            evaluations += f" ({result.resumed} resumed)"
        default = (
            result.default.median if result.default is not None and result.default.ok else None
        )
        best = result.best.median if result.best is not None else None
        verdict = result.verdict
        if verdict is not None and verdict.winner_times:  # the side-by-side medians
            default, best = _median(verdict.default_times), _median(verdict.winner_times)
        row = [
            str(result.position),
            result.statement,
            seconds_text(default),
            seconds_text(best),
            speedup_text(verdict),
            evaluations,
            _failures(result.failures),
            seconds_text(result.seconds),
        ]
        if simulated is not None:
            recorded = simulated[number]
            row.append(seconds_text(recorded.median if recorded is not None else None))
        table.add_row(*map(Text, row))
    console.print(table)
    if database is not None:
        console.print(f"recorded in {database}", markup=False)
    if explain:
        for number, result in enumerate(results):
            if result.default is not None:
                config = json.dumps(result.default.config.to_json(), sort_keys=True)
                console.print(f"S{result.position} default configuration: {config}", markup=False)
            for rule, reason in rules[number] if rules is not None else ():
                console.print(f"  {rule}: {reason}", markup=False)
            config = (
                json.dumps(result.best.config.to_json(), sort_keys=True) if result.best else "-"
            )
            console.print(f"S{result.position} best configuration: {config}", markup=False)
            if result.verdict is not None:
                console.print(
                    f"S{result.position} against the default, side by side: "
                    f"{result.verdict.reason}",
                    markup=False,
                )


def print_database(db: TuningDB, every: bool = False) -> None:
    """One row per recorded problem (or per record with ``every``)."""
    console = _console(sys.stdout)
    records = db.records()
    if every:
        table = Table(title=Text(f"{db.path}: {len(records)} records"))
        for column in ("statement", "sizes", "config", "status", "median", "reason"):
            table.add_column(column, overflow="fold")
        for record in records:
            table.add_row(
                *map(
                    Text,
                    (
                        record.identity.statement,
                        record.identity.describe_sizes(),
                        record.config_key,
                        record.status + (" (default)" * record.default),
                        seconds_text(record.median),
                        record.reason,
                    ),
                )
            )
        console.print(table)
        return
    problems: dict[str, list[TuningRecord]] = defaultdict(list)
    for record in records:
        problems[record.identity.key].append(record)
    verdicts: dict[str, list[Verdict]] = defaultdict(list)
    for verdict in db.verdicts():
        verdicts[verdict.key].append(verdict)
    table = Table(title=Text(f"{db.path}: {len(problems)} problems, {len(records)} records"))
    for column in (
        "statement",
        "sizes",
        "device",
        "version",
        "variants",
        "failed",
        "default",
        "best",
        "speedup",
    ):
        table.add_column(column, overflow="fold")
    for group in problems.values():
        identity = group[0].identity
        device = dict(identity.device)
        name = next(
            (device[k] for k in ("device", "name", "cpu") if device.get(k)),
            next(iter(device.values()), "-"),
        )
        best = pick_best(r for r in group if r.ok)
        default = next((r for r in group if r.default and r.ok), None)
        default_time = default.median if default else None
        best_time = best.median if best else None
        runs = verdicts.get(identity.key, [])
        shown = champion(runs) or (runs[-1] if runs else None)  # cached's, else the latest
        speedup = speedup_text(shown) if shown else "unconfirmed" if best is not None else "-"
        if shown is not None and shown.winner_times:  # its side-by-side medians
            default_time, best_time = _median(shown.default_times), _median(shown.winner_times)
        table.add_row(
            *map(
                Text,
                (
                    identity.statement,
                    identity.describe_sizes(),
                    f"{identity.backend} {name}",
                    identity.version,
                    str(len(group)),
                    str(sum(not r.ok for r in group)),
                    seconds_text(default_time),
                    seconds_text(best_time),
                    speedup,
                ),
            )
        )
    console.print(table)
