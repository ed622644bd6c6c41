"""Expressions of the C front end: affine expressions (bounds, subscripts,
conditions), loop headers, and statement right-hand sides."""

from __future__ import annotations

from typing import Any

from pycparser import c_ast

from ..semantics import FUNCTIONS
from . import cfront_nodes as N
from .cfront_types import (
    ISL_RESERVED,
    LiteralTooLarge,
    Reading,
    float_dtype,
    int_literal,
    int_type,
    known_function,
)

_AFFINE_HINT = "bounds, subscripts and conditions must be affine in loop iterators and sizes"


def affine(reader: Reading, node: Any, iterators: tuple[str, ...]) -> N.Aff:
    """The affine expression ``node`` over ``iterators`` and the size parameters."""
    if isinstance(node, c_ast.Constant):
        if node.type not in ("int", "long int", "unsigned int", "long long int") and not (
            node.type.endswith("int")
        ):
            reader.fail(node, f"{node.type} constant in an affine expression", _AFFINE_HINT)
        try:
            return N.Aff(const=int_literal(node.value))
        except LiteralTooLarge:
            reader.fail(node, "integer constant out of range (more than 2**63 - 1)", _AFFINE_HINT)
    if isinstance(node, c_ast.ID):
        name = node.name
        if name in iterators or name in reader.sizes:
            return N.Aff.name(name)
        if name in reader.defines:
            return N.Aff(const=reader.defines[name])
        if name in reader.scalars:
            reader.fail(
                node, f"not affine: {name!r} is a floating-point scalar (data)", _AFFINE_HINT
            )
        if name in reader.arrays:
            reader.fail(
                node,
                f"not affine: array {name!r} used as a value (pointer arithmetic)",
                _AFFINE_HINT,
            )
        reader.fail(node, f"unknown name {name!r}", "declare it as a parameter or loop iterator")
    if isinstance(node, c_ast.UnaryOp) and node.op in ("-", "+"):
        inner = affine(reader, node.expr, iterators)
        return inner.scale(-1) if node.op == "-" else inner
    if isinstance(node, c_ast.BinaryOp) and node.op in ("+", "-"):
        left, right = affine(reader, node.left, iterators), affine(reader, node.right, iterators)
        return left + right if node.op == "+" else left - right
    if isinstance(node, c_ast.BinaryOp) and node.op == "*":
        left, right = affine(reader, node.left, iterators), affine(reader, node.right, iterators)
        if left.is_constant():
            return right.scale(left.const)
        if right.is_constant():
            return left.scale(right.const)
        reader.fail(node, "not affine: a product of two variables", _AFFINE_HINT)
    if isinstance(node, c_ast.Cast):
        return affine(reader, node.expr, iterators)  # (int)e: affine only if e is
    if isinstance(node, c_ast.ArrayRef):
        reader.fail(
            node,
            "not affine: an array element in a bound, subscript or condition (data-dependent)",
            _AFFINE_HINT,
        )
    if isinstance(node, c_ast.BinaryOp) and node.op in ("/", "%", ">>", "<<"):
        reader.fail(node, f"not affine: operator {node.op!r}", _AFFINE_HINT)
    if isinstance(node, c_ast.FuncCall):
        reader.fail(
            node, "not affine: a function call in a bound, subscript or condition", _AFFINE_HINT
        )
    if isinstance(node, c_ast.UnaryOp) and node.op in ("*", "&"):
        reader.fail(node, "not affine: pointer dereference or address", _AFFINE_HINT)
    reader.fail(node, "not an affine expression", _AFFINE_HINT)


def condition(reader: Reading, node: Any, iterators: tuple[str, ...]) -> tuple[N.Constraint, ...]:
    """An ``&&`` of affine comparisons as constraints."""
    if isinstance(node, c_ast.BinaryOp) and node.op == "&&":
        return condition(reader, node.left, iterators) + condition(reader, node.right, iterators)
    if isinstance(node, c_ast.BinaryOp) and node.op == "||":
        reader.fail(
            node,
            "a disjunction (||) is not a convex condition",
            hint="split it into two ifs, or use && of affine comparisons",
        )
    if isinstance(node, c_ast.BinaryOp) and node.op == "!=":
        reader.fail(node, "!= is not a convex condition", hint="use <, <=, >, >= or ==")
    if not (isinstance(node, c_ast.BinaryOp) and node.op in ("<", "<=", ">", ">=", "==")):
        reader.fail(node, "a condition must be an affine comparison (or && of them)", _AFFINE_HINT)
    left, right = affine(reader, node.left, iterators), affine(reader, node.right, iterators)
    difference = {
        "<": right - left + N.Aff(const=-1),
        "<=": right - left,
        ">": left - right + N.Aff(const=-1),
        ">=": left - right,
        "==": left - right,
    }[node.op]
    return (N.Constraint(difference, node.op == "=="),)


def read_loop(reader: Reading, node: c_ast.For, enclosing: tuple[str, ...]) -> N.Loop:
    """A ``for`` header with affine bounds and a unit step."""
    iterator, start = _loop_init(reader, node, enclosing)
    step = _loop_step(reader, node, iterator)
    if node.cond is None:
        reader.fail(node, "a for loop needs a condition (an affine bound)")
    inner = (*enclosing, iterator)
    lower, upper = [start], []
    for constraint in _bounds(reader, node.cond, inner):
        coefficient = constraint.aff.coefficients().get(iterator, 0)
        rest = constraint.aff - N.Aff.name(iterator).scale(coefficient)
        if constraint.equal or abs(coefficient) != 1:
            reader.fail(
                node.cond,
                f"the loop condition must bound {iterator!r} with < <= > >= (coefficient 1)",
                _AFFINE_HINT,
            )
        # coefficient·i + rest >= 0
        if coefficient == 1:
            lower.append(rest.scale(-1))
        else:
            upper.append(rest)
    if step == -1:
        lower, upper = lower[1:], [start, *upper]
    if not upper or not lower:
        reader.fail(
            node.cond,
            f"the condition does not bound {iterator!r} in the direction it moves",
            hint="count up with < or <=, down with > or >=",
        )
    return N.Loop(iterator, tuple(lower), tuple(upper), step)


def _bounds(reader: Reading, node: Any, iterators: tuple[str, ...]) -> tuple[N.Constraint, ...]:
    return condition(reader, node, iterators)


def _loop_init(reader: Reading, node: c_ast.For, enclosing: tuple[str, ...]) -> tuple[str, N.Aff]:
    init = node.init
    if isinstance(init, c_ast.DeclList) and len(init.decls) == 1:
        decl = init.decls[0]
        if not int_type(decl.type) or decl.init is None:
            reader.fail(init, "the loop must declare one integer iterator with a start value")
        name, value = decl.name, decl.init
    elif (
        isinstance(init, c_ast.Assignment) and init.op == "=" and isinstance(init.lvalue, c_ast.ID)
    ):
        name, value = init.lvalue.name, init.rvalue
    else:
        reader.fail(
            init if init is not None else node,
            "a for loop must start with `iterator = affine expression`",
        )
    if name in enclosing:
        reader.fail(init, f"iterator {name!r} is already the iterator of an enclosing loop")
    if name in ISL_RESERVED:
        reader.fail(init, f"the name {name!r} is reserved by isl", hint="rename the iterator")
    if reader.known(name) or name in reader.defines:
        reader.fail(init, f"{name!r} is a parameter, not a loop iterator")
    return name, affine(reader, value, enclosing)


def _loop_step(reader: Reading, node: c_ast.For, iterator: str) -> int:
    step = node.next
    if (
        isinstance(step, c_ast.UnaryOp)
        and isinstance(step.expr, c_ast.ID)
        and step.expr.name == iterator
    ):
        if step.op in ("p++", "++"):
            return 1
        if step.op in ("p--", "--"):
            return -1
    if (
        isinstance(step, c_ast.Assignment)
        and isinstance(step.lvalue, c_ast.ID)
        and step.lvalue.name == iterator
        and step.op in ("+=", "-=")
        and isinstance(step.rvalue, c_ast.Constant)
        and step.rvalue.value == "1"
    ):
        return 1 if step.op == "+=" else -1
    reader.fail(
        step if step is not None else node,
        f"the loop must step {iterator!r} by one (i++, i--, i += 1, i -= 1)",
        hint="other steps are not supported",
    )


# ---- right-hand sides -------------------------------------------------------------------


def element(reader: Reading, node: c_ast.ArrayRef, iterators: tuple[str, ...]) -> N.Ref:
    """``A[e1][e2]…`` with affine subscripts and the array's rank."""
    subscripts = []
    base: Any = node
    while isinstance(base, c_ast.ArrayRef):
        subscripts.append(base.subscript)
        base = base.name
    if not isinstance(base, c_ast.ID):
        reader.fail(
            node,
            "not affine: subscripting something other than an array parameter (pointer arithmetic)",
            _AFFINE_HINT,
        )
    if base.name not in reader.arrays:
        what = (
            "a scalar"
            if base.name in reader.scalars or base.name in reader.sizes
            else "not a parameter"
        )
        reader.fail(base, f"{base.name!r} is {what}, not an array")
    array = reader.arrays[base.name]
    if len(subscripts) != len(array.shape):
        reader.fail(
            node,
            f"array {base.name!r} has {len(array.shape)} dimension(s), "
            f"used with {len(subscripts)} subscript(s)",
            hint="pointer arithmetic and partial subscripts are not affine",
        )
    affs = tuple(affine(reader, s, iterators) for s in reversed(subscripts))
    return N.Ref(base.name, affs)


def body_expr(reader: Reading, node: Any, iterators: tuple[str, ...]) -> N.AExpr:
    """A statement's right-hand side."""
    if isinstance(node, c_ast.Constant):
        if node.type in ("char", "string"):
            reader.fail(node, f"{node.type} constants are not numbers")
        text = (
            node.value.rstrip("fFlLuU")
            if not node.value.lower().startswith("0x")
            else node.value.rstrip("lLuU")
        )
        try:
            value = float(int(text, 0)) if "int" in node.type else float(text)
        except (ValueError, OverflowError):
            reader.fail(node, f"cannot read the number {node.value[:40]!r}: not a finite double")
        return N.Num(value)
    if isinstance(node, c_ast.ID):
        if node.name in reader.scalars:
            return N.Scal(node.name)
        return N.IterValue(affine(reader, node, iterators))
    if isinstance(node, c_ast.ArrayRef):
        return element(reader, node, iterators)
    if isinstance(node, c_ast.BinaryOp) and node.op in ("+", "-", "*", "/"):
        return N.Bin(
            node.op,
            body_expr(reader, node.left, iterators),
            body_expr(reader, node.right, iterators),
        )
    if isinstance(node, c_ast.UnaryOp) and node.op in ("-", "+"):
        inner = body_expr(reader, node.expr, iterators)
        return N.Neg(inner) if node.op == "-" else inner
    if isinstance(node, c_ast.Cast):
        if float_dtype(node.to_type.type) is None:
            reader.fail(node, "only casts to float or double are accepted in a value")
        return body_expr(reader, node.expr, iterators)
    if isinstance(node, c_ast.FuncCall) and isinstance(node.name, c_ast.ID):
        func = known_function(node.name.name)
        if func is None:
            reader.fail(
                node,
                f"call of {node.name.name!r}, which may have side effects: only "
                "the elementwise functions (sqrt, exp, log, fabs, sin, cos, tanh, "
                "fmax, fmin, pow) are accepted",
            )
        args = tuple(
            body_expr(reader, a, iterators) for a in (node.args.exprs if node.args else ())
        )
        if len(args) != FUNCTIONS[func].arity:
            reader.fail(
                node, f"{node.name.name} takes {FUNCTIONS[func].arity} argument(s), got {len(args)}"
            )
        return N.Fn(func, args)
    if isinstance(node, c_ast.Assignment) or (
        isinstance(node, c_ast.UnaryOp) and node.op in ("p++", "++", "p--", "--")
    ):
        reader.fail(node, "an assignment or increment inside an expression has a side effect")
    if isinstance(node, c_ast.UnaryOp) and node.op in ("*", "&"):
        reader.fail(node, "not affine: pointer dereference or address", _AFFINE_HINT)
    if isinstance(node, c_ast.TernaryOp):
        reader.fail(
            node,
            "a conditional expression (?:) is not supported",
            hint="use if on an affine condition",
        )
    reader.fail(node, "unsupported expression in a statement")
