"""Host time of one call: einkern.Kernel on torch CUDA tensors vs torch.einsum.

A tiny problem (sd_t_d1_1 at T = 4: 4096 outputs), so that the GPU work is far
shorter than the host work; the calls are issued back to back without
synchronising, and the host time per call is the wall time divided by the
number of calls.  Run on a machine with a GPU:

    python scripts/call_overhead.py [--calls 2000]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

import einkern
from einkern.bench.cuda_device import CudaDevice

ROOT = Path(__file__).resolve().parents[1]


def per_call_us(fn, calls: int) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--profile", action="store_true",
                        help="also print where the host time of einkern's call goes")
    args = parser.parse_args()
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
        print(f"{name:32s} {per_call_us(fn, args.calls):8.1f} us per call (host)")
    if args.profile:
        import cProfile
        import pstats

        call = rows["einkern kernel(t3=, t2=, v2=)"]
        profiler = cProfile.Profile()
        profiler.runcall(lambda: [call() for _ in range(args.calls)])
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
