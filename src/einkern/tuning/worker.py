"""Measuring variants: in a worker process (isolated) or in this one.

A :class:`ProcessMeasurer` runs ``target.measure`` in a child process started
with the *spawn* context, one variant at a time.  When the child dies (a
segfault, an illegal address, ``os._exit``) the variant is a ``crash``; when it
runs past the per-variant timeout it is killed and the variant is a
``timeout``; after either the next variant gets a fresh child.  An exception
raised by ``measure`` is a ``crash`` too (the child is restarted: its state may
be corrupt), unless it is a :class:`~.target.VariantError`, which carries its own
kind.  :class:`InProcessMeasurer` calls ``measure`` directly (no isolation, no
timeout): for tests and for replaying recorded timings.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import pickle
import signal
import sys
import threading
import traceback
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from ..ir.task import Task
from .target import Config, Timing, TuningTarget, VariantError

#: Seconds allowed for a worker process to start (imports included).
START_TIMEOUT_S = 120.0

_MAIN_LOCK = threading.Lock()


@contextlib.contextmanager
def _main_hidden() -> Iterator[None]:
    """Hide the ``__main__`` module while a child is spawned, so the child does not
    re-run the caller's script (scripts calling ``einkern.compile(..., tune="full")``
    need no ``if __name__ == "__main__"`` guard).  Targets and compiled handles
    must therefore be importable from modules, not defined in ``__main__``."""
    with _MAIN_LOCK:
        main = sys.modules.get("__main__")
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            if main is not None:
                sys.modules["__main__"] = main


@dataclass(frozen=True)
class Measured:
    """What measuring one variant gave: a timing, or a failure kind and reason."""

    timing: Timing | None
    failure: str | None = None
    reason: str = ""


@dataclass(frozen=True)
class Job:
    target: TuningTarget
    task: Task
    config: Config
    compiled: Any
    repeats: int
    seed: int


class Measurer(Protocol):
    def measure(self, job: Job, timeout: float) -> Measured: ...

    def close(self) -> None: ...


def _run(job: Job) -> Measured:
    """Call the target; every exception becomes a failure."""
    try:
        timing = job.target.measure(job.task, job.config, job.compiled, job.repeats, job.seed)
    except VariantError as error:
        return Measured(None, error.failure, error.message)
    except Exception as error:  # noqa: BLE001 - any error of a variant is recorded
        last = traceback.format_exception_only(type(error), error)[-1].strip()
        return Measured(None, "crash", f"measure raised {last}")
    if not isinstance(timing, Timing):
        return Measured(None, "crash", f"measure returned {type(timing).__name__}, not Timing")
    return Measured(timing)


class InProcessMeasurer:
    """Measures in this process; ``timeout`` is not enforced."""

    def measure(self, job: Job, timeout: float) -> Measured:
        return _run(job)

    def close(self) -> None:
        pass


def _serve(connection: Any) -> None:
    """Worker main loop: receive a job, acknowledge it (unpickling may import the
    target's modules, which must not count against the timeout), send back its
    :class:`Measured`; None stops it."""
    connection.send("ready")
    while True:
        try:
            job = connection.recv()
        except EOFError:
            return
        except Exception as error:  # noqa: BLE001 - e.g. the target's module is missing
            connection.send("received")
            connection.send(Measured(None, "crash", f"cannot load the variant: {error!r}"))
            continue
        if job is None:
            return
        connection.send("received")
        connection.send(_run(job))


def _death(exitcode: int | None) -> str:
    if exitcode is None:
        return "the measuring process stopped answering"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"the measuring process died ({name})"
    return f"the measuring process exited with status {exitcode}"


class ProcessMeasurer:
    """Measures in a spawned worker process, restarted after a crash or a timeout."""

    def __init__(self) -> None:
        self._context = multiprocessing.get_context("spawn")
        self._process: Any = None
        self._connection: Any = None
        self.restarts = 0

    def _start(self) -> str | None:
        """Start a worker; the reason when it fails to come up."""
        parent, child = self._context.Pipe()
        process = self._context.Process(
            target=_serve, args=(child,), daemon=True, name="einkern-measure"
        )
        with _main_hidden():
            process.start()
        child.close()
        try:
            ready = parent.poll(START_TIMEOUT_S) and parent.recv() == "ready"
        except (EOFError, OSError):
            ready = False
        if not ready:
            self._kill(process, parent)
            return "the measuring process failed to start: " + _death(process.exitcode)
        self._process, self._connection = process, parent
        return None

    @staticmethod
    def _kill(process: Any, connection: Any) -> None:
        if process.is_alive():
            process.kill()
        process.join(5)
        connection.close()

    def _discard(self) -> int | None:
        """Kill the current worker; its exit code."""
        process, connection = self._process, self._connection
        self._process = self._connection = None
        if process is None:
            return None
        process.join(0.5)  # a dying process may need a moment to be reaped
        self._kill(process, connection)
        self.restarts += 1
        return process.exitcode

    def measure(self, job: Job, timeout: float) -> Measured:
        if self._process is None or not self._process.is_alive():
            if self._process is not None:
                self._discard()
            failed = self._start()
            if failed is not None:
                return Measured(None, "crash", failed)
        try:
            self._connection.send(job)
        except (pickle.PicklingError, TypeError, AttributeError) as error:
            return Measured(None, "crash", f"cannot send the variant to the worker: {error}")
        except (OSError, BrokenPipeError):
            return Measured(None, "crash", _death(self._discard()))
        try:
            if not self._connection.poll(START_TIMEOUT_S):
                return Measured(None, "crash", _death(self._discard()))
            if self._connection.recv() != "received":
                self._discard()
                return Measured(None, "crash", "the measuring process answered out of turn")
            if not self._connection.poll(timeout):
                self._discard()
                return Measured(None, "timeout", f"no result within {timeout:g} s")
            result = self._connection.recv()
        except (EOFError, OSError, BrokenPipeError):
            return Measured(None, "crash", _death(self._discard()))
        if result.failure == "crash":
            self._discard()  # its state may be corrupt (e.g. a CUDA context after a fault)
        return result

    def close(self) -> None:
        if self._process is not None and self._process.is_alive():
            try:
                self._connection.send(None)
                self._process.join(5)
            except (OSError, BrokenPipeError):
                pass
        if self._process is not None:
            self._kill(self._process, self._connection)
        self._process = self._connection = None
