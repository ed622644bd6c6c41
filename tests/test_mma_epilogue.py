"""The shared-memory epilogue of tensor-core kernels (``MmaConfig.epilogue =
"shared"``): the accumulators go through a shared tile and are stored by all
threads along the output's contiguous index.  Emulated against the reference
for outputs contiguous along N and along M, extents the tiles do not divide and
``=``/``+=``/``-=``; a dropped barrier between the tile's writes and its stores
is caught; NVRTC compiles the offered tiles without spills; the tuner offers
them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_mma_default import COMPUTE_BOUND, _task, assert_emulated_tile_matches

from einkern.backends.emulator import count_barriers, drop_barrier, emulate
from einkern.gpu.config import CudaConfig
from einkern.gpu.lower import lower
from einkern.gpu.mma_config import MmaConfig
from einkern.gpu.mma_lower import shared_bytes
from einkern.gpu.mma_model import F64_REGISTER_TILES, F64_TILES, mma_candidates
from einkern.gpu.space import config_to_mapping
from einkern.reference import evaluate
from einkern.testing import random_arrays, random_scalars

SHARED = [dataclasses.replace(t, epilogue="shared") for t in (F64_TILES[0], F64_TILES[3])]
SHARED.append(dataclasses.replace(F64_REGISTER_TILES[1], epilogue="shared"))

CASES = {
    # output contiguous along N (the last index of B's group)
    "gemm +=": ("ij=ik*kj", {"i": 70, "j": 50, "k": 30}, "+="),
    # output contiguous along M: C[i,j] with j from A
    "along M": ("ij=jk*ki", {"i": 37, "j": 45, "k": 19}, "="),
    "four-index -=": ("abcd=akbl*lckd", {"a": 5, "b": 7, "c": 6, "d": 3, "k": 9, "l": 4}, "-="),
    "batched": ("zij=zix*zxj", {"z": 3, "i": 20, "j": 36, "x": 11}, "="),
}


@pytest.mark.parametrize("tile", range(len(SHARED)))
@pytest.mark.parametrize("name", sorted(CASES))
def test_shared_epilogue_matches_the_reference(name, tile):
    spec, sizes, op = CASES[name]
    assert_emulated_tile_matches(_task(spec, sizes, op=op), SHARED[tile], seed=11)


def _run(kernel, problem, arrays, scalars):
    buffers = {f"p_{n}": np.ascontiguousarray(a).copy() for n, a in arrays.items()}
    values = {f"s_{n}": v for n, v in scalars.items()}
    report = emulate([kernel], buffers, values)
    return report, buffers["p_C"]


def test_a_dropped_epilogue_barrier_is_caught():
    """The barrier between the tile's writes and its stores (the last one) matters:
    without it threads store elements other warps have not written yet (the
    emulator's shared memory starts poisoned)."""
    spec, sizes, op = CASES["gemm +="]
    task = _task(spec, sizes, op=op)
    problem = task.problem
    mapping = config_to_mapping(task, CudaConfig(x="", mma=SHARED[0]))
    kernel = lower(task, mapping)
    arrays, scalars = random_arrays(problem, 5), random_scalars(problem, 5)
    want = evaluate(problem, arrays, scalars)["C"]
    report, good = _run(kernel, problem, arrays, scalars)
    assert report.ok
    np.testing.assert_allclose(good, want, rtol=1e-12, atol=1e-12)
    broken = drop_barrier(kernel, count_barriers(kernel) - 1)
    report, bad = _run(broken, problem, arrays, scalars)
    assert not np.allclose(bad, want, rtol=1e-12, atol=1e-12, equal_nan=False)


def test_shared_bytes_count_the_epilogue_tile():
    task = _task(*COMPUTE_BOUND["dgemm 1024"])
    for config in SHARED:
        kernel = lower(task, config_to_mapping(task, CudaConfig(x="", mma=config)))
        assert kernel.shared_bytes() == shared_bytes(config, task) <= shared_bytes(config)
        direct = dataclasses.replace(config, epilogue="direct")
        assert shared_bytes(config, task) > shared_bytes(direct, task)


def test_shared_bytes_without_a_task_bound_every_fp64_layout():
    """Without a task the fp64 tiles' shared memory is a bound over the two ways an
    operand may lie (``f64_staging``): a 128×64 tile with B stored k-contiguous
    (column-major B) takes more than with B n-contiguous."""
    tile = MmaConfig("m16n8k4_f64", 2, 2, 4, 4, 16, stages=3, copy="async")
    row = _task("ij=ik*kj", {"i": 1024, "j": 1024, "k": 1024})
    column_b = _task("ij=ik*jk", {"i": 1024, "j": 1024, "k": 1024})
    assert shared_bytes(tile, row) < shared_bytes(tile, column_b) <= shared_bytes(tile)
    for task in (row, column_b):
        kernel = lower(task, config_to_mapping(task, CudaConfig(x="", mma=tile)))
        assert kernel.shared_bytes() == shared_bytes(tile, task)


def test_the_tuner_offers_the_shared_epilogue_and_the_default_does_not():
    task = _task(*COMPUTE_BOUND["dgemm 1024"])
    tuning = mma_candidates(task, tuning=True)
    assert any(c.epilogue == "shared" for c in tuning)
    assert all(c.epilogue == "direct" for c in mma_candidates(task))


def test_an_unknown_epilogue_is_refused():
    task = _task(*COMPUTE_BOUND["dgemm 1024"])
    config = MmaConfig(epilogue="registers")
    mapping = config_to_mapping(task, CudaConfig(x="", mma=config))
    from einkern.gpu.lower import check_mapping

    assert any("epilogue" in p for p in check_mapping(task, mapping))


@pytest.mark.parametrize("tile", range(len(F64_TILES)))
def test_shared_epilogue_tiles_compile_without_spills(tile):
    pytest.importorskip("cuda.bindings.nvrtc")
    from einkern.backends.cuda.nvrtc import compile_cubin
    from einkern.gpu.cuda_printer import print_cuda

    task = _task(*COMPUTE_BOUND["abkl,klcd 64"])
    config = dataclasses.replace(F64_TILES[tile], epilogue="shared")
    module = compile_cubin(
        print_cuda(lower(task, config_to_mapping(task, CudaConfig(x="", mma=config)))), "sm_90"
    )
    assert all(r.spill_stores == 0 and r.spill_loads == 0 for r in module.resources)


@pytest.mark.parametrize("op", ["+=", "-="])
def test_an_update_reads_every_output_element_before_it_stores_one(op):
    """The direct epilogue of an update loads a lane's output elements into its
    accumulators before its first store: interleaved, each load waits for the
    store before it (the compiler cannot tell the addresses apart), one DRAM
    round trip per element.  A plain ``=`` stores without loading."""
    from einkern.gpu.cuda_printer import print_cuda
    from einkern.gpu.mma_lower import lower_mma

    spec, sizes, _ = CASES["four-index -="]
    for tile in F64_TILES:
        lines = print_cuda(lower_mma(_task(spec, sizes, op=op), tile, "k")).splitlines()
        loads = [n for n, line in enumerate(lines) if "= p_C[" in line]
        stores = [n for n, line in enumerate(lines) if line.strip().startswith("p_C[")]
        assert len(loads) == len(stores) == tile.tiles_m * tile.tiles_n * 4
        assert max(loads) < min(stores)
        assert all(f"{op[0]} (" in lines[n] for n in loads)
    plain = print_cuda(lower_mma(_task(spec, sizes, op="="), F64_TILES[0], "k"))
    assert "= p_C[" not in plain
