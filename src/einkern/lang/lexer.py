"""Tokenizer shared by the .ein parser, the library parser, the tensor-file
reader and the mapped-function reader.

Logical lines: a newline ends a statement unless it comes inside ``()`` or
``[]``, or right after a binary operator, an assignment or (where the caller
asks for it) a comma; such newlines are dropped, so a statement may be
wrapped over several lines.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ParseError
from ..source import Source, Span

#: Token kinds.
NAME = "name"
INT = "int"
FLOAT = "float"
OP = "op"
NEWLINE = "newline"
EOF = "eof"

# Longest first: two-character operators are tried before one-character ones.
_OPERATORS_2 = ("+=", "-=", "*=", "/=", "==", "->", "**")
_OPERATORS_1 = "+-*/=()[]{},;:<>"
_OPEN = {"(": ")", "[": "]"}
_CONTINUE_AFTER = frozenset({"+", "-", "*", "/", "=", "+=", "-=", "*=", "/=", "**"})
# Names and numbers are ASCII only: every backend (C, CUDA C, isl) must spell them.
_DIGITS = frozenset("0123456789")
_NAME_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_NAME_PART = _NAME_START | _DIGITS


@dataclass(frozen=True)
class Token:
    """One token: its kind (``name``, ``int``, ``float``, ``op``, ``newline``,
    ``eof``), its text and where it is."""

    kind: str
    text: str
    span: Span

    def is_op(self, *texts: str) -> bool:
        return self.kind == OP and self.text in texts

    def describe(self) -> str:
        """How the token reads in an error message."""
        if self.kind == NEWLINE:
            return "end of line"
        if self.kind == EOF:
            return "end of input"
        return f"'{self.text}'"


def _scan_number(text: str, pos: int) -> int:
    """End offset of the number starting at ``pos`` (digits, fraction, exponent)."""
    end = pos
    n = len(text)
    while end < n and text[end] in _DIGITS:
        end += 1
    if end < n and text[end] == ".":
        end += 1
        while end < n and text[end] in _DIGITS:
            end += 1
    if end < n and text[end] in "eE":
        probe = end + 1
        if probe < n and text[probe] in "+-":
            probe += 1
        if probe < n and text[probe] in _DIGITS:
            end = probe
            while end < n and text[end] in _DIGITS:
                end += 1
    return end


def tokenize(
    source: Source,
    *,
    comment: str = "#",
    continue_after_comma: bool = False,
) -> list[Token]:
    """Split ``source`` into tokens; always ends with an ``eof`` token.

    ``comment`` starts a comment that runs to the end of the line (``#`` for
    .ein files, ``//`` for mapped-function files).  C block comments
    ``/* ... */`` are also skipped when ``comment`` is ``//``.
    """
    text = source.text
    tokens: list[Token] = []
    openers: list[Token] = []
    pos = 0
    n = len(text)

    def add(kind: str, start: int, end: int) -> None:
        tokens.append(Token(kind, text[start:end], Span(source, start, end)))

    while pos < n:
        ch = text[pos]
        if ch == "\n":
            last = tokens[-1] if tokens else None
            continues = bool(openers) or (
                last is not None
                and last.kind == OP
                and (last.text in _CONTINUE_AFTER or (continue_after_comma and last.text == ","))
            )
            if not continues and last is not None and last.kind != NEWLINE:
                add(NEWLINE, pos, pos + 1)
            pos += 1
        elif ch in " \t\r\f\v":
            pos += 1
        elif text.startswith(comment, pos):
            end = text.find("\n", pos)
            pos = n if end < 0 else end
        elif comment == "//" and text.startswith("/*", pos):
            end = text.find("*/", pos + 2)
            if end < 0:
                raise ParseError(
                    "unterminated comment",
                    Span(source, pos, pos + 2),
                    hint="close the comment with '*/'",
                )
            pos = end + 2
        elif ch in _NAME_START:
            end = pos + 1
            while end < n and text[end] in _NAME_PART:
                end += 1
            add(NAME, pos, end)
            pos = end
        elif ch in _DIGITS or (ch == "." and pos + 1 < n and text[pos + 1] in _DIGITS):
            end = _scan_number(text, pos)
            word = text[pos:end]
            add(INT if all(c in _DIGITS for c in word) else FLOAT, pos, end)
            pos = end
        elif ch.isalnum():
            raise ParseError(
                f"non-ASCII character {ch!r} (U+{ord(ch):04X}) in a name or number",
                Span(source, pos, pos + 1),
                hint="names are ASCII letters, digits and '_' (every backend must be able "
                "to spell them); numbers are ASCII digits",
            )
        elif text[pos : pos + 2] in _OPERATORS_2:
            add(OP, pos, pos + 2)
            pos += 2
        elif ch in _OPERATORS_1:
            add(OP, pos, pos + 1)
            if ch in _OPEN:
                openers.append(tokens[-1])
            elif ch in ")]" and openers and _OPEN[openers[-1].text] == ch:
                openers.pop()
            pos += 1
        else:
            shown = ch if ch.isprintable() else repr(ch)
            raise ParseError(
                f"unexpected character '{shown}'",
                Span(source, pos, pos + 1),
                hint="remove it; names are letters, digits and '_', "
                "and the operators are + - * / and = += -=",
            )
    if tokens and tokens[-1].kind != NEWLINE:
        add(NEWLINE, n, n)
    tokens.append(Token(EOF, "", Span(source, n, n)))
    return tokens
