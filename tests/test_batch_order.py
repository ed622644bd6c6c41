"""The batch order across blocks as a decision (``block_order.batch_order``):
where the output's contiguous index is a batch index, the tensor-core kernel
launches the batch fastest when the output sectors that lets L2 merge are
predicted to cost more than the operand panels it re-reads; the rewrite plan
then weighs the direct kernel with that order (docs/tensor_cores.md, "The batch
order across blocks")."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import problem_of
from test_batch_contiguous import GATHERED
from test_block_order import _value

from einkern.api import plan_rewrites
from einkern.backends.verify import verify
from einkern.gpu import decision, kir, mma_model
from einkern.gpu.block_order import batch_order, batch_reread_seconds, panels
from einkern.gpu.contraction import gemm_form
from einkern.gpu.device import H100
from einkern.gpu.mma_builder import TileBuilder
from einkern.gpu.mma_config import MmaConfig
from einkern.gpu.mma_lower import lower_mma
from einkern.gpu.mma_model import F64_TILES, batch_sector_seconds
from einkern.ir.task import statement_task

#: jtv,gbnotv->bgjnot (seed 47's case 52, row-major): the output's contiguous
#: index t is a batch index of extent 3.  Measured on an H100: 0.856 ms by TTGT,
#: 0.896 ms direct with the batch slowest, 0.643 ms with it fastest.
OUTPUT_BATCH = (
    "program c\ndims nt, nj, nb, ng, no, nn, nv\ndtype float64\nlayout row\n"
    "tensor A[nj, nt, nv], B[ng, nb, nn, no, nt, nv], C[nb, ng, nj, nn, no, nt]\n"
    "C[b,g,j,n,o,t] = A[j,t,v] * B[g,b,n,o,t,v]\n"
)
SIZES = {"nt": 3, "nj": 2031, "nb": 8, "ng": 4, "no": 12, "nn": 6, "nv": 942}
#: Only an operand's contiguous index (v, of A) is a batch index.
OPERAND_BATCH = GATHERED


def _task(text: str, **extents: int):
    return statement_task(problem_of(text, **extents), 0)


def test_the_decision_launches_the_batch_fastest_where_the_output_needs_it():
    task = _task(OUTPUT_BATCH, **SIZES)
    chosen = decision.choose(task, H100)
    steps = dict(chosen.steps)
    assert chosen.config.mma is not None and chosen.config.mma.batch_inner
    assert steps["batch-order"].startswith("batch fastest across blocks")
    assert "output's contiguous index t is a batch index" in steps["batch-order"]
    operand = _task(OPERAND_BATCH, nl=846, nx=1261, nv=22, nn=750)
    other = decision.choose(operand, H100)
    assert other.config.mma is not None and not other.config.mma.batch_inner
    assert "batch-order" not in dict(other.steps)


def test_the_batch_stays_slowest_where_the_panels_it_re_reads_cost_more(monkeypatch):
    task = _task(OUTPUT_BATCH, **SIZES)
    tile = F64_TILES[0]
    chosen = batch_order(task, tile, H100)
    assert chosen is not None and chosen[0]
    monkeypatch.setattr(mma_model, "BATCH_SECTOR_COST", 1e-3)  # sectors nearly free
    kept = batch_order(task, tile, H100)
    assert kept is not None and not kept[0] and kept[1].startswith("batch slowest")


def test_only_the_outputs_sectors_are_relieved_by_the_batch_order():
    """A and C batch-contiguous (w, v): with the batch fastest A's term stays."""
    text = (
        "program c\ndims nw, nm, nx, no, nv, np\ndtype float64\nlayout row\n"
        "tensor A[nm, nx, no, nw, nv], B[nv, np, nx, nw, nm], C[nw, np, no, nv]\n"
        "C[w,p,o,v] = A[m,x,o,w,v] * B[v,p,x,w,m]\n"
    )
    task = _task(text, nw=2, nm=8, nx=33, no=511, nv=4, np=555)
    c = gemm_form(task)[0]
    assert c.output.contiguous() in c.batch and c.a.contiguous() in c.batch
    tile = F64_TILES[0]
    slowest = batch_sector_seconds(task, tile, H100)
    fastest = batch_sector_seconds(task, replace(tile, batch_inner=True), H100)
    assert 0 < fastest < slowest
    a_only = _task(OPERAND_BATCH, nl=846, nx=1261, nv=22, nn=750)
    assert batch_sector_seconds(a_only, replace(tile, batch_inner=True), H100) == (
        batch_sector_seconds(a_only, tile, H100)
    )


def test_the_panels_re_read_follow_the_kernels_block_order():
    """The model's order is the generated kernel's, block by block, and the batch
    fastest re-reads panels that the default order shares."""
    task = _task(OUTPUT_BATCH, **SIZES)
    c = gemm_form(task)[0]
    tile = replace(F64_TILES[0], group_m=4, batch_inner=True)
    grid = panels(task, c, tile)
    builder = TileBuilder(task, c, tile, "x")
    within, batch = builder.block_split(kir.BlockIdx())
    tm, tn = builder.block_tile_coordinates(within)
    for block in range(0, grid.tiles_m * grid.tiles_n * grid.batches, 7):
        assert grid.tile(block, 4, True) == (
            _value(batch, block),
            _value(tm, block),
            _value(tn, block),
        )
    assert batch_reread_seconds(task, replace(tile, batch_inner=False), H100) == 0.0
    many = _task(OUTPUT_BATCH, **{**SIZES, "nt": 300, "nj": 256, "nb": 2, "ng": 1})
    assert batch_reread_seconds(many, tile, H100) > 0.0


def test_the_rewrite_plan_weighs_the_direct_kernel_in_its_batch_order(monkeypatch):
    problem = problem_of(OUTPUT_BATCH, **SIZES)
    taken = plan_rewrites(problem, "cuda")
    assert taken.rewrites == ()
    assert "operand panels re-read: the batch is fastest across blocks" in " ".join(taken.explain())
    monkeypatch.setattr(decision, "batch_order", lambda *args: None)
    assert [r.name for r in plan_rewrites(problem, "cuda").rewrites] == ["ttgt"]


@pytest.mark.parametrize("layout", ["row", "column"])
def test_the_batch_fastest_kernel_computes_the_reference(layout):
    text = OUTPUT_BATCH.replace("layout row", f"layout {layout}")
    problem = problem_of(text, nt=3, nj=37, nb=2, ng=3, no=5, nn=2, nv=9)
    config = MmaConfig("m16n8k4_f64", 1, 2, 1, 1, 4, batch_inner=True)
    kernel = lower_mma(statement_task(problem, 0), config)
    result = verify(problem, {0: None}, seed=11, kernels=[kernel])
    assert result.bad_accesses == 0 and result.max_relative_error <= 1e-12, result
