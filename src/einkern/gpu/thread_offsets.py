"""Index expressions of a block's threads that differ by constants.

A fully unrolled kernel computes many thread-dependent indices: the elements a
thread copies in each round, the accumulator elements it adds into a shared
tile.  Written out, each is its own division and remainder chain of the thread
index; ptxas computes them once and keeps them all live (a product-family
kernel held every term's indices for the whole kernel: 255 registers and
hundreds of bytes of spills).  Where two indices differ by the same constant on
every thread of the block, the second is the first plus that constant: one
register and an immediate offset.  This module decides that by evaluating the
expressions for every thread (NumPy), so it holds for any index structure the
generator produces, and says no when it does not hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from . import kir


def thread_values(e: kir.Expr, threads: int, values: Mapping[str, int]) -> np.ndarray:
    """The integer value of ``e`` on threads ``0 .. threads-1``: C's truncating
    ``/`` and ``%``; every variable must be in ``values`` (KeyError otherwise)."""
    if isinstance(e, kir.Int):
        return np.full(threads, e.value, dtype=np.int64)
    if isinstance(e, kir.ThreadIdx):
        return np.arange(threads, dtype=np.int64)
    if isinstance(e, kir.Var):
        return np.full(threads, values[e.name], dtype=np.int64)
    if isinstance(e, kir.Neg):
        return -thread_values(e.operand, threads, values)
    if isinstance(e, kir.Op):
        a = thread_values(e.left, threads, values)
        b = thread_values(e.right, threads, values)
        if e.op in ("/", "%"):
            quotient = np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))
            return quotient if e.op == "/" else a - b * quotient
        operations = {
            "+": np.add,
            "-": np.subtract,
            "*": np.multiply,
            "min": np.minimum,
            "max": np.maximum,
        }
        if e.op in operations:
            return operations[e.op](a, b)
    raise ValueError(f"not a thread index expression: {e!r}")


def constant_offset(e: kir.Expr, base: kir.Expr, threads: int, names: Iterable[str]) -> int | None:
    """``c`` when ``e == base + c`` on every thread, whatever the block's values
    of ``names`` (block origins and bases; checked at two assignments of them),
    else None."""
    names = tuple(names)
    found = None
    for values in (dict.fromkeys(names, 0), {n: 7919 * (i + 1) for i, n in enumerate(names)}):
        try:
            difference = thread_values(e, threads, values) - thread_values(base, threads, values)
        except (KeyError, ValueError):
            return None
        first = int(difference[0])
        if not bool(np.all(difference == first)) or found not in (None, first):
            return None
        found = first
    return found
