"""float32 contractions under each ``precision=`` on the GPU: einkern's default
kernel for fp32 / tf32 / 3xtf32 against torch.matmul / torch.einsum with TF32 off
and on, in the same run: CUDA events, L2 flushed, median of ``--runs``; errors
against a float64 product of the same inputs.

    PYTHONPATH=src python scripts/gpu_precision.py [--runs 15]
"""

from __future__ import annotations

import argparse

from gpu_gett import program_text  # the same one-product programs, float32 here

import einkern
from einkern.bench.cuda_device import CudaDevice

CASES = {
    "sgemm 1024": ("ij=ik*kj", dict.fromkeys("ijk", 1024)),
    "sgemm 2048": ("ij=ik*kj", dict.fromkeys("ijk", 2048)),
    "sgemm 4096": ("ij=ik*kj", dict.fromkeys("ijk", 4096)),
    "abkl,klcd 64": ("abcd=abkl*klcd", dict.fromkeys("abcdkl", 64)),
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    device = CudaDevice()
    torch = device.torch
    rows = []
    for name, (spec, sizes) in CASES.items():
        text = program_text(spec, sizes, "float32", "row")
        out, product = spec.split("=")
        a_idx, b_idx = product.split("*")
        expression = f"{a_idx},{b_idx}->{out}"
        problem = einkern.make_problem(einkern.load(text), {})
        arrays = device.random_inputs(problem, seed=1)
        x, y = arrays["A"], arrays["B"]
        exact = torch.einsum(expression, x.double(), y.double())
        flops = 2
        for index in set(spec.replace("=", "").replace("*", "")):
            flops *= sizes[index]
        for tf32 in (False, True):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            result = torch.einsum(expression, x, y)
            seconds = device.median_time(
                lambda e=expression, p=x, q=y: torch.einsum(e, p, q), args.runs
            )
            error = device.relative_error(result.double(), exact)
            rows.append((name, f"torch tf32={'on' if tf32 else 'off'}", seconds, flops, error, ""))
        torch.backends.cuda.matmul.allow_tf32 = False
        for precision in ("fp32", "tf32", "3xtf32"):
            try:
                kernel = einkern.compile(text, backend="cuda", precision=precision)
                source = kernel.source()
                family = "tf32 mma" if "tf32" in source and "mma.sync" in source else "simt"
                result = device.empty(problem.shape("C"), "float32", "row")
                kernel(A=x, B=y, C=result)
                error = device.relative_error(result.double(), exact)
                seconds = device.median_time(
                    lambda k=kernel, r=result, p=x, q=y: k(A=p, B=q, C=r), args.runs
                )
            except Exception as failure:  # noqa: BLE001 - report and go on
                print(f"{name} {precision}: failed: {failure}")
                continue
            rows.append((name, f"einkern {precision}", seconds, flops, error, family))
    print_table(device, rows, 14, 18)
    return 0


def print_table(device, rows, case_width: int, variant_width: int) -> None:
    """The device line, then one line per (case, variant, seconds, flops, error, kernel)."""
    print(device.describe())
    print(
        f"{'case':{case_width}s} {'variant':{variant_width}s} {'ms':>9s} {'TFLOP/s':>8s} "
        f"{'error':>9s}  kernel"
    )
    for name, variant, seconds, flops, error, family in rows:
        print(
            f"{name:{case_width}s} {variant:{variant_width}s} {seconds * 1e3:9.3f} "
            f"{flops / seconds / 1e12:8.2f} {error:9.2e}  {family}"
        )


if __name__ == "__main__":
    raise SystemExit(main())
