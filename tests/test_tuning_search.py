"""Search space, strategies, budgets and winner selection, on synthetic targets
measured in this process (fast, deterministic)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from test_tuning_fakes import C, Synthetic, fake_problem, point

from einkern.errors import UsageError
from einkern.ir.task import statement_task
from einkern.tuning.evaluate import Budget, Evaluator, MemoryStore, Outcome, Session
from einkern.tuning.ranking import pick_best, relative_spread, ties
from einkern.tuning.search import SearchSpace, canonical, space_for
from einkern.tuning.strategies import get_strategy, strategy_names
from einkern.tuning.target import Parameter, Timing
from einkern.tuning.tuner import TuneOptions, tune_task
from einkern.tuning.verdict import ROUNDS

OPTIMUM = (4, 1, 3)


def run(target, strategy: str, budget: Budget, seed: int = 0, store=None):
    problem = fake_problem()
    options = TuneOptions(strategy=strategy, budget=budget, seed=seed, isolate=False)
    with Evaluator(target, workers=2, isolate=False) as evaluator:
        return tune_task(
            target, statement_task(problem, 0), evaluator, options, store or MemoryStore()
        )


# ---- the space ------------------------------------------------------------------


def test_space_is_lazy_filtered_and_deterministic():
    target = Synthetic()
    space = space_for(target, statement_task(fake_problem(), 0))
    configs = list(space)
    assert configs == list(space)  # same order every time
    assert len({canonical(c) for c in configs}) == len(configs) == space.size()
    assert space.raw_size() == 216
    expected = sum(1 for a in range(6) for b in range(6) for c in range(6) if a + b + c <= 10)
    assert space.size() == expected < 216
    assert all(sum(point(c)) <= 10 for c in configs)


def test_sample_and_neighbours_stay_valid():
    space = space_for(Synthetic(limit=6), statement_task(fake_problem(), 0))
    rng = random.Random(5)
    for _ in range(300):
        config = space.sample(rng)
        assert config in space
        for neighbour in space.neighbours(config):
            assert neighbour in space
            moved = [k for k in config.values() if config[k] != neighbour[k]]
            assert len(moved) == 1
    # at the constraint's edge the neighbour upwards is skipped, not invalid
    edge = {"a": 2, "b": 2, "c": 2}
    assert {canonical(n) for n in space.neighbours(C(**edge))} == {
        canonical(C(**{**edge, name: 1})) for name in "abc"
    }


def test_neighbours_skip_holes_to_the_nearest_valid_value():
    space = SearchSpace(
        (Parameter("x", (0, 1, 2, 3)), Parameter("y", ("p", "q"))),
        lambda config: "hole" if config["x"] == 1 else None,
    )
    assert space.neighbours(C(x=0, y="p")) == [C(x=2, y="p"), C(x=0, y="q")]
    assert space.violation(C(x=9, y="p")) is not None
    assert space.runnable(C(x=9, y="p")) is None  # not a candidate, but runnable
    assert space.runnable(C(x=1, y="p")) == "hole"
    assert space.violation(C(x=0)) is not None and space.runnable(C(x=0)) is not None
    assert C(x=3, y="q") in space and C(x=1, y="q") not in space
    assert {"x": 3, "y": "q"} not in space  # a plain dict is no configuration


def test_empty_space_sampling_fails_clearly():
    space = SearchSpace((Parameter("x", (0, 1)),), lambda config: "never")
    assert space.size() == 0 and list(space) == []
    with pytest.raises(ValueError, match="no valid"):
        space.sample(random.Random(0))


def test_no_invalid_variant_is_ever_compiled():
    # Synthetic.compile raises on an invalid variant: that would be a compile failure
    for strategy in strategy_names():
        result = run(Synthetic(limit=5), strategy, Budget(evaluations=60), seed=3)
        assert dict(result.failures).get("compile", 0) == 0, strategy
        assert result.evaluations == 56 if strategy == "exhaustive" else True


# ---- strategies -----------------------------------------------------------------

BUDGETS = {"exhaustive": None, "random": None, "annealing": 90, "genetic": 130, "model": 3}


@pytest.mark.parametrize("strategy", sorted(BUDGETS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_strategy_finds_the_known_optimum(strategy, seed):
    result = run(Synthetic(), strategy, Budget(evaluations=BUDGETS[strategy]), seed=seed)
    assert result.best is not None
    assert point(result.best.config) == OPTIMUM, (strategy, seed, result.best.config)
    assert result.default is not None and result.default.ok
    assert result.speedup == pytest.approx(Synthetic().cost(result.default.config) / 1e-3)


def test_strategy_budget_and_reproducibility():
    first = run(Synthetic(), "random", Budget(evaluations=17), seed=11)
    again = run(Synthetic(), "random", Budget(evaluations=17), seed=11)
    other = run(Synthetic(), "random", Budget(evaluations=17), seed=12)
    assert first.evaluations == again.evaluations == 17
    keys = [o.config_key for o in _outcomes(Synthetic(), "random", 17, 11)]
    assert keys == [o.config_key for o in _outcomes(Synthetic(), "random", 17, 11)]
    assert keys != [o.config_key for o in _outcomes(Synthetic(), "random", 17, 12)]
    assert first.best.config_key == again.best.config_key
    assert other.evaluations == 17


def _outcomes(target, strategy, budget, seed) -> list[Outcome]:
    store = MemoryStore()
    run(target, strategy, Budget(evaluations=budget), seed=seed, store=store)
    return list(store.outcomes.values())


def test_time_budget_stops_the_search():
    @dataclass(frozen=True)
    class Slow(Synthetic):
        def measure(self, *args, **kwargs):
            import time

            time.sleep(0.02)
            return super().measure(*args, **kwargs)

    result = run(Slow(), "exhaustive", Budget(seconds=0.3))
    assert 3 <= result.evaluations < 40


def test_unknown_strategy_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown search strategy"):
        get_strategy("gradient-descent")
    assert set(strategy_names()) >= {"exhaustive", "random", "annealing", "genetic", "model"}


def test_resumed_outcomes_are_not_measured_again():
    calls = []

    @dataclass(frozen=True)
    class Counting(Synthetic):
        def measure(self, task, config, *rest):
            calls.append(canonical(config))
            return super().measure(task, config, *rest)

    store = MemoryStore()
    first = run(Counting(), "annealing", Budget(evaluations=12), seed=4, store=store)
    # 12 variants searched, then the default and the winner side by side, every round
    assert len(calls) == 12 + 2 * ROUNDS
    assert set(calls[12:]) == {first.default.config_key, first.best.config_key}
    calls.clear()
    result = run(Counting(), "annealing", Budget(evaluations=20), seed=4, store=store)
    searched = calls[: -2 * ROUNDS]
    assert result.resumed == 12 and len(searched) == 8  # same proposals first, then new ones
    assert len(set(searched) & set(store.outcomes)) == 8
    assert len(store.verdicts) == 2  # one per run


# ---- wrong results and winners --------------------------------------------------


def test_wrong_variant_is_rejected_and_never_best():
    target = Synthetic(wrong=(OPTIMUM, (4, 1, 2)))
    store = MemoryStore()
    result = run(target, "exhaustive", Budget(), store=store)
    wrong = [o for o in store.outcomes.values() if o.status == "wrong"]
    assert {point(o.config) for o in wrong} == {OPTIMUM, (4, 1, 2)}
    assert all("relative error" in o.reason for o in wrong)
    assert point(result.best.config) not in (OPTIMUM, (4, 1, 2))
    assert dict(result.failures) == {"wrong": 2}


def test_raising_measure_is_a_crash_in_process():
    result = run(Synthetic(raises=((0, 0, 3),)), "exhaustive", Budget(evaluations=10))
    assert dict(result.failures) == {"crash": 1}
    assert result.evaluations == 10


def timed(key: str, times: tuple[float, ...], registers: int | None = None) -> Outcome:
    resources = (("registers", registers),) if registers is not None else ()
    return Outcome({}, key, "ok", "", Timing(times, 0.0, resources))


def test_ties_are_broken_by_registers_then_canonical_order():
    a = timed('{"x":2}', (1.000e-3,) * 5)
    b = timed('{"x":1}', (1.005e-3,) * 5)
    c = timed('{"x":3}', (1.200e-3,) * 5)
    assert {o.config_key for o in ties([a, b, c])} == {a.config_key, b.config_key}
    assert pick_best([a, b, c]) is b  # within 1 %: canonical order decides
    assert pick_best([c, b, a]) is b
    few = timed('{"x":4}', (1.004e-3,) * 5, registers=32)
    many = timed('{"x":0}', (1.000e-3,) * 5, registers=64)
    assert pick_best([many, few]) is few
    assert pick_best([]) is None


def test_noisy_timings_widen_the_tie():
    noisy = timed('{"x":9}', (1.0, 1.0, 1.2, 0.8, 1.1, 0.9))
    assert relative_spread(noisy.times) > 0.1
    near = timed('{"x":1}', (1.1,) * 6)
    assert pick_best([noisy, near]) is near  # 10 % slower but within the noise


def test_session_refuses_invalid_configs_without_compiling():
    target = Synthetic(limit=3)
    problem = fake_problem()
    space = space_for(target, statement_task(problem, 0))
    with Evaluator(target, isolate=False) as evaluator:
        session = Session(evaluator, statement_task(problem, 0), space, MemoryStore(), Budget())
        outcomes = session.evaluate([C(a=3, b=3, c=3), C(a=1, b=1, c=1)])
    assert [o.status for o in outcomes] == ["invalid", "ok"]


def test_default_outside_the_candidate_values_is_still_evaluated():
    @dataclass(frozen=True)
    class OddDefault(Synthetic):
        def default_config(self, task):
            return C(a=7, b=0, c=0)  # a = 7 is no candidate value, but runnable

    result = run(OddDefault(limit=20), "annealing", Budget(evaluations=30))
    assert result.default.ok and result.default.config == C(a=7, b=0, c=0)
    assert not result.failures


def test_large_spaces_are_never_counted():
    from einkern.tuning.search import ENUMERATION_LIMIT

    values = tuple(range(40))
    space = SearchSpace(
        tuple(Parameter(n, values) for n in "pqrs"),
        lambda c: None if (c["p"] + c["q"]) % 7 == 0 else "sparse",
    )
    assert space.raw_size() > ENUMERATION_LIMIT and space.bounded_size() is None
    picked = space.candidates(random.Random(1), 50)
    assert len(picked) == 50 and all(c in space for c in picked)
    target_problem = fake_problem()

    @dataclass(frozen=True)
    class Huge(Synthetic):
        def parameters(self, task):
            return space.parameters

        def violation(self, task, config):
            return space.check(config)

        def default_config(self, task):
            return C(p=0, q=0, r=0, s=0)

        def cost(self, config):
            return 1e-3 * (1 + abs(config["r"] - 20) + abs(config["s"] - 5))

    for strategy in strategy_names():
        with Evaluator(Huge(), isolate=False) as evaluator:
            result = tune_task(
                Huge(),
                statement_task(target_problem, 0),
                evaluator,
                TuneOptions(strategy=strategy, budget=Budget(evaluations=25)),
            )
        assert result.evaluations == 25 and result.space_size is None, strategy
