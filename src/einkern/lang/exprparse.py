"""Token cursor plus the expression and statement grammar of the .ein language.

Used by the .ein program parser and by the library parser (function bodies
are .ein statements)::

    statement := access ('=' | '+=' | '-=') expr
    expr      := term (('+' | '-') term)*
    term      := unary (('*' | '/') unary)*
    unary     := ('+' | '-') unary | primary
    primary   := NUMBER | NAME | access | NAME '(' [expr (',' expr)*] ')' | '(' expr ')'
    access    := NAME '[' [NAME (',' NAME)*] ']'
"""

from __future__ import annotations

from dataclasses import replace
from typing import NoReturn

from ..errors import ParseError
from .ast import (
    AccessNode,
    BinaryNode,
    CallNode,
    ExprNode,
    Ident,
    NameNode,
    NumberNode,
    StatementNode,
    UnaryNode,
)
from .lexer import EOF, FLOAT, INT, NAME, NEWLINE, Token
from .limits import MAX_NESTING

ASSIGN_OPS = ("=", "+=", "-=")


class TokenCursor:
    """A position in a token list with the small helpers every reader needs."""

    def __init__(self, tokens: list[Token]):
        self.tokens = tokens
        self.pos = 0

    def peek(self, ahead: int = 0) -> Token:
        return self.tokens[min(self.pos + ahead, len(self.tokens) - 1)]

    def advance(self) -> Token:
        token = self.peek()
        if token.kind != EOF:
            self.pos += 1
        return token

    def at_end_of_line(self) -> bool:
        return self.peek().kind in (NEWLINE, EOF) or self.peek().is_op(";")

    def accept_op(self, *texts: str) -> Token | None:
        if self.peek().is_op(*texts):
            return self.advance()
        return None

    def expect_op(self, text: str, what: str, hint: str | None = None) -> Token:
        token = self.peek()
        if not token.is_op(text):
            raise ParseError(
                f"expected '{text}' {what}, found {token.describe()}", token.span, hint=hint
            )
        return self.advance()

    def expect_name(self, what: str, hint: str | None = None) -> Token:
        token = self.peek()
        if token.kind != NAME:
            raise ParseError(f"expected {what}, found {token.describe()}", token.span, hint=hint)
        return self.advance()

    def end_statement(self, what: str = "statement", closers: tuple[str, ...] = ()) -> None:
        """Consume the newline or ';' that ends a statement (or stop before a closer)."""
        token = self.peek()
        if token.kind in (NEWLINE, EOF) or token.is_op(*closers):
            if token.kind == NEWLINE:
                self.advance()
            return
        if token.is_op(";"):
            self.advance()
            return
        hint = "put one per line, or separate them with ';'"
        if token.kind in (NAME, INT, FLOAT) or token.is_op("("):
            hint = "did you forget an operator such as '*'? " + hint
        raise ParseError(f"unexpected {token.describe()} after the {what}", token.span, hint=hint)

    def skip_blank(self) -> None:
        while self.peek().kind == NEWLINE or self.peek().is_op(";"):
            self.advance()


def ident(token: Token) -> Ident:
    return Ident(token.text, token.span)


class ExprParser(TokenCursor):
    """Expressions, accesses and statements over a token list.

    Parentheses, unary signs and calls nest at most
    :data:`~einkern.lang.limits.MAX_NESTING` deep (the parser is recursive)."""

    nesting = 0

    def _enter(self, token: Token) -> None:
        """One level deeper at ``token``; a located error past the limit."""
        self.nesting += 1
        if self.nesting > MAX_NESTING:
            raise ParseError(
                f"expression nested too deeply (more than {MAX_NESTING} levels of "
                "parentheses, signs and calls)",
                token.span,
                hint="split the expression into several statements",
            )

    # ---- accesses ------------------------------------------------------------

    def parse_index_list(self, opener: Token, what: str = "index") -> tuple[Ident, ...]:
        """Names up to the ``]`` matching ``opener`` (already consumed)."""
        indices: list[Ident] = []
        if self.accept_op("]"):
            return ()
        while True:
            token = self.peek()
            if token.kind == INT:
                raise ParseError(
                    f"constant {what} {token.text}: indices must be names",
                    token.span,
                    hint="use an index name such as i and let it range over the extent",
                )
            if token.kind != NAME:
                if token.kind in (NEWLINE, EOF) or token.is_op("=", "+=", "-=", ";"):
                    self._unclosed(opener, token)
                raise ParseError(
                    f"expected an {what} name, found {token.describe()}",
                    token.span,
                    hint="indices are names separated by commas",
                )
            indices.append(ident(self.advance()))
            if self.accept_op("]"):
                return tuple(indices)
            if not self.accept_op(","):
                self._unclosed(opener, self.peek())

    def _unclosed(self, opener: Token, found: Token) -> NoReturn:
        close = "]" if opener.text == "[" else ")"
        kind = "index list" if opener.text == "[" else "parenthesis"
        line, col = found.span.source.line_col(found.span.start)
        raise ParseError(
            f"expected '{close}' to close the {kind} opened here "
            f"(found {found.describe()} at line {line}, column {col})",
            opener.span,
            hint=f"add '{close}'" + (", and separate indices with ','" if close == "]" else ""),
        )

    def parse_access(self) -> AccessNode:
        name = self.expect_name("a tensor name")
        opener = self.expect_op(
            "[", f"after '{name.text}'", hint=f"a tensor access reads like {name.text}[i, j]"
        )
        indices = self.parse_index_list(opener)
        return AccessNode(ident(name), indices, name.span.join(self.tokens[self.pos - 1].span))

    # ---- expressions ---------------------------------------------------------

    def parse_expr(self, after: Token | None = None) -> ExprNode:
        left = self.parse_term(after)
        while (op := self.accept_op("+", "-")) is not None:
            right = self.parse_term(op)
            left = BinaryNode(op.text, left, right, left.span.join(right.span))
        return left

    def parse_term(self, after: Token | None) -> ExprNode:
        left = self.parse_unary(after)
        while True:
            if self.peek().is_op("**"):
                raise ParseError(
                    "there is no power operator '**'",
                    self.peek().span,
                    hint="use pow(a, b), or write the product out",
                )
            op = self.accept_op("*", "/")
            if op is None:
                break
            right = self.parse_unary(op)
            left = BinaryNode(op.text, left, right, left.span.join(right.span))
        return left

    def parse_unary(self, after: Token | None) -> ExprNode:
        op = self.accept_op("+", "-")
        if op is not None:
            self._enter(op)
            operand = self.parse_unary(op)
            self.nesting -= 1
            return UnaryNode(op.text, operand, op.span.join(operand.span))
        return self.parse_primary(after)

    def parse_primary(self, after: Token | None) -> ExprNode:
        token = self.peek()
        if token.kind in (INT, FLOAT):
            self.advance()
            return NumberNode(float(token.text), token.span)  # past 1.8e308: infinity
        if token.kind == NAME:
            self.advance()
            if self.peek().is_op("["):
                self.pos -= 1
                return self.parse_access()
            if self.peek().is_op("("):
                return self.parse_call(token)
            return NameNode(token.text, token.span)
        if token.is_op("("):
            self.advance()
            self._enter(token)
            inner = self.parse_expr(token)
            self.nesting -= 1
            close = self.accept_op(")")
            if close is None:
                self._unclosed(token, self.peek())
            return replace(inner, span=token.span.join(close.span))
        self._missing_expression(after, token)

    def parse_call(self, name: Token) -> CallNode:
        opener = self.expect_op("(", "after the function name")
        self._enter(name)
        args: list[ExprNode] = []
        if not self.accept_op(")"):
            while True:
                args.append(self.parse_expr(opener if not args else self.tokens[self.pos - 1]))
                if self.accept_op(")"):
                    break
                if not self.accept_op(","):
                    self._unclosed(opener, self.peek())
        self.nesting -= 1
        end = self.tokens[self.pos - 1].span
        return CallNode(ident(name), tuple(args), name.span.join(end))

    def _missing_expression(self, after: Token | None, found: Token) -> NoReturn:
        if found.is_op("**") or (found.is_op("*") and after is not None and after.is_op("*")):
            hint = "there is no power operator: use pow(a, b)"
        else:
            hint = (
                "an expression is a number, a scalar name, a tensor access like A[i, j], "
                "a call like sqrt(x) or an expression in parentheses"
            )
        where = "" if after is None else f" after '{after.text}'"
        raise ParseError(
            f"expected an expression{where}, found {found.describe()}", found.span, hint=hint
        )

    # ---- statements ----------------------------------------------------------

    def parse_statement(self) -> StatementNode:
        target = self.parse_access()
        op = self.peek()
        if op.is_op("*=", "/=", "=="):
            raise ParseError(
                f"unknown assignment operator '{op.text}'", op.span, hint="use =, += or -="
            )
        if not op.is_op(*ASSIGN_OPS):
            raise ParseError(
                f"expected an assignment (=, += or -=) after {_show(target)}, "
                f"found {op.describe()}",
                op.span,
                hint="use =, += or -=",
            )
        self.advance()
        rhs = self.parse_expr(op)
        return StatementNode(target, op.text, rhs, target.span.join(rhs.span))


def _show(access: AccessNode) -> str:
    return f"'{access.tensor.name}[{', '.join(i.name for i in access.indices)}]'"
