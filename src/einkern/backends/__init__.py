"""Backends: one protocol, chosen by name from a registry.

A backend turns a :class:`~einkern.ir.nodes.Problem` into source text
(:meth:`Backend.emit`) and into an executable (:meth:`Backend.build`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ..arrays import ArrayInfo
from ..errors import BackendError, RegistrationError
from ..ir.nodes import Problem
from .binding import Call


@runtime_checkable
class Executable(Protocol):
    """A compiled problem.  ``run_checked`` executes every statement in order,
    reading and writing the call's arrays in place.  The :class:`~.binding.Call`
    holds one array and its :class:`ArrayInfo` per tensor and one value per
    scalar, already checked against the program by :class:`~.binding.Binder` (the
    one argument check): executables do not check them again.  ``run(arrays,
    scalars)`` is the same after binding arrays and scalars by name through that
    one check."""

    def run_checked(self, call: Call) -> None: ...

    def run(self, arrays: Mapping[str, Any], scalars: Mapping[str, Any]) -> None: ...


@runtime_checkable
class Backend(Protocol):
    name: str

    def available(self) -> bool:
        """True when this backend can build and run here."""
        ...

    def emit(self, problem: Problem) -> str:
        """Generated source code for the problem."""
        ...

    def build(self, problem: Problem) -> Executable:
        """Compile (or load from the on-disk cache) an executable for the problem."""
        ...

    def describe(self, array: Any) -> ArrayInfo | None:
        """Shape/dtype/strides/device of an array this backend accepts, or None when
        it does not accept that kind of object at all.  (A backend that launches on
        streams also defines ``resolve_stream(stream, arrays)``, the stream a call
        launches on, and takes it as a second argument: ``describe(array, stream)``,
        so that the array's producer is ordered before that stream.)"""
        ...

    def allocate(self, problem: Problem, tensor: str, like: Sequence[Any]) -> Any:
        """A new, uninitialised array for ``tensor`` in its declared layout, of the
        same library/device as the arrays in ``like`` (NumPy when ``like`` is empty)."""
        ...


_REGISTRY: dict[str, Callable[[], Backend]] = {}
_INSTANCES: dict[str, Backend] = {}
_BUILTIN_LOADED = False


def register_backend(name: str, factory: Callable[[], Backend]) -> None:
    """Make ``factory()`` the backend called ``name``; a name already taken (the
    built-in ``cpu`` and ``cuda`` included, and ``auto``) is refused with
    :class:`~einkern.errors.RegistrationError`."""
    _load_builtin()
    _add(name, factory)


def _add(name: str, factory: Callable[[], Backend]) -> None:
    if name in _REGISTRY or name == "auto":
        raise RegistrationError(
            f"a backend named {name!r} is already registered", hint="choose another name"
        )
    _REGISTRY[name] = factory


def backend_names() -> tuple[str, ...]:
    _load_builtin()
    return tuple(_REGISTRY)


def get_backend(name: str) -> Backend:
    """Backend by name; ``"auto"`` picks ``cuda`` when a GPU is usable, else ``cpu``."""
    _load_builtin()
    if name == "auto":
        cuda = get_backend("cuda")
        return cuda if cuda.available() else get_backend("cpu")
    if name not in _REGISTRY:
        raise BackendError(
            f"unknown backend {name!r}", hint=f"choose one of: auto, {', '.join(_REGISTRY)}"
        )
    if name not in _INSTANCES:
        _INSTANCES[name] = _REGISTRY[name]()
    return _INSTANCES[name]


def _cpu() -> Backend:
    from .cpu import CpuBackend

    return CpuBackend()


def _cuda() -> Backend:
    from .cuda import CudaBackend

    return CudaBackend()


def _load_builtin() -> None:
    """Register the built-in backends (once, before any other); their modules are
    imported on first use."""
    global _BUILTIN_LOADED
    if not _BUILTIN_LOADED:
        _BUILTIN_LOADED = True
        _add("cpu", _cpu)
        _add("cuda", _cuda)
