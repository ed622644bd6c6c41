"""Typed errors.  Every error a user can cause is an :class:`EinkernError`.

An error that comes from program text carries a :class:`~einkern.source.Span`;
``str(error)`` then reads::

    prog.ein:3:10: error: unknown tensor 'X'
       3 | C[i,j] = X[i,k] * B[k,j]
         |          ^
    hint: declare it first, e.g. `tensor X[n, n]`

The CLI prints that text on stderr and exits with code 2.
"""

from __future__ import annotations

from .source import Span


class EinkernError(Exception):
    """Base class of all errors einkern raises on purpose."""

    kind = "error"

    def __init__(self, message: str, span: Span | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.span = span
        self.hint = hint

    def __str__(self) -> str:
        parts = []
        where = f"{self.span.location()}: " if self.span is not None else ""
        parts.append(f"{where}{self.kind}: {self.message}")
        if self.span is not None:
            parts.append(self.span.excerpt())
        if self.hint:
            parts.append(f"hint: {self.hint}")
        return "\n".join(parts)


class ParseError(EinkernError):
    """Malformed program text (any supported input format)."""

    kind = "syntax error"


class UnknownNameError(EinkernError):
    """A tensor, scalar, extent, type or function that was never declared."""


class DuplicateDeclarationError(EinkernError):
    """The same name declared twice."""


class RankError(EinkernError):
    """A tensor used with a number of indices other than its rank."""


class IndexBindingError(EinkernError):
    """An index bound to extents of different sizes."""


class ExtentError(EinkernError):
    """An extent missing, or not a positive integer."""


class DtypeError(EinkernError):
    """An unsupported or mismatched element type."""


class LayoutError(EinkernError):
    """An unknown layout, or an array whose strides do not match the declared layout."""


class AliasingError(EinkernError):
    """An output written at one index and read at another in the same statement."""


class SemanticError(EinkernError):
    """Any other program that parses but has no meaning."""


class ArgumentError(EinkernError):
    """Arrays or scalars passed at call time that do not match the program."""


class ArgumentDtypeError(DtypeError, ArgumentError):
    """A call-time array whose element type is not the declared one."""


class ArgumentLayoutError(LayoutError, ArgumentError):
    """A call-time array whose strides do not match the declared layout."""


class BackendError(EinkernError):
    """A backend cannot be used here (no compiler, no GPU, no NVRTC)."""


class AllocationError(EinkernError):
    """Memory that could not be had (the message says how many bytes were asked for)."""


class RegistrationError(EinkernError):
    """A name registered twice in one registry (backends, front ends, search
    strategies, benchmark suites and peers)."""


class CompilationError(EinkernError):
    """Generated code failed to compile (a bug in einkern: please report it)."""


class UsageError(EinkernError):
    """Bad command-line usage."""

    kind = "usage error"
