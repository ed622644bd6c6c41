"""Mappings of the hand-merged CCSD(T) d1/d2 statements at T = 24 (issue 14).

At T = 16 the product-family mapping (two outputs per thread along every output
index but x, every slice staged per k-step) runs the nine-product statement at
~13 TFLOP/s; at T = 24 the rule table does not propose it and the statement falls
to a 4-outputs-per-thread register kernel.  This script times the T = 16 mapping
stretched to T = 24 in several block shapes (x tile, y tile and threads, k-step),
against the default (now the DMMA product family), checking each result against
the default's; CUDA events, L2 flushed, median of --runs.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys

from gpu_fusion import measure  # this directory: the fusion script's helpers

import einkern
from einkern.api import load
from einkern.bench.cuda_device import CudaDevice
from einkern.bench.suites.ccsdt import family_program
from einkern.gpu.decision import explain
from einkern.gpu.mapping import Mapping
from einkern.gpu.space import config_to_mapping
from einkern.ir.bind import make_problem
from einkern.ir.task import statement_task

#: name: (x tile, x threads, y tile, y threads, other tiles, k-step)
SHAPES = {
    "x24 y24/12": (24, 24, 24, 12, 2, 4),
    "x24 y12/6": (24, 24, 12, 6, 2, 4),
    "x24 y8/4": (24, 24, 8, 4, 2, 4),
    "x24 y6/3": (24, 24, 6, 3, 2, 4),
    "x24 y24/8": (24, 24, 24, 8, 2, 4),
    "x24 y12/6 k8": (24, 24, 12, 6, 2, 8),
    "x8 y24/12": (8, 8, 24, 12, 2, 4),
    "x24 y24/12 k2": (24, 24, 24, 12, 2, 2),
}


def template(family: str) -> dict:
    """The rules' SIMT mapping of the family's statement at T = 16 (the product-
    family rule's; the default there is now a tensor-core mapping, which has no
    parallel tiles to stretch), as JSON data."""
    task = statement_task(make_problem(load(family_program(family, 16)), {}), 0)
    rules = explain(task)
    return json.loads(config_to_mapping(task, rules.config, rules.reasons).to_json(None))


def stretched(base: dict, shape: tuple[int, ...]) -> Mapping:
    xt, xth, yt, yth, other, step = shape
    m = copy.deepcopy(base)
    m["parallel"][0].update(tile=xt, threads=xth)
    m["parallel"][1].update(tile=yt, threads=yth)
    for entry in m["parallel"][2:]:
        entry.update(tile=other, threads=1)
    m["k_step"] = [[m["k_step"][0][0], step]]
    return Mapping.from_json(json.dumps(m))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--tile", type=int, default=24)
    args = parser.parse_args()
    device = CudaDevice()
    rows = []
    for family in ("d1", "d2"):
        base = template(family)
        program = family_program(family, args.tile)
        variants: dict[str, dict | None] = {"default": None}
        variants.update({name: {0: stretched(base, s)} for name, s in SHAPES.items()})
        reference = None
        for name, mappings in variants.items():
            try:
                kernel = einkern.compile(program, backend="cuda", mappings=mappings)
                problem = kernel.problem
                inputs = device.random_inputs(problem, seed=0)
                work = {n: device.copy(a) for n, a in inputs.items()}
                seconds, error, result = measure(device, kernel, work, reference, args.runs)
                reference = result if reference is None else reference
            except Exception as exc:  # a candidate that does not compile or launch
                print(f"{family} {name}: {type(exc).__name__}: {exc}"[:300], flush=True)
                continue
            flops = 9 * 2 * args.tile**7
            rows.append((family, name, seconds * 1e3, flops / seconds / 1e12, error))
            print(
                f"{family} {name:16} {seconds * 1e3:8.3f} ms {rows[-1][3]:6.2f} TFLOP/s "
                f"err {error:.1e}",
                flush=True,
            )
    print()
    print(f"{'family':6} {'mapping':16} {'ms':>8} {'TFLOP/s':>8} {'err':>8}")
    for family, name, ms, rate, error in rows:
        print(f"{family:6} {name:16} {ms:8.3f} {rate:8.2f} {error:8.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
