"""Every C loop-nest example (the polyhedral linear-algebra classics included): the
CPU backend's loop nest against the reference executor, and — for the examples
that raise to tensor programs — the tensor-program CPU backend as well; the CUDA
kernels in the emulator (small sizes) and through NVRTC (the default sizes); and
the defaults (``#pragma einkern sizes``) that the main job runs them at."""

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
RAISED = {"gemm_loops.c", "twomm.c", "threemm.c", "atax.c", "bicg.c", "mvt.c", "gemver.c"}


def sizes_of(function) -> dict[str, int]:
    return {s: 3 if s == "tsteps" else 9 + 2 * k for k, s in enumerate(function.sizes)}


def test_the_classic_kernels_are_there():
    names = {p.name for p in C_EXAMPLES}
    wanted = "atax bicg mvt gemver syr2k syrk trmm twomm threemm doitgen jacobi2d trsv gemm_loops"
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


@pytest.mark.parametrize("path", C_EXAMPLES, ids=[p.name for p in C_EXAMPLES])
def test_every_example_has_small_defaults_for_all_its_sizes(path):
    """The main job (scripts/main.sh) runs every example with no -e: each size has a
    default (``#pragma einkern sizes``), not a multiple of 32 everywhere (edge code
    runs), and the arrays stay small (the reference executor checks them)."""
    for function in parse_c(path.read_text(), path.name).functions:
        assert [name for name, _ in function.defaults] == list(function.sizes), function.name
        problem = make_affine_problem(function)
        assert any(value % 32 for name, value in problem.sizes if name != "tsteps")
        total = sum(8 * problem.numel(a.name) for a in function.arrays)
        assert total <= 4 * 2**20, (function.name, total)


def _cuda_runs(path, sizes):
    """The CUDA backend's result on random data, in the emulator: the raised tensor
    program under its fusion plan and default mappings, or the affine kernels."""
    from einkern.api import fusion_plan
    from einkern.backends.cuda.generate import resolve_mappings
    from einkern.backends.emulator import emulate
    from einkern.backends.verify import emulate_problem
    from einkern.gpu.affine import affine_kernels

    function = parse_c(path.read_text(), path.name).functions[0]
    problem = make_affine_problem(function, sizes)
    arrays, scalars = random_affine_arguments(problem, 7)
    expected = evaluate_affine(problem, arrays, scalars)
    raised = raise_function(function)
    if not isinstance(raised, str):
        fused = fusion_plan(einkern.make_problem(raised, sizes), "cuda").fused
        found, errors, bad = emulate_problem(fused, resolve_mappings(fused), arrays, scalars)
        assert bad == 0, errors
        return {n: found[n] for n in fused.program.outputs}, expected
    work = {f"t_{n}": a.copy() for n, a in arrays.items()}
    named = {f"s_{n}": v for n, v in scalars.items()}
    for launch in affine_kernels(problem):
        report = emulate([launch.kernel], work, {**named, **dict(launch.values)})
        assert report.ok, str(report)
    return {n: work[f"t_{n}"] for n in problem.outputs}, expected


@pytest.mark.parametrize("path", C_EXAMPLES, ids=[p.name for p in C_EXAMPLES])
def test_example_cuda_kernels_match_the_reference_in_the_emulator(path):
    function = parse_c(path.read_text(), path.name).functions[0]
    sizes = {s: 2 if s == "tsteps" else 5 + 2 * k for k, s in enumerate(function.sizes)}
    found, expected = _cuda_runs(path, sizes)
    assert found
    for name, value in found.items():
        assert relative_error(value, expected[name]) <= 1e-12, name


@pytest.mark.parametrize("path", C_EXAMPLES, ids=[p.name for p in C_EXAMPLES])
def test_example_cuda_kernels_compile_for_sm90_at_their_defaults(path):
    """What ``einkern emit PATH -b cuda --resources --arch sm_90`` compiles: the
    tensor program's kernels (raised examples) or the affine kernels, no spills."""
    from einkern.backends.cuda.nvrtc import compile_cubin
    from einkern.backends.cuda.resources import kernel_resources
    from einkern.gpu.affine import affine_kernels, distinct_kernels
    from einkern.gpu.cuda_printer import print_cuda_module

    if path.name in RAISED:
        resources = kernel_resources(einkern.make_problem(einkern.load(path)), "sm_90")
    else:
        problem = make_affine_problem(parse_c(path.read_text(), path.name).functions[0])
        source = print_cuda_module(distinct_kernels(affine_kernels(problem)))
        resources = compile_cubin(source, "sm_90").resources
    assert resources
    for kernel in resources:
        assert kernel.spill_stores == 0 and kernel.spill_loads == 0, kernel
