"""GPU mappings without a GPU: the decision algorithm, the space, JSON, lowering checks."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

import einkern
from einkern.gpu.config import NO_STAGING, CudaConfig
from einkern.gpu.decision import decide, default_config, explain
from einkern.gpu.device import H100
from einkern.gpu.lower import check_mapping, lower
from einkern.gpu.mapping import Mapping, MappingError, ParallelTile
from einkern.gpu.plan import plan_task
from einkern.gpu.space import config_to_mapping, parameters, violation
from einkern.ir.task import statement_task

CASES = [
    ("examples/gemm.ein", {"m": 256, "n": 256, "k": 256}),
    ("examples/gemm.ein", {"m": 97, "n": 61, "k": 33}),
    ("examples/gemm_alpha_beta.ein", {"m": 64, "n": 48, "k": 40}),
    ("examples/sd_t_d1_1.ein", {"T": 16}),
    ("examples/sd_t_d1_1.ein", {"T": 5}),
    ("examples/local_grad3.ein", {"p": 12, "nelt": 100}),
    ("examples/riemann.ein", {"n": 7}),
    ("examples/treduda_sum.ein", {"n": 33}),
    ("examples/norms.ein", {"nb": 100, "d": 17}),
]


def problems():
    for path, extents in CASES:
        problem = einkern.make_problem(einkern.load(path), extents)
        for position in range(len(problem.program.statements)):
            yield problem, position


@pytest.mark.parametrize("problem, position", list(problems()))
def test_default_mapping_is_valid_and_explained(problem, position):
    config, reasons = default_config(statement_task(problem, position))
    assert violation(statement_task(problem, position), config) is None
    mapping = decide(statement_task(problem, position))
    assert check_mapping(statement_task(problem, position), mapping) == []
    assert mapping.reasons and "threadIdx.x" in mapping.reasons[0]
    kernel = lower(statement_task(problem, position), mapping)
    assert kernel.threads == mapping.threads <= 1024


def test_coalescing_first_puts_the_contiguous_output_index_on_threadidx_x():
    problem = einkern.make_problem(einkern.load("examples/sd_t_d1_1.ein"), {"T": 16})
    assert decide(statement_task(problem, 0)).parallel[0].index == "h3"  # column-major t3
    gemm = einkern.make_problem(einkern.load("examples/gemm.ein"), {"m": 512, "n": 512, "k": 512})
    mapping = decide(statement_task(gemm, 0))
    assert mapping.parallel[0].index == "j" and mapping.staged and mapping.prefetch


def test_mapping_json_round_trip():
    problem = einkern.make_problem(einkern.load("examples/gemm.ein"), {"m": 128, "n": 128, "k": 64})
    mapping = decide(statement_task(problem, 0))
    again = Mapping.from_json(mapping.to_json())
    assert again == mapping
    with pytest.raises(MappingError):
        Mapping.from_json('{"strategy": "x"}')


def test_invalid_mappings_are_reported():
    problem = einkern.make_problem(einkern.load("examples/gemm.ein"), {"m": 100, "n": 100, "k": 64})
    bad = Mapping("direct", (ParallelTile("j", 48, 32), ParallelTile("q", 1, 1)), boundary="exact")
    found = check_mapping(statement_task(problem, 0), bad)
    assert any("not a multiple" in p for p in found)
    assert any("'q'" in p for p in found)
    assert any("exact" in p for p in found)
    with pytest.raises(MappingError):
        lower(statement_task(problem, 0), bad)


@pytest.mark.parametrize("path, extents", CASES[:6])
def test_random_valid_configs_lower(path, extents):
    problem = einkern.make_problem(einkern.load(path), extents)
    rng = random.Random(7)
    params = parameters(statement_task(problem, 0))
    found = 0
    for _ in range(3000):
        config = CudaConfig.from_values(
            {name: rng.choice(values) for name, values in params.items()}
        )
        if violation(statement_task(problem, 0), config) is None:
            mapping = config_to_mapping(statement_task(problem, 0), config)
            optin = H100.shared_per_block_optin  # the space's limit (dynamic shared memory)
            assert check_mapping(statement_task(problem, 0), mapping, max_shared_bytes=optin) == []
            plan = plan_task(statement_task(problem, 0), mapping, "k", max_shared_bytes=optin)
            assert plan.launches[-1 if mapping.boundary != "pad" else -2].kernel.name == "k"
            found += 1
        if found >= 15:
            break
    assert found >= 5


def test_cuda_tuning_target_without_a_gpu():
    from einkern.tuning.cuda_target import CudaTarget
    from einkern.tuning.target import TuningTarget

    target = CudaTarget()
    assert isinstance(target, TuningTarget)
    problem = einkern.make_problem(einkern.load("examples/gemm.ein"), {"m": 256, "n": 192, "k": 64})
    problem_task = statement_task(problem, 0)
    names = [p.name for p in target.parameters(problem_task)]
    assert {"x", "y", "block", "regs", "staging", "boundary"} <= set(names)
    config = target.default_config(problem_task)
    assert target.violation(problem_task, config) is None
    assert target.violation(problem_task, replace(config, block=(64, 64))) is not None
    assert target.violation(problem_task, replace(config, x="q")) is not None
    assert target.violation(problem_task, {"x": "j"}) is not None  # not a CudaConfig
    with pytest.raises(ValueError, match="index names"):
        CudaConfig.from_json({"x": 3})
    compiled = target.compile(problem_task, config)
    [launch] = compiled.launches
    assert compiled.cubin and launch.block[0] == decide(statement_task(problem, 0)).threads
    assert launch.buffers == ("A", "B", "C") and not compiled.temporaries
    assert dict(compiled.resources)["spill_stores"] == 0
    ragged = einkern.make_problem(problem.program, {"m": 250, "n": 190, "k": 63})
    ragged_task = statement_task(ragged, 0)
    padded = replace(target.default_config(ragged_task), boundary="pad")
    assert target.violation(ragged_task, padded) is None
    assert target.violation(problem_task, padded) is not None  # tiles divide: exact only
    plan = target.compile(ragged_task, padded)
    assert [launch.name for launch in plan.launches] == [
        "ek_tune_s0_pad_A",
        "ek_tune_s0_pad_B",
        "ek_tune_s0",
        "ek_tune_s0_crop_C",
    ]
    assert len(plan.temporaries) == 3
    cost = target.model_cost(problem_task, config)
    direct = replace(config, regs=(1, 1, 1), assign="cyclic", staging=NO_STAGING, unroll=1)
    assert 0 < cost < float("inf")
    assert target.violation(problem_task, direct) is None


def test_a_mapping_in_json_form_is_taken_as_a_mapping_not_a_configuration():
    import json

    from einkern.backends.cuda.generate import generate
    from einkern.backends.cuda.samples import gemm
    from einkern.gpu.decision import decide

    problem = gemm(64, 48, 32)
    mapping = decide(statement_task(problem, 0))
    as_dict = json.loads(mapping.to_json())
    assert generate(problem, {0: as_dict}).text == generate(problem, {0: mapping}).text


def test_a_mapping_as_json_text_or_a_bad_file_gives_typed_errors(tmp_path):
    """``to_json()``'s text is taken as the mapping (it was read as a file name and
    raised OSError, name too long); unreadable files and bad JSON are typed errors."""
    from einkern.backends.cuda.generate import generate
    from einkern.backends.cuda.samples import gemm
    from einkern.errors import EinkernError, UsageError
    from einkern.gpu.decision import decide

    problem = gemm(64, 48, 32)
    mapping = decide(statement_task(problem, 0))
    expected = generate(problem, {0: mapping}).text
    assert generate(problem, {0: mapping.to_json()}).text == expected
    saved = tmp_path / "m.json"
    saved.write_text(mapping.to_json())
    assert generate(problem, {0: str(saved)}).text == expected
    with pytest.raises(UsageError, match="no such mapping file"):
        generate(problem, {0: str(tmp_path / "absent.json")})
    with pytest.raises(UsageError, match="cannot read mapping file"):
        generate(problem, {0: str(tmp_path)})  # a directory
    bad = tmp_path / "bad.json"
    bad.write_text('{"parallel": ')
    with pytest.raises(MappingError, match="not JSON"):
        generate(problem, {0: str(bad)})
    bad.write_text("[1, 2]")
    with pytest.raises(MappingError, match="not a mapping"):
        generate(problem, {0: str(bad)})
    with pytest.raises(EinkernError):
        generate(problem, {0: '{"strategy": "x"}'})


def test_min_blocks_reaches_the_launch_bounds_and_is_checked():
    from dataclasses import replace

    from einkern.backends.cuda.generate import generate
    from einkern.backends.cuda.samples import gemm

    problem = gemm(64, 48, 32)
    mapping = decide(statement_task(problem, 0))
    bounded = replace(mapping, min_blocks=2)
    assert Mapping.from_json(bounded.to_json()) == bounded
    text = generate(problem, {0: bounded}).text
    assert f"__launch_bounds__({bounded.threads}, 2)" in text
    assert "blocks/SM" in bounded.describe()
    assert check_mapping(statement_task(problem, 0), replace(mapping, min_blocks=-1))
    too_many = replace(mapping, min_blocks=2048 // mapping.threads + 1)
    assert check_mapping(statement_task(problem, 0), too_many)
    assert not check_mapping(statement_task(problem, 0), bounded)


def _evaluate(expr, thread: int) -> int:
    """The integer value of a kir index expression in block 0 for one thread."""
    from einkern.gpu import kir

    if isinstance(expr, kir.Int):
        return expr.value
    if isinstance(expr, kir.ThreadIdx):
        return thread
    if isinstance(expr, kir.BlockIdx):
        return 0
    left, right = _evaluate(expr.left, thread), _evaluate(expr.right, thread)
    operations = {
        "+": int.__add__,
        "-": int.__sub__,
        "*": int.__mul__,
        "/": int.__floordiv__,
        "%": int.__mod__,
    }
    return operations[expr.op](left, right)


@pytest.mark.parametrize("layout", ["row", "column"])
@pytest.mark.parametrize("into_padded", [True, False])
def test_pad_and_crop_copies_are_coalesced_in_either_layout(layout, into_padded):
    """Consecutive threads write consecutive destination elements (a column-major
    copy walked in row-major order ran 50x slower than the DRAM floor)."""
    from einkern.arrays import contiguous_strides
    from einkern.gpu import kir
    from einkern.gpu.plan import copy_kernel

    shape, padded = (3, 4, 5), (4, 4, 8)
    kernel = copy_kernel(
        "copy",
        "double",
        shape,
        contiguous_strides(shape, layout),
        padded,
        contiguous_strides(padded, layout),
        60,
        128,
        into_padded,
        "int",
    )
    [section] = kernel.body
    [guard] = section.body
    [store] = guard.body
    assert isinstance(store, kir.Store) and store.array == "p_dst"
    offsets = [_evaluate(store.index, t) for t in range(8)]
    assert offsets[1:4] == [offsets[0] + 1, offsets[0] + 2, offsets[0] + 3]


@pytest.mark.parametrize("n, boundary", [(1000, "guard"), (4095, "pad"), (4096, "exact")])
def test_default_pads_only_when_the_copies_are_cheap_next_to_the_kernel(n, boundary):
    """SGEMM 4095: padded copies cost ~4 % of the kernel and make every load aligned;
    at n = 1000 they would cost a third of it, so the edges are guarded."""
    from einkern.backends.cuda.samples import gemm

    problem = gemm(n, n, n, dtype="float32")
    mapping = decide(statement_task(problem, 0))
    assert mapping.boundary == boundary
    assert not check_mapping(statement_task(problem, 0), mapping, max_shared_bytes=227 * 1024)


def test_a_family_of_products_gets_a_larger_register_tile():
    """Nine products per output (the d1 family as one statement): two outputs per
    thread along each of five indices (the single product sd_t_d1_1: 4 × 2), still
    coalesced along h3, and the configuration is a point of the tuning space.  The
    rules' proposal: the default at T = 16 is a tensor-core product-family point
    since the twenty-eighth session."""
    from einkern.bench.suites.ccsdt import family_program

    family = einkern.make_problem(einkern.load(family_program("d1", 16)), {})
    family_task = statement_task(family, 0)
    mapping = config_to_mapping(family_task, explain(family_task).config)
    assert mapping.register_tile == 32 and mapping.parallel[0].index == "h3"
    assert not check_mapping(statement_task(family, 0), mapping, max_shared_bytes=227 * 1024)
    from einkern.tuning.search import space_for
    from einkern.tuning.target import get_target

    target = get_target("cuda")
    assert space_for(target, family_task).violation(explain(family_task).config) is None
    from pathlib import Path

    example = Path(__file__).resolve().parent.parent / "examples" / "sd_t_d1_1.ein"
    single = einkern.make_problem(einkern.load(example), {})
    assert decide(statement_task(single, 0)).register_tile == 8


def test_local_grad3_default_takes_each_element_whole_and_is_in_the_tuning_space():
    """A register tile over the whole small index (12), every input slice staged:
    one block per element; the tuner's space contains this default."""
    from pathlib import Path

    from einkern.tuning.search import space_for
    from einkern.tuning.target import get_target

    example = Path(__file__).resolve().parent.parent / "examples" / "local_grad3.ein"
    problem = einkern.make_problem(einkern.load(example), {})
    target = get_target("cuda")
    for position in range(3):
        problem_task = statement_task(problem, position)
        mapping = decide(problem_task)
        assert mapping.register_tile == 12 and len(mapping.staged) == 2
        assert not check_mapping(problem_task, mapping)
        space = space_for(target, problem_task)
        assert space.violation(target.default_config(problem_task)) is None


def test_family_default_spreads_its_register_tile_and_emulates_correctly():
    """Nine products per output: two outputs per thread along every index but x,
    inputs staged; the kernel (T = 8) matches the reference in the emulation."""
    from einkern.backends.verify import verify
    from einkern.bench.suites.ccsdt import family_program

    problem = einkern.make_problem(einkern.load(family_program("d2", 8)), {})
    mapping = decide(statement_task(problem, 0))
    assert len(mapping.parallel) == 6 and mapping.register_tile >= 16 and mapping.staged
    result = verify(problem, {0: mapping}, seed=3)
    assert not result.errors and result.bad_accesses == 0
    assert result.max_relative_error <= 1e-12


def _rules_mapping(task):
    """The rules' SIMT proposal (the decision may prefer a tensor-core family)."""
    decision = explain(task, H100)
    return config_to_mapping(task, decision.config, decision.reasons)


@pytest.mark.parametrize("family, rows", [("d1", 4), ("d2", 3)])
def test_family_over_a_whole_small_index_keeps_room_for_three_blocks(family, rows):
    """T = 24: the block covers h3 whole (24 threads), so product-family takes the
    most threads along its second index whose staged slices leave shared memory
    for three blocks per SM (measured: docs/rules.md#product-family): d1 4 (tile
    8), d2 3 (tile 6); the register tile stays 32 and the mapping checks."""
    from einkern.bench.suites.ccsdt import family_program
    from einkern.gpu.rules import FAMILY_RESIDENT_BLOCKS
    from einkern.gpu.staging import staged_bytes

    problem = einkern.make_problem(einkern.load(family_program(family, 24)), {})
    task = statement_task(problem, 0)
    decision = explain(task, H100)  # the rules' proposal (the model picks DMMA here)
    config, reasons = decision.config, decision.reasons
    mapping = config_to_mapping(task, config)
    assert config.block == (0, rows) and mapping.register_tile == 32
    assert mapping.parallel[0].threads == 24 and mapping.parallel[1].tile == 2 * rows
    budget = H100.shared_per_sm // FAMILY_RESIDENT_BLOCKS - 1024
    assert staged_bytes(task, mapping) <= budget
    wider = config_to_mapping(task, replace(config, block=(0, 12)))
    assert staged_bytes(task, wider) > budget  # the next divisor would not fit
    assert any("3 blocks per SM" in reason for reason in reasons)
    assert not check_mapping(task, mapping, max_shared_bytes=227 * 1024)


def test_family_over_a_whole_small_index_emulates_correctly():
    """The same rule at T = 6 (h3 whole, 6 threads): the kernel matches the
    reference in the emulation."""
    from einkern.backends.verify import verify
    from einkern.bench.suites.ccsdt import family_program

    problem = einkern.make_problem(einkern.load(family_program("d1", 6)), {})
    config, _ = default_config(statement_task(problem, 0))
    assert config.block[0] == 0 and config.spread == 2
    mapping = decide(statement_task(problem, 0))
    result = verify(problem, {0: mapping}, seed=5)
    assert not result.errors and result.bad_accesses == 0
    assert result.max_relative_error <= 1e-12


@pytest.mark.parametrize("family", ["d1", "d2"])
@pytest.mark.parametrize("tile", [16, 24])
def test_registers_of_a_family_kernel_give_the_measured_occupancy(family, tile):
    """The model's register estimate for three or more products (PRODUCTS_IN_FLIGHT)
    and NVRTC's count for sm_90 give the same resident blocks per SM, for the
    merges of four and five updates the fusion planner weighs (the old estimate,
    110 registers, gave 4 blocks where NVRTC's 142-168 allow 1-3)."""
    from pathlib import Path

    from einkern.backends.cuda.fusion import merged_task
    from einkern.backends.cuda.resources import kernel_resources
    from einkern.gpu.model import estimated_registers, occupancy, shared_bytes

    root = Path(__file__).resolve().parent.parent
    problem = einkern.make_problem(einkern.load(root / f"examples/ccsdt_{family}.ein"), {"T": tile})
    for updates in (4, 5):
        view = merged_task(problem, tuple(range(updates))).view
        task = statement_task(view, 0)
        mapping = _rules_mapping(task)  # the SIMT kernel whose registers are estimated
        estimate = estimated_registers(task, mapping)
        (measured,) = kernel_resources(view, "sm_90", {0: mapping})
        shared = shared_bytes(task, mapping)
        assert occupancy(mapping, estimate, shared) == occupancy(
            mapping, measured.registers, shared
        ), (updates, estimate, measured)


# ---- rules measured on the BLAS routines (docs/rules.md, docs/gpu.md) ----------------


def _task(text: str, **extents: int):
    problem = einkern.make_problem(einkern.load(text), extents)
    return statement_task(problem, 0)


@pytest.mark.parametrize("dtype, per_thread", [("float32", 2), ("float64", 1)])
def test_elementwise_statements_keep_eight_bytes_of_each_operand_in_flight(dtype, per_thread):
    task = _task(
        f"dims n = 1\ndtype {dtype}\nscalar a = 1.5\ntensor x[n], y[n], z[n]\n"
        "z[i] = a * x[i] + y[i]",
        n=1 << 22,
    )
    (tile,) = decide(task).parallel
    assert tile.per_thread == per_thread and tile.cyclic
    assert any(r.startswith("no-reuse") for r in decide(task).reasons)


def test_both_operands_contiguous_along_the_sum_take_k_step_16_and_padded_tiles():
    head = "dims m = 1, n = 1, k = 1\ndtype float32\ntensor A[m, k], B[{b}], C[m, n]\n"
    from einkern.gpu.decision import explain

    sizes = {"m": 4096, "n": 4096, "k": 4096}
    nt = _task(head.format(b="n, k") + "C[i,j] = A[i,p] * B[j,p]", **sizes)
    nn = _task(head.format(b="k, n") + "C[i,j] = A[i,p] * B[p,j]", **sizes)
    assert explain(nt).config.staging.k_step == 16 and explain(nt).config.staging.padding == 4
    assert explain(nn).config.staging.k_step == 8 and explain(nn).config.staging.padding == 0
    mapping = decide(nt)  # the model keeps the rules' proposal at this size
    assert dict(mapping.k_step) == {"p": 16} and {s.padding for s in mapping.staged} == {4}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_ties_among_lanes_points_go_to_a_warp_per_row(dtype):
    task = _task(
        f"dims m = 1, n = 1\ndtype {dtype}\ntensor z[m], A[m, n], x[n]\nz[i] = A[i,j] * x[j]",
        m=8192,
        n=8192,
    )
    config, reasons = default_config(task)
    assert config.lanes is not None and config.split == 32
    assert config.lanes == (4 if dtype == "float32" else 2, 1)
    assert "ties for the model" in reasons[-2] + reasons[-1]
