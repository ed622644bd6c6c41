"""Time of each kernel of a program on the GPU, with its share of the DRAM floor.

    python scripts/kernel_times.py examples/local_grad3.ein [-e NAME=VALUE ...]
        [--mapping FILE.json] [--repeat 20]

Each kernel is launched ``repeat`` times back to back (after one warm-up) and
its median is reported (einkern's CudaExecutable.profile); the floor of a
kernel is the bytes of the tensors it reads and writes, each once (an updated
output twice), at the copy bandwidth measured in the same run.  L2 is not
flushed between launches, so use it for kernels whose tensors are much larger
than L2.
"""

from __future__ import annotations

import argparse
import json

import einkern
from einkern.bench.cuda_device import CudaDevice


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("program")
    parser.add_argument("-e", "--extent", action="append", default=[])
    parser.add_argument(
        "--mapping",
        default=None,
        help='mapping JSON of statement 0, or {"N": mapping} per statement',
    )
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    extents = {k: int(v) for k, v in (item.split("=", 1) for item in args.extent)}
    mappings = None
    if args.mapping:
        data = json.loads(open(args.mapping).read())
        mappings = {int(k): v for k, v in data.items()} if "parallel" not in data else {0: data}
    kernel = einkern.compile(args.program, backend="cuda", mappings=mappings, **extents)
    problem = kernel.problem
    device = CudaDevice()
    arrays = device.random_inputs(problem, seed=0)  # in the declared layouts
    for tensor in problem.program.tensors:
        if tensor.name not in arrays:  # outputs only
            arrays[tensor.name] = device.empty(
                problem.shape(tensor.name), tensor.dtype, tensor.layout
            )
    bandwidth = device.bandwidth()
    times = kernel.executable.profile(
        arrays, {s.name: 0.5 for s in problem.program.scalars}, repeat=args.repeat
    )
    print(f"copy bandwidth {bandwidth / 1e12:.3f} TB/s")
    statements = problem.program.statements
    for position, ms in enumerate(times):
        if position >= len(statements):
            print(f"kernel {position}: {ms * 1e3:9.1f} us")
            continue
        statement = statements[position]
        nbytes = sum(problem.nbytes(t) for t in statement.tensors())
        if statement.output.tensor in {access.tensor for access in statement.reads()}:
            nbytes += problem.nbytes(statement.output.tensor)  # read, then written
        print(
            f"S{position}: {ms * 1e3:9.1f} us, floor {nbytes / bandwidth * 1e6:8.1f} us "
            f"({nbytes / bandwidth * 1e3 / ms:.0%}), {statements[position]}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
