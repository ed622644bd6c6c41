"""The Python entry points: :func:`load`, :func:`compile`, :class:`Kernel`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .arrays import ArrayInfo, contiguous_strides, strides_match
from .backends import Backend, get_backend
from .errors import ArgumentError, DtypeError, LayoutError
from .ir.analysis import fused_floor_bytes, kernel_floor_bytes, program_flops
from .ir.bind import make_problem
from .ir.build import build_program
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
    again."""
    problem = make_problem(load(program), extents)
    chosen = get_backend(backend)
    sources: tuple[str, ...] = ()
    if tune not in (None, False):
        if mappings is not None:
            raise ArgumentError("give mappings= or tune=, not both")
        from .tuning.policy import tuned_build_argument

        mappings, sources = tuned_build_argument(chosen.name, problem, tune, tuning_db)
    kernel = Kernel(problem, chosen, mappings=mappings)
    kernel.tuning_sources = sources
    return kernel


class Kernel:
    """A compiled program.  Call it with arrays (positional: the program's inputs in
    declaration order; or by tensor name) and scalars by name.

    Tensors updated with ``+=``/``-=`` are updated in place; tensors assigned with
    ``=`` are written into the array you pass, or into new arrays otherwise.  The
    call returns the program's outputs (one array, or a tuple in order of first
    write)."""

    def __init__(self, problem: Problem, backend: Backend,
                 mappings: Mapping[int, Any] | str | None = None):
        self.problem = problem
        self.program = problem.program
        self.backend = backend
        self.mappings = mappings
        self.tuning_sources: tuple[str, ...] = ()
        self._inputs = self.program.inputs
        self._tensor_names = frozenset(t.name for t in self.program.tensors)
        self._scalar_names = frozenset(s.name for s in self.program.scalars)
        self._written = frozenset(s.output.tensor for s in self.program.statements)
        # What a correct array of each tensor looks like, computed once: a call whose
        # arrays match exactly skips the detailed checks (and their messages).
        self._accepted: dict[str, tuple[tuple[int, ...], str, tuple[int, ...]]] = {}
        for tensor in self.program.tensors:
            shape = problem.shape(tensor.name)
            self._accepted[tensor.name] = (shape, tensor.dtype,
                                           contiguous_strides(shape, tensor.layout))
        if isinstance(mappings, Mapping | str) and backend.name != "cuda":
            raise ArgumentError("mappings apply to the cuda backend only",
                                hint="drop mappings=, or use backend='cuda'")
        if mappings is None:
            self.executable = backend.build(problem)
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
            return self.backend.emit(self.problem)
        return self.backend.emit(self.problem, self.mappings)  # type: ignore[call-arg]

    def __repr__(self) -> str:
        sizes = ", ".join(f"{n}={v}" for n, v in self.problem.sizes if not n.isdigit())
        return f"<einkern.Kernel {self.program.name} [{sizes}] on {self.backend.name}>"

    # -- calling ------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        arrays, scalars = self._bind_arguments(args, kwargs)
        infos = {name: self._check_array(name, array) for name, array in arrays.items()}
        if len(infos) > 1:
            self._check_overlap(infos)
        like = list(arrays.values())
        for name in self.outputs:
            if name not in arrays:
                arrays[name] = self.backend.allocate(self.problem, name, like)
        for tensor in self.program.tensors:
            if tensor.name not in arrays:  # declared, never touched by any statement
                arrays[tensor.name] = self.backend.allocate(self.problem, tensor.name, like)
        if getattr(self.executable, "accepts_infos", False):
            self.executable.run(arrays, scalars, infos=infos)  # described once, here
        else:
            self.executable.run(arrays, scalars)
        results = tuple(arrays[name] for name in self.outputs)
        return results[0] if len(results) == 1 else results

    def _bind_arguments(self, args, kwargs) -> tuple[dict[str, Any], dict[str, float]]:
        inputs = self._inputs
        if len(args) > len(inputs):
            raise ArgumentError(
                f"{self.program.name} takes {len(inputs)} positional array"
                f"{'s' if len(inputs) != 1 else ''} ({', '.join(inputs)}), got {len(args)}",
                hint="pass further arrays and scalars by name",
            )
        arrays: dict[str, Any] = dict(zip(inputs, args, strict=False))
        scalars: dict[str, float] = {}
        tensor_names = self._tensor_names
        scalar_names = self._scalar_names
        for name, value in kwargs.items():
            if name in tensor_names:
                if name in arrays:
                    raise ArgumentError(f"array {name!r} given twice (by position and by name)")
                arrays[name] = value
            elif name in scalar_names:
                try:
                    scalars[name] = float(value)
                except (TypeError, ValueError):
                    raise ArgumentError(
                        f"scalar {name!r} must be a number, got {type(value).__name__}",
                        self.program.scalar(name).span,
                    ) from None
            else:
                raise ArgumentError(
                    f"{self.program.name} has no tensor or scalar {name!r}",
                    hint=f"tensors: {', '.join(sorted(tensor_names))}; "
                    f"scalars: {', '.join(sorted(scalar_names)) or 'none'}",
                )
        for name in inputs:
            if name not in arrays:
                raise ArgumentError(
                    f"missing array for {name!r} ({self._expected(name)})",
                    self.program.tensor(name).span,
                    hint=f"pass it by position or as {name}=...",
                )
        for scalar in self.program.scalars:
            if scalar.name not in scalars:
                if scalar.default is None:
                    raise ArgumentError(
                        f"missing value for scalar {scalar.name!r}",
                        scalar.span,
                        hint=f"pass {scalar.name}=<number>, or give it a default in the program",
                    )
                scalars[scalar.name] = float(scalar.default)
        return arrays, scalars

    def _expected(self, name: str) -> str:
        tensor = self.program.tensor(name)
        return f"shape {self.problem.shape(name)}, {tensor.dtype}, {tensor.layout}-major"

    def _check_array(self, name: str, array: Any) -> ArrayInfo:
        info = self.backend.describe(array)
        if info is not None and (info.shape, info.dtype, info.strides) == self._accepted[name] \
                and not (info.readonly and name in self._written):
            return info  # the common case: exactly as declared
        tensor = self.program.tensor(name)
        if info is None:
            raise ArgumentError(
                f"{name!r}: cannot use a {type(array).__module__}.{type(array).__name__} "
                f"with the {self.backend.name} backend",
                tensor.span,
                hint="pass a NumPy array"
                + (" or a GPU array (torch, CuPy, JAX)" if self.backend.name == "cuda" else ""),
            )
        shape = self.problem.shape(name)
        if info.shape != shape:
            raise ArgumentError(
                f"{name!r} has shape {info.shape}, expected {shape} ({self._expected(name)})",
                tensor.span,
                hint="check the extents passed to einkern.compile",
            )
        if info.dtype != tensor.dtype:
            raise DtypeError(
                f"{name!r} has dtype {info.dtype}, expected {tensor.dtype}",
                tensor.span,
                hint=f"convert it, e.g. array.astype('{tensor.dtype}'), or change the declaration",
            )
        if not strides_match(info, tensor.layout):
            other = "column" if tensor.layout == "row" else "row"
            hint = (
                "np.ascontiguousarray(a)" if tensor.layout == "row" else "np.asfortranarray(a)"
            )
            raise LayoutError(
                f"{name!r} is not a dense {tensor.layout}-major array (strides {info.strides} "
                f"elements)",
                tensor.span,
                hint=f"pass {hint}, or declare the tensor `{other}` if that is its layout",
            )
        if info.readonly and name in self._written:
            raise ArgumentError(f"{name!r} is written by the program but is read-only", tensor.span)
        return info

    def _check_overlap(self, infos: Mapping[str, ArrayInfo]) -> None:
        written = self._written
        seen: dict[tuple[str, int], str] = {}
        for name, info in infos.items():
            key = (info.device, info.pointer)
            other = seen.get(key)
            if other is not None and (name in written or other in written):
                raise ArgumentError(
                    f"{name!r} and {other!r} are the same memory, and one of them is written",
                    hint="pass a copy",
                )
            seen[key] = name
