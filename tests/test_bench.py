"""Tests of ``einkern bench`` on the CPU: the quick runs end to end, the CCSD(T)
family construction, the peers' lowering, limits and failures."""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pytest

import einkern
from einkern.bench import BenchOptions, Case, resolve_suites, run_suites
from einkern.bench.device import CpuDevice
from einkern.bench.lowering import lower, module_ops
from einkern.bench.peers import NotApplicable, _matmul_operands
from einkern.bench.registry import get_device, get_suite, suite_names
from einkern.bench.results import EINKERN
from einkern.bench.runner import Runner
from einkern.bench.suites.ccsdt import family_program, kernel_program, load_kernels
from einkern.cli.bench import add_bench_parser, command_bench
from einkern.errors import UsageError
from einkern.testing import TOLERANCE, random_arrays, random_scalars, relative_error

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _bench(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    add_bench_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", *argv])
    return command_bench(args)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """The quick CPU run of gemm and ccsdt, once for the module."""
    out = tmp_path_factory.mktemp("bench")
    code = _bench(["gemm", "ccsdt", "--quick", "--backend", "cpu", "--out", str(out)])
    return code, out


def test_quick_cpu_run_writes_every_file(quick_run, capsys):
    code, out = quick_run
    assert code == 0
    for name in ("results.json", "results.csv", "results.md"):
        assert (out / name).stat().st_size > 0
    pngs = sorted(out.glob("*.png"))
    assert any(p.name.startswith("gflops_") for p in pngs)
    assert any(p.name.startswith("speedup_") for p in pngs)
    import matplotlib.image

    for png in pngs:
        assert png.read_bytes()[:8] == PNG_MAGIC
        assert png.stat().st_size < 100_000, png.name
        height, width = matplotlib.image.imread(png).shape[:2]
        assert height > 100 and width > 100


def test_quick_cpu_run_json_has_environment_and_every_row(quick_run):
    _, out = quick_run
    data = json.loads((out / "results.json").read_text())
    env = data["environment"]
    for key in ("date", "command", "backend", "cpu", "numpy", "einkern", "opt_einsum"):
        assert env[key], key
    assert env["backend"] == "cpu"
    assert data["calibration"]["bandwidth"] > 0
    assert set(data["calibration"]["peak"]) == {"float32", "float64"}
    rows = data["measurements"]
    cases = get_suite("gemm").cases(True) + get_suite("ccsdt").cases(True)
    implementations = {row["implementation"] for row in rows}
    assert implementations == {EINKERN, "numpy.einsum", "opt_einsum"}
    assert len(rows) == len(cases) * len(implementations)
    seen = {(row["workload"], row["extents"], row["implementation"]) for row in rows}
    assert len(seen) == len(rows)
    for row in rows:
        assert row["status"] == "ok", row
        assert row["runs"] >= 20
        assert row["error"] <= row["tolerance"] == TOLERANCE[row["dtype"]], row
        assert row["reference"] == "numpy"
        assert row["median_s"] > 0 and row["gflops"] > 0
        assert 0 < row["floor_fraction"]
        assert math.isclose(row["floor_s"], row["floor_fraction"] * row["median_s"])
    einkern_rows = [row for row in rows if row["implementation"] == EINKERN]
    assert all(row["einkern_speedup"] == 1.0 for row in einkern_rows)
    assert len(einkern_rows) == len(cases)


def test_quick_cpu_run_markdown_table_is_printed_last(quick_run):
    _, out = quick_run
    table = (out / "results.md").read_text()
    assert "| suite | workload | size | dtype | einkern ms" in table
    assert "× vs numpy.einsum" in table and "× vs opt_einsum" in table
    assert "sd_t_d1_all" in table and "sgemm_TN" in table


def test_table_is_last_on_stdout(tmp_path, capsys):
    code = _bench(["riemann", "--quick", "--backend", "cpu", "--out", str(tmp_path)])
    assert code == 0
    stdout = capsys.readouterr().out.strip().splitlines()
    assert stdout[0].startswith("| suite |")
    assert stdout[-1].startswith("| riemann | riemann | n=8 |")


def _sequential_program(family: str, tile: int) -> str:
    """The nine kernels of a family as nine statements, one after another."""
    kernels = [k for k in load_kernels() if k.family == family]
    header = [
        line for line in kernel_program(kernels[0], tile).splitlines() if not line.startswith("t3[")
    ]
    lines = [
        line
        for k in kernels
        for line in kernel_program(k, tile).splitlines()
        if line.startswith("t3[")
    ]
    return "\n".join(header + lines) + "\n"


@pytest.mark.parametrize("family", ["s1", "d1", "d2"])
def test_family_as_one_statement_equals_nine_in_sequence(family):
    fused = einkern.make_problem(einkern.load(family_program(family, 3)))
    sequential = einkern.make_problem(einkern.load(_sequential_program(family, 3)))
    assert len(fused.program.statements) == 1
    assert len(sequential.program.statements) == 9
    arrays = random_arrays(fused, seed=7)
    one = einkern.evaluate(fused, arrays)["t3"]
    nine = einkern.evaluate(sequential, arrays)["t3"]
    assert relative_error(one, nine) < 1e-14
    assert relative_error(one, arrays["t3"]) > 1e-3  # t3 really was updated


def test_ccsdt_suite_has_27_kernels_and_3_families():
    cases = get_suite("ccsdt").cases(False)
    assert len(load_kernels()) == 27
    assert len(cases) == 2 * (27 + 3)
    assert {c.extent_map["T"] for c in cases} == {16, 24}
    fused = [c for c in cases if c.workload.endswith("_all")]
    assert len(fused) == 6
    program = einkern.load(fused[0].program)
    assert program.tensor("t3").layout == "column"


def test_gemm_suite_covers_the_shapes():
    cases = get_suite("gemm").cases(False)
    square = {c.extent_map["n"] for c in cases if c.group.endswith("square")}
    assert square == {256, 512, 1000, 1024, 2048, 3000, 4095, 4096, 8192}
    assert {c.workload for c in cases if "op(A)" in c.group} == {
        "sgemm_NN",
        "sgemm_NT",
        "sgemm_TN",
        "sgemm_TT",
    }
    lu = [c.extent_map for c in cases if c.workload.startswith("dgemm_lu")]
    assert {"m": 6144, "n": 6144 - 64, "k": 64} in lu
    assert {"m": 6144, "n": 128, "k": 128} in lu
    assert any(c.extent_map == {"m": 8192, "n": 8192, "k": 64} for c in cases)
    assert len(get_suite("gemm").cases(True)) < len(cases)


@pytest.mark.parametrize("suite", ["gemm", "nekbone", "ccsdt", "riemann", "mapped"])
def test_peer_lowering_matches_the_reference(suite):
    ops = module_ops("numpy", np, lambda eq, *a: np.einsum(eq, *a, optimize=True))
    for case in get_suite(suite).cases(True)[:4]:
        problem = einkern.make_problem(einkern.load(case.program), case.extent_map)
        arrays = random_arrays(problem, seed=3)
        scalars = random_scalars(problem, seed=3)
        want = einkern.evaluate(problem, arrays, scalars)
        values = lower(problem, ops)({k: v.copy() for k, v in arrays.items()}, scalars)
        for name in problem.program.outputs:
            assert relative_error(values[name], want[name]) < 1e-5, (case.workload, name)


def test_lowering_handles_functions_scalars_and_broadcast():
    problem = einkern.make_problem(
        einkern.load(
            "dims nb = 7, d = 5\ntensor v[nb, d], s[nb], w[nb, d], acc[nb, d]\nscalar alpha = 0.5\n"
            "s[b] = sqrt(v[b,i] * v[b,i])\n"
            "w[b,i] = exp(v[b,i] - max(v[b,i], 1.0)) / (abs(s[b]) + log(1.0 + s[b]))\n"
            "acc[b,i] += alpha * s[b] - v[b,i] * sqrt(2.0)\n"
        )
    )
    arrays = random_arrays(problem, seed=1)
    want = einkern.evaluate(problem, arrays, {"alpha": 0.5})
    values = lower(problem, module_ops("numpy", np))(
        {k: v.copy() for k, v in arrays.items()}, {"alpha": 0.5}
    )
    for name in ("s", "w", "acc"):
        assert relative_error(values[name], want[name]) < 1e-14, name


def test_matmul_peer_takes_only_plain_products():
    plain = einkern.load("dims n = 4\ntensor A[n, n], B[n, n], C[n, n]\nC[i,j] = A[k,i] * B[j,k]\n")
    a, b, i, k = _matmul_operands(plain.statements[0])
    assert (a.tensor, b.tensor, i, k) == ("A", "B", "i", "k")
    scaled = einkern.load(
        "dims n = 4\ntensor A[n, n], B[n, n], C[n, n]\nC[i,j] += A[i,k] * B[k,j]\n"
    )
    with pytest.raises(NotApplicable):
        _matmul_operands(scaled.statements[0])


class _BrokenPeer:
    name = "broken"
    backend = "cpu"

    def available(self):
        return None

    def prepare(self, case, problem, arrays, scalars):
        raise RuntimeError("no kernel for this shape\nsecond line")


class _AbsentPeer:
    name = "absent"
    backend = "cpu"

    def available(self):
        return "library not installed"

    def prepare(self, case, problem, arrays, scalars):  # pragma: no cover - never called
        raise AssertionError


def test_failing_and_unavailable_peers_are_recorded():
    case = get_suite("riemann").cases(True)[0]
    device = CpuDevice()
    calibration = device.calibrate(quick=True)
    messages = []
    runner = Runner(
        BenchOptions("cpu", quick=True),
        device,
        calibration,
        [_BrokenPeer(), _AbsentPeer()],
        messages.append,
    )
    rows = {row.implementation: row for row in runner.run_case(case)}
    assert rows[EINKERN].status == "ok"
    assert rows["broken"].status == "failed"
    assert rows["broken"].reason == "RuntimeError: no kernel for this shape"
    assert rows["absent"].status == "unavailable"
    assert rows["absent"].reason == "library not installed"
    assert messages == ["absent unavailable: library not installed"]


def test_a_program_that_does_not_load_fails_every_row():
    case = Case("x", "bad", "bad", "tensor A[n\n", (), 1.0, "n=1")
    device = CpuDevice()
    runner = Runner(BenchOptions("cpu"), device, device.calibrate(quick=True), [], print)
    (row,) = runner.run_case(case)
    assert row.status == "failed" and row.reason.startswith("program: ")


def test_suite_timeout_skips_and_says_so():
    notes = []
    result = run_suites(
        resolve_suites(["riemann"]),
        BenchOptions("cpu", quick=True, suite_timeouts=(("riemann", 0.0),)),
        log=notes.append,
    )
    assert {row.status for row in result.measurements} == {"skipped"}
    assert len(result.measurements) == 2 * 3
    assert notes[0] == "suite riemann: time limit 0 s reached, 2 case(s) skipped"
    assert result.notes == tuple(notes)


def test_tuned_without_tuning_database_says_so(tmp_path, capsys):
    from einkern.bench.runner import tuning_supported

    code = _bench(["mapped", "--quick", "--backend", "cpu", "--tuned", "--out", str(tmp_path)])
    assert code == 0
    if not tuning_supported():
        assert "tuning database not available" in capsys.readouterr().err


def test_suites_registry_and_usage_errors(tmp_path):
    assert suite_names() == (
        "gemm",
        "nekbone",
        "ccsdt",
        "riemann",
        "mapped",
        "blas",
        "contractions",
    )
    assert [s.name for s in resolve_suites(["ccsdt", "all"])][:2] == ["ccsdt", "gemm"]
    with pytest.raises(UsageError):
        resolve_suites(["nosuch"])
    with pytest.raises(UsageError):
        _bench(["--backend", "cpu", "--out", str(tmp_path)])
    with pytest.raises(UsageError):
        _bench(["gemm", "--peers", "nosuch", "--backend", "cpu"])
    with pytest.raises(UsageError):
        get_device("tpu")


def test_missing_matplotlib_says_which_extra_installs_it(monkeypatch):
    import sys

    from einkern.bench import plots

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    with pytest.raises(ImportError, match=r"pip install 'einkern\[bench\]'"):
        plots._pyplot()


def test_list_names_suites_and_peers(capsys):
    assert _bench(["--list"]) == 0
    out = capsys.readouterr().out
    for name in (
        "gemm",
        "nekbone",
        "ccsdt",
        "riemann",
        "mapped",
        "numpy.einsum",
        "cuTENSOR",
        "cuBLAS (torch.matmul)",
        "torch.einsum",
        "cupy.einsum",
        "opt_einsum (torch)",
        "blas",
        "SciPy BLAS",
        "cuBLAS (torch)",
        "cuBLAS (CuPy)",
    ):
        assert name in out


@pytest.mark.gpu
def test_quick_cuda_run(tmp_path):
    code = _bench(["gemm", "ccsdt", "--quick", "--backend", "cuda", "--out", str(tmp_path)])
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["environment"]["device"]
    einkern_rows = [r for r in data["measurements"] if r["implementation"] == EINKERN]
    assert all(r["status"] == "ok" and r["error_ok"] for r in einkern_rows)
    assert code == 0


def test_gpu_allocation_failure_says_how_many_bytes(monkeypatch):
    """CudaDevice.empty turns torch's out-of-memory error into an AllocationError
    (checked here with a stand-in for torch: no GPU needed)."""
    from types import SimpleNamespace

    from einkern.bench.cuda_device import CudaDevice
    from einkern.errors import AllocationError

    class OutOfMemoryError(RuntimeError):
        pass

    def empty(*args, **kwargs):
        raise OutOfMemoryError("CUDA out of memory")

    device = object.__new__(CudaDevice)
    device.torch = SimpleNamespace(
        empty=empty, cuda=SimpleNamespace(OutOfMemoryError=OutOfMemoryError)
    )
    device.dtypes = {"float32": "f4", "float64": "f8"}
    with pytest.raises(AllocationError, match=r"\(1024, 2048\) on the GPU: 8388608 bytes"):
        device.empty((1024, 2048), "float32", "column")


def test_quick_blas_run_checks_every_routine_against_scipy(tmp_path):
    """The blas suite's quick CPU run: every routine case has an einkern row and a
    SciPy BLAS row, both within tolerance of SciPy's float64 result, and no rows
    of the einsum peers; symv's floor counts one triangle."""
    code = _bench(["blas", "--quick", "--backend", "cpu", "--out", str(tmp_path)])
    assert code == 0
    rows = json.loads((tmp_path / "results.json").read_text())["measurements"]
    cases = get_suite("blas").cases(True)
    assert {row["implementation"] for row in rows} == {EINKERN, "SciPy BLAS"}
    assert len(rows) == 2 * len(cases)
    for row in rows:
        assert row["status"] == "ok" and row["error_ok"], row
    by_case = {(r["workload"], r["extents"]): r for r in rows if r["implementation"] == EINKERN}
    gemv, symv = by_case[("sgemv_N", "n=100")], by_case[("ssymv_L", "n=100")]
    assert symv["min_bytes"] == (100 * 101 // 2 + 200) * 4 < gemv["min_bytes"]
    workloads = {c.workload for c in cases}
    assert {"saxpy", "dgemv_T", "dsymv_L", "sgemm_TN", "ssyrk_L", "strsm_LLNN"} <= workloads
    full = get_suite("blas").cases(False)
    assert {c.extent_map["n"] for c in full if c.group == "symv"} == {8192, 16384}
    assert {c.extent_map["m"] for c in full if c.group == "strsm"} == {4096}


def test_cases_option_runs_only_the_matching_cases(tmp_path):
    code = _bench(
        ["blas", "--quick", "--backend", "cpu", "--cases", "*symv*", "--out", str(tmp_path)]
    )
    assert code == 0
    rows = json.loads((tmp_path / "results.json").read_text())["measurements"]
    symv = [c for c in get_suite("blas").cases(True) if "symv" in c.key]
    assert rows and {row["workload"] for row in rows} == {c.workload for c in symv}
    assert len(rows) == 2 * len(symv)
