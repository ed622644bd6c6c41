"""Hopper ``wgmma`` probe: a hand-generated bf16 GEMM (cp.async into 128-byte
swizzled shared tiles, two consumer warpgroups, ``wgmma.mma_async`` reading both
operands through shared-memory descriptors) against torch.matmul in the same run.

It answers two questions before ``wgmma`` goes into einkern's kernel IR: which
descriptor fields (leading and stride byte offsets) address an MN-major operand,
checked by comparing every variant's result with torch; and what a cp.async
pipeline feeding ``wgmma`` reaches at GEMM 4096 and 8192 (CUDA events after
warm-up, L2 flushed, median of 15).  Needs an sm_90 GPU; compiles for sm_90a.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch
from mma_contractions import timed

from einkern.backends.cuda import driver
from einkern.backends.cuda.nvrtc import compile_cubin

SWIZZLE_128 = 1 << 62


@dataclass(frozen=True)
class Variant:
    """One probe kernel: block tile BM×BN (two warpgroups of 64 rows each), k-tile
    64, ``stages`` shared buffers; B given as K×N ("nn", MN-major in shared memory)
    or N×K ("nt", K-major); ``swap`` exchanges the MN-major descriptor's offsets."""

    bn: int = 256
    stages: int = 4
    layout: str = "nn"
    swap: bool = False
    bm: int = 128
    bk: int = 64
    group: int = 0  # consecutive blocks walk `group` M-tiles before the next N-tile

    @property
    def name(self) -> str:
        tag = "swap" if self.swap else "plain"
        raster = f" g{self.group}" if self.group else ""
        return f"{self.layout} {self.bm}x{self.bn} s{self.stages} {tag}{raster}"

    @property
    def threads(self) -> int:
        return self.bm // 64 * 128

    @property
    def stage_bytes(self) -> int:
        return (self.bm + self.bn) * self.bk * 2

    @property
    def shared_bytes(self) -> int:
        return self.stages * self.stage_bytes + 1024


def _wgmma(n: int, trans_b: int) -> str:
    """The asm statement of one m64n{n}k16 bf16 wgmma on descriptors da, db."""
    count = n // 2
    regs = ", ".join(f"%{i}" for i in range(count))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(count))
    body = (
        f"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{count + 2}, 0;\\n"
        f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 "
        f"{{{regs}}}, %{count}, %{count + 1}, p, 1, 1, 0, {trans_b};\\n}}\\n"
    )
    return f'asm volatile("{body}" : {outs} : "l"(da), "l"(db), "r"(1));'


def _raster(v: Variant, m: int, n: int) -> str:
    """Block origins bm0, bn0: row-major over the tile grid, or grouped."""
    if not v.group:
        return f"  const int bm0 = blockIdx.y * {v.bm}, bn0 = blockIdx.x * {v.bn};"
    tiles_n, g = n // v.bn, v.group
    return (
        f"  const int pid = blockIdx.x, first = pid / {g * tiles_n} * {g};\n"
        f"  const int bm0 = (first + pid % {g}) * {v.bm}, bn0 = pid % {g * tiles_n} / {g} * {v.bn};"
    )


def source(v: Variant, m: int, n: int, k: int) -> str:
    """CUDA C of one probe kernel for C[m,n] = A[m,k]·B (bf16 in, bf16 out)."""
    bm, bn, bk, s = v.bm, v.bn, v.bk, v.stages
    a_bytes = bm * bk * 2
    a_chunks, b_chunks = bm * bk // 8, bn * bk // 8
    if v.layout == "nn":
        lbo, sbo = (1024, bk * 128) if v.swap else (bk * 128, 1024)
        b_load = f"""
      for (int q = tid; q < {b_chunks}; q += {v.threads}) {{
        int kk = q / {bn // 8}, nc = q % {bn // 8};
        unsigned off = (nc / 8) * {bk * 128} + kk * 128 + (nc % 8) * 16;
        cp16(sb + swz(off), B + (size_t)(k0 + kk) * {n} + bn0 + nc * 8);
      }}"""
        b_desc = f"desc(sb + step * 2048, {lbo}, {sbo})"
        trans_b = 1
    else:
        b_load = f"""
      for (int q = tid; q < {b_chunks}; q += {v.threads}) {{
        int r = q / 8, c = q % 8;
        cp16(sb + swz(r * 128 + c * 16), B + (size_t)(bn0 + r) * {k} + k0 + c * 8);
      }}"""
        b_desc = "desc(sb + step * 32, 16, 1024)"
        trans_b = 0
    return f"""__device__ __forceinline__ unsigned pack(float lo, float hi) {{
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}}
__device__ __forceinline__ unsigned swz(unsigned off) {{ return off ^ ((off >> 3) & 0x70); }}
__device__ __forceinline__ void cp16(unsigned dst, const void* src) {{
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(src));
}}
__device__ __forceinline__ unsigned long long desc(unsigned addr, unsigned lbo, unsigned sbo) {{
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16)
       | ((unsigned long long)(sbo >> 4) << 32) | {SWIZZLE_128}ull;
}}
extern "C" __global__ void __launch_bounds__({v.threads}, 1)
probe(const unsigned short* __restrict__ A, const unsigned short* __restrict__ B,
      unsigned short* __restrict__ C) {{
  extern __shared__ unsigned char raw[];
  const unsigned base = ((unsigned)__cvta_generic_to_shared(raw) + 1023u) & ~1023u;
  const int tid = threadIdx.x, wg = tid / 128, lane = tid % 32, warp = (tid % 128) / 32;
{_raster(v, m, n)}
  float d[{bn // 2}];
  #pragma unroll
  for (int i = 0; i < {bn // 2}; ++i) d[i] = 0.0f;
  auto load = [&](int kt) {{
    if (kt < {k // bk}) {{
      const int k0 = kt * {bk};
      const unsigned sa = base + (kt % {s}) * {v.stage_bytes}, sb = sa + {a_bytes};
      for (int q = tid; q < {a_chunks}; q += {v.threads}) {{
        int r = q / 8, c = q % 8;
        cp16(sa + swz(r * 128 + c * 16), A + (size_t)(bm0 + r) * {k} + k0 + c * 8);
      }}{b_load}
    }}
    asm volatile("cp.async.commit_group;");
  }};
  #pragma unroll
  for (int kt = 0; kt < {s - 2}; ++kt) load(kt);
  for (int kt = 0; kt < {k // bk}; ++kt) {{
    asm volatile("cp.async.wait_group {s - 3};" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    load(kt + {s - 2});
    const unsigned sa = base + (kt % {s}) * {v.stage_bytes}, sb = sa + {a_bytes};
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    #pragma unroll
    for (int step = 0; step < {bk // 16}; ++step) {{
      const unsigned long long da = desc(sa + wg * 8192 + step * 32, 16, 1024);
      const unsigned long long db = {b_desc};
      {_wgmma(bn, trans_b)}
    }}
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
  }}
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  const int row = bm0 + wg * 64 + warp * 16 + lane / 4;
  #pragma unroll
  for (int j = 0; j < {bn // 8}; ++j) {{
    const int col = bn0 + j * 8 + (lane % 4) * 2;
    *(unsigned*)(C + (size_t)row * {n} + col) = pack(d[4 * j], d[4 * j + 1]);
    *(unsigned*)(C + (size_t)(row + 8) * {n} + col) =
        pack(d[4 * j + 2], d[4 * j + 3]);
  }}
}}
"""


def run_variant(v: Variant, size: int, a, b, reference) -> tuple[str, float | None, str]:
    """(name, ms or None, remark) of one variant on size³ with B given for its layout."""
    try:
        module = compile_cubin(source(v, size, size, size), "sm_90a")
    except Exception as error:  # report and go on: the probe compares variants
        return v.name, None, f"compile failed: {str(error)[:300]}"
    res = module.resources[0]
    function = driver.load_module(module.cubin, ["probe"]).functions["probe"]
    c = torch.empty(size, size, dtype=torch.bfloat16, device="cuda")
    operand = b if v.layout == "nn" else b.t().contiguous()
    grid = (size // v.bn, size // v.bm, 1)
    if v.group:
        grid = (grid[0] * grid[1], 1, 1)

    def launch():
        driver.launch(
            function,
            grid,
            (v.threads, 1, 1),
            [a.data_ptr(), operand.data_ptr(), c.data_ptr()],
            (),
            0,
            "probe",
            v.shared_bytes,
        )

    launch()
    torch.cuda.synchronize()
    error = ((c.float() - reference).norm() / reference.norm()).item()
    remark = f"{res.registers} regs, spill {res.spill_stores}, rel.err {error:.2e}"
    if error > 2e-2:
        return v.name, None, "WRONG " + remark
    return v.name, timed(launch), remark


def main(sizes: list[int]) -> None:
    variants = [
        Variant(layout="nt"),
        Variant(layout="nn"),
        Variant(layout="nt", group=8),
        Variant(layout="nn", group=8),
        Variant(layout="nn", group=16),
        Variant(layout="nn", bm=256, bn=128, group=8),
        Variant(layout="nt", bm=256, bn=128, group=8),
        Variant(layout="nn", bm=256, bn=128, stages=3, group=8),
    ]
    print(torch.cuda.get_device_name())
    for size in sizes:
        torch.manual_seed(size)
        a = torch.randn(size, size, device="cuda").to(torch.bfloat16)
        b = torch.randn(size, size, device="cuda").to(torch.bfloat16)
        reference = a.float() @ b.float()
        flops = 2.0 * size**3
        peer = timed(lambda a=a, b=b: torch.matmul(a, b))
        print(f"\nGEMM {size}: torch.matmul {peer:.3f} ms = {flops / peer / 1e9:.0f} TFLOP/s")
        for v in variants:
            name, ms, remark = run_variant(v, size, a, b, reference)
            if ms is None:
                print(f"  {name:28s}  --  {remark}")
            else:
                print(
                    f"  {name:28s} {ms:.3f} ms {flops / ms / 1e9:5.0f} TFLOP/s "
                    f"{peer / ms:.2f}x torch  {remark}"
                )


if __name__ == "__main__":
    main([int(s) for s in sys.argv[1:]] or [4096, 8192])
