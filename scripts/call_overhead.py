"""Host time of one call: einkern against the einsum of NumPy or torch.

``--cpu``: cached ``einkern.einsum`` calls on tiny NumPy arrays (the CPU backend)
against ``numpy.einsum(optimize=True)`` and plain ``numpy.einsum``, per call, for
a few subscripts (one kernel, and a three-operand chain of two kernels); with
``--chain``, also the time of ``ij,jk,kl->il`` at larger n (pairwise plan, and
one kernel over every index at the smallest n).  Run anywhere:

    python scripts/call_overhead.py --cpu [--calls 20000] [--chain 96,256,512]

Without ``--cpu`` (a machine with a GPU): ``einkern.Kernel`` on torch CUDA
tensors against ``torch.einsum``, on a tiny problem (sd_t_d1_1 at T = 4: 4096
outputs), so that the GPU work is far shorter than the host work; the calls are
issued back to back without synchronising, and the host time per call is the
wall time divided by the number of calls:

    python scripts/call_overhead.py [--calls 2000]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import einkern

ROOT = Path(__file__).resolve().parents[1]


def per_call_us(
    fn: Callable[[], object], calls: int, sync: Callable[[], None] = lambda: None, repeats: int = 5
) -> float:
    """Best of ``repeats`` runs of ``calls`` calls, in microseconds per call."""
    for _ in range(min(calls, 200)):
        fn()
    best = float("inf")
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def cpu_rows(calls: int) -> None:
    rng = np.random.default_rng(0)
    cases = {
        "ik,kj->ij (4x4)": ("ik,kj->ij", [(4, 4), (4, 4)]),
        "ij,jk,kl->il (4x4, 2 kernels)": ("ij,jk,kl->il", [(4, 4)] * 3),
        "...ij,...jk (2x4x4)": ("...ij,...jk", [(2, 4, 4), (2, 4, 4)]),
    }
    print(f"{'subscripts':32s} {'einkern':>9s} {'np opt':>9s} {'np':>9s} {'ratio':>6s}  (us/call)")
    for name, (spec, shapes) in cases.items():
        ops = [rng.random(shape) for shape in shapes]
        ours = per_call_us(lambda: einkern.einsum(spec, *ops, backend="cpu"), calls)  # noqa: B023
        optimized = per_call_us(lambda: np.einsum(spec, *ops, optimize=True), calls)  # noqa: B023
        plain = per_call_us(lambda: np.einsum(spec, *ops), calls)  # noqa: B023
        print(f"{name:32s} {ours:9.1f} {optimized:9.1f} {plain:9.1f} {ours / optimized:5.2f}x")


def chain_rows(sizes: list[int]) -> None:
    rng = np.random.default_rng(1)
    print(f"\n{'ij,jk,kl->il':32s} {'einkern':>10s} {'np opt':>10s} {'ratio':>6s}  (ms/call)")
    for n in sizes:
        ops = [rng.random((n, n)) for _ in range(3)]
        calls = max(1, int(2e7 / n**3))
        rows = {
            "einkern (pairwise)": lambda ops=ops: einkern.einsum(
                "ij,jk,kl->il", *ops, backend="cpu"
            )
        }
        if n == sizes[0]:
            rows["einkern optimize=False"] = lambda ops=ops: einkern.einsum(
                "ij,jk,kl->il", *ops, backend="cpu", optimize=False
            )
        reference = (
            per_call_us(
                lambda ops=ops: np.einsum("ij,jk,kl->il", *ops, optimize=True),
                calls,
                repeats=3,
            )
            / 1e3
        )
        for label, fn in rows.items():
            ours = per_call_us(fn, calls, repeats=3) / 1e3
            print(
                f"{label + f' n={n}':32s} {ours:10.3f} {reference:10.3f} {ours / reference:5.2f}x"
            )


def gpu_rows(calls: int, profile: bool) -> None:
    import torch

    from einkern.bench.cuda_device import CudaDevice

    T = 4
    kernel = einkern.compile(ROOT / "examples" / "sd_t_d1_1.ein", backend="cuda", T=T)
    arrays = CudaDevice().random_inputs(kernel.problem, seed=0)  # column-major, as declared
    t3, t2, v2 = arrays["t3"], arrays["t2"], arrays["v2"]
    rows = {
        "einkern kernel(t3=, t2=, v2=)": lambda: kernel(t3=t3, t2=t2, v2=v2),
        "torch.einsum + sub_": lambda: t3.sub_(torch.einsum("gfea,cbdg->cbadef", t2, v2)),
        "torch.add_ (one tiny kernel)": lambda: t3.add_(1.0),
    }
    for name, fn in rows.items():
        time_us = per_call_us(fn, calls, torch.cuda.synchronize, repeats=1)
        print(f"{name:32s} {time_us:8.1f} us per call (host)")
    if profile:
        import cProfile
        import pstats

        call = rows["einkern kernel(t3=, t2=, v2=)"]
        profiler = cProfile.Profile()
        profiler.runcall(lambda: [call() for _ in range(calls)])
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--calls",
        type=int,
        default=None,
        help="calls per timing (default: 20000 on the CPU, 2000 on the GPU)",
    )
    parser.add_argument("--cpu", action="store_true", help="einsum on the CPU backend")
    parser.add_argument(
        "--chain", default="", help="with --cpu: comma-separated n for ij,jk,kl->il (e.g. 96,256)"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="GPU mode: also print where the host time of einkern's call goes",
    )
    args = parser.parse_args()
    if args.cpu:
        cpu_rows(args.calls or 20000)
        if args.chain:
            chain_rows([int(n) for n in args.chain.split(",")])
    else:
        gpu_rows(args.calls or 2000, args.profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
