"""Reader of Fousek's mapped functions (Fousek 2010, Listings 4.1 and 5.1)::

    MATRIX3x3 A, B, M1;          // declarations: a library type and names
    VECTOR3 c, v1;
    input A, B, c;               // the inputs
    M1 = mmul33(A, B);           // one call of an elementary function per line
    v1 = mvmul33(M1, c);
    return v1;                   // the result

A mapped function is applied to every element of a batch: every variable
becomes a tensor with a leading batch dimension (extent ``nbatch``) and every
call becomes the statements of the function's body with the batch index
``b_`` put in front of every access, parameters renamed to the arguments and
``out`` to the assigned variable.  Statements end at ``;`` or a newline;
``//`` and ``/* */`` are comments.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import NoReturn

from ..errors import (
    DuplicateDeclarationError,
    ExtentError,
    ParseError,
    SemanticError,
    UnknownNameError,
)
from ..source import Source, Span
from .ast import (
    AccessNode,
    BinaryNode,
    CallNode,
    DimRef,
    ExprNode,
    Ident,
    NumberNode,
    ProgramNode,
    StatementNode,
    UnaryNode,
)
from .decls import DeclCollector
from .exprparse import TokenCursor, ident
from .lexer import EOF, NAME, Token, tokenize
from .library import RESULT, FunctionDef, Library, TypeDef, builtin_library

#: Batch size used when none is given: the element count of Fousek's experiments.
DEFAULT_BATCH = 31744
BATCH_INDEX = "b_"
BATCH_EXTENT = "nbatch"


@dataclass(frozen=True)
class _Call:
    target: Token
    func: FunctionDef
    args: tuple[Token, ...]
    call_span: Span
    span: Span


class MappedReader(TokenCursor):
    """Reads one mapped function; :meth:`parse` returns the expanded program."""

    def __init__(self, source: Source, library: Library, batch: int):
        super().__init__(tokenize(source, comment="//", continue_after_comma=True))
        self.source = source
        self.library = library
        self.batch = batch
        self.variables: dict[str, tuple[Token, TypeDef]] = {}
        self.inputs: dict[str, Token] = {}
        self.assigned: dict[str, Token] = {}
        self.calls: list[_Call] = []
        self.result: Token | None = None
        self.input_keyword: Token | None = None

    def parse(self) -> ProgramNode:
        self.skip_blank()
        while self.peek().kind != EOF:
            first = self.peek()
            if self.result is not None:
                raise ParseError(
                    "nothing may follow the return statement",
                    first.span,
                    hint="a mapped function ends with `return VARIABLE;`",
                )
            if first.kind == NAME and first.text == "input":
                self._input()
            elif first.kind == NAME and first.text == "return":
                self._return()
            elif first.kind == NAME and self.peek(1).kind == NAME:
                self._declaration()
            elif first.kind == NAME and self.peek(1).is_op("="):
                self._call()
            else:
                raise ParseError(
                    f"expected a declaration, input, a call or return, found {first.describe()}",
                    first.span,
                    hint="e.g. `MATRIX3x3 A, B;`, `input A;`, `B = mtrans33(A);`, `return B;`",
                )
            self.end_statement("statement")
            self.skip_blank()
        if self.result is None:
            raise ParseError(
                "the mapped function has no return statement",
                self.peek().span,
                hint="end it with `return VARIABLE;`",
            )
        return self._expand()

    # ---- statements --------------------------------------------------------------

    def _declaration(self) -> None:
        type_token = self.advance()
        typedef = self.library.type(type_token.text)
        if typedef is None:
            known = ", ".join(t.name for t in self.library.types)
            raise UnknownNameError(
                f"unknown type '{type_token.text}' (known: {known})",
                type_token.span,
                hint=f"define it in a library file, e.g. `type {type_token.text} = [4, 4]`",
            )
        while True:
            name = self.expect_name("a variable name")
            previous = self.variables.get(name.text)
            if previous is not None:
                raise DuplicateDeclarationError(
                    f"variable '{name.text}' is declared twice (first on line "
                    f"{previous[0].span.line})",
                    name.span,
                    hint="remove one declaration",
                )
            self.variables[name.text] = (name, typedef)
            if not self.accept_op(","):
                return

    def _input(self) -> None:
        self.input_keyword = self.input_keyword or self.peek()
        self.advance()
        while True:
            name = self._declared(self.expect_name("an input variable name"))
            if name.text in self.inputs:
                raise DuplicateDeclarationError(
                    f"'{name.text}' is already an input (line {self.inputs[name.text].span.line})",
                    name.span,
                    hint="list it once",
                )
            if name.text in self.assigned:
                raise SemanticError(
                    f"'{name.text}' is assigned before it is declared input",
                    name.span,
                    hint="declare the inputs before the calls",
                )
            self.inputs[name.text] = name
            if not self.accept_op(","):
                return

    def _return(self) -> None:
        self.advance()
        name = self._declared(self.expect_name("the returned variable after 'return'"))
        self._ready(name)
        self.result = name

    def _call(self) -> None:
        target = self._declared(self.advance())
        self.advance()
        fname = self.peek()
        if fname.kind != NAME or not self.peek(1).is_op("("):
            raise ParseError(
                f"expected a call of an elementary function after '=', found {fname.describe()}",
                fname.span,
                hint="each line calls one function, e.g. `M = mmul33(A, B);`",
            )
        self.advance()
        func = self._function(fname)
        opener = self.advance()
        args: list[Token] = []
        while not self.accept_op(")"):
            if args and not self.accept_op(","):
                self._unclosed(opener)
            arg = self.peek()
            if arg.kind != NAME or self.peek(1).is_op("(", "["):
                raise ParseError(
                    f"expected a variable as argument, found {arg.describe()}",
                    arg.span,
                    hint="arguments are variables: assign nested "
                    "calls and expressions to a variable first",
                )
            args.append(self._ready(self._declared(self.advance())))
        call_span = fname.span.join(self.tokens[self.pos - 1].span)
        self._check_arguments(target, func, args, call_span)
        if target.text in self.inputs:
            raise SemanticError(
                f"cannot assign the input '{target.text}'",
                target.span,
                hint="assign the result to a new variable",
            )
        if target.text in self.assigned:
            raise SemanticError(
                f"'{target.text}' is assigned twice (first on line "
                f"{self.assigned[target.text].span.line})",
                target.span,
                hint="every variable is assigned once: use a new variable",
            )
        self.assigned[target.text] = target
        self.calls.append(_Call(target, func, tuple(args), call_span, target.span.join(call_span)))

    def _unclosed(self, opener: Token) -> NoReturn:
        found = self.peek()
        raise ParseError(
            f"expected ')' to close the argument list opened here, found "
            f"{found.describe()} at line {found.span.line}, column "
            f"{found.span.column}",
            opener.span,
            hint="separate the arguments with ',' and close the list with ')'",
        )

    # ---- checks ----------------------------------------------------------------------

    def _declared(self, name: Token) -> Token:
        if name.text not in self.variables:
            raise UnknownNameError(
                f"variable '{name.text}' is not declared",
                name.span,
                hint=f"declare it with its type, e.g. `MATRIX3x3 {name.text};`",
            )
        return name

    def _ready(self, name: Token) -> Token:
        if name.text not in self.inputs and name.text not in self.assigned:
            raise SemanticError(
                f"variable '{name.text}' is used before it is assigned",
                name.span,
                hint="assign it first, or list it in `input`",
            )
        return name

    def _function(self, fname: Token) -> FunctionDef:
        func = self.library.function(fname.text)
        if func is not None:
            return func
        names = [f.name.name for f in self.library.functions]
        close = difflib.get_close_matches(fname.text, names, n=1)
        suggestion = f"did you mean '{close[0]}'? " if close else ""
        raise UnknownNameError(
            f"no elementary function '{fname.text}'; known: {', '.join(names)}",
            fname.span,
            hint=suggestion + "define it in a library file (see docs/language.md)",
        )

    def _check_arguments(
        self, target: Token, func: FunctionDef, args: list[Token], call_span: Span
    ) -> None:
        if len(args) != len(func.params):
            raise SemanticError(
                f"{func.name.name} takes {len(func.params)} "
                f"argument{'s' if len(func.params) != 1 else ''}, got {len(args)}",
                call_span,
                hint=func.signature(),
            )
        for number, (arg, param) in enumerate(zip(args, func.params, strict=True), start=1):
            argtype = self.variables[arg.text][1]
            if argtype.shape != param.type.shape:
                raise SemanticError(
                    f"argument {number} of {func.name.name} must be a {param.type.name}, "
                    f"but '{arg.text}' is a {argtype.name}",
                    arg.span,
                    hint=func.signature(),
                )
        own = self.variables[target.text][1]
        if own.shape != func.result.shape:
            raise SemanticError(
                f"{func.name.name} returns a {func.result.name}, but "
                f"'{target.text}' is a {own.name}",
                target.span,
                hint=func.signature(),
            )

    # ---- expansion --------------------------------------------------------------------

    def _expand(self) -> ProgramNode:
        decls = DeclCollector(self.source)
        taken = set(self.variables)
        extent = _fresh(BATCH_EXTENT, taken)
        anchor = (self.input_keyword or self.result or self.peek()).span
        returned = self.result.text if self.result is not None else None
        decls.add_extent(Ident(extent, anchor), self.batch, anchor)
        for name, (token, typedef) in self.variables.items():
            if name in self.inputs or name in self.assigned:
                shape = (DimRef(extent, None, token.span),) + tuple(
                    DimRef(None, size, token.span) for size in typedef.shape
                )
                local = name not in self.inputs and name != returned
                decls.add_tensor(ident(token), shape, None, None, token.span, local)
        for call in self.calls:
            for statement in _inline(call, taken | {extent}):
                decls.add_statement(statement)
        return decls.finish("mapped")


def _fresh(name: str, taken: set[str]) -> str:
    """``name``, or ``name_1``, ``name_2``, ... whichever is first not in ``taken``."""
    candidate, number = name, 0
    while candidate in taken:
        number += 1
        candidate = f"{name}_{number}"
    return candidate


def _inline(call: _Call, taken: set[str]) -> list[StatementNode]:
    """The body of ``call.func`` for one batch element ``b_`` (see module docstring)."""
    tensors = {p.name.name: arg for p, arg in zip(call.func.params, call.args, strict=True)}
    tensors[RESULT] = call.target
    where = call.call_span
    batch = _fresh(BATCH_INDEX, taken)
    out: list[StatementNode] = []
    for statement in call.func.body:
        used = _index_names(statement)
        renames: dict[str, str] = {}
        for name in sorted(used):
            if name in taken or name == batch:
                renames[name] = _fresh(name, used | taken | {batch} | set(renames.values()))

        def access(
            node: AccessNode, batch: str = batch, renames: dict[str, str] = renames
        ) -> AccessNode:
            token = tensors[node.tensor.name]
            indices = (Ident(batch, where),) + tuple(
                Ident(renames.get(i.name, i.name), where) for i in node.indices
            )
            return AccessNode(Ident(token.text, token.span), indices, where)

        def expr(node: ExprNode) -> ExprNode:
            if isinstance(node, AccessNode):
                return access(node)
            if isinstance(node, UnaryNode):
                return UnaryNode(node.op, expr(node.operand), where)
            if isinstance(node, BinaryNode):
                return BinaryNode(node.op, expr(node.left), expr(node.right), where)
            if isinstance(node, CallNode):
                return CallNode(Ident(node.func.name, where), tuple(map(expr, node.args)), where)
            if isinstance(node, NumberNode):
                return NumberNode(node.value, where)
            raise AssertionError(f"unexpected node in a library body: {node!r}")

        target = access(statement.target)
        target = AccessNode(target.tensor, target.indices, call.target.span)
        out.append(StatementNode(target, statement.op, expr(statement.rhs), call.span))
    return out


def _index_names(statement: StatementNode) -> set[str]:
    names = {i.name for i in statement.target.indices}
    stack: list[ExprNode] = [statement.rhs]
    while stack:
        node = stack.pop()
        if isinstance(node, AccessNode):
            names.update(i.name for i in node.indices)
        elif isinstance(node, UnaryNode):
            stack.append(node.operand)
        elif isinstance(node, BinaryNode):
            stack.extend((node.left, node.right))
        elif isinstance(node, CallNode):
            stack.extend(node.args)
    return names


def parse_mapped(
    text: str, name: str = "<string>", *, batch: int | None = None, library: Library | None = None
) -> ProgramNode:
    """Parse a mapped function and expand it over a batch of ``batch`` elements
    (default 31744) using ``library`` (default: :func:`builtin_library`; to add
    your own functions pass ``load_library(path)``, which includes the built-in
    ones).  The program is named after the file stem, else ``"mapped"``."""
    lib = builtin_library() if library is None else library
    size = DEFAULT_BATCH if batch is None else batch
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ExtentError(
            f"the batch size must be a positive integer, not {size!r}",
            hint="pass batch=N with N >= 1",
        )
    return MappedReader(Source(name, text), lib, size).parse()
