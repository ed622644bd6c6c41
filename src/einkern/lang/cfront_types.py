"""Facts the C front end's readers share: C integer and floating types, the C
spellings of the language's functions, integer literals, and the interface the
expression reader needs from the function reader (:class:`Reading`)."""

from __future__ import annotations

from typing import Any, NoReturn, Protocol

from pycparser import c_ast

from ..semantics import DTYPE_OF_C_TYPE, FUNCTIONS, DType
from . import cfront_nodes as N

_INT_TYPES = frozenset(
    {"int", "long", "unsigned", "short", "int64_t", "int32_t", "size_t", "ptrdiff_t", "signed"}
)
#: C spellings of the language's functions.
C_FUNCTIONS: dict[str, str] = {
    **{name: name for name in FUNCTIONS},
    **{f"{name}f": name for name in FUNCTIONS if name not in ("abs", "max", "min")},
    "fabs": "abs",
    "fabsf": "abs",
    "fmax": "max",
    "fmaxf": "max",
    "fmin": "min",
    "fminf": "min",
}


#: Words isl's parser reserves: no parameter or iterator may be named so.
ISL_RESERVED = frozenset(
    "and or not exists implies rat infty NaN min max floor ceil floord ceild mod true false".split()
)


class Reading(Protocol):
    """What the expression reader asks of the function being read."""

    sizes: list[str]
    arrays: dict[str, N.AArray]
    scalars: dict[str, N.AScalar]
    defines: dict[str, int]

    def fail(self, node: Any, message: str, hint: str | None = None) -> NoReturn: ...

    def known(self, name: str) -> bool: ...


def int_type(node: Any) -> bool:
    """True for a declaration of an integer type (a size parameter or an iterator)."""
    return (
        isinstance(node, c_ast.TypeDecl)
        and isinstance(node.type, c_ast.IdentifierType)
        and all(word in _INT_TYPES for word in node.type.names)
    )


def float_dtype(node: Any) -> DType | None:
    """The dtype of a ``float``/``double`` declaration, else None."""
    if isinstance(node, c_ast.TypeDecl) and isinstance(node.type, c_ast.IdentifierType):
        names = [n for n in node.type.names if n != "const"]
        if len(names) == 1 and names[0] in DTYPE_OF_C_TYPE:
            return DTYPE_OF_C_TYPE[names[0]]
    return None


class LiteralTooLarge(ValueError):
    """An integer literal far beyond any size einkern can index (2**63 - 1)."""


def int_literal(text: str) -> int:
    """A C integer literal's value (decimal, hex, octal; suffixes dropped);
    :class:`LiteralTooLarge` past 40 characters (2**63 has 19 digits), before
    Python's own limit on converting long digit strings is reached."""
    cleaned = text.rstrip("uUlL")
    if len(cleaned) > 40:
        raise LiteralTooLarge(f"integer constant of {len(cleaned)} characters")
    if cleaned.startswith("0") and cleaned[1:].isdigit():
        return int(cleaned, 8)
    return int(cleaned, 0)


def known_function(name: str) -> str | None:
    """The language's function a C function name spells, else None."""
    found = C_FUNCTIONS.get(name)
    return found if found in FUNCTIONS else None
