"""One small tensor-core kernel per fp64 MMA shape (einkern.gpu.mma_lower), on
extents the tiles do not divide, and every tile shape the decision or the tuner
offers (fp64 and tf32; bf16 warpgroup tiles on sm_90), run once on the GPU and
checked against torch.einsum; meant to run under ``compute-sanitizer --tool
memcheck|racecheck``.  ``bf16``: the bf16 warpgroup tiles only; ``tf32``: the
tf32 and 3xTF32 warpgroup tiles only (cp.async and TMA).

    compute-sanitizer --tool racecheck python3 scripts/sanitize_mma.py
"""

from __future__ import annotations

import sys
from dataclasses import replace

import torch

import einkern
from einkern.backends.cuda import driver
from einkern.backends.cuda.nvrtc import compile_cubin
from einkern.backends.cuda.tensor_maps import kernel_map_arguments
from einkern.gpu.cuda_printer import launch_shape, print_cuda
from einkern.gpu.mma import SHAPES
from einkern.gpu.mma_lower import MmaConfig, lower_mma
from einkern.gpu.mma_model import (
    F64_REGISTER_TILES,
    F64_TILES,
    SPLIT_WARPGROUP_TILES,
    TF32_TILES,
    TF32_WARPGROUP_TILES,
    WARPGROUP_TILES,
)
from einkern.ir.bind import make_problem
from einkern.ir.task import statement_task

PROGRAM = """program sanitize
dims a, b, c, d, k, l
dtype {dtype}
tensor A[a,k,b,l], B[l,c,k,d]
tensor C[a,b,c,d] {out}
C[p,q,r,s] = A[p,x,q,y] * B[y,r,x,s]
"""
SIZES = {"a": 13, "b": 7, "c": 9, "d": 5, "k": 6, "l": 5}
#: Extents the default tiles (up to 128 x 128) do not divide: several blocks and
#: partial tiles on both sides.
DEFAULT_SIZES = {"a": 19, "b": 9, "c": 17, "d": 11, "k": 7, "l": 9}
#: For the 16-bit tiles (16-byte copies): the stride-1 indices l, d multiples of 8.
HALF_SIZES = {"a": 19, "b": 9, "c": 17, "d": 16, "k": 7, "l": 8}
#: For the TMA-staged tiles: the stride-1 indices l, d of 64 (a 128-byte line),
#: b = 16 dividing the M tile, the outer a, c, k partial.
TMA_SIZES = {"a": 9, "b": 16, "c": 5, "d": 64, "k": 3, "l": 64}


def run(config: MmaConfig, dtype: str, sizes: dict[str, int], arch: str, label: str) -> bool:
    """One launch of ``config``'s kernel on random data, checked against torch."""
    torch_type = getattr(torch, dtype)
    out_type = torch.float32 if dtype == "bfloat16" else torch_type
    program = einkern.load(PROGRAM.format(dtype=dtype, out=str(out_type)[6:]))
    if dtype == "float32":
        program = replace(program, precision="3xtf32" if config.split else "tf32")
    task = statement_task(make_problem(program, sizes), 0)
    s = sizes
    a = torch.randn(s["a"], s["k"], s["b"], s["l"], dtype=torch_type, device="cuda")
    b = torch.randn(s["l"], s["c"], s["k"], s["d"], dtype=torch_type, device="cuda")
    want = torch.einsum("pxqy,yrxs->pqrs", a.double(), b.double())
    kernel = lower_mma(task, config, "sanitize")
    loaded = driver.load_module(compile_cubin(print_cuda(kernel), arch).cubin, ["sanitize"])
    launch = launch_shape(kernel)
    if launch.dynamic_shared_bytes > 48 * 1024:
        driver.allow_dynamic_shared(
            loaded.functions["sanitize"], launch.dynamic_shared_bytes, 0, "sanitize"
        )
    out = torch.full(want.shape, float("nan"), dtype=out_type, device="cuda")
    pointers = [a.data_ptr(), b.data_ptr(), out.data_ptr()]
    maps = kernel_map_arguments(kernel, pointers)  # TMA-staged tiles
    driver.launch(
        loaded.functions["sanitize"], launch.grid, launch.block, pointers, (), 0,
        "sanitize", launch.dynamic_shared_bytes, maps,
    )  # fmt: skip
    torch.cuda.synchronize()
    error = float((out.double() - want).abs().max() / want.abs().max())
    ok = error < (1e-12 if dtype == "float64" else 1e-5 if config.split else 5e-3)
    print(f"{label}: relative error {error:.1e} {'ok' if ok else 'WRONG'}")
    return ok


def main() -> int:
    driver.initialize()
    arch = driver.device_properties().arch
    failures = 0
    only_bf16 = "bf16" in sys.argv[1:]
    if "tf32" in sys.argv[1:]:
        for config in (*TF32_WARPGROUP_TILES, *SPLIT_WARPGROUP_TILES):
            for staged in (config, replace(config, copy="tma")):
                failures += not run(staged, "float32", TMA_SIZES, arch, staged.describe())
        return 1 if failures else 0
    for name, shape in SHAPES.items():
        if only_bf16 or shape.input_type != "f64" or int(arch[3:].rstrip("a")) < shape.min_arch:
            continue
        for stages in (1, 2):
            config = MmaConfig(name, 2, 2, 1, 2, 2 * shape.k, stages=stages)
            failures += not run(config, "float64", SIZES, arch, f"{name} stages={stages}")
    for config in () if only_bf16 else (*F64_TILES, *F64_REGISTER_TILES):
        failures += not run(config, "float64", DEFAULT_SIZES, arch, config.describe())
    for config in () if only_bf16 else TF32_TILES:
        failures += not run(config, "float32", DEFAULT_SIZES, arch, config.describe())
    for config in WARPGROUP_TILES["bfloat16"] if arch.startswith("sm_90") else ():
        failures += not run(config, "bfloat16", HALF_SIZES, arch, config.describe())
        staged = replace(config, copy="tma")
        failures += not run(staged, "bfloat16", TMA_SIZES, arch, staged.describe())
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
