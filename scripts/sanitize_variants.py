"""One small variant of each generation strategy, run once on the GPU and checked;
meant to run under `compute-sanitizer --tool memcheck|racecheck`."""

from __future__ import annotations

import sys

import numpy as np

import einkern
from einkern.backends.verify import random_inputs
from einkern.gpu.decision import default_config
from einkern.ir.task import statement_task

GEMM = "examples/gemm.ein"
VARIANTS = [
    (
        "direct",
        GEMM,
        {"m": 37, "n": 45, "k": 19},
        {
            "x": "j",
            "y": "i",
            "block": [32, 4],
            "regs": [1, 1, 1],
            "assign": "cyclic",
            "staging": ["none", 1, False, 0, "natural"],
            "unroll": 1,
            "boundary": "guard",
        },
    ),
    (
        "register",
        GEMM,
        {"m": 37, "n": 45, "k": 19},
        {
            "x": "j",
            "y": "i",
            "block": [16, 8],
            "regs": [2, 2, 1],
            "assign": "mixed",
            "staging": ["none", 1, False, 0, "natural"],
            "unroll": 1,
            "boundary": "redirect",
        },
    ),
    (
        "shared",
        GEMM,
        {"m": 67, "n": 70, "k": 37},
        {
            "x": "j",
            "y": "i",
            "block": [16, 16],
            "regs": [4, 4, 1],
            "assign": "cyclic",
            "staging": ["all", 8, True, 1, "natural"],
            "unroll": -1,
            "boundary": "guard",
        },
    ),
    (
        "shared-compute-layout",
        GEMM,
        {"m": 64, "n": 64, "k": 32},
        {
            "x": "j",
            "y": "i",
            "block": [16, 16],
            "regs": [4, 4, 1],
            "assign": "adjacent",
            "staging": ["all", 16, True, 0, "compute"],
            "unroll": -1,
            "boundary": "exact",
        },
    ),
    (
        "gett",
        "examples/sd_t_d1_1.ein",
        {"T": 5},
        {
            "x": "h3",
            "y": "h1",
            "block": [8, 4],
            "regs": [1, 2, 2],
            "assign": "cyclic",
            "staging": ["all", 4, True, 1, "natural"],
            "unroll": -1,
            "boundary": "guard",
        },
    ),
    (
        "shared-chunked",
        GEMM,
        {"m": 67, "n": 70, "k": 37},
        {
            "x": "j",
            "y": "i",
            "block": [8, 8],
            "regs": [8, 4, 1],
            "assign": "chunked",
            "staging": ["all", 8, True, 0, "compute"],
            "unroll": -1,
            "boundary": "guard",
        },
    ),
    (
        "gett-preloaded",
        "examples/sd_t_d1_1.ein",
        {"T": 5},
        {
            "x": "h3",
            "y": "h1",
            "block": [8, 4],
            "regs": [1, 2, 2],
            "assign": "cyclic",
            "staging": ["all", 4, True, 1, "natural"],
            "unroll": -1,
            "boundary": "guard",
            "preload": True,
        },
    ),
]


def main() -> int:
    failures = 0
    for name, path, extents, config in VARIANTS:
        program = einkern.load(path)
        problem = einkern.make_problem(program, extents)
        full = {**default_config(statement_task(problem, 0))[0].to_json(), **config}
        kernel = einkern.compile(program, backend="cuda", mappings={0: full}, **extents)
        arrays = random_inputs(problem, seed=5)
        expected = einkern.evaluate(problem, arrays)
        work = {k: v.copy(order="K") for k, v in arrays.items()}
        kernel(**{k: work[k] for k in (*program.inputs, *program.outputs)})
        out = program.outputs[0]
        error = float(np.max(np.abs(work[out] - expected[out])) / np.max(np.abs(expected[out])))
        ok = error < (1e-5 if program.tensor(out).dtype == "float32" else 1e-12)
        failures += not ok
        print(
            f"{name:24s} {kernel.mappings[0]['staging'][0]:5s} error {error:.2e} "
            f"{'ok' if ok else 'WRONG'}",
            flush=True,
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
