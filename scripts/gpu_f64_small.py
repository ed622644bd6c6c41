"""Same-run A/B of einkern's default fp64 kernel with and without the small
tensor-core tiles (``einkern.gpu.mma_model``: the 32×32, 32×64 and 64×32 tiles
of ``F64_TILE_EFFICIENCY`` and ``F64_MIN_FLOPS``), on the small cases of
scripts/f64_tile_cases.py (``generated_small`` of each ``--seeds``, and the
einsum chain's DGEMMs n = 96 ... 1024), and on ``--programs`` (.ein files, e.g.
contractions-suite cases whose default the tiles change).

"Before" is the default with the small tiles taken out of the decision and the
old flop threshold (``MIN_FLOPS``), patched in this process; "after" the code as
it is.  Cases whose generated source is the same both ways are listed, not
timed.  CUDA events after warm-up, L2 flushed before every call and the host's
work hidden behind a spin kernel (``CudaEventTimer``), median of ``--runs``, the
two kernels and torch taking turns, random inputs in [0.5, 1.5);
both results are checked against torch in float64 (error above 1e-12: not
timed).  One JSON object per case goes to ``--out``.

    PYTHONPATH=src:scripts python scripts/gpu_f64_small.py --seeds 41 43 --out s.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import re
import statistics
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from functools import cache
from pathlib import Path

import torch
from f64_tile_cases import fixed_small, generated_small, program_text
from gpu_f64_tiles import tensor

import einkern
from einkern.bench.cuda_device import CudaEventTimer
from einkern.gpu import mma_model


@cache
def timer() -> CudaEventTimer:
    """Events around each call, the L2 flushed and the host's work queued behind a
    spin kernel (einkern's calls bind their arguments in Python)."""
    return CudaEventTimer(torch, 256 << 20)


#: The small tiles: block tiles under 64 × 64.
SMALL = set(mma_model.F64_SMALL_TILES)


@contextmanager
def before():
    """The decision as it was without the small tiles."""
    saved = mma_model.F64_TILES, mma_model.F64_MIN_FLOPS
    mma_model.F64_TILES = tuple(t for t in saved[0] if t not in SMALL)
    mma_model.F64_MIN_FLOPS = mma_model.MIN_FLOPS
    try:
        yield
    finally:
        mma_model.F64_TILES, mma_model.F64_MIN_FLOPS = saved


def _operands(problem) -> dict[str, torch.Tensor]:
    """Random inputs (and a random output for updates) for every tensor of ``problem``."""
    program = problem.program
    made = {}
    for t in program.tensors:
        if t.temporary:
            continue
        made[t.name] = tensor(list(problem.shape(t.name)), t.layout)
    return made


def measure(label: str, text: str, extents: dict, runs: int) -> dict:
    """Both kernels of program ``text`` and torch's einsum of its statement."""
    with before():  # the source too: a kernel's source() decides its mappings again
        old = einkern.compile(text, backend="cuda", **extents)
        old_source = old.source()
    new = einkern.compile(text, backend="cuda", **extents)
    row = dict(case=label, same=old_source == new.source())
    if row["same"]:
        return row
    problem = new.problem
    statement = problem.program.statements[0]
    out = statement.output.tensor
    arrays = _operands(problem)
    reads = [a for a in statement.reads() if a.tensor != out]
    spec = ",".join("".join(a.indices) for a in reads) + "->" + "".join(statement.output.indices)
    product = torch.einsum(spec, *(arrays[a.tensor] for a in reads))
    start = arrays[out].clone()
    exact = {"=": product, "+=": start + product, "-=": start - product}[statement.op]
    runs_ = {"torch": lambda: torch.einsum(spec, *(arrays[a.tensor] for a in reads))}
    for name, kernel in (("before", old), ("after", new)):
        result = start.clone()
        given = {**arrays, out: result}
        kernel(**given)
        torch.cuda.synchronize()
        error = float((result - exact).abs().max() / exact.abs().max())
        row[f"{name}_error"] = error
        if error < 1e-12:
            runs_[name] = (lambda k, g: lambda: k(**g))(kernel, given)
    row.update(interleaved(runs_, runs))
    return row


def interleaved(runs: dict, repeats: int) -> dict[str, float]:
    """Median ms of each callable, the callables taking turns three calls at a time."""
    for run in runs.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(math.ceil(repeats / 3)):
        for name, run in runs.items():
            times[name] += timer().time(run, 3)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def _warm(job: tuple[str, dict]) -> None:
    """Compile one case both ways in a worker (fills the on-disk kernel cache)."""
    text, extents = job
    with before():
        einkern.compile(text, backend="cuda", **extents)
    einkern.compile(text, backend="cuda", **extents)


def cases(seeds: list[int], count: int, programs: list[str]) -> list[tuple[str, str, dict]]:
    """(label, program text, extents) of every case."""
    found = []
    for seed in seeds:
        for case in generated_small(count, seed) + (fixed_small() if seed == seeds[0] else []):
            text = program_text(case["spec"], case["layout"], case["op"])
            extents = {f"e{c}": v for c, v in case["sizes"].items()}
            found.append((f"s{seed} {case['spec']} {json.dumps(case['sizes'])} {case['layout']} "
                          f"{case['op']}", text, extents))  # fmt: skip
    for path in programs:
        found.append((Path(path).stem, Path(path).read_text(), {}))
    return found


def _group(label: str) -> str:
    """The summary group of a case: its seed (``s41``), or a program's name
    without its trailing numbers (``contractions_c2_080_080`` -> ``contractions_c2``)."""
    return re.sub(r"(_\d+)+$", "", label.split()[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="*", default=[41, 43])
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--programs", nargs="*", default=[])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--jobs", type=int, default=0, help="processes compiling ahead")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    found = cases(args.seeds, args.count, args.programs)
    if args.jobs:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(args.jobs, mp_context=context) as pool:
            list(pool.map(_warm, [(text, extents) for _, text, extents in found]))
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    ratios: dict[str, list[float]] = {}
    with open(args.out, "a") as f:
        for label, text, extents in found:
            row = measure(label, text, extents, args.runs)
            f.write(json.dumps(row) + "\n")
            f.flush()
            if row["same"]:
                print(f"{label:70s} unchanged", flush=True)
                continue
            b, a = row.get("before", math.nan), row.get("after", math.nan)
            ratios.setdefault(_group(label), []).append(b / a)
            print(f"{label:70s} before {b * 1e3:8.1f} us  after {a * 1e3:8.1f} us  "
                  f"{b / a:5.2f}x  torch {row['torch'] * 1e3:8.1f} us", flush=True)  # fmt: skip
    for group, values in ratios.items():
        mean = math.exp(sum(map(math.log, values)) / len(values))
        print(f"{group}: {len(values)} changed, after over before {mean:.3f}x "
              f"({min(values):.2f}-{max(values):.2f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
