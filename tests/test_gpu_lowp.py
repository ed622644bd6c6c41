"""bfloat16 and float16 programs on the GPU through ``einkern.compile(...,
backend="cuda")``: SIMT kernels (small or non-contraction statements) and
tensor-core kernels (m16n8k16 bf16/f16, the first offered tile forced: 16-byte
cp.async tiles where the operands allow, else the register-copy ones; and the
default, which takes the former), with host arrays (NumPy float16, torch CPU
bfloat16), torch CUDA tensors and views starting off 16-byte alignment, against
the float64 reference within each output's tolerance; the default and the
tuner's warpgroup tiles staged by TMA on several index structures.  Selected only with
``pytest -m gpu``."""

from __future__ import annotations

import pytest
from test_lowp_dtypes import CASES

import einkern
from einkern.gpu.mma_model import mma_candidates
from einkern.ir.task import statement_task
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


def forced(program: str) -> dict:
    """Statement 0 on the first 16-bit tile the decision is offered."""
    problem = einkern.make_problem(einkern.load(program), {})
    return {0: {"x": "", "mma": mma_candidates(statement_task(problem, 0))[0].values()}}


@pytest.mark.parametrize("case", sorted(MMA))
def test_tensor_core_kernels_match_the_reference(case):
    dtype = MMA[case][0]
    program = mma_program(*MMA[case])
    kernel = einkern.compile(program, backend="cuda", mappings=forced(program))
    source = kernel.source()
    kind = "bf16" if dtype == "bfloat16" else "f16"
    assert ("mma.sync" in source or "wgmma.mma_async" in source) and f".{kind}.{kind}" in source
    assert_matches_reference(kernel, seed=4)


def every_tile(program: str) -> list:
    problem = einkern.make_problem(einkern.load(program), {})
    return mma_candidates(statement_task(problem, 0), tuning=True)


@pytest.mark.parametrize("case", sorted(MMA))
def test_every_offered_tile_matches_the_reference(case):
    """The warpgroup tiles (``wgmma`` from 128-byte swizzled tiles, K-major and
    M/N-major operands) and the ``mma.sync`` ones the tuner is offered."""
    program = mma_program(*MMA[case])
    for tile in every_tile(program):
        mappings = {0: {"x": "", "mma": tile.values()}}
        kernel = einkern.compile(program, backend="cuda", mappings=mappings)
        assert_matches_reference(kernel, seed=5)


def test_column_major_operands_on_warpgroup_tiles():
    """M-major A and K-major B (column layout): the other descriptor forms."""
    program = "layout column\n" + mma_program("bfloat16", "float32", "ij=ik*kj", 512)
    tiles = [t for t in every_tile(program) if t.shape.startswith("wgmma")]
    assert tiles
    for tile in tiles:
        mappings = {0: {"x": "", "mma": tile.values()}}
        kernel = einkern.compile(program, backend="cuda", mappings=mappings)
        assert_matches_reference(kernel, seed=7)


def test_the_default_takes_the_warpgroup_tiles():
    kernel = einkern.compile(mma_program(*MMA["bf16 gemm 1000, fp32 out"]), backend="cuda")
    source = kernel.source()
    assert "wgmma.mma_async" in source and "cp.async.bulk.tensor" in source
    assert_matches_reference(kernel, seed=6)


TMA_PROGRAMS = {
    "gemm 1000": mma_program("bfloat16", "float32", "ij=ik*kj", 1000),
    "column gemm 520": "layout column\n" + mma_program("bfloat16", "float32", "ij=ik*kj", 520),
    "batched": (
        "dims b = 4, i = 200, j = 192, k = 512\ntensor A[b,i,k], B[b,k,j] bfloat16\n"
        "tensor C[b,i,j] float32\nC[b,i,j] = A[b,i,k] * B[b,k,j]\n"
    ),
    "index groups": (
        "dims a = 40, b = 16, c = 24, d = 64, k = 6, l = 64\n"
        "tensor A[a,k,b,l], B[l,c,k,d] float16\ntensor C[a,b,c,d] float16\n"
        "C[a,b,c,d] = A[a,k,b,l] * B[l,c,k,d]\n"
    ),
}


@pytest.mark.parametrize("case", sorted(TMA_PROGRAMS))
def test_tma_tiles_on_index_structures(case):
    """Every TMA-staged warpgroup tile the tuner is offered (K-major and M/N-major
    operands, batches, groups of several indices, edges), called twice on
    different arrays (the maps are encoded again for the new addresses)."""
    program = TMA_PROGRAMS[case]
    tiles = [t for t in every_tile(program) if t.copy == "tma"]
    assert tiles
    for tile in tiles:
        mappings = {0: {"x": "", "mma": tile.values()}}
        kernel = einkern.compile(program, backend="cuda", mappings=mappings)
        assert "cp.async.bulk.tensor" in kernel.source()
        assert_matches_reference(kernel, seed=8)
        assert_matches_reference(kernel, seed=9)


def test_views_off_alignment_run_from_aligned_copies():
    """Inputs and output that start 2 bytes into their buffers (the kernel's
    16-byte copies cannot read them in place): the result lands in the view and
    the rest of the buffers is untouched."""
    program = mma_program(*MMA["bf16 gemm 1024, bf16 out"])
    kernel = einkern.compile(program, backend="cuda")
    assert "cp.async.bulk.tensor" in kernel.source()
    problem = kernel.problem
    host = random_arrays(problem, seed=7, names=problem.program.inputs)
    n = 1024 * 1024
    buffers = {
        name: torch.full((n + 1,), 3.0, dtype=torch.bfloat16, device="cuda") for name in "ABC"
    }
    views = {name: buffers[name][1:].view(1024, 1024) for name in "ABC"}
    views["A"].copy_(host["A"])
    views["B"].copy_(host["B"])
    kernel(A=views["A"], B=views["B"], C=views["C"])
    reference = evaluate(problem, host)["C"]
    assert relative_error(views["C"], reference) <= output_tolerance(problem, "C")
    assert float(buffers["C"][0]) == 3.0


def test_torch_cuda_tensors_in_and_out():
    program = mma_program(*MMA["bf16 gemm 1024, bf16 out"])
    kernel = einkern.compile(program, backend="cuda", mappings=forced(program))
    problem = kernel.problem
    host = random_arrays(problem, seed=5, names=problem.program.inputs)
    a, b = (host[name].cuda() for name in ("A", "B"))
    result = kernel(A=a, B=b)
    assert result.is_cuda and result.dtype == torch.bfloat16
    reference = evaluate(problem, host)["C"]
    assert relative_error(result, reference) <= output_tolerance(problem, "C")
