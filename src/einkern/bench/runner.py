"""Run suites: compile, check and time einkern and every peer on every case.

For each case: fresh random inputs on the device (uniform in [0.5, 1.5)),
one reference (NumPy, or float64 ``torch.einsum`` on the GPU where the NumPy
reference would take more than a few seconds or the case asks for it), then
for einkern and each peer in turn: its own copy of the inputs, one checked
call, warm-up, and the timed calls.  Nothing that goes wrong is dropped: a row records the reason.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import inspect
import sys
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

from ..ir.analysis import fused_floor_bytes, kernel_floor_bytes, program_flops
from ..ir.nodes import Problem
from ..testing import random_scalars, tolerance
from .case import Case, Suite
from .device import Calibration, Device
from .environment import collect
from .peers import NotApplicable, Peer, Run
from .registry import get_device, peers_for
from .results import EINKERN, BenchResult, Measurement

Log = Callable[[str], None]


@dataclass(frozen=True)
class BenchOptions:
    """How to run: backend, quick sizes, tuned kernels, repetitions and limits.

    ``row_budget_s`` caps the timed calls of one row: a row whose single call
    takes longer than ``row_budget_s / runs`` gets fewer runs (at least 3), and
    says so.  ``suite_timeouts`` maps suite names (``"*"``: any other) to seconds
    after which the rest of the suite is skipped.
    The NumPy reference is replaced by a float64 one on the device when it is
    estimated to take more than ``reference_limit_s``."""

    backend: str
    quick: bool = False
    tuned: bool = False
    runs: int = 20
    warmup: int = 2
    row_budget_s: float = 30.0
    suite_timeouts: tuple[tuple[str, float], ...] = ()
    reference_limit_s: float = 1.0
    seed: int = 0
    peers: tuple[str, ...] | None = None
    #: A file to append the cost model's calibration records to (JSON lines,
    #: :mod:`einkern.bench.calibrate`), or None.
    calibrate: str | None = None
    #: Patterns (``fnmatch``, e.g. ``"*symv*"``) a case's key must match to run;
    #: None runs every case.
    cases: tuple[str, ...] | None = None

    def selected(self, case: Case) -> bool:
        """Whether ``case`` is one of the cases to run (see :attr:`cases`)."""
        return self.cases is None or any(fnmatch.fnmatchcase(case.key, p) for p in self.cases)

    def suite_timeout(self, suite: str) -> float | None:
        """Seconds allowed for ``suite``, or None for no limit."""
        limits = dict(self.suite_timeouts)
        return limits.get(suite, limits.get("*"))


def tuning_supported() -> bool:
    """True when ``einkern.compile`` takes ``tune=`` (the tuning database exists)."""
    from .. import api

    return "tune" in inspect.signature(api.compile).parameters


def _first_line(text: str | None, width: int = 300) -> str | None:
    """The first line of a message, at most ``width`` characters (None stays None)."""
    if text is None:
        return None
    lines = text.strip().splitlines()
    line = lines[0].strip() if lines else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def _reason(error: BaseException) -> str:
    return f"{type(error).__name__}: {_first_line(str(error))}".strip().rstrip(":")


class Runner:
    """Runs cases on one device against a fixed set of peers."""

    def __init__(
        self,
        options: BenchOptions,
        device: Device,
        calibration: Calibration,
        peers: Sequence[Peer],
        log: Log,
    ):
        self.options = options
        self.device = device
        self.calibration = calibration
        self.peers = list(peers)
        self.unavailable = {peer.name: _first_line(peer.available()) for peer in self.peers}
        self.compile_options: dict[str, Any] = {}
        for name, reason in self.unavailable.items():
            if reason:
                log(f"{name} unavailable: {reason}")
        if options.tuned:
            if tuning_supported():
                self.compile_options["tune"] = "cached"
            else:
                log("tuning database not available: --tuned ignored, default kernels timed")

    @property
    def implementations(self) -> list[str]:
        return [EINKERN, *(peer.name for peer in self.peers)]

    def peers_for(self, case: Case) -> list[Any]:
        """The peers that get a row for ``case``: the BLAS libraries for routine
        cases (:mod:`.routines`), the others for programs."""
        return [
            peer
            for peer in self.peers
            if (hasattr(peer, "prepare_routine") if case.routine else not _routines_only(peer))
        ]

    def implementations_for(self, case: Case) -> list[str]:
        """einkern and the names of :meth:`peers_for` ``case``."""
        return [EINKERN] + [peer.name for peer in self.peers_for(case)]

    def peer_row(
        self,
        case: Case,
        peer: Any,
        prepare: Callable[[dict[str, Any]], Any],
        outputs: Sequence[str],
        inputs: dict[str, Any],
        reference: dict[str, Any] | None,
        common: dict[str, Any],
        step: Callable[[str], None],
    ) -> Measurement:
        """``peer``'s row for ``case``: "unavailable" with the reason found at the
        start, else measured as :meth:`_measure` does with ``prepare``."""
        step(peer.name)
        reason = self.unavailable[peer.name]
        if reason:
            return Measurement.for_case(case, peer.name, "unavailable", reason=reason, **common)
        return self._measure(case, peer.name, prepare, outputs, inputs, reference, common)

    # -- one case ---------------------------------------------------------------

    def run_case(
        self, case: Case, step: Callable[[str], None] = lambda name: None
    ) -> list[Measurement]:
        from .. import api
        from ..ir.bind import make_problem

        if case.routine:
            from .routines import run_routine_case

            return run_routine_case(self, case, step)
        try:
            problem = make_problem(api.load(case.program), case.extent_map)
        except Exception as error:  # noqa: BLE001 - recorded in every row
            return [
                Measurement.for_case(case, name, "failed", reason=f"program: {_reason(error)}")
                for name in self.implementations
            ]
        program = problem.program
        common, inputs, scalars, reference = self.prepare_case(case, problem)
        rows = []
        step(EINKERN)
        started = time.perf_counter()
        try:
            options: dict[str, Any] = {**case.extent_map, **self.compile_options}
            kernel = api.compile(program, backend=self.device.backend, **options)
        except Exception as error:  # noqa: BLE001
            rows.append(
                Measurement.for_case(
                    case, EINKERN, "failed", reason=f"compile: {_reason(error)}", **common
                )
            )
        else:
            compile_s = time.perf_counter() - started
            predicted = predicted_seconds(kernel) if self.device.backend == "cuda" else None
            rows.append(
                self._measure(
                    case,
                    EINKERN,
                    _einkern_run(kernel, scalars),
                    program.outputs,
                    inputs,
                    reference,
                    dict(common, compile_s=compile_s, predicted_s=predicted),
                )
            )
        for peer in self.peers_for(case):

            def prepare(work, peer=peer):
                return peer.prepare(case, problem, work, scalars)

            rows.append(
                self.peer_row(case, peer, prepare, program.outputs, inputs, reference, common, step)
            )
        return rows

    def prepare_case(
        self, case: Case, problem: Problem
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, float], dict[str, Any] | None]:
        """The case's common row fields (counts, floor, tolerance, reference's name),
        random inputs and scalars (seeded by the run's seed and the case), and the
        reference outputs (None when the reference failed, which the fields say)."""
        program = problem.program
        dtype = program.tensor(program.outputs[0]).dtype
        flops, nbytes = program_flops(problem), kernel_floor_bytes(problem)
        common: dict[str, Any] = dict(
            dtype=dtype,
            flops=flops,
            min_bytes=nbytes,
            fused_min_bytes=fused_floor_bytes(problem),
            floor_s=self.calibration.floor(flops, nbytes, dtype),
            tolerance=tolerance(dtype),
        )
        seed = zlib.crc32(f"{self.options.seed}/{case.key}".encode())
        scalars = random_scalars(problem, seed)
        inputs = self.device.random_inputs(problem, seed)
        try:
            reference, common["reference"] = self._reference(
                problem, inputs, scalars, case.device_reference
            )
        except Exception as error:  # noqa: BLE001
            reference, common["reference"] = None, f"reference failed: {_reason(error)}"
        return common, inputs, scalars, reference

    def _reference(
        self,
        problem: Problem,
        inputs: Mapping[str, Any],
        scalars: Mapping[str, float],
        on_device: bool = False,
    ) -> tuple[dict[str, Any], str]:
        from ..reference import evaluate

        calibration = self.calibration
        estimate = 0.0
        if calibration.host_peak and calibration.host_bandwidth:
            # evaluate() copies to float64, contracts, permutes and adds: ~10 passes
            estimate = (
                program_flops(problem) / calibration.host_peak
                + 10 * kernel_floor_bytes(problem) / calibration.host_bandwidth
            )
        if on_device or estimate > self.options.reference_limit_s:
            found = self.device.device_reference(problem, inputs, scalars)
            if found is not None:
                why = "asked for by the case" if on_device else f"estimated {estimate:.0f} s"
                return found, f"torch.einsum float64 on the GPU (NumPy reference {why})"
        host = {name: self.device.to_host(array) for name, array in inputs.items()}
        values = evaluate(problem, host, scalars)
        return {name: values[name] for name in problem.program.outputs}, "numpy"

    def _measure(
        self,
        case: Case,
        name: str,
        prepare: Callable[[dict[str, Any]], Run],
        output_names: Sequence[str],
        inputs: Mapping[str, Any],
        reference: Mapping[str, Any] | None,
        common: dict[str, Any],
    ) -> Measurement:
        device, options = self.device, self.options
        try:
            work = {key: device.copy(array) for key, array in inputs.items()}
            run = prepare(work)
            outputs = run()
            device.synchronize()
            error = None
            if reference is not None:
                error = max(
                    device.relative_error(outputs[key], reference[key]) for key in output_names
                )
            for _ in range(options.warmup):
                run()
            device.synchronize()
            started = time.perf_counter()
            run()
            device.synchronize()
            one = time.perf_counter() - started
            runs, note = options.runs, ""
            if one * runs > options.row_budget_s:
                runs = max(3, int(options.row_budget_s / max(one, 1e-9)))
                note = f"{runs} timed runs (row budget {options.row_budget_s:g} s)"
            times = device.timer.time(run, runs)
        except NotApplicable as refusal:
            return Measurement.for_case(case, name, "n/a", reason=str(refusal), **common)
        except Exception as failure:  # noqa: BLE001 - a failing implementation is a result
            return Measurement.for_case(case, name, "failed", reason=_reason(failure), **common)
        seconds = median(times)
        tolerance = common["tolerance"]
        return Measurement.for_case(
            case,
            name,
            "ok",
            runs=len(times),
            median_s=seconds,
            min_s=min(times),
            max_s=max(times),
            gflops=common["flops"] / seconds / 1e9,
            floor_fraction=common["floor_s"] / seconds,
            error=error,
            error_ok=None if error is None else error <= tolerance,
            note=note,
            **common,
        )


def _routines_only(peer: Peer) -> bool:
    return bool(getattr(peer, "routines_only", False))


def predicted_seconds(kernel) -> float | None:
    """The cost model's time (:func:`einkern.gpu.model.predicted_time`, this GPU's
    limits) of the mappings a CUDA kernel was compiled with, summed over the
    statements it compiled (``kernel.compiled``: those of its rewrites, if any;
    before the thirty-fifth session the program's own statements, so that a
    split-K plan was recorded at its direct kernel's time), with the compiled
    register counts of SIMT kernels (the register probe's, as the decision uses
    them; from the thirty-sixth session); None where the model has no answer
    (another backend, an error)."""
    from ..backends.cuda.limits import device_limits
    from ..backends.cuda.probe import register_probe
    from ..gpu.model import predicted_time
    from ..ir.task import statement_task

    try:
        mappings = kernel.backend.mappings(kernel.compiled, kernel.mappings)
        limits = device_limits()
        probe = register_probe(limits)
        total = 0.0
        for position, mapping in enumerate(mappings):
            task = statement_task(kernel.compiled, position)
            registers = probe(task, mapping) if probe and mapping.mma is None else None
            total += predicted_time(task, mapping, limits, registers=registers)
        return total
    except Exception:  # noqa: BLE001 - a missing prediction is recorded as None
        return None


def _einkern_run(kernel, scalars: Mapping[str, float]) -> Callable[[dict[str, Any]], Run]:
    """einkern on the given arrays, outputs allocated once up front (as a user would)."""

    def prepare(work: dict[str, Any]) -> Run:
        like = list(work.values())
        for name in kernel.outputs:
            if name not in work:
                work[name] = kernel.backend.allocate(kernel.problem, name, like)

        def run() -> Mapping[str, Any]:
            kernel(**work, **scalars)
            return {name: work[name] for name in kernel.outputs}

        return run

    return prepare


def with_speedups(rows: Sequence[Measurement]) -> list[Measurement]:
    """Every timed row with ``einkern_speedup`` (its median / einkern's on the case)."""
    einkern = {
        (m.suite, m.workload, m.extents): m.median_s
        for m in rows
        if m.implementation == EINKERN and m.median_s
    }
    result = []
    for m in rows:
        base = einkern.get((m.suite, m.workload, m.extents))
        speedup = m.median_s / base if base and m.median_s else None
        result.append(dataclasses.replace(m, einkern_speedup=speedup))
    return result


def run_suites(
    suites: Sequence[Suite],
    options: BenchOptions,
    *,
    device: Device | None = None,
    log: Log | None = None,
    progress=None,
    argv: list[str] | None = None,
) -> BenchResult:
    """Run every case of ``suites``; ``progress`` is a :class:`~einkern.bench.progress.Progress`
    or None.  Messages (unavailable peers, skipped suites) go to ``log`` and into the
    result's notes."""
    notes: list[str] = []

    def note(message: str) -> None:
        notes.append(message)
        (log or (lambda text: print(text, file=sys.stderr)))(message)

    device = device or get_device(options.backend)
    environment = collect(device.backend, argv)
    environment["device_description"] = device.describe()
    run_started = time.perf_counter()
    calibration = device.calibrate(options.quick)
    runner = Runner(options, device, calibration, peers_for(device.backend, _names(options)), note)
    plan = [
        (suite, [c for c in suite.cases(options.quick) if options.selected(c)]) for suite in suites
    ]
    total = sum(len(cases) for _, cases in plan) * len(runner.implementations)
    rows: list[Measurement] = []
    if progress is not None:
        progress.start(total)
    calibration_file = open(options.calibrate, "a", encoding="utf-8") if options.calibrate else None
    try:
        for suite, cases in plan:
            rows.extend(_run_suite(runner, suite.name, cases, progress, note, calibration_file))
    finally:
        if progress is not None:
            progress.stop()
        if calibration_file is not None:
            calibration_file.close()
    environment["duration_s"] = round(time.perf_counter() - run_started, 1)
    return BenchResult(
        environment,
        calibration,
        dataclasses.asdict(options),
        tuple(with_speedups(rows)),
        tuple(notes),
    )


def _run_suite(
    runner: Runner, name: str, cases: Sequence[Case], progress, note: Log, calibration=None
) -> list[Measurement]:
    """The rows of one suite; cases past its time limit are recorded as skipped.
    With a ``calibration`` stream, each case run also writes its cost-model
    calibration records there (:func:`einkern.bench.calibrate.calibrate_case`)."""
    implementations = runner.implementations
    limit = runner.options.suite_timeout(name)
    started = time.perf_counter()
    rows: list[Measurement] = []
    ran = 0
    for case in cases:
        if limit is not None and time.perf_counter() - started > limit:
            rows.extend(
                Measurement.for_case(
                    case, implementation, "skipped", reason=f"suite time limit {limit:g} s reached"
                )
                for implementation in runner.implementations_for(case)
            )
        else:

            def step(implementation: str, case=case) -> None:
                if progress is not None:
                    progress.describe(
                        f"{case.suite} {case.workload} {case.label} · {implementation}"
                    )

            rows.extend(runner.run_case(case, step))
            ran += 1
            if calibration is not None:
                _calibrate(runner, case, calibration, note)
        if progress is not None:
            progress.advance(len(implementations))
    elapsed = time.perf_counter() - started
    if ran < len(cases):
        note(f"suite {name}: time limit {limit:g} s reached, {len(cases) - ran} case(s) skipped")
    note(f"suite {name}: {ran} of {len(cases)} case(s) run in {elapsed:.0f} s")
    return rows


def _calibrate(runner: Runner, case: Case, stream, note: Log) -> None:
    from .calibrate import calibrate_case

    try:
        calibrate_case(runner, case, stream, _einkern_run, runner.device.describe())
    except Exception as error:  # noqa: BLE001 - calibration must not stop the benchmark
        note(f"calibration of {case.key} failed: {_reason(error)}")


def _names(options: BenchOptions) -> list[str] | None:
    return list(options.peers) if options.peers is not None else None
