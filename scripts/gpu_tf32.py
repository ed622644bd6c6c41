"""tf32 contractions on the GPU: einkern's default under ``precision="tf32"``
(warpgroup MMA on sm_90 where the model picks it), the earlier ``mma.sync``
tf32 default tile, chosen warpgroup tiles, and torch (cuBLAS / torch.einsum with
TF32 on), run round-robin in one process.  CUDA events after warm-up, L2 flushed
(256 MiB written) before every call, median of ``gpu_tma.RUNS``, random float32 inputs
in [0.5, 1.5); error: max |C - C_fp64| / max |C_fp64|.

``--generated N`` adds N contractions drawn from ``--seed`` (GEMMs of random
extents, multiples of 8 from 520 to 8192, row or column layout; four-index
contractions of random index orders), which no constant was fitted on.

    PYTHONPATH=src:scripts python scripts/gpu_tf32.py [--generated N] [--seed S]
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from gpu_half_tiles import operands, program_text
from gpu_tma import checked, print_table, selected, timed_rows

import einkern
from einkern.api import with_precision
from einkern.gpu.decision import choose
from einkern.gpu.mma_model import TF32_TILES, TF32_WARPGROUP_TILES
from einkern.ir.bind import make_problem
from einkern.ir.task import statement_task

CASES = [
    ("sgemm 8192", "ik,kj->ij", dict.fromkeys("ijk", 8192), "row"),
    ("sgemm 8192 nt", "ik,jk->ij", dict.fromkeys("ijk", 8192), "row"),
    ("sgemm 4096", "ik,kj->ij", dict.fromkeys("ijk", 4096), "row"),
    ("sgemm 4096 column", "ik,kj->ij", dict.fromkeys("ijk", 4096), "column"),
    ("sgemm 2048", "ik,kj->ij", dict.fromkeys("ijk", 2048), "row"),
    ("abkl,klcd->abcd 64", "abkl,klcd->abcd", dict.fromkeys("abcdkl", 64), "row"),
]
#: Explicit tiles timed beside the default on the cases named.
EXTRA = {"sgemm 8192": [0, 1, 2], "sgemm 8192 nt": [0, 1]}


def case(spec: str, sizes: dict, layout: str, precision: str):
    """A float32 case: (operands, flops, the fp64 result, program text, extents,
    the decision's tile under ``precision`` as text, an output of the layout)."""
    ops = operands(spec, sizes, torch.float32, layout)
    flops = 2.0 * math.prod(sizes[c] for c in set(spec.split("->")[0].replace(",", "")))
    exact = torch.einsum(spec, *(o.double() for o in ops))
    text = program_text(spec, sizes, "float32", layout)
    extents = {f"e{c}": v for c, v in sizes.items()}
    program = with_precision(einkern.load(text), precision)
    mma = choose(statement_task(make_problem(program, extents), 0)).config.mma
    picked = "simt" if mma is None else f"{mma.shape} {mma.block_tile()} {mma.copy}"
    result = torch.empty(exact.shape, dtype=torch.float32, device="cuda")
    if layout == "column":
        result = result.t().contiguous().t()
    return ops, flops, exact, text, extents, picked, result


def main() -> None:
    cases = selected(CASES, 23)
    torch.backends.cuda.matmul.allow_tf32 = True
    table = []
    for name, spec, sizes, layout in cases:
        ops, flops, exact, text, extents, picked, result = case(spec, sizes, layout, "tf32")
        runs = {"torch tf32": lambda s=spec, o=ops: torch.einsum(s, *o)}
        peer = torch.einsum(spec, *ops).double()
        print(
            f"  {name} torch tf32: err {float((peer - exact).abs().max() / exact.abs().max()):.1e}"
        )
        variants = {"default": None, "mma.sync": TF32_TILES[0]}
        for i in EXTRA.get(name, []):
            tile = TF32_WARPGROUP_TILES[i]
            bm, bn = tile.block_tile()
            variants[f"wg {bm}x{bn} tma"] = replace(tile, copy="tma")
            variants[f"wg {bm}x{bn} async"] = tile
        for label, config in variants.items():
            mappings = None if config is None else {0: {"x": "", "mma": config.values()}}
            try:
                kernel = einkern.compile(
                    text, backend="cuda", mappings=mappings, precision="tf32", **extents
                )
            except Exception as failure:  # noqa: BLE001 - report and go on
                print(f"  {name} {label}: {failure}", flush=True)
                continue
            run = checked(name, label, kernel, ops, exact, result, 5e-3)
            if run is not None:
                runs[label] = run
        table += timed_rows(name, picked, runs, "torch tf32", flops, 16)
    print_table(
        table, 16, "\ncase                               variant               ms   TF/s  x torch"
    )


if __name__ == "__main__":
    main()
