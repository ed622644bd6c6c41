"""Source text and positions inside it, for error messages with caret excerpts."""

from __future__ import annotations

from dataclasses import dataclass, field

#: Longest source line an excerpt shows whole; longer ones show a window.
_WIDEST = 120


@dataclass(frozen=True)
class Source:
    """A named program text (a file, or ``<string>`` for text given in Python)."""

    name: str
    text: str = field(repr=False)

    def line_col(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of a character offset."""
        offset = max(0, min(offset, len(self.text)))
        line = self.text.count("\n", 0, offset) + 1
        start = self.text.rfind("\n", 0, offset) + 1
        return line, offset - start + 1

    def line_text(self, line: int) -> str:
        lines = self.text.split("\n")
        return lines[line - 1] if 1 <= line <= len(lines) else ""


@dataclass(frozen=True)
class Span:
    """A half-open character range ``[start, end)`` of a :class:`Source`."""

    source: Source = field(repr=False, compare=False)
    start: int
    end: int

    @property
    def line(self) -> int:
        return self.source.line_col(self.start)[0]

    @property
    def column(self) -> int:
        return self.source.line_col(self.start)[1]

    def location(self) -> str:
        """``file:line:column``."""
        line, col = self.source.line_col(self.start)
        return f"{self.source.name}:{line}:{col}"

    def excerpt(self) -> str:
        """The source line with a caret (``^~~~``) under the span."""
        line, col = self.source.line_col(self.start)
        text = self.source.line_text(line)
        end_line, end_col = self.source.line_col(max(self.start, self.end - 1))
        width = (end_col - col + 1) if end_line == line else len(text) - col + 1
        width = max(1, width)
        if len(text) > _WIDEST:  # a window around the caret, marked with "..."
            first = max(0, min(col - 1 - _WIDEST // 4, len(text) - _WIDEST))
            text = (
                ("..." if first else "")
                + text[first : first + _WIDEST]
                + ("..." if first + _WIDEST < len(text) else "")
            )
            col = col - first + (3 if first else 0)
            width = min(width, _WIDEST - (col - 1) + 3)
        gutter = f"{line:>4} | "
        return (
            f"{gutter}{text}\n"
            + " " * (len(gutter) - 2)
            + "| "
            + " " * (col - 1)
            + "^"
            + "~" * (width - 1)
        )

    def join(self, other: Span) -> Span:
        return Span(self.source, min(self.start, other.start), max(self.end, other.end))
