"""The ``relayout`` rewrite (one operand of a contraction copied into the order its
tiles read best): the rewritten program against the reference of the original on
the CPU backend and in the GPU emulator, the order it picks, what it refuses, a
planted fault caught, and the plan's choice (taken for a gathered operand of a
tensor-core kernel, whichever kernel then reads the copy; never offered to a
SIMT kernel)."""

from __future__ import annotations

import pytest
from test_rewrite import PERMUTED, problem_of, run_cpu, run_emulated

from einkern.api import plan_rewrites
from einkern.gpu import mma_model
from einkern.gpu.rewrite_cost import CudaRewriteModel
from einkern.ir import rewrite_layout
from einkern.ir.nodes import Access
from einkern.ir.rewrite import RewriteError
from einkern.ir.rewrite_layout import relayout, target_order

#: A batch index (b) that is A's contiguous index, scalars and an update.
BATCH_CONTIGUOUS = """dims b=3, n=5, m=4, k=6
scalar s=2
tensor A[n,k,b], B[b,k,m], C[b,n,m]
C[b,i,j] -= s*A[i,k,b]*B[b,k,j]
"""

#: Seed 41's ``hxdg,uxdgjb->hbugj``: A's contiguous index g is a batch index, so
#: the direct tensor-core kernel copies A one element per sector (H100: 4.2 ms
#: direct, 1.37 ms with A relaid, 1.41 ms by TTGT; docs/rewrites.md "Relayout").
GATHERED = """dims ng = 13, nh = 1096, nu = 32, nj = 8, nb = 7, nx = 32, nd = 29
tensor A[nh, nx, nd, ng], B[nu, nx, nd, ng, nj, nb], C[nh, nb, nu, ng, nj]
C[h,b,u,g,j] = A[h,x,d,g] * B[u,x,d,g,j,b]
"""

#: Summed indices held in opposite orders (seed 47's ``xbl,lqx->qb``, smaller).
CROSSED = """dims nb = 40, nq = 24, nx = 9, nl = 7
layout column
tensor A[nx, nb, nl], B[nl, nq, nx], C[nq, nb]
C[q,b] = A[x,b,l] * B[l,q,x]
"""


@pytest.mark.parametrize(
    ("layout", "dtype", "out", "op"),
    [
        ("row", "float64", "a,b,c", "="),
        ("column", "float64", "c,b,a", "+="),
        ("column", "float32", "b,c,a", "-="),
    ],
)
@pytest.mark.parametrize("operand", [0, 1])
def test_relayout_matches_reference(layout, dtype, out, op, operand) -> None:
    text = PERMUTED.format(layout=layout, dtype=dtype, out=out, out_indices=out, op=op)
    rewrite = relayout(problem_of(text), 0, operand)
    assert rewrite.name == "relayout" and rewrite.count == 2
    run_cpu(rewrite)
    run_emulated(rewrite)


def test_relayout_of_a_batch_contiguous_operand() -> None:
    rewrite = relayout(problem_of(BATCH_CONTIGUOUS), 0, 0)
    assert "batch index" in rewrite.reason and rewrite.variant == "of A"
    copy = rewrite.problem.program.statements[0]
    assert copy.output.indices == ("b", "i", "k")  # batch, free, summed: k contiguous
    run_cpu(rewrite)
    run_emulated(rewrite)


def test_the_copy_takes_the_other_operands_summed_order() -> None:
    problem = problem_of(CROSSED)
    # B[l,q,x] column-major holds x slowest and l contiguous: A's copy follows it
    assert target_order(problem, 0, 0) == ("b", "x", "l")
    # A[x,b,l] column-major holds l slowest and x contiguous: B's copy follows it
    assert target_order(problem, 0, 1) == ("q", "l", "x")
    for operand in (0, 1):
        rewrite = relayout(problem, 0, operand)
        run_cpu(rewrite)
        run_emulated(rewrite)


def test_relayout_refusals() -> None:
    gemm = problem_of("dims n=8\ntensor A[n,n], B[n,n], C[n,n]\nC[i,j] = A[i,k]*B[k,j]\n")
    with pytest.raises(RewriteError, match="already in the order"):
        relayout(gemm, 0, 0)
    with pytest.raises(RewriteError, match="two"):
        relayout(gemm, 0, 2)
    square = problem_of("dims n=8\ntensor A[n,n], C[n,n]\nC[i,j] = A[i,k]*A[k,j]\n")
    with pytest.raises(RewriteError, match="both operands"):
        relayout(square, 0, 1)
    two_terms = problem_of(
        "dims n=8\ntensor A[n,n], B[n,n], C[n,n]\nC[i,j] = A[i,k]*B[k,j] + A[i,j]\n"
    )
    with pytest.raises(RewriteError, match="one term"):
        relayout(two_terms, 0, 0)


def test_a_copy_read_in_the_wrong_order_is_caught(monkeypatch) -> None:
    def transposed(expr, mapping):  # the reader swaps the copy's two summed indices
        ((text, copy),) = mapping.items()
        wrong = Access(copy.tensor, (*copy.indices[:-2], copy.indices[-1], copy.indices[-2]))
        return original(expr, {text: wrong})

    original = rewrite_layout._rename
    monkeypatch.setattr(rewrite_layout, "_rename", transposed)
    square = "dims n=6, k=5\ntensor A[n,k,k], B[k,k,n], C[n,n]\nC[i,j] = A[i,k,l]*B[l,k,j]\n"
    rewrite = relayout(problem_of(square), 0, 0)
    with pytest.raises(AssertionError):
        run_cpu(rewrite)


def test_the_plan_relays_a_gathered_operand_of_a_tensor_core_kernel(monkeypatch) -> None:
    problem = problem_of(GATHERED)
    # its direct kernel's stores also scatter (every lane its own line): with
    # their cost TTGT and the relayout tie (1.52 and 1.53 ms predicted; measured
    # 1.41 and 1.38 ms), and TTGT is taken
    assert [r.label for r in plan_rewrites(problem, "cuda").rewrites] == ["ttgt"]
    monkeypatch.setattr(mma_model, "SCATTERED_STORE_COST", 0.0)
    chosen = plan_rewrites(problem, "cuda")
    assert [r.label for r in chosen.rewrites] == ["relayout of A"]
    assert "tile copies beside the MMAs" in " ".join(chosen.explain())
    # without it the plan keeps the direct kernel (TTGT is not predicted to pay)
    assert not plan_rewrites(problem, "cuda", ("split_products", "split_k", "ttgt")).rewrites


def test_the_copies_counted_again_are_what_makes_it_pay(monkeypatch) -> None:
    problem = problem_of(
        CROSSED.replace("nb = 40, nq = 24, nx = 9, nl = 7", "nb = 2826, nq = 752, nx = 45, nl = 27")
    )
    assert [r.label for r in plan_rewrites(problem, "cuda").rewrites] == ["relayout of B"]
    monkeypatch.setattr(mma_model, "COPY_EXPOSURE", 0.0)
    assert not plan_rewrites(problem, "cuda").rewrites


#: Seed 41's ``lorg,oj->gjlr``: its tensor-core kernel reads A (contiguous g, a
#: free index) gathered; relaid, A is read best by a SIMT GETT kernel (H100:
#: 0.158 ms direct, 0.110 ms with A relaid; docs/rewrites.md "`relayout`").
SIMT_READER = """dims nr = 34, nl = 489, ng = 49, nj = 8, no = 12
tensor A[nl, no, nr, ng], B[no, nj], C[ng, nj, nl, nr]
C[g,j,l,r] = A[l,o,r,g] * B[o,j]
"""


def test_the_copy_may_be_read_by_a_simt_kernel() -> None:
    problem = problem_of(SIMT_READER)
    chosen = plan_rewrites(problem, "cuda")
    assert [r.label for r in chosen.rewrites] == ["relayout of A"]
    model = CudaRewriteModel()
    assert model.tensor_cores(problem, 0)
    assert not model.tensor_cores(chosen.problem, len(chosen.problem.program.statements) - 1)


def test_relayout_is_not_offered_to_a_simt_kernel() -> None:
    problem = problem_of(GATHERED.replace("tensor A", "dtype float32\ntensor A"))
    chosen = plan_rewrites(problem, "cuda", ("relayout",))
    assert not chosen.rewrites
    assert "not a tensor-core kernel" in " ".join(chosen.explain())
