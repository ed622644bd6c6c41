"""The CUDA backend without a GPU: decisions, generated code (compiled with NVRTC
for sm_90), the CUBIN cache, array descriptions and availability."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from einkern.backends import get_backend
from einkern.backends.cuda import CudaBackend, samples
from einkern.backends.cuda.arrays import allocate, describe
from einkern.backends.cuda.codegen import emit, generate
from einkern.backends.cuda.decision import DeviceLimits, DirectMapping, decide, largest_unroll
from einkern.backends.cuda.nvrtc import compile_cubin, kernel_resources, parse_resources
from einkern.errors import BackendError, CompilationError
from einkern.ir.nodes import Const, Sum, Tensor

nvrtc = pytest.importorskip("cuda.bindings.nvrtc")


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EINKERN_CACHE_DIR", str(tmp_path / "cache"))


def only(problem) -> DirectMapping:
    (statement,) = problem.program.statements
    return decide(problem, statement)


# ---- decisions -----------------------------------------------------------------


def test_ccsd_t_column_major_puts_h3_on_thread_x():
    mapping = only(samples.ccsd_t(16))
    assert mapping.parallel == ("h3", "h2", "h1", "p6", "p5", "p4")
    assert mapping.reduction == ("h7",)
    assert mapping.thread_x_index == "h3"
    assert mapping.thread_y_indices == ("h2",)  # h3 fills half a warp: stay contiguous
    assert mapping.block == (16, 16, 1)
    assert mapping.grid_dims == (16, 16, 256)  # h1, p6, then p5 and p4 folded into z
    assert [str(i) for i in mapping.grid[2]] == ["p5", "p4"]
    assert mapping.reductions[0].order == ("h7",) and mapping.reductions[0].unroll == 8
    assert mapping.index_bits == 32
    assert any("h3 -> threadIdx.x" in r and "column-major" in r for r in mapping.reasons)


def test_ccsd_t_with_full_warps_reuses_v2_along_thread_y():
    mapping = only(samples.ccsd_t(40))  # as Rivera's recipe: thread = {h3, h1}
    assert mapping.thread_x_index == "h3" and mapping.thread_y_indices == ("h1",)
    assert mapping.block == (32, 8, 1)
    assert mapping.index_bits == 64  # 40^6 elements
    assert any("not an index of v2" in r for r in mapping.reasons)


def test_ccsd_t_row_major_puts_p4_on_thread_x():
    mapping = only(samples.ccsd_t(8, layout="row"))
    assert mapping.thread_x_index == "p4"


def test_nekbone():
    mapping = only(samples.nekbone(100, 12))
    assert mapping.thread_x_index == "k"  # contiguous in ur (row-major)
    assert mapping.thread_y_indices[0] == "j"  # the next index of ur in memory
    assert mapping.block[0] == 12 and (mapping.block[0] * mapping.block[1]) % 32 == 0
    (loop,) = mapping.reductions
    assert loop.order == ("m",) and loop.unroll == 6 and 12 % loop.unroll == 0
    column = only(samples.nekbone(100, 12, layout="column"))
    assert column.thread_x_index == "e"


@pytest.mark.parametrize(
    ("layout", "x", "y"), [("row", "j", "i"), ("column", "i", "j")]
)
def test_gemm(layout, x, y):
    mapping = only(samples.gemm(300, 200, 100, layout=layout))
    assert mapping.thread_x_index == x and mapping.thread_y_indices == (y,)
    assert mapping.block == (32, 8, 1)
    assert mapping.reductions[0].unroll == 5  # the largest factor <= 8 of 100
    tiles = {"x": math.ceil((200 if layout == "row" else 300) / 32)}
    assert mapping.grid_dims[0] == tiles["x"]


def test_rank0_output_runs_one_thread():
    problem = samples.diagonal()
    trace = decide(problem, problem.program.statements[1])
    assert trace.thread_x is None and trace.block == (1, 1, 1) and trace.grid_dims == (1, 1, 1)


def test_grid_folds_into_x_past_the_device_limits():
    limits = DeviceLimits(max_grid=(2**31 - 1, 3, 5))
    problem = samples.ccsd_t(6)
    mapping = decide(problem, problem.program.statements[0], limits)
    assert all(n <= m for n, m in zip(mapping.grid_dims, limits.max_grid, strict=True))
    assert any("moved from blockIdx" in r for r in mapping.reasons)
    with pytest.raises(BackendError):
        decide(problem, problem.program.statements[0], DeviceLimits(max_grid=(7, 1, 1)))


@given(st.integers(1, 10_000))
def test_unroll_factor_divides_the_extent(extent):
    factor = largest_unroll(extent)
    assert 1 <= factor <= 8 and extent % factor == 0
    assert all(extent % f for f in range(factor + 1, min(8, extent) + 1))


@given(st.sampled_from([1, 2, 3, 5, 7, 11, 13, 97, 101, 12, 16, 64]))
def test_unroll_factor_in_the_decision(extent):
    mapping = only(samples.gemm(5, 3, extent))
    assert extent % mapping.reductions[0].unroll == 0


def _cover(mapping: DirectMapping, size: dict[str, int]) -> Counter:
    """Simulate the launch: which output index tuples the threads compute."""
    seen: Counter = Counter()
    bx, by, _ = mapping.block
    for block in itertools.product(*(range(n) for n in mapping.grid_dims)):
        values: dict[str, int] = {}
        for coordinate, dim in zip(block, mapping.grid, strict=True):
            for item in dim:
                key = f"tile {item.tiles_of}" if item.tiles_of else item.index
                values[key], coordinate = coordinate % item.count, coordinate // item.count
        for tx, ty in itertools.product(range(bx), range(by)):
            index = dict.fromkeys(mapping.constant, 0)
            index.update((k, v) for k, v in values.items() if not k.startswith("tile "))
            inside = True
            for name, axis, t in (("x", mapping.thread_x, tx), ("y", mapping.thread_y, ty)):
                if axis is None:
                    continue
                linear = values.get(f"tile {name}", 0) * axis.block + t
                inside &= linear < axis.total
                for i, extent in zip(axis.indices, axis.extents, strict=True):
                    index[i], linear = linear % extent, linear // extent
            if inside:
                seen[tuple(index[i] for i in mapping.parallel)] += 1
    return seen


@settings(max_examples=60, deadline=None)
@given(
    extents=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    layout=st.sampled_from(["row", "column"]),
    grid_yz=st.sampled_from([2, 3, 65535]),
    threads=st.sampled_from([16, 64, 256]),
    warp=st.sampled_from([4, 32]),
    data=st.data(),
)
def test_every_output_element_gets_exactly_one_thread(extents, layout, grid_yz, threads, warp,
                                                      data):
    names = [f"e{d}" for d in range(len(extents))]
    indices = [f"i{d}" for d in range(len(extents))]
    order = data.draw(st.permutations(indices))
    tensors = [
        Tensor("out", tuple(names), "float64", layout),
        Tensor("inp", tuple(names[indices.index(i)] for i in order) + ("k",), "float64", layout),
    ]
    problem = samples.problem(
        "cover",
        {**dict(zip(names, extents, strict=True)), "k": 3},
        tensors,
        [(samples.acc("out", *indices), "=", Sum(("r",), samples.acc("inp", *order, "r")))],
    )
    limits = DeviceLimits(max_grid=(2**31 - 1, grid_yz, grid_yz), warp_size=warp,
                          threads_per_block=threads)
    mapping = decide(problem, problem.program.statements[0], limits)
    assert mapping.block[0] * mapping.block[1] <= limits.max_threads_per_block
    assert all(n <= m for n, m in zip(mapping.grid_dims, limits.max_grid, strict=True))
    seen = _cover(mapping, dict(zip(indices, extents, strict=True)))
    expected = set(itertools.product(*(range(n) for n in extents)))
    assert set(seen) == expected and set(seen.values()) == {1}


# ---- generated code, compiled with NVRTC ------------------------------------------


CASES = {
    "gemm": lambda dt: samples.gemm(37, 53, 29, dt),
    "gemm-column": lambda dt: samples.gemm(64, 64, 64, dt, "column"),
    "sd_t_d1_1": lambda dt: samples.ccsd_t(16, 16, dt),
    "nekbone": lambda dt: samples.nekbone(100, 12, dt),
    "riemann": lambda dt: samples.riemann(8, dt),
    "row_norm": lambda dt: samples.row_norm(100, 37, dt),
    "functions": lambda dt: samples.functions(13, 7, dt),
    "diagonal": lambda dt: samples.diagonal(11, dt),
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_generated_code_compiles_without_spills(case, dtype):
    problem = CASES[case](dtype)
    generated = generate(problem)
    assert len(generated.kernels) == len(problem.program.statements)
    module = compile_cubin(generated.text, "sm_90")
    assert module.cubin[:4] == b"\x7fELF"
    assert [r.name for r in module.resources] != []
    by_name = {r.name: r for r in module.resources}
    for kernel in generated.kernels:
        resources = by_name[kernel.name]
        assert resources.registers > 0
        assert resources.spill_stores == 0 and resources.spill_loads == 0, resources


def test_gemm_source_reads_well():
    text = emit(samples.gemm(37, 53, 29))
    assert 'extern "C" __global__' in text
    assert "// statement 0: C[i,j] =" in text
    assert "const double* __restrict__ A" in text and "double* __restrict__ C" in text
    assert "const double* __restrict__ C" not in text
    assert "const double alpha" in text and "const double beta" in text
    assert "if (j >= 53 || i >= 37) return;" in text  # guards for extents off the block
    assert "#pragma unroll 1" not in text  # 29 is prime: no unroll pragma
    assert "C[ek_out] = alpha * ek_acc0 + beta * C[ek_out];" in text
    assert "return;" not in emit(samples.gemm(64, 64, 64))  # no guard when blocks divide


def test_ccsd_t_source():
    text = emit(samples.ccsd_t(16))
    assert "#pragma unroll 8" in text and "t3[ek_out] -= ek_acc0;" in text
    assert "long long" not in text
    assert "long long" in emit(samples.ccsd_t(40))


def test_float32_uses_float_arithmetic():
    text = emit(samples.row_norm(100, 37, "float32"))
    assert "float ek_acc0 = 0.0f;" in text and "sqrtf(ek_acc0)" in text and "double" not in (
        text.split("{", 1)[1]
    )


def test_riemann_sibling_sums_reuse_the_index_name():
    text = emit(samples.riemann(8))
    assert text.count("for (int m = 0; m < 8; ++m)") == 2
    assert "ek_acc0" in text and "ek_acc1" in text


def test_awkward_names_and_constants_compile():
    problem = samples.problem(
        "odd-name",
        {"n": 5},
        [Tensor("int", ("n",)), Tensor("exp", ("n",))],
        [(samples.acc("exp", "for"), "=", samples.mul(
            samples.acc("int", "for"), Const(float("inf")), Const(float("-inf")),
            Const(float("nan")), Const(-2.5), Const(1e-300)))],
    )
    text = emit(problem)
    assert "ek_odd_name_s0" in text and "int_" in text and "for_" in text
    compile_cubin(text, "sm_90")


def test_compile_error_carries_the_log():
    with pytest.raises(CompilationError, match="undefined|identifier"):
        compile_cubin('extern "C" __global__ void k() { undefined_thing(); }', "sm_90")


def test_second_compile_hits_the_cache(tmp_path):
    text = emit(samples.gemm(8, 8, 8))
    first = compile_cubin(text, "sm_90")
    second = compile_cubin(text, "sm_90")
    assert not first.cached and second.cached
    assert second.cubin == first.cubin and second.resources == first.resources
    files = sorted(p.suffix for p in (tmp_path / "cache" / "cuda").iterdir())
    assert files == [".cubin", ".json"]
    (tmp_path / "cache" / "cuda" / f"{first.key}.json").write_text("{broken")
    assert not compile_cubin(text, "sm_90").cached  # a damaged entry is rebuilt
    assert not compile_cubin(text, "sm_89").cached  # another arch is another entry


def test_parse_resources():
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k2' for 'sm_90'
ptxas info    : Function properties for k2
ptxas         .     8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 256 bytes smem
ptxas info    : Compiling entry function 'k1' for 'sm_90'
ptxas info    : Function properties for k1
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 0 barriers"""
    k2, k1 = parse_resources(log)
    assert (k2.name, k2.registers, k2.shared_memory, k2.barriers) == ("k2", 10, 256, 1)
    assert (k2.stack_frame, k2.spill_stores, k2.spill_loads) == (8, 4, 12)
    assert (k1.name, k1.registers, k1.shared_memory, k1.spill_stores) == ("k1", 12, 0, 0)


def test_kernel_resources_one_per_statement():
    problem = samples.functions()
    found = kernel_resources(problem)
    assert [r.name for r in found] == [k.name for k in generate(problem).kernels]


# ---- arrays --------------------------------------------------------------------


# Arrays with ``__cuda_array_interface__`` are read through cuda.core's
# StridedMemoryView, which needs the driver: see test_gpu_runtime.py.


def test_describe_numpy_and_unknown_objects():
    array = np.zeros((2, 3), dtype=np.float32, order="F")
    info = describe(array)
    assert info.device == "cpu" and info.strides == (1, 2) and info.library == "numpy"
    assert describe([1.0, 2.0]) is None and describe(object()) is None


class DLPackOnly:
    """Exposes only the DLPack protocol of a NumPy array."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_describe_dlpack():
    base = np.arange(60, dtype=np.float64).reshape(5, 12)
    view = base[1:, 2:5]
    info = describe(DLPackOnly(view))
    assert info.shape == (4, 3) and info.dtype == "float64" and info.device == "cpu"
    assert info.strides == (12, 1) and info.pointer == view.ctypes.data
    column = np.asfortranarray(np.ones((3, 2), dtype=np.float32))
    info = describe(DLPackOnly(column))
    assert info.strides == (1, 3) and info.dtype == "float32"
    scalar = describe(DLPackOnly(np.array(2.0)))
    assert scalar.shape == () and scalar.strides == ()


def test_allocate_numpy_in_the_declared_layout():
    problem = samples.gemm(5, 7, 3, "float32", "column")
    made = allocate(problem, "C", [np.zeros(3)])
    assert made.shape == (5, 7) and made.dtype == np.float32 and made.flags.f_contiguous


# ---- the backend ---------------------------------------------------------------------


def test_registry_and_emit_without_gpu():
    backend = get_backend("cuda")
    assert isinstance(backend, CudaBackend) and backend.name == "cuda"
    assert "ek_gemm_s0" in backend.emit(samples.gemm(4, 4, 4))
    assert [m.thread_x_index for m in backend.mappings(samples.gemm(4, 4, 4))] == ["j"]


def test_unavailable_backend_refuses_to_build(monkeypatch):
    import einkern.backends.cuda as cuda_backend

    monkeypatch.setattr(cuda_backend, "_probe", lambda: (False, "no CUDA GPU is present"))
    backend = CudaBackend()
    assert not backend.available()
    with pytest.raises(BackendError) as raised:
        backend.build(samples.gemm(4, 4, 4))
    assert "no CUDA GPU" in str(raised.value) and raised.value.hint
    assert "backend='cpu'" in raised.value.hint


def test_not_available_on_this_machine():
    backend = CudaBackend()
    if backend.available():
        pytest.skip("a usable GPU is present: this test is about machines without one")
    assert backend.unavailable_reason()
    assert backend.resources(samples.gemm(4, 4, 4))[0].spill_stores == 0  # NVRTC only


SMALL_SAMPLES = {
    "gemm": lambda: samples.gemm(9, 7, 5),
    "sd_t_d1_1": lambda: samples.ccsd_t(3),
    "nekbone": lambda: samples.nekbone(3, 4),
    "riemann": lambda: samples.riemann(3),
    "row_norm": lambda: samples.row_norm(5, 7),
    "functions": lambda: samples.functions(5, 3),
    "diagonal": lambda: samples.diagonal(7),
}


def test_small_samples_cover_every_sample():
    assert set(SMALL_SAMPLES) == set(samples.SAMPLES)


@pytest.mark.parametrize("name", sorted(SMALL_SAMPLES))
def test_default_mappings_of_every_sample_emulate_correctly(name):
    """The decision algorithm's mapping of each sample (repeated indices, rank-0
    outputs, functions included) lowers, prints and runs right in the emulation."""
    from einkern.backends.cuda.mapped import generate_mapped
    from einkern.gpu.decision import decide
    from einkern.gpu.verify import verify
    from einkern.ir.task import tasks_of

    problem = SMALL_SAMPLES[name]()
    mappings = {t.position: decide(t) for t in tasks_of(problem)}
    assert generate_mapped(problem, mappings).text  # the CUDA text prints
    result = verify(problem, mappings, seed=5)
    assert not result.errors and result.bad_accesses == 0
    assert result.max_relative_error <= 1e-12


@pytest.mark.parametrize("layout", ["row", "column"])
def test_random_arrays_keep_every_declared_shape_and_layout(layout):
    from einkern.arrays import random_arrays, strides_match

    problem = samples.diagonal(5, layout=layout)  # includes the rank-0 trace t
    for name, array in random_arrays(problem, seed=2).items():
        assert array.shape == problem.shape(name), name
        assert np.all((array >= 0.5) & (array < 1.5))
        itemsize = array.itemsize
        from einkern.arrays import ArrayInfo

        info = ArrayInfo(array.shape, "float64", tuple(s // itemsize for s in array.strides),
                         "cpu", 0, "numpy")
        assert strides_match(info, layout), name
