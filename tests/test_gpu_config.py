"""Typed CUDA configurations, the decision's rule table, and the device limits
that the mapping check reads."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

import einkern
from einkern.gpu.config import CudaConfig
from einkern.gpu.decision import decide, default_config
from einkern.gpu.device import H100
from einkern.gpu.lower import check_mapping
from einkern.ir.task import statement_task


def test_check_mapping_takes_its_limits_from_the_device():
    """Threads per block, resident blocks and threads per SM, and the register tile
    cap come from the DeviceLimits object, not from constants."""
    problem = einkern.make_problem(einkern.load("examples/gemm.ein"), {"m": 64, "n": 64, "k": 64})
    task = statement_task(problem, 0)
    mapping = decide(task)
    assert check_mapping(task, mapping, limits=H100) == []
    small = replace(H100, max_threads_per_block=mapping.threads // 2)
    assert any(f"limit {mapping.threads // 2}" in p for p in check_mapping(task, mapping,
                                                                          limits=small))
    few_blocks = replace(H100, max_blocks_per_sm=1)
    found = check_mapping(task, replace(mapping, min_blocks=2), limits=few_blocks)
    assert any("0 to 1 blocks per SM" in p for p in found)
    narrow = replace(H100, max_threads_per_sm=mapping.threads)
    found = check_mapping(task, replace(mapping, min_blocks=2), limits=narrow)
    assert any(f"exceed {mapping.threads} threads per SM" in p for p in found)
    capped = replace(H100, max_register_tile=mapping.register_tile - 1)
    found = check_mapping(task, mapping, limits=capped)
    assert any(f"(max {mapping.register_tile - 1})" in p for p in found)


# ---- the decision's defaults are today's --------------------------------------

DECISIONS = Path(__file__).parent / "data" / "default_decisions.json"


def _bench_programs() -> dict[str, tuple[str, dict[str, int]]]:
    from einkern.bench.suites import builtin_suites

    found = {}
    for suite in builtin_suites():
        for quick in (True, False):
            for case in suite().cases(quick):
                found[case.key] = (case.program, dict(case.extents))
    return found


def _recorded_cases():
    data = json.loads(DECISIONS.read_text())
    return [pytest.param(case, id=case["case"]) for case in data["cases"]]


@pytest.fixture(scope="module")
def bench_programs():
    return _bench_programs()


@pytest.mark.parametrize("case", _recorded_cases())
def test_default_configurations_are_those_recorded_before_the_rule_table(case, bench_programs):
    """Every example (declared sizes and every extent 3, 12, 33, 100) and every bench
    case: the rule table chooses the configuration the one-function decision of
    d1db560 chose (tests/data/default_decisions.json, recorded by running it)."""
    if "example" in case:
        program = einkern.load(Path("examples") / case["example"])
        sizes = case["sizes"]
    else:
        text, sizes = bench_programs[case["bench"]]
        program = einkern.load(text)
    problem = einkern.make_problem(program, sizes)
    assert len(case["decisions"]) == len(problem.program.statements)
    for position, expected in enumerate(case["decisions"]):
        config, reasons = default_config(statement_task(problem, position), H100)
        assert config.to_json() == expected["config"], (case["case"], position)
        assert CudaConfig.from_json(expected["config"]) == config
        assert reasons and all(": " in reason for reason in reasons)
