"""Hand-built kernel-IR GEMMs on MMA instructions (one warp per output tile,
fragments loaded from global memory through the shape's layout formulas): the
kernels the emulator and the GPU tests run before the generator makes them."""

from __future__ import annotations

from einkern.gpu import kir
from einkern.gpu.mma import SHAPES, Layout, coordinates, registers


def _op(symbol: str, left: kir.Expr, right: kir.Expr) -> kir.Expr:
    return kir.Op(symbol, left, right)


def _int(value: int) -> kir.Expr:
    return kir.Int(value)


def gemm_mma(
    name: str, m: int, n: int, k: int, warps: int = 2, a_layout: Layout | None = None
) -> kir.Kernel:
    """C[m,n] = A[m,k] · B[k,n] (row-major doubles) with ``SHAPES[name]``; every
    warp computes one tile, ``warps`` warps per block.  ``a_layout`` loads A by
    another layout (a planted fault)."""
    shape = SHAPES[name]
    if m % shape.m or n % shape.n or k % shape.k or (m // shape.m * (n // shape.n)) % warps:
        raise ValueError("the tiles must divide the extents and fill the blocks")
    a_layout = a_layout or shape.a
    na, nb, nc = registers(shape)
    tid = kir.ThreadIdx()
    lane = _op("%", tid, _int(32))
    group, quad = _op("/", lane, _int(4)), _op("%", lane, _int(4))
    tile = _op("+", _op("*", kir.BlockIdx(), _int(warps)), _op("/", tid, _int(32)))
    tiles_n = n // shape.n
    row0 = _op("*", _op("/", tile, _int(tiles_n)), _int(shape.m))
    col0 = _op("*", _op("%", tile, _int(tiles_n)), _int(shape.n))
    kk = kir.Var("kk")

    loads: list[kir.Stmt] = []
    for i in range(na):
        r, c = coordinates(a_layout, group, quad, i)
        index = _op("+", _op("*", _op("+", row0, r), _int(k)), _op("+", kk, c))
        loads.append(kir.Store("fa", _int(i), kir.Load("A", index)))
    for i in range(nb):
        r, c = coordinates(shape.b, group, quad, i)
        index = _op("+", _op("*", _op("+", kk, r), _int(n)), _op("+", col0, c))
        loads.append(kir.Store("fb", _int(i), kir.Load("B", index)))
    stores: list[kir.Stmt] = []
    for i in range(nc):
        r, c = coordinates(shape.c, group, quad, i)
        index = _op("+", _op("*", _op("+", row0, r), _int(n)), _op("+", col0, c))
        stores.append(kir.Store("C", index, kir.Load("acc", _int(i))))
    zero = tuple(kir.Store("acc", _int(i), kir.Float(0.0)) for i in range(nc))
    whole = kir.Fragment("acc")
    body = (
        kir.PerThread(zero),
        kir.Uniform(
            "kk",
            0,
            k,
            shape.k,
            (
                kir.PerThread(tuple(loads)),
                kir.Mma(name, whole, kir.Fragment("fa"), kir.Fragment("fb"), whole),
            ),
        ),
        kir.PerThread(tuple(stores)),
    )
    return kir.Kernel(
        f"gemm_{name}",
        (
            kir.Param("A", "double", True, m * k),
            kir.Param("B", "double", True, k * n),
            kir.Param("C", "double", True, m * n, readonly=False),
        ),
        32 * warps,
        m // shape.m * (n // shape.n) // warps,
        (
            kir.ThreadVar("fa", "double", na),
            kir.ThreadVar("fb", "double", nb),
            kir.ThreadVar("acc", "double", nc),
        ),
        (),
        body,
        comment=f"GEMM on {shape.ptx}",
    )
