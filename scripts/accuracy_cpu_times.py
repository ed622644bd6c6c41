"""CPU time of float32/float64 reductions under each accumulation (plain, blocked,
wide): the CPU side of docs/accuracy.md's cost table.  Run it on a quiet machine.

    PYTHONPATH=src python scripts/accuracy_cpu_times.py [--runs 40]

Every case is compiled once per accumulation with the default loop schedule
otherwise; the variants are run in turn (interleaved, so drifting load hits them
alike) and each one's fastest run is reported, with the rule's choice.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

import einkern
from einkern.backends.cpu.backend import CpuBackend
from einkern.backends.cpu.decide import default_schedule
from einkern.backends.cpu.schedule import ACCUMULATIONS, CpuSchedule
from einkern.testing import random_arrays

CASES = {
    "dot 1e7": ("float32", "dims n = 10000000\ntensor x[n], y[n], s[]\ns[] = x[i] * y[i]"),
    "gemv 64 x 1e5": (
        "float32",
        "dims m = 64, n = 100000\ntensor A[m, n], x[n], y[m]\ny[i] = A[i,k] * x[k]",
    ),
    "A^T x, 1e5 x 64": (
        "float32",
        "dims m = 64, n = 100000\ntensor A[n, m], x[n], y[m]\ny[i] = A[k,i] * x[k]",
    ),
    "sgemm 512": (
        "float32",
        "dims m = 512, n = 512, k = 512\ntensor A[m, k], B[k, n], C[m, n]\n"
        "C[i,j] = A[i,l] * B[l,j]",
    ),
    "abc,bcd->ad 40": (
        "float32",
        "dims n = 40\ntensor A[n, n, n], B[n, n, n], C[n, n]\nC[a,d] = A[a,b,c] * B[b,c,d]",
    ),
    "fp64 dot 1e7": ("float64", "dims n = 10000000\ntensor x[n], y[n], s[]\ns[] = x[i] * y[i]"),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    print("| case | rule's choice | " + " | ".join(f"{m} ms" for m in ACCUMULATIONS) + " |")
    print("|---|---|" + "---|" * len(ACCUMULATIONS))
    for name, (dtype, text) in CASES.items():
        problem = einkern.make_problem(einkern.load(f"program p\ndtype {dtype}\n{text}"), {})
        arrays = random_arrays(problem, 0)
        for output in problem.program.outputs:
            arrays.setdefault(output, np.zeros(problem.shape(output), dtype))
        default = default_schedule(problem)
        executables = {}
        for mode in ACCUMULATIONS:
            loops = tuple(dataclasses.replace(s, accumulate=mode) for s in default.statements)
            executables[mode] = CpuBackend().build(problem, CpuSchedule(loops))
            executables[mode].run(arrays, {})  # warm-up
        best = dict.fromkeys(ACCUMULATIONS, float("inf"))
        for _ in range(args.runs):
            for mode, executable in executables.items():
                start = time.perf_counter()
                executable.run(arrays, {})
                best[mode] = min(best[mode], time.perf_counter() - start)
        chosen = default.statements[0].accumulate
        print(
            f"| {name} | {chosen} | "
            + " | ".join(f"{best[m] * 1e3:.2f}" for m in ACCUMULATIONS)
            + " |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
