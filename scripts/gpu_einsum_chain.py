"""Issue 11's multi-operand target on the GPU: ``einkern.einsum("ij,jk,kl->il")``
against ``torch.einsum`` on CUDA tensors, n = 96 ... 2048, float64 and float32
(TF32 off), in the same run.

Two timings per row, both the median of ``--runs`` calls after warm-up with the
L2 flushed before each: the GPU time (CUDA events, the call queued behind a spin
kernel so that its host work is hidden: :class:`einkern.bench.cuda_device.CudaEventTimer`)
and the wall time of a synchronised call (host work included, what a caller that
waits for the result sees).  einkern's result is checked against torch.einsum in
float64.  The last table gives einkern over torch for both.

    python scripts/gpu_einsum_chain.py [--sizes 96,256,512,1024,2048] [--runs 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

import einkern
from einkern.bench.cuda_device import CudaDevice

EQUATION = "ij,jk,kl->il"


def wall_seconds(device: CudaDevice, fn, runs: int) -> float:
    """Median wall time of a synchronised call, the L2 flushed before each."""
    torch = device.torch
    times = []
    for _ in range(runs):
        device.timer.flush_buffer.fill_(1)
        torch.cuda.synchronize()
        started = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="96,256,512,1024,2048")
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    device = CudaDevice()
    torch = device.torch
    print(device.describe(), flush=True)
    rows = []
    for dtype in ("float64", "float32"):
        for n in (int(s) for s in args.sizes.split(",")):
            generator = torch.Generator(device="cuda").manual_seed(n)
            a, b, c = (
                torch.rand(n, n, dtype=device.dtypes[dtype], device="cuda", generator=generator)
                + 0.5
                for _ in range(3)
            )

            def ours(a=a, b=b, c=c):
                return einkern.einsum(EQUATION, a, b, c, backend="cuda")

            def theirs(a=a, b=b, c=c):
                return torch.einsum(EQUATION, a, b, c)

            got, want = ours(), torch.einsum(EQUATION, a.double(), b.double(), c.double())
            error = float((got.double() - want).abs().max() / want.abs().max())
            row = [dtype, n, error]
            for fn in (ours, theirs):
                row.append(device.median_time(fn, args.runs))
                row.append(wall_seconds(device, fn, args.runs))
            rows.append(row)
            print(
                f"{dtype} n={n}: einkern {row[3] * 1e3:.4f} ms GPU, {row[4] * 1e3:.4f} ms wall; "
                f"torch {row[5] * 1e3:.4f} / {row[6] * 1e3:.4f} ms; error {error:.1e}",
                flush=True,
            )
    print(
        "\n| dtype | n | einkern GPU ms | torch GPU ms | torch / einkern (GPU) |"
        " einkern wall ms | torch wall ms | torch / einkern (wall) | max rel. error |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for dtype, n, error, eg, ew, tg, tw in rows:
        print(
            f"| {dtype} | {n} | {eg * 1e3:.4g} | {tg * 1e3:.4g} | {tg / eg:.2f}× | "
            f"{ew * 1e3:.4g} | {tw * 1e3:.4g} | {tw / ew:.2f}× | {error:.1e} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
