"""TMA staging of the warpgroup-MMA kernels on the GPU (``MmaConfig.copy ==
"tma"``): einkern's default mapping of each bf16 contraction, its same tile and
block order staged by 16-byte cp.async instead, and torch (cuBLAS /
torch.einsum), run round-robin in one process.  CUDA events after warm-up, L2
flushed (256 MiB written) before every call, median of ``RUNS``, random inputs
in [0.5, 1.5), float32 output; error: max |C - C_fp64| / max |C_fp64|.

The fixed cases are the earlier sessions' shapes; ``--generated N`` adds N
contractions drawn from ``--seed`` (GEMMs of random extents, multiples of 8
from 520 to 8192, and four-index contractions of random index orders), which no
constant of the model was fitted on.

    PYTHONPATH=src:scripts python scripts/gpu_tma.py [--generated N] [--seed S]
"""

from __future__ import annotations

import argparse
import math
import random
from dataclasses import replace

import torch
from gpu_block_order import round_robin
from gpu_half_tiles import CASES as HALF_TILE_CASES
from gpu_half_tiles import operands, program_text

import einkern
from einkern.backends.cuda import driver
from einkern.gpu.decision import choose
from einkern.ir.bind import make_problem
from einkern.ir.task import statement_task

RUNS = 15

#: The earlier sessions' shapes (scripts/gpu_half_tiles.py) that this script times.
FIXED = ("gemm 8192", "gemm 4096", "gemm 4096 column", "gemm 2048", "abkl,klcd->abcd 64",
         "batched zik,zkj->zij 16x1024", "abcf,fde->abcde 32x24")  # fmt: skip
CASES = sorted((c for c in HALF_TILE_CASES if c[0] in FIXED), key=lambda c: FIXED.index(c[0]))


def generated(count: int, seed: int) -> list[tuple[str, str, dict, str]]:
    """``count`` contractions from ``seed``: GEMMs and four-index products."""
    rng = random.Random(seed)
    cases = []
    for n in range(count):
        if n % 2 == 0:
            sizes = {c: 8 * rng.randint(65, 1024) for c in "ijk"}
            layout = rng.choice(["row", "column"])
            label = f"gen gemm {sizes['i']}x{sizes['j']}x{sizes['k']} {layout}"
            cases.append((label, "ij,jk->ik", sizes, layout))
            continue
        a, b = list("abkl"), list("klcd")
        rng.shuffle(a)
        rng.shuffle(b)
        spec = f"{''.join(a)},{''.join(b)}->abcd"
        sizes = {c: rng.choice([32, 48, 64, 96, 128]) for c in "abcdkl"}
        extents = "/".join(str(sizes[c]) for c in "abcdkl")
        cases.append((f"gen {spec} {extents}", spec, sizes, "row"))
    return cases


def selected(cases: list, seed: int) -> list:
    """The command line's cases (``--generated N`` drawn from ``--seed``, default
    ``seed``, appended to ``cases``; names containing one of the positional
    arguments, all without them), after the driver is set up and the device named."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--generated", type=int, default=0)
    parser.add_argument("--seed", type=int, default=seed)
    parser.add_argument("only", nargs="*")
    args = parser.parse_args()
    driver.initialize()
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    every = cases + generated(args.generated, args.seed)
    return [c for c in every if not args.only or any(o in c[0] for o in args.only)]


def checked(name: str, label: str, kernel, ops, exact, result, tolerance: float):
    """Run ``kernel`` once on ``ops`` into ``result`` (filled with NaN first) and
    print its error against ``exact``; the timed call when within ``tolerance``."""
    result.fill_(float("nan"))
    kernel(A=ops[0], B=ops[1], C=result)
    torch.cuda.synchronize()
    err = float((result.double() - exact).abs().max() / exact.abs().max())
    print(f"  {name} {label}: err {err:.1e}", flush=True)
    if err >= tolerance:
        return None
    return lambda k=kernel, o=ops, r=result: k(A=o[0], B=o[1], C=r)


def timed_rows(name: str, picked: str, runs: dict, peer: str, flops: float, width: int) -> list:
    """Time ``runs`` round-robin and print a row per run (labels ``width`` wide),
    with its ratio to run ``peer``; the rows."""
    ms = round_robin(runs, RUNS)
    rows = []
    for label, t in ms.items():
        ratio = ms[peer] / t
        rows.append((name, picked, label, t, flops / t / 1e9, ratio))
        print(f"{name:34s} {label:{width}s} {t:8.3f} ms {flops / t / 1e9:6.1f} TF/s "
              f"{ratio:5.2f}x torch  [{picked}]", flush=True)  # fmt: skip
    return rows


def print_table(rows: list, width: int, header: str) -> None:
    """The summary of :func:`timed_rows`' rows under ``header``."""
    print(header)
    for name, picked, label, t, rate, ratio in rows:
        print(f"{name:34s} {label:{width}s} {t:8.3f} {rate:6.1f} {ratio:6.2f}  {picked}")


def main() -> None:
    table = []
    for name, spec, sizes, layout in selected(CASES, 7):
        ops = operands(spec, sizes, torch.bfloat16, layout)
        flops = 2.0 * math.prod(sizes[c] for c in set(spec.split("->")[0].replace(",", "")))
        exact = torch.einsum(spec, *(o.double() for o in ops))
        text = program_text(spec, sizes, "bfloat16", layout)
        extents = {f"e{c}": v for c, v in sizes.items()}
        task = statement_task(make_problem(einkern.load(text), extents), 0)
        mma = choose(task).config.mma
        result = torch.empty(exact.shape, dtype=torch.float32, device="cuda")
        if layout == "column":
            result = result.t().contiguous().t()
        runs = {"torch": lambda s=spec, o=ops: torch.einsum(s, *o)}
        variants = {"default": None}
        if mma is not None and mma.copy == "tma":
            variants["cp.async"] = replace(mma, copy="async")
        picked = "simt" if mma is None else f"{mma.shape} {mma.copy} g{mma.group_m}"
        for label, config in variants.items():
            mappings = None if config is None else {0: {"x": "", "mma": config.values()}}
            kernel = einkern.compile(text, backend="cuda", mappings=mappings, **extents)
            run = checked(name, label, kernel, ops, exact, result, 1e-2)
            if run is not None:
                runs[label] = run
        table += timed_rows(name, picked, runs, "torch", flops, 9)
    header = "\ncase                               variant        ms   TF/s  x torch  default"
    print_table(table, 9, header)


if __name__ == "__main__":
    main()
