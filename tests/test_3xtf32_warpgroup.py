"""3xTF32 on Hopper's warpgroup MMA, checked in the CPU emulator: A split in
registers, B's low parts written to shared memory per k-step, each step's
products summed apart and added to the accumulators in fp32; index structures
and edges within fp32's tolerance; planted faults (the barrier after the low
parts dropped, their proxy fence dropped, one low-part buffer instead of two,
the step sums not kept apart), each caught; NVRTC for sm_90a without spills;
the decision."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_tf32_warpgroup import PROGRAMS, TILES, _in_loop, assert_tiles_compile
from test_tf32_warpgroup import problem as tf32_problem
from test_tf32_warpgroup import run as tf32_run
from test_wgmma import _edit

from einkern.gpu import kir
from einkern.gpu.decision import choose
from einkern.gpu.mma_lower import lower_mma, problems
from einkern.gpu.mma_model import SPLIT_WARPGROUP_TILES, TF32_TILES, mma_candidates
from einkern.ir.task import statement_task
from einkern.semantics import tolerance

FP32 = tolerance("float32")
SPLIT = [replace(t, split=True) for t in TILES]


def problem(text: str):
    return tf32_problem(text, "3xtf32")


def run(p, kernel):
    return tf32_run(p, kernel, seed=5)


@pytest.mark.parametrize("case", sorted(PROGRAMS))
def test_index_structures(case):
    p = problem(PROGRAMS[case])
    task = statement_task(p, 0)
    for config in SPLIT:
        assert not problems(task, config), (config, problems(task, config))
        error, bad, errors = run(p, lower_mma(task, config))
        assert bad == 0, errors[:3]
        assert error < 2e-6, (config, error)  # fp32-level (tf32 alone: ~1e-4)


def _low_parts(kernel):
    """The index in the k loop of the section storing B's low parts."""
    loop = next(s for s in kernel.body if isinstance(s, kir.Uniform))
    return next(
        i
        for i, s in enumerate(loop.body)
        if isinstance(s, kir.PerThread)
        and any(isinstance(x, kir.Store) and x.array == "Bl" for x in s.body)
    )


GEMM = "dims m = 72, n = 64, k = 200\ntensor A[m,k], B[k,n], C[m,n]\nC[i,j] = A[i,k] * B[k,j]\n"


@pytest.mark.parametrize("config", [SPLIT[0], SPLIT[2]], ids=["tma", "async"])
def test_planted_faults_are_caught(config):
    p = problem(GEMM)
    kernel = lower_mma(statement_task(p, 0), config)
    at = _low_parts(kernel)
    error, bad, _ = run(p, kernel)
    assert bad == 0 and error < 2e-6

    def no_barrier(body):  # the MMAs may read the low parts before all are stored
        assert isinstance(body[at + 1], kir.Barrier)
        return tuple(body[: at + 1] + body[at + 2 :])

    _, bad, errors = run(p, _in_loop(kernel, no_barrier))
    assert bad > 0 and any("between its issue and its completion" in e for e in errors)

    def no_fence(body):  # the tensor cores may not see the threads' stores
        stores = body[at].body
        assert isinstance(stores[-1], kir.ProxyFence)
        return (*body[:at], replace(body[at], body=stores[:-1]), *body[at + 1 :])

    _, bad, errors = run(p, _in_loop(kernel, no_fence))
    assert bad > 0 and any("without a proxy fence" in e for e in errors)

    size = next(a.size for a in kernel.shared if a.name == "Bl") // 2

    def one_buffer(s):  # the step before's MMAs still read the buffer stored into
        if isinstance(s, kir.PerThread):
            body = tuple(
                replace(x, index=kir.Op("%", x.index, kir.Int(size)))
                if isinstance(x, kir.Store) and x.array == "Bl"
                else x
                for x in s.body
            )
            return replace(s, body=body)
        if isinstance(s, kir.WarpGroupMma) and s.b.shared == "Bl":
            return replace(s, b=replace(s.b, index=kir.Op("%", s.b.index, kir.Int(size))))
        return s

    _, bad, errors = run(p, replace(kernel, body=_edit(kernel.body, one_buffer)))
    assert bad > 0 and any("between its issue and its completion" in e for e in errors)


def _unpromoted(s):
    """Every product accumulated in the accumulators directly (no step sums)."""
    if isinstance(s, kir.WarpGroupMma):
        return replace(s, d=replace(s.d, var="acc"), accumulate=True)
    if isinstance(s, kir.Mma) and s.d.var == "part":
        return replace(s, d=replace(s.d, var="acc"), c=replace(s.c, var="acc"))
    return s


def test_step_sums_keep_fp32_accuracy_over_long_reductions():
    """The emulator truncates each float32 MMA sum as the tensor cores do: over
    4096 positive terms that bias exceeds fp32's tolerance unless each step's
    products are summed apart and added in fp32 (warpgroup and mma.sync tiles)."""
    p = problem(
        "dims m = 64, n = 64, k = 4096\ntensor A[m,k], B[k,n], C[m,n]\nC[i,j] = A[i,k] * B[k,j]\n"
    )
    task = statement_task(p, 0)
    for config in (SPLIT[0], replace(TF32_TILES[2], split=True)):
        kernel = lower_mma(task, config)
        error, bad, _ = run(p, kernel)
        assert bad == 0 and error < 2e-6, (config.shape, error)
        error, bad, _ = run(p, replace(kernel, body=_edit(kernel.body, _unpromoted)))
        assert bad == 0 and error > FP32, (config.shape, error)


def test_kernels_compile_for_sm90a_without_spills():
    assert_tiles_compile(problem, SPLIT_WARPGROUP_TILES)


def test_the_decision_takes_warpgroup_3xtf32_for_sgemm():
    text = (
        "dims m = 8192, n = 8192, k = 8192\ntensor A[m,k], B[k,n], C[m,n]\n"
        "C[i,j] = A[i,k] * B[k,j]\n"
    )
    task = statement_task(problem(text), 0)
    offered = mma_candidates(task)
    assert all(t.split for t in offered)
    assert {t.block_tile() for t in offered if t.shape == "wgmma_k8_tf32"} == {
        (128, 128),
        (64, 128),
    }
    chosen = choose(task).config.mma
    assert chosen is not None and chosen.shape == "wgmma_k8_tf32" and chosen.split
    assert chosen.copy == "tma" and chosen.block_tile() == (128, 128)
