"""The CPU tuning target: its space, tiled loop nests against the reference, the cost
model, measuring, and schedules built from chosen configurations."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest
from conftest import problem_of

import einkern
from einkern.backends.cpu import CpuBackend, CpuSchedule, LoopSchedule, default_schedule
from einkern.backends.cpu.codegen import emit_c
from einkern.backends.cpu.schedule import check_schedule, schedule_violation
from einkern.ir.task import statement_task
from einkern.reference import evaluate
from einkern.testing import TOLERANCE, random_arrays, random_scalars, relative_error
from einkern.tuning.cpu_target import CpuTarget, loop_schedule, schedule_from_configs
from einkern.tuning.search import space_for

pytestmark = pytest.mark.skipif(not CpuBackend().available(), reason="no C compiler")

EXAMPLES = Path(__file__).parent.parent / "examples"

GEMM = """
program gemm
dims m = 13, n = 17, k = 11
tensor A[m, k], B[k, n], C[m, n]
scalar alpha = 1.5, beta = 0.5
C[i,j] = alpha * A[i,l] * B[l,j] + beta * C[i,j]
"""

TWO_SUMS = """
program two
dims n = 6, p = 9
tensor A[n, p, n] column
tensor B[p, p] float32
tensor R[n, n, p]
R[i,j,q] = A[i,m,j] * B[m,q] - A[j,m,i] * B[q,m] + sqrt(B[q,q] * B[q,q])
"""


def check(problem, schedule: CpuSchedule) -> None:
    """Run under ``schedule`` and compare every output with the reference."""
    inputs = random_arrays(problem, 3)
    scalars = random_scalars(problem, 3)
    arrays = {name: array.copy(order="K") for name, array in inputs.items()}
    for tensor in problem.program.tensors:
        if tensor.name not in arrays:
            order = "C" if tensor.layout == "row" else "F"
            arrays[tensor.name] = np.zeros(problem.shape(tensor.name), tensor.dtype, order=order)
    expected = evaluate(problem, inputs, scalars)
    CpuBackend().build(problem, schedule).run(arrays, scalars)
    dtypes = {t.dtype for t in problem.program.tensors}
    tolerance = TOLERANCE["float32" if "float32" in dtypes else "float64"]
    for name in problem.program.outputs:
        error = relative_error(arrays[name], expected[name])
        assert error <= tolerance, (name, schedule, error)


def test_default_config_is_the_default_schedule_and_in_the_space():
    target = CpuTarget()
    for path in sorted(EXAMPLES.glob("*.ein")):
        problem = einkern.make_problem(einkern.load(path), {})
        configs = [
            target.default_config(statement_task(problem, p))
            for p in range(len(problem.program.statements))
        ]
        assert schedule_from_configs(problem, configs) == default_schedule(problem), path.name
        for position, config in enumerate(configs):
            task = statement_task(problem, position)
            assert config in space_for(target, task), (path.name, config)


def test_every_variant_of_the_space_is_a_valid_schedule():
    target = CpuTarget()
    problem = problem_of(GEMM, m=40, n=24, k=20)
    space = space_for(target, statement_task(problem, 0))
    assert 50 < space.size() < space.raw_size()
    for config in space:
        loops = loop_schedule(config)
        statement = problem.program.statements[0]
        assert schedule_violation(problem, statement, loops) is None
        check_schedule(problem, CpuSchedule((loops,)))
    sample = random.Random(0).sample(list(space), 5)
    for config in sample:
        assert "statement_0" in emit_c(problem, schedule_from_configs(problem, [config]))


def test_violation_rejects_bad_combinations():
    target = CpuTarget()
    problem = problem_of(GEMM, m=40, n=24, k=20)
    good = {"order": ["i", "j"], "collapse": 2, "tile_i": 0, "tile_j": 0, "tile_l": 0, "inner": 0}
    assert target.violation(statement_task(problem, 0), good) is None
    bad = [
        {**good, "order": ["i"]},  # not a permutation
        {**good, "order": "ij"},  # malformed
        {**good, "collapse": 3},  # more loops than the nest has
        {**good, "tile_l": 8},  # buffered: only tile loops may be collapsed
        {**good, "tile_q": 8},  # no such index
        {key: value for key, value in good.items() if key != "collapse"},
    ]
    for config in bad:
        assert target.violation(statement_task(problem, 0), config) is not None, config
    large = problem_of(GEMM, m=100, n=100, k=100)
    whole = {**good, "collapse": 0, "tile_l": 8}  # a 100 x 100 sum buffer per thread
    assert "exceed" in target.violation(statement_task(large, 0), whole)
    tiled = {**good, "collapse": 2, "tile_i": 8, "tile_j": 8, "tile_l": 4, "inner": 1}
    assert target.violation(statement_task(problem, 0), tiled) is None
    no_sum = problem_of("dims n = 64\ntensor x[n], y[n]\ny[i] = 2 * x[i]")
    assert "needs a sum" in schedule_violation(
        no_sum, no_sum.program.statements[0], LoopSchedule(("i",), 0, (), 1)
    )


@pytest.mark.parametrize("seed", range(4))
def test_tiled_variants_match_the_reference(seed):
    """Tiles that do not divide the extents, buffered sums, inner loops, collapse."""
    target = CpuTarget()
    rng = random.Random(seed)
    for text, sizes in ((GEMM, {}), (TWO_SUMS, {})):
        problem = problem_of(text, **sizes)
        configs = [
            space_for(target, statement_task(problem, p)).sample(rng)
            for p in range(len(problem.program.statements))
        ]
        check(problem, schedule_from_configs(problem, configs))


def test_handwritten_tiles_on_examples():
    problem = einkern.make_problem(einkern.load(EXAMPLES / "norms.ein"), {"nb": 37, "d": 19})
    schedule = CpuSchedule(
        (
            LoopSchedule(("b",), 1, (("b", 8), ("i", 4)), 0),
            LoopSchedule(("b", "i"), 2, (("b", 5), ("i", 7)), 0),
        )
    )
    check(problem, schedule)
    riemann = einkern.make_problem(einkern.load(EXAMPLES / "riemann.ein"), {"n": 7})
    loops = LoopSchedule(("i", "j", "k", "l"), 1, (("i", 4), ("m", 3), ("l", 2)), 2)
    source = emit_c(riemann, CpuSchedule((loops,)))
    assert "sumbuf1" in source  # the two sums over m get a buffer each
    check(riemann, CpuSchedule((loops,)))


def test_measure_checks_and_times_a_variant():
    target = CpuTarget()
    problem = problem_of(GEMM, m=24, n=24, k=24)
    config = {
        "order": ["i", "j"],
        "collapse": 1,
        "tile_i": 8,
        "tile_j": 16,
        "tile_l": 4,
        "inner": 1,
    }
    handle = target.compile(statement_task(problem, 0), config)
    assert Path(handle).exists() and target.compile(statement_task(problem, 0), config) == handle
    timing = target.measure(statement_task(problem, 0), config, handle, 3, 1)
    assert len(timing.times) >= 10 and timing.median > 0
    assert timing.max_relative_error <= 1e-12
    keys = target.device_key()
    assert set(keys) == {"cpu", "compiler", "flags", "threads"}


def test_model_prefers_reuse_and_stays_finite():
    target = CpuTarget()
    problem = problem_of(GEMM, m=512, n=512, k=512)
    task = statement_task(problem, 0)
    space = space_for(target, task)
    costs = {str(c): target.model_cost(task, c) for c in space}
    assert all(math.isfinite(c) and c > 0 for c in costs.values())
    default = target.model_cost(task, target.default_config(task))
    assert min(costs.values()) < default / 2
    blocked = {
        "order": ["i", "j"],
        "collapse": 2,
        "tile_i": 32,
        "tile_j": 64,
        "tile_l": 64,
        "inner": 1,
    }
    assert target.model_cost(task, blocked) < default


def test_schedule_from_configs_rejects_bad_input():
    problem = problem_of(GEMM)
    with pytest.raises(ValueError, match="configurations for"):
        schedule_from_configs(problem, [])
    with pytest.raises(ValueError, match="permutation"):
        schedule_from_configs(problem, [{"order": ["j"], "collapse": 0}])
    assert schedule_from_configs(problem, [None]) == default_schedule(problem)


def test_tuned_build_argument_for_the_cpu_backend(tmp_path):
    from einkern.tuning.policy import tuned_build_argument

    problem = problem_of(GEMM, m=24, n=24, k=24)
    assert tuned_build_argument("cpu", problem, False) == (None, ())
    schedule, sources = tuned_build_argument("cpu", problem, "model")
    assert sources == ("model",) and isinstance(schedule, CpuSchedule)
    assert schedule != default_schedule(problem)
    check(problem, schedule)
    missing = tmp_path / "none.sqlite"
    schedule, sources = tuned_build_argument("cpu", problem, True, missing)
    assert sources == ("default mapping",) and schedule == default_schedule(problem)
    assert not missing.exists()
