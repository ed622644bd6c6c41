"""float32 reductions on the CPU backend: within the 1e-5 tolerance of the float64
reference on hypothesis-generated einsum expressions, long sums more accurate than
plain accumulation, the accurate-sums rule's choices, and a planted fault (a
blocked sum's partials never added back) that the comparison catches."""

from __future__ import annotations

import dataclasses
import re
import string

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import einkern
from einkern.backends.cpu import blas
from einkern.backends.cpu.backend import CpuExecutable, load_or_compile
from einkern.backends.cpu.codegen import emit_c
from einkern.backends.cpu.compiler import cache_directory, toolchain
from einkern.backends.cpu.decide import default_schedule
from einkern.backends.cpu.schedule import (
    ACCURATE_TERMS,
    CpuSchedule,
    LoopSchedule,
    choose_accumulation,
)
from einkern.gpu.accumulation import sum_block
from einkern.reference import evaluate
from einkern.testing import random_arrays, random_scalars, relative_error

TOLERANCE = 1e-5


@pytest.fixture(autouse=True, scope="module")
def loops_only():
    """The loops' accumulation is under test: the ``blas`` rule off (BLAS's own
    accuracy: tests/test_cpu_blas.py)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(blas, "BLAS_ON_CPU", False)
        yield


def program(text: str, dtype: str = "float32", **sizes: int) -> einkern.Problem:
    return einkern.make_problem(einkern.load(f"program p\ndtype {dtype}\n{text}"), sizes)


DOT = "dims n = 1\ntensor x[n], y[n], s[]\ns[] = x[i] * y[i]"
GEMM = "dims n = 1, k = 1\ntensor A[n, k], B[k, n], C[n, n]\nC[i,j] = A[i,l] * B[l,j]"


def run(problem, schedule: CpuSchedule | None = None, source: str | None = None) -> float:
    """The largest relative error of the outputs against the float64 reference."""
    arrays = random_arrays(problem, 0)
    scalars = random_scalars(problem, 0)
    reference = evaluate(problem, arrays, scalars)
    if source is None:
        source = emit_c(problem, schedule)
    directory = cache_directory()
    path, function = load_or_compile(source, toolchain(directory), directory)
    work = {name: np.array(a, copy=True) for name, a in arrays.items()}
    for name in problem.program.outputs:
        tensor = problem.program.tensor(name)
        work.setdefault(name, np.zeros(problem.shape(name), dtype=tensor.dtype))
    CpuExecutable(problem, path, function).run(work, scalars)
    return max(relative_error(work[n], reference[n]) for n in problem.program.outputs)


def forced(problem, mode: str) -> CpuSchedule:
    statements = default_schedule(problem).statements
    return CpuSchedule(tuple(dataclasses.replace(s, accumulate=mode) for s in statements))


# ---- einsum expressions from hypothesis ------------------------------------------


@st.composite
def einsum_cases(draw, most_operands: int = 6, smallest: int = 1, space: int = 0):
    """Subscripts (repeated and summed indices), float32 operands of extents from
    ``smallest`` to 40; ``space``: the most iterations over all indices (0: any)."""
    letters = string.ascii_lowercase[: draw(st.integers(1, 6))]
    sizes = {c: draw(st.integers(smallest, 40)) for c in letters}
    while space and int(np.prod(list(sizes.values()), dtype=np.int64)) > space:
        largest = max(sizes, key=sizes.__getitem__)
        sizes[largest] //= 2
    operands = []
    for _ in range(draw(st.integers(1, most_operands))):
        rank = draw(st.integers(0, 3))
        operands.append("".join(draw(st.sampled_from(letters)) for _ in range(rank)))
    used = sorted(set("".join(operands)))
    output = draw(st.permutations(used).map(lambda p: "".join(p[: draw(st.integers(0, 3))])))
    subscripts = ",".join(operands) + "->" + output
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    arrays = [
        rng.uniform(0.5, 1.5, [sizes[c] for c in term]).astype(np.float32) for term in operands
    ]
    return subscripts, arrays


def einsum_error(subscripts: str, arrays, **options) -> float:
    result = einkern.einsum(subscripts, *arrays, backend="cpu", **options)
    wide = [a.astype(np.float64) for a in arrays]
    reference = np.einsum(subscripts, *wide, optimize=True)
    return relative_error(result, reference)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(einsum_cases())
def test_float32_einsum_is_within_the_tolerance(case):
    subscripts, arrays = case
    assert einsum_error(subscripts, arrays) <= TOLERANCE, subscripts


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(einsum_cases(most_operands=4, smallest=8, space=2_000_000))  # one kernel: every index
def test_float32_einsum_in_one_kernel_is_within_the_tolerance(case):
    subscripts, arrays = case
    assert einsum_error(subscripts, arrays, optimize=False) <= TOLERANCE, subscripts


def test_the_issues_six_operand_expression_is_within_the_tolerance():
    rng = np.random.default_rng(3)
    arrays = [rng.uniform(0.5, 1.5, (40, 40)).astype(np.float32) for _ in range(6)]
    assert einsum_error("ab,ab,cd,cd,ef,ef->", arrays) <= TOLERANCE


# ---- long sums ----------------------------------------------------------------------


def test_a_long_dot_product_is_accurate_where_plain_accumulation_is_not():
    problem = program(DOT, n=2**22)
    plain = run(problem, forced(problem, "plain"))
    assert plain > TOLERANCE  # what einkern did before: the reason for the rule
    assert run(problem) <= TOLERANCE / 10
    assert run(problem, forced(problem, "wide")) <= TOLERANCE / 10


def test_a_long_tiled_gemm_is_accurate_where_plain_accumulation_is_not():
    problem = program(GEMM, n=32, k=2**16)
    assert default_schedule(problem).statements[0].accumulate == "blocked"
    assert run(problem, forced(problem, "plain")) > TOLERANCE
    assert run(problem) <= TOLERANCE / 10


def test_buffered_schedules_with_inner_point_loops_accumulate_accurately():
    problem = program(GEMM, n=24, k=4096)
    tiled = LoopSchedule(("i", "j"), 1, (("i", 8), ("j", 8), ("l", 64)), inner=1)
    for mode in ("plain", "blocked", "wide"):
        schedule = CpuSchedule((dataclasses.replace(tiled, accumulate=mode),))
        assert run(problem, schedule) <= TOLERANCE, mode


def test_planted_fault_partials_never_added_back_is_caught():
    problem = program(DOT, n=100_000)
    source = emit_c(problem, forced(problem, "blocked"))
    broken, count = re.subn(r"\n *acc\d+ \+= part\d+;", "", source)
    assert count == 1
    assert run(problem, source=source) <= TOLERANCE
    assert run(problem, source=broken) > TOLERANCE


# ---- the rule -------------------------------------------------------------------------


def test_long_float64_sums_are_blocked_and_closer_to_numpy():
    rng = np.random.default_rng(1)
    x, y = rng.uniform(0.5, 1.5, 10**6), rng.uniform(0.5, 1.5, 10**6)
    exact = float(np.sum(x.astype(np.longdouble) * y.astype(np.longdouble)))
    problem = program(DOT, "float64", n=10**6)
    assert default_schedule(problem).statements[0].accumulate == "blocked"
    found = {}
    for mode in ("plain", "blocked"):
        source = emit_c(problem, forced(problem, mode))
        directory = cache_directory()
        path, function = load_or_compile(source, toolchain(directory), directory)
        s = np.zeros((), np.float64)
        CpuExecutable(problem, path, function).run({"x": x, "y": y, "s": s}, {})
        found[mode] = abs(float(s) - exact) / exact
    assert found["blocked"] <= min(found["plain"] / 5, 1e-14)  # NumPy's: 2.3e-16


def test_the_rule_leaves_float64_and_short_float32_sums_plain():
    for dtype in ("float64", "float32"):
        short = program(DOT, dtype, n=ACCURATE_TERMS - 1)
        assert default_schedule(short).statements[0].accumulate == "plain"
    assert default_schedule(program(DOT, "float64", n=2**13)).statements[0].accumulate == "plain"
    assert default_schedule(program(DOT, n=ACCURATE_TERMS)).statements[0].accumulate == "blocked"


def test_the_rule_picks_wide_for_a_buffer_without_reduction_tiles():
    problem = program(GEMM, n=24, k=4096)
    loops = LoopSchedule(("i", "j"), 1, (("i", 8), ("j", 8)), inner=1)
    choice, reason = choose_accumulation(problem, problem.program.statements[0], loops)
    assert choice == "wide" and "accurate-sums" in reason


def test_float64_code_is_unchanged_whatever_the_knob_says():
    problem = program(GEMM, "float64", n=24, k=4096)
    sources = {mode: emit_c(problem, forced(problem, mode)) for mode in ("plain", "wide")}
    assert sources["plain"] == sources["wide"] == emit_c(problem)


def test_sum_blocks_aim_at_the_square_root():
    assert sum_block([10**6]) == (0, 1024)
    assert sum_block([40, 40, 40, 40]) == (1, 2)  # 2.56e6 terms: blocks of 2 x 1600
    assert sum_block([1000, 8]) == (0, 8)  # 8000 terms: blocks of 8 rows of 8
    assert sum_block([3]) is None and sum_block([ACCURATE_TERMS - 1]) is None


def test_the_cpu_explanation_names_the_rule_and_the_choice():
    from einkern.backends.cpu.schedule import decide_loop_schedule, describe_loops

    problem = program(GEMM, n=64, k=4096)
    decision = decide_loop_schedule(problem, problem.program.statements[0])
    assert decision.reasons[-1].startswith("accurate-sums: float32 sums of up to 4,096 terms")
    assert "blocked accumulation" in describe_loops(decision.schedule)
