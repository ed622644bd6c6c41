"""The CUDA generation pipeline: every statement lowered through the kernel IR
(:mod:`einkern.gpu.lower`) under its :class:`~einkern.gpu.mapping.Mapping` (given,
or the decision algorithm's) and printed by :mod:`einkern.gpu.cuda_printer`."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping as MappingType
from pathlib import Path

from ...errors import UsageError
from ...gpu.kir import ELEMENT_BYTES
from ...gpu.mapping import Mapping, MappingError
from ...ir.nodes import Problem
from ...ir.task import statement_task
from .codegen import CudaSource, KernelSpec
from .limits import device_limits
from .probe import register_probe

MappingSpec = MappingType[int, object] | None


def resolve_mappings(
    problem: Problem, mappings: MappingSpec = None, nests: Nests = ()
) -> dict[int, Mapping]:
    """A Mapping per statement: the given ones (Mapping, CudaConfig, either in JSON
    form as a dict or as text, or a JSON file of either), the decision
    algorithm's default for the others.
    The members of a group of ``nests`` none of which is given that can read their
    common input from one shared tile get the mappings that do so
    (:func:`einkern.gpu.shared_input.shared_input_mappings`); those of a group
    whose members depend on one another get the mappings of a block-local chain
    (:func:`einkern.gpu.chain.chain_mappings`) when one fits."""
    from ...gpu.chain import chain_mappings, dependent
    from ...gpu.config import CudaConfig, parse_config
    from ...gpu.decision import decide
    from ...gpu.shared_input import shared_input_mappings
    from ...gpu.space import config_to_mapping

    limits = device_limits()
    probe = register_probe(limits)
    chosen: dict[int, Mapping] = {}
    given = dict(mappings or {})
    for group in nests:
        if len(group) > 1 and not any(p in given for p in group):
            if dependent(problem, tuple(group)):
                found = chain_mappings(problem, tuple(group), limits)
                if found is not None:
                    chosen.update(zip(group, found.mappings, strict=True))
                continue
            shared = shared_input_mappings(problem, tuple(group), limits)
            if shared is not None:
                chosen.update(zip(group, shared.mappings, strict=True))
    for position in range(len(problem.program.statements)):
        spec = given.get(position)
        if spec is None and position in chosen:
            continue
        if spec is None:
            chosen[position] = decide(statement_task(problem, position), limits, probe)
        elif isinstance(spec, Mapping):
            chosen[position] = spec
        elif isinstance(spec, CudaConfig):
            chosen[position] = config_to_mapping(statement_task(problem, position), spec)
        elif isinstance(spec, dict | str | Path):  # a Mapping or a configuration, JSON
            data, source = (
                (spec, f"mapping of statement {position}")
                if isinstance(spec, dict)
                else _mapping_data(spec, position)
            )
            chosen[position] = (
                Mapping.from_json(json.dumps(data))
                if "parallel" in data
                else config_to_mapping(
                    statement_task(problem, position), parse_config(data, source)
                )
            )
        else:
            raise UsageError(f"cannot use {type(spec).__name__} as a mapping")
    return chosen


def _mapping_data(spec: str | Path, position: int) -> tuple[dict, str]:
    """The JSON object of a mapping given as a string or path, and what to call it
    in errors: a string that starts with ``{`` is the JSON itself (what
    :meth:`Mapping.to_json` returns), anything else names a file."""
    if isinstance(spec, str) and spec.lstrip().startswith("{"):
        text, source = spec, f"mapping of statement {position}"
    else:
        try:
            text, source = Path(spec).read_text(), str(spec)
        except FileNotFoundError:
            raise UsageError(f"no such mapping file: {spec}") from None
        except (OSError, UnicodeDecodeError) as error:
            raise UsageError(f"cannot read mapping file {spec}: {error}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise MappingError(f"{source}: not JSON ({error})") from None
    if not isinstance(data, dict):
        raise MappingError(f"{source}: not a mapping (a JSON object)")
    return data, source


def generate(problem: Problem, mappings: MappingSpec = None, nests: Nests = ()) -> CudaSource:
    """CUDA C of the whole problem under ``mappings``: per statement one kernel, or
    (boundary ``pad``) a padding copy per input, the kernel, and a crop copy.
    ``nests``: groups of consecutive statements that run as one kernel: one
    input staged once or sibling blocks (:mod:`.siblings`) when no dependence
    joins them, a block-local chain (:mod:`einkern.gpu.chain`) when one does; a
    group whose mappings allow neither stays apart."""
    from ...gpu.chain import dependent
    from ...gpu.cuda_printer import print_cuda_module
    from ...gpu.plan import Launch, plan_task

    limits = device_limits()
    chosen = resolve_mappings(problem, mappings, nests)
    program = re.sub(r"[^A-Za-z0-9_]", "_", problem.program.name)[:40]
    staged_once = _staged_once(problem, chosen, nests, program)
    staged_once.update(_chained(problem, chosen, nests, program))
    # sibling blocks run concurrently: never for members that depend on one another
    apart = tuple(n for n in nests if n not in staged_once and not dependent(problem, n))
    combined = _combined(problem, chosen, apart, program)
    first = {group[0]: spec for group, (spec, _) in combined.items()}
    inside = {p for group in [*combined, *staged_once] for p in group}
    kernels = []
    specs = []
    temporaries: list[tuple[str, int]] = []
    for position, statement in enumerate(problem.program.statements):
        if position in first:
            specs.append(first[position])
        for group, kernel in staged_once.items():
            if group[0] == position:
                kernels.append(kernel)
                launch = Launch(kernel, tuple(p.name[2:] for p in kernel.params if p.is_array))
                specs.append(_spec(launch, position, statement.output.tensor, chosen[position]))
        if position in inside:
            continue
        name = f"ek_{program}_s{position}"
        plan = plan_task(
            statement_task(problem, position),
            chosen[position],
            name,
            max_shared_bytes=limits.shared_per_block_optin,
        )
        temporaries.extend(
            (buffer, elements * ELEMENT_BYTES[ctype])
            for buffer, ctype, elements in plan.temporaries
        )
        for launch in plan.launches:
            kernels.append(launch.kernel)
            specs.append(_spec(launch, position, statement.output.tensor, chosen[position]))
    text = print_cuda_module(kernels)
    text += "".join("\n" + source for _, source in combined.values())
    return CudaSource(text, tuple(specs), tuple(temporaries))


Nests = tuple[tuple[int, ...], ...]


def _spec(launch, position: int, output: str, mapping: Mapping) -> KernelSpec:
    """How to launch ``launch`` (a :class:`einkern.gpu.plan.Launch`), a kernel of
    statement ``position``."""
    from ...gpu.cuda_printer import launch_shape
    from ...gpu.tma_text import map_buffers

    shape = launch_shape(launch.kernel)
    return KernelSpec(
        name=launch.kernel.name,
        statement=position,
        tensors=launch.buffers,
        scalars=tuple(a.name[2:] for a in shape.arguments if not a.is_array),
        output=output,
        grid=shape.grid,
        block=shape.block,
        mapping=mapping,
        shared_bytes=shape.dynamic_shared_bytes,
        maps=map_buffers(launch.kernel, launch.buffers),
    )


def _staged_once(problem: Problem, chosen: dict[int, Mapping], nests: Nests, program: str):
    """The one kernel of each group of ``nests`` whose mappings let it stage the
    members' common input once (:mod:`einkern.gpu.shared_input`)."""
    from ...gpu.shared_input import shared_input_kernel, why_not_shared

    groups = {}
    for positions in nests:
        if len(positions) > 1 and why_not_shared(problem, positions, chosen) is None:
            name = f"ek_{program}_s{positions[0]}_{positions[-1]}"
            groups[positions] = shared_input_kernel(problem, positions, chosen, name)
    return groups


def _chained(problem: Problem, chosen: dict[int, Mapping], nests: Nests, program: str):
    """The one kernel of each group of ``nests`` whose members depend on one
    another and whose mappings make a block-local chain (:mod:`einkern.gpu.chain`)."""
    from ...gpu.chain import chain_kernel, dependent, why_not_chain

    groups = {}
    for positions in nests:
        if (
            len(positions) > 1
            and dependent(problem, positions)
            and why_not_chain(problem, positions, chosen) is None
        ):
            name = f"ek_{program}_s{positions[0]}_{positions[-1]}"
            groups[positions] = chain_kernel(problem, positions, chosen, name)
    return groups


def sibling_members(
    problem: Problem, chosen: dict[int, Mapping], positions: tuple[int, ...], program: str
):
    """Each statement of ``positions`` lowered alone (one launch each), or None when
    one needs several launches (boundary ``pad``)."""
    from ...gpu.plan import plan_task
    from .siblings import Member

    members = []
    for position in positions:
        plan = plan_task(
            statement_task(problem, position),
            chosen[position],
            f"ekm_{program}_s{position}",
            max_shared_bytes=device_limits().shared_per_block_optin,
        )
        if len(plan.launches) != 1:
            return None
        members.append(Member(plan.launches[0].kernel, plan.launches[0].buffers))
    return members


def _combined(
    problem: Problem, chosen: dict[int, Mapping], nests: Nests, program: str
) -> dict[tuple[int, ...], tuple[KernelSpec, str]]:
    """The spec and source of each group of ``nests`` that runs as one kernel."""
    from .siblings import combine, why_not_combined

    groups: dict[tuple[int, ...], tuple[KernelSpec, str]] = {}
    for positions in nests:
        if len(positions) < 2:
            continue
        members = sibling_members(problem, chosen, positions, program)
        if members is None or why_not_combined(members) is not None:
            continue
        name = f"ek_{program}_s{positions[0]}_{positions[-1]}"
        kernel = combine(name, members)
        groups[positions] = (
            KernelSpec(
                name=name,
                statement=positions[0],
                tensors=kernel.buffers,
                scalars=kernel.scalars,
                output=problem.program.statements[positions[0]].output.tensor,
                grid=(kernel.blocks, 1, 1),
                block=(kernel.threads, 1, 1),
                mapping=chosen[positions[0]],
                shared_bytes=0,
            ),
            kernel.text,
        )
    return groups
