"""Block order of tensor-core kernels on the GPU (``MmaConfig.group_m``): each
tile of ``TILES`` with M tiles taken in groups of 1 (the order before the
field), 4, 8 and 16, on GEMM and contraction shapes, against torch (cuBLAS /
torch.einsum) in the same run.  CUDA events after warm-up, L2 flushed (256 MiB
written) before every call, median of ``RUNS``, random inputs in [0.5, 1.5);
the variants of one tile run round-robin so that clock drift hits all alike.

    PYTHONPATH=src:scripts python scripts/gpu_block_order.py [NAME-SUBSTRING ...]
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace

import torch
from gpu_half_tiles import operands, program_text
from mma_contractions import FLUSH, checked

import einkern
from einkern.backends.cuda import driver
from einkern.gpu.mma_lower import MmaConfig, lower_mma, problems
from einkern.ir.bind import make_problem
from einkern.ir.task import statement_task

RUNS = 15
GROUPS = (1, 4, 8, 16)

WG = "wgmma_k16_bf16"
F64 = "m16n8k4_f64"
TILES = {
    "bfloat16": {
        "wgmma 128x256 s4": MmaConfig(WG, 8, 1, 1, 32, 64, stages=4, copy="async"),
        "wgmma 256x128 s4": MmaConfig(WG, 16, 1, 1, 16, 64, stages=4, copy="async"),
    },
    "float64": {
        "f64 128x128 s3": MmaConfig(F64, 2, 4, 4, 4, 16, stages=3, copy="async"),
        "f64 64x128 s3": MmaConfig(F64, 2, 4, 2, 4, 16, stages=3, copy="async"),
    },
}

CASES = [
    ("gemm 8192", "ij,jk->ik", dict.fromkeys("ijk", 8192), "row", "bfloat16"),
    ("gemm 4096", "ij,jk->ik", dict.fromkeys("ijk", 4096), "row", "bfloat16"),
    ("gemm 4096 column", "ij,jk->ik", dict.fromkeys("ijk", 4096), "column", "bfloat16"),
    ("abkl,klcd->abcd 64", "abkl,klcd->abcd", dict.fromkeys("abcdkl", 64), "row", "bfloat16"),
    ("dgemm 4096", "ij,jk->ik", dict.fromkeys("ijk", 4096), "row", "float64"),
    ("dgemm 8192", "ij,jk->ik", dict.fromkeys("ijk", 8192), "row", "float64"),
    ("dgemm 2048", "ij,jk->ik", dict.fromkeys("ijk", 2048), "row", "float64"),
]


def round_robin(runs: dict, repeats: int) -> dict[str, float]:
    """Median ms of each callable, the callables interleaved per repeat."""
    for run in runs.values():
        for _ in range(3):
            run()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            FLUSH.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            torch.cuda.synchronize()
            times[name].append(start.elapsed_time(end))
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    only = sys.argv[1:]
    driver.initialize()
    arch = driver.device_properties().arch
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    table = []
    for name, spec, sizes, layout, dtype in CASES:
        if only and not any(o in name for o in only):
            continue
        tdtype = getattr(torch, dtype)
        ops = operands(spec, sizes, tdtype, layout)
        flops = 2.0
        for c in set(spec.split("->")[0].replace(",", "")):
            flops *= sizes[c]
        exact = torch.einsum(spec, *(o.double() for o in ops))
        text = program_text(spec, sizes, dtype, layout, "float32" if dtype == "bfloat16" else dtype)
        task = statement_task(
            make_problem(einkern.load(text), {f"e{c}": v for c, v in sizes.items()}), 0
        )
        out = torch.float32 if dtype == "bfloat16" else tdtype
        result = torch.empty(exact.shape, dtype=out, device="cuda")
        if layout == "column":
            result = result.t().contiguous().t()
        pointers = [ops[0].data_ptr(), ops[1].data_ptr(), result.data_ptr()]
        runs = {"torch": lambda s=spec, o=ops: torch.einsum(s, *o)}
        for tname, base in TILES[dtype].items():
            for group in GROUPS:
                config = replace(base, group_m=group)
                if problems(task, config):
                    continue
                kernel = lower_mma(task, config, "order")
                run, regs, spills, err = checked(kernel, arch, pointers, result, exact)
                label = f"{tname} g{group}"
                print(f"  {name} {label}: regs {regs} spills {spills} err {err:.1e}", flush=True)
                if err < (1e-2 if dtype == "bfloat16" else 1e-12):
                    runs[label] = run
        ms = round_robin(runs, RUNS)
        for label, t in ms.items():
            table.append((name, label, t, flops / t / 1e9, ms["torch"] / t))
            print(f"{name:20s} {label:22s} {t:8.3f} ms {flops / t / 1e9:6.1f} TF/s "
                  f"{ms['torch'] / t:5.2f}x torch", flush=True)  # fmt: skip
    print("\ncase                 variant                      ms   TF/s  x torch")
    for name, label, t, rate, ratio in table:
        print(f"{name:20s} {label:22s} {t:8.3f} {rate:6.1f} {ratio:6.2f}")


if __name__ == "__main__":
    main()
