"""The one table of meaning (einkern.semantics) as every backend applies it:
NumPy's NaN semantics of max/min and the mixed-dtype rule, on the CPU backend
and on the CUDA kernels (run in the emulator, and compiled with NVRTC)."""

from __future__ import annotations

import numpy as np
import pytest

import einkern
from einkern import semantics
from einkern.arrays import random_arrays
from einkern.backends.cpu import CpuBackend
from einkern.backends.cuda import CudaBackend
from einkern.backends.verify import emulate_problem
from einkern.gpu.decision import decide
from einkern.ir.task import tasks_of
from einkern.reference import evaluate, relative_error

NAN_MAX = """
program nanmax
dims n = 8
tensor A[n], B[n], C[n], D[n], E[n] {dtype}
C[i] = max(A[i], B[i])
D[i] = min(A[i], B[i])
E[i] = max(A[i], 2.0) + min(-3.0, B[i])
"""

MIXED_GEMM = """
program mixed
dims m = 19, n = 24, k = 16
tensor A[m,k], B[k,n] float32
tensor C[m,n] float64
C[i,j] = A[i,k] * B[k,j]
"""


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("EINKERN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "ekc"))


def problem_of(text: str, sizes=None):
    return einkern.make_problem(einkern.load(text), sizes)


def nan_inputs(problem):
    arrays = random_arrays(problem, seed=3)
    arrays["A"][0] = np.nan  # NaN in the first argument
    arrays["B"][1] = np.nan  # ... in the second
    arrays["A"][2] = arrays["B"][2] = np.nan  # ... in both
    arrays["A"][3], arrays["B"][3] = np.inf, -np.inf
    return arrays


def run_cpu(problem, arrays):
    work = {name: array.copy() for name, array in arrays.items()}
    CpuBackend().build(problem).run(work, {})
    return work


def run_emulated(problem, arrays):
    mappings = {t.position: decide(t) for t in tasks_of(problem)}
    result, _, bad = emulate_problem(problem, mappings, arrays, {})
    assert bad == 0
    return result


# ---- the table ------------------------------------------------------------------


def test_compute_dtype_is_the_widest_of_output_and_reads():
    assert semantics.compute_dtype("float64", ["float32", "float32"]) == "float64"
    assert semantics.compute_dtype("float32", ["float32", "float64"]) == "float64"
    assert semantics.compute_dtype("float32", []) == "float32"
    assert semantics.tolerance("float64") == 1e-12 and semantics.tolerance("float32") == 1e-5


def test_max_min_propagate_nan_in_the_reference():
    problem = problem_of(NAN_MAX.format(dtype="float64"))
    values = evaluate(problem, nan_inputs(problem))
    assert np.isnan(values["C"][:3]).all() and np.isnan(values["D"][:3]).all()
    assert values["C"][3] == np.inf and values["D"][3] == -np.inf


def test_relative_error_requires_the_same_nans_and_infinities():
    reference = np.array([np.nan, np.inf, 1.0])
    assert relative_error(np.array([np.nan, np.inf, 1.0]), reference) == 0.0
    assert relative_error(np.array([0.0, np.inf, 1.0]), reference) == np.inf
    assert relative_error(np.array([np.nan, -np.inf, 1.0]), reference) == np.inf
    assert relative_error(np.array([np.nan, np.inf, np.nan]), reference) == np.inf
    assert relative_error(np.array([np.nan, np.inf, 1.5]), reference) == 0.5


# ---- NaN in max/min ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("run", [run_cpu, run_emulated], ids=["cpu", "cuda-emulated"])
def test_max_min_propagate_nan(run, dtype):
    problem = problem_of(NAN_MAX.format(dtype=dtype))
    arrays = nan_inputs(problem)
    expected = evaluate(problem, arrays)
    result = run(problem, arrays)
    for name in ("C", "D", "E"):
        assert relative_error(result[name], expected[name]) <= semantics.tolerance(dtype), name
    assert np.isnan(result["C"][:3]).all() and np.isnan(result["D"][:3]).all()


def test_cuda_source_spells_max_with_the_nan_propagating_helper():
    text = CudaBackend().emit(problem_of(NAN_MAX.format(dtype="float32")))
    body = text.split("#endif", 1)[1]
    assert "fmaxf(" not in body and "fminf(" not in body
    assert "_max_f(" in body and "_min_f(" in body


# ---- mixed dtypes -------------------------------------------------------------------


@pytest.mark.parametrize("run", [run_cpu, run_emulated], ids=["cpu", "cuda-emulated"])
def test_float32_inputs_into_a_float64_output_compute_in_float64(run):
    problem = problem_of(MIXED_GEMM)
    arrays = random_arrays(problem, seed=4)
    expected = evaluate(problem, arrays)
    result = run(problem, arrays)
    assert relative_error(result["C"], expected["C"]) <= semantics.tolerance("float64")


def test_mixed_gemm_emits_and_compiles_for_cuda():
    """Vector loads take the array's element type (float2/float4 from a float
    array), whatever the compute type."""
    from einkern.backends.cuda.nvrtc import compile_cubin

    problem = problem_of(MIXED_GEMM, {"m": 512, "n": 512, "k": 512})
    text = CudaBackend().emit(problem)
    assert "double2" not in text.split("#endif", 1)[1]
    assert compile_cubin(text, "sm_90").cubin[:4] == b"\x7fELF"


def test_mixed_gemm_through_the_cli(tmp_path, capsys):
    from einkern.cli import main

    path = tmp_path / "mixed.ein"
    path.write_text(MIXED_GEMM)
    assert main(["run", str(path), "--backend", "cpu", "--check", "--repeat", "1"]) == 0
    assert "check C" in capsys.readouterr().out


# ---- one printer base ------------------------------------------------------------------


def test_every_c_printer_takes_its_helpers_and_literals_from_ctext():
    from einkern.backends.cpu.printer import CpuText
    from einkern.gpu.ctext import (
        CText,
        check_identifier,
        float_literal,
        function_name,
        helper_functions,
        mangle,
    )
    from einkern.gpu.cuda_printer import CUDA_PRELUDE
    from einkern.gpu.emulator_c import C_PRELUDE

    assert issubclass(CpuText, CText)  # the CPU backend prints on the shared base
    problem = problem_of(NAN_MAX.format(dtype="float32").replace("2.0", "1e300"))
    cpu = CpuBackend().emit(problem)
    assert helper_functions("static inline", integers=False) in cpu
    assert helper_functions("static inline") in C_PRELUDE
    assert helper_functions("__device__ __forceinline__") in CUDA_PRELUDE
    assert "ek_max_f(t_A[i_i], EKX_INF_F)" in cpu  # 1e300 rounds to float32 +inf
    assert float_literal(float("nan"), "double") == "EKX_NAN_D"
    assert function_name("max", "float") == "ek_max_f" and function_name("abs", "double") == "fabs"
    assert mangle("t", "A") == "t_A" and mangle("t", "Ä") == "tq_c384"
    with pytest.raises(ValueError):
        check_identifier("ek_max_f")
