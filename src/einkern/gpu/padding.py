"""The ``pad`` boundary policy (MAGMA §4.3.2, "copied into another padded matrix").

Every extent of the statement is rounded up to a multiple of the tiles (and
k-steps) of the indices that range over it; the tensors are copied into
zero-filled buffers of the padded shapes, the kernel runs with no boundary
checks at all (``exact``), and the output is cropped back.  Zeros in the padded
inputs make the extra reduction terms vanish; the extra outputs are dropped.

A statement is planned as a list of :class:`Launch` es (kernel + the buffers
bound to its array parameters) and temporary buffers; the CUDA backend and the
emulator both run that plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..ir.bind import make_problem, statement_program
from ..ir.nodes import Access, Problem, product_factors, signed_terms
from . import exprs as E
from . import kir
from .lower import CTYPE, index_type, lower
from .mapping import Mapping
from .normalize import reduction_of
from .staging import natural_order

#: Padded copies align their rows to cache lines where it is cheap (see pad_multiples).
LINE_BYTES = 128
#: Padded copies may hold at most this many times the elements of the tensor.
MAX_GROWTH = 2


@dataclass(frozen=True)
class Launch:
    """A kernel and, for each of its array parameters in order, the buffer bound to
    it: a tensor of the program or a temporary (``<plan>:pad:<tensor>``)."""

    kernel: kir.Kernel
    buffers: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    launches: tuple[Launch, ...]
    temporaries: tuple[tuple[str, str, int], ...] = ()  # (buffer, ctype, elements)


def temporary(plan: str, tensor: str) -> str:
    """Name of the padded copy of ``tensor`` in plan ``plan`` (one per statement)."""
    return f"{plan}:pad:{tensor}"


def pad_multiples(problem: Problem, position: int, mapping: Mapping) -> dict[str, int]:
    """For each extent of the statement, the multiple its size is rounded up to."""
    statement = problem.program.statements[position]
    multiples: dict[str, int] = {}
    staged_groups = {
        i for g in reduction_of(statement).groups
        if any(mapping.staging_of(str(a)) for a in g.accesses()) for i in g.indices
    }
    for index in statement.indices:
        extent = statement.extent_of(index)
        if index in statement.parallel_indices:
            multiple = mapping.tile_of(index).tile
        elif index in staged_groups:
            multiple = dict(mapping.k_step).get(index, 1)
        else:
            multiple = 1
        multiples[extent] = math.lcm(multiples.get(extent, 1), multiple)
    # Each tensor's contiguous extent is also rounded up to whole 128-byte lines when
    # that adds at most 1/32 to it: the rows of the padded copies then start on line
    # boundaries (SGEMM n = 3000: k 3000 -> 3008).
    for access in (statement.output, *statement.reads()):
        extent = statement.extent_of(natural_order(problem, access)[0])
        if extent.isdigit():
            continue
        line = LINE_BYTES // problem.program.tensor(access.tensor).itemsize
        size, multiple = problem.size(extent), multiples[extent]
        aligned = math.lcm(multiple, line)
        by_tile, by_line = -(-size // multiple) * multiple, -(-size // aligned) * aligned
        if by_line - by_tile <= by_tile // 32:
            multiples[extent] = aligned
    return _tie_extents(problem, statement, multiples)


def _tie_extents(problem: Problem, statement, multiples: dict[str, int]) -> dict[str, int]:
    """Extents that one index ranges over (``D[k,m]`` with ``k`` over ``lz`` and D's
    first extent ``lx``) must stay equal once padded: each gets the lcm of the
    multiples of its class."""
    tied: dict[str, set[str]] = {}
    for access in (statement.output, *statement.reads()):
        shape = problem.program.tensor(access.tensor).shape
        for index, extent in zip(access.indices, shape, strict=True):
            group = tied.get(extent, {extent}) | tied.get(statement.extent_of(index),
                                                          {statement.extent_of(index)})
            for member in group:
                tied[member] = group
    for extent in list(multiples):
        group = tied.get(extent, {extent})
        common = math.lcm(*(multiples.get(e, 1) for e in group))
        multiples.update({e: common for e in group})
    return multiples


def padded_problem(problem: Problem, position: int, mapping: Mapping) -> Problem:
    """The statement alone, over extents rounded up to the tiles' multiples."""
    single = statement_program(problem.program, position)
    sizes = dict(problem.sizes)
    for extent, multiple in pad_multiples(problem, position, mapping).items():
        sizes[extent] = -(-sizes[extent] // multiple) * multiple
    return make_problem(single, {n: v for n, v in sizes.items() if not n.isdigit()})


def padding_problems(problem: Problem, position: int, mapping: Mapping) -> list[str]:
    """Why ``pad`` cannot be used here (empty: it can)."""
    multiples = pad_multiples(problem, position, mapping)
    problems = [f"literal extent {e} cannot be padded" for e, m in multiples.items()
                if e.isdigit() and problem.size(e) % m]
    statement = problem.program.statements[position]
    if problems:
        return problems
    grown = padded_problem(problem, position, mapping)
    for tensor in dict.fromkeys(a.tensor for a in (statement.output, *statement.reads())):
        before, after = problem.numel(tensor), grown.numel(tensor)
        if after > MAX_GROWTH * before:
            problems.append(f"padding grows {tensor} from {before} to {after} elements "
                            f"(over {MAX_GROWTH}x)")
    for group in reduction_of(statement).groups:
        padded = [i for i in group.indices
                  if problem.size(statement.extent_of(i)) % multiples[statement.extent_of(i)]]
        for _, term in signed_terms(group.body):
            factors = [f for f in product_factors(term) if isinstance(f, Access)]
            for index in padded:
                if not any(index in f.indices for f in factors):
                    problems.append(f"padding {index} would add terms of {term} that are not "
                                    "zero")
    return problems


def copy_kernel(name: str, ctype: str, shape: tuple[int, ...], source_strides: tuple[int, ...],
                padded_shape: tuple[int, ...], padded_strides: tuple[int, ...],
                source_elements: int, padded_elements: int, into_padded: bool,
                itype: str) -> kir.Kernel:
    """One thread per element of the destination, in its memory order: into the
    padded buffer (zeros where the source has no element), or back out of it (crop)."""
    dims = padded_shape if into_padded else shape
    total = math.prod(dims) if dims else 1
    threads = 256
    element = E.add(E.mul(kir.BlockIdx(), E.const(threads)), kir.ThreadIdx())
    # Consecutive threads take consecutive elements of the destination (its
    # smallest stride fastest: coalesced for row- and column-major alike).
    target_strides = padded_strides if into_padded else source_strides
    coords: list = [None] * len(dims)
    stride = 1
    for dim in sorted(range(len(dims)), key=lambda d: (target_strides[d], -d)):
        coords[dim] = E.mod(E.div(element, stride), dims[dim])
        stride *= dims[dim]
    source_offset = E.linear(list(zip(coords, source_strides if into_padded else padded_strides,
                                      strict=True)))
    target_offset = E.linear(list(zip(coords, padded_strides if into_padded else source_strides,
                                      strict=True)))
    value: kir.Expr = kir.Load("p_src", source_offset)
    if into_padded:
        inside = E.conj([E.less(c, E.const(n))
                         for c, n, p in zip(coords, shape, padded_shape, strict=True) if n < p])
        if inside is not None:
            value = kir.Select(inside, value, kir.Float(0.0))
    body = (kir.If(E.less(element, E.const(total)),
                   (kir.Store("p_dst", target_offset, value),)),)
    params = (
        kir.Param("p_src", ctype, True, source_elements if into_padded else padded_elements),
        kir.Param("p_dst", ctype, True, padded_elements if into_padded else source_elements,
                  readonly=False),
    )
    return kir.Kernel(name, params, threads, max(1, -(-total // threads)), (), (),
                      (kir.PerThread(body),), itype,
                      comment=("pad" if into_padded else "crop") + f" {name}",
                      meta=(("compute_type", ctype),))


def plan_statement(problem: Problem, position: int, mapping: Mapping, name: str,
                   max_shared_bytes: int = 48 * 1024) -> Plan:
    """Launches for one statement: one kernel, or pad → exact kernel → crop."""
    if mapping.boundary != "pad":
        kernel = lower(problem, position, mapping, name, max_shared_bytes)
        return Plan((Launch(kernel, tuple(p.name[2:] for p in kernel.params if p.is_array)),))
    padded = padded_problem(problem, position, mapping)
    statement = problem.program.statements[position]
    main = lower(padded, 0, replace(mapping, boundary="exact"), name, max_shared_bytes)
    itype = max(index_type(problem), index_type(padded), key=len)
    launches: list[Launch] = []
    temporaries = []
    copied_in = [t.name for t in problem.program.tensors
                 if t.name in {a.tensor for a in statement.reads()}]
    output = statement.output.tensor
    for tensor in dict.fromkeys([*copied_in, output]):
        ctype = CTYPE[problem.program.tensor(tensor).dtype]
        temporaries.append((temporary(name, tensor), ctype, padded.numel(tensor)))
        if tensor in copied_in:
            launches.append(Launch(
                _copy(problem, padded, tensor, f"{name}_pad_{tensor}", True, itype),
                (tensor, temporary(name, tensor))))
    launches.append(Launch(main, tuple(temporary(name, p.name[2:]) for p in main.params
                                       if p.is_array)))
    launches.append(Launch(_copy(problem, padded, output, f"{name}_crop_{output}", False, itype),
                           (temporary(name, output), output)))
    return Plan(tuple(launches), tuple(temporaries))


def _copy(problem: Problem, padded: Problem, tensor: str, name: str, into_padded: bool,
          itype: str) -> kir.Kernel:
    ctype = CTYPE[problem.program.tensor(tensor).dtype]
    return copy_kernel(name, ctype, problem.shape(tensor), problem.strides(tensor),
                       padded.shape(tensor), padded.strides(tensor), problem.numel(tensor),
                       padded.numel(tensor), into_padded, itype)
