"""How a tensor-core kernel (:mod:`.mma_lower`) stages its operand tiles in shared
memory, and how 16-bit fragments come out of them with ``ldmatrix``.

Every operand tile is a ``rows × cols`` matrix (A: BM × k-step, B: k-step × BN)
stored with one of its two dimensions contiguous (:class:`Staging`):

* fp64 operands are stored with the dimension contiguous along which the
  operand's own stride-1 index runs (so the copies write shared memory as they
  read global memory, without bank conflicts), rows padded so that the fragment
  loads are conflict-free either way, and, when the operand allows it
  (:func:`vector_problems`), copied two elements (16 bytes, bypassing L1) per
  ``cp.async`` (:func:`f64_staging`);
* tf32 operands stay as they were: the column dimension contiguous (A: k, B:
  n), rows padded so that the fragment loads are conflict-free, and one element
  per copy;
* bf16/f16 operands are stored as 16-bit values with the dimension contiguous
  along which the operand's own stride-1 index runs (so copies stay along global
  memory), rows padded to an odd multiple of 16 bytes (the eight row addresses
  of an ``ldmatrix`` phase then fall in distinct 16-byte bank groups), and, when
  the operand allows it (:func:`vector_problems`), copied 8 elements (16 bytes)
  per ``cp.async``.

A 16-bit fragment register holds two elements adjacent in k (the PTX ISA's
layouts for m16n8k8/k16), so each register of a lane is one 8×8 submatrix of
the instruction tile: ``ldmatrix`` loads up to four such submatrices per warp,
``.trans`` when the tile is stored with M (A) or N (B) contiguous.
:func:`register_origins` reads the submatrices off the layout formulas (and
refuses a layout that is not of this kind); :func:`load_calls` groups a warp's
registers into ``ldmatrix`` calls.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import exprs as E
from . import kir
from .contraction import Contraction, Operand
from .mma import SHAPES, Layout
from .mma_config import MmaConfig

#: 16-bit elements per 16-byte ``cp.async`` and per ``ldmatrix`` row.
VECTOR = 8
#: 16-bit elements per 128-byte line of a swizzled warpgroup-MMA tile.
SWIZZLE_ELEMENTS = kir.SWIZZLE_LINE // 2


def line_elements(config: MmaConfig) -> int:
    """Elements per 128-byte swizzled line of ``config``'s staged type (64 of 16
    bits, 32 of tf32): a warpgroup tile's k-step and TMA box."""
    return kir.SWIZZLE_LINE // config.itemsize


def chunk_elements(config: MmaConfig) -> int:
    """Elements per 16-byte chunk (one ``cp.async``) of ``config``'s staged type."""
    return 16 // config.itemsize


@dataclass(frozen=True)
class Staging:
    """One operand tile in shared memory: ``along_cols`` — its column dimension (A:
    k, B: n) contiguous, else its row dimension; ``ld`` — elements from one
    contiguous run to the next; ``width`` — elements per copy."""

    along_cols: bool
    ld: int
    width: int = 1
    #: warpgroup MMA tiles: the 128-byte-swizzled lines of a
    #: :class:`~einkern.gpu.kir.SharedMatrix` (``ld`` elements per line: 64 of
    #: 16 bits, 32 of tf32), the contiguous dimension cut into blocks of ``ld``
    #: of ``lines`` lines each (the other dimension's extent)
    swizzle: bool = False
    lines: int = 0
    #: elements per 16-byte chunk of a swizzled line (8 of 16 bits, 4 of tf32)
    chunk: int = VECTOR

    def index(self, row: kir.Expr, col: kir.Expr, single: bool = False) -> kir.Expr:
        """Shared index of tile element (row, col): the first of a copy's ``width``
        elements, or (``single``) any element."""
        if self.swizzle:
            u, v = (col, row) if self.along_cols else (row, col)
            return self._swizzled(u, v, single)
        if self.along_cols:
            return E.add(E.mul(row, E.const(self.ld)), col)
        return E.add(E.mul(col, E.const(self.ld)), row)

    def _swizzled(self, u: kir.Expr, v: kir.Expr, single: bool) -> kir.Expr:
        """Element (u along the contiguous dimension, v along the other) of a
        swizzled tile: line ``(u / ld)·lines + v``, its 16-byte chunk ``(u % ld) /
        chunk`` stored at chunk ``chunk ^ (line % 8)``."""
        line = E.add(E.mul(E.div(u, self.ld), E.const(self.lines)), v)
        chunk = E.div(E.mod(u, self.ld), self.chunk)
        swizzled = kir.Op("^", chunk, E.mod(line, 8))
        index = E.add(E.mul(line, E.const(self.ld)), E.mul(swizzled, E.const(self.chunk)))
        if self.width == self.chunk and not single:
            return index
        return E.add(index, E.mod(u, self.chunk))

    def along_k(self, which: str) -> bool:
        """Whether k is the contiguous dimension of the A (``"a"``: k × columns)
        or B (``"b"``: k × rows) tile."""
        return self.along_cols == (which == "a")

    def elements(self, rows: int, cols: int) -> int:
        """Shared elements of one buffer of a ``rows × cols`` tile."""
        if self.swizzle:
            return rows * cols
        return (rows if self.along_cols else cols) * self.ld


def _padding(row: int, padding: int, itemsize: int, operand: str) -> int:
    """Extra elements after a shared row of ``row`` fp64 or 32-bit elements.
    Automatic (-1): for doubles the row length becomes 4 modulo 16, so the 16 lanes
    of a half warp reading a fragment (rows ``group`` 0..3 apart, columns ``quad``
    0..3, or the transpose) hit 16 distinct 8-byte bank pairs; for 4-byte elements
    4 (A: rows ``group`` 0..7, columns ``quad``) or 8 (B: rows ``quad``, columns
    ``group``) modulo 32, so a warp's 32 reads hit 32 distinct banks."""
    if padding != -1:
        return padding
    if itemsize == 8:
        return (4 - row) % 16
    return ((4 if operand == "a" else 8) - row) % 32


def _sixteen_bit_ld(run: int, padding: int) -> int:
    """Row length of a 16-bit tile whose contiguous runs have ``run`` elements:
    padded to an odd multiple of 8 elements (16 bytes) when ``padding`` is -1."""
    if padding != -1:
        return run + padding
    return run + (VECTOR if (run // VECTOR) % 2 == 0 else 0)


def runs_along_cols(operand: Operand, col_group: tuple[str, ...]) -> bool:
    """Whether the operand's stride-1 index is the last (fastest) of the tile's
    column group: consecutive columns are then consecutive in global memory."""
    return bool(col_group) and operand.stride(col_group[-1]) == 1


def tile_groups(c: Contraction, which: str) -> tuple[Operand, tuple[str, ...], tuple[str, ...]]:
    """(operand, row group, column group) of the A (M × k) or B (k × N) tile."""
    return (c.a, c.m, c.k) if which == "a" else (c.b, c.k, c.n)


def _larger(rows: int, cols: int, lead: Callable[[int], int]) -> Staging:
    """The larger of the two ways a ``rows × cols`` tile may lie, its row length
    ``lead(run)`` for a contiguous run of ``run`` elements (a bound on shared
    memory where the contraction is not known)."""
    both = [Staging(o, lead(cols if o else rows)) for o in (True, False)]
    return max(both, key=lambda s: s.elements(rows, cols))


def staging(c: Contraction | None, config: MmaConfig, which: str) -> Staging:
    """How the A or B tile of ``config`` lies in shared memory (see the module
    docstring); ``c`` None: an fp64 or 16-bit tile the larger of its two
    orientations (for a bound on shared memory)."""
    bm, bn = config.block_tile()
    rows, cols = (bm, config.k_step) if which == "a" else (config.k_step, bn)
    shape = SHAPES[config.shape]
    line, chunk = line_elements(config), chunk_elements(config)
    if shape.group > 1 and c is None:  # swizzled: no padding either way
        return Staging(True, line, chunk, swizzle=True, lines=rows, chunk=chunk)
    if shape.packed == 1 and shape.group == 1:
        if config.itemsize == 8 and c is not None:
            return f64_staging(c, config, which)
        if config.itemsize == 8:  # without a contraction: the larger orientation
            return _larger(rows, cols, lambda run: run + _padding(run, config.padding, 8, which))
        return Staging(True, cols + _padding(cols, config.padding, config.itemsize, which))
    if c is None:
        return _larger(rows, cols, lambda run: _sixteen_bit_ld(run, config.padding))
    operand, row_group, col_group = tile_groups(c, which)
    along_cols = runs_along_cols(operand, col_group)
    if shape.group > 1:  # warpgroup MMA: swizzled lines, 16-byte copies
        other = rows if along_cols else cols
        return Staging(along_cols, line, chunk, swizzle=True, lines=other, chunk=chunk)
    width = VECTOR if config.copy == "async" else 1
    return Staging(along_cols, _sixteen_bit_ld(cols if along_cols else rows, config.padding), width)


#: fp64 elements per 16-byte ``cp.async``.
F64_VECTOR = 2


def f64_staging(c: Contraction, config: MmaConfig, which: str) -> Staging:
    """The fp64 A or B tile of ``config``: contiguous along the operand's own
    contiguous run (:func:`runs_along_cols`), padded so that a row is 4 modulo 16
    elements long, copied 16 bytes at a time where :func:`vector_problems` allows
    (the ``cg`` copies bypass L1).  Fragment loads stay conflict-free either way:
    a half warp reads rows ``group`` 0..3 and columns ``quad`` 0..3 of the
    instruction tile, at offsets ``4·group + quad`` or ``4·quad + group`` modulo
    16 bank pairs.  An LU update (column-major A, 4096×4032×64) ran with L1 92 %
    busy and its 8-byte copies stalled on the MIO queue when A was transposed on
    its way into a k-contiguous tile (ncu, H100)."""
    bm, bn = config.block_tile()
    rows, cols = (bm, config.k_step) if which == "a" else (config.k_step, bn)
    operand, row_group, col_group = tile_groups(c, which)
    along_cols = runs_along_cols(operand, col_group)
    run = cols if along_cols else rows
    ld = run + _padding(run, config.padding, config.itemsize, which)
    group = col_group if along_cols else row_group
    vector = (
        config.copy == "async"
        and ld % F64_VECTOR == 0
        and not vector_problems(c, operand, group, F64_VECTOR)
    )
    return Staging(along_cols, ld, F64_VECTOR if vector else 1)


def vector_problems(
    c: Contraction, operand: Operand, group: tuple[str, ...], width: int = VECTOR
) -> list[str]:
    """Why ``operand`` cannot be copied ``width`` elements (16 bytes: 8 of 16 bits,
    4 of 32) at a time along ``group`` (the tile dimension stored contiguously):
    its stride-1 index must be the group's last, with an extent that ``width``
    divides, and every other stride a multiple of ``width`` (so every copy starts
    16-byte aligned)."""
    name = operand.tensor
    if not group or operand.stride(group[-1]) != 1:
        return [f"{name}: its stride-1 index does not run along the staged tile"]
    found = []
    extent = c.extent(group[-1])
    if extent % width:
        found.append(f"{name}: extent {extent} of {group[-1]} is not a multiple of {width}")
    odd = [i for i, s in operand.strides if s != 1 and s % width]
    if odd:
        found.append(f"{name}: strides of {', '.join(odd)} are not multiples of {width} elements")
    return found


# ---- ldmatrix ----------------------------------------------------------------------


def register_origins(layout: Layout, k_along_cols: bool) -> tuple[tuple[int, int], ...]:
    """(mn, k) origin of the 8×8 submatrix each 32-bit register of a packed layout
    covers: register ``j`` (elements ``2j``, ``2j + 1``) of lane (group, quad) must
    hold the elements ``2·quad``, ``2·quad + 1`` along k at ``group`` along M or N.
    ``k_along_cols``: the layout's columns are k (A), else its rows (B).
    ValueError for a layout that is not of this kind."""
    origins = []
    for j in range(layout.count // 2):
        r0, c0 = layout.at(0, 2 * j)
        mn0, k0 = (r0, c0) if k_along_cols else (c0, r0)
        for lane in range(32):
            group, quad = lane >> 2, lane % 4
            for h in (0, 1):
                r, c = layout.at(lane, 2 * j + h)
                mn, k = (r, c) if k_along_cols else (c, r)
                if (mn, k) != (mn0 + group, k0 + 2 * quad + h):
                    raise ValueError(f"register {j} of the layout is not an ldmatrix submatrix")
        origins.append((mn0, k0))
    return tuple(origins)


@dataclass(frozen=True)
class LoadCall:
    """One ``ldmatrix`` of a warp: ``count`` submatrices into fragment registers
    ``first ..`` (tile ``tile`` of the warp onwards); ``pattern`` says, per
    submatrix, its (mn, k) origin relative to that tile's."""

    first: int
    tile: int
    pattern: tuple[tuple[int, int], ...]

    @property
    def count(self) -> int:
        return len(self.pattern)


def load_calls(tiles: int, origins: tuple[tuple[int, int], ...], tile_mn: int) -> list[LoadCall]:
    """The registers of ``tiles`` instruction tiles (each with one submatrix per
    register at ``origins``, tiles ``tile_mn`` apart along M or N), four per call."""
    per_tile = len(origins)
    registers = [(t, j) for t in range(tiles) for j in range(per_tile)]
    calls = []
    for first in range(0, len(registers), 4):
        chunk = registers[first : first + 4]
        if len(chunk) == 3:  # ldmatrix takes 1, 2 or 4 matrices
            calls.append(_call(first, chunk[:2], origins, tile_mn))
            calls.append(_call(first + 2, chunk[2:], origins, tile_mn))
        else:
            calls.append(_call(first, chunk, origins, tile_mn))
    return calls


def _call(first: int, chunk: list, origins, tile_mn: int) -> LoadCall:
    tile = chunk[0][0]
    pattern = tuple(((t - tile) * tile_mn + origins[j][0], origins[j][1]) for t, j in chunk)
    return LoadCall(first, tile, pattern)


def lane_offset(pattern: tuple[tuple[int, int], ...], along_k: bool, ld: int) -> kir.Expr:
    """The shared offset, relative to the call's tile origin, of the row a lane
    gives: row ``lane % 8`` of submatrix ``lane / 8`` (lanes past the call's
    submatrices repeat the last one).  ``along_k``: the tile is stored with k
    contiguous (rows of the submatrix run along M or N), else M or N contiguous
    (rows run along k, loaded ``.trans``)."""
    lane = E.mod(kir.ThreadIdx(), 32)
    row, matrix = E.mod(lane, 8), E.div(lane, 8)
    offsets = [mn * ld + k if along_k else k * ld + mn for mn, k in pattern]
    chosen: kir.Expr = E.const(offsets[-1])
    for j in range(len(offsets) - 2, -1, -1):
        chosen = kir.Select(kir.Op("==", matrix, E.const(j)), E.const(offsets[j]), chosen)
    return E.add(E.mul(row, E.const(ld)), chosen)


def sector_efficiency(c: Contraction, config: MmaConfig, which: str) -> float:
    """Share of the 32-byte sectors that one warp's copy of the A or B tile touches
    which it uses: the first 32 copies of the tile, walked as the copy loop walks
    them (consecutive threads along the operand's contiguous index where it is the
    last of the column group, else along the rows), from the tile at the origin.
    1 for a copy along a contiguous run of at least a warp's bytes; 0.25 for a
    gather whose eight-byte elements each land in a sector of their own."""
    operand, row_group, col_group = tile_groups(c, which)
    bm, bn = config.block_tile()
    rows, cols = (bm, config.k_step) if which == "a" else (config.k_step, bn)
    width = staging(c, config, which).width
    along_cols = runs_along_cols(operand, col_group)
    sectors: set[int] = set()
    for t in range(32):
        r, col = copy_position(E.const(t), rows, cols, width, along_cols)
        coords = {**c.coordinates(row_group, r), **c.coordinates(col_group, col)}
        offset = c.offset(operand, coords)  # constants fold: an integer
        assert isinstance(offset, kir.Int)
        first = offset.value * config.itemsize
        last = first + (width - 1) * config.itemsize
        sectors.update(range(first // 32, last // 32 + 1))
    return 32 * width * config.itemsize / (32 * len(sectors))


def copy_position(
    e: kir.Expr, rows: int, cols: int, width: int, along_cols: bool
) -> tuple[kir.Expr, kir.Expr]:
    """Row and column in a ``rows`` × ``cols`` tile of copy number ``e`` (each of
    ``width`` elements): consecutive copies along the columns where ``along_cols``
    (the operand's contiguous index is the column group's last), else along the
    rows."""
    if along_cols:
        r, col = E.div(e, cols // width), E.mod(e, cols // width)
        return r, (E.mul(col, E.const(width)) if width > 1 else col)
    r, col = E.mod(e, rows // width), E.div(e, rows // width)
    return (E.mul(r, E.const(width)) if width > 1 else r), col
