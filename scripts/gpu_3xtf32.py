"""3xTF32 contractions on the GPU (``gpu_tf32``'s cases): einkern's default under
``precision="3xtf32"`` (the warpgroup MMA on sm_90 where the model picks it),
the ``mma.sync`` 3xTF32 tile, chosen warpgroup tiles, einkern's fp32 SIMT
default, and torch (cuBLAS / torch.einsum) in fp32 with TF32 off, run
round-robin in one process.  CUDA events after warm-up, L2 flushed (256 MiB
written) before every call, median of ``gpu_tma.RUNS``.  Inputs are random
float32 in [0.5, 1.5); the error of each variant and of torch fp32 is
max |C - C_fp64| / max |C_fp64| on those inputs and (column ``signed``) on
standard normal ones.

``--generated N`` adds N contractions drawn from ``--seed`` (see
``gpu_tma.generated``), which no constant was fitted on.

    PYTHONPATH=src:scripts python scripts/gpu_3xtf32.py [--generated N] [--seed S]
"""

from __future__ import annotations

from dataclasses import replace

import torch
from gpu_half_tiles import operands
from gpu_tf32 import CASES, case
from gpu_tma import selected, timed_rows

import einkern
from einkern.gpu.mma_model import SPLIT_WARPGROUP_TILES, TF32_TILES

#: Explicit warpgroup tiles timed beside the default on the cases named.
EXTRA = {"sgemm 8192": [0, 1], "sgemm 8192 nt": [0]}
#: Cases on which einkern's fp32 SIMT default is not timed (slow on big ones).
NO_SIMT = ("sgemm 8192", "sgemm 8192 nt", "sgemm 4096 column")


def error(result: torch.Tensor, exact: torch.Tensor) -> float:
    return float((result.double() - exact).abs().max() / exact.abs().max())


def signed_errors(spec: str, sizes: dict, layout: str, kernels: dict) -> dict[str, float]:
    """Each kernel's (and torch fp32's) error on standard normal inputs."""
    ops = [torch.randn_like(o) for o in operands(spec, sizes, torch.float32, layout)]
    exact = torch.einsum(spec, *(o.double() for o in ops))
    found = {"torch fp32": error(torch.einsum(spec, *ops), exact)}
    result = torch.empty(exact.shape, dtype=torch.float32, device="cuda")
    if layout == "column":
        result = result.t().contiguous().t()
    for label, kernel in kernels.items():
        kernel(A=ops[0], B=ops[1], C=result)
        found[label] = error(result, exact)
    return found


def main() -> None:
    cases = selected(CASES, 23)
    torch.backends.cuda.matmul.allow_tf32 = False  # the peer is cuBLAS fp32
    table = []
    for name, spec, sizes, layout in cases:
        ops, flops, exact, text, extents, picked, result = case(spec, sizes, layout, "3xtf32")
        runs = {"torch fp32": lambda s=spec, o=ops: torch.einsum(s, *o)}
        errors = {"torch fp32": error(torch.einsum(spec, *ops), exact)}
        variants: dict[str, tuple] = {"default": (None, "3xtf32")}
        variants["mma.sync 3x"] = (replace(TF32_TILES[0], split=True), "3xtf32")
        for i in EXTRA.get(name, []):
            tile = SPLIT_WARPGROUP_TILES[i]
            bm, bn = tile.block_tile()
            variants[f"wg {bm}x{bn} tma"] = (replace(tile, copy="tma"), "3xtf32")
            variants[f"wg {bm}x{bn} async"] = (tile, "3xtf32")
        if name not in NO_SIMT:
            variants["fp32 simt"] = (None, "fp32")
        kernels = {}
        for label, (config, precision) in variants.items():
            mappings = None if config is None else {0: {"x": "", "mma": config.values()}}
            try:
                kernel = einkern.compile(
                    text, backend="cuda", mappings=mappings, precision=precision, **extents
                )
            except Exception as failure:  # noqa: BLE001 - report and go on
                print(f"  {name} {label}: {failure}", flush=True)
                continue
            result.fill_(float("nan"))
            kernel(A=ops[0], B=ops[1], C=result)
            errors[label] = error(result, exact)
            if errors[label] < 1e-3:
                kernels[label] = kernel
                runs[label] = lambda k=kernel, o=ops, r=result: k(A=o[0], B=o[1], C=r)
        signed = signed_errors(spec, sizes, layout, kernels)
        for label in errors:
            print(f"  {name} {label}: err {errors[label]:.2e}, signed {signed.get(label, 0):.2e}")
        rows = timed_rows(name, picked, runs, "torch fp32", flops, 16)
        table += [(*r, errors[r[2]], signed.get(r[2], float("nan"))) for r in rows]
    print(
        "\ncase                               variant               ms   TF/s  x torch"
        "  err/torch  signed/torch"
    )
    base = {(r[0]): (r[6], r[7]) for r in table if r[2] == "torch fp32"}
    for name, picked, label, t, rate, ratio, err, sig in table:
        e0, s0 = base[name]
        print(
            f"{name:34s} {label:16s} {t:8.3f} {rate:6.1f} {ratio:6.2f}"
            f"  {err / e0:9.2f}  {sig / s0:12.2f}  {picked}"
        )


if __name__ == "__main__":
    main()
