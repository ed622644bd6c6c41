"""Tensor-core product-family kernels (einkern.gpu.mma_family) on the merged
CCSD(T) d1/d2 families, against the SIMT kernel of the same statement and,
with --peers, nine cuTENSOR and torch.einsum calls (issues 12 and 14).

Each variant's result is checked against the SIMT kernel's; CUDA events, L2
flushed, median of --runs, fresh random inputs (seed 0).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from gpu_fusion import PEERS, _peer_call  # this directory: the fusion script's peers

import einkern
from einkern.bench.cuda_device import CudaDevice
from einkern.bench.suites.ccsdt import family_program
from einkern.gpu.mapping import Mapping
from einkern.gpu.mma_config import STRATEGY, MmaConfig

HS, PS = ("h1", "h2", "h3"), ("p4", "p5", "p6")


def config(h: int, p: int, warps: tuple[int, int], k_step: int, stages: int) -> MmaConfig:
    box = tuple((i, h) for i in HS) + tuple((i, p) for i in PS)
    return MmaConfig("m16n8k4_f64", warps[0], warps[1], 1, 1, k_step, 0, stages, "async", box=box)


#: name: (h box, p box, warps, k-step (0: the whole extent T), stages)
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
}


def configs(tile: int) -> dict[str, MmaConfig]:
    return {
        name: config(h, p, warps, k_step or tile, stages)
        for name, (h, p, warps, k_step, stages) in SHAPES.items()
    }


def variants(family: str, tile: int, peers: bool):
    merged = family_program(family, tile)
    yield "SIMT (einkern default)", merged, None
    for name, cfg in configs(tile).items():
        yield name, merged, {0: Mapping(strategy=STRATEGY, parallel=(), mma=cfg)}
    if peers:
        for name in PEERS:
            yield f"{name} (9)", f"examples/ccsdt_{family}.ein", name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--tiles", default="16,24")
    parser.add_argument("--peers", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    device = CudaDevice()
    rows = []
    for family in ("d1", "d2"):
        for tile in (int(t) for t in args.tiles.split(",")):
            reference = None
            for name, program, how in variants(family, tile, args.peers):
                started = time.perf_counter()
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
                    inputs = device.random_inputs(kernel.problem, seed=0)
                    work = {n: device.copy(a) for n, a in inputs.items()}
                    result = run(**{n: device.copy(a) for n, a in work.items()})
                    error = 0.0
                    if reference is None:
                        reference = result
                    else:
                        error = device.relative_error(result, reference)
                    seconds = device.median_time(lambda r=run, w=work: r(**w), args.runs)
                except Exception as exc:  # a variant that does not compile or launch
                    print(f"{family} T={tile} {name}: {type(exc).__name__}: {exc}"[:400])
                    continue
                flops = 9 * 2 * tile**7
                row = dict(
                    family=family,
                    T=tile,
                    variant=name,
                    ms=seconds * 1e3,
                    tflops=flops / seconds / 1e12,
                    error=error,
                )
                rows.append(row)
                print(
                    f"{family} T={tile} {name:24} {row['ms']:8.3f} ms {row['tflops']:6.2f} "
                    f"TFLOP/s err {error:.1e} ({time.perf_counter() - started:.1f} s)",
                    flush=True,
                )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)
    print()
    print(
        f"{'family':6} {'T':>3} {'variant':24} {'ms':>8} {'TFLOP/s':>8} {'vs SIMT':>8} {'err':>8}"
    )
    simt = {(r["family"], r["T"]): r["ms"] for r in rows if r["variant"].startswith("SIMT")}
    for r in rows:
        ratio = simt.get((r["family"], r["T"]), float("nan")) / r["ms"]
        print(
            f"{r['family']:6} {r['T']:3} {r['variant']:24} {r['ms']:8.3f} {r['tflops']:8.2f} "
            f"{ratio:7.2f}x {r['error']:8.1e}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
