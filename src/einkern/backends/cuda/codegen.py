"""CUDA C for a problem: one ``extern "C" __global__`` kernel per statement.

Each kernel follows its statement's :class:`~.decision.DirectMapping`: one
thread per output element, the sums as register accumulators in sequential
(unrolled) loops, sizes and strides baked in as constants, guards where a
block overhangs an extent.  Kernels take the pointers of the tensors they
touch (the output first) and then the scalars they use, as ``double``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...ir.nodes import Access, Call, Problem, ScalarRef, Statement, walk
from .cexpr import C_TYPES, HELPERS, Context, Names, print_rhs
from .decision import (
    DEFAULT_LIMITS,
    DeviceLimits,
    DirectMapping,
    GridItem,
    ThreadAxis,
    decide,
    statement_tensors,
)


@dataclass(frozen=True)
class KernelSpec:
    """One generated kernel and how to launch it."""

    name: str
    statement: int  # position in the program
    tensors: tuple[str, ...]  # pointer parameters, in order (the output first)
    scalars: tuple[str, ...]  # double parameters after the pointers
    output: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    mapping: object  # DirectMapping (baseline) or einkern.gpu.mapping.Mapping
    shared_bytes: int = 0  # dynamic shared memory of the launch


@dataclass(frozen=True)
class CudaSource:
    """The CUDA C of a whole problem and its kernels, in statement order."""

    text: str
    kernels: tuple[KernelSpec, ...]
    temporaries: tuple[tuple[str, int], ...] = ()  # device buffers (name, bytes) of the launches


def emit(problem: Problem, limits: DeviceLimits = DEFAULT_LIMITS) -> str:
    """CUDA C source of ``problem`` (needs no GPU)."""
    return generate(problem, limits).text


def kernel_name(problem: Problem, position: int) -> str:
    program = re.sub(r"[^A-Za-z0-9_]", "_", problem.program.name)[:40]
    return f"ek_{program}_s{position}"


def generate(problem: Problem, limits: DeviceLimits = DEFAULT_LIMITS) -> CudaSource:
    """Source text and launch specifications of every statement's kernel."""
    program = problem.program
    specs, bodies = [], []
    for position, statement in enumerate(program.statements):
        mapping = decide(problem, statement, limits)
        spec, text = _kernel(problem, position, statement, mapping)
        specs.append(spec)
        bodies.append(text)
    sizes = ", ".join(f"{n}={v}" for n, v in problem.sizes if not n.isdigit())
    header = [
        f"// einkern CUDA backend, direct mapping: program {program.name}",
        f"// sizes: {sizes or 'none'}",
        "// one kernel per statement, one thread per output element; launch in order.",
        "",
    ]
    uses_helpers = any(
        isinstance(node, Call) and node.func in ("max", "min")
        for s in program.statements
        for node in walk(s.rhs)
    )
    text = "\n".join(header) + (HELPERS + "\n" if uses_helpers else "") + "\n".join(bodies)
    return CudaSource(text, tuple(specs))


def _offset(problem: Problem, names: Names, access: Access) -> str:
    """The element offset of ``access``, with the problem's sizes and strides baked in."""
    shape = problem.shape(access.tensor)
    strides = problem.strides(access.tensor)
    terms = []
    for index, extent, stride in zip(access.indices, shape, strides, strict=True):
        if extent == 1:
            continue  # the index is 0
        name = names.indices[index]
        terms.append(name if stride == 1 else f"{name} * {stride}")
    return " + ".join(terms) or "0"


def _kernel(
    problem: Problem, position: int, statement: Statement, mapping: DirectMapping
) -> tuple[KernelSpec, str]:
    program = problem.program
    tensors = statement_tensors(statement)
    scalars = tuple(
        dict.fromkeys(n.name for n in walk(statement.rhs) if isinstance(n, ScalarRef))
    )
    names = Names.make(tensors, scalars, statement.indices)
    it = mapping.index_type
    ctype = C_TYPES[mapping.compute_dtype]
    out = statement.output
    out_ctype = C_TYPES[program.tensor(out.tensor).dtype]
    name = kernel_name(problem, position)

    params = []
    for tensor in tensors:
        element = C_TYPES[program.tensor(tensor).dtype]
        const = "" if tensor == out.tensor else "const "
        params.append(f"{const}{element}* __restrict__ {names.tensors[tensor]}")
    params.extend(f"const double {names.scalars[s]}" for s in scalars)

    threads = mapping.block[0] * mapping.block[1]
    lines = [f"// statement {position}: {statement}"]
    lines.extend(f"//   {reason}" for reason in mapping.reasons)
    lines.append(f"//   launch: grid {mapping.grid_dims}, block {mapping.block}")
    lines.append(f'extern "C" __global__ void __launch_bounds__({threads})')
    signature = f"{name}({', '.join(params)})"
    if len(signature) > 100:
        signature = f"{name}(\n    " + ",\n    ".join(params) + ")"
    lines.append(signature)
    lines.append("{")
    body = _indices(mapping, names, it)

    out_name = names.tensors[out.tensor]
    body.append(f"const {it} ek_out = {_offset(problem, names, out)};")

    def address(access: Access) -> str:
        if access == out:
            return f"{out_name}[ek_out]"
        return f"{names.tensors[access.tensor]}[{_offset(problem, names, access)}]"

    ctx = Context(
        names=names,
        ctype=ctype,
        index_type=it,
        tensor_ctype={t: C_TYPES[program.tensor(t).dtype] for t in tensors},
        sizes={i: problem.index_size(statement, i) for i in statement.indices},
        address=address,
        loops=mapping.reductions,
    )
    sums, value = print_rhs(statement.rhs, ctx)
    body.extend(sums)
    body.append(_store(statement.op, f"{out_name}[ek_out]", value, ctype, out_ctype))
    lines.extend("    " + line if line else "" for line in body)
    lines.append("}")
    lines.append("")
    spec = KernelSpec(
        name=name,
        statement=position,
        tensors=tensors,
        scalars=scalars,
        output=out.tensor,
        grid=mapping.grid_dims,
        block=mapping.block,
        mapping=mapping,
    )
    return spec, "\n".join(lines)


def _store(op: str, target: str, value: str, ctype: str, out_ctype: str) -> str:
    if ctype == out_ctype:
        return f"{target} = {value};" if op == "=" else f"{target} {op} {value};"
    if op == "=":
        return f"{target} = ({out_ctype})({value});"
    return f"{target} = ({out_ctype})(({ctype}){target} {op[0]} ({value}));"


def _item_var(item: GridItem, names: Names) -> str:
    if item.tiles_of:
        return f"ek_tile_{item.tiles_of}"
    return names.indices[item.index]


def _indices(mapping: DirectMapping, names: Names, it: str) -> list[str]:
    """Declarations of every parallel index from the block and thread coordinates."""
    lines = []
    for index in mapping.constant:
        lines.append(f"const {it} {names.indices[index]} = 0;")
    for d, dim in enumerate(mapping.grid):
        block_index = f"({it})blockIdx.{'xyz'[d]}"
        divisor = 1
        for k, item in enumerate(dim):
            value = block_index if divisor == 1 else f"{block_index} / {divisor}"
            if k < len(dim) - 1:
                value = f"({value}) % {item.count}" if divisor > 1 else f"{value} % {item.count}"
            lines.append(f"const {it} {_item_var(item, names)} = {value};")
            divisor *= item.count
    guards = []
    for axis_name, axis in (("x", mapping.thread_x), ("y", mapping.thread_y)):
        if axis is not None:
            guards.extend(_thread_axis(axis_name, axis, mapping, names, it, lines))
    if guards:
        lines.append(f"if ({' || '.join(guards)}) return;")
    return lines


def _thread_axis(
    axis_name: str, axis: ThreadAxis, mapping: DirectMapping, names: Names, it: str, lines
) -> list[str]:
    """Declare the indices of a thread axis; return its guard conditions."""
    tiled = any(item.tiles_of == axis_name for dim in mapping.grid for item in dim)
    linear = f"({it})threadIdx.{axis_name}"
    if tiled:
        linear = f"ek_tile_{axis_name} * {axis.block} + {linear}"
    if len(axis.indices) == 1:
        var = names.indices[axis.indices[0]]
        lines.append(f"const {it} {var} = {linear};")
        return [f"{var} >= {axis.total}"] if axis.guarded else []
    lines.append(f"const {it} ek_{axis_name} = {linear};")
    divisor = 1
    for k, (index, extent) in enumerate(zip(axis.indices, axis.extents, strict=True)):
        value = f"ek_{axis_name}" if divisor == 1 else f"ek_{axis_name} / {divisor}"
        if k < len(axis.indices) - 1:
            value = f"({value}) % {extent}" if divisor > 1 else f"{value} % {extent}"
        lines.append(f"const {it} {names.indices[index]} = {value};")
        divisor *= extent
    return [f"ek_{axis_name} >= {axis.total}"] if axis.guarded else []
