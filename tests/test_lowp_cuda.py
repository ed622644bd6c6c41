"""bfloat16 and float16 on the CUDA backend's SIMT kernels without a GPU: the kernels
load 16-bit elements, compute in float and round at the store; run by the CPU
emulator against the reference, and compiled by NVRTC for sm_80 and sm_90."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
from test_cuda_backend import CASES as CUDA_CASES
from test_gpu_emulation import random_mappings, seed_of
from test_lowp_dtypes import CASES

import einkern
from einkern.backends.cuda.generate import generate
from einkern.backends.verify import verify
from einkern.gpu.cuda_printer import print_cuda
from einkern.gpu.decision import decide
from einkern.gpu.lower import lower
from einkern.gpu.mapping import Mapping, ParallelTile, Staging
from einkern.ir.task import statement_task, tasks_of
from einkern.testing import output_tolerance

pytest.importorskip("torch")  # bfloat16 host arrays


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("EINKERN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "ekc"))


def problem_of(text: str, sizes=None):
    return einkern.make_problem(einkern.load(text), sizes)


def tolerance(problem) -> float:
    return max(output_tolerance(problem, name) for name in problem.program.outputs)


@pytest.mark.parametrize("case", list(CASES))
def test_default_kernels_match_the_reference(case):
    problem = problem_of(CASES[case])
    mappings = {t.position: decide(t) for t in tasks_of(problem)}
    result = verify(problem, mappings, seed=4)
    assert result.bad_accesses == 0, result.errors[:3]
    assert result.max_relative_error <= tolerance(problem)


HALF_GEMM = """
dims m, n, k
tensor A[m,k] {a}
tensor B[k,n] {a} column
tensor C[m,n] {c}
C[i,j] += A[i,k] * B[k,j]
"""


@pytest.mark.parametrize("dtypes", [("bfloat16", "bfloat16"), ("float16", "float32")])
@pytest.mark.parametrize("seed", range(3))
def test_random_mappings_match_the_reference(dtypes, seed):
    rng = random.Random(seed_of("lowp", dtypes, seed))
    sizes = {"m": rng.choice((1, 7, 33)), "n": rng.choice((5, 32, 40)), "k": rng.choice((3, 64))}
    problem = problem_of(HALF_GEMM.format(a=dtypes[0], c=dtypes[1]), sizes)
    mappings = random_mappings(problem, rng)
    result = verify(problem, mappings, seed=seed)
    described = {p: m.to_json() for p, m in mappings.items()}
    assert result.bad_accesses == 0, (sizes, described, result.errors[:3])
    assert result.max_relative_error <= tolerance(problem), (sizes, described)


def staged(dtype: str):
    problem = problem_of(
        f"dims m = 13, n = 29, k = 11\ntensor A[m,k], B[k,n], C[m,n] {dtype}\n"
        "C[i,j] = A[i,k] * B[k,j]"
    )
    mapping = Mapping(
        "shared",
        (ParallelTile("j", 16, 8, True), ParallelTile("i", 8, 4, False)),
        k_step=(("k", 4),),
        staged=(Staging("A[i,k]", (), 1), Staging("B[k,j]", ("k", "j"), 0)),
        prefetch=True,
        vector_width=4,
        boundary="guard",
    )
    return problem, mapping


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_staged_tiles_load_sixteen_bit_elements_one_at_a_time(dtype):
    problem, mapping = staged(dtype)
    kernel = lower(statement_task(problem, 0), mapping)
    text = print_cuda(kernel)
    assert "reinterpret_cast<const" not in text  # no vector loads of 2-byte elements
    assert verify(problem, {0: mapping}, kernels=[kernel]).ok(tolerance(problem))


def test_an_element_widened_as_the_wrong_type_is_caught():
    """The same float16 kernel with its input declared bfloat16 (the bits read by
    the other helper) fails: the conversions are what the emulator runs."""
    problem, mapping = staged("float16")
    kernel = lower(statement_task(problem, 0), mapping)
    assert verify(problem, {0: mapping}, kernels=[kernel]).ok(tolerance(problem))
    params = tuple(
        dataclasses.replace(p, ctype="ek_bf16") if p.name == "p_A" else p for p in kernel.params
    )
    broken = dataclasses.replace(kernel, params=params)
    assert "ek_bf16_to_float(p_A" in print_cuda(broken)
    arrays = einkern.testing.random_arrays(problem)
    from einkern.backends.emulator import emulate

    work = {f"p_{n}": a.copy() for n, a in arrays.items()}
    work["p_A"] = work["p_A"].view(np.uint16)
    emulate([broken], work, {})
    reference = einkern.reference.evaluate(problem, arrays)["C"]
    error = einkern.reference.relative_error(work["p_C"], reference)
    assert error > 10 * tolerance(problem)


#: test_cuda_backend's sample programs of products and sums (not its elementwise
#: functions or diagonals)
SAMPLES = {n: build for n, build in CUDA_CASES.items() if n not in ("functions", "diagonal")}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("case", sorted(SAMPLES))
def test_kernels_compile_without_spills(case, dtype, arch):
    pytest.importorskip("cuda.bindings.nvrtc")
    from einkern.backends.cuda.nvrtc import compile_cubin

    generated = generate(SAMPLES[case](dtype))
    assert "ek_float_to_" in generated.text
    module = compile_cubin(generated.text, arch)
    assert module.resources
    assert all(r.spill_stores == 0 and r.spill_loads == 0 for r in module.resources)


FOUR_INDEX = """
dims a = 6, b = 5, c = 7, d = 4, k = 9, l = 8
tensor A[a,k,b,l] {dtype}
tensor B[c,l,d,k] {dtype} column
tensor C[a,b,c,d] {dtype}
C[a,b,c,d] += A[a,k,b,l] * B[c,l,d,k]
"""


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("how", ["ttgt", "split-k"])
def test_rewritten_sixteen_bit_contractions(how, dtype):
    """TTGT (16-bit transposes, exact, then a GEMM) and split-K (float32 partial
    sums) of a 16-bit contraction: the CPU backend and the emulated CUDA
    kernels against the original's reference."""
    from einkern.api import Kernel
    from einkern.arrays import storage_view
    from einkern.backends import get_backend
    from einkern.backends.rewritten import emulate_rewritten
    from einkern.ir.rewrite_k import split_k
    from einkern.ir.rewrite_plan import RewritePlan
    from einkern.ir.rewrite_ttgt import ttgt
    from einkern.reference import evaluate, relative_error
    from einkern.semantics import bfloat16_values
    from einkern.testing import assert_matches_reference, random_arrays

    original = problem_of(FOUR_INDEX.format(dtype=dtype))
    rewrite = ttgt(original, 0) if how == "ttgt" else split_k(original, 0, 3)
    temporaries = {t.name: t.dtype for t in rewrite.problem.program.tensors if t.temporary}
    sums = [name for name in temporaries if name.endswith("_P")]  # split-K's partial sums
    assert temporaries and all(temporaries[name] == "float32" for name in sums)
    assert (how == "split-k") == bool(sums)
    plan = RewritePlan(original, rewrite.problem, (rewrite,), (rewrite.reason,))
    kernel = Kernel(original, get_backend("cpu"), plan=plan)
    assert_matches_reference(kernel, original, seed=3)
    arrays = random_arrays(original, 5)
    expected = evaluate(original, arrays)["C"]
    work = {name: np.array(storage_view(a), copy=True, order="K") for name, a in arrays.items()}
    mappings = {task.position: decide(task) for task in tasks_of(rewrite.problem)}
    result, bad = emulate_rewritten(rewrite.problem, mappings, work, {})
    assert bad == 0
    got = bfloat16_values(result["C"]) if dtype == "bfloat16" else result["C"]
    assert relative_error(got, expected) <= output_tolerance(original, "C")
