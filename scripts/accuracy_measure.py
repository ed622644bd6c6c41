"""Measure the error of einkern's float32 (and float64) reductions against an
extended-precision reference, beside NumPy's (docs/accuracy.md shows the tables).

    PYTHONPATH=src python scripts/accuracy_measure.py [--quick] [--cuda]

The float32 reference is the float64 evaluation of the same float32 inputs
(:func:`einkern.reference.evaluate`); the float64 one uses ``np.longdouble``.
Error: max |result - reference| / max |reference| (:func:`einkern.testing.relative_error`).
Each einkern column forces one accumulation (plain, blocked, wide) on every
statement; "default" is what the rules choose.  ``--cuda`` runs the CUDA kernels
of the decision's mappings in the CPU emulator (slow: only the shorter cases).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np

import einkern
from einkern.backends.cpu.backend import CpuBackend
from einkern.backends.cpu.decide import default_schedule
from einkern.backends.cpu.schedule import ACCUMULATIONS, CpuSchedule
from einkern.backends.verify import emulate_problem
from einkern.gpu.decision import decide
from einkern.ir.task import tasks_of
from einkern.reference import evaluate
from einkern.testing import random_arrays, random_scalars, relative_error

MODES = ("default", *ACCUMULATIONS)


def _cpu_outputs(problem, arrays, scalars, mode: str) -> dict[str, np.ndarray]:
    schedule = default_schedule(problem)
    if mode != "default":
        schedule = CpuSchedule(
            tuple(dataclasses.replace(s, accumulate=mode) for s in schedule.statements)
        )
    executable = CpuBackend().build(problem, schedule)
    work = {name: np.array(a, copy=True, order="K") for name, a in arrays.items()}
    for name in problem.program.outputs:
        if name not in work:
            tensor = problem.program.tensor(name)
            order = "C" if tensor.layout == "row" else "F"
            work[name] = np.zeros(problem.shape(name), dtype=tensor.dtype, order=order)
    executable.run(work, scalars)
    return work


def _cuda_outputs(problem, arrays, scalars, mode: str) -> dict[str, np.ndarray]:
    mappings = {}
    for task in tasks_of(problem):
        mapping = decide(task)
        if mode != "default":
            mapping = dataclasses.replace(mapping, accumulate=mode)
        mappings[task.position] = mapping
    result, _, bad = emulate_problem(problem, mappings, arrays, scalars)
    if bad:
        raise RuntimeError(f"{bad} bad accesses")
    return result


def errors(problem, backend: str) -> dict[str, float]:
    """Largest relative error over the outputs, per mode."""
    arrays = random_arrays(problem, 0)
    scalars = random_scalars(problem, 0)
    reference = evaluate(problem, arrays, scalars)
    run = _cpu_outputs if backend == "cpu" else _cuda_outputs
    found = {}
    for mode in MODES:
        try:
            outputs = run(problem, arrays, scalars, mode)
        except Exception as error:  # noqa: BLE001 - a mode may not apply: report it
            found[mode] = float("nan")
            print(f"  ({mode}: {type(error).__name__}: {error})", file=sys.stderr)
            continue
        found[mode] = max(
            relative_error(outputs[name], reference[name]) for name in problem.program.outputs
        )
    return found


def program(text: str, dtype: str = "float32") -> einkern.Program:
    return einkern.load(f"program p\ndtype {dtype}\n{text}")


CASES = {
    "dot n=1e3": ("dims n = 1000\ntensor x[n], y[n], s[]\ns[] = x[i] * y[i]", {}),
    "dot n=1e5": ("dims n = 100000\ntensor x[n], y[n], s[]\ns[] = x[i] * y[i]", {}),
    "dot n=1e6": ("dims n = 1000000\ntensor x[n], y[n], s[]\ns[] = x[i] * y[i]", {}),
    "dot n=1e7": ("dims n = 10000000\ntensor x[n], y[n], s[]\ns[] = x[i] * y[i]", {}),
    "gemv 16x1e5": (
        "dims m = 16, n = 100000\ntensor A[m, n], x[n], y[m]\ny[i] = A[i,k] * x[k]",
        {},
    ),
    "sgemm 128, k=4096": (
        "dims m = 128, n = 128, k = 4096\ntensor A[m, k], B[k, n], C[m, n]\n"
        "C[i,j] = A[i,l] * B[l,j]",
        {},
    ),
}
QUICK = ("dot n=1e3", "dot n=1e5", "gemv 16x1e5", "sgemm 128, k=4096")
EXAMPLES = {
    "gemm.ein": {"m": 256, "n": 256, "k": 256},
    "sd_t_d1_1.ein": {"T": 10},
    "local_grad3.ein": {"p": 8, "nelt": 16},
    "norms.ein": {"nb": 100, "d": 64},
    "treduda_sum.ein": {"n": 128},
}
EINSUMS = {
    "ab,ab,cd,cd,ef,ef->": (40,) * 6,
    "abc,bcd,de->ae": (40, 40, 40, 40, 40, 40, 40, 40),
    "ijk,jkl,lm->im": (20,) * 8,
}


def _as_float32(path: str) -> einkern.Program:
    text = open(path).read()
    lines = [line for line in text.splitlines() if not line.startswith("dtype")]
    at = next(n for n, line in enumerate(lines) if line.startswith("dims"))
    return einkern.load("\n".join([*lines[: at + 1], "dtype float32", *lines[at + 1 :]]))


def einsum_errors(subscripts: str, extents) -> dict[str, float]:
    rng = np.random.default_rng(0)
    inputs, _ = subscripts.split("->")
    sizes = dict(zip(sorted(set(inputs.replace(",", ""))), extents, strict=False))
    operands = [
        rng.uniform(0.5, 1.5, [sizes[c] for c in term]).astype(np.float32)
        for term in inputs.split(",")
    ]
    wide = [o.astype(np.float64) for o in operands]
    reference = np.einsum(subscripts, *wide, optimize=True)
    found = {
        "einkern cpu": einkern.einsum(subscripts, *operands, backend="cpu"),
        "einkern cpu (one kernel)": einkern.einsum(
            subscripts, *operands, backend="cpu", optimize=False
        ),
        "numpy": np.einsum(subscripts, *operands),
        "numpy optimize": np.einsum(subscripts, *operands, optimize=True),
    }
    return {name: relative_error(value, reference) for name, value in found.items()}


def fp64_dot(n: int) -> dict[str, float]:
    rng = np.random.default_rng(1)
    x, y = rng.uniform(0.5, 1.5, n), rng.uniform(0.5, 1.5, n)
    reference = float(np.sum(x.astype(np.longdouble) * y.astype(np.longdouble)))
    problem = einkern.make_problem(
        program("dims n = 1\ntensor x[n], y[n], s[]\ns[] = x[i] * y[i]", "float64"), {"n": n}
    )
    s = np.zeros((), np.float64)
    CpuBackend().build(problem).run({"x": x, "y": y, "s": s}, {})
    return {
        "einkern cpu": abs(float(s) - reference) / abs(reference),
        "numpy": abs(float(np.einsum("i,i->", x, y)) - reference) / abs(reference),
        "numpy optimize": abs(float(np.einsum("i,i->", x, y, optimize=True)) - reference)
        / abs(reference),
    }


def _row(name: str, values: dict[str, float]) -> str:
    return f"| {name} | " + " | ".join(f"{v:.1e}" for v in values.values()) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the shorter cases only")
    parser.add_argument("--cuda", action="store_true", help="also CUDA kernels, emulated")
    options = parser.parse_args()
    cases = {k: v for k, v in CASES.items() if not options.quick or k in QUICK}
    backends = ["cpu", "cuda"] if options.cuda else ["cpu"]
    for backend in backends:
        print(f"\n### float32, {backend} backend (einkern per accumulation; NumPy beside)\n")
        print("| case | " + " | ".join(MODES) + " | numpy | numpy optimize |")
        print("|---" * (len(MODES) + 3) + "|")
        for name, (text, sizes) in cases.items():
            if backend == "cuda" and name in ("dot n=1e6", "dot n=1e7"):
                continue
            problem = einkern.make_problem(program(text), sizes)
            found = errors(problem, backend)
            found.update(_numpy_errors(problem))
            print(_row(name, found), flush=True)
        for name, sizes in EXAMPLES.items():
            problem = einkern.make_problem(_as_float32(f"examples/{name}"), sizes)
            found = errors(problem, backend)
            print(_row(f"{name} (fp32) {sizes}", found) + " - | - |", flush=True)
    if options.quick:
        return
    print("\n### float32 einsum (NumPy's conventions)\n")
    print("| subscripts | einkern cpu | einkern cpu (one kernel) | numpy | numpy optimize |")
    print("|---|---|---|---|---|")
    for subscripts, extents in EINSUMS.items():
        print(_row(subscripts, einsum_errors(subscripts, extents)), flush=True)
    print("\n### float64 dot product against np.longdouble\n")
    print("| n | einkern cpu | numpy | numpy optimize |")
    print("|---|---|---|---|")
    for n in (10**6, 10**7):
        print(_row(f"{n:.0e}", fp64_dot(n)), flush=True)


def _numpy_errors(problem) -> dict[str, float]:
    """NumPy's einsum on the same float32 inputs (single-statement cases)."""
    statement = problem.program.statements[0]
    letters: dict[str, str] = {}
    for index in statement.indices:
        letters.setdefault(index, "abcdefghijklmnopqrstuvwxyz"[len(letters)])
    reads = statement.reads()
    subscripts = (
        ",".join("".join(letters[i] for i in a.indices) for a in reads)
        + "->"
        + "".join(letters[i] for i in statement.output.indices)
    )
    arrays = random_arrays(problem, 0)
    scalars = random_scalars(problem, 0)
    reference = evaluate(problem, arrays, scalars)[statement.output.tensor]
    operands = [arrays[a.tensor] for a in reads]
    optimized = np.einsum(subscripts, *operands, optimize=True)
    return {
        "numpy": relative_error(np.einsum(subscripts, *operands), reference),
        "numpy optimize": relative_error(optimized, reference),
    }


if __name__ == "__main__":
    main()
