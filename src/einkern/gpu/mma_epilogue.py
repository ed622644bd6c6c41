"""The epilogue of tensor-core kernels (:mod:`.mma_lower`): how the accumulators
reach the output (:attr:`MmaConfig.epilogue <einkern.gpu.mma_config.MmaConfig>`).

* ``direct``: each lane stores its accumulator elements where the accumulator
  layout puts them (two adjacent elements of a row per lane, rows apart);
* ``shared``: per instruction-tile row, every warp writes its accumulators into a
  shared tile ``Cs`` (rows padded by 32 bytes, so the lanes' pairs land in
  distinct banks), a barrier, then all threads store the tile with consecutive
  threads along the output's contiguous index (whole rows of the output).

Both multiply by the statement's constant, sign and scalars and apply its
``=``, ``+=`` or ``-=``, predicated at the edges.  The functions take the kernel
builder of :mod:`.mma_lower` (its contraction, instruction shape, configuration
and index helpers).
"""

from __future__ import annotations

from typing import Any

from . import exprs as E
from . import kir
from .contraction import pointwise_value, scale_factor
from .mma import SHAPES, coordinates
from .mma_config import MmaConfig

#: How accumulators reach the output (:attr:`MmaConfig.epilogue`).
EPILOGUES = ("direct", "shared")


def epilogue_rows(config: MmaConfig) -> int:
    """Rows of the shared epilogue tile: one instruction-tile row of every warp."""
    return config.warps_m * SHAPES[config.shape].m


def _row_length(config: MmaConfig) -> int:
    """Elements of a shared epilogue row: the block tile's columns padded by 32 bytes."""
    return config.block_tile()[1] + 32 // config.accumulator_size


def shared_epilogue_elements(config: MmaConfig) -> int:
    """Elements of the shared epilogue tile (rows padded by 32 bytes)."""
    return epilogue_rows(config) * _row_length(config)


def _factor(b: Any) -> kir.Expr:
    """The product's constant, sign and scalars."""
    return scale_factor(b.c.sign, b.c.constant, b.c.scale)


def _target(b: Any, gm: kir.Expr, gn: kir.Expr) -> tuple[dict, kir.Expr, kir.Expr]:
    """Coordinates, output index and edge guard of block row ``gm``, column ``gn``."""
    c = b.c
    coords = {**c.coordinates(c.m, gm), **c.coordinates(c.n, gn)}
    index = E.add(kir.Var("base_c"), c.offset(c.output, coords))
    inside = E.conj([E.less(gm, E.const(b.M)), E.less(gn, E.const(b.N))])
    assert inside is not None
    return coords, index, inside


def _with_pointwise(b: Any, value: kir.Expr, coords: dict) -> kir.Expr:
    """``value`` with the statement's pointwise terms (a bias) at ``coords`` added."""
    for term in b.pointwise:
        value = E.add(value, pointwise_value(term, coords, term.sign))
    return value


def _store(b: Any, gm: kir.Expr, gn: kir.Expr, value: kir.Expr) -> kir.Stmt:
    """``value`` into the output at block row ``gm``, column ``gn`` (guarded),
    with the statement's pointwise terms (a bias) at that element added."""
    coords, index, inside = _target(b, gm, gn)
    value = _with_pointwise(b, value, coords)
    return kir.If(inside, (kir.Store(f"p_{b.c.output.tensor}", index, value, b.c.op),))


def _shared(b: Any) -> list[kir.Section]:
    """The accumulators through shared memory: per instruction-tile row ``tm``,
    every warp's rows written to the tile ``Cs`` (rows padded by 32 bytes:
    the lanes' pairs land in distinct banks), a barrier, then all threads store
    the tile with consecutive threads along the output's contiguous index."""
    c, shape, cfg = b.c, b.shape, b.config
    nc = shape.c.count
    group, quad = b.lane_group_quad()
    _, wcol = b.warp_bases()
    wm = E.mod(E.div(b.tid(), 32), cfg.warps_m)
    rows, cols, ld = epilogue_rows(cfg), b.bn, _row_length(cfg)
    factor = _factor(b)
    along_n = bool(c.n) and c.output.stride(c.n[-1]) == 1
    threads = cfg.threads
    sections: list[kir.Section] = []
    for tm in range(cfg.tiles_m):
        writes: list[kir.Stmt] = []
        for tn in range(cfg.tiles_n):
            for i in range(nc):
                r, col = coordinates(shape.c, group, quad, i)
                row = E.add(E.mul(wm, E.const(shape.m)), r)
                column = E.add(wcol, E.add(E.const(tn * shape.n), col))
                value = kir.Op(
                    "*", factor, kir.Load("acc", E.const((tm * cfg.tiles_n + tn) * nc + i))
                )
                writes.append(kir.Store("Cs", E.add(E.mul(row, E.const(ld)), column), value))
        stores: list[kir.Stmt] = []
        for _, e, share in E.thread_shares(rows * cols, threads):
            r, col = (
                (E.div(e, cols), E.mod(e, cols)) if along_n else (E.mod(e, rows), E.div(e, rows))
            )
            block_row = E.add(
                E.mul(E.div(r, shape.m), E.const(cfg.tiles_m * shape.m)),
                E.add(E.const(tm * shape.m), E.mod(r, shape.m)),
            )
            gm, gn = E.add(kir.Var("row0"), block_row), E.add(kir.Var("col0"), col)
            stmt = _store(b, gm, gn, kir.Load("Cs", E.add(E.mul(r, E.const(ld)), col)))
            if share is not None:
                stmt = kir.If(share, (stmt,))
            stores.append(stmt)
        sections += [
            *([kir.Barrier()] if tm else []),
            kir.PerThread(tuple(writes)),
            kir.Barrier(),
            kir.PerThread(tuple(stores)),
        ]
    return sections


def _element(b: Any, tm: int, tn: int, i: int) -> tuple[kir.Expr, kir.Expr, kir.Expr]:
    """Block row, column and accumulator index of element ``i`` of instruction
    tile (``tm``, ``tn``) in this lane (the accumulator layout)."""
    shape, cfg = b.shape, b.config
    group, quad = b.lane_group_quad()
    wrow, wcol = b.warp_bases()
    r, col = coordinates(shape.c, group, quad, i)
    gm = E.add(kir.Var("row0"), E.add(wrow, E.add(E.const(tm * shape.m), r)))
    gn = E.add(kir.Var("col0"), E.add(wcol, E.add(E.const(tn * shape.n), col)))
    return gm, gn, E.const((tm * cfg.tiles_n + tn) * shape.c.count + i)


def _loads_first(b: Any) -> bool:
    """Whether an update (``+=``, ``-=``) reads all of a lane's output elements
    before it stores any: where the output has the accumulators' type, so that the
    accumulators can hold the updated values.  Otherwise each element is loaded,
    updated and stored in turn, and the compiler cannot hoist a load above the
    store before it (both go through the output's pointer): one DRAM round trip
    per element.  Loads first, update kernels ran 1.13× faster on geometric mean
    (336 fp64 (case, tile) pairs on an H100; docs/tensor_cores.md)."""
    if b.c.op == "=":
        return False
    dtype = b.task.program.tensor(b.c.output.tensor).dtype
    return dtype == {8: "float64", 4: "float32"}[b.config.accumulator_size]


def _direct(b: Any) -> list[kir.Stmt]:
    """Each lane's accumulator elements straight to the output (guarded): an
    update loads every element into its accumulator first (:func:`_loads_first`)."""
    c, cfg = b.c, b.config
    factor = _factor(b)
    elements = [
        _element(b, tm, tn, i)
        for tm in range(cfg.tiles_m)
        for tn in range(cfg.tiles_n)
        for i in range(b.shape.c.count)
    ]
    if not _loads_first(b):
        scaled = [(gm, gn, kir.Op("*", factor, kir.Load("acc", a))) for gm, gn, a in elements]
        return [_store(b, gm, gn, value) for gm, gn, value in scaled]
    output = f"p_{c.output.tensor}"
    updates: list[kir.Stmt] = []
    stores: list[kir.Stmt] = []
    for gm, gn, a in elements:
        coords, index, inside = _target(b, gm, gn)
        value = _with_pointwise(b, kir.Op("*", factor, kir.Load("acc", a)), coords)
        update = kir.Store("acc", a, kir.Op(c.op[0], kir.Load(output, index), value))
        updates.append(kir.If(inside, (update,)))
        stores.append(kir.If(inside, (kir.Store(output, index, kir.Load("acc", a)),)))
    return updates + stores


def epilogue_sections(b: Any) -> list[kir.Section]:
    """The epilogue of builder ``b``'s kernel, by its configuration's ``epilogue``."""
    if b.config.epilogue == "shared":
        return _shared(b)
    return [kir.PerThread(tuple(_direct(b)))]
