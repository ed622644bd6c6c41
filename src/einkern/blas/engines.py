"""How ``einkern.blas`` turns a routine's loop-nest text into a callable kernel.

Every routine is C loop-nest text (:mod:`einkern.lang.cfront`) compiled for
the call's sizes.  A text whose statements have Einstein semantics on boxes is
raised to a tensor program (:func:`einkern.ir.affine_raise.raise_function`) and
compiled by :func:`einkern.compile` — the tensor-program path: fusion, the
CUDA decision, rewrites, tuning records — and any other (a triangle, a
triangular solve) runs as an affine program (:mod:`einkern.backends.cpu.affine`,
:mod:`einkern.backends.cuda.affine`).  Both kinds are called with arrays and
scalars by name and go through the one argument check
(:class:`~einkern.backends.binding.Binder`).

An :class:`Engine` does the compiling; engines are chosen by name from a
registry: ``cpu`` and ``cuda`` are built in, and a test can register one that
runs the CUDA kernels in the emulator.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ..errors import BackendError, RegistrationError

Sizes = tuple[tuple[str, int], ...]


class Engine(Protocol):
    """Compiles loop-nest text for concrete sizes into a callable: ``kernel(**arrays,
    **scalars)`` writes the arrays it writes in place."""

    name: str

    def kernel(self, text: str, sizes: Sizes) -> Callable[..., Any]: ...


def parsed_function(text: str) -> Any:
    """The one function of a routine's C text."""
    from ..lang.cfront import parse_c

    return parse_c(text, "<einkern.blas>").function(None)


@functools.lru_cache(maxsize=64)
def raised(text: str) -> Any:
    """The tensor program of ``text``, or the sentence saying why there is none."""
    from ..ir.affine_raise import raise_function

    return raise_function(parsed_function(text))


class Compiled:
    """The CPU or CUDA backend: tensor programs through :func:`einkern.compile`,
    other loop nests as affine kernels; each (text, sizes) compiled once per
    process (and on disk by the backends' caches)."""

    def __init__(self, backend: str):
        self.name = backend

    def kernel(self, text: str, sizes: Sizes) -> Callable[..., Any]:
        return _compiled(text, sizes, self.name)


@functools.lru_cache(maxsize=512)
def _compiled(text: str, sizes: Sizes, backend: str) -> Callable[..., Any]:
    from .. import api
    from ..ir.affine import make_affine_problem

    program = raised(text)
    if not isinstance(program, str):
        extents: dict[str, Any] = dict(sizes)
        return api.compile(program, backend=backend, **extents)
    problem = make_affine_problem(parsed_function(text), dict(sizes))
    if backend == "cuda":
        from ..backends.cuda.affine import AffineCudaKernel

        return AffineCudaKernel(problem)
    from ..backends.cpu.affine import AffineKernel

    return AffineKernel(problem)


_ENGINES: dict[str, Callable[[], Engine]] = {
    "cpu": lambda: Compiled("cpu"),
    "cuda": lambda: Compiled("cuda"),
}
_INSTANCES: dict[str, Engine] = {}


def register_engine(name: str, factory: Callable[[], Engine]) -> None:
    """Make ``factory()`` the engine called ``name`` (a taken name is refused)."""
    if name in _ENGINES:
        raise RegistrationError(
            f"an einkern.blas engine named {name!r} is already registered",
            hint="choose another name",
        )
    _ENGINES[name] = factory


def get_engine(name: str) -> Engine:
    """The engine called ``name``."""
    if name not in _ENGINES:
        raise BackendError(
            f"einkern.blas has no backend {name!r}", hint=f"choose one of: {', '.join(_ENGINES)}"
        )
    if name not in _INSTANCES:
        _INSTANCES[name] = _ENGINES[name]()
    return _INSTANCES[name]


def run(engine: Engine, text: str, sizes: Mapping[str, int], **arguments: Any) -> None:
    """Compile ``text`` for ``sizes`` (cached) and call it with ``arguments``."""
    engine.kernel(text, tuple(sorted(sizes.items())))(**arguments)
