"""``einkern check/run/emit`` for C loop-nest files (``.c``): every function of the
file is described, run or emitted in turn (the CPU backend; see docs/affine.md)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UsageError

C_SUFFIXES = (".c",)


def is_c_file(program: str) -> bool:
    """True for a path with a C suffix (the affine front end reads it)."""
    return Path(program).suffix.lower() in C_SUFFIXES


def load_functions(args):
    """The file's affine problems, one per function, with ``args.extent`` bound
    (sizes a function does not have are ignored for it, but must belong to some)."""
    from ..ir.affine import make_affine_problem
    from ..lang.cfront import parse_c

    path = Path(args.program)
    if not path.is_file():
        raise UsageError(f"no such file: {args.program}", hint="give the path of a program file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"cannot read {path}: {error}") from error
    parsed = parse_c(text, str(path))
    given = dict(args.extent)
    known = {size for function in parsed.functions for size in function.sizes}
    unknown = sorted(set(given) - known)
    if unknown:
        raise UsageError(
            f"{path} has no size parameter {unknown[0]!r}",
            hint=f"size parameters: {', '.join(sorted(known)) or 'none'}",
        )
    return [
        make_affine_problem(f, {k: v for k, v in given.items() if k in f.sizes})
        for f in parsed.functions
    ]


def command_check(args) -> int:
    from ..ir import affine as A
    from ..ir.affine_raise import raise_function

    for problem in load_functions(args):
        function = problem.function
        sizes = ", ".join(f"{n}={v}" for n, v in problem.sizes)
        print(f"function {function.name} (affine loop nest)")
        print(f"sizes    {sizes or '(none)'}")
        raised = raise_function(function)
        print(
            "tensor   "
            + (
                "no: " + raised
                if isinstance(raised, str)
                else "yes: Einstein statements on boxes (every backend's mappings apply)"
            )
        )
        for array in function.arrays:
            role = [
                w
                for w, names in (("input", problem.inputs), ("output", problem.outputs))
                if array.name in names
            ]
            print(
                f"array    {array.name}[{', '.join(array.shape)}] = {problem.shape(array.name)} "
                f"{array.dtype} row-major  {' '.join(role) or 'unused'}"
            )
        for scalar in function.scalars:
            print(f"scalar   {scalar.name} {scalar.dtype}")
        print()
        for statement in function.statements:
            print(f"{statement.name}  {statement}")
            print(f"    loops     {', '.join(statement.iterators) or '-'}")
            print(f"    parallel  {', '.join(A.parallel_iterators(function, statement)) or '-'}")
            print(f"    reduction {', '.join(A.reduction_iterators(statement)) or '-'}")
            if args.verbose:
                print(f"    domain    {A.domain_text(function, statement)}")
                print(f"    schedule  {A.schedule_text(function, statement)}")
                for ref in dict.fromkeys((statement.target, *statement.reads())):
                    print(f"    access    {A.access_text(function, statement, ref)}")
        found = A.dependences(function)
        if args.dependences:
            for dependence in found:
                print(f"dependence {dependence}")
        else:
            counts = {k: sum(d.kind == k for d in found) for k in ("flow", "anti", "output")}
            detail = ", ".join(f"{c} {k}" for k, c in counts.items() if c)
            print(
                f"dependences: {len(found)}"
                + (f" ({detail}; --dependences lists them)" if found else "")
            )
        print()
    return 0


def _backend_must_be_cpu(args) -> None:
    if getattr(args, "mapping", None) is not None:
        raise UsageError("--mapping applies to Einstein programs on the cuda backend")
    if getattr(args, "resources", False):
        raise UsageError("--resources needs --backend cuda and an Einstein program")


def command_emit(args) -> int:
    """C (cpu) or CUDA (cuda) of every function: a function with Einstein semantics
    on boxes is raised and emitted by the tensor-program backends (their mappings,
    ``--explain``); any other gets the affine kernels (:mod:`einkern.gpu.affine`)."""
    from ..backends.cpu.affine import emit_affine_c, explain_affine

    if args.backend == "cuda":
        return _emit_cuda(args)
    _backend_must_be_cpu(args)
    for problem in load_functions(args):
        if args.explain:
            for note in explain_affine(problem):
                print(f"// {problem.function.name}: {note}")
        print(emit_affine_c(problem))
    return 0


def tensor_path(args) -> bool:
    """True when ``args.program`` is one C function with Einstein semantics on
    boxes: the commands then treat it as the tensor program it raises to."""
    from ..ir.affine_raise import raise_function

    problems = load_functions(args)
    return len(problems) == 1 and not isinstance(raise_function(problems[0].function), str)


def _emit_cuda(args) -> int:
    from ..gpu.affine import affine_kernels, distinct_kernels
    from ..gpu.cuda_printer import print_cuda_module
    from ..ir.affine_raise import raise_function

    if getattr(args, "mapping", None) is not None or getattr(args, "resources", False):
        raise UsageError(
            "--mapping and --resources apply to tensor programs only",
            hint="this loop nest is not one (see `einkern check`)",
        )
    for problem in load_functions(args):
        raised = raise_function(problem.function)
        kernels = affine_kernels(problem)
        if args.explain:
            why = raised if isinstance(raised, str) else "several functions in the file"
            print(f"// {problem.function.name}: affine kernels (not a tensor program: {why})")
            for kernel in distinct_kernels(kernels):
                launches = [k for k in kernels if k.kernel.name == kernel.name]
                times = f", {len(launches)} launches" if len(launches) > 1 else ""
                print(
                    f"// {kernel.name} ({', '.join(launches[0].statements)}{times}): "
                    f"{launches[0].reason}"
                )
        print(print_cuda_module(distinct_kernels(kernels)))
    return 0


def command_run(args) -> int:
    """Run every function (cpu: the loop nest; cuda: the affine kernels of
    :mod:`einkern.gpu.affine`), ``--check`` against the reference."""
    from ..backends.cpu.affine import AffineKernel
    from ..reference import evaluate_affine, relative_error
    from ..semantics import TOLERANCE

    if args.mapping is not None:
        raise UsageError("--mapping applies to tensor programs only")
    if args.repeat < 1:
        raise UsageError("--repeat must be at least 1")
    failed = False
    for problem in load_functions(args):
        kernel: Any
        if args.backend == "cuda":
            from ..backends.cuda.affine import AffineCudaKernel

            kernel = AffineCudaKernel(problem)
        else:
            kernel = AffineKernel(problem)
        arrays, scalars = random_affine_arguments(problem, args.seed)
        times = []
        outputs: dict[str, np.ndarray] = {}
        for repeat in range(args.repeat + 1):
            work = {name: array.copy() for name, array in arrays.items()}
            start = time.perf_counter()
            kernel(**work, **scalars)
            if repeat:
                times.append(time.perf_counter() - start)
            else:
                outputs = {name: work[name] for name in kernel.outputs if name in work}
                outputs.update({n: v for n, v in work.items() if n not in outputs})
        median = float(np.median(times))
        name = problem.function.name
        device = "cuda" if args.backend == "cuda" else "cpu"
        print(f"{name} on {device}: median {median * 1e3:.3f} ms over {len(times)} runs")
        if not args.check:
            continue
        reference = evaluate_affine(problem, arrays, scalars)
        for name in problem.outputs:
            error = relative_error(outputs[name], reference[name])
            tolerance = TOLERANCE[problem.function.array(name).dtype]
            failed |= error > tolerance
            status = "ok" if error <= tolerance else "FAILED"
            print(
                f"check {name}: max relative error {error:.3e} (tolerance {tolerance:.0e}) {status}"
            )
    return 1 if failed else 0


def random_affine_arguments(problem, seed: int):
    """Random arrays for every array (well-conditioned diagonals, so triangular
    solves stay accurate) and random scalars."""
    from ..errors import AllocationError
    from ..semantics import NUMPY_DTYPE

    rng = np.random.default_rng(seed)
    arrays = {}
    for array in problem.function.arrays:
        shape = problem.shape(array.name)
        try:
            values = rng.uniform(-1.0, 1.0, size=shape)
            if len(shape) == 2 and shape[0] == shape[1]:
                values += np.eye(shape[0]) * (2.0 * shape[0])
            arrays[array.name] = values.astype(NUMPY_DTYPE[array.dtype])
        except (MemoryError, ValueError):
            nbytes = 8 * problem.numel(array.name)
            raise AllocationError(
                f"cannot allocate {nbytes} bytes for array {array.name}",
                hint="use smaller sizes",
            ) from None
    scalars = {s.name: float(rng.uniform(0.5, 1.5)) for s in problem.function.scalars}
    return arrays, scalars
