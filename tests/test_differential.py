"""Cross-backend differential test: the NumPy reference, the CPU backend (under
random valid loop schedules) and the CUDA kernels (run in the CPU emulator under
random valid mappings from the tuning space) must agree on every example and on
hypothesis-generated programs (elementwise and contractions, functions, scalars,
``= += -=``), in float32, float64 and mixed dtypes, with NaN and infinities among
the inputs.

Agreement is :func:`einkern.reference.relative_error` within the tolerance of
each output's dtype (:func:`einkern.semantics.tolerance`; float32's once a
float32 intermediate feeds it), NaN and infinities at the same places.
"""

from __future__ import annotations

import dataclasses
import random
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import einkern
from einkern import semantics
from einkern.backends.cpu import CpuBackend, CpuSchedule, LoopSchedule
from einkern.backends.cpu.schedule import (
    collapsible_depth,
    default_loop_schedule,
    parallel_indices,
    schedule_violation,
    tileable_reduction_indices,
)
from einkern.backends.verify import emulate_problem
from einkern.gpu.config import CudaConfig
from einkern.gpu.decision import decide
from einkern.gpu.space import config_to_mapping, parameters, violation
from einkern.ir.nodes import Problem
from einkern.ir.task import tasks_of
from einkern.reference import evaluate, relative_error

EXAMPLES = sorted(
    p
    for p in (Path(__file__).resolve().parent.parent / "examples").iterdir()
    if p.suffix in (".ein", ".tensor", ".mapped")
)
DTYPE_PLANS = ("float32", "float64", "mixed")
#: The dtypes mixed here (the 16-bit ones have their own tests, tests/test_lowp_*.py).
WIDE_DTYPES = ("float32", "float64")
SPECIALS = (np.nan, np.nan, np.inf, -np.inf)


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("EINKERN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "ekc"))


# ---- building cases --------------------------------------------------------------------


def with_dtypes(problem: Problem, plan: str, rng: random.Random) -> Problem:
    """The problem with every tensor in ``plan``'s dtype (``mixed``: each tensor's
    drawn at random, at least one of each when there are two tensors)."""
    tensors = problem.program.tensors
    if plan == "mixed":
        dtypes = [rng.choice(WIDE_DTYPES) for _ in tensors]
        if len(tensors) > 1 and len(set(dtypes)) == 1:
            dtypes[rng.randrange(len(dtypes))] = "float32" if dtypes[0] == "float64" else "float64"
    else:
        dtypes = [plan] * len(tensors)
    changed = tuple(dataclasses.replace(t, dtype=d) for t, d in zip(tensors, dtypes, strict=True))
    return Problem(dataclasses.replace(problem.program, tensors=changed), problem.sizes)


def inputs(problem: Problem, rng: random.Random, specials: int) -> dict[str, np.ndarray]:
    """Values in ±[0.5, 1.5) in each tensor's dtype and layout, with ``specials``
    elements of each tensor the program reads set to NaN or an infinity."""
    gen = np.random.default_rng(rng.randrange(2**32))
    arrays = {}
    for tensor in problem.program.tensors:
        shape = problem.shape(tensor.name)
        values = gen.uniform(0.5, 1.5, shape) * gen.choice([-1.0, 1.0], shape)
        order = "F" if tensor.layout == "column" else "C"
        arrays[tensor.name] = np.array(values, dtype=tensor.dtype, order=order)
    read = sorted({a.tensor for s in problem.program.statements for a in s.reads()})
    for name in read:
        array = arrays[name]
        for _ in range(specials):
            where = tuple(rng.randrange(n) for n in array.shape)
            array[where] = rng.choice(SPECIALS)
    return arrays


def random_mappings(problem: Problem, rng: random.Random, attempts: int = 400) -> dict:
    """A random valid mapping from the space for each statement (the decision
    algorithm's when no draw is valid)."""
    mappings = {}
    for task in tasks_of(problem):
        params = parameters(task)
        mappings[task.position] = decide(task)
        for _ in range(attempts):
            values = {name: rng.choice(options) for name, options in params.items()}
            try:
                config = CudaConfig.from_values(values)
            except (ValueError, TypeError, KeyError):
                continue
            if violation(task, config) is None:
                mappings[task.position] = config_to_mapping(task, config)
                break
    return mappings


def random_schedule(problem: Problem, rng: random.Random, attempts: int = 50) -> CpuSchedule:
    """A random valid CPU loop schedule per statement: loop order, tiles (parallel
    and outermost-sum indices), buffered inner loops, OpenMP collapse (the default
    schedule when no draw is valid)."""
    chosen = []
    for statement in problem.program.statements:
        loops = default_loop_schedule(problem, statement)
        order = list(parallel_indices(statement))
        tileable = order + list(tileable_reduction_indices(statement))
        for _ in range(attempts):
            rng.shuffle(order)
            tiled = [i for i in tileable if rng.random() < 0.5]
            draw = LoopSchedule(
                tuple(order),
                0,
                tuple((i, rng.choice((1, 2, 3))) for i in tiled),
                rng.randrange(len(order) + 1),
            )
            depth = collapsible_depth(problem, statement, draw)
            draw = dataclasses.replace(draw, collapse=rng.randrange(depth + 1))
            if schedule_violation(problem, statement, draw) is None:
                loops = draw
                break
        chosen.append(loops)
    return CpuSchedule(tuple(chosen))


def tolerances(problem: Problem) -> dict[str, float]:
    """Tolerance of each output (temporaries are the backends' own): its dtype's,
    float32's once a float32 tensor written earlier (rounded by each backend in
    its own way) feeds it."""
    program = problem.program
    found: dict[str, float] = {}
    rounded: set[str] = set()  # tensors whose value went through a float32 store
    for statement in program.statements:
        name = statement.output.tensor
        dtype = program.tensor(name).dtype
        loose = any(a.tensor in rounded for a in statement.reads())
        tolerance = semantics.tolerance("float32" if loose else dtype)
        found[name] = max(found.get(name, 0.0), tolerance)
        if dtype == "float32" or loose:
            rounded.add(name)
    return {name: t for name, t in found.items() if name in program.outputs}


def check_backends(problem: Problem, seed: int, specials: int) -> None:
    """Reference, CPU backend and emulated CUDA agree on ``problem``."""
    rng = random.Random(seed)
    arrays = inputs(problem, rng, specials)
    scalars = {s.name: rng.uniform(-1.5, 1.5) for s in problem.program.scalars}
    expected = evaluate(problem, arrays, scalars)
    cpu = {name: array.copy(order="K") for name, array in arrays.items()}
    schedule = random_schedule(problem, rng)
    CpuBackend().build(problem, schedule).run(cpu, scalars)
    mappings = random_mappings(problem, rng)
    cuda, errors, bad = emulate_problem(problem, mappings, arrays, scalars)
    described = {p: m.to_json(indent=None) for p, m in mappings.items()}, schedule
    assert bad == 0, (errors[:3], described)
    for name, tolerance in tolerances(problem).items():
        for backend, result in (("cpu", cpu), ("cuda", cuda)):
            error = relative_error(result[name], expected[name])
            assert error <= tolerance, (backend, name, error, described, str(problem.program))


# ---- every example ------------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_agrees_across_backends(path):
    rng = random.Random(zlib.crc32(path.name.encode()))
    program = einkern.load(path)
    size = rng.choice((2, 3, 5))  # one size: some examples tie their extents together
    sizes = {e.name: size for e in program.extents if not e.name.isdigit()}
    problem = einkern.make_problem(program, sizes)
    plan = DTYPE_PLANS[EXAMPLES.index(path) % len(DTYPE_PLANS)]
    check_backends(with_dtypes(problem, plan, rng), rng.randrange(2**31), specials=1)


# ---- generated programs ---------------------------------------------------------------------

EXTENTS = {"i": "ni", "j": "nj", "k": "nk", "l": "nl"}
UNARY = ("sqrt", "exp", "log", "abs", "sin", "cos", "tanh")
BINARY = ("max", "min", "pow")


@st.composite
def programs(draw) -> tuple[str, dict[str, int]]:
    """An .ein program of one or two statements over fresh input tensors."""
    tensors: list[str] = []

    def tensor(indices: tuple[str, ...]) -> str:
        name = f"T{len(tensors)}"
        dtype = draw(st.sampled_from(WIDE_DTYPES))
        layout = draw(st.sampled_from(semantics.LAYOUTS))
        shape = ", ".join(EXTENTS[i] for i in indices)
        tensors.append(f"tensor {name}[{shape}] {dtype} {layout}")
        return f"{name}[{', '.join(indices)}]"

    def factor(outputs: tuple[str, ...], reductions: tuple[str, ...]) -> str:
        kind = draw(st.sampled_from(("access", "access", "unary", "binary", "scalar", "const")))
        if kind == "scalar":
            return "alpha"
        if kind == "const":
            return draw(st.sampled_from(("2", "0.5", "1.25e-3", "3.0")))
        if kind == "access":
            pool = outputs + reductions
            chosen = draw(st.lists(st.sampled_from(pool), unique=True, max_size=3)) if pool else []
            return tensor(tuple(chosen))
        argument = tensor(outputs)
        if kind == "unary":
            return f"{draw(st.sampled_from(UNARY))}({argument})"
        other = draw(st.sampled_from(("1.5", "alpha", tensor(outputs))))
        return f"{draw(st.sampled_from(BINARY))}({argument}, {other})"

    def statement(output: str, outputs: tuple[str, ...], prefix: str = "") -> str:
        terms = []
        for _ in range(draw(st.integers(1, 2))):
            reductions = tuple(draw(st.lists(st.sampled_from(("k", "l")), unique=True, max_size=2)))
            factors = [factor(outputs, reductions) for _ in range(draw(st.integers(1, 3)))]
            terms.append(" * ".join(factors))
        signs = [draw(st.sampled_from((" + ", " - "))) for _ in terms[1:]]
        rhs = prefix + terms[0] + "".join(s + t for s, t in zip(signs, terms[1:], strict=True))
        op = draw(st.sampled_from(("=", "+=", "-=")))
        return f"{output} {op} {rhs}"

    outputs = tuple(draw(st.lists(st.sampled_from(("i", "j")), unique=True, max_size=2)))
    first = statement(tensor(outputs), outputs)
    lines = [first]
    if draw(st.booleans()):  # a second statement reading the first one's output
        produced = first.split(" ")[0].split("[")[0] + f"[{', '.join(outputs)}]"
        later = tuple(draw(st.permutations(outputs)))
        lines.append(statement(tensor(later), later, prefix=f"{produced} * "))
    sizes = {extent: draw(st.sampled_from((1, 2, 3, 4))) for extent in EXTENTS.values()}
    dims = ", ".join(EXTENTS.values())
    text = "\n".join(["program generated", f"dims {dims}", *tensors, "scalar alpha", *lines])
    return text + "\n", sizes


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=programs(), seed=st.integers(0, 2**31 - 1), specials=st.sampled_from((0, 1, 2, 3)))
def test_generated_programs_agree_across_backends(case, seed, specials):
    text, sizes = case
    problem = einkern.make_problem(einkern.load(text), sizes)
    check_backends(problem, seed, specials)
