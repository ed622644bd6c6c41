"""``einkern bench SUITE... [--backend cuda|cpu] [--quick] [--tuned] [--out DIR]``.

:func:`add_bench_parser` adds the sub-command to the ``einkern`` parser and
:func:`command_bench` runs it: the results go to ``DIR`` (``results.json``,
``results.csv``, ``results.md`` and PNG figures) and the Markdown table is
printed last on stdout; progress and notes go to stderr.  The exit code is 1
when an einkern row failed or exceeded the error tolerance, else 0.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import UsageError


def add_bench_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``bench`` to an ``add_subparsers()`` object; returns its parser."""
    from ..bench.registry import suite_names

    parser = subparsers.add_parser(
        "bench",
        help="benchmark einkern against library peers on standard suites",
        description="Run benchmark suites, check every result against a reference and "
        "write results.json/csv/md and PNG figures.",
    )
    parser.add_argument(
        "suites", nargs="*", metavar="SUITE", help=f"suites to run: all, {', '.join(suite_names())}"
    )
    parser.add_argument(
        "--backend",
        "-b",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="where to run (auto: cuda when a GPU is usable)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small sizes (CI: the whole CPU run takes well under 2 minutes)",
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="the GPU sizes on the CPU backend too (hours); without it the "
        "CPU backend runs the --quick sizes",
    )
    parser.add_argument(
        "--tuned",
        action="store_true",
        help="compile with tune='cached' (the tuning database) where available",
    )
    parser.add_argument(
        "--out", "-o", default="bench-out", metavar="DIR", help="output folder (default: bench-out)"
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=20,
        help="timed runs per row after warm-up, median reported (default 20)",
    )
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs first (default 2)")
    parser.add_argument(
        "--row-budget",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="most seconds of timed runs per row; slower rows get fewer "
        "runs (at least 3) and say so (default 30)",
    )
    parser.add_argument(
        "--suite-timeout",
        type=_timeouts,
        default=(),
        metavar="LIMITS",
        help="skip a suite's remaining cases after this many seconds "
        "(recorded as skipped): SECONDS for every suite, or "
        "SUITE=SECONDS,... (e.g. gemm=180,ccsdt=150)",
    )
    parser.add_argument(
        "--peers",
        default=None,
        metavar="NAMES",
        help="comma-separated peers to compare with (default: all of the backend's)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the random inputs, and of the cases the contractions suite draws",
    )
    parser.add_argument(
        "--count",
        type=int,
        default=None,
        metavar="N",
        help="cases the contractions suite draws (default 120, --quick 6)",
    )
    parser.add_argument(
        "--cases",
        default=None,
        metavar="PATTERNS",
        help="run only the cases whose key matches one of these comma-separated patterns "
        "(fnmatch, e.g. '*symv*,*gemv*'; see the key column of results.csv)",
    )
    parser.add_argument(
        "--calibrate",
        default=None,
        metavar="FILE",
        help="also time a handful of mapping configurations of each one-statement case "
        "(CUDA) and append the cost model's predicted and the measured times to FILE "
        "as JSON lines",
    )
    parser.add_argument(
        "--dump",
        default=None,
        metavar="DIR",
        help="write each case's program (CASE.ein) and cases.json (extents, and the einsum "
        "equation of drawn cases) to DIR, then exit without running anything",
    )
    parser.add_argument("--list", action="store_true", help="list suites and peers, then exit")
    parser.set_defaults(handler=command_bench)
    return parser


def _timeouts(text: str) -> tuple[tuple[str, float], ...]:
    """``"60"`` → every suite 60 s; ``"gemm=180,ccsdt=150"`` → per suite ("*" = others)."""
    limits = []
    for part in text.split(","):
        name, _, value = part.rpartition("=")
        try:
            seconds = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected SECONDS or SUITE=SECONDS, got {part!r}"
            ) from None
        if seconds < 0:
            raise argparse.ArgumentTypeError(f"a time limit cannot be negative: {part!r}")
        limits.append((name.strip() or "*", seconds))
    return tuple(limits)


def _list() -> int:
    from ..bench.registry import get_suite, peers_for, suite_names

    for name in suite_names():
        print(f"suite {name:8} {get_suite(name).description}")
    for backend in ("cpu", "cuda"):
        for peer in peers_for(backend):
            print(f"peer  {backend:8} {peer.name}")
    return 0


def _options(args):
    from ..backends import get_backend
    from ..bench.registry import peer_names
    from ..bench.runner import BenchOptions

    if args.runs < 1 or args.warmup < 0:
        raise UsageError("--runs must be at least 1 and --warmup at least 0")
    if args.count is not None and args.count < 1:
        raise UsageError("--count must be at least 1")
    peers = None
    if args.peers is not None:
        peers = tuple(name.strip() for name in args.peers.split(",") if name.strip())
        unknown = [name for name in peers if name not in peer_names()]
        if unknown:
            raise UsageError(
                f"unknown peer(s): {', '.join(unknown)}", hint=f"peers: {', '.join(peer_names())}"
            )
    backend = args.backend
    if backend == "auto":
        backend = get_backend("auto").name
    if args.calibrate and backend != "cuda":
        raise UsageError(
            "--calibrate records the GPU cost model's predictions: it needs the cuda backend",
            hint="run with --backend cuda on a GPU machine, or drop --calibrate",
        )
    quick = args.quick
    if backend == "cpu" and not quick and not args.full:
        print(
            "einkern bench: CPU backend, so the --quick sizes (pass --full for the GPU sizes)",
            file=sys.stderr,
        )
        quick = True
    return BenchOptions(
        backend=backend,
        quick=quick,
        tuned=args.tuned,
        runs=args.runs,
        warmup=args.warmup,
        row_budget_s=args.row_budget,
        suite_timeouts=args.suite_timeout,
        seed=args.seed,
        peers=peers,
        calibrate=args.calibrate,
        cases=tuple(p.strip() for p in args.cases.split(",") if p.strip()) if args.cases else None,
    )


def command_bench(args) -> int:
    """Run the ``bench`` sub-command; returns the exit code."""
    if args.list:
        return _list()
    from ..bench.plots import write_plots
    from ..bench.progress import Progress
    from ..bench.registry import resolve_suites
    from ..bench.report import write_csv, write_json, write_markdown
    from ..bench.results import EINKERN
    from ..bench.runner import run_suites

    if not args.suites:
        raise UsageError(
            "name at least one suite",
            hint="e.g. `einkern bench gemm --quick`, "
            "`einkern bench all`; `einkern bench --list` lists them",
        )
    suites = [_configure(suite, args) for suite in resolve_suites(args.suites)]
    if args.dump:
        return _dump(suites, Path(args.dump), args.quick)
    options = _options(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = run_suites(suites, options, progress=Progress())
    write_json(result, out / "results.json")
    write_csv(result, out / "results.csv")
    table = write_markdown(result, out / "results.md")
    try:
        figures = write_plots(result, out)
    except ImportError as error:  # matplotlib missing: the numbers still stand
        print(f"figures not written: {error}", file=sys.stderr)
        figures = []
    bad = [
        m
        for m in result.measurements
        if m.implementation == EINKERN and (m.status == "failed" or m.error_ok is False)
    ]
    print(
        f"wrote {out}/results.json, results.csv, results.md and {len(figures)} figure(s)",
        file=sys.stderr,
    )
    if bad:
        print(f"{len(bad)} einkern row(s) failed or exceeded the error tolerance", file=sys.stderr)
    sys.stderr.flush()
    print(table)
    if any(suite.name == "contractions" for suite in suites):
        print()
        from ..bench.report import write_generality

        print(write_generality(result, out))
        print(f"wrote {out}/contractions.json and contractions.md", file=sys.stderr)
    return 1 if bad else 0


def _dump(suites, folder: Path, quick: bool) -> int:
    """Write every case's program and a cases.json index; returns 0."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    index: list[dict] = []
    for suite in suites:
        for case in suite.cases(quick):
            name = f"{case.suite}_{case.workload}_{len(index):03d}.ein"
            (folder / name).write_text(case.program, encoding="utf-8")
            index.append(
                {
                    "file": name,
                    "suite": case.suite,
                    "workload": case.workload,
                    "group": case.group,
                    "extents": case.extent_map,
                    "label": case.label,
                    "note": case.note,
                }
            )
    (folder / "cases.json").write_text(json.dumps(index, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(index)} programs and cases.json to {folder}", file=sys.stderr)
    return 0


def _configure(suite, args):
    """The suite drawing from ``--seed`` (and ``--count`` cases) where it draws cases."""
    if hasattr(suite, "with_seed"):
        suite = suite.with_seed(args.seed)
    if args.count is not None and hasattr(suite, "with_count"):
        suite = suite.with_count(args.count)
    return suite
