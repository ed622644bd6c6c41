"""tf32 on Hopper's warpgroup MMA (``wgmma_k8_tf32``), checked in the CPU
emulator: operands read K-major from swizzled shared tiles, A read from
registers where it is not K-major, A and B exchanged where only A is, TMA and
cp.async staging, edges and index groups; the refusals; planted faults in the
register form (the wait after the registers were refilled, the barrier before
the last wait dropped, a wrong register layout); NVRTC for sm_90a without
spills; the decision."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_wgmma import _edit, assert_sm90a_without_spills

import einkern
from einkern.api import with_precision
from einkern.backends.verify import verify
from einkern.gpu import kir
from einkern.gpu.contraction import gemm_form
from einkern.gpu.cuda_printer import print_cuda
from einkern.gpu.decision import choose
from einkern.gpu.mma_lower import MmaConfig, lower_mma, mma_form, problems
from einkern.gpu.mma_model import TF32_WARPGROUP_TILES, mma_candidates
from einkern.gpu.mma_warpgroup import oriented, registers_a
from einkern.ir.bind import make_problem
from einkern.ir.task import statement_task
from einkern.semantics import TF32_TOLERANCE


def tile(warps: int, tiles_n: int, copy: str, stages: int = 3) -> MmaConfig:
    return MmaConfig("wgmma_k8_tf32", warps, 1, 1, tiles_n, 32, stages=stages, copy=copy)


TILES = [tile(4, 8, "tma"), tile(8, 16, "tma", 4), tile(4, 8, "async"), tile(8, 8, "async", 4)]

PROGRAMS = {
    "a·bᵀ (both K-major)": "dims m = 72, n = 136, k = 100\ntensor A[m,k], B[n,k], C[m,n]\n"
    "C[i,j] = A[i,k] * B[j,k]\n",
    "a·b (exchanged)": "dims m = 72, n = 136, k = 100\ntensor A[m,k], B[k,n], C[m,n]\n"
    "C[i,j] = A[i,k] * B[k,j]\n",
    "aᵀ·bᵀ (A from registers)": "dims m = 96, n = 40, k = 72\ntensor A[k,m], B[n,k], C[m,n]\n"
    "scalar alpha\nC[i,j] += alpha * A[k,i] * B[j,k]\n",
    "column a·b": "layout column\ndims m = 64, n = 48, k = 96\ntensor A[m,k], B[k,n], C[m,n]\n"
    "C[i,j] = A[i,k] * B[k,j]\n",
    "batched": "dims b = 2, m = 40, n = 72, k = 64\ntensor A[b,m,k], B[b,k,n], C[b,m,n]\n"
    "C[b,i,j] = A[b,i,k] * B[b,k,j]\n",
    "index groups": "dims a = 5, b = 16, c = 3, d = 32, k = 3, l = 32\n"
    "tensor A[a,k,b,l], B[c,d,k,l], C[a,b,c,d]\nC[p,q,r,s] = A[p,x,q,y] * B[r,s,x,y]\n",
}


def problem(text: str, precision: str = "tf32"):
    """The float32 program ``text`` under ``precision``."""
    return make_problem(with_precision(einkern.load("dtype float32\n" + text), precision), {})


def run(p, kernel, seed: int = 3):
    result = verify(p, {0: None}, seed=seed, kernels=[kernel])
    return result.max_relative_error, result.bad_accesses, [str(e) for e in result.errors]


@pytest.mark.parametrize("case", sorted(PROGRAMS))
def test_index_structures(case):
    p = problem(PROGRAMS[case])
    task = statement_task(p, 0)
    for config in TILES:
        assert not problems(task, config), (config, problems(task, config))
        error, bad, errors = run(p, lower_mma(task, config))
        assert bad == 0, errors[:3]
        assert 1e-6 < error <= TF32_TOLERANCE, (config, error)  # tf32, not fp32


def test_orientation_and_register_operands():
    config = TILES[0]
    forms = {}
    for case in ("a·bᵀ (both K-major)", "a·b (exchanged)", "aᵀ·bᵀ (A from registers)"):
        c, _ = gemm_form(statement_task(problem(PROGRAMS[case]), 0))
        forms[case] = (oriented(c, config) is not c, registers_a(oriented(c, config), config))
    assert forms == {
        "a·bᵀ (both K-major)": (False, False),
        "a·b (exchanged)": (True, True),  # B along N: exchanged, then A (was B) in registers
        "aᵀ·bᵀ (A from registers)": (False, True),
    }
    task = statement_task(problem(PROGRAMS["a·b (exchanged)"]), 0)
    c, _ = mma_form(task, config)
    assert c.a.tensor == "B" and c.m == ("j",)
    text = print_cuda(lower_mma(task, config))
    assert "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32" in text
    assert "cvt.rna.tf32.f32" in text  # registers rounded on the way


def test_refusals():
    both = problem(
        "dims m = 64, n = 64, k = 64\ntensor A[k,m], B[k,n], C[m,n]\nC[i,j] = A[k,i] * B[k,j]\n"
    )
    found = problems(statement_task(both, 0), TILES[0])
    assert any("K-major only" in p for p in found)
    gemm = statement_task(problem(PROGRAMS["a·bᵀ (both K-major)"]), 0)
    assert not problems(gemm, replace(TILES[0], split=True))  # 3xTF32: test_3xtf32_warpgroup
    assert any("k_step" in p for p in problems(gemm, replace(TILES[0], k_step=64)))
    odd = problem(
        "dims m = 64, n = 64, k = 62\ntensor A[m,k], B[n,k], C[m,n]\nC[i,j] = A[i,k] * B[j,k]\n"
    )
    assert any("multiple of 4" in p for p in problems(statement_task(odd, 0), TILES[2]))
    assert any("16 bytes" in p for p in problems(statement_task(odd, 0), TILES[0]))


def _in_loop(kernel, change):
    """``kernel`` with ``change`` applied to the sections of its k loop."""

    def section(s):
        if isinstance(s, kir.Uniform):
            return replace(s, body=change(s.body))
        return s

    return replace(kernel, body=tuple(section(s) for s in kernel.body))


def test_planted_faults_in_the_register_form_are_caught():
    p = problem(PROGRAMS["a·b (exchanged)"])
    task = statement_task(p, 0)
    for config in (TILES[0], TILES[2]):
        kernel = lower_mma(task, config)
        error, bad, _ = run(p, kernel)
        assert bad == 0 and error <= TF32_TOLERANCE

        def late_wait(body):  # the registers refilled before the wait for their readers
            body = list(body)
            at = next(i for i, s in enumerate(body) if isinstance(s, kir.WarpGroupWait))
            body[at], body[at + 1] = body[at + 1], body[at]
            return tuple(body)

        error, bad, errors = run(p, _in_loop(kernel, late_wait))
        assert bad > 0 and any("changed before the wait" in e for e in errors), errors[:3]

        sections = list(kernel.body)
        last = max(i for i, s in enumerate(sections) if isinstance(s, kir.WarpGroupWait))
        assert isinstance(sections[last - 1], kir.Barrier)
        dropped = replace(kernel, body=tuple(sections[: last - 1] + sections[last:]))
        error, bad, errors = run(p, dropped)
        assert bad > 0 and any("before every lane issued" in e for e in errors), errors[:3]

        def rows_swapped(s):  # a1 <-> a0: rows g and g + 8 exchanged
            if isinstance(s, kir.PerThread):
                body = tuple(
                    replace(x, index=kir.Int(x.index.value ^ 1))
                    if isinstance(x, kir.Store) and x.array == "fa"
                    else x
                    for x in s.body
                )
                return replace(s, body=body)
            return s

        error, bad, _ = run(p, replace(kernel, body=_edit(kernel.body, rows_swapped)))
        assert error > 10 * TF32_TOLERANCE


def assert_tiles_compile(make_problem, tiles) -> None:
    """Every one of ``tiles``, cp.async and TMA, compiles for sm_90a without spills
    on the two GEMM layouts at 1000 × 1024 × 1024 (``make_problem`` binds a text)."""
    pytest.importorskip("cuda.bindings.nvrtc")
    for case in ("a·bᵀ (both K-major)", "a·b (exchanged)"):
        text = PROGRAMS[case].replace("m = 72, n = 136, k = 100", "m = 1000, n = 1024, k = 1024")
        task = statement_task(make_problem(text), 0)
        for config in tiles:
            for staged in (config, replace(config, copy="tma")):
                assert_sm90a_without_spills(print_cuda(lower_mma(task, staged)))


def test_kernels_compile_for_sm90a_without_spills():
    assert_tiles_compile(problem, TF32_WARPGROUP_TILES)


def test_the_decision_takes_warpgroup_tf32_for_sgemm():
    text = (
        "dims m = 8192, n = 8192, k = 8192\ntensor A[m,k], B[k,n], C[m,n]\n"
        "C[i,j] = A[i,k] * B[k,j]\n"
    )
    task = statement_task(problem(text), 0)
    offered = {(t.shape, t.copy) for t in mma_candidates(task)}
    assert {
        ("wgmma_k8_tf32", "tma"),
        ("wgmma_k8_tf32", "async"),
        ("m16n8k8_tf32", "registers"),
    } <= offered
    chosen = choose(task).config.mma
    assert chosen is not None and chosen.shape == "wgmma_k8_tf32" and chosen.copy == "tma"
    assert not any(t.shape.startswith("wgmma") for t in mma_candidates(task, arch="sm_80"))
    fp32 = make_problem(einkern.load("dtype float32\n" + text), {})
    assert not mma_candidates(statement_task(fp32, 0))  # fp32 precision: no tensor cores
