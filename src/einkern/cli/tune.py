"""``einkern tune`` and ``einkern db``: the autotuner on the command line.

:func:`add_tune_parsers` registers both sub-commands on the main parser's
sub-parsers; :data:`TUNE_COMMANDS` maps their names to the functions running
them (``function(args) -> exit code``; user errors raise EinkernError).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..errors import BackendError, UsageError
from ..tuning.db import TuningDB, TuningRecord, default_path
from ..tuning.evaluate import DEFAULT_REPEATS, DEFAULT_TIMEOUT_S, Budget, Evaluator, MemoryStore
from ..tuning.report import ProgressDisplay, print_database, print_results
from ..tuning.strategies import strategy_names
from ..tuning.tuner import DEFAULT_BUDGET, DEFAULT_STRATEGY, TuneOptions, tune_problem, tune_task
from ..tuning.verdict import Verdict
from .common import BACKEND_HELP, add_extent_argument, load_problem

WISDOM_FORMAT = "einkern-wisdom"
WISDOM_VERSION = 1


def _positive(kind: type):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value

    return parse


def add_tune_parsers(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``tune`` and ``db`` sub-commands."""
    tune = subparsers.add_parser("tune", help="autotune a program's kernels")
    tune.add_argument("program", help="a .ein, tensor or mapped-function file")
    add_extent_argument(tune)
    tune.add_argument(
        "--backend", "-b", default="auto", choices=["auto", "cpu", "cuda"], help=BACKEND_HELP
    )
    tune.add_argument(
        "--strategy",
        "-s",
        default=DEFAULT_STRATEGY,
        choices=strategy_names(),
        help=f"how variants are chosen (default {DEFAULT_STRATEGY}; docs/tuning.md)",
    )
    limit = tune.add_mutually_exclusive_group()
    limit.add_argument(
        "--budget",
        "-n",
        type=_positive(int),
        metavar="N",
        help=f"variants per statement (default {DEFAULT_BUDGET})",
    )
    limit.add_argument(
        "--time", "-t", type=_positive(float), metavar="SECONDS", help="wall time per statement"
    )
    tune.add_argument("--db", metavar="PATH", help=f"tuning database (default {default_path()})")
    tune.add_argument("--seed", type=int, default=0, help="random seed of the search")
    tune.add_argument(
        "--groupings",
        action="store_true",
        help="also compile and time the fusion planner's alternative groupings "
        "(default mappings) and print them",
    )
    tune.add_argument(
        "--no-fuse",
        action="store_true",
        help="tune every statement alone (default: the fused program's kernels, as compiled)",
    )
    tune.add_argument(
        "--statement",
        type=int,
        action="append",
        metavar="N",
        help="tune only statement N (repeatable; default all)",
    )
    tune.add_argument("--explain", action="store_true", help="print the best configurations")
    tune.add_argument(
        "--simulate",
        metavar="PATH",
        help="replay the timings recorded in this database (no device needed)",
    )
    tune.add_argument("--workers", type=_positive(int), help="compile threads")
    tune.add_argument(
        "--timeout",
        type=_positive(float),
        default=DEFAULT_TIMEOUT_S,
        help="seconds allowed to measure one variant",
    )
    tune.add_argument(
        "--repeats",
        type=_positive(int),
        default=DEFAULT_REPEATS,
        help="timed runs per variant (at least 10)",
    )

    db = subparsers.add_parser("db", help="inspect and manage the tuning database")
    actions = db.add_subparsers(dest="db_command", required=True)
    show = actions.add_parser("show", help="summary of the recorded problems")
    show.add_argument("path", nargs="?", help="database (default: --db, else the default)")
    show.add_argument("--db", metavar="PATH")
    show.add_argument("--records", action="store_true", help="list every record")
    export = actions.add_parser("export", help="write the records to a JSON wisdom file")
    export.add_argument("path", help="wisdom file to write ('-': standard output)")
    export.add_argument("--db", metavar="PATH")
    merge = actions.add_parser("import", help="merge a JSON wisdom file into the database")
    merge.add_argument("path", help="wisdom file to read")
    merge.add_argument("--db", metavar="PATH")
    prune = actions.add_parser("prune", help="delete failed or stale records")
    prune.add_argument("path", nargs="?", help="database (default: --db, else the default)")
    prune.add_argument("--db", metavar="PATH")
    prune.add_argument("--failed", action="store_true", help="delete failed variants")
    prune.add_argument(
        "--stale", action="store_true", help="delete records of other einkern versions"
    )
    prune.add_argument(
        "--keep-best",
        action="store_true",
        help="keep only each problem's best and default variants",
    )


def _positions(args: argparse.Namespace, problem) -> tuple[int, ...]:
    count = len(problem.program.statements)
    if not args.statement:
        return tuple(range(count))
    for position in args.statement:
        if not 0 <= position < count:
            raise UsageError(f"no statement {position}: the program has {count} (0..{count - 1})")
    return tuple(dict.fromkeys(args.statement))


def _backend_name(name: str) -> str:
    if name != "auto":
        return name
    from ..backends import get_backend

    return get_backend("auto").name


def command_tune(args: argparse.Namespace) -> int:
    """``einkern tune``: tune every statement, record, print a summary table."""
    from ..api import fusion_plan
    from ..tuning.target import ExplainsDefault, get_target

    backend = _backend_name(args.backend)
    plan = fusion_plan(load_problem(args), backend, not args.no_fuse)
    problem = plan.fused
    positions = _positions(args, problem)
    evaluations = (
        args.budget
        if args.budget is not None
        else (None if args.time is not None else DEFAULT_BUDGET)
    )
    options = TuneOptions(
        strategy=args.strategy,
        budget=Budget(evaluations, args.time),
        seed=args.seed,
        workers=args.workers,
        timeout=args.timeout,
        repeats=args.repeats,
    )
    display = ProgressDisplay(problem, positions)
    if args.simulate:
        with TuningDB(args.simulate, create=False) as db, display:
            results, best_recorded, rules = _simulate(
                db, backend, problem, positions, options, display
            )
        print_results(problem, results, simulated=best_recorded, explain=args.explain, rules=rules)
        return 0
    try:
        target = get_target(backend)
    except ImportError as error:
        raise BackendError(
            f"the {backend} backend cannot be tuned here: {error}", hint="try --backend cpu"
        ) from error
    with TuningDB(args.db, create=True) as db:
        with display:
            results = tune_problem(
                target, problem, options, db, display.update, _tasks(problem, positions)
            )
        rules = None
        if args.explain and isinstance(target, ExplainsDefault):
            rules = [target.explain_default(task) for task in _tasks(problem, positions)]
        print_results(problem, results, explain=args.explain, database=db.path, rules=rules)
    if args.groupings:
        from ..api import measure_groupings
        from ..backends import get_backend

        measured = measure_groupings(plan.problem, get_backend(backend), plan)
        print("\n".join(measured.explain()[:2]))
    return 0


def _tasks(problem, positions: tuple[int, ...]):
    """The task of each statement number."""
    from ..ir.task import statement_task

    return tuple(statement_task(problem, position) for position in positions)


def _simulate(db: TuningDB, backend: str, problem, positions, options, display):
    from ..tuning.ranking import pick_best
    from ..tuning.simulate import simulated_targets
    from ..tuning.target import ExplainsDefault, get_target

    tasks = _tasks(problem, positions)
    base = None
    try:
        candidate = get_target(backend)
        for task in tasks:
            candidate.parameters(task)
            candidate.violation(task, candidate.default_config(task))
        base = candidate
    except Exception:  # noqa: BLE001 - no usable real target here: derive the space
        pass
    results, best = [], []
    for task, (target, recorded) in zip(
        tasks, simulated_targets(db, backend, base, tasks), strict=True
    ):
        with Evaluator(target, workers=1, isolate=False) as evaluator:
            results.append(
                tune_task(
                    target,
                    task,
                    evaluator,
                    options,
                    MemoryStore(),
                    display.update,
                    recorded.identity,
                )
            )
        best.append(pick_best(r for r in recorded.records if r.ok))
    rules = (
        [base.explain_default(task) for task in tasks]
        if isinstance(base, ExplainsDefault)
        else None
    )
    return tuple(results), tuple(best), rules


def command_db(args: argparse.Namespace) -> int:
    """``einkern db show|export|import|prune``."""
    path = getattr(args, "db", None)
    if args.db_command in ("show", "prune") and args.path:
        if path and path != args.path:
            raise UsageError("give the database either as PATH or with --db, not both")
        path = args.path
    if args.db_command == "show":
        with TuningDB(path, create=False) as db:
            print_database(db, every=args.records)
        return 0
    if args.db_command == "export":
        with TuningDB(path, create=False) as db:
            records, verdicts = db.records(), db.verdicts()
        _write_wisdom(args.path, records, verdicts)
        where = "standard output" if args.path == "-" else args.path
        print(f"exported {_records(len(records))} to {where}", file=sys.stderr)
        return 0
    if args.db_command == "import":
        records, verdicts = _read_wisdom(args.path)
        with TuningDB(path, create=True) as db:
            stored = db.add_many(records)
            for verdict in verdicts:
                db.add_verdict(verdict)
            print(f"imported {stored} of {_records(len(records))} into {db.path}")
        return 0
    from ..tuning.canonical import einkern_version

    failed, stale = args.failed, args.stale
    if not (failed or stale or args.keep_best):
        failed = stale = True
    with TuningDB(path, create=False) as db:
        deleted = db.prune(
            failed=failed,
            stale_version=einkern_version() if stale else None,
            keep_best_only=args.keep_best,
        )
        print(f"deleted {_records(deleted)} from {db.path}")
    return 0


def _write_wisdom(
    path: str, records: Sequence[TuningRecord], verdicts: Sequence[Verdict] = ()
) -> None:
    text = json.dumps(
        {
            "format": WISDOM_FORMAT,
            "version": WISDOM_VERSION,
            "records": [record.to_json() for record in records],
            "verdicts": [verdict.to_json() for verdict in verdicts],
        },
        indent=1,
    )
    if path == "-":
        sys.stdout.write(text + "\n")
        return
    target = Path(path)
    try:
        descriptor, temporary = tempfile.mkstemp(
            dir=target.parent or ".", prefix=f".{target.name}.", suffix=".tmp"
        )
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text + "\n")
        os.replace(temporary, target)
    except OSError as error:
        raise UsageError(f"cannot write {path}: {error}") from error


def _read_wisdom(path: str) -> tuple[list[TuningRecord], list[Verdict]]:
    """The records and verdicts of a wisdom file (files without verdicts: none)."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        data = json.loads(text)
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error}") from error
    except ValueError as error:
        raise UsageError(f"{path} is not JSON: {error}") from error
    if not isinstance(data, dict) or data.get("format") != WISDOM_FORMAT:
        raise UsageError(f"{path} is not an einkern wisdom file")
    if not isinstance(data.get("version"), int) or data["version"] > WISDOM_VERSION:
        raise UsageError(
            f"{path} has wisdom format version {data.get('version')!r}; "
            f"this einkern reads up to {WISDOM_VERSION}"
        )
    records = []
    for number, item in enumerate(data.get("records", [])):
        try:
            records.append(TuningRecord.from_json(item))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise UsageError(f"{path}: record {number} is malformed ({error!r})") from error
    verdicts = []
    for number, item in enumerate(data.get("verdicts", [])):
        try:
            verdicts.append(Verdict.from_json(item))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise UsageError(f"{path}: verdict {number} is malformed ({error!r})") from error
    return records, verdicts


TUNE_COMMANDS = {"tune": command_tune, "db": command_db}


def _records(count: int) -> str:
    """``1 record``, ``2 records``."""
    return f"{count} record{'s' if count != 1 else ''}"
