"""What the autotuner needs from a backend: one protocol, one registry.

A *configuration* is a plain ``dict`` of parameter name → value (JSON types
only).  A backend exposes, per statement of a problem, the constrained space of
configurations, a default one (its decision algorithm), a way to compile one,
a way to check and time one, and an analytic cost model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import EinkernError
from ..ir.nodes import Problem

Config = dict[str, Any]

#: Why a variant has no usable timing.  ``compile``: the compiler rejected it;
#: ``resources``: it needs more than the device has (registers, shared memory);
#: ``wrong``: its result differs from the reference; ``timeout``: it ran past the
#: per-variant limit; ``crash``: the measuring process died or the device
#: faulted; ``invalid``: it violates the target's constraints.
FAILURE_KINDS = ("compile", "resources", "wrong", "timeout", "crash", "invalid")


class VariantError(EinkernError):
    """A target's ``compile`` or ``measure`` may raise this to say precisely why a
    variant failed (``failure`` is one of :data:`FAILURE_KINDS`).  Other
    exceptions from ``compile`` count as ``compile`` failures, from ``measure``
    as ``crash`` (the measuring process is then restarted)."""

    def __init__(self, failure: str, message: str):
        if failure not in FAILURE_KINDS:
            raise ValueError(f"unknown failure kind {failure!r}")
        super().__init__(message)
        self.failure = failure


@dataclass(frozen=True)
class Parameter:
    """A tunable parameter and its candidate values, in a meaningful order (the
    order defines "neighbours" for local search)."""

    name: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Timing:
    """Times in seconds of the timed runs of one variant (after warm-up)."""

    times: tuple[float, ...]
    max_relative_error: float
    resources: tuple[tuple[str, Any], ...] = ()  # e.g. registers, shared bytes, spills

    @property
    def median(self) -> float:
        ordered = sorted(self.times)
        middle = len(ordered) // 2
        if len(ordered) % 2:
            return ordered[middle]
        return 0.5 * (ordered[middle - 1] + ordered[middle])


@runtime_checkable
class TuningTarget(Protocol):
    """A backend seen by the tuner."""

    backend: str

    def device_key(self) -> dict[str, str]:
        """Identity of the hardware and toolchain: device name, compute capability,
        driver and compiler versions (GPU); CPU model and compiler (CPU)."""
        ...

    def parameters(self, problem: Problem, position: int) -> tuple[Parameter, ...]:
        """The parameters of statement ``position`` and their candidate values."""
        ...

    def violation(self, problem: Problem, position: int, config: Config) -> str | None:
        """Why ``config`` is invalid (hardware limits, divisibility), or None if valid.
        Cheap: called for every candidate before anything is generated."""
        ...

    def default_config(self, problem: Problem, position: int) -> Config:
        """The decision algorithm's choice (valid)."""
        ...

    def compile(self, problem: Problem, position: int, config: Config) -> Any:
        """Compile one variant; returns a picklable handle (e.g. a path to a binary or
        the source).  May raise CompilationError/MappingError.  Thread-safe."""
        ...

    def measure(self, problem: Problem, position: int, config: Config, compiled: Any,
                repeats: int, seed: int) -> Timing:
        """Check the variant against the reference on fresh random inputs, then time
        it.  Runs inside a worker process (it may crash it)."""
        ...

    def model_cost(self, problem: Problem, position: int, config: Config) -> float:
        """Predicted time in seconds from an analytic model (for model-guided search)."""
        ...


_TARGETS: dict[str, Callable[[], TuningTarget]] = {}


def register_target(name: str, factory: Callable[[], TuningTarget]) -> None:
    _TARGETS[name] = factory


def get_target(name: str) -> TuningTarget:
    """The tuning target of backend ``name`` (``cpu`` or ``cuda``)."""
    if not _TARGETS:
        _register_builtin()
    if name not in _TARGETS:
        from ..errors import BackendError

        raise BackendError(f"backend {name!r} cannot be tuned",
                           hint=f"tunable backends: {', '.join(_TARGETS)}")
    return _TARGETS[name]()


def _register_builtin() -> None:
    def cpu() -> TuningTarget:
        from .cpu_target import CpuTarget

        return CpuTarget()

    def cuda() -> TuningTarget:
        from ..gpu.tuning import CudaTarget

        return CudaTarget()

    _TARGETS.setdefault("cpu", cpu)
    _TARGETS.setdefault("cuda", cuda)
