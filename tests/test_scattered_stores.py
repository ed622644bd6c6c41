"""The direct epilogue's scattered stores (``mma_model.scattered_store_seconds``):
where every lane of a warp's store writes a 128-byte line of its own, the rewrite
plan charges the direct tensor-core kernel for its output, so that it takes TTGT
(whose GEMM writes whole lines) where that pays; elsewhere the charge is zero."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import problem_of
from test_batch_contiguous import _task

from einkern.api import plan_rewrites
from einkern.gpu import mma_model
from einkern.gpu.contraction import gemm_form
from einkern.gpu.device import H100
from einkern.gpu.mma_model import F64_TILES, scattered_store_seconds, store_lines

#: Seed 47's case 84 (column-major): the output's contiguous index j is the
#: middle index of the M group (d, j, i), so the rows of a warp's store (i)
#: are 17 × 80 elements apart.  H100: direct kernel 0.419 ms, TTGT 0.244 ms.
SCATTERED = (
    "program c\ndims ni, nd, nj, nq, nu, na, nk\ndtype float64\nlayout column\n"
    "tensor A[ni, nu, na, nd, nj, nk], B[nu, na, nq, nk], C[nj, nd, ni, nq]\n"
    "C[j,d,i,q] = A[i,u,a,d,j,k] * B[u,a,q,k]\n"
)
EXTENTS = {"ni": 21, "nd": 80, "nj": 17, "nq": 484, "nu": 5, "na": 9, "nk": 5}
GEMM = (
    "program g\ndims m, n, k\ndtype float64\nlayout column\n"
    "tensor A[m, k], B[k, n], C[m, n]\nC[i,j] = A[i,k] * B[k,j]\n"
)
#: A batched product whose output's contiguous index is the batch (b).
BATCH_FIRST = (
    "program b\ndims nb, nm, nn, nk\ndtype float64\nlayout column\n"
    "tensor A[nb, nm, nk], B[nb, nk, nn], C[nb, nm, nn]\n"
    "C[b,m,n] = A[b,m,k] * B[b,k,n]\n"
)


def test_a_warp_store_of_the_scattered_output_touches_32_lines():
    task = _task(SCATTERED, **EXTENTS)
    c, _ = gemm_form(task)
    assert c.output.contiguous() == "j" and c.m[-1] != "j"
    assert store_lines(c, F64_TILES[0], 8) == 32
    gemm = _task(GEMM, m=1024, n=1024, k=1024)
    assert store_lines(gemm_form(gemm)[0], F64_TILES[0], 8) == 4  # 8 rows of 64 bytes


def test_the_charge_is_the_outputs_bytes_where_every_lane_has_its_line():
    task = _task(SCATTERED, **EXTENTS)
    tile = F64_TILES[0]
    output = 17 * 80 * 21 * 484 * 8
    scale = mma_model.SIMT_MODEL_SCALE["f64"]
    expected = mma_model.SCATTERED_STORE_COST * output / H100.dram_bandwidth * scale
    assert scattered_store_seconds(task, tile, H100) == pytest.approx(expected)
    update = _task(SCATTERED.replace("C[j,d,i,q] =", "C[j,d,i,q] +="), **EXTENTS)
    assert scattered_store_seconds(update, tile, H100) == pytest.approx(2 * expected)
    assert scattered_store_seconds(task, replace(tile, epilogue="shared"), H100) == 0.0
    assert scattered_store_seconds(_task(GEMM, m=1024, n=1024, k=1024), tile, H100) == 0.0
    batched = _task(BATCH_FIRST, nb=8, nm=300, nn=300, nk=300)
    c, _ = gemm_form(batched)
    assert c.output.contiguous() in c.batch  # charged by batch_sector_seconds instead
    assert scattered_store_seconds(batched, tile, H100) == 0.0


def test_the_rewrite_plan_takes_ttgt_for_the_scattered_output(monkeypatch):
    problem = problem_of(SCATTERED, **EXTENTS)
    taken = plan_rewrites(problem, "cuda")
    assert [r.name for r in taken.rewrites] == ["ttgt"]
    assert "writes a 128-byte line of its own" in " ".join(taken.explain())
    monkeypatch.setattr(mma_model, "SCATTERED_STORE_COST", 0.0)
    assert plan_rewrites(problem, "cuda").rewrites == ()
