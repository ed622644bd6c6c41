"""Issue-4 figures: how fast each search strategy gets within 5 % of the best.

1. Record (on the device, or on the CPU backend): measure as much of the space as
   the time allows, into a tuning database:
       python scripts/tuning_study.py record PROGRAM --backend cuda -e n=4096 \\
           --time 540 --db study.sqlite
2. Compare (anywhere, no device): replay that database; every strategy runs with
   several seeds, and the number of evaluations until the best found is within
   5 % of the best recorded is reported (median over seeds):
       python scripts/tuning_study.py compare PROGRAM -e n=4096 --db study.sqlite

Only configurations present in the database can be "measured" in the replay,
so strategies are compared on the recorded part of the space; when that part
is a sparse sample of a large space, the replay is uninformative, and

3. Race (on the device): every strategy with several seeds, for real, each run
   from an empty store; evaluations until within 5 % of the best seen:
       python scripts/tuning_study.py race PROGRAM --backend cuda --seeds 3 \
           --budget 60 [--db study.sqlite]
"""

from __future__ import annotations

import argparse
import statistics
import sys

from einkern.api import load
from einkern.ir.bind import make_problem
from einkern.ir.task import statement_task
from einkern.tuning.db import TuningDB
from einkern.tuning.evaluate import Budget, Evaluator, MemoryStore
from einkern.tuning.ranking import pick_best
from einkern.tuning.simulate import simulated_targets
from einkern.tuning.strategies import strategy_names
from einkern.tuning.target import get_target
from einkern.tuning.tuner import TuneOptions, identify, tune_problem, tune_task


def record(args) -> int:
    problem = make_problem(load(args.program), dict(args.extent))
    options = TuneOptions(strategy=args.strategy, budget=Budget(seconds=args.time), seed=0)
    with TuningDB(args.db, create=True) as db:
        results = tune_problem(
            get_target(args.backend),
            problem,
            options,
            db,
            tasks=(statement_task(problem, args.statement),),
        )
    for result in results:
        print(
            f"S{result.position}: {result.evaluations} variants measured in "
            f"{result.seconds:.0f} s, space of {result.space_size or 'uncounted'} "
            f"valid variants, failures {dict(result.failures)}"
        )
    return 0


def traced_run(
    target, task, evaluator, strategy: str, seed: int, budget: int, identity, isolate: bool
):
    """One search from an empty store: the best cost after each evaluation, and the
    statement's result."""
    trace: list[float] = []

    def watch(progress) -> None:
        trace.append(progress.best.cost if progress.best is not None else float("inf"))

    options = TuneOptions(
        strategy=strategy, budget=Budget(evaluations=budget), seed=seed, isolate=isolate
    )
    result = tune_task(target, task, evaluator, options, MemoryStore(), watch, identity)
    return trace, result


def evaluations_to(trace: list[float], goal: float) -> int | None:
    """How many evaluations a run needed to reach ``goal`` (None: it did not)."""
    return next((i + 1 for i, cost in enumerate(trace) if cost <= goal), None)


def compare(args) -> int:
    problem = make_problem(load(args.program), dict(args.extent))
    position = args.statement
    try:
        base = get_target(args.backend)
        base.parameters(statement_task(problem, position))
    except Exception:  # noqa: BLE001 - describe the space from the records instead
        base = None
    with TuningDB(args.db, create=False) as db:
        [(target, recorded)] = simulated_targets(
            db, args.backend, base, (statement_task(problem, position),)
        )
    best = pick_best(r for r in recorded.records if r.ok)
    if best is None:
        print("no successful record for this problem in the database", file=sys.stderr)
        return 2
    goal = best.median * 1.05
    measured = sum(1 for r in recorded.records if r.ok)
    print(f"{measured} recorded variants; best {best.median * 1e3:.4f} ms")
    print(
        "| strategy | evaluations to within 5 % (median over seeds) | found it in | "
        "% of the recorded variants |"
    )
    print("|---|---|---|---|")
    for name in strategy_names():
        needed = []
        for seed in range(args.seeds):
            with Evaluator(target, workers=1, isolate=False) as evaluator:
                trace, _ = traced_run(
                    target,
                    statement_task(problem, position),
                    evaluator,
                    name,
                    seed,
                    args.budget,
                    recorded.identity,
                    isolate=False,
                )
            needed.append(evaluations_to(trace, goal))
        found = [n for n in needed if n is not None]
        median = statistics.median(found) if found else None
        share = f"{100 * median / measured:.1f}" if median else "-"
        print(
            f"| {name} | {median if median is not None else 'not reached'} | "
            f"{len(found)}/{args.seeds} seeds | {share} |"
        )
    return 0


def race(args) -> int:
    """Every strategy, several seeds, run for real on the target (not replayed): the
    evaluations each needs to get within 5 % of the best time seen in any run (or in
    the database given with --db).  Each run starts from an empty in-memory store."""
    problem = make_problem(load(args.program), dict(args.extent))
    position = args.statement
    target = get_target(args.backend)
    identity = identify(target, statement_task(problem, position))
    best_known = float("inf")
    if args.db:
        with TuningDB(args.db, create=False) as db:
            [(_, recorded)] = simulated_targets(
                db, args.backend, None, (statement_task(problem, position),)
            )
        best = pick_best(r for r in recorded.records if r.ok)
        best_known = best.median if best is not None else best_known
    traces: dict[str, list[list[float]]] = {}
    with Evaluator(target, workers=None, isolate=True) as evaluator:
        for name in strategy_names():
            for seed in range(args.seeds):
                trace, result = traced_run(
                    target,
                    statement_task(problem, position),
                    evaluator,
                    name,
                    seed,
                    args.budget,
                    identity,
                    isolate=True,
                )
                traces.setdefault(name, []).append(trace)
                best_config = result.best.config.to_json() if result.best is not None else None
                print(
                    f"{name} seed {seed}: best {min(trace, default=float('inf')) * 1e3:.4f}"
                    f" ms after {len(trace)} evaluations: {best_config}",
                    flush=True,
                )
    best_seen = min([best_known] + [min(t) for ts in traces.values() for t in ts if t])
    goal = best_seen * 1.05
    print(f"best seen {best_seen * 1e3:.4f} ms; goal (within 5 %) {goal * 1e3:.4f} ms")
    print("| strategy | evaluations to within 5 % (median over seeds) | found it in |")
    print("|---|---|---|")
    for name, runs in traces.items():
        needed = [evaluations_to(t, goal) for t in runs]
        found = [n for n in needed if n is not None]
        median = statistics.median(found) if found else "not reached"
        print(f"| {name} | {median} (each seed: {needed}) | {len(found)}/{len(runs)} seeds |")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    for mode in ("record", "compare", "race"):
        p = sub.add_parser(mode)
        p.add_argument("program")
        p.add_argument(
            "--extent", "-e", action="append", default=[], type=lambda t: tuple(t.split("=", 1))
        )
        p.add_argument("--backend", default="cuda")
        p.add_argument("--db", required=mode != "race")
        p.add_argument("--statement", type=int, default=0)
    sub.choices["record"].add_argument("--time", type=float, default=540)
    sub.choices["record"].add_argument("--strategy", default="exhaustive")
    sub.choices["compare"].add_argument("--seeds", type=int, default=5)
    sub.choices["compare"].add_argument("--budget", type=int, default=200)
    sub.choices["race"].add_argument("--seeds", type=int, default=3)
    sub.choices["race"].add_argument("--budget", type=int, default=60)
    args = parser.parse_args()
    return {"record": record, "compare": compare, "race": race}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
