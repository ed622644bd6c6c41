"""GPU smoke test of einkern's CUDA backend.

Builds a few sample programs, runs them with NumPy inputs (and torch / CuPy
device arrays when those libraries are installed), compares every output with
the NumPy reference and prints the largest relative error (max |diff| / max
|reference|) and each kernel's median time with its effective bandwidth.

    python scripts/gpu_smoke.py [--repeat 20] [--large]

Exit status 1 when an error exceeds its tolerance (fp64 1e-12, fp32 1e-5).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from einkern.backends.cuda import CudaBackend, samples
from einkern.ir.nodes import Problem
from einkern.reference import evaluate

SCALARS = {"alpha": 1.5, "beta": -0.75, "gamma": 0.25}


def cases(large: bool) -> list[tuple[str, Problem]]:
    found = [
        ("gemm fp64 row 129x77x61", samples.gemm(129, 77, 61)),
        ("gemm fp32 column 100x1x37", samples.gemm(100, 1, 37, "float32", "column")),
        ("sd_t_d1_1 fp64 column 16^7", samples.ccsd_t(16)),
        ("sd_t_d1_1 fp32 column 13^6x7", samples.ccsd_t(13, 7, "float32")),
        ("nekbone fp64 row E=97 p=12", samples.nekbone(97, 12)),
        ("riemann fp64 n=7", samples.riemann(7)),
        ("row_norm fp32 1000x33", samples.row_norm(1000, 33, "float32")),
        ("functions fp64 13x7", samples.functions()),
    ]
    if large:
        found += [
            ("gemm fp64 row 2048^3", samples.gemm(2048, 2048, 2048)),
            ("sd_t_d1_1 fp64 column 32^7", samples.ccsd_t(32)),
            ("nekbone fp64 row E=32768 p=12", samples.nekbone(32768, 12)),
        ]
    return found


def rel_error(got: np.ndarray, want: np.ndarray) -> float:
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    diff = float(np.max(np.abs(np.asarray(got, dtype=np.float64) - want))) if want.size else 0.0
    return diff / scale if scale > 0 else diff


def tolerance(problem: Problem) -> float:
    """1e-12 for fp64 programs, 1e-5 when any tensor is float32."""
    dtypes = {t.dtype for t in problem.program.tensors}
    return 1e-5 if "float32" in dtypes else 1e-12


def to_library(arrays: dict, library: str) -> dict | None:
    try:
        if library == "torch":
            import torch

            return {n: torch.from_numpy(a).to("cuda") for n, a in arrays.items()}
        import cupy

        return {
            n: cupy.array(a, order="F" if a.ndim > 1 and not a.flags.c_contiguous else "C")
            for n, a in arrays.items()
        }
    except ImportError:
        return None


def to_numpy(array) -> np.ndarray:
    if hasattr(array, "get"):  # cupy
        return array.get()
    if hasattr(array, "cpu"):  # torch
        return array.cpu().numpy()
    return np.asarray(array)


def check_case(backend: CudaBackend, label: str, problem: Problem, repeat: int) -> bool:
    start = time.perf_counter()
    executable = backend.build(problem)
    build_s = time.perf_counter() - start
    arrays = samples.random_arrays(problem, seed=1)
    reference = evaluate(problem, arrays, SCALARS)
    ok = True
    errors = []
    for library in ("numpy", "torch", "cupy"):
        inputs = (
            {n: a.copy(order="K") for n, a in arrays.items()}
            if library == "numpy"
            else to_library(arrays, library)
        )
        if inputs is None:
            errors.append(f"{library}: not installed")
            continue
        executable.run(inputs, SCALARS)
        worst = 0.0
        for name in problem.program.outputs:
            error = rel_error(to_numpy(inputs[name]), reference[name].astype(np.float64))
            worst = max(worst, error)
            ok &= error <= tolerance(problem)
        errors.append(f"{library}: {worst:.1e}")
    print(f"{label}: build {build_s:.2f} s; max rel error {', '.join(errors)}")
    device_arrays = to_library(arrays, "torch") or {n: a.copy(order="K") for n, a in arrays.items()}
    times = executable.profile(device_arrays, SCALARS, repeat=repeat)
    resources = {r.name: r for r in executable.resources}
    for kernel, ms in zip(executable.source.kernels, times, strict=True):
        moved = sum(problem.nbytes(t) for t in kernel.tensors)
        found = resources.get(kernel.name)
        usage = f"{found.registers} regs, {found.spill_stores} B spills" if found else "?"
        print(
            f"    {kernel.name}: {ms * 1e3:9.1f} us, {moved / (ms * 1e-3) / 1e9:7.1f} GB/s "
            f"(one pass), grid {kernel.grid} block {kernel.block}, {usage}"
        )
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--large", action="store_true", help="also run large problems")
    args = parser.parse_args(argv)
    backend = CudaBackend()
    if not backend.available():
        print(f"CUDA backend not available: {backend.unavailable_reason()}")
        return 2
    props = backend.device_properties(0)
    print(
        f"device: {props.name} ({props.arch}), {props.multiprocessors} SMs, "
        f"L2 {props.l2_cache_bytes >> 20} MiB"
    )
    ok = True
    for label, problem in cases(args.large):
        ok &= check_case(backend, label, problem, args.repeat)
    print("OK" if ok else "FAILED: an error is above its tolerance")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
