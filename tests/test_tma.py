"""Warpgroup-MMA kernels staged by TMA (:mod:`einkern.gpu.mma_tma`): run in the
CPU emulator against the reference on several index structures (K-major and
M/N-major operands, index groups of several indices, batches, edges the tiles
do not divide); the maps' boxes and refusals; compiled by NVRTC for sm_90a
without spills; chosen by the decision for bf16 GEMM; and planted faults — the
mbarrier wait dropped, its parity flipped, the bytes armed short, a box read
with its coordinates swapped — caught."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import problem_of
from test_lowp_mma import check, half_problem
from test_wgmma import _edit, _error, assert_sm90a_without_spills

from einkern.gpu import kir
from einkern.gpu.contraction import gemm_form
from einkern.gpu.cuda_printer import print_cuda
from einkern.gpu.decision import choose
from einkern.gpu.mma_lower import MmaConfig, lower_mma, problems
from einkern.gpu.mma_model import WARPGROUP_TILES, mma_candidates
from einkern.gpu.mma_tma import group_box, operand_map
from einkern.ir.task import statement_task
from einkern.testing import output_tolerance

pytest.importorskip("torch")  # bfloat16 host arrays


def tile(warps: int, tiles_n: int, stages: int = 3, kind: str = "bf16") -> MmaConfig:
    return MmaConfig(f"wgmma_k16_{kind}", warps, 1, 1, tiles_n, 64, stages=stages, copy="tma")


TILES = {"64x64 s3": tile(4, 8), "128x64 s4": tile(8, 8, 4), "64x128 s3": tile(4, 16)}

FOUR = (
    "tensor A[a,k,b,l], B[l,c,k,d]\ntensor C[a,b,c,d] {out}\nC[p,q,r,s] = A[p,x,q,y] * B[y,r,x,s]"
)
#: Extents TMA can stage (strides multiples of 16 bytes; a group's inner
#: extents dividing the tile or a multiple of it), with edges the tiles do not divide.
CASES = {
    "gemm": ("gemm", dict(m=72, n=136, k=200)),
    "gemm-column": ("gemm-column", dict(m=72, n=40, k=72)),
    "batched-row": ("batched-row", dict(b=3, m=40, n=72, k=96)),
}


def four_index(dtype: str = "bfloat16", **extents):
    sizes = dict(a=5, b=16, c=3, d=64, k=3, l=64) | extents
    dims = ", ".join(sizes)
    text = f"program t\ndims {dims}\ndtype {dtype}\n{FOUR.format(out='float32')}\n"
    return problem_of(text, **sizes)


@pytest.mark.parametrize("case", sorted(CASES))
def test_index_structures(case):
    name, extents = CASES[case]
    problem = half_problem(name, "bfloat16", "float32", extents)
    for config in TILES.values():
        assert not problems(statement_task(problem, 0), config)
        check(problem, config)


def test_index_groups_of_several_indices():
    """M = (a, b) with b = 16 dividing the tile, K = (k, l) and N = (c, d) with the
    stride-1 indices l and d of 64: boxes of several dimensions."""
    problem = four_index()
    task = statement_task(problem, 0)
    c, _ = gemm_form(task)
    a_map = operand_map(c, TILES["64x64 s3"], "a")
    assert isinstance(a_map, kir.TensorMap)
    assert [(d.index, d.box) for d in a_map.dims][:2] == [("y", 64), ("q", 16)]
    for config in TILES.values():
        check(problem, config)
    check(four_index("float16"), replace(TILES["64x64 s3"], shape="wgmma_k16_f16"))


def test_group_boxes():
    task = statement_task(four_index(b=16, a=5), 0)
    c, _ = gemm_form(task)
    m = c.m  # (p, q) over the dims (a, b), q inner
    assert group_box(c, m, 64) == [("q", 16), ("p", 4)]
    assert group_box(c, m, 8) == [("q", 8), ("p", 1)]
    assert group_box(c, m, 256) == [("q", 16), ("p", 16)]  # p: outermost, past its extent
    odd = gemm_form(statement_task(four_index(b=24), 0))[0]
    assert group_box(odd, odd.m, 64) is None  # 24 neither divides 64 nor is a multiple


def test_refusals():
    config = TILES["64x64 s3"]
    short = four_index(l=40)  # A's stride-1 index: 40 elements, not a 128-byte line
    assert any("multiple of 64" in p for p in problems(statement_task(short, 0), config))
    odd = four_index(b=24)  # M = (a, b): a 64-row tile is not a box
    assert any("not a box" in p for p in problems(statement_task(odd, 0), config))
    unaligned = half_problem("gemm", "bfloat16", "float32", dict(m=64, n=64, k=100))
    assert any("16 bytes" in p for p in problems(statement_task(unaligned, 0), config))
    gemm = half_problem("gemm", "bfloat16", "float32", CASES["gemm"][1])
    assert any("stages" in p for p in problems(statement_task(gemm, 0), replace(config, stages=2)))
    f64 = replace(MmaConfig(), copy="tma")
    dgemm = problem_of(
        "program d\ndims m, n, k\ntensor A[m,k], B[k,n], C[m,n]\nC[i,j] = A[i,k] * B[k,j]\n",
        m=64,
        n=64,
        k=64,
    )
    assert any("warpgroup" in p for p in problems(statement_task(dgemm, 0), f64))


def test_planted_faults_are_caught():
    problem = half_problem("gemm", "bfloat16", "float32", CASES["gemm"][1])
    kernel = lower_mma(statement_task(problem, 0), TILES["128x64 s4"])
    tolerance = output_tolerance(problem, "C")
    assert _error(problem, kernel) == (pytest.approx(0.0, abs=tolerance), 0)

    def no_wait(s):
        if isinstance(s, kir.PerThread):
            body = tuple(x for x in s.body if not isinstance(x, kir.BarrierWait))
            return replace(s, body=body) if body else None
        return s

    def flipped(s):
        if isinstance(s, kir.PerThread):
            return replace(
                s,
                body=tuple(
                    replace(x, parity=kir.Op("-", kir.Int(1), x.parity))
                    if isinstance(x, kir.BarrierWait)
                    else x
                    for x in s.body
                ),
            )
        return s

    def _walk_stmts(s, change):
        if isinstance(s, kir.If):
            return replace(
                s,
                body=tuple(_walk_stmts(x, change) for x in s.body),
                orelse=tuple(_walk_stmts(x, change) for x in s.orelse),
            )
        return change(s)

    def in_stmts(change):
        def section(s):
            if isinstance(s, kir.PerThread):
                return replace(s, body=tuple(_walk_stmts(x, change) for x in s.body))
            return s

        return section

    def short(x):
        return replace(x, bytes=x.bytes - 128) if isinstance(x, kir.BarrierArm) else x

    def swapped(x):
        if isinstance(x, kir.TensorCopy) and x.map == "tm_a":
            return replace(x, coords=x.coords[::-1])
        return x

    wrong = {
        "wait dropped": replace(kernel, body=_edit(kernel.body, no_wait)),
        "parity flipped": replace(kernel, body=_edit(kernel.body, flipped)),
        "box coordinates swapped": replace(kernel, body=_edit(kernel.body, in_stmts(swapped))),
    }
    for name, bad in wrong.items():
        error, accesses = _error(problem, bad)
        assert error > 100 * tolerance or accesses > 0, name
    _, accesses = _error(problem, replace(kernel, body=_edit(kernel.body, in_stmts(short))))
    assert accesses > 0  # the bytes armed differ from the bytes copied


def test_kernels_compile_for_sm90a_without_spills():
    pytest.importorskip("cuda.bindings.nvrtc")
    problem = half_problem("gemm", "bfloat16", "bfloat16", dict(m=1000, n=1024, k=1024))
    task = statement_task(problem, 0)
    for config in [*WARPGROUP_TILES["bfloat16"], *TILES.values()]:
        config = replace(config, copy="tma")
        text = print_cuda(lower_mma(task, config))
        assert "cp.async.bulk.tensor.2d" in text and "__grid_constant__ ek_tmap" in text
        assert "cp.async.cg" not in text and "fence.proxy.async.shared::cta" in text
        assert_sm90a_without_spills(text)


def test_the_decision_takes_tma_for_bf16_gemm():
    text = (
        "program g\ndims m, n, k\ndtype bfloat16\ntensor A[m,k], B[k,n]\n"
        "tensor C[m,n] float32\nC[i,j] = A[i,k] * B[k,j]\n"
    )
    task = statement_task(problem_of(text, m=8192, n=8192, k=8192), 0)
    offered = mma_candidates(task)
    assert {t.copy for t in offered if t.shape.startswith("wgmma")} == {"tma", "async"}
    chosen = choose(task)
    assert chosen.config.mma is not None and chosen.config.mma.copy == "tma", chosen.steps
    assert "TMA" in dict(chosen.steps)["model-choice"]
