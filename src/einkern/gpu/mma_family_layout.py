"""The shared-memory layout of a product family's output box (:mod:`.mma_family`):
strides per output index, padded so that the relayout adds hit few bank
conflicts.

After each term a lane adds its accumulator elements into the box.  For one
accumulator register the 32 lanes address rows ``group`` and columns
``2·quad (+1)`` of the term's GEMM view, which decompose into box coordinates
of the term's row and column indices: with a dense box several lanes of a
half-warp land on one bank (8-byte elements: 16 banks of 8 bytes per
half-warp).  On the CCSD(T) d1/d2 boxes a dense layout took 7 to 10 times the
conflict-free number of shared-memory wavefronts, and the kernel's time
followed that count (docs/tensor_cores.md#product-families).

:func:`box_strides` pads the dense mixed-radix strides (the output's
contiguous index fastest): each level's stride is the one below times its
extent plus a pad, the pads chosen by coordinate descent to minimise the
wavefronts of every term's relayout, counted exactly from the accumulator
layout (:mod:`.mma`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from .mma import SHAPES

#: Pads tried at each level of the box's strides.
PADS = (0, 1, 2, 3, 4, 5, 6, 7)

#: Double-width banks a half-warp's 8-byte accesses spread over.
BANKS = 16


def _digits(names: Sequence, box: dict, flat: np.ndarray) -> dict:
    """Each name's coordinate of the flat positions ``flat`` (names slowest first)."""
    found = {}
    for name in reversed(names):
        found[name] = flat % box[name]
        flat = flat // box[name]
    return found


def relayout_coordinates(
    order: tuple[str, ...],
    box: tuple[tuple[str, int], ...],
    terms: tuple,
    config,
    sample: bool = False,
) -> np.ndarray:
    """Box coordinates of every relayout access of one block: shape
    (accesses, 32 lanes, len(order)); ``terms`` are the family's laid terms
    (rows, cols, tiles per warp).  ``sample``: the first and last instruction
    tile of each term only (the search's cheap proxy)."""
    found = [_term_coordinates(_term_key(order, box, t, config, sample)) for t in terms]
    return np.concatenate(found) if found else np.zeros((0, 32, len(order)), np.int64)


def _term_key(order: tuple[str, ...], box: tuple[tuple[str, int], ...], term, config, sample):
    """One term's relayout as a key without index names (the box's extents in
    ``order``, the positions in ``order`` of the term's rows and columns, its
    tiles, the instruction and warps): a term met again in another merged
    group, under other names, shares its coordinates and counts."""
    extents = dict(box)
    bits = getattr(term, "bits", None)
    if bits is not None:  # a view as box bits (terms sharing accumulators)
        rows: tuple = ("bits", *((order.index(n), b) for n, b in bits.rows))
        cols: tuple = ("bits", *((order.index(n), b) for n, b in bits.cols))
    else:
        rows = tuple(order.index(n) for n in term.rows)
        cols = tuple(order.index(n) for n in term.cols)
    return (
        tuple(extents[n] for n in order),
        rows,
        cols,
        term.tiles_m,
        term.tiles_n,
        config.shape,
        config.warps_m,
        config.warps_n,
        sample,
    )


@lru_cache(maxsize=4096)
def _term_coordinates(key: tuple) -> np.ndarray:
    """The coordinates of :func:`relayout_coordinates` for one term's key."""
    extents, row_at, col_at, tiles_m, tiles_n, shape_name, warps_m, warps_n, sample = key
    shape = SHAPES[shape_name]
    table = shape.c.table()  # (32 lanes, count, 2)
    warps = np.arange(warps_m * warps_n)
    wrow = (warps % warps_m) * tiles_m * shape.m
    wcol = (warps // warps_m) * tiles_n * shape.n
    tm = np.arange(tiles_m) * shape.m
    tn = np.arange(tiles_n) * shape.n
    if sample:
        wrow, wcol = wrow[[0, -1]], wcol[[0, -1]]
        tm, tn = tm[[0, -1]], tn[[0, -1]]
    # (warp, tm, tn, register, lane)
    rows = (
        wrow[:, None, None, None, None]
        + tm[None, :, None, None, None]
        + table[:, :, 0].T[None, None, None, :, :]
    )
    cols = (
        wcol[:, None, None, None, None]
        + tn[None, None, :, None, None]
        + table[:, :, 1].T[None, None, None, :, :]
    )
    rows, cols = np.broadcast_arrays(rows, cols)
    box = dict(enumerate(extents))  # positions in the order as names
    local = {
        **_view_digits(row_at, box, rows.reshape(-1, 32)),
        **_view_digits(col_at, box, cols.reshape(-1, 32)),
    }
    zero = np.zeros(rows.reshape(-1, 32).shape, dtype=np.int64)
    found = np.stack([local.get(i, zero) for i in range(len(extents))], axis=-1)
    found.setflags(write=False)
    return found


def _view_digits(at: tuple, box: dict, flat: np.ndarray) -> dict:
    """Each index's coordinate of the positions ``flat`` of a view: mixed radix
    over the indices ``at`` (slowest first), or ``("bits", (index, bit), ...)``,
    the box bit at each position, lowest first."""
    if not at or at[0] != "bits":
        return _digits(at, box, flat)
    found: dict = {}
    for position, (index, bit) in enumerate(at[1:]):
        found[index] = found.get(index, 0) + ((flat >> position) & 1) * (1 << bit)
    return found


@lru_cache(maxsize=65536)
def _term_wavefronts(key: tuple, strides: tuple[int, ...]) -> int:
    """:func:`wavefronts` of one term's relayout (its key) with ``strides``."""
    return wavefronts(_term_coordinates(key), strides)


def wavefronts(coordinates: np.ndarray, strides: Sequence[int]) -> int:
    """Shared-memory wavefronts of the accesses at ``coordinates`` (from
    :func:`relayout_coordinates`) with these strides: per half-warp, the most
    addresses that share a bank (a relayout's addresses are distinct)."""
    return int(_wavefronts(coordinates, np.asarray([strides], dtype=np.int64))[0])


def _wavefronts(coordinates: np.ndarray, strides: np.ndarray) -> np.ndarray:
    """:func:`wavefronts` for each row of ``strides`` (shape (choices, names))."""
    if not len(coordinates):
        return np.zeros(len(strides), dtype=np.int64)
    # floating-point products (BLAS; exact for these small integers), then banks
    flat = coordinates.reshape(-1, coordinates.shape[-1]).astype(np.float64)
    addresses = (strides.astype(np.float64) @ flat.T).astype(np.int64)  # (choices, accesses·32)
    halves = addresses.reshape(-1, 16)
    slots = np.arange(len(halves))[:, None] * BANKS + halves % BANKS
    counts = np.bincount(slots.ravel(), minlength=len(halves) * BANKS)
    per_half = counts.reshape(-1, BANKS).max(axis=1)
    return per_half.reshape(len(strides), -1).sum(axis=1)


def _strides(extents: Sequence[int], pads: Sequence[int]) -> list[int]:
    """Strides of levels (slowest first) from the fastest up: each the one below
    times its extent, plus that level's pad."""
    strides = [1]
    for extent, pad in zip(reversed(extents[1:]), reversed(pads), strict=True):
        strides.append(strides[-1] * extent + pad)
    return list(reversed(strides))


@lru_cache(maxsize=256)
def box_strides(
    order: tuple[str, ...], box: tuple[tuple[str, int], ...], terms: tuple, config
) -> tuple[tuple[int, ...], int, int]:
    """(strides in ``order``, the padded box's elements, its relayout wavefronts).
    The wavefronts of a layout are the sum of its terms' (each term's count per
    strides cached: the fusion planner prices hundreds of merged groups that
    share their terms)."""
    extents = [dict(box)[n] for n in order]
    sampled = [_term_key(order, box, t, config, True) for t in terms]

    def count(strides: list[int]) -> int:
        key = tuple(strides)
        return sum(_term_wavefronts(t, key) for t in sampled)

    pads = [0] * (len(order) - 1)
    best = count(_strides(extents, pads))
    ideal = 2 * sum(len(_term_coordinates(t)) for t in sampled)  # no conflicts
    for _ in range(2):
        start = best
        for level in range(len(pads)):
            if best <= ideal:
                break
            trials = [[*pads[:level], pad, *pads[level + 1 :]] for pad in PADS]
            counts = [count(_strides(extents, t)) for t in trials]
            pick = counts.index(min(counts))  # the first of the fewest: the smallest pad
            if counts[pick] < best:
                best, pads = counts[pick], trials[pick]
        if best == start:
            break
    strides = _strides(extents, pads)
    exact = [_term_key(order, box, t, config, False) for t in terms]
    best = sum(_term_wavefronts(t, tuple(strides)) for t in exact)
    size = sum((e - 1) * s for e, s in zip(extents, strides, strict=True)) + 1
    return tuple(strides), size, best
