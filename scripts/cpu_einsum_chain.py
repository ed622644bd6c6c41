"""Issue 11's multi-operand target on the CPU: ``einkern.einsum("ij,jk,kl->il",
backend="cpu")`` against ``numpy.einsum(..., optimize=True)``, n = 96 ... 2048,
float64 and float32, in the same run.

Each row is the median wall time of ``--runs`` calls, after calling each function
for 0.15 s (OpenBLAS's idle threads spin for about that long after a call:
:data:`einkern.backends.cpu.blas.SETTLE_S`), the two timed alternately in rounds on
the same random inputs.  einkern's result is checked against NumPy's (relative
error in the largest element).  The last column is einkern's speed over NumPy's.

    python scripts/cpu_einsum_chain.py [--sizes 96,256,512,1024,2048] [--runs 10]
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

import einkern
from einkern.backends.cpu.blas import SETTLE_S
from einkern.bench.device import PerfCounterTimer

EQUATION = "ij,jk,kl->il"


def timed(fn, runs: int) -> list[float]:
    """Wall times of ``runs`` calls after ``SETTLE_S`` seconds of calls."""
    return PerfCounterTimer(SETTLE_S).time(fn, runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="96,256,512,1024,2048")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print("| dtype | n | einkern ms | numpy ms | error | einkern speed / numpy |")
    print("|---|---|---|---|---|---|")
    for dtype in ("float64", "float32"):
        for n in (int(s) for s in args.sizes.split(",")):
            a, b, c = (rng.standard_normal((n, n)).astype(dtype) for _ in range(3))
            ours = einkern.einsum(EQUATION, a, b, c, backend="cpu")
            theirs = np.einsum(EQUATION, a, b, c, optimize=True)
            error = float(np.max(np.abs(ours - theirs)) / np.max(np.abs(theirs)))
            ops = (a, b, c)
            mine: list[float] = []
            peer: list[float] = []
            for _ in range(args.rounds):
                mine += timed(lambda x=ops: einkern.einsum(EQUATION, *x, backend="cpu"), args.runs)
                peer += timed(lambda x=ops: np.einsum(EQUATION, *x, optimize=True), args.runs)
            t_mine, t_peer = statistics.median(mine), statistics.median(peer)
            print(
                f"| {dtype} | {n} | {t_mine * 1e3:.3f} | {t_peer * 1e3:.3f} | {error:.1e} |"
                f" {t_peer / t_mine:.2f}× |"
            )


if __name__ == "__main__":
    main()
