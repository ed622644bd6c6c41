"""The CPU backend's BLAS calls: which statements are a GEMM in memory, the calls
they make (checked against the NumPy reference in every layout), the ``blas``
rule, the TTGT rewrite the CPU plan takes to reach them, and the tuner's switch."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import einkern
from einkern.api import make_problem
from einkern.backends.cpu import blas, codegen
from einkern.backends.cpu.backend import CpuBackend
from einkern.backends.cpu.blas import Gemm, gemm_of
from einkern.backends.cpu.decide import decide_schedule
from einkern.backends.cpu.model import predicted_seconds
from einkern.backends.cpu.schedule import (
    decide_loop_schedule,
    default_loop_schedule,
)
from einkern.errors import BackendError
from einkern.testing import assert_matches_reference
from einkern.tuning.cpu_target import CpuTarget, loop_schedule


def program(spec: str, sizes: dict[str, int], dtype="float64", layout="row", op="=", rhs=None):
    """A one-statement program for an einsum ``spec`` (operands A, B; output C)."""
    inputs, output = spec.split("->")
    a, b = inputs.split(",")
    dims = ", ".join(f"n{i} = {sizes[i]}" for i in sorted(sizes))
    shape = lambda ix: ", ".join(f"n{i}" for i in ix)  # noqa: E731
    term = rhs or f"A[{','.join(a)}] * B[{','.join(b)}]"
    return (
        f"program p\ndims {dims}\ndtype {dtype}\nlayout {layout}\nscalar alpha\n"
        f"tensor A[{shape(a)}], B[{shape(b)}], C[{shape(output)}]\n"
        f"C[{','.join(output)}] {op} {term}\n"
    )


def statement_gemm(text: str):
    problem = make_problem(einkern.load(text), {})
    return problem, gemm_of(problem, problem.program.statements[0])


SIZES = {"i": 37, "j": 29, "k": 23, "b": 3, "a": 5, "c": 4}


@pytest.mark.parametrize(
    "spec",
    [
        "ik,kj->ij",  # NN
        "ki,jk->ij",  # TT (computed as Cᵀ = Bᵀ Aᵀ in row major)
        "ik,jk->ij",
        "ki,kj->ij",
        "jk,ki->ij",  # the operands in the other order
        "bik,bkj->bij",  # a batch index outermost
        "ibk,kbj->ibj",  # a batch index in the middle of every tensor
        "iak,kj->iaj",  # M of two indices, fused
        "ikc,kcj->ij",  # K of two indices, fused
    ],
)
@pytest.mark.parametrize("layout", ["row", "column"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gemms_in_memory_call_blas_and_match_the_reference(spec, layout, dtype):
    if layout == "column" and spec.startswith("b"):  # the batch index outermost again
        spec = "ikb,kjb->ijb"
    text = program(spec, SIZES, dtype, layout)
    problem, gemm = statement_gemm(text)
    assert isinstance(gemm, Gemm), gemm
    assert gemm.routine == {"float64": "dgemm", "float32": "sgemm"}[dtype]
    kernel = einkern.compile(text, backend="cpu")
    assert not kernel.rewrites.rewrites  # already a GEMM: no copies
    assert decide_schedule(kernel.compiled)[0].schedule.blas
    source = kernel.executable.library.with_suffix(".c").read_text()
    assert f"ek_{gemm.routine}(&ta, &tb" in source and "#pragma omp" not in source
    assert_matches_reference(kernel, seed=3)


@pytest.mark.parametrize("op", ["=", "+=", "-="])
def test_alpha_and_beta_come_from_the_factors_and_the_operator(op):
    text = program("ki,jk->ij", SIZES, op=op, rhs="alpha * -2.0 * A[k,i] * B[j,k]")
    _, gemm = statement_gemm(text)
    assert isinstance(gemm, Gemm)
    assert gemm.beta == (0 if op == "=" else 1)
    assert gemm.alpha.count("-1.0") == (2 if op == "-=" else 1)  # the sign, and -= once more
    kernel = einkern.compile(text, backend="cpu")
    assert kernel.executable is not None
    assert_matches_reference(kernel, scalars={"alpha": 0.75}, seed=4)


def test_an_assigned_output_holding_nan_is_overwritten():
    """beta = 0: BLAS does not read C, so NaN already there does not leak in."""
    text = program("ik,kj->ij", SIZES)
    kernel = einkern.compile(text, backend="cpu")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((37, 23))
    b = rng.standard_normal((23, 29))
    out = np.full((37, 29), np.nan)
    kernel(A=a, B=b, C=out, alpha=1.0)
    np.testing.assert_allclose(out, a @ b, rtol=1e-12)


def test_a_wrong_transpose_is_caught_by_the_reference_check(monkeypatch):
    """The verification path catches a planted fault: the first operand's
    transpose flag flipped in the code (square extents: still a well-formed call)."""
    text = program("ik,kj->ij", {"i": 24, "j": 24, "k": 24})
    assert_matches_reference(einkern.compile(text, backend="cpu"), seed=1)
    real = codegen.gemm_of

    def flipped(problem, statement):
        found = real(problem, statement)
        return dataclasses.replace(found, transa="T" if found.transa == "N" else "N")

    monkeypatch.setattr(codegen, "gemm_of", flipped)
    faulty = einkern.compile(text.replace("program p", "program planted"), backend="cpu")
    source = faulty.executable.library.with_suffix(".c").read_text()
    assert "ek_dgemm(&ta, &tb" in source
    with pytest.raises(AssertionError, match="differs from the reference"):
        assert_matches_reference(faulty, seed=1)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (
            program("ik,kj->ij", SIZES, rhs="A[i,k] * B[k,j] + A[i,k]"),
            "a binary contraction",
        ),
        (
            program("ikc,ckj->ij", SIZES),
            "hold the K indices in different orders",
        ),
        (
            program("iak,kj->aji", SIZES),
            "are not one strided dimension",
        ),
        (
            program("ik,kj->ij", {"i": 4, "j": 4, "k": (1 << 20) + 1}, dtype="float32"),
            "keeps blocked sums",
        ),
        (
            program("ik,kj->ij", SIZES, rhs="exp(alpha) * A[i,k] * B[k,j]"),
            "is not a constant or a scalar",
        ),
    ],
)
def test_statements_that_are_not_gemms_in_memory_say_why(text, reason):
    problem, gemm = statement_gemm(text)
    assert isinstance(gemm, str) and reason in gemm
    decision = decide_schedule(problem)[0]
    assert not decision.schedule.blas
    assert any(r.startswith("blas: ") and reason in r for r in decision.reasons)


def test_a_long_float32_gemm_through_blas_is_accurate():
    """OpenBLAS sums each K panel plainly and adds the panels into C: 2^16 terms
    stay well inside float32's tolerance (the loops' blocked sums are not used)."""
    text = program("ik,kj->ij", {"i": 32, "j": 32, "k": 1 << 16}, dtype="float32")
    kernel = einkern.compile(text, backend="cpu")
    assert decide_schedule(kernel.compiled)[0].schedule.blas
    errors = assert_matches_reference(kernel, seed=6)
    assert errors["C"] <= 1e-6


def test_only_assignments_and_updates_have_a_blas_form():
    problem, _ = statement_gemm(program("ik,kj->ij", SIZES))
    statement = problem.program.statements[0]
    found = gemm_of(problem, dataclasses.replace(statement, op="*="))
    assert isinstance(found, str) and "no BLAS form" in found


def test_mixed_dtypes_stay_on_the_loops():
    text = program("ik,kj->ij", SIZES).replace(", C[ni, nj]", "\ntensor C[ni, nj] float32")
    _, gemm = statement_gemm(text)
    assert isinstance(gemm, str) and "one dtype" in gemm


@pytest.mark.parametrize("sizes", [{"i": 8, "j": 8, "k": 8}, {"i": 5000, "j": 300, "k": 4}])
def test_gemms_with_a_short_side_keep_the_generated_loops(sizes):
    problem, gemm = statement_gemm(program("ik,kj->ij", sizes))
    assert isinstance(gemm, Gemm)
    decision = decide_schedule(problem)[0]
    assert not decision.schedule.blas
    assert any("a side under 16" in r for r in decision.reasons)


def test_the_rule_can_be_turned_off(monkeypatch):
    problem, _ = statement_gemm(program("ik,kj->ij", SIZES))
    monkeypatch.setattr(blas, "BLAS_ON_CPU", False)
    decision = decide_schedule(problem)[0]
    assert not decision.schedule.blas
    assert any(r.startswith("blas: off") for r in decision.reasons)


def test_without_scipys_blas_a_library_that_calls_it_refuses_to_load(monkeypatch, tmp_path):
    problem, _ = statement_gemm(program("ik,kj->ij", SIZES))
    monkeypatch.setattr(blas, "routine_addresses", lambda: "SciPy's BLAS is not usable: planted")
    assert not decide_schedule(problem)[0].schedule.blas  # the default falls back to loops
    monkeypatch.setenv("EINKERN_CACHE_DIR", str(tmp_path))
    forced = decide_schedule(make_problem(einkern.load(program("ik,kj->ij", SIZES)), {}))
    assert not forced[0].schedule.blas
    from einkern.backends.cpu.schedule import CpuSchedule

    schedule = CpuSchedule((dataclasses.replace(forced[0].schedule, blas=True),))
    with pytest.raises(BackendError, match="calls BLAS"):
        CpuBackend().build(problem, schedule)


def test_the_cpu_plan_permutes_operands_into_gemm_order():
    """A contraction whose operands are not in GEMM order: the CPU plan takes TTGT
    (copies, then one BLAS call), the copies on one thread (``blas-alone``)."""
    sizes = {"g": 219, "r": 6, "v": 4, "b": 5, "s": 4, "e": 12, "u": 10}
    text = program("gue,bvreus->grvbs", sizes, layout="column")
    kernel = einkern.compile(text, backend="cpu")
    assert [r.name for r in kernel.rewrites.rewrites] == ["ttgt"]
    assert any("ttgt: predicted" in line for line in kernel.rewrites.explain())
    decisions = decide_schedule(kernel.compiled)
    assert sum(d.schedule.blas for d in decisions) == 1
    copies = [d for d in decisions if not d.schedule.blas]
    assert copies and all(d.schedule.collapse == 0 for d in copies)
    assert any("blas-alone" in r for d in copies for r in d.reasons)
    assert_matches_reference(kernel, seed=5)
    untouched = einkern.compile(text, backend="cpu", rewrite=False)
    assert not untouched.rewrites.rewrites
    assert_matches_reference(untouched, seed=5)


def test_the_model_prices_blas_below_the_loops_of_a_large_gemm():
    problem, _ = statement_gemm(program("ik,kj->ij", {"i": 256, "j": 256, "k": 256}))
    statement = problem.program.statements[0]
    loops = default_loop_schedule(problem, statement)
    assert loops.blas
    without = dataclasses.replace(loops, blas=False)
    assert predicted_seconds(problem, statement, loops) < predicted_seconds(
        problem, statement, without
    )


def test_the_tuner_offers_blas_or_loops_for_a_gemm():
    problem, _ = statement_gemm(program("ik,kj->ij", SIZES))
    from einkern.ir.task import statement_task

    task = statement_task(problem, 0)
    target = CpuTarget()
    names = {p.name: p.values for p in target.parameters(task)}
    assert names["blas"] == (0, 1)
    default = target.default_config(task)
    assert default.values()["blas"] == 1
    assert loop_schedule(default).blas
    assert not loop_schedule({**default.values(), "blas": 0}).blas
    other, _ = statement_gemm(program("ikc,ckj->ij", SIZES))
    other_task = statement_task(other, 0)
    assert "blas" not in {p.name for p in target.parameters(other_task)}
    config = {**target.default_config(other_task).values(), "blas": 1}
    assert "cannot call BLAS" in target.violation(other_task, type(default).from_values(config))


TWO = """program two
dims ni = 64, nj = 64, nk = 64, na = 4096, nb = 1024
tensor A[ni, nk], B[nk, nj], C[ni, nj], X[na, nb], Y[nb, na]
C[i,j] = A[i,k] * B[k,j]
Y[b,a] = 2.0 * X[a,b]
"""


def test_blas_gives_way_to_loops_beside_heavy_openmp_loops():
    """``blas-alone``: a small GEMM beside a large transpose.  The transpose on one
    thread (so that BLAS's threads keep their cores) is predicted to cost more
    than the GEMM gains: both statements stay OpenMP loops."""
    problem = make_problem(einkern.load(TWO), {})
    alone = [decide_loop_schedule(problem, s) for s in problem.program.statements]
    assert alone[0].schedule.blas and alone[1].schedule.collapse > 0
    decisions = decide_schedule(problem)
    assert not any(d.schedule.blas for d in decisions)
    assert all(d.schedule.collapse > 0 for d in decisions)
    assert "blas-alone: loops, not BLAS" in decisions[0].reasons[-1]
    assert decisions[1] == alone[1]
    assert_matches_reference(einkern.compile(TWO, backend="cpu", fuse=False), seed=2)
