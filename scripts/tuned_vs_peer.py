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
from pathlib import Path

import torch

import einkern
from einkern.bench.cuda_device import CudaDevice

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=["gemm", "sd_t_d1_1"])
    parser.add_argument("size", type=int)
    parser.add_argument("--db", required=True)
    args = parser.parse_args()
    device = CudaDevice()  # TF32 off, L2 flushed before every timed run

    def median_ms(fn) -> float:
        for _ in range(2):  # warm-up; median_time adds one more
            fn()
        return device.median_time(fn, 50) * 1e3

    bandwidth = device.bandwidth()
    print(f"{torch.cuda.get_device_name()}, copy bandwidth {bandwidth / 1e12:.3f} TB/s")
    rows: dict[str, float] = {}
    if args.case == "gemm":
        n = args.size
        path, extents = ROOT / "examples" / "gemm.ein", {"m": n, "n": n, "k": n}
        A = torch.rand(n, n, device="cuda") + 0.5
        B = torch.rand(n, n, device="cuda") + 0.5
        C = torch.empty(n, n, device="cuda")
        arguments = {"A": A, "B": B, "C": C}
        rows["cuBLAS (torch.matmul, TF32 off)"] = median_ms(lambda: torch.matmul(A, B))
        reference, output = torch.matmul(A, B), "C"
        work = 2.0 * n**3
    else:
        T = args.size
        path, extents = ROOT / "examples" / "sd_t_d1_1.ein", {"T": T}
        problem = einkern.make_problem(einkern.load(path), extents)
        arguments = device.random_inputs(problem, seed=0)  # column-major, as declared
        t3, t2, v2 = arguments["t3"], arguments["t2"], arguments["v2"]
        rows["torch.einsum"] = median_ms(lambda: t3.sub_(torch.einsum("gfea,cbdg->cbadef", t2, v2)))
        reference, output = None, "t3"
        work = 2 * t3.numel() * 8 / bandwidth * 1e3  # the floor, ms
    kernels = {
        "einkern default mapping": einkern.compile(path, backend="cuda", **extents),
        "einkern tuned (tune='cached')": einkern.compile(
            path, backend="cuda", tune="cached", tuning_db=args.db, **extents
        ),
    }
    print("tuned kernel's sources:", kernels["einkern tuned (tune='cached')"].tuning_sources)
    for name, kernel in kernels.items():
        if reference is not None:
            kernel(**arguments)
            error = ((arguments[output] - reference).abs().max() / reference.abs().max()).item()
            print(f"{name}: relative error {error:.1e}")
        rows[name] = median_ms(lambda kernel=kernel: kernel(**arguments))
    peer = min(v for k, v in rows.items() if not k.startswith("einkern"))
    for name, ms in rows.items():
        figure = (
            f"{work / ms / 1e9:.1f} TFLOP/s"
            if args.case == "gemm"
            else f"{work / ms:.0%} of the DRAM floor"
        )
        print(f"| {name} | {ms:.4f} ms | {figure} | {peer / ms:.2f}x the peer |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
