"""The built-in benchmark suites."""

from __future__ import annotations

from ..case import Suite


def builtin_suites() -> list[type[Suite]]:
    """Suite classes in the order ``all`` runs them."""
    from .blas import BlasSuite
    from .ccsdt import CcsdtSuite
    from .contractions import ContractionsSuite
    from .gemm import GemmSuite
    from .mapped import MappedSuite
    from .nekbone import NekboneSuite
    from .riemann import RiemannSuite

    return [
        GemmSuite,
        NekboneSuite,
        CcsdtSuite,
        RiemannSuite,
        MappedSuite,
        BlasSuite,
        ContractionsSuite,
    ]
