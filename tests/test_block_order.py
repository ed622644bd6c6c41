"""The block order of tensor-core kernels (``MmaConfig.group_m``): blocks walk
down groups of M tiles, then across N, so the blocks resident at once share
operand panels in L2.  Every order is a permutation of the tiles (checked by
evaluating the kernel's coordinate expressions for every block), kernels with
any group size compute the reference's result in the emulator, and an order
that covers one tile twice is caught."""

from __future__ import annotations

import pytest
from conftest import problem_of
from test_lowp_mma import check, half_problem

from einkern.backends.verify import verify
from einkern.gpu import block_order as orders
from einkern.gpu import contraction, kir
from einkern.gpu.block_order import Panels, Partners, sector_partners, with_block_orders
from einkern.gpu.contraction import contraction_of, gemm_form
from einkern.gpu.decision import choose
from einkern.gpu.device import H100
from einkern.gpu.mma_builder import TileBuilder
from einkern.gpu.mma_config import MmaConfig
from einkern.gpu.mma_lower import lower_mma
from einkern.gpu.mma_model import mma_candidates
from einkern.ir.task import statement_task

pytest.importorskip("torch")  # bfloat16 host arrays

GEMM = "program g\ndims m, n, k\ntensor A[m,k], B[k,n], C[m,n]\nC[i,j] = A[i,k] * B[k,j]\n"

BATCHED = (
    "program b\ndims b, m, n, k\nlayout column\ntensor A[b,m,k], B[b,k,n], C[b,m,n]\n"
    "C[z,i,j] = A[z,i,x] * B[z,x,j]\n"
)


def _value(expr: kir.Expr, block: int) -> int:
    """An integer expression of the block index, evaluated as C would."""
    if isinstance(expr, kir.Int):
        return expr.value
    if isinstance(expr, kir.BlockIdx):
        return block
    assert isinstance(expr, kir.Op), expr
    a, b = _value(expr.left, block), _value(expr.right, block)
    ops = {
        "+": a + b,
        "-": a - b,
        "*": a * b,
        "/": a // b if b else None,
        "%": a % b if b else None,
        "min": min(a, b),
    }
    return ops[expr.op]


def _builder(m: int, n: int, group: int) -> TileBuilder:
    problem = problem_of(GEMM, m=m, n=n, k=8)
    config = MmaConfig("m16n8k4_f64", 1, 1, 1, 1, 4, group_m=group)
    kernel_task = statement_task(problem, 0)
    return TileBuilder(kernel_task, contraction_of(kernel_task), config, "k")


@pytest.mark.parametrize("tiles", [(1, 1), (5, 3), (8, 4), (7, 1), (1, 6), (13, 9)])
@pytest.mark.parametrize("group", [1, 2, 3, 4, 8, 20])
def test_every_order_is_a_permutation_of_the_tiles(tiles, group):
    tiles_m, tiles_n = tiles
    builder = _builder(16 * tiles_m, 8 * tiles_n, group)
    assert (builder.tiles_m, builder.tiles_n) == tiles
    tm, tn = builder.block_tile_coordinates(kir.BlockIdx())
    seen = [(_value(tm, b), _value(tn, b)) for b in range(tiles_m * tiles_n)]
    assert sorted(seen) == [(i, j) for i in range(tiles_m) for j in range(tiles_n)]
    if 1 < group < tiles_m and tiles_n > 1:  # the first blocks go down one group
        assert seen[: min(group, tiles_m)] == [(i, 0) for i in range(min(group, tiles_m))]
    # the traffic model walks the blocks in the order the kernel computes
    grid = Panels(tiles_m, tiles_n, batches=1, a_bytes=1, b_bytes=1)
    assert [grid.tile(b, group)[1:] for b in range(tiles_m * tiles_n)] == seen


@pytest.mark.parametrize("group", [2, 3, 8])
def test_grouped_kernels_compute_the_reference(group):
    problem = problem_of(GEMM, m=88, n=40, k=12)  # 6 x 5 tiles of 16 x 8
    config = MmaConfig("m16n8k4_f64", 1, 1, 1, 1, 4, group_m=group)
    kernel = lower_mma(statement_task(problem, 0), config)
    result = verify(problem, {0: None}, seed=3, kernels=[kernel])
    assert result.bad_accesses == 0 and result.max_relative_error <= 1e-12, result
    batched = problem_of(BATCHED, b=3, m=56, n=24, k=10)  # 4 x 3 tiles per batch
    kernel = lower_mma(statement_task(batched, 0), config)
    result = verify(batched, {0: None}, seed=4, kernels=[kernel])
    assert result.bad_accesses == 0 and result.max_relative_error <= 1e-12, result
    halves = half_problem("gemm", "bfloat16", "float32", dict(m=200, n=136, k=72))
    warpgroup = MmaConfig("wgmma_k16_bf16", 4, 1, 1, 8, 64, stages=3, copy="async")
    check(halves, MmaConfig(**{**warpgroup.values(), "group_m": group}))


def test_an_order_that_covers_a_tile_twice_is_caught(monkeypatch):
    def twice(self, block):  # the last group's rows wrap onto the first group's
        group = self.config.group_m
        local = kir.Op("%", block, kir.Int(group * self.tiles_n))
        first = kir.Op("*", kir.Op("/", block, kir.Int(group * self.tiles_n)), kir.Int(group))
        row = kir.Op("%", kir.Op("+", first, kir.Op("%", local, kir.Int(group))), kir.Int(6))
        return row, kir.Op("/", local, kir.Int(group))

    monkeypatch.setattr(TileBuilder, "block_tile_coordinates", twice)
    problem = problem_of(GEMM, m=88, n=40, k=12)
    kernel = lower_mma(
        statement_task(problem, 0), MmaConfig("m16n8k4_f64", 1, 1, 1, 1, 4, group_m=4)
    )
    result = verify(problem, {0: None}, seed=3, kernels=[kernel])
    assert result.max_relative_error > 1e-3 or result.bad_accesses


def test_the_json_form_of_the_default_order_is_unchanged():
    assert "group_m" not in MmaConfig().values()
    grouped = MmaConfig(group_m=8)
    assert MmaConfig.from_json(grouped.to_json()) == grouped
    with pytest.raises(ValueError, match="group_m"):
        MmaConfig.from_values({"group_m": 0})


def _gemm_task(n: int, dtype: str):
    out = "float32" if dtype == "bfloat16" else dtype
    text = (
        f"program g\ndims m, n, k\ndtype {dtype}\ntensor A[m,k], B[k,n]\ntensor C[m,n] {out}\n"
        "C[i,j] = A[i,k] * B[k,j]\n"
    )
    return statement_task(problem_of(text, m=n, n=n, k=n), 0)


def test_the_decision_groups_where_the_model_predicts_re_reads():
    """bf16 GEMM 8192: the wave of the default order spans all 64 A panels (the
    model: re-reads 0.44 of the arithmetic), groups of 16 M tiles halve them;
    DGEMM 2048: re-reads a tenth of the arithmetic, the default order stays."""
    big = choose(_gemm_task(8192, "bfloat16"))
    steps = dict(big.steps)
    assert big.config.mma is not None and big.config.mma.group_m == 16, steps
    assert "groups of 16 M tiles" in steps["block-order"]
    small = choose(_gemm_task(2048, "float64"))
    assert small.config.mma is not None and small.config.mma.group_m == 1
    assert "the default order" in dict(small.steps)["block-order"]


def test_the_tuning_space_has_both_orders():
    task = _gemm_task(8192, "bfloat16")
    tiles = mma_candidates(task, tuning=True)
    ordered = with_block_orders(task, tiles, H100)
    assert set(ordered) >= set(tiles)
    assert any(t.group_m > 1 for t in ordered) and len(ordered) > len(tiles)


def test_the_traffic_model_counts_distinct_panels():
    grid = Panels(tiles_m=64, tiles_n=32, batches=1, a_bytes=2, b_bytes=4)
    # one wave of 132 blocks, M fastest: all 64 A panels and 3 B panels
    assert grid.traffic(1, 132) == pytest.approx((64 * 2 + 3 * 4) * 2048 / 132, rel=0.1)
    assert grid.traffic(16, 132) < 0.6 * grid.traffic(1, 132)


@pytest.mark.parametrize("group", [1, 4, 8, 16])
@pytest.mark.parametrize(("axis", "distance"), [("m", 3), ("m", 30), ("m", 17), ("n", 2), ("n", 9)])
def test_the_launch_distance_of_sector_partners_follows_the_order(group, axis, distance):
    """Where the first tile's partner ``distance`` tiles along M or N is launched,
    found by walking the order (Panels.tile) and by Partners.launch_distance."""
    grid = Panels(tiles_m=70, tiles_n=15, batches=1, a_bytes=1, b_bytes=1)
    target = (0, distance, 0) if axis == "m" else (0, 0, distance)
    walked = next(b for b in range(70 * 15) if grid.tile(b, group) == target)
    assert Partners(axis, distance, 1.0).launch_distance(grid, group) == walked


# the output's contiguous index m is the slowest of the M group (m, r, q, k):
# a 128-row tile writes one element per sector, its partners 30 M tiles away
SCATTERED = (
    "program s\ndims nm, nr, nq, nw, nk, ns\n"
    "tensor A[nm,nr,nq,nw,nk], B[nw,ns], C[nk,nr,nq,ns,nm]\n"
    "C[k,r,q,s,m] = A[m,r,q,w,k] * B[w,s]\n"
)


def test_an_order_that_splits_sector_partners_is_not_chosen(monkeypatch):
    """mrqwk,ws->krqsm in the GEMM form of the operands' strides (H100: 333 µs in
    the default order, 565 µs in groups of 4 M tiles): the operand panels alone
    would have the blocks grouped; the partial output sectors that grouping
    leaves unmerged keep the default order.  (The GEMM form now moves m next to
    k, which fills most sectors; the block order must hold for any form.)"""
    monkeypatch.setattr(contraction, "group_order", lambda group, *args: group)
    extents = {"nm": 7, "nr": 8, "nq": 10, "nw": 477, "nk": 16, "ns": 951}
    task = statement_task(problem_of(SCATTERED, **extents), 0)
    tile = MmaConfig("m16n8k4_f64", 4, 2, 2, 4, 16, stages=3, copy="async")
    partners = sector_partners(task, gemm_form(task)[0], tile)
    assert partners is not None and partners.axis == "m" and partners.distance == 30
    arithmetic = orders.mma_bounds(task, tile, H100)[2]
    group, why = orders.block_order(task, tile, H100, arithmetic)
    assert group == 1 and "30 apart along M" in why
    monkeypatch.setattr(orders, "output_merge", lambda *args: 0.0)
    assert orders.block_order(task, tile, H100, arithmetic)[0] > 1


def test_tiles_that_fill_their_sectors_have_no_partners():
    task = _gemm_task(4096, "float64")
    tile = MmaConfig("m16n8k4_f64", 2, 4, 4, 4, 16)
    assert sector_partners(task, gemm_form(task)[0], tile) is None
