"""Fusion: legality from the isl dependences, the merge transform, the planner's
milp cover, fused CPU loop nests and fused CUDA kernels (through the emulator)
against the NumPy reference."""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import einkern
from einkern.api import fusion_plan, load
from einkern.backends.cuda.generate import generate, resolve_mappings
from einkern.backends.verify import emulate_problem
from einkern.bench.suites.ccsdt import family_program
from einkern.ir import fusion
from einkern.ir import fusion_plan as planner
from einkern.ir.bind import make_problem
from einkern.reference import evaluate
from einkern.testing import (
    assert_matches_reference,
    output_tolerance,
    random_arrays,
    random_scalars,
    relative_error,
)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(
    p for p in (ROOT / "examples").iterdir() if p.suffix in (".ein", ".tensor", ".mapped")
)

TRANSPOSED = """program transposed
dims n = 6
tensor a[n, n], b[n, n], c[n, n]
b[i,j] = a[i,j] * 2.0
c[i,j] = b[j,i] + 1.0
"""

CHAIN = """program chain
dims n = 7, m = 5
tensor A[n, m], B[m, m], M[n, m], c[m], v[n], w[n]
M[i,j] = A[i,k] * B[k,j]
v[i] = M[i,j] * c[j]
w[i] = v[i] * v[i]
"""

F2_PRODUCTS = """program f2products
dims nbatch = 31744
tensor A[nbatch, 5, 5], B[nbatch, 5, 5], C[nbatch, 5, 5], D[nbatch, 5, 5]
tensor M1[nbatch, 5, 5], M2[nbatch, 5, 5], M3[nbatch, 5, 5]
M1[b,i,j] = A[b,i,k] * B[b,k,j]
M2[b,i,j] = A[b,i,k] * C[b,k,j]
M3[b,i,j] = A[b,i,k] * D[b,k,j]
"""

SIBLINGS = """program siblings
dims n = 4
tensor u[n, n], x[n, n], y[n, n], z[n, n]
x[i,j] = u[i,j] * 2.0
y[i,j] = u[i,j] + 1.0
z[i,j] = u[i,j] - 3.0
"""


def small(path_or_text, size: int = 3):
    program = load(path_or_text)
    extents = {e.name: size for e in program.extents if not e.name.isdigit()}
    return make_problem(program, extents)


# ---- legality -------------------------------------------------------------------------


def test_a_read_across_iterations_forbids_fusion():
    problem = small(TRANSPOSED)
    found = fusion.legality(problem.program, (0, 1))
    assert not found.legal
    assert found.forbidding is not None
    assert (found.forbidding.kind, found.forbidding.source, found.forbidding.sink) == ("flow", 0, 1)
    assert found.forbidding.tensor == "b"
    plan = fusion_plan(problem, "cpu")
    assert [g.positions for g in plan.groups] == [(0,), (1,)]
    assert any("S0+S1" in line and "flow" in line for line in plan.forbidden)


def test_a_second_read_across_iterations_forbids_fusion_too():
    # isl's dependence summary names the first read of b only; legality checks both
    program = load(
        "dims n = 4\ntensor a[n,n], b[n,n], c[n,n]\n"
        "b[i,j] = a[i,j] * 2.0\nc[i,j] = b[i,j] + b[j,i]\n"
    )
    found = fusion.legality(program, (0, 1))
    assert not found.legal and found.forbidding is not None
    assert "x_i' = x_j" in found.forbidding.relation


def test_a_producer_consumer_chain_fuses_over_the_rows_it_shares():
    program = load(CHAIN)
    found = fusion.legality(program, (0, 1, 2))
    assert found.depth == 1  # M[i,:] then v[i] then w[i]: one fused loop over i
    assert fusion.crossing(program, 0, 1, 1) is None


def test_updates_of_one_output_are_legal_over_the_whole_output():
    program = load(ROOT / "examples/ccsdt_d1.ein")
    found = fusion.legality(program, tuple(range(9)))
    assert found.depth == 6
    assert fusion.mergeable(program, tuple(range(9))) is None
    assert "S1 reads t on" in (
        fusion.mergeable(
            load("dims n = 3\ntensor t[n], a[n]\nt[i] += a[i]\nt[i] += t[i] * a[i]\n"), (0, 1)
        )
        or ""
    )


def test_a_planner_that_ignores_a_forbidding_dependence_fails_the_reference_check(monkeypatch):
    problem = small(TRANSPOSED, 6)
    monkeypatch.setattr(fusion.Fusibility, "crossing", lambda self, a, b, depth: None)
    einkern.api._planned.cache_clear()  # plan again, with the broken legality
    fusion.fusibility.cache_clear()
    kernel = einkern.Kernel(problem, einkern.api.get_backend("cpu"))
    einkern.api._planned.cache_clear()
    fusion.fusibility.cache_clear()
    assert kernel.kernels == 1  # the broken planner fused them ...
    with pytest.raises(AssertionError, match="differs from the reference"):
        assert_matches_reference(kernel)  # ... and the differential check catches it


# ---- the merge transform ------------------------------------------------------------


@pytest.mark.parametrize("family", ["s1", "d1", "d2"])
def test_the_merged_statement_is_the_hand_merged_benchmark_statement(family):
    program = load(ROOT / f"examples/ccsdt_{family}.ein")
    merged = fusion.merge_statements(program, tuple(range(9)))
    assert merged == load(family_program(family, 16)).statements[0]


def test_merging_renames_a_summed_index_that_clashes():
    program = load(
        "dims n = 3\ntensor t[n, n], a[n, n]\nt[i,j] += a[i,k] * a[k,j]\n"
        "t[k,i] += a[k,j] * a[j,i]\n"
    )
    merged = fusion.merge_statements(program, (0, 1))
    problem = make_problem(program, {})
    one = make_problem(
        type(program)(program.name, program.extents, program.tensors, (), (merged,)), {}
    )
    arrays = random_arrays(problem, 3)
    assert np.allclose(evaluate(one, arrays, {})["t"], evaluate(problem, arrays, {})["t"])


@pytest.mark.parametrize("family", ["s1", "d1", "d2"])
def test_ccsdt_fused_is_the_hand_merged_kernel_on_cuda(family):
    """The merge of a family's nine updates is the benchmark's hand-merged statement,
    kernel for kernel; the planner covers the family with merges only (one merge or
    two, as the cost model ranks them)."""
    from einkern.backends.cuda.fusion import merged_task

    problem = make_problem(load(ROOT / f"examples/ccsdt_{family}.ein"), {"T": 16})
    plan = fusion_plan(problem, "cuda")
    assert len(plan.groups) <= 2 and all(g.kind == "merge" for g in plan.groups)
    fused = generate(merged_task(problem, tuple(range(9))).view).text
    hand = generate(make_problem(load(family_program(family, 16)), {})).text
    assert fused.count("__global__") == 1
    assert fused.replace(f"ccsdt_{family}_s0", "P") == hand.replace(f"sd_t_{family}_all", "P")


@pytest.mark.parametrize("tile", [16, 24])
def test_ccsdt_d1_is_one_kernel_at_both_tile_sizes(tile):
    """The d1 family's nine updates are one merged kernel at T = 16 and at T = 24
    (where the model predicts the one merge within 15 % of the fastest cover)."""
    problem = make_problem(load(ROOT / "examples/ccsdt_d1.ein"), {"T": tile})
    plan = fusion_plan(problem, "cuda")
    assert [g.positions for g in plan.groups] == [tuple(range(9))]
    assert plan.groups[0].kind == "merge"


# ---- the cover ----------------------------------------------------------------------


def _costs(table):
    def cost(problem, positions, kind, depth):
        return table[positions]

    return cost


def test_the_milp_cover_is_the_cheapest_and_lists_the_next_best(monkeypatch):
    problem = small(SIBLINGS)
    table = {(0,): 1.0, (1,): 1.0, (2,): 1.0, (0, 1): 1.0, (1, 2): 1.2, (0, 2): 1.5, (0, 1, 2): 2.6}
    monkeypatch.setattr(planner, "MODEL_TOLERANCE", 0.0)
    plan = planner.plan_fusion(problem, "test", _costs(table))
    assert [g.positions for g in plan.groups] == [(0, 1), (2,)]
    assert plan.chosen.seconds == pytest.approx(2.0)
    assert [c.seconds for c in plan.alternatives] == pytest.approx([2.2, 2.5])


def test_within_the_model_tolerance_fewer_kernels_win():
    problem = small(SIBLINGS)
    table = {
        (0,): 1.0,
        (1,): 1.0,
        (2,): 1.0,
        (0, 1): 1.0,
        (1, 2): 1.2,
        (0, 2): 1.5,
        (0, 1, 2): 2.25,
    }
    plan = planner.plan_fusion(problem, "test", _costs(table))
    assert [g.positions for g in plan.groups] == [(0, 1, 2)]  # 2.25 <= 1.15 * 2.0
    assert "fewest kernels" in plan.rule
    assert any(c.seconds == pytest.approx(2.0) for c in plan.alternatives)


def test_a_chain_is_one_cuda_kernel_and_a_crossing_dependence_keeps_groups_in_order():
    problem = small(CHAIN)
    plan = fusion_plan(problem, "cuda")  # legal at depth 1: one block-local chain
    assert [g.positions for g in plan.groups] == [(0, 1, 2)]
    assert "block-local chain" in plan.groups[0].reason
    crossing = small(
        "program crossing\ndims n = 6\ntensor a[n, n], b[n, n], c[n, n], d[n, n]\n"
        "b[i,j] = a[i,j] * 2\nc[i,j] = b[j,i] + 1\nd[i,j] = c[i,j] * c[i,j]\n"
    )
    plan = fusion_plan(crossing, "cuda")
    flat = [p for g in plan.groups for p in g.positions]
    assert flat == [0, 1, 2] and (0, 1) not in [g.positions[:2] for g in plan.groups]
    assert any("crosses fused iterations" in line for line in plan.forbidden)


# ---- results ------------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_fused_and_unfused_matches_the_reference_on_the_cpu(path):
    problem = small(path)
    kernels = {}
    for fuse in (True, False):
        kernel = einkern.Kernel(problem, einkern.api.get_backend("cpu"), fuse=fuse)
        assert_matches_reference(kernel, seed=5)
        kernels[fuse] = kernel.kernels
    assert kernels[False] == len(problem.program.statements)
    assert kernels[True] <= kernels[False]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_fused_matches_the_reference_through_the_cuda_emulator(path):
    problem = small(path, 2)
    plan = fusion_plan(problem, "cuda")
    arrays = random_arrays(problem, 7)
    scalars = random_scalars(problem, 7)
    result, _, bad = emulate_problem(plan.fused, resolve_mappings(plan.fused), arrays, scalars)
    reference = evaluate(problem, arrays, scalars)
    assert bad == 0
    for name in problem.program.outputs:
        assert relative_error(result[name], reference[name]) <= output_tolerance(problem, name)


@pytest.fixture
def sibling_launches(monkeypatch):
    """Sibling statements planned as one CUDA launch (the default, pinned here so
    these tests keep covering combined launches if the switch is turned off)."""
    monkeypatch.setattr("einkern.backends.cuda.fusion.SIBLING_LAUNCHES", True)


EXPECTED_KERNELS = {
    ("ccsdt_d1.ein", "cpu"): 1,
    ("ccsdt_d1.ein", "cuda"): 1,
    ("ccsdt_s1.ein", "cuda"): 1,
    ("ccsdt_triples.ein", "cuda"): 1,  # singles as pointwise terms of the family (2 before)
    ("local_grad3.ein", "cpu"): 1,
    ("local_grad3.ein", "cuda"): 1,  # 3 without SIBLING_LAUNCHES
    ("fousek_function2.mapped", "cpu"): 1,
    ("fousek_function2.mapped", "cuda"): 1,  # a block-local chain (3 before chains)
    ("fousek_function1.mapped", "cuda"): 1,  # a block-local chain (6 before chains)
    # two since the row sums got split points (twenty-seventh session): at 1000
    # rows the planner predicts them alone plus the second statement faster than
    # the chain; at 200000 rows it fuses (test below)
    ("norms.ein", "cuda"): 2,
}


@pytest.mark.parametrize(("name", "backend"), sorted(EXPECTED_KERNELS))
def test_kernel_counts_at_the_default_sizes(name, backend):
    problem = make_problem(load(ROOT / "examples" / name), {})
    assert len(fusion_plan(problem, backend).groups) == EXPECTED_KERNELS[(name, backend)]
    assert len(fusion_plan(problem, backend, fuse=False).groups) == len(problem.program.statements)


def test_compile_fuses_by_default_and_reports_its_groups():
    kernel = einkern.compile(ROOT / "examples/ccsdt_d1.ein", backend="cpu", T=3)
    assert kernel.kernels == 1
    assert kernel.groups[0].positions == tuple(range(9)) and kernel.groups[0].kind == "merge"
    assert len(kernel.compiled.program.statements) == 1
    assert "statement_1" not in kernel.source()
    unfused = einkern.compile(ROOT / "examples/ccsdt_d1.ein", backend="cpu", T=3, fuse=False)
    assert unfused.kernels == 9
    nest = einkern.compile(ROOT / "examples/local_grad3.ein", backend="cpu", p=3, nelt=2)
    assert nest.kernels == 1 and "nest_0_2" in nest.source()


def _random_program(choose) -> str:
    """Statements over 2-D tensors with random index orders (``choose(options)``
    picks one option): some read what an earlier statement wrote in the same
    element, some a transposed element (forbidding; a tensor read twice, once
    transposed, included), some a row (a reduction)."""
    names = ["a", "b", "c", "d", "e"]
    lines = ["dims n = 3", "tensor " + ", ".join(f"{t}[n, n]" for t in names)]
    for _ in range(choose(range(2, 6))):
        out = choose(names[1:])
        left = choose([n for n in names if n != out])
        right = choose([n for n in names if n not in (out, left)])
        op = choose(["=", "+="])
        if choose([False, False, True]):
            lines.append(f"{out}[i,j] {op} {left}[i,k] * {right}[k,j]")
        else:
            order, again = choose(["i,j", "j,i"]), choose(["i,j", "j,i"])
            lines.append(f"{out}[i,j] {op} {left}[{order}] * {right}[i,j] + {right}[{again}]")
    return "\n".join(lines) + "\n"


def _check_fused(text: str, seed: int) -> None:
    problem = small(text)
    kernel = einkern.Kernel(problem, einkern.api.get_backend("cpu"))
    for group in kernel.groups:
        if len(group.positions) > 1:
            assert fusion.legality(problem.program, group.positions).legal
    assert_matches_reference(kernel, seed=seed)


@pytest.mark.parametrize("seed", range(12))
def test_random_programs_fused_match_the_reference(seed):
    _check_fused(_random_program(random.Random(seed).choice), seed)


@settings(max_examples=20, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_hypothesis_programs_fused_match_the_reference(data):
    text = _random_program(lambda options: data.draw(st.sampled_from(list(options))))
    _check_fused(text, 0)


def test_cli_explains_the_groups(capsys):
    from einkern.cli import main

    for backend in ("cpu", "cuda"):
        assert main(["check", str(ROOT / "examples/ccsdt_d1.ein"), "--backend", backend]) == 0
        assert f"fusion ({backend}): 1 kernel(s)" in capsys.readouterr().out
    path = str(ROOT / "examples/local_grad3.ein")
    assert main(["emit", path, "--backend", "cpu", "--explain", "-e", "p=3", "-e", "nelt=2"]) == 0
    text = capsys.readouterr().out
    assert "// fusion (cpu): 1 kernel(s)" in text and "nest_0_2" in text
    assert main(["emit", path, "--backend", "cpu", "--no-fuse", "-e", "p=3"]) == 0
    assert "nest_0_2" not in capsys.readouterr().out
    assert re.search(r"statement_2\(", text) is None


@pytest.mark.parametrize(
    ("name", "extents", "form"),
    [
        ("local_grad3.ein", {}, "blocks"),
        ("local_grad3.ein", {"p": 8}, "blocks"),
        # fousek_function2's three products: their own decisions already stage A
        # alike, so one tile serves all
        (F2_PRODUCTS, {}, "staged"),
    ],
)
def test_sibling_kernels_run_as_one_launch_and_compile(name, extents, form, sibling_launches):
    """With each statement's own mapping given (not the coordinated ones of
    tests/test_shared_input.py), siblings run as one launch of their blocks, or
    as one shared-input kernel where those mappings already share the tile."""
    from einkern.backends.cuda.nvrtc import compile_cubin

    source = name if "\n" in name else ROOT / "examples" / name
    problem = make_problem(load(source), extents)
    plan = fusion_plan(problem, "cuda")
    siblings = [g for g in plan.groups if g.kind == "nest"]
    assert len(siblings) == 1 and len(siblings[0].positions) == 3
    nests = tuple(n for n in plan.nests if len(n) > 1)
    source = generate(plan.fused, resolve_mappings(plan.fused), nests)
    combined = [k for k in source.kernels if k.name.endswith("_s0_2")]
    assert len(combined) == 1 and len(source.kernels) == len(plan.groups)
    members = generate(plan.fused).kernels[:3]
    assert set(combined[0].tensors) == {t for k in members for t in k.tensors}
    if form == "blocks":
        assert combined[0].grid[0] == sum(k.grid[0] for k in members)
        assert "blockIdx.x" not in source.text.split("static __device__")[1].split("extern")[0]
    else:
        assert combined[0].grid == members[0].grid and "staged once]" in source.text
    compile_cubin(source.text, "sm_90")  # NVRTC, no GPU needed


def test_statements_that_depend_on_one_another_are_not_siblings():
    from einkern.backends.cuda.fusion import siblings_seconds

    assert siblings_seconds(small(CHAIN), (0, 1)) is None
    assert siblings_seconds(small(SIBLINGS), (0, 1, 2)) is not None


@pytest.mark.gpu
@pytest.mark.parametrize(
    "name",
    [
        "local_grad3.ein",
        "fousek_function2.mapped",
        "fousek_function1.mapped",
        "norms.ein",
        "ccsdt_d1.ein",
    ],
)
def test_fused_kernels_match_the_reference_on_the_gpu(name, sibling_launches):
    kernel = einkern.compile(
        ROOT / "examples" / name,
        backend="cuda",
        **(
            {"nelt": 100}
            if name.startswith("local")
            else {"T": 6}
            if name.startswith("ccsdt")
            # at 1000 rows the planner predicts the row sums faster alone (split
            # points) and keeps two kernels; at 200000 one kernel reads v once
            else {"nb": 200000}
            if name.startswith("norms")
            else {}
        ),
    )
    assert kernel.kernels < len(kernel.program.statements)
    assert_matches_reference(kernel)


def test_measured_groupings_keep_the_fastest_cover_and_say_so():
    kernel = einkern.compile(
        ROOT / "examples/fousek_function2.mapped", backend="cpu", fuse="measure"
    )
    assert kernel.fusion.rule.startswith("the fastest measured cover")
    assert len(kernel.fusion.alternatives) >= 1
    assert_matches_reference(kernel)
    with pytest.raises(einkern.errors.ArgumentError):
        einkern.compile(ROOT / "examples/norms.ein", backend="cpu", fuse="sometimes")


def test_tune_measures_the_groupings(tmp_path, capsys):
    from einkern.cli import main

    path = str(ROOT / "examples/norms.ein")
    database = str(tmp_path / "db.sqlite")
    code = main(
        [
            "tune",
            path,
            "-e",
            "nb=50",
            "-e",
            "d=8",
            "--backend",
            "cpu",
            "-n",
            "1",
            "--db",
            database,
            "--groupings",
        ]
    )
    assert code == 0
    assert "chosen by the fastest measured cover" in capsys.readouterr().out
