"""Affine programs on a GPU: every C example's affine kernels (einkern.gpu.affine)
launched through the CUDA backend and checked against the reference (small) or the
CPU loop nest (large).  Selected only with ``pytest -m gpu``."""

from __future__ import annotations

from pathlib import Path

import pytest

from einkern.backends.cuda.affine import AffineCudaKernel
from einkern.cli.affine import random_affine_arguments
from einkern.ir.affine import make_affine_problem
from einkern.lang.cfront import parse_c
from einkern.reference import evaluate_affine, relative_error

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parent.parent
C_EXAMPLES = sorted((ROOT / "examples").glob("*.c"))


@pytest.mark.parametrize("path", C_EXAMPLES, ids=[p.name for p in C_EXAMPLES])
@pytest.mark.parametrize("size", [7, 300])
def test_affine_kernels_on_the_gpu_match_the_reference(path, size):
    function = parse_c(path.read_text(), path.name).functions[0]
    sizes = {s: 2 if s == "tsteps" else size + k for k, s in enumerate(function.sizes)}
    if path.name == "doitgen.c":
        sizes = {s: min(v, 40) for s, v in sizes.items()}
    problem = make_affine_problem(function, sizes)
    arrays, scalars = random_affine_arguments(problem, 1)
    expected = evaluate_affine(problem, arrays, scalars) if size < 100 else None
    work = {n: a.copy() for n, a in arrays.items()}
    AffineCudaKernel(problem)(**work, **scalars)
    if expected is None:  # large: the CPU loop nest is the oracle (the reference is slow)
        from einkern.backends.cpu.affine import AffineKernel

        expected = {n: a.copy() for n, a in arrays.items()}
        AffineKernel(problem)(**expected, **scalars)
    for name in problem.outputs:
        assert relative_error(work[name], expected[name]) <= 1e-12, name
