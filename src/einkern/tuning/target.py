"""What the autotuner needs from a backend: one protocol, one registry.

A *configuration* is a frozen record whose parameters are named
(:class:`Configuration`): ``values()`` gives each parameter's value by name (the
values a :class:`Parameter` lists), ``to_json()`` its stable JSON form, whose
canonical text identifies it in the tuning database.  A target names the record
type it searches (``config_type``: builds one from named values or from JSON).
The CUDA target's is :class:`einkern.gpu.config.CudaConfig`; targets whose
parameters are plain named JSON values (the CPU loop schedule, simulated and test
targets) use :class:`ParameterConfig`.  A backend exposes, per
:class:`~einkern.ir.task.Task` (the statements one kernel computes), the
constrained space of configurations, a default one (its decision algorithm), a
way to compile one, a way to check and time one, and an analytic cost model.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import EinkernError
from ..ir.task import Task


@runtime_checkable
class Configuration(Protocol):
    """A point of a target's search space: a frozen record of named parameters."""

    def values(self) -> dict[str, Any]:
        """Each parameter's value by name (comparable with :attr:`Parameter.values`)."""
        ...

    def to_json(self) -> dict[str, Any]:
        """The stable JSON form (JSON types only)."""
        ...


Config = Configuration


class ConfigType(Protocol):
    """The constructors of a target's configuration record (its class, or any
    object with these two methods)."""

    def from_values(self, values: Mapping[str, Any]) -> Any:
        """The configuration of these named parameter values (raises KeyError,
        TypeError or ValueError when they do not make one)."""
        ...

    def from_json(self, data: Mapping[str, Any]) -> Any:
        """Inverse of ``to_json`` (raises KeyError, TypeError or ValueError)."""
        ...


def _frozen(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value


def _thawed(value: Any) -> Any:
    return [_thawed(v) for v in value] if isinstance(value, tuple) else value


@dataclass(frozen=True)
class ParameterConfig:
    """A configuration that is nothing but named JSON values (lists kept as tuples,
    so that it is hashable); its JSON form is the object of those values."""

    items: tuple[tuple[str, Any], ...]

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> ParameterConfig:
        return cls(tuple(sorted((str(name), _frozen(value)) for name, value in values.items())))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ParameterConfig:
        if not isinstance(data, Mapping):
            raise TypeError("a configuration is a JSON object")
        return cls.from_values(data)

    def values(self) -> dict[str, Any]:
        return dict(self.items)

    def to_json(self) -> dict[str, Any]:
        return {name: _thawed(value) for name, value in self.items}

    def __getitem__(self, name: str) -> Any:
        return self.values()[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.values().get(name, default)


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

    @property
    def backend(self) -> str:
        """The backend's registry name."""
        ...

    @property
    def config_type(self) -> ConfigType:
        """The record type of its configurations."""
        ...

    def device_key(self) -> dict[str, str]:
        """Identity of the hardware and toolchain: device name, compute capability,
        driver and compiler versions (GPU); CPU model and compiler (CPU)."""
        ...

    def parameters(self, task: Task) -> tuple[Parameter, ...]:
        """The parameters of ``task`` and their candidate values."""
        ...

    def violation(self, task: Task, config: Config) -> str | None:
        """Why ``config`` is invalid (hardware limits, divisibility), or None if valid.
        Cheap: called for every candidate before anything is generated."""
        ...

    def default_config(self, task: Task) -> Config:
        """The decision algorithm's choice (valid)."""
        ...

    def compile(self, task: Task, config: Config) -> Any:
        """Compile one variant; returns a picklable handle (e.g. a path to a binary or
        the source).  May raise CompilationError/MappingError.  Thread-safe."""
        ...

    def measure(self, task: Task, config: Config, compiled: Any, repeats: int, seed: int) -> Timing:
        """Check the variant against the reference on fresh random inputs, then time
        it.  Runs inside a worker process (it may crash it)."""
        ...

    def model_cost(self, task: Task, config: Config) -> float:
        """Predicted time in seconds from an analytic model (for model-guided search)."""
        ...


@runtime_checkable
class ExplainsDefault(Protocol):
    """A target whose default configuration comes from named rules (``einkern tune
    --explain`` prints them)."""

    def explain_default(self, task: Task) -> tuple[tuple[str, str], ...]:
        """The (rule, reason) pairs that made ``default_config(task)``."""
        ...


_TARGETS: dict[str, Callable[[], TuningTarget]] = {}

#: The built-in targets: backend name → (module of einkern.tuning, class), imported
#: on first use (so that this module, which they import, does not import them).
BUILTIN_TARGETS = {"cpu": ("cpu_target", "CpuTarget"), "cuda": ("cuda_target", "CudaTarget")}


def register_target(name: str, factory: Callable[[], TuningTarget]) -> None:
    """Make ``factory`` the tuning target of backend ``name`` (refuses a name
    already registered or built in)."""
    if name in _TARGETS or name in BUILTIN_TARGETS:
        raise ValueError(f"a tuning target named {name!r} is already registered")
    _TARGETS[name] = factory


def get_target(name: str) -> TuningTarget:
    """The tuning target of backend ``name`` (``cpu``, ``cuda`` or a registered one)."""
    if name in _TARGETS:
        return _TARGETS[name]()
    if name in BUILTIN_TARGETS:
        module, cls = BUILTIN_TARGETS[name]
        return getattr(importlib.import_module(f"{__package__}.{module}"), cls)()
    from ..errors import BackendError

    raise BackendError(
        f"backend {name!r} cannot be tuned",
        hint=f"tunable backends: {', '.join([*BUILTIN_TARGETS, *_TARGETS])}",
    )
