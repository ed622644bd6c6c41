"""Choosing the best of several timed variants, reproducibly.

Variants whose medians lie within the measured noise *of the fastest one*
(``max(its relative spread, 1 %)``, the spread being the interquartile range
over the median) are *ties*.  Only the fastest variant's spread counts: a
variant measured under load has a wide spread of its own, and letting that
spread widen the tie made a variant three times slower than the fastest a
"tie" that then won on its JSON text.  Ties are broken deterministically: fewer
registers when the timing reports them, then the canonical JSON text of the
configuration, so two quiet runs of the tuner pick the same winner.

Ranking compares times measured at different moments, possibly by different
tuners; whether the winner really beats the default is decided by the
side-by-side measurement of :mod:`.verdict` at the end of each run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

#: Medians closer than this fraction are always ties.
NOISE_FLOOR = 0.01


class Timed(Protocol):
    """A successfully measured variant (an outcome or a database record)."""

    @property
    def config_key(self) -> str: ...  # canonical JSON of the configuration

    @property
    def times(self) -> tuple[float, ...]: ...

    @property
    def resources(self) -> tuple[tuple[str, Any], ...]: ...

    @property
    def median(self) -> float | None: ...


def quantile(ordered: Sequence[float], fraction: float) -> float:
    """Linear-interpolated quantile of sorted values."""
    if not ordered:
        return float("nan")
    place = fraction * (len(ordered) - 1)
    low = int(place)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (place - low)


def relative_spread(times: Sequence[float]) -> float:
    """Interquartile range over the median (0 for fewer than two times)."""
    ordered = sorted(times)
    if len(ordered) < 2:
        return 0.0
    middle = quantile(ordered, 0.5)
    if middle <= 0:
        return 0.0
    return (quantile(ordered, 0.75) - quantile(ordered, 0.25)) / middle


def _registers(item: Timed) -> float:
    value = dict(item.resources).get("registers")
    return float(value) if isinstance(value, (int, float)) else 0.0


def ties(items: Iterable[Timed]) -> list[Timed]:
    """The variants indistinguishable from the fastest one."""
    timed = [(median, item) for item in items if (median := item.median) is not None]
    if not timed:
        return []
    fastest, first = min(timed, key=lambda pair: (pair[0], pair[1].config_key))
    limit = fastest * (1 + max(relative_spread(first.times), NOISE_FLOOR))
    return [item for median, item in timed if median <= limit]


def pick_best(items: Iterable[Timed]) -> Timed | None:
    """The winner among ``items`` (successful variants only), or None."""
    tied = ties(items)
    if not tied:
        return None
    return min(tied, key=lambda item: (_registers(item), item.config_key))
