"""Tensor-core kernels (einkern.gpu.mma_lower) for contractions of any index
structure, run in the CPU emulator against the NumPy reference; every variant
compiles with NVRTC without spills."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import problem_of

from einkern.backends.emulator import emulate
from einkern.gpu import exprs as E
from einkern.gpu.contraction import NotAContraction, contraction_of
from einkern.gpu.cuda_printer import print_cuda
from einkern.gpu.mma_lower import MmaConfig, lower_mma, problems
from einkern.ir.task import statement_task
from einkern.reference import evaluate
from einkern.testing import random_arrays, random_scalars

PROGRAMS = {
    "gemm": ("tensor A[m,k], B[k,n], C[m,n]\nC[i,j] = A[i,k] * B[k,j]", dict(m=40, n=24, k=20)),
    "gemm-column": (
        "layout column\ntensor A[m,k], B[k,n], C[m,n]\nC[i,j] = A[i,k] * B[k,j]",
        dict(m=33, n=17, k=9),
    ),
    "four-index": (
        "tensor A[a,k,b,l], B[l,c,k,d], C[a,b,c,d]\nC[p,q,r,s] = A[p,x,q,y] * B[y,r,x,s]",
        dict(a=6, b=5, c=7, d=3, k=4, l=3),
    ),
    "batched": (
        "layout column\ntensor A[b,m,k], B[b,k,n], C[b,m,n]\nC[z,i,j] = A[z,i,x] * B[z,x,j]",
        dict(b=3, m=20, n=12, k=10),
    ),
    "update-scaled": (
        "tensor A[k,m], B[n,k], C[m,n]\nscalar alpha\nC[i,j] += alpha * A[x,i] * B[j,x]",
        dict(m=18, n=30, k=13),
    ),
    "subtract": ("tensor A[m,k], B[k,n], C[n,m]\nC[j,i] -= A[i,x] * B[x,j]", dict(m=16, n=8, k=8)),
    "bias": (
        "tensor A[m,k], B[k,n], C[m,n], D[m,n], E[n]\nscalar beta\n"
        "C[i,j] = A[i,x] * B[x,j] + beta * D[i,j] - 2 * E[j]",
        dict(m=40, n=24, k=20),
    ),
    "bias-update-column": (
        "layout column\ntensor A[m,k], B[k,n], C[n,m], D[m,n]\nC[j,i] -= D[i,j] + A[i,x] * B[x,j]",
        dict(m=33, n=17, k=9),
    ),
    "gemm-column-even": (
        "layout column\ntensor A[m,k], B[k,n], C[m,n]\nC[i,j] = A[i,k] * B[k,j]",
        dict(m=48, n=40, k=36),
    ),
    # the output's contiguous index p is the slowest of the N group by B's strides
    "output-contiguous-moved": (
        "tensor A[l,x,v], B[p,v,w,n,x,a], C[n,l,w,a,v,p]\n"
        "C[n,l,w,a,v,p] = A[l,x,v] * B[p,v,w,n,x,a]",
        dict(l=9, x=3, v=3, p=5, w=4, n=4, a=4),
    ),
    # three summed indices against one M and one N index: the copies share
    # their k decodes (TileBuilder.shares_k); K = 105 is no multiple of a k-step
    "long-sum": (
        "tensor A[m,a,b,c], B[a,c,n,b], C[m,n]\nC[i,j] = A[i,x,y,z] * B[x,z,j,y]",
        dict(m=20, n=12, a=3, b=5, c=7),
    ),
    # B's contiguous index is k: its copies run along k (one k position each)
    "long-sum-k-contiguous": (
        "tensor A[m,a,b], B[n,a,b], C[m,n]\nC[i,j] = A[i,x,y] * B[j,x,y]",
        dict(m=24, n=10, a=6, b=11),
    ),
    "six-index-out": (
        "tensor A[a,b,c,k], B[k,d,e,f], C[f,a,d,b,e,c]\nC[u,p,s,q,t,r] = A[p,q,r,x] * B[x,s,t,u]",
        dict(a=3, b=4, c=2, d=3, e=2, f=5, k=6),
    ),
}

CONFIGS = {
    "default": MmaConfig(),
    "two-stage": MmaConfig("m16n8k4_f64", 2, 2, 2, 4, 16, stages=2),
    "small": MmaConfig("m16n8k4_f64", 1, 1, 1, 1, 4, 0),
    "m8n8k4": MmaConfig("m8n8k4_f64", 2, 1, 1, 2, 8, 1),
    "k8-wide": MmaConfig("m16n8k8_f64", 1, 2, 2, 2, 16, 2),
    "k16": MmaConfig("m16n8k16_f64", 2, 2, 1, 1, 32, 1),
    "one-stage": MmaConfig("m16n8k4_f64", 2, 1, 2, 2, 8, stages=1),
    "async-2": MmaConfig("m16n8k4_f64", 2, 2, 2, 2, 8, stages=2, copy="async"),
    "async-3": MmaConfig("m16n8k8_f64", 1, 2, 2, 2, 16, stages=3, copy="async"),
    "async-4": MmaConfig("m16n8k4_f64", 2, 2, 1, 2, 4, stages=4, copy="async"),
}

#: cp.async pipelines of 3, 2 and 4 stages, k-steps of 4 and 2 instruction
#: k-steps (fragments carried or not, copies sharing k decodes or not).
ASYNC_PIPELINES = (
    MmaConfig("m16n8k4_f64", 2, 2, 1, 2, 16, stages=3, copy="async"),
    MmaConfig("m16n8k4_f64", 1, 2, 2, 1, 8, stages=2, copy="async"),
    MmaConfig("m16n8k8_f64", 2, 1, 1, 2, 16, stages=4, copy="async"),
)


def _problem(name: str):
    text, extents = PROGRAMS[name]
    dims = ", ".join(extents)
    return problem_of(f"program t\ndims {dims}\ndtype float64\n{text}\n", **extents)


def _check(name: str, config: MmaConfig, seed: int = 0) -> None:
    problem = _problem(name)
    _check_kernel(problem, lower_mma(statement_task(problem, 0), config), seed)


def _check_kernel(problem, kernel, seed: int = 0) -> None:
    arrays = random_arrays(problem, seed)
    scalars = random_scalars(problem, seed)
    want = evaluate(problem, arrays, scalars)
    out = problem.program.statements[0].output.tensor
    given = {f"p_{k}": v.copy(order="K") for k, v in arrays.items()}
    report = emulate([kernel], given, {f"s_{k}": v for k, v in scalars.items()})
    assert report.ok, report
    np.testing.assert_allclose(given[f"p_{out}"], want[out], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_default_tiles_any_index_structure(name):
    _check(name, CONFIGS["default"])


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_every_shape_and_tile(config):
    for name in ("four-index", "update-scaled"):
        _check(name, CONFIGS[config], seed=3)


@pytest.mark.parametrize("carried", [True, False])
@pytest.mark.parametrize(
    "name", ["gemm", "gemm-column", "gemm-column-even", "batched", "subtract", "four-index"]
)
def test_fragments_carried_across_the_barrier(name, carried):
    """fp64 tiles whose next fragments are loaded after the k-step's barrier
    (``TileBuilder.carried``), and the same tiles without, on every layout: 2, 3
    and 4 stages, k-steps of 2 and 4 instruction k-steps, partial tiles."""
    problem = _problem(name)
    task = statement_task(problem, 0)
    for config in ASYNC_PIPELINES:
        _check_kernel(problem, lower_mma(task, config, carried=carried), seed=7)


@pytest.mark.parametrize("name", ["long-sum", "long-sum-k-contiguous"])
def test_copies_share_their_k_decodes(name):
    """Where the k group has more indices than an operand's M or N group, the
    copies of a k-step decode each distinct k position once, into a local (the
    position clamped to the last, the copy's guard on the unclamped one): the
    kernels declare those locals and match the reference on every pipeline,
    k-steps past the sum's end included, and ``--explain`` says so; the plain
    GEMM's copies do not."""
    from einkern.gpu.mma_builder import TileBuilder
    from einkern.gpu.mma_lower import f64_pipeline, mma_form

    problem = _problem(name)
    task = statement_task(problem, 0)
    for config in ASYNC_PIPELINES:
        c, _ = mma_form(task, config)
        builder = TileBuilder(task, c, config, "k")
        assert builder.shares_k("a") and builder.shares_k("b")
        kernel = lower_mma(task, config)
        source = print_cuda(kernel)
        assert re.search(r"\bint k_a\d", source) and re.search(r"\bint k_b\d", source)
        _check_kernel(problem, kernel, seed=5)
        assert f64_pipeline(task, config).count("each k position decoded once") == 2
    gemm = statement_task(_problem("gemm"), 0)
    config = MmaConfig("m16n8k4_f64", 2, 2, 1, 2, 16, stages=3, copy="async")
    assert not re.search(r"\bint k_[ab]\d", print_cuda(lower_mma(gemm, config)))
    assert "decoded once" not in f64_pipeline(gemm, config)


def test_a_wrong_shared_k_decode_is_caught(monkeypatch):
    """The emulator catches a kernel whose shared k decode is off by one position
    (every copy of a k-step reading its neighbour's k): as a read past the
    operand's end or as a wrong result."""
    from einkern.gpu import mma_builder

    problem = _problem("long-sum")
    task = statement_task(problem, 0)
    config = MmaConfig("m16n8k4_f64", 2, 2, 1, 2, 16, stages=3, copy="async")
    original = mma_builder.TileBuilder._element_parts

    def shifted(self, which, ahead=0, kk=None):
        for j, share, target, inside, index, parts in original(self, which, ahead, kk):
            if parts is not None:
                parts = (parts[0], E.add(parts[1], E.const(1)))
            yield j, share, target, inside, index, parts

    monkeypatch.setattr(mma_builder.TileBuilder, "_element_parts", shifted)
    kernel = lower_mma(task, config)
    arrays = random_arrays(problem, 5)
    want = evaluate(problem, arrays, {})
    given = {f"p_{k}": v.copy(order="K") for k, v in arrays.items()}
    report = emulate([kernel], given, {})
    assert not report.ok or not np.allclose(given["p_C"], want["C"], rtol=1e-6)


def test_carried_fragments_need_an_even_number_of_instruction_steps():
    """Two fragment slots alternate, so a k-step of one instruction k-step (or
    an odd number) keeps its fragments within the step; 16-bit and 3xTF32 tiles
    never carry.  The tiles carry where the registers allow (``f64_carries``):
    the 4x4-instruction tiles, not the 2x4 ones at two blocks of 256 threads."""
    from einkern.gpu.mma_builder import TileBuilder
    from einkern.gpu.mma_lower import f64_carries, mma_form
    from einkern.gpu.mma_model import F64_TILES

    task = statement_task(_problem("gemm"), 0)
    for config, want in (
        (MmaConfig("m16n8k4_f64", 2, 2, 1, 2, 16, stages=3, copy="async"), True),
        (MmaConfig("m16n8k4_f64", 2, 2, 1, 2, 4, stages=3, copy="async"), False),
        (MmaConfig("m16n8k8_f64", 2, 2, 1, 2, 24, stages=3, copy="async"), False),
    ):
        c, _ = mma_form(task, config)
        assert TileBuilder(task, c, config, "k", carried=True).carried is want
    carried = {(t.tiles_m, t.tiles_n, t.threads): f64_carries(t, 1) for t in F64_TILES}
    assert carried[4, 4, 256] and carried[4, 4, 128]
    assert not f64_carries(MmaConfig("m16n8k4_f64", 2, 4, 2, 4, 16), 2)


def test_fp64_tiles_are_staged_along_the_operands_contiguous_runs():
    """fp64 operands lie in shared memory contiguous along their own stride-1
    index and are copied 16 bytes at a time (``cp.async.cg``) where the extents
    and strides allow; otherwise 8 bytes, the same layout."""
    from einkern.gpu.mma_lower import mma_form
    from einkern.gpu.mma_staging import staging

    config = MmaConfig("m16n8k4_f64", 2, 2, 1, 2, 16, stages=3, copy="async")
    even = statement_task(_problem("gemm-column-even"), 0)
    c, _ = mma_form(even, config)
    a, b = staging(c, config, "a"), staging(c, config, "b")
    assert (a.along_cols, a.width, a.ld % 16) == (False, 2, 4)  # A: m contiguous
    assert (b.along_cols, b.width, b.ld % 16) == (False, 2, 4)  # B: k contiguous
    text = print_cuda(lower_mma(even, config))
    assert "cp.async.cg.shared.global [%0], [%1], 16" in text and "cp.async.ca" not in text
    odd = statement_task(_problem("gemm-column"), 0)  # m = 33, k = 9: no 16-byte pairs
    c, _ = mma_form(odd, config)
    assert staging(c, config, "a").width == staging(c, config, "b").width == 1
    assert "cp.async.cg" not in print_cuda(lower_mma(odd, config))
    row = statement_task(_problem("gemm"), 0)
    c, _ = mma_form(row, config)
    assert staging(c, config, "a").along_cols and staging(c, config, "b").along_cols


@pytest.mark.parametrize("epilogue", ["direct", "shared"])
def test_pointwise_terms_are_added_as_the_output_is_stored(epilogue):
    """A bias (pointwise terms beside the one contraction) on tensor cores, each
    epilogue; refused beside batch indices."""
    for name in ("bias", "bias-update-column"):
        _check(name, MmaConfig("m16n8k4_f64", 2, 2, 1, 2, 8, epilogue=epilogue), seed=5)
    batched = problem_of(
        "program t\ndims b, m\ndtype float64\ntensor A[b,m,m], B[b,m,m], C[b,m,m], D[b,m,m]\n"
        "C[z,i,j] = A[z,i,x] * B[z,x,j] + D[z,i,j]\n",
        b=2,
        m=8,
    )
    assert any("batch" in p for p in problems(statement_task(batched, 0), MmaConfig()))


def test_groups_and_orders():
    problem = _problem("four-index")
    c = contraction_of(statement_task(problem, 0))
    assert (c.batch, set(c.m), set(c.n), set(c.k)) == ((), {"p", "q"}, {"r", "s"}, {"x", "y"})
    assert c.m[-1] == "q" and c.k[-1] == "y"  # A[p,x,q,y]: y has stride 1, then q
    assert c.flops == 2 * 6 * 5 * 7 * 3 * 4 * 3


def test_the_outputs_contiguous_index_moves_next_to_the_operands_run():
    """lxv,pvwnxa->nlwavp: by B's strides N is (p, w, n, a), whose slowest index
    p is C's contiguous one (a 64-wide tile stores one element per sector); the
    GEMM form moves p next to B's run (a) and the tile fills more sectors."""
    from dataclasses import replace

    from einkern.gpu.contraction import group_order, output_sector_efficiency

    c = contraction_of(statement_task(_problem("output-contiguous-moved"), 0))
    assert c.n == ("w", "n", "p", "a") and c.m == ("l",)
    assert group_order(("p", "w", "n", "a"), c.b, c.output, dict(c.extents), 8) == c.n
    moved = output_sector_efficiency(c, 9, 64, 8)
    kept = output_sector_efficiency(replace(c, n=("p", "w", "n", "a")), 9, 64, 8)
    assert kept == 0.25 and moved >= 1.25 * kept


@pytest.mark.parametrize(
    "statement",
    [
        "C[i,j] = A[i,k] * B[k,j] + A[i,j]",
        "C[i,j] = A[i,k] * B[k,j] * A[i,k]",
        "C[i,j] = A[i,i] * B[i,j]",
        "C[i,j] = A[i,j] * B[i,j]",
    ],
)
def test_not_contractions_are_refused(statement):
    problem = problem_of(
        f"program t\ndims m\ndtype float64\ntensor A[m,m], B[m,m], C[m,m]\n{statement}\n", m=8
    )
    with pytest.raises(NotAContraction):
        contraction_of(statement_task(problem, 0))


def test_float32_is_refused_by_fp64_shapes():
    problem = problem_of(
        "program t\ndims m\ndtype float32\ntensor A[m,m], B[m,m], C[m,m]\n"
        "C[i,j] = A[i,k] * B[k,j]\n",
        m=8,
    )
    assert any("float64" in p for p in problems(statement_task(problem, 0), MmaConfig()))


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_mma_kernels_compile_without_spills(config):
    pytest.importorskip("cuda.bindings.nvrtc")
    from einkern.backends.cuda.nvrtc import compile_cubin

    problem = _problem("six-index-out")
    module = compile_cubin(print_cuda(lower_mma(statement_task(problem, 0), CONFIGS[config])))
    assert all(r.spill_stores == 0 and r.spill_loads == 0 for r in module.resources)


@pytest.mark.parametrize(
    ("stages", "barrier", "copy", "carried"),
    [
        (1, 0, "registers", False),
        (2, 1, "registers", False),
        (3, 0, "async", False),
        (3, 0, "async", True),
        (3, 1, "async", True),
        (2, 1, "async", True),
    ],
)
def test_a_dropped_barrier_is_caught(stages, barrier, copy, carried):
    """Without the barrier between filling a shared buffer and reading it, warps
    read what other warps have not stored yet: the emulator's result must be
    wrong (or an access flagged).  A kernel whose fragments are carried across
    the k-step's barrier has one before the loop as well (the first fragments)."""
    from einkern.backends.emulator import count_barriers, drop_barrier

    problem = _problem("gemm")
    task = statement_task(problem, 0)
    config = MmaConfig("m16n8k4_f64", 2, 2, 1, 1, 8, stages=stages, copy=copy)
    kernel = lower_mma(task, config, carried=carried)
    assert count_barriers(kernel) == (1 if copy == "async" and not carried else 2)
    arrays = random_arrays(problem, 1)
    want = evaluate(problem, arrays)["C"]
    given = {f"p_{k}": v.copy() for k, v in arrays.items()}
    report = emulate([drop_barrier(kernel, barrier)], given, {})
    assert not report.ok or not np.allclose(given["p_C"], want, rtol=1e-12)


@pytest.mark.parametrize("stages", [2, 3])
def test_a_missing_wait_is_caught(stages):
    """Asynchronous copies land only at their wait: without it the fragments read
    shared memory the copies have not written (poisoned), so the result is wrong."""
    import dataclasses

    from einkern.gpu import kir

    problem = _problem("gemm")
    config = MmaConfig("m16n8k4_f64", 2, 2, 1, 1, 8, stages=stages, copy="async")
    kernel = lower_mma(statement_task(problem, 0), config)

    def strip(sections):
        out = []
        for s in sections:
            if isinstance(s, kir.Uniform):
                s = dataclasses.replace(s, body=strip(s.body))
            elif isinstance(s, kir.PerThread):
                s = kir.PerThread(tuple(x for x in s.body if not isinstance(x, kir.CopyWait)))
            out.append(s)
        return tuple(out)

    broken = dataclasses.replace(kernel, body=strip(kernel.body))
    arrays = random_arrays(problem, 2)
    want = evaluate(problem, arrays)["C"]
    for candidate, good in ((kernel, True), (broken, False)):
        given = {f"p_{k}": v.copy() for k, v in arrays.items()}
        report = emulate([candidate], given, {})
        assert report.ok
        assert np.allclose(given["p_C"], want, rtol=1e-12) == good


def _float32_problem(name: str):
    text, extents = PROGRAMS[name]
    dims = ", ".join(extents)
    return problem_of(f"program t\ndims {dims}\ndtype float32\n{text}\n", **extents)


def _error(problem, config, seed=4) -> float:
    from einkern.reference import relative_error

    kernel = lower_mma(statement_task(problem, 0), config)
    arrays = random_arrays(problem, seed)
    scalars = random_scalars(problem, seed)
    want = evaluate(problem, {k: v.astype(np.float64) for k, v in arrays.items()}, scalars)
    out = problem.program.statements[0].output.tensor
    given = {f"p_{k}": v.copy(order="K") for k, v in arrays.items()}
    report = emulate([kernel], given, {f"s_{k}": v for k, v in scalars.items()})
    assert report.ok, report
    return relative_error(given[f"p_{out}"].astype(np.float64), want[out].astype(np.float64))


TF32 = {
    "tf32-k8": MmaConfig("m16n8k8_tf32", 2, 2, 2, 2, 16),
    "tf32-k4-async": MmaConfig("m16n8k4_tf32", 2, 1, 1, 2, 8, stages=3, copy="async"),
}


@pytest.mark.parametrize("config", sorted(TF32))
@pytest.mark.parametrize("name", ["gemm", "four-index", "update-scaled", "six-index-out", "bias"])
def test_tf32_and_3xtf32(name, config):
    """TF32 keeps 10 mantissa bits of each input: its error is far above fp32's
    rounding but within 1e-2 here (inputs in [0.5, 1.5]); 3xTF32 (high and low
    parts, three MMAs) is back to fp32's tolerance."""
    import dataclasses

    problem = _float32_problem(name)
    plain = _error(problem, TF32[config])
    split = _error(problem, dataclasses.replace(TF32[config], split=True))
    assert 1e-5 < plain < 1e-2
    assert split <= 1e-5 and split < plain / 20


def test_tf32_needs_float32_tensors():
    assert any(
        "float32" in p for p in problems(statement_task(_problem("gemm"), 0), TF32["tf32-k8"])
    )
    split_f64 = MmaConfig(split=True)
    assert any(
        "tf32 shapes only" in p for p in problems(statement_task(_problem("gemm"), 0), split_f64)
    )


@pytest.mark.parametrize("split", [False, True])
def test_tf32_kernels_compile_without_spills(split):
    pytest.importorskip("cuda.bindings.nvrtc")
    import dataclasses

    from einkern.backends.cuda.nvrtc import compile_cubin

    problem = _float32_problem("six-index-out")
    for config in TF32.values():
        kernel = lower_mma(statement_task(problem, 0), dataclasses.replace(config, split=split))
        for arch in ("sm_80", "sm_90"):
            module = compile_cubin(print_cuda(kernel), arch)
            assert all(r.spill_stores == 0 for r in module.resources)


@pytest.mark.parametrize("extents", [dict(m=64, n=32, k=32), dict(m=40, n=24, k=20)])
def test_copy_guards_test_the_tile_start_where_the_tile_divides(extents):
    """Where every tile divides its extent the copies' guards are the same for
    all threads (on the tiles' starts); at edges they test each element; both
    match the reference, the second with the tiles past the extents zero-filled."""
    from einkern.gpu import kir

    config = MmaConfig("m16n8k4_f64", 2, 2, 1, 2, 16, stages=3, copy="async")  # 32 x 32
    text = f"program t\ndims m, n, k\ndtype float64\n{PROGRAMS['gemm'][0]}\n"
    problem = problem_of(text, **extents)
    kernel = lower_mma(statement_task(problem, 0), config)
    guards = [n.inside for n in kir.walk(kernel.body) if isinstance(n, kir.CopyAsync)]
    per_thread = [g for g in guards if any(isinstance(x, kir.ThreadIdx) for x in kir.walk(g))]
    assert guards and (not per_thread) == (extents["m"] % 32 == 0)
    _check_kernel(problem, kernel)
