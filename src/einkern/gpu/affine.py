"""CUDA kernels for affine programs that are not tensor programs (triangular
solves, stencils with guards…): each outer loop nest of isl's AST becomes one
kernel.

* A nest whose outermost loop carries no dependence
  (:func:`einkern.ir.affine.loop_parallel`) is mapped to the grid as **a box with
  guards**: thread ``t`` runs iteration ``lower + t`` of that loop (256 threads a
  block, enough blocks to cover the loop's trip count), a guard drops the threads
  past its upper bound, and each thread runs the inner loops — isl's AST for
  them, triangular bounds included — sequentially.  Inner triangular loops are
  therefore not tiled: a thread whose row is short simply finishes early, no
  block is spent on an empty tile, but the work per thread is unbalanced.
* A nest whose outermost loop carries a dependence (a triangular solve) runs in
  one thread: correct, not fast; ``--explain`` says so.

The kernels are kernel IR (:mod:`.kir`), so the CUDA printer prints them and the
emulator runs them on the CPU with every access bounds-checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import islpy as isl

from ..errors import BackendError
from ..ir import affine as A
from ..lang import cfront_nodes as N
from ..semantics import C_TYPE, compute_dtype
from . import kir
from .ctext import mangle

THREADS = 256
INDEX = "long long"
_OPS = {
    "add": "+", "sub": "-", "mul": "*", "le": "<=", "lt": "<", "ge": ">=", "gt": ">",
    "eq": "==", "and_": "&&", "and_then": "&&", "or_": "||", "or_else": "||",
    "min": "min", "max": "max",
}
_BLOCK, _FOR, _IF, _USER = (
    getattr(isl.ast_node_type, name) for name in ("block", "for_", "if_", "user")
)
_OP_NAMES = {getattr(isl.ast_expr_op_type, name): name for name in (*_OPS, "minus")}


@dataclass(frozen=True)
class AffineKernel:
    """One kernel and why it is mapped the way it is."""

    kernel: kir.Kernel
    statements: tuple[str, ...]
    reason: str


def _expr(e: isl.AstExpr) -> kir.Expr:
    kind = e.get_type()
    if kind == isl.ast_expr_type.int:
        return kir.Int(int(e.get_val().to_python()))
    if kind == isl.ast_expr_type.id:
        return kir.Var(e.get_id().get_name())
    name = _OP_NAMES.get(e.get_op_type())
    if name is None:
        raise BackendError(f"isl produced an expression the affine CUDA path cannot print: {e}")
    args = [_expr(e.get_op_arg(k)) for k in range(e.get_op_n_arg())]
    if name == "minus":
        return kir.Neg(args[0])
    result = args[0]
    for arg in args[1:]:
        result = kir.Op(_OPS[name], result, arg)
    return result


def _constant(e: kir.Expr) -> int | None:
    if isinstance(e, kir.Int):
        return e.value
    if isinstance(e, kir.Neg):
        inner = _constant(e.operand)
        return None if inner is None else -inner
    if isinstance(e, kir.Op) and e.op in ("+", "-", "*", "min", "max"):
        a, b = _constant(e.left), _constant(e.right)
        if a is None or b is None:
            return None
        return {"+": a + b, "-": a - b, "*": a * b, "min": min(a, b), "max": max(a, b)}[e.op]
    return None


def _stop(cond: isl.AstExpr, iterator: str) -> kir.Expr:
    """The exclusive upper bound of ``iterator <= e`` / ``iterator < e``."""
    name = _OP_NAMES.get(cond.get_op_type())
    if name in ("le", "lt"):
        left = _expr(cond.get_op_arg(0))
        if left == kir.Var(iterator):
            bound = _expr(cond.get_op_arg(1))
            return _plus(bound, kir.Int(1)) if name == "le" else bound
    raise BackendError(f"isl produced a loop condition the affine CUDA path cannot print: {cond}")


def _plus(a: kir.Expr, b: kir.Expr) -> kir.Expr:
    """``a + b`` with constants folded."""
    if isinstance(a, kir.Int) and isinstance(b, kir.Int):
        return kir.Int(a.value + b.value)
    if isinstance(b, kir.Int) and b.value == 0:
        return a
    if isinstance(a, kir.Int) and a.value == 0:
        return b
    if isinstance(b, kir.Int) and b.value < 0:
        return kir.Op("-", a, kir.Int(-b.value))
    return kir.Op("+", a, b)


def _store(
    problem: A.AffineProblem, statement: N.AStatement, values: dict[str, kir.Expr]
) -> kir.Store:
    """The statement as a store; ``values`` gives each iterator's value."""
    function = problem.function
    reads = [function.array(r.array).dtype for r in statement.reads()]
    ctype = C_TYPE[compute_dtype(function.array(statement.target.array).dtype, reads)]
    sizes = dict(problem.sizes)

    def aff(a: N.Aff) -> kir.Expr:
        result: kir.Expr = kir.Int(0)
        for name, coefficient in a.terms:
            if name not in sizes:
                term = values[name]
                if coefficient != 1:
                    term = kir.Op("*", kir.Int(coefficient), term)
                result = _plus(result, term)
        return _plus(result, kir.Int(a.const + sum(c * sizes[n] for n, c in a.terms if n in sizes)))

    def offset(ref: N.Ref) -> kir.Expr:
        shape = problem.shape(ref.array)
        total, stride = N.Aff(), 1
        for subscript, extent in zip(reversed(ref.subscripts), reversed(shape), strict=True):
            total, stride = total + subscript.scale(stride), stride * extent
        return aff(total)

    def expr(e: N.AExpr) -> kir.Expr:
        if isinstance(e, N.Num):
            return kir.Float(e.value)
        if isinstance(e, N.Scal):
            return kir.Var(mangle("s", e.name))
        if isinstance(e, N.Ref):
            return kir.Load(mangle("t", e.array), offset(e))
        if isinstance(e, N.IterValue):
            return kir.Op("*", kir.Float(1.0), aff(e.aff))
        if isinstance(e, N.Neg):
            return kir.Neg(expr(e.operand))
        if isinstance(e, N.Bin):
            return kir.Op(e.op, expr(e.left), expr(e.right))
        args = tuple(expr(a) for a in e.args)
        if e.func in ("max", "min"):
            return kir.Op(e.func, args[0], args[1])
        from .ctext import function_name

        return kir.Call(function_name(e.func, ctype), args)

    return kir.Store(mangle("t", statement.target.array), offset(statement.target),
                     expr(statement.rhs), statement.op)


def _body(problem: A.AffineProblem, node: isl.AstNode) -> list[kir.Stmt]:
    kind = node.get_type()
    if kind == _BLOCK:
        children = node.block_get_children()
        return [s for k in range(children.n_ast_node()) for s in _body(problem, children.get_at(k))]
    if kind == _FOR:
        name = node.for_get_iterator().get_id().get_name()
        start = _expr(node.for_get_init())
        stop = _stop(node.for_get_cond(), name)
        step = _constant(_expr(node.for_get_inc()))
        if step != 1:
            raise BackendError(f"loop {name}: step {step} (only unit steps are generated)")
        return [kir.For(name, start, stop, 1, tuple(_body(problem, node.for_get_body())))]
    if kind == _IF:
        then = tuple(_body(problem, node.if_get_then_node()))
        orelse = tuple(_body(problem, node.if_get_else_node())) if node.if_has_else_node() else ()
        return [kir.If(_expr(node.if_get_cond()), then, orelse)]
    if kind == _USER:
        call = node.user_get_expr()
        name = call.get_op_arg(0).get_id().get_name()
        statement = next(s for s in problem.function.statements if s.name == name)
        values = {
            iterator: _expr(call.get_op_arg(k + 1))
            for k, iterator in enumerate(statement.iterators)
        }
        return [_store(problem, statement, values)]
    raise BackendError(f"unexpected isl AST node {kind}")


def _names_in(node: isl.AstNode, problem: A.AffineProblem) -> list[N.AStatement]:
    text = node.to_C_str()
    return [s for s in problem.function.statements if f"{s.name}(" in text]


def _params(problem: A.AffineProblem, written: set[str]) -> tuple[kir.Param, ...]:
    function = problem.function
    arrays = tuple(
        kir.Param(mangle("t", a.name), C_TYPE[a.dtype], True, problem.numel(a.name),
                  a.name not in written)
        for a in function.arrays
    )
    return arrays + tuple(
        kir.Param(mangle("s", s.name), C_TYPE[s.dtype], False) for s in function.scalars
    )


def _kernel(problem: A.AffineProblem, node: isl.AstNode, number: int) -> AffineKernel:
    statements = _names_in(node, problem)
    written = {s.target.array for s in statements}
    params = _params(problem, written)
    names = tuple(s.name for s in statements)
    name = f"affine_{problem.function.name}_{number}"
    if node.get_type() == _FOR:
        iterator = node.for_get_iterator().get_id().get_name()
        depth = (int(iterator[1:]) + 1) // 2
        keys = {A.loop_key(s, depth) for s in statements}
        start = _constant(_expr(node.for_get_init()))
        stop = _stop(node.for_get_cond(), iterator)
        stop_value = _constant(stop)
        if (len(keys) == 1 and A.loop_parallel(problem.function, keys.pop())
                and start is not None and stop_value is not None):
            trips = max(0, stop_value - start)
            blocks = max(1, -(-trips // THREADS))
            index = kir.Op("+", kir.Op("*", kir.BlockIdx(), kir.Int(THREADS)), kir.ThreadIdx())
            body: tuple[kir.Stmt, ...] = (
                kir.Declare(iterator, INDEX, _plus(index, kir.Int(start))),
                kir.If(kir.Op("<", kir.Var(iterator), stop),
                       tuple(_body(problem, node.for_get_body()))),
            )
            reason = (
                f"loop {iterator} ({trips} iterations) carries no dependence: a box with guards, "
                f"one iteration per thread, {THREADS} threads x {blocks} blocks, guard "
                f"{iterator} < {stop_value}; its inner loops run sequentially in each thread "
                "(triangular inner loops are not tiled: short rows finish early)"
            )
            kernel = kir.Kernel(name, params, THREADS, blocks, (), (), (kir.PerThread(body),),
                                index_type=INDEX, comment=reason)
            return AffineKernel(kernel, names, reason)
    reason = (
        "its outermost loop carries a dependence (or there is none): one thread runs it "
        "sequentially — correct, not fast"
    )
    body = tuple(_body(problem, node))
    kernel = kir.Kernel(name, params, 1, 1, (), (), (kir.PerThread(body),), index_type=INDEX,
                        comment=reason)
    return AffineKernel(kernel, names, reason)


def affine_kernels(problem: A.AffineProblem) -> tuple[AffineKernel, ...]:
    """The kernels of ``problem``, to be launched in order: one per outer nest of
    isl's AST (:func:`einkern.ir.affine.ast_of`)."""
    return tuple(
        _kernel(problem, node, number) for number, node in enumerate(_top_level(A.ast_of(problem)))
    )


def _top_level(root: isl.AstNode) -> Sequence[isl.AstNode]:
    if root.get_type() == _BLOCK:
        children = root.block_get_children()
        return [children.get_at(k) for k in range(children.n_ast_node())]
    return [root]
