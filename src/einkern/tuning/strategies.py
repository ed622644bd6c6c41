"""Search strategies: one protocol, chosen by name from a registry.

A strategy proposes configurations to a :class:`~.evaluate.Session` (in batches,
so variants compile in parallel) until the session is exhausted (budget spent or
every valid variant evaluated).  Everything random comes from the ``rng`` it is
given, and the outcomes it sees are the same when a run is resumed from the
database, so a seeded run is reproducible and a resumed one proposes the same
variants again (which then cost no measurement).

``exhaustive``  every valid variant, in the space's order.
``random``      uniform samples without replacement.
``annealing``   simulated annealing over neighbours, restarting when stuck.
``genetic``     a small population: tournament selection, uniform crossover,
                mutation to a neighbour, elitism.
``model``       rank variants by the target's analytic model and measure the
                most promising ones (as in Fousek's compiler).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..errors import RegistrationError, UsageError
from .evaluate import Outcome, Session
from .search import SearchSpace, canonical
from .target import Config

#: Variants ranked by the model strategy (a seeded sample in larger spaces).
MODEL_CANDIDATES = 4_000


@dataclass(frozen=True)
class SearchContext:
    """What a strategy may use besides the session."""

    space: SearchSpace
    default: Config  # the target's default configuration (valid)
    model: Callable[[Config], float] | None = None  # predicted seconds
    batch: int = 4  # variants proposed at a time (compiled in parallel)


@runtime_checkable
class Strategy(Protocol):
    """A search strategy."""

    name: str

    def search(self, context: SearchContext, session: Session, rng: random.Random) -> None:
        """Propose variants to ``session`` until it is exhausted or nothing is left."""
        ...


def _batches(configs: Iterator[Config], session: Session, size: int) -> None:
    """Evaluate ``configs`` in batches until the session is exhausted."""
    while not session.exhausted:
        batch = list(itertools.islice(configs, size))
        if not batch:
            return
        session.evaluate(batch)


class Exhaustive:
    name = "exhaustive"

    def search(self, context: SearchContext, session: Session, rng: random.Random) -> None:
        _batches(iter(context.space), session, context.batch)


def _unseen_samples(
    context: SearchContext, session: Session, rng: random.Random
) -> Iterator[Config]:
    """Random valid variants not evaluated yet; once sampling keeps hitting evaluated
    ones, a shuffled enumeration of the rest (small spaces) or the end (large ones)."""
    small = context.space.bounded_size() is not None
    misses = 0
    while misses < (50 if small else 5000):
        try:
            config = context.space.sample(rng)
        except ValueError:
            return
        if session.outcome(config) is None:
            misses = 0
            yield config
        else:
            misses += 1
    if small:
        rest = [c for c in context.space if session.outcome(c) is None]
        rng.shuffle(rest)
        yield from rest


class RandomSearch:
    name = "random"

    def search(self, context: SearchContext, session: Session, rng: random.Random) -> None:
        _batches(_unseen_samples(context, session, rng), session, context.batch)


@dataclass
class Annealing:
    """Moves to a random neighbour; accepts a slower one with probability
    ``exp(-relative slowdown / temperature)``; the temperature decays geometrically;
    when every neighbour has been evaluated it restarts from a fresh random variant.
    Failed variants are never accepted."""

    start_temperature: float = 0.3
    cooling: float = 0.9
    name = "annealing"

    def search(self, context: SearchContext, session: Session, rng: random.Random) -> None:
        current = _first(session.evaluate([context.default]))
        if current is None:
            return
        temperature = self.start_temperature
        fresh = _unseen_samples(context, session, rng)
        while not session.exhausted:
            options = [
                n for n in context.space.neighbours(current.config) if session.outcome(n) is None
            ]
            if not options:  # stuck: restart from an unseen variant
                restart = next(fresh, None)
                if restart is None:
                    return
                found = _first(session.evaluate([restart]))
                if found is None:
                    return
                if found.ok or not current.ok:
                    current = found
                continue
            moved = _first(session.evaluate([rng.choice(options)]))
            if moved is None:
                return
            if _accept(current, moved, temperature, rng):
                current = moved
            temperature *= self.cooling


def _first(outcomes: list[Outcome]) -> Outcome | None:
    return outcomes[0] if outcomes else None


def _accept(current: Outcome, candidate: Outcome, temperature: float, rng: random.Random) -> bool:
    if not candidate.ok:
        return False
    if not current.ok or candidate.cost <= current.cost:
        return True
    slowdown = candidate.cost / current.cost - 1
    return temperature > 0 and rng.random() < math.exp(-slowdown / temperature)


@dataclass
class Genetic:
    """Generational search over a population of evaluated variants."""

    population: int = 8
    elite: int = 2
    mutation: float = 0.3
    name = "genetic"

    def search(self, context: SearchContext, session: Session, rng: random.Random) -> None:
        fresh = _unseen_samples(context, session, rng)
        initial = [context.default, *itertools.islice(fresh, self.population - 1)]
        people = session.evaluate(initial)
        while not session.exhausted and people:
            people.sort(key=lambda o: (o.cost, o.config_key))
            children: list[Config] = []
            attempts = 0
            while len(children) < self.population - self.elite and attempts < 50 * self.population:
                attempts += 1
                child = self._child(context, people, rng)
                if child is None or session.outcome(child) is not None:
                    continue
                if any(canonical(child) == canonical(c) for c in children):
                    continue
                children.append(child)
            while len(children) < self.population - self.elite:  # diversity from new samples
                extra = next(fresh, None)
                if extra is None:
                    break
                if all(canonical(extra) != canonical(c) for c in children):
                    children.append(extra)
            if not children:
                return
            born = session.evaluate(children)
            people = people[: self.elite] + born

    def _child(
        self, context: SearchContext, people: list[Outcome], rng: random.Random
    ) -> Config | None:
        mother = _tournament(people, rng).config
        father = _tournament(people, rng).config
        parents = mother.values(), father.values()
        child = context.space.make(
            {name: parents[rng.random() >= 0.5][name] for name in context.space.names}
        )
        if rng.random() < self.mutation or canonical(child) in (
            canonical(mother),
            canonical(father),
        ):
            neighbours = context.space.neighbours(child) if child in context.space else []
            if neighbours:
                child = rng.choice(neighbours)
        return child if child in context.space else None


def _tournament(people: list[Outcome], rng: random.Random, size: int = 2) -> Outcome:
    chosen = [people[rng.randrange(len(people))] for _ in range(size)]
    return min(chosen, key=lambda o: (o.cost, o.config_key))


class ModelGuided:
    """Rank every valid variant (a seeded sample of :data:`MODEL_CANDIDATES` in a
    larger space) by predicted time, then measure them best first; the default
    is measured first, as the baseline."""

    name = "model"

    def search(self, context: SearchContext, session: Session, rng: random.Random) -> None:
        if context.model is None:
            raise UsageError("the model strategy needs a target with a cost model")
        candidates = context.space.candidates(rng, MODEL_CANDIDATES)
        scored = sorted(
            ((context.model(c), canonical(c), c) for c in candidates),
            key=lambda item: (item[0], item[1]),
        )
        ranked = [context.default] + [config for _, _, config in scored]
        _batches(iter(ranked), session, context.batch)


_STRATEGIES: dict[str, Callable[[], Strategy]] = {}


def register_strategy(name: str, factory: Callable[[], Strategy]) -> None:
    """Make a strategy available under ``name``; a name already taken is refused
    with :class:`~einkern.errors.RegistrationError`."""
    if name in _STRATEGIES:
        raise RegistrationError(
            f"a search strategy named {name!r} is already registered", hint="choose another name"
        )
    _STRATEGIES[name] = factory


def strategy_names() -> tuple[str, ...]:
    return tuple(_STRATEGIES)


def get_strategy(name: str) -> Strategy:
    """A new strategy by name; UsageError naming the choices when unknown."""
    if name not in _STRATEGIES:
        raise UsageError(
            f"unknown search strategy {name!r}", hint=f"choose one of: {', '.join(_STRATEGIES)}"
        )
    return _STRATEGIES[name]()


for _factory in (Exhaustive, RandomSearch, Annealing, Genetic, ModelGuided):
    register_strategy(_factory.name, _factory)
