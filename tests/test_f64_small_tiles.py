"""The small fp64 tensor-core tiles (32×32, 32×64, 64×32; einkern.gpu.mma_model
F64_SMALL_TILES): offered where the 64×64 tile leaves SMs idle, chosen for a
small DGEMM, and computing what the reference computes in the CPU emulator."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import problem_of

from einkern.backends.emulator import emulate
from einkern.gpu.decision import choose
from einkern.gpu.mma_lower import lower_mma
from einkern.gpu.mma_model import (
    F64_MIN_FLOPS,
    F64_SMALL_TILES,
    F64_TILES,
    MIN_FLOPS,
    mma_candidates,
)
from einkern.ir.task import statement_task
from einkern.reference import evaluate
from einkern.testing import random_arrays

GEMM = (
    "program g\ndims m, n, k\ndtype float64\n"
    "tensor A[m,k], B[k,n], C[m,n]\nC[i,j] = A[i,l] * B[l,j]\n"
)


def _task(m: int, n: int, k: int, text: str = GEMM):
    return statement_task(problem_of(text, m=m, n=n, k=k), 0)


def test_the_small_tiles_are_the_ones_under_64_by_64():
    assert len(F64_SMALL_TILES) == 3
    assert {t.block_tile() for t in F64_SMALL_TILES} == {(32, 32), (32, 64), (64, 32)}
    assert all(t in F64_TILES for t in F64_SMALL_TILES)
    assert F64_MIN_FLOPS < MIN_FLOPS


def test_small_tiles_only_where_the_64_by_64_tile_leaves_sms_idle():
    small = mma_candidates(_task(256, 256, 256))  # 16 blocks of 64 x 64
    assert set(F64_SMALL_TILES) <= set(small)
    large = mma_candidates(_task(2048, 2048, 256))  # 1024 blocks of 64 x 64
    assert large and not set(F64_SMALL_TILES) & set(large)
    assert set(F64_SMALL_TILES) <= set(mma_candidates(_task(2048, 2048, 256), tuning=True))
    # the same problem on a GPU of few SMs leaves none idle
    assert not set(F64_SMALL_TILES) & set(mma_candidates(_task(256, 256, 256), sm_count=8))


def test_fp64_tiles_below_the_other_types_threshold():
    """DGEMM 256 (3.4e7 flops) is below MIN_FLOPS but above F64_MIN_FLOPS."""
    assert 2 * 256**3 < MIN_FLOPS
    assert mma_candidates(_task(256, 256, 256))
    assert not mma_candidates(_task(64, 64, 64))  # 5.2e5 flops


def test_the_decision_takes_a_small_tile_for_a_small_dgemm():
    decision = choose(_task(96, 640, 680))  # 20 blocks of 64 x 64
    tile = decision.config.mma
    assert tile is not None and tile in F64_SMALL_TILES, decision.config
    big = choose(_task(2048, 2048, 2048)).config.mma
    assert big is not None and big not in F64_SMALL_TILES


@pytest.mark.parametrize("tile", F64_SMALL_TILES, ids=lambda t: "x".join(map(str, t.block_tile())))
def test_small_tiles_compute_the_reference_with_edges(tile):
    text = (
        "program g\ndims m, n, k\ndtype float64\nlayout column\n"
        "tensor A[k,m], B[n,k], C[m,n]\nC[i,j] -= A[l,i] * B[j,l]\n"
    )
    problem = problem_of(text, m=45, n=70, k=37)  # no extent a multiple of a tile
    kernel = lower_mma(statement_task(problem, 0), tile)
    arrays = random_arrays(problem, 5)
    want = evaluate(problem, arrays, {})
    given = {f"p_{k}": v.copy(order="K") for k, v in arrays.items()}
    report = emulate([kernel], given, {})
    assert report.ok, report
    np.testing.assert_allclose(given["p_C"], want["C"], rtol=1e-12, atol=1e-12)


def test_small_tiles_compile_without_spills():
    pytest.importorskip("cuda.bindings.nvrtc")
    from einkern.backends.cuda.nvrtc import compile_cubin
    from einkern.gpu.cuda_printer import print_cuda

    text = (
        "program g\ndims a, b, c, d, k, l\ndtype float64\n"
        "tensor A[a,k,b,l], B[l,c,k,d], C[a,b,c,d]\nC[p,q,r,s] = A[p,x,q,y] * B[y,r,x,s]\n"
    )
    task = statement_task(problem_of(text, a=12, b=20, c=16, d=24, k=12, l=8), 0)
    for tile in F64_SMALL_TILES:  # m16n8k4 in fp64 is an sm_90 instruction
        module = compile_cubin(print_cuda(lower_mma(task, tile)), "sm_90")
        assert all(r.spill_stores == 0 and r.spill_loads == 0 for r in module.resources)
