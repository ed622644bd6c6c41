"""Reduction threads as a warp's lanes (``lanes`` points, einkern.gpu.reduction_lanes):
the default for long sums along an input's stride-1 index, the emulator against
the reference on ragged extents, planted faults, the mapping's checks and JSON,
the model's ranking, NVRTC."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

import einkern
from einkern.backends.verify import verify
from einkern.gpu import gett, kir
from einkern.gpu.config import CudaConfig
from einkern.gpu.decision import choose, decide
from einkern.gpu.lower import check_mapping, lower
from einkern.gpu.mapping import Mapping, ParallelTile
from einkern.gpu.model import predicted_time, warp_footprint
from einkern.gpu.space import config_to_mapping, lane_index, violation
from einkern.ir.task import statement_task
from einkern.semantics import TOLERANCE


def program(output: str, a: str, b: str, sizes: dict[str, int], dtype="float64", layout="row"):
    """``C[output] = alpha * A[a] * B[b]`` (index letters) with these extents."""
    dims = ", ".join(f"{i} = {n}" for i, n in sizes.items())
    text = (
        f"dims {dims}\ndtype {dtype}\nlayout {layout}\nscalar alpha = 1.5\n"
        f"tensor C[{','.join(output)}], A[{','.join(a)}], B[{','.join(b)}]\n"
        f"C[{','.join(output)}] = alpha * A[{','.join(a)}] * B[{','.join(b)}]\n"
    )
    return einkern.make_problem(einkern.load(text), {})


def check(problem, mapping: Mapping, seed: int = 3) -> None:
    result = verify(problem, {0: mapping}, seed=seed)
    dtype = problem.program.tensor("C").dtype
    assert result.bad_accesses == 0, (mapping.to_json(), result.errors[:3])
    assert result.max_relative_error <= TOLERANCE[dtype], mapping.to_json()


def lanes(points):
    return [p for p in points if p.lanes is not None]


CASES = [
    # gemv: a sum along A's stride-1 index; odd rows, a length no step divides
    ("i", "ik", "k", {"i": 13, "k": 1100}, "float64"),
    ("i", "ik", "k", {"i": 13, "k": 1100}, "float32"),
    # an odd length: no vector runs, single terms only
    ("i", "ik", "k", {"i": 7, "k": 1031}, "float64"),
    # three-index input, the sum along its contiguous index
    ("ab", "abl", "l", {"a": 3, "b": 5, "l": 1027}, "float32"),
    # two summed indices, the split one contiguous in A (the other loops outside)
    ("a", "akl", "kl", {"a": 7, "k": 5, "l": 300}, "float64"),
]


@pytest.mark.parametrize("output, a, b, sizes, dtype", CASES)
def test_lane_points_match_the_reference(output, a, b, sizes, dtype):
    """The default is a lanes point; it and random lanes points (runs, accumulators,
    8 … 256 reduction threads, whole and part warps) match NumPy."""
    problem = program(output, a, b, sizes, dtype)
    task = statement_task(problem, 0)
    assert lane_index(task) == a[-1]
    points = lanes(gett.split_candidates(task))
    assert points
    if sizes[a[-1]] % 2:  # runs must divide the summed extent
        assert all(p.lanes[0] == 1 for p in points)
    else:
        assert any(p.lanes[0] > 1 for p in points)
    chosen = choose(task)
    assert chosen.config.lanes is not None, chosen.steps[-1]
    check(problem, decide(task))
    rng = random.Random(f"{output}{a}{b}{dtype}")
    for config in rng.sample(points, min(4, len(points))):
        check(problem, config_to_mapping(task, config))


def test_no_lane_points_when_the_sum_is_not_contiguous():
    """gemv T (A[k,i]: the output's index is the stride-1 one) and a column-major
    A[i,k] get the old split points only."""
    for layout in ("row", "column"):
        a = "ki" if layout == "row" else "ik"
        task = statement_task(program("i", a, "k", {"i": 64, "k": 2048}, layout=layout), 0)
        assert lane_index(task) is None
        points = gett.split_candidates(task)
        assert points and not lanes(points)
        bad = dataclasses.replace(points[0], lanes=(1, 2))
        assert "stride-1" in violation(task, bad)


def gemv_mapping(task, **fields) -> Mapping:
    values = dict(
        strategy="direct",
        parallel=(ParallelTile("i", 4, 4, True),),
        grid_order=("i",),
        reduction_order=("k",),
        boundary="guard",
        reduction_threads=(("k", 32),),
        reduction_fastest=True,
        reduction_chunk=2,
        accumulators=2,
    )
    values.update(fields)
    return Mapping(**values)


def test_the_kernel_reads_vectors_and_combines_by_shuffles():
    from einkern.gpu.cuda_printer import print_cuda

    problem = program("i", "ik", "k", {"i": 13, "k": 1004})
    task = statement_task(problem, 0)
    mapping = gemv_mapping(task)
    text = print_cuda(lower(task, mapping))
    assert "r_k = ((int)threadIdx.x) % 32;" in text  # the fastest digit
    assert "reinterpret_cast<const double2 *>(p_A" in text
    assert "__shfl_xor_sync(0xffffffffu, acc0[0], 16)" in text
    assert "__syncthreads" not in text
    assert "acc0[0] += acc0[1];" in text
    check(problem, mapping)


def test_more_than_a_warp_of_reduction_threads_and_a_part_warp_block():
    problem = program("i", "ik", "k", {"i": 5, "k": 1000}, "float32")
    task = statement_task(problem, 0)
    for fields in (
        dict(reduction_threads=(("k", 128),), reduction_chunk=4, accumulators=3),
        dict(parallel=(ParallelTile("i", 2, 2, True),), reduction_threads=(("k", 8),)),
        dict(reduction_fastest=False, reduction_chunk=4, accumulators=4),
    ):
        mapping = gemv_mapping(task, **fields)
        assert check_mapping(task, mapping) == []
        check(problem, mapping)


def test_a_missing_shuffle_or_a_wrong_lane_order_is_caught():
    problem = program("i", "ik", "k", {"i": 13, "k": 1004})
    task = statement_task(problem, 0)
    mapping = gemv_mapping(task)
    kernel = lower(task, mapping)

    def without_offset(offset):
        body = []
        for section in kernel.body:
            if isinstance(section, kir.ShuffleSum):
                kept = tuple(o for o in section.offsets if o != offset)
                section = dataclasses.replace(section, offsets=kept)
            body.append(section)
        return dataclasses.replace(kernel, body=tuple(body))

    assert verify(problem, {0: mapping}, kernels=[kernel]).ok(1e-12)
    for offset in (16, 1):
        broken = verify(problem, {0: mapping}, kernels=[without_offset(offset)])
        assert not broken.ok(1e-12), f"dropping shuffle offset {offset} went unnoticed"
    # the reduction digits decoded as the slowest: the shuffles then mix outputs
    slow = lower(task, dataclasses.replace(mapping, reduction_fastest=False))
    swapped = dataclasses.replace(kernel, body=(slow.body[0], *kernel.body[1:]))
    assert not verify(problem, {0: mapping}, kernels=[swapped]).ok(1e-12)


def test_lane_mappings_round_trip_and_are_checked():
    problem = program("i", "ik", "k", {"i": 13, "k": 1003})
    task = statement_task(problem, 0)
    mapping = gemv_mapping(task, reduction_chunk=1, accumulators=4)
    assert Mapping.from_json(mapping.to_json()) == mapping
    assert "the fastest thread digits; 4 accumulators; partial sums combined by warp" in (
        mapping.describe()
    )
    old = dataclasses.replace(mapping, reduction_fastest=False, accumulators=1)
    data = json.loads(old.to_json())
    assert not {"reduction_fastest", "reduction_chunk", "accumulators"} & set(data)
    for bad, words in (
        (dataclasses.replace(mapping, reduction_chunk=2), "do not divide k = 1003"),
        (dataclasses.replace(mapping, reduction_chunk=3), "use 1, 2 or 4"),
        (dataclasses.replace(mapping, accumulators=9), "1 to 8"),
        (dataclasses.replace(mapping, reduction_threads=()), "need reduction threads"),
        (
            dataclasses.replace(
                mapping,
                parallel=(ParallelTile("i", 3, 3, True),),
                reduction_threads=(("k", 16),),
            ),
            "whole warps",
        ),
    ):
        assert any(words in p for p in check_mapping(task, bad)), check_mapping(task, bad)
    config = CudaConfig(x="i", block=(4, 1), boundary="guard", split=32, lanes=(1, 4))
    assert CudaConfig.from_json(json.loads(json.dumps(config.to_json()))) == config
    assert config_to_mapping(task, config).accumulators == 4
    assert (
        violation(task, CudaConfig(x="i", lanes=(1, 4))) == "lanes need split (reduction threads)"
    )
    with pytest.raises(ValueError, match="lanes"):
        CudaConfig(x="i", split=32, lanes=(0, 4))


def test_the_model_ranks_coalesced_lanes_above_strided_reduction_threads():
    """gemv N, n = 8192, fp64: the old choice (8 rows per warp, 4 lanes each)
    sends 4 L2 requests per 128 bytes and is predicted near its measured 262 µs;
    the lanes point reads whole lines and is predicted faster."""
    problem = program("i", "ik", "k", {"i": 8192, "k": 8192})
    task = statement_task(problem, 0)
    old = gemv_mapping(
        task,
        parallel=(ParallelTile("i", 8, 8, True),),
        boundary="exact",
        reduction_fastest=False,
        reduction_chunk=1,
        accumulators=1,
    )
    new = gemv_mapping(task, parallel=(ParallelTile("i", 8, 8, True),), boundary="exact")
    a = task.statement.reads()[0]
    assert warp_footprint(problem, task.statement, old, a).requests == 4.0
    assert warp_footprint(problem, task.statement, new, a, 2).requests == 1.0
    assert 0.85 < predicted_time(task, old) / 262e-6 < 1.15
    assert predicted_time(task, new) < 0.8 * predicted_time(task, old)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_lane_kernels_compile_for_sm90_without_spills(dtype):
    pytest.importorskip("cuda.bindings.nvrtc")
    from einkern.backends.cuda.generate import generate
    from einkern.backends.cuda.nvrtc import compile_cubin

    problem = program("i", "ik", "k", {"i": 8192, "k": 8192}, dtype)
    task = statement_task(problem, 0)
    points = lanes(gett.split_candidates(task))
    chosen = choose(task).config
    assert chosen.lanes is not None
    wide = [p for p in points if p.split > 32]
    for config in (chosen, points[0], points[-1], wide[0]):
        module = compile_cubin(generate(problem, {0: config}).text, "sm_90")
        assert module.cubin[:4] == b"\x7fELF"
        for resources in module.resources:
            assert resources.spill_stores == 0, (config.to_json(), resources)
