"""Run one program's kernels a few times on the GPU, for a profiler to watch.

    ncu --clock-control none --kernel-name regex:ek_ --launch-skip 2 --launch-count 1 \\
        python3 scripts/profile_kernels.py examples/sd_t_d1_1.ein -e T=16 \\
        --config '{"preload": false}'

``--config`` overrides keys of the decision's default configuration of every
statement (see einkern.gpu.space), ``--mapping`` gives a whole Mapping file.
Inputs are random, in the program's declared layouts (the benchmark's CudaDevice).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import einkern
from einkern.bench.cuda_device import CudaDevice
from einkern.gpu.decision import default_config
from einkern.gpu.mapping import Mapping
from einkern.ir.task import statement_task


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("program")
    parser.add_argument("--extent", "-e", action="append", default=[])
    parser.add_argument("--config", default=None, help="JSON object of configuration overrides")
    parser.add_argument("--mapping", default=None, help="a Mapping JSON file (statement 0)")
    parser.add_argument("--calls", type=int, default=4)
    args = parser.parse_args()
    extents = {k: int(v) for k, v in (e.split("=", 1) for e in args.extent)}
    program = einkern.load(Path(args.program).read_text())
    problem = einkern.make_problem(program, extents)
    mappings = None
    if args.mapping:
        mappings = {0: Mapping.from_json(Path(args.mapping).read_text())}
    elif args.config:
        change = json.loads(args.config)
        mappings = {
            p: {**default_config(statement_task(problem, p))[0].to_json(), **change}
            for p in range(len(program.statements))
        }
    kernel = einkern.compile(program, backend="cuda", mappings=mappings, **extents)
    device = CudaDevice()
    arrays = device.random_inputs(problem, seed=1)  # the declared layouts, on the GPU
    for _ in range(args.calls):
        kernel(**arrays)
    device.synchronize()
    print(f"{args.calls} calls of {program.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
