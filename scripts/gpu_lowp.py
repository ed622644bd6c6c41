"""bf16 and fp16 GEMM on the GPU: einkern's default kernel (the decision's choice:
m16n8k16 tensor cores with fp32 accumulation) against torch.matmul in the same
run, for n = 4096 and 8192, with the output in the 16-bit type and in float32.
CUDA events after warm-up calls, median of ``--runs`` (at least 20), the L2
flushed before every call by writing a 256 MiB buffer, random inputs in
[0.5, 1.5); errors against a float64 product of the same inputs.

    PYTHONPATH=src python scripts/gpu_lowp.py [--runs 25] [--sizes 4096,8192]
"""

from __future__ import annotations

import argparse

from gpu_gett import program_text  # the same one-product programs, 16-bit here

import einkern
from einkern.bench.cuda_device import CudaDevice, CudaEventTimer

FLUSH_BYTES = 256 << 20
WARM_UP = 3


def gemm_text(n: int, dtype: str, out: str) -> str:
    """The GEMM program with inputs of ``dtype`` and the output of ``out``."""
    text = program_text("ij=ik*kj", dict.fromkeys("ijk", n), dtype, "row")
    return text.replace("tensor C[i, j], ", "tensor C[i, j] " + out + "\ntensor ")


def timed(device: CudaDevice, fn, runs: int) -> float:
    for _ in range(WARM_UP):
        fn()
    return device.median_time(fn, runs)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=25)
    parser.add_argument("--sizes", default="4096,8192")
    args = parser.parse_args()
    if args.runs < 20:
        parser.error("--runs must be at least 20")
    device = CudaDevice()
    device.timer = CudaEventTimer(device.torch, FLUSH_BYTES)
    torch = device.torch
    rows = []
    for n in (int(size) for size in args.sizes.split(",")):
        flops = 2 * n**3
        for dtype in ("bfloat16", "float16"):
            problem = einkern.make_problem(einkern.load(gemm_text(n, dtype, dtype)), {})
            arrays = device.random_inputs(problem, seed=1)
            x, y = arrays["A"], arrays["B"]
            exact = torch.matmul(x.double(), y.double())
            result = torch.matmul(x, y)
            seconds = timed(device, lambda p=x, q=y, r=result: torch.matmul(p, q, out=r), args.runs)
            error = device.relative_error(result.double(), exact)
            rows.append((n, dtype, "torch.matmul", dtype, seconds, flops, error, ""))
            for out in (dtype, "float32"):
                try:
                    kernel = einkern.compile(gemm_text(n, dtype, out), backend="cuda")
                    source = kernel.source()
                    family = "mma" if "mma.sync" in source else "simt"
                    c = device.empty((n, n), out, "row")
                    kernel(A=x, B=y, C=c)
                    error = device.relative_error(c.double(), exact)
                    seconds = timed(
                        device, lambda k=kernel, p=x, q=y, r=c: k(A=p, B=q, C=r), args.runs
                    )
                except Exception as failure:  # noqa: BLE001 - report and go on
                    print(f"{dtype} n={n} out {out}: failed: {failure}")
                    continue
                rows.append((n, dtype, "einkern default", out, seconds, flops, error, family))
    print(device.describe(), f"(L2 flushed with {FLUSH_BYTES >> 20} MiB)")
    print(f"{'n':>5s} {'inputs':9s} {'variant':16s} {'out':9s} {'ms':>9s} {'TFLOP/s':>8s}"
          f" {'error':>9s}  kernel")  # fmt: skip
    for n, dtype, variant, out, seconds, flops, error, family in rows:
        print(
            f"{n:5d} {dtype:9s} {variant:16s} {out:9s} {seconds * 1e3:9.3f} "
            f"{flops / seconds / 1e12:8.1f} {error:9.2e}  {family}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
