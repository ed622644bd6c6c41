"""Terms of a product family that share one accumulator layout
(``MmaConfig.group_terms``; :mod:`.mma_family`).

A family kernel adds each term's accumulators into the shared box after the
term (the *relayout*): two shared accesses per box element and term.  On an
H100 the d1 family at T = 16 was bound by the shared-memory pipe (L1/shared
throughput 83 %), over half of whose bytes were relayouts
(docs/tensor_cores.md#terms-sharing-an-accumulator-layout).

Two terms can accumulate in the same registers when every lane owns the same
box elements in both.  With power-of-two box extents a term's GEMM view is a
permutation of the box's bits: each row position of the ``m16n8`` instruction
tiles is one bit of one output index (of the term's row operand), and so is
each column position.  A lane's identity is

* row bits 0-2 (its ``group``, lane / 4),
* column bits 1-2 (its ``quad``, lane % 4),
* the warp's row and column bits (the top ones),

and everything else (row bit 3, column bit 0, the instruction tiles) is its
registers.  So terms whose row views hold the same *fixed row bits* (group
and warp rows) and whose column views hold the same *fixed column bits*
(quad and warp columns) can be given views in which those bits sit at the
same positions: their lanes then own the same elements, and each instruction
tile's accumulator registers are found by element (:attr:`TermBits.slots`).
A term's operands may be swapped (``Cᵀ = Bᵀ·Aᵀ``) to fit a group.

:func:`term_groups` covers the family's terms with the fewest such groups; terms
of one group also need the same constant and scalars (their signs may differ:
a term of the other sign negates its A fragments).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from . import exprs as E
from . import kir
from .mma import SHAPES

#: (output index, bit of its box coordinate)
Bit = tuple[str, int]


@dataclass(frozen=True)
class TermBits:
    """One term's GEMM view as box bits: ``rows[p]`` is the bit at row position
    ``p`` (lowest first), ``cols[p]`` likewise; ``view``: 0 the statement's
    orientation, 1 the operands swapped; ``slots[t]``: the accumulator registers
    of instruction tile ``t`` (``tm · tiles_n + tn``) in the group's numbering."""

    view: int
    rows: tuple[Bit, ...]
    cols: tuple[Bit, ...]
    slots: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Group:
    """Terms (family numbers, in the kernel's order) accumulated in one set of
    registers, relaid once after the last; ``bits`` per term, the first term's
    views numbering the registers."""

    terms: tuple[int, ...]
    bits: tuple[TermBits, ...]


@dataclass(frozen=True)
class TermView:
    """What the grouping needs of a term: its two views' row and column indices
    (box extents over 1) and a key of its constant and scalars."""

    rows: tuple[tuple[str, ...], tuple[str, ...]]
    cols: tuple[tuple[str, ...], tuple[str, ...]]
    factor: tuple


def _log2(n: int) -> int | None:
    return n.bit_length() - 1 if n > 0 and n & (n - 1) == 0 else None


def _bits(indices: Sequence[str], box: dict[str, int]) -> list[Bit]:
    """The bits of ``indices`` (fastest first: the list's last index first), low
    bit first."""
    return [(i, b) for i in reversed(indices) for b in range(_log2(box[i]) or 0)]


def _minimal_sets(indices: Sequence[str], box: dict[str, int], need: int) -> list[frozenset]:
    """Sets of ``indices`` with at least ``need`` bits, none of whose proper
    subsets has (the fewer indices fixed, the more terms fit)."""
    return _minimal(tuple(indices), tuple((i, box[i]) for i in indices), need)


@lru_cache(maxsize=4096)
def _minimal(indices: tuple[str, ...], extents: tuple, need: int) -> list[frozenset]:
    box = dict(extents)
    found: list[frozenset] = []
    for size in range(len(indices) + 1):
        for chosen in itertools.combinations(indices, size):
            bits = sum(_log2(box[i]) or 0 for i in chosen)
            if bits >= need and not any(s < frozenset(chosen) for s in found):
                found.append(frozenset(chosen))
    return found


@lru_cache(maxsize=64)
def _c_layout_ok(shape_name: str) -> bool:
    """The instruction's accumulator has the ``m16n8`` layout the grouping assumes:
    register ``i`` of lane ``t`` at row ``t/4 + 8·(i/2)``, column ``2·(t%4) + i%2``."""
    shape = SHAPES[shape_name]
    if (shape.m, shape.n, shape.c.count) != (16, 8, 4):
        return False
    table = shape.c.table()
    return all(
        tuple(table[t][i]) == (t // 4 + 8 * (i // 2), 2 * (t % 4) + i % 2)
        for t in range(32)
        for i in range(4)
    )


@dataclass(frozen=True)
class Grouping:
    """What the grouping of a family's terms depends on: the terms' views, the
    box (extents of the output indices), the box's indices slowest first, the
    warps and the instruction."""

    views: tuple[TermView, ...]
    box: tuple[tuple[str, int], ...]
    order: tuple[str, ...]
    warps_m: int
    warps_n: int
    shape: str


def term_groups(request: Grouping) -> tuple[Group, ...] | None:
    """The family's terms covered by the fewest groups sharing an accumulator
    layout (:func:`_fewest`), or None where the box's extents or the warps are
    not powers of two or the instruction's accumulator is not the ``m16n8``
    layout."""
    cover = _cover(request)
    if cover is None:
        return None
    lm, ln = _log2(request.warps_m) or 0, _log2(request.warps_n) or 0
    box = dict(request.box)
    groups = [
        _group(list(pairs), layout, request.views, box, request.order, lm, ln)
        for pairs, layout in cover
    ]
    return tuple(sorted(groups, key=lambda g: g.terms[0]))


def group_count(request: Grouping) -> int | None:
    """The number of groups :func:`term_groups` makes (None: it makes none),
    without laying the terms out: what the cost model's bound needs."""
    cover = _cover(request)
    return None if cover is None else len(cover)


@lru_cache(maxsize=4096)
def _cover(request: Grouping) -> tuple[tuple[tuple[tuple[int, int], ...], tuple], ...] | None:
    """Each group's (term, view) pairs and layout (its fixed row and column
    index sets), or None (see :func:`term_groups`)."""
    views, order, warps_m, warps_n = request.views, request.order, request.warps_m, request.warps_n
    box = dict(request.box)
    if not _c_layout_ok(request.shape):
        return None
    lm, ln = _log2(warps_m), _log2(warps_n)
    if lm is None or ln is None:
        return None
    if any(_log2(e) is None for e in box.values()):
        return None
    indices = [i for i in order if box.get(i, 1) > 1]
    need_rows, need_cols = 3 + lm, 2 + ln
    # per term, the views with a register bit on each side beside the fixed ones
    usable = [
        [
            (v, frozenset(view.rows[v]), frozenset(view.cols[v]))
            for v in (0, 1)
            if len(_bits(view.rows[v], box)) > need_rows
            and len(_bits(view.cols[v], box)) > need_cols
        ]
        for view in views
    ]
    # every layout's terms (each in its first view that fits), per factor
    candidates: dict[frozenset, tuple[tuple[tuple[int, int], ...], tuple]] = {}
    for rows in _minimal_sets(indices, box, need_rows):
        rest = [i for i in indices if i not in rows]
        for cols in _minimal_sets(rest, box, need_cols):
            by_factor: dict[tuple, dict[int, int]] = {}
            for t, options in enumerate(usable):
                for v, row_set, col_set in options:
                    if rows <= row_set and cols <= col_set:
                        by_factor.setdefault(views[t].factor, {}).setdefault(t, v)
                        break
            for chosen in by_factor.values():
                if frozenset(chosen) not in candidates:
                    candidates[frozenset(chosen)] = (tuple(sorted(chosen.items())), (rows, cols))
    cover = _fewest(len(views), list(candidates))
    if cover is None:
        return None
    found = []
    for terms in cover:
        pairs, layout = candidates[next(c for c in candidates if terms <= c)]
        found.append((tuple((t, v) for t, v in pairs if t in terms), layout))
    return tuple(found)


#: Search nodes :func:`_fewest` visits before it keeps the best cover found.
COVER_NODES = 2000


def _fewest(count: int, sets: list[frozenset]) -> list[frozenset] | None:
    """The fewest disjoint parts of ``range(count)``, each inside one of ``sets``:
    depth-first from the lowest term left, the largest parts first, pruned by
    the parts still needed at the largest size; after :data:`COVER_NODES` nodes
    the best cover found so far (the first is the greedy one)."""
    best: list[list[frozenset]] = []
    largest = max((len(s) for s in sets), default=1)
    nodes = [0]

    def search(left: frozenset, taken: list[frozenset]) -> None:
        nodes[0] += 1
        if best and (
            nodes[0] > COVER_NODES or len(taken) + -(-len(left) // largest) >= len(best[0])
        ):
            return
        if not left:
            best[:] = [list(taken)]
            return
        first = min(left)
        parts = sorted({s & left for s in sets if first in s}, key=len, reverse=True)
        for part in parts:
            search(left - part, [*taken, part])

    search(frozenset(range(count)), [])
    return best[0] if best else None


def _group(
    chosen: list[tuple[int, int]],
    layout: tuple[frozenset, frozenset],
    views: Sequence[TermView],
    box: dict[str, int],
    order: Sequence[str],
    lm: int,
    ln: int,
) -> Group:
    """The group of terms ``chosen`` ((term, view) pairs) on ``layout`` (its
    fixed row and column index sets): the fixed bits first (fastest index, low
    bit first), each term's other bits in its view's order."""
    fixed_rows = _bits([i for i in order if i in layout[0]], box)[: 3 + lm]
    fixed_cols = _bits([i for i in order if i in layout[1]], box)[: 2 + ln]
    group, warp_rows = fixed_rows[:3], fixed_rows[3:]
    quad, warp_cols = fixed_cols[:2], fixed_cols[2:]
    laid = []
    for t, v in chosen:
        rest_rows = [b for b in _bits(views[t].rows[v], box) if b not in fixed_rows]
        rest_cols = [b for b in _bits(views[t].cols[v], box) if b not in fixed_cols]
        rows = (*group, *rest_rows, *warp_rows)
        cols = (rest_cols[0], *quad, *rest_cols[1:], *warp_cols)
        laid.append((v, rows, cols))
    _, numbering = _registers(*laid[0][1:], lm, ln)
    bits = []
    for v, rows, cols in laid:
        own, _ = _registers(rows, cols, lm, ln)
        slots = tuple(
            tuple(numbering[own[4 * tile + i]] for i in range(4)) for tile in range(len(own) // 4)
        )
        bits.append(TermBits(v, rows, cols, slots))
    return Group(tuple(t for t, _ in chosen), tuple(bits))


@lru_cache(maxsize=8192)
def _registers(
    rows: tuple[Bit, ...], cols: tuple[Bit, ...], lm: int, ln: int
) -> tuple[list[frozenset], dict[frozenset, int]]:
    """For a term's view: the element of each register ``4·tile + i`` (tile
    ``tm · tiles_n + tn``) on lane 0 of warp 0, as the set of box bits that are
    set in it, and the inverse (element → register)."""
    tiles_m = 2 ** (len(rows) - 4 - lm)
    tiles_n = 2 ** (len(cols) - 3 - ln)
    elements = []
    for tm, tn, i in itertools.product(range(tiles_m), range(tiles_n), range(4)):
        row, col = tm * 16 + 8 * (i // 2), tn * 8 + i % 2
        elements.append(
            frozenset(
                [rows[p] for p in range(len(rows)) if row >> p & 1]
                + [cols[p] for p in range(len(cols)) if col >> p & 1]
            )
        )
    return elements, {e: n for n, e in enumerate(elements)}


def coordinate_parts(bits: Sequence[Bit], index: str) -> list[tuple[int, int, int]]:
    """Runs of ``index``'s bits in ``bits``: (first position, first bit, length),
    consecutive positions holding consecutive bits merged."""
    runs: list[tuple[int, int, int]] = []
    for p, (name, b) in enumerate(bits):
        if name != index:
            continue
        if runs and runs[-1][0] + runs[-1][2] == p and runs[-1][1] + runs[-1][2] == b:
            start, first, length = runs[-1]
            runs[-1] = (start, first, length + 1)
        else:
            runs.append((p, b, 1))
    return runs


def bit_coordinates(bits: tuple, flat: kir.Expr) -> dict[str, kir.Expr]:
    """Each index's coordinate at position ``flat`` of a view given as box bits
    (:class:`.mma_family_groups.TermBits`)."""
    found: dict[str, kir.Expr] = {}
    for index in dict.fromkeys(name for name, _ in bits):
        value: kir.Expr = E.const(0)
        for start, first, length in coordinate_parts(bits, index):
            part = E.mod(E.div(flat, 2**start), 2**length)
            value = E.add(value, E.mul(part, E.const(2**first)))
        found[index] = value
    return found


def bit_position(bits: tuple, local: dict[str, kir.Expr]) -> kir.Expr:
    """The position in a view given as box bits of box coordinates ``local``."""
    position: kir.Expr = E.const(0)
    for index in dict.fromkeys(name for name, _ in bits):
        for start, first, length in coordinate_parts(bits, index):
            part = E.mod(E.div(local[index], 2**first), 2**length)
            position = E.add(position, E.mul(part, E.const(2**start)))
    return position


def staging_order(view: tuple, contiguous: str | None, along_k: bool) -> tuple:
    """The order in which a block's threads copy the rows (or columns) of a view
    given as box bits: along the operand's contiguous index first where it is
    one of them (coalesced runs), then in the view's order (consecutive threads on
    consecutive shared rows: the copies' shared stores spread over the banks)."""
    if along_k:
        return view
    run = tuple(b for b in view if b[0] == contiguous)
    return (*sorted(run, key=lambda b: b[1]), *(b for b in view if b[0] != contiguous))


__all__ = [
    "Bit",
    "Group",
    "Grouping",
    "TermBits",
    "TermView",
    "bit_coordinates",
    "bit_position",
    "coordinate_parts",
    "group_count",
    "staging_order",
    "term_groups",
]
