"""Tiles of a two-dimensional domain that skip the empty ones (a triangle's upper
half): the plan, made on the host for fixed sizes, and the kernel-IR arithmetic
that sends block ``b`` to its tile.

The domain is given row by row (``[low, high)`` of the inner iterator for each
value of the outer one).  Tiles are ``ROWS x COLUMNS`` (8 x 32: a warp along the
contiguous inner dimension); a row of tiles covers the columns of the union of
its rows' ranges, so only tiles that hold a point — or sit between two that do —
are launched.  Block ``b`` finds its tile row ``q`` and the column shift
``delta`` (tile column ``b + delta``) by a balanced tree of comparisons with the
first block of each non-empty tile row: a few selects, no table in memory.
With ``run`` > 1 a block takes ``run`` consecutive tiles of one tile row (tile
column ``b·run + delta`` and the next ``run - 1``, up to the row's ``last``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from . import kir

ROWS, COLUMNS = 8, 32


@dataclass(frozen=True)
class TilePlan:
    """``entries``: for each non-empty tile row, (its first block, tile row,
    column shift); ``blocks``: blocks launched; ``box``: tiles of the bounding
    box; ``run``: tiles per block; ``lasts``: each entry's last tile column;
    ``tiles``: non-empty tiles."""

    entries: tuple[tuple[int, int, int], ...]
    blocks: int
    box: int
    origin: int  # the inner iterator's value at tile column 0
    run: int = 1
    lasts: tuple[int, ...] = ()
    tiles: int = 0


def tile_plan(
    rows: Sequence[tuple[int, int]],
    tile_rows: int = ROWS,
    tile_columns: int = COLUMNS,
    run: int = 1,
) -> TilePlan | None:
    """The non-empty tiles (``tile_rows`` x ``tile_columns``) of a domain given as
    each row's ``[low, high)``, ``run`` consecutive tiles of a tile row per block."""
    filled = [(low, high) for low, high in rows if high > low]
    if not filled:
        return None
    origin = min(low for low, _ in filled)
    right = max(high for _, high in filled)
    entries, lasts, block, tiles = [], [], 0, 0
    for q in range(-(-len(rows) // tile_rows)):
        ranges = [(lo, hi) for lo, hi in rows[q * tile_rows : (q + 1) * tile_rows] if hi > lo]
        if not ranges:
            continue
        first = (min(lo for lo, _ in ranges) - origin) // tile_columns
        last = (max(hi for _, hi in ranges) - origin - 1) // tile_columns
        entries.append((block, q, first - block * run))
        lasts.append(last)
        tiles += last - first + 1
        block += -(-(last - first + 1) // run)
    box = -(-len(rows) // tile_rows) * -(-(right - origin) // tile_columns)
    return TilePlan(tuple(entries), block, box, origin, run, tuple(lasts), tiles)


def select_tree(b: kir.Expr, starts: Sequence[int], leaves: Sequence[int]) -> kir.Expr:
    """``leaves[k]`` for the last ``k`` with ``starts[k] <= b`` (``starts`` ascending,
    ``starts[0] <= b`` assumed): a balanced tree of selects."""
    if len(leaves) == 1:
        return kir.Int(leaves[0])
    middle = len(leaves) // 2
    return kir.Select(
        kir.Op("<", b, kir.Int(starts[middle])),
        select_tree(b, starts[:middle], leaves[:middle]),
        select_tree(b, starts[middle:], leaves[middle:]),
    )
