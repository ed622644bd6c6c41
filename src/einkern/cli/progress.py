"""A one-line progress report on stderr for long ``einkern run`` invocations.

The line appears only once the work has taken longer than ``delay`` seconds
(short runs stay silent), is rewritten in place (``\\r``) about twice a second
with the elapsed time, and is erased when the work ends, so it never mixes
with the results on stdout.  By default it is shown only when stderr is a
terminal: pipes, files, CI logs and pytest's captured output get nothing.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

#: Seconds of work before the line first appears.
DELAY = 1.5
#: Seconds between two redraws while a step runs.
INTERVAL = 0.5


class ProgressLine:
    """``set(text)`` names the step now running; a background thread redraws
    ``text (elapsed)`` until :meth:`close`.  Disabled, it does nothing at all
    (no thread is started)."""

    def __init__(
        self,
        enabled: bool | None = None,
        stream: TextIO | None = None,
        delay: float = DELAY,
        interval: float = INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.stream = sys.stderr if stream is None else stream
        self.enabled = _is_terminal(self.stream) if enabled is None else enabled
        self.delay = delay
        self.interval = interval
        self.clock = clock
        self.started = clock()
        self._text = ""
        self._width = 0  # characters of the line now shown (0: none)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.enabled:
            self._thread = threading.Thread(target=self._tick, name="einkern-progress", daemon=True)
            self._thread.start()

    def set(self, text: str) -> None:
        """Name the step now running (shown at the next redraw)."""
        with self._lock:
            self._text = text
        if self.enabled:
            self.draw()

    def draw(self) -> None:
        """Show ``text (elapsed)`` if the work has run longer than ``delay``."""
        with self._lock:
            elapsed = self.clock() - self.started
            if not self.enabled or not self._text or elapsed < self.delay:
                return
            line = f"{self._text} ({elapsed:.0f} s)"
            padding = " " * max(0, self._width - len(line))
            self.stream.write(f"\r{line}{padding}")
            self.stream.flush()
            self._width = len(line)

    def clear(self) -> None:
        """Erase the line and forget the step (call it before printing results:
        nothing is drawn again until the next :meth:`set`)."""
        with self._lock:
            self._text = ""
            if self._width:
                self.stream.write("\r" + " " * self._width + "\r")
                self.stream.flush()
                self._width = 0

    def close(self) -> None:
        """Stop redrawing and erase the line."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.clear()

    def __enter__(self) -> ProgressLine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            self.draw()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or not a real file
        return False
