"""Split-K over the outer summed indices (``rewrite_k.split_outer``): every summed
index but the one each operand is read along becomes a slice index, nested."""

from __future__ import annotations

import pytest
from test_rewrite import problem_of, run_cpu, run_emulated

from einkern.api import plan_rewrites
from einkern.ir.rewrite import RewriteError
from einkern.ir.rewrite_k import split_outer

#: seed 47's ``ptexbi,gbtxp->gei``, smaller: A's summed indices run b, x, t, p
#: from the fastest, B's p, x, t, b; b and p are kept, t and x split.
REVERSED = """dims e=2, i=2, g={g}, p={p}, t={t}, x={x}, b={b}
layout {layout}
tensor A[p,t,e,x,b,i], B[g,b,t,x,p], C[g,e,i] {dtype}
C[g,e,i] = A[p,t,e,x,b,i] * B[g,b,t,x,p]
"""


@pytest.mark.parametrize(
    "layout,dtype,kept,split",
    [
        ("row", "float64", ("b", "p"), ("t", "x")),
        ("row", "float32", ("b", "p"), ("t", "x")),
        # column-major: A's fastest summed index is p, B's b: the same pair
        ("column", "float64", ("b", "p"), ("t", "x")),
    ],
)
def test_split_outer_keeps_each_operands_run_and_matches_reference(
    layout: str, dtype: str, kept: tuple[str, ...], split: tuple[str, ...]
) -> None:
    problem = problem_of(REVERSED.format(g=3, p=6, t=5, x=4, b=7, layout=layout, dtype=dtype))
    rewrite = split_outer(problem, 0)
    assert rewrite.name == "split_k" and rewrite.variant == "over " + "+".join(split)
    assert rewrite.count == 1 + len(split)  # the partial sums, then a sum per split index
    assert f"in {5 * 4} partial sums" in rewrite.reason
    partial = rewrite.problem.program.statements[0]
    summed = set(partial.indices) - set(partial.parallel_indices)
    # the partial sums still sum over the kept indices, and over none of the split ones
    assert set(kept) <= summed and not set(split) & summed
    # views only: no copies of the operands
    assert not [t for t in rewrite.problem.program.temporaries if t.endswith(("_p", "_p1"))]
    run_cpu(rewrite)
    run_emulated(rewrite)


def test_split_outer_refusals() -> None:
    # every summed index is an operand's run: nothing left to split
    gemm = problem_of(
        "dims n=8, m=8, k=600\ntensor A[n,k], B[k,m], C[n,m]\nC[i,j] = A[i,k]*B[k,j]\n"
    )
    with pytest.raises(RewriteError, match="every summed index"):
        split_outer(gemm, 0)
    # partial sums outnumbering the largest operand's elements
    wide = problem_of(
        "dims n=40, m=40, a=30, k=3\ntensor A[n,a,k], B[a,k,m], C[n,m]\n"
        "C[i,j] = A[i,a,k]*B[a,k,j]\n"
    )
    with pytest.raises(RewriteError, match="more than the largest operand"):
        split_outer(wide, 0)


def test_the_planner_takes_the_outer_split_for_reversed_operands() -> None:
    """At seed 47's extents (g 7, p 26, t 47, x 38, b 27) the model predicts the
    split over t and x at 163 µs against 466 µs for the best single split
    (measured on an H100: 0.074 against 0.39 ms)."""
    text = REVERSED.format(g=7, p=26, t=47, x=38, b=27, layout="row", dtype="float64")
    plan = plan_rewrites(problem_of(text), "cuda")
    assert [r.label for r in plan.rewrites] == ["split_k over t+x"], plan.notes
