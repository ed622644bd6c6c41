"""bfloat16 and float16 programs on the GPU through ``einkern.compile(...,
backend="cuda")``: SIMT kernels (small or non-contraction statements) and
tensor-core kernels (m16n8k16 bf16/f16, the first offered tile forced: at the
measured rate the decision keeps 16-bit programs on the SIMT units), with host
arrays (NumPy float16, torch CPU bfloat16) and torch CUDA tensors, against the
float64 reference within each output's tolerance.  Selected only with ``pytest -m gpu``."""

from __future__ import annotations

import pytest
from test_lowp_dtypes import CASES

import einkern
from einkern.gpu.mma_model import HALF_TILES
from einkern.reference import evaluate, relative_error
from einkern.testing import assert_matches_reference, output_tolerance, random_arrays

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

MMA = {
    "bf16 gemm 1024, bf16 out": ("bfloat16", "bfloat16", "ij=ik*kj", 1024),
    "bf16 gemm 1000, fp32 out": ("bfloat16", "float32", "ij=ik*kj", 1000),
    "f16 gemm 1024, f16 out": ("float16", "float16", "ij=ik*kj", 1024),
    "f16 abkl,klcd 40, fp32 out": ("float16", "float32", "abcd=abkl*klcd", 40),
    "bf16 akbl,cldk 40": ("bfloat16", "bfloat16", "abcd=akbl*cldk", 40),
}


def mma_program(dtype: str, out: str, spec: str, n: int) -> str:
    result, product = spec.split("=")
    a, b = product.split("*")
    dims = ", ".join(f"{i} = {n}" for i in sorted(set(a + b)))
    return (
        f"dims {dims}\ntensor A[{', '.join(a)}], B[{', '.join(b)}] {dtype}\n"
        f"tensor C[{', '.join(result)}] {out}\n"
        f"C[{','.join(result)}] = A[{','.join(a)}] * B[{','.join(b)}]\n"
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_simt_kernels_match_the_reference(case):
    kernel = einkern.compile(CASES[case], backend="cuda")
    assert "mma.sync" not in kernel.source()
    assert_matches_reference(kernel, seed=3)


def forced(dtype: str) -> dict:
    """Statement 0 on the first 16-bit tile the decision is offered."""
    return {0: {"x": "", "mma": HALF_TILES[dtype][0].values()}}


@pytest.mark.parametrize("case", sorted(MMA))
def test_tensor_core_kernels_match_the_reference(case):
    dtype = MMA[case][0]
    kernel = einkern.compile(mma_program(*MMA[case]), backend="cuda", mappings=forced(dtype))
    source = kernel.source()
    kind = "bf16" if dtype == "bfloat16" else "f16"
    assert "mma.sync" in source and f".{kind}.{kind}." in source
    assert_matches_reference(kernel, seed=4)


def test_torch_cuda_tensors_in_and_out():
    program = mma_program(*MMA["bf16 gemm 1024, bf16 out"])
    kernel = einkern.compile(program, backend="cuda", mappings=forced("bfloat16"))
    problem = kernel.problem
    host = random_arrays(problem, seed=5, names=problem.program.inputs)
    a, b = (host[name].cuda() for name in ("A", "B"))
    result = kernel(A=a, B=b)
    assert result.is_cuda and result.dtype == torch.bfloat16
    reference = evaluate(problem, host)["C"]
    assert relative_error(result, reference) <= output_tolerance(problem, "C")
