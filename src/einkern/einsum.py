"""``einkern.einsum``: NumPy's einsum, each contraction an einkern kernel.

How an einsum is computed (:func:`einsum_plan` shows it for given operands):

* ``optimize=True`` (the default), ``"greedy"``, ``"optimal"`` or any other
  strategy of :func:`opt_einsum.contract_path`, or an explicit path: the
  operands are contracted along the path opt_einsum finds for their shapes
  (``True`` is its ``"auto"`` strategy), two at a time; every step is one
  einkern kernel and its result, an intermediate array allocated by einkern, is
  an operand of a later step.  ``memory_limit=`` (elements, or
  ``"max_input"``) bounds the intermediates opt_einsum may choose.  When the
  path has one step (one or two operands, or a memory limit that rules out
  every intermediate) that step is the whole einsum: one kernel.
* ``optimize=False``: one kernel over all the indices, whatever the number of
  operands (a loop nest over every index: far more arithmetic for chains such
  as ``ij,jk,kl->il``).
* A pairwise step may itself run as several kernels: split-K or TTGT, where the
  backend's cost model says it pays (:func:`einkern.compile`'s ``rewrite``;
  docs/rewrites.md); :func:`einsum_plan` shows it.

The subscripts follow NumPy: ``->`` and the output (implicit output: the
ellipsis' dimensions, then the indices that appear once, in alphabetical
order), ``...`` for broadcast dimensions (aligned from the right; an ellipsis
missing from an explicit output sums its dimensions, as
``numpy.einsum(optimize=True)`` and opt_einsum do), size-1 dimensions that
broadcast, repeated indices within one operand (diagonals, traces).  float32
and float64 operands mix as in NumPy: every result, intermediate or final, has
the widest dtype of what it is computed from.  float16 and bfloat16 operands
(NumPy float16 arrays; torch, CuPy float16 and torch bfloat16 tensors) are
computed in float32: intermediates are float32, the result has the operands'
16-bit dtype (float32 when they mix the two), or ``out=``'s: a float32 ``out=``
gives bfloat16 inputs a float32 result.  ``out=`` receives the result (a dense
row- or column-major array of at least that dtype).  ``tune=`` and
``tuning_db=`` choose each kernel's configuration as in :func:`einkern.compile`.

A call with the same subscripts, operand shapes, dtypes, strides, backend and
options as an earlier one goes from one dictionary look-up straight to the
prepared plan, whose kernels check the arrays once (the one argument check,
:class:`~einkern.backends.binding.Binder`) and run.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .api import Kernel
from .api import compile as compile_program
from .arrays import NO_NUMPY_BFLOAT16, ArrayInfo, strides_match
from .backends import Backend, get_backend
from .backends.binding import Binder, article, type_name
from .einsum_subscripts import _parse_spec, _sizes
from .errors import ArgumentError, DtypeError, LayoutError
from .ir.nodes import Access, Binary, Expr, Extent, Program, Statement, Sum, Tensor
from .semantics import DTYPES, LAYOUTS, DType, Layout, arithmetic_dtype, widest

#: Most prepared plans kept (the oldest is dropped first).
CACHE_SIZE = 512
_NO_SCALARS: dict[str, Any] = {}

# ---- one kernel -----------------------------------------------------------------


@dataclass(frozen=True)
class Operand:
    """What a kernel is specialised to about one operand."""

    term: str
    shape: tuple[int, ...]
    dtype: DType
    layout: Layout


def einsum_program(operands: Sequence[Operand], output: Operand) -> Program:
    """One statement ``out[output] = sum(x0[...] * x1[...] * ...)``: tensor ``x<i>``
    for operand ``i``, indices named by their letters, extents ``n_<letter>``.  A
    size-1 dimension that broadcasts is indexed by an index of its own over the
    extent ``1``, summed (one term)."""
    sizes = _sizes([o.term for o in operands], [o.shape for o in operands])
    index_extents = {c: f"n_{c}" for c in sizes}
    tensors, body = [], []
    for position, operand in enumerate(operands):
        indices, shape = [], []
        for char, size in zip(operand.term, operand.shape, strict=True):
            if size != sizes[char]:  # broadcast
                char = f"one{len(index_extents)}"
                index_extents[char] = "1"
            indices.append(char)
            shape.append(index_extents[char])
        name = f"x{position}"
        tensors.append(Tensor(name, tuple(shape), operand.dtype, operand.layout))
        body.append(Access(name, tuple(indices)))
    tensors.append(Tensor("out", tuple(f"n_{c}" for c in output.term), output.dtype, output.layout))
    product: Expr = body[0]
    for access in body[1:]:
        product = Binary("*", product, access)
    summed = tuple(i for a in body for i in a.indices if i not in output.term)
    rhs = Sum(tuple(dict.fromkeys(summed)), product) if summed else product
    extents = [Extent(f"n_{c}", sizes[c]) for c in sorted(sizes)]
    if "1" in index_extents.values():
        extents.append(Extent("1", 1))
    statement = Statement(Access("out", tuple(output.term)), "=", rhs, tuple(index_extents.items()))
    return Program("einsum", tuple(extents), tuple(tensors), (), (statement,))


@dataclass(frozen=True, eq=False)
class Step:
    """One kernel of a plan: it contracts the operands at ``positions`` (ascending)
    of the list still to be contracted, which it removes; its result is appended
    (opt_einsum's convention for paths).  ``subscripts`` is the step's own einsum."""

    positions: tuple[int, ...]
    subscripts: str
    kernel: Kernel
    binder: Binder = field(repr=False)
    names: tuple[str, ...] = field(repr=False)

    def run(
        self,
        operands: Sequence[Any],
        infos: Sequence[ArrayInfo | None],
        out: Any = None,
        out_info: ArrayInfo | None = None,
    ) -> Any:
        """The step's result (``out`` when given), through the one argument check;
        ``infos`` (None where unknown) are the operands' descriptions, if made."""
        arrays = dict(zip(self.names, operands, strict=True))
        described = dict(zip(self.names, infos, strict=True))
        if out is not None:
            arrays["out"] = out
            described["out"] = out_info
        call = self.binder.check(arrays, _NO_SCALARS, described=described)
        self.kernel.executable.run_checked(call)
        return call.arrays["out"]


def _step(
    positions: tuple[int, ...],
    operands: Sequence[Operand],
    output: Operand,
    backend: Backend,
    tune: Any,
    tuning_db: Any,
    precision: str = "fp32",
) -> Step:
    # a pairwise step may be rewritten (split-K, TTGT, relayout) where the model says it pays;
    # a step over three or more operands is the one loop nest optimize=False asks for
    rewrite = ("split_k", "ttgt", "relayout") if len(operands) <= 2 else False
    kernel = compile_program(
        einsum_program(operands, output),
        backend=backend.name,
        tune=tune,
        tuning_db=tuning_db,
        rewrite=rewrite,
        precision=precision,
    )
    subscripts = ",".join(o.term for o in operands) + "->" + output.term
    names = tuple(f"x{i}" for i in range(len(operands)))
    return Step(positions, subscripts, kernel, Binder(kernel.compiled, backend), names)


# ---- plans ----------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class EinsumPlan:
    """How an einsum is computed for operands of given shapes, dtypes and strides:
    its kernels in order (``steps``), and how they were chosen (``how``)."""

    subscripts: str  # explicit: ellipses replaced, output written out
    steps: tuple[Step, ...]
    how: str

    def __call__(self, *operands: Any, out: Any = None) -> Any:
        """Run the plan on operands like those it was made for (each step's argument
        check refuses others with a typed error); returns the result, or ``out``."""
        expected = sum(len(step.positions) - 1 for step in self.steps) + 1
        if len(operands) != expected:
            raise ArgumentError(
                f"this plan takes {expected} operand{'s' if expected != 1 else ''}, "
                f"got {len(operands)}"
            )
        return self.run(operands, [None] * len(operands), out)

    @property
    def flops(self) -> int:
        """Floating-point operations of all the steps' kernels."""
        return sum(step.kernel.flops for step in self.steps)

    @property
    def tuning_sources(self) -> tuple[str, ...]:
        """Where each kernel's configuration came from (see :func:`einkern.compile`)."""
        return tuple(s for step in self.steps for s in step.kernel.tuning_sources)

    def __str__(self) -> str:
        lines = [f"einsum {self.subscripts}: {self.how}"]
        for n, step in enumerate(self.steps):
            lines.append(f"  step {n}: operands {step.positions} {step.subscripts}")
            lines += [f"    {note}" for note in step.kernel.rewrites.notes]
        return "\n".join(lines)

    def run(
        self,
        operands: Sequence[Any],
        infos: Sequence[ArrayInfo | None],
        out: Any = None,
        out_info: ArrayInfo | None = None,
    ) -> Any:
        """Run the steps on ``operands`` (described by ``infos``, None where not)."""
        steps = self.steps
        if len(steps) == 1:
            return steps[0].run(operands, infos, out, out_info)
        values, known = list(operands), list(infos)
        for step in steps:
            positions = step.positions
            taken = [values[p] for p in positions]
            taken_infos = [known[p] for p in positions]
            for p in reversed(positions):
                del values[p], known[p]
            last = step is steps[-1]
            values.append(
                step.run(taken, taken_infos, out if last else None, out_info if last else None)
            )
            known.append(None)
        return values[0]


def _path(
    terms: Sequence[str],
    output: str,
    shapes: Sequence[tuple[int, ...]],
    optimize: Any,
    memory_limit: Any,
) -> tuple[list[tuple[int, ...]], str]:
    """The contraction path (opt_einsum's convention) and how it was decided."""
    everything = [tuple(range(len(terms)))]
    if optimize is False:
        return everything, "one kernel over every index (optimize=False)"
    if len(terms) == 1:
        return everything, "one kernel (one operand)"
    if isinstance(optimize, tuple):
        return list(optimize), f"explicit path: {len(optimize)} kernel(s)"
    import opt_einsum
    from opt_einsum.paths import get_path_fn

    strategy = "auto" if optimize is True else optimize
    equation = ",".join(terms) + "->" + output
    try:
        get_path_fn(strategy)  # an unknown name is refused even where no search is needed
        path, info = opt_einsum.contract_path(
            equation, *shapes, shapes=True, optimize=strategy, memory_limit=memory_limit
        )
    except (ValueError, KeyError, TypeError, IndexError) as error:
        raise ArgumentError(
            f"opt_einsum finds no contraction path for optimize={optimize!r}, "
            f"memory_limit={memory_limit!r}: {error}",
            hint="optimize= takes True, False, an opt_einsum strategy ('greedy', 'optimal', "
            "'dp', ...) or a path [(0, 1), ...]; memory_limit= a number of elements",
        ) from None
    path = [tuple(int(p) for p in step) for step in path]
    kind = f"opt_einsum's {strategy!r} path"
    if len(path) == 1:
        return path, f"one kernel ({kind} has one step)"
    return path, (
        f"{kind}: {len(path)} kernels, about {float(info.opt_cost):.3g} operations "
        f"against {float(info.naive_cost):.3g} for one kernel over every index"
    )


def _plan_steps(
    operands: list[Operand],
    output: Operand,
    path: Sequence[tuple[int, ...]],
    backend: Backend,
    tune: Any,
    tuning_db: Any,
    precision: str = "fp32",
) -> tuple[Step, ...]:
    """One step per element of ``path``: intermediates row-major, of the widest dtype
    of their operands (float32 at least: 16-bit operands accumulate in float32),
    indexed in the order the letters first appear."""
    if not path:
        raise ArgumentError(
            "the contraction path is empty", hint="give at least one step, e.g. [(0, 1)]"
        )
    steps = []
    for number, positions in enumerate(path):
        if (
            len(set(positions)) != len(positions)
            or not positions
            or any(not 0 <= p < len(operands) for p in positions)
        ):
            raise ArgumentError(
                f"step {number} of the contraction path, {positions}, does "
                f"not name distinct operands among {len(operands)}"
            )
        positions = tuple(sorted(positions))
        taken = [operands[p] for p in positions]
        operands = [o for p, o in enumerate(operands) if p not in positions]
        if number == len(path) - 1:
            if operands:
                raise ArgumentError(
                    f"the contraction path leaves {len(operands)} "
                    f"operand{'s' if len(operands) != 1 else ''} uncontracted"
                )
            result = output
        else:
            keep = set(output.term).union(*(o.term for o in operands))
            term = "".join(dict.fromkeys(c for o in taken for c in o.term if c in keep))
            sizes = _sizes([o.term for o in taken], [o.shape for o in taken])
            dtype = arithmetic_dtype(widest(o.dtype for o in taken))  # 16-bit: float32
            result = Operand(term, tuple(sizes[c] for c in term), dtype, "row")
        steps.append(_step(positions, taken, result, backend, tune, tuning_db, precision))
        operands.append(result)
    return tuple(steps)


def _dtype(position: int, info: ArrayInfo) -> DType:
    for dtype in DTYPES:
        if info.dtype == dtype:
            return dtype
    if "bfloat16" in info.dtype:
        hint = NO_NUMPY_BFLOAT16
    elif "complex" in info.dtype:  # .astype('float64') would drop the imaginary parts
        hint = "contract the real and imaginary parts (.real, .imag) as float arrays"
    else:
        hint = "convert it with .astype('float64')"
    raise DtypeError(
        f"einsum supports {', '.join(DTYPES)} operands; operand {position} is {info.dtype}",
        hint=hint,
    )


def _layout(what: str, info: ArrayInfo) -> Layout:
    for layout in LAYOUTS:
        if strides_match(info, layout):
            return layout
    raise LayoutError(
        f"{what} with strides {info.strides} (in elements) is neither a dense row-major "
        "nor a dense column-major array",
        hint="pass a contiguous copy (np.ascontiguousarray)",
    )


def _output(out: ArrayInfo | None, shape: tuple[int, ...], dtype: DType) -> tuple[DType, Layout]:
    """The result's dtype and layout: ``dtype``, row-major; or ``out``'s."""
    if out is None:
        return dtype, "row"
    if out.shape != shape:
        raise ArgumentError(f"out= has shape {out.shape}, the result has shape {shape}")
    if out.dtype not in DTYPES or widest((out.dtype, dtype)) != out.dtype:
        raise DtypeError(
            f"out= is {out.dtype}, the result is {dtype}",
            hint=f"pass a {dtype} array (NumPy's 'safe' casting)",
        )
    if out.readonly:
        raise ArgumentError("out= is read-only", hint="pass a writable array")
    return _dtype(-1, out), _layout("out=", out)


def _prepare(
    subscripts: str,
    backend: Backend,
    infos: Sequence[ArrayInfo],
    out: ArrayInfo | None,
    optimize: Any,
    memory_limit: Any,
    tune: Any,
    tuning_db: Any,
    precision: str = "fp32",
) -> EinsumPlan:
    """A plan for operands like ``infos`` (every check with its typed error)."""
    dtypes = [_dtype(n, info) for n, info in enumerate(infos)]
    terms, output = _parse_spec(subscripts, len(infos), [len(i.shape) for i in infos])
    shapes = [info.shape for info in infos]
    for n, shape in enumerate(shapes):
        if 0 in shape:
            raise ArgumentError(
                f"operand {n} has shape {shape}: einkern kernels need every "
                "dimension of size 1 or more",
                hint="leave out empty operands",
            )
    sizes = _sizes(terms, shapes, subscripts)
    operands = [
        Operand(term, info.shape, dtype, _layout(f"operand {n}", info))
        for n, (term, info, dtype) in enumerate(zip(terms, infos, dtypes, strict=True))
    ]
    shape = tuple(sizes[c] for c in output)
    result = Operand(output, shape, *_output(out, shape, widest(dtypes)))
    path, how = _path(terms, output, shapes, optimize, memory_limit)
    steps = _plan_steps(operands, result, path, backend, tune, tuning_db, precision)
    return EinsumPlan(",".join(terms) + "->" + output, steps, how)


# ---- entry points ---------------------------------------------------------------

_PLANS: dict[tuple[Any, ...], EinsumPlan] = {}
_PLANS_LOCK = threading.Lock()


def _describe(backend: Backend, operand: Any, what: str) -> ArrayInfo:
    info = backend.describe(operand)
    if info is None:
        raise ArgumentError(
            f"the {backend.name} backend cannot use {article(type_name(operand))} as {what}",
            hint="pass NumPy arrays"
            + (" or GPU arrays (torch, CuPy, JAX)" if backend.name == "cuda" else ""),
        )
    return info


def _hashable_path(optimize: Any) -> Any:
    """``optimize`` as a cache key: a path (NumPy's ``['einsum_path', (0, 1), ...]``
    or opt_einsum's ``[(0, 1), ...]``) as a tuple of tuples."""
    if isinstance(optimize, bool | str) or optimize is None:
        return False if optimize is None else optimize
    try:
        steps = list(optimize)
        if steps and steps[0] == "einsum_path":
            steps = steps[1:]
        return tuple(tuple(int(p) for p in step) for step in steps)
    except (TypeError, ValueError):
        raise ArgumentError(
            f"optimize={optimize!r} is neither a bool, a strategy name nor a "
            "path of operand positions"
        ) from None


def einsum_plan(
    subscripts: str,
    *operands: Any,
    out: Any = None,
    optimize: Any = True,
    memory_limit: int | str | None = None,
    backend: str = "auto",
    tune: bool | str | None = None,
    tuning_db: Any = None,
    precision: str = "fp32",
) -> EinsumPlan:
    """The :class:`EinsumPlan` :func:`einsum` runs for these arguments (prepared and
    cached on first use): ``print(plan)`` shows its steps."""
    chosen = get_backend(backend)
    infos = [_describe(chosen, o, f"operand {n}") for n, o in enumerate(operands)]
    out_info = None if out is None else _describe(chosen, out, "out=")
    return _plan(
        subscripts,
        chosen,
        infos,
        out_info,
        _hashable_path(optimize),
        memory_limit,
        tune,
        tuning_db,
        precision,
    )


def _plan(
    subscripts: str,
    backend: Backend,
    infos: Sequence[ArrayInfo],
    out: ArrayInfo | None,
    optimize: Any,
    memory_limit: Any,
    tune: Any,
    tuning_db: Any,
    precision: Any = "fp32",
) -> EinsumPlan:
    key = (
        subscripts,
        backend.name,
        optimize,
        memory_limit,
        tune,
        tuning_db,
        precision,
        None if out is None else (out.shape, out.dtype, out.strides, out.readonly),
        *[(i.shape, i.dtype, i.strides) for i in infos],
    )
    try:
        plan = _PLANS.get(key)
    except TypeError:  # an unhashable option
        raise ArgumentError(
            f"einsum options must be numbers, strings, booleans or paths: memory_limit="
            f"{memory_limit!r}, tune={tune!r}, tuning_db={tuning_db!r}, precision={precision!r}"
        ) from None
    return plan if plan is not None else _new_plan(key, subscripts, backend, infos, out)


def _new_plan(
    key: tuple[Any, ...],
    subscripts: str,
    backend: Backend,
    infos: Sequence[ArrayInfo],
    out: ArrayInfo | None,
) -> EinsumPlan:
    plan = _prepare(subscripts, backend, infos, out, *key[2:7])
    with _PLANS_LOCK:  # look-ups need no lock; evicting while another thread adds does
        while _PLANS and len(_PLANS) >= CACHE_SIZE:
            del _PLANS[next(iter(_PLANS))]
        return _PLANS.setdefault(key, plan)


def einsum(
    subscripts: str,
    *operands: Any,
    out: Any = None,
    optimize: Any = True,
    memory_limit: int | str | None = None,
    backend: str = "auto",
    tune: bool | str | None = None,
    tuning_db: Any = None,
    precision: str = "fp32",
) -> Any:
    """Evaluate the einsum ``subscripts`` (``"ik,kj->ij"``; NumPy's conventions) on
    the operands with einkern kernels and return the result: ``out`` when given,
    else a new row-major array of the operands' kind (NumPy, or the GPU library's
    for GPU operands; a NumPy scalar for a 0-d NumPy result, as NumPy's).

    ``optimize``: ``True`` (default; opt_einsum's ``"auto"``), an opt_einsum
    strategy (``"greedy"``, ``"optimal"``, ...) or a path: contract pairwise
    along that path, one kernel per step; ``False``: one kernel over every
    index.  ``memory_limit``: largest intermediate opt_einsum may choose
    (elements, or ``"max_input"``).  ``tune``/``tuning_db``: each kernel's
    configuration, as in :func:`einkern.compile`; ``precision``: what float32
    products may be computed in, as in :func:`einkern.compile`.  The module docstring says
    how a plan is decided; :func:`einsum_plan` shows it.  Plans are cached per
    subscripts, operand shapes, dtypes and strides, ``out``'s, backend and
    options."""
    chosen = get_backend(backend)
    describe = chosen.describe
    infos = [describe(operand) for operand in operands]
    out_info = None if out is None else describe(out)
    if optimize is not True and optimize is not False:
        optimize = _hashable_path(optimize)
    if None in infos or (out is not None and out_info is None):
        for n, operand in enumerate(operands):
            _describe(chosen, operand, f"operand {n}")
        _describe(chosen, out, "out=")
    described = [info for info in infos if info is not None]  # all of them, by now
    plan = _plan(
        subscripts,
        chosen,
        described,
        out_info,
        optimize,  # type: ignore[arg-type]
        memory_limit,
        tune,
        tuning_db,
        precision,
    )
    result = plan.run(operands, described, out, out_info)
    if out is None and type(result) is np.ndarray and result.ndim == 0:
        return result[()]  # a NumPy scalar, as numpy.einsum returns
    return result
