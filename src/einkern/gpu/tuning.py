"""The CUDA backend as a tuning target: mapping configurations of one statement,
compiled with NVRTC, checked and timed with CUDA events in a worker process."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir.nodes import Problem
from ..tuning.target import Config, Parameter, Timing, VariantError
from .decision import default_config
from .device import current_limits
from .model import predicted_time
from .space import config_to_mapping, parameters, violation


@dataclass(frozen=True)
class VariantLaunch:
    """One kernel launch of a variant, with the buffers bound to its array parameters."""

    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    buffers: tuple[str, ...]
    scalars: tuple[str, ...]


@dataclass(frozen=True)
class CompiledVariant:
    """What the worker needs to run one variant (picklable): the launches of its
    plan (one kernel, or padding copies around it) and its temporary buffers."""

    cubin: bytes
    launches: tuple[VariantLaunch, ...]
    temporaries: tuple[tuple[str, int], ...]  # (buffer, bytes)
    resources: tuple[tuple[str, Any], ...]


def single_statement(problem: Problem, position: int) -> Problem:
    """The problem reduced to statement ``position`` (and the tensors it touches)."""
    from ..ir.bind import make_problem, statement_program

    return make_problem(statement_program(problem.program, position), dict(problem.sizes))


class CudaTarget:
    """:class:`~einkern.tuning.target.TuningTarget` of the ``cuda`` backend."""

    backend = "cuda"

    def device_key(self) -> dict[str, str]:
        from ..backends.cuda import driver
        from ..backends.cuda.nvrtc import nvrtc_version

        props = driver.device_properties(0)
        cuda = driver._cuda()
        version = driver.check(cuda.cuDriverGetVersion(), "cuDriverGetVersion")
        return {
            "device": props.name,
            "compute_capability": f"{props.compute_capability[0]}.{props.compute_capability[1]}",
            "driver": str(version),
            "nvrtc": ".".join(map(str, nvrtc_version())),
        }

    def parameters(self, problem: Problem, position: int) -> tuple[Parameter, ...]:
        """The space's candidate values, each list extended by the default
        configuration's value when it lies outside (e.g. a register tile covering
        a whole extent of 12), so that the default is a point of the space."""
        default = self.default_config(problem, position)
        found = []
        for name, values in parameters(problem, position).items():
            if name in default and default[name] not in values:
                values = (*values, default[name])
            found.append(Parameter(name, values))
        return tuple(found)

    def violation(self, problem: Problem, position: int, config: Config) -> str | None:
        try:
            return violation(problem, position, config, current_limits())
        except (KeyError, TypeError, ValueError) as error:
            return f"malformed configuration: {error}"

    def default_config(self, problem: Problem, position: int) -> Config:
        return default_config(problem, position, current_limits())[0]

    def compile(self, problem: Problem, position: int, config: Config) -> CompiledVariant:
        from ..backends.cuda.nvrtc import compile_cubin
        from .cuda_printer import launch_shape, print_cuda_module
        from .padding import plan_statement

        limits = current_limits()
        mapping = config_to_mapping(problem, position, config)
        name = f"ek_tune_s{position}"
        plan = plan_statement(problem, position, mapping, name,
                              max_shared_bytes=limits.shared_per_block_optin)
        module = compile_cubin(print_cuda_module([launch.kernel for launch in plan.launches]),
                               limits.arch)
        found = [r for r in module.resources if r.name == name]
        resources = found[0] if found else None
        if resources is not None and resources.spill_stores > 0:
            raise VariantError("resources", f"{resources.spill_stores} bytes of register spills")
        launches = []
        for launch in plan.launches:
            shape = launch_shape(launch.kernel)
            launches.append(VariantLaunch(
                launch.kernel.name, shape.grid, shape.block, shape.dynamic_shared_bytes,
                launch.buffers, tuple(a.name[2:] for a in shape.arguments if not a.is_array)))
        return CompiledVariant(
            cubin=module.cubin,
            launches=tuple(launches),
            temporaries=tuple((buffer, elements * (4 if ctype == "float" else 8))
                              for buffer, ctype, elements in plan.temporaries),
            resources=() if resources is None else (
                ("registers", resources.registers), ("shared", resources.shared_memory),
                ("spill_stores", resources.spill_stores)),
        )

    def measure(self, problem: Problem, position: int, config: Config, compiled: Any,
                repeats: int, seed: int) -> Timing:
        return _measure(single_statement(problem, position), compiled, repeats, seed)

    def model_cost(self, problem: Problem, position: int, config: Config) -> float:
        mapping = config_to_mapping(problem, position, config)
        return predicted_time(problem, position, mapping, current_limits())


_REFERENCE: dict[tuple, dict] = {}


def _measure(problem: Problem, compiled: CompiledVariant, repeats: int, seed: int) -> Timing:
    """Check once against the reference (inputs drawn from ``seed``, computed once per
    problem in this worker), then time ``repeats`` launches with CUDA events, the L2
    flushed before each."""
    from ..backends.cuda import driver
    from ..reference import evaluate, relative_error
    from .verify import random_inputs

    driver.activate(0)
    key = (problem, seed)
    if key not in _REFERENCE:
        from ..testing import random_scalars  # (module level after the move to tuning/)

        arrays = random_inputs(problem, seed)
        scalars = random_scalars(problem, seed)
        _REFERENCE.clear()
        _REFERENCE[key] = {"arrays": arrays, "scalars": scalars,
                           "expected": evaluate(problem, arrays, scalars)}
    data = _REFERENCE[key]
    arrays, scalars = data["arrays"], data["scalars"]
    module = driver.load_module(compiled.cubin, [launch.name for launch in compiled.launches])
    pointers: dict[str, int] = {}
    flush_bytes = 2 * driver.device_properties(0).l2_cache_bytes
    flush = driver.alloc(flush_bytes)
    try:
        for name, array in arrays.items():
            pointers[name] = driver.alloc(array.nbytes)
            driver.copy_to_device(pointers[name], array.ctypes.data, array.nbytes)
        for buffer, nbytes in compiled.temporaries:
            pointers[buffer] = driver.alloc(nbytes)
        calls = [(module.functions[launch.name], launch.grid, launch.block,
                  [pointers[b] for b in launch.buffers],
                  [float(scalars[s]) for s in launch.scalars], 0, launch.name,
                  launch.shared_bytes) for launch in compiled.launches]

        def run() -> None:
            for call in calls:
                driver.launch(*call)

        run()
        driver.synchronize(compiled.launches[-1].name)
        output = problem.program.statements[0].output.tensor
        result = np.empty_like(arrays[output])
        driver.copy_to_host(result.ctypes.data, pointers[output], result.nbytes)
        error = relative_error(result, data["expected"][output])
        timer = driver.EventTimer()
        cuda = driver._cuda()
        times = []
        for _ in range(max(1, repeats)):
            driver.check(cuda.cuMemsetD8(flush, 0, flush_bytes), "cuMemsetD8")
            timer.start(0)
            run()
            times.append(timer.stop(0) * 1e-3)
        timer.close()
    finally:
        for pointer in pointers.values():
            driver.free(pointer)
        driver.free(flush)
        driver.check(driver._cuda().cuModuleUnload(module.handle), "cuModuleUnload")
    return Timing(tuple(times), error, compiled.resources)


def median_ms(timing: Timing) -> float:
    return statistics.median(timing.times) * 1e3
