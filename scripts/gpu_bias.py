"""fp64 GEMM with a bias, ``C = A·B + D[i,j] - 2·E[j]``, on the GPU: einkern's
default (tensor cores, the bias added as the output is stored) beside einkern's
plain GEMM and cuBLAS (torch: ``addmm`` and ``mm`` plus the bias), CUDA events,
L2 flushed, median of ``--runs``, peers in the same run (issue 12: pointwise
terms beside a contraction)."""

from __future__ import annotations

import argparse
import sys

from gpu_fusion import measure, workspace  # this directory: the fusion script's helpers

import einkern
from einkern.bench.cuda_device import CudaDevice
from einkern.gpu.decision import decide
from einkern.ir.task import statement_task

BIAS = """program bias
dims n
dtype float64
tensor A[n,n], B[n,n], C[n,n], D[n,n], E[n]
C[i,j] = A[i,k] * B[k,j] + D[i,j] - 2 * E[j]
"""
PLAIN = """program gemm
dims n
dtype float64
tensor A[n,n], B[n,n], C[n,n]
C[i,j] = A[i,k] * B[k,j]
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("-n", type=int, nargs="+", default=[1024, 2048, 4096])
    args = parser.parse_args()
    import torch

    device = CudaDevice()
    print(
        f"{'n':>5} {'einkern bias':>13} {'einkern gemm':>13} {'torch addmm':>12} "
        f"{'torch mm+bias':>14} {'vs addmm':>9} {'error':>8}  einkern's kernel"
    )
    for n in args.n:
        kernel = einkern.compile(BIAS, backend="cuda", n=n)
        work = workspace(device, kernel.problem)
        A, B, D, E = (torch.as_tensor(work[x], device="cuda") for x in "ABDE")

        def addmm(A=A, B=B, D=D, E=E, **_):
            return torch.addmm(D - 2 * E, A, B)

        def mm(A=A, B=B, D=D, E=E, **_):
            return torch.mm(A, B) + D - 2 * E

        want = addmm()
        bias_s, _, (got,) = measure(device, kernel, work, None, args.runs)
        got = torch.as_tensor(got, device="cuda")
        error = float((got - want).abs().max() / want.abs().max())
        plain = einkern.compile(PLAIN, backend="cuda", n=n)
        plain_s, _, _ = measure(device, plain, workspace(device, plain.problem), None, args.runs)
        addmm_s = device.median_time(addmm, args.runs)
        mm_s = device.median_time(mm, args.runs)
        strategy = decide(statement_task(kernel.problem, 0)).strategy
        print(
            f"{n:5} {bias_s * 1e3:11.4f}ms {plain_s * 1e3:11.4f}ms {addmm_s * 1e3:10.4f}ms "
            f"{mm_s * 1e3:12.4f}ms {addmm_s / bias_s:8.2f}x {error:8.1e}  {strategy}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
