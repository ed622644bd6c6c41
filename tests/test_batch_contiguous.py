"""Batch indices in a tensor's contiguous index, on the tensor cores: the batch
order across blocks (``MmaConfig.batch_inner``) computes the reference's result in
the emulator and covers every tile of every batch once, its JSON form leaves the
default unchanged, and the cost of the sectors such a tensor shares across
batches (``mma_model.batch_sector_seconds``) makes the rewrite plan take TTGT for
a contraction where the direct kernel gathers them."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import problem_of
from test_block_order import BATCHED, _value

from einkern.api import plan_rewrites
from einkern.backends.verify import verify
from einkern.gpu import kir, mma_model
from einkern.gpu.block_order import batch_contiguous, with_block_orders
from einkern.gpu.contraction import gemm_form
from einkern.gpu.device import H100
from einkern.gpu.mma_builder import TileBuilder
from einkern.gpu.mma_config import MmaConfig
from einkern.gpu.mma_lower import lower_mma
from einkern.gpu.mma_model import F64_TILES, batch_sector_seconds
from einkern.ir.task import statement_task

#: A batch index (v) that is the contiguous index of A: each of A's sectors holds
#: elements of four batches (a batched GEMM over a 3-index operand, row-major).
GATHERED = (
    "program g\ndims nl, nx, nv, nn\n"
    "tensor A[nl, nx, nv], B[nv, nx, nn], C[nv, nl, nn]\n"
    "C[v,l,n] = A[l,x,v] * B[v,x,n]\n"
)
#: The same batched GEMM with the batch the slowest index of every tensor.
OUTER = BATCHED.replace("layout column\n", "")


@pytest.mark.parametrize("group", [1, 3])
def test_batch_inner_kernels_compute_the_reference(group):
    batched = problem_of(BATCHED, b=3, m=56, n=24, k=10)  # 4 x 3 tiles per batch
    config = MmaConfig("m16n8k4_f64", 1, 1, 1, 1, 4, group_m=group, batch_inner=True)
    kernel = lower_mma(statement_task(batched, 0), config)
    result = verify(batched, {0: None}, seed=5, kernels=[kernel])
    assert result.bad_accesses == 0 and result.max_relative_error <= 1e-12, result
    gathered = problem_of(GATHERED, nl=40, nx=12, nv=5, nn=24)
    kernel = lower_mma(statement_task(gathered, 0), config)
    result = verify(gathered, {0: None}, seed=6, kernels=[kernel])
    assert result.bad_accesses == 0 and result.max_relative_error <= 1e-12, result


@pytest.mark.parametrize("batch_inner", [False, True])
def test_every_batch_order_covers_each_tile_of_each_batch_once(batch_inner):
    problem = problem_of(BATCHED, b=3, m=56, n=24, k=10)
    config = MmaConfig("m16n8k4_f64", 1, 1, 1, 1, 4, group_m=2, batch_inner=batch_inner)
    task = statement_task(problem, 0)
    builder = TileBuilder(task, gemm_form(task)[0], config, "x")
    within, batch = builder.block_split(kir.BlockIdx())
    tm, tn = builder.block_tile_coordinates(within)
    blocks = builder.tiles_m * builder.tiles_n * builder.batches
    seen = [(_value(batch, b), _value(tm, b), _value(tn, b)) for b in range(blocks)]
    assert sorted(seen) == [
        (z, i, j) for z in range(3) for i in range(builder.tiles_m) for j in range(builder.tiles_n)
    ]
    first = [z for z, _, _ in seen[:3]]
    assert first == ([0, 1, 2] if batch_inner else [0, 0, 0])


def test_a_batch_order_that_repeats_a_batch_is_caught(monkeypatch):
    def wrong(self, block):  # the batch of the block before: one batch computed twice
        return kir.Op("/", block, kir.Int(self.batches)), kir.Op(
            "%", kir.Op("+", block, kir.Int(1)), kir.Int(self.batches - 1)
        )

    monkeypatch.setattr(TileBuilder, "block_split", wrong)
    problem = problem_of(BATCHED, b=3, m=56, n=24, k=10)
    config = MmaConfig("m16n8k4_f64", 1, 1, 1, 1, 4, batch_inner=True)
    kernel = lower_mma(statement_task(problem, 0), config)
    result = verify(problem, {0: None}, seed=5, kernels=[kernel])
    assert result.max_relative_error > 1e-3 or result.bad_accesses


def test_the_json_form_of_the_default_batch_order_is_unchanged():
    assert "batch_inner" not in MmaConfig().values()
    inner = MmaConfig(batch_inner=True)
    assert MmaConfig.from_json(inner.to_json()) == inner
    assert "batch fastest" in inner.describe()
    with pytest.raises(TypeError, match="batch_inner"):
        MmaConfig.from_values({"batch_inner": 1})


def _task(text: str, **extents: int):
    return statement_task(problem_of(text, **extents), 0)


def test_the_sector_cost_counts_only_tensors_with_a_batch_contiguous_index():
    tile = F64_TILES[0]
    gathered = _task(GATHERED, nl=846, nx=1261, nv=22, nn=750)
    assert batch_contiguous(gemm_form(gathered)[0])
    seconds = batch_sector_seconds(gathered, tile, H100)
    a_bytes = 846 * 1261 * 22 * 8  # A only: 4 elements of 8 bytes per sector
    scale = mma_model.SIMT_MODEL_SCALE["f64"]
    assert seconds == pytest.approx(mma_model.BATCH_SECTOR_COST * a_bytes * 4 / 3e12 * scale)
    # an operand's sectors cost the same with the batch fastest across blocks
    # (measured: docs/tensor_cores.md, "The batch order across blocks")
    assert batch_sector_seconds(gathered, replace(tile, batch_inner=True), H100) == seconds
    one_tile = _task(GATHERED, nl=100, nx=64, nv=4096, nn=100)  # one 128 x 128 tile per batch
    assert batch_sector_seconds(one_tile, tile, H100) == 0.0
    outer = _task(OUTER, b=22, m=846, n=750, k=1261)  # the batch is the slowest index
    assert not batch_contiguous(gemm_form(outer)[0])
    assert batch_sector_seconds(outer, tile, H100) == 0.0


def test_the_tuning_space_offers_the_batch_order_where_a_batch_is_contiguous():
    gathered = _task(GATHERED, nl=846, nx=1261, nv=22, nn=750)
    found = with_block_orders(gathered, list(F64_TILES[:2]), H100)
    assert [t for t in found if t.batch_inner] == [
        MmaConfig(**{**t.values(), "batch_inner": True}) for t in F64_TILES[:2]
    ]
    outer = _task(OUTER, b=22, m=846, n=750, k=1261)
    assert not any(t.batch_inner for t in with_block_orders(outer, list(F64_TILES[:2]), H100))


def test_the_rewrite_plan_takes_ttgt_where_the_direct_kernel_gathers_batches(monkeypatch):
    """bmvh,mptshb->vbtpms (seed 41's case 71, column-major): A's and B's
    contiguous indices (b, m) are batch indices; measured on an H100, TTGT 0.53 ms
    against 1.41 ms direct.  Without the sector cost the plan keeps the direct
    kernel."""
    text = (
        "program c\ndims nm, nb, nv, nt, ns, np, nh\ndtype float64\nlayout column\n"
        "tensor A[nb, nm, nv, nh], B[nm, np, nt, ns, nh, nb], C[nv, nb, nt, np, nm, ns]\n"
        "C[v,b,t,p,m,s] = A[b,m,v,h] * B[m,p,t,s,h,b]\n"
    )
    problem = problem_of(text, nm=11, nb=9, nv=260, nt=10, ns=4, np=9, nh=458)
    taken = plan_rewrites(problem, "cuda")
    assert [r.name for r in taken.rewrites] == ["ttgt"]
    assert "sectors shared across batches" in " ".join(taken.explain())
    monkeypatch.setattr(mma_model, "BATCH_SECTOR_COST", 0.0)
    assert plan_rewrites(problem, "cuda").rewrites == ()
