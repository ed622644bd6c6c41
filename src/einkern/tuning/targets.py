"""The tuning targets by backend name: ``cpu`` and ``cuda`` built in.

A name is registered once (:class:`~einkern.errors.RegistrationError` on a
second registration); the built-in targets are registered on first use, before
any other.  Kept apart from :mod:`.target` (the protocol) so that the targets,
which import the protocol, are not imported by it.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import BackendError, RegistrationError
from .target import TuningTarget

_TARGETS: dict[str, Callable[[], TuningTarget]] = {}
_BUILTIN_LOADED = False


def register_target(name: str, factory: Callable[[], TuningTarget]) -> None:
    """Make ``factory()`` the tuning target of backend ``name``; a taken name is refused."""
    _register_builtin()
    _add(name, factory)


def target_names() -> tuple[str, ...]:
    """The backends that can be tuned."""
    _register_builtin()
    return tuple(_TARGETS)


def get_target(name: str) -> TuningTarget:
    """The tuning target of backend ``name`` (``cpu`` or ``cuda``)."""
    _register_builtin()
    if name not in _TARGETS:
        raise BackendError(f"backend {name!r} cannot be tuned",
                           hint=f"tunable backends: {', '.join(_TARGETS)}")
    return _TARGETS[name]()


def _add(name: str, factory: Callable[[], TuningTarget]) -> None:
    if name in _TARGETS:
        raise RegistrationError(f"a tuning target named {name!r} is already registered",
                                hint="choose another name")
    _TARGETS[name] = factory


def _cpu() -> TuningTarget:
    from .cpu_target import CpuTarget

    return CpuTarget()


def _cuda() -> TuningTarget:
    from ..gpu.tuning import CudaTarget

    return CudaTarget()


def _register_builtin() -> None:
    global _BUILTIN_LOADED
    if not _BUILTIN_LOADED:
        _BUILTIN_LOADED = True
        _add("cpu", _cpu)
        _add("cuda", _cuda)
