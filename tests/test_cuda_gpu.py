"""The CUDA backend on a GPU: every sample program against the NumPy reference,
with NumPy, torch and CuPy arrays.  Selected only with ``pytest -m gpu``."""

from __future__ import annotations

import numpy as np
import pytest

from einkern.backends.cuda import CudaBackend, samples
from einkern.errors import ArgumentError
from einkern.ir.nodes import Const, Tensor
from einkern.reference import evaluate

pytestmark = pytest.mark.gpu

SCALARS = {"alpha": 1.5, "beta": -0.75, "gamma": 0.25}

PROBLEMS = {
    "gemm-row-primes": lambda dt: samples.gemm(37, 53, 29, dt, "row"),
    "gemm-column-ones": lambda dt: samples.gemm(1, 67, 1, dt, "column"),
    "gemm-column-square": lambda dt: samples.gemm(64, 64, 64, dt, "column"),
    "ccsd-16": lambda dt: samples.ccsd_t(16, 16, dt),
    "ccsd-primes": lambda dt: samples.ccsd_t(7, 5, dt),
    "ccsd-row-33": lambda dt: samples.ccsd_t(5, 3, dt, "row", p4u=33, h3u=33),
    "nekbone": lambda dt: samples.nekbone(53, 12, dt),
    "nekbone-p5": lambda dt: samples.nekbone(31, 5, dt),
    "riemann": lambda dt: samples.riemann(7, dt),
    "row-norm": lambda dt: samples.row_norm(101, 37, dt),
    "row-norm-one": lambda dt: samples.row_norm(1, 1, dt),
    "functions": lambda dt: samples.functions(13, 7, dt),
    "diagonal": lambda dt: samples.diagonal(11, dt),
}


@pytest.fixture(scope="module")
def backend() -> CudaBackend:
    backend = CudaBackend()
    assert backend.available(), backend.unavailable_reason()
    return backend


def rel_error(got, want: np.ndarray) -> float:
    got = np.asarray(got, dtype=np.float64)
    scale = float(np.max(np.abs(want)))
    return float(np.max(np.abs(got - want))) / (scale if scale > 0 else 1.0)


def check(problem, arrays_after, reference) -> None:
    """fp64 programs: 1e-12; any float32 tensor in the program: 1e-5 (the
    reference rounds float32 results differently from float32 arithmetic)."""
    dtypes = {t.dtype for t in problem.program.tensors}
    tolerance = 1e-5 if "float32" in dtypes else 1e-12
    for name in problem.program.outputs:
        error = rel_error(arrays_after[name], reference[name].astype(np.float64))
        assert error <= tolerance, f"{name}: relative error {error:.2e}"


def torch_arrays(arrays):
    torch = pytest.importorskip("torch")
    return {n: torch.from_numpy(a).to("cuda") for n, a in arrays.items()}


def cupy_arrays(arrays):
    cupy = pytest.importorskip("cupy")
    return {
        n: cupy.array(a, order="F" if a.ndim > 1 and not a.flags.c_contiguous else "C")
        for n, a in arrays.items()
    }


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", sorted(PROBLEMS))
def test_numpy_arrays_match_reference(backend, case, dtype):
    problem = PROBLEMS[case](dtype)
    arrays = samples.random_arrays(problem, seed=3)
    reference = evaluate(problem, arrays, SCALARS)
    copies = {n: a.copy(order="K") for n, a in arrays.items()}
    pointers = {n: a.ctypes.data for n, a in copies.items()}
    backend.build(problem).run(copies, SCALARS)
    check(problem, copies, reference)
    assert {n: a.ctypes.data for n, a in copies.items()} == pointers  # written in place


@pytest.mark.parametrize("case", ["gemm-row-primes", "ccsd-primes", "nekbone", "functions"])
def test_torch_arrays_match_reference(backend, case):
    problem = PROBLEMS[case]("float64")
    arrays = samples.random_arrays(problem, seed=4)
    reference = evaluate(problem, arrays, SCALARS)
    device = torch_arrays(arrays)
    backend.build(problem).run(device, SCALARS)
    check(problem, {n: t.cpu().numpy() for n, t in device.items()}, reference)


@pytest.mark.parametrize("case", ["gemm-column-square", "riemann", "row-norm"])
def test_cupy_arrays_match_reference(backend, case):
    problem = PROBLEMS[case]("float32")
    arrays = samples.random_arrays(problem, seed=5)
    reference = evaluate(problem, arrays, SCALARS)
    device = cupy_arrays(arrays)
    backend.build(problem).run(device, SCALARS)
    check(problem, {n: a.get() for n, a in device.items()}, reference)


def test_mixed_host_and_device_arrays(backend):
    problem = samples.gemm(33, 17, 9)
    arrays = samples.random_arrays(problem, seed=6)
    reference = evaluate(problem, arrays, SCALARS)
    mixed = torch_arrays({"A": arrays["A"]}) | {"B": arrays["B"].copy(), "C": arrays["C"].copy()}
    backend.build(problem).run(mixed, SCALARS)
    check(problem, mixed, reference)


def test_in_place_update_of_a_torch_tensor(backend):
    torch = pytest.importorskip("torch")
    problem = samples.nekbone(29, 7)
    arrays = samples.random_arrays(problem, seed=7)
    reference = evaluate(problem, arrays, {})
    device = torch_arrays(arrays)
    ur = device["ur"]
    pointer, version = ur.data_ptr(), ur._version
    backend.build(problem).run(device, {})
    torch.cuda.synchronize()
    assert device["ur"] is ur and ur.data_ptr() == pointer
    assert ur._version == version  # no torch operation touched it: einkern wrote in place
    check(problem, {"ur": ur.cpu().numpy()}, reference)


def test_column_major_torch_tensors_from_transpose_and_permute(backend):
    torch = pytest.importorskip("torch")
    problem = samples.gemm(31, 23, 19, "float64", "column")
    arrays = samples.random_arrays(problem, seed=8)
    reference = evaluate(problem, arrays, SCALARS)
    # a column-major (m, k) tensor is the transpose of a row-major (k, m) one
    a = torch.from_numpy(np.ascontiguousarray(arrays["A"].T)).to("cuda").t()
    b = torch.from_numpy(np.ascontiguousarray(arrays["B"].T)).to("cuda").permute(1, 0)
    c = torch.from_numpy(np.ascontiguousarray(arrays["C"].T)).to("cuda").t()
    assert a.stride() == (1, 31) and not a.is_contiguous()
    backend.build(problem).run({"A": a, "B": b, "C": c}, SCALARS)
    check(problem, {"C": c.cpu().numpy()}, reference)


def test_allocate_follows_the_library_and_layout(backend):
    torch = pytest.importorskip("torch")
    problem = samples.gemm(5, 7, 3, "float32", "column")
    like = [torch.zeros(3, device="cuda")]
    made = backend.allocate(problem, "C", like)
    assert made.is_cuda and made.dtype == torch.float32
    assert made.shape == (5, 7) and made.stride() == (1, 5)
    host = backend.allocate(problem, "C", [])
    assert isinstance(host, np.ndarray) and host.flags.f_contiguous


def test_describe_torch_and_cupy(backend):
    torch = pytest.importorskip("torch")
    t = torch.zeros(4, 6, dtype=torch.float64, device="cuda").t()
    info = backend.describe(t)
    assert info.device == "cuda:0" and info.library == "torch"
    assert info.shape == (6, 4) and info.strides == (1, 6) and info.pointer == t.data_ptr()
    cupy = pytest.importorskip("cupy")
    c = cupy.zeros((3, 5), dtype=cupy.float32, order="F")
    info = backend.describe(c)
    assert info.device == "cuda:0" and info.strides == (1, 3) and info.dtype == "float32"


def test_describe_dlpack_from_jax(backend, monkeypatch):
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave memory to the rest
    jax = pytest.importorskip("jax")
    x = jax.numpy.ones((3, 4), dtype=jax.numpy.float32)
    info = backend.describe(x)
    assert info is not None and info.shape == (3, 4) and info.dtype == "float32"
    assert info.strides == (4, 1) and info.pointer != 0 and info.readonly


def test_device_properties(backend):
    props = backend.device_properties(0)
    assert props.multiprocessors > 0 and props.max_threads_per_block >= 1024
    assert props.arch.startswith("sm_") and props.l2_cache_bytes > 0


def test_profile_returns_one_time_per_kernel(backend):
    problem = samples.functions()
    arrays = samples.random_arrays(problem)
    times = backend.build(problem).profile(arrays, SCALARS, repeat=3)
    assert len(times) == len(problem.program.statements) and all(t > 0 for t in times)


def test_wrong_shape_is_an_argument_error(backend):
    problem = samples.gemm(4, 4, 4)
    arrays = samples.random_arrays(problem)
    arrays["A"] = np.zeros((4, 5))
    with pytest.raises(ArgumentError):
        backend.build(problem).run(arrays, SCALARS)


def test_64_bit_indexing_past_2_to_the_31_elements(backend):
    torch = pytest.importorskip("torch")
    n = 2**31 + 33
    free, _ = torch.cuda.mem_get_info()
    if free < 3 * 4 * n:
        pytest.skip(f"needs {3 * 4 * n / 1e9:.0f} GB of free GPU memory")
    tensors = [Tensor("x", ("n",), "float32"), Tensor("y", ("n",), "float32")]
    problem = samples.problem(
        "big",
        {"n": n},
        tensors,
        [(samples.acc("y", "i"), "=", samples.mul(Const(2.0), samples.acc("x", "i")))],
    )
    assert "long long b_i" in backend.emit(problem)
    x = torch.ones(n, dtype=torch.float32, device="cuda")
    x[2**31] = 5.0
    x[-1] = 3.0
    y = torch.zeros_like(x)
    backend.build(problem).run({"x": x, "y": y}, {})
    assert y[0].item() == 2.0 and y[2**31].item() == 10.0 and y[-1].item() == 6.0
    assert bool((y == 2 * x).all())


def test_torch_tensors_made_on_a_side_stream(backend):
    torch = pytest.importorskip("torch")
    problem = samples.gemm(512, 512, 512)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        a = torch.rand(512, 512, dtype=torch.float64, device="cuda")
        b = torch.rand(512, 512, dtype=torch.float64, device="cuda")
        for _ in range(20):  # keep the side stream busy
            a = (a @ b) / 512
        c = torch.zeros(512, 512, dtype=torch.float64, device="cuda")
        backend.build(problem).run({"A": a, "B": b, "C": c}, {"alpha": 1.0, "beta": 0.0})
        expected = a @ b
    stream.synchronize()
    assert float((c - expected).abs().max() / expected.abs().max()) < 1e-12


def test_jax_arrays_as_inputs_without_copies(monkeypatch):
    """JAX arrays are read-only: they are read in place through DLPack; the outputs
    come back as NumPy arrays."""
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = pytest.importorskip("jax")
    import einkern

    kernel = einkern.compile(
        "dims n = 37\ntensor A[n, n], B[n, n], C[n, n]\nC[i,j] = A[i,k] * B[k,j]", backend="cuda"
    )
    rng = np.random.default_rng(5)
    a, b = rng.uniform(0.5, 1.5, (37, 37)), rng.uniform(0.5, 1.5, (37, 37))
    if not jax.config.read("jax_enable_x64"):
        jax.config.update("jax_enable_x64", True)
    c = kernel(jax.device_put(a, jax.devices("gpu")[0]), jax.device_put(b, jax.devices("gpu")[0]))
    np.testing.assert_allclose(np.asarray(c), a @ b, rtol=1e-12)
