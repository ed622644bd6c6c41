"""The ``einkern`` command line: check, run, emit.

Every user error is an :class:`~einkern.errors.EinkernError`: printed on stderr
without a traceback, exit code 2.  ``run --check`` exits 1 when the result
differs from the reference by more than the dtype's tolerance.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .._version import __version__
from ..errors import EinkernError, UsageError
from ..ir.nodes import accesses
from ..semantics import PRECISIONS
from .common import BACKEND_HELP, Parser, add_extent_argument, format_bytes, load_problem


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog="einkern", description="Compile Einstein-notation tensor programs.")
    parser.add_argument("--version", action="version", version=f"einkern {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=Parser, required=True)

    def program_args(p: argparse.ArgumentParser, many: bool = False) -> None:
        p.add_argument(
            "program",
            nargs="+" if many else None,
            help="a .ein, tensor (.tensor), mapped-function (.mapped) or C loop-nest (.c) file"
            + (" (several: each is run in turn)" if many else ""),
        )
        add_extent_argument(p)

    check = sub.add_parser(
        "check", help="parse, validate and describe a program ('-' reads it from standard input)"
    )
    program_args(check)
    check.add_argument("-v", "--verbose", action="store_true", help="also print isl domains")
    check.add_argument(
        "--dependences",
        action="store_true",
        help="list every dependence between statements (default: a summary)",
    )
    check.add_argument(
        "--backend",
        "-b",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="whose fusion plan to print (default: the backend compile would use)",
    )

    run = sub.add_parser("run", help="run programs on random inputs and time them")
    program_args(run, many=True)
    run.add_argument(
        "--backend", "-b", default="auto", choices=["auto", "cpu", "cuda"], help=BACKEND_HELP
    )
    run.add_argument("--check", action="store_true", help="compare with the NumPy reference")
    run.add_argument(
        "--repeat",
        type=int,
        default=10,
        help="timed runs after one warm-up (median reported; cuda: CUDA events on arrays "
        "already on the GPU, copies reported apart)",
    )
    run.add_argument("--seed", type=int, default=0, help="random seed for the inputs")
    run.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress line on stderr for runs longer than a second or two "
        "(default: only when stderr is a terminal)",
    )

    emit = sub.add_parser("emit", help="print the generated source")
    program_args(emit)
    emit.add_argument(
        "--backend", "-b", default="auto", choices=["auto", "cpu", "cuda"], help=BACKEND_HELP
    )
    emit.add_argument(
        "--resources",
        action="store_true",
        help="(cuda) compile with NVRTC and print registers, shared memory and spills",
    )
    emit.add_argument("--arch", default=None, help="(cuda) target, e.g. sm_90 (default: device)")
    for p in (check, run, emit):
        p.add_argument(
            "--no-rewrite",
            action="store_true",
            help="compile each statement as one kernel: no program rewrites (docs/rewrites.md)",
        )
        p.add_argument(
            "--precision",
            default="fp32",
            choices=list(PRECISIONS),
            help="what float32 products may be computed in: fp32 (default), tf32 or 3xtf32 "
            "(cuda: tensor cores where the model says they win; docs/tensor_cores.md)",
        )
    for p in (run, emit):
        p.add_argument(
            "--no-fuse",
            action="store_true",
            help="one kernel per statement (default: the fusion planner groups statements)",
        )
        p.add_argument(
            "--mapping",
            default=None,
            metavar="FILE.json",
            help='(cuda) mapping of statement 0, or {"N": mapping, ...} per statement',
        )
    emit.add_argument(
        "--explain",
        action="store_true",
        help="print each statement's mapping (cuda) or loop schedule (cpu) and why it was chosen",
    )
    from .bench import add_bench_parser
    from .tune import add_tune_parsers

    add_bench_parser(sub)
    add_tune_parsers(sub)
    return parser


def _mappings(args, problem):
    """The --mapping file as {statement: Mapping}, or None."""
    if getattr(args, "mapping", None) is None:
        return None
    import json

    from ..gpu.config import parse_config
    from ..gpu.mapping import Mapping, MappingError
    from ..gpu.space import config_to_mapping
    from ..ir.task import statement_task

    path = Path(args.mapping)
    if not path.is_file():
        raise UsageError(f"no such mapping file: {args.mapping}")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise MappingError(f"{args.mapping}: not JSON ({error})") from None
    if not isinstance(data, dict):
        raise MappingError(f"{args.mapping}: expected a JSON object")
    per_statement = data if all(k.isdigit() for k in data) else {"0": data}
    result = {}
    for key, value in per_statement.items():
        position = int(key)
        if position >= len(problem.program.statements):
            raise MappingError(f"{args.mapping}: the program has no statement {position}")
        if "parallel" in value:
            result[position] = Mapping.from_json(json.dumps(value))
        else:
            config = parse_config(value, args.mapping)
            result[position] = config_to_mapping(statement_task(problem, position), config)
    return result


def _human(value: float, unit: str) -> str:
    """``value`` with a decimal prefix up to E, then in powers of ten (exact for
    integers of any size)."""
    if isinstance(value, int) and abs(value) >= 10**18:
        digits = len(str(abs(value)))
        if digits > 21:
            lead = abs(value) // 10 ** (digits - 3)
            sign = "-" if value < 0 else ""
            return f"{sign}{lead // 100}.{lead % 100:02d}e+{digits - 1} {unit}"
    for prefix in ("", "K", "M", "G", "T", "P", "E"):
        if abs(value) < 1000 or prefix == "E":
            return f"{value:.3g} {prefix}{unit}" if prefix else f"{value:.0f} {unit}"
        value /= 1000
    return f"{value} {unit}"


def _ratio(numerator: int, denominator: int) -> str:
    """``numerator / denominator`` to three digits, for integers of any size."""
    try:
        return f"{numerator / max(denominator, 1):.3g}"
    except OverflowError:
        return _human(numerator // max(denominator, 1), "").strip()


def _check_program(args):
    """The problem to check: from the file, or from standard input for ``-``."""
    if args.program != "-":
        return load_problem(args)
    from ..ir.bind import make_problem
    from ..ir.build import build_program
    from ..lang.loader import parse_text

    try:
        text = sys.stdin.buffer.read().decode("utf-8")
    except UnicodeDecodeError as error:
        raise UsageError(f"standard input is not UTF-8 text ({error})") from None
    from ..api import with_precision

    program = with_precision(build_program(parse_text(text, "<stdin>")), args.precision)
    return make_problem(program, dict(args.extent))


def command_check(args) -> int:
    from ..ir import analysis, poly
    from .affine import is_c_file

    if is_c_file(args.program):
        from .affine import command_check as check_affine

        return check_affine(args)
    problem = _check_program(args)
    program = problem.program
    polyhedra = poly.polyhedra(program)  # cached: the fusion planner asks again
    print(f"program {program.name}")
    sizes = ", ".join(f"{n}={v}" for n, v in problem.sizes if not n.isdigit())
    print(f"extents  {sizes or '(none)'}")
    inputs, outputs = set(program.inputs), set(program.outputs)
    for tensor in program.tensors:
        role = [
            word for word, names in (("input", inputs), ("output", outputs)) if tensor.name in names
        ]
        print(
            f"tensor   {tensor.name}[{', '.join(tensor.shape)}] = {problem.shape(tensor.name)} "
            f"{tensor.dtype} {tensor.layout}-major  {' '.join(role) or 'unused'}"
        )
    for scalar in program.scalars:
        default = "" if scalar.default is None else f" = {scalar.default}"
        print(f"scalar   {scalar.name}{default} {scalar.dtype}")
    print()
    for position, statement in enumerate(program.statements):
        flops = analysis.statement_flops(problem, statement)
        nbytes = analysis.statement_bytes(problem, statement)
        carried = polyhedra.carried_indices(position)
        parallel = [i for i in statement.indices if i not in carried]
        print(f"S{position}  {statement}")
        print(f"    parallel  {', '.join(parallel) or '-'}")
        print(f"    reduction {', '.join(carried) or '-'}")
        contiguous = ", ".join(
            f"{c.access.tensor}:{c.contiguous_index}"
            for c in analysis.contiguity(problem, statement)
            if c.contiguous_index
        )
        print(f"    stride-1  {contiguous or '-'}")
        print(
            f"    flops {_human(flops, 'flop')}   min bytes {format_bytes(nbytes)}   "
            f"intensity {_ratio(flops, nbytes)} flop/B"
        )
        if args.verbose:
            own = polyhedra.of(position)
            print(f"    domain  {own.domain}")
            for access in (statement.output, *accesses(statement.rhs)):
                print(f"    access  {own.access_map(access)}")
    _print_dependences(poly.dependences(program), args.dependences)
    _print_fusion(problem, args.backend)
    flops = analysis.program_flops(problem)
    kernel_bytes = format_bytes(analysis.kernel_floor_bytes(problem))
    fused_bytes = format_bytes(analysis.fused_floor_bytes(problem))
    print(
        f"\ntotal: {_human(flops, 'flop')}, min bytes {kernel_bytes} (one kernel per statement),"
        f" {fused_bytes} fused"
    )
    if not args.no_rewrite:
        from ..api import plan_rewrites

        print("\nrewrites (CUDA cost model; docs/rewrites.md):")
        try:
            lines = plan_rewrites(problem, "cuda").explain()
        except EinkernError as error:  # e.g. extents no CUDA mapping fits
            lines = [f"not planned: {error.message}"]
        for line in lines:
            print(f"  {line}")
    return 0


def _print_fusion(problem, backend: str) -> None:
    """The fusion planner's groups for the backend, and what kept statements apart."""
    from ..api import fusion_plan
    from ..backends import get_backend

    if len(problem.program.statements) < 2:
        return
    name = get_backend(backend).name if backend == "auto" else backend
    print("\n".join(fusion_plan(problem, name).explain()))


def _print_dependences(found, every: bool) -> None:
    """Every dependence with ``--dependences``, else one summary line."""
    if every:
        for dependence in found:
            print(f"dependence {dependence}")
        return
    counts = {kind: sum(d.kind == kind for d in found) for kind in ("flow", "anti", "output")}
    detail = ", ".join(f"{count} {kind}" for kind, count in counts.items() if count)
    print(
        f"dependences: {len(found)}" + (f" ({detail}; --dependences lists them)" if found else "")
    )


def command_run(args) -> int:
    """Run each program given; the exit code is the worst of them."""
    import copy

    from .progress import ProgressLine

    worst = 0
    with ProgressLine(enabled=args.progress) as progress:
        for number, path in enumerate(args.program, 1):
            one = copy.copy(args)
            one.program = path
            where = f"[{number}/{len(args.program)}] " if len(args.program) > 1 else ""
            worst = max(worst, _run_one(one, progress, f"einkern run {where}{path}"))
    return worst


def _run_one(args, progress, label: str) -> int:
    from .affine import is_c_file, tensor_path

    if is_c_file(args.program) and not (args.backend == "cuda" and tensor_path(args)):
        from .affine import command_run as run_affine

        return run_affine(args)
    from ..api import Kernel, fusion_plan, rewrites_after_fusion
    from ..backends import get_backend
    from ..reference import evaluate
    from ..testing import output_tolerance, random_arrays, random_scalars, relative_error
    from .timing import describe_copies

    problem = load_problem(args)
    if args.repeat < 1:
        raise UsageError("--repeat must be at least 1")
    backend = get_backend(args.backend)
    mappings = _mappings(args, problem)
    if mappings is not None and backend.name != "cuda":
        raise UsageError("--mapping needs --backend cuda")
    statements = len(problem.program.statements)
    progress.set(f"{label}: compiling {statements} statement{'s' * (statements != 1)}")
    fusion = fusion_plan(problem, backend.name, not args.no_fuse)
    rewrites = rewrites_after_fusion(
        fusion, backend.name, not args.no_rewrite, given=bool(mappings)
    )
    kernel = Kernel(problem, backend, mappings=mappings, plan=rewrites, fusion=fusion)
    progress.set(f"{label}: making random inputs")
    arrays = random_arrays(problem, args.seed, problem.program.inputs)
    scalars = random_scalars(problem, args.seed)

    def step(run: int) -> None:
        what = "warm-up run" if run == 0 else f"timed run {run}/{args.repeat}"
        progress.set(f"{label}: {what} on {backend.name}")

    timing = _time_kernel(kernel, arrays, scalars, args.repeat, step)
    progress.clear()
    median = float(np.median(timing.seconds))
    what = "kernel median" if timing.to_device is not None else "median"
    print(
        f"{problem.program.name} on {backend.name}: {what} {median * 1e3:.3f} ms over "
        f"{len(timing.seconds)} runs, {kernel.flops / median / 1e9:.3g} GFLOP/s, "
        f"{kernel.min_bytes / median / 1e9:.3g} GB/s of the minimum traffic"
    )
    for rewrite in kernel.rewrites.rewrites:
        print(f"  rewritten: {rewrite} (--no-rewrite compiles it as written)")
    if timing.to_device is not None:
        print(f"  timed with {timing.method}, after a warm-up call")
        for line in describe_copies(timing):
            print(line)
    if not args.check:
        return 0
    progress.set(f"{label}: computing the NumPy reference")
    reference = evaluate(problem, arrays, scalars)
    progress.clear()
    failed = False
    for name in kernel.outputs:
        error = relative_error(timing.outputs[name], reference[name])
        tolerance = output_tolerance(problem, name)
        status = "ok" if error <= tolerance else "FAILED"
        failed |= error > tolerance
        print(f"check {name}: max relative error {error:.3e} (tolerance {tolerance:.0e}) {status}")
    return 1 if failed else 0


def _time_kernel(kernel, arrays, scalars, repeat: int, step):
    """Host arrays and the host clock on the CPU; device-resident arrays and CUDA
    events on the GPU (see :mod:`einkern.cli.timing`)."""
    from .timing import CudaMemory, time_device_resident, time_on_host

    if kernel.backend.name == "cuda":
        return time_device_resident(kernel, arrays, scalars, repeat, CudaMemory(), step=step)
    return time_on_host(kernel, arrays, scalars, repeat, step=step)


def command_emit(args) -> int:
    from ..backends import get_backend
    from .affine import is_c_file, tensor_path

    if is_c_file(args.program) and not (args.backend == "cuda" and tensor_path(args)):
        from .affine import command_emit as emit_affine

        return emit_affine(args)
    problem = load_problem(args)
    backend = get_backend(args.backend)
    cuda_only = [
        flag for flag, on in (("--resources", args.resources), ("--mapping", args.mapping)) if on
    ]
    if cuda_only and backend.name != "cuda":
        raise UsageError(f"{cuda_only[0]} needs --backend cuda")
    from ..api import cuda_nests, fused_build_argument, fusion_plan, rewrites_after_fusion

    plan = fusion_plan(problem, backend.name, not args.no_fuse)
    if args.explain and len(problem.program.statements) > 1:
        print("\n".join(f"// {line}" for line in plan.explain()))
    problem = plan.fused  # statements as compiled: --mapping numbers refer to them
    mappings = _mappings(args, problem)
    rewrites = rewrites_after_fusion(plan, backend.name, not args.no_rewrite, given=bool(mappings))
    if args.explain and rewrites.rewrites:  # the statements explained below are rewritten
        for line in rewrites.notes:
            print(f"// rewrite: {line}")
    problem = rewrites.problem
    if backend.name == "cuda":
        from ..backends.cuda.generate import resolve_mappings

        nests = cuda_nests(plan, backend)
        chosen = resolve_mappings(problem, mappings, nests.get("nests", ()))
        if args.explain:
            for position, mapping in chosen.items():
                print(f"// S{position}: {problem.program.statements[position]}")
                for line in mapping.describe().splitlines():  # type: ignore[attr-defined]
                    print(f"//   {line}")
                print("//   mapping file: " + mapping.to_json(None))  # type: ignore[attr-defined]
            _why_not_rewritten(rewrites)
        print(backend.emit(problem, chosen, **nests))  # type: ignore[call-arg]
    else:
        if args.explain:
            _explain_cpu(problem)
            _why_not_rewritten(rewrites)
        print(backend.emit(problem, fused_build_argument(plan, backend, None)))  # type: ignore[call-arg]
    if args.resources:
        from ..backends.cuda.resources import kernel_resources

        arch = args.arch or "sm_90"
        if args.arch is None and backend.available():
            arch = backend.device_properties().arch  # type: ignore[attr-defined]
        print(f"// resources for {arch}:")
        for resources in kernel_resources(problem, arch, chosen):
            print(f"// {resources}")
    return 0


def _why_not_rewritten(rewrites) -> None:
    """The plan's notes when it rewrote nothing (after the statements' explanations)."""
    if not rewrites.rewrites:
        for line in rewrites.notes:
            print(f"// rewrite: {line}")


def _explain_cpu(problem) -> None:
    """Each statement's default loop schedule, why, and the cost model's estimate."""
    from ..backends.cpu.decide import decide_schedule
    from ..backends.cpu.model import predicted_seconds, threads
    from ..backends.cpu.schedule import describe_loops

    decisions = decide_schedule(problem)
    for position, statement in enumerate(problem.program.statements):
        decision = decisions[position]
        seconds = predicted_seconds(problem, statement, decision.schedule)
        print(f"// S{position}: {statement}")
        print(f"//   loops: {describe_loops(decision.schedule)}")
        for reason in decision.reasons:
            print(f"//   why: {reason}")
        print(
            f"//   cost model: about {seconds * 1e3:.3g} ms on {threads()} threads (it ranks "
            "schedules for the tuner; it does not predict times closely)"
        )


def command_bench(args) -> int:
    from .bench import command_bench as run_bench

    return run_bench(args)


def command_tune(args) -> int:
    from .tune import command_tune as run_tune

    return run_tune(args)


def command_db(args) -> int:
    from .tune import command_db as run_db

    return run_db(args)


COMMANDS = {
    "check": command_check,
    "run": command_run,
    "emit": command_emit,
    "bench": command_bench,
    "tune": command_tune,
    "db": command_db,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``einkern`` command; returns the exit code."""
    try:
        args = _parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except EinkernError as error:
        print(str(error), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and closed
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
