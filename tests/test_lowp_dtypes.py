"""bfloat16 and float16 as tensor dtypes: the table of meaning, the language, the
argument check, random inputs, the reference, and the CPU backend's C (16-bit
storage, float arithmetic, conversions by the table's C helpers)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import einkern
from einkern import semantics
from einkern.arrays import host_values, new_host_array
from einkern.backends.cpu.backend import load_or_compile
from einkern.backends.cpu.compiler import cache_directory, toolchain
from einkern.errors import ArgumentDtypeError, DtypeError
from einkern.reference import evaluate
from einkern.testing import assert_matches_reference, random_arrays

torch = pytest.importorskip("torch")

HALVES = ("bfloat16", "float16")


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("EINKERN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "ekc"))


# ---- the table --------------------------------------------------------------------


def test_sixteen_bit_dtypes_compute_in_float32():
    assert semantics.compute_dtype("bfloat16", ["bfloat16"]) == "float32"
    assert semantics.compute_dtype("float16", ["float16", "float64"]) == "float64"
    assert semantics.widest(["bfloat16", "bfloat16"]) == "bfloat16"
    assert semantics.widest(["bfloat16", "float16"]) == "float32"  # neither holds the other
    assert semantics.widest(["float16", "float32"]) == "float32"
    assert semantics.widest(["float32", "float64"]) == "float64"
    assert semantics.ITEMSIZE["bfloat16"] == semantics.ITEMSIZE["float16"] == 2


def test_tolerances_are_four_units_of_the_roundoff():
    assert semantics.tolerance("bfloat16") == 2.0**-6
    assert semantics.tolerance("float16") == 2.0**-9
    assert semantics.tolerance("float32") == 1e-5 and semantics.tolerance("float64") == 1e-12


def test_bfloat16_rounding_is_torchs():
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    x = x[~np.isnan(x)]
    want = torch.from_numpy(x.copy()).to(torch.bfloat16).to(torch.float32).numpy()
    got = semantics.round_to(x, "bfloat16")
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.isnan(semantics.round_to(np.array([np.nan]), "bfloat16")).all()


def _converter(source: str, name: str):
    """A compiled C conversion ``out[i] = f(in[i])`` over ``n`` elements."""
    text = source + (
        f"void einkern_run(void **b, const double *s)\n"
        f"{{ for (long i = 0; i < (long)s[0]; ++i) "
        f"((unsigned short *)b[1])[i] = {name}(((const float *)b[0])[i]); }}\n"
    )
    directory = cache_directory()
    _, function = load_or_compile(text, toolchain(directory), directory)
    return function


def _run(function, x: np.ndarray) -> np.ndarray:
    out = np.empty(x.size, dtype=np.uint16)
    buffers = (ctypes.c_void_p * 2)(x.ctypes.data, out.ctypes.data)
    function(buffers, (ctypes.c_double * 1)(float(x.size)))
    return out


def _hard_floats() -> np.ndarray:
    """Random float32 bit patterns, every float around the float16 subnormal,
    normal and overflow boundaries, both signs."""
    rng = np.random.default_rng(2)
    bits = [rng.integers(0, 2**32, 1_000_000, dtype=np.uint64).astype(np.uint32)]
    bits.append(np.arange(0x33000000, 0x33000000 + 2**20, dtype=np.uint32))  # subnormal halves
    bits.append(np.arange(0x38000000, 0x38900000, 5, dtype=np.uint32))  # the smallest normals
    bits.append(np.arange(0x477F0000, 0x47800100, dtype=np.uint32))  # 65504 .. infinity
    both = np.concatenate(bits)
    return np.concatenate([both, both | 0x80000000]).view(np.float32)


@pytest.mark.parametrize("native", [True, False], ids=["Float16", "bit-operations"])
def test_c_float16_conversion_is_numpys(native):
    prefix = "" if native else "#define EK_NO_FLOAT16\n"
    source = prefix + semantics.storage_helpers()
    x = _hard_floats()
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    got = _run(_converter(source, "ek_float_to_f16"), x)
    nan = np.isnan(want)
    assert np.array_equal(got[~nan], want.view(np.uint16)[~nan])
    assert np.isnan(got[nan].view(np.float16)).all()
    # and back: every one of the 65536 encodings widens exactly
    halves = np.arange(65536, dtype=np.uint16)
    widened = _widen(source, halves)
    expected = halves.view(np.float16).astype(np.float32)
    finite = ~np.isnan(expected)
    assert np.array_equal(widened[finite].view(np.uint32), expected[finite].view(np.uint32))
    assert np.isnan(widened[~finite]).all()


def _widen(source: str, halves: np.ndarray) -> np.ndarray:
    text = source + (
        "void einkern_run(void **b, const double *s)\n"
        "{ for (long i = 0; i < (long)s[0]; ++i) "
        "((float *)b[1])[i] = ek_f16_to_float(((const unsigned short *)b[0])[i]); }\n"
    )
    directory = cache_directory()
    _, function = load_or_compile(text, toolchain(directory), directory)
    out = np.empty(halves.size, dtype=np.float32)
    buffers = (ctypes.c_void_p * 2)(halves.ctypes.data, out.ctypes.data)
    function(buffers, (ctypes.c_double * 1)(float(halves.size)))
    return out


def test_c_bfloat16_conversion_is_torchs():
    x = _hard_floats()
    got = _run(_converter(semantics.storage_helpers(), "ek_float_to_bf16"), x)
    want = torch.from_numpy(x.copy()).to(torch.bfloat16).view(torch.int16).numpy()
    finite = ~np.isnan(x)
    assert np.array_equal(got[finite], want.view(np.uint16)[finite])
    assert np.isnan(semantics.bfloat16_values(got[~finite])).all()


# ---- the language -------------------------------------------------------------------


def test_ein_declares_sixteen_bit_tensors_and_defaults():
    program = einkern.load(
        "dtype bfloat16\ndims n = 4\ntensor A[n], B[n] float16\ntensor C[n]\n"
        "scalar s = 2\nC[i] = s * A[i]"
    )
    assert program.tensor("A").dtype == "float16"
    assert program.tensor("C").dtype == "bfloat16"
    assert program.scalars[0].dtype == "float32"  # a scalar takes the compute dtype


@pytest.mark.parametrize("word, alias", [("bf16", "bfloat16"), ("half", "float16")])
def test_dtype_aliases_are_refused_with_the_name(word, alias):
    with pytest.raises(DtypeError) as caught:
        einkern.load(f"dims n = 4\ntensor A[n] {word}\nA[i] = 1")
    assert alias in str(caught.value)


# ---- arrays, reference ----------------------------------------------------------------

GEMM = """
dims m = 37, n = 29, k = {k}
tensor A[m,k] {a}
tensor B[k,n] {b} {layout}
tensor C[m,n] {c}
C[i,j] = A[i,k] * B[k,j]
"""


def problem_of(text: str):
    return einkern.make_problem(einkern.load(text))


def test_random_inputs_are_rounded_to_the_dtype():
    problem = problem_of(GEMM.format(k=64, a="bfloat16", b="float16", c="float32", layout=""))
    arrays = random_arrays(problem)
    assert isinstance(arrays["A"], torch.Tensor) and arrays["A"].dtype == torch.bfloat16
    assert arrays["B"].dtype == np.float16 and arrays["C"].dtype == np.float32
    values = host_values(arrays["A"])
    assert values.dtype == np.float32 and 0.5 <= values.min() and values.max() <= 1.5
    assert np.array_equal(semantics.round_to(values, "bfloat16"), values)
    assert len(np.unique(values)) > 100  # random, never constant


def test_reference_rounds_stores_to_sixteen_bits():
    problem = problem_of(GEMM.format(k=64, a="bfloat16", b="bfloat16", c="bfloat16", layout=""))
    arrays = random_arrays(problem)
    result = evaluate(problem, arrays)["C"]
    exact = host_values(arrays["A"]).astype(np.float64) @ host_values(arrays["B"]).astype(
        np.float64
    )
    assert result.dtype == np.float32
    assert np.array_equal(result, semantics.round_to(exact, "bfloat16"))


def test_numpy_arrays_are_refused_for_bfloat16_with_the_reason():
    kernel = einkern.compile(
        GEMM.format(k=8, a="bfloat16", b="bfloat16", c="float32", layout=""), backend="cpu"
    )
    a = np.ones((37, 8), dtype=np.float32)
    with pytest.raises(ArgumentDtypeError, match="NumPy has no bfloat16"):
        kernel(a, a.T.copy())
    with pytest.raises(ArgumentDtypeError, match="NumPy has no bfloat16"):
        kernel(a.view(np.uint16)[:, :8], a)


# ---- the CPU backend ------------------------------------------------------------------

CASES = {
    "bf16 gemm, bf16 out": GEMM.format(k=300, a="bfloat16", b="bfloat16", c="bfloat16", layout=""),
    "bf16 gemm, fp32 out": GEMM.format(k=300, a="bfloat16", b="bfloat16", c="float32", layout=""),
    "f16 gemm, f16 out, column B": GEMM.format(
        k=300, a="float16", b="float16", c="float16", layout="column"
    ),
    "f16 gemm, fp64 out": GEMM.format(k=77, a="float16", b="float16", c="float64", layout=""),
    "mixed bf16 x f16 -> f16": GEMM.format(k=50, a="bfloat16", b="float16", c="float16", layout=""),
    "functions, +=, intermediates": """
dims n = 33, k = 40
tensor X[n,k] bfloat16
tensor T[n] float16
tensor Y[n] bfloat16 column
scalar alpha = 0.75
T[i] = sqrt(X[i,k] * X[i,k])
Y[i] = alpha * exp(-T[i] / 10) + max(T[i], 2.5)
Y[i] -= tanh(T[i])
""",
    "4-index contraction": """
dims a = 6, b = 5, c = 7, d = 4, k = 9, l = 8
tensor A[a,k,b,l] float16
tensor B[c,l,d,k] float16 column
tensor C[a,b,c,d] bfloat16
C[a,b,c,d] = A[a,k,b,l] * B[c,l,d,k]
""",
}


@pytest.mark.parametrize("case", list(CASES))
def test_cpu_matches_the_reference(case):
    kernel = einkern.compile(CASES[case], backend="cpu")
    errors = assert_matches_reference(kernel, seed=5)
    assert all(error >= 0 for error in errors.values())


def test_cpu_float32_output_of_bfloat16_inputs_keeps_float32_accuracy():
    kernel = einkern.compile(CASES["bf16 gemm, fp32 out"], backend="cpu")
    errors = assert_matches_reference(kernel, seed=2)
    assert errors["C"] < 1e-5


def test_cpu_stores_sixteen_bits_and_computes_in_float():
    kernel = einkern.compile(CASES["bf16 gemm, bf16 out"], backend="cpu")
    source = kernel.source()
    assert "ek_bf16 *restrict t_C" in source and "float acc" in source
    assert "ek_float_to_bf16(" in source and "ek_bf16_to_float(" in source
    plain = einkern.compile(GEMM.format(k=8, a="", b="", c="", layout=""), backend="cpu")
    assert "ek_bf16" not in plain.source()  # float64 programs print as before


def test_einsum_takes_float16_numpy_and_bfloat16_torch():
    rng = np.random.default_rng(0)
    a = (rng.random((30, 40), dtype=np.float32) + 0.5).astype(np.float16)
    b = (rng.random((40, 20), dtype=np.float32) + 0.5).astype(np.float16)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    result = einkern.einsum("ik,kj->ij", a, b, backend="cpu")
    assert result.dtype == np.float16
    assert np.abs(result - exact).max() / exact.max() <= semantics.tolerance("float16")
    ta, tb = (torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16) for x in (a, b))
    exact = (ta.double() @ tb.double()).numpy()
    result = einkern.einsum("ik,kj->ij", ta, tb, backend="cpu")
    assert result.dtype == torch.bfloat16
    error = np.abs(host_values(result) - exact).max() / exact.max()
    assert 0 < error <= semantics.tolerance("bfloat16")
    out = np.empty((30, 20), dtype=np.float32)  # the output type stated: float32
    einkern.einsum("ik,kj->ij", ta, tb, backend="cpu", out=out)
    assert np.abs(out - exact).max() / exact.max() < 1e-6
    chain = einkern.einsum("ik,kj,jl->il", ta, tb, tb.T.contiguous(), backend="cpu")
    exact3 = exact @ tb.T.double().numpy()
    assert np.abs(host_values(chain) - exact3).max() / exact3.max() <= 2.0**-6


def test_einsum_refuses_a_float32_result_in_a_bfloat16_out():
    a = np.ones((4, 4), dtype=np.float32)
    out = new_host_array((4, 4), "bfloat16", "row")
    with pytest.raises(DtypeError):
        einkern.einsum("ik,kj->ij", a, a, backend="cpu", out=out)


def test_cli_runs_and_checks_a_sixteen_bit_program(tmp_path, capsys):
    from einkern.cli import main

    path = tmp_path / "mixed.ein"
    path.write_text(CASES["functions, +=, intermediates"])
    assert main(["run", str(path), "-b", "cpu", "--repeat", "1", "--check"]) == 0
    out = capsys.readouterr().out
    assert "check Y: max relative error" in out and "ok" in out
