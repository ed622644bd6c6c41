"""The subscripts of :func:`einkern.einsum`: NumPy's einsum grammar (terms,
``->``, ellipses, implicit output), checked with located errors, and the size of
each index letter across the operands (size-1 broadcasting)."""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import Any

from .errors import ArgumentError, ParseError
from .lang.limits import MAX_EXPRESSION_DEPTH
from .source import Source, Span

_LETTERS = frozenset(string.ascii_letters)
#: Most operands in one einsum (each is a factor of one product when
#: ``optimize=False``: the expression-depth limit every front end enforces).
MAX_OPERANDS = MAX_EXPRESSION_DEPTH


def _parse_spec(spec: str, count: int, ranks: Sequence[int] | None = None) -> tuple[list[str], str]:
    """The operands' subscripts and the output's, checked (located errors), with
    every ellipsis replaced by letters the subscripts do not use: as many as the
    dimensions it covers in each operand of rank ``ranks[i]`` (none when
    ``ranks`` is None), aligned from the right.  An implicit output is made
    explicit: the ellipsis' letters, then the letters used once, sorted."""
    source = Source("<einsum>", spec)

    def error(message: str, position: int, width: int = 1, hint: str | None = None):
        return ParseError(message, Span(source, position, position + width), hint=hint)

    arrows = _check_characters(spec, error)
    if count > MAX_OPERANDS:
        raise ArgumentError(
            f"einsum takes at most {MAX_OPERANDS} operands, got {count}",
            hint="contract the operands in several calls",
        )
    if count == 0:
        raise ArgumentError("einsum needs at least one operand")
    text = spec.replace(" ", "")
    lhs, out = text.split("->", 1) if arrows else (text, None)
    terms = lhs.split(",")
    if len(terms) != count:
        raise ArgumentError(
            f"subscripts {spec!r} name {len(terms)} operand{'s' if len(terms) != 1 else ''} "
            f"but {count} {'arrays were' if count != 1 else 'array was'} given"
        )
    if out is not None and "," in out:
        raise error(
            "the output of einsum subscripts is one list of indices, without ','",
            arrows[0] + 2 + spec[arrows[0] + 2 :].index(","),
            hint="separate operands with ',' before '->' only",
        )
    for match in re.finditer(r"[^,>-]+", spec):
        part = match.group()
        if part.count("...") > 1:
            raise error(
                "more than one ellipsis '...' in one operand's subscripts",
                match.start() + part.index("...", part.index("...") + 3),
                3,
            )
    terms, out = _expand_ellipses(spec, terms, out, ranks)
    used = "".join(terms)
    for char in out:
        if char not in used:
            raise ArgumentError(f"output index {char!r} appears in no operand of {spec!r}")
        if out.count(char) > 1:
            raise ArgumentError(f"output index {char!r} repeated in {spec!r}")
    return terms, out


def _check_characters(spec: str, error: Any) -> list[int]:
    """Positions of the arrows ``->``; located errors for anything but ASCII letters,
    ``,``, one ``->``, ``...`` and spaces."""
    for position, char in enumerate(spec):
        if not (char in _LETTERS or char in ",->. "):
            raise error(
                f"unexpected character {char!r} in einsum subscripts",
                position,
                hint="use ASCII letters for indices, ',' between operands, '...' for "
                "broadcast dimensions and '->' before the output",
            )
    arrows = [i for i in range(len(spec)) if spec.startswith("->", i)]
    for position, char in enumerate(spec):
        if (char == "-" and position not in arrows) or (char == ">" and position - 1 not in arrows):
            raise error(
                f"stray {char!r} in einsum subscripts",
                position,
                hint="the output is introduced by '->'",
            )
    if len(arrows) > 1:
        raise error(
            "more than one '->' in einsum subscripts",
            arrows[1],
            2,
            hint="write operands, then '->' and the output once, e.g. 'ij,jk->ik'",
        )
    position = 0
    while position < len(spec):
        if spec[position] == ".":
            run = len(spec[position:]) - len(spec[position:].lstrip("."))
            if run != 3:
                raise error(
                    "'.' outside an ellipsis '...'",
                    position,
                    run,
                    hint="an ellipsis is exactly three dots",
                )
            position += run
        position += 1
    return arrows


def _expand_ellipses(
    spec: str, terms: list[str], out: str | None, ranks: Sequence[int] | None
) -> tuple[list[str], str]:
    """Terms and output with each ``...`` replaced by unused letters (see
    :func:`_parse_spec`)."""
    covered = []
    for position, term in enumerate(terms):
        named = len(term.replace("...", ""))
        rank = named if ranks is None else ranks[position]
        dots = "..." in term
        if rank < named or (rank != named and not dots):
            raise ArgumentError(
                f"operand {position} has {rank} dimension{'s' if rank != 1 else ''} "
                f"but its subscripts {term!r} name {named}",
                hint="give one index per dimension, or '...' for the leading ones",
            )
        covered.append(rank - named if dots else 0)
    width = max(covered)
    unused = [c for c in string.ascii_letters if c not in spec]
    if width > len(unused):
        raise ArgumentError(
            f"the ellipsis covers {width} dimensions, but only {len(unused)} "
            "letters are left unused by the subscripts to name them"
        )
    ellipsis = "".join(unused[:width])
    terms = [t.replace("...", ellipsis[width - n :]) for t, n in zip(terms, covered, strict=True)]
    if out is None:
        letters = "".join(terms)
        once = sorted(c for c in set(letters) if letters.count(c) == 1 and c not in ellipsis)
        return terms, ellipsis + "".join(once)
    return terms, out.replace("...", ellipsis)


def _sizes(
    terms: Sequence[str], shapes: Sequence[tuple[int, ...]], written: str | None = None
) -> dict[str, int]:
    """Each index's size; a dimension of size 1 broadcasts against any size.  Letters
    not in ``written`` (the subscripts as given) stand for an ellipsis' dimensions."""
    sizes: dict[str, int] = {}
    for position, (term, shape) in enumerate(zip(terms, shapes, strict=True)):
        own: dict[str, int] = {}
        for char, size in zip(term, shape, strict=True):
            if own.setdefault(char, size) != size:
                raise ArgumentError(
                    f"operand {position} repeats index {char!r} over dimensions of sizes "
                    f"{own[char]} and {size}",
                    hint="a repeated index takes a diagonal",
                )
            known = sizes.setdefault(char, size)
            if known != size and 1 not in (known, size):
                what = (
                    f"index {char!r}"
                    if written is None or char in written
                    else "a dimension that '...' covers"
                )
                raise ArgumentError(
                    f"{what} has size {known} in one operand and {size} in another",
                    hint="sizes must agree, or be 1 to broadcast",
                )
            sizes[char] = max(known, size)
    return sizes
