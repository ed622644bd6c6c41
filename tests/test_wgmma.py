"""Hopper warpgroup-MMA kernels (``wgmma`` from 128-byte swizzled shared tiles,
:mod:`einkern.gpu.mma_warpgroup`) run in the CPU emulator against the reference
on several index structures (K-major and M/N-major operands, batches, edges the
tiles do not divide); compiled by NVRTC for sm_90a without spills; refused where
they cannot run; and planted faults — the final wait dropped, the barrier
dropped, an operand's layout flipped, the tiles stored unswizzled, a descriptor
start off alignment — are caught."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_lowp_mma import ALIGNED, check, half_problem

from einkern.backends.verify import verify
from einkern.gpu import kir
from einkern.gpu.cuda_printer import print_cuda
from einkern.gpu.mma_lower import MmaConfig, lower_mma, problems
from einkern.gpu.mma_model import WARPGROUP_TILES
from einkern.gpu.mma_staging import Staging
from einkern.ir.task import statement_task
from einkern.testing import output_tolerance

pytest.importorskip("torch")  # bfloat16 host arrays


def tile(warps: int, tiles_n: int, stages: int = 3, kind: str = "bf16") -> MmaConfig:
    return MmaConfig(f"wgmma_k16_{kind}", warps, 1, 1, tiles_n, 64, stages=stages, copy="async")


#: Small tiles (the emulator runs every lane): one and two warpgroups, N = 64
#: and 128, 3 and 4 stages.
TILES = {"64x64 s3": tile(4, 8), "128x64 s4": tile(8, 8, 4), "64x128 s3": tile(4, 16)}


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", sorted(ALIGNED))
def test_index_structures(name, dtype):
    """gemm (K-major A, N-major B), column-major gemm (M-major A, K-major B), a
    four-index contraction, batches, an update with a scalar (M-major A, K-major
    B), all with edges the tiles do not divide."""
    kind = "bf16" if dtype == "bfloat16" else "f16"
    problem = half_problem(name, dtype, "float32", ALIGNED[name])
    for config in TILES.values():
        check(problem, replace(config, shape=f"wgmma_k16_{kind}"))


def test_sixteen_bit_output_and_the_default_tiles():
    problem = half_problem("gemm", "bfloat16", "bfloat16", dict(m=136, n=264, k=200))
    check(problem, TILES["64x64 s3"])
    for config in WARPGROUP_TILES["bfloat16"][2:]:  # 128x128 and 64x128: quick enough
        check(problem, config)


def test_refusals():
    problem = half_problem("gemm", "bfloat16", "float32", ALIGNED["gemm"])
    task = statement_task(problem, 0)
    assert any("k_step" in p for p in problems(task, replace(tile(4, 8), k_step=32)))
    assert any("warps_m" in p for p in problems(task, replace(tile(4, 8), warps_n=2)))
    assert any("stages" in p for p in problems(task, tile(4, 8, stages=2)))
    assert any("more than 256" in p for p in problems(task, tile(4, 40)))
    # B runs along N in shared memory: a 72-wide block tile is not whole 64-blocks
    assert any("multiple of 64" in p for p in problems(task, tile(4, 9)))
    unaligned = half_problem("gemm", "bfloat16", "float32", dict(m=45, n=37, k=70))
    assert any("cp.async" in p for p in problems(statement_task(unaligned, 0), tile(4, 8)))


def _edit(sections, change):
    out = []
    for s in sections:
        s = change(s)
        if s is None:
            continue
        if isinstance(s, kir.Uniform):
            s = replace(s, body=_edit(s.body, change))
        out.append(s)
    return tuple(out)


def _error(problem, kernel) -> tuple[float, int]:
    result = verify(problem, {0: None}, seed=2, kernels=[kernel])
    return result.max_relative_error, result.bad_accesses


def test_planted_faults_are_caught():
    problem = half_problem("gemm", "bfloat16", "float32", ALIGNED["gemm"])
    task = statement_task(problem, 0)
    kernel = lower_mma(task, TILES["128x64 s4"])
    tolerance = output_tolerance(problem, "C")
    assert _error(problem, kernel) == (pytest.approx(0.0, abs=tolerance), 0)

    def no_final_wait(s):
        return None if isinstance(s, kir.WarpGroupWait) and s.pending == 0 else s

    def flipped(s):
        if isinstance(s, kir.WarpGroupMma):
            return replace(s, b=replace(s.b, k_major=not s.b.k_major))
        return s

    def shifted(s):  # the A operand starts one 16-byte chunk later
        if isinstance(s, kir.WarpGroupMma):
            return replace(s, a=replace(s.a, index=kir.Op("+", s.a.index, kir.Int(8))))
        return s

    def off_alignment(s):
        if isinstance(s, kir.WarpGroupMma):
            return replace(s, a=replace(s.a, index=kir.Op("+", s.a.index, kir.Int(1))))
        return s

    faults = {
        "no final wait": replace(kernel, body=_edit(kernel.body, no_final_wait)),
        "no barrier": kir.without_barriers(kernel),
        "B layout flipped": replace(kernel, body=_edit(kernel.body, flipped)),
        "A start shifted": replace(kernel, body=_edit(kernel.body, shifted)),
    }
    for name, bad in faults.items():
        error, _ = _error(problem, bad)
        assert error > 100 * tolerance, name
    _, bad_accesses = _error(problem, replace(kernel, body=_edit(kernel.body, off_alignment)))
    assert bad_accesses > 0  # recorded as misaligned


def test_unswizzled_tiles_are_caught(monkeypatch):
    """Tiles stored without the XOR while the descriptors say 128-byte swizzle."""
    problem = half_problem("gemm", "bfloat16", "float32", ALIGNED["gemm"])
    task = statement_task(problem, 0)

    def plain(self, u, v, single=False):
        line = kir.Op("+", kir.Op("*", kir.Op("/", u, kir.Int(64)), kir.Int(self.lines)), v)
        return kir.Op("+", kir.Op("*", line, kir.Int(64)), kir.Op("%", u, kir.Int(64)))

    monkeypatch.setattr(Staging, "_swizzled", plain)
    error, _ = _error(problem, lower_mma(task, TILES["64x64 s3"]))
    assert error > 100 * output_tolerance(problem, "C")


def assert_sm90a_without_spills(text: str) -> None:
    """CUDA ``text`` compiles for sm_90 as sm_90a (wgmma needs the
    architecture-specific target), with no spills."""
    from einkern.backends.cuda.nvrtc import compile_cubin

    module = compile_cubin(text, "sm_90")
    assert module.arch == "sm_90a"
    assert all(r.spill_stores == 0 and r.spill_loads == 0 for r in module.resources)


def test_kernels_compile_for_sm90a_without_spills():
    pytest.importorskip("cuda.bindings.nvrtc")
    for name in ("gemm", "gemm-column", "four-index"):
        problem = half_problem(name, "bfloat16", "bfloat16", ALIGNED[name])
        for config in [*WARPGROUP_TILES["bfloat16"], *TILES.values()]:
            text = print_cuda(lower_mma(statement_task(problem, 0), config))
            assert "wgmma.mma_async.sync.aligned" in text and "fence.proxy.async" in text
            assert_sm90a_without_spills(text)
