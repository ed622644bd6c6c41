"""Benchmark cases that run an ``einkern.blas`` routine instead of a program, and
the BLAS libraries they are compared with.

A routine case names its routine and variant (:attr:`Case.routine`: ``axpy``,
``gemv:N``/``T``, ``symv:L``/``U``, ``gemm:NN``…``TT``, ``syrk:L``/``U``,
``trsm:`` side, uplo, trans, diag as in ``trsm:LLNN``) and its sizes (``n``,
``k`` for syrk, ``m`` right-hand sides for trsm).  Inputs are drawn on the host
(uniform in [0.5, 1.5), trsm's diagonal 2n so that the solve is well
conditioned) and moved to the device once; the reference is SciPy's float64
BLAS.  Counts are BLAS's: flops 2n (axpy), 2n² (gemv, symv), 2n³ (gemm),
n²k + nk (syrk), n²m (trsm); bytes the fewest a routine moves — symv and trsm
read one triangle of ``A``, syrk writes one of ``C`` — so the floor of symv is
half of gemv's.  ``alpha`` is 1.5 and ``beta`` 0 (``y``/``C`` not read).

Peers: cuBLAS through torch (axpy, gemv, gemm; trsm through
``torch.linalg.solve_triangular``; torch has no symv or syrk) and through CuPy's
``cupy.cublas`` and ``cupyx.scipy.linalg`` where installed, SciPy's BLAS
(OpenBLAS or whichever BLAS SciPy links) on the CPU.  Row-major arrays are
handed to these column-major libraries as their transposes, ops flipped, so
none of them copies.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .case import Case
from .peers import NotApplicable, Run
from .results import EINKERN, Measurement

ALPHA = 1.5
DTYPES = {"s": "float32", "d": "float64"}


def parts(case: Case) -> tuple[str, str, str]:
    """(dtype, routine, variant) of ``sgemm:NT`` and the like."""
    name, _, variant = case.routine.partition(":")
    return DTYPES[name[0]], name[1:], variant


def counts(case: Case) -> tuple[int, int]:
    """(flops, fewest bytes) of a routine case."""
    dtype, routine, _ = parts(case)
    itemsize = 4 if dtype == "float32" else 8
    e = case.extent_map
    n = e["n"]
    if routine == "axpy":
        return 2 * n, 3 * n * itemsize
    if routine == "gemv":
        return 2 * n * n, (n * n + 2 * n) * itemsize
    if routine == "symv":
        return 2 * n * n, (n * (n + 1) // 2 + 2 * n) * itemsize
    if routine == "gemm":
        return 2 * n**3, 3 * n * n * itemsize
    if routine == "syrk":
        k = e["k"]
        return n * (n + 1) * k, (n * k + n * (n + 1) // 2) * itemsize
    if routine == "trsm":
        m = e["m"]
        return n * n * m, (n * (n + 1) // 2 + 2 * n * m) * itemsize
    raise ValueError(f"unknown routine {case.routine!r}")


def host_inputs(case: Case, seed: int) -> dict[str, np.ndarray]:
    """The routine's arrays, drawn on the host."""
    dtype, routine, variant = parts(case)
    e = case.extent_map
    n = e["n"]
    rng = np.random.default_rng(seed)

    def draw(*shape: int) -> np.ndarray:
        return rng.uniform(0.5, 1.5, size=shape).astype(dtype)

    if routine in ("axpy",):
        return {"x": draw(n), "y": draw(n)}
    if routine in ("gemv", "symv"):
        return {"a": draw(n, n), "x": draw(n)}
    if routine == "gemm":
        return {"a": draw(n, n), "b": draw(n, n)}
    if routine == "syrk":
        return {"a": draw(n, e["k"])}
    a = draw(n, n)
    a[np.diag_indices(n)] += 2 * n
    return {"a": a, "b": draw(n, e["m"]) if variant[0] == "L" else draw(e["m"], n)}


def trsm_flags(variant: str) -> dict[str, Any]:
    """``LLNN`` → side, lower, trans, unit."""
    side, uplo, trans, diag = variant[0], variant[1], variant[2], variant[3]
    return {"side": side, "lower": uplo == "L", "trans": trans == "T", "unit": diag == "U"}


def einkern_call(case: Case) -> Callable[[Mapping[str, Any]], Any]:
    """einkern.blas on the case's arrays."""
    from .. import blas

    _, routine, variant = parts(case)
    if routine == "axpy":
        return lambda v: blas.axpy(ALPHA, v["x"], v["y"])
    if routine == "gemv":
        return lambda v: blas.gemv(ALPHA, v["a"], v["x"], trans=variant == "T")
    if routine == "symv":
        return lambda v: blas.symv(ALPHA, v["a"], v["x"], lower=variant == "L")
    if routine == "gemm":
        ta, tb = variant[0] == "T", variant[1] == "T"
        return lambda v: blas.gemm(ALPHA, v["a"], v["b"], trans_a=ta, trans_b=tb)
    if routine == "syrk":
        return lambda v: blas.syrk(ALPHA, v["a"], lower=variant == "L")
    flags = trsm_flags(variant)
    return lambda v: blas.trsm(ALPHA, v["a"], v["b"], **flags)


def scipy_call(case: Case, dtype: str) -> Callable[[Mapping[str, Any]], Any]:
    """SciPy's BLAS on row-major arrays, each matrix passed as its (Fortran-ordered)
    transpose with the op flipped: no copies."""
    import scipy.linalg.blas as sb

    prefix = "s" if dtype == "float32" else "d"
    _, routine, variant = parts(case)
    fn = getattr(sb, prefix + routine)
    if routine == "axpy":
        return lambda v: fn(v["x"], v["y"].copy(), a=ALPHA)
    if routine == "gemv":
        return lambda v: fn(ALPHA, v["a"].T, v["x"], trans=int(variant == "N"))
    if routine == "symv":
        return lambda v: fn(ALPHA, v["a"].T, v["x"], lower=int(variant != "L"))
    if routine == "gemm":  # C = op(A) op(B)  <=>  Cᵀ = op(B)ᵀ op(A)ᵀ
        ta, tb = int(variant[0] == "T"), int(variant[1] == "T")
        return lambda v: fn(ALPHA, v["b"].T, v["a"].T, trans_a=tb, trans_b=ta).T
    if routine == "syrk":  # A Aᵀ with Aᵀ given: trans, the other triangle
        return lambda v: fn(ALPHA, v["a"].T, trans=1, lower=int(variant != "L")).T
    f = trsm_flags(variant)  # op(A) X = B  <=>  Xᵀ op(A)ᵀ = Bᵀ: the other side, Aᵀ given
    side, lower = int(f["side"] == "L"), int(not f["lower"])
    trans, unit = int(f["trans"]), int(f["unit"])
    return lambda v: (
        fn(ALPHA, v["a"].T, v["b"].T, side=side, lower=lower, trans_a=trans, diag=unit).T
    )


def reference(case: Case, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """SciPy's float64 result (syrk's other triangle is zero, as einkern's)."""
    wide = {name: np.asarray(a, dtype=np.float64) for name, a in inputs.items()}
    return np.asarray(scipy_call(case, "float64")(wide))


class _BlasPeer:
    """A BLAS library: rows for routine cases only (:meth:`prepare_routine`)."""

    routines_only = True  # no rows for tensor programs

    def prepare(self, case, problem, arrays, scalars) -> Run:
        raise NotApplicable("runs BLAS routines only")


class ScipyPeer(_BlasPeer):
    """SciPy's BLAS on the CPU (``scipy.linalg.blas``)."""

    name = "SciPy BLAS"
    backend = "cpu"

    def available(self) -> str | None:
        try:
            import scipy.linalg.blas  # noqa: F401
        except ImportError as error:
            return f"ImportError: {error}"
        return None

    def prepare_routine(self, case: Case, arrays: dict[str, Any], dtype: str) -> Run:
        call = scipy_call(case, dtype)
        return lambda: {"result": call(arrays)}


class TorchBlasPeer(_BlasPeer):
    """cuBLAS through torch: ``torch.add``, ``torch.addmv``, ``torch.addmm`` (TF32 off;
    ``alpha`` given to cuBLAS, ``beta`` 0), ``torch.linalg.solve_triangular`` (then
    a scaling by ``alpha``, which torch does not pass on); symv and syrk are not in
    torch."""

    name = "cuBLAS (torch)"
    backend = "cuda"

    def available(self) -> str | None:
        try:
            import torch
        except ImportError as error:
            return f"ImportError: {error}"
        if not torch.cuda.is_available():
            return "PyTorch sees no CUDA device"
        torch.backends.cuda.matmul.allow_tf32 = False
        return None

    def prepare_routine(self, case: Case, arrays: dict[str, Any], dtype: str) -> Run:
        import torch

        _, routine, variant = parts(case)
        v = arrays
        if routine == "axpy":
            return lambda: {"result": torch.add(v["y"], v["x"], alpha=ALPHA)}
        if routine == "gemv":
            a = v["a"].T if variant == "T" else v["a"]
            z = torch.empty_like(v["x"])  # not read: beta 0, alpha passed to cuBLAS
            return lambda: {"result": torch.addmv(z, a, v["x"], beta=0, alpha=ALPHA)}
        if routine == "gemm":
            a = v["a"].T if variant[0] == "T" else v["a"]
            b = v["b"].T if variant[1] == "T" else v["b"]
            c = torch.empty_like(v["a"])  # not read: beta 0, alpha passed to cuBLAS
            return lambda: {"result": torch.addmm(c, a, b, beta=0, alpha=ALPHA)}
        if routine == "trsm":
            f = trsm_flags(variant)
            a = v["a"].T if f["trans"] else v["a"]
            upper = f["lower"] == f["trans"]
            left, unit = f["side"] == "L", f["unit"]

            def solve() -> Mapping[str, Any]:
                x = torch.linalg.solve_triangular(
                    a, v["b"], upper=upper, left=left, unitriangular=unit
                )
                return {"result": x.mul_(ALPHA)}

            return solve
        raise NotApplicable(f"torch exposes no {routine}")


class CupyBlasPeer(_BlasPeer):
    """cuBLAS through CuPy (``cupy.cublas``; trsm: ``cupyx.scipy.linalg``), on the
    same memory as torch's tensors (DLPack)."""

    name = "cuBLAS (CuPy)"
    backend = "cuda"

    def available(self) -> str | None:
        try:
            import cupy
            import cupy.cublas  # noqa: F401

            cupy.cuda.runtime.getDeviceCount()
        except Exception as error:  # noqa: BLE001 - the reason is the report
            return f"{type(error).__name__}: {error}"
        return None

    def prepare_routine(self, case: Case, arrays: dict[str, Any], dtype: str) -> Run:
        import cupy
        from cupy import cublas

        _, routine, variant = parts(case)
        v = {name: cupy.from_dlpack(a) for name, a in arrays.items()}
        n = case.extent_map["n"]
        if routine == "axpy":
            y = v["y"].copy()
            return lambda: {"result": (cublas.axpy(ALPHA, v["x"], y), y)[1]}
        if routine == "gemv":  # cupy.cublas.gemv takes row-major A as it is
            y = cupy.empty((n,), dtype=dtype)  # cupy.cublas.gemv updates y, returns None
            return lambda: {"result": (cublas.gemv(variant, ALPHA, v["a"], v["x"], 0.0, y), y)[1]}
        if routine == "symv":
            return _cupy_symv(v["a"], v["x"], dtype, lower=variant == "L")
        if routine == "gemm":
            a = v["a"].T if variant[0] == "T" else v["a"]
            b = v["b"].T if variant[1] == "T" else v["b"]
            out = cupy.empty((n, n), dtype=dtype)
            return lambda: {"result": cublas.gemm("N", "N", a, b, out, alpha=ALPHA)}
        if routine == "syrk":  # A Aᵀ on row-major A: column-major Aᵀ, trans, other triangle
            out = cupy.zeros((n, n), dtype=dtype, order="F")
            lower = variant != "L"
            return lambda: {"result": cublas.syrk("T", v["a"].T, out, alpha=ALPHA, lower=lower).T}
        if routine == "trsm":
            from cupyx.scipy.linalg import solve_triangular

            f = trsm_flags(variant)
            if f["side"] != "L":
                raise NotApplicable("cupyx.scipy.linalg.solve_triangular solves on the left")
            return lambda: {
                "result": solve_triangular(
                    v["a"],
                    v["b"],
                    trans=int(f["trans"]),
                    lower=f["lower"],
                    unit_diagonal=f["unit"],
                )
                * ALPHA
            }
        raise NotApplicable(f"cupy.cublas has no {routine}")


def _cupy_symv(a: Any, x: Any, dtype: str, lower: bool) -> Run:
    """cuBLAS's symv on CuPy arrays, called through ctypes (neither ``cupy.cublas``
    nor CuPy's raw binding has symv): row-major ``a`` storing the ``lower``
    triangle is column-major storing the upper one."""
    import ctypes

    import cupy

    library = _cublas_library()
    handle = ctypes.c_void_p()
    if library.cublasCreate_v2(ctypes.byref(handle)) != 0:
        raise RuntimeError("cublasCreate failed")
    n = int(a.shape[0])
    call = library.cublasDsymv_v2 if dtype == "float64" else library.cublasSsymv_v2
    scalar = ctypes.c_double if dtype == "float64" else ctypes.c_float
    alpha, beta = scalar(ALPHA), scalar(0.0)
    fill = 1 if lower else 0  # CUBLAS_FILL_MODE_UPPER / _LOWER
    y = cupy.empty((n,), dtype=dtype)
    pointer = ctypes.c_void_p

    def run() -> Mapping[str, Any]:
        library.cublasSetStream_v2(handle, pointer(cupy.cuda.get_current_stream().ptr))
        a_, x_, y_ = (pointer(v.data.ptr) for v in (a, x, y))
        status = call(handle, fill, n, ctypes.byref(alpha), a_, n, x_, 1, ctypes.byref(beta), y_, 1)
        if status != 0:
            raise RuntimeError(f"cublas symv returned status {status}")
        return {"result": y}

    return run


def _cublas_library() -> Any:
    """The cuBLAS shared library the process has loaded (CuPy's or torch's), by
    soname, or one from the ``nvidia-cublas`` wheels."""
    import ctypes
    import glob
    import os
    import site

    names = ["libcublas.so.13", "libcublas.so.12", "libcublas.so"]
    for directory in site.getsitepackages():
        names += sorted(glob.glob(os.path.join(directory, "nvidia", "*", "lib", "libcublas.so*")))
        names += sorted(glob.glob(os.path.join(directory, "nvidia", "cu*", "lib", "libcublas.so*")))
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise NotApplicable("no cuBLAS shared library found for symv")


def routine_peers() -> list[tuple[str, Callable[[], Any]]]:
    """The BLAS peers, ``(name, factory)`` in the order they run."""
    return [(p.name, p) for p in (ScipyPeer, TorchBlasPeer, CupyBlasPeer)]


def run_routine_case(runner: Any, case: Case, step: Callable[[str], None]) -> list[Measurement]:
    """Every implementation's row for one routine case (``runner``: a
    :class:`~einkern.bench.runner.Runner`)."""
    dtype = parts(case)[0]
    flops, nbytes = counts(case)
    seed = zlib.crc32(f"{runner.options.seed}/{case.key}".encode())
    host = host_inputs(case, seed)
    common: dict[str, Any] = dict(
        dtype=dtype,
        flops=flops,
        min_bytes=nbytes,
        fused_min_bytes=nbytes,
        floor_s=runner.calibration.floor(flops, nbytes, dtype),
        tolerance=1e-5 if dtype == "float32" else 1e-12,
        reference="SciPy BLAS float64",
    )
    try:
        expected: Any = {"result": reference(case, host)}
    except Exception as error:  # noqa: BLE001 - recorded in the rows
        expected, common["reference"] = None, f"reference failed: {type(error).__name__}: {error}"
    device = runner.device
    inputs = {name: _to_device(device, array) for name, array in host.items()}
    call = einkern_call(case)
    rows = []
    step(EINKERN)

    def mine(work: dict[str, Any]) -> Run:
        return lambda: {"result": call(work)}

    common_einkern = dict(common, compile_s=None)
    rows.append(runner._measure(case, EINKERN, mine, ("result",), inputs, expected, common_einkern))
    for peer in runner.peers_for(case):

        def prepare(work: dict[str, Any], peer: Any = peer) -> Run:
            return peer.prepare_routine(case, work, dtype)

        rows.append(
            runner.peer_row(case, peer, prepare, ("result",), inputs, expected, common, step)
        )
    return rows


def _to_device(device: Any, array: np.ndarray) -> Any:
    if device.backend != "cuda":
        return array
    import torch

    return torch.from_numpy(array).cuda()
