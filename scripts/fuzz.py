#!/usr/bin/env python3
"""Long fuzzing runs: mutated examples and generated programs through check and emit.

    PYTHONPATH=src python scripts/fuzz.py --count 100000
    PYTHONPATH=src python scripts/fuzz.py --kind grammar --count 20000 --start 1000000

Every input must either succeed or be refused with an ``einkern.errors`` error,
within ``--timeout`` seconds (a hang is interrupted and counted).  Crashing and
hanging inputs are written to ``--save`` (default ``fuzz-failures/``) with the
message; the exit code is 1 when there were any.  tests/test_fuzz.py runs the
same harness (tests/fuzzing.py) briefly in CI.
"""

from __future__ import annotations

import argparse
import collections
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fuzzing import Crash, mutate, program_text, run_case  # noqa: E402


class Hang(BaseException):
    """Raised by the alarm when one input runs past the timeout."""


def _alarm(signum, frame):  # noqa: ARG001 - signal handler signature
    raise Hang()


def case(kind: str, seed: int) -> tuple[str, str]:
    """Input number ``seed`` of ``kind`` (``mutation`` or ``grammar``): (text, suffix)."""
    if kind == "mutation":
        return mutate(seed)
    return program_text(random.Random(seed).choice), ".ein"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000, help="inputs to run")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument(
        "--kind",
        choices=["mutation", "grammar", "both"],
        default="both",
        help="both: alternate mutated examples and generated programs",
    )
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per input")
    parser.add_argument("--no-emit", action="store_true", help="check only, no emit")
    parser.add_argument("--save", default="fuzz-failures", help="where failing inputs go")
    parser.add_argument("--every", type=int, default=1000, help="progress line every N")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGALRM, _alarm)
    outcomes: collections.Counter[str] = collections.Counter()
    failures: list[tuple[int, str, str]] = []
    slowest = (0.0, -1)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        for number in range(args.count):
            seed = args.start + number
            kind = args.kind if args.kind != "both" else ("mutation", "grammar")[seed % 2]
            text, suffix = case(kind, seed)
            began = time.perf_counter()
            signal.setitimer(signal.ITIMER_REAL, args.timeout)
            try:
                outcome = run_case(text, suffix, emit=not args.no_emit, workdir=workdir)
                outcomes["ok" if outcome.error is None else "refused"] += 1
            except Crash as crash:
                hang = isinstance(crash.__cause__, Hang)
                outcomes["hang" if hang else "crash"] += 1
                failures.append((seed, kind, "hang" if hang else str(crash)))
                _save(Path(args.save), seed, kind, suffix, text, failures[-1][2])
            except Hang:
                outcomes["hang"] += 1
                failures.append((seed, kind, "hang"))
                _save(Path(args.save), seed, kind, suffix, text, "hang")
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            slowest = max(slowest, (time.perf_counter() - began, seed))
            if (number + 1) % args.every == 0:
                print(
                    f"{number + 1} inputs, {dict(outcomes)}, {time.perf_counter() - start:.0f} s",
                    flush=True,
                )
    print(
        f"done: {args.count} inputs (seeds {args.start}..{args.start + args.count - 1}, "
        f"{args.kind}) in {time.perf_counter() - start:.0f} s: {dict(outcomes)}; "
        f"slowest {slowest[0]:.2f} s (seed {slowest[1]})"
    )
    for seed, kind, message in failures[:20]:
        print(f"  seed {seed} ({kind}): {message}")
    return 1 if failures else 0


def _save(directory: Path, seed: int, kind: str, suffix: str, text: str, message: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{kind}-{seed}{suffix}").write_text(
        text, encoding="utf-8", errors="surrogatepass"
    )
    (directory / f"{kind}-{seed}.txt").write_text(message + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
