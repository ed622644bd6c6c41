"""Program rewrites into several kernels: pure functions ``Problem -> Problem``.

Each rewrite replaces one statement by several, introducing *temporaries*
(tensors with ``temporary=True``: the caller never passes nor receives them; the
backend gives them memory) and *views* (temporaries with ``view_of``: another
tensor's memory, dense in the view's shape: splitting one dimension into two,
or fusing adjacent dimensions into one, of a dense array moves no data).  Every
new statement is an ordinary statement, compiled by either backend as any other.

* :func:`split_products` — a term that multiplies three or more tensors under
  one sum is contracted pairwise along opt_einsum's path, one statement per
  pair (the last pair stays in the original statement).
* :func:`split_k` — a sum over a long index ``k`` becomes partial sums over
  ``S`` slices, ``P[s, out] = sum over the slice``, and the statement then sums
  ``P`` over ``s``.  ``k`` is split into ``(s, k')`` by views when ``S``
  divides its extent; otherwise each operand holding ``k`` is copied into a
  zero-padded temporary first.
* :func:`ttgt` — a binary contraction becomes transpose, GEMM, transpose:
  operands not already in GEMM order (batch, free, contracted index groups,
  each group contiguous) are permuted into temporaries; the GEMM-shaped
  statement reads and writes 2- or 3-index views; the result is permuted back.

All of them keep ``+=``/``-=``, scalar factors and the other terms of the
statement, and refuse (:class:`RewriteError`) what they cannot do exactly.  Each
returns a :class:`Rewrite` with its name and a reason (``--explain`` prints it).
Which rewrite pays is decided elsewhere (:func:`einkern.ir.rewrite_plan.plan`).
"""

from __future__ import annotations

import math
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from ..errors import EinkernError
from ..semantics import DType, compute_dtype
from .nodes import (
    Access,
    Binary,
    Call,
    Expr,
    Extent,
    Neg,
    Problem,
    Program,
    Statement,
    Sum,
    Tensor,
    accesses,
    product_factors,
    walk,
)


class RewriteError(EinkernError):
    """A rewrite does not apply to a statement (the message says why)."""


@dataclass(frozen=True)
class Rewrite:
    """The outcome of a rewrite: ``problem`` computes what ``original`` did, with
    statement ``position`` of ``original`` replaced by ``count`` statements."""

    name: str
    position: int
    count: int
    reason: str
    problem: Problem
    original: Problem
    variant: str = ""  # which of a rewrite's candidates (e.g. "of B"), for the notes

    @property
    def label(self) -> str:
        """The name, with the variant when there is one."""
        return f"{self.name} {self.variant}" if self.variant else self.name

    def __str__(self) -> str:
        return f"statement {self.position}: {self.name} ({self.count} statements): {self.reason}"


# ---- building blocks -------------------------------------------------------------


class _Names:
    """Fresh names for tensors, extents and indices, never clashing with a program's."""

    def __init__(self, program: Program, statement: Statement, prefix: str):
        self.taken = {t.name for t in program.tensors} | {e.name for e in program.extents}
        self.taken |= {s.name for s in program.scalars} | set(statement.indices)
        self.prefix = prefix

    def fresh(self, stem: str) -> str:
        base = f"{self.prefix}{stem}"
        name, number = base, 1
        while name in self.taken:
            name, number = f"{base}{number}", number + 1
        self.taken.add(name)
        return name


@dataclass
class _Edit:
    """What a rewrite adds: extents (with sizes), tensors, and the statements that
    replace the original one."""

    extents: list[tuple[Extent, int]]
    tensors: list[Tensor]
    statements: list[Statement]

    def extent(self, names: _Names, stem: str, size: int) -> str:
        name = names.fresh(stem)
        self.extents.append((Extent(name, size), size))
        return name


def _apply(problem: Problem, position: int, edit: _Edit) -> Problem:
    program = problem.program
    statements = list(program.statements)
    statements[position : position + 1] = edit.statements
    new = replace(
        program,
        extents=program.extents + tuple(e for e, _ in edit.extents),
        tensors=program.tensors + tuple(edit.tensors),
        statements=tuple(statements),
    )
    return Problem(new, problem.sizes + tuple((e.name, n) for e, n in edit.extents))


def _substitute(expr: Expr, old: Expr, new: Expr) -> Expr:
    """``expr`` with the node ``old`` (by identity) replaced by ``new``."""
    if expr is old:
        return new
    if isinstance(expr, Neg):
        return Neg(_substitute(expr.operand, old, new))
    if isinstance(expr, Binary):
        return Binary(expr.op, _substitute(expr.left, old, new), _substitute(expr.right, old, new))
    if isinstance(expr, Call):
        return Call(expr.func, tuple(_substitute(a, old, new) for a in expr.args))
    if isinstance(expr, Sum):
        return Sum(expr.indices, _substitute(expr.body, old, new))
    return expr


def _rename(expr: Expr, mapping: dict[str, Access]) -> Expr:
    """``expr`` with each access whose text is a key of ``mapping`` replaced."""
    if isinstance(expr, Access):
        return mapping.get(str(expr), expr)
    if isinstance(expr, Neg):
        return Neg(_rename(expr.operand, mapping))
    if isinstance(expr, Binary):
        return Binary(expr.op, _rename(expr.left, mapping), _rename(expr.right, mapping))
    if isinstance(expr, Call):
        return Call(expr.func, tuple(_rename(a, mapping) for a in expr.args))
    if isinstance(expr, Sum):
        return Sum(expr.indices, _rename(expr.body, mapping))
    return expr


def _product(factors: Sequence[Expr]) -> Expr:
    result = factors[0]
    for factor in factors[1:]:
        result = Binary("*", result, factor)
    return result


def outer_sums(statement: Statement) -> list[Sum]:
    """The sums of a statement not nested in another sum, left to right."""
    found: list[Sum] = []
    stack: list[Expr] = [statement.rhs]
    while stack:
        node = stack.pop()
        if isinstance(node, Sum):
            found.append(node)
            continue
        if isinstance(node, Neg):
            stack.append(node.operand)
        elif isinstance(node, Binary):
            stack.extend((node.right, node.left))
        elif isinstance(node, Call):
            stack.extend(reversed(node.args))
    return found


def free_indices(node: Sum) -> tuple[str, ...]:
    """Indices used in a sum's body and not bound inside it, in order of use."""
    bound = {i for n in walk(node) if isinstance(n, Sum) for i in n.indices}
    used = (i for a in accesses(node) for i in a.indices)
    return tuple(dict.fromkeys(i for i in used if i not in bound))


def memory_order(tensor: Tensor, indices: Sequence[str]) -> tuple[str, ...]:
    """An access's indices from the slowest-varying to the stride-1 one."""
    return tuple(indices) if tensor.layout == "row" else tuple(reversed(indices))


def _dtype(program: Program, statement: Statement, reads: Iterable[Access]) -> DType:
    return compute_dtype(
        program.tensor(statement.output.tensor).dtype,
        [program.tensor(a.tensor).dtype for a in reads],
    )


def _statement(output: Access, op: str, rhs: Expr, extents: dict[str, str]) -> Statement:
    used = list(dict.fromkeys([*output.indices, *(i for a in accesses(rhs) for i in a.indices)]))
    return Statement(output, op, rhs, tuple((i, extents[i]) for i in used))


def _reads_own_output(program: Program, statement: Statement) -> bool:
    written = program.storage(statement.output.tensor)
    return any(program.storage(a.tensor) == written for a in accesses(statement.rhs))


def _written(program: Program) -> set[str]:
    return {program.storage(s.output.tensor) for s in program.statements}


# ---- split_products ----------------------------------------------------------------


@dataclass(frozen=True)
class ProductSplit:
    """Why a product of several tensors is (or is not) contracted pairwise."""

    path: tuple[tuple[int, ...], ...]
    direct_flops: int
    pairwise_flops: int
    largest_intermediate: int  # elements

    def pays(self, memory_limit: int) -> bool:
        """Pairwise when it does at most half the arithmetic of one loop nest over
        every index (the intermediates cost memory traffic one nest does not have)
        and its largest intermediate fits ``memory_limit`` elements."""
        return (
            2 * self.pairwise_flops <= self.direct_flops
            and self.largest_intermediate <= memory_limit
        )


def _product_operands(node: Sum) -> tuple[list[Access], list[Expr]] | None:
    """The tensor factors and the other (index-free) factors of a sum's body, or None
    when a factor is neither."""
    tensors: list[Access] = []
    others: list[Expr] = []
    for factor in product_factors(node.body):
        if isinstance(factor, Access):
            if len(set(factor.indices)) != len(factor.indices):
                return None  # a diagonal
            tensors.append(factor)
        elif accesses(factor) or any(isinstance(n, Sum) for n in walk(factor)):
            return None
        else:
            others.append(factor)
    return tensors, others


def product_split(problem: Problem, statement: Statement, node: Sum) -> ProductSplit | None:
    """opt_einsum's pairwise path for the product under ``node`` (None: fewer than
    three tensor factors, or not a plain product)."""
    import opt_einsum

    found = _product_operands(node)
    if found is None or len(found[0]) < 3:
        return None
    tensors, _ = found
    letters = iter(string.ascii_letters)
    symbol: dict[str, str] = {}
    for index in (*free_indices(node), *node.indices):
        symbol.setdefault(index, next(letters, ""))
    if "" in symbol.values():
        return None  # more than 52 indices
    terms = ["".join(symbol[i] for i in a.indices) for a in tensors]
    output = "".join(symbol[i] for i in free_indices(node))
    shapes = [tuple(problem.index_size(statement, i) for i in a.indices) for a in tensors]
    path, info = opt_einsum.contract_path(
        f"{','.join(terms)}->{output}", *shapes, shapes=True, optimize="auto"
    )
    every = math.prod(problem.index_size(statement, i) for i in symbol)
    return ProductSplit(
        tuple(tuple(step) for step in path),
        every * len(tensors),
        int(info.opt_cost),
        int(info.largest_intermediate),
    )


def split_products(
    problem: Problem, position: int, *, force: bool = False, memory_limit: int | None = None
) -> Rewrite:
    """Contract every product of three or more tensors in statement ``position``
    pairwise (see :class:`ProductSplit` for when it pays; ``force`` skips that
    test).  ``memory_limit``: largest intermediate in elements (default: four times
    the largest tensor of the program)."""
    program = problem.program
    statement = program.statements[position]
    if memory_limit is None:
        memory_limit = 4 * max(problem.numel(t.name) for t in program.tensors)
    names = _Names(program, statement, f"t{position}_")
    edit = _Edit([], [], [])
    extents = dict(statement.index_extents)
    rhs = statement.rhs
    reasons = []
    for node in outer_sums(statement):
        split = product_split(problem, statement, node)
        if split is None or not (force or split.pays(memory_limit)):
            continue
        tensors, others = _product_operands(node) or ([], [])
        dtype = _dtype(program, statement, tensors)
        operands: list[Access] = list(tensors)
        keep = set(free_indices(node))
        for pair in split.path[:-1]:
            chosen = [operands[p] for p in pair]
            for p in sorted(pair, reverse=True):
                del operands[p]
            later = keep | {i for a in operands for i in a.indices}
            joined = list(dict.fromkeys(i for a in chosen for i in a.indices))
            result = tuple(i for i in joined if i in later)
            summed = tuple(i for i in joined if i not in later)
            name = names.fresh("p")
            edit.tensors.append(
                Tensor(name, tuple(extents[i] for i in result), dtype, "row", temporary=True)
            )
            body = _product(chosen)
            edit.statements.append(
                _statement(
                    Access(name, result), "=", Sum(summed, body) if summed else body, extents
                )
            )
            operands.append(Access(name, result))
        summed = tuple(i for i in node.indices if any(i in a.indices for a in operands))
        body = _product([*others, *operands])
        rhs = _substitute(rhs, node, Sum(summed, body) if summed else body)
        reasons.append(
            f"{len(tensors)} tensors pairwise along opt_einsum's path "
            f"{list(split.path)}: {split.pairwise_flops:,} flops against "
            f"{split.direct_flops:,} in one loop nest, largest intermediate "
            f"{split.largest_intermediate:,} elements"
        )
    if not reasons:
        raise RewriteError(
            f"statement {position} has no product of three or more tensors that pays to split"
        )
    edit.statements.append(replace(statement, rhs=rhs, index_extents=_extents_of(rhs, statement)))
    return Rewrite(
        "split_products",
        position,
        len(edit.statements),
        "; ".join(reasons),
        _apply(problem, position, edit),
        problem,
    )


def _extents_of(rhs: Expr, statement: Statement) -> tuple[tuple[str, str], ...]:
    used = set(statement.output.indices) | {i for a in accesses(rhs) for i in a.indices}
    return tuple((i, e) for i, e in statement.index_extents if i in used)
