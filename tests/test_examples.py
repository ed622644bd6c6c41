"""Every example program: parses, runs on the CPU against the reference, compiles for
sm_90 with NVRTC without spills, and (``-m gpu``) runs on the GPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import einkern
from einkern.backends.verify import random_inputs
from einkern.reference import relative_error

EXAMPLES = sorted(
    p
    for p in (Path(__file__).resolve().parent.parent / "examples").iterdir()
    if p.suffix in (".ein", ".tensor", ".mapped")
)
TOLERANCE = {"float32": 1e-5, "float64": 1e-12}


def small_problem(path: Path, size: int = 5):
    program = einkern.load(path)
    extents = {e.name: size for e in program.extents if not e.name.isdigit()}
    return einkern.make_problem(program, extents)


def check_backend(path: Path, backend: str, size: int) -> None:
    problem = small_problem(path, size)
    kernel = einkern.Kernel(problem, einkern.api.get_backend(backend))
    arrays = random_inputs(problem, seed=11)
    scalars = {s.name: 0.75 for s in problem.program.scalars}
    expected = einkern.evaluate(problem, arrays, scalars)
    work = {name: array.copy(order="K") for name, array in arrays.items()}
    kernel(**work, **scalars)
    for name in problem.program.outputs:
        dtype = problem.program.tensor(name).dtype
        reference = expected[name].astype(np.float64)
        error = relative_error(work[name], reference)
        assert error <= TOLERANCE[dtype], (path.name, name, error)


def test_the_issue_examples_are_all_there():
    names = {p.name for p in EXAMPLES}
    for wanted in (
        "gemm.ein",
        "gemm_alpha_beta.ein",
        "local_grad3.ein",
        "local_grad3.tensor",
        "ccsdt_s1.ein",
        "ccsdt_d1.ein",
        "ccsdt_d2.ein",
        "riemann.ein",
        "treduda_sum.ein",
        "fousek_function1.mapped",
        "fousek_function2.mapped",
    ):
        assert wanted in names
    for family in ("s1", "d1", "d2"):
        program = einkern.load(Path(EXAMPLES[0].parent, f"ccsdt_{family}.ein"))
        assert len(program.statements) == 9
        assert {s.output.tensor for s in program.statements} == {"t3"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs_on_the_cpu(path):
    check_backend(path, "cpu", size=5)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_kernels_compile_for_sm90_without_spills(path):
    from einkern.backends.cuda.resources import kernel_resources

    program = einkern.load(path)
    problem = einkern.make_problem(program)
    resources = kernel_resources(problem, "sm_90")
    assert len(resources) == len(program.statements)
    for kernel in resources:
        assert kernel.spill_stores == 0 and kernel.spill_loads == 0, kernel


@pytest.mark.gpu
@pytest.mark.parametrize("size", [1, 7])
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs_on_the_gpu(path, size):
    check_backend(path, "cuda", size=size)
