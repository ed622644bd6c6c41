"""Issue 11's failure modes on the GPU: einkern.einsum (default mapping) vs
torch.einsum, fp64 unless stated; CUDA events after warm-up, L2 flushed, median.
Prints one line per case: ms, % of the DRAM floor (bytes of each tensor once /
copy bandwidth measured here), ratio to torch."""

from __future__ import annotations

import statistics
import sys
import time

import torch

import einkern

DEV = "cuda"
FLUSH = torch.empty(256 << 20, dtype=torch.uint8, device=DEV)


def timed(fn, repeats=15):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        FLUSH.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def bandwidth():
    x = torch.empty(1 << 28, dtype=torch.uint8, device=DEV)
    y = torch.empty_like(x)
    ms = timed(lambda: y.copy_(x))
    return 2 * x.numel() / (ms * 1e-3)


def case(name, spec, sizes, dtype=torch.float64, flops_peak=None):
    ins, out = spec.split("->")
    ops = []
    for term in ins.split(","):
        shape = [sizes[c] for c in term]
        ops.append(torch.randn(*shape, dtype=dtype, device=DEV))
    t0 = time.perf_counter()
    result = einkern.einsum(spec, *ops, backend="cuda")
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    ref = torch.einsum(spec, *ops)
    err = float((result - ref).abs().max() / ref.abs().max())
    ek = timed(lambda: einkern.einsum(spec, *ops, backend="cuda"))
    tt = timed(lambda: torch.einsum(spec, *ops))
    nbytes = sum(o.numel() * o.element_size() for o in ops) + ref.numel() * ref.element_size()
    floor = nbytes / BW * 1e3
    flops = 2 * 1.0
    for c in set(ins.replace(",", "")):
        flops *= sizes[c]
    print(
        f"{name:34s} einkern {ek:9.4f} ms ({floor / ek:6.1%} floor)  torch {tt:9.4f} ms "
        f"({floor / tt:6.1%})  ek/torch {tt / ek:5.2f}x  {flops / ek / 1e9:7.2f} TF/s  "
        f"err {err:.1e}  first {first:.1f}s",
        flush=True,
    )


BW = bandwidth()
print(f"copy bandwidth {BW / 1e12:.2f} TB/s", flush=True)
only = sys.argv[1:]
s16 = dict.fromkeys("abcdefg", 16)
CASES = [
    ("6idx order1 abce,edfg->abcdfg", "abce,edfg->abcdfg", s16),
    ("6idx order2 aebc,dfeg->gfdcba", "aebc,dfeg->gfdcba", s16),
    ("6idx order3 ceab,gfde->dabgcf", "ceab,gfde->dabgcf", s16),
    ("longred ik,jk->ij 64x2^17", "ik,jk->ij", {"i": 64, "j": 64, "k": 1 << 17}),
    ("longred ki,kj->ij 32x2^18", "ki,kj->ij", {"i": 32, "j": 32, "k": 1 << 18}),
    ("compute abkl,klcd->abcd 64", "abkl,klcd->abcd", dict.fromkeys("abcdkl", 64)),
    ("compute akbl,cldk->abcd 64", "akbl,cldk->abcd", dict.fromkeys("abcdkl", 64)),
    ("sgemm 256", "ij,jk->ik", dict.fromkeys("ijk", 256), torch.float32),
    ("sgemm 1024", "ij,jk->ik", dict.fromkeys("ijk", 1024), torch.float32),
    ("chain ij,jk,kl->il 96", "ij,jk,kl->il", dict.fromkeys("ijkl", 96)),
    ("chain ij,jk,kl->il 1024", "ij,jk,kl->il", dict.fromkeys("ijkl", 1024)),
]
for c in CASES:
    if only and not any(o in c[0] for o in only):
        continue
    try:
        case(*c)
    except Exception as error:  # noqa: BLE001 - a probe reports and goes on
        print(f"{c[0]:34s} FAILED {type(error).__name__}: {str(error)[:200]}", flush=True)
