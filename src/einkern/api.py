"""The Python entry points: :func:`load`, :func:`compile`, :class:`Kernel`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from .backends import Backend, get_backend
from .backends.binding import Binder, Call
from .errors import ArgumentError
from .ir.analysis import fused_floor_bytes, kernel_floor_bytes, program_flops
from .ir.bind import make_problem
from .ir.build import build_program
from .ir.fusion_plan import FusionPlan, Group, plan_fusion, unfused_plan
from .ir.nodes import Problem, Program


def load(program: str | os.PathLike | Program) -> Program:
    """Parse and check a program: a path to a ``.ein``/tensor/mapped file, program
    text, or an already built :class:`Program` (returned unchanged)."""
    if isinstance(program, Program):
        return program
    from .lang import load_program_node

    return build_program(load_program_node(program))


def compile(  # noqa: A001 - the public name is the point
    program: str | os.PathLike | Program,
    *,
    backend: str = "auto",
    mappings: Mapping[int, Any] | str | None = None,
    tune: bool | str | None = None,
    tuning_db: str | os.PathLike | None = None,
    fuse: bool | str = True,
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
    ``kernel.tuning_sources`` says which was used.  Compilation is cached on
    disk, so a second compile of the same problem does not invoke the compiler
    again.

    ``fuse`` (default True) lets the fusion planner group statements into kernels
    (:mod:`einkern.ir.fusion_plan`): updates of one output become one statement
    (every backend), other legal groups one loop nest (CPU).  ``mappings`` and
    tuning then refer to the statements of the fused program
    (``kernel.compiled_problem``); ``kernel.groups`` lists the kernels' statements
    and ``kernel.fusion.explain()`` why.  ``fuse=False``: one kernel per statement;
    ``fuse="measure"``: the planner's best covers are compiled and timed on random
    inputs here, and the fastest is kept (:func:`measure_groupings`)."""
    problem = make_problem(load(program), extents)
    chosen = get_backend(backend)
    plan = fusion_plan(problem, chosen.name, bool(fuse))
    if fuse == "measure":
        plan = measure_groupings(problem, chosen, plan)
    elif not isinstance(fuse, bool):
        raise ArgumentError(f"fuse must be True, False or 'measure', not {fuse!r}")
    sources: tuple[str, ...] = ()
    if tune not in (None, False):
        if mappings is not None:
            raise ArgumentError("give mappings= or tune=, not both")
        from .tuning.policy import tuned_build_argument

        mappings, sources = tuned_build_argument(chosen.name, plan.fused, tune, tuning_db)
    kernel = Kernel(problem, chosen, mappings=mappings, fuse=bool(fuse), plan=plan)
    kernel.tuning_sources = sources
    return kernel


def fusion_plan(problem: Problem, backend: str, fuse: bool = True) -> FusionPlan:
    """The fusion planner's grouping of ``problem`` for backend ``backend`` (``cpu``
    or ``cuda``; other backends, and ``fuse=False``, get one kernel per statement)."""
    if len(problem.program.statements) < 2:
        return unfused_plan(problem, backend, "one statement")
    if not fuse or backend not in ("cpu", "cuda"):
        why = "fusion turned off" if not fuse else f"the {backend} backend does not fuse"
        return unfused_plan(problem, backend, why)
    return _planned(problem, backend)


@lru_cache(maxsize=16)
def _planned(problem: Problem, backend: str) -> FusionPlan:
    """The planner's choice (kept: a compile, ``check`` and ``emit`` of one program
    plan once)."""
    if backend == "cpu":
        from .backends.cpu.fused import group_seconds
    else:
        from .backends.cuda.fusion import group_seconds  # type: ignore[assignment]
    return plan_fusion(problem, backend, group_seconds)


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
        fuse: bool = True,
        plan: FusionPlan | None = None,
    ):
        self.problem = problem
        self.program = problem.program
        self.backend = backend
        self.fusion = plan if plan is not None else fusion_plan(problem, backend.name, fuse)
        self.compiled_problem = self.fusion.fused
        self.mappings = fused_build_argument(self.fusion, backend, mappings)
        self.tuning_sources: tuple[str, ...] = ()
        self._binder = Binder(problem, backend)  # the one argument check
        if isinstance(mappings, Mapping | str) and backend.name != "cuda":
            raise ArgumentError(
                "mappings apply to the cuda backend only",
                hint="drop mappings=, or use backend='cuda'",
            )
        self._nests = cuda_nests(self.fusion, backend)
        if self.mappings is None and not self._nests:
            self.executable = backend.build(self.compiled_problem)
        else:
            self.executable = backend.build(  # type: ignore[call-arg]
                self.compiled_problem, self.mappings, **self._nests
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
        """Number of kernels a call runs (one per group)."""
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
            return self.backend.emit(self.compiled_problem)
        return self.backend.emit(  # type: ignore[call-arg]
            self.compiled_problem, self.mappings, **self._nests
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
    from .backends.cpu.fused import nest_schedule
    from .backends.cpu.schedule import CpuSchedule, default_schedule

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
        kernel = Kernel(problem, backend, plan=candidate)
        call = kernel.bind(**{n: a.copy(order="K") for n, a in arrays.items()}, **scalars)
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
