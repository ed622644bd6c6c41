"""Turn the per-case table of BENCHMARKS.md (an H100 run of `einkern bench all`,
default mappings) into calibration lines for einkern.gpu.model: one JSON line per
statement of each single-kernel case, {"case", "program", "sizes", "position",
"config", "measured"} (seconds; a case of several statements gets its measured
time split in proportion to the model's predictions, marked "shared": true).

    PYTHONPATH=src python scripts/gett_measurements.py BENCHMARKS.md > measurements.jsonl

The configurations are those of the rule table (gpu.decision.explain), which is
what the measured run used.
"""

from __future__ import annotations

import json
import sys

import einkern
from einkern.bench.suites import builtin_suites
from einkern.gpu.decision import explain
from einkern.gpu.model import predicted_time
from einkern.gpu.space import config_to_mapping
from einkern.ir.task import statement_task


def bench_cases() -> dict[tuple[str, str, str], list[tuple[str, str, dict[str, int]]]]:
    """(suite, workload, size text) -> [(key, program, extents)] of the full mode."""
    found: dict = {}
    for suite in builtin_suites():
        for case in suite().cases(False):
            suite_name, workload, _ = case.key.split("/", 2)
            extents = dict(case.extents)
            for size in _size_texts(extents):
                found.setdefault((suite_name, workload, size), []).append(
                    (case.key, case.program, extents)
                )
    return found


def _size_texts(extents: dict[str, int]) -> list[str]:
    texts = [",".join(f"{k}={v}" for k, v in extents.items())]
    if {"m", "n", "k"} <= set(extents) and len(set(extents.values())) == 1:
        texts.append(f"n={extents['n']}")
    texts += [f"{k}={v}" for k, v in extents.items()]
    return texts


def rows(path: str):
    for line in open(path, encoding="utf-8"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 7 or cells[0] in ("suite", "---"):
            continue
        try:
            yield cells[0], cells[1], cells[2], float(cells[4]) * 1e-3
        except ValueError:
            continue


def main(path: str) -> None:
    cases = bench_cases()
    used: dict[tuple, int] = {}
    for suite, workload, size, seconds in rows(path):
        matches = cases.get((suite, workload, size))
        if not matches:
            continue
        number = used.get((suite, workload, size), 0)  # repeated rows: the next extents
        used[(suite, workload, size)] = number + 1
        if number >= len(matches):
            continue
        key, program_text, extents = matches[number]
        problem = einkern.make_problem(einkern.load(program_text), extents)
        statements = len(problem.program.statements)
        tasks = [statement_task(problem, p) for p in range(statements)]
        configs = [explain(t).config for t in tasks]
        predicted = [
            predicted_time(t, config_to_mapping(t, c)) for t, c in zip(tasks, configs, strict=True)
        ]
        total = sum(predicted)
        for position, (config, guess) in enumerate(zip(configs, predicted, strict=True)):
            share = guess / total if total > 0 else 1 / statements
            print(
                json.dumps(
                    {
                        "case": key,
                        "program": program_text,
                        "sizes": extents,
                        "position": position,
                        "config": config.to_json(),
                        "measured": seconds * share,
                        "shared": statements > 1,
                    }
                )
            )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "BENCHMARKS.md")
