"""The IR builder: the Einstein rule, semantic errors with positions, counting, isl analysis."""

from __future__ import annotations

import numpy as np
import pytest

import einkern
from einkern.errors import (
    AliasingError,
    DtypeError,
    DuplicateDeclarationError,
    ExtentError,
    IndexBindingError,
    RankError,
    SemanticError,
    UnknownNameError,
)
from einkern.ir import analysis, poly
from einkern.ir.nodes import Access, Binary, Call, Sum

HEADER = """dims n = 4, m = 3
tensor A[n, m], B[m, n], C[n, n], v[n, m], s[n], x[n]
scalar alpha, beta
"""


def statement(text: str):
    return einkern.load(HEADER + text).statements[-1]


def test_contraction_sums_the_index_missing_on_the_left():
    st = statement("C[i,j] = A[i,k] * B[k,j]")
    assert st.rhs == Sum(("k",), Binary("*", Access("A", ("i", "k")), Access("B", ("k", "j"))))
    assert st.parallel_indices == ("i", "j")
    assert st.reduction_indices == ("k",)


def test_invariant_factors_stay_outside_the_sum():
    st = statement("C[i,j] = alpha * A[i,k] * B[k,j] + beta * C[i,j]")
    left, right = st.rhs.left, st.rhs.right
    assert left.op == "*" and isinstance(left.right, Sum) and str(left.left) == "alpha"
    assert str(right) == "(beta * C[i,j])"


def test_each_additive_term_sums_its_own_indices():
    program = einkern.load(
        "dims n = 5\ntensor A[n,n], B[n,n], C[n,n], S[n,n]\nS[i,j] = A[i,k] + B[l,k] * C[l,j]"
    )
    first, second = program.statements[0].rhs.left, program.statements[0].rhs.right
    assert first == Sum(("k",), Access("A", ("i", "k")))
    assert isinstance(second, Sum) and set(second.indices) == {"l", "k"}


def test_sum_inside_function_argument():
    st = statement("s[b] = sqrt(v[b,i] * v[b,i])")
    assert isinstance(st.rhs, Call) and isinstance(st.rhs.args[0], Sum)
    assert st.rhs.args[0].indices == ("i",)


def test_index_used_outside_a_call_is_summed_over_the_whole_term():
    st = statement("s[b] = exp(v[b,i]) * v[b,i]")
    assert isinstance(st.rhs, Sum) and st.rhs.indices == ("i",)
    assert isinstance(st.rhs.body.left, Call)


def test_parentheses_group_within_a_term():
    st = statement("x[i] = (A[i,k] + v[i,k]) * B[k,i]")
    assert isinstance(st.rhs, Sum) and st.rhs.indices == ("k",)


def test_reference_agrees_with_numpy_on_the_einstein_rule():
    program = einkern.load(
        "dims n = 5\ntensor A[n,n], B[n,n], C[n,n], S[n,n]\nS[i,j] = A[i,k] + B[l,k] * C[l,j]"
    )
    rng = np.random.default_rng(1)
    A, B, C = (rng.uniform(0.5, 1.5, (5, 5)) for _ in range(3))
    out = einkern.evaluate(einkern.make_problem(program), {"A": A, "B": B, "C": C})["S"]
    expected = A.sum(axis=1)[:, None] + np.einsum("lk,lj->j", B, C)[None, :]
    np.testing.assert_allclose(out, expected, rtol=1e-13)


@pytest.mark.parametrize(
    "text, error, line, column",
    [
        ("C[i,j] = X[i,k] * B[k,j]", UnknownNameError, 4, 10),
        ("C[i,j] = A[i,k] * B[k,j] * gamma", UnknownNameError, 4, 28),
        ("C[i,j] = foo(A[i,j])", UnknownNameError, 4, 10),
        ("C[i,j] = A[i,k,l]", RankError, 4, 10),
        ("C[i,j] = A[i,j]", IndexBindingError, 4, 14),
        ("C[i,j] = C[j,i] * alpha", AliasingError, 4, 10),
        ("C[i,j] = A[i,k] * C[i,j] * B[k,j]", AliasingError, 4, 19),
        ("C[i,i] = A[i,k] * B[k,i]", SemanticError, 4, 5),
        ("C[i,j] = max(A[i,k])", SemanticError, 4, 10),
        ("C[i,j] = A * B[k,j]", RankError, 4, 10),
    ],
)
def test_semantic_errors_point_at_the_text(text, error, line, column):
    with pytest.raises(error) as info:
        einkern.load(HEADER + text)
    assert info.value.span is not None
    assert (info.value.span.line, info.value.span.column) == (line, column)
    message = str(info.value)
    assert f"<string>:{line}:{column}" in message and "^" in message
    assert info.value.hint


def test_tensor_declared_twice():
    with pytest.raises(DuplicateDeclarationError) as info:
        einkern.load("dims n = 2\ntensor A[n]\ntensor A[n]\nA[i] = 1.0")
    assert info.value.span.line == 3


def test_unsupported_dtype():
    with pytest.raises(DtypeError):
        einkern.load("dims n = 2\ntensor A[n] float8\nA[i] = 1.0")


def test_extents_at_compile_time():
    program = einkern.load("dims n\ntensor A[n], B[n]\nB[i] = 2 * A[i]")
    with pytest.raises(ExtentError, match="has no size"):
        einkern.make_problem(program)
    for bad in (0, -3, 2.5, "x", True):
        with pytest.raises(ExtentError):
            einkern.make_problem(program, {"n": bad})
    with pytest.raises(ExtentError, match="did you mean 'n'"):
        einkern.make_problem(program, {"nn": 3})
    assert einkern.make_problem(program, {"n": "7"}).shape("A") == (7,)


def test_index_ranges_checked_when_sizes_are_given_late():
    program = einkern.load("dims n, m\ntensor A[n], B[m], C[n]\nC[i] = A[i] * B[i]")
    einkern.make_problem(program, {"n": 3, "m": 3})
    with pytest.raises(IndexBindingError):
        einkern.make_problem(program, {"n": 3, "m": 4})


def test_flops_and_bytes_follow_the_documented_convention():
    program = einkern.load("examples/sd_t_d1_1.ein")
    problem = einkern.make_problem(program, {"T": 16})
    st = program.statements[0]
    assert analysis.statement_flops(problem, st) == 2 * 16**7
    assert analysis.statement_bytes(problem, st) == 8 * (2 * 16**6 + 2 * 16**4)
    gemm = einkern.make_problem(einkern.load("examples/gemm.ein"), {"m": 8, "n": 6, "k": 5})
    assert analysis.program_flops(gemm) == (2 * 5 - 1) * 8 * 6


def test_contiguous_index_depends_on_layout():
    problem = einkern.make_problem(einkern.load("examples/sd_t_d1_1.ein"), {"T": 3})
    found = {
        c.access.tensor: c.contiguous_index
        for c in analysis.contiguity(problem, problem.program.statements[0])
    }
    assert found == {"t3": "h3", "t2": "h7", "v2": "h3"}


def test_isl_dependence_analysis():
    program = einkern.load("examples/local_grad3.ein")
    assert poly.carried_indices(program, 0) == ("m",)
    assert poly.parallel_indices(program, 0) == ("e", "i", "j", "k")
    chained = einkern.load(
        "dims n = 4\ntensor A[n,n], B[n,n], C[n,n]\nB[i,j] = A[i,k] * A[k,j]\nC[i,j] = B[j,i]"
    )
    kinds = [(d.kind, d.source, d.sink, d.tensor) for d in poly.dependences(chained)]
    assert kinds == [("flow", 0, 1, "B")]
    assert poly.dependences(einkern.load("examples/local_grad3.ein")) == ()


def test_coalescing_tuples_follow_r_stream():
    problem = einkern.make_problem(einkern.load("examples/gemm.ein"), {"m": 4, "n": 5, "k": 6})
    statement = problem.program.statements[0]
    tuples = {
        (t.tensor, t.dim, t.index, t.weight) for t in analysis.coalescing_tuples(problem, statement)
    }
    # C[i,j] stored once per output; B[l,j] read once per (output, l); A[i,l] walks l
    # (a reduction index) along its stride-1 dimension: no tuple.
    assert tuples == {("C", 1, "j", 20), ("B", 1, "j", 120)}
    d1 = einkern.make_problem(einkern.load("examples/sd_t_d1_1.ein"), {"T": 2})
    weights = analysis.coalescing_weights(d1, d1.program.statements[0])
    assert weights == {"h3": 2 * 2**6 + 2**7}  # t3 read and written, v2 read per h7
