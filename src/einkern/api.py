"""The Python entry points: :func:`load`, :func:`compile`, :class:`Kernel`."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from typing import Any

from .backends import Backend, get_backend
from .backends.binding import Binder, Call
from .errors import ArgumentError
from .ir.analysis import fused_floor_bytes, kernel_floor_bytes, program_flops
from .ir.bind import make_problem
from .ir.build import build_program
from .ir.nodes import Problem, Program
from .ir.rewrite_plan import REWRITES, RewritePlan, plan, unchanged


def load(program: str | os.PathLike | Program) -> Program:
    """Parse and check a program: a path to a ``.ein``/tensor/mapped file, program
    text, or an already built :class:`Program` (returned unchanged).  A ``.c`` loop
    nest is raised to a tensor program when its statements have Einstein semantics
    on box domains (:mod:`einkern.ir.affine_raise`); others run through
    :func:`compile_loops`."""
    if isinstance(program, Program):
        return program
    if isinstance(program, os.PathLike | str) and str(program).lower().endswith(".c"):
        from .ir.affine_raise import load_raised  # a C loop nest with Einstein semantics

        return load_raised(program)
    from .lang import load_program_node

    return build_program(load_program_node(program))


def compile(  # noqa: A001 - the public name is the point
    program: str | os.PathLike | Program,
    *,
    backend: str = "auto",
    mappings: Mapping[int, Any] | str | None = None,
    tune: bool | str | None = None,
    tuning_db: str | os.PathLike | None = None,
    rewrite: bool | Collection[str] = True,
    **extents: int,
) -> Kernel:
    """Compile a tensor program for concrete extents and return a callable kernel.

    ``program`` is a path, program text or a :class:`Program`; ``extents`` give
    or override extent sizes (``einkern.compile("gemm.ein", n=4096)``);
    ``backend`` is ``"cpu"``, ``"cuda"`` or ``"auto"`` (CUDA when a GPU is
    usable).  ``mappings`` (CUDA) gives statement number → Mapping, Mapping in
    JSON form (dict), configuration dict or JSON file; statements not given use the decision
    algorithm.  ``tune`` picks each statement's mapping (CUDA) or loop schedule
    (CPU) from the tuning database: ``True``/``"cached"`` uses the best record of
    this device for the exact problem, else the record of the nearest problem
    size, else the decision algorithm's default; ``"model"`` the analytic
    model's best; ``"full"`` tunes now and records the results.
    ``kernel.tuning_sources`` says which was used.  ``rewrite``: let the plan
    step rewrite statements into several kernels with temporaries when the cost
    model says it pays (``True``), never (``False``), or only the rewrites named
    (``"split_products"``, ``"split_k"``, ``"ttgt"``; docs/rewrites.md);
    ``kernel.rewrites.explain()`` says what was chosen and why.  Rewrites are off
    when ``mappings`` or ``tune`` are given (they name the program's own
    statements).  Compilation is cached on disk, so a second compile of the same
    problem does not invoke the compiler again."""
    problem = make_problem(load(program), extents)
    chosen = get_backend(backend)
    sources: tuple[str, ...] = ()
    if tune not in (None, False):
        if mappings is not None:
            raise ArgumentError("give mappings= or tune=, not both")
        from .tuning.policy import tuned_build_argument

        mappings, sources = tuned_build_argument(chosen.name, problem, tune, tuning_db)
    rewrites = plan_rewrites(problem, chosen.name, rewrite, given=mappings is not None)
    kernel = Kernel(problem, chosen, mappings=mappings, plan=rewrites)
    kernel.tuning_sources = sources
    return kernel


def plan_rewrites(
    problem: Problem, backend: str, rewrite: bool | Collection[str] = True, *, given: bool = False
) -> RewritePlan:
    """The planning step between a problem and a backend: which statements are
    rewritten into several kernels (:mod:`einkern.ir.rewrite_plan`).  The CUDA
    backend decides by its cost model; others take only ``split_products`` (decided
    by flop count).  ``given``: mappings or tuning results name the statements, so
    nothing is rewritten."""
    if rewrite is False:
        return unchanged(problem, "rewrites off (rewrite=False)")
    if given:
        return unchanged(problem, "rewrites off: mappings or tuning results are given")
    allowed = REWRITES if rewrite is True else tuple(rewrite)
    unknown = [name for name in allowed if name not in REWRITES]
    if unknown or isinstance(rewrite, str):
        raise ArgumentError(
            f"rewrite={rewrite!r}: expected True, False or a collection of rewrite names",
            hint=f"names: {', '.join(REWRITES)}",
        )
    model = None
    if backend == "cuda":
        from .gpu.rewrite_cost import CudaRewriteModel

        model = CudaRewriteModel()
    return plan(problem, model, allowed)


class Kernel:
    """A compiled program.  Call it with arrays (positional: the program's inputs in
    declaration order; or by tensor name) and scalars by name.

    Tensors updated with ``+=``/``-=`` are updated in place; tensors assigned with
    ``=`` are written into the array you pass, or into new arrays otherwise.  The
    call returns the program's outputs (one array, or a tuple in order of first
    write)."""

    def __init__(
        self,
        problem: Problem,
        backend: Backend,
        mappings: Mapping[int, Any] | str | None = None,
        plan: RewritePlan | None = None,
    ):
        self.problem = problem
        self.program = problem.program
        self.backend = backend
        self.mappings = mappings
        self.tuning_sources: tuple[str, ...] = ()
        #: the rewrites chosen (none unless a plan is given) and the problem compiled
        self.rewrites = plan if plan is not None else unchanged(problem)
        if self.rewrites.original != problem:
            raise ArgumentError("the rewrite plan is of another problem")
        self.compiled = self.rewrites.problem
        self._binder = Binder(self.compiled, backend)  # the one argument check
        if isinstance(mappings, Mapping | str) and backend.name != "cuda":
            raise ArgumentError(
                "mappings apply to the cuda backend only",
                hint="drop mappings=, or use backend='cuda'",
            )
        if mappings is not None and self.rewrites.rewrites:
            raise ArgumentError("mappings name the program's statements: give no rewrite plan")
        if mappings is None:
            self.executable = backend.build(self.compiled)
        else:
            self.executable = backend.build(problem, mappings)  # type: ignore[call-arg]

    # -- information --------------------------------------------------------

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.program.inputs

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.program.outputs

    @property
    def flops(self) -> int:
        return program_flops(self.problem)

    @property
    def min_bytes(self) -> int:
        """Fewest bytes moved with one kernel per statement."""
        return kernel_floor_bytes(self.problem)

    @property
    def fused_min_bytes(self) -> int:
        return fused_floor_bytes(self.problem)

    def source(self) -> str:
        """The generated source code."""
        if self.mappings is None:
            return self.backend.emit(self.compiled)
        return self.backend.emit(self.problem, self.mappings)  # type: ignore[call-arg]

    def __repr__(self) -> str:
        sizes = ", ".join(f"{n}={v}" for n, v in self.problem.sizes if not n.isdigit())
        return f"<einkern.Kernel {self.program.name} [{sizes}] on {self.backend.name}>"

    # -- calling ------------------------------------------------------------

    def bind(self, *args: Any, **kwargs: Any) -> Call:
        """The checked arguments of a call (see :meth:`__call__`), without running it:
        what ``executable.run_checked`` and ``executable.profile_checked`` take."""
        stream = None
        if "stream" in kwargs and "stream" not in self._binder.names:
            stream = kwargs.pop("stream")
        return self._binder.bind(args, kwargs, stream)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the program.  ``stream`` (CUDA backend): the stream to launch on — any
        object with ``__cuda_stream__``, a torch or CuPy stream, or a raw handle
        (int); by default the current stream of the arrays' library (torch's or
        CuPy's), or the legacy default stream for NumPy arrays.  Launches on a
        stream do not wait on the host; calls with NumPy arrays return once the
        results are copied back.  (In a program that names a tensor or scalar
        ``stream``, ``stream=`` is that argument.)"""
        call = self.bind(*args, **kwargs)
        self.executable.run_checked(call)
        results = tuple(call.arrays[name] for name in self.outputs)
        return results[0] if len(results) == 1 else results


def compile_loops(
    program: str | os.PathLike,
    *,
    function: str | None = None,
    backend: str = "cpu",
    **sizes: int,
):
    """Compile one function of a C loop-nest program (a ``.c`` path or C text; see
    docs/affine.md) for concrete ``sizes`` and return a callable
    :class:`~einkern.backends.cpu.affine.AffineKernel` (CPU backend).  ``function``
    picks a function by name (default: the first)."""
    from .backends.cpu.affine import AffineKernel
    from .errors import UsageError
    from .ir.affine import make_affine_problem
    from .lang.cfront import parse_c

    if backend not in ("cpu", "auto"):
        raise ArgumentError(
            "C loop nests compile for the cpu backend only", hint="use backend='cpu'"
        )
    text, name = str(program), "<string>"
    if isinstance(program, os.PathLike) or ("\n" not in text and text.endswith(".c")):
        try:
            with open(program, encoding="utf-8") as handle:
                text, name = handle.read(), str(program)
        except (OSError, UnicodeDecodeError) as error:
            raise UsageError(f"cannot read {program}: {error}") from None
    parsed = parse_c(text, name)
    try:
        chosen = parsed.function(function)
    except KeyError:
        names = ", ".join(f.name for f in parsed.functions)
        raise ArgumentError(
            f"{name} has no function {function!r}", hint=f"functions: {names}"
        ) from None
    return AffineKernel(make_affine_problem(chosen, sizes))
