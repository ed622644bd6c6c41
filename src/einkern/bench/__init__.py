"""``einkern bench``: einkern against library peers on standard suites.

* :mod:`~einkern.bench.case` — :class:`Case`, the :class:`Suite` protocol and
  the suite registry; suites in :mod:`einkern.bench.suites` (gemm, nekbone,
  ccsdt, riemann, mapped);
* :mod:`~einkern.bench.peers` — the :class:`Peer` protocol and registry
  (cuBLAS, torch.einsum, CuPy, opt_einsum, cuTENSOR; numpy.einsum and
  opt_einsum on the CPU), built on :mod:`~einkern.bench.lowering`;
* :mod:`~einkern.bench.device` / :mod:`~einkern.bench.cuda_device` — arrays,
  timers and measured ceilings of each backend;
* :mod:`~einkern.bench.runner` — checks and times every case × implementation
  into :class:`Measurement` rows;
* :mod:`~einkern.bench.report`, :mod:`~einkern.bench.plots` — JSON, CSV,
  Markdown and PNG output; the command itself is :mod:`einkern.cli.bench`.
"""

from .case import Case, Suite
from .peers import Peer
from .registry import (
    get_suite,
    peers_for,
    register_peer,
    register_suite,
    resolve_suites,
    suite_names,
)
from .results import BenchResult, Measurement
from .runner import BenchOptions, run_suites

__all__ = [
    "BenchOptions",
    "BenchResult",
    "Case",
    "Measurement",
    "Peer",
    "Suite",
    "get_suite",
    "peers_for",
    "register_peer",
    "register_suite",
    "resolve_suites",
    "run_suites",
    "suite_names",
]
