"""The limits every front end enforces, so that what it accepts every backend can emit.

* **Names** (tensors, indices, extents, scalars, programs) are ASCII identifiers,
  ``[A-Za-z_][A-Za-z0-9_]*``: C, CUDA C and isl can all spell them.
* **Nesting**: parentheses, unary signs and function calls nest at most
  :data:`MAX_NESTING` deep.
* **Expression depth**: the longest path from a statement's right-hand side to a
  leaf, where a chain ``a + b + c + ...`` of ``n`` terms counts ``n`` levels (it
  is a tree of ``n - 1`` binary nodes), is at most :data:`MAX_EXPRESSION_DEPTH`.
  The compiler's passes walk expressions recursively; this bound keeps every
  walk well inside Python's recursion limit.
* **Sizes**: generated code indexes elements with 64-bit signed offsets, so an
  extent, a tensor's element count and its size in bytes are each at most
  :data:`MAX_ELEMENTS` (2**63 - 1).

Each check raises a typed :class:`~einkern.errors.EinkernError` that points at
the offending text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from ..errors import ExtentError, ParseError, SemanticError
from ..source import Span
from .ast import AccessNode, BinaryNode, CallNode, ExprNode, StatementNode, UnaryNode

#: Deepest nesting of parentheses, unary signs and calls the parsers accept.
MAX_NESTING = 64
#: Deepest expression tree (terms of a flat sum or factors of a flat product
#: count one level each) a statement may have.
MAX_EXPRESSION_DEPTH = 200
#: Deepest statement in the IR (checked by ``make_problem``, for parsed programs and
#: programs built in Python alike).  The builder adds a level or two per summed
#: term (the sum, the product with its invariant factors), so this is a little
#: above :data:`MAX_EXPRESSION_DEPTH`; every pass handles this depth (tested).
MAX_IR_DEPTH = 240
#: Largest extent, element count and byte size: 64-bit signed offsets.
MAX_ELEMENTS = 2**63 - 1
#: Longest name accepted (C compilers and isl handle far more; this keeps
#: messages and generated code readable and bounded).
MAX_NAME_LENGTH = 200
#: Largest finite value of each dtype (scalar defaults must fit).
FLOAT_MAX = {"float32": 3.4028234663852886e38, "float64": 1.7976931348623157e308}

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def is_identifier(name: str) -> bool:
    """Whether ``name`` is a name every backend can emit."""
    return len(name) <= MAX_NAME_LENGTH and bool(_IDENTIFIER.match(name))


def check_name(name: str, span: Span | None, what: str = "name") -> str:
    """``name`` if :func:`is_identifier`, else a :class:`ParseError` at ``span``."""
    if is_identifier(name):
        return name
    if len(name) > MAX_NAME_LENGTH:
        raise ParseError(
            f"{what} is {len(name)} characters long (the limit is {MAX_NAME_LENGTH})",
            span,
            hint="use a shorter name",
        )
    bad = next((c for c in name if not (c.isascii() and (c.isalnum() or c == "_"))), None)
    shown = f"'{name}'" if name.isprintable() else repr(name)
    detail = f" (it contains {bad!r})" if bad is not None else ""
    raise ParseError(
        f"{what} {shown} is not an ASCII identifier{detail}",
        span,
        hint="names are ASCII letters, digits and '_', not starting with a digit "
        "(every backend must be able to spell them)",
    )


def check_size(value: int, span: Span | None, what: str) -> int:
    """``value`` if it is at most :data:`MAX_ELEMENTS`, else an :class:`ExtentError`."""
    if value > MAX_ELEMENTS:
        raise ExtentError(
            f"{what} is {_short(value)}, more than 2**63 - 1 = {MAX_ELEMENTS}",
            span,
            hint="generated kernels index elements with 64-bit signed offsets; use smaller extents",
        )
    return value


def check_tensor_size(name: str, sizes: Iterable[int], itemsize: int, span: Span | None) -> None:
    """A tensor of extents ``sizes`` must have at most :data:`MAX_ELEMENTS` elements
    and bytes."""
    count = 1
    for size in sizes:
        count *= size
        if count > MAX_ELEMENTS:  # stop early: the product could be astronomically large
            break
    check_size(count, span, f"the element count of tensor '{name}'")
    check_size(count * itemsize, span, f"the size in bytes of tensor '{name}'")


def check_scalar_default(name: str, value: float, dtype: str, span: Span | None) -> None:
    """A scalar's default must be finite and representable in its dtype."""
    if not math.isfinite(value) or abs(value) > FLOAT_MAX[dtype]:
        raise SemanticError(
            f"the default of scalar '{name}' does not fit in {dtype} (largest finite "
            f"value {FLOAT_MAX[dtype]:.7g})",
            span,
            hint="write a smaller number, or make the scalar float64",
        )


def _short(value: int) -> str:
    """An integer, abbreviated when it has many digits."""
    digits = len(str(value)) if value < 10**4000 else None
    if digits is not None and digits <= 30:
        return str(value)
    exponent = digits - 1 if digits is not None else int(value.bit_length() * math.log10(2))
    return f"about 10**{exponent}"


def _children(node: ExprNode) -> tuple[ExprNode, ...]:
    if isinstance(node, UnaryNode):
        return (node.operand,)
    if isinstance(node, BinaryNode):
        return (node.left, node.right)
    if isinstance(node, CallNode):
        return node.args
    return ()


def expression_depth(node: ExprNode) -> tuple[int, ExprNode]:
    """Depth of the expression tree and its deepest leaf (computed without recursion)."""
    deepest, leaf = 0, node
    stack: list[tuple[ExprNode, int]] = [(node, 1)]
    while stack:
        current, depth = stack.pop()
        if depth > deepest:
            deepest, leaf = depth, current
        stack.extend((child, depth + 1) for child in _children(current))
    return deepest, leaf


def check_statement(statement: StatementNode) -> None:
    """The names of ``statement``'s accesses are identifiers and its right-hand side
    is at most :data:`MAX_EXPRESSION_DEPTH` deep."""
    depth, leaf = expression_depth(statement.rhs)
    if depth > MAX_EXPRESSION_DEPTH:
        raise SemanticError(
            f"expression too deep: {depth} levels (the limit is {MAX_EXPRESSION_DEPTH}; "
            "each term of a sum and each factor of a product is a level)",
            leaf.span,
            hint="split it into several statements, e.g. accumulate parts with +=",
        )
    stack: list[ExprNode] = [statement.target, statement.rhs]
    while stack:
        node = stack.pop()
        if isinstance(node, AccessNode):
            check_name(node.tensor.name, node.tensor.span, "tensor name")
            for index in node.indices:
                check_name(index.name, index.span, "index name")
        stack.extend(_children(node))
