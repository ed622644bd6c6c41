"""Random mappings from the space: compiled with NVRTC for sm_90 in CI (spills
reported), and run on the GPU against the reference under ``pytest -m gpu``
(the same generator as the CPU emulation tests)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from test_gpu_emulation import PROGRAMS, random_mappings, random_problem, seed_of, tolerance

import einkern
from einkern.backends.cuda.resources import kernel_resources
from einkern.backends.verify import random_inputs
from einkern.reference import relative_error


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_random_variants_compile_for_sm90(name):
    rng = random.Random(seed_of("nvrtc", name))
    for _ in range(2):
        problem = random_problem(name, rng)
        mappings = random_mappings(problem, rng)
        resources = kernel_resources(problem, "sm_90", mappings)
        assert len(resources) >= len(problem.program.statements)  # + padding copies
        for kernel in resources:  # what NVRTC reports is within the hardware's bounds
            assert 0 < kernel.registers <= 255, kernel
            assert kernel.spill_stores >= 0 and kernel.spill_loads >= 0, kernel


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("seed", range(6))
def test_random_variants_on_the_gpu(name, seed):
    rng = random.Random(seed_of(name, seed, "gpu"))
    problem = random_problem(name, rng)
    mappings = random_mappings(problem, rng)
    kernel = einkern.Kernel(problem, einkern.api.get_backend("cuda"), mappings=mappings)
    arrays = random_inputs(problem, seed)
    scalars = {s.name: 0.5 + s.name.__len__() / 8 for s in problem.program.scalars}
    expected = einkern.evaluate(problem, arrays, scalars)
    work = {n: a.copy(order="K") for n, a in arrays.items()}
    kernel(**work, **scalars)
    for output in problem.program.outputs:
        reference = expected[output].astype(np.float64)
        error = relative_error(work[output], reference)
        described = {p: m.to_json(None) for p, m in mappings.items()}
        assert error <= tolerance(problem), (dict(problem.sizes), described, error)


@pytest.mark.parametrize("name", ["gemm", "sd_t_d1_1", "norms"])
def test_padding_plans_compile_for_sm90(name):
    from dataclasses import replace

    from einkern.backends.cuda.generate import generate
    from einkern.backends.cuda.nvrtc import compile_cubin

    rng = random.Random(seed_of("pad-nvrtc", name))
    problem = random_problem(name, rng)
    mappings = {p: replace(m, boundary="pad") for p, m in random_mappings(problem, rng).items()}
    source = generate(problem, mappings)
    module = compile_cubin(source.text, "sm_90")
    assert {k.name for k in source.kernels} <= {r.name for r in module.resources}
    assert all(r.spill_stores == 0 for r in module.resources)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_padding_policy_on_the_gpu(name):
    from dataclasses import replace

    rng = random.Random(seed_of(name, "pad-gpu"))
    problem = random_problem(name, rng)
    mappings = {p: replace(m, boundary="pad") for p, m in random_mappings(problem, rng).items()}
    kernel = einkern.Kernel(problem, einkern.api.get_backend("cuda"), mappings=mappings)
    arrays = random_inputs(problem, 3)
    expected = einkern.evaluate(problem, arrays, {s.name: 0.5 for s in problem.program.scalars})
    work = {n: a.copy(order="K") for n, a in arrays.items()}
    kernel(**work, **{s.name: 0.5 for s in problem.program.scalars})
    for output in problem.program.outputs:
        reference = expected[output].astype(np.float64)
        error = relative_error(work[output], reference)
        assert error <= tolerance(problem), (dict(problem.sizes), error)
