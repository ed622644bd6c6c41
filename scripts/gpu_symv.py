"""einkern.blas.symv's reduction tiles on the GPU for several rows per thread
(``einkern.gpu.affine_reduce.ROWS_PER_THREAD``), against cuBLAS symv through
ctypes (as the ``blas`` bench suite), timed as the bench times (CUDA events on
GPU work only, L2 flushed, median), each result checked against torch:

    python scripts/gpu_symv.py [--rows 4,8,16] [--sizes 8192,16384]
"""

from __future__ import annotations

import argparse
import statistics

import torch

from einkern import blas
from einkern.bench.cuda_device import CudaEventTimer
from einkern.blas import engines
from einkern.gpu import affine_reduce


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", default="4,8,16")
    parser.add_argument("--sizes", default="8192,16384")
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    timer = CudaEventTimer(torch, 256 << 20)
    bandwidth = None
    for n in (int(v) for v in args.sizes.split(",")):
        for dtype in (torch.float32, torch.float64):
            a = torch.rand((n, n), dtype=dtype, device="cuda") - 0.5
            x = torch.rand(n, dtype=dtype, device="cuda") - 0.5
            full = torch.tril(a) + torch.tril(a, -1).T
            expected = full @ x
            stored = torch.tril(a)
            floor_bytes = (n * (n + 1) // 2 + 2 * n) * a.element_size()
            if bandwidth is None:
                big = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
                copy = statistics.median(timer.time(lambda b=big: b.clone(), 10))
                bandwidth = 2 * big.numel() / copy
            for rows in (int(v) for v in args.rows.split(",")):
                affine_reduce.ROWS_PER_THREAD = rows
                affine_reduce.TILE_ROWS = affine_reduce.WARPS * rows
                engines._compiled.cache_clear()
                got = blas.symv(1.0, stored, x, lower=True)
                error = float((got - expected).abs().max() / expected.abs().max())
                seconds = statistics.median(
                    timer.time(lambda s=stored, v=x: blas.symv(1.0, s, v, lower=True), args.runs)
                )
                floor = floor_bytes / bandwidth
                print(
                    f"{str(dtype)[6:]:8} n={n:6} rows/thread={rows:3}  {seconds * 1e3:8.4f} ms  "
                    f"{100 * floor / seconds:5.1f}% of floor  error {error:.1e}"
                )


if __name__ == "__main__":
    main()
