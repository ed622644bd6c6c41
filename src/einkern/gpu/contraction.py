"""A statement read as one binary contraction in GEMM form (the view tensor-core
kernels take): ``C[out] op= scale · Σ_K A[..] · B[..]`` with the indices in
four groups — batch (in A, B and C), M (in C and A), N (in C and B) and K
(summed, in A and B) — each group flattened into one logical dimension.

Within a group the indices are ordered slowest first, so that the group's
flat coordinate decomposes into per-index coordinates by division and
remainder; the order follows the operand whose loads it drives (M by A's
strides, N by B's, K by whichever operand is contiguous along a K index,
batch by C's), so that consecutive flat coordinates are consecutive addresses
where the layout allows.  :func:`contraction_of` says why when a statement
is not of this form.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import numpy as np

from ..ir.nodes import (
    Access,
    Const,
    Expr,
    Neg,
    ScalarRef,
    Sum,
    product_factors,
    signed_terms,
)
from ..ir.task import Task
from . import exprs as E
from . import kir


@dataclass(frozen=True)
class Operand:
    """One tensor access with the stride (in elements) of each of its indices."""

    access: Access
    strides: tuple[tuple[str, int], ...]

    @property
    def tensor(self) -> str:
        return self.access.tensor

    def stride(self, index: str) -> int:
        return dict(self.strides).get(index, 0)

    def contiguous(self) -> str | None:
        """The index with stride 1 (None for a rank-0 access)."""
        for index, stride in self.strides:
            if stride == 1:
                return index
        return None


@dataclass(frozen=True)
class Contraction:
    """The GEMM form of a statement (see the module docstring)."""

    output: Operand
    a: Operand
    b: Operand
    op: str  # "=", "+=" or "-="
    sign: int  # +1 or -1: the sign of the product term
    scale: tuple[str, ...]  # scalar names multiplying the product
    constant: float  # constant factor of the product
    extents: tuple[tuple[str, int], ...]
    batch: tuple[str, ...]
    m: tuple[str, ...]
    n: tuple[str, ...]
    k: tuple[str, ...]

    def extent(self, index: str) -> int:
        return dict(self.extents)[index]

    def size(self, group: tuple[str, ...]) -> int:
        return math.prod(self.extent(i) for i in group)

    @property
    def flops(self) -> int:
        return 2 * self.size(self.batch) * self.size(self.m) * self.size(self.n) * self.size(self.k)

    def coordinates(self, group: tuple[str, ...], flat: kir.Expr) -> dict[str, kir.Expr]:
        """Each index's coordinate from the group's flat coordinate ``flat``."""
        found: dict[str, kir.Expr] = {}
        inner = 1
        for index in reversed(group):
            extent = self.extent(index)
            found[index] = (
                E.mod(E.div(flat, inner), extent) if index != group[0] else E.div(flat, inner)
            )
            inner *= extent
        return found

    def offset(self, operand: Operand, coords: dict[str, kir.Expr]) -> kir.Expr:
        """``Σ stride·coordinate`` over the indices of ``operand`` found in ``coords``."""
        return E.linear([(coords[i], operand.stride(i)) for i, _ in operand.strides if i in coords])


class NotAContraction(ValueError):
    """The statement is not one binary contraction (the message says why)."""


def _operand(task: Task, access: Access) -> Operand:
    if len(set(access.indices)) != len(access.indices):
        raise NotAContraction(f"{access} repeats an index (a diagonal)")
    strides = task.problem.strides(access.tensor)
    return Operand(access, tuple(zip(access.indices, strides, strict=True)))


def _split(rhs: Expr) -> tuple[int, list[Expr], tuple[str, ...]]:
    """(sign, factors, summed indices) of a single-term right-hand side."""
    terms = signed_terms(rhs)
    if len(terms) != 1:
        raise NotAContraction(f"{len(terms)} terms (one product expected)")
    return split_term(*terms[0])


def split_term(sign: int, term: Expr) -> tuple[int, list[Expr], tuple[str, ...]]:
    """(sign, factors, summed indices) of one signed term of a right-hand side."""
    factors: list[Expr] = product_factors(term)
    summed: tuple[str, ...] = ()
    inner = [f for f in factors if isinstance(f, Sum)]
    if len(inner) > 1:
        raise NotAContraction("more than one sum in the product")
    if inner:
        summed = inner[0].indices
        rest: list[Expr] = [f for f in factors if not isinstance(f, Sum)]
        body_sign, body = 1, inner[0].body
        if isinstance(body, Neg):
            body_sign, body = -1, body.operand
        inner_terms = signed_terms(body)
        if len(inner_terms) != 1:
            raise NotAContraction("a sum of several terms")
        body_sign *= inner_terms[0][0]
        factors = rest + [f for f in product_factors(inner_terms[0][1])]
        sign *= body_sign
    return sign, factors, summed


@dataclass(frozen=True)
class Pointwise:
    """A term without a sum (the CCSD(T) singles ``t1[p4,h1]·v2[h3,h2,p6,p5]``, a
    bias ``+ D[i,j]``): tensors read at output coordinates times scalars and a
    constant, added to the output elementwise by the kernels of contractions
    and product families."""

    sign: int
    scale: tuple[str, ...]
    constant: float
    factors: tuple[Operand, ...]


def pointwise_term(
    task: Task, sign: int, factors: list[Expr], summed: tuple[str, ...]
) -> Pointwise | None:
    """The term (from :func:`split_term`) as a :class:`Pointwise`, or None."""
    statement = task.statement
    outputs = set(statement.output.indices)
    tensors = [f for f in factors if isinstance(f, Access)]
    if summed or not tensors:
        return None
    if not all(isinstance(f, (Access, ScalarRef, Const)) for f in factors):
        return None
    for access in tensors:
        if access.tensor == statement.output.tensor or not set(access.indices) <= outputs:
            return None
    try:
        operands = tuple(_operand(task, a) for a in tensors)
    except NotAContraction:
        return None
    scale = tuple(f.name for f in factors if isinstance(f, ScalarRef))
    constant = math.prod(f.value for f in factors if isinstance(f, Const))
    return Pointwise(sign, scale, float(constant), operands)


def scale_factor(sign: int, constant: float, scale: tuple[str, ...]) -> kir.Expr:
    """``sign · constant · scalars`` (scalar ``x`` is the kernel variable ``s_x``)."""
    factor: kir.Expr = kir.Float(sign * constant)
    for name in scale:
        factor = E.mul(factor, kir.Var(f"s_{name}"))
    return factor


def pointwise_value(term: Pointwise, coords: dict[str, kir.Expr], sign: int) -> kir.Expr:
    """``term``'s value at output coordinates ``coords`` (each factor loaded from
    its parameter ``p_<tensor>``), with ``sign`` in place of the term's own."""
    value = scale_factor(sign, term.constant, term.scale)
    for operand in term.factors:
        index = E.linear([(coords[i], operand.stride(i)) for i, _ in operand.strides])
        value = E.mul(value, kir.Load(f"p_{operand.tensor}", index))
    return value


def gemm_form(task: Task) -> tuple[Contraction, tuple[Pointwise, ...]]:
    """The task's statement as one contraction plus pointwise terms (a bias,
    ``C = A·B + D``), in statement order; :class:`NotAContraction` otherwise."""
    terms = signed_terms(task.statement.rhs)
    found: list[Contraction] = []
    pointwise: list[Pointwise] = []
    for term in terms:
        parts = split_term(*term)
        point = pointwise_term(task, *parts)
        if point is not None:
            pointwise.append(point)
        else:
            found.append(term_contraction(task, *parts))
    if len(found) != 1:
        raise NotAContraction(f"{len(found)} contraction terms (one expected)")
    return found[0], tuple(pointwise)


def contraction_of(task: Task) -> Contraction:
    """The GEMM form of the task's statement; :class:`NotAContraction` otherwise."""
    return term_contraction(task, *_split(task.statement.rhs))


#: The block tile side (at most) on which :func:`term_contraction` compares the
#: output's sector efficiency of the two group orders, and the gain that moves
#: the output's contiguous index (:func:`group_order`).
SECTOR_TILE = 64
SECTOR_GAIN = 1.25


def group_order(
    group: tuple[str, ...], operand: Operand, output: Operand, sizes: dict[str, int], itemsize: int
) -> tuple[str, ...]:
    """An M or N group (slowest index first, by ``operand``'s strides) with the
    output's contiguous index moved next after the operand's leading contiguous
    run (the indices at the fast end whose strides chain from 1, up to the first
    that makes the run span a 32-byte sector of ``itemsize`` elements), or
    fastest where the group has no such run.  A block tile then spans a few
    values of the output's contiguous index as well as a sector's worth of the
    operand's run, so its stores fill sectors instead of writing one element
    per sector (H100: e.g. ``lxv,pvwnxa->nlwavp``, whose N group's slowest index
    was the output's contiguous one; docs/tensor_cores.md "The output's
    contiguous index in the GEMM form")."""
    index = output.contiguous()
    if index not in group or index == group[-1]:
        return group
    run: list[str] = []
    stride = 1
    for name in reversed(group):
        if name == index or operand.stride(name) != stride or stride * itemsize >= 32:
            break
        run.insert(0, name)
        stride *= sizes[name]
    rest = [i for i in group if i != index and i not in run]
    return (*rest, index, *run)


def term_contraction(
    task: Task,
    sign: int,
    factors: list[Expr],
    summed: tuple[str, ...],
    output_order: bool = True,
) -> Contraction:
    """The GEMM form of one term (from :func:`split_term`) of the task's statement
    into its output; :class:`NotAContraction` when the term is not one.  The M and
    N groups follow the operands' strides, with the output's contiguous index
    moved by :func:`group_order` where that fills more output sectors
    (``output_order``; a product family stores its output box through a layout
    of its own and keeps the operands' order)."""
    statement = task.statement
    problem = task.problem
    tensors = [f for f in factors if isinstance(f, Access)]
    scale = tuple(f.name for f in factors if isinstance(f, ScalarRef))
    constant = math.prod(f.value for f in factors if isinstance(f, Const))
    if len(tensors) != 2 or len(tensors) + len(scale) + sum(
        isinstance(f, Const) for f in factors
    ) != len(factors):
        raise NotAContraction("the product must be two tensors times scalars")
    if statement.output.tensor in {t.tensor for t in tensors}:
        raise NotAContraction("the output is also read")
    a, b = (_operand(task, t) for t in tensors)
    out = _operand(task, statement.output)
    ia, ib, ic = set(a.access.indices), set(b.access.indices), set(out.access.indices)
    if set(summed) != (ia | ib) - ic or not summed:
        raise NotAContraction("every summed index must be in an operand, and one at least")
    if ic - (ia | ib):
        raise NotAContraction("an output index is in neither operand")
    if (ia ^ ib) & set(summed):
        raise NotAContraction("a summed index is in one operand only")
    extents = tuple((i, problem.index_size(statement, i)) for i in statement.indices)

    def ordered(group, by: Operand) -> tuple[str, ...]:
        return tuple(sorted(group, key=lambda i: -by.stride(i)))

    k_by = a if a.contiguous() in summed else b if b.contiguous() in summed else a
    m, n = ordered((ia & ic) - ib, a), ordered((ib & ic) - ia, b)
    found = Contraction(
        output=out,
        a=a,
        b=b,
        op=statement.op,
        sign=sign,
        scale=scale,
        constant=float(constant),
        extents=extents,
        batch=ordered(ia & ib & ic, out),
        m=m,
        n=n,
        k=ordered(set(summed), k_by),
    )
    if not output_order:
        return found
    return _output_ordered(found, problem.program.tensor(out.tensor).itemsize)


def _output_ordered(c: Contraction, itemsize: int) -> Contraction:
    """``c`` with :func:`group_order` applied to M and N where that raises the
    output sector efficiency of a ``SECTOR_TILE`` tile by ``SECTOR_GAIN``."""
    sizes = dict(c.extents)
    moved = replace(
        c,
        m=group_order(c.m, c.a, c.output, sizes, itemsize),
        n=group_order(c.n, c.b, c.output, sizes, itemsize),
    )
    side = (min(SECTOR_TILE, c.size(c.m)), min(SECTOR_TILE, c.size(c.n)))
    before = output_sector_efficiency(c, *side, itemsize)
    return moved if output_sector_efficiency(moved, *side, itemsize) >= SECTOR_GAIN * before else c


@functools.lru_cache(maxsize=1024)
def output_sector_efficiency(c: Contraction, bm: int, bn: int, itemsize: int) -> float:
    """Share of the 32-byte sectors of the output that a block's ``bm`` × ``bn``
    tile (at the origin, one batch coordinate) touches which it uses.  L2 merges
    the partial sectors of one block's stores, so what counts is whether the tile
    covers whole sectors along some index: 1 where the M or N group's fastest
    index runs along the output's contiguous one for 4 elements or more (8-byte
    types), 0.25 where every element lands in a sector of its own (the ``sd_t_d2``
    statements at T = 24, whose M group's fastest index is the output's slowest:
    4.9 ms against 1.5 predicted, H100)."""
    parts = [
        output_offsets(c, group, np.arange(min(size, c.size(group))))
        for group, size in ((c.m, bm), (c.n, bn))
    ]
    offsets = parts[0][:, None] + parts[1][None, :]
    sectors = np.unique(offsets * itemsize // 32).size
    return float(offsets.size * itemsize / (32 * sectors))


def output_offsets(c: Contraction, group: tuple[str, ...], flat: np.ndarray) -> np.ndarray:
    """Element offsets in the output of the positions ``flat`` (an int array) of
    the M or N ``group`` (slowest index first; the slowest takes what is left)."""
    offset = np.zeros_like(flat)
    inner = 1
    for index in reversed(group):
        coordinate = flat // inner if index == group[0] else (flat // inner) % c.extent(index)
        offset += coordinate * c.output.stride(index)
        inner *= c.extent(index)
    return offset
