"""From syntax tree to IR: name resolution, the Einstein summation rule, checks.

The summation rule (also in docs/language.md):

* The right-hand side is split into *additive terms* at its top level (binary
  ``+``/``-`` and a leading unary minus; parentheses group, they do not split).
* In each term, an index that occurs in the term outside any function call and
  not on the left-hand side is summed over that whole term.
* Inside a function call, each argument follows the same rule on its own, with
  the left-hand side's indices *and the indices the enclosing term uses outside
  calls* counting as bound: ``s[b] = sqrt(v[b,i]*v[b,i])`` sums ``i`` inside the
  square root, ``s[b] = exp(x[b,i]) * y[b,i]`` sums ``i`` over the product.
* Within one statement an index name denotes one range: all its occurrences
  must be bound to extents of the same size.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from ..errors import (
    AliasingError,
    DtypeError,
    DuplicateDeclarationError,
    IndexBindingError,
    LayoutError,
    RankError,
    SemanticError,
    UnknownNameError,
)
from ..lang import ast
from ..lang.limits import check_scalar_default
from ..semantics import ARITY, DTYPES, LAYOUTS, arithmetic_dtype
from ..source import Span
from .nodes import (
    Access,
    Binary,
    Call,
    Const,
    Expr,
    Extent,
    Neg,
    Program,
    Scalar,
    ScalarRef,
    Statement,
    Sum,
    Tensor,
)


def build_program(node: ast.ProgramNode) -> Program:
    """Check a parsed program and lower it to the IR."""
    extents = _build_extents(node)
    tensors = _build_tensors(node, extents)
    scalars = _build_scalars(node, tensors)
    builder = _StatementBuilder({t.name: t for t in tensors}, {s.name: s for s in scalars}, extents)
    statements = tuple(builder.build(s) for s in node.statements)
    if not statements:
        raise SemanticError(
            f"program {node.name!r} has no statement",
            hint="add a statement such as `C[i,j] = A[i,k] * B[k,j]`",
        )
    return Program(node.name, tuple(extents.values()), tensors, scalars, statements)


def _suggest(name: str, known: Iterable[str], what: str) -> str:
    known = sorted(known)
    close = difflib.get_close_matches(name, known, n=1)
    if close:
        return f"did you mean {close[0]!r}?"
    if known:
        return f"known {what}: {', '.join(known)}"
    return f"no {what} declared yet"


def _build_extents(node: ast.ProgramNode) -> dict[str, Extent]:
    extents: dict[str, Extent] = {}
    spans: dict[str, Span] = {}
    for decl in node.extents:
        if decl.name.name in extents:
            first = spans[decl.name.name]
            raise DuplicateDeclarationError(
                f"extent {decl.name.name!r} declared twice (first on line {first.line})",
                decl.name.span,
                hint="remove one of the declarations",
            )
        extents[decl.name.name] = Extent(decl.name.name, decl.value, span=decl.span)
        spans[decl.name.name] = decl.name.span
    for tensor in node.tensors:
        for dim in tensor.shape:
            if dim.name is None:
                extents.setdefault(str(dim.value), Extent(str(dim.value), dim.value))
    return extents


def _build_tensors(node: ast.ProgramNode, extents: dict[str, Extent]) -> tuple[Tensor, ...]:
    tensors: dict[str, Tensor] = {}
    spans: dict[str, Span] = {}
    for decl in node.tensors:
        name = decl.name.name
        if name in tensors:
            raise DuplicateDeclarationError(
                f"tensor {name!r} declared twice (first on line {spans[name].line})",
                decl.name.span,
                hint="remove or rename one of the declarations",
            )
        shape = []
        for dim in decl.shape:
            extent = dim.name if dim.name is not None else str(dim.value)
            if extent not in extents:
                raise UnknownNameError(
                    f"unknown extent {extent!r} in the shape of {name!r}",
                    dim.span,
                    hint=f"declare it with `dims {extent} = <size>`; "
                    + _suggest(extent, extents, "extents"),
                )
            shape.append(extent)
        dtype = decl.dtype or node.default_dtype
        layout = decl.layout or node.default_layout
        if dtype not in DTYPES:
            raise DtypeError(
                f"unsupported dtype {dtype!r}", decl.span, hint="use " + ", ".join(DTYPES)
            )
        if layout not in LAYOUTS:
            raise LayoutError(f"unknown layout {layout!r}", decl.span, hint="use row or column")
        tensors[name] = Tensor(
            name, tuple(shape), dtype, layout, temporary=decl.temporary, span=decl.span
        )
        spans[name] = decl.name.span
    return tuple(tensors.values())


def _build_scalars(node: ast.ProgramNode, tensors: tuple[Tensor, ...]) -> tuple[Scalar, ...]:
    scalars: dict[str, Scalar] = {}
    tensor_names = {t.name for t in tensors}
    for decl in node.scalars:
        name = decl.name.name
        if name in scalars or name in tensor_names:
            raise DuplicateDeclarationError(
                f"{name!r} is already declared", decl.name.span, hint="rename the scalar"
            )
        dtype = decl.dtype or node.default_dtype
        if dtype not in DTYPES:
            raise DtypeError(
                f"unsupported dtype {dtype!r}", decl.span, hint="use " + ", ".join(DTYPES)
            )
        # A scalar takes the compute dtype of the statement using it, so one declared
        # 16-bit is a float32 scalar (semantics: the 16-bit dtypes compute in float32).
        dtype = arithmetic_dtype(dtype)
        if decl.value is not None:
            check_scalar_default(name, decl.value, dtype, decl.span)
        scalars[name] = Scalar(name, dtype, decl.value, span=decl.span)
    return tuple(scalars.values())


def _additive_terms(node: ast.ExprNode, sign: int = 1) -> list[tuple[int, ast.ExprNode]]:
    terms: list[tuple[int, ast.ExprNode]] = []
    stack = [(sign, node)]
    while stack:
        sign, current = stack.pop()
        if isinstance(current, ast.BinaryNode) and current.op in "+-":
            stack.append((sign if current.op == "+" else -sign, current.right))
            stack.append((sign, current.left))
        elif isinstance(current, ast.UnaryNode):
            stack.append((sign if current.op == "+" else -sign, current.operand))
        else:
            terms.append((sign, current))
    return terms


def _nodes(node: ast.ExprNode, into_calls: bool) -> list[ast.ExprNode]:
    """The nodes of an expression, pre-order, left to right (without recursion);
    the arguments of calls only when ``into_calls``."""
    found: list[ast.ExprNode] = []
    stack = [node]
    while stack:
        current = stack.pop()
        found.append(current)
        if isinstance(current, ast.UnaryNode):
            stack.append(current.operand)
        elif isinstance(current, ast.BinaryNode):
            stack.extend((current.right, current.left))
        elif isinstance(current, ast.CallNode) and into_calls:
            stack.extend(reversed(current.args))
    return found


def _outer_accesses(node: ast.ExprNode) -> list[ast.AccessNode]:
    """Accesses of an expression that are not inside a function call."""
    return [n for n in _nodes(node, False) if isinstance(n, ast.AccessNode)]


def _product_factors(node: ast.ExprNode) -> list[ast.ExprNode]:
    factors: list[ast.ExprNode] = []
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, ast.BinaryNode) and current.op == "*":
            stack.extend((current.right, current.left))
        else:
            factors.append(current)
    return factors


def _all_indices(node: ast.ExprNode) -> set[str]:
    return {i.name for n in _nodes(node, True) if isinstance(n, ast.AccessNode) for i in n.indices}


class _StatementBuilder:
    def __init__(self, tensors: dict[str, Tensor], scalars: dict[str, Scalar], extents):
        self.tensors = tensors
        self.scalars = scalars
        self.extents = extents

    def build(self, node: ast.StatementNode) -> Statement:
        self.bindings: dict[str, tuple[str, ast.Ident]] = {}
        target = node.target
        tensor = self._tensor(target)
        self._bind_access(target)
        names = [i.name for i in target.indices]
        for position, ident in enumerate(target.indices):
            if ident.name in names[:position]:
                raise SemanticError(
                    f"index {ident.name!r} appears twice on the left-hand side",
                    ident.span,
                    hint="each output index must be distinct; write the diagonal with a "
                    "separate tensor",
                )
        if node.op not in ("=", "+=", "-="):
            raise SemanticError(
                f"unknown assignment {node.op!r}", node.span, hint="use =, += or -="
            )
        rhs = self._lower_sum(node.rhs, frozenset(names))
        self._check_aliasing(node, tensor.name, tuple(names))
        index_extents = tuple((index, extent) for index, (extent, _) in self.bindings.items())
        return Statement(
            Access(tensor.name, tuple(names)), node.op, rhs, index_extents, span=node.span
        )

    # -- names ------------------------------------------------------------------

    def _tensor(self, access: ast.AccessNode) -> Tensor:
        name = access.tensor.name
        if name not in self.tensors:
            if name in self.scalars:
                raise SemanticError(
                    f"{name!r} is a scalar, not a tensor",
                    access.tensor.span,
                    hint=f"write {name} without brackets",
                )
            raise UnknownNameError(
                f"unknown tensor {name!r}",
                access.tensor.span,
                hint=f"declare it, e.g. `tensor {name}[...]`; "
                + _suggest(name, self.tensors, "tensors"),
            )
        tensor = self.tensors[name]
        if len(access.indices) != tensor.rank:
            raise RankError(
                f"tensor {name!r} has rank {tensor.rank} (shape [{', '.join(tensor.shape)}]) "
                f"but is used with {len(access.indices)} ind"
                + ("ex" if len(access.indices) == 1 else "ices"),
                access.span,
                hint=f"write {name}[{', '.join(['_'] * tensor.rank)}] with {tensor.rank} indices",
            )
        return tensor

    def _bind_access(self, access: ast.AccessNode) -> None:
        tensor = self.tensors[access.tensor.name]
        for ident, extent_name in zip(access.indices, tensor.shape, strict=True):
            if ident.name not in self.bindings:
                self.bindings[ident.name] = (extent_name, ident)
                continue
            bound_name, first = self.bindings[ident.name]
            if bound_name == extent_name:
                continue
            a, b = self.extents[bound_name].default, self.extents[extent_name].default
            if a is not None and b is not None and a != b:
                raise IndexBindingError(
                    f"index {ident.name!r} ranges over {extent_name!r} = {b} here but over "
                    f"{bound_name!r} = {a} at line {first.span.line}, column {first.span.column}",
                    ident.span,
                    hint="use a different index name, or make the extents equal",
                )

    # -- expressions ------------------------------------------------------------

    def _lower_sum(self, node: ast.ExprNode, bound: frozenset[str]) -> Expr:
        """Lower an additive expression whose terms each sum their free indices."""
        result: Expr | None = None
        for sign, term in _additive_terms(node):
            lowered = self._lower_term(term, bound)
            if result is None:
                result = Neg(lowered) if sign < 0 else lowered
            else:
                result = Binary("+" if sign > 0 else "-", result, lowered)
        assert result is not None
        return result

    def _lower_term(self, term: ast.ExprNode, bound: frozenset[str]) -> Expr:
        outer = [i.name for a in _outer_accesses(term) for i in a.indices]
        free = tuple(dict.fromkeys(i for i in outer if i not in bound))
        inner_bound = bound | frozenset(outer)
        if not free:
            return self._lower(term, inner_bound)
        # Factors of a product that use no summed index are moved out of the sum.
        factors = _product_factors(term)
        invariant = [f for f in factors if not (_all_indices(f) & set(free))]
        varying = [f for f in factors if _all_indices(f) & set(free)]
        body = self._product(varying, inner_bound)
        summed: Expr = Sum(free, body)
        if invariant:
            summed = Binary("*", self._product(invariant, inner_bound), summed)
        return summed

    def _product(self, factors: list[ast.ExprNode], bound: frozenset[str]) -> Expr:
        result = self._lower(factors[0], bound)
        for factor in factors[1:]:
            result = Binary("*", result, self._lower(factor, bound))
        return result

    def _lower(self, node: ast.ExprNode, bound: frozenset[str]) -> Expr:
        if isinstance(node, ast.NumberNode):
            return Const(float(node.value))
        if isinstance(node, ast.NameNode):
            if node.name in self.scalars:
                return ScalarRef(node.name)
            if node.name in self.tensors:
                raise RankError(
                    f"tensor {node.name!r} used without indices",
                    node.span,
                    hint=f"write {node.name}[...] with its indices",
                )
            raise UnknownNameError(
                f"unknown scalar {node.name!r}",
                node.span,
                hint=f"declare it with `scalar {node.name}`; "
                + _suggest(node.name, list(self.scalars) + list(self.tensors), "names"),
            )
        if isinstance(node, ast.AccessNode):
            self._tensor(node)
            self._bind_access(node)
            return Access(node.tensor.name, tuple(i.name for i in node.indices))
        if isinstance(node, ast.UnaryNode):
            inner = self._lower(node.operand, bound)
            return Neg(inner) if node.op == "-" else inner
        if isinstance(node, ast.BinaryNode):
            return Binary(node.op, self._lower(node.left, bound), self._lower(node.right, bound))
        if isinstance(node, ast.CallNode):
            name = node.func.name
            if name not in ARITY:
                raise UnknownNameError(
                    f"unknown function {name!r}",
                    node.func.span,
                    hint=_suggest(name, ARITY, "elementwise functions"),
                )
            arity = ARITY[name]
            if len(node.args) != arity:
                raise SemanticError(
                    f"{name}() takes {arity} argument{'s' if arity > 1 else ''}, "
                    f"got {len(node.args)}",
                    node.span,
                    hint=f"write {name}(" + ", ".join(["x"] * arity) + ")",
                )
            return Call(name, tuple(self._lower_sum(arg, bound) for arg in node.args))
        raise TypeError(f"unknown syntax node {node!r}")

    def _check_aliasing(self, node: ast.StatementNode, output: str, indices: tuple[str, ...]):
        for access in _all_accesses(node.rhs):
            if access.tensor.name != output:
                continue
            read = tuple(i.name for i in access.indices)
            if read != indices:
                raise AliasingError(
                    f"{output!r} is written at [{', '.join(indices)}] and read at "
                    f"[{', '.join(read)}] in the same statement",
                    access.span,
                    hint="the result would depend on the order of evaluation; read a copy "
                    "(a separate tensor) instead",
                )
            if _inside_sum(node.rhs, access, frozenset(indices)):
                raise AliasingError(
                    f"{output!r} is read inside a sum of the statement that writes it",
                    access.span,
                    hint="read a copy (a separate tensor) instead",
                )


def _all_accesses(node: ast.ExprNode) -> list[ast.AccessNode]:
    return [n for n in _nodes(node, True) if isinstance(n, ast.AccessNode)]


def _inside_sum(rhs: ast.ExprNode, access: ast.AccessNode, bound: frozenset[str]) -> bool:
    """True when ``access`` lies in a term (or call argument) that sums an index."""
    for _, term in _additive_terms(rhs):
        if access not in _all_accesses(term):
            continue
        outer = [i.name for a in _outer_accesses(term) for i in a.indices]
        if access in _outer_accesses(term):
            return any(i not in bound for i in outer)
        for call in _calls(term):
            for arg in call.args:
                if access in _all_accesses(arg):
                    return _inside_sum(arg, access, bound | frozenset(outer))
    return False


def _calls(node: ast.ExprNode) -> list[ast.CallNode]:
    """Calls of an expression that are not inside another call."""
    return [n for n in _nodes(node, False) if isinstance(n, ast.CallNode)]
