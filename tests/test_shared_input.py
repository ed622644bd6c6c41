"""Siblings reading one input staged once (einkern.gpu.shared_input): the composed
kernel against the NumPy reference through the CUDA emulator, every candidate of
the model's space, planted faults (a dropped barrier, members whose tiles of the
input disagree) that the emulator must catch, the refusals, and the planner's
path through generate, NVRTC and --explain."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from einkern.api import fusion_plan, load
from einkern.backends.cuda.generate import generate, resolve_mappings
from einkern.backends.verify import emulate_problem, random_inputs
from einkern.gpu import kir
from einkern.gpu.lower import lower
from einkern.gpu.mapping import Staging
from einkern.gpu.shared_compose import compose, staged_array
from einkern.gpu.shared_input import (
    common_input,
    ranked_candidates,
    shared_input_kernel,
    shared_input_mappings,
    why_not_shared,
)
from einkern.ir.bind import make_problem
from einkern.ir.task import statement_task
from einkern.reference import evaluate, relative_error
from einkern.testing import random_scalars

ROOT = Path(__file__).resolve().parents[1]

#: Two products over one input whose batch dimension sits alike (i), and a third
#: member that reads the input transposed, so the block must cover i and k whole.
MATRICES = """\
program siblings
dims n = 6, l = 7
tensor A[n, l], B[l, n], C[n, l], P[n, n], Q[n, n], R[n, n]
P[i,k] = A[i,j] * B[j,k]
Q[i,k] = A[i,j] * C[k,j]
R[i,k] = A[k,j] * B[j,i]
"""


def _problem(name: str, **sizes):
    source = ROOT / "examples" / name if name.endswith((".ein", ".mapped")) else name
    return make_problem(load(source), sizes)


def _emulated_error(problem, positions, kernel) -> tuple[float, int]:
    arrays = random_inputs(problem, 3)
    scalars = random_scalars(problem, 3)
    reference = evaluate(problem, arrays, scalars)
    result, _, bad = emulate_problem(problem, {}, arrays, scalars, kernels=[kernel])
    outputs = [problem.program.statements[p].output.tensor for p in positions]
    return max(relative_error(result[o], reference[o]) for o in outputs), bad


CASES = [
    ("local_grad3.ein", {"p": 4, "nelt": 6}, (0, 1, 2)),
    ("local_grad3.ein", {"p": 5, "nelt": 7}, (0, 1, 2)),
    ("local_grad3.ein", {"p": 3, "nelt": 1}, (0, 1, 2)),
    ("fousek_function2.mapped", {"nbatch": 70}, (0, 1, 2)),
    (MATRICES, {}, (0, 1, 2)),
    (MATRICES, {"n": 9, "l": 3}, (0, 1)),
]


@pytest.mark.parametrize(("name", "sizes", "positions"), CASES)
def test_the_composed_kernel_matches_the_reference(name, sizes, positions):
    problem = _problem(name, **sizes)
    chosen = shared_input_mappings(problem, positions)
    assert chosen is not None
    mappings = dict(zip(positions, chosen.mappings, strict=True))
    assert why_not_shared(problem, positions, mappings) is None
    kernel = shared_input_kernel(problem, positions, mappings, "k")
    error, bad = _emulated_error(problem, positions, kernel)
    assert bad == 0 and error <= 1e-12
    # the input is copied to shared memory by the first member only
    tensor = common_input(problem, positions)
    reads = [n for n in kir.walk(kernel.body) if _reads_global(n, f"p_{tensor}")]
    first = lower(statement_task(problem, positions[0]), mappings[positions[0]], "m0")
    assert len(reads) == len([n for n in kir.walk(first.body) if _reads_global(n, f"p_{tensor}")])
    assert [a.name for a in kernel.shared].count(staged_array(first, tensor)) == 1


def test_every_candidate_of_the_space_matches_the_reference():
    problem = _problem("local_grad3.ein", p=4, nelt=5)
    ranked = ranked_candidates(problem, (0, 1, 2))
    assert len(ranked) >= 4
    assert [s for s, _ in ranked] == sorted(s for s, _ in ranked)
    for _, mappings in ranked:
        kernel = shared_input_kernel(problem, (0, 1, 2), dict(enumerate(mappings)), "k")
        error, bad = _emulated_error(problem, (0, 1, 2), kernel)
        assert bad == 0 and error <= 1e-12, mappings[0].describe()


def test_a_dropped_barrier_is_caught():
    problem = _problem("local_grad3.ein", p=4, nelt=6)
    chosen = shared_input_mappings(problem, (0, 1, 2))
    kernel = shared_input_kernel(problem, (0, 1, 2), dict(enumerate(chosen.mappings)), "k")
    error, _ = _emulated_error(problem, (0, 1, 2), kir.without_barriers(kernel))
    assert error > 1e-3


def test_members_whose_tiles_disagree_are_refused_and_caught():
    """The second member stages u in another order: why_not_shared refuses it, and
    composing it anyway (its reads of member 0's tile then use the wrong offsets)
    fails against the reference."""
    problem = _problem("local_grad3.ein", p=4, nelt=6)
    chosen = shared_input_mappings(problem, (0, 1, 2))
    mappings = dict(enumerate(chosen.mappings))
    staging = mappings[1].staged[0]
    shuffled = Staging(staging.access, ("m", "k", "i", "e"), staging.padding)
    mappings[1] = replace(mappings[1], staged=(shuffled,))
    assert "out of its memory order" in why_not_shared(problem, (0, 1, 2), mappings)
    with pytest.raises(ValueError, match="memory order"):
        shared_input_kernel(problem, (0, 1, 2), mappings, "k")
    kernels = [lower(statement_task(problem, p), mappings[p], f"m{p}") for p in (0, 1, 2)]
    error, bad = _emulated_error(problem, (0, 1, 2), compose(kernels, "u", "k"))
    assert bad == 0 and error > 1e-3


def test_mappings_that_cannot_share_the_tile_are_refused():
    problem = _problem("local_grad3.ein", p=4, nelt=8)
    mappings = dict(enumerate(shared_input_mappings(problem, (0, 1, 2)).mappings))
    tiles = list(mappings[2].parallel)
    tiles[-1] = replace(tiles[-1], tile=tiles[-1].tile * 2, threads=tiles[-1].threads)
    other = {**mappings, 2: replace(mappings[2], parallel=tuple(tiles))}
    assert why_not_shared(problem, (0, 1, 2), other) == "the members' block tiles differ"
    prefetching = {p: replace(m, prefetch=True) for p, m in mappings.items()}
    assert "prefetches" in why_not_shared(problem, (0, 1, 2), prefetching)
    short = {p: replace(m, k_step=(("m", 2),)) for p, m in mappings.items()}
    assert "k-step does not cover m whole" in why_not_shared(problem, (0, 1, 2), short)
    # the planner's own per-statement decisions stage nothing in common
    assert why_not_shared(problem, (0, 1, 2), resolve_mappings(problem)) is not None


def test_statements_without_a_common_input_or_with_other_indices_are_not_candidates():
    text = MATRICES.replace("R[i,k] = A[k,j] * B[j,i]", "R[i,k] = C[i,j] * B[j,k]")
    assert shared_input_mappings(_problem(text), (1, 2)) is not None  # C is common
    assert shared_input_mappings(_problem(text), (0, 2)) is not None  # B is common
    lone = "program x\ndims n = 4\ntensor A[n], B[n], X[n], Y[n]\nX[i] = A[i]\nY[i] = B[i]\n"
    assert shared_input_mappings(_problem(lone), (0, 1)) is None
    rank = "program y\ndims n = 4\ntensor A[n,n], X[n], Y[n,n]\nX[i] = A[i,j]\nY[i,j] = A[i,j]\n"
    assert shared_input_mappings(_problem(rank), (0, 1)) is None


def test_the_planner_compiles_local_grad3_to_one_kernel_without_spills(capsys):
    from einkern.backends.cuda.nvrtc import compile_cubin
    from einkern.cli import main

    problem = _problem("local_grad3.ein", p=8, nelt=32768)
    plan = fusion_plan(problem, "cuda")
    nests = tuple(n for n in plan.nests if len(n) > 1)
    assert nests == ((0, 1, 2),)
    source = generate(plan.fused, None, nests)
    assert len(source.kernels) == 1 and "[u staged once]" in source.text
    (resources,) = compile_cubin(source.text, "sm_90").resources
    assert resources.spill_stores == 0 and resources.spill_loads == 0
    path = str(ROOT / "examples/local_grad3.ein")
    assert main(["emit", path, "--backend", "cuda", "--explain", "-e", "p=8"]) == 0
    text = capsys.readouterr().out
    assert text.count("why: shared-input: u staged once per block for 3 statements") == 3


def _reads_global(node, param: str) -> bool:
    return (isinstance(node, kir.Load | kir.VectorLoad)) and node.array == param
