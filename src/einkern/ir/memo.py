"""Memoisation by object identity, for pure functions of large frozen IR values.

Frozen dataclasses such as :class:`~einkern.ir.task.Task` hash by value, which walks
the whole program on every call; the mapping search asks the same questions of one
task thousands of times.  :func:`by_identity` remembers results per argument
*object* instead.  It keeps a strong reference to each remembered argument, so an
``id`` cannot be reused by another object while its entry lives; the oldest
entries are dropped past ``maxsize``.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def by_identity(maxsize: int = 256) -> Callable[[Callable[[T], R]], Callable[[T], R]]:
    """Decorator: memoise a one-argument pure function by the argument's identity."""

    def decorate(function: Callable[[T], R]) -> Callable[[T], R]:
        entries: OrderedDict[int, tuple[Any, R]] = OrderedDict()

        @functools.wraps(function)
        def memoised(argument: T) -> R:
            key = id(argument)
            entry = entries.get(key)
            if entry is not None and entry[0] is argument:
                entries.move_to_end(key)
                return entry[1]
            result = function(argument)
            entries[key] = (argument, result)
            if len(entries) > maxsize:
                entries.popitem(last=False)
            return result

        memoised.cache_clear = entries.clear  # type: ignore[attr-defined]
        return memoised

    return decorate
