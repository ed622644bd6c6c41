"""Kernel-IR printers: CUDA C (compiled with NVRTC, no GPU needed) and the CPU
emulation (run against NumPy, with fault injection and bounds checking)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from einkern.backends.emulator import count_barriers, drop_barrier, emulate, print_emulation_c
from einkern.errors import ArgumentError
from einkern.gpu import kir
from einkern.gpu.ctext import float_literal, int_literal
from einkern.gpu.cuda_printer import (
    dynamic_shared_bytes,
    kernel_signature,
    launch_shape,
    print_cuda,
)
from einkern.gpu.emulator_c import POISON_INT

V, N, F = kir.Var, kir.Int, kir.Float
TX, BX = kir.ThreadIdx(), kir.BlockIdx()


def op(symbol: str, left: kir.Expr, right: kir.Expr) -> kir.Op:
    return kir.Op(symbol, left, right)


def add(*terms: kir.Expr) -> kir.Expr:
    out = terms[0]
    for term in terms[1:]:
        out = op("+", out, term)
    return out


def mul(a: kir.Expr, b: kir.Expr) -> kir.Expr:
    return op("*", a, b)


def array(name: str, ctype: str, size: int, readonly: bool = True) -> kir.Param:
    return kir.Param(name, ctype, True, size, readonly)


# ---- hand-written kernels ----------------------------------------------------


def matvec(m: int, n: int, threads: int, nested: bool = False) -> kir.Kernel:
    """y = A x, one row per thread; x staged through shared memory in chunks of
    ``threads`` (k-step loop: stage, barrier, compute, barrier).  ``nested``
    splits the k loop into two uniform loops (chunks of two steps)."""
    k = add(V("ko"), mul(V("ki"), N(threads))) if nested else V("k")
    stage = kir.PerThread(
        (
            kir.If(
                op("<", add(k, TX), N(n)),
                (kir.Store("xs", TX, kir.Load("x", add(k, TX))),),
                (kir.Store("xs", TX, F(0.0)),),
            ),
        )
    )
    steps = op("min", N(threads), op("-", N(n), k))
    term = mul(kir.Load("A", add(mul(V("row"), N(n)), k, V("j"))), kir.Load("xs", V("j")))
    compute = kir.PerThread(
        (
            kir.Comment("multiply the staged chunk"),
            kir.If(
                op("<", V("row"), N(m)),
                (kir.For("j", N(0), steps, 1, (kir.Assign("acc", term, "+="),), unroll=4),),
            ),
        )
    )
    step: tuple[kir.Section, ...] = (stage, kir.Barrier(), compute, kir.Barrier())
    if nested:
        loop = kir.Uniform("ko", 0, n, 2 * threads, (kir.Uniform("ki", 0, 2, 1, step),))
    else:
        loop = kir.Uniform("k", 0, n, threads, step)
    body = (
        kir.PerThread((kir.Assign("row", add(mul(BX, N(threads)), TX)), kir.Assign("acc", F(0)))),
        loop,
        kir.PerThread((kir.If(op("<", V("row"), N(m)), (kir.Store("y", V("row"), V("acc")),)),)),
    )
    return kir.Kernel(
        "matvec",
        (
            array("A", "double", m * n),
            array("x", "double", n),
            array("y", "double", m, readonly=False),
        ),
        threads,
        -(-m // threads),
        (kir.ThreadVar("acc", "double"), kir.ThreadVar("row", "int")),
        (kir.SharedArray("xs", "double", threads),),
        body,
        comment="staged matrix-vector product",
    )


def transpose(
    rows: int, cols: int, tile: int, names: tuple[str, str] = ("inp", "out")
) -> kir.Kernel:
    """out = inp.T (row-major, rows x cols) through a padded shared tile, one
    element per thread."""
    tiles_c = cols // tile

    def coords() -> tuple[kir.Stmt, ...]:
        return (
            kir.Declare("tr", "int", op("/", TX, N(tile))),
            kir.Declare("tc", "int", op("%", TX, N(tile))),
            kir.Declare("br", "int", op("/", BX, N(tiles_c))),
            kir.Declare("bc", "int", op("%", BX, N(tiles_c))),
        )

    load = kir.Load(
        names[0],
        add(mul(add(mul(V("br"), N(tile)), V("tr")), N(cols)), mul(V("bc"), N(tile)), V("tc")),
    )
    store_at = add(
        mul(add(mul(V("bc"), N(tile)), V("tr")), N(rows)), mul(V("br"), N(tile)), V("tc")
    )
    body = (
        kir.PerThread((*coords(), kir.Store("t", add(mul(V("tr"), N(tile + 1)), V("tc")), load))),
        kir.Barrier(),
        kir.PerThread(
            (
                *coords(),
                kir.Store(
                    names[1], store_at, kir.Load("t", add(mul(V("tc"), N(tile + 1)), V("tr")))
                ),
            )
        ),
    )
    return kir.Kernel(
        "transpose",
        (
            array(names[0], "float", rows * cols),
            array(names[1], "float", rows * cols, readonly=False),
        ),
        tile * tile,
        (rows // tile) * tiles_c,
        (),
        (kir.SharedArray("t", "float", tile * (tile + 1)),),
        body,
    )


def out_of_bounds() -> kir.Kernel:
    """Block 1 / thread 7 loads a[16]; thread 3 stores far past ``out``; thread 7
    stores past the shared array; thread 0 writes register element 5 of 2."""
    gid = add(mul(BX, N(8)), TX)
    body = (
        kir.PerThread(
            (
                kir.Store("out", gid, kir.Load("a", add(gid, N(1)))),
                kir.If(op("==", TX, N(3)), (kir.Store("out", add(TX, N(1_000_000)), F(1.0)),)),
                kir.Store("sh", add(TX, N(1)), F(2.0)),
                kir.If(op("==", TX, N(0)), (kir.Store("reg", N(5), F(3.0)),)),
            )
        ),
    )
    return kir.Kernel(
        "oob",
        (array("a", "double", 16), array("out", "double", 16, False)),
        8,
        2,
        (kir.ThreadVar("reg", "double", 2),),
        (kir.SharedArray("sh", "double", 8),),
        body,
    )


def private_vars(threads: int) -> kir.Kernel:
    """Thread variables written in one section and read after a barrier."""
    fill = kir.For(
        "j", N(0), N(3), 1, (kir.Store("tv", V("j"), add(mul(TX, N(10)), V("j"))),), unroll=-1
    )
    read = kir.For(
        "j",
        N(0),
        N(3),
        1,
        (kir.Store("out", add(mul(TX, N(3)), V("j")), add(kir.Load("tv", V("j")), V("s"))),),
    )
    body = (
        kir.PerThread((fill, kir.Assign("s", mul(kir.Neg(kir.Call("sqrt", (F(0.25),))), TX)))),
        kir.Barrier(),
        kir.PerThread((read, kir.Store("unset", TX, V("u")), kir.Store("iunset", TX, V("iu")))),
    )
    return kir.Kernel(
        "private_vars",
        (
            array("out", "double", 3 * threads, False),
            array("unset", "double", threads, False),
            array("iunset", "int", threads, False),
        ),
        threads,
        1,
        (
            kir.ThreadVar("tv", "int", 3),
            kir.ThreadVar("s", "double"),
            kir.ThreadVar("u", "double"),
            kir.ThreadVar("iu", "int"),
        ),
        (),
        body,
    )


def vector_sum(threads: int, offset: int = 0) -> kir.Kernel:
    """out[t] = alpha (a[4t] + a[4t+1] + a[4t+2] + 0.5 a[4t+3]) from one float4 load."""
    lanes = [kir.Lane("v", i) for i in range(4)]
    value = add(lanes[0], lanes[1], lanes[2], mul(lanes[3], F(0.5)))
    body = (
        kir.PerThread(
            (
                kir.VectorLoad("v", "float", "a", add(mul(TX, N(4)), N(offset)), 4),
                kir.Store("out", TX, mul(V("alpha"), value)),
            )
        ),
    )
    return kir.Kernel(
        "vsum",
        (
            array("a", "float", 4 * threads),
            array("out", "float", threads, False),
            kir.Param("alpha", "float", False),
        ),
        threads,
        1,
        (),
        (),
        body,
    )


def big_shared(threads: int = 256, per: int = 32) -> kir.Kernel:
    """Reverse the block's elements through 64 KiB (+ a little) of shared memory."""
    n = threads * per
    body = (
        kir.PerThread(
            (
                kir.For(
                    "j",
                    N(0),
                    N(per),
                    1,
                    (
                        kir.Store(
                            "big",
                            add(mul(TX, N(per)), V("j")),
                            kir.Load("a", add(mul(TX, N(per)), V("j"))),
                        ),
                    ),
                ),
                kir.Store("small", N(0), F(1.0)),
            )
        ),
        kir.Barrier(),
        kir.PerThread(
            (
                kir.For(
                    "j",
                    N(0),
                    N(per),
                    1,
                    (
                        kir.Store(
                            "out",
                            add(mul(TX, N(per)), V("j")),
                            kir.Load("big", op("-", N(n - 1), add(mul(TX, N(per)), V("j")))),
                        ),
                    ),
                ),
            )
        ),
    )
    return kir.Kernel(
        "bigshared",
        (array("a", "double", n), array("out", "double", n, False)),
        threads,
        1,
        (),
        (kir.SharedArray("small", "float", 3), kir.SharedArray("big", "double", n)),
        body,
    )


def run_matvec(kernel: kir.Kernel, m: int, n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    a, x = rng.standard_normal((m, n)), rng.standard_normal(n)
    y = np.full(m, -7.0)
    report = emulate([kernel], {"A": a, "x": x, "y": y}, {})
    return report, y, a @ x


# ---- (a) staged reduction / transposition, barrier faults ---------------------


@pytest.mark.parametrize("nested", [False, True])
def test_matvec_matches_numpy_and_needs_both_barriers(nested):
    m, n, threads = 37, 50, 8
    kernel = matvec(m, n, threads, nested)
    report, y, expected = run_matvec(kernel, m, n)
    assert report.ok, str(report)
    np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-12)
    assert count_barriers(kernel) == 2
    for dropped in (0, 1):  # staging barrier, end-of-step barrier
        faulty = drop_barrier(kernel, dropped)
        assert count_barriers(faulty) == 1
        report, y, expected = run_matvec(faulty, m, n)
        assert report.ok
        assert not np.allclose(y, expected, equal_nan=False), f"barrier {dropped} not needed?"
    report, y, expected = run_matvec(kir.without_barriers(kernel), m, n)
    assert not np.allclose(y, expected)


def test_rotation_joins_tail_and_next_head():
    text = print_emulation_c(drop_barrier(matvec(9, 20, 4), 1))
    assert "if (k == 0) {" in text and "ekx_previous = k - 4;" in text
    # one thread loop per step (previous tail + head), one for the last tail and after
    assert text.count("for (int ekx_thread = 0;") == 2
    assert print_emulation_c(matvec(9, 20, 4)).count("for (int ekx_thread = 0;") == 3


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    m=st.integers(1, 40),
    n=st.integers(1, 40),
    threads=st.sampled_from([1, 2, 3, 8, 32]),
    seed=st.integers(0, 2**16),
)
def test_matvec_random_sizes(m, n, threads, seed):
    report, y, expected = run_matvec(matvec(m, n, threads), m, n, seed)
    assert report.ok, str(report)
    np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-12)


def test_transpose_and_its_barrier():
    rows, cols, tile = 12, 8, 4
    inp = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    out = np.zeros((cols, rows), dtype=np.float32)
    kernel = transpose(rows, cols, tile)
    assert emulate([kernel], {"inp": inp, "out": out}, {}).ok
    np.testing.assert_array_equal(out, inp.T)
    out[:] = 0
    assert emulate([kir.without_barriers(kernel)], {"inp": inp, "out": out}, {}).ok
    assert np.isnan(out).any()  # read the tile before other threads wrote it (poison)


def test_kernels_run_in_order_on_any_dense_layout():
    rows, cols, tile = 8, 12, 4
    inp = np.asfortranarray(np.random.default_rng(2).standard_normal((rows, cols)), np.float32)
    mid = np.zeros(rows * cols, dtype=np.float32)
    back = np.zeros((cols, rows), dtype=np.float32)
    first = transpose(cols, rows, tile, ("inp", "mid"))  # F order: flat memory is inp.T
    second = transpose(rows, cols, tile, ("mid", "back"))
    report = emulate([first, second], {"inp": inp, "mid": mid, "back": back}, {})
    assert report.ok and report.kernels == ("transpose", "transpose")
    np.testing.assert_array_equal(mid.reshape(rows, cols), inp)
    np.testing.assert_array_equal(back, inp.T)


# ---- (b) out-of-bounds accesses are reported, not performed --------------------


def test_out_of_bounds_is_reported_not_performed():
    a = np.arange(16, dtype=np.float64)
    storage = np.full(24, -1.0)
    out = storage[:16]
    report = emulate([out_of_bounds()], {"a": a, "out": out}, {})
    assert not report.ok
    found = {(e.array, e.access, e.index, e.block, e.thread) for e in report.errors}
    assert ("a", "load", 16, 1, 7) in found
    assert ("out", "store", 1_000_003, 0, 3) in found and ("out", "store", 1_000_003, 1, 3) in found
    assert ("sh", "store", 8, 0, 7) in found and ("reg", "store", 5, 1, 0) in found
    assert report.error_count == 1 + 2 + 2 + 2
    spaces = {e.array: e.space for e in report.errors}
    assert spaces == {"a": "global", "out": "global", "sh": "shared", "reg": "thread"}
    assert "a[16] out of bounds (size 16) in block 1, thread 7" in str(report)
    np.testing.assert_array_equal(out[:15], a[1:])
    assert np.isnan(out[15])  # the skipped load reads the poison value
    np.testing.assert_array_equal(storage[16:], -1.0)  # nothing written past the array


def test_huge_indices_in_long_long_kernels():
    body = (
        kir.PerThread(
            (
                kir.Store("out", add(N(2**40), TX), F(1.0)),
                kir.Store("out", TX, kir.Load("a", op("-", TX, N(2**33)))),
            )
        ),
    )
    kernel = kir.Kernel(
        "huge",
        (array("a", "float", 4), array("out", "float", 4, False)),
        4,
        1,
        (),
        (),
        body,
        index_type="long long",
    )
    assert "out[1099511627776LL + ((long long)threadIdx.x)] = 1.0f;" in print_cuda(kernel)
    out = np.zeros(4, dtype=np.float32)
    report = emulate([kernel], {"a": np.ones(4, np.float32), "out": out}, {})
    assert report.error_count == 8
    assert {e.index for e in report.errors} == {2**40 + t for t in range(4)} | {
        t - 2**33 for t in range(4)
    }
    assert np.isnan(out).all()


def test_arguments_are_checked():
    kernel = out_of_bounds()
    a, out = np.zeros(16), np.zeros(16)
    with pytest.raises(ArgumentError, match="no array"):
        emulate([kernel], {"a": a}, {})
    with pytest.raises(ArgumentError, match="float64"):
        emulate([kernel], {"a": a.astype(np.float32), "out": out}, {})
    with pytest.raises(ArgumentError, match="only 8"):
        emulate([kernel], {"a": a[:8], "out": out}, {})
    with pytest.raises(ArgumentError, match="dense"):
        emulate([kernel], {"a": np.zeros(32)[::2], "out": out}, {})
    out.flags.writeable = False
    with pytest.raises(ArgumentError, match="read-only"):
        emulate([kernel], {"a": a, "out": out}, {})


# ---- (c) thread variables ------------------------------------------------------


def test_thread_vars_are_private_and_poisoned():
    threads = 6
    out, unset = np.zeros(3 * threads), np.zeros(threads)
    iunset = np.zeros(threads, dtype=np.int32)
    report = emulate([private_vars(threads)], {"out": out, "unset": unset, "iunset": iunset}, {})
    assert report.ok
    t = np.arange(threads)[:, None]
    np.testing.assert_array_equal(out.reshape(threads, 3), t * 10 + np.arange(3) - 0.5 * t)
    assert np.isnan(unset).all()
    assert (iunset == POISON_INT).all()


def test_barrier_free_uniform_loop_runs_whole_per_thread():
    """Without a barrier, thread t runs every step before thread t+1 starts."""
    threads = 4
    step = kir.PerThread(
        (
            kir.Store("sh", TX, V("r")),
            kir.Assign("acc", kir.Load("sh", op("%", add(TX, N(1)), N(threads))), "+="),
        )
    )
    body = (
        kir.PerThread((kir.Assign("acc", F(0.0)),)),
        kir.Uniform("r", 0, 4, 1, (step, kir.Uniform("never", 0, 0, 1, (kir.Barrier(),)))),
        kir.PerThread((kir.Store("out", TX, V("acc")),)),
    )
    kernel = kir.Kernel(
        "serial",
        (array("out", "double", threads, False),),
        threads,
        1,
        (kir.ThreadVar("acc", "double"),),
        (kir.SharedArray("sh", "double", threads),),
        body,
    )
    out = np.zeros(threads)
    assert emulate([kernel], {"out": out}, {}).ok
    assert np.isnan(out[:-1]).all()  # their neighbour has not run yet
    assert out[-1] == 4 * 3  # thread 0 finished all steps: sh[0] holds its last r
    assert "for (int ekx_thread" in print_emulation_c(kernel).split("for (int r")[0]


# ---- (d) vector loads ------------------------------------------------------------


def test_vector_load():
    threads = 16
    a = np.random.default_rng(1).standard_normal(4 * threads).astype(np.float32)
    out = np.zeros(threads, dtype=np.float32)
    assert emulate([vector_sum(threads)], {"a": a, "out": out}, {"alpha": 1 / 3}).ok
    v = a.reshape(threads, 4)
    total = v[:, 0] + v[:, 1] + v[:, 2] + v[:, 3] * np.float32(0.5)
    np.testing.assert_array_equal(out, np.float32(1 / 3) * total)
    text = print_cuda(vector_sum(threads))
    assert "const float4 v = *reinterpret_cast<const float4 *>(a + (" in text
    assert "v.w * 0.5f" in text and "double ekx_arg_alpha" in text


def test_misaligned_vector_load_is_reported():
    threads = 4
    a, out = np.zeros(16, dtype=np.float32), np.zeros(threads, dtype=np.float32)
    report = emulate([vector_sum(threads, offset=1)], {"a": a, "out": out}, {"alpha": 0.0})
    problems = [(e.thread, e.index, e.problem) for e in report.errors]
    assert problems == [
        (0, 1, "misaligned"),
        (1, 5, "misaligned"),
        (2, 9, "misaligned"),
        (3, 13, "out of bounds"),
    ]
    assert np.isnan(out).all()


# ---- literals ----------------------------------------------------------------------


def test_literals_are_exact_and_typed():
    assert float_literal(0.1, "double") == "0.1"
    assert float_literal(0.1, "float") == "0.1f"
    assert float(float_literal(1 / 3, "double")) == 1 / 3
    assert np.float32(float_literal(1 / 3, "float")[:-1]) == np.float32(1 / 3)
    assert float_literal(-2.5, "float") == "(-2.5f)"
    assert float_literal(1e30, "float") == "1e+30f"
    assert float_literal(1e300, "float") == "EKX_INF_F"
    assert float_literal(math.nan, "double") == "EKX_NAN_D"
    assert float_literal(-math.inf, "double") == "(-EKX_INF_D)"
    assert int_literal(7) == "7" and int_literal(-3) == "(-3)"
    assert int_literal(2**40) == "1099511627776LL"
    text = print_cuda(matvec(5, 7, 4))
    assert "acc = 0.0;" in text and "ekx_min_i(4, 7 - k)" in text
    assert "#pragma unroll 4" in text and "__syncthreads();" in text


# ---- (e) CUDA text compiles with NVRTC -----------------------------------------------


def nvrtc_compile(source: str) -> str:
    """NVRTC's log; fails the test when the source does not compile for sm_90."""
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc")
    status, program = nvrtc.nvrtcCreateProgram(source.encode(), b"kernel.cu", 0, [], [])
    assert status == nvrtc.nvrtcResult.NVRTC_SUCCESS
    try:
        options = [b"--gpu-architecture=sm_90", b"-default-device", b"--std=c++17"]
        (status,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
        _, size = nvrtc.nvrtcGetProgramLogSize(program)
        log = bytearray(size)
        nvrtc.nvrtcGetProgramLog(program, log)
        text = bytes(log).rstrip(b"\0").decode(errors="replace")
        assert status == nvrtc.nvrtcResult.NVRTC_SUCCESS, f"{text}\n{source}"
        return text
    finally:
        nvrtc.nvrtcDestroyProgram(program)


HAND_KERNELS = {
    "matvec": lambda: matvec(37, 50, 8),
    "matvec_nested": lambda: matvec(37, 50, 8, nested=True),
    "transpose": lambda: transpose(12, 8, 4),
    "out_of_bounds": out_of_bounds,
    "private_vars": lambda: private_vars(6),
    "vector_sum": lambda: vector_sum(16),
    "big_shared": big_shared,
}


@pytest.mark.parametrize("name", sorted(HAND_KERNELS))
def test_cuda_compiles_with_nvrtc(name):
    kernel = HAND_KERNELS[name]()
    log = nvrtc_compile(print_cuda(kernel)).lower()
    assert "error" not in log, log
    if name not in ("out_of_bounds", "private_vars"):  # these two are odd on purpose
        assert "warning" not in log, log


def test_large_shared_memory_is_dynamic():
    kernel = big_shared()
    assert dynamic_shared_bytes(kernel) == 16 + 256 * 32 * 8
    assert launch_shape(kernel).needs_shared_attribute
    text = print_cuda(kernel)
    assert "extern __shared__ __align__(16) unsigned char ekx_dynamic_shared[];" in text
    assert "double *const big = reinterpret_cast<double *>(ekx_dynamic_shared + 16);" in text
    small = matvec(5, 7, 4)
    assert dynamic_shared_bytes(small) == 0 and not launch_shape(small).needs_shared_attribute
    assert "__shared__ __align__(16) double xs[4];" in print_cuda(small)
    a = np.arange(256 * 32, dtype=np.float64)
    out = np.zeros_like(a)
    assert emulate([kernel], {"a": a, "out": out}, {}).ok
    np.testing.assert_array_equal(out, a[::-1])


def test_signature_order():
    kernel = vector_sum(4)
    assert [(a.name, a.ctype, a.is_array) for a in kernel_signature(kernel)] == [
        ("a", "float", True),
        ("out", "float", True),
        ("alpha", "double", False),
    ]
    assert "vsum(const float* __restrict__ a, float* __restrict__ out, double ekx_arg_alpha)" in (
        print_cuda(kernel)
    )
    shape = launch_shape(kernel)
    assert shape.grid == (1, 1, 1) and shape.block == (4, 1, 1)
