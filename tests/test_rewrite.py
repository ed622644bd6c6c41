"""Program rewrites into several kernels (issue 11: TTGT, split-K, products split
pairwise): every rewritten program against the reference of the original, on the
CPU backend and in the GPU emulator; temporaries hidden from the caller; illegal
rewrites refused; a planted fault caught."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import einkern
from einkern.api import Kernel, plan_rewrites
from einkern.arrays import random_arrays
from einkern.backends import get_backend
from einkern.backends.rewritten import emulate_rewritten
from einkern.errors import ArgumentError
from einkern.gpu.decision import decide
from einkern.ir.bind import make_problem
from einkern.ir.nodes import Problem
from einkern.ir.rewrite import Rewrite, RewriteError, split_products
from einkern.ir.rewrite_k import slice_count, split_choices, split_k
from einkern.ir.rewrite_plan import (
    DEEP_LADDER,
    DEEP_SLICE,
    DEEP_SLICES,
    DEEP_WAVES,
    RewritePlan,
    plan,
    split_slices,
)
from einkern.ir.rewrite_ttgt import ttgt
from einkern.ir.task import tasks_of
from einkern.reference import evaluate
from einkern.testing import (
    assert_matches_reference,
    output_tolerance,
    random_scalars,
    relative_error,
)


def test_cuda_rewrites_are_on_by_default():
    problem = make_problem(
        einkern.load("dims k=100000\ntensor x[k], y[k], d[]\nd[] = x[k]*y[k]\n"), {}
    )
    assert [r.name for r in plan_rewrites(problem, "cuda").rewrites] == ["split_k"]


def test_cuda_rewrites_can_be_switched_off(monkeypatch):
    monkeypatch.setattr("einkern.api.REWRITES_ON_CUDA", False)
    problem = make_problem(
        einkern.load("dims k=100000\ntensor x[k], y[k], d[]\nd[] = x[k]*y[k]\n"), {}
    )
    chosen = plan_rewrites(problem, "cuda")
    assert not chosen.rewrites and "REWRITES_ON_CUDA" in " ".join(chosen.explain())


def problem_of(text: str, **sizes: int) -> Problem:
    return make_problem(einkern.load(text), sizes)


def run_cpu(rewrite: Rewrite) -> dict[str, float]:
    """The rewritten problem on the CPU backend against the original's reference."""
    original = rewrite.original
    kernel = Kernel(
        original,
        get_backend("cpu"),
        plan=RewritePlan(original, rewrite.problem, (rewrite,), (rewrite.reason,)),
    )
    return assert_matches_reference(kernel, original, seed=3)


def run_emulated(rewrite: Rewrite) -> None:
    """The rewritten problem's CUDA kernels (default mappings) in the emulator."""
    original, rewritten = rewrite.original, rewrite.problem
    mappings = {task.position: decide(task) for task in tasks_of(rewritten)}
    arrays = random_arrays(original, 5)
    scalars = random_scalars(original, 5)
    expected = evaluate(original, arrays, scalars)
    work = {name: np.array(a, copy=True, order="K") for name, a in arrays.items()}
    result, bad = emulate_rewritten(rewritten, mappings, work, scalars)
    assert bad == 0
    for name in original.program.outputs:
        error = relative_error(result[name], expected[name])
        assert error <= output_tolerance(original, name), (name, error)


CHAIN = """dims n=12, m=9, k=14
tensor A[n,k], B[k,m], C[n,m], D[m,m]
scalar a=2
C[i,j] += a*A[i,k]*B[k,l]*D[l,j] - C[i,j]*0.5
"""

LONG = """dims n=6, m=5, k={k}
layout {layout}
tensor A[n,k], B[k,m], C[n,m] {dtype}
C[i,j] {op} A[i,k]*B[k,j]
"""

BATCHED = """dims b=3, n=5, m=4, k=150
tensor A[b,n,k], B[k,b,m], C[n,b,m]
C[i,b,j] += A[b,i,k]*B[k,b,j]
"""

PERMUTED = """dims a=3, b=4, c=5, d=6, e=7
layout {layout}
tensor A[a,e,b,d], B[d,c,e], C[{out}] {dtype}
C[{out_indices}] {op} A[a,e,b,d]*B[d,c,e]
"""


# ---- split_products ------------------------------------------------------------------


def test_split_products_matches_reference_and_keeps_other_terms() -> None:
    problem = problem_of(CHAIN)
    rewrite = split_products(problem, 0, force=True)
    assert rewrite.count == 2
    assert rewrite.problem.program.temporaries
    run_cpu(rewrite)
    run_emulated(rewrite)


def test_split_products_decided_by_flops() -> None:
    chain = problem_of(
        "dims n=64\ntensor A[n,n], B[n,n], C[n,n], D[n,n]\nD[i,l] = A[i,j]*B[j,k]*C[k,l]\n"
    )
    assert plan(chain).rewrites[0].name == "split_products"
    outer = problem_of("dims n=8\ntensor A[n], B[n], C[n], D[n,n,n]\nD[i,j,k] = A[i]*B[j]*C[k]\n")
    assert not plan(outer).rewrites  # no sum: nothing to save
    with pytest.raises(RewriteError):
        split_products(outer, 0)


def test_compile_splits_products_and_hides_temporaries() -> None:
    kernel = einkern.compile(CHAIN, backend="cpu")
    assert [r.name for r in kernel.rewrites.rewrites] == ["split_products"]
    assert kernel.inputs == ("A", "B", "C", "D") and kernel.outputs == ("C",)
    temporary = kernel.compiled.program.temporaries[0]
    assert_matches_reference(kernel)
    arrays = random_arrays(kernel.problem, 1)
    with pytest.raises(ArgumentError, match="no tensor"):
        kernel(**arrays, **{temporary: np.zeros((12, 9))})
    result = kernel(**arrays)
    assert isinstance(result, np.ndarray) and result.shape == (12, 9)
    unchanged = einkern.compile(CHAIN, backend="cpu", rewrite=False)
    assert not unchanged.rewrites.rewrites and "rewrite=False" in unchanged.rewrites.notes[0]


# ---- split_k ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("k", "slices", "layout", "dtype", "op"),
    [
        (36, 4, "row", "float64", "="),
        (37, 4, "row", "float64", "+="),  # 37 is prime: padded copies
        (40, 4, "column", "float64", "-="),
        (45, 4, "column", "float32", "+="),  # 45 = 5·9: 5 slices, views
        (301, 8, "row", "float32", "="),
    ],
)
def test_split_k_matches_reference(k: int, slices: int, layout: str, dtype: str, op: str) -> None:
    problem = problem_of(LONG.format(k=k, layout=layout, dtype=dtype, op=op))
    rewrite = split_k(problem, 0, slices)
    count, divides = slice_count(k, slices)
    program = rewrite.problem.program
    views = {t.name: t for t in program.tensors if t.view_of is not None}
    bases = ["A", "B"] if divides else ["k0_A_p", "k0_B_p"]
    assert sorted(t.view_of for t in views.values()) == sorted([*bases, "C", "k0_P"])
    # the partial sums are summed through flat views: one index along C's memory
    last = program.statements[-1]
    assert views[last.output.tensor].view_of == "C" and len(last.output.indices) == 1
    padded = [t for t in rewrite.problem.program.temporaries if t.endswith(("A_p", "B_p"))]
    assert bool(padded) == (not divides)
    run_cpu(rewrite)
    run_emulated(rewrite)


def test_split_k_with_batch_index() -> None:
    rewrite = split_k(problem_of(BATCHED), 0, 5)
    assert "views (free)" in rewrite.reason
    run_cpu(rewrite)
    run_emulated(rewrite)


def test_split_k_refuses_a_statement_reading_its_output() -> None:
    """The language refuses such statements; a program built by hand may hold one."""
    from einkern.ir.nodes import Access, Binary, Sum

    problem = problem_of(LONG.format(k=64, layout="row", dtype="float64", op="="))
    statement = problem.program.statements[0]
    body = Binary("*", Access("C", ("i", "j")), statement.rhs.body)  # type: ignore[union-attr]
    reading = dataclasses.replace(statement, rhs=Sum(("k",), body))
    program = dataclasses.replace(problem.program, statements=(reading,))
    own = Problem(program, problem.sizes)
    with pytest.raises(RewriteError, match="reads its own output"):
        split_k(own, 0, 4)
    with pytest.raises(RewriteError, match="reads its own output"):
        ttgt(own, 0)


def test_a_wrong_split_view_fails() -> None:
    """Planted fault: one operand's view splits k with its two parts swapped."""
    rewrite = split_k(problem_of(LONG.format(k=48, layout="row", dtype="float64", op="=")), 0, 4)
    program = rewrite.problem.program
    view = next(t for t in program.tensors if t.view_of == "A")
    wrong = dataclasses.replace(view, shape=(view.shape[0], view.shape[2], view.shape[1]))
    statements = tuple(
        dataclasses.replace(s, rhs=_swap_view(s.rhs, view.name)) for s in program.statements
    )
    tensors = tuple(wrong if t.name == view.name else t for t in program.tensors)
    broken = Problem(
        dataclasses.replace(program, tensors=tensors, statements=statements), rewrite.problem.sizes
    )
    with pytest.raises(AssertionError, match="differs from the reference"):
        run_cpu(dataclasses.replace(rewrite, problem=broken))


def _swap_view(expr, name):
    from einkern.ir.nodes import Access, Binary, Sum

    if isinstance(expr, Access) and expr.tensor == name:
        i, s, k = expr.indices
        return Access(name, (i, k, s))
    if isinstance(expr, Binary):
        return Binary(expr.op, _swap_view(expr.left, name), _swap_view(expr.right, name))
    if isinstance(expr, Sum):
        return Sum(expr.indices, _swap_view(expr.body, name))
    return expr


# ---- ttgt ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layout", "dtype", "out", "op"),
    [
        ("row", "float64", "a,b,c", "="),  # output already in GEMM order: written through a view
        ("column", "float64", "c,b,a", "+="),  # updated through a view
        ("row", "float64", "c,a,b", "+="),  # output permuted back
        ("column", "float64", "c,a,b", "-="),
        ("column", "float32", "b,c,a", "="),
    ],
)
def test_ttgt_matches_reference(layout: str, dtype: str, out: str, op: str) -> None:
    shape = ", ".join(out.split(","))
    text = PERMUTED.format(layout=layout, dtype=dtype, out=shape, out_indices=out, op=op)
    rewrite = ttgt(problem_of(text), 0)
    assert rewrite.name == "ttgt" and "GEMM" in rewrite.reason
    run_cpu(rewrite)
    run_emulated(rewrite)


def test_ttgt_with_batch_index() -> None:
    rewrite = ttgt(problem_of(BATCHED), 0)
    assert "batch b" in rewrite.reason
    run_cpu(rewrite)
    run_emulated(rewrite)


def test_ttgt_refusals() -> None:
    gemm = problem_of("dims n=8\ntensor A[n,n], B[n,n], C[n,n]\nC[i,j] = A[i,k]*B[k,j]\n")
    with pytest.raises(RewriteError, match="already a plain GEMM"):
        ttgt(gemm, 0)
    chain = problem_of(
        "dims n=8\ntensor A[n,n], B[n,n], C[n,n], D[n,n]\nD[i,l] = A[i,j]*B[j,k]*C[k,l]\n"
    )
    with pytest.raises(RewriteError, match="exactly two"):
        ttgt(chain, 0)
    two_terms = problem_of(
        "dims n=8\ntensor A[n,n], B[n,n], C[n,n]\nC[i,j] = A[i,k]*B[k,j] + A[i,j]\n"
    )
    with pytest.raises(RewriteError, match="one term"):
        ttgt(two_terms, 0)


# ---- the plan --------------------------------------------------------------------------


def test_plan_chooses_split_k_for_a_long_reduction_on_cuda() -> None:
    problem = problem_of(LONG.format(k=100_000, layout="row", dtype="float64", op="+="), n=64, m=64)
    chosen = plan_rewrites(problem, "cuda")
    assert [r.name for r in chosen.rewrites] == ["split_k"]
    assert any("split_k: predicted" in line for line in chosen.explain())
    assert not plan_rewrites(problem, "cuda", False).rewrites
    assert not plan_rewrites(problem, "cuda", ("ttgt",)).rewrites
    assert not plan_rewrites(problem, "cpu").rewrites  # no model: products only
    with pytest.raises(ArgumentError):
        plan_rewrites(problem, "cuda", "split_k")  # type: ignore[arg-type]
    with pytest.raises(ArgumentError):
        plan_rewrites(problem, "cuda", ("split_n",))


def test_plan_splits_a_sum_over_several_short_indices_on_tensor_cores() -> None:
    """``dncf,nic->idf`` (the contractions suite's c2_080): 247 × 236 outputs,
    16 blocks of the 64×64 fp64 tile, a sum of 131 × 83 terms.  Split-K counts
    the terms of the whole sum (not the 131 of its longest index) and the tile's
    own blocks (not a SIMT mapping's; for the small tile the direct kernel now
    takes, the 64×64 tile's): 17 slices of n, the output a batch index of the
    tile kernel."""
    text = (
        "dims nd = 13, nf = 19, ni = 236, nn = 131, nc = 83\ndtype float64\nlayout column\n"
        "tensor A[nd, nn, nc, nf], B[nn, ni, nc], C[ni, nd, nf]\n"
        "C[i,d,f] = A[d,n,c,f] * B[n,i,c]\n"
    )
    problem = problem_of(text)
    chosen = plan_rewrites(problem, "cuda")
    assert [r.name for r in chosen.rewrites] == ["split_k"]
    assert "17 partial sums" in chosen.rewrites[0].reason
    small = problem_of(text.replace("nn = 131, nc = 83", "nn = 3, nc = 5"))
    assert not [r for r in plan_rewrites(small, "cuda").rewrites if r.name == "split_k"]


def test_split_slices_offer_two_waves_and_a_deep_ladder() -> None:
    # few blocks: two waves' worth (at most one slice per 128 terms), then the deep
    # counts, each bounded by one slice per DEEP_SLICE terms
    assert split_slices(16, 132, 131 * 83) == (17, 10)
    assert split_slices(16, 132, 1 << 20) == (17, DEEP_SLICES, *DEEP_LADDER)
    # blocks that fill the SMs but make few waves: only the deep counts
    assert split_slices(280, 132, 82953) == (DEEP_SLICES, 81)
    # too many waves, or too short a sum for slices of DEEP_SLICE terms: none
    assert split_slices(DEEP_WAVES * 132, 132, 82953) == ()
    assert split_slices(280, 132, 2 * DEEP_SLICE - 1) == ()
    assert split_slices(280, 132, 2 * DEEP_SLICE) == (2,)


def test_split_choices_prefer_a_dividing_count_of_any_summed_index() -> None:
    """A count dividing some summed index's extent (a free view) within
    FREE_FACTOR of the wanted one, the nearest; padding only when none is."""
    text = (
        "dims a=4, b=5, c={c}, d={d}\ntensor A[a,c,d], B[c,d,b], C[a,b]\n"
        "C[i,j] = A[i,c,d]*B[c,d,j]\n"
    )
    problem = problem_of(text.format(c=211, d=44))  # 211 is prime, 44 = 4·11
    statement = problem.program.statements[0]
    assert split_choices(problem, statement, 24) == (("d", 22),)
    assert split_choices(problem, statement, 200) == (("c", 211),)  # the whole index
    assert split_choices(problem, statement, 11) == (("d", 11),)
    # the longest index's own nearest count is offered too
    longer = problem_of(text.format(c=473, d=48))  # 473 = 11·43
    assert split_choices(longer, longer.program.statements[0], 22) == (("d", 24), ("c", 43))
    prime = problem_of(text.format(c=211, d=1))
    assert split_choices(prime, prime.program.statements[0], 24) == (("c", 24),)  # padded
    assert "padded" in split_k(prime, 0, 24, "c").reason
    assert "views (free)" in split_k(problem, 0, 22, "d").reason


def test_plan_splits_a_long_sum_onto_a_few_hundred_blocks() -> None:
    """``kihm,ix->mhkx`` (the contractions suite's c2_094, fp32): 245 × 317
    outputs from 82953 terms.  Its default mapping has 280 blocks, more than the
    SMs, so the two-waves count does not apply; the deep count does (measured on
    an H100: 3.27 ms direct, 1.61 ms in 24 slices, docs/rewrites.md).  At a
    twentieth of the sum the plan stays direct."""
    text = (
        "dims nh = 7, nk = 7, nm = 5, nx = 317, ni = {i}\ndtype float32\n"
        "tensor A[nk, ni, nh, nm], B[ni, nx], C[nm, nh, nk, nx]\n"
        "C[m,h,k,x] = A[k,i,h,m] * B[i,x]\n"
    )
    chosen = plan_rewrites(problem_of(text.format(i=82953)), "cuda")
    assert [r.name for r in chosen.rewrites] == ["split_k"]
    assert "partial sums" in chosen.rewrites[0].reason
    assert any("direct" in line and "split_k" in line for line in chosen.explain())
    assert not plan_rewrites(problem_of(text.format(i=1200)), "cuda").rewrites
    small = problem_of(text.format(i=4 * DEEP_SLICE).replace("nx = 317", "nx = 40"))
    deep = split_k(small, 0, 4, "i")
    run_cpu(deep)
    run_emulated(deep)


def test_a_transpose_of_short_runs_is_charged_for_its_blocks() -> None:
    """einkern's transpose kernel moves one tile per block: with stride-1 indices
    of 3 and 4 elements, 12 elements a block.  On an H100, 2.8 million such blocks
    took 1.69 ms where the bytes take 0.09 ms; 32 × 32 tiles ran at copy speed."""
    from einkern.gpu.device import H100
    from einkern.gpu.transpose import BANDWIDTH_FRACTION, predicted_transpose_time

    def transpose(ni: int, no: int) -> tuple[float, float, int]:
        nr = (32 << 20) // (ni * no)
        text = (
            f"dims ni = {ni}, no = {no}, nr = {nr}\ndtype float32\n"
            "tensor A[nr, no, ni], T[nr, ni, no]\nT[r,i,o] = A[r,o,i]\n"
        )
        problem = problem_of(text)
        task = tasks_of(problem)[0]
        moved = 2 * problem.nbytes("A")
        return (
            predicted_transpose_time(task, H100),
            moved / (H100.dram_bandwidth * BANDWIDTH_FRACTION),
            nr,
        )

    seconds, by_bytes, blocks = transpose(3, 4)
    assert seconds == pytest.approx(blocks * H100.block_seconds / H100.sm_count)
    assert seconds > 10 * by_bytes
    seconds, by_bytes, _ = transpose(32, 32)
    assert seconds == pytest.approx(by_bytes)


def test_plan_keeps_a_batch_of_tiny_products_direct() -> None:
    """``vnhgdo,nwdhg->vwngo`` (the contractions suite's c2_045, fp32): a batch of
    480 850 products of 12 × 5 outputs over 6 terms.  TTGT's transposes have
    stride-1 runs of 2–5 elements, so millions of blocks: on an H100 TTGT took
    2.85 ms and the direct kernel 0.87 ms.  The plan stays direct."""
    text = (
        "dims nn = 815, ng = 590, no = 4, nv = 3, nw = 5, nh = 2, nd = 3\ndtype float32\n"
        "tensor A[nv, nn, nh, ng, nd, no], B[nn, nw, nd, nh, ng], C[nv, nw, nn, ng, no]\n"
        "C[v,w,n,g,o] = A[v,n,h,g,d,o] * B[n,w,d,h,g]\n"
    )
    chosen = plan_rewrites(problem_of(text), "cuda")
    assert not chosen.rewrites
    assert any("ttgt" in line for line in chosen.explain())


def test_plan_keeps_a_large_gemm_direct() -> None:
    problem = make_problem(einkern.load("examples/gemm.ein"), {})
    assert not plan_rewrites(problem, "cuda").rewrites


def test_cli_explains_rewrites(capsys) -> None:
    from einkern.cli import main

    text = LONG.format(k=100_000, layout="row", dtype="float64", op="+=")
    import pathlib
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        file = pathlib.Path(folder) / "long.ein"
        file.write_text(text.replace("n=6, m=5", "n=64, m=64"))
        assert main(["emit", str(file), "--backend", "cuda", "--explain"]) == 0
        out = capsys.readouterr().out
        assert "// rewrite: S0: split_k" in out and "k0_P" in out
        assert main(["emit", str(file), "--backend", "cuda", "--explain", "--no-rewrite"]) == 0
        out = capsys.readouterr().out
        assert "k0_P" not in out and "rewrites off" in out
        assert main(["check", str(file)]) == 0
        assert "split_k" in capsys.readouterr().out


def test_ttgt_of_a_ccsdt_statement() -> None:
    """sd_t_d2_5 (column-major update, 6-index output): what scripts/gpu_rewrite.sh times."""
    text = (
        "dims T=4\nlayout column\ntensor t3[T,T,T,T,T,T], t2[T,T,T,T], v2[T,T,T,T]\n"
        "t3[h2,h1,h3,p6,p4,p5] += t2[p7,p4,h1,h2] * v2[p7,h3,p6,p5]\n"
    )
    rewrite = ttgt(problem_of(text), 0)
    run_cpu(rewrite)
    run_emulated(rewrite)


def test_split_k_of_one_term_among_several() -> None:
    text = (
        "dims n=6, m=5, k=64\ntensor A[n,k], B[k,m], C[n,m], D[n,m]\nscalar a=3\n"
        "C[i,j] += a*A[i,k]*B[k,j] - 2*D[i,j]\n"
    )
    rewrite = split_k(problem_of(text), 0, 4)
    run_cpu(rewrite)
    run_emulated(rewrite)


def test_ttgt_copies_what_other_statements_touch() -> None:
    """No view of a tensor another statement writes (or, for the output, touches)."""
    text = (
        "dims a=3, b=4, c=5, d=6, e=7\ntensor A[a,e,b,d], B[d,c,e], C[c,a,b], E[c,a,b]\n"
        "C[c,a,b] = A[a,e,b,d]*B[d,c,e]\nE[c,a,b] = 2*C[c,a,b]\n"
    )
    problem = problem_of(text)
    alone = ttgt(problem_of(text.rsplit("E[c,a,b] =", 1)[0].replace(", E[c,a,b]", "")), 0)
    assert any(t.view_of == "C" for t in alone.problem.program.tensors)
    rewrite = ttgt(problem, 0)
    assert not any(t.view_of == "C" for t in rewrite.problem.program.tensors)
    assert rewrite.count == 4  # A's transpose, B's copy, the GEMM, C permuted back
    run_cpu(rewrite)
    run_emulated(rewrite)


def test_concurrent_calls_never_share_temporaries() -> None:
    from concurrent.futures import ThreadPoolExecutor

    kernel = einkern.compile(CHAIN, backend="cpu")
    assert kernel.compiled.program.temporaries
    seeds = list(range(8))
    with ThreadPoolExecutor(max_workers=4) as pool:
        errors = list(pool.map(lambda s: assert_matches_reference(kernel, seed=s), seeds))
    assert all(e["C"] <= 1e-12 for e in errors)


def test_einsum_pairwise_steps_get_the_choice() -> None:
    """A pairwise einsum step is compiled with rewrite=("split_k", "ttgt"): on the
    CUDA model a long reduction is split; on the CPU backend nothing changes."""
    from einkern.einsum import Operand, einsum_program

    operands = [
        Operand("ik", (64, 100_000), "float64", "row"),
        Operand("kj", (100_000, 64), "float64", "row"),
    ]
    program = einsum_program(operands, Operand("ij", (64, 64), "float64", "row"))
    problem = make_problem(program, {})
    chosen = plan_rewrites(problem, "cuda", ("split_k", "ttgt"))
    assert [r.name for r in chosen.rewrites] == ["split_k"]
    a, b = np.random.default_rng(0).random((2, 40, 30))
    c = np.ascontiguousarray(a[:, :7])
    result = einkern.einsum("ik,jk,jl->il", a, b, c, backend="cpu")
    np.testing.assert_allclose(result, np.einsum("ik,jk,jl->il", a, b, c), rtol=1e-12)
    plan_text = str(einkern.einsum_plan("ik,jk,jl->il", a, b, c, backend="cpu"))
    assert "step 1" in plan_text


def test_split_k_of_a_dot_product() -> None:
    """A rank-0 output: one block without split-K; the plan takes ~2 waves of slices."""
    problem = problem_of("dims k=100000\ntensor x[k], y[k], d[]\nd[] = x[k]*y[k]\n")
    chosen = plan_rewrites(problem, "cuda")
    assert [r.name for r in chosen.rewrites] == ["split_k"]
    run_cpu(chosen.rewrites[0])
    run_emulated(chosen.rewrites[0])


def random_contraction(rng: np.random.Generator) -> str:
    """A binary contraction with random index groups, orders, layouts, dtype and op."""
    letters = iter("abcdefghpq")
    groups = {
        g: [next(letters) for _ in range(int(rng.integers(low, high + 1)))]
        for g, low, high in (("batch", 0, 1), ("m", 0, 2), ("n", 1, 2), ("k", 1, 2))
    }
    a = groups["batch"] + groups["m"] + groups["k"]
    b = groups["batch"] + groups["k"] + groups["n"]
    c = groups["batch"] + groups["m"] + groups["n"]
    a, b, c = (list(rng.permutation(x)) for x in (a, b, c))
    sizes = {i: int(rng.integers(2, 7)) for i in a + b}
    dims = ", ".join(f"n{i}={s}" for i, s in sizes.items())
    dtype = str(rng.choice(["float32", "float64"]))
    layouts = [str(rng.choice(["row", "column"])) for _ in range(3)]
    tensors = "\n".join(
        f"tensor {name}[{', '.join('n' + i for i in idx)}] {dtype} {layout}"
        for name, idx, layout in zip("ABC", (a, b, c), layouts, strict=True)
    )
    op = str(rng.choice(["=", "+=", "-="]))
    return f"dims {dims}\n{tensors}\nC[{','.join(c)}] {op} A[{','.join(a)}] * B[{','.join(b)}]\n"


@pytest.mark.parametrize("seed", range(8))
def test_random_contractions_rewritten(seed: int) -> None:
    """TTGT and split-K of random binary contractions, on the CPU backend."""
    problem = problem_of(random_contraction(np.random.default_rng(seed)))
    try:
        run_cpu(ttgt(problem, 0))
    except RewriteError as error:  # only a plain GEMM is refused
        assert "plain GEMM" in error.message
    run_cpu(split_k(problem, 0, 2))


def test_rewritten_cuda_source_compiles_with_nvrtc() -> None:
    """Every kernel of a rewritten problem (views, padded copies, transposes, GEMM over
    fused groups) compiles for sm_90 without spills."""
    from einkern.backends.cuda.resources import kernel_resources

    padded = split_k(
        problem_of(LONG.format(k=1001, layout="column", dtype="float32", op="+=")), 0, 8
    )
    shape = PERMUTED.format(
        layout="row", dtype="float64", out="c, a, b", out_indices="c,a,b", op="-="
    )
    for rewrite in (padded, ttgt(problem_of(shape), 0)):
        resources = kernel_resources(rewrite.problem, "sm_90")
        assert len(resources) == rewrite.count
        assert all(r.spill_stores == 0 for r in resources)
