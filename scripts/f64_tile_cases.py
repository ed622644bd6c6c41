"""The cases and tiles of the fp64 tile calibration (scripts/gpu_f64_tiles.py
measures them, scripts/fit_f64_tiles.py fits the model to the measurements):
no GPU needed here."""

from __future__ import annotations

import math
import random

import einkern
from einkern.gpu.mma_config import MmaConfig
from einkern.gpu.mma_model import F64_SMALL_TILES, F64_TILES
from einkern.ir.bind import make_problem
from einkern.ir.task import statement_task


def tile_name(config: MmaConfig) -> str:
    """``<BM>x<BN>w<warps>s<stages>``."""
    bm, bn = config.block_tile()
    return f"{bm}x{bn}w{config.threads // 32}s{config.stages}"


#: The decision's fp64 tiles by name, but the small ones.
TILES = {tile_name(t): t for t in F64_TILES if t not in F64_SMALL_TILES}

#: The small tiles (``F64_SMALL_TILES``: offered where the 64 × 64 tile leaves SMs
#: idle) and two candidates measured beside them and not adopted (one and two
#: warps of 32 × 32: 168 registers, rarely the fastest); scripts/gpu_f64_tiles.py
#: ``--small`` times them beside ``TILES``.
SMALL_TILES = {
    tile_name(t): t
    for t in (
        *F64_SMALL_TILES,
        MmaConfig("m16n8k4_f64", 1, 1, 2, 4, 16, stages=4, copy="async"),  # 32x32, 1 warp
        MmaConfig("m16n8k4_f64", 1, 2, 2, 4, 16, stages=4, copy="async"),  # 32x64, 2 warps
    )
}


def program_text(
    spec: str, layout: str, op: str, dtype: str = "float64", result: str | None = None
) -> str:
    """The program ``C op A * B`` of einsum ``spec`` (dims ``e<letter>``, bound at
    make_problem; inputs ``dtype``, the output ``result``, default ``dtype``)."""
    ins, out = spec.split("->")
    a, b = ins.split(",")
    dims = sorted(set(spec) - set(",->"))
    lines = [
        "program probe",
        f"layout {layout}",
        "dims " + ", ".join(f"e{c}" for c in dims),
        f"dtype {dtype}",
        f"tensor A[{','.join('e' + c for c in a)}], B[{','.join('e' + c for c in b)}]",
        f"tensor C[{','.join('e' + c for c in out)}]" + (f" {result}" if result else ""),
        f"C[{','.join(out)}] {op} A[{','.join(a)}] * B[{','.join(b)}]",
    ]
    return "\n".join(lines) + "\n"


def _extent(rng: random.Random, low: int, high: int) -> int:
    """Log-uniform in [low, high], a multiple of 8 three times in four."""
    n = int(math.exp(rng.uniform(math.log(low), math.log(high))))
    return max(8, n - n % 8) if rng.random() < 0.75 else n


def generated(count: int, seed: int) -> list[dict]:
    """``count`` cases from ``seed``: GEMMs of random extents (256-8192,
    log-uniform), row- and column-major, ``=`` and ``-=``; block-LU updates and
    panels (``=`` or ``-=``, column-major, panel widths 32-256); four-index contractions
    of random index orders (extents 24-128)."""
    rng = random.Random(seed)
    cases: list[dict] = []
    while len(cases) < count:
        kind = rng.choice(["gemm", "gemm", "lu", "contraction", "contraction"])
        if kind == "gemm":
            sizes = {c: _extent(rng, 256, 8192) for c in "ijk"}
            if sizes["i"] * sizes["j"] * sizes["k"] > 2.5e11:
                continue
            case = dict(spec="ij,jk->ik", sizes=sizes, layout=rng.choice(["row", "column"]),
                        op=rng.choice(["=", "=", "-="]))  # fmt: skip
        elif kind == "lu":
            n, bs = _extent(rng, 1024, 8192), rng.choice([32, 64, 96, 128, 192, 256])
            width = n - bs if rng.random() < 0.7 else bs
            case = dict(spec="ij,jk->ik", sizes={"i": n, "j": bs, "k": width},
                        layout="column", op=rng.choice(["=", "-="]))  # fmt: skip
        else:
            a, b = list("abkl"), list("klcd")
            rng.shuffle(a)
            rng.shuffle(b)
            sizes = {c: rng.choice([24, 32, 40, 48, 64, 72, 96, 128]) for c in "abcdkl"}
            if math.prod(sizes.values()) > 2.5e11 or math.prod(sizes.values()) < 4e7:
                continue
            case = dict(spec=f"{''.join(a)},{''.join(b)}->abcd", sizes=sizes, layout="row", op="=")
        cases.append(case)
    return cases


def generated_small(count: int, seed: int) -> list[dict]:
    """``count`` small cases from ``seed`` (the ones few large tiles fill the GPU
    with): GEMMs of extents 64-1536 (log-uniform, at least 4e6 flops), row- and
    column-major, ``=`` and ``-=``; four-index contractions (extents 8-64, 2e6
    to 2e8 multiply-adds) of random index orders."""
    rng = random.Random(seed)
    cases: list[dict] = []
    while len(cases) < count:
        if rng.random() < 0.55:
            sizes = {c: _extent(rng, 64, 1536) for c in "ijk"}
            if math.prod(sizes.values()) < 2e6:
                continue
            case = dict(spec="ij,jk->ik", sizes=sizes, layout=rng.choice(["row", "column"]),
                        op=rng.choice(["=", "=", "-="]))  # fmt: skip
        else:
            a, b = list("abkl"), list("klcd")
            rng.shuffle(a)
            rng.shuffle(b)
            sizes = {c: rng.choice([8, 12, 16, 24, 32, 40, 48, 64]) for c in "abcdkl"}
            if not 2e6 <= math.prod(sizes.values()) <= 2e8:
                continue
            case = dict(spec=f"{''.join(a)},{''.join(b)}->abcd", sizes=sizes, layout="row", op="=")
        cases.append(case)
    return cases


def fixed() -> list[dict]:
    """The gemm suite's square DGEMMs and block-LU shapes (plain products, as the
    suite times them), and the LU updates as a factorisation applies them (``-=``)."""
    cases = [
        dict(spec="ij,jk->ik", sizes=dict.fromkeys("ijk", n), layout="row", op="=")
        for n in (1024, 2048, 4096, 8192)
    ]
    for bs in (64, 128):
        for n in (2048, 4096, 6144):
            for width, op in ((n - bs, "="), (bs, "="), (n - bs, "-=")):
                sizes = {"i": n, "j": bs, "k": width}
                cases.append(dict(spec="ij,jk->ik", sizes=sizes, layout="column", op=op))
    return cases


def fixed_small() -> list[dict]:
    """Square row-major DGEMMs of the einsum chain and the gemm suite's small sizes
    (n = 96 ... 1024)."""
    return [
        dict(spec="ij,jk->ik", sizes=dict.fromkeys("ijk", n), layout="row", op="=")
        for n in (96, 128, 256, 384, 512, 768, 1024)
    ]


def task_of(case: dict):
    """The statement task of ``case``."""
    text = program_text(case["spec"], case["layout"], case["op"])
    extents = {f"e{c}": v for c, v in case["sizes"].items()}
    return statement_task(make_problem(einkern.load(text), extents), 0)
