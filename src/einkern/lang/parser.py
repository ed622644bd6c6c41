"""Parser of the native ``.ein`` format (see docs/language.md).

A program is a sequence of logical lines; each is a declaration (``program``,
``dims``/``dim``, ``dtype``, ``layout``, ``tensor``, ``scalar``/``param``) or a
statement ``ACCESS (= | += | -=) EXPR``.  Keywords are keywords only at the
start of a line, and a line that starts with ``NAME [`` is always a statement.
"""

from __future__ import annotations

import difflib

from ..errors import DtypeError, ExtentError, LayoutError, ParseError
from ..semantics import DTYPES, LAYOUTS
from ..source import Source
from .ast import DimRef, ProgramNode
from .decls import DeclCollector, check_dtype, check_extent_value, check_layout, looks_like_dtype
from .exprparse import ASSIGN_OPS, ExprParser, ident
from .lexer import EOF, FLOAT, INT, NAME, Token, tokenize

KEYWORDS = ("program", "dims", "dim", "dtype", "layout", "tensor", "scalar", "param")


class EinParser(ExprParser):
    """Reads one .ein program into a :class:`ProgramNode`."""

    def __init__(self, source: Source):
        super().__init__(tokenize(source))
        self.source = source
        self.decls = DeclCollector(source)

    def parse(self) -> ProgramNode:
        self.skip_blank()
        while self.peek().kind != EOF:
            first = self.peek()
            if first.kind == NAME and self.peek(1).is_op("["):
                self.decls.add_statement(self.parse_statement())
                self.end_statement("statement")
            elif first.kind == NAME and first.text in KEYWORDS:
                self.advance()
                getattr(self, "_decl_" + first.text)(first)
                self.end_statement(f"'{first.text}' declaration")
            else:
                self._bad_line_start(first)
            self.skip_blank()
        return self.decls.finish()

    def _bad_line_start(self, first: Token) -> None:
        after = self.peek(1)
        if first.kind == NAME and after.is_op(*ASSIGN_OPS, "*=", "/="):
            raise ParseError(
                f"the target of a statement must be a tensor access, not the bare name "
                f"'{first.text}'",
                first.span,
                hint=f"write {first.text}[...] with its indices "
                f"(a rank-0 tensor is written {first.text}[]); scalars cannot be assigned",
            )
        if first.kind == NAME:
            close = difflib.get_close_matches(first.text, KEYWORDS, n=1)
            if close:
                raise ParseError(
                    f"unknown declaration '{first.text}'",
                    first.span,
                    hint=f"did you mean '{close[0]}'?",
                )
        if first.is_op("+", "-", "*", "/"):
            raise ParseError(
                f"a line cannot start with '{first.text}'",
                first.span,
                hint="to continue a statement on the next line, end the previous line with "
                "the operator (or wrap the expression in parentheses)",
            )
        raise ParseError(
            f"expected a declaration or a statement, found {first.describe()}",
            first.span,
            hint="declarations start with program, dims, dtype, layout, tensor or scalar; "
            "statements read like C[i, j] = A[i, k] * B[k, j]",
        )

    # ---- declarations ---------------------------------------------------------

    def _decl_program(self, keyword: Token) -> None:
        name = self.expect_name(
            "the program name after 'program'", hint="write e.g. `program matmul`"
        )
        self.decls.set_name(ident(name))

    def _decl_dims(self, keyword: Token) -> None:
        while True:
            name = self.expect_name("an extent name", hint="write e.g. `dims n = 64, m`")
            value: int | None = None
            end = name
            if self.accept_op("="):
                sign = self.accept_op("-", "+")
                token = self.peek()
                if token.kind not in (INT, FLOAT, NAME):
                    raise ParseError(
                        f"expected the value of extent '{name.text}' after '=', "
                        f"found {token.describe()}",
                        token.span,
                        hint="write e.g. `dims n = 64`",
                    )
                self.advance()
                span = token.span if sign is None else sign.span.join(token.span)
                text = token.text if sign is None or sign.text == "+" else "-" + token.text
                value = check_extent_value(text, span, name.text)
                end = token
            self.decls.add_extent(ident(name), value, name.span.join(end.span))
            if not self.accept_op(","):
                return

    _decl_dim = _decl_dims

    def _decl_dtype(self, keyword: Token) -> None:
        word = self.expect_name("a dtype after 'dtype'", hint="supported: " + ", ".join(DTYPES))
        self.decls.set_default_dtype(word.text, word.span)

    def _decl_layout(self, keyword: Token) -> None:
        word = self.expect_name("a layout after 'layout'", hint="write row or column")
        self.decls.set_default_layout(word.text, word.span)

    def _decl_tensor(self, keyword: Token) -> None:
        entries: list[tuple[Token, tuple[DimRef, ...], Token]] = []
        while True:
            name = self.expect_name("a tensor name", hint="write e.g. `tensor A[n, m]`")
            opener = self.peek()
            if not opener.is_op("["):
                raise ParseError(
                    f"expected '[' and the shape after tensor '{name.text}', found "
                    f"{opener.describe()}",
                    opener.span,
                    hint=f"write {name.text}[n, m] (a rank-0 tensor is {name.text}[])",
                )
            self.advance()
            shape = self._shape(opener)
            entries.append((name, shape, self.tokens[self.pos - 1]))
            if not self.accept_op(","):
                break
        dtype, layout = self._tensor_attributes()
        for name, shape, close in entries:
            self.decls.add_tensor(ident(name), shape, dtype, layout, name.span.join(close.span))

    def _shape(self, opener: Token) -> tuple[DimRef, ...]:
        dims: list[DimRef] = []
        if self.accept_op("]"):
            return ()
        while True:
            token = self.peek()
            if token.kind == NAME:
                dims.append(DimRef(token.text, None, token.span))
            elif token.kind == INT:
                value = check_extent_value(token.text, token.span, None)
                dims.append(DimRef(None, value, token.span))
            elif token.kind == FLOAT or token.is_op("-"):
                raise ExtentError(
                    f"a dimension must be a positive integer or an extent name, "
                    f"found {token.describe()}",
                    token.span,
                    hint="write e.g. [n, 3]",
                )
            else:
                self._unclosed(opener, token)
            self.advance()
            if self.accept_op("]"):
                return tuple(dims)
            if not self.accept_op(","):
                self._unclosed(opener, self.peek())

    def _tensor_attributes(self) -> tuple[str | None, str | None]:
        dtype: Token | None = None
        layout: Token | None = None
        while self.peek().kind == NAME:
            word = self.advance()
            if word.text in DTYPES or looks_like_dtype(word.text):
                value = check_dtype(word.text, word.span)
                if dtype is not None and dtype.text != value:
                    raise DtypeError(
                        f"two dtypes given: {dtype.text} and {word.text}",
                        word.span,
                        hint="keep one",
                    )
                dtype = word
            elif word.text in LAYOUTS or _looks_like_layout(word.text):
                check_layout(word.text, word.span)
                if layout is not None and layout.text != word.text:
                    raise LayoutError(
                        f"two layouts given: {layout.text} and {word.text}",
                        word.span,
                        hint="keep one",
                    )
                layout = word
            else:
                raise ParseError(
                    f"unknown tensor attribute '{word.text}'",
                    word.span,
                    hint="after the shapes come a dtype ("
                    + ", ".join(DTYPES)
                    + ") and/or a layout "
                    "(row, column)",
                )
        if self.peek().is_op(","):
            raise ParseError(
                "dtype and layout go at the end of the line",
                self.peek().span,
                hint="they apply to every tensor on the line; declare tensors "
                "with other attributes on a line of their own",
            )
        return (None if dtype is None else dtype.text, None if layout is None else layout.text)

    def _decl_scalar(self, keyword: Token) -> None:
        entries: list[tuple[Token, float | None, Token]] = []
        while True:
            name = self.expect_name("a scalar name", hint="write e.g. `scalar alpha = 1.5`")
            value: float | None = None
            end = name
            if self.accept_op("="):
                sign = self.accept_op("-", "+")
                token = self.peek()
                if token.kind not in (INT, FLOAT):
                    raise ParseError(
                        f"expected a number as the default of scalar '{name.text}', found "
                        f"{token.describe()}",
                        token.span,
                        hint="a default is a number literal such as 1.5 or -2",
                    )
                self.advance()
                value = float(token.text) * (-1.0 if sign is not None and sign.text == "-" else 1.0)
                end = token
            entries.append((name, value, end))
            if not self.accept_op(","):
                break
        dtype: str | None = None
        if self.peek().kind == NAME:
            word = self.advance()
            if word.text in LAYOUTS:
                raise LayoutError(
                    f"a scalar has no layout ('{word.text}')", word.span, hint="remove it"
                )
            dtype = check_dtype(word.text, word.span)
        for name, value, end in entries:
            self.decls.add_scalar(ident(name), dtype, value, name.span.join(end.span))

    _decl_param = _decl_scalar


def _looks_like_layout(word: str) -> bool:
    lowered = word.lower()
    return (
        "row" in lowered
        or "col" in lowered
        or "major" in lowered
        or bool(difflib.get_close_matches(lowered, LAYOUTS, n=1, cutoff=0.7))
    )


def parse_program(text: str, name: str = "<string>") -> ProgramNode:
    """Parse a program in the native .ein format.

    ``name`` names the source in error messages; the program's own name is
    given by a ``program NAME`` line, else the file stem of ``name``, else
    ``"program"``.  Raises :class:`~einkern.errors.ParseError` and the other
    declaration errors documented in docs/language.md.
    """
    return EinParser(Source(name, text)).parse()
