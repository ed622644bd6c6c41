"""The block order of a tensor-core kernel (``MmaConfig.group_m``), chosen by a
model of the operand panels the resident blocks read from DRAM.

A block of a BM × BN tile reads an A panel (BM rows, all of K) and a B panel (BN
columns, all of K).  The ``sm_count`` blocks resident at once (one wave) step
through K at about the same pace, so a panel that several of them read comes
from DRAM once per wave and from L2 after.  DRAM traffic is therefore about
Σ over waves of (distinct A panels · A panel bytes + distinct B panels · B panel
bytes).  With the M tile fastest over the whole of M, a wave spans every A panel
once M has fewer tiles than the wave has blocks; walking down groups of
``group_m`` M tiles before moving along N makes the wave a near-square patch of
tiles and halves that traffic or better on large products.

:func:`block_order` computes the traffic of each order in :data:`GROUPS` for the
first waves of the grid and keeps the default order unless its re-reads are
predicted to cost at least :data:`SHARE` of the arithmetic time — below that they
hide behind the MMAs (measured: DGEMM 2048 and 4096, where grouping did not
help), above it the order of least traffic wins (bf16 GEMM 8192: +6 %, DGEMM
8192: +3.5 %; ``docs/tensor_cores.md``, "Block order").

The output counts too (:func:`output_merge`).  Where a block's tile does not
fill the 32-byte sectors of the output (its contiguous index runs across tiles
of M or N), L2 merges the partial sectors of blocks that are resident together;
an order that launches those blocks a wave or more apart writes every partial
sector separately.  Measured (H100, twenty-ninth session): ``mrqwk,ws->krqsm``
333 µs in the default order against 565 µs in groups of 4 M tiles, whose
sector partners are 30 M tiles apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..ir.task import Task
from .contraction import Contraction, gemm_form, output_sector_efficiency
from .device import DeviceLimits
from .mma import SHAPES
from .mma_config import MmaConfig
from .mma_model import SIMT_MODEL_SCALE, batch_sector_seconds, mma_bounds

#: The group sizes considered (1: the M tile fastest over all of M).
GROUPS = (1, 4, 8, 16)
#: Re-read DRAM time, as a share of the arithmetic time, from which the order
#: is changed.
SHARE = 0.2
#: Waves evaluated (the traffic of the rest is scaled from theirs).
WAVES = 8
#: Output sector efficiency from which a tile counts as filling its sectors.
FILLED = 0.9
#: DRAM bytes a partial sector costs per byte of it that L2 did not merge: the
#: sector written and fetched again for the next write.  Measured higher in the
#: ``mrqwk,ws->krqsm`` and ``vmipqg,qpe->giemv`` cases: the time the grouped
#: order lost is 3.3-3.5 times the partial sectors' extra bytes at the copy
#: bandwidth.
PARTIAL_COST = 2.0


@dataclass(frozen=True)
class Panels:
    """The panel grid of a kernel: tiles along M and N, batches, bytes per panel."""

    tiles_m: int
    tiles_n: int
    batches: int
    a_bytes: int
    b_bytes: int

    def tile(self, block: int, group: int, batch_inner: bool = False) -> tuple[int, int, int]:
        """(batch, M tile, N tile) of ``block`` in the order of ``group`` (the batch
        fastest with ``batch_inner``); the arithmetic of
        :meth:`~.mma_builder.TileBuilder.block_split` and
        :meth:`~.mma_builder.TileBuilder.block_tile_coordinates`."""
        per_batch = self.tiles_m * self.tiles_n
        if batch_inner:
            within, batch = divmod(block, self.batches)
        else:
            batch, within = divmod(block, per_batch)
        group = min(group, self.tiles_m)
        if group <= 1 or self.tiles_n == 1:
            return batch, within % self.tiles_m, within // self.tiles_m % self.tiles_n
        first = within // (group * self.tiles_n) * group
        local = within % (group * self.tiles_n)
        size = min(self.tiles_m - first, group)
        return batch, first + local % size, local // size

    def traffic(self, group: int, wave: int, batch_inner: bool = False) -> float:
        """DRAM bytes of the operand panels over the whole grid in the order of
        ``group`` (and ``batch_inner``) with ``wave`` blocks resident at once."""
        blocks = self.tiles_m * self.tiles_n * self.batches
        waves = math.ceil(blocks / wave)
        evaluated = min(waves, WAVES)
        total = 0
        for number in range(evaluated):
            tiles = [
                self.tile(b, group, batch_inner)
                for b in range(number * wave, min(blocks, (number + 1) * wave))
            ]
            total += len({(z, m) for z, m, _ in tiles}) * self.a_bytes
            total += len({(z, n) for z, _, n in tiles}) * self.b_bytes
        return total * waves / evaluated


@dataclass(frozen=True)
class Partners:
    """Where the output's sector partners of a tile lie: ``axis`` ``"m"`` or
    ``"n"``, ``distance`` tiles along it at most; ``extra`` the DRAM bytes of
    the partial sectors when they are not merged."""

    axis: str
    distance: int
    extra: float

    def launch_distance(self, grid: Panels, group: int) -> int:
        """Blocks launched between the first tile and its farthest partner in the
        order of ``group`` (the arithmetic of :meth:`Panels.tile`)."""
        size = min(group, grid.tiles_m)
        if size <= 1 or grid.tiles_n == 1:
            return self.distance if self.axis == "m" else self.distance * grid.tiles_m
        if self.axis == "n":
            return self.distance * size
        groups, within = divmod(self.distance, size)
        return groups * size * grid.tiles_n + within


def sector_partners(task: Task, c: Contraction, config: MmaConfig) -> Partners | None:
    """The output sectors ``config``'s tiles share with other tiles in ``task``'s
    GEMM form ``c`` (None where a tile fills its sectors or they are shared
    across batches only)."""
    bm, bn = config.block_tile()
    itemsize = task.problem.program.tensor(c.output.tensor).itemsize
    efficiency = output_sector_efficiency(c, bm, bn, itemsize)
    index = c.output.contiguous()
    if efficiency >= FILLED or index is None or index in c.batch:
        return None
    axis, group, tile = ("m", c.m, bm) if index in c.m else ("n", c.n, bn)
    inner = math.prod(c.extent(i) for i in group[group.index(index) + 1 :])
    per_sector = min(32 // itemsize, c.extent(index))
    distance = math.ceil((per_sector - 1) * inner / tile)
    output_bytes = task.problem.numel(c.output.tensor) * itemsize
    extra = output_bytes * (1 / efficiency - 1) * PARTIAL_COST
    return Partners(axis, distance, extra)


def output_merge(partners: Partners | None, grid: Panels, group: int, wave: int) -> float:
    """DRAM bytes of the output's partial sectors that the order of ``group`` keeps
    L2 from merging (0 where the partners are launched within ``wave`` blocks)."""
    if partners is None or partners.launch_distance(grid, group) < wave:
        return 0.0
    return partners.extra


def panels(task: Task, c: Contraction, config: MmaConfig) -> Panels:
    """The panel grid of ``config``'s kernel for ``task`` (GEMM form ``c``)."""
    bm, bn = config.block_tile()
    k = c.size(c.k)
    problem = task.problem
    a_item = problem.program.tensor(c.a.tensor).itemsize
    b_item = problem.program.tensor(c.b.tensor).itemsize
    return Panels(
        math.ceil(c.size(c.m) / bm),
        math.ceil(c.size(c.n) / bn),
        c.size(c.batch),
        bm * k * a_item,
        bn * k * b_item,
    )


def block_order(
    task: Task, config: MmaConfig, limits: DeviceLimits, arithmetic: float
) -> tuple[int, str]:
    """(``group_m``, reason) for ``config``'s kernel of ``task``, whose arithmetic
    is predicted to take ``arithmetic`` seconds (see the module docstring)."""
    c, _ = gemm_form(task)
    grid = panels(task, c, config)
    partners = sector_partners(task, c, config)
    wave = limits.sm_count
    seconds = {
        g: (grid.traffic(g, wave) + output_merge(partners, grid, g, wave)) / limits.dram_bandwidth
        for g in GROUPS
    }
    default = seconds[1]
    if default < SHARE * arithmetic:
        return 1, (
            f"operand panels re-read from DRAM in {default * 1e6:.3g} µs with the M tile "
            f"fastest, under {SHARE:g} of the {arithmetic * 1e6:.3g} µs of arithmetic: "
            "the default order"
        )
    best = min(GROUPS, key=lambda g: (seconds[g], g))
    split = ""
    if partners is not None:
        split = (
            f"; output sectors shared with tiles {partners.distance} apart along "
            f"{partners.axis.upper()}, merged in L2 only by orders that launch them "
            f"within a wave"
        )
    if best == 1:
        return (
            1,
            "no group of M tiles reads fewer panels and output sectors than the default "
            f"order ({default * 1e6:.3g} µs){split}",
        )
    return best, (
        f"operand panels and output sectors from DRAM in {default * 1e6:.3g} µs with the M "
        f"tile fastest ({default / arithmetic:.2f} of the arithmetic), "
        f"{seconds[best] * 1e6:.3g} µs with blocks in groups of {best} M tiles{split}"
    )


def batch_reread_seconds(task: Task, config: MmaConfig, limits: DeviceLimits) -> float:
    """DRAM seconds, on the SIMT model's scale, of the operand panels that
    ``config``'s kernel re-reads because of its batch order: with ``batch_inner``
    the blocks resident at once belong to different batches and share fewer
    panels than in the default order (0 for the default order)."""
    if not config.batch_inner or config.box:
        return 0.0
    c, _ = gemm_form(task)
    grid = panels(task, c, config)
    wave = limits.sm_count
    extra = grid.traffic(config.group_m, wave, True) - grid.traffic(config.group_m, wave)
    scale = SIMT_MODEL_SCALE[SHAPES[config.shape].input_type]
    return max(0.0, extra) / limits.dram_bandwidth * scale


def batch_order(task: Task, config: MmaConfig, limits: DeviceLimits) -> tuple[bool, str] | None:
    """(``batch_inner``, reason) for ``config``'s kernel of ``task`` where the
    output's contiguous index is a batch index (None elsewhere): the batch fastest
    across blocks when the output sectors it lets L2 merge
    (:func:`~.mma_model.batch_sector_seconds`) are predicted to cost more than the
    operand panels it re-reads (:func:`batch_reread_seconds`)."""
    c, _ = gemm_form(task)
    index = c.output.contiguous()
    if config.box or index is None or index not in c.batch:
        return None
    inner = replace(config, batch_inner=True)
    saved = batch_sector_seconds(task, config, limits) - batch_sector_seconds(task, inner, limits)
    if saved <= 0:
        return None
    reread = batch_reread_seconds(task, inner, limits)
    costs = (
        f"the output's contiguous index {index} is a batch index: its sectors merged in L2 "
        f"save {saved * 1e6:.3g} µs, its operand panels re-read cost {reread * 1e6:.3g} µs"
    )
    if saved > reread:
        return True, f"batch fastest across blocks: {costs}"
    return False, f"batch slowest: {costs}"


def batch_contiguous(c: Contraction) -> bool:
    """Whether a tensor of GEMM form ``c`` has a batch index as its contiguous index
    (its sectors hold elements of several batches)."""
    return any(o.contiguous() in c.batch for o in (c.a, c.b, c.output))


def with_block_orders(task: Task, tiles: list[MmaConfig], limits: DeviceLimits) -> list[MmaConfig]:
    """``tiles`` for the tuning space, each followed by its variant in the order
    :func:`block_order` chooses where that is not the default, and by its variant
    with the batch fastest across blocks (``batch_inner``) where a tensor's
    contiguous index is a batch index: measured, not modelled (docs/tensor_cores.md
    "Batch indices in a contiguous index")."""
    found: list[MmaConfig] = []
    inner: bool | None = None  # a product family's tiles have no GEMM form
    for tile in tiles:
        found.append(tile)
        if not tile.box:
            group, _ = block_order(task, tile, limits, mma_bounds(task, tile, limits)[2])
            if group > 1:
                found.append(replace(tile, group_m=group))
            if inner is None:
                inner = batch_contiguous(gemm_form(task)[0])
            if inner and not tile.batch_inner:
                found.append(replace(tile, batch_inner=True))
    return found
