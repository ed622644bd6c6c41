"""The 27 CCSD(T) triples statements in one product-family kernel on the GPU: the
pointwise (singles) terms summed in registers at the end (the default) or by a
loop over the box at the start (the fallback), beside the 18 doubles statements
alone (the kernel without pointwise terms).  CUDA events, L2 flushed, median of
``--runs``; each result checked against 27 unfused kernels' (issue 14)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpu_fusion import measure, outputs, workspace  # this directory: the fusion script's helpers

import einkern
import einkern.gpu.mma_family_pointwise as family
from einkern.bench.cuda_device import CudaDevice


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("-T", type=int, default=16)
    args = parser.parse_args()
    device = CudaDevice()
    text = Path("examples/ccsdt_triples.ein").read_text()
    doubles = "\n".join(line for line in text.splitlines() if "sd_t_s1" not in line)
    reference = einkern.compile(text, backend="cuda", fuse=False, T=args.T)
    work = workspace(device, reference.problem)
    want = outputs(device, reference, work)  # on copies: ``work`` stays as made
    registers = family.POINTWISE_REGISTERS
    for name, limit in (("registers", registers), ("loop", 0)):
        family.POINTWISE_REGISTERS = limit  # 0: every term falls back to the loop
        kernel = einkern.compile(f"{text}\n# {name}\n", backend="cuda", T=args.T)
        fresh = {n: device.copy(a) for n, a in work.items()}  # the timed calls update t3
        seconds, error, _ = measure(device, kernel, fresh, want, args.runs)
        print(
            f"T={args.T} 27 statements, pointwise by {name}: {kernel.kernels} kernel(s) "
            f"{seconds * 1e3:.4f} ms, error {error:.1e}",
            flush=True,
        )
    family.POINTWISE_REGISTERS = registers
    kernel = einkern.compile(doubles, backend="cuda", T=args.T)
    seconds, _, _ = measure(device, kernel, workspace(device, kernel.problem), None, args.runs)
    print(
        f"T={args.T} 18 doubles statements alone: {kernel.kernels} kernel(s) {seconds * 1e3:.4f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
