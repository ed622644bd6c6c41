"""Pointwise terms of a product family (:mod:`.mma_family`): terms without a sum
(the CCSD(T) singles ``t1[p4,h1]·v2[h3,h2,p6,p5]``, a plain ``+ D[i,j]``) added
at each thread's box elements.  After the last product each thread sums their
values in registers, each factor's values loaded once per thread where its
elements share them (:func:`register_sums`), and adds the sum to the box value
it stores; where that does not fit, a loop at the start adds them to the box
(:func:`add_loop`).  The functions read the family kernel's builder through
:class:`FamilyBuilder`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from . import exprs as E
from . import kir
from .contraction import Pointwise, pointwise_value

if TYPE_CHECKING:
    from .mma_config import MmaConfig

#: Distinct factor values of one pointwise term a thread may hold in registers.
POINTWISE_REGISTERS = 32

#: Box elements of a thread whose pointwise sums are held in registers at once.
POINTWISE_CHUNK = 32


def mixed_coordinates(
    names: tuple[str, ...], extents: dict[str, int], flat: kir.Expr
) -> dict[str, kir.Expr]:
    """Each name's coordinate from ``flat`` over ``names`` (slowest first)."""
    found: dict[str, kir.Expr] = {}
    inner = 1
    for index in reversed(names):
        step = E.div(flat, inner)
        found[index] = step if index == names[0] else E.mod(step, extents[index])
        inner *= extents[index]
    return found


class _PointwiseTerms(Protocol):
    """What the functions read of the family (:class:`.mma_family.Family`)."""

    @property
    def pointwise(self) -> tuple[Pointwise, ...]: ...


class FamilyBuilder(Protocol):
    """What the pointwise terms read of the family kernel's builder
    (:class:`.mma_family._Builder`)."""

    config: MmaConfig
    bases: dict[str, kir.Expr]
    pointwise_values: int
    elements: int
    order: tuple[str, ...]
    box: dict[str, int]

    @property
    def family(self) -> _PointwiseTerms: ...

    def origin(self, index: str) -> kir.Expr: ...

    def inside(self, local: dict[str, kir.Expr]) -> list[kir.Expr]: ...

    def tile_index(self, local: dict[str, kir.Expr]) -> kir.Expr: ...

    def based(self, e: kir.Expr, base: str) -> kir.Expr: ...

    def scaled(self, sign: int, constant: float, scale: tuple[str, ...]) -> kir.Expr: ...

    def signed(self, sign: int) -> int: ...


def register_sums(b: FamilyBuilder, elements: list) -> list[list[kir.Stmt]] | None:
    """The pointwise terms' sums at the thread's box elements, for each chunk
    of :data:`POINTWISE_CHUNK` elements the statements that leave them in the
    registers ``pv``: term by term, each factor's values loaded once per
    chunk where its elements share them (a factor reads fewer coordinates
    than the box has: the CCSD(T) singles' ``t1[p4,h1]`` takes 4 values over
    a thread's 32 elements of a 4^6 box on 128 threads), indices written
    against bases (:meth:`FamilyBuilder.based`).  None (the loop of
    :func:`add_loop` then) when the threads do not divide the box or a term
    needs more than :data:`POINTWISE_REGISTERS` values."""
    if not b.family.pointwise or any(share is not None for _, share, _ in elements):
        return None
    chunks: list[list[kir.Stmt]] = []
    for start in range(0, len(elements), POINTWISE_CHUNK):
        chunk = [local for _, _, local in elements[start : start + POINTWISE_CHUNK]]
        body: list[kir.Stmt] = [
            kir.Store("pv", E.const(j), kir.Float(0.0)) for j in range(len(chunk))
        ]
        for t, term in enumerate(b.family.pointwise):
            found = _chunk(b, t, term, chunk)
            if found is None:
                b.bases = {k: v for k, v in b.bases.items() if not k.startswith("w")}
                return None
            body += found
        chunks.append(body)
    return chunks


def _chunk(
    b: FamilyBuilder, t: int, term: Pointwise, chunk: list[dict[str, kir.Expr]]
) -> list[kir.Stmt] | None:
    """Pointwise term ``t`` added into ``pv`` at the chunk's elements (see
    :func:`register_sums`)."""
    loaded: dict[tuple[int, kir.Expr], int] = {}
    assigns: list[kir.Stmt] = []
    loads: list[kir.Stmt] = []
    adds: list[kir.Stmt] = []
    for j, local in enumerate(chunk):
        value = b.scaled(term.sign, term.constant, term.scale)
        for f, operand in enumerate(term.factors):
            coords = {i: local[i] for i, _ in operand.strides}
            index = E.linear(
                [(E.add(b.origin(i), x), operand.stride(i)) for i, x in coords.items()]
            )
            base = f"w{t}_{f}"  # assigned anew per chunk: short-lived
            if j == 0:
                b.bases[base] = index
                assigns.append(kir.Assign(base, index))
            index = b.based(index, base)
            if (f, index) not in loaded:
                slot = E.const(len(loaded))
                load: kir.Stmt = kir.Store("px", slot, kir.Load(f"p_{operand.tensor}", index))
                inside = E.conj(b.inside(coords))
                if inside is not None:
                    load = kir.If(inside, (load,), (kir.Store("px", slot, kir.Float(0.0)),))
                loaded[(f, index)] = len(loaded)
                loads.append(load)
            value = E.mul(value, kir.Load("px", E.const(loaded[(f, index)])))
        adds.append(kir.Store("pv", E.const(j), value, "+="))
    if len(loaded) > POINTWISE_REGISTERS:
        return None
    b.pointwise_values = max(b.pointwise_values, len(loaded))
    return assigns + loads + adds


def add_loop(b: FamilyBuilder) -> list[kir.Stmt]:
    """The pointwise terms added to each of the thread's box elements in a
    loop (not unrolled: unrolled over a 4^6 box, nine CCSD(T) singles' loads
    were scheduled ahead and spilled); each thread adds to the elements it
    filled itself, so no barrier is needed before."""
    if not b.family.pointwise:
        return []
    e = kir.Var("pe")
    local = mixed_coordinates(b.order, b.box, e)
    value = _value(b, b.family.pointwise[0], local)
    for term in b.family.pointwise[1:]:
        value = E.add(value, _value(b, term, local))
    add: kir.Stmt = kir.Store("Ts", b.tile_index(local), value, "+=")
    inside = E.conj(b.inside(local))
    if inside is not None:
        add = kir.If(inside, (add,))
    loop = kir.For(
        "pe",
        kir.ThreadIdx(),
        E.const(b.elements),
        b.config.threads,
        (add,),
        1,
    )
    return [loop]


def _value(b: FamilyBuilder, term: Pointwise, local: dict[str, kir.Expr]) -> kir.Expr:
    """A pointwise term's value at box coordinates ``local``, signed for the
    output's operator."""
    coords = {i: E.add(b.origin(i), x) for i, x in local.items()}
    return pointwise_value(term, coords, b.signed(term.sign))
