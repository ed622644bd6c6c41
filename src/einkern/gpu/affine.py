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
from . import kir
from .affine_exprs import INDEX, kernel_params, plus, statement_ctype, statement_store
from .affine_reduce import reduction_kernel, reduction_nest
from .affine_tiles import COLUMNS, ROWS, select_tree, tile_plan

THREADS = 256
MAX_HOST_TRIPS = 4096  # a longer sequential outer loop runs in one thread instead
MAX_BOX_ROWS = 1 << 16  # rows examined to bound a nested loop (else 1-d mapping)
_OPS = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "le": "<=",
    "lt": "<",
    "ge": ">=",
    "gt": ">",
    "eq": "==",
    "and_": "&&",
    "and_then": "&&",
    "or_": "||",
    "or_else": "||",
    "min": "min",
    "max": "max",
}
_BLOCK, _FOR, _IF, _USER = (
    getattr(isl.ast_node_type, name) for name in ("block", "for_", "if_", "user")
)
_OP_NAMES = {getattr(isl.ast_expr_op_type, name): name for name in (*_OPS, "minus")}


@dataclass(frozen=True)
class AffineKernel:
    """One launch: its kernel, the statements it runs, why it is mapped the way it
    is, and the values of the host loops' iterators it is launched with."""

    kernel: kir.Kernel
    statements: tuple[str, ...]
    reason: str
    values: tuple[tuple[str, int], ...] = ()
    shape: str = ""  # the AST it runs (launches of one host loop share kernels by it)


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
            return plus(bound, kir.Int(1)) if name == "le" else bound
    raise BackendError(f"isl produced a loop condition the affine CUDA path cannot print: {cond}")


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
        return [statement_store(problem, statement, values)]
    raise BackendError(f"unexpected isl AST node {kind}")


def _names_in(node: isl.AstNode, problem: A.AffineProblem) -> list[N.AStatement]:
    text = node.to_C_str()
    return [s for s in problem.function.statements if f"{s.name}(" in text]


def _evaluate(e: kir.Expr, env: dict[str, int]) -> int | None:
    """The value of an integer expression of the given variables, or None."""
    if isinstance(e, kir.Var):
        return env.get(e.name)
    if isinstance(e, kir.Int):
        return e.value
    if isinstance(e, kir.Neg):
        inner = _evaluate(e.operand, env)
        return None if inner is None else -inner
    if isinstance(e, kir.Op) and e.op in ("+", "-", "*", "min", "max"):
        a, b = _evaluate(e.left, env), _evaluate(e.right, env)
        if a is None or b is None:
            return None
        return {"+": a + b, "-": a - b, "*": a * b, "min": min(a, b), "max": max(a, b)}[e.op]
    return None


@dataclass(frozen=True)
class _Loop:
    """An AST for loop: iterator, bounds (``start <= it < stop``), body, statements."""

    iterator: str
    start: kir.Expr
    stop: kir.Expr
    body: isl.AstNode
    statements: tuple[N.AStatement, ...]

    @staticmethod
    def of(node: isl.AstNode, problem: A.AffineProblem) -> _Loop | None:
        if node.get_type() != _FOR:
            return None
        iterator = node.for_get_iterator().get_id().get_name()
        return _Loop(
            iterator,
            _expr(node.for_get_init()),
            _stop(node.for_get_cond(), iterator),
            node.for_get_body(),
            tuple(_names_in(node, problem)),
        )

    def parallel(self, problem: A.AffineProblem) -> bool:
        depth = (int(self.iterator[1:]) + 1) // 2
        keys = {A.loop_key(s, depth) for s in self.statements}
        return len(keys) == 1 and A.loop_parallel(problem.function, keys.pop())


@dataclass
class _Builder:
    problem: A.AffineProblem
    launches: list[AffineKernel]
    count: int = 0

    def nest(self, node: isl.AstNode, outer: dict[str, int]) -> None:
        """Launches for one outer nest (``outer``: host loop values, if any)."""
        loop = _Loop.of(node, self.problem)
        if loop is not None and not outer and not loop.parallel(self.problem):
            reduced = self._reduction(node)
            if reduced is not None:
                self.launches.append(reduced)
                return
        if loop is not None and not loop.parallel(self.problem) and not outer:
            start, stop = _constant(loop.start), _constant(loop.stop)
            inner = _top_level(loop.body)
            if (
                start is not None
                and stop is not None
                and stop - start <= MAX_HOST_TRIPS
                and any(
                    (c := _Loop.of(n, self.problem)) is not None and c.parallel(self.problem)
                    for n in inner
                )
            ):
                # a host loop: its body's nests launched once per iteration
                first = len(self.launches)
                for value in range(start, stop):
                    for child in inner:
                        self.nest(child, {loop.iterator: value})
                self._share_kernels(first)
                return
        self.launches.append(self.kernel(node, loop, outer))

    def _reduction(self, node: isl.AstNode) -> AffineKernel | None:
        """The nest as reduction tiles (:mod:`.affine_reduce`), if it is one."""
        statements = tuple(_names_in(node, self.problem))
        nest = reduction_nest(self.problem, statements)
        if isinstance(nest, str):
            return None
        ctypes = {statement_ctype(self.problem, s) for s in statements}
        ctype = "double" if "double" in ctypes else "float"
        name = f"affine_{self.problem.function.name}_{self.count}"
        kernel = reduction_kernel(self.problem, nest, name, ctype)
        if kernel is None:
            return None
        self.count += 1
        names = tuple(s.name for s in statements)
        return AffineKernel(kernel, names, kernel.comment, (), repr(kernel))

    def _share_kernels(self, first: int) -> None:
        """Launches of one host loop's iterations use the first iteration's kernels."""
        seen: dict[str, kir.Kernel] = {}
        for k in range(first, len(self.launches)):
            launch = self.launches[k]
            shape = launch.shape
            if shape in seen:
                self.launches[k] = AffineKernel(
                    seen[shape], launch.statements, launch.reason, launch.values, shape
                )
            else:
                seen[shape] = launch.kernel

    def kernel(self, node: isl.AstNode, loop: _Loop | None, outer: dict[str, int]) -> AffineKernel:
        statements = _names_in(node, self.problem)
        params = kernel_params(self.problem, {s.target.array for s in statements}, tuple(outer))
        names = tuple(s.name for s in statements)
        values = tuple(outer.items())
        name = f"affine_{self.problem.function.name}_{self.count}"
        self.count += 1
        mapped = self._grid(node, loop, outer) if loop is not None else None
        if mapped is None:
            reason = (
                "its outermost loop carries a dependence (or there is none): one thread "
                "runs it sequentially — correct, not fast"
            )
            body, threads, blocks = tuple(_body(self.problem, node)), 1, 1
        else:
            body, threads, blocks, reason = mapped
        if outer:
            reason += f" (launched once per value of host loop {', '.join(outer)})"
        kernel = kir.Kernel(
            name,
            params,
            threads,
            blocks,
            (),
            (),
            (kir.PerThread(body),),
            index_type=INDEX,
            comment=reason,
        )
        return AffineKernel(kernel, names, reason, values, repr((body, threads, blocks, params)))

    def _grid(self, node: isl.AstNode, loop: _Loop, outer: dict[str, int]):
        """A parallel outer loop (and a parallel loop nested alone in it) on the grid."""
        if not loop.parallel(self.problem):
            return None
        start, stop = _evaluate(loop.start, outer), _evaluate(loop.stop, outer)
        if start is None or stop is None:
            return None
        trips = max(0, stop - start)
        index = kir.Op("+", kir.Op("*", kir.BlockIdx(), kir.Int(THREADS)), kir.ThreadIdx())
        inner_nodes = _top_level(loop.body)
        inner = _Loop.of(inner_nodes[0], self.problem) if len(inner_nodes) == 1 else None
        box = self._box(loop, inner, start, stop, outer) if inner is not None else None
        if inner is not None and box is not None and inner.parallel(self.problem):
            low, width, filled = box
            if filled < 0.75 * trips * width:  # a triangle, say: skip the empty tiles
                tiled = self._tiles(loop, inner, start, stop, outer)
                if tiled is not None:
                    return tiled
            blocks = max(1, -(-(trips * width) // THREADS))
            row, column = kir.Var(loop.iterator), kir.Var(inner.iterator)
            guard = kir.Op(
                "&&",
                kir.Op("<", row, kir.Int(stop)),
                kir.Op("&&", kir.Op(">=", column, inner.start), kir.Op("<", column, inner.stop)),
            )
            body: tuple[kir.Stmt, ...] = (
                kir.Declare(
                    loop.iterator, INDEX, plus(kir.Op("/", index, kir.Int(width)), kir.Int(start))
                ),
                kir.Declare(
                    inner.iterator, INDEX, plus(kir.Op("%", index, kir.Int(width)), kir.Int(low))
                ),
                kir.If(guard, tuple(_body(self.problem, inner.body))),
            )
            idle = 1 - filled / max(1, trips * width)
            reason = (
                f"loops {loop.iterator} x {inner.iterator} carry no dependence: a box with "
                f"guards of {trips} x {width} iterations, one per thread ({inner.iterator} "
                f"fastest), {THREADS} threads x {blocks} blocks; guards drop the threads "
                f"outside the domain ({idle:.0%} of them: no tiling of triangles)"
            )
            return body, THREADS, blocks, reason
        blocks = max(1, -(-trips // THREADS))
        body = (
            kir.Declare(loop.iterator, INDEX, plus(index, kir.Int(start))),
            kir.If(
                kir.Op("<", kir.Var(loop.iterator), kir.Int(stop)),
                tuple(_body(self.problem, loop.body)),
            ),
        )
        reason = (
            f"loop {loop.iterator} ({trips} iterations) carries no dependence: a box with "
            f"guards, one iteration per thread, {THREADS} threads x {blocks} blocks; its inner "
            "loops run sequentially in each thread (short rows of a triangle finish early)"
        )
        return body, THREADS, blocks, reason

    def _tiles(self, loop: _Loop, inner: _Loop, start: int, stop: int, outer: dict[str, int]):
        """Both loops on the grid in ROWS x COLUMNS tiles, the empty tiles skipped."""
        rows = []
        for value in range(start, stop):
            env = {**outer, loop.iterator: value}
            low, high = _evaluate(inner.start, env), _evaluate(inner.stop, env)
            if low is None or high is None:
                return None
            rows.append((low, high))
        plan = tile_plan(rows)
        if plan is None or plan.blocks >= plan.box:
            return None
        b = kir.BlockIdx()
        starts = [first for first, _, _ in plan.entries]
        q = select_tree(b, starts, [tile for _, tile, _ in plan.entries])
        shift = select_tree(b, starts, [delta for _, _, delta in plan.entries])
        t = kir.ThreadIdx()
        row, column = kir.Var(loop.iterator), kir.Var(inner.iterator)
        body: tuple[kir.Stmt, ...] = (
            kir.Declare(
                loop.iterator,
                INDEX,
                plus(
                    kir.Op("+", kir.Op("*", q, kir.Int(ROWS)), kir.Op("/", t, kir.Int(COLUMNS))),
                    kir.Int(start),
                ),
            ),
            kir.Declare(
                inner.iterator,
                INDEX,
                plus(
                    kir.Op(
                        "+",
                        kir.Op("*", kir.Op("+", b, shift), kir.Int(COLUMNS)),
                        kir.Op("%", t, kir.Int(COLUMNS)),
                    ),
                    kir.Int(plan.origin),
                ),
            ),
            kir.If(
                kir.Op(
                    "&&",
                    kir.Op("<", row, kir.Int(stop)),
                    kir.Op(
                        "&&", kir.Op(">=", column, inner.start), kir.Op("<", column, inner.stop)
                    ),
                ),
                tuple(_body(self.problem, inner.body)),
            ),
        )
        reason = (
            f"loops {loop.iterator} x {inner.iterator} carry no dependence: tiles of "
            f"{ROWS} x {COLUMNS} iterations ({inner.iterator} fastest), one per block of "
            f"{THREADS} threads; {plan.blocks} of the bounding box's {plan.box} tiles launched "
            "(the empty ones skipped), guards drop the threads outside the domain"
        )
        return body, THREADS, plan.blocks, reason

    @staticmethod
    def _box(
        loop: _Loop, inner: _Loop, start: int, stop: int, outer: dict[str, int]
    ) -> tuple[int, int, int] | None:
        """The inner loop's bounding range over the outer loop: (low, width, points)."""
        if stop - start > MAX_BOX_ROWS:
            return None
        lows, highs, points = [], [], 0
        for value in range(start, stop):
            env = {**outer, loop.iterator: value}
            low, high = _evaluate(inner.start, env), _evaluate(inner.stop, env)
            if low is None or high is None:
                return None
            lows.append(low)
            highs.append(high)
            points += max(0, high - low)
        if not lows or max(highs) <= min(lows):
            return None
        width = max(highs) - min(lows)
        return (min(lows), width, points) if (stop - start) * width < 2**31 else None


def affine_kernels(problem: A.AffineProblem) -> tuple[AffineKernel, ...]:
    """The launches of ``problem``, in order: one kernel per outer nest of isl's AST
    (:func:`einkern.ir.affine.ast_of`), a sequential outer loop whose body holds a
    parallel nest becoming a host loop (its body's kernels launched once per
    iteration, the iterator a kernel argument)."""
    builder = _Builder(problem, [])
    for node in _top_level(A.ast_of(problem)):
        builder.nest(node, {})
    return tuple(builder.launches)


def distinct_kernels(launches: Sequence[AffineKernel]) -> list[kir.Kernel]:
    """Each kernel once, in order of first launch."""
    return list({launch.kernel.name: launch.kernel for launch in launches}.values())


def _top_level(root: isl.AstNode) -> Sequence[isl.AstNode]:
    """The nodes of a block (isl nests blocks: flattened), or the node itself."""
    if root.get_type() == _BLOCK:
        children = root.block_get_children()
        return [n for k in range(children.n_ast_node()) for n in _top_level(children.get_at(k))]
    return [root]
