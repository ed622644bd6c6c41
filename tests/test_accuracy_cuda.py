"""float32 reductions of generated CUDA kernels, run by the CPU emulator: within
the 1e-5 tolerance of the float64 reference on hypothesis-generated einsum
programs, long sums more accurate than plain accumulation, the accurate-sums
rule's choices, the mapping field's JSON form, and planted faults (a blocked
group's partials never added back, or never zeroed) that the comparison catches."""

from __future__ import annotations

import dataclasses
import json
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import einkern
from einkern.backends.verify import verify
from einkern.gpu import kir
from einkern.gpu.accumulation import ACCURATE_TERMS, PLAIN_LIMIT_TERMS, accurate_sums
from einkern.gpu.decision import decide
from einkern.gpu.lower import check_mapping, lower
from einkern.gpu.mapping import Mapping
from einkern.ir.task import statement_task, tasks_of

TOLERANCE = 1e-5
GEMM = "dims n = 1, k = 1\ntensor A[n, k], B[k, n], C[n, n]\nC[i,j] = A[i,l] * B[l,j]"
RECTANGULAR = "dims m = 1, n = 1, k = 1\ntensor A[m, k], B[k, n], C[m, n]\nC[i,j] = A[i,l] * B[l,j]"
GEMV = "dims m = 1, n = 1\ntensor A[m, n], x[n], y[m]\ny[i] = A[i,k] * x[k]"


def program(text: str, dtype: str = "float32", **sizes: int):
    return einkern.make_problem(einkern.load(f"program p\ndtype {dtype}\n{text}"), sizes)


def decided(problem, mode: str | None = None) -> dict[int, Mapping]:
    mappings = {task.position: decide(task) for task in tasks_of(problem)}
    if mode is not None:
        mappings = {p: dataclasses.replace(m, accumulate=mode) for p, m in mappings.items()}
    return mappings


def proposed(problem, mode: str | None = None) -> dict[int, Mapping]:
    """:func:`decided` for the rule table's proposal (the cost model may prefer
    threads along a long sum instead, whose tree of partial sums is accurate by
    itself: tests/test_gett.py)."""
    from einkern.gpu.decision import explain
    from einkern.gpu.space import config_to_mapping

    mappings = {}
    for task in tasks_of(problem):
        decision = explain(task)
        mappings[task.position] = config_to_mapping(task, decision.config, decision.reasons)
    if mode is not None:
        mappings = {p: dataclasses.replace(m, accumulate=mode) for p, m in mappings.items()}
    return mappings


def error(problem, mappings, kernels=None) -> float:
    result = verify(problem, mappings, seed=1, kernels=kernels)
    assert result.bad_accesses == 0, result.errors[:3]
    return result.max_relative_error


# ---- einsum programs from hypothesis ------------------------------------------------


@st.composite
def einsum_programs(draw):
    """An einsum as a one-statement float32 program: up to 4 operands, repeated and
    summed indices, extents up to 40 (fewer than 200,000 iterations in all)."""
    letters = string.ascii_lowercase[: draw(st.integers(1, 5))]
    sizes = {c: draw(st.integers(1, 40)) for c in letters}
    while _space(sizes) > 200_000:
        largest = max(sizes, key=sizes.__getitem__)
        sizes[largest] //= 2
    operands = []
    for _ in range(draw(st.integers(1, 4))):
        rank = draw(st.integers(1, 3))
        operands.append("".join(draw(st.sampled_from(letters)) for _ in range(rank)))
    used = sorted(set("".join(operands)))
    output = "".join(draw(st.permutations(used))[: draw(st.integers(0, 2))])
    dims = ", ".join(f"n{c} = {sizes[c]}" for c in used)
    tensors = [f"T{n}[{', '.join('n' + c for c in term)}]" for n, term in enumerate(operands)]
    tensors.append(f"O[{', '.join('n' + c for c in output)}]")
    reads = " * ".join(f"T{n}[{','.join(term)}]" for n, term in enumerate(operands))
    text = f"dims {dims}\ntensor {', '.join(tensors)}\nO[{','.join(output)}] = {reads}"
    return program(text)


def _space(sizes: dict[str, int]) -> int:
    total = 1
    for size in sizes.values():
        total *= size
    return total


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(einsum_programs())
def test_float32_einsum_kernels_are_within_the_tolerance(problem):
    statement = problem.program.statements[0]
    for mode in (None, "blocked", "wide"):  # the rule's choice, then each forced
        assert error(problem, decided(problem, mode)) <= TOLERANCE, (mode, statement)


# ---- long sums ------------------------------------------------------------------------


def test_a_long_staged_gemm_is_blocked_and_accurate_where_plain_is_not():
    problem = program(GEMM, n=16, k=2**17)
    mappings = proposed(problem)
    assert mappings[0].staged and mappings[0].accumulate == "blocked"
    assert error(problem, proposed(problem, "plain")) > TOLERANCE
    assert error(problem, mappings) <= TOLERANCE / 10
    assert error(problem, proposed(problem, "wide")) <= TOLERANCE / 10


def test_a_long_unstaged_reduction_is_wide_and_accurate_where_plain_is_not():
    problem = program(GEMV, m=8, n=2**20)
    mappings = proposed(problem)
    assert not mappings[0].staged and mappings[0].accumulate == "wide"
    assert error(problem, proposed(problem, "plain")) > TOLERANCE
    assert error(problem, mappings) <= TOLERANCE / 10
    assert error(problem, proposed(problem, "blocked")) <= TOLERANCE / 10  # split loops


def test_blocked_serial_groups_split_their_loops_where_sum_block_says():
    """Two reduction loops of 1,000 (blocks of two rows: the outer loop tiled by 2)
    and one loop of 1,000 (tiles of 32, the last one ragged: 8 terms)."""
    for text, sizes in (
        ("dims n = 1, k = 1\ntensor A[n, k, k], y[n]\ny[i] = A[i,k,l]", {"n": 3, "k": 1000}),
        ("dims n = 1, k = 1\ntensor A[n, k], y[n]\ny[i] = A[i,k]", {"n": 5, "k": 1000}),
    ):
        problem = program(text, **sizes)
        # the rule table's serial point (the model's default may be a lanes point,
        # whose accumulators split the sum by themselves)
        mappings = proposed(problem, "blocked")
        assert not mappings[0].staged
        source = lower(statement_task(problem, 0), mappings[0])
        assert "part0" in {var.name for var in source.thread_vars}
        assert error(problem, mappings) <= TOLERANCE / 10
        assert error(problem, decided(problem, "blocked")) <= TOLERANCE / 10


def _drop_blocked_section(kernel: kir.Kernel, which: int) -> kir.Kernel:
    """The kernel without the first (``which`` 0: zeroing) or last (-1: adding back)
    section of its blocked chunk loop."""
    body = []
    for section in kernel.body:
        if isinstance(section, kir.Uniform):
            kept = list(section.body)
            kept[which] = kir.PerThread(())
            section = dataclasses.replace(section, body=tuple(kept))
        body.append(section)
    return dataclasses.replace(kernel, body=tuple(body))


def test_planted_faults_in_blocked_accumulation_are_caught():
    problem = program(GEMM, n=16, k=512)
    # the rule table's serial point: the model's default is a lanes point since
    # sums of 64 terms get split points, and its sum is split across threads
    mappings = proposed(problem, "blocked")
    kernel = lower(statement_task(problem, 0), mappings[0])
    assert error(problem, mappings, [kernel]) <= TOLERANCE
    for which in (0, -1):  # partials never zeroed; partials never added back
        broken = _drop_blocked_section(kernel, which)
        assert error(problem, mappings, [broken]) > TOLERANCE, which


# ---- the rule and the mapping field ----------------------------------------------------


def test_the_rule_leaves_float64_and_short_float32_reductions_plain():
    long64 = program(GEMM, "float64", n=64, k=4096)
    mapping = decide(statement_task(long64, 0))
    assert mapping.accumulate == "plain"
    assert not any("accurate-sums" in reason for reason in mapping.reasons)
    short = program(GEMM, n=64, k=ACCURATE_TERMS - 1)
    task = statement_task(short, 0)
    assert accurate_sums(task, decide(task))[0] == "plain"


def test_the_rule_explains_itself():
    task = statement_task(program(GEMM, n=64, k=PLAIN_LIMIT_TERMS), 0)
    mapping = proposed(task.problem)[0]
    assert any(reason.startswith("accurate-sums: ") for reason in mapping.reasons)
    assert "blocked accumulation" in mapping.describe()


def test_the_mapping_field_is_absent_from_json_when_plain_and_round_trips():
    task = statement_task(program(GEMM, n=64, k=PLAIN_LIMIT_TERMS), 0)
    blocked = decide(task)
    plain = dataclasses.replace(blocked, accumulate="plain")
    assert "accumulate" not in json.loads(plain.to_json())
    assert Mapping.from_json(plain.to_json()) == plain
    assert Mapping.from_json(blocked.to_json()) == blocked
    wrong = dataclasses.replace(blocked, accumulate="kahan")
    assert any("accumulate 'kahan'" in p for p in check_mapping(task, wrong))


def test_shorter_sums_keep_plain_accumulators_when_more_would_cost_resident_blocks():
    """SGEMM 1024 (1,024 terms; a register tile of 8): partials would cost a resident
    block per SM by the estimate, and plain is within the tolerance there."""
    task = statement_task(program(GEMM, n=1024, k=1024), 0)
    mapping = decide(task)
    assert mapping.staged and mapping.accumulate == "plain"
    assert any("cost resident blocks" in reason for reason in mapping.reasons)


def test_blocked_and_wide_are_exact_on_random_staged_mappings_with_ragged_chunks():
    """Random staged mappings of the space (prefetch or not, ragged last chunks, runs
    of chunks that do not divide their count), each accumulation forced: no bad
    access, within the tolerance."""
    import random

    from einkern.gpu.config import CudaConfig
    from einkern.gpu.space import config_to_mapping, parameters, violation

    rng = random.Random(15)
    checked = 0
    for m, n, k in ((33, 17, 300), (16, 40, 1000), (8, 9, 129)):
        problem = program(RECTANGULAR, m=m, n=n, k=k)
        task = statement_task(problem, 0)
        space = parameters(task)
        found = 0
        for _ in range(3000):
            config = CudaConfig.from_values({name: rng.choice(v) for name, v in space.items()})
            if not config.staging.staged or violation(task, config) is not None:
                continue
            mapping = config_to_mapping(task, config)
            for mode in ("plain", "blocked", "wide"):
                forced = {0: dataclasses.replace(mapping, accumulate=mode)}
                assert error(problem, forced) <= TOLERANCE, (mode, mapping.to_json())
            found += 1
            if found == 2:
                break
        checked += found
    assert checked >= 4
