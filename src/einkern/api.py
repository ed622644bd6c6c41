"""The Python entry points: :func:`load`, :func:`compile`, :class:`Kernel`."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import replace
from functools import lru_cache
from typing import Any

from .arrays import copy_host_array
from .backends import Backend, get_backend
from .backends.binding import Binder, Call
from .errors import ArgumentError
from .ir.analysis import fused_floor_bytes, kernel_floor_bytes, program_flops
from .ir.bind import make_problem
from .ir.build import build_program
from .ir.fusion_plan import FusionPlan, Group, plan_fusion, unfused_plan
from .ir.nodes import Problem, Program
from .ir.rewrite_plan import REWRITES, CostModel, RewritePlan, plan, unchanged
from .semantics import PRECISIONS


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
    fuse: bool | str = True,
    precision: str = "fp32",
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
    (``"split_products"``, ``"split_k"``, ``"ttgt"``, ``"relayout"``; docs/rewrites.md);
    ``kernel.rewrites.explain()`` says what was chosen and why.  Rewrites are off
    when ``mappings`` or ``tune`` are given (they name the program's own
    statements).  Compilation is cached on disk, so a second compile of the same
    problem does not invoke the compiler again.

    ``fuse`` (default True) lets the fusion planner group statements into kernels
    first (:mod:`einkern.ir.fusion_plan`, docs/fusion.md): updates of one output
    become one statement (every backend), other legal groups one loop nest (CPU)
    or, without dependences between them, one launch (CUDA).  ``mappings``,
    tuning and rewrites then refer to the statements of the fused program;
    ``kernel.groups`` lists the kernels' statements and ``kernel.fusion.explain()``
    why; rewrites are off when a kernel holds several statements.
    ``fuse=False``: one kernel per statement; ``fuse="measure"``: the planner's
    best covers are compiled and timed on random inputs here, and the fastest is
    kept (:func:`measure_groupings`).

    ``precision`` says what float32 products may be computed in: ``"fp32"``
    (default: the SIMT units, today's results bit for bit), ``"tf32"`` (tensor
    cores, inputs rounded to tf32, fp32 accumulation) or ``"3xtf32"`` (tensor
    cores, fp32-level error); a permission the CUDA decision uses where its model
    says tensor cores win (docs/tensor_cores.md gives the errors).  float64
    statements and the CPU backend are unaffected."""
    problem = make_problem(with_precision(load(program), precision), extents)
    chosen = get_backend(backend)
    if not isinstance(fuse, bool) and fuse != "measure":
        raise ArgumentError(f"fuse must be True, False or 'measure', not {fuse!r}")
    fusion = fusion_plan(problem, chosen.name, bool(fuse))
    if fuse == "measure":
        fusion = measure_groupings(problem, chosen, fusion)
    sources: tuple[str, ...] = ()
    if tune not in (None, False):
        if mappings is not None:
            raise ArgumentError("give mappings= or tune=, not both")
        from .tuning.policy import tuned_build_argument

        mappings, sources = tuned_build_argument(chosen.name, fusion.fused, tune, tuning_db)
    rewrites = rewrites_after_fusion(fusion, chosen.name, rewrite, given=mappings is not None)
    kernel = Kernel(problem, chosen, mappings=mappings, plan=rewrites, fusion=fusion)
    kernel.tuning_sources = sources
    return kernel


def with_precision(program: Program, precision: Any) -> Program:
    """``program`` allowed to compute float32 products in ``precision``
    (:data:`einkern.semantics.PRECISIONS`; an :class:`ArgumentError` otherwise)."""
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise ArgumentError(
            f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}",
            hint="'tf32' and '3xtf32' let float32 contractions use tensor cores",
        )
    return program if program.precision == precision else replace(program, precision=precision)


def rewrites_after_fusion(
    fusion: FusionPlan, backend: str, rewrite: bool | Collection[str] = True, *, given: bool = False
) -> RewritePlan:
    """The rewrite plan of the fused problem (:func:`plan_rewrites`), or none when a
    fused kernel holds several statements (a rewrite would move them apart)."""
    rewrites = plan_rewrites(fusion.fused, backend, rewrite, given=given)
    if rewrites.rewrites and _several(fusion):
        return unchanged(fusion.fused, "rewrites off: a fused kernel holds several statements")
    return rewrites


def _several(fusion: FusionPlan) -> bool:
    """True when some kernel of the plan holds several statements of its fused
    problem (loop nests, sibling launches)."""
    return any(len(n) > 1 for n in fusion.nests)


def fusion_plan(problem: Problem, backend: str, fuse: bool = True) -> FusionPlan:
    """The fusion planner's grouping of ``problem`` for backend ``backend`` (``cpu``
    or ``cuda``; other backends, and ``fuse=False``, get one kernel per statement)."""
    if len(problem.program.statements) < 2:
        return unfused_plan(problem, backend, "one statement")
    if not fuse or backend not in ("cpu", "cuda"):
        why = "fusion turned off" if not fuse else f"the {backend} backend does not fuse"
        return unfused_plan(problem, backend, why)
    if any(t.view_of is not None for t in problem.program.tensors):
        return unfused_plan(problem, backend, "the program has views of other tensors (rewritten)")
    siblings = False
    if backend != "cpu":
        from .backends.cuda import fusion

        siblings = fusion.SIBLING_LAUNCHES
    return _planned(problem, backend, siblings)


@lru_cache(maxsize=16)
def _planned(problem: Problem, backend: str, siblings: bool) -> FusionPlan:
    """The planner's choice (kept: a compile, ``check`` and ``emit`` of one program
    plan once; ``siblings``: the CUDA planner's switch, part of the key)."""
    if backend == "cpu":
        from .backends.cpu.fused import group_seconds
    else:
        from .backends.cuda.fusion import group_seconds  # type: ignore[assignment]
    return plan_fusion(problem, backend, group_seconds)


#: Whether the CUDA backend rewrites programs (split-K, TTGT, split products); on
#: since ``scripts/gpu_rewrite.sh`` and ``pytest -m gpu`` passed on an H100
#: (docs/rewrites.md).  ``compile(rewrite=False)`` turns them off per kernel.
REWRITES_ON_CUDA = True


def plan_rewrites(
    problem: Problem, backend: str, rewrite: bool | Collection[str] = True, *, given: bool = False
) -> RewritePlan:
    """The planning step between a problem and a backend: which statements are
    rewritten into several kernels (:mod:`einkern.ir.rewrite_plan`).  The CUDA
    backend decides by its cost model; the CPU backend by its own
    (:mod:`einkern.backends.cpu.rewrites`: ``split_products`` and ``ttgt`` into BLAS
    calls); others take only ``split_products`` (decided by flop count).  ``given``:
    mappings or tuning results name the statements, so nothing is rewritten."""
    if rewrite is False:
        return unchanged(problem, "rewrites off (rewrite=False)")
    if given:
        return unchanged(problem, "rewrites off: mappings or tuning results are given")
    if backend == "cuda" and not REWRITES_ON_CUDA:
        return unchanged(problem, "rewrites off on CUDA (api.REWRITES_ON_CUDA)")
    allowed = REWRITES if rewrite is True else tuple(rewrite)
    unknown = [name for name in allowed if name not in REWRITES]
    if unknown or isinstance(rewrite, str):
        raise ArgumentError(
            f"rewrite={rewrite!r}: expected True, False or a collection of rewrite names",
            hint=f"names: {', '.join(REWRITES)}",
        )
    model: CostModel | None = None
    if backend == "cuda":
        from .gpu.rewrite_cost import CudaRewriteModel

        model = CudaRewriteModel()
    elif backend == "cpu":
        from .backends.cpu.rewrites import CPU_REWRITES, CpuRewriteModel

        model = CpuRewriteModel()
        allowed = tuple(name for name in allowed if name in CPU_REWRITES)
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
        fuse: bool = True,
        fusion: FusionPlan | None = None,
    ):
        self.problem = problem
        self.program = problem.program
        self.backend = backend
        self.tuning_sources: tuple[str, ...] = ()
        if fusion is None and plan is not None and plan.original == problem:
            fuse = False  # a rewrite plan of the program's own statements
        #: the fusion planner's groups (:mod:`einkern.ir.fusion_plan`)
        self.fusion = fusion if fusion is not None else fusion_plan(problem, backend.name, fuse)
        fused = self.fusion.fused
        #: the rewrites chosen (none unless a plan is given) and the problem compiled
        self.rewrites = plan if plan is not None else unchanged(fused)
        if self.rewrites.original != fused:
            raise ArgumentError("the rewrite plan is of another problem")
        if self.rewrites.rewrites and _several(self.fusion):
            raise ArgumentError("a fused kernel holds several statements: give no rewrite plan")
        self.compiled = self.rewrites.problem
        self._binder = Binder(self.compiled, backend)  # the one argument check
        if isinstance(mappings, Mapping | str) and backend.name != "cuda":
            raise ArgumentError(
                "mappings apply to the cuda backend only",
                hint="drop mappings=, or use backend='cuda'",
            )
        if mappings is not None and self.rewrites.rewrites:
            raise ArgumentError("mappings name the program's statements: give no rewrite plan")
        self.mappings = fused_build_argument(self.fusion, backend, mappings)
        self._nests = cuda_nests(self.fusion, backend)
        if self.mappings is None and not self._nests:
            self.executable = backend.build(self.compiled)
        else:
            self.executable = backend.build(  # type: ignore[call-arg]
                self.compiled, self.mappings, **self._nests
            )

    # -- information --------------------------------------------------------

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.program.inputs

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.program.outputs

    @property
    def groups(self) -> tuple[Group, ...]:
        """The kernels' statements (positions in :attr:`program`), in launch order,
        each with its kind (``single``, ``merge``, ``nest``) and predicted time."""
        return self.fusion.groups

    @property
    def kernels(self) -> int:
        """Number of kernel groups a call runs (one per group; rewrites add more)."""
        return len(self.fusion.groups)

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
        if self.mappings is None and not self._nests:
            return self.backend.emit(self.compiled)
        return self.backend.emit(  # type: ignore[call-arg]
            self.compiled, self.mappings, **self._nests
        )

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


def fused_build_argument(plan: FusionPlan, backend: Backend, mappings: Any) -> Any:
    """The CPU schedule (given or default) with the plan's loop nests; other
    build arguments unchanged."""
    if backend.name != "cpu" or not any(len(n) > 1 for n in plan.nests):
        return mappings
    from .backends.cpu.decide import default_schedule
    from .backends.cpu.fused import nest_schedule
    from .backends.cpu.schedule import CpuSchedule

    schedule = mappings if isinstance(mappings, CpuSchedule) else default_schedule(plan.fused)
    return nest_schedule(schedule, plan.nests)


def cuda_nests(plan: FusionPlan, backend: Backend) -> dict[str, Any]:
    """``{"nests": ...}`` for the CUDA backend when the plan has groups of several
    statements in :attr:`FusionPlan.fused` (sibling kernels run as one), else ``{}``."""
    nests = tuple(n for n in plan.nests if len(n) > 1)
    return {"nests": nests} if backend.name == "cuda" and nests else {}


def measure_groupings(
    problem: Problem, backend: Backend, plan: FusionPlan, repeat: int = 5, seed: int = 0
) -> FusionPlan:
    """``plan`` with the fastest of its chosen and alternative covers, each compiled
    (default mappings or schedules) and timed on random inputs (median of
    ``repeat`` calls: the kernels' own times where the executable profiles them,
    else the call); its rule lists the measured times."""
    import dataclasses
    import time

    from .testing import random_arrays, random_scalars

    covers = (plan.chosen, *plan.alternatives)
    if len(covers) < 2:
        return plan
    arrays = random_arrays(problem, seed, problem.program.inputs)
    scalars = random_scalars(problem, seed)
    measured = []
    for cover in covers:
        candidate = dataclasses.replace(plan, chosen=cover)
        kernel = Kernel(problem, backend, fusion=candidate)
        call = kernel.bind(**{n: copy_host_array(a) for n, a in arrays.items()}, **scalars)
        profile = getattr(kernel.executable, "profile_checked", None)
        times = []
        for _ in range(repeat):
            if profile is not None:
                times.append(sum(profile(call, 1)) * 1e-3)
            else:
                start = time.perf_counter()
                kernel.executable.run_checked(call)
                times.append(time.perf_counter() - start)
        measured.append((sorted(times)[len(times) // 2], cover))
    best_seconds, best = min(measured, key=lambda item: item[0])
    text = "; ".join(f"{len(c.groups)} kernel(s) {t * 1e3:.4g} ms" for t, c in measured)
    return dataclasses.replace(
        plan,
        chosen=best,
        alternatives=tuple(c for _, c in measured if c is not best),
        rule=f"the fastest measured cover ({text}; predicted first: {plan.rule})",
    )


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
