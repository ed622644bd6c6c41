"""TMA bulk tensor copies on mbarriers in the CPU emulator
(:mod:`einkern.gpu.emulator_tma`): hand-built kernels copy boxes of a global
tensor (16-bit, float and double elements, 128-byte swizzled or not, boxes
running past the extents, a batch-like outer dimension) into shared memory,
wait, and store what they read to a float output compared with NumPy; a k-step
loop reuses two mbarriers over several phases.  Planted faults are caught: the
wait dropped or its parity flipped (poison read), the bytes armed short, the
arrival missing, a copy never waited for, an uninitialised mbarrier, a
misaligned destination, a wrong phase parity in the loop."""

from __future__ import annotations

import numpy as np
import pytest
from test_kir_printers import add, mul, op

from einkern.backends.emulator import EmulationReport, emulate
from einkern.gpu import kir
from einkern.gpu.emulator_c import KINDS
from einkern.gpu.emulator_tma import FIRST_KIND
from einkern.gpu.kir import ELEMENT_BYTES, MBARRIER

N, V = kir.Int, kir.Var
TX, BX = kir.ThreadIdx(), kir.BlockIdx()

HANG = "wait for a barrier phase that never completes"
BYTES = "transaction bytes armed differ from the bytes copied"
UNWAITED = "bulk copies never waited for"
UNINITIALISED = "mbarrier used before its initialisation"

#: Host dtypes of the element types (bfloat16: its bit patterns).
HOST = {"ek_bf16": np.uint16, "ek_f16": np.float16, "float": np.float32, "double": np.float64}


def div(a: kir.Expr, b: kir.Expr) -> kir.Expr:
    return op("/", a, b)


def mod(a: kir.Expr, b: kir.Expr) -> kir.Expr:
    return op("%", a, b)


def unswizzled(e: kir.Expr, size: int, swizzle: int) -> kir.Expr:
    """Shared element holding element ``e`` of a box copied to the array's start
    in the PTX ISA's 128-byte swizzle: 16-byte chunk ``c`` of 128-byte line ``l``
    stored at chunk ``c ^ (l % 8)`` of that line."""
    if not swizzle:
        return e
    line, chunk = 128 // size, 16 // size  # elements
    row = div(e, N(line))
    moved = op("^", div(mod(e, N(line)), N(chunk)), mod(row, N(8)))
    return add(mul(row, N(line)), mul(moved, N(chunk)), mod(e, N(chunk)))


def random_values(ctype: str, shape: tuple[int, ...], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(host array of ``ctype``, its values as float64)."""
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(shape).astype(np.float32)
    if ctype == "ek_bf16":
        bits = (values.view(np.uint32) >> 16).astype(np.uint16)  # truncated: exact bf16
        return bits, (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    host = values.astype(HOST[ctype])
    return host, host.astype(np.float64)


# ---- one tile per block ------------------------------------------------------


def tile_kernel(
    ctype: str,
    swizzle: int,
    shape: tuple[int, int, int],
    *,
    parity: int = 0,
    armed: int | None = None,
    arm: bool = True,
    wait: bool = True,
    init: bool = True,
    stray: bool = False,
    shift: int = 0,
    origin: tuple[int, int] = (0, 0),
) -> tuple[kir.Kernel, tuple[int, int, int]]:
    """Block (b, rt, ct) copies box rows ``rt·8 ..`` of batch ``b``, columns
    ``ct·W ..`` (W: 128 bytes swizzled, 64 bytes plain) of the (batch, rows, cols)
    tensor ``p_A`` as two 4-row boxes on mbarrier 0, waits, and stores the tile to
    ``out`` (batch, padded rows, padded cols).  The keywords plant faults:
    ``armed`` bytes, no ``arm``, no ``wait``, no ``init``, a ``stray`` copy on
    mbarrier 1 never waited for, the second box ``shift`` elements off.  The
    boxes start ``origin`` (columns, rows) from the tile corners."""
    batch, rows, cols = shape
    size = ELEMENT_BYTES[ctype]
    width, half = (128 if swizzle else 64) // size, 4
    high = 2 * half
    tiles_r, tiles_c = -(-rows // high), -(-cols // width)
    tmap = kir.TensorMap(
        "map_A",
        "p_A",
        ctype,
        (
            kir.MapDim("k", cols, 1, width),
            kir.MapDim("r", rows, cols, half),
            kir.MapDim("b", batch, rows * cols, 1),
        ),
        swizzle,
    )
    padded = (batch, tiles_r * high, tiles_c * width)
    out_type = "double" if ctype == "double" else "float"
    where = (
        kir.Declare("b", "int", div(BX, N(tiles_r * tiles_c))),
        kir.Declare("rt", "int", mod(div(BX, N(tiles_c)), N(tiles_r))),
        kir.Declare("ct", "int", mod(BX, N(tiles_c))),
    )

    def corner(row: int) -> tuple[kir.Expr, ...]:
        return (
            add(mul(V("ct"), N(width)), N(origin[0])),
            add(mul(V("rt"), N(high)), N(row + origin[1])),
            V("b"),
        )

    issue: list[kir.Stmt] = list(where)
    if arm:
        issue.append(kir.BarrierArm("bar", N(0), 2 * tmap.box_bytes() if armed is None else armed))
    issue += [
        kir.TensorCopy("map_A", corner(0), "tile", N(0), "bar", N(0)),
        kir.TensorCopy("map_A", corner(half), "tile", N(width * half + shift), "bar", N(0)),
    ]
    if stray:
        issue += [
            kir.BarrierArm("bar", N(1), tmap.box_bytes()),
            kir.TensorCopy("map_A", corner(0), "spare", N(0), "bar", N(1)),
        ]
    threads = 32
    e = add(TX, mul(V("j"), N(threads)))
    row = add(mul(V("b"), N(padded[1])), mul(V("rt"), N(high)), div(V("e"), N(width)))
    at = add(mul(row, N(padded[2])), mul(V("ct"), N(width)), mod(V("e"), N(width)))
    read = kir.For(
        "j",
        N(0),
        N(width * high // threads),
        1,
        (
            kir.Declare("e", "int", e),
            kir.Store(
                "out",
                at,
                kir.Load("tile", unswizzled(V("e"), size, swizzle)),
            ),
        ),
    )
    inits = [kir.BarrierInit("bar", N(0)), kir.BarrierInit("bar", N(1))] if init else []
    body = (
        kir.PerThread((kir.If(op("==", TX, N(0)), tuple(inits)),)),
        kir.Barrier(),
        kir.PerThread((kir.If(op("==", TX, N(0)), tuple(issue)),)),
        kir.Barrier(),
        kir.PerThread(
            (
                *where,
                *([kir.BarrierWait("bar", N(0), N(parity))] if wait else []),
                read,
            )
        ),
    )
    align = 1024 if swizzle else 128
    kernel = kir.Kernel(
        "tma_tile",
        (
            kir.Param("p_A", ctype, True, batch * rows * cols),
            kir.Param("out", out_type, True, int(np.prod(padded)), readonly=False),
        ),
        threads,
        batch * tiles_r * tiles_c,
        (),
        (
            kir.SharedArray("tile", ctype, width * high, align),
            kir.SharedArray("spare", ctype, width * half, align),
            kir.SharedArray("bar", MBARRIER, 2),
        ),
        body,
        maps=(tmap,),
    )
    return kernel, padded


def run_tile(
    ctype: str, swizzle: int, shape: tuple[int, int, int], seed: int = 0, **faults
) -> tuple[np.ndarray, np.ndarray, EmulationReport]:
    """(output, NumPy reference, report) of :func:`tile_kernel`."""
    kernel, padded = tile_kernel(ctype, swizzle, shape, **faults)
    host, values = random_values(ctype, shape, seed)
    cols, rows = faults.get("origin", (0, 0))
    framed = np.zeros((shape[0], padded[1] + 2 * abs(rows), padded[2] + 2 * abs(cols)))
    framed[:, abs(rows) : abs(rows) + shape[1], abs(cols) : abs(cols) + shape[2]] = values
    top, left = abs(rows) + rows, abs(cols) + cols
    expected = framed[:, top : top + padded[1], left : left + padded[2]]
    out = np.full(padded, -1.0, HOST["double" if ctype == "double" else "float"])
    report = emulate([kernel], {"p_A": host, "out": out}, {})
    return out, expected, report


def problems(report: EmulationReport) -> set[str]:
    return {e.problem for e in report.errors}


#: (element type, swizzle, (batch, rows, cols)): the rows and columns run past the
#: last box; each row is a multiple of 16 bytes (a TMA stride).
CASES = [
    ("ek_bf16", 128, (3, 20, 72)),
    ("ek_f16", 128, (2, 13, 136)),
    ("float", 128, (2, 11, 36)),
    ("float", 0, (3, 9, 20)),
    ("double", 0, (2, 10, 10)),
]


@pytest.mark.parametrize(("ctype", "swizzle", "shape"), CASES)
def test_boxes_land_swizzled_with_zeros_past_the_extents(ctype, swizzle, shape):
    out, expected, report = run_tile(ctype, swizzle, shape)
    assert report.ok, report
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("origin", [(-3, -2), (5, 1)])
def test_boxes_at_negative_and_shifted_coordinates(origin):
    out, expected, report = run_tile("ek_bf16", 128, (2, 13, 72), origin=origin)
    assert report.ok, report
    np.testing.assert_array_equal(out, expected)


def test_new_kinds_are_named():
    assert KINDS[FIRST_KIND : FIRST_KIND + 4] == (HANG, BYTES, UNWAITED, UNINITIALISED)
    assert KINDS[:3] == ("out of bounds", "misaligned", "too many asynchronous copies in flight")


BF16 = ("ek_bf16", 128, (3, 20, 72))


def test_a_dropped_wait_reads_poison():
    out, expected, report = run_tile(*BF16, wait=False)
    assert np.isnan(out).all()  # every box still in flight when read
    assert problems(report) == {UNWAITED}
    assert report.error_count == 2 * 3 * 3 * 2  # two copies per block, 18 blocks


def test_a_flipped_parity_reads_poison():
    out, expected, report = run_tile(*BF16, parity=1)  # phase 0 counts as completed
    assert np.isnan(out).all()
    assert problems(report) == {UNWAITED}


def test_bytes_armed_short_are_reported():
    out, expected, report = run_tile(*BF16, armed=2 * 2048 - 128)
    assert problems(report) == {BYTES}
    assert report.error_count == 18  # one per block
    np.testing.assert_array_equal(out, expected)  # the copies landed all the same
    error = report.errors[0]
    assert (error.array, error.space, error.access, error.index) == (
        "bar",
        "shared",
        "mbarrier wait",
        0,
    )
    assert BYTES in str(report)


def test_a_missing_arrival_would_hang():
    _, _, report = run_tile(*BF16, arm=False)
    assert problems(report) == {HANG}
    assert {e.thread for e in report.errors} == {0}  # the first waiting thread


def test_a_copy_never_waited_for_is_reported():
    out, expected, report = run_tile(*BF16, stray=True)
    assert problems(report) == {UNWAITED}
    assert report.error_count == 18
    assert {(e.array, e.access, e.index, e.thread) for e in report.errors} == {
        ("bar", "bulk tensor copy", 1, 0)
    }
    np.testing.assert_array_equal(out, expected)


def test_an_uninitialised_mbarrier_is_reported():
    out, _, report = run_tile(*BF16, init=False)
    assert problems(report) == {UNINITIALISED}
    assert np.isnan(out).all()  # no copy was queued: the destination stays poisoned


def test_a_misaligned_destination_is_reported():
    _, _, report = run_tile(*BF16, shift=8)  # 16 bytes off a 128-byte boundary
    assert "misaligned" in problems(report)
    found = {(e.array, e.access, e.index) for e in report.errors if e.problem == "misaligned"}
    assert found == {("tile", "bulk tensor copy", 64 * 4 + 8)}


# ---- a k-step loop over two mbarriers ----------------------------------------


def good_parity(step: kir.Expr) -> kir.Expr:
    return mod(div(step, N(2)), N(2))  # step s uses mbarrier s % 2 for the (s/2)-th time


def kloop_kernel(rows: int, cols: int, parity=good_parity) -> tuple[kir.Kernel, int, int]:
    """out[r, u] = sum over steps s of A[r, 64·s + u] (bf16 A, rows × cols): each
    block takes 8 rows; thread 0 prefetches step s + 1 into stage (s + 1) % 2 on
    mbarrier (s + 1) % 2 while every thread waits for step s (phase parity
    ``parity(s)``), accumulates the stage, and meets the others at a barrier."""
    width, high, threads = 64, 8, 32
    steps, tiles_r = -(-cols // width), -(-rows // high)
    tmap = kir.TensorMap(
        "map_A",
        "p_A",
        "ek_bf16",
        (kir.MapDim("k", cols, 1, width), kir.MapDim("r", rows, cols, high)),
    )
    stage = width * high

    def fetch(step: kir.Expr) -> tuple[kir.Stmt, ...]:
        slot = mod(step, N(2))
        corner = (mul(step, N(width)), mul(BX, N(high)))
        return (
            kir.BarrierArm("bar", slot, tmap.box_bytes()),
            kir.TensorCopy("map_A", corner, "tile", mul(slot, N(stage)), "bar", slot),
        )

    s = V("s")
    per = stage // threads
    e = add(TX, mul(V("j"), N(threads)))
    element = add(mul(mod(s, N(2)), N(stage)), unswizzled(V("e"), 2, 128))
    accumulate = kir.For(
        "j",
        N(0),
        N(per),
        1,
        (kir.Declare("e", "int", e), kir.Store("acc", V("j"), kir.Load("tile", element), "+=")),
    )
    first = op("==", TX, N(0))
    loop = kir.Uniform(
        "s",
        0,
        steps,
        1,
        (
            kir.PerThread(
                (kir.If(op("&&", first, op("<", add(s, N(1)), N(steps))), fetch(add(s, N(1)))),)
            ),
            kir.PerThread((kir.BarrierWait("bar", mod(s, N(2)), parity(s)), accumulate)),
            kir.Barrier(),
        ),
    )
    at = add(mul(add(mul(BX, N(high)), div(V("e"), N(width))), N(width)), mod(V("e"), N(width)))
    body = (
        kir.PerThread(
            (
                kir.For("j", N(0), N(per), 1, (kir.Store("acc", V("j"), kir.Float(0.0)),)),
                kir.If(first, (kir.BarrierInit("bar", N(0)), kir.BarrierInit("bar", N(1)))),
            )
        ),
        kir.Barrier(),
        kir.PerThread((kir.If(first, fetch(N(0))),)),
        loop,
        kir.PerThread(
            (
                kir.For(
                    "j",
                    N(0),
                    N(per),
                    1,
                    (kir.Declare("e", "int", e), kir.Store("out", at, kir.Load("acc", V("j")))),
                ),
            )
        ),
    )
    kernel = kir.Kernel(
        "tma_kloop",
        (
            kir.Param("p_A", "ek_bf16", True, rows * cols),
            kir.Param("out", "float", True, tiles_r * high * width, readonly=False),
        ),
        threads,
        tiles_r,
        (kir.ThreadVar("acc", "float", per),),
        (kir.SharedArray("tile", "ek_bf16", 2 * stage, 1024), kir.SharedArray("bar", MBARRIER, 2)),
        body,
        maps=(tmap,),
    )
    return kernel, tiles_r * high, steps


def run_kloop(parity=good_parity) -> tuple[np.ndarray, np.ndarray, EmulationReport]:
    rows, cols = 20, 296  # 5 steps of 64 columns, 3 blocks of 8 rows; both run past
    kernel, padded_rows, steps = kloop_kernel(rows, cols, parity)
    host, values = random_values("ek_bf16", (rows, cols), seed=7)
    padded = np.zeros((padded_rows, steps * 64), np.float32)
    padded[:rows, :cols] = values
    expected = np.zeros((padded_rows, 64), np.float32)
    for s in range(steps):  # in the kernel's order, in float
        expected += padded[:, 64 * s : 64 * (s + 1)]
    out = np.full((padded_rows, 64), -1.0, np.float32)
    report = emulate([kernel], {"p_A": host, "out": out}, {})
    return out, expected, report


def test_two_mbarriers_over_several_phases():
    out, expected, report = run_kloop()
    assert report.ok, report
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize(
    "parity",
    [lambda s: mod(s, N(2)), lambda s: N(0), lambda s: op("-", N(1), good_parity(s))],
    ids=["s % 2", "always 0", "flipped"],
)
def test_a_wrong_phase_parity_is_caught(parity):
    out, expected, report = run_kloop(parity)
    assert not report.ok
    assert not np.array_equal(out, expected)
