"""The CUDA backend without a GPU: reported mappings, generated code (compiled with NVRTC
for sm_90), the CUBIN cache, array descriptions and availability."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from einkern.backends import get_backend
from einkern.backends.cuda import CudaBackend, samples
from einkern.backends.cuda.arrays import allocate, describe
from einkern.backends.cuda.generate import generate
from einkern.backends.cuda.nvrtc import compile_cubin, parse_resources
from einkern.backends.cuda.resources import kernel_resources
from einkern.errors import BackendError, CompilationError
from einkern.ir.nodes import Const, Tensor

nvrtc = pytest.importorskip("cuda.bindings.nvrtc")


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


def test_mappings_report_the_mapping_each_kernel_is_compiled_under():
    """gemm at n=512: the reported mapping is the one the emitted kernel is built
    under (its launch's threads, the kernel's launch bounds, its shared staging)."""
    import einkern

    gemm = Path(__file__).resolve().parent.parent / "examples" / "gemm.ein"
    problem = einkern.make_problem(einkern.load(gemm), {"m": 512, "n": 512, "k": 512})
    backend = CudaBackend()
    reported = backend.mappings(problem)
    source = backend.source(problem)
    assert [k.mapping for k in source.kernels] == reported
    (mapping,) = reported
    (kernel,) = source.kernels
    assert math.prod(kernel.block) == mapping.threads
    assert f"__launch_bounds__({mapping.threads}" in source.text
    assert bool(mapping.staged) == ("__shared__" in source.text)
    given = replace(mapping, staged=(), k_step=())
    assert backend.mappings(problem, {0: given}) == [given]


def test_awkward_names_and_constants_compile():
    problem = samples.problem(
        "odd-name",
        {"n": 5},
        [Tensor("int", ("n",)), Tensor("exp", ("n",))],
        [
            (
                samples.acc("exp", "for"),
                "=",
                samples.mul(
                    samples.acc("int", "for"),
                    Const(float("inf")),
                    Const(float("-inf")),
                    Const(float("nan")),
                    Const(-2.5),
                    Const(1e-300),
                ),
            )
        ],
    )
    text = generate(problem).text
    assert "ek_odd_name_s0" in text
    compile_cubin(text, "sm_90")


def test_compile_error_carries_the_log():
    with pytest.raises(CompilationError, match="undefined|identifier"):
        compile_cubin('extern "C" __global__ void k() { undefined_thing(); }', "sm_90")


def test_second_compile_hits_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EINKERN_CACHE_DIR", str(tmp_path / "cache"))
    text = generate(samples.gemm(8, 8, 8)).text
    first = compile_cubin(text, "sm_90")
    second = compile_cubin(text, "sm_90")
    assert not first.cached and second.cached
    assert second.cubin == first.cubin and second.resources == first.resources
    files = sorted(p.suffix for p in (tmp_path / "cache" / "cuda").iterdir())
    assert files == [".cubin", ".json", ".seal", ".seal"]  # each sealed: key and digest
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
    (mapping,) = backend.mappings(samples.gemm(4, 4, 4))
    assert mapping.parallel[0].index == "j"  # coalesced stores along C's contiguous index


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
    from einkern.backends.verify import verify
    from einkern.gpu.decision import decide
    from einkern.ir.task import tasks_of

    problem = SMALL_SAMPLES[name]()
    mappings = {t.position: decide(t) for t in tasks_of(problem)}
    assert generate(problem, mappings).text  # the CUDA text prints
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

        info = ArrayInfo(
            array.shape, "float64", tuple(s // itemsize for s in array.strides), "cpu", 0, "numpy"
        )
        assert strides_match(info, layout), name


def test_statement_tensors_output_first_then_reads_in_order():
    problem = samples.gemm(4, 4, 4)
    (statement,) = problem.program.statements
    assert statement.tensors() == ("C", "A", "B")
