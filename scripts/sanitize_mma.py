"""One small tensor-core kernel per fp64 MMA shape (einkern.gpu.mma_lower), on
extents the tiles do not divide, run once on the GPU and checked against
torch.einsum; meant to run under ``compute-sanitizer --tool memcheck|racecheck``.

    compute-sanitizer --tool racecheck python3 scripts/sanitize_mma.py
"""

from __future__ import annotations

import sys

import torch

import einkern
from einkern.backends.cuda import driver
from einkern.backends.cuda.nvrtc import compile_cubin
from einkern.gpu.cuda_printer import launch_shape, print_cuda
from einkern.gpu.mma import SHAPES
from einkern.gpu.mma_lower import MmaConfig, lower_mma
from einkern.ir.bind import make_problem
from einkern.ir.task import statement_task

PROGRAM = """program sanitize
dims a, b, c, d, k, l
dtype float64
tensor A[a,k,b,l], B[l,c,k,d], C[a,b,c,d]
C[p,q,r,s] = A[p,x,q,y] * B[y,r,x,s]
"""
SIZES = {"a": 13, "b": 7, "c": 9, "d": 5, "k": 6, "l": 5}


def main() -> int:
    driver.initialize()
    arch = driver.device_properties().arch
    problem = make_problem(einkern.load(PROGRAM), SIZES)
    task = statement_task(problem, 0)
    a = torch.randn(13, 6, 7, 5, dtype=torch.float64, device="cuda")
    b = torch.randn(5, 9, 6, 5, dtype=torch.float64, device="cuda")
    want = torch.einsum("pxqy,yrxs->pqrs", a, b)
    failures = 0
    for name, shape in SHAPES.items():
        if shape.input_type != "f64" or int(arch[3:].rstrip("a")) < shape.min_arch:
            continue
        for stages in (1, 2):
            config = MmaConfig(name, 2, 2, 1, 2, 2 * shape.k, stages=stages)
            kernel = lower_mma(task, config, "sanitize")
            loaded = driver.load_module(compile_cubin(print_cuda(kernel), arch).cubin, ["sanitize"])
            out = torch.full_like(want, float("nan"))
            launch = launch_shape(kernel)
            pointers = [a.data_ptr(), b.data_ptr(), out.data_ptr()]
            driver.launch(
                loaded.functions["sanitize"], launch.grid, launch.block, pointers, (), 0,
                "sanitize", launch.dynamic_shared_bytes,
            )  # fmt: skip
            torch.cuda.synchronize()
            error = float((out - want).abs().max() / want.abs().max())
            ok = error < 1e-12
            failures += not ok
            print(f"{name} stages={stages}: relative error {error:.1e} {'ok' if ok else 'WRONG'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
