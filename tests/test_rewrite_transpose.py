"""einkern's transpose kernel (gpu/transpose.py): pure permutation statements of any
rank through a shared-memory tile, checked in the emulator against the reference;
a missing barrier is caught; the CUDA source compiles with NVRTC; TTGT uses it."""

from __future__ import annotations

import pytest

import einkern
from einkern.backends.emulator import drop_barrier
from einkern.backends.verify import verify
from einkern.gpu.decision import decide
from einkern.gpu.lower import lower
from einkern.gpu.transpose import STRATEGY, transpose_indices
from einkern.ir.bind import make_problem
from einkern.ir.rewrite_ttgt import ttgt
from einkern.ir.task import statement_task, tasks_of


def problem_of(text: str):
    return make_problem(einkern.load(text), {})


CASES = [
    "dims n=70, m=45\ntensor A[n,m], B[m,n]\nB[j,i] = A[i,j]\n",
    "dims n=64, m=32\ntensor A[n,m], B[m,n] float32\nB[j,i] = A[i,j]\n",  # fp64 -> fp32
    "dims a=5,b=33,c=7\ntensor A[a,b,c], B[c,b,a]\nB[c,b,a] -= A[a,b,c]\n",
    "dims a=5,b=33,c=7,d=40\nlayout column\ntensor A[a,b,c,d], B[d,a,c,b] float32\n"
    "B[d,a,c,b] += A[a,b,c,d]\n",
    "dims a=3,b=4,c=5,d=6,e=7,f=9\ntensor A[a,b,c,d,e,f], B[f,e,a,c,b,d]\n"
    "B[f,e,a,c,b,d] = A[a,b,c,d,e,f]\n",
]


@pytest.mark.parametrize("text", CASES)
def test_transpose_kernel_matches_reference(text: str) -> None:
    problem = problem_of(text)
    mappings = {t.position: decide(t) for t in tasks_of(problem)}
    assert mappings[0].strategy == STRATEGY
    result = verify(problem, mappings, seed=2)
    assert result.bad_accesses == 0 and result.max_relative_error == 0.0


def test_transpose_needs_its_barrier() -> None:
    problem = problem_of(CASES[0])
    task = statement_task(problem, 0)
    mapping = decide(task)
    kernel = lower(task, mapping)
    broken = verify(problem, {0: mapping}, kernels=[drop_barrier(kernel, 0)])
    assert broken.max_relative_error > 1e-3


def test_copies_and_other_statements_keep_their_mappings() -> None:
    copy = problem_of("dims n=8, m=9\ntensor A[n,m], B[n,m]\nB[i,j] = A[i,j]\n")
    scaled = problem_of("dims n=8, m=9\ntensor A[n,m], B[m,n]\nB[j,i] = 2*A[i,j]\n")
    for problem in (copy, scaled):
        task = statement_task(problem, 0)
        assert transpose_indices(task) is None
        assert decide(task).strategy != STRATEGY


def test_transpose_compiles_with_nvrtc() -> None:
    from einkern.backends.cuda.resources import kernel_resources

    (resources,) = kernel_resources(problem_of(CASES[2]), "sm_90")
    assert resources.spill_stores == 0 and resources.shared_memory == 16 * 17 * 8  # small tile


def test_ttgt_transposes_use_the_transpose_kernel() -> None:
    text = (
        "dims a=3, b=4, c=5, d=6, e=7\ntensor A[a,e,b,d], B[d,c,e], C[c,a,b]\n"
        "C[c,a,b] = A[a,e,b,d]*B[d,c,e]\n"
    )
    rewritten = ttgt(problem_of(text), 0).problem
    strategies = [decide(t).strategy for t in tasks_of(rewritten)]
    assert strategies.count(STRATEGY) == 1  # A; B keeps its stride-1 index; C is a view
