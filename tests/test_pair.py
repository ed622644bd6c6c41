"""Paired terms (einkern.ir.pairing, einkern.gpu.pair): statements whose terms pair
under the exchange of two output indices, computed as ``Y`` once per block in
shared memory and written as ``Y ± Y[exchanged]``.  The pairing found and
refused; every paired candidate of Riemann–Christoffel and of other pairings
(a symmetrizer, an update, column-major, ragged tiles) against the NumPy
reference through the CUDA emulator; planted faults the emulator must catch (the
barrier dropped; a block that does not cover the exchanged indices whole); the
decision, the mapping's JSON form, and NVRTC without spills."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from einkern.api import load
from einkern.backends.verify import emulate_problem
from einkern.gpu import chain_memory, kir, pair, pair_space
from einkern.gpu.decision import decide
from einkern.gpu.lower import MappingError, check_mapping, lower
from einkern.gpu.mapping import Mapping
from einkern.ir.bind import make_problem
from einkern.ir.pairing import pair_split, paired_problem
from einkern.ir.task import statement_task
from einkern.reference import evaluate
from einkern.testing import output_tolerance, random_arrays, random_scalars, relative_error

ROOT = Path(__file__).resolve().parents[1]

#: P(ij) of a coupled-cluster-like update: a product and its i<->j image, sign +.
SYMMETRIZER = """program sym
dims o = 5, v = 3
tensor T[o, o], V[o, o, v], C[o, o, v]
C[i,j,a] += T[i,k]*V[k,j,a] + T[j,k]*V[k,i,a]
"""

#: Column-major, the exchanged indices outermost in memory, scalar factors.
COLUMN = """program col
dims n = 6, m = 4
layout column
scalar alpha
tensor A[n, m, n], B[n, n], R[n, m, n]
R[i,a,j] = alpha*A[i,a,j]*B[i,j] - alpha*A[j,a,i]*B[j,i]
"""


def _riemann(n: int):
    return make_problem(load(ROOT / "examples" / "riemann.ein"), {"n": n})


def _problem(text: str, **sizes):
    return make_problem(load(text), sizes)


def _error(problem, mapping=None, kernels=None) -> tuple[float, int]:
    arrays = random_arrays(problem, 5)
    scalars = random_scalars(problem, 5)
    reference = evaluate(problem, arrays, scalars)
    result, _, bad = emulate_problem(problem, {0: mapping}, arrays, scalars, kernels=kernels)
    worst = max(
        relative_error(result[o], reference[o]) / output_tolerance(problem, o)
        for o in problem.program.outputs
    )
    return worst, bad


def test_the_riemann_terms_pair_under_j_and_l():
    problem = _riemann(8)
    split = pair_split(problem, problem.program.statements[0])
    assert split is not None
    assert split.swap == ("j", "l") and split.sign == -1 and split.terms == 4
    paired = paired_problem(problem, 0, split)
    producer, consumer = paired.program.statements
    assert str(producer.rhs) == "(A[i,j,k,l] + sum[m]((B[m,j,k] * B[i,m,l])))"
    assert str(consumer.rhs) == "(YR[i,j,k,l] - YR[i,l,k,j])"
    assert paired.program.tensor("YR").temporary


@pytest.mark.parametrize(
    "statement",
    [
        "R[i,j,k,l] = A[i,j,k,l] - A[i,l,k,j] + B[m,j,k]*B[i,m,l]",  # odd: one has no partner
        "R[i,j,k,l] = A[i,j,k,l] - A[i,l,k,j] + B[m,j,k]*B[i,m,l] + B[m,l,k]*B[i,m,j]",  # signs
        "R[i,j,k,l] = A[i,j,k,l] - A[i,l,k,j] + B[m,j,k]*B[i,m,l] - B[n,l,k]*B[i,n,j]",  # names
        "R[i,j,k,l] = A[i,j,k,l] + A[i,j,k,l]",  # the exchange leaves the term alone
    ],
)
def test_terms_that_do_not_pair_are_refused(statement):
    text = "program r\ndims n = 4\ntensor A[n,n,n,n], B[n,n,n], R[n,n,n,n]\n" + statement + "\n"
    problem = _problem(text)
    assert pair_split(problem, problem.program.statements[0]) is None
    task = statement_task(problem, 0)
    assert pair_space.candidates(task) == []
    assert not decide(task).pair


@pytest.mark.parametrize("n", [5, 8])
def test_every_paired_candidate_matches_the_reference(n):
    problem = _riemann(n)
    task = statement_task(problem, 0)
    found = pair_space.candidates(task)
    assert len(found) >= 10
    for mapping in found:
        worst, bad = _error(problem, mapping)
        assert bad == 0 and worst <= 1.0, mapping.to_json(None)


@pytest.mark.parametrize(("text", "sizes"), [(SYMMETRIZER, {}), (COLUMN, {}), (COLUMN, {"n": 7})])
def test_other_pairings_match_the_reference(text, sizes):
    problem = _problem(text, **sizes)
    task = statement_task(problem, 0)
    assert pair.split_of(task) is not None
    found = pair_space.candidates(task)
    assert found
    for mapping in found[:12]:
        worst, bad = _error(problem, mapping)
        assert bad == 0 and worst <= 1.0, mapping.to_json(None)


def test_a_dropped_barrier_is_caught():
    problem = _riemann(8)
    task = statement_task(problem, 0)
    mapping = decide(task)
    assert mapping.pair
    kernel = lower(task, mapping, "k")
    assert sum(isinstance(s, kir.Barrier) for s in kernel.body) == 1
    assert _error(problem, kernels=[kernel])[0] <= 1.0
    assert _error(problem, kernels=[kir.without_barriers(kernel)])[0] > 1.0


def test_a_block_that_does_not_cover_the_exchange_is_refused_and_would_be_wrong(monkeypatch):
    """The legality condition: l tiled by 4 of 8 puts Y[i,l,k,j] of another block
    out of reach; the check refuses it, and forced through it computes garbage."""
    problem = _riemann(8)
    task = statement_task(problem, 0)
    good = next(m for m in pair_space.candidates(task) if not m.staged)
    parallel = tuple(replace(t, tile=4, threads=4) if t.index == "l" else t for t in good.parallel)
    bad = replace(good, parallel=parallel)
    problems = check_mapping(task, bad)
    assert any("cover l whole" in p for p in problems)
    with pytest.raises(MappingError, match="cover l whole"):
        lower(task, bad, "k")
    monkeypatch.setattr(chain_memory, "_covers", lambda *a, **k: True)  # Y kept regardless
    kernel = pair.pair_kernel(task, bad, "k", 1 << 16, lower)
    assert not any(p.name == "p_YR" for p in kernel.params)
    worst, refused = _error(problem, kernels=[kernel])
    assert worst > 1.0 or refused > 0


def test_the_decision_takes_the_pairing_and_says_why():
    task = statement_task(_riemann(24), 0)
    mapping = decide(task)
    assert mapping.pair == ("j", "l")
    assert any("paired terms" in r and "predicted" in r for r in mapping.reasons)
    assert "paired terms: j <-> l" in mapping.describe()
    again = Mapping.from_json(mapping.to_json())
    assert again == mapping and again.pair == ("j", "l")
    plain = Mapping.from_json(replace(mapping, pair=()).to_json())
    assert "pair" not in replace(mapping, pair=()).to_json() and plain.pair == ()


def test_paired_kernels_compile_without_spills():
    pytest.importorskip("cuda.bindings.nvrtc")
    from einkern.backends.cuda.resources import kernel_resources

    for n in (24, 48):
        problem = _riemann(n)
        mapping = decide(statement_task(problem, 0))
        (found,) = kernel_resources(problem, "sm_90", {0: mapping})
        assert found.spill_stores == 0 and found.stack_frame == 0, (n, found)
        assert found.barriers == 1


RIEMANN_F32 = (
    "program r32\ndims n = 24\ndtype float32\ntensor A[n,n,n,n], B[n,n,n], R[n,n,n,n]\n"
    "R[i,j,k,l] = A[i,j,k,l] - A[i,l,k,j] + B[m,j,k]*B[i,m,l] - B[m,l,k]*B[i,m,j]\n"
)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("text", "sizes"),
    [
        (str(ROOT / "examples" / "riemann.ein"), {"n": 24}),
        (str(ROOT / "examples" / "riemann.ein"), {"n": 37}),
        (RIEMANN_F32, {}),
        (SYMMETRIZER, {"o": 40, "v": 24}),
        (COLUMN, {"n": 33, "m": 9}),
    ],
)
def test_paired_kernels_on_the_gpu(text, sizes):
    import einkern
    from einkern.testing import assert_matches_reference

    kernel = einkern.compile(text, backend="cuda", **sizes)
    task = statement_task(kernel.problem, 0)
    assert pair.split_of(task) is not None
    assert_matches_reference(kernel)
    forced = pair_space.best(task)
    assert forced is not None
    assert_matches_reference(
        einkern.compile(text, backend="cuda", mappings={0: forced[1]}, **sizes)
    )
