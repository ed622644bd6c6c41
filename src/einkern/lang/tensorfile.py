"""Reader of Rivera's tensor file format (Rivera 2014, section 2.2, Figure 2.4)::

    local_grad3                  # function name (optionally `function local_grad3`)
    memory: column               # optional: row | column (default row)
    access: linearize            # optional, accepted and ignored
    pattern: strided             # optional, accepted and ignored
    type: double                 # optional (einkern extension): float | double
    define:
      lx = 10                    # extents
    variables:
      u: (nelt, lx, ly, lz)      # shape in define names or integers
      w: order3                  # shape unknown: extents w_d0, w_d1, w_d2
    operations:
      ur: (e, i, j, k) += D: (k, m) *
          u: (e, i, m, j)        # a line ending in '*' continues

Option lines may appear anywhere; sections may repeat.  ``#`` starts a comment.
"""

from __future__ import annotations

import difflib
import re
from typing import NoReturn

from ..errors import DtypeError, ParseError
from ..semantics import DTYPE_OF_C_TYPE, DTYPES
from ..source import Source
from .ast import AccessNode, BinaryNode, DimRef, ExprNode, Ident, ProgramNode, StatementNode
from .decls import DeclCollector, check_extent_value, check_layout
from .exprparse import ASSIGN_OPS, TokenCursor, ident
from .lexer import EOF, INT, NAME, NEWLINE, Token, tokenize

SECTIONS = ("define", "variables", "operations")
_ACCESS = ("multidimensional", "linearized", "linearize")
_PATTERN = ("contiguous", "strided")
#: Element types by their C or NumPy spelling.
_TYPES: dict[str, str] = {**DTYPE_OF_C_TYPE, **{dtype: dtype for dtype in DTYPES}}
_ORDER = re.compile(r"^order([0-9]+)$")
#: Largest N in ``orderN`` (each dimension becomes an extent of its own).
MAX_ORDER = 64


class TensorFileReader(TokenCursor):
    """Reads one tensor file into a :class:`ProgramNode`."""

    def __init__(self, source: Source):
        super().__init__(tokenize(source))
        self.source = source
        self.decls = DeclCollector(source)
        self.section: str | None = None
        self.options: dict[str, Token] = {}

    def parse(self) -> ProgramNode:
        self.skip_blank()
        self._function_name()
        self.skip_blank()
        while self.peek().kind != EOF:
            self._line()
            self.skip_blank()
        return self.decls.finish()

    # ---- header ----------------------------------------------------------------

    def _function_name(self) -> None:
        first = self.peek()
        if first.kind == NAME and first.text == "function" and self.peek(1).kind == NAME:
            self.advance()
            first = self.peek()
        if first.kind != NAME or self.peek(1).is_op(":", "="):
            raise ParseError(
                f"expected the function name on the first line, found {first.describe()}",
                first.span,
                hint="a tensor file starts with the name of the function, e.g. `local_grad3`",
            )
        self.advance()
        self.decls.set_name(ident(first))
        self.end_statement("function name")

    def _is_option(self) -> bool:
        key, colon, value = self.peek(), self.peek(1), self.peek(2)
        return (
            key.kind == NAME
            and key.text in ("access", "memory", "pattern", "type")
            and colon.is_op(":")
            and value.kind == NAME
            and not _ORDER.match(value.text)
            and self.peek(3).kind in (NEWLINE, EOF)
        )

    def _option(self) -> None:
        key = self.advance()
        self.advance()
        value = self.advance()
        previous = self.options.get(key.text)
        if previous is not None and key.text != "memory" and key.text != "type":
            raise ParseError(
                f"option '{key.text}' given twice (first on line {previous.span.line})",
                key.span,
                hint="keep one",
            )
        self.options[key.text] = key
        if key.text == "memory":
            check_layout(value.text, value.span)
            self.decls.set_default_layout(value.text, value.span)
        elif key.text == "type":
            if value.text not in _TYPES:
                raise DtypeError(
                    f"unknown type '{value.text}'", value.span, hint="write float or double"
                )
            self.decls.set_default_dtype(_TYPES[value.text], value.span)
        else:
            allowed = _ACCESS if key.text == "access" else _PATTERN
            if value.text not in allowed:
                shown = " or ".join(allowed[:2])
                raise ParseError(
                    f"unknown {key.text} '{value.text}'", value.span, hint=f"write {shown}"
                )

    # ---- lines -------------------------------------------------------------------

    def _line(self) -> None:
        first = self.peek()
        if (
            first.kind == NAME
            and first.text in SECTIONS
            and self.peek(1).is_op(":")
            and self.peek(2).kind in (NEWLINE, EOF)
        ):
            self.section = first.text
            self.advance()
            self.advance()
        elif self._is_option():
            self._option()
        elif self.section == "define":
            self._define()
        elif self.section == "variables":
            self._variable()
        elif self.section == "operations":
            self.decls.add_statement(self._operation())
        else:
            hint = "sections are define:, variables: and operations:"
            if first.kind == NAME:
                close = difflib.get_close_matches(first.text, SECTIONS, n=1)
                if close:
                    hint = f"did you mean '{close[0]}:'? " + hint
            raise ParseError(
                f"expected a section header, found {first.describe()}", first.span, hint=hint
            )
        self.end_statement("line")

    def _define(self) -> None:
        name = self.expect_name(
            "a name in the define section", hint="write `name = value`, e.g. `lx = 10`"
        )
        self.expect_op(
            "=", f"after '{name.text}' in the define section", hint=f"write `{name.text} = 10`"
        )
        sign = self.accept_op("-", "+")
        value = self.peek()
        if value.kind in (NEWLINE, EOF):
            raise ParseError(
                f"expected the value of '{name.text}'", value.span, hint=f"write `{name.text} = 10`"
            )
        self.advance()
        text = value.text if sign is None else sign.text + value.text
        span = value.span if sign is None else sign.span.join(value.span)
        number = check_extent_value(text, span, name.text)
        self.decls.add_extent(ident(name), number, name.span.join(value.span))

    def _variable(self) -> None:
        name = self.expect_name(
            "a variable name", hint="write `Name: (size, ...)` or `Name: order3`"
        )
        self.accept_op(":")
        token = self.peek()
        order = _ORDER.match(token.text) if token.kind == NAME else None
        if order is not None:
            self.advance()
            if len(order.group(1)) > 3 or int(order.group(1)) > MAX_ORDER:
                raise ParseError(
                    f"order {order.group(1)} is more than {MAX_ORDER}",
                    token.span,
                    hint=f"a tensor has at most {MAX_ORDER} dimensions here",
                )
            shape: list[DimRef] = []
            for dim in range(int(order.group(1))):
                extent = Ident(f"{name.text}_d{dim}", token.span)
                self.decls.add_extent(extent, None, token.span)
                shape.append(DimRef(extent.name, None, token.span))
            self.decls.add_tensor(ident(name), tuple(shape), None, None, name.span.join(token.span))
            return
        opener = self.expect_op(
            "(",
            f"or orderN after '{name.text}:'",
            hint="write `Name: (size, ...)` or `Name: order3`",
        )
        dims: list[DimRef] = []
        while not self.accept_op(")"):
            if dims and not self.accept_op(","):
                self._unclosed_paren(opener)
            size = self.peek()
            if size.kind == NAME:
                dims.append(DimRef(size.text, None, size.span))
            elif size.kind == INT:
                dims.append(DimRef(None, check_extent_value(size.text, size.span, None), size.span))
            else:
                raise ParseError(
                    f"expected a size (a define name or an integer), found {size.describe()}",
                    size.span,
                    hint="write e.g. `u: (nelt, lx, 10)`",
                )
            self.advance()
        close = self.tokens[self.pos - 1]
        self.decls.add_tensor(ident(name), tuple(dims), None, None, name.span.join(close.span))

    def _unclosed_paren(self, opener: Token) -> NoReturn:
        found = self.peek()
        raise ParseError(
            f"expected ')' to close the list opened here, found "
            f"{found.describe()} at line {found.span.line}, column "
            f"{found.span.column}",
            opener.span,
            hint="separate the entries with ',' and close the list with ')'",
        )

    # ---- operations ----------------------------------------------------------------

    def _access(self) -> AccessNode:
        name = self.expect_name(
            "a variable name", hint="an operation reads like `C: (i, j) += A: (i, k) * B: (k, j)`"
        )
        self.accept_op(":")
        opener = self.expect_op(
            "(", f"and the index list after '{name.text}'", hint=f"write `{name.text}: (i, j)`"
        )
        indices: list[Ident] = []
        while not self.accept_op(")"):
            if indices and not self.accept_op(","):
                self._unclosed_paren(opener)
            index = self.peek()
            if index.kind != NAME:
                raise ParseError(
                    f"expected an index name, found {index.describe()}",
                    index.span,
                    hint="indices are names such as i, j, k",
                )
            indices.append(ident(self.advance()))
        close = self.tokens[self.pos - 1]
        return AccessNode(ident(name), tuple(indices), name.span.join(close.span))

    def _operation(self) -> StatementNode:
        target = self._access()
        op = self.peek()
        if not op.is_op(*ASSIGN_OPS):
            raise ParseError(
                f"expected an assignment (+=, -= or =), found {op.describe()}",
                op.span,
                hint="the sums are written with += or -=",
            )
        self.advance()
        rhs: ExprNode = self._access()
        while self.accept_op("*"):
            factor = self._access()
            rhs = BinaryNode("*", rhs, factor, rhs.span.join(factor.span))
        if not self.at_end_of_line():
            found = self.peek()
            raise ParseError(
                f"expected '*' or the end of the operation, found {found.describe()}",
                found.span,
                hint="an operation is a product of variables: A: (i, k) * B: (k, j)",
            )
        return StatementNode(target, op.text, rhs, target.span.join(rhs.span))


def parse_tensor_file(text: str, name: str = "<string>") -> ProgramNode:
    """Parse a tensor file in Rivera's format (see the module docstring).

    Every ``define`` becomes an extent, every variable a tensor (dtype float64
    unless a ``type:`` line says otherwise, layout from ``memory:``, default
    row), every operation a statement.
    """
    return TensorFileReader(Source(name, text)).parse()
