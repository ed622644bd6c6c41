"""Preloaded outputs: an update's accumulators start from the output's values.

Checked by CPU emulation of the generated kernel against the NumPy reference,
for both signs, every boundary policy and ragged extents.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import einkern
from einkern.backends.verify import verify
from einkern.gpu import kir
from einkern.gpu.decision import decide, default_config
from einkern.gpu.lower import build_kernel, check_mapping, lower, new_builder, preload_sign
from einkern.gpu.space import config_to_mapping, parameters, violation
from einkern.ir.task import statement_task

UPDATES = {
    # statement, expected sign of the accumulation onto the output
    "C[i,j] += A[i,l] * B[l,j]": 1,
    "C[i,j] -= A[i,l] * B[l,j]": -1,
    "C[i,j] += - A[i,l] * B[l,j]": 1,  # the minus is inside the sum's body
    "C[i,j] += -(A[i,l] * B[l,j])": -1,  # the sum negated: epilogue -acc0
    "C[i,j] -= -(A[i,l] * B[l,j])": 1,
    "C[i,j] -= - A[i,l] * B[l,j] - A[i,l] * B[l,j]": -1,  # two sums merged into one
}


def gemm_problem(statement: str, m=13, n=7, k=5, layout="row"):
    text = (
        f"program upd\ndims m = {m}, n = {n}, k = {k}\nlayout {layout}\n"
        f"tensor A[m, k], B[k, n], C[m, n]\n{statement}\n"
    )
    return einkern.make_problem(einkern.load(text), {})


@pytest.mark.parametrize("statement", sorted(UPDATES))
def test_sign_of_the_accumulation(statement):
    problem = gemm_problem(statement)
    assert preload_sign(problem.program.statements[0]) == UPDATES[statement]


@pytest.mark.parametrize("statement", sorted(UPDATES))
@pytest.mark.parametrize("boundary", ["guard", "redirect", "pad"])
def test_preloaded_update_matches_the_reference(statement, boundary):
    problem = gemm_problem(statement, m=13, n=5, k=5)
    mapping = replace(decide(statement_task(problem, 0)), boundary=boundary, preload_output=True)
    if boundary != "pad":
        kernel = lower(statement_task(problem, 0), mapping)
        first = kernel.body[0]
        assert isinstance(first, kir.PerThread)
        loads = [s for s in first.body if isinstance(s, kir.Store) and "p_C" in repr(s.value)]
        assert loads, "the prologue does not read the output"
    result = verify(problem, {0: mapping}, seed=7)
    assert result.ok(1e-12), result


def test_wrong_sign_is_caught():
    problem = gemm_problem("C[i,j] -= A[i,l] * B[l,j]", m=8, n=4, k=3)
    mapping = replace(decide(statement_task(problem, 0)), boundary="guard", preload_output=True)
    builder = new_builder(statement_task(problem, 0), mapping, "flipped")
    builder.preload = -builder.preload
    broken = verify(problem, {0: mapping}, kernels=[build_kernel(builder)], seed=1)
    assert broken.bad_accesses == 0 and not broken.ok(1e-6)


@pytest.mark.parametrize(
    "statement",
    [
        "C[i,j] = A[i,l] * B[l,j]",
        "C[i,j] += A[i,l] * B[l,j] + A[i,j]",
        "C[i,j] -= 0 - A[i,l] * B[l,j] + A[i,l] * B[l,j] * 2",
    ],
)
def test_preload_refused_where_it_does_not_apply(statement):
    problem = gemm_problem(statement, m=4, n=4, k=4)
    mapping = replace(decide(statement_task(problem, 0)), preload_output=True)
    problems = check_mapping(statement_task(problem, 0), mapping)
    assert any("preload_output" in p for p in problems)
    assert "preload" not in parameters(statement_task(problem, 0))


def test_ccsdt_update_in_the_space_and_correct():
    problem = einkern.make_problem(einkern.load("examples/sd_t_d1_1.ein"), {"T": 3})
    params = parameters(statement_task(problem, 0))
    assert params["preload"] == (False, True)
    config, _ = default_config(statement_task(problem, 0))
    config = replace(config, preload=True)
    assert violation(statement_task(problem, 0), config) is None
    mapping = config_to_mapping(statement_task(problem, 0), config)
    assert mapping.preload_output
    assert verify(problem, {0: mapping}, seed=2).ok(1e-12)
