"""Affine programs: dependences and parallel loops on known cases, and every example
loop nest compiled on the CPU (isl's AST generation) checked against the reference
executor and against SciPy's BLAS / NumPy on random data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.linalg
import scipy.linalg.blas as blas

from einkern.api import compile_loops
from einkern.backends.cpu.affine import emit_affine_c, explain_affine
from einkern.errors import ArgumentError, ExtentError
from einkern.ir import affine as A
from einkern.lang.cfront import parse_c
from einkern.reference import evaluate_affine, relative_error

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def function_of(name: str):
    return parse_c((EXAMPLES / name).read_text(), name).functions[0]


def statement(function, name):
    return next(s for s in function.statements if s.name == name)


# ---- dependences and parallel loops ---------------------------------------------------------


def test_a_triangular_solve_has_no_parallel_loop():
    trsv = function_of("trsv.c")
    kinds = {(d.kind, d.source, d.target) for d in A.dependences(trsv)}
    assert ("flow", "S1", "S0") in kinds  # x[i] finished, then read by later rows
    assert ("flow", "S0", "S1") in kinds
    for s in trsv.statements:
        assert A.parallel_iterators(trsv, s) == ()
    assert A.reduction_iterators(statement(trsv, "S0")) == ("j",)


def test_triangular_products_are_parallel_over_rows_only():
    trmv = function_of("trmv.c")
    assert A.parallel_iterators(trmv, statement(trmv, "S1")) == ("i",)
    assert A.reduction_iterators(statement(trmv, "S1")) == ("j",)
    syrk = function_of("syrk.c")
    update = statement(syrk, "S1")
    assert A.parallel_iterators(syrk, update) == ("i", "j")
    assert A.reduction_iterators(update) == ("k",)
    assert A.domain_text(syrk, update).endswith("j >= 0 and j <= i }")


def test_a_stencil_in_place_carries_dependences_on_both_loops():
    text = """void seidel(int n, double A[n][n]) {
        for (int i = 1; i < n - 1; i++)
            for (int j = 1; j < n - 1; j++)
                A[i][j] = 0.25 * (A[i - 1][j] + A[i + 1][j] + A[i][j - 1] + A[i][j + 1]);
    }"""
    seidel = parse_c(text).functions[0]
    assert A.parallel_iterators(seidel, seidel.statements[0]) == ()
    jacobi = function_of("stencil_if.c")
    assert all(A.parallel_iterators(jacobi, s) == ("i", "j") for s in jacobi.statements)


def test_separate_nests_are_judged_separately():
    text = """void two(int n, double x[n], double y[n]) {
        for (int i = 0; i < n; i++) x[i] = 2 * x[i];
        for (int i = 1; i < n; i++) y[i] = y[i - 1] + x[i];
    }"""
    two = parse_c(text).functions[0]
    first, second = two.statements
    assert A.parallel_iterators(two, first) == ("i",)
    assert A.parallel_iterators(two, second) == ()
    problem = A.make_affine_problem(two, {"n": 9})
    source = emit_affine_c(problem)
    assert source.count("#pragma omp parallel for") == 1
    assert any("S0" in note and "parallel" in note for note in explain_affine(problem))


def test_sums_into_one_element_are_found_with_isl():
    """The reference adds such sums' terms in loop order, computed at once."""
    trsv = function_of("trsv.c")  # x[i] -= L[i][j] * x[j]: x[j], j < i, is never x[i]
    assert A.innermost_sum(trsv, statement(trsv, "S0"))
    trmm = function_of("trmm.c")  # B[i][j] += A[k][i] * B[k][j], k > i
    assert A.innermost_sum(trmm, statement(trmm, "S0"))
    atax = function_of("atax.c")  # tmp[i] = tmp[i] + A[i][j] * x[j]
    assert [A.innermost_sum(atax, s) for s in atax.statements] == [False, False, True, False]
    bicg = function_of("bicg.c")  # two statements share the j loop
    assert not any(A.innermost_sum(bicg, s) for s in bicg.statements)
    text = """void f(int n, double x[n], double y[n]) {
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                x[i] += x[j] * y[j];
    }"""
    own = parse_c(text).functions[0]  # j == i reads the element being summed into
    assert not A.innermost_sum(own, own.statements[0])


def test_the_reference_adds_a_sum_in_loop_order():
    """trsv's sums are computed at once and added in loop order: bit for bit the
    plain forward substitution (Python floats are IEEE doubles)."""
    rng = np.random.default_rng(4)
    n = 41
    L = _random((n, n), rng) + 2 * n * np.eye(n)
    b = _random(n, rng)
    problem = A.make_affine_problem(function_of("trsv.c"), {"n": n})
    found = evaluate_affine(problem, {"L": L, "x": b}, {})["x"]
    x = [float(v) for v in b]
    for i in range(n):
        for j in range(i):
            x[i] -= float(L[i, j]) * x[j]
        x[i] /= float(L[i, i])
    assert np.array_equal(found, np.array(x))


def test_inputs_are_the_arrays_read_before_written():
    assert A.read_on_entry(function_of("trmv.c")) == ("L", "x")  # y is assigned first
    assert A.read_on_entry(function_of("trsv.c")) == ("L", "x")


# ---- generated code against the reference and SciPy ------------------------------------------


def _random(shape, rng, dtype=np.float64):
    return rng.uniform(-1, 1, size=shape).astype(dtype)


def _check(kernel, arrays, scalars, expected_by_name, tolerance=1e-12):
    problem = kernel.problem
    reference = evaluate_affine(problem, arrays, scalars)
    work = {n: a.copy() for n, a in arrays.items()}
    result = kernel(**work, **scalars)
    results = result if isinstance(result, tuple) else (result,)
    work.update(zip(kernel.outputs, results, strict=True))
    for name, expected in expected_by_name.items():
        assert relative_error(work[name], reference[name]) <= tolerance
        assert relative_error(reference[name], expected) <= tolerance


def test_trmv_matches_numpy():
    rng = np.random.default_rng(1)
    n = 23
    kernel = compile_loops(EXAMPLES / "trmv.c", n=n)
    L, x = _random((n, n), rng), _random(n, rng)
    y = kernel(L, x)
    assert relative_error(y, np.tril(L) @ x) <= 1e-12
    _check(kernel, {"L": L, "x": x}, {}, {"y": np.tril(L) @ x})


def test_trsv_matches_scipy():
    rng = np.random.default_rng(2)
    n = 31
    kernel = compile_loops(EXAMPLES / "trsv.c", n=n)
    L = _random((n, n), rng) + 2 * n * np.eye(n)
    b = _random(n, rng)
    expected = blas.dtrsv(L, b, lower=1)
    _check(kernel, {"L": L, "x": b}, {}, {"x": expected})


def test_syrk_writes_only_the_lower_triangle():
    rng = np.random.default_rng(3)
    n, m = 17, 9
    kernel = compile_loops(EXAMPLES / "syrk.c", n=n, m=m)
    C, Am = _random((n, n), rng), _random((n, m), rng)
    alpha, beta = 0.7, 1.3
    expected = blas.dsyrk(alpha, Am, beta=beta, c=C, lower=1)
    work = C.copy()
    kernel(C=work, A=Am, alpha=alpha, beta=beta)
    lower = np.tril_indices(n)
    assert relative_error(work[lower], expected[lower]) <= 1e-12
    upper = np.triu_indices(n, 1)
    assert np.array_equal(work[upper], C[upper])  # untouched
    _check(kernel, {"C": C, "A": Am}, {"alpha": alpha, "beta": beta}, {})


def test_gemm_loops_match_blas():
    rng = np.random.default_rng(4)
    nj, nk = 13, 21
    kernel = compile_loops(EXAMPLES / "gemm_loops.c", nj=nj, nk=nk)
    C, Am, B = _random((48, nj), rng), _random((48, nk), rng), _random((nk, nj), rng)
    expected = blas.dgemm(0.5, Am, B, beta=-1.5, c=C)
    _check(kernel, {"C": C, "A": Am, "B": B}, {"alpha": 0.5, "beta": -1.5}, {"C": expected})


def test_stencil_with_an_affine_if_matches_numpy():
    rng = np.random.default_rng(5)
    n = 19
    kernel = compile_loops(EXAMPLES / "stencil_if.c", n=n)
    Am = _random((n, n), rng)
    expected = Am.copy()
    expected[1:-1, 1:-1] = 0.2 * (
        Am[1:-1, 1:-1] + Am[:-2, 1:-1] + Am[2:, 1:-1] + Am[1:-1, :-2] + Am[1:-1, 2:]
    )
    _check(kernel, {"A": Am}, {}, {"B": expected})


def test_back_substitution_counting_down_in_float32():
    text = """
    void back(int n, float U[n][n], float y[n]) {
        for (int i = n - 1; i >= 0; i--) {
            for (int j = i + 1; j < n; j++)
                y[i] -= U[i][j] * y[j];
            y[i] = y[i] / U[i][i];
        }
    }"""
    rng = np.random.default_rng(6)
    n = 25
    kernel = compile_loops(text, n=n)
    assert "c1 >= " in kernel.source() or "-c1" in kernel.source() or "c1 <= 0" in kernel.source()
    U = (_random((n, n), rng) + 2 * n * np.eye(n)).astype(np.float32)
    b = _random(n, rng, np.float32)
    expected = scipy.linalg.solve_triangular(U.astype(np.float64), b.astype(np.float64))
    y = b.copy()
    kernel(U, y)
    assert relative_error(y, expected) <= 1e-5


def test_functions_iterator_values_and_divisions():
    text = """
    void f(int n, double x[n], double y[n], double a) {
        for (int i = 0; i < n; i++)
            y[i] = fmax(sqrt(fabs(x[i])), a) + (i + 1) / 2 - exp(x[i]) * -a;
    }"""
    rng = np.random.default_rng(7)
    kernel = compile_loops(text, n=10)
    x = _random(10, rng)
    y = kernel(x, a=0.3)
    i = np.arange(10)
    expected = np.maximum(np.sqrt(np.abs(x)), 0.3) + (i + 1) / 2 - np.exp(x) * -0.3
    assert relative_error(y, expected) <= 1e-12


def test_calls_are_checked_by_the_one_argument_check():
    kernel = compile_loops(EXAMPLES / "trsv.c", n=4)
    with pytest.raises(ArgumentError):
        kernel(np.eye(3), np.ones(4))
    with pytest.raises(ArgumentError):
        kernel(np.eye(4, dtype=np.float32), np.ones(4))
    with pytest.raises(ExtentError):  # no size and no #pragma einkern sizes default
        compile_loops("void f(int n, double x[n]) { for (int i = 0; i < n; i++) x[i] = 1; }")
    assert compile_loops(EXAMPLES / "trsv.c").problem.sizes == (("n", 299),)  # its default
    with pytest.raises(ArgumentError):
        compile_loops(EXAMPLES / "trsv.c", function="nope", n=4)


# ---- CUDA: the affine kernels, run by the emulator and compiled by NVRTC ----------------------


CUDA_CASES = [
    ("trsv.c", {"n": 37}, "sequential"),
    ("trmv.c", {"n": 300}, "box with guards"),
    ("syrk.c", {"n": 21, "m": 6}, "box with guards"),
    ("stencil_if.c", {"n": 17}, "loops c1 x c3"),
    ("jacobi2d.c", {"tsteps": 3, "n": 12}, "host loop"),
    ("trmm.c", {"m": 9, "n": 7}, "host loop"),
    ("symv.c", {"n": 150}, "reduction tiles"),
    ("gemver.c", {"n": 11}, "loops c1 x c3"),
]


@pytest.mark.parametrize("name, sizes, how", CUDA_CASES, ids=[c[0] for c in CUDA_CASES])
def test_affine_cuda_kernels_match_the_reference_in_the_emulator(name, sizes, how):
    from einkern.backends.emulator import emulate
    from einkern.cli.affine import random_affine_arguments
    from einkern.gpu.affine import affine_kernels

    problem = A.make_affine_problem(function_of(name), sizes)
    kernels = affine_kernels(problem)
    assert any(
        how in k.reason or (how == "sequential" and "one thread" in k.reason) for k in kernels
    )
    arrays, scalars = random_affine_arguments(problem, 3)
    expected = evaluate_affine(problem, arrays, scalars)
    work = {f"t_{n}": a.copy() for n, a in arrays.items()}
    for array in problem.function.arrays:
        work.setdefault(f"t_{array.name}", np.zeros(problem.shape(array.name)))
    named = {f"s_{n}": v for n, v in scalars.items()}
    for launch in kernels:
        report = emulate([launch.kernel], work, {**named, **dict(launch.values)})
        assert report.ok, str(report)
    for output in problem.outputs:
        assert relative_error(work[f"t_{output}"], expected[output]) <= 1e-12


def _symv_text(target_read: bool = False) -> str:
    read = "y[i]" if target_read else "x[i]"
    return f"""void s(int n, double A[n][n], double x[n], double y[n]) {{
        for (int i = 0; i < n; i++)
            for (int j = 0; j <= i; j++) {{
                y[i] += A[i][j] * x[j];
                if (j < i) y[j] += A[i][j] * {read};
            }}
    }}"""


def test_reduction_tiles_need_loops_that_carry_only_reductions():
    from einkern.gpu.affine import affine_kernels
    from einkern.gpu.affine_reduce import reduction_nest

    good = A.make_affine_problem(parse_c(_symv_text(), "s.c").function(None), {"n": 200})
    (launch,) = affine_kernels(good)
    assert "reduction tiles" in launch.reason
    # 200 rows in tiles of 64 x 32: the upper triangle's tiles are not launched
    assert launch.kernel.blocks < 4 * 7
    bad = A.make_affine_problem(parse_c(_symv_text(True), "s.c").function(None), {"n": 20})
    why = reduction_nest(bad, bad.function.statements)
    assert why == "S1 reads an array the nest accumulates into"
    (serial,) = affine_kernels(bad)
    assert "one thread" in serial.reason


def test_reduction_tiles_without_their_barrier_fail_in_the_emulator():
    from einkern.backends.emulator import emulate
    from einkern.cli.affine import random_affine_arguments
    from einkern.gpu.affine import affine_kernels
    from einkern.gpu.kir import without_barriers

    problem = A.make_affine_problem(parse_c(_symv_text(), "s.c").function(None), {"n": 90})
    (launch,) = affine_kernels(problem)
    arrays, scalars = random_affine_arguments(problem, 4)
    expected = evaluate_affine(problem, arrays, scalars)["y"]
    for kernel, correct in ((launch.kernel, True), (without_barriers(launch.kernel), False)):
        work = {f"t_{n}": a.copy() for n, a in arrays.items()}
        assert emulate([kernel], work, {}).ok
        assert (relative_error(work["t_y"], expected) <= 1e-12) == correct


@pytest.mark.parametrize("run", [1, 3, 5])
@pytest.mark.parametrize("lower", [True, False])
def test_reduction_tiles_in_runs_of_several_tiles_per_block(monkeypatch, run, lower):
    """A block reads ``run`` consecutive tiles of a tile row (the last run of a row
    partly past its end); every instance is still added once."""
    from einkern.backends.emulator import emulate
    from einkern.blas.level12 import symv_text
    from einkern.cli.affine import random_affine_arguments
    from einkern.gpu import affine_reduce
    from einkern.gpu.affine import affine_kernels

    monkeypatch.setattr(affine_reduce, "TILES_PER_BLOCK", run)
    text = symv_text("double", lower, ", double beta, double y[n]", "z[i] = beta * y[i];")
    problem = A.make_affine_problem(parse_c(text, "s.c").function(None), {"n": 203})
    launches = affine_kernels(problem)
    tiles = launches[-1]
    assert f"{run} consecutive tiles" in tiles.reason or (run == 1 and "one tile" in tiles.reason)
    arrays, scalars = random_affine_arguments(problem, run)
    expected = evaluate_affine(problem, arrays, scalars)["z"]
    work = {f"t_{n}": a.copy() for n, a in arrays.items()}
    named = {f"s_{n}": v for n, v in scalars.items()}
    for launch in launches:
        assert emulate([launch.kernel], work, {**named, **dict(launch.values)}).ok
    assert relative_error(work["t_z"], expected) <= 1e-12


def test_tile_plans_in_runs_cover_each_tile_once():
    from einkern.gpu.affine_tiles import tile_plan

    rows = [(0, i + 1) for i in range(301)]  # a lower triangle
    one = tile_plan(rows, 64, 32)
    assert one is not None and one.blocks == one.tiles
    for run in (2, 3, 8):
        plan = tile_plan(rows, 64, 32, run)
        assert plan is not None and plan.tiles == one.tiles
        covered = []
        for (start, q, shift), last in zip(plan.entries, plan.lasts, strict=True):
            stop = next((s for s, _, _ in plan.entries if s > start), plan.blocks)
            for b in range(start, stop):
                first = b * run + shift
                covered += [(q, c) for c in range(first, min(first + run, last + 1))]
        assert len(covered) == len(set(covered)) == one.tiles
        assert plan.blocks == sum(-(-(last + 1) // run) for last in plan.lasts)


def test_a_parallel_outer_loop_is_spread_over_blocks():
    from einkern.gpu.affine import affine_kernels

    problem = A.make_affine_problem(function_of("trmv.c"), {"n": 1000})
    (kernel,) = affine_kernels(problem)
    assert kernel.kernel.blocks == 4 and kernel.kernel.threads == 256
    trsv = A.make_affine_problem(function_of("trsv.c"), {"n": 1000})
    (serial,) = affine_kernels(trsv)
    assert serial.kernel.blocks == 1 and serial.kernel.threads == 1


def test_affine_cuda_kernels_compile_with_nvrtc():
    from einkern.backends.cuda.nvrtc import compile_cubin
    from einkern.gpu.affine import affine_kernels, distinct_kernels
    from einkern.gpu.cuda_printer import print_cuda_module

    for name, sizes, _ in CUDA_CASES:
        problem = A.make_affine_problem(function_of(name), sizes)
        source = print_cuda_module(distinct_kernels(affine_kernels(problem)))
        module = compile_cubin(source, "sm_90", use_cache=False)
        assert module.cubin


def test_emit_cuda_explains_the_mapping(capsys):
    from einkern.cli.app import main

    assert main(["emit", str(EXAMPLES / "trsv.c"), "-e", "n=64", "-b", "cuda", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "one thread runs it sequentially" in out and "__global__" in out
    assert main(["emit", str(EXAMPLES / "trmv.c"), "-e", "n=64", "-b", "cuda", "--explain"]) == 0
    assert "a box with guards" in capsys.readouterr().out


# ---- the raise pass ---------------------------------------------------------------------------


def test_gemm_loops_raise_to_a_tensor_program_that_every_backend_maps():
    import einkern
    from einkern.ir.affine_raise import raise_function

    program = raise_function(function_of("gemm_loops.c"))
    assert not isinstance(program, str)
    assert [str(s) for s in program.statements] == [
        "C[i,j] = (C[i,j] * beta)",
        "C[i,j] += (alpha * sum[k]((A[i,k] * B[k,j])))",
    ]
    kernel = einkern.compile(EXAMPLES / "gemm_loops.c", backend="cpu", nj=12, nk=7)
    rng = np.random.default_rng(9)
    C, Am, B = _random((48, 12), rng), _random((48, 7), rng), _random((7, 12), rng)
    result = kernel(C.copy(), Am, B, alpha=2.0, beta=0.5)
    assert relative_error(result, blas.dgemm(2.0, Am, B, beta=0.5, c=C)) <= 1e-12


@pytest.mark.parametrize(
    "name, reason",
    [("trsv.c", "not a box"), ("trmv.c", "not a box"), ("stencil_if.c", "guarded")],
)
def test_loop_nests_that_are_not_tensor_programs_say_why(name, reason):
    from einkern.ir.affine_raise import raise_function

    found = raise_function(function_of(name))
    assert isinstance(found, str) and reason in found


def test_a_backward_dependence_blocks_the_raise():
    from einkern.ir.affine_raise import raise_function

    text = """void f(int n, double x[n], double y[n]) {
        for (int i = 0; i < n; i++) {
            y[i] = x[i];
            x[i] = 2 * y[i];
        }
    }"""
    assert not isinstance(raise_function(parse_c(text).functions[0]), str)  # forward only
    text = """void g(int n, double x[n][n], double y[n][n]) {
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                y[i][j] = x[j][i];
                x[i][j] = 1.0;
            }
    }"""
    found = raise_function(parse_c(text).functions[0])
    assert isinstance(found, str) and "back" in found


def test_the_affine_launch_plan_names_every_array_in_parameter_order():
    from einkern.backends.cuda.affine import affine_source

    problem = A.make_affine_problem(function_of("syrk.c"), {"n": 600, "m": 3})
    source = affine_source(problem)
    (spec,) = source.kernels
    assert spec.tensors == ("C", "A") and spec.scalars == ("alpha", "beta")
    assert spec.grid == (3, 1, 1) and spec.block == (256, 1, 1)
    assert spec.name in source.text


TRIANGLES = {
    "lower": "for (int i = 0; i < n; i++) for (int j = 0; j <= i; j++)",
    "upper": "for (int i = 0; i < n; i++) for (int j = i; j < n; j++)",
    "band": "for (int i = 0; i < n; i++) for (int j = 0; j <= i && j >= i - 40; j++)",
}


@pytest.mark.parametrize("shape", list(TRIANGLES))
@pytest.mark.parametrize("n", [5, 70, 301])
def test_triangular_domains_launch_only_non_empty_tiles(shape, n):
    from einkern.backends.emulator import emulate
    from einkern.gpu.affine import affine_kernels

    loops = TRIANGLES[shape]
    text = (
        f"void tri(int n, double a, double A[n][n], double C[n][n]) {{\n"
        f"  {loops}\n    C[i][j] = a * A[i][j] + i - j;\n}}"
    )
    problem = A.make_affine_problem(parse_c(text).functions[0], {"n": n})
    (launch,) = affine_kernels(problem)
    rng = np.random.default_rng(n)
    arrays = {"A": _random((n, n), rng), "C": _random((n, n), rng)}
    expected = evaluate_affine(problem, arrays, {"a": 0.5})
    work = {"t_A": arrays["A"].copy(), "t_C": arrays["C"].copy()}
    report = emulate([launch.kernel], work, {"s_a": 0.5})
    assert report.ok, str(report)
    assert relative_error(work["t_C"], expected["C"]) <= 1e-12
    if n > 8:
        assert "empty ones skipped" in launch.reason, launch.reason
        full_box = -(-n // 8) * -(-n // 32)
        assert launch.kernel.blocks < full_box
    if n == 301:
        from einkern.backends.cuda.nvrtc import compile_cubin
        from einkern.gpu.cuda_printer import print_cuda

        assert compile_cubin(print_cuda(launch.kernel), "sm_90", use_cache=False).cubin


def test_raise_takes_factors_without_the_summed_iterators_out_of_the_sum():
    """``alpha * A[i,p] * x[i] * B[p,j]``: alpha and x[i] once per output, not per term;
    a body without such a factor, or with nothing else, is left whole."""
    from einkern.ir import nodes as T
    from einkern.ir.affine_raise import summed_product

    a, b, x = T.Access("A", ("i", "p")), T.Access("B", ("p", "j")), T.Access("x", ("i",))
    body = T.Binary("*", T.Binary("*", T.Binary("*", T.ScalarRef("alpha"), a), x), b)
    assert str(summed_product(("p",), body)) == "((alpha * x[i]) * sum[p]((A[i,p] * B[p,j])))"
    assert str(summed_product(("p",), T.Binary("*", a, b))) == "sum[p]((A[i,p] * B[p,j]))"
    assert str(summed_product(("p",), x)) == "sum[p](x[i])"
