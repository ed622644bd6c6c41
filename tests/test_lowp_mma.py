"""Tensor-core kernels for bfloat16 and float16 (m16n8k16 bf16/f16, fp32
accumulators, the output rounded to its dtype at the store), run in the CPU
emulator against the reference on several index structures with extents the
tiles do not divide; compiled by NVRTC for sm_80 and sm_90 without spills; the
decision and the tuner offer them; a wrong packing of fragment pairs is caught."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import problem_of

from einkern.backends.verify import verify
from einkern.gpu import mma_lower
from einkern.gpu.cuda_printer import print_cuda
from einkern.gpu.decision import decide
from einkern.gpu.mma import SHAPES, Layout
from einkern.gpu.mma_lower import MmaConfig, lower_mma, problems
from einkern.gpu.mma_model import HALF_TILES, mma_candidates
from einkern.ir.task import statement_task
from einkern.testing import output_tolerance
from einkern.tuning.cuda_target import CudaTarget

pytest.importorskip("torch")  # bfloat16 host arrays

PROGRAMS = {
    "gemm": ("tensor A[m,k], B[k,n]\ntensor C[m,n] {out}\nC[i,j] = A[i,k] * B[k,j]", {}),
    "gemm-column": (
        "layout column\ntensor A[m,k], B[k,n]\ntensor C[m,n] {out}\nC[i,j] = A[i,k] * B[k,j]",
        {},
    ),
    "four-index": (
        "tensor A[a,k,b,l], B[l,c,k,d]\ntensor C[a,b,c,d] {out}\n"
        "C[p,q,r,s] = A[p,x,q,y] * B[y,r,x,s]",
        dict(a=6, b=5, c=7, d=3, k=9, l=5),
    ),
    "batched": (
        "layout column\ntensor A[b,m,k], B[b,k,n]\ntensor C[b,m,n] {out}\n"
        "C[z,i,j] = A[z,i,x] * B[z,x,j]",
        dict(b=3, m=20, n=12, k=37),
    ),
    "update-scaled": (
        "tensor A[k,m], B[n,k]\ntensor C[m,n] {out}\nscalar alpha\n"
        "C[i,j] += alpha * A[x,i] * B[j,x]",
        dict(m=18, n=30, k=53),
    ),
    "subtract": (
        "tensor A[m,k], B[k,n]\ntensor C[n,m] {out}\nC[j,i] -= A[i,x] * B[x,j]",
        dict(m=16, n=8, k=24),
    ),
    "six-index-out": (
        "tensor A[a,b,c,k], B[k,d,e,f]\ntensor C[f,a,d,b,e,c] {out}\n"
        "C[u,p,s,q,t,r] = A[p,q,r,x] * B[x,s,t,u]",
        dict(a=3, b=4, c=2, d=3, e=2, f=5, k=19),
    ),
}
GEMM_EXTENTS = dict(m=45, n=37, k=70)
KIND = {"bfloat16": "bf16", "float16": "f16"}
CONFIGS = {
    "one warp": lambda kind: MmaConfig(f"m16n8k16_{kind}", 1, 1, 1, 1, 16, 0),
    "2x2 warps, k32": lambda kind: MmaConfig(f"m16n8k16_{kind}", 2, 2, 1, 2, 32),
    "two stages": lambda kind: MmaConfig(f"m16n8k16_{kind}", 2, 1, 2, 2, 32, stages=2),
    "k8 instruction": lambda kind: MmaConfig(f"m16n8k8_{kind}", 1, 2, 2, 1, 16),
}


def half_problem(name: str, dtype: str, out: str):
    text, extents = PROGRAMS[name]
    extents = extents or GEMM_EXTENTS
    body = text.format(out=out)
    return problem_of(f"program t\ndims {', '.join(extents)}\ndtype {dtype}\n{body}\n", **extents)


def check(problem, config: MmaConfig, seed: int = 0) -> float:
    kernel = lower_mma(statement_task(problem, 0), config)
    result = verify(problem, {0: None}, seed=seed, kernels=[kernel])
    assert result.bad_accesses == 0, result.errors[:3]
    out = problem.program.statements[0].output.tensor
    assert result.max_relative_error <= output_tolerance(problem, out), result
    return result.max_relative_error


@pytest.mark.parametrize("out", ["same", "float32"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_any_index_structure(name, dtype, out):
    problem = half_problem(name, dtype, dtype if out == "same" else out)
    check(problem, CONFIGS["2x2 warps, k32"](KIND[dtype]))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_tile_shapes(config, dtype):
    check(half_problem("gemm", dtype, "float32"), CONFIGS[config](KIND[dtype]), seed=1)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_default_tiles(dtype):
    problem = half_problem("gemm", dtype, dtype)
    for tile in HALF_TILES[dtype]:
        check(problem, tile)


def swapped_pairs(layout: Layout) -> Layout:
    """The layout with the two elements of every packed register exchanged: a valid
    cover of the matrix, with the wrong element in each half of the register."""
    return dataclasses.replace(layout, formula=lambda g, q, i: layout.formula(g, q, i ^ 1))


@pytest.mark.parametrize("operand", ["a", "b"])
def test_a_wrong_packed_fragment_layout_is_caught(operand, monkeypatch):
    problem = half_problem("gemm", "bfloat16", "float32")
    config = CONFIGS["2x2 warps, k32"]("bf16")
    check(problem, config)
    shape = SHAPES[config.shape]
    wrong = dataclasses.replace(shape, **{operand: swapped_pairs(getattr(shape, operand))})
    monkeypatch.setattr(mma_lower, "SHAPES", {**SHAPES, config.shape: wrong})
    kernel = lower_mma(statement_task(problem, 0), config)
    result = verify(problem, {0: None}, kernels=[kernel])
    assert result.bad_accesses == 0
    assert result.max_relative_error > 100 * output_tolerance(problem, "C")


def test_what_the_sixteen_bit_shapes_refuse():
    bf16 = CONFIGS["2x2 warps, k32"]("bf16")
    assert problems(statement_task(half_problem("gemm", "bfloat16", "float32"), 0), bf16) == []
    wide = statement_task(half_problem("gemm", "bfloat16", "float64"), 0)
    assert any("accumulates in float32" in p for p in problems(wide, bf16))
    other = statement_task(half_problem("gemm", "float16", "float16"), 0)
    assert any("needs bfloat16 inputs" in p for p in problems(other, bf16))
    asynchronous = dataclasses.replace(bf16, stages=2, copy="async")
    plain = statement_task(half_problem("gemm", "bfloat16", "bfloat16"), 0)
    assert any("cp.async" in p for p in problems(plain, asynchronous))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_kernels_compile_without_spills(dtype, arch):
    pytest.importorskip("cuda.bindings.nvrtc")
    from einkern.backends.cuda.nvrtc import compile_cubin

    problem = half_problem("six-index-out", dtype, dtype)
    configs = [*HALF_TILES[dtype], *(make(KIND[dtype]) for make in CONFIGS.values())]
    for config in configs:
        text = print_cuda(lower_mma(statement_task(problem, 0), config))
        assert f"ek_pack_{KIND[dtype]}(" in text
        module = compile_cubin(text, arch)
        assert all(r.spill_stores == 0 and r.spill_loads == 0 for r in module.resources), config


def big_gemm(a: str, out: str, n: int = 1024):
    return statement_task(
        problem_of(
            f"dims n\ntensor A[n,n], B[n,n] {a}\ntensor C[n,n] {out}\nC[i,j] = A[i,k] * B[k,j]", n=n
        ),
        0,
    )


def test_the_decision_and_the_tuner_offer_sixteen_bit_tiles():
    """Offered to the decision and the tuner; at the measured rate (slower than
    the fp32 SIMT kernels) the decision keeps the SIMT units."""
    task = big_gemm("bfloat16", "float32")
    assert mma_candidates(task) == list(HALF_TILES["bfloat16"])
    assert mma_candidates(big_gemm("float16", "float16")) == list(HALF_TILES["float16"])
    assert mma_candidates(big_gemm("bfloat16", "float64")) == []  # computes in float64
    assert mma_candidates(big_gemm("bfloat16", "bfloat16", n=64)) == []  # launch-bound
    mapping = decide(task)
    assert mapping.strategy != "mma"
    space = {p.name: p.values for p in CudaTarget().parameters(task)}
    assert set(HALF_TILES["bfloat16"]) <= set(space["mma"])
