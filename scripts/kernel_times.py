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

import torch

import einkern
from einkern.arrays import random_arrays
from einkern.backends.cuda.decision import statement_tensors


def copy_bandwidth() -> float:
    """Bytes per second of a 1 GiB device-to-device copy (read + write), median of 10."""
    a = torch.empty(1 << 27, dtype=torch.float64, device="cuda").uniform_()
    b = torch.empty_like(a)
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        b.copy_(a)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * a.numel() * 8 / sorted(times)[len(times) // 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("program")
    parser.add_argument("-e", "--extent", action="append", default=[])
    parser.add_argument("--mapping", default=None, help="mapping JSON of statement 0, or "
                        '{"N": mapping} per statement')
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    extents = {k: int(v) for k, v in (item.split("=", 1) for item in args.extent)}
    mappings = None
    if args.mapping:
        data = json.loads(open(args.mapping).read())
        mappings = ({int(k): v for k, v in data.items()} if "parallel" not in data
                    else {0: data})
    kernel = einkern.compile(args.program, backend="cuda", mappings=mappings, **extents)
    problem = kernel.problem
    arrays = {}
    for name, a in random_arrays(problem).items():  # in the declared layouts
        if a.flags.c_contiguous:
            arrays[name] = torch.from_numpy(a).cuda()
        else:  # column-major: the reversed-axes view of a row-major copy
            reverse = tuple(reversed(range(a.ndim)))
            arrays[name] = torch.from_numpy(a.transpose(reverse).copy()).cuda().permute(reverse)
    bandwidth = copy_bandwidth()
    times = kernel.executable.profile(arrays, {s.name: 0.5 for s in problem.program.scalars},
                                      repeat=args.repeat)
    print(f"copy bandwidth {bandwidth / 1e12:.3f} TB/s")
    statements = problem.program.statements
    for position, ms in enumerate(times):
        if position >= len(statements):
            print(f"kernel {position}: {ms * 1e3:9.1f} us")
            continue
        statement = statements[position]
        nbytes = sum(problem.nbytes(t) for t in statement_tensors(statement))
        if statement.output.tensor in {access.tensor for access in statement.reads()}:
            nbytes += problem.nbytes(statement.output.tensor)  # read, then written
        print(f"S{position}: {ms * 1e3:9.1f} us, floor {nbytes / bandwidth * 1e6:8.1f} us "
              f"({nbytes / bandwidth * 1e3 / ms:.0%}), {statements[position]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
