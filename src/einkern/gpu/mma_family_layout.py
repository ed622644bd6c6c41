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


def _digits(names: Sequence[str], box: dict[str, int], flat: np.ndarray) -> dict[str, np.ndarray]:
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
    shape = SHAPES[config.shape]
    extents = dict(box)
    table = shape.c.table()  # (32 lanes, count, 2)
    found = []
    for term in terms:
        warps = np.arange(config.warps_m * config.warps_n)
        wrow = (warps % config.warps_m) * term.tiles_m * shape.m
        wcol = (warps // config.warps_m) * term.tiles_n * shape.n
        tm = np.arange(term.tiles_m) * shape.m
        tn = np.arange(term.tiles_n) * shape.n
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
        local = {
            **_digits(term.rows, extents, rows.reshape(-1, 32)),
            **_digits(term.cols, extents, cols.reshape(-1, 32)),
        }
        zero = np.zeros(rows.reshape(-1, 32).shape, dtype=np.int64)
        found.append(np.stack([local.get(n, zero) for n in order], axis=-1))
    return np.concatenate(found) if found else np.zeros((0, 32, len(order)), np.int64)


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
    """(strides in ``order``, the padded box's elements, its relayout wavefronts)."""
    extents = [dict(box)[n] for n in order]
    coordinates = relayout_coordinates(order, box, terms, config, sample=True)
    pads = [0] * (len(order) - 1)
    best = wavefronts(coordinates, _strides(extents, pads))
    ideal = 2 * len(coordinates)  # two wavefronts per warp-wide access: no conflicts
    for _ in range(2):
        start = best
        for level in range(len(pads)):
            if best <= ideal:
                break
            trials = [[*pads[:level], pad, *pads[level + 1 :]] for pad in PADS]
            choices = np.array([_strides(extents, t) for t in trials], dtype=np.int64)
            counts = _wavefronts(coordinates, choices)
            pick = int(np.argmin(counts))  # the first of the fewest: the smallest pad
            if counts[pick] < best:
                best, pads = int(counts[pick]), trials[pick]
        if best == start:
            break
    strides = _strides(extents, pads)
    best = wavefronts(relayout_coordinates(order, box, terms, config), strides)
    size = sum((e - 1) * s for e, s in zip(extents, strides, strict=True)) + 1
    return tuple(strides), size, best
