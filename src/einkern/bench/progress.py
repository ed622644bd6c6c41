"""A progress bar on stderr (rich), shown only when stderr is a terminal."""

from __future__ import annotations

import sys
from typing import Any


class Progress:
    """Counts finished rows (case × implementation) and names the one running."""

    def __init__(self, enabled: bool | None = None):
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._bar: Any = None  # a rich Progress once started
        self._task: Any = None

    def start(self, total: int) -> None:
        if not self.enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        self._bar = RichProgress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self._bar.start()
        self._task = self._bar.add_task("starting", total=total)

    def describe(self, text: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description=text)

    def advance(self, rows: int) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, rows)

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description="done")
            self._bar.stop()
            self._bar = None
