"""Libraries of elementary functions for mapped functions (Fousek 2010, section 4.1.1).

A library file uses the .ein expression syntax::

    # comment
    type MATRIX3x3 = [3, 3]          # a data element: fixed sizes, [] for a scalar
    function mmul33(A: MATRIX3x3, B: MATRIX3x3) -> MATRIX3x3 {
      out[i, j] = A[i, k] * B[k, j]  # .ein statements; the result is `out`
    }

The body holds one or more statements that assign ``out`` (the first with
``=``), read the parameters with one index per dimension (``s[]`` for a
scalar) and may call the elementwise functions (sqrt, exp, ...).  Repeated
indices on the right are summed as in any .ein statement.

The built-in library is ``einkern/lib/elementary.ein`` (:func:`builtin_library`);
:func:`load_library` reads a user file on top of it.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..errors import (
    DuplicateDeclarationError,
    IndexBindingError,
    ParseError,
    RankError,
    SemanticError,
    UnknownNameError,
    UsageError,
)
from ..semantics import ARITY
from ..source import Source, Span
from .ast import (
    AccessNode,
    BinaryNode,
    CallNode,
    ExprNode,
    Ident,
    NameNode,
    StatementNode,
    UnaryNode,
)
from .decls import check_extent_value
from .exprparse import ExprParser, ident
from .lexer import EOF, INT, NAME, Token, tokenize
from .limits import check_statement

RESULT = "out"


@dataclass(frozen=True)
class TypeDef:
    """A data-element type: a name and fixed sizes (``()`` for a scalar)."""

    name: str
    shape: tuple[int, ...]
    span: Span

    def __str__(self) -> str:
        return f"{self.name} [{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class Param:
    """A function parameter and its type."""

    name: Ident
    type: TypeDef


@dataclass(frozen=True)
class FunctionDef:
    """An elementary function: typed parameters, a result type, a body of
    statements that assign ``out``."""

    name: Ident
    params: tuple[Param, ...]
    result: TypeDef
    body: tuple[StatementNode, ...]

    def signature(self) -> str:
        params = ", ".join(f"{p.name.name}: {p.type.name}" for p in self.params)
        return f"{self.name.name}({params}) -> {self.result.name}"


@dataclass(frozen=True)
class Library:
    """Named types and elementary functions, in definition order."""

    types: tuple[TypeDef, ...] = ()
    functions: tuple[FunctionDef, ...] = ()

    def type(self, name: str) -> TypeDef | None:
        return next((t for t in self.types if t.name == name), None)

    def function(self, name: str) -> FunctionDef | None:
        return next((f for f in self.functions if f.name.name == name), None)

    def merge(self, other: Library) -> Library:
        """This library plus ``other``'s definitions.  A type may be repeated
        with the same sizes; any other repeated name is a
        :class:`~einkern.errors.DuplicateDeclarationError`."""
        types = list(self.types)
        for typedef in other.types:
            known = self.type(typedef.name)
            if known is None:
                types.append(typedef)
            elif known.shape != typedef.shape:
                raise DuplicateDeclarationError(
                    f"type '{typedef.name}' is already defined as {list(known.shape)} "
                    f"at {known.span.location()}",
                    typedef.span,
                    hint="give the type another name",
                )
        functions = list(self.functions)
        for func in other.functions:
            known_func = self.function(func.name.name)
            if known_func is not None:
                raise DuplicateDeclarationError(
                    f"function '{func.name.name}' is already defined at "
                    f"{known_func.name.span.location()}",
                    func.name.span,
                    hint="give the function another name",
                )
            functions.append(func)
        return Library(tuple(types), tuple(functions))


class _LibraryParser(ExprParser):
    def __init__(self, source: Source, base: Library):
        super().__init__(tokenize(source))
        self.base = base
        self.own = Library()
        self.pending: list[tuple[Token, list[tuple[Token, Token]], Token, list[StatementNode]]]
        self.pending = []

    def parse(self) -> Library:
        self.skip_blank()
        while self.peek().kind != EOF:
            word = self.peek()
            if word.kind == NAME and word.text == "type":
                self.advance()
                self._type()
            elif word.kind == NAME and word.text == "function":
                self.advance()
                self._function()
            else:
                raise ParseError(
                    f"expected `type` or `function`, found {word.describe()}",
                    word.span,
                    hint="a library holds type and function definitions",
                )
            self.end_statement("definition")
            self.skip_blank()
        merged = self.base.merge(self.own)
        for item in self.pending:
            merged = merged.merge(Library((), (self._resolve(merged, *item),)))
        return merged

    def _type(self) -> None:
        name = self.expect_name(
            "a type name after 'type'", hint="write e.g. `type MATRIX3x3 = [3, 3]`"
        )
        self.expect_op("=", f"after type '{name.text}'", hint="write e.g. `= [3, 3]`")
        opener = self.expect_op("[", "before the sizes", hint="write e.g. `[3, 3]`, or `[]`")
        sizes: list[int] = []
        while not self.accept_op("]"):
            if sizes and not self.accept_op(","):
                self._unclosed(opener, self.peek())
            token = self.peek()
            if token.kind != INT:
                raise ParseError(
                    f"expected a positive integer size, found {token.describe()}",
                    token.span,
                    hint="element types have fixed sizes, e.g. [3, 3]",
                )
            sizes.append(check_extent_value(self.advance().text, token.span, None))
        typedef = TypeDef(name.text, tuple(sizes), name.span.join(self.tokens[self.pos - 1].span))
        self.own = self.own.merge(Library((typedef,), ()))

    def _function(self) -> None:
        name = self.expect_name("a function name after 'function'")
        opener = self.expect_op(
            "(",
            f"after function '{name.text}'",
            hint="write e.g. `function f(A: MATRIX3x3) -> MATRIX3x3 {`",
        )
        params: list[tuple[Token, Token]] = []
        while not self.accept_op(")"):
            if params and not self.accept_op(","):
                self._unclosed(opener, self.peek())
            pname = self.expect_name("a parameter name", hint="write `NAME: TYPE`")
            self.expect_op(
                ":",
                f"and a type after parameter '{pname.text}'",
                hint=f"write `{pname.text}: MATRIX3x3`",
            )
            params.append((pname, self.expect_name("a type name")))
        self.expect_op("->", "and the result type after the parameters", hint="write `-> TYPE {`")
        result = self.expect_name("the result type after '->'")
        self.skip_blank()
        brace = self.expect_op("{", "to open the function body")
        body: list[StatementNode] = []
        self.skip_blank()
        while not self.accept_op("}"):
            if self.peek().kind == EOF:
                raise ParseError(
                    f"expected '}}' to close the body of function '{name.text}' opened here",
                    brace.span,
                    hint="add '}'",
                )
            body.append(self.parse_statement())
            check_statement(body[-1])
            self.end_statement("statement", closers=("}",))
            self.skip_blank()
        if not body:
            raise ParseError(
                f"function '{name.text}' has an empty body",
                brace.span,
                hint=f"assign the result, e.g. `{RESULT}[i] = ...`",
            )
        self.pending.append((name, params, result, body))

    # ---- checks -------------------------------------------------------------------

    def _resolve(
        self,
        library: Library,
        name: Token,
        params: list[tuple[Token, Token]],
        result: Token,
        body: list[StatementNode],
    ) -> FunctionDef:
        resolved: list[Param] = []
        for pname, ptype in params:
            if pname.text == RESULT:
                raise ParseError(
                    f"'{RESULT}' names the result and cannot be a parameter",
                    pname.span,
                    hint="rename the parameter",
                )
            if any(p.name.name == pname.text for p in resolved):
                raise DuplicateDeclarationError(
                    f"parameter '{pname.text}' is declared twice",
                    pname.span,
                    hint="rename one of them",
                )
            resolved.append(Param(ident(pname), _lookup_type(library, ptype)))
        func = FunctionDef(ident(name), tuple(resolved), _lookup_type(library, result), tuple(body))
        _check_body(func)
        return func


def _lookup_type(library: Library, token: Token) -> TypeDef:
    typedef = library.type(token.text)
    if typedef is None:
        known = ", ".join(t.name for t in library.types) or "none"
        raise UnknownNameError(
            f"unknown type '{token.text}' (known: {known})",
            token.span,
            hint=f"define it first, e.g. `type {token.text} = [3, 3]`",
        )
    return typedef


def _check_body(func: FunctionDef) -> None:
    """Each statement assigns ``out`` (the first with ``=``), reads parameters
    with the right rank, binds every index to a single size and calls only
    elementwise functions."""
    shapes = {p.name.name: p.type.shape for p in func.params}
    shapes[RESULT] = func.result.shape
    for number, statement in enumerate(func.body):
        if statement.target.tensor.name != RESULT:
            raise SemanticError(
                f"function '{func.name.name}' assigns '{statement.target.tensor.name}'; "
                f"a body assigns only '{RESULT}'",
                statement.target.tensor.span,
                hint=f"write the result to {RESULT}[...]",
            )
        if number == 0 and statement.op != "=":
            raise SemanticError(
                f"the first statement of '{func.name.name}' must assign '{RESULT}' with '='",
                statement.span,
                hint=f"write {RESULT}[...] = ... first",
            )
        sizes: dict[str, int] = {}
        for access in (statement.target, *_accesses(statement.rhs, func)):
            shape = shapes.get(access.tensor.name)
            if shape is None:
                raise UnknownNameError(
                    f"'{access.tensor.name}' is not a parameter of '{func.name.name}'",
                    access.tensor.span,
                    hint="use the parameter names, and out for the result",
                )
            if len(shape) != len(access.indices):
                raise RankError(
                    f"'{access.tensor.name}' has rank {len(shape)} but is used "
                    f"with {len(access.indices)} indices",
                    access.span,
                    hint="use one index per dimension ([] for a scalar)",
                )
            for index, size in zip(access.indices, shape, strict=True):
                if sizes.setdefault(index.name, size) != size:
                    raise IndexBindingError(
                        f"index '{index.name}' ranges over {sizes[index.name]} elsewhere in "
                        f"this statement, but over {size} here",
                        index.span,
                        hint="use different index names for dimensions of different size",
                    )


def _accesses(expr: ExprNode, func: FunctionDef) -> list[AccessNode]:
    if isinstance(expr, AccessNode):
        return [expr]
    if isinstance(expr, UnaryNode):
        return _accesses(expr.operand, func)
    if isinstance(expr, BinaryNode):
        return _accesses(expr.left, func) + _accesses(expr.right, func)
    if isinstance(expr, CallNode):
        arity = ARITY.get(expr.func.name)
        if arity is None:
            raise UnknownNameError(
                f"unknown function '{expr.func.name}'",
                expr.func.span,
                hint="known: " + ", ".join(sorted(ARITY)),
            )
        if arity != len(expr.args):
            raise SemanticError(
                f"{expr.func.name} takes {arity} argument{'s' if arity != 1 else ''}, "
                f"got {len(expr.args)}",
                expr.span,
            )
        return [a for arg in expr.args for a in _accesses(arg, func)]
    if isinstance(expr, NameNode):
        raise UnknownNameError(
            f"bare name '{expr.name}' in function '{func.name.name}'",
            expr.span,
            hint=f"read parameters with indices, e.g. {expr.name}[] for a scalar",
        )
    return []


def parse_library(text: str, name: str = "<library>", *, base: Library | None = None) -> Library:
    """Parse a library file; the result holds ``base``'s definitions followed by
    the file's (types of ``base`` may be used in the file)."""
    return _LibraryParser(Source(name, text), base or Library()).parse()


@functools.lru_cache(maxsize=1)
def builtin_library() -> Library:
    """The library shipped with einkern (``einkern/lib/elementary.ein``)."""
    resource = resources.files("einkern").joinpath("lib/elementary.ein")
    return parse_library(resource.read_text(encoding="utf-8"), str(resource))


def load_library(path: str | os.PathLike[str], *, include_builtin: bool = True) -> Library:
    """Read a user library file, on top of the built-in library unless
    ``include_builtin`` is false."""
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"no such library file: {file}")
    base = builtin_library() if include_builtin else None
    return parse_library(file.read_text(encoding="utf-8"), str(file), base=base)
