"""Launch plans: the kernels that compute one task and the buffers they use.

A task is planned as a list of :class:`Launch` es (kernel + the buffers bound to
its array parameters) and temporary buffers; the CUDA backend and the emulator
both run that plan.  Without the ``pad`` boundary policy a plan is one kernel;
with it (see :mod:`einkern.gpu.padding`), a copy of every input into a padded
buffer, the exact kernel over the padded extents, and a crop of the output back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..ir.nodes import Problem
from ..ir.task import Task
from . import exprs as E
from . import kir
from .device import H100
from .lower import CTYPE, index_type, lower
from .mapping import Mapping
from .padding import padded_task


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


def copy_kernel(
    name: str,
    ctype: str,
    shape: tuple[int, ...],
    source_strides: tuple[int, ...],
    padded_shape: tuple[int, ...],
    padded_strides: tuple[int, ...],
    source_elements: int,
    padded_elements: int,
    into_padded: bool,
    itype: str,
) -> kir.Kernel:
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
    source_offset = E.linear(
        list(zip(coords, source_strides if into_padded else padded_strides, strict=True))
    )
    target_offset = E.linear(
        list(zip(coords, padded_strides if into_padded else source_strides, strict=True))
    )
    value: kir.Expr = kir.Load("p_src", source_offset)
    if into_padded:
        inside = E.conj(
            [
                E.less(c, E.const(n))
                for c, n, p in zip(coords, shape, padded_shape, strict=True)
                if n < p
            ]
        )
        if inside is not None:
            value = kir.Select(inside, value, kir.Float(0.0))
    body = (kir.If(E.less(element, E.const(total)), (kir.Store("p_dst", target_offset, value),)),)
    params = (
        kir.Param("p_src", ctype, True, source_elements if into_padded else padded_elements),
        kir.Param(
            "p_dst",
            ctype,
            True,
            padded_elements if into_padded else source_elements,
            readonly=False,
        ),
    )
    return kir.Kernel(
        name,
        params,
        threads,
        max(1, -(-total // threads)),
        (),
        (),
        (kir.PerThread(body),),
        itype,
        comment=("pad" if into_padded else "crop") + f" {name}",
        meta=(("compute_type", ctype),),
    )


def plan_task(
    task: Task, mapping: Mapping, name: str, max_shared_bytes: int = H100.shared_per_block_optin
) -> Plan:
    """Launches for one task: one kernel, or pad → exact kernel → crop.
    ``max_shared_bytes``: a block's shared memory with the opt-in launch attribute
    (the runtime sets it for kernels over 48 KiB)."""
    problem = task.problem
    if mapping.boundary != "pad":
        kernel = lower(task, mapping, name, max_shared_bytes)
        return Plan((Launch(kernel, tuple(p.name[2:] for p in kernel.params if p.is_array)),))
    grown = padded_task(task, mapping)
    padded = grown.problem
    statement = task.statement
    main = lower(grown, replace(mapping, boundary="exact"), name, max_shared_bytes)
    itype = max(index_type(problem), index_type(padded), key=len)
    launches: list[Launch] = []
    temporaries = []
    copied_in = [
        t.name for t in problem.program.tensors if t.name in {a.tensor for a in statement.reads()}
    ]
    output = statement.output.tensor
    for tensor in dict.fromkeys([*copied_in, output]):
        ctype = CTYPE[problem.program.tensor(tensor).dtype]
        temporaries.append((temporary(name, tensor), ctype, padded.numel(tensor)))
        if tensor in copied_in:
            launches.append(
                Launch(
                    _copy(problem, padded, tensor, f"{name}_pad_{tensor}", True, itype),
                    (tensor, temporary(name, tensor)),
                )
            )
    launches.append(
        Launch(main, tuple(temporary(name, p.name[2:]) for p in main.params if p.is_array))
    )
    launches.append(
        Launch(
            _copy(problem, padded, output, f"{name}_crop_{output}", False, itype),
            (temporary(name, output), output),
        )
    )
    return Plan(tuple(launches), tuple(temporaries))


def _copy(
    problem: Problem, padded: Problem, tensor: str, name: str, into_padded: bool, itype: str
) -> kir.Kernel:
    ctype = CTYPE[problem.program.tensor(tensor).dtype]
    return copy_kernel(
        name,
        ctype,
        problem.shape(tensor),
        problem.strides(tensor),
        padded.shape(tensor),
        padded.strides(tensor),
        problem.numel(tensor),
        padded.numel(tensor),
        into_padded,
        itype,
    )
