"""The benchmark's registries: suites and peers by name, and the device of each
backend.  A name is registered once: a second registration raises
:class:`~einkern.errors.RegistrationError`.  The built-in suites and peers are
registered on first use, before any other, so a user's cannot take their names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..errors import RegistrationError, UsageError
from .case import Suite
from .device import CpuDevice, Device
from .peers import Peer

_SUITES: dict[str, Callable[[], Suite]] = {}
_PEERS: dict[str, Callable[[], Peer]] = {}
_LOADED: set[str] = set()


def register_suite(name: str, factory: Callable[[], Suite]) -> None:
    """Make a suite available to ``einkern bench NAME``; a taken name is refused."""
    _load_builtin_suites()
    _add(_SUITES, "benchmark suite", name, factory)


def suite_names() -> tuple[str, ...]:
    """Registered suites, in the order ``all`` runs them."""
    _load_builtin_suites()
    return tuple(_SUITES)


def get_suite(name: str) -> Suite:
    """The suite called ``name``."""
    _load_builtin_suites()
    if name not in _SUITES:
        raise UsageError(
            f"unknown benchmark suite {name!r}", hint=f"choose from: all, {', '.join(_SUITES)}"
        )
    return _SUITES[name]()


def resolve_suites(names: Sequence[str]) -> list[Suite]:
    """Suites by name, in order, without repeats; ``all`` stands for every suite
    except those that say ``in_all = False`` (the ``contractions`` generality
    benchmark, which is run and reported on its own)."""
    wanted: list[str] = []
    for name in names:
        every = [n for n in suite_names() if getattr(get_suite(n), "in_all", True)]
        for item in every if name == "all" else (name,):
            if item not in wanted:
                wanted.append(item)
    return [get_suite(name) for name in wanted]


def register_peer(name: str, factory: Callable[[], Peer]) -> None:
    """Make a peer part of every benchmark on its backend; a taken name is refused."""
    _load_builtin_peers()
    _add(_PEERS, "benchmark peer", name, factory)


def peers_for(backend: str, names: Sequence[str] | None = None) -> list[Peer]:
    """The registered peers of a backend (all, or those named), in registry order."""
    _load_builtin_peers()
    peers = [factory() for factory in _PEERS.values()]
    return [
        peer for peer in peers if peer.backend == backend and (names is None or peer.name in names)
    ]


def peer_names() -> tuple[str, ...]:
    """Every registered peer's name."""
    _load_builtin_peers()
    return tuple(_PEERS)


def get_device(backend: str) -> Device:
    """The benchmark device of a backend name (``cpu`` or ``cuda``)."""
    if backend == "cpu":
        return CpuDevice()
    if backend == "cuda":
        from .cuda_device import CudaDevice

        return CudaDevice()
    raise UsageError(f"no benchmark device for backend {backend!r}", hint="use cpu or cuda")


def _add(registry: dict, kind: str, name: str, factory: Callable) -> None:
    if name in registry:
        raise RegistrationError(
            f"a {kind} named {name!r} is already registered", hint="choose another name"
        )
    registry[name] = factory


def _load_builtin_suites() -> None:
    if "suites" in _LOADED:
        return
    _LOADED.add("suites")
    from .suites import builtin_suites

    for suite_class in builtin_suites():
        _add(_SUITES, "benchmark suite", suite_class.name, suite_class)


def _load_builtin_peers() -> None:
    if "peers" in _LOADED:
        return
    _LOADED.add("peers")
    from .cutensor import CutensorPeer
    from .peers import builtin_peers
    from .routines import routine_peers

    builtin = [*builtin_peers(), (CutensorPeer.name, CutensorPeer), *routine_peers()]
    for name, factory in builtin:
        _add(_PEERS, "benchmark peer", name, factory)
