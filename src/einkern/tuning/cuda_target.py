"""The CUDA backend as a tuning target: mapping configurations of one task (the
GPU planner's space and decision), compiled with NVRTC, checked and timed with
CUDA events in a worker process.  The device's limits come from the runtime
(:func:`einkern.backends.cuda.limits.device_limits`)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..backends.cuda.limits import device_limits
from ..backends.cuda.probe import compile_task, register_probe
from ..gpu.block_order import with_block_orders
from ..gpu.config import CudaConfig
from ..gpu.decision import choose, default_config, explain
from ..gpu.gett import best_points as best_gett_points
from ..gpu.gett import split_candidates
from ..gpu.kir import TensorMap
from ..gpu.mma_family_model import family_candidates
from ..gpu.mma_model import mma_candidates
from ..gpu.model import predicted_time
from ..gpu.space import config_to_mapping, parameters, violation
from ..ir.nodes import Problem
from ..ir.task import Task
from .target import Config, Parameter, Timing, VariantError


@dataclass(frozen=True)
class VariantLaunch:
    """One kernel launch of a variant, with the buffers bound to its array parameters."""

    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    buffers: tuple[str, ...]
    scalars: tuple[str, ...]
    #: TMA tensor maps after the scalars, each with the buffer it describes
    maps: tuple[tuple[str, TensorMap], ...] = ()


@dataclass(frozen=True)
class CompiledVariant:
    """What the worker needs to run one variant (picklable): the launches of its
    plan (one kernel, or padding copies around it) and its temporary buffers."""

    cubin: bytes
    launches: tuple[VariantLaunch, ...]
    temporaries: tuple[tuple[str, int], ...]  # (buffer, bytes)
    resources: tuple[tuple[str, Any], ...]


def _own(config: Config) -> CudaConfig:
    """``config`` as the CUDA target's record (the tuner hands back what it was given)."""
    if not isinstance(config, CudaConfig):
        raise VariantError("invalid", f"not a CUDA configuration: {config!r}")
    return config


class CudaTarget:
    """:class:`~einkern.tuning.target.TuningTarget` of the ``cuda`` backend."""

    backend = "cuda"
    config_type = CudaConfig

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

    #: Product-family configurations the space offers beside the default's: the
    #: model's best (each evaluated beside its twin with shared accumulators).
    TUNED_FAMILY_POINTS = 4

    def parameters(self, task: Task) -> tuple[Parameter, ...]:
        """The space's candidate values, each list extended by the default
        configuration's and the rules' proposal's values when they lie outside (e.g.
        a register tile covering a whole extent of 12), so that both are points of
        the space (a tensor-core default adds ``mma`` and leaves the SIMT
        parameters it lacks optional); for a binary contraction also ``gett``
        (None: the rules' family) with the model's best GETT points, for a long
        sum ``split`` (None: one thread per output) with its best split points
        (and ``lanes``, None: the slowest thread digits, when one of them has
        it), whose values the other lists gain in the same
        way, and for an fp64 contraction ``mma`` (None: SIMT) with the tensor-core
        tile shapes; for a product family ``mma`` with the family model's best
        configurations."""
        limits = device_limits()
        default = default_config(task, limits, register_probe(limits))[0]
        splits = sorted(
            split_candidates(task, limits),
            key=lambda c: predicted_time(task, config_to_mapping(task, c), limits),
        )[:2]
        rules = explain(task, limits).config  # kept where the model's point is the default
        points = [default, rules, *best_gett_points(task, limits, count=2), *splits]
        space = dict(parameters(task))
        if any(p.split for p in points):  # None: one thread per output element
            space["split"] = (None, 8, 32, 128)
        if any(p.lanes for p in points):  # None: reduction threads the slowest digits
            space["lanes"] = (None,)
        if any(p.gett is not None for p in points):  # None: the rules' family
            space["gett"] = (None,)
            # a GETT point's staging has k-step 1 (its k-steps are in the tiling)
            stagings = [replace(s, k_step=1) for s in space["staging"]]
            space["staging"] = tuple(dict.fromkeys([*space["staging"], *stagings]))
        tiles = mma_candidates(task, tuning=True, arch=limits.arch)
        tiles = with_block_orders(task, tiles, limits)
        if tiles:  # None: the SIMT families
            space["mma"] = (None, *tiles)
        if any(p.mma is not None for p in points):  # a product family's default
            space.setdefault("mma", (None,))
        families = family_candidates(task, limits, self.TUNED_FAMILY_POINTS)
        if families:  # a product family: the model's best boxes, with(out) shared accumulators
            space["mma"] = tuple(dict.fromkeys([*space.get("mma", (None,)), *families]))
        found = []
        for name, values in space.items():
            for point in points:
                value = point.values().get(name)
                if value is None and point.mma is not None and None not in values:
                    values = (*values, None)  # a tensor-core point leaves SIMT ones out
                elif value is not None and value not in values:
                    values = (*values, value)
            found.append(Parameter(name, values))
        return tuple(found)

    def violation(self, task: Task, config: Config) -> str | None:
        if not isinstance(config, CudaConfig):
            return f"not a CUDA configuration: {config!r}"
        try:
            return violation(task, config, device_limits())
        except (KeyError, TypeError, ValueError) as error:
            return f"malformed configuration: {error}"

    def default_config(self, task: Task) -> Config:
        limits = device_limits()
        return default_config(task, limits, register_probe(limits))[0]

    def explain_default(self, task: Task) -> tuple[tuple[str, str], ...]:
        """The decision's (rule, reason) pairs for ``task`` (gpu/decision.RULES, and
        the cost model's choice between the rules' proposal and GETT points)."""
        limits = device_limits()
        return choose(task, limits, register_probe(limits)).steps

    def compile(self, task: Task, config: Config) -> CompiledVariant:
        from ..gpu.cuda_printer import launch_shape
        from ..gpu.tma_text import map_buffers

        limits = device_limits()
        mapping = config_to_mapping(task, _own(config))
        name = f"ek_tune_s{task.positions[0]}"
        plan, module, resources = compile_task(
            task, mapping, name, limits.arch, limits.shared_per_block_optin
        )
        if resources is not None and resources.spill_stores > 0:
            raise VariantError("resources", f"{resources.spill_stores} bytes of register spills")
        launches = []
        for launch in plan.launches:
            shape = launch_shape(launch.kernel)
            launches.append(
                VariantLaunch(
                    launch.kernel.name,
                    shape.grid,
                    shape.block,
                    shape.dynamic_shared_bytes,
                    launch.buffers,
                    tuple(a.name[2:] for a in shape.arguments if not a.is_array),
                    map_buffers(launch.kernel, launch.buffers),
                )
            )
        return CompiledVariant(
            cubin=module.cubin,
            launches=tuple(launches),
            temporaries=tuple(
                (buffer, elements * (4 if ctype == "float" else 8))
                for buffer, ctype, elements in plan.temporaries
            ),
            resources=()
            if resources is None
            else (
                ("registers", resources.registers),
                ("shared", resources.shared_memory),
                ("spill_stores", resources.spill_stores),
            ),
        )

    def measure(self, task: Task, config: Config, compiled: Any, repeats: int, seed: int) -> Timing:
        return _measure(task.view, compiled, repeats, seed)

    def model_cost(self, task: Task, config: Config) -> float:
        return predicted_time(task, config_to_mapping(task, _own(config)), device_limits())


_REFERENCE: dict[tuple, dict] = {}


def _measure(problem: Problem, compiled: CompiledVariant, repeats: int, seed: int) -> Timing:
    """Check once against the reference (inputs drawn from ``seed``, computed once per
    problem in this worker), then time ``repeats`` launches with CUDA events, the L2
    flushed before each."""
    from ..backends.cuda import driver
    from ..backends.cuda.tensor_maps import map_arguments
    from ..backends.verify import random_inputs
    from ..reference import evaluate, relative_error
    from ..testing import random_scalars

    driver.activate(0)
    key = (problem, seed)
    if key not in _REFERENCE:
        arrays = random_inputs(problem, seed)
        scalars = random_scalars(problem, seed)
        _REFERENCE.clear()
        _REFERENCE[key] = {
            "arrays": arrays,
            "scalars": scalars,
            "expected": evaluate(problem, arrays, scalars),
        }
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
        calls = [
            (
                module.functions[launch.name],
                launch.grid,
                launch.block,
                [pointers[b] for b in launch.buffers],
                [float(scalars[s]) for s in launch.scalars],
                0,
                launch.name,
                launch.shared_bytes,
                map_arguments(launch.maps, pointers),
            )
            for launch in compiled.launches
        ]

        def run() -> None:
            for call in calls:
                driver.launch(*call)

        run()
        driver.synchronize(compiled.launches[-1].name)
        error = 0.0
        for output in problem.program.outputs:
            result = np.empty_like(arrays[output])
            driver.copy_to_host(result.ctypes.data, pointers[output], result.nbytes)
            error = max(error, relative_error(result, data["expected"][output]))
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
