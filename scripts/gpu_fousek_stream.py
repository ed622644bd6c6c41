"""What a kernel of Fousek's function II can reach on this GPU (docs/fusion.md).

Function II reads four 5x5 matrices per element and returns one (F = A·B + A·C
+ A·D; M1..M4 are the function's locals).  Timed in one run, L2 flushed,
median of 50, against the fused floor (inputs read once, F written once, at
the copy bandwidth measured here): einkern's fused kernel; ``mix``, a pure
streaming kernel moving exactly the floor's bytes (one element per thread,
coalesced); hand-written CUDA of the function itself, one output element per
thread read straight from global memory (``direct``) or from the block's
inputs staged through shared memory by coalesced copies (``stagedN``: N
elements per block).  The ``mix`` row is what a kernel of these bytes reaches
at this size.
"""

from __future__ import annotations

import cupy as cp
import numpy as np

import einkern
from einkern.bench.cuda_device import CudaDevice

NBATCH = 31744
N = NBATCH * 25

ARGS = "const double* __restrict__ A, const double* __restrict__ B, "
ARGS += "const double* __restrict__ C, const double* __restrict__ D, double* F, int n"

SOURCE = f"""
extern "C" __global__ void mix({ARGS}) {{
  int e = blockIdx.x * blockDim.x + threadIdx.x; if (e >= n) return;
  F[e] = A[e] * (B[e] + C[e] + D[e]);
}}
__device__ double product(const double* a, const double* b, const double* c,
                          const double* d, int o, int i, int j) {{
  double m = 0;
  #pragma unroll
  for (int k = 0; k < 5; ++k) m += a[o + i * 5 + k] * (b[o + k * 5 + j] + c[o + k * 5 + j]
                                                      + d[o + k * 5 + j]);
  return m;
}}
extern "C" __global__ void direct({ARGS}) {{
  int e = blockIdx.x * blockDim.x + threadIdx.x; if (e >= n) return;
  F[e] = product(A, B, C, D, e / 25 * 25, (e / 5) % 5, e % 5);
}}
template <int NB> __device__ void staged({ARGS}) {{
  __shared__ double s[4][NB * 25];
  const int base = blockIdx.x * NB * 25;
  for (int e = threadIdx.x; e < NB * 25 && base + e < n; e += blockDim.x) {{
    s[0][e] = A[base + e]; s[1][e] = B[base + e]; s[2][e] = C[base + e]; s[3][e] = D[base + e];
  }}
  __syncthreads();
  for (int e = threadIdx.x; e < NB * 25 && base + e < n; e += blockDim.x)
    F[base + e] = product(s[0], s[1], s[2], s[3], e / 25 * 25, (e / 5) % 5, e % 5);
}}
extern "C" __global__ void staged8({ARGS}) {{ staged<8>(A, B, C, D, F, n); }}
extern "C" __global__ void staged16({ARGS}) {{ staged<16>(A, B, C, D, F, n); }}
"""

#: (kernel, threads per block, elements per block)
VARIANTS = [("mix", 256, 256)]
VARIANTS += [("direct", t, t) for t in (50, 100, 128, 256, 512)]
VARIANTS += [(f"staged{b}", t, b * 25) for b, t in ((8, 128), (8, 200), (16, 256), (16, 400))]


def main() -> None:
    device = CudaDevice()
    bandwidth = device.bandwidth()
    floor = 5 * N * 8 / bandwidth
    print(f"copy bandwidth {bandwidth / 1e12:.3f} TB/s, floor {floor * 1e3:.4f} ms")
    rng = np.random.default_rng(0)
    inputs = [cp.asarray(rng.uniform(0.5, 1.5, N)) for _ in range(4)]
    out = cp.empty(N)
    kernel = einkern.compile("examples/fousek_function2.mapped", backend="cuda")
    arrays = {k: a.reshape(NBATCH, 5, 5) for k, a in zip("ABCD", inputs, strict=True)}
    arrays["F"] = cp.empty((NBATCH, 5, 5))
    reference = cp.asarray(kernel(**arrays)).ravel().copy()
    seconds = device.median_time(lambda: kernel(**arrays), 50)
    print(f"{'einkern':10} {'':>4} {seconds * 1e3:8.4f} ms {100 * floor / seconds:5.1f}% floor")
    module = cp.RawModule(code=SOURCE, options=("--std=c++17",))
    for name, threads, per_block in VARIANTS:
        function = module.get_function(name)
        blocks = (N + per_block - 1) // per_block
        args = (*inputs, out, np.int32(N))

        def run(function=function, blocks=blocks, threads=threads, args=args) -> None:
            function((blocks,), (threads,), args)

        run()
        error = float(cp.max(cp.abs(out - reference)) / cp.max(cp.abs(reference)))
        seconds = device.median_time(run, 50)
        check = "" if name == "mix" else f"err {error:.1e}"
        percent = 100 * floor / seconds
        print(f"{name:10} {threads:4} {seconds * 1e3:8.4f} ms {percent:5.1f}% floor {check}")


if __name__ == "__main__":
    main()
