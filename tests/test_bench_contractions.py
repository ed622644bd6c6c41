"""The ``contractions`` generality suite on the CPU: the structure a seed gives,
determinism, every drawn case compiled and checked at small extents, the quick
CLI run and its report, the report's arithmetic, and the calibration records."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math

import pytest

import einkern
from einkern.bench import BenchOptions, resolve_suites
from einkern.bench.device import Calibration
from einkern.bench.generality import (
    case_results,
    class_summary,
    geomean,
    spearman,
    summarize,
    summary_markdown,
)
from einkern.bench.registry import get_suite, suite_names
from einkern.bench.results import EINKERN, BenchResult, Measurement
from einkern.bench.suites.contractions import (
    COUNT,
    LARGEST,
    MAX_FLOPS,
    Contraction,
    ContractionsSuite,
    balance,
    contractions,
)
from einkern.cli.bench import add_bench_parser, command_bench
from einkern.errors import UsageError
from einkern.ir.task import statement_task
from einkern.testing import assert_matches_reference


def _bench(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    add_bench_parser(parser.add_subparsers(dest="command"))
    return command_bench(parser.parse_args(["bench", *argv]))


@pytest.fixture(scope="module")
def drawn() -> list[Contraction]:
    return contractions(11)


# ---- what a seed gives ---------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 11, 2024, 987654321])
def test_a_seed_gives_the_promised_structure(seed):
    drawn = contractions(seed)
    assert len(drawn) == COUNT >= 100
    for c in drawn:
        counts = {group: len(indices) for group, indices in c.groups}
        assert 0 <= counts["batch"] <= 3 and 1 <= counts["k"] <= 4, c
        for tensor in (c.a, c.b, c.c):
            assert 2 <= len(tensor) <= 6, c
        groups = dict(c.groups)
        batch, m, n, k = (set(groups[g]) for g in ("batch", "m", "n", "k"))
        assert set(c.a) == batch | m | k and set(c.b) == batch | n | k
        assert set(c.c) == batch | m | n
        assert LARGEST[0] <= c.largest_bytes <= LARGEST[1], c
        assert c.flops <= MAX_FLOPS
        assert all(extent >= 2 for _, extent in c.extents)
        # drawn on the intended side of H100's balance point
        assert (c.intensity > balance(c.dtype)) == (c.bound == "compute"), c
    assert {c.dtype for c in drawn} == {"float32", "float64"}
    assert {c.layout for c in drawn} == {"row", "column"}
    bounds = [c.bound for c in drawn]
    assert bounds.count("memory") == bounds.count("compute") == COUNT // 2
    for dtype in ("float32", "float64"):
        assert {c.bound for c in drawn if c.dtype == dtype} == {"memory", "compute"}
    # index orders are permuted: not every tensor lists its indices group by group
    canonical = 0
    for c in drawn:
        groups = dict(c.groups)
        canonical += c.a == groups["batch"] + groups["m"] + groups["k"]
    assert canonical < len(drawn) // 4
    assert {len(dict(c.groups)["batch"]) for c in drawn} == {0, 1, 2, 3}
    assert {len(dict(c.groups)["k"]) for c in drawn} == {1, 2, 3, 4}
    assert {len(t) for c in drawn for t in (c.a, c.b, c.c)} == {2, 3, 4, 5, 6}


def test_quick_cases_are_small_and_of_both_classes():
    from einkern.bench.suites.contractions import LARGEST_QUICK, MAX_FLOPS_QUICK, QUICK_BALANCE

    small = contractions(7, 40, quick=True)
    for c in small:
        assert LARGEST_QUICK[0] <= c.largest_bytes <= LARGEST_QUICK[1], c
        assert c.flops <= MAX_FLOPS_QUICK
        assert (c.intensity > QUICK_BALANCE * balance(c.dtype)) == (c.bound == "compute")
    assert {c.bound for c in small[:2]} == {"memory", "compute"}


def test_every_case_is_a_valid_program_with_its_einsum(drawn):
    for c in drawn[:40]:
        problem = einkern.make_problem(einkern.load(c.program()), {})
        (statement,) = problem.program.statements
        output = "".join(statement.output.indices)
        assert c.einsum.endswith("->" + output)
        assert problem.program.tensor("A").layout == c.layout
        assert problem.program.tensor("C").dtype == c.dtype
        assert problem.shape("A") == tuple(c.sizes[i] for i in c.a)
        assert c.einsum in c.program()


def test_the_same_seed_gives_the_same_cases_and_another_seed_others():
    assert contractions(4) == contractions(4)
    one, other = ContractionsSuite(seed=4), ContractionsSuite(seed=4)
    assert one.cases(False) == other.cases(False)
    assert one.cases(True) == other.cases(True)
    assert [c.einsum for c in contractions(5)] != [c.einsum for c in contractions(4)]
    assert ContractionsSuite().with_seed(4) == one
    assert len(ContractionsSuite(seed=4).with_count(7).drawn(False)) == 7


def test_seed_0_gives_the_cases_it_always_gave():
    """A seed's cases are part of the benchmark's definition: a change to the
    generator that moves them makes earlier reports incomparable, so it must be
    deliberate (update this pin and say so in BENCHMARKS.md)."""
    import zlib

    drawn = contractions(0)
    first = drawn[0]
    assert (first.einsum, first.dtype, first.layout) == ("aovmql,voi->moiqla", "float64", "row")
    assert dict(first.extents) == {"o": 27, "q": 4, "m": 6, "a": 6, "l": 5, "i": 492, "v": 293}
    assert zlib.crc32("".join(c.program() for c in drawn).encode()) == 4226848997


def test_named_shapes_come_from_the_other_suites():
    cases = ContractionsSuite().cases(False)
    named = {c.group: c for c in cases if c.group.startswith("named")}
    assert set(named) == {"named ccsdt", "named nekbone", "named gemm", "named riemann"}
    by_workload = {(c.workload, c.extents) for c in cases}
    ccsdt = get_suite("ccsdt").cases(False)
    d1 = next(c for c in ccsdt if c.workload == "sd_t_d1_1" and c.size == 16)
    assert (d1.workload, d1.extents) in by_workload
    assert any(c.workload == "sgemm" and c.extent_map["n"] == 1024 for c in cases)
    assert all(c.suite == "contractions" for c in cases)
    assert len({c.key for c in cases}) == len(cases)


# ---- every drawn case compiles and matches the reference ------------------------


def _shrunk(c: Contraction, limit: int) -> Contraction:
    return dataclasses.replace(c, extents=tuple((i, min(e, limit)) for i, e in c.extents))


def _combined_program(drawn: list[Contraction]) -> str:
    """Every contraction as one statement of one program (one compilation): case k's
    tensors are A_k, B_k, C_k and its extents n<index>_k."""
    dims, tensors, statements, dtypes = [], [], [], []
    for number, c in enumerate(drawn):
        dims += [f"n{i}_{number} = {e}" for i, e in c.extents]

        def declare(name, indices, c=c, number=number):
            shape = ", ".join(f"n{i}_{number}" for i in indices)
            return f"tensor {name}_{number}[{shape}] {c.dtype} {c.layout}"

        tensors += [declare("A", c.a), declare("B", c.b), declare("C", c.c)]
        statements.append(
            f"C_{number}[{','.join(c.c)}] = A_{number}[{','.join(c.a)}] * "
            f"B_{number}[{','.join(c.b)}]"
        )
        dtypes.append(c.dtype)
    return "program drawn\ndims " + ", ".join(dims) + "\n" + "\n".join(tensors + statements) + "\n"


def test_every_drawn_case_compiles_and_matches_the_reference_on_the_cpu(drawn):
    small = [_shrunk(c, 3) for c in drawn]
    kernel = einkern.compile(_combined_program(small), backend="cpu")
    errors = assert_matches_reference(kernel, seed=5)
    assert len(errors) == len(drawn)


def test_every_quick_case_compiles_and_matches_the_reference_on_the_cpu():
    for case in ContractionsSuite(seed=3).cases(True):
        kernel = einkern.compile(case.program, backend="cpu", **case.extent_map)
        assert_matches_reference(kernel, seed=1)


# ---- the quick CPU run and its report -----------------------------------------


def test_quick_cpu_run_writes_the_generality_report(tmp_path, capsys):
    """The quick mode as CI runs it: 6 drawn cases and the small named shapes."""
    code = _bench(
        ["contractions", "--quick", "--backend", "cpu", "--seed", "2", "--runs", "5"]
        + ["--out", str(tmp_path)]
    )
    assert code == 0
    summary = json.loads((tmp_path / "contractions.json").read_text())
    assert summary["seed"] == 2 and summary["backend"] == "cpu"
    assert [c["klass"] for c in summary["classes"]] == [
        "memory-bound fp64",
        "compute-bound fp64",
        "fp32",
        "all drawn",
    ]
    drawn = [c for c in summary["cases"] if c["drawn"]]
    assert [c["workload"] for c in drawn] == [f"c2_00{n}" for n in range(6)]
    named = [c["workload"] for c in summary["cases"] if not c["drawn"]]
    assert named == ["sd_t_d1_1", "local_grad3", "sgemm", "dgemm", "riemann"]
    for case in drawn:
        assert case["einkern_status"] == "ok"
        assert case["better_peer"] == "numpy.einsum"
        assert case["ratio"] > 0 and case["floor_s"] > 0
    assert summary["classes"][-1]["cases"] == 6 and summary["skipped"] == 0
    markdown = (tmp_path / "contractions.md").read_text()
    assert "| class |" in markdown and "| case |" in markdown
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1].startswith("Cost model")
    rows = json.loads((tmp_path / "results.json").read_text())["measurements"]
    assert {r["suite"] for r in rows} == {"contractions"}


def test_all_leaves_the_contractions_suite_out():
    assert "contractions" in suite_names()
    assert "contractions" not in [s.name for s in resolve_suites(["all"])]
    assert [s.name for s in resolve_suites(["contractions"])] == ["contractions"]


def test_calibrate_needs_the_cuda_backend(tmp_path):
    with pytest.raises(UsageError, match="cuda backend"):
        _bench(["contractions", "--backend", "cpu", "--calibrate", str(tmp_path / "c.jsonl")])
    with pytest.raises(UsageError):
        _bench(["contractions", "--backend", "cpu", "--count", "0"])


# ---- the report's arithmetic ---------------------------------------------------


def _row(workload, implementation, seconds, dtype="float64", flops=10**9, nbytes=10**8, **kw):
    status = kw.pop("status", "ok")
    return Measurement(
        "contractions",
        workload,
        kw.pop("group", "drawn memory-bound"),
        workload,
        1.0,
        "n=1",
        dtype,
        implementation,
        status,
        median_s=seconds,
        flops=flops,
        min_bytes=nbytes,
        error_ok=kw.pop("error_ok", True),
        **kw,
    )


def _result(rows) -> BenchResult:
    calibration = Calibration(
        1e12, {"float32": 1e14, "float64": 1e14}, simt_peak={"float32": 4e13, "float64": 2e13}
    )
    return BenchResult({"backend": "cuda"}, calibration, {"seed": 9}, tuple(rows))


def test_report_classes_ratios_and_floor():
    rows = [
        # memory-bound fp64: floor 1e8 / 1e12 = 0.1 ms
        _row("m1", EINKERN, 2e-4, predicted_s=1e-4),
        _row("m1", "torch.einsum", 1e-4),
        _row("m1", "cuTENSOR", 4e-4, error_ok=False, error=1.0),  # counted, marked
        _row("m2", EINKERN, 1e-4, predicted_s=3e-4),
        _row("m2", "torch.einsum", 2e-4),
        _row("m2", "cuTENSOR", "failed", status="failed", reason="x"),
        # compute-bound fp64: 1e12 flops / 2e13 SIMT = 50 ms > 1e8 / 1e12
        _row("c1", EINKERN, 0.1, flops=10**12, predicted_s=0.2),
        _row("c1", "torch.einsum", 0.05, flops=10**12),
        _row("c1", "cuTENSOR", 0.025, flops=10**12),
        # fp32, einkern wrong: counts as not at least as fast
        _row("s1", EINKERN, 1e-4, dtype="float32", error_ok=False, error=1.0),
        _row("s1", "torch.einsum", 1e-3, dtype="float32"),
        # a named shape: in the table, not in the classes
        _row("g", EINKERN, 1e-3, group="named gemm", predicted_s=5e-4),
        _row("g", "torch.einsum", 1e-3, group="named gemm"),
        # past the suite's time limit: left out of every figure
        _row("late", EINKERN, None, status="skipped", reason="suite time limit 1 s reached"),
        _row("late", "torch.einsum", None, status="skipped"),
        _row("g", "cuTENSOR", None, status="unavailable", reason="OSError: no libcutensor"),
    ]
    rows[5] = dataclasses.replace(rows[5], median_s=None)
    result = _result(rows)
    cases = {c.workload: c for c in case_results(result)}
    assert cases["m1"].klass == "memory-bound fp64" and cases["c1"].klass == "compute-bound fp64"
    assert cases["s1"].klass == "fp32" and not cases["g"].drawn
    assert cases["m1"].floor_s == pytest.approx(1e-4)
    assert cases["c1"].floor_s == pytest.approx(0.05)  # the SIMT peak, not cuBLAS's
    assert cases["m1"].better_peer == "torch.einsum" and cases["m2"].better_peer == "torch.einsum"
    assert cases["c1"].better_peer == "cuTENSOR"
    assert cases["s1"].einkern_s is None and cases["s1"].einkern_status.startswith("wrong")

    memory = class_summary("memory-bound fp64", [cases["m1"], cases["m2"]])
    assert memory.floor_geomean == pytest.approx(math.sqrt(0.5 * 1.0))
    assert memory.at_least_peer == 0.5
    assert memory.ratio_geomean == pytest.approx(math.sqrt(0.5 * 2.0))
    assert memory.worst_ratio == pytest.approx(0.5) and memory.worst_case == "m1"
    assert memory.below_07 == 1
    fp32 = class_summary("fp32", [cases["s1"]])
    assert fp32.at_least_peer == 0.0 and fp32.worst_ratio == 0.0
    assert "einkern failed" in fp32.worst_case and fp32.below_07 == 1

    summary = summarize(result)
    assert summary["seed"] == 9 and summary["better_peers"] == ["torch.einsum", "cuTENSOR"]
    assert [c["cases"] for c in summary["classes"]] == [2, 1, 1, 4]
    # predicted 1e-4, 3e-4, 0.2, 5e-4 against measured 2e-4, 1e-4, 0.1, 1e-3
    assert summary["model_pairs"] == 4
    assert summary["model_spearman"] == pytest.approx(spearman([1, 2, 4, 3], [2, 1, 4, 3]))
    assert summary["skipped"] == 1 and "late" not in [c["workload"] for c in summary["cases"]]
    text = summary_markdown(summary)
    assert "SIMT peak TFLOP/s float32 40, float64 20; 1 case(s) skipped" in text
    assert "; cuTENSOR unavailable (OSError: no libcutensor): its cells say —." in text
    assert "| memory-bound fp64 | 2 | 2 | 70.7 % |" in text
    assert "\n| m1 | m1 | memory-bound fp64 | 0.1 | 0.2 | 50 % | 0.1 | 0.4 ✗ | 0.5× | 0.1 |" in text
    assert cases["m1"].peers["cuTENSOR"] == 4e-4 and cases["m1"].peer_errors == ("cuTENSOR",)
    assert "\n| c1 |" in text and "\n| g |" in text


def test_spearman_without_scipy_agrees(monkeypatch):
    import sys

    x, y = [0.3, 0.1, 0.2, 0.9, 0.9], [3.0, 1.0, 5.0, 4.0, 2.0]
    # ranks 3, 1, 2, 4.5, 4.5 and 3, 1, 5, 4, 2: Pearson's r of the ranks is 2 / sqrt(95)
    assert spearman(x, y) == pytest.approx(2 / math.sqrt(95))  # SciPy, where installed
    monkeypatch.setitem(sys.modules, "scipy.stats", None)
    assert spearman(x, y) == pytest.approx(2 / math.sqrt(95))
    assert spearman([1, 2], [2, 1]) is None
    assert spearman([1, 1, 1], [1, 2, 3]) is None
    assert geomean([]) is None and geomean([2.0, 8.0]) == pytest.approx(4.0)


# ---- the calibration records -----------------------------------------------------


def test_calibration_candidates_are_valid_distinct_and_start_with_the_default(drawn):
    from einkern.bench.calibrate import candidates, record_line
    from einkern.tuning.cuda_target import CudaTarget
    from einkern.tuning.search import canonical

    target = CudaTarget()
    for c in drawn[:3]:
        problem = einkern.make_problem(einkern.load(c.program()), {})
        task = statement_task(problem, 0)
        found = candidates(task, seed=1)
        assert found == candidates(task, seed=1)
        origins = [origin for origin, _ in found]
        assert origins[0] == "default" and "model" in origins
        keys = [canonical(config) for _, config in found]
        assert len(set(keys)) == len(keys) >= 3
        for origin, config in found[1:]:
            assert target.violation(task, config) is None, (origin, config)
        origin, config = found[0]
        line = record_line(
            c.case(), problem, task, config, origin, target.model_cost(task, config), None, "x"
        )
        text = json.dumps(line, allow_nan=False)
        back = json.loads(text)
        assert back["config"] == config.to_json() and back["measured_s"] is None
        assert back["predicted_s"] > 0 and back["flops"] == c.flops
        rebuilt = einkern.make_problem(einkern.load(back["program"]), back["extents"])
        assert str(statement_task(rebuilt, back["position"])) == back["task"]


def test_simt_peak_kernel_compiles_for_sm_90():
    from einkern.backends.cuda.nvrtc import compile_cubin
    from einkern.bench.cuda_device import simt_source

    for dtype in ("float32", "float64"):
        module = compile_cubin(simt_source(dtype), "sm_90")
        (resources,) = module.resources
        assert resources.name == f"ek_simt_{dtype}" and resources.spill_stores == 0


def test_the_device_reference_is_used_when_a_drawn_case_asks():
    from einkern.bench.device import CpuDevice
    from einkern.bench.runner import Runner

    class Device(CpuDevice):
        asked = 0

        def device_reference(self, problem, inputs, scalars):
            Device.asked += 1
            return einkern.evaluate(problem, inputs, scalars)

    case = contractions(1, 1, quick=True)[0].case()
    assert case.device_reference
    device = Device()
    options = BenchOptions("cpu", quick=True, runs=2)
    runner = Runner(options, device, device.calibrate(quick=True), [], print)
    (row,) = runner.run_case(case)
    assert Device.asked == 1 and row.reference.startswith("torch.einsum float64")
    assert row.status == "ok" and row.error_ok


def test_calibrate_case_writes_one_line_per_candidate(tmp_path, monkeypatch):
    """The whole record path on the CPU: ``api.compile`` stands in for the CUDA
    compile of each configuration (the configuration is recorded, the CPU kernel
    timed and checked)."""
    from einkern import api
    from einkern.bench.calibrate import calibrate_case, read_records
    from einkern.bench.device import CpuDevice
    from einkern.bench.runner import Runner, _einkern_run

    real = api.compile
    seen = []

    def compile_on_cpu(program, *, backend, mappings, **extents):
        seen.append((backend, mappings))
        return real(program, backend="cpu", **extents)

    monkeypatch.setattr(api, "compile", compile_on_cpu)
    device = CpuDevice()
    runner = Runner(BenchOptions("cpu", runs=2), device, device.calibrate(quick=True), [], print)
    case = contractions(2, 1, quick=True)[0].case()
    path = tmp_path / "calibration.jsonl"
    with path.open("w") as stream:
        written = calibrate_case(runner, case, stream, _einkern_run, "cpu")
    records = read_records(path)
    assert written == len(records) == len(seen) >= 3
    assert all(backend == "cuda" and set(m) == {0} for backend, m in seen)
    assert records[0]["origin"] == "default"
    for record in records:
        assert record["status"] == "ok" and record["error_ok"] is True
        assert record["measured_s"] > 0 and record["predicted_s"] > 0 and record["runs"] == 2
        assert record["case"] == case.key and record["device"] == "cpu"
    # a program of several statements is left out
    named = next(c for c in ContractionsSuite().cases(True) if c.workload == "local_grad3")
    assert calibrate_case(runner, named, stream=None, einkern_run=_einkern_run) == 0


def _model_of(problem) -> float:
    """The cost model's time of every statement of ``problem`` under its default
    mapping (this machine's limits: H100 without a GPU), with the registers
    NVRTC compiles each SIMT kernel to."""
    from einkern.backends.cuda.limits import device_limits
    from einkern.backends.cuda.probe import register_probe
    from einkern.gpu.decision import decide
    from einkern.gpu.model import predicted_time

    limits = device_limits()
    probe = register_probe(limits)
    assert probe is not None  # NVRTC is part of the test environment
    total = 0.0
    for i in range(len(problem.program.statements)):
        task = statement_task(problem, i)
        mapping = decide(task, limits, probe)
        registers = probe(task, mapping) if mapping.mma is None else None
        total += predicted_time(task, mapping, limits, registers=registers)
    return total


def test_predicted_seconds_is_the_model_of_the_compiled_mappings():
    """What einkern rows record as ``predicted_s`` on the GPU: the cost model of
    the mapping each statement is compiled under (no GPU needed to plan)."""
    from types import SimpleNamespace

    from einkern.backends.cuda import CudaBackend
    from einkern.bench.runner import predicted_seconds

    named = next(c for c in ContractionsSuite().cases(False) if c.workload == "local_grad3")
    for case in [contractions(0, 2)[1].case(), named]:
        problem = einkern.make_problem(einkern.load(case.program), case.extent_map)
        kernel = SimpleNamespace(
            backend=CudaBackend(), problem=problem, compiled=problem, mappings=None
        )
        want = _model_of(problem)
        assert predicted_seconds(kernel) == pytest.approx(want) and want > 0
    broken = SimpleNamespace(backend=object(), problem=problem, compiled=problem, mappings=None)
    assert predicted_seconds(broken) is None


def test_predicted_seconds_of_a_rewritten_kernel_is_its_plans():
    """A split-K plan is predicted as its own kernels, not as the direct kernel
    of the program's statement (which the bench recorded before)."""
    from types import SimpleNamespace

    from einkern.api import plan_rewrites
    from einkern.backends.cuda import CudaBackend
    from einkern.bench.runner import predicted_seconds

    text = "dims n=6, m=5, k=200000\ntensor A[n,k], B[k,m], C[n,m]\nC[i,j] = A[i,k]*B[k,j]\n"
    problem = einkern.make_problem(einkern.load(text), {})
    chosen = plan_rewrites(problem, "cuda")
    assert chosen.rewrites  # a split-K plan
    kernel = SimpleNamespace(
        backend=CudaBackend(), problem=problem, compiled=chosen.problem, mappings=None
    )
    assert predicted_seconds(kernel) == pytest.approx(_model_of(chosen.problem))
    assert _model_of(chosen.problem) < 0.85 * _model_of(problem)  # the plan's reason to exist


def test_dump_writes_every_program_of_the_seed(tmp_path):
    code = _bench(["contractions", "--seed", "4", "--count", "5", "--dump", str(tmp_path)])
    assert code == 0
    index = json.loads((tmp_path / "cases.json").read_text())
    cases = ContractionsSuite(seed=4, count=5).cases(False)
    assert [entry["workload"] for entry in index] == [c.workload for c in cases]
    for entry, case in zip(index, cases, strict=True):
        assert (tmp_path / entry["file"]).read_text() == case.program
        assert entry["extents"] == case.extent_map
    assert index[0]["note"] == f"einsum {contractions(4, 1)[0].einsum}"
