"""What any kernel moving the floor's bytes reaches at issue 14's small sizes
(docs/fusion.md#what-a-kernel-of-these-bytes-reaches).

The floors of the Riemann-Christoffel statement (A and B read once, R written
once; n = 24, 32, 48) and of Fousek's function II (four 5x5 matrices read and
one written per element, 31744 elements) are bytes over the copy bandwidth of a
1 GiB copy.  At these sizes a kernel's fixed costs (launch, the first DRAM
round trips, the tail of the last wave) are a large share of the floor, so the
issue's percentages are bounded by what a pure copy of the same bytes reaches.
This script times, in one run (CUDA events, L2 flushed before each call, the
GPU kept busy over the host's launch; median of ``--runs``): an empty kernel;
copies of A into R (one double per thread, double2, four double2 per thread,
grid-stride loops of 132-1056 blocks; 128-1024 threads) and ``cupy.copyto``;
Fousek II's arithmetic on its own bytes, one or two double2 per thread.  The
fastest of each is printed last with its share of the floor.

    PYTHONPATH=src python scripts/gpu_stream_bounds.py [--runs 50]
"""

from __future__ import annotations

import argparse

import cupy as cp
import numpy as np

from einkern.bench.cuda_device import CudaDevice

SOURCE = r"""
extern "C" __global__ void empty() {}
extern "C" __global__ void c1(const double* __restrict__ a, double* __restrict__ b, long n) {
  long e = blockIdx.x * (long)blockDim.x + threadIdx.x; if (e < n) b[e] = a[e]; }
extern "C" __global__ void c2(const double2* __restrict__ a, double2* __restrict__ b, long n) {
  long e = blockIdx.x * (long)blockDim.x + threadIdx.x; if (e < n) b[e] = a[e]; }
extern "C" __global__ void c2x4(const double2* __restrict__ a, double2* __restrict__ b, long n) {
  long e = blockIdx.x * (long)blockDim.x * 4 + threadIdx.x; double2 v[4];
  #pragma unroll
  for (int u = 0; u < 4; ++u) if (e + u * blockDim.x < n) v[u] = a[e + u * blockDim.x];
  #pragma unroll
  for (int u = 0; u < 4; ++u) if (e + u * blockDim.x < n) b[e + u * blockDim.x] = v[u]; }
extern "C" __global__ void gs(const double2* __restrict__ a, double2* __restrict__ b, long n) {
  for (long e = blockIdx.x * (long)blockDim.x + threadIdx.x; e < n;
       e += (long)gridDim.x * blockDim.x) b[e] = a[e]; }
__device__ double2 f(double2 a, double2 b, double2 c, double2 d) {
  return make_double2(a.x * (b.x + c.x + d.x), a.y * (b.y + c.y + d.y)); }
extern "C" __global__ void f2(const double2* __restrict__ A, const double2* __restrict__ B,
    const double2* __restrict__ C, const double2* __restrict__ D, double2* __restrict__ F, long n) {
  long e = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (e < n) F[e] = f(A[e], B[e], C[e], D[e]); }
extern "C" __global__ void f2x2(const double2* __restrict__ A, const double2* __restrict__ B,
    const double2* __restrict__ C, const double2* __restrict__ D, double2* __restrict__ F, long n) {
  long e0 = blockIdx.x * (long)blockDim.x * 2 + threadIdx.x; double2 a[2], b[2], c[2], d[2];
  #pragma unroll
  for (int u = 0; u < 2; ++u) { long e = e0 + u * blockDim.x;
    if (e < n) { a[u] = A[e]; b[u] = B[e]; c[u] = C[e]; d[u] = D[e]; } }
  #pragma unroll
  for (int u = 0; u < 2; ++u) { long e = e0 + u * blockDim.x;
    if (e < n) F[e] = f(a[u], b[u], c[u], d[u]); } }
"""

THREADS = (128, 256, 512, 1024)
FOUSEK_ELEMENTS = 31744 * 25


def _copies(module, a, b, count):
    """(name, launch) of every copy variant of ``count`` doubles from a to b."""
    pairs = count // 2
    found = [("cupy.copyto", lambda: cp.copyto(b, a))]
    for threads in THREADS:
        for name, per, n in (("c1", 1, count), ("c2", 1, pairs), ("c2x4", 4, pairs)):
            kernel, grid = module.get_function(name), (-(-n // (per * threads)),)
            found.append(
                (
                    f"{name} {threads}",
                    lambda k=kernel, g=grid, t=threads, n=n: k(g, (t,), (a, b, np.int64(n))),
                )
            )
        for blocks in (132, 264, 528, 1056):
            kernel = module.get_function("gs")
            found.append(
                (
                    f"gs {blocks}x{threads}",
                    lambda k=kernel, g=blocks, t=threads: k((g,), (t,), (a, b, np.int64(pairs))),
                )
            )
    return found


def _fousek(module, inputs, out):
    """(name, launch) of Fousek II's arithmetic on its floor's bytes."""
    pairs = FOUSEK_ELEMENTS // 2
    found = []
    for name, per in (("f2", 1), ("f2x2", 2)):
        for threads in (64, 128, 256, 512, 1024):
            kernel, grid = module.get_function(name), (-(-pairs // (per * threads)),)
            found.append(
                (
                    f"{name} {threads}",
                    lambda k=kernel, g=grid, t=threads: k(g, (t,), (*inputs, out, np.int64(pairs))),
                )
            )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    device = CudaDevice()
    bandwidth = device.bandwidth()
    module = cp.RawModule(code=SOURCE)
    empty = module.get_function("empty")
    idle = device.median_time(lambda: empty((1,), (32,), ()), args.runs)
    print(f"copy bandwidth {bandwidth / 1e12:.3f} TB/s; an empty kernel {idle * 1e3:.4f} ms")
    table = []
    for n in (24, 32, 48):
        floor = 8 * (2 * n**4 + n**3) / bandwidth
        a = cp.random.random(n**4)
        b = cp.empty_like(a)
        timed = [
            (device.median_time(run, args.runs), name) for name, run in _copies(module, a, b, n**4)
        ]
        table.append((f"Riemann n = {n}", floor, min(timed)))
    floor = 5 * FOUSEK_ELEMENTS * 8 / bandwidth
    inputs = [cp.random.random(FOUSEK_ELEMENTS) for _ in range(4)]
    out = cp.empty(FOUSEK_ELEMENTS)
    timed = [
        (device.median_time(run, args.runs), name) for name, run in _fousek(module, inputs, out)
    ]
    table.append(("Fousek II", floor, min(timed)))
    print(f"{'bytes of':18} {'floor ms':>9} {'fastest copy':>18} {'ms':>8} {'% floor':>8}")
    for name, floor, (seconds, which) in table:
        share = 100 * floor / seconds
        print(f"{name:18} {floor * 1e3:9.4f} {which:>18} {seconds * 1e3:8.4f} {share:7.1f}%")


if __name__ == "__main__":
    main()
