"""Fused against unfused kernels on the GPU (issue 14), for scripts/gpu_fusion.sh.

For each program: einkern's fused kernels (the planner's choice), the same
program with one kernel per statement, and for the CCSD(T) families the
benchmark's hand-merged statement (sd_t_<family>_all).  Each variant is timed
with CUDA events, L2 flushed before each call (median of ``--runs``), on the
same random inputs; its result is compared with the first variant's
(relative error); % floor is the fused floor (every tensor read once, outputs
written once) at the copy bandwidth measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import einkern
from einkern.bench.cuda_device import CudaDevice
from einkern.bench.cutensor import CutensorPeer
from einkern.bench.peers import EinsumPeer, _torch_ops
from einkern.bench.suites.ccsdt import family_program


def cases(quick: bool):
    """(program, variant, program text or path, extents, ``fuse`` argument)."""
    tiles = (16,) if quick else (16, 24)
    for family in ("d1", "d2", "s1"):
        for tile in tiles:
            path = f"examples/ccsdt_{family}.ein"
            group = f"ccsdt {family} T={tile}"
            yield group, "fused", path, {"T": tile}, True
            yield group, "hand-merged", family_program(family, tile), {}, True
            yield group, "unfused (9)", path, {"T": tile}, False
            yield group, "torch.einsum (9)", path, {"T": tile}, False
            yield group, "cuTENSOR (9)", path, {"T": tile}, False
    yield "ccsdt 27 T=16", "fused", "examples/ccsdt_triples.ein", {"T": 16}, True
    yield "ccsdt 27 T=16", "fused (measured)", "examples/ccsdt_triples.ein", {"T": 16}, "measure"
    yield "ccsdt 27 T=16", "unfused (27)", "examples/ccsdt_triples.ein", {"T": 16}, False
    yield "ccsdt 27 T=16", "torch.einsum (27)", "examples/ccsdt_triples.ein", {"T": 16}, False
    yield "ccsdt 27 T=16", "cuTENSOR (27)", "examples/ccsdt_triples.ein", {"T": 16}, False
    for name in ("fousek_function1", "fousek_function2"):
        path = f"examples/{name}.mapped"
        yield name, "fused", path, {}, True
        yield name, "unfused", path, {}, False
    for p in (8, 10, 12):
        for nelt in (32768, 1000):
            group = f"local_grad3 p={p} nelt={nelt}"
            extents = {"p": p, "nelt": nelt}
            yield group, "fused", "examples/local_grad3.ein", extents, True
            yield group, "unfused", "examples/local_grad3.ein", extents, False


#: Peers timed on the unfused program (one library call per statement).
PEERS = {
    "torch.einsum": EinsumPeer("torch.einsum", "cuda", _torch_ops),
    "cuTENSOR": CutensorPeer(),
}


def _peer_call(peer, problem):
    """``run(**arrays)`` through ``peer``, returning the outputs in program order
    (prepared once per set of arrays, so the timed calls are the library's alone)."""
    prepared = {}

    def run(**arrays):
        key = tuple(id(a) for a in arrays.values())
        if key not in prepared:
            prepared[key] = peer.prepare(None, problem, arrays, {})
        outputs = prepared[key]()
        values = tuple(outputs[name] for name in problem.program.outputs)
        return values[0] if len(values) == 1 else values

    return run


def workspace(device, problem) -> dict:
    """Device arrays for every tensor the caller passes (not the temporaries):
    random inputs (seed 0), the others empty."""
    inputs = device.random_inputs(problem, seed=0)
    work = {name: device.copy(array) for name, array in inputs.items()}
    for tensor in problem.program.tensors:
        if tensor.name not in work and not tensor.temporary:
            work[tensor.name] = device.empty(
                problem.shape(tensor.name), tensor.dtype, tensor.layout
            )
    return work


def outputs(device, run, work) -> tuple:
    """``run``'s outputs (a tuple) on copies of ``work``."""
    result = run(**{n: device.copy(a) for n, a in work.items()})
    return result if isinstance(result, tuple) else (result,)


def measure(device, run, work, reference, runs: int) -> tuple[float, float, tuple]:
    """Median seconds of ``run(**work)`` over ``runs`` calls (L2 flushed), the
    largest relative error of its outputs against ``reference`` (its own when
    None), and its outputs."""
    result = outputs(device, run, work)
    reference = result if reference is None else reference
    error = max(device.relative_error(r, f) for r, f in zip(result, reference, strict=True))
    return device.median_time(lambda: run(**work), runs), error, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default=None, help="write the rows here")
    parser.add_argument("--only", default=None, help="the programs whose name contains this")
    args = parser.parse_args()
    device = CudaDevice()
    bandwidth = device.bandwidth()
    print(f"copy bandwidth {bandwidth / 1e12:.3f} TB/s", flush=True)
    rows = []
    first: dict[str, object] = {}
    for group, variant, program, extents, fuse in cases(args.quick):
        if args.only is not None and args.only not in group:
            continue
        started = time.perf_counter()
        kernel = einkern.compile(program, backend="cuda", fuse=fuse, **extents)
        if fuse == "measure":
            print(f"{group:28} {variant}: {kernel.fusion.rule}", flush=True)
        problem = kernel.problem
        work = workspace(device, problem)
        run = kernel
        peer = PEERS.get(variant.split(" (")[0])
        if peer is not None:
            why = peer.available()
            if why is not None:
                print(f"{group:28} {variant:16} not run: {why}"[:200], flush=True)
                continue
            run = _peer_call(peer, problem)
        result = outputs(device, run, work)
        error = 0.0
        if group in first:
            pairs = zip(result, first[group], strict=True)
            error = max(device.relative_error(r, f) for r, f in pairs)
        else:
            first[group] = result
        seconds = device.median_time(lambda k=run, w=work: k(**w), args.runs)
        floor = kernel.fused_min_bytes / bandwidth
        row = {
            "group": group,
            "variant": variant,
            "kernels": kernel.kernels if peer is None else 0,
            "ms": seconds * 1e3,
            "floor_pct": 100 * floor / seconds,
            "error": error,
            "choice": [list(g.positions) for g in kernel.groups],
        }
        rows.append(row)
        print(
            f"{group:28} {variant:16} {row['kernels']:3} kernel(s) {seconds * 1e3:9.3f} ms "
            f"{row['floor_pct']:5.1f}% floor  err {error:.1e}  "
            f"({time.perf_counter() - started:.1f} s)",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)
    print()
    print(
        f"{'program':28} {'variant':16} {'kernels':>7} {'ms':>9} {'% floor':>8} "
        f"{'vs unfused':>10} {'err':>8}"
    )
    unfused = {r["group"]: r["ms"] for r in rows if str(r["variant"]).startswith("unfused")}
    for r in rows:
        ratio = unfused.get(r["group"], float("nan")) / r["ms"]
        print(
            f"{r['group']:28} {r['variant']:16} {r['kernels']:7} {r['ms']:9.3f} "
            f"{r['floor_pct']:7.1f}% {ratio:9.2f}x {r['error']:8.1e}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
