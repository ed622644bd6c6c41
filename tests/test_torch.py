"""``einkern.torch``: a compiled kernel as a torch custom operator, on the CPU
backend with CPU tensors (the CUDA side is in ``test_gpu_runtime.py``)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import einkern  # noqa: E402
import einkern.torch  # noqa: E402
from einkern.errors import ArgumentError  # noqa: E402

PROGRAM = """
dims m, n, k
tensor A[m, k], B[k, n], C[m, n], D[m, n]
scalar alpha = 1.0, beta
C[i,j] += alpha * A[i,l] * B[l,j]
D[i,j] = beta * C[i,j] + max(C[i,j], 1.5)
"""


@pytest.fixture(scope="module")
def kernel():
    return einkern.compile(PROGRAM, backend="cpu", m=3, n=4, k=5)


@pytest.fixture(scope="module")
def gemm_op(kernel):
    return einkern.torch.op(kernel)


def tensors(seed=0, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    return tuple(
        torch.rand(*shape, dtype=dtype, generator=generator) + 0.5
        for shape in ((3, 5), (5, 4), (3, 4))
    )


def reference(kernel, A, B, C, alpha=1.0, beta=2.0):
    arrays = {"A": A.numpy(), "B": B.numpy(), "C": C.numpy().copy()}
    result = einkern.evaluate(kernel.problem, arrays, {"alpha": alpha, "beta": beta})
    return torch.from_numpy(result["C"]), torch.from_numpy(result["D"])


def test_operator_declares_mutated_and_created_tensors(gemm_op):
    assert gemm_op.inputs == ("A", "B", "C")
    assert gemm_op.mutated == ("C",) and gemm_op.created == ("D",)
    schema = str(gemm_op.op._opoverload._schema)
    assert "Tensor(a2!) t_C" in schema and "float s_alpha" in schema and "-> Tensor" in schema
    assert gemm_op.name.startswith("einkern::program_")


def test_eager_call_updates_in_place_and_returns_new_outputs(kernel, gemm_op):
    A, B, C = tensors()
    want_C, want_D = reference(kernel, A, B, C, beta=2.0)
    C_out, D = gemm_op(A, B, C, beta=2.0)
    assert C_out is C  # updated in place, the caller's tensor returned
    torch.testing.assert_close(C, want_C, rtol=1e-12, atol=0)
    torch.testing.assert_close(D, want_D, rtol=1e-12, atol=0)


def test_under_torch_compile(kernel, gemm_op):
    A, B, C = tensors(1)
    want_C, want_D = reference(kernel, A, B, C, alpha=0.5, beta=3.0)

    def f(a, b, c):
        c2, d = gemm_op(a, b, c, alpha=0.5, beta=3.0)
        return d * 2 + c2.sum()

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    result = compiled(A, B, C)
    torch.testing.assert_close(C, want_C, rtol=1e-12, atol=0)  # the mutation is kept
    torch.testing.assert_close(result, want_D * 2 + want_C.sum(), rtol=1e-12, atol=0)


def test_opcheck_schema_fake_and_autograd_registration(gemm_op):
    A, B, C = tensors(2)
    torch.library.opcheck(gemm_op.op, (A, B, C, 1.0, 2.0))


def test_fake_tensors_give_shapes_and_layouts_without_running(kernel):
    column = einkern.compile(
        "dims n = 3, m = 2\ntensor x[n, m], y[m, n] column\ny[j, i] = 2 * x[i, j]", backend="cpu"
    )
    transpose = einkern.torch.op(column)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        y = transpose(torch.empty_strided((3, 2), (1, 3), dtype=torch.float64))
    assert y.shape == (2, 3) and y.stride() == (1, 2) and y.dtype == torch.float64
    x = torch.rand(3, 2, dtype=torch.float64)  # row-major: copied into column-major
    torch.testing.assert_close(transpose(x), 2 * x.T, rtol=0, atol=0)


def test_float32_and_argument_errors(kernel):
    k32 = einkern.compile(
        PROGRAM.replace(
            "tensor A[m, k], B[k, n], C[m, n], D[m, n]",
            "tensor A[m, k], B[k, n], C[m, n], D[m, n] float32",
        ),
        backend="cpu",
        m=3,
        n=4,
        k=5,
    )
    op32 = einkern.torch.op(k32)
    A, B, C = tensors(3, torch.float32)
    want_C, want_D = reference(k32, A.double(), B.double(), C.double(), beta=1.5)
    _, D = op32(A, B, C, beta=1.5)
    assert float((D.double() - want_D).abs().max() / want_D.abs().max()) < 1e-5
    with pytest.raises(ArgumentError, match="scalar 'beta'"):
        op32(A, B, C)
    with pytest.raises(ArgumentError, match="does not fit"):
        op32(A, B, C, beta=10**400)
    with pytest.raises(ArgumentError, match="takes no argument 'D'"):
        op32(A, B, C, D=C, beta=1.0)


def test_same_kernel_same_operator_and_name_clashes(kernel, gemm_op):
    assert einkern.torch.op(kernel) is gemm_op
    other = einkern.compile("dims n = 2\ntensor x[n], y[n]\ny[i] = x[i]", backend="cpu")
    named = einkern.torch.op(other, "copy_two")
    np.testing.assert_array_equal(named(torch.ones(2, dtype=torch.float64)).numpy(), [1, 1])
    with pytest.raises(ArgumentError, match="already registered"):
        einkern.torch.op(kernel, "copy_two")
    with pytest.raises(ArgumentError, match="not an identifier"):
        einkern.torch.op(kernel, "bad name")
