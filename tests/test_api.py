"""The Python API on the CPU backend: compile, call, argument checks, einsum."""

from __future__ import annotations

import numpy as np
import pytest

import einkern
from einkern.errors import ArgumentError, DtypeError, EinkernError, LayoutError

GEMM = """
dims m, n, k
tensor A[m, k], B[k, n], C[m, n]
scalar alpha = 1.0, beta
C[i,j] = alpha * A[i,l] * B[l,j] + beta * C[i,j]
"""


def rand(rng, *shape, order="C", dtype=np.float64):
    return np.asarray(rng.uniform(0.5, 1.5, shape), dtype=dtype, order=order)


def test_compile_and_call_in_place_and_new_outputs():
    rng = np.random.default_rng(0)
    kernel = einkern.compile(GEMM, backend="cpu", m=5, n=7, k=3)
    assert kernel.inputs == ("A", "B", "C") and kernel.outputs == ("C",)
    A, B, C = rand(rng, 5, 3), rand(rng, 3, 7), rand(rng, 5, 7)
    expected = 2.0 * A @ B + 0.25 * C
    result = kernel(A, B, C, alpha=2.0, beta=0.25)
    assert result is C  # `=` output passed by the caller is written in place
    np.testing.assert_allclose(C, expected, rtol=1e-12)


def test_new_array_for_assigned_output_and_in_place_update():
    rng = np.random.default_rng(1)
    kernel = einkern.compile(
        "dims n = 6\ntensor x[n], y[n], z[n]\ny[i] = 3 * x[i]\nz[i] -= y[i] * x[i]", backend="cpu"
    )
    x, z = rand(rng, 6), rand(rng, 6)
    z0 = z.copy()
    y, z_out = kernel(x, z=z)
    assert z_out is z
    np.testing.assert_allclose(y, 3 * x, rtol=1e-14)
    np.testing.assert_allclose(z, z0 - 3 * x * x, rtol=1e-14)


def test_column_major_program_accepts_fortran_arrays_only():
    rng = np.random.default_rng(2)
    kernel = einkern.compile("examples/sd_t_d1_1.ein", backend="cpu", T=3)
    t2, v2 = rand(rng, 3, 3, 3, 3, order="F"), rand(rng, 3, 3, 3, 3, order="F")
    t3 = rand(rng, *(3,) * 6, order="F")
    expected = t3 - np.einsum("gfea,cbdg->cbadef", t2, v2)
    with pytest.raises(LayoutError) as info:
        kernel(np.ascontiguousarray(t3), t2, v2)
    assert "asfortranarray" in str(info.value)
    reference = einkern.evaluate(kernel.problem, {"t3": t3, "t2": t2, "v2": v2})["t3"]
    np.testing.assert_allclose(reference, expected, rtol=1e-13)
    kernel(t3, t2, v2)
    np.testing.assert_allclose(t3, expected, rtol=1e-12)


@pytest.mark.parametrize(
    "call, error, text",
    [
        (lambda k, a: k(a["A"], a["B"]), ArgumentError, "missing array for 'C'"),
        (lambda k, a: k(a["A"], a["B"], a["C"], a["A"]), ArgumentError, "positional"),
        (lambda k, a: k(**a, gamma=1.0), ArgumentError, "no tensor or scalar 'gamma'"),
        (lambda k, a: k(**a), ArgumentError, "scalar 'beta'"),
        (lambda k, a: k(**{**a, "A": a["A"][:, :2]}, beta=1), ArgumentError, "shape"),
        (lambda k, a: k(**{**a, "A": a["A"].astype(np.float32)}, beta=1), DtypeError, "dtype"),
        (lambda k, a: k(**{**a, "A": a["A"].astype(np.int64)}, beta=1), DtypeError, "int64"),
        (lambda k, a: k(**{**a, "A": np.asfortranarray(a["A"])}, beta=1), LayoutError, "row"),
        (lambda k, a: k(**{**a, "C": a["A"]}, beta=1), ArgumentError, "same memory"),
        (lambda k, a: k(a["A"], a["B"], [[1.0]], beta=1), ArgumentError, "cannot use"),
    ],
)
def test_argument_errors(call, error, text):
    rng = np.random.default_rng(3)
    kernel = einkern.compile(GEMM, backend="cpu", m=4, n=4, k=4)
    arrays = {"A": rand(rng, 4, 4), "B": rand(rng, 4, 4), "C": rand(rng, 4, 4)}
    before = {name: a.copy() for name, a in arrays.items()}
    with pytest.raises(error) as info:
        call(kernel, arrays)
    assert text in str(info.value)
    for name, array in arrays.items():  # nothing the user had is touched by a failure
        np.testing.assert_array_equal(array, before[name])


def test_argument_error_points_at_the_declaration():
    kernel = einkern.compile(GEMM, backend="cpu", m=4, n=4, k=4)
    with pytest.raises(ArgumentError) as info:
        kernel(np.ones((4, 4)), np.ones((4, 4)), beta=1.0)
    assert info.value.span is not None and info.value.span.line == 3


def test_written_array_aliasing_an_input_is_rejected():
    kernel = einkern.compile("dims n = 3\ntensor x[n], y[n]\ny[i] = 2 * x[i]", backend="cpu")
    x = np.ones(3) * 1.5
    with pytest.raises(ArgumentError, match="same memory"):
        kernel(x, y=x)


def test_einsum_matches_numpy_and_caches_kernels():
    rng = np.random.default_rng(4)
    A, B = rand(rng, 6, 4), rand(rng, 4, 5)
    np.testing.assert_allclose(einkern.einsum("ik,kj->ij", A, B), A @ B, rtol=1e-12)
    np.testing.assert_allclose(einkern.einsum("ik,kj", A, B), A @ B, rtol=1e-12)
    np.testing.assert_allclose(
        einkern.einsum("ij->j", np.asfortranarray(A)), A.sum(axis=0), rtol=1e-12
    )
    C = rand(rng, 4, 4)
    np.testing.assert_allclose(einkern.einsum("ii->i", C), np.diag(C), rtol=1e-14)
    from einkern.einsum import einsum_plan

    assert einsum_plan("ik,kj->ij", A, B) is einsum_plan("ik,kj->ij", A, B)  # cached


@pytest.mark.parametrize(
    "spec, shapes, error",
    [
        ("ik,kj->ij", [(2, 3), (4, 2)], ArgumentError),
        ("ik->iz", [(2, 3)], ArgumentError),
        ("ik,kj", [(2, 3)], ArgumentError),
        ("i..,j", [(2,), (2,)], EinkernError),
    ],
)
def test_einsum_errors(spec, shapes, error):
    with pytest.raises(error):
        einkern.einsum(spec, *(np.ones(s) for s in shapes), backend="cpu")


@pytest.mark.parametrize(
    "value, text",
    [
        (10**400, "does not fit its dtype float64"),
        (-(10**400), "does not fit its dtype float64"),
        ("2", "must be a real number (int, float or a NumPy number), got a str"),
        (b"2", "got a bytes"),
        (1 + 2j, "got a complex"),
        (None, "got a NoneType"),
        ([1.0], "got a list"),
        (True, "got a bool"),
    ],
)
def test_bad_scalars_are_typed_errors(value, text):
    kernel = einkern.compile(GEMM, backend="cpu", m=2, n=2, k=2)
    arrays = {"A": np.ones((2, 2)), "B": np.ones((2, 2)), "C": np.ones((2, 2))}
    with pytest.raises(ArgumentError) as info:
        kernel(**arrays, beta=value)
    assert text in str(info.value) and info.value.span is not None
    assert "10000000000" not in str(info.value)  # a huge integer is not printed in full


def test_float32_scalar_must_fit_float32():
    kernel = einkern.compile(
        "dims n = 3\ntensor x[n], y[n] float32\nscalar s float32\ny[i] = s * x[i]", backend="cpu"
    )
    x = np.ones(3, dtype=np.float32)
    with pytest.raises(ArgumentError, match="does not fit its dtype float32"):
        kernel(x, s=1e39)
    np.testing.assert_array_equal(kernel(x, s=np.float64(2.5)), 2.5 * x)
    np.testing.assert_array_equal(kernel(x, s=np.int64(3)), 3 * x)
    np.testing.assert_array_equal(kernel(x, s=np.array(0.5)), 0.5 * x)
    assert np.all(np.isinf(kernel(x, s=float("inf"))))  # infinity is representable


def test_messages_use_articles_and_say_strides_are_elements():
    kernel = einkern.compile(GEMM, backend="cpu", m=4, n=4, k=4)
    arrays = {"A": np.ones((4, 4)), "B": np.ones((4, 4)), "C": np.ones((4, 4))}
    with pytest.raises(ArgumentError) as info:
        kernel(**{**arrays, "A": 3}, beta=1.0)
    assert "cannot use an int" in str(info.value) and "accepts NumPy arrays" in str(info.value)
    with pytest.raises(LayoutError) as info:
        kernel(**{**arrays, "A": np.asfortranarray(arrays["A"])}, beta=1.0)
    assert "(1, 4) in elements" in str(info.value) and "(4, 1)" in str(info.value)
    with pytest.raises(ArgumentError, match="cannot use an int"):
        einkern.einsum("i->i", 3, backend="cpu")


def test_call_time_dtype_and_layout_errors_are_argument_errors_too():
    kernel = einkern.compile(GEMM, backend="cpu", m=4, n=4, k=4)
    arrays = {"A": np.ones((4, 4)), "B": np.ones((4, 4)), "C": np.ones((4, 4))}
    with pytest.raises(ArgumentError):
        kernel(**{**arrays, "B": arrays["B"].astype(np.float32)}, beta=1.0)
    with pytest.raises(ArgumentError):
        kernel(**{**arrays, "B": arrays["B"].T}, beta=1.0)


def test_overlapping_views_of_a_written_array_are_refused():
    kernel = einkern.compile("dims n = 4\ntensor x[n], y[n]\ny[i] = 2 * x[i]", backend="cpu")
    buffer = np.ones(6)
    with pytest.raises(ArgumentError, match="overlap in memory"):
        kernel(buffer[:4], y=buffer[2:])
    y = np.zeros(4)
    np.testing.assert_array_equal(kernel(buffer[:4], y=y), 2 * buffer[:4])


def test_stream_is_refused_on_the_cpu_backend():
    kernel = einkern.compile("dims n = 2\ntensor x[n], y[n]\ny[i] = x[i]", backend="cpu")
    with pytest.raises(ArgumentError, match="stream= applies to GPU backends"):
        kernel(np.ones(2), stream=0)


def test_bind_checks_once_and_run_checked_runs():
    kernel = einkern.compile(GEMM, backend="cpu", m=3, n=3, k=3)
    A, B = np.full((3, 3), 2.0), np.eye(3)
    call = kernel.bind(A, B, np.zeros((3, 3)), beta=0.0)
    assert set(call.arrays) == {"A", "B", "C"} and call.scalars == {"alpha": 1.0, "beta": 0.0}
    assert call.infos["A"].shape == (3, 3) and call.stream is None
    kernel.executable.run_checked(call)
    np.testing.assert_array_equal(call.arrays["C"], A @ B)


def test_torch_cpu_tensors_are_host_arrays_on_the_cpu_backend():
    torch = pytest.importorskip("torch")
    kernel = einkern.compile(GEMM, backend="cpu", m=3, n=4, k=5)
    A, B = torch.rand(3, 5, dtype=torch.float64), torch.rand(5, 4, dtype=torch.float64)
    C = torch.zeros(3, 4, dtype=torch.float64)
    assert kernel(A, B, C, beta=0.0) is C
    torch.testing.assert_close(C, A @ B, rtol=1e-12, atol=0)
    with pytest.raises(ArgumentError, match="detach"):
        kernel(A.requires_grad_(), B, C, beta=0.0)


def test_a_tensor_named_stream_is_an_argument_not_a_stream():
    kernel = einkern.compile(
        "dims n = 2\ntensor stream[n], y[n]\ny[i] = 2 * stream[i]", backend="cpu"
    )
    np.testing.assert_array_equal(kernel(stream=np.ones(2)), [2.0, 2.0])
