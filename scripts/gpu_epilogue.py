"""The tensor-core epilogues on the GPU: einkern's default kernel, and the default
fp64 tile forced with the ``direct`` and the ``shared`` epilogue
(``MmaConfig.epilogue``), against torch in the same run; CUDA events, L2
flushed, median of ``--runs``; errors against torch.einsum in float64.

    PYTHONPATH=src python scripts/gpu_epilogue.py [--runs 15]
"""

from __future__ import annotations

import argparse
import dataclasses

from gpu_gett import SIX, program_text
from gpu_precision import print_table

import einkern
from einkern.bench.cuda_device import CudaDevice
from einkern.gpu.mma_model import F64_TILES

# name: (product, extents, op)
CASES = {
    "dgemm 4096": ("ij=ik*kj", dict.fromkeys("ijk", 4096), "="),
    "dgemm 1024": ("ij=ik*kj", dict.fromkeys("ijk", 1024), "="),
    "lu update k=64": ("ij=ik*kj", {"i": 4096, "j": 4096, "k": 64}, "-="),
    "lu update k=128": ("ij=ik*kj", {"i": 4096, "j": 4096, "k": 128}, "-="),
    "tall-skinny k=64": ("ij=ik*kj", {"i": 8192, "j": 8192, "k": 64}, "="),
    "six-1": ("abcdef=akbc*dekf", SIX, "="),
}


def variants(text: str) -> dict[str, dict | None]:
    """The default (None) and the forced tiles, by label."""
    found: dict[str, dict | None] = {"default": None}
    for tile in (F64_TILES[0], F64_TILES[3]):
        bm, bn = tile.block_tile()
        for epilogue in ("direct", "shared"):
            config = dataclasses.replace(tile, epilogue=epilogue)
            found[f"{bm}x{bn} {epilogue}"] = {0: {"x": "", "mma": config.values()}}
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    device = CudaDevice()
    torch = device.torch
    rows = []
    for name, (spec, sizes, op) in CASES.items():
        text = program_text(spec, sizes, "float64", "row").replace("] = A", f"] {op} A")
        out, product = spec.split("=")
        a_idx, b_idx = product.split("*")
        expression = f"{a_idx},{b_idx}->{out}"
        problem = einkern.make_problem(einkern.load(text), {})
        arrays = device.random_inputs(problem, seed=3)
        x, y = arrays["A"], arrays["B"]
        c0 = arrays["C"] if "C" in arrays else torch.zeros_like(torch.einsum(expression, x, y))
        product_value = torch.einsum(expression, x, y)
        exact = {"=": product_value, "-=": c0 - product_value}[op]
        flops = 2
        for index in set(spec.replace("=", "").replace("*", "")):
            flops *= sizes[index]
        if op == "=":
            seconds = device.median_time(
                lambda e=expression, p=x, q=y: torch.einsum(e, p, q), args.runs
            )
        else:
            result = c0.clone()
            seconds = device.median_time(
                lambda e=expression, r=result, p=x, q=y: r.sub_(torch.einsum(e, p, q)), args.runs
            )
        rows.append((name, "torch", seconds, flops, 0.0, ""))
        for label, mappings in variants(text).items():
            try:
                kernel = einkern.compile(text, backend="cuda", mappings=mappings)
                strategy = "mma" if "mma.sync" in kernel.source() else "simt"
                result = c0.clone()
                kernel(A=x, B=y, C=result)
                error = float((result - exact).abs().max() / exact.abs().max())
                seconds = device.median_time(
                    lambda k=kernel, r=result, p=x, q=y: k(A=p, B=q, C=r), args.runs
                )
            except Exception as failure:  # noqa: BLE001 - report and go on
                print(f"{name} {label}: failed: {failure}")
                continue
            rows.append((name, f"einkern {label}", seconds, flops, error, strategy))
    print_table(device, rows, 18, 26)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
