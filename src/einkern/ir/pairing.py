"""Terms that pair under an exchange of two output indices (antisymmetrizers).

Quantum chemistry and differential geometry write many statements as a sum of
terms and the same terms with two output indices exchanged: the permutation
operators ``P(ij)`` of coupled-cluster equations, or Treduda's Riemann–Christoffel
statement ::

    R[i,j,k,l] = A[i,j,k,l] - A[i,l,k,j] + B[m,j,k]*B[i,m,l] - B[m,l,k]*B[i,m,j]

whose second and fourth terms are the first and third with ``j`` and ``l``
exchanged (σ = (j l)), each with the opposite sign: ``R = Y - σ(Y)`` with
``Y[i,j,k,l] = A[i,j,k,l] + B[m,j,k]*B[i,m,l]``.  Computing ``Y`` once and
reading it twice halves the arithmetic and reads each input once, provided the
block that writes ``R`` holds both ``Y`` and ``σ(Y)``: a tile that covers the
two exchanged indices whole (:mod:`einkern.gpu.pair`).

:func:`pair_split` finds σ and the sign from the statement's signed terms
(:func:`einkern.ir.nodes.signed_terms`): every term must have a distinct partner
that is the term with the two indices exchanged, and every partner's sign must
be the same multiple (+1 or -1) of its term's.  Terms compare as written
(reduction indices by name), so ``B[m,l,k]*B[i,m,j]`` pairs with
``B[m,j,k]*B[i,m,l]`` but not with the same product summed over ``n``.
:func:`paired_problem` is the pure transform into the two statements ``Y = ...``
and ``R op Y + sign * Y[σ]`` with ``Y`` a temporary.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .fusion import rename_indices
from .nodes import (
    Access,
    Binary,
    Expr,
    Neg,
    Problem,
    Statement,
    Sum,
    Tensor,
    signed_terms,
    walk,
)

#: The statements :func:`paired_problem` writes: ``Y`` then ``R``.
PRODUCER, CONSUMER = 0, 1


@dataclass(frozen=True)
class PairSplit:
    """``rhs == kept + sign · kept`` with the output indices ``swap`` exchanged."""

    swap: tuple[str, str]
    sign: int
    kept: Expr
    terms: int
    reason: str


def _sum_of(terms: list[tuple[int, Expr]]) -> Expr:
    sign, first = terms[0]
    expr: Expr = first if sign > 0 else Neg(first)
    for sign, term in terms[1:]:
        expr = Binary("+" if sign > 0 else "-", expr, term)
    return expr


def _partners(
    terms: list[tuple[int, Expr]], swap: tuple[str, str]
) -> tuple[list[tuple[int, Expr]], int] | None:
    """The terms kept (the first of each pair) and the common sign, or None."""
    p, q = swap
    exchange = {p: q, q: p}
    free = list(range(len(terms)))
    kept: list[tuple[int, Expr]] = []
    common = 0
    while free:
        first = free.pop(0)
        sign, term = terms[first]
        image = rename_indices(term, exchange)
        if image == term:
            return None  # a term the exchange leaves alone has no partner
        match = next((n for n in free if terms[n][1] == image), None)
        if match is None:
            return None
        relative = sign * terms[match][0]
        if common and relative != common:
            return None
        common = relative
        free.remove(match)
        kept.append((sign, term))
    return kept, common


def pair_split(problem: Problem, statement: Statement) -> PairSplit | None:
    """The exchange of two output indices under which the statement's terms pair
    (module docstring), or None.  The first pair of output indices (in the
    output's order) of equal extent that works is taken."""
    indices = statement.output.indices
    if len(set(indices)) != len(indices):
        return None
    terms = signed_terms(statement.rhs)
    if len(terms) < 2 or len(terms) % 2:
        return None
    for a, p in enumerate(indices):
        for q in indices[a + 1 :]:
            if problem.index_size(statement, p) != problem.index_size(statement, q):
                continue
            found = _partners(terms, (p, q))
            if found is None:
                continue
            kept, sign = found
            reason = (
                f"the {len(terms)} terms pair under the exchange of {p} and {q} with sign "
                f"{'+' if sign > 0 else '-'}: {statement.output} {statement.op} Y "
                f"{'+' if sign > 0 else '-'} Y[{p}<->{q}], Y the {len(kept)} terms kept "
                "(computed once, read twice)"
            )
            return PairSplit((p, q), sign, _sum_of(kept), len(terms), reason)
    return None


def _fresh(problem: Problem, stem: str) -> str:
    names = {t.name for t in problem.program.tensors} | {s.name for s in problem.program.scalars}
    name, n = stem, 0
    while name in names:
        n += 1
        name = f"{stem}{n}"
    return name


def paired_problem(problem: Problem, position: int, split: PairSplit) -> Problem:
    """The statement at ``position`` of ``problem`` (a one-statement view) as
    ``Y = kept`` (:data:`PRODUCER`) and ``output op Y + sign · Y[swap]``
    (:data:`CONSUMER`), ``Y`` a temporary shaped and laid out like the output."""
    program = problem.program
    statement = program.statements[position]
    out = program.tensor(statement.output.tensor)
    name = _fresh(problem, f"Y{out.name}")
    dtype = out.dtype
    temporary = Tensor(name, out.shape, dtype, out.layout, temporary=True)
    own = Access(name, statement.output.indices)
    p, q = split.swap
    exchanged = Access(name, tuple({p: q, q: p}.get(i, i) for i in own.indices))
    kept_indices = set(statement.output.indices) | {i for node in _sums(split.kept) for i in node}
    extents = tuple((i, e) for i, e in statement.index_extents if i in kept_indices)
    producer = Statement(own, "=", split.kept, extents, statement.span)
    rhs = Binary("+" if split.sign > 0 else "-", own, exchanged)
    outer = tuple((i, e) for i, e in statement.index_extents if i in statement.output.indices)
    consumer = Statement(statement.output, statement.op, rhs, outer, statement.span)
    statements = (*program.statements[:position], producer, consumer)
    statements += program.statements[position + 1 :]
    paired = replace(program, tensors=(*program.tensors, temporary), statements=statements)
    return Problem(paired, problem.sizes)


def _sums(expr: Expr) -> list[tuple[str, ...]]:
    return [node.indices for node in walk(expr) if isinstance(node, Sum)]
