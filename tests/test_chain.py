"""Producer–consumer chains as one CUDA kernel (einkern.gpu.chain): the chained
kernel against the NumPy reference through the CUDA emulator (Fousek's
functions, a matrix chain, norms, column-major tensors, every candidate of the
model's space, random programs whose groups the planner chooses), planted
faults that the emulator must catch (the barriers dropped; a chain forced over a
dependence that crosses blocks), the refusals, and generate, NVRTC and --explain."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from einkern.api import fusion_plan, load
from einkern.backends.cuda.generate import generate, resolve_mappings
from einkern.backends.verify import emulate_problem
from einkern.gpu import chain as chains
from einkern.gpu import chain_barriers, kir
from einkern.gpu.chain import (
    chain_kernel,
    chain_mappings,
    member_mapping,
    ranked_chains,
    why_not_chain,
)
from einkern.gpu.chain_barriers import levels, same_thread, schedule
from einkern.gpu.plan import plan_task
from einkern.gpu.shared_compose import chain
from einkern.ir.bind import make_problem
from einkern.ir.task import statement_task
from einkern.reference import evaluate
from einkern.testing import output_tolerance, random_arrays, random_scalars, relative_error

ROOT = Path(__file__).resolve().parents[1]

MATRIX_CHAIN = """program chain
dims n = 7, m = 5
tensor A[n, m], B[m, m], M[n, m], c[m], v[n], w[n]
M[i,j] = A[i,k] * B[k,j]
v[i] = M[i,j] * c[j]
w[i] = sqrt(v[i] * v[i] + 1.0)
"""

#: Column-major tensors: the fused (outermost) dimension is the last index.
COLUMN_CHAIN = """program columns
dims n = 9, m = 4
layout column
tensor A[m, m, n], B[m, m, n], M[m, m, n], s[n], R[m, m, n]
M[i,j,e] = A[i,k,e] * B[k,j,e]
s[e] = M[i,j,e] * M[i,j,e]
R[i,j,e] = M[j,i,e] / (1.0 + s[e])
"""

CROSSING = """program crossing
dims n = 6
tensor a[n, n], b[n, n], c[n, n]
b[i,j] = a[i,j] * 2.0
c[i,j] = b[j,i] + 1.0
"""


def _problem(name: str, **sizes):
    source = ROOT / "examples" / name if name.endswith((".ein", ".mapped")) else name
    return make_problem(load(source), sizes)


def _error(problem, kernels) -> tuple[float, int]:
    arrays = random_arrays(problem, 3)
    scalars = random_scalars(problem, 3)
    reference = evaluate(problem, arrays, scalars)
    result, _, bad = emulate_problem(problem, {}, arrays, scalars, kernels=kernels)
    worst = max(
        relative_error(result[o], reference[o]) / output_tolerance(problem, o)
        for o in problem.program.outputs
    )
    return worst, bad


CASES = [
    ("fousek_function1.mapped", {"nbatch": 70}),
    ("fousek_function2.mapped", {"nbatch": 37}),
    ("norms.ein", {"nb": 9, "d": 6}),
    (MATRIX_CHAIN, {}),
    (COLUMN_CHAIN, {}),
]


@pytest.mark.parametrize(("name", "sizes"), CASES)
def test_the_chained_kernel_matches_the_reference(name, sizes):
    problem = _problem(name, **sizes)
    positions = tuple(range(len(problem.program.statements)))
    found = chain_mappings(problem, positions)
    assert found is not None and found.depth >= 1
    mappings = dict(zip(positions, found.mappings, strict=True))
    assert why_not_chain(problem, positions, mappings) is None
    kernel = chain_kernel(problem, positions, mappings, "k")
    _, barriers = schedule(problem, positions, mappings)
    assert sum(isinstance(s, kir.Barrier) for s in kernel.body) == sum(barriers)
    worst, bad = _error(problem, [kernel])
    assert bad == 0 and worst <= 1.0


def test_every_candidate_of_function1_matches_the_reference():
    problem = _problem("fousek_function1.mapped", nbatch=37)  # ragged for most tiles
    positions = tuple(range(6))
    ranked = ranked_chains(problem, positions)
    assert len(ranked) >= 10
    for _, mappings in ranked:
        kernel = chain_kernel(problem, positions, dict(zip(positions, mappings, strict=True)), "k")
        worst, bad = _error(problem, [kernel])
        assert bad == 0 and worst <= 1.0, [str(t) for t in mappings[0].parallel]


def test_a_dropped_barrier_is_caught():
    problem = _problem(MATRIX_CHAIN, n=40)
    positions = (0, 1, 2)
    found = chain_mappings(problem, positions)
    assert found is not None
    kernel = chain_kernel(
        problem, positions, dict(zip(positions, found.mappings, strict=True)), "k"
    )
    assert _error(problem, [kernel])[0] <= 1.0
    assert _error(problem, [kir.without_barriers(kernel)])[0] > 1.0


def _planned(problem):
    positions = tuple(range(len(problem.program.statements)))
    found = chain_mappings(problem, positions)
    assert found is not None
    return positions, dict(zip(positions, found.mappings, strict=True))


def test_barriers_only_where_a_dependence_crosses_threads():
    problem = _problem("fousek_function2.mapped", nbatch=37)
    positions, mappings = _planned(problem)
    # every consumer reads exactly the elements its own thread produced
    assert levels(problem, positions, mappings) == (0, 0, 0, 0, 0)
    kernel = chain_kernel(problem, positions, mappings, "k")
    assert not any(isinstance(s, kir.Barrier) for s in kernel.body)
    problem = _problem("fousek_function1.mapped", nbatch=70)
    positions, mappings = _planned(problem)
    # M1; v1 reads M1 across threads; s1 reads v1; M2 and M3 depend on nothing
    # of the first three and run beside M1; F reads s1 (across threads) and M3
    assert levels(problem, positions, mappings) == (0, 1, 2, 0, 0, 3)
    assert schedule(problem, positions, mappings) == (
        (0, 3, 4, 1, 2, 5),
        (False, False, True, True, True),
    )
    problem = _problem(COLUMN_CHAIN)  # R reads M transposed: another thread's element
    positions, mappings = _planned(problem)
    assert levels(problem, positions, mappings) == (0, 1, 2)


def test_thread_locality_needs_the_same_tiles():
    problem = _problem("fousek_function2.mapped", nbatch=37)
    s0, s3 = problem.program.statements[0], problem.program.statements[3]
    wide = member_mapping(problem, 0, 3, (2, 5, 5), 64)
    narrow = member_mapping(problem, 3, 3, (2, 5, 5), 25)
    same = member_mapping(problem, 3, 3, (2, 5, 5), 64)
    assert wide is not None and narrow is not None and same is not None
    read = s3.reads()[0]
    assert read.tensor == "M1"
    assert same_thread((s0, wide, s0.output), (s3, same, read))
    assert not same_thread((s0, wide, s0.output), (s3, narrow, read))


def test_temporaries_stay_on_chip():
    # Fousek II: M1..M4 are the function's locals; only F reaches global memory
    problem = _problem("fousek_function2.mapped", nbatch=37)
    positions, mappings = _planned(problem)
    kernel = chain_kernel(problem, positions, mappings, "k")
    arrays = {p.name for p in kernel.params if p.is_array}
    assert arrays == {"p_A", "p_B", "p_C", "p_D", "p_F"}
    assert {a.name for a in kernel.shared} >= {"oc_M1", "oc_M2", "oc_M3", "oc_M4"}
    stores = {n.array for n in kir.walk(kernel.body) if isinstance(n, kir.Store)}
    assert "p_F" in stores and not stores & {"p_M1", "p_M2", "p_M3", "p_M4"}
    worst, bad = _error(problem, [kernel])
    assert bad == 0 and worst <= 1.0
    # Fousek I: every local stays on chip, the norm's reads across threads too
    problem = _problem("fousek_function1.mapped", nbatch=37)
    positions, mappings = _planned(problem)
    order, _ = schedule(problem, positions, mappings)
    kept = {a.tensor for a in chains.kept_on_chip(problem, order, mappings)}
    assert kept == {"M1", "v1", "s1", "M2", "M3"}


def test_a_temporary_read_outside_the_chain_stays_in_global_memory():
    problem = _problem("fousek_function2.mapped", nbatch=37)
    positions = (0, 1, 3)  # M1, M2 -> M4; F (outside) reads M4 and M3
    found = chain_mappings(problem, positions)
    assert found is not None
    mappings = dict(zip(positions, found.mappings, strict=True))
    kept = {a.tensor for a in chains.kept_on_chip(problem, positions, mappings)}
    assert kept == {"M1", "M2"}  # M4 is read by F, outside the chain
    kernel = chain_kernel(problem, positions, mappings, "k")
    assert "p_M4" in {p.name for p in kernel.params}


def test_a_barrier_dropped_over_a_crossing_read_is_caught(monkeypatch):
    # planted fault: every access pair declared thread-local, so the barriers
    # before v (reads M's rows), before R (reads M transposed) and, in Fousek I,
    # before the norm and F (read another thread's on-chip values) are dropped
    for source in (MATRIX_CHAIN, COLUMN_CHAIN, "fousek_function1.mapped"):
        problem = _problem(source, **({"nbatch": 37} if "fousek" in source else {}))
        positions, mappings = _planned(problem)
        assert _error(problem, [chain_kernel(problem, positions, mappings, "k")])[0] <= 1.0
        with monkeypatch.context() as patch:
            patch.setattr(chain_barriers, "same_thread", lambda first, later: True)
            kernel = chain_kernel(problem, positions, mappings, "k")
        assert not any(isinstance(s, kir.Barrier) for s in kernel.body)
        assert _error(problem, [kernel])[0] > 1.0


def test_a_chain_over_a_dependence_that_crosses_blocks_is_refused_and_caught(monkeypatch):
    problem = _problem(CROSSING)
    assert chains.chain_depth(problem, (0, 1)) == 0
    assert chain_mappings(problem, (0, 1)) is None
    # a planner that ignored the crossing dependence: rows tiled 2 per block
    mappings = [member_mapping(problem, p, 1, (2,), 64) for p in (0, 1)]
    assert all(m is not None for m in mappings)
    kernels = [
        plan_task(statement_task(problem, p), m, f"k{p}").launches[0].kernel
        for p, m in zip((0, 1), mappings, strict=True)
    ]
    worst, bad = _error(problem, [chain(kernels, "forced")])
    assert bad == 0 and worst > 1.0
    monkeypatch.setattr(chains, "chain_depth", lambda problem, positions: 1)
    assert why_not_chain(problem, (0, 1), dict(zip((0, 1), mappings, strict=True))) is None


def test_members_that_tile_their_fused_dimension_differently_are_refused():
    problem = _problem(MATRIX_CHAIN)
    positions = (0, 1, 2)
    found = chain_mappings(problem, positions)
    assert found is not None
    mappings = dict(zip(positions, found.mappings, strict=True))
    tile = found.mappings[0].tile_of("i").tile
    other = next(t for t in (1, 2, 4, 7) if t != tile)
    mappings[1] = member_mapping(problem, 1, 1, (other,), 64)
    assert "differently" in why_not_chain(problem, positions, mappings)
    with pytest.raises(ValueError):
        chain_kernel(problem, positions, mappings, "k")
    partial = dict(zip(positions, found.mappings, strict=True))
    partial[0] = member_mapping(problem, 0, 2, (tile, 1), 64)  # j not whole
    assert "whole" in why_not_chain(problem, positions, partial)


def _planned_kernels(problem):
    """The planner's kernels of ``problem`` (chains composed, others alone), in
    order, and the problem as compiled."""
    plan = fusion_plan(problem, "cuda")
    fused = plan.fused
    chosen = resolve_mappings(fused, None, plan.nests)
    kernels = []
    for positions in plan.nests:
        if len(positions) > 1 and chains.dependent(fused, positions):
            assert why_not_chain(fused, positions, chosen) is None
            kernels.append(chain_kernel(fused, positions, chosen, f"g{positions[0]}"))
            continue
        for p in positions:
            plan_p = plan_task(statement_task(fused, p), chosen[p], f"s{p}")
            kernels.extend(launch.kernel for launch in plan_p.launches)
    return fused, kernels, plan


def _random_chain(choose) -> str:
    """Statements over batched small matrices and vectors: elementwise updates,
    per-batch products and reductions that read earlier outputs (chains), and
    reads of a transposed element inside the batch (legal) or across it (a
    dependence that keeps statements apart)."""
    lines = ["dims e = 3, n = 3", "tensor a[e, n, n], b[e, n, n], c[e, n, n], d[e, n, n], v[e, n]"]
    names = ["a", "b", "c", "d"]
    for _ in range(choose(range(2, 6))):
        out = choose(names[1:])
        left = choose([t for t in names if t != out])
        right = choose([t for t in names if t not in (out, left)])
        kind = choose(["product", "elementwise", "transposed", "vector", "crossing"])
        if kind == "product":
            lines.append(f"{out}[e,i,j] = {left}[e,i,k] * {right}[e,k,j]")
        elif kind == "elementwise":
            lines.append(f"{out}[e,i,j] {choose(['=', '+='])} {left}[e,i,j] - {right}[e,i,j]")
        elif kind == "crossing":
            lines.append(f"{out}[e,i,j] = {left}[j,i,e] + {right}[e,i,j]")
        elif kind == "transposed":
            lines.append(f"{out}[e,i,j] = {left}[e,j,i] * 0.5 + {right}[e,i,j]")
        else:
            lines.append(f"v[e,i] = {left}[e,i,j] * {right}[e,j,i]")
            lines.append(f"{out}[e,i,j] = {left}[e,i,j] * v[e,j]")
    return "\n".join(lines) + "\n"


def _check_planned(text: str) -> None:
    problem = make_problem(load(text), {})
    fused, kernels, _ = _planned_kernels(problem)
    arrays = random_arrays(problem, 4)
    scalars = random_scalars(problem, 4)
    reference = evaluate(problem, arrays, scalars)
    result, _, bad = emulate_problem(fused, {}, arrays, scalars, kernels=kernels)
    assert bad == 0
    for name in problem.program.outputs:
        assert relative_error(result[name], reference[name]) <= output_tolerance(problem, name)


@pytest.mark.parametrize("seed", range(8))
def test_random_chains_as_planned_match_the_reference(seed):
    _check_planned(_random_chain(random.Random(seed).choice))


@settings(max_examples=15, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_hypothesis_chains_as_planned_match_the_reference(data):
    _check_planned(_random_chain(lambda options: data.draw(st.sampled_from(list(options)))))


def test_function1_is_one_chain_kernel_that_compiles_without_spills():
    from einkern.backends.cuda.nvrtc import compile_cubin

    problem = _problem("fousek_function1.mapped")
    fused, kernels, plan = _planned_kernels(problem)
    assert len(kernels) == 1 and [g.positions for g in plan.groups] == [tuple(range(6))]
    assert "block-local chain" in plan.groups[0].reason
    source = generate(fused, None, plan.nests)
    assert len(source.kernels) == 1 and "[chained in each block, 3 barrier(s)]" in source.text
    module = compile_cubin(source.text, "sm_90")  # NVRTC, no GPU needed
    assert all(r.spill_stores == 0 and r.spill_loads == 0 for r in module.resources)


def test_explain_says_why_the_statements_are_chained(capsys):
    from einkern.cli import main

    path = str(ROOT / "examples" / "fousek_function1.mapped")
    assert main(["emit", path, "--backend", "cuda", "--explain"]) == 0
    text = capsys.readouterr().out
    assert "// fusion (cuda): 1 kernel(s)" in text
    assert text.count("why: chain: 6 dependent statements") == 6


@pytest.mark.parametrize(
    "text",
    [  # found by test_fuzz: a 0-dimensional operand in a chain's staged group
        "dtype float32\ndims n0 = 1, n1 = 1\ntensor T0[n0, n0]\ntensor T1[n0]\ntensor T2[]\n"
        "tensor T3[]\nT0[i, j] = T1[i] + T1[k] / -T2[] + 1\nT0[i, j] = 1\n",
        "dims n = 6, m = 5\ntensor A[n, m], B[n, m], s[]\ntensor v[n]\n"
        "v[i] = A[i,k] * s[]\nB[i, j] = v[i] * s[] + A[i,j]\n",
    ],
)
def test_zero_dimensional_operands_are_read_unstaged(text):
    _check_planned(text)
