"""Calibration data for the fp64 tensor-core tile choice: every tile of ``TILES``
on generated fp64 contractions, against torch (cuBLAS / torch.einsum) in the
same run.  CUDA events after warm-up, L2 flushed (256 MiB written) before every
call, median of ``RUNS``, the variants of one case round-robin, random inputs in
[0.5, 1.5); a variant whose error is above 1e-12 (max |C - C_fp64| / max
|C_fp64|) is reported and not timed.

The cases are drawn from ``--seed`` (GEMMs of random extents, row- and
column-major, ``=`` and ``-=``; block-LU updates and panels; four-index
contractions of random index orders), plus ``--fixed`` (the gemm suite's DGEMM
and block-LU shapes).  One JSON object per case goes to ``--out``: the case,
then per tile its median ms, registers and spilled bytes; ``rules`` is einkern's
kernel on the rules' (SIMT) proposal, ``torch`` the peer.
``scripts/fit_f64_tiles.py`` fits the model's constants to such files.

    PYTHONPATH=src:scripts python scripts/gpu_f64_tiles.py --seed 41 --count 40 --out f.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import torch
from f64_tile_cases import (
    SMALL_TILES,
    TILES,
    fixed,
    fixed_small,
    generated,
    generated_small,
    program_text,
    task_of,
)
from gpu_block_order import round_robin
from mma_contractions import launcher

import einkern
from einkern.backends.cuda import driver
from einkern.backends.cuda.nvrtc import compile_cubin
from einkern.gpu.cuda_printer import print_cuda
from einkern.gpu.decision import explain
from einkern.gpu.mma_lower import lower_mma, problems

RUNS = 11


#: ``--unbounded``: the kernels without the ``__launch_bounds__`` residency that
#: :func:`einkern.gpu.mma_lower.lower_mma` asks for (the registers uncapped);
#: ``--early-copies``: every tile issues its copies before its MMAs;
#: ``--uncarried-too``: every tile also as ``NAME/u``, its fragments not carried
#: across the k-step's barrier (``TileBuilder.carried``), in the same round robin.
UNBOUNDED = EARLY = UNCARRIED = False


def kernel_of(task, name: str):
    """The kernel of tile ``name`` for ``task`` (as :data:`UNBOUNDED` and
    :data:`EARLY` say; a name ending in ``/u``: its fragments not carried)."""
    tile, _, variant = name.partition("/")
    carried = False if variant == "u" else None
    late = False if EARLY else None
    kernel = lower_mma(task, TILES[tile], "probe", late_copies=late, carried=carried)
    return replace(kernel, min_blocks=0) if UNBOUNDED else kernel


def variants() -> list[str]:
    """The tile names timed per case (with ``/u`` ones for ``--uncarried-too``)."""
    return [v for name in TILES for v in ([name, f"{name}/u"] if UNCARRIED else [name])]


def _compile(job: tuple[dict, str, str]) -> None:
    """Lower and compile one (case, tile, arch) into the on-disk cache."""
    case, name, arch = job
    task = task_of(case)
    if not problems(task, TILES[name.partition("/")[0]]):
        compile_cubin(print_cuda(kernel_of(task, name)), arch)


def tensor(shape: list[int], layout: str) -> torch.Tensor:
    """Random float64 values in [0.5, 1.5) stored row- or column-major."""
    if layout == "column":
        return (torch.rand(*shape[::-1], device="cuda", dtype=torch.float64) + 0.5).permute(
            *range(len(shape) - 1, -1, -1)
        )
    return torch.rand(*shape, device="cuda", dtype=torch.float64) + 0.5


def rules_kernel(case: dict, task, a, b, result):
    """A call of einkern's kernel of ``case`` on the rules' proposal (the SIMT
    mapping the decision compares the tiles with)."""
    text = program_text(case["spec"], case["layout"], case["op"])
    extents = {f"e{c}": v for c, v in case["sizes"].items()}
    mappings = {0: explain(task).config.to_json()}
    kernel = einkern.compile(text, backend="cuda", mappings=mappings, **extents)
    return lambda: kernel(A=a, B=b, C=result)


def measure(case: dict, arch: str) -> dict:
    """Median ms of every tile of ``case``, of the rules' proposal and of torch,
    with registers and spills."""
    spec, sizes, op = case["spec"], case["sizes"], case["op"]
    ins, out = spec.split("->")
    a, b = (tensor([sizes[c] for c in t], case["layout"]) for t in ins.split(","))
    c0 = tensor([sizes[c] for c in out], case["layout"])
    product = torch.einsum(spec, a, b)
    exact = c0 - product if op == "-=" else product
    result = c0.clone()
    pointers = [a.data_ptr(), b.data_ptr(), result.data_ptr()]
    if op == "-=":
        runs = {"torch": lambda: result.sub_(torch.einsum(spec, a, b))}
        if spec == "ij,jk->ik":
            runs = {"torch": lambda: result.addmm_(a, b, alpha=-1.0)}
    else:
        runs = {"torch": lambda: torch.einsum(spec, a, b)}
    row = dict(case, tiles={})
    task = task_of(case)
    for name in variants():
        if problems(task, TILES[name.partition("/")[0]]):
            continue
        run, registers, spills = launcher(kernel_of(task, name), arch, pointers, name)
        result.copy_(c0) if op == "-=" else result.fill_(float("nan"))
        run()
        torch.cuda.synchronize()
        error = float((result - exact).abs().max() / exact.abs().max())
        row["tiles"][name] = dict(registers=registers, spills=spills, error=error)
        if error < 1e-12:
            runs[name] = run
    try:
        runs["rules"] = rules_kernel(case, task, a, b, result)
    except Exception as error:  # reported, the tiles still timed
        print(f"  rules' kernel failed: {error}", flush=True)
    for name, ms in round_robin(runs, RUNS).items():
        if name in ("torch", "rules"):
            row[name] = ms
        else:
            row["tiles"][name]["ms"] = ms
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=41)
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--fixed", action="store_true")
    parser.add_argument("--out", required=True)
    parser.add_argument("--unbounded", action="store_true")
    parser.add_argument("--early-copies", action="store_true")
    parser.add_argument("--uncarried-too", action="store_true")
    parser.add_argument(
        "--small",
        action="store_true",
        help="small cases (f64_tile_cases.generated_small; with --fixed the chain's "
        "DGEMMs n = 96 ... 1024) and the candidate SMALL_TILES beside TILES",
    )
    args = parser.parse_args()
    global UNBOUNDED, EARLY, UNCARRIED
    UNBOUNDED, EARLY, UNCARRIED = args.unbounded, args.early_copies, args.uncarried_too
    if args.small:
        TILES.update(SMALL_TILES)
        cases = generated_small(args.count, args.seed) + (fixed_small() if args.fixed else [])
    else:
        cases = generated(args.count, args.seed) + (fixed() if args.fixed else [])
    driver.initialize()
    arch = driver.device_properties().arch
    jobs = [(case, name, arch) for case in cases for name in variants()]
    with ProcessPoolExecutor(os.cpu_count()) as pool:  # NVRTC only: no CUDA in the workers
        list(pool.map(_compile, jobs, chunksize=4))
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    with open(args.out, "a") as f:
        for case in cases:
            row = measure(case, arch)
            row["seed"] = args.seed
            f.write(json.dumps(row) + "\n")
            f.flush()
            timed = {n: t["ms"] for n, t in row["tiles"].items() if "ms" in t}
            best = min(timed, key=timed.get) if timed else "-"
            print(f"{case['spec']:16s} {json.dumps(case['sizes']):44s} {case['layout']:6s} "
                  f"{case['op']:2s} torch {row['torch']:8.3f}  best {best} "
                  f"{timed.get(best, math.nan):8.3f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
