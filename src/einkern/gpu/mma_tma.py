"""Warpgroup-MMA kernels staged by Hopper's TMA (``MmaConfig.copy == "tma"``):
:class:`TmaBuilder`, a :class:`~.mma_warpgroup.WarpGroupBuilder` whose operand
tiles arrive by bulk tensor copies instead of 16-byte ``cp.async`` by every thread.

**Maps.**  Each operand gets one :class:`~.kir.TensorMap` (:func:`operand_map`).
Its dimension 0 is the operand's stride-1 index, which is the innermost index
of the tile group stored contiguously in shared memory (:mod:`.mma_staging`);
its boxes there are one 128-byte swizzled line (64 16-bit or 32 tf32 elements).  Then come the
other group's indices, inner to outer, whose boxes make up the line count of
the tile; then the contiguous group's outer indices and the batch indices,
boxes of 1.  A group of several indices is a box only when the tile covers its
inner indices whole (:func:`group_box`): walking inner to outer with ``T`` tile
elements left, an index of extent ``E ≤ T`` needs ``T % E == 0`` (box ``E``),
and the first index with ``E > T`` needs ``E % T == 0`` (box ``T``, the outer
ones 1).  The tiles start at multiples of their extent, so a box never straddles
an index, and positions past a group's size fall on an outer coordinate past its
extent, which TMA fills with zeros: no guards at the edges.  The outermost
index of a group needs neither condition (its box is what is left of the tile,
past its extent too).  Boxes written with
the 128-byte swizzle land exactly in :class:`~.mma_staging.Staging`'s swizzled
layout (line ``(u / L)·lines + v`` for ``L`` elements per line, chunk
``c ^ (line % 8)``), one copy per line's elements of the contiguous dimension.

**Pipeline.**  Thread 0 initialises one mbarrier per stage, a barrier publishes
them, and thread 0 issues the first ``stages - 2`` tiles.  Per k-step every
thread waits on its stage's mbarrier with the parity of its round
(``(step / stages) % 2``), a block barrier follows (every warpgroup is past the
MMAs that read the buffer refilled next), thread 0 arms the mbarrier of the tile
``stages - 2`` steps ahead with its bytes and issues its copies (only for tiles
that exist: no copy may be in flight when the block exits), and the warpgroups
issue their MMAs.  No proxy fence: TMA writes and ``wgmma`` reads are both in
the asynchronous proxy.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..semantics import C_TYPE
from . import exprs as E
from . import kir
from .contraction import Contraction
from .ctext import MAP_BOX, MAP_RANK
from .mma import SHAPES
from .mma_builder import INPUT_DTYPE
from .mma_config import MmaConfig
from .mma_staging import line_elements, staging, tile_groups
from .mma_warpgroup import WarpGroupBuilder

#: The shared array of the stages' mbarriers.
BARRIERS = "Mb"


def group_box(c: Contraction, group: tuple[str, ...], tile: int) -> list[tuple[str, int]] | None:
    """(index, box) of each index of ``group``, inner to outer, for a tile of
    ``tile`` consecutive positions of the group starting at a multiple of
    ``tile``; None when such a tile is not a box (see the module docstring)."""
    left, boxes = tile, []
    for index in reversed(group):
        extent = c.extent(index)
        if left == 1:
            boxes.append((index, 1))
        elif index == group[0]:  # the outermost: past its extent is past the group
            boxes.append((index, left))
        elif extent <= left:
            if left % extent:
                return None
            boxes.append((index, extent))
            left //= extent
        else:
            if extent % left:
                return None
            boxes.append((index, left))
            left = 1
    return boxes if all(box <= MAP_BOX for _, box in boxes) else None


def _layout(c: Contraction, config: MmaConfig, which: str):
    """(contiguous group, its tile extent, other group, its tile extent) of an operand."""
    _, row_group, col_group = tile_groups(c, which)
    bm, bn = config.block_tile()
    rows, cols = (bm, config.k_step) if which == "a" else (config.k_step, bn)
    if staging(c, config, which).along_cols:
        return col_group, cols, row_group, rows
    return row_group, rows, col_group, cols


def operand_map(c: Contraction, config: MmaConfig, which: str) -> kir.TensorMap | str:
    """The tensor map of the A or B operand's tiles, or why there is none."""
    operand = c.a if which == "a" else c.b
    name = operand.tensor
    contiguous, _, other, other_tile = _layout(c, config, which)
    if not contiguous or operand.stride(contiguous[-1]) != 1:
        return f"{name}: its stride-1 index is not the innermost of the tile's contiguous group"
    line = line_elements(config)
    inner = group_box(c, contiguous, line)
    if inner is None or inner[0][1] != line:
        extent = c.extent(contiguous[-1])
        return f"{name}: extent {extent} of its stride-1 index is not a multiple of {line}"
    lines = group_box(c, other, other_tile)
    if lines is None:
        return (
            f"{name}: a tile of {other_tile} along {', '.join(other)} is not a box "
            "(an inner extent neither divides nor is a multiple of the tile)"
        )
    batch = [i for i in c.batch if i in dict(operand.strides)]
    order = [inner[0], *lines, *inner[1:], *((i, 1) for i in batch)]
    if len(order) > MAP_RANK:
        return f"{name}: {len(order)} indices (a tensor map has at most {MAP_RANK})"
    ctype = C_TYPE[INPUT_DTYPE[SHAPES[config.shape].input_type]]
    size = kir.ELEMENT_BYTES[ctype]
    odd = [i for i, _ in order[1:] if (size * operand.stride(i)) % 16]
    if odd:
        return f"{name}: strides of {', '.join(odd)} are not multiples of 16 bytes"
    dims = tuple(kir.MapDim(i, c.extent(i), operand.stride(i), box) for i, box in order)
    return kir.TensorMap(f"tm_{which}", f"p_{name}", ctype, dims)


def tma_problems(c: Contraction, config: MmaConfig) -> list[str]:
    """Why the operand tiles of ``config`` cannot be staged by TMA (empty: they can)."""
    found = [m for m in (operand_map(c, config, w) for w in ("a", "b")) if isinstance(m, str)]
    if config.stages not in (3, 4):
        found.append(f"TMA staging: stages {config.stages} (3 or 4)")
    return [f"TMA: {p}" for p in found]


class TmaBuilder(WarpGroupBuilder):
    """The warpgroup builder with TMA staging (see the module docstring)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.maps: dict[str, kir.TensorMap] = {}
        for which in ("a", "b"):
            found = operand_map(self.c, self.config, which)
            if isinstance(found, str):
                raise ValueError(found)
            self.maps[which] = found
        self.k_total = math.ceil(self.K / self.bk) * self.bk

    def stage_bytes(self) -> int:
        """Bytes of the A and B tiles of one k-step (zero-filled ones too)."""
        return sum(self.config.itemsize * self.buffer_size(w) for w in ("a", "b"))

    def copies(self, which: str, number: kir.Expr, kk: kir.Expr) -> list[kir.Stmt]:
        """The bulk copies of the A or B tile at k offset ``kk`` into buffer
        ``number``: one per line's elements (128 bytes) of the contiguous dimension."""
        tmap, layout = self.maps[which], self.staging[which]
        contiguous, extent, other, _ = _layout(self.c, self.config, which)
        _, _, _, _, _, row0, col0 = self._tile(which, kk)
        first, second = (col0, row0) if layout.along_cols else (row0, col0)
        flat = E.div(kir.BlockIdx(), self.tiles_m * self.tiles_n)
        batch = self.c.coordinates(self.c.batch, flat) if self.c.batch else {}
        stmts: list[kir.Stmt] = []
        for q in range(extent // self.line):
            start = E.add(first, E.const(q * self.line))
            coords = {
                **batch,
                **self.c.coordinates(contiguous, start),
                **self.c.coordinates(other, second),
            }
            at = E.add(self.buffer(which, number), E.const(q * layout.lines * self.line))
            stmts.append(
                kir.TensorCopy(
                    tmap.name,
                    tuple(coords[d.index] for d in tmap.dims),
                    "As" if which == "a" else "Bs",
                    at,
                    BARRIERS,
                    number,
                )
            )
        return stmts

    def issue(self, ahead: int, number: kir.Expr, kk: kir.Expr | None = None) -> list[kir.Stmt]:
        """Thread 0 arms the stage's mbarrier and copies the tiles ``ahead`` k-steps
        after ``kk`` (when that tile exists)."""
        kk = kir.Var("kk") if kk is None else kk
        at = E.add(kk, E.const(ahead * self.bk))
        body = [
            kir.BarrierArm(BARRIERS, number, self.stage_bytes()),
            *self.copies("a", number, at),
            *self.copies("b", number, at),
        ]
        leader: kir.Expr = kir.Op("==", self.tid(), E.const(0))
        if isinstance(at, kir.Int):  # the prologue's tiles
            return [kir.If(leader, tuple(body))] if at.value < self.k_total else []
        more = E.less(at, E.const(self.k_total))
        return [kir.If(kir.Op("&&", leader, more), tuple(body))]

    def async_step(self) -> list[kir.Section]:
        stages, ahead = self.config.stages, self.tiles_ahead()
        step = E.div(kir.Var("kk"), self.bk)
        current = E.mod(step, stages)
        number = E.mod(E.add(step, E.const(ahead)), stages)
        parity = E.mod(E.div(step, stages), 2)
        return [
            kir.PerThread((kir.BarrierWait(BARRIERS, current, parity),)),
            kir.Barrier(),
            kir.PerThread(tuple(self.issue(ahead, number))),
            *self.multiply(current),
        ]

    def async_body(self, steps: int) -> list[kir.Section]:
        zero = E.const(0)
        inits: list[kir.Stmt] = [
            kir.BarrierInit(BARRIERS, E.const(s)) for s in range(self.config.stages)
        ]
        leader = kir.If(kir.Op("==", self.tid(), zero), tuple(inits))
        first: list[kir.Stmt] = []
        for s in range(self.tiles_ahead()):
            first += self.issue(s, E.const(s), zero)
        return [
            kir.PerThread((*self.prologue(), leader)),
            kir.Barrier(),
            kir.PerThread(tuple(first)),
            kir.Uniform("kk", 0, steps, self.bk, tuple(self.async_step())),
            *self.drain(),
        ]

    def drain(self) -> list[kir.Section]:
        return self.completed()  # no cp.async to wait for

    def kernel(self) -> kir.Kernel:
        kernel = super().kernel()
        barriers = kir.SharedArray(BARRIERS, kir.MBARRIER, self.config.stages, align=8)
        return replace(
            kernel,
            shared=(*kernel.shared, barriers),
            maps=(self.maps["a"], self.maps["b"]),
        )
