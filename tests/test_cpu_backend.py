"""CPU backend: generated C/OpenMP kernels against the NumPy reference executor."""

from __future__ import annotations

import os
import pickle
import re
import stat
import subprocess
import sys
import textwrap
from functools import reduce

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from einkern.backends.cpu import CpuBackend, CpuSchedule, LoopSchedule, default_schedule
from einkern.backends.cpu.compiler import compile_library, library_path, toolchain
from einkern.errors import ArgumentError, BackendError, CompilationError
from einkern.ir.nodes import (
    Access,
    Binary,
    Call,
    Const,
    Expr,
    Extent,
    Neg,
    Problem,
    Program,
    Scalar,
    ScalarRef,
    Statement,
    Sum,
    Tensor,
    accesses,
)
from einkern.reference import evaluate
from einkern.testing import TOLERANCE

pytestmark = pytest.mark.skipif(not CpuBackend().available(), reason="no C compiler")


# ---- building IR by hand -------------------------------------------------------


def at(text: str) -> Access:
    """``at("A[i,k]")`` is the access A[i,k]; ``at("s")`` a rank-0 access."""
    match = re.fullmatch(r"(\w+)(?:\[([\w,\s]*)\])?", text)
    assert match, text
    indices = tuple(i.strip() for i in (match[2] or "").split(",") if i.strip())
    return Access(match[1], indices)


def op(symbol: str, *operands: Expr | str) -> Expr:
    """Left-folded binary operation; strings are accesses."""
    exprs = [at(x) if isinstance(x, str) else x for x in operands]
    return reduce(lambda left, right: Binary(symbol, left, right), exprs)


def total(indices: str, body: Expr | str) -> Sum:
    return Sum(tuple(indices.split(",")), at(body) if isinstance(body, str) else body)


def call(func: str, *args: Expr | str) -> Call:
    return Call(func, tuple(at(a) if isinstance(a, str) else a for a in args))


def make_problem(
    tensors: list[Tensor],
    statements: list[tuple[str, str, Expr | str]],
    sizes: dict[str, int],
    scalars: tuple[str, ...] = (),
    name: str = "test",
) -> Problem:
    """A problem whose index extents are read off the tensor shapes."""
    shapes = {t.name: t.shape for t in tensors}
    built = []
    for output, operator, rhs in statements:
        out = at(output)
        rhs = at(rhs) if isinstance(rhs, str) else rhs
        extents: dict[str, str] = {}
        for access in (out, *accesses(rhs)):
            for index, extent in zip(access.indices, shapes[access.tensor], strict=True):
                extents.setdefault(index, extent)
        built.append(Statement(out, operator, rhs, tuple(extents.items())))
    program = Program(
        name,
        tuple(Extent(e) for e in sizes),
        tuple(tensors),
        tuple(Scalar(s) for s in scalars),
        tuple(built),
    )
    return Problem(program, tuple(sizes.items()))


def random_arrays(problem: Problem, seed: int = 0) -> dict[str, np.ndarray]:
    """Values in ±[0.5, 1.5) (never zero), each in its tensor's dtype and layout."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for tensor in problem.program.tensors:
        shape = problem.shape(tensor.name)
        values = rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape)
        order = "C" if tensor.layout == "row" else "F"
        arrays[tensor.name] = np.array(values, dtype=tensor.dtype, order=order)
    return arrays


def check(
    problem: Problem,
    scalars: dict[str, float] | None = None,
    schedule: CpuSchedule | None = None,
    arrays: dict[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Build, run on random inputs and compare every output with the reference."""
    scalars = scalars or {}
    arrays = arrays if arrays is not None else random_arrays(problem)
    expected = evaluate(problem, arrays, scalars)
    inputs = {name: array.copy() for name, array in arrays.items()}
    CpuBackend().build(problem, schedule).run(arrays, scalars)
    # float32 anywhere may round intermediate values (statements compute in the widest
    # dtype they read; the reference computes everything in float64).
    dtypes = {tensor.dtype for tensor in problem.program.tensors}
    tolerance = TOLERANCE["float32" if "float32" in dtypes else "float64"]
    for name in problem.program.outputs:
        got, want = arrays[name].astype(np.float64), expected[name].astype(np.float64)
        error = np.max(np.abs(got - want), initial=0.0)
        scale = max(np.max(np.abs(want), initial=0.0), 1e-300)
        assert error <= tolerance * scale, f"{name}: error {error:.3g}, scale {scale:.3g}"
    for name in problem.program.tensors:
        if name.name not in problem.program.outputs:
            assert np.array_equal(arrays[name.name], inputs[name.name]), f"{name.name} modified"
    return arrays


def all_parallel(problem: Problem) -> CpuSchedule:
    """The default loop orders with every parallel loop collapsed into the OpenMP loop."""
    loops = default_schedule(problem).statements
    return CpuSchedule(tuple(LoopSchedule(s.order, len(s.order)) for s in loops))


def gemm(layout: str, dtype: str, m: int = 5, n: int = 7, k: int = 3) -> Problem:
    t = [Tensor(x, s, dtype, layout) for x, s in (("A", ("m", "k")), ("B", ("k", "n")))]
    t.append(Tensor("C", ("m", "n"), dtype, layout))
    rhs = op(
        "+",
        op("*", Sum(("k",), op("*", "A[i,k]", "B[k,j]")), ScalarRef("alpha")),
        op("*", ScalarRef("beta"), "C[i,j]"),
    )
    return make_problem(t, [("C[i,j]", "=", rhs)], {"m": m, "n": n, "k": k}, ("alpha", "beta"))


# ---- correctness ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("layout", ["row", "column"])
def test_gemm_alpha_beta(layout, dtype):
    check(gemm(layout, dtype), {"alpha": 1.5, "beta": -0.75})


def test_gemm_parallel_default_schedule_and_collapse():
    problem = gemm("row", "float64", 67, 41, 29)
    loops = default_schedule(problem).statements[0]
    # a sum of 29 terms: register tiles, j inside the sum, OpenMP over the tile loops
    assert loops.order == ("i", "j") and loops.collapse == 2 and loops.inner == 1
    assert dict(loops.tiles) == {"i": 8, "j": 8}
    assert "#pragma omp parallel for collapse(2) schedule(static)" in CpuBackend().emit(problem)
    check(problem, {"alpha": 0.5, "beta": 2.0})
    check(problem, {"alpha": 0.5, "beta": 2.0}, schedule=all_parallel(problem))
    column = gemm("column", "float64", 67, 41, 29)
    assert default_schedule(column).statements[0].order == ("j", "i")


def test_ccsd_t_column_layout():
    sizes = {"h1": 5, "h2": 1, "h3": 3, "h7": 4, "p4": 3, "p5": 2, "p6": 5}
    tensors = [
        Tensor("t3", ("h3", "h2", "h1", "p6", "p5", "p4"), layout="column"),
        Tensor("t2", ("h7", "p4", "p5", "h1"), layout="column"),
        Tensor("v2", ("h3", "h2", "p6", "h7"), layout="column"),
    ]
    rhs = total("h7", op("*", "t2[h7,p4,p5,h1]", "v2[h3,h2,p6,h7]"))
    problem = make_problem(tensors, [("t3[h3,h2,h1,p6,p5,p4]", "-=", rhs)], sizes)
    loops = default_schedule(problem).statements[0]
    assert loops.order == ("p4", "p5", "p6", "h1", "h2", "h3")
    check(problem)
    check(problem, schedule=all_parallel(problem))


def test_nekbone_local_grad():
    sizes = {"e": 3, "n": 4}
    tensors = [
        Tensor("ur", ("e", "n", "n", "n")),
        Tensor("u", ("e", "n", "n", "n")),
        Tensor("D", ("n", "n")),
    ]
    rhs = total("m", op("*", "D[k,m]", "u[e,i,m,j]"))
    check(make_problem(tensors, [("ur[e,i,j,k]", "+=", rhs)], sizes))


def test_riemann_sibling_sums_reuse_index():
    tensors = [Tensor(x, ("n",) * r) for x, r in (("R", 4), ("A", 4), ("B", 3))]
    rhs = op(
        "-",
        op("+", op("-", "A[i,j,k,l]", "A[i,l,k,j]"), total("m", op("*", "B[m,j,k]", "B[i,m,l]"))),
        total("m", op("*", "B[m,l,k]", "B[i,m,j]")),
    )
    problem = make_problem(tensors, [("R[i,j,k,l]", "=", rhs)], {"n": 4})
    check(problem)
    check(problem, schedule=all_parallel(problem))


def test_einstein_terms_sum_separately():
    # S[i,j] = A[i,k] + B[l,k]*C[l,j]  means  sum_k A[i,k] + sum_{l,k} B[l,k]*C[l,j]
    tensors = [
        Tensor("S", ("m", "n")),
        Tensor("A", ("m", "p")),
        Tensor("B", ("q", "p")),
        Tensor("C", ("q", "n")),
    ]
    rhs = op("+", total("k", "A[i,k]"), total("l,k", op("*", "B[l,k]", "C[l,j]")))
    check(make_problem(tensors, [("S[i,j]", "=", rhs)], {"m": 3, "n": 5, "p": 2, "q": 7}))


def test_norm_sum_inside_call():
    tensors = [Tensor("s", ("b",)), Tensor("v", ("b", "n"))]
    rhs = call("sqrt", total("i", op("*", "v[b,i]", "v[b,i]")))
    check(make_problem(tensors, [("s[b]", "=", rhs)], {"b": 6, "n": 11}))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_elementwise_functions(dtype):
    tensors = [Tensor(x, ("m", "n"), dtype) for x in ("E", "A", "B")]
    a, b = "A[i,j]", "B[i,j]"
    rhs = op(
        "+",
        call("max", a, b),
        Neg(call("min", a, call("exp", b))),
        call("log", call("abs", a)),
        op("/", call("pow", call("abs", b), Const(1.5)), Const(3.0)),
        op("*", call("sin", a), call("cos", b)),
        call("tanh", op("-", a, Neg(Const(-0.25)))),
        Neg(Neg(at(a))),
        Const(0.1),
    )
    check(make_problem(tensors, [("E[i,j]", "=", rhs)], {"m": 4, "n": 9}))


def test_mixed_dtypes_compute_in_widest():
    tensors = [
        Tensor("C", ("m", "n"), "float32"),
        Tensor("A", ("m", "k"), "float32"),
        Tensor("B", ("k", "n"), "float64", "column"),
        Tensor("D", ("m", "n"), "float64"),
    ]
    problem = make_problem(
        tensors,
        [
            ("C[i,j]", "=", total("k", op("*", "A[i,k]", "B[k,j]"))),
            ("D[i,j]", "+=", op("*", "C[i,j]", Const(0.1))),
        ],
        {"m": 4, "n": 3, "k": 5},
    )
    source = CpuBackend().emit(problem)
    assert "(double)t_A[" in source and "t_C[(i_i * 3) + i_j] = (float)(acc0);" in source
    arrays = random_arrays(problem)
    d_before = arrays["D"].copy()
    CpuBackend().build(problem).run(arrays, {})
    # C is rounded to float32 when stored; statement 2 reads that rounded value.
    exact = arrays["A"].astype(np.float64) @ arrays["B"]
    assert np.allclose(arrays["C"], exact, rtol=1e-6, atol=0)
    want_d = d_before + arrays["C"].astype(np.float64) * 0.1
    assert np.max(np.abs(arrays["D"] - want_d)) <= 1e-15 * np.max(np.abs(want_d))


def test_statement_reads_earlier_output():
    tensors = [
        Tensor("T", ("m", "n")),
        Tensor("A", ("m", "k")),
        Tensor("B", ("k", "n")),
        Tensor("x", ("n",)),
        Tensor("y", ("m",)),
        Tensor("t", ()),
    ]
    problem = make_problem(
        tensors,
        [
            ("T[i,j]", "=", total("k", op("*", "A[i,k]", "B[k,j]"))),
            ("y[i]", "=", op("-", total("j", op("*", "T[i,j]", "x[j]")), "T[i,i]")),
            ("t", "=", total("i", op("*", "y[i]", "y[i]"))),
            ("T[i,j]", "+=", op("*", "y[i]", "t")),
        ],
        {"m": 4, "n": 4, "k": 3},
    )
    check(problem)


def test_repeated_nested_and_rank0():
    tensors = [
        Tensor("D", ("n", "n"), layout="column"),
        Tensor("A", ("n", "n")),
        Tensor("x", ("n",)),
        Tensor("t", ()),
    ]
    inner = call("exp", total("k", op("*", "A[j,k]", Const(0.1))))
    rhs = op("+", "x[i]", total("j", op("*", "A[i,j]", inner)))
    statements = [
        ("D[i,i]", "=", rhs),  # writes the diagonal only
        ("x[i]", "-=", "A[i,i]"),
        ("t", "+=", op("/", total("i,j", "D[i,j]"), "t")),
    ]
    check(make_problem(tensors, statements, {"n": 5}))


@st.composite
def contractions(draw) -> Problem:
    """``Z[out] op= sum(X[..] * Y[..])`` over random index sets, sizes, layouts, dtypes."""
    names = draw(st.lists(st.sampled_from("abcde"), min_size=1, max_size=4, unique=True))
    sizes = {name: draw(st.integers(1, 4)) for name in names}
    operand = st.lists(st.sampled_from(names), min_size=0, max_size=3)
    x, y = draw(operand), draw(operand)
    used = list(dict.fromkeys(x + y))
    out = draw(st.permutations(used).map(lambda p: p[: draw(st.integers(0, len(p)))]))
    reduced = [name for name in used if name not in out]

    def tensor(name, indices):
        layout = draw(st.sampled_from(["row", "column"]))
        dtype = draw(st.sampled_from(["float64", "float32"]))
        return Tensor(name, tuple(indices), dtype, layout)

    tensors = [tensor("Z", out), tensor("X", x), tensor("Y", y)]
    body = op("*", Access("X", tuple(x)), Access("Y", tuple(y)))
    rhs = Sum(tuple(reduced), body) if reduced else body
    statement = (f"Z[{','.join(out)}]", draw(st.sampled_from(["=", "+=", "-="])), rhs)
    return make_problem(tensors, [statement], sizes)


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(contractions())
def test_random_contractions(problem):
    check(problem, schedule=all_parallel(problem))


# ---- emitted code --------------------------------------------------------------


def test_emit_is_readable_c():
    problem = gemm("row", "float64", 64, 64, 64)
    source = CpuBackend().emit(problem)
    assert "void einkern_run(void **buffers, const double *scalars)" in source
    assert "/* statement 0: C[i,j] = " in source
    # C is read and written in the statement: one restrict pointer for it, not two.
    assert source.count("double *restrict t_C") == 1
    assert "const double *restrict t_A" in source
    assert "acc0 += t_A[(i_i * 64) + i_k] * t_B[(i_k * 64) + i_j];" in source
    assert "int64_t" in source and "#pragma omp parallel for" in source


# ---- cache ---------------------------------------------------------------------


@pytest.fixture()
def counting_compiler(tmp_path, monkeypatch):
    """$CC wrapper logging every compile (not --version queries); returns the log path."""
    real = toolchain(tmp_path).command[0]
    log = tmp_path / "compiles.log"
    wrapper = tmp_path / "cc-wrapper"
    wrapper.write_text(
        textwrap.dedent(f"""\
            #!/bin/sh
            case "$1" in --version) ;; *) echo "$*" >> '{log}' ;; esac
            exec '{real}' "$@"
            """)
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CC", str(wrapper))
    monkeypatch.setenv("EINKERN_CACHE_DIR", str(tmp_path / "cache"))
    return log


def compiles(log) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_second_build_in_new_process_does_not_compile(counting_compiler, tmp_path):
    problem = gemm("row", "float64")
    CpuBackend().build(problem)
    assert compiles(counting_compiler) >= 1
    before = compiles(counting_compiler)
    pickled = tmp_path / "problem.pkl"
    pickled.write_bytes(pickle.dumps(problem))
    script = (
        "import pickle, sys, numpy as np\n"
        "from einkern.backends.cpu import CpuBackend\n"
        "problem = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "a = {n: np.ones(problem.shape(n)) for n in 'ABC'}\n"
        "CpuBackend().build(problem).run(a, {'alpha': 1.0, 'beta': 1.0})\n"
        "assert (a['C'] == 4.0).all(), a['C']\n"
    )
    subprocess.run([sys.executable, "-c", script, str(pickled)], check=True, env=os.environ)
    assert compiles(counting_compiler) == before
    # Same process, new backend (no in-memory hit): still no compile.
    CpuBackend().build(problem)
    assert compiles(counting_compiler) == before


def test_corrupt_cached_library_is_rebuilt(counting_compiler, tmp_path):
    problem = gemm("column", "float64", 2, 3, 4)
    directory = tmp_path / "cache" / "cpu"
    chain = toolchain(directory)
    path = library_path(CpuBackend().emit(problem), chain, directory)
    path.write_bytes(b"\x7fELF this is not a library")
    before = compiles(counting_compiler)
    check(problem, {"alpha": 1.0, "beta": 0.5})
    assert compiles(counting_compiler) == before + 1
    assert path.read_bytes()[:4] == b"\x7fELF" and path.stat().st_size > 1000
    leftovers = [p.name for p in directory.iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_compile_error_reports_stderr_and_source(tmp_path):
    chain = toolchain(tmp_path)
    with pytest.raises(CompilationError) as caught:
        compile_library("this is not C;\n", chain, tmp_path)
    message = str(caught.value)
    assert "error" in message
    saved = re.search(r"source saved at (\S+)", message)[1]
    assert open(saved).read() == "this is not C;\n"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".so")]


def test_unwritable_cache_is_a_backend_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("EINKERN_CACHE_DIR", str(blocker))
    with pytest.raises(BackendError, match="EINKERN_CACHE_DIR"):
        CpuBackend().build(gemm("row", "float64", 2, 2, 2))


def test_missing_compiler(monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/einkern-cc")
    backend = CpuBackend()
    assert not backend.available()
    with pytest.raises(BackendError) as caught:
        backend.build(gemm("row", "float64"))
    assert caught.value.hint and "CC" in caught.value.hint


# ---- arrays --------------------------------------------------------------------


class _HostBuffer:
    def __init__(self, array):
        self.array = array
        self.__array_interface__ = array.__array_interface__


class _DeviceBuffer:
    __cuda_array_interface__ = {"shape": (2,), "typestr": "<f8", "data": (0, False)}


def test_describe_and_allocate():
    backend = CpuBackend()
    info = backend.describe(np.zeros((2, 3), dtype=np.float32, order="F"))
    assert (info.shape, info.dtype, info.strides, info.device) == ((2, 3), "float32", (1, 2), "cpu")
    base = np.arange(6.0).reshape(2, 3)
    host = backend.describe(_HostBuffer(base))
    assert host.pointer == base.ctypes.data and host.strides == (3, 1)
    assert backend.describe(_DeviceBuffer()) is None
    assert backend.describe([1.0, 2.0]) is None
    problem = gemm("column", "float32")
    out = backend.allocate(problem, "C", [])
    assert out.shape == (5, 7) and out.dtype == np.float32 and out.flags.f_contiguous


def test_run_rejects_bad_arrays():
    problem = gemm("row", "float64")
    executable = CpuBackend().build(problem)
    arrays = random_arrays(problem)
    with pytest.raises(ArgumentError):
        executable.run({**arrays, "A": arrays["A"].astype(np.float32)}, {"alpha": 1, "beta": 1})
    with pytest.raises(ArgumentError):
        executable.run({**arrays, "A": np.asfortranarray(arrays["A"])}, {"alpha": 1, "beta": 1})
    with pytest.raises(ArgumentError, match="overlap"):
        inside_c = arrays["C"].reshape(-1)[:15].reshape(5, 3)
        executable.run({**arrays, "A": inside_c}, {"alpha": 1, "beta": 1})
    with pytest.raises(ArgumentError, match="alpha"):
        executable.run(arrays, {"beta": 1})
