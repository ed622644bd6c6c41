"""The tuned kernel against the default mapping, the peer and the DRAM floor, in one run.

    python scripts/tuned_vs_peer.py --db study.sqlite gemm 4096
    python scripts/tuned_vs_peer.py --db study.sqlite sd_t_d1_1 16

``gemm N``: examples/gemm.ein at m = n = k = N (fp32) against cuBLAS SGEMM
(torch.matmul, TF32 off).  ``sd_t_d1_1 T``: examples/sd_t_d1_1.ein (fp64,
column-major) against torch.einsum and the DRAM floor 2·|t3| at the copy
bandwidth measured here.  The tuned kernel is ``einkern.compile(...,
tune="cached", tuning_db=DB)``; timing is the benchmark harness's (CUDA events,
L2 flushed before each run, median of 50 runs after warm-up).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch

import einkern
from einkern.bench.cuda_device import CudaEventTimer

ROOT = Path(__file__).resolve().parents[1]


def median_ms(timer: CudaEventTimer, fn, runs: int = 50) -> float:
    for _ in range(3):
        fn()
    return statistics.median(timer.time(fn, runs)) * 1e3


def copy_bandwidth(timer: CudaEventTimer) -> float:
    a = torch.empty(1 << 27, dtype=torch.float64, device="cuda").uniform_()
    b = torch.empty_like(a)
    return 2 * a.numel() * 8 / (median_ms(timer, lambda: b.copy_(a), 20) / 1e3)


def column(*shape: int) -> torch.Tensor:
    reverse = tuple(reversed(range(len(shape))))
    data = torch.rand(*reversed(shape), dtype=torch.float64, device="cuda") + 0.5
    return data.permute(*reverse)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=["gemm", "sd_t_d1_1"])
    parser.add_argument("size", type=int)
    parser.add_argument("--db", required=True)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    timer = CudaEventTimer(torch, 256 << 20)
    bandwidth = copy_bandwidth(timer)
    print(f"{torch.cuda.get_device_name()}, copy bandwidth {bandwidth / 1e12:.3f} TB/s")
    rows: dict[str, float] = {}
    if args.case == "gemm":
        n = args.size
        path, extents = ROOT / "examples" / "gemm.ein", {"m": n, "n": n, "k": n}
        A = torch.rand(n, n, device="cuda") + 0.5
        B = torch.rand(n, n, device="cuda") + 0.5
        C = torch.empty(n, n, device="cuda")
        arguments = {"A": A, "B": B, "C": C}
        rows["cuBLAS (torch.matmul, TF32 off)"] = median_ms(timer, lambda: torch.matmul(A, B))
        reference, output = torch.matmul(A, B), "C"
        work = 2.0 * n**3
    else:
        T = args.size
        path, extents = ROOT / "examples" / "sd_t_d1_1.ein", {"T": T}
        t3, t2, v2 = column(*(T,) * 6), column(*(T,) * 4), column(*(T,) * 4)
        arguments = {"t3": t3, "t2": t2, "v2": v2}
        rows["torch.einsum"] = median_ms(
            timer, lambda: t3.sub_(torch.einsum("gfea,cbdg->cbadef", t2, v2)))
        reference, output = None, "t3"
        work = 2 * t3.numel() * 8 / bandwidth * 1e3  # the floor, ms
    kernels = {
        "einkern default mapping": einkern.compile(path, backend="cuda", **extents),
        "einkern tuned (tune='cached')": einkern.compile(path, backend="cuda", tune="cached",
                                                         tuning_db=args.db, **extents),
    }
    print("tuned kernel's sources:", kernels["einkern tuned (tune='cached')"].tuning_sources)
    for name, kernel in kernels.items():
        if reference is not None:
            kernel(**arguments)
            error = ((arguments[output] - reference).abs().max() / reference.abs().max()).item()
            print(f"{name}: relative error {error:.1e}")
        rows[name] = median_ms(timer, lambda kernel=kernel: kernel(**arguments))
    peer = min(v for k, v in rows.items() if not k.startswith("einkern"))
    for name, ms in rows.items():
        figure = (f"{work / ms / 1e9:.1f} TFLOP/s" if args.case == "gemm"
                  else f"{work / ms:.0%} of the DRAM floor")
        print(f"| {name} | {ms:.4f} ms | {figure} | {peer / ms:.2f}x the peer |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
