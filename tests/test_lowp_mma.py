"""Tensor-core kernels for bfloat16 and float16 (m16n8k16 bf16/f16, fp32
accumulators, the output rounded to its dtype at the store; 16-bit shared tiles,
fragments by ldmatrix), run in the CPU emulator against the reference on several
index structures with extents the tiles do not divide, through registers and
through 16-byte cp.async copies; compiled by NVRTC for sm_80 and sm_90 without
spills; the decision and the tuner offer them; a wrong ldmatrix (transposed or
not, registers in the wrong order, a misaligned row) and a misaligned vector copy
are caught."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import numpy as np
import pytest
from conftest import problem_of

from einkern.backends.emulator import emulate, print_emulation_c
from einkern.backends.verify import verify
from einkern.gpu import kir, mma_builder
from einkern.gpu.cuda_printer import print_cuda
from einkern.gpu.decision import decide
from einkern.gpu.mma_lower import MmaConfig, lower_mma, problems
from einkern.gpu.mma_model import (
    HALF_REGISTER_TILES,
    HALF_TILES,
    HALF_TUNING_TILES,
    WARPGROUP_TILES,
    mma_candidates,
)
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
    "batched-row": (
        "tensor A[b,m,k], B[b,k,n]\ntensor C[b,m,n] {out}\nC[z,i,j] = A[z,i,x] * B[z,x,j]",
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
#: Extents under which every operand's contiguous index is a multiple of 8 (and
#: every stride): the tiles are copied 16 bytes per cp.async.
ALIGNED = {
    "gemm": dict(m=48, n=40, k=72),
    "gemm-column": dict(m=40, n=56, k=48),
    "four-index": dict(a=6, b=8, c=7, d=8, k=9, l=8),
    "batched-row": dict(b=3, m=24, n=16, k=40),
    "update-scaled": dict(m=24, n=32, k=56),
}
ASYNC = {
    "3 stages": lambda kind: MmaConfig(f"m16n8k16_{kind}", 2, 2, 1, 2, 32, stages=3, copy="async"),
    "2 stages, 2x2 tiles": lambda kind: MmaConfig(
        f"m16n8k16_{kind}", 1, 2, 2, 2, 16, stages=2, copy="async"
    ),
    "k8, 3 B tiles": lambda kind: MmaConfig(
        f"m16n8k8_{kind}", 2, 1, 1, 3, 16, stages=4, copy="async"
    ),
}
KIND = {"bfloat16": "bf16", "float16": "f16"}
CONFIGS = {
    "one warp": lambda kind: MmaConfig(f"m16n8k16_{kind}", 1, 1, 1, 1, 16, 0),
    "2x2 warps, k32": lambda kind: MmaConfig(f"m16n8k16_{kind}", 2, 2, 1, 2, 32),
    "two stages": lambda kind: MmaConfig(f"m16n8k16_{kind}", 2, 1, 2, 2, 32, stages=2),
    "k8 instruction": lambda kind: MmaConfig(f"m16n8k8_{kind}", 1, 2, 2, 1, 16),
}


def half_problem(name: str, dtype: str, out: str, extents: dict | None = None):
    text, given = PROGRAMS[name]
    extents = extents or given or GEMM_EXTENTS
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
    problem = half_problem("gemm", dtype, dtype, dict(m=136, n=264, k=200))
    for tile in HALF_TILES[dtype]:
        check(problem, tile)
    problem = half_problem("gemm", dtype, dtype)
    for tile in HALF_REGISTER_TILES[dtype]:
        check(problem, tile)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", sorted(ALIGNED))
def test_sixteen_byte_copies(name, dtype):
    problem = half_problem(name, dtype, "float32", ALIGNED[name])
    for make in ASYNC.values():
        config = make(KIND[dtype])
        assert problems(statement_task(problem, 0), config) == []
        check(problem, config)


def _replaced(sections, change):
    """``sections`` with every LoadMatrix and CopyAsync passed through ``change``."""
    out = []
    for s in sections:
        if isinstance(s, kir.LoadMatrix):
            s = change(s)
        elif isinstance(s, kir.Uniform):
            s = dataclasses.replace(s, body=tuple(_replaced(s.body, change)))
        elif isinstance(s, kir.PerThread):
            s = kir.PerThread(tuple(_statements(s.body, change)))
        out.append(s)
    return out


def _statements(body, change):
    for stmt in body:
        if isinstance(stmt, kir.CopyAsync):
            yield change(stmt)
        elif isinstance(stmt, kir.If):
            yield dataclasses.replace(stmt, body=tuple(_statements(stmt.body, change)))
        else:
            yield stmt


def _only(kind, change):
    return lambda node: change(node) if isinstance(node, kind) else node


def _planted(problem, config, change):
    kernel = lower_mma(statement_task(problem, 0), config)
    return dataclasses.replace(kernel, body=tuple(_replaced(kernel.body, change)))


@pytest.mark.parametrize("name", ["gemm", "gemm-column"])
def test_a_transposed_ldmatrix_is_caught(name):
    problem = half_problem(name, "bfloat16", "float32", ALIGNED[name])
    config = ASYNC["3 stages"]("bf16")
    check(problem, config)
    flip = _only(kir.LoadMatrix, lambda s: replace(s, trans=not s.trans))
    kernel = _planted(problem, config, flip)
    result = verify(problem, {0: None}, kernels=[kernel])
    assert result.bad_accesses == 0
    assert result.max_relative_error > 100 * output_tolerance(problem, "C")


@pytest.mark.parametrize("operand", ["a", "b"])
def test_fragment_registers_in_the_wrong_order_are_caught(operand, monkeypatch):
    """The submatrices of an operand's registers taken in reverse order (a valid
    cover of the instruction tile, each register from the wrong place)."""
    problem = half_problem("gemm", "bfloat16", "float32")
    config = CONFIGS["2x2 warps, k32"]("bf16")
    check(problem, config)
    origins = mma_builder.register_origins
    wrong = "a" if operand == "a" else "b"

    def reversed_origins(layout, k_along_cols):
        found = origins(layout, k_along_cols)
        return found[::-1] if k_along_cols == (wrong == "a") else found

    monkeypatch.setattr(mma_builder, "register_origins", reversed_origins)
    kernel = lower_mma(statement_task(problem, 0), config)
    result = verify(problem, {0: None}, kernels=[kernel])
    assert result.bad_accesses == 0
    assert result.max_relative_error > 100 * output_tolerance(problem, "C")


def _given(problem, seed=0):
    rng = np.random.default_rng(seed)
    return {
        f"p_{t.name}": rng.standard_normal(problem.shape(t.name)).astype(np.float32)
        if t.dtype == "float32"
        else rng.integers(0x3F00, 0x3F80, problem.shape(t.name)).astype(np.uint16)
        for t in problem.program.tensors
    }


def test_misaligned_ldmatrix_rows_and_vector_copies_are_reported():
    problem = half_problem("gemm", "bfloat16", "float32", ALIGNED["gemm"])
    config = ASYNC["3 stages"]("bf16")
    shift = _only(kir.LoadMatrix, lambda s: replace(s, index=kir.Op("+", s.index, kir.Int(2))))
    shifted = _planted(problem, config, shift)
    report = emulate([shifted], _given(problem), {})
    assert report.error_count and {e.problem for e in report.errors} == {"misaligned"}
    assert {e.access for e in report.errors} == {"ldmatrix row"}

    copy = _only(kir.CopyAsync, lambda s: replace(s, index=kir.Op("+", s.index, kir.Int(4))))
    report = emulate([_planted(problem, config, copy)], _given(problem), {})
    assert "misaligned" in {e.problem for e in report.errors}
    assert "vector copy" in {e.access for e in report.errors}


def test_what_the_sixteen_bit_shapes_refuse():
    bf16 = CONFIGS["2x2 warps, k32"]("bf16")
    assert problems(statement_task(half_problem("gemm", "bfloat16", "float32"), 0), bf16) == []
    wide = statement_task(half_problem("gemm", "bfloat16", "float64"), 0)
    assert any("accumulates in float32" in p for p in problems(wide, bf16))
    other = statement_task(half_problem("gemm", "float16", "float16"), 0)
    assert any("needs bfloat16 inputs" in p for p in problems(other, bf16))
    asynchronous = dataclasses.replace(bf16, stages=2, copy="async")
    odd = problems(statement_task(half_problem("gemm", "bfloat16", "bfloat16"), 0), asynchronous)
    assert "16-byte cp.async of the tiles: A: extent 70 of k is not a multiple of 8" in odd
    aligned = statement_task(half_problem("gemm", "bfloat16", "bfloat16", ALIGNED["gemm"]), 0)
    assert problems(aligned, asynchronous) == []
    padded = dataclasses.replace(bf16, padding=4)
    assert any("multiple of 8" in p for p in problems(aligned, padded))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_kernels_compile_without_spills(dtype, arch):
    pytest.importorskip("cuda.bindings.nvrtc")
    from einkern.backends.cuda.nvrtc import compile_cubin

    problem = half_problem("six-index-out", dtype, dtype)
    aligned = half_problem("gemm", dtype, dtype, ALIGNED["gemm"])
    configs = [*HALF_REGISTER_TILES[dtype], *(make(KIND[dtype]) for make in CONFIGS.values())]
    configs += [*HALF_TILES[dtype], *HALF_TUNING_TILES[dtype]]
    configs += [make(KIND[dtype]) for make in ASYNC.values()]
    for config in configs:
        target = aligned if config.copy == "async" else problem
        text = print_cuda(lower_mma(statement_task(target, 0), config))
        assert "ldmatrix.sync.aligned.m8n8" in text
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
    """Offered to the decision and the tuner: the warpgroup tiles staged by TMA
    and by cp.async and the cp.async mma.sync tiles where both operands can be
    copied 16 bytes at a time, and the decision takes the TMA ones; else
    the register-copy tiles, which at their measured rate (slower than the fp32
    SIMT kernels) the decision leaves to the SIMT units."""
    task = big_gemm("bfloat16", "float32")
    warpgroup = list(WARPGROUP_TILES["bfloat16"])
    staged = [replace(t, copy="tma") for t in warpgroup]  # sm_90: wgmma, by TMA and cp.async
    both = [*staged, *warpgroup, *HALF_TILES["bfloat16"]]
    assert mma_candidates(task) == both
    assert mma_candidates(task, arch="sm_80") == list(HALF_TILES["bfloat16"])
    assert mma_candidates(big_gemm("float16", "float16"), arch="sm_86") == list(
        HALF_TILES["float16"]
    )
    assert mma_candidates(big_gemm("bfloat16", "float64")) == []  # computes in float64
    assert mma_candidates(big_gemm("bfloat16", "bfloat16", n=64)) == []  # launch-bound
    mapping = decide(task)
    assert mapping.strategy == "mma" and replace(mapping.mma, group_m=1) in staged
    space = {p.name: p.values for p in CudaTarget().parameters(task)}
    offered = set(both) | set(HALF_TUNING_TILES["bfloat16"])
    assert offered <= set(space["mma"])
    odd = big_gemm("bfloat16", "float32", n=1001)  # rows of 1001 elements: 2-byte aligned
    assert mma_candidates(odd) == list(HALF_REGISTER_TILES["bfloat16"])
    assert decide(odd).strategy != "mma"


def test_sixteen_bit_products_take_only_ldmatrix_words():
    """A bf16 MMA whose operand is a float array (not words of packed values) is
    refused by both printers."""
    problem = half_problem("gemm", "bfloat16", "float32")
    kernel = lower_mma(statement_task(problem, 0), CONFIGS["one warp"]("bf16"))
    floats = tuple(replace(v, ctype="float") if v.name == "fa" else v for v in kernel.thread_vars)
    wrong = replace(kernel, thread_vars=floats)
    for printer in (print_cuda, print_emulation_c):  # ldmatrix into it refused first
        with pytest.raises(ValueError, match="ldmatrix into 'fa': not an unsigned thread array"):
            printer(wrong)

    def without_ldmatrix(sections):
        return tuple(
            replace(s, body=without_ldmatrix(s.body)) if isinstance(s, kir.Uniform) else s
            for s in sections
            if not isinstance(s, kir.LoadMatrix)
        )

    wrong = replace(wrong, body=without_ldmatrix(wrong.body))
    for printer in (print_cuda, print_emulation_c):
        with pytest.raises(ValueError, match="'fa': not an unsigned thread array of packed"):
            printer(wrong)
