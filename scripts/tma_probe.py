"""Probe: does staging the warpgroup-MMA tiles by TMA (``cp.async.bulk.tensor``
on mbarriers, one thread issuing) instead of 16-byte ``cp.async`` by every thread
close the gap to cuBLAS on bf16 GEMM?  A hand-written kernel with the generated
default's structure (128 × 256 tile, two consumer warpgroups of m64n256k16, k-step
64 in 128-byte swizzled lines, 4 stages, 2 tiles ahead, blocks in groups of 16 M
tiles), its copies replaced by TMA; against torch and einkern's default in the
same run, interleaved (every variant sees the same power state), L2 flushed,
median of ``RUNS``.  Measures what the generator would gain before it is built.

    PYTHONPATH=src:scripts python scripts/tma_probe.py [N]
"""

from __future__ import annotations

import sys
from dataclasses import replace

import torch
from gpu_block_order import round_robin
from mma_contractions import checked

import einkern
from einkern.backends.cuda import driver
from einkern.backends.cuda.nvrtc import compile_cubin
from einkern.backends.cuda.tensor_maps import encoded
from einkern.gpu import kir
from einkern.gpu.decision import choose
from einkern.gpu.mma_lower import lower_mma
from einkern.ir.task import statement_task

RUNS = 20
BM, BN, BK, STAGES, GROUP = 128, 256, 64, 4, 16

KERNEL = r"""
struct __align__(64) ek_tmap { unsigned long long v[16]; };

__device__ __forceinline__ unsigned long long desc(unsigned a, unsigned leading, unsigned stride)
{
    return (unsigned long long)((a & 0x3FFFFu) >> 4)
        | ((unsigned long long)((leading & 0x3FFFFu) >> 4) << 16)
        | ((unsigned long long)((stride & 0x3FFFFu) >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void bar_wait(unsigned bar, unsigned parity)
{
    asm volatile("{\n.reg .pred P1;\nWAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
                 "@!P1 bra WAIT;\n}\n" :: "r"(bar), "r"(parity) : "memory");
}

__device__ __forceinline__ void tma2(unsigned dst, const ek_tmap *map, int c0, int c1, unsigned bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(dst), "l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}

#define WGMMA(DA, DB) asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" REGS "}, " \
  "%128, %129, p, 1, 1, 0, 1;\n}\n" \
  : ACC : "l"(DA), "l"(DB), "r"(1) : "memory")

extern "C" __global__ void __launch_bounds__(256, 1)
tma_gemm(float *C, const __grid_constant__ ek_tmap ta, const __grid_constant__ ek_tmap tb)
{
    extern __shared__ __align__(1024) unsigned char smem[];
    const int tid = threadIdx.x;
    const unsigned base = (unsigned)__cvta_generic_to_shared(smem);
    const unsigned as = base, bs = base + STAGES * BM * BK * 2;
    const unsigned bars = bs + STAGES * BK * BN * 2;
    const int per_group = GROUP * TILES_N;
    const int first = blockIdx.x / per_group * GROUP, local = blockIdx.x % per_group;
    const int row0 = (first + local % GROUP) * BM, col0 = local / GROUP * BN;
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.f;
    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bars + 8 * s) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
    const int steps = KDIM / BK;
    auto issue = [&](int t) {
        const int s = t % STAGES;
        const unsigned bar = bars + 8 * s;
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                     :: "r"(bar), "r"((BM + BN) * BK * 2) : "memory");
        tma2(as + s * BM * BK * 2, &ta, t * BK, row0, bar);
#pragma unroll
        for (int j = 0; j < BN / 64; ++j)
            tma2(bs + s * BK * BN * 2 + j * BK * 128, &tb, col0 + 64 * j, t * BK, bar);
    };
    if (tid == 0) { issue(0); if (steps > 1) issue(1); }
    const int group = tid / 128;
    for (int t = 0; t < steps; ++t) {
        const int s = t % STAGES;
        bar_wait(bars + 8 * s, (t / STAGES) & 1);
        __syncthreads();
        if (tid == 0 && t + 2 < steps) issue(t + 2);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
            const unsigned long long da =
                desc(as + s * BM * BK * 2 + group * 64 * 128 + ks * 32, 16, 1024);
            const unsigned long long db =
                desc(bs + s * BK * BN * 2 + ks * 16 * 128, BK * 128, 1024);
            WGMMA(da, db);
        }
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
#pragma unroll
        for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(acc[i]) :: "memory");
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#pragma unroll
    for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(acc[i]) :: "memory");
    const int warp = (tid % 128) / 32, lane = tid % 32;
    const int row = row0 + group * 64 + warp * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
        const int col = col0 + 8 * j + 2 * (lane % 4);
        *(float2 *)&C[(long long)row * NDIM + col] = make_float2(acc[4 * j], acc[4 * j + 1]);
        *(float2 *)&C[(long long)(row + 8) * NDIM + col] =
            make_float2(acc[4 * j + 2], acc[4 * j + 3]);
    }
}
"""


def source(n: int) -> str:
    regs = ", ".join(f"%{i}" for i in range(128))
    acc = ", ".join(f'"+f"(acc[{i}])' for i in range(128))
    defines = {
        "BM": BM, "BN": BN, "BK": BK, "STAGES": STAGES, "GROUP": GROUP,
        "TILES_N": n // BN, "KDIM": n, "NDIM": n,
    }  # fmt: skip
    head = "".join(f"#define {k} {v}\n" for k, v in defines.items())
    return head + f'#define REGS "{regs}"\n#define ACC {acc}\n' + KERNEL


def tensor_map(pointer: int, inner: int, outer: int, box_inner: int, box_outer: int):
    """The 128-byte TMA descriptor of a row-major bf16 matrix (``outer`` rows of
    ``inner`` elements), boxes of ``box_outer`` rows × ``box_inner`` elements,
    128-byte swizzle, zero fill (einkern's encoder)."""
    dims = (kir.MapDim("i", inner, 1, box_inner), kir.MapDim("o", outer, inner, box_outer))
    return encoded(kir.TensorMap("probe", "p", "ek_bf16", dims), pointer)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
    driver.initialize()
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    a = (torch.rand(n, n, device="cuda") + 0.5).bfloat16()
    b = (torch.rand(n, n, device="cuda") + 0.5).bfloat16()
    c = torch.empty(n, n, device="cuda")
    exact = a.double() @ b.double()
    module = compile_cubin(source(n), "sm_90a")
    print("registers", [r.registers for r in module.resources],
          "spills", [r.spill_stores for r in module.resources], flush=True)  # fmt: skip
    function = driver.load_module(module.cubin, ["tma_gemm"]).functions["tma_gemm"]
    maps = [tensor_map(a.data_ptr(), n, n, BK, BM), tensor_map(b.data_ptr(), n, n, 64, BK)]
    shared = STAGES * (BM + BN) * BK * 2 + 8 * STAGES
    blocks = (n // BM) * (n // BN)
    launch = driver.PreparedLaunch(function, (blocks, 1, 1), (256, 1, 1), shared, "tma_gemm")

    def tma():
        launch([c.data_ptr()], (), maps, torch.cuda.current_stream().cuda_stream)

    c.fill_(float("nan"))
    tma()
    torch.cuda.synchronize()
    err = float((c.double() - exact).abs().max() / exact.abs().max())
    print(f"tma probe error {err:.1e}", flush=True)
    text = (
        "program g\ndims m, n, k\ndtype bfloat16\ntensor A[m,k], B[k,n]\ntensor C[m,n] float32\n"
        "C[i,j] = A[i,k] * B[k,j]\n"
    )
    kernel = einkern.compile(text, backend="cuda", m=n, n=n, k=n)
    c2 = torch.empty(n, n, device="cuda")
    kernel(A=a, B=b, C=c2)
    err2 = float((c2.double() - exact).abs().max() / exact.abs().max())
    print(f"einkern default error {err2:.1e}", flush=True)
    runs = {
        "torch.matmul": lambda: torch.matmul(a, b),
        "einkern default": lambda: kernel(A=a, B=b, C=c2),
        "tma probe": tma,
    }
    # the default's tile launched directly (no runtime), staged by TMA and by cp.async
    task = statement_task(kernel.problem, 0)
    chosen = choose(task).config.mma
    print("default:", chosen.describe() if chosen else "simt", flush=True)
    arch = driver.device_properties().arch
    for copy in ("tma", "async") if chosen else ():
        c3 = torch.empty(n, n, device="cuda")
        generated = lower_mma(task, replace(chosen, copy=copy), f"gen_{copy}")
        pointers = [a.data_ptr(), b.data_ptr(), c3.data_ptr()]
        run, regs, spills, err3 = checked(generated, arch, pointers, c3, exact)
        print(f"generated {copy}: regs {regs} spills {spills} error {err3:.1e}", flush=True)
        runs[f"generated {copy}"] = run
    flops = 2.0 * n**3
    for rep in range(2):
        ms = round_robin(runs, RUNS)
        for name, t in ms.items():
            print(f"round {rep} {name:16s} {t:8.3f} ms {flops / t / 1e9:6.1f} TF/s "
                  f"{ms['torch.matmul'] / t:5.2f}x torch", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
