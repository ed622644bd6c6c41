"""Same-run verdicts: does a tuning run's winner really beat the default?

A search measures each variant once, under whatever load the machine had at
that moment, so the fastest recorded time may be luck and the default's time
(measured first) may be inflated.  At the end of every tuning run of a
statement the default and the winner are therefore measured again *side by
side*: :data:`ROUNDS` rounds, each timing both (the order alternating, ABBA…),
so a change of load hits both alike.  The :class:`Verdict` keeps every time;
its ``speedup`` is the ratio of the two pooled medians of that same run, and
the winner *beats* the default only when

* its pooled median is faster by more than the noise (the larger of 1 % and
  either variant's interquartile range over its median), and
* it was the faster of the two in every round.

``tune="cached"`` uses only winners that beat the default this way (see
:mod:`.policy`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

from .ranking import NOISE_FLOOR, relative_spread

#: Columns of the database's ``verdicts`` table, in order.
VERDICT_COLUMNS = (
    "key",
    "family",
    "config",
    "default_config",
    "beats",
    "speedup",
    "reason",
    "default_times",
    "winner_times",
    "rounds",
    "timestamp",
)
#: Interleaved rounds of the final comparison (each times both variants).
ROUNDS = 3


@dataclass(frozen=True)
class Verdict:
    """The final same-run comparison of one statement's winner with its default."""

    key: str  # the problem's identity key
    family: str  # the problem's family (same statement, any sizes)
    config_key: str  # canonical JSON of the winner
    default_key: str  # canonical JSON of the default
    beats: bool  # the winner is faster than the default beyond the noise, in every round
    speedup: float | None  # default median / winner median, same run (None: not measured)
    reason: str  # what decided it, in words
    default_times: tuple[float, ...] = ()
    winner_times: tuple[float, ...] = ()
    rounds: tuple[tuple[float, float], ...] = ()  # (default, winner) median per round
    timestamp: float = 0.0

    @property
    def config(self) -> dict[str, Any]:
        return json.loads(self.config_key)

    def to_json(self) -> dict[str, Any]:
        """A portable dict (stored in wisdom files beside the records)."""
        return {
            "key": self.key,
            "family": self.family,
            "config": json.loads(self.config_key),
            "default_config": json.loads(self.default_key),
            "beats": self.beats,
            "speedup": self.speedup,
            "reason": self.reason,
            "default_times": list(self.default_times),
            "winner_times": list(self.winner_times),
            "rounds": [list(pair) for pair in self.rounds],
            "timestamp": self.timestamp,
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> Verdict:
        """Inverse of :meth:`to_json` (raises KeyError/TypeError/ValueError if malformed)."""
        speedup = data.get("speedup")
        return Verdict(
            key=str(data["key"]),
            family=str(data["family"]),
            config_key=canonical_text(data["config"]),
            default_key=canonical_text(data["default_config"]),
            beats=bool(data["beats"]),
            speedup=None if speedup is None else float(speedup),
            reason=str(data.get("reason", "")),
            default_times=tuple(float(t) for t in data.get("default_times", ())),
            winner_times=tuple(float(t) for t in data.get("winner_times", ())),
            rounds=tuple((float(d), float(w)) for d, w in data.get("rounds", ())),
            timestamp=float(data.get("timestamp", 0.0)),
        )


def canonical_text(config: Any) -> str:
    """The canonical JSON of a configuration object."""
    if not isinstance(config, dict):
        raise TypeError("a configuration must be an object")
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def judge(
    default_times: Sequence[float],
    winner_times: Sequence[float],
    rounds: Sequence[tuple[float, float]],
) -> tuple[bool, float | None, str]:
    """``(beats, speedup, reason)`` of a side-by-side measurement (see the module
    docstring); ``rounds`` holds each round's (default, winner) median."""
    if not default_times or not winner_times:
        return False, None, "not measured"
    default_median, winner_median = median(default_times), median(winner_times)
    if winner_median <= 0:
        return False, None, "the winner's time is not positive"
    speedup = default_median / winner_median
    noise = max(NOISE_FLOOR, relative_spread(default_times), relative_spread(winner_times))
    if winner_median * (1 + noise) >= default_median:
        return (
            False,
            speedup,
            (f"not faster than the default beyond the noise ({speedup:.2f}x, noise {noise:.1%})"),
        )
    faster = sum(winner < default for default, winner in rounds)
    if faster < len(rounds):
        return False, speedup, f"faster in only {faster} of {len(rounds)} rounds"
    return (
        True,
        speedup,
        (
            f"faster in all {len(rounds)} rounds and beyond the noise "
            f"({speedup:.2f}x, noise {noise:.1%})"
        ),
    )


def verdict_to_row(verdict: Verdict) -> tuple[Any, ...]:
    """The verdict as a row of the ``verdicts`` table (:data:`VERDICT_COLUMNS` order)."""
    return (
        verdict.key,
        verdict.family,
        verdict.config_key,
        verdict.default_key,
        int(verdict.beats),
        verdict.speedup,
        verdict.reason,
        json.dumps(list(verdict.default_times)),
        json.dumps(list(verdict.winner_times)),
        json.dumps([list(p) for p in verdict.rounds]),
        verdict.timestamp,
    )


def verdict_from_row(row: Sequence[Any]) -> Verdict:
    """Inverse of :func:`verdict_to_row`."""
    values = dict(zip(VERDICT_COLUMNS, row, strict=True))
    return Verdict(
        key=values["key"],
        family=values["family"],
        config_key=values["config"],
        default_key=values["default_config"],
        beats=bool(values["beats"]),
        speedup=values["speedup"],
        reason=values["reason"],
        default_times=tuple(json.loads(values["default_times"])),
        winner_times=tuple(json.loads(values["winner_times"])),
        rounds=tuple((d, w) for d, w in json.loads(values["rounds"])),
        timestamp=values["timestamp"],
    )
