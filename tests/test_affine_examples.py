"""Every C loop-nest example (the polyhedral linear-algebra classics included): the
CPU backend's loop nest against the reference executor, and — for the examples
that raise to tensor programs — the tensor-program CPU backend as well."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import einkern
from einkern.backends.cpu.affine import AffineKernel
from einkern.cli.affine import random_affine_arguments
from einkern.ir.affine import make_affine_problem
from einkern.ir.affine_raise import raise_function
from einkern.lang.cfront import parse_c
from einkern.reference import evaluate_affine, relative_error

ROOT = Path(__file__).resolve().parent.parent
C_EXAMPLES = sorted((ROOT / "examples").glob("*.c"))
RAISED = {"gemm_loops.c", "twomm.c", "atax.c", "bicg.c", "mvt.c", "gemver.c"}


def sizes_of(function) -> dict[str, int]:
    return {s: 3 if s == "tsteps" else 9 + 2 * k for k, s in enumerate(function.sizes)}


def test_the_classic_kernels_are_there():
    names = {p.name for p in C_EXAMPLES}
    wanted = "atax bicg mvt gemver syr2k syrk trmm twomm doitgen jacobi2d trsv gemm_loops"
    assert {f"{n}.c" for n in wanted.split()} <= names


@pytest.mark.parametrize("path", C_EXAMPLES, ids=[p.name for p in C_EXAMPLES])
def test_example_loop_nest_on_the_cpu_matches_the_reference(path):
    function = parse_c(path.read_text(), path.name).functions[0]
    problem = make_affine_problem(function, sizes_of(function))
    arrays, scalars = random_affine_arguments(problem, 5)
    expected = evaluate_affine(problem, arrays, scalars)
    work = {n: a.copy() for n, a in arrays.items()}
    AffineKernel(problem)(**work, **scalars)
    for name in problem.outputs:
        assert relative_error(work[name], expected[name]) <= 1e-12, name
    raised = raise_function(function)
    assert (not isinstance(raised, str)) == (path.name in RAISED), raised
    if isinstance(raised, str):
        return
    kernel = einkern.compile(path, backend="cpu", **sizes_of(function))
    tensor_work = {n: a.copy() for n, a in arrays.items() if n in kernel.inputs}
    result = kernel(**tensor_work, **scalars)
    results = result if isinstance(result, tuple) else (result,)
    for name, value in zip(kernel.outputs, results, strict=True):
        assert relative_error(np.asarray(value), expected[name]) <= 1e-12, name
