"""One C function of the affine subset → :class:`~.cfront_nodes.AFunction`
(parameters, loops, conditions, statements); see :mod:`.cfront` for the subset."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NoReturn

from pycparser import c_ast

from ..errors import ParseError
from . import cfront_nodes as N
from .cfront_exprs import body_expr, condition, element, read_loop
from .cfront_types import ISL_RESERVED, LiteralTooLarge, float_dtype, int_literal, int_type

_NOT_AFFINE_STATEMENTS = {
    c_ast.While: (
        "a while loop is not a static-control loop",
        "write a for loop with affine bounds",
    ),
    c_ast.DoWhile: (
        "a do-while loop is not a static-control loop",
        "write a for loop with affine bounds",
    ),
    c_ast.Goto: ("goto is not supported (control flow must be structured loops and ifs)", None),
    c_ast.Label: ("labels are not supported (control flow must be structured loops and ifs)", None),
    c_ast.Break: ("break makes the trip count data dependent", "use an affine loop bound"),
    c_ast.Continue: ("continue is not supported", "use an affine if around the statements"),
    c_ast.Switch: ("switch is not supported", "use if on affine conditions"),
}


@dataclass
class _Scope:
    """What encloses the statements being read: loops, guards, positions."""

    loops: tuple[N.Loop, ...] = ()
    guards: tuple[N.Constraint, ...] = ()
    path: tuple[int, ...] = ()
    counter: list[int] = field(default_factory=lambda: [0])

    @property
    def iterators(self) -> tuple[str, ...]:
        return tuple(loop.iterator for loop in self.loops)

    def take(self) -> tuple[int, ...]:
        """The position of the next statement or loop at this depth."""
        position = self.counter[0]
        self.counter[0] += 1
        return (*self.path, position)


class FunctionReader:
    def __init__(self, reader: Any, node: c_ast.FuncDef):
        self.reader = reader  # the file's CReader: spans, errors, #defines, pragmas
        self.defines: dict[str, int] = reader.defines
        self.node = node
        self.sizes: list[str] = []
        self.arrays: dict[str, N.AArray] = {}
        self.scalars: dict[str, N.AScalar] = {}
        self.statements: list[N.AStatement] = []

    def fail(self, node: Any, message: str, hint: str | None = None) -> NoReturn:
        raise ParseError(message, self.reader.span(node), hint)

    # -- the signature -----------------------------------------------------------------

    def read(self) -> N.AFunction:
        decl = self.node.decl
        function = decl.type
        name = decl.name
        result = function.type
        if not (
            isinstance(result, c_ast.TypeDecl)
            and isinstance(result.type, c_ast.IdentifierType)
            and result.type.names == ["void"]
        ):
            self.fail(
                decl,
                f"function {name!r} must return void",
                hint="results are written into array parameters",
            )
        for param in function.args.params if function.args else ():
            self._parameter(param)
        body = self.node.body
        items = list(body.block_items or ())
        if items and isinstance(items[-1], c_ast.Return) and items[-1].expr is None:
            items.pop()  # a final plain `return;`
        self._items(items, _Scope())
        return N.AFunction(
            name,
            tuple(self.sizes),
            tuple(self.arrays.values()),
            tuple(self.scalars.values()),
            tuple(self.statements),
            defaults=tuple(
                (s, self.reader.pragma_sizes[s].value)
                for s in self.sizes
                if s in self.reader.pragma_sizes
            ),
            span=self.reader.span(decl),
        )

    def known(self, name: str) -> bool:
        return name in self.arrays or name in self.scalars or name in self.sizes

    def _parameter(self, param: Any) -> None:
        if isinstance(param, c_ast.Typename) and param.name is None:
            if isinstance(param.type, c_ast.TypeDecl) and getattr(
                param.type.type, "names", None
            ) == ["void"]:
                return  # f(void)
        if not isinstance(param, c_ast.Decl) or not param.name:
            self.fail(param, "every parameter needs a name and a type")
        name = param.name
        if name in ISL_RESERVED:
            self.fail(param, f"the name {name!r} is reserved by isl", hint="rename it")
        if self.known(name) or name in self.reader.defines:
            self.fail(param, f"parameter {name!r} declared twice")
        kind = param.type
        if int_type(kind):
            self.sizes.append(name)
            return
        dtype = float_dtype(kind)
        if dtype is not None:
            self.scalars[name] = N.AScalar(name, dtype, self.reader.span(param))  # type: ignore[arg-type]
            return
        if isinstance(kind, c_ast.ArrayDecl):
            self._array_parameter(param)
            return
        if isinstance(kind, c_ast.PtrDecl):
            element = float_dtype(kind.type)
            if element is None:
                self.fail(
                    param, f"parameter {name!r}: only pointers to float or double are accepted"
                )
            shape = self.reader.pragma_shapes.get(name)
            if shape is None:
                self.fail(
                    param,
                    f"pointer parameter {name!r} has no extents",
                    hint=f"declare it as an array ({name}[n]) or add "
                    f"`#pragma einkern array {name}[n]` before the function",
                )
            extents = tuple(self._extent_text(text, line, param) for text, line in shape)
            self.arrays[name] = N.AArray(name, element, extents, self.reader.span(param))  # type: ignore[arg-type]
            return
        self.fail(
            param,
            f"parameter {name!r}: unsupported type",
            hint="integers (sizes), float/double scalars and float/double arrays",
        )

    def _array_parameter(self, param: c_ast.Decl) -> None:
        dims: list[Any] = []
        kind = param.type
        while isinstance(kind, c_ast.ArrayDecl):
            dims.append(kind.dim)
            kind = kind.type
        dtype = float_dtype(kind)
        if dtype is None:
            self.fail(param, f"array {param.name!r}: elements must be float or double")
        extents = []
        for dim in dims:
            if dim is None:
                self.fail(
                    param,
                    f"array {param.name!r}: every extent must be given",
                    hint=f"e.g. {param.name}[n]",
                )
            extents.append(self._extent_node(dim))
        self.arrays[param.name] = N.AArray(
            param.name,
            dtype,
            tuple(extents),  # type: ignore[arg-type]
            self.reader.span(param),
        )

    def _extent_node(self, dim: Any) -> str:
        if isinstance(dim, c_ast.ID) and dim.name in self.sizes:
            return dim.name
        if isinstance(dim, c_ast.ID) and dim.name in self.reader.defines:
            return str(self.reader.defines[dim.name])
        if isinstance(dim, c_ast.Constant) and dim.type == "int":
            try:
                return str(int_literal(dim.value))
            except LiteralTooLarge:
                self.fail(dim, "an array extent must be at most 2**63 - 1")
        self.fail(
            dim,
            "an array extent must be an integer parameter declared before it, "
            "a #define'd constant or an integer",
        )

    def _extent_text(self, text: str, line: int, param: Any) -> str:
        if text in self.sizes:
            return text
        if text in self.reader.defines:
            return str(self.reader.defines[text])
        if text.isdigit():
            return text
        self.fail(
            param,
            f"pragma extent {text!r} (line {line}) is not an integer "
            "parameter, a #define'd constant or an integer",
        )

    # -- statements --------------------------------------------------------------------

    def _items(self, items: list[Any], scope: _Scope) -> None:
        for item in items:
            self._statement(item, scope)

    def _statement(self, node: Any, scope: _Scope) -> None:
        for kind, (message, hint) in _NOT_AFFINE_STATEMENTS.items():
            if isinstance(node, kind):
                self.fail(node, message, hint)
        if isinstance(node, c_ast.Compound):
            self._items(list(node.block_items or ()), scope)
        elif isinstance(node, c_ast.For):
            self._for(node, scope)
        elif isinstance(node, c_ast.If):
            self._if(node, scope)
        elif isinstance(node, c_ast.Assignment):
            self._assignment(node, scope)
        elif isinstance(node, c_ast.EmptyStatement):
            pass
        elif isinstance(node, c_ast.Decl | c_ast.DeclList):
            self.fail(
                node,
                "local variables are not supported",
                hint="declare loop iterators in the for (int i = ...), keep values in arrays",
            )
        elif isinstance(node, c_ast.Return):
            self.fail(
                node, "return is only accepted as the function's last statement, without a value"
            )
        elif isinstance(node, c_ast.UnaryOp) and node.op in ("p++", "++", "p--", "--"):
            self.fail(node, "increment statements are not supported", hint="write x[i] += 1")
        elif isinstance(node, c_ast.FuncCall):
            self.fail(
                node,
                "a function call as a statement may have side effects",
                hint="only the elementwise functions, inside expressions, are accepted",
            )
        else:
            self.fail(node, "unsupported statement: only for, if and assignments are accepted")

    def _for(self, node: c_ast.For, scope: _Scope) -> None:
        loop = read_loop(self, node, scope.iterators)
        position = scope.take()
        inner = _Scope(scope.loops + (loop,), scope.guards, position, [0])
        self._check_iterator_kept(node.stmt, loop.iterator)
        self._statement(node.stmt, inner)

    def _check_iterator_kept(self, body: Any, iterator: str) -> None:
        for child in _nodes(body):
            target = None
            if isinstance(child, c_ast.Assignment):
                target = child.lvalue
            elif isinstance(child, c_ast.UnaryOp) and child.op in ("p++", "++", "p--", "--"):
                target = child.expr
            if isinstance(target, c_ast.ID) and target.name == iterator:
                self.fail(
                    child,
                    f"the loop iterator {iterator!r} is modified in the loop body",
                    hint="a static-control loop changes its iterator only in its header",
                )

    def _if(self, node: c_ast.If, scope: _Scope) -> None:
        constraints = condition(self, node.cond, scope.iterators)
        then = _Scope(scope.loops, scope.guards + constraints, scope.path, scope.counter)
        self._statement(node.iftrue, then)
        if node.iffalse is None:
            return
        if len(constraints) != 1 or constraints[0].equal:
            self.fail(
                node.cond,
                "else after a condition with && or == is not convex",
                hint="write two ifs with affine conditions",
            )
        negated = N.Constraint(constraints[0].aff.scale(-1) + N.Aff(const=-1))
        other = _Scope(scope.loops, scope.guards + (negated,), scope.path, scope.counter)
        self._statement(node.iffalse, other)

    def _assignment(self, node: c_ast.Assignment, scope: _Scope) -> None:
        if node.op not in ("=", "+=", "-=", "*=", "/="):
            self.fail(
                node,
                f"assignment operator {node.op!r} is not supported",
                hint="use = += -= *= or /=",
            )
        lvalue = node.lvalue
        if isinstance(lvalue, c_ast.ID):
            if lvalue.name in self.scalars:
                self.fail(
                    lvalue,
                    f"scalar parameter {lvalue.name!r} is read only",
                    hint="write results into array elements",
                )
            if lvalue.name in scope.iterators or lvalue.name in self.sizes:
                self.fail(lvalue, f"{lvalue.name!r} may not be assigned in the loop nest")
            if lvalue.name in self.arrays:
                self.fail(lvalue, f"array {lvalue.name!r} assigned without subscripts")
            self.fail(
                lvalue,
                f"assignment to undeclared variable {lvalue.name!r}",
                hint="local variables are not supported; write into an array parameter",
            )
        if not isinstance(lvalue, c_ast.ArrayRef):
            self.fail(
                lvalue,
                "only array elements can be assigned (pointer arithmetic and "
                "dereferences are not affine)",
            )
        target = element(self, lvalue, scope.iterators)
        rhs = body_expr(self, node.rvalue, scope.iterators)
        name = f"S{len(self.statements)}"
        self.statements.append(
            N.AStatement(
                name,
                scope.loops,
                scope.guards,
                target,
                node.op,
                rhs,
                scope.take(),
                self.reader.span(node),
            )
        )


def _nodes(node: Any):
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(child for _, child in current.children())
