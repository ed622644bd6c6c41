"""Tensor-core product-family kernels (einkern.gpu.mma_family) on the merged
CCSD(T) d1/d2 families, against the default kernel of the same statement and,
with --peers, nine cuTENSOR and torch.einsum calls (issues 12 and 14).

Sixteen named shapes (five with terms sharing accumulators, ``group_terms``)
and the SIMT kernel of the decision's rules (issue 12's baseline), and with
``--grid N`` N more drawn (``--seed``) from boxes x instruction shapes x warps x
k-steps x stages x shared accumulators; ``--jobs`` processes compile
them ahead (NVRTC, registers and spills recorded). Each variant's result is
checked against the default kernel's; CUDA events, L2 flushed, median of
--runs, random inputs (seed 0) made once per case. ``--json`` rows carry the
configuration, the family model's prediction, registers and spills (the model's
rates are fitted on them).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from functools import cache

from gpu_fusion import PEERS, _peer_call, measure  # this directory: the fusion script's helpers

import einkern
from einkern.bench.cuda_device import CudaDevice
from einkern.bench.suites.ccsdt import family_program
from einkern.gpu.decision import explain
from einkern.gpu.device import H100
from einkern.gpu.mapping import Mapping
from einkern.gpu.mma import SHAPES as INSTRUCTIONS
from einkern.gpu.mma_config import STRATEGY, MmaConfig
from einkern.gpu.mma_family import box_order, family_of, problems, shared_bytes
from einkern.gpu.mma_family_model import _boxes, family_terms
from einkern.gpu.space import config_to_mapping
from einkern.ir.task import statement_task

HS, PS = ("h1", "h2", "h3"), ("p4", "p5", "p6")


@cache
def _task(family: str, tile: int):
    """The merged statement of ``family`` at extent ``tile`` as a task."""
    return statement_task(einkern.make_problem(einkern.load(family_program(family, tile)), {}), 0)


def config(
    h: int, p: int, warps: tuple[int, int], k_step: int, stages: int, shared: bool = False
) -> MmaConfig:
    box = tuple((i, h) for i in HS) + tuple((i, p) for i in PS)
    return MmaConfig(
        "m16n8k4_f64", warps[0], warps[1], 1, 1, k_step, 0, stages, "async", box=box,
        group_terms=shared,
    )  # fmt: skip


#: name: (h box, p box, warps, k-step (0: the whole extent T), stages[, terms
#: sharing accumulators])
SHAPES = {
    "h4p4 w2x2 k8 s2": (4, 4, (2, 2), 8, 2),
    "h4p4 w2x2 kT s2": (4, 4, (2, 2), 0, 2),
    "h4p4 w2x2 k8 s3": (4, 4, (2, 2), 8, 3),
    "h4p4 w2x2 k4 s4": (4, 4, (2, 2), 4, 4),
    "h4p2 w1x2 k8 s2": (4, 2, (1, 2), 8, 2),
    "h4p2 w1x2 kT s2": (4, 2, (1, 2), 0, 2),
    "h4p2 w1x2 k8 s3": (4, 2, (1, 2), 8, 3),
    "h4p2 w1x1 k8 s3": (4, 2, (1, 1), 8, 3),
    "h2p4 w2x1 k8 s3": (2, 4, (2, 1), 8, 3),
    "h8p2 w2x2 k8 s3": (8, 2, (2, 2), 8, 3),
    "h2p8 w2x2 k8 s3": (2, 8, (2, 2), 8, 3),
    "h4p4 w2x2 k8 s3 shared": (4, 4, (2, 2), 8, 3, True),
    "h4p4 w1x4 k8 s3 shared": (4, 4, (1, 4), 8, 3, True),
    "h4p4 w2x2 k8 s4 shared": (4, 4, (2, 2), 8, 4, True),
    "h8p2 w2x2 k8 s3 shared": (8, 2, (2, 2), 8, 3, True),
    "h8p2 w1x4 k8 s3 shared": (8, 2, (1, 4), 8, 3, True),
}


def configs(tile: int) -> dict[str, MmaConfig]:
    return {
        name: config(h, p, warps, k_step or tile, stages, *shared)
        for name, (h, p, warps, k_step, stages, *shared) in SHAPES.items()
    }


#: the grid's axes (--grid): instruction shapes, warps, k-steps (0: T), stages
GRID_SHAPES = ("m16n8k4_f64", "m16n8k8_f64", "m16n8k16_f64")
GRID_WARPS = ((1, 1), (1, 2), (2, 1), (2, 2), (1, 4), (4, 1), (2, 4), (4, 2))
GRID_KSTEPS = (8, 16, 0)
GRID_STAGES = (2, 3, 4)
#: boxes beside the candidate generator's: (h, p) extents of h1..h3 and p4..p6
GRID_BOXES = ((4, 4), (4, 2), (2, 4), (8, 2), (2, 8), (2, 2))


def grid(family: str, tile: int, sample: int, seed: int) -> dict[str, MmaConfig]:
    """``sample`` valid configurations drawn (``seed``) from the grid of boxes
    (the candidate generator's and :data:`GRID_BOXES`), instruction shapes,
    warps, k-steps and stages that fit an H100's shared memory."""
    task = _task(family, tile)
    fam = family_of(task)
    boxes = [tuple(sorted(b.items())) for b in _boxes(dict(fam.extents), box_order(fam))]
    boxes += [tuple(sorted([*((i, h) for i in HS), *((i, p) for i in PS)])) for h, p in GRID_BOXES]
    points = []
    for box in dict.fromkeys(boxes):
        for shape in GRID_SHAPES:
            for wm, wn in GRID_WARPS:
                for k in GRID_KSTEPS:
                    k_step = k or -(-tile // INSTRUCTIONS[shape].k) * INSTRUCTIONS[shape].k
                    for stages in GRID_STAGES:
                        for shared in (False, True):
                            points.append(
                                MmaConfig(
                                    shape, wm, wn, 1, 1, k_step, 0, stages, "async", box=box,
                                    group_terms=shared,
                                )
                            )  # fmt: skip
    random.Random(seed).shuffle(points)
    found: dict[str, MmaConfig] = {}
    for config in points:
        if len(found) >= sample:
            break
        if (
            problems(task, config, fam)
            or shared_bytes(task, config, fam) > H100.shared_per_block_optin
        ):
            continue
        found["grid " + config.to_json()] = config
    return found


def predicted(family: str, tile: int, config: MmaConfig) -> float:
    """The family model's seconds (the larger of its DRAM and arithmetic terms)."""
    terms = family_terms(_task(family, tile), config, H100)
    return max(terms.dram, terms.arithmetic)


def _resources(job: tuple[str, int, str]) -> dict:
    """Compile one variant for sm_90 (fills the CUBIN cache; needs no GPU)."""
    from einkern.backends.cuda.resources import kernel_resources

    family, tile, text = job
    problem = _task(family, tile).problem
    mapping = (
        None
        if not text
        else {0: Mapping(strategy=STRATEGY, parallel=(), mma=MmaConfig.from_json(text))}
    )
    try:
        (found,) = kernel_resources(problem, "sm_90", mapping)
    except Exception as exc:  # reported, and the variant is skipped later
        return dict(error=f"{type(exc).__name__}: {exc}"[:300])
    return dict(registers=found.registers, spill=found.spill_stores, stack=found.stack_frame)


def simt_mapping(family: str, tile: int) -> dict:
    """The SIMT kernel the decision's rules propose for the merged statement (what
    the default was before tensor cores): issue 12 compares with it."""
    task = _task(family, tile)
    return {0: config_to_mapping(task, explain(task, H100).config)}


def variants(family: str, tile: int, peers: bool, chosen: dict[str, MmaConfig]):
    merged = family_program(family, tile)
    yield "einkern default", merged, None
    yield "SIMT (the rules' proposal)", merged, simt_mapping(family, tile)
    for name, cfg in chosen.items():
        yield name, merged, {0: Mapping(strategy=STRATEGY, parallel=(), mma=cfg)}
    if peers:
        for name in PEERS:
            yield f"{name} (9)", f"examples/ccsdt_{family}.ein", name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--tiles", default="16,24")
    parser.add_argument("--families", default="d1,d2")
    parser.add_argument("--peers", action="store_true")
    parser.add_argument("--grid", type=int, default=0, help="also this many grid points each")
    parser.add_argument("--seed", type=int, default=0, help="the grid sample's seed")
    parser.add_argument("--jobs", type=int, default=1, help="processes compiling ahead")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    cases = [(f, int(t)) for f in args.families.split(",") for t in args.tiles.split(",")]
    chosen = {}
    for family, tile in cases:
        chosen[family, tile] = dict(configs(tile))
        if args.grid:
            chosen[family, tile].update(grid(family, tile, args.grid, args.seed))
    jobs = [(f, t, "") for f, t in cases]
    jobs += [(f, t, c.to_json()) for (f, t), named in chosen.items() for c in named.values()]
    started = time.perf_counter()
    with ProcessPoolExecutor(max(1, args.jobs)) as pool:
        resources = dict(zip(jobs, pool.map(_resources, jobs), strict=True))
    print(f"compiled {len(jobs)} kernels in {time.perf_counter() - started:.0f} s", flush=True)
    device = CudaDevice()
    rows = []
    for family, tile in cases:
        reference = inputs = None
        for name, program, how in variants(family, tile, args.peers, chosen[family, tile]):
            started = time.perf_counter()
            cfg = None if not isinstance(how, dict) else how[0].mma
            info = resources.get((family, tile, cfg.to_json() if cfg else ""), {})
            if "error" in info:
                print(f"{family} T={tile} {name}: {info['error']}")
                continue
            try:
                if isinstance(how, str):
                    kernel = einkern.compile(program, backend="cuda", fuse=False, T=tile)
                    peer = PEERS[how]
                    if peer.available() is not None:
                        print(f"{name}: {peer.available()}"[:200], flush=True)
                        continue
                    run = _peer_call(peer, kernel.problem)
                else:
                    kernel = einkern.compile(program, backend="cuda", mappings=how)
                    run = kernel
                if inputs is None:
                    inputs = device.random_inputs(kernel.problem, seed=0)
                work = {n: device.copy(a) for n, a in inputs.items()}
                seconds, error, result = measure(device, run, work, reference, args.runs)
                reference = result if reference is None else reference
            except Exception as exc:  # a variant that does not compile or launch
                print(f"{family} T={tile} {name}: {type(exc).__name__}: {exc}"[:400])
                continue
            flops = 9 * 2 * tile**7
            row = dict(
                family=family,
                T=tile,
                variant=name,
                config=cfg.to_json() if cfg else None,
                predicted_ms=predicted(family, tile, cfg) * 1e3 if cfg else None,
                ms=seconds * 1e3,
                tflops=flops / seconds / 1e12,
                error=error,
                **info,
            )
            rows.append(row)
            print(
                f"{family} T={tile} {name[:60]:60} {row['ms']:8.3f} ms {row['tflops']:6.2f} "
                f"TFLOP/s err {error:.1e} regs {info.get('registers')} spill {info.get('spill')} "
                f"({time.perf_counter() - started:.1f} s)",
                flush=True,
            )
            if args.json:  # after every row: a timed-out run keeps what it measured
                with open(args.json, "w") as handle:
                    json.dump(rows, handle, indent=1)
    print()
    print(f"{'family':6} {'T':>3} {'variant':60} {'ms':>8} {'vs dflt':>8} {'err':>8}")
    default = {(r["family"], r["T"]): r["ms"] for r in rows if r["variant"] == "einkern default"}
    best = {}
    for r in rows:
        key = (r["family"], r["T"])
        if r["config"] and (key not in best or r["ms"] < best[key]["ms"]):
            best[key] = r
    for r in [r for r in rows if not r["variant"].startswith("grid")] + list(best.values()):
        ratio = default.get((r["family"], r["T"]), float("nan")) / r["ms"]
        print(
            f"{r['family']:6} {r['T']:3} {r['variant'][:60]:60} {r['ms']:8.3f} "
            f"{ratio:7.2f}x {r['error']:8.1e}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
