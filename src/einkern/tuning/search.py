"""The constrained search space of one statement, generated lazily.

A :class:`SearchSpace` is the product of the target's parameter values filtered
by its ``violation`` check.  Nothing invalid is ever yielded: iteration walks
:func:`itertools.product` in a fixed order and skips what the check rejects,
sampling rejects invalid draws, and neighbours are checked before they are
returned.  Configurations are the target's typed records (built from named
parameter values by its ``config_type``); :func:`canonical` turns one into the
canonical JSON text used as its identity everywhere (sets, the database, ties).
"""

from __future__ import annotations

import functools
import itertools
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..ir.task import Task
from .target import Config, ConfigType, Configuration, Parameter, ParameterConfig, TuningTarget

#: Random draws :meth:`SearchSpace.sample` tries before giving up (or enumerating,
#: in a space small enough).
SAMPLE_ATTEMPTS = 20_000
#: Spaces with more raw combinations than this are never counted or enumerated
#: implicitly (a GPU mapping space has millions; each check costs microseconds).
ENUMERATION_LIMIT = 200_000


def canonical(config: Config) -> str:
    """Canonical JSON text of a configuration's JSON form (sorted keys, no spaces)."""
    return json.dumps(config.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _same(left: Any, right: Any) -> bool:
    """Equality of parameter values, a tuple equal to the same list (JSON gives
    lists back), ``True`` not equal to ``1``."""
    if isinstance(left, list | tuple) and isinstance(right, list | tuple):
        return len(left) == len(right) and all(map(_same, left, right))
    return type(left) is type(right) and left == right


@dataclass(frozen=True)
class SearchSpace:
    """Valid configurations: every combination of ``parameters`` values for which
    ``check`` returns None (``check`` returns the reason a configuration is invalid)."""

    parameters: tuple[Parameter, ...]
    check: Callable[[Config], str | None]
    config_type: ConfigType = ParameterConfig

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(parameter.name for parameter in self.parameters)

    def make(self, values: dict[str, Any]) -> Config:
        """The configuration of these named values (unchecked)."""
        return self.config_type.from_values(values)

    def _draw(self, rng: random.Random) -> Config:
        return self.make({p.name: p.values[rng.randrange(len(p.values))] for p in self.parameters})

    def runnable(self, config: Config) -> str | None:
        """Why the target cannot run ``config`` (parameters missing or unknown, or its
        check fails), or None.  Unlike :meth:`violation`, values outside the
        candidate lists are allowed (a default or recorded configuration may use one)."""
        given = set(config.values())
        if given != set(self.names):
            missing = sorted(set(self.names) - given - self.optional)
            extra = sorted(given - set(self.names))
            if missing or extra:
                return f"parameters differ (missing {missing}, unknown {extra})"
        return self.check(config)

    @property
    def optional(self) -> set[str]:
        """Parameters one of whose values is None: a configuration that leaves one
        out (its ``values()`` omit None) has that value."""
        return {p.name for p in self.parameters if any(v is None for v in p.values)}

    def violation(self, config: Config) -> str | None:
        """Why ``config`` is not in the space, or None."""
        values = config.values()
        if set(values) != set(self.names):
            problem = self.runnable(config)
            if problem is not None or set(values) - set(self.names):
                return problem
        for parameter in self.parameters:
            if self.position(parameter, values.get(parameter.name)) is None:
                return f"{parameter.name}={values.get(parameter.name)!r} is not a candidate value"
        return self.check(config)

    def __contains__(self, config: object) -> bool:
        return isinstance(config, Configuration) and self.violation(config) is None

    def __iter__(self) -> Iterator[Config]:
        """Valid configurations in a deterministic order (the product's order)."""
        for values in itertools.product(*(p.values for p in self.parameters)):
            config = self.make(dict(zip(self.names, values, strict=True)))
            if self.check(config) is None:
                yield config

    @functools.cached_property
    def _size(self) -> int:
        return sum(1 for _ in self)

    def size(self) -> int:
        """Number of valid configurations (counted once, then cached; this checks
        every combination, see :meth:`bounded_size`)."""
        return self._size

    def bounded_size(self, limit: int = ENUMERATION_LIMIT) -> int | None:
        """:meth:`size` when the space has at most ``limit`` raw combinations, else None."""
        return self.size() if self.raw_size() <= limit else None

    def estimated_size(self, samples: int = 4000, seed: int = 0) -> tuple[int, int]:
        """Valid configurations estimated from ``samples`` uniform raw draws, with the
        half-width of a 95 % interval: for spaces too large to count."""
        rng = random.Random(seed)
        valid = 0
        for _ in range(samples):
            valid += self.check(self._draw(rng)) is None
        fraction = valid / samples
        spread = 1.96 * (fraction * (1 - fraction) / samples) ** 0.5
        raw = self.raw_size()
        return round(fraction * raw), round(spread * raw)

    def raw_size(self) -> int:
        """Number of combinations before the validity check."""
        total = 1
        for parameter in self.parameters:
            total *= len(parameter.values)
        return total

    @staticmethod
    def position(parameter: Parameter, value: Any) -> int | None:
        """Index of ``value`` among the parameter's candidates, or None."""
        for number, candidate in enumerate(parameter.values):
            if _same(candidate, value):
                return number
        return None

    def sample(self, rng: random.Random) -> Config:
        """A uniformly drawn valid configuration (rejection sampling; enumeration when
        valid ones are rare in a small space).  Raises ValueError when none is found."""
        for _ in range(SAMPLE_ATTEMPTS):
            config = self._draw(rng)
            if self.check(config) is None:
                return config
        size = self.bounded_size()
        if size is None:
            raise ValueError(f"no valid configuration in {SAMPLE_ATTEMPTS} random draws")
        if size == 0:
            raise ValueError("the search space has no valid configuration")
        return next(itertools.islice(iter(self), rng.randrange(size), None))

    def candidates(self, rng: random.Random, count: int) -> list[Config]:
        """Every valid configuration when the space is small (at most ``count`` of
        them, :data:`ENUMERATION_LIMIT` raw), else ``count`` distinct random samples
        (fewer if the draws keep repeating), in a deterministic order."""
        size = self.bounded_size()
        if size is not None and size <= count:
            return list(self)
        found: dict[str, Config] = {}
        for _ in range(4 * count):
            if len(found) >= count:
                break
            config = self.sample(rng)
            found.setdefault(canonical(config), config)
        return list(found.values())

    def neighbours(self, config: Config) -> list[Config]:
        """Valid configurations that differ from ``config`` in one parameter, moved to
        the nearest valid value on either side (adjacent when that one is valid),
        in parameter order, lower side first."""
        found = []
        values = config.values()
        for parameter in self.parameters:
            here = self.position(parameter, values.get(parameter.name))
            if here is None:
                continue
            for step in (-1, 1):
                place = here + step
                while 0 <= place < len(parameter.values):
                    moved = self.make({**values, parameter.name: parameter.values[place]})
                    # (a record may normalise the move away: a GETT point ignores x)
                    if moved != config and self.check(moved) is None:
                        found.append(moved)
                        break
                    place += step
        return found


def space_for(target: TuningTarget, task: Task) -> SearchSpace:
    """The search space of ``task`` as the target defines it."""
    parameters = tuple(target.parameters(task))

    def check(config: Config) -> str | None:
        return target.violation(task, config)

    return SearchSpace(parameters, check, target.config_type)
