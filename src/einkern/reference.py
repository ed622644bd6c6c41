"""Reference executor in NumPy: the oracle for every test.

Each sub-expression is evaluated to a *labelled array*: an ndarray whose axes
carry index names.  Products under a :class:`~einkern.ir.nodes.Sum` are
contracted with ``opt_einsum`` (which picks a good pairwise order), so the
reference never materialises the full iteration space of a contraction.
Everything is computed in float64, which is at least as wide as any
statement's compute dtype (:func:`einkern.semantics.compute_dtype`): inputs
are widened exactly, and a value stored into a float32 (or 16-bit) tensor is
rounded to its dtype once (:func:`einkern.semantics.round_to`), so later
statements read what a kernel would have stored; bfloat16 tensors come back as
float32 arrays of bfloat16 values.  A
backend's result is within :func:`einkern.semantics.tolerance` of the output's
dtype of this oracle (:func:`relative_error`).  Functions are
:data:`einkern.semantics.FUNCTIONS`' NumPy meanings.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import opt_einsum

from .ir.affine import (
    AffineProblem,
    accumulation,
    innermost_sum,
    loop_key,
    loop_parallel,
    schedule_depth,
    schedule_values,
)
from .ir.nodes import (
    Access,
    Binary,
    Call,
    Const,
    Expr,
    Neg,
    Problem,
    ScalarRef,
    Statement,
    Sum,
    product_factors,
)
from .lang.cfront_nodes import (
    AExpr,
    AFunction,
    AStatement,
    Bin,
    Constraint,
    IterValue,
    Num,
    Ref,
    Scal,
)
from .lang.cfront_nodes import Neg as ANeg
from .semantics import FUNCTIONS, NUMPY_DTYPE, bfloat16_values, round_to

_LETTERS = string.ascii_letters


@dataclass(frozen=True)
class Labelled:
    """An array with one index name per axis (no repeats)."""

    labels: tuple[str, ...]
    data: np.ndarray


def evaluate(
    problem: Problem,
    arrays: Mapping[str, np.ndarray],
    scalars: Mapping[str, float] | None = None,
) -> dict[str, np.ndarray]:
    """Run ``problem`` on copies of ``arrays``; return every tensor's final value.

    ``arrays`` must hold every tensor the program reads on entry; outputs that
    are only assigned with ``=`` may be omitted.  Inputs are not modified."""
    program = problem.program
    values: dict[str, np.ndarray] = {}
    for tensor in program.tensors:
        if tensor.name in arrays:
            values[tensor.name] = np.array(
                host_values(arrays[tensor.name]), dtype=np.float64, copy=True
            )
        else:
            values[tensor.name] = np.full(problem.shape(tensor.name), np.nan)
    scalar_values = {s.name: s.default for s in program.scalars}
    scalar_values.update(scalars or {})
    for statement in program.statements:
        _run_statement(problem, statement, values, scalar_values)
        name = statement.output.tensor
        stored = round_to(values[name], program.tensor(name).dtype)  # one rounding, at the store
        values[name] = stored.astype(np.float64, copy=False)
    return {name: round_to(value, program.tensor(name).dtype) for name, value in values.items()}


def _run_statement(
    problem: Problem,
    statement: Statement,
    values: dict[str, np.ndarray],
    scalars: Mapping[str, float | None],
) -> None:
    sizes = {index: problem.index_size(statement, index) for index in statement.indices}
    result = _eval(statement.rhs, values, scalars, sizes)
    out_indices = statement.output.indices
    unique_out = tuple(dict.fromkeys(out_indices))
    result = _broadcast_to(result, unique_out, sizes)
    target = values[statement.output.tensor]
    # View of the output with one axis per distinct output index (diagonals for repeats).
    view_spec = "".join(_letter(unique_out, i) for i in out_indices)
    out_spec = "".join(_letter(unique_out, i) for i in unique_out)
    old = np.einsum(f"{view_spec}->{out_spec}", target) if out_indices else target
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/Inf: IEEE results
        if statement.op == "=":
            new = result
        elif statement.op == "+=":
            new = old + result
        else:
            new = old - result
    if not out_indices:
        target[...] = new
        return
    _assign_view(target, out_indices, unique_out, new)


def _assign_view(target: np.ndarray, indices: tuple[str, ...], unique, new) -> None:
    """Write ``new`` (axes ``unique``) into ``target`` (axes ``indices``, maybe repeated)."""
    grids = np.indices(new.shape, sparse=True)
    position = {name: axis for axis, name in enumerate(unique)}
    index_tuple = tuple(grids[position[name]] for name in indices)
    target[index_tuple] = new


def _letter(labels, index: str) -> str:
    return _LETTERS[list(labels).index(index)]


def _broadcast_to(value: Labelled, labels: tuple[str, ...], sizes: Mapping[str, int]):
    """Transpose/broadcast a labelled array to exactly ``labels``."""
    extra = [label for label in value.labels if label not in labels]
    if extra:
        raise AssertionError(f"free indices {extra} left after summation")
    data = value.data
    missing = [label for label in labels if label not in value.labels]
    full_labels = value.labels + tuple(missing)
    data = data.reshape(data.shape + (1,) * len(missing))
    order = [full_labels.index(label) for label in labels]
    data = np.transpose(data, order) if order else data
    return np.broadcast_to(data, tuple(sizes[label] for label in labels))


def _eval(expr: Expr, values, scalars, sizes) -> Labelled:
    if isinstance(expr, Const):
        return Labelled((), np.asarray(float(expr.value)))
    if isinstance(expr, ScalarRef):
        value = scalars.get(expr.name)
        if value is None:
            raise KeyError(f"scalar {expr.name!r} has no value")
        return Labelled((), np.asarray(float(value)))
    if isinstance(expr, Access):
        return _access(expr, values)
    if isinstance(expr, Neg):
        inner = _eval(expr.operand, values, scalars, sizes)
        return Labelled(inner.labels, -inner.data)
    if isinstance(expr, Sum):
        return _sum(expr, values, scalars, sizes)
    if isinstance(expr, Binary):
        left = _eval(expr.left, values, scalars, sizes)
        right = _eval(expr.right, values, scalars, sizes)
        labels = tuple(dict.fromkeys(left.labels + right.labels))
        a = _broadcast_to(left, labels, sizes)
        b = _broadcast_to(right, labels, sizes)
        with np.errstate(divide="ignore", invalid="ignore"):
            data = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}[expr.op](a, b)
        return Labelled(labels, data)
    if isinstance(expr, Call):
        args = [_eval(arg, values, scalars, sizes) for arg in expr.args]
        labels = tuple(dict.fromkeys(label for arg in args for label in arg.labels))
        data = [_broadcast_to(arg, labels, sizes) for arg in args]
        with np.errstate(divide="ignore", invalid="ignore"):
            return Labelled(labels, FUNCTIONS[expr.func].numpy(*data))
    raise TypeError(f"unknown expression node {expr!r}")


def _access(expr: Access, values) -> Labelled:
    data = values[expr.tensor]
    unique = tuple(dict.fromkeys(expr.indices))
    if len(unique) != len(expr.indices):  # repeated index: take the diagonal
        spec = "".join(_letter(unique, i) for i in expr.indices)
        data = np.einsum(f"{spec}->{''.join(_letter(unique, i) for i in unique)}", data)
    return Labelled(unique, data)


def _sum(expr: Sum, values, scalars, sizes) -> Labelled:
    factors = [_eval(f, values, scalars, sizes) for f in product_factors(expr.body)]
    labels = tuple(dict.fromkeys(label for f in factors for label in f.labels))
    keep = tuple(label for label in labels if label not in expr.indices)
    summed_absent = [i for i in expr.indices if i not in labels]
    if len(factors) == 1 and not factors[0].labels:
        data = factors[0].data
    else:
        specs = ["".join(_letter(labels, label) for label in f.labels) for f in factors]
        spec_out = "".join(_letter(labels, label) for label in keep)
        equation = ",".join(specs) + "->" + spec_out
        with np.errstate(invalid="ignore", over="ignore"):  # NaN/Inf inputs: IEEE results
            data = opt_einsum.contract(equation, *(f.data for f in factors), optimize="auto")
    # An index summed but used by no factor multiplies the result by its extent.
    for index in summed_absent:
        data = data * sizes[index]
    return Labelled(keep, np.asarray(data))


def host_values(array: Any) -> np.ndarray:
    """The values of an array (NumPy, a torch tensor, copied from the GPU if it is
    there, anything NumPy reads) as a NumPy array: bfloat16 tensors as float32
    (every bfloat16 is one), others in their own dtype."""
    if type(array).__module__ == "torch" and type(array).__name__ == "Tensor":
        tensor = array.detach().cpu()
        if str(tensor.dtype) == "torch.bfloat16":
            import torch

            return bfloat16_values(tensor.view(torch.int16).numpy().view(np.uint16))
        return tensor.numpy()
    return np.asarray(array)


def relative_error(result, reference) -> float:
    """max |result - reference| / max |reference| over the elements where the
    reference is finite; elsewhere the result must equal the reference exactly
    (NaN where it is NaN, the same infinity where it is infinite).  A non-finite
    result where the reference is finite, or a mismatch where it is not, gives
    inf."""
    result = np.asarray(host_values(result), dtype=np.float64)
    reference = np.asarray(host_values(reference), dtype=np.float64)
    finite = np.isfinite(reference)
    if finite.all():  # the common case: no masked copies of large arrays
        if not np.isfinite(result).all():
            return float("inf")
        if not reference.size:
            return 0.0
        scale = float(np.max(np.abs(reference)))
        diff = float(np.max(np.abs(result - reference)))
        return diff / scale if scale > 0 else diff
    if not np.all(np.isfinite(result[finite])):
        return float("inf")
    special = ~finite
    same_nan = np.isnan(result[special]) & np.isnan(reference[special])
    if not np.all(same_nan | (result[special] == reference[special])):
        return float("inf")
    result, reference = result[finite], reference[finite]
    scale = float(np.max(np.abs(reference))) if reference.size else 0.0
    diff = float(np.max(np.abs(result - reference))) if reference.size else 0.0
    return diff / scale if scale > 0 else diff


# ---- affine programs (loop nests from the C front end) -------------------------------


def evaluate_affine(
    problem: AffineProblem,
    arrays: Mapping[str, np.ndarray],
    scalars: Mapping[str, float] | None = None,
) -> dict[str, np.ndarray]:
    """Run an affine program (:mod:`einkern.ir.affine`) on copies of ``arrays``, every
    statement instance in schedule (source) order; return every array's final value.

    Independent of the backends' loop generation: each statement's instances are
    enumerated from its own loop bounds and guards, sorted by the 2d+1 schedule,
    and executed in that order.  Vectorised where the dependences allow: when a
    statement's innermost loop holds no other statement and carries no dependence
    (:func:`~einkern.ir.affine.loop_parallel`), all its iterations for one point
    of the outer loops run as one NumPy operation at the place of the first; when
    it is a float64 sum into one element (:func:`_sums`), its terms are computed
    as one operation and added in loop order (``np.add.accumulate``: the same
    additions, in the same order, as one instance at a time); otherwise one
    instance at a time (plain loops, usable at test sizes).  Values are computed
    in float64 and rounded to the array's dtype where stored."""
    function = problem.function
    sizes = dict(problem.sizes)
    values: dict[str, np.ndarray] = {}
    for array in function.arrays:
        dtype = NUMPY_DTYPE[array.dtype]
        if array.name in arrays:
            values[array.name] = np.array(arrays[array.name], dtype=dtype, copy=True)
        else:
            values[array.name] = np.full(problem.shape(array.name), np.nan, dtype=dtype)
    env_scalars = {name: float(value) for name, value in (scalars or {}).items()}
    width = schedule_depth(function)
    instances: list[tuple[tuple[int, ...], int, dict[str, Any]]] = []
    summed = [_sums(function, s) for s in function.statements]
    for number, statement in enumerate(function.statements):
        vector = summed[number] or _vectorisable(function, statement)
        for point in _points(statement, sizes, vector):
            first = {n: int(np.ravel(v)[0]) for n, v in point.items()}  # executed first
            env = {**sizes, **first}
            key = tuple(
                int(v) if v.lstrip("-").isdigit() else (-env[v[1:]] if v[0] == "-" else env[v])
                for v in schedule_values(statement, width)
            )
            instances.append((key, number, point))
    instances.sort(key=lambda item: (item[0], item[1]))
    for _, number, point in instances:
        run = _sum_in_order if summed[number] else _execute
        run(function.statements[number], {**sizes, **point}, values, env_scalars)
    return values


def _sums(function: AFunction, statement: AStatement) -> bool:
    """True when the statement's innermost loop is a sum into one float64 element
    (:func:`~einkern.ir.affine.innermost_sum`; float64, so that the element is
    not rounded between the terms)."""
    if function.array(statement.target.array).dtype != "float64":
        return False
    return innermost_sum(function, statement)


def _alone(function: AFunction, statement: AStatement) -> bool:
    """True when no other statement shares the statement's innermost loop."""
    depth = len(statement.loops)
    key = loop_key(statement, depth)
    return all(
        other is statement or loop_key(other, depth) != key
        for other in function.statements
        if len(other.loops) >= depth
    )


def _sum_in_order(statement: AStatement, env, values, scalars) -> None:
    """The instances of one point of the outer loops of a :func:`_sums` statement
    (the innermost iterator an array, in execution order): the terms at once, then
    ``((old ± t0) ± t1) ± …`` in that order."""
    op, body = accumulation(statement)
    target = statement.target
    where = tuple(s.value(env) for s in target.subscripts)
    count = len(env[statement.loops[-1].iterator])
    with np.errstate(all="ignore"):
        terms = np.broadcast_to(np.float64(_affine_value(body, env, values, scalars)), (count,))
        chain = np.concatenate(([np.float64(values[target.array][where])], terms))
        ufunc = np.add if op == "+=" else np.subtract
        values[target.array][where] = ufunc.accumulate(chain)[-1]


def _vectorisable(function: AFunction, statement: AStatement) -> bool:
    """True when the statement alone fills its innermost loop, which carries no
    dependence: its iterations may run as one vector operation."""
    depth = len(statement.loops)
    if depth == 0:
        return False
    return _alone(function, statement) and loop_parallel(function, loop_key(statement, depth))


def _points(statement: AStatement, sizes: Mapping[str, int], vector: bool = False):
    """Every point of the statement's domain (loop order; guards applied); with
    ``vector``, the innermost iterator is an array of all its values (in execution
    order) for each point of the outer loops."""
    last = len(statement.loops) - 1

    def nest(depth: int, env: dict[str, Any]):
        if depth == len(statement.loops):
            if all(_holds(guard, env) for guard in statement.guards):
                yield {i: env[i] for i in statement.iterators}
            return
        loop = statement.loops[depth]
        low = max(bound.value(env) for bound in loop.lower)
        high = min(bound.value(env) for bound in loop.upper)
        if vector and depth == last:
            run = np.arange(low, high + 1)[:: loop.step]
            inner = {**env, loop.iterator: run}
            keep = np.ones(run.shape, dtype=bool)
            for guard in statement.guards:
                value = guard.aff.value(inner)
                keep &= (value == 0) if guard.equal else (value >= 0)
            if keep.any():
                yield {**{i: env[i] for i in statement.iterators[:-1]}, loop.iterator: run[keep]}
            return
        values = range(low, high + 1) if loop.step == 1 else range(high, low - 1, -1)
        for value in values:
            yield from nest(depth + 1, {**env, loop.iterator: value})

    yield from nest(0, dict(sizes))


def _holds(guard: Constraint, env: Mapping[str, Any]) -> bool:
    value = guard.aff.value(env)
    return value == 0 if guard.equal else value >= 0


def _execute(statement: AStatement, env, values, scalars) -> None:
    """One instance (scalar iterators) or one vector of instances (the innermost
    iterator an array), computed in float64 with NumPy's meaning (x/0 is ±inf)."""
    target = statement.target
    where = tuple(s.value(env) for s in target.subscripts)
    with np.errstate(all="ignore"):
        value = np.float64(_affine_value(statement.rhs, env, values, scalars))
        if statement.op != "=":
            old = np.asarray(values[target.array][where], dtype=np.float64)
            value = {
                "+=": np.add,
                "-=": np.subtract,
                "*=": np.multiply,
                "/=": np.divide,
            }[statement.op](old, value)
    values[target.array][where] = value


def _affine_value(expr: AExpr, env, values, scalars) -> Any:
    if isinstance(expr, Num):
        return np.float64(expr.value)
    if isinstance(expr, Scal):
        return np.float64(scalars[expr.name])
    if isinstance(expr, Ref):
        element = values[expr.array][tuple(s.value(env) for s in expr.subscripts)]
        return np.asarray(element, dtype=np.float64)
    if isinstance(expr, IterValue):
        return np.asarray(expr.aff.value(env), dtype=np.float64)
    if isinstance(expr, ANeg):
        return -_affine_value(expr.operand, env, values, scalars)
    if isinstance(expr, Bin):
        a = _affine_value(expr.left, env, values, scalars)
        b = _affine_value(expr.right, env, values, scalars)
        return {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}[expr.op](a, b)
    args = [_affine_value(a, env, values, scalars) for a in expr.args]
    return FUNCTIONS[expr.func].numpy(*args)
