"""The runtime boundary without a GPU: the one argument check (``Binder``), scalar
values, stream arguments, and the CUDA backend's readers that need no driver."""

from __future__ import annotations

import numpy as np
import pytest

import einkern
from einkern.backends import get_backend
from einkern.backends.binding import Binder, Call, article, bind_arguments, scalar_value
from einkern.backends.cuda import arrays as cuda_arrays
from einkern.errors import ArgumentError
from einkern.ir.nodes import Scalar

PROGRAM = """
dims n = 4
tensor x[n], y[n], z[n]
scalar s
y[i] = s * x[i]
"""


@pytest.fixture(scope="module")
def problem():
    return einkern.make_problem(einkern.load(PROGRAM))


def test_articles():
    assert article("int") == "an int" and article("list") == "a list"
    assert article("ArrayImpl") == "an ArrayImpl" and article("numpy.ndarray") == "a numpy.ndarray"


@pytest.mark.parametrize(
    "value, expected",
    [
        (2, 2.0),
        (2.5, 2.5),
        (np.float32(0.5), 0.5),
        (np.int8(-3), -3.0),
        (np.array(1.5), 1.5),
        (float("nan"), None),
        (float("-inf"), float("-inf")),
        (10**300, 1e300),
    ],
)
def test_scalar_values_that_fit(value, expected):
    got = scalar_value(Scalar("s", "float64"), value)
    assert np.isnan(got) if expected is None else got == expected


def test_scalar_values_refused():
    for value in (10**309, "1", b"1", None, [1.0], True, np.bool_(True), 1j, np.complex64(1)):
        with pytest.raises(ArgumentError, match="scalar 's'"):
            scalar_value(Scalar("s", "float64"), value)
    with pytest.raises(ArgumentError, match="float32"):
        scalar_value(Scalar("s", "float32"), 3.5e38)
    assert scalar_value(Scalar("s", "float32"), 3.4e38) == 3.4e38


def test_binder_fills_outputs_and_untouched_tensors(problem):
    binder = Binder(problem, get_backend("cpu"))
    x = np.arange(4.0)
    call = binder.bind((x,), {"s": 2})
    assert isinstance(call, Call) and set(call.arrays) == {"x", "y", "z"}
    assert call.scalars == {"s": 2.0} and call.stream is None
    assert call.infos["y"].shape == (4,) and call.infos["x"].pointer == x.ctypes.data


def test_bind_arguments_by_name_refuses_or_ignores_unknown_names(problem):
    cpu = get_backend("cpu")
    arrays = {"x": np.ones(4), "w": np.ones(4)}
    with pytest.raises(ArgumentError, match="no tensor 'w'"):
        bind_arguments(problem, cpu, arrays, {"s": 1.0})
    with pytest.raises(ArgumentError, match="no scalar 't'"):
        bind_arguments(problem, cpu, {"x": np.ones(4)}, {"s": 1.0, "t": 2.0})
    call = bind_arguments(problem, cpu, arrays, {"s": 1.0, "t": 2.0}, ignore_unknown=True)
    assert set(call.arrays) == {"x", "y", "z"} and call.scalars == {"s": 1.0}


def test_executable_run_binds_through_the_one_check(problem):
    executable = get_backend("cpu").build(problem)
    x, y = np.arange(4.0), np.zeros(4)
    executable.run({"x": x, "y": y}, {"s": 3.0, "unused": 1.0})
    np.testing.assert_array_equal(y, 3 * x)
    with pytest.raises(ArgumentError, match="read-only"):
        frozen = np.zeros(4)
        frozen.flags.writeable = False
        executable.run({"x": x, "y": frozen}, {"s": 1.0})
    with pytest.raises(ArgumentError, match="does not fit"):
        executable.run({"x": x, "y": y}, {"s": 10**400})


def test_two_inputs_may_share_memory():
    kernel = einkern.compile(
        "dims n = 3\ntensor a[n], b[n], c[n]\nc[i] = a[i] * b[i]", backend="cpu"
    )
    a = np.array([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(kernel(a, a), a * a)  # read twice, written never


class StreamLike:
    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


class TorchLikeStream:
    cuda_stream = 0x1234


class CupyLikeStream:
    ptr = 0x5678


def test_stream_arguments():
    assert cuda_arrays.stream_handle(0) == 0 and cuda_arrays.stream_handle(0xABC) == 0xABC
    assert cuda_arrays.stream_handle(StreamLike(0x99)) == 0x99
    assert cuda_arrays.stream_handle(TorchLikeStream()) == 0x1234
    assert cuda_arrays.stream_handle(CupyLikeStream()) == 0x5678
    for bad in ("s", 1.5, True, None, -1):
        with pytest.raises(ArgumentError):
            cuda_arrays.stream_handle(bad)
    assert cuda_arrays.resolve_stream(None, [np.ones(2)]) == cuda_arrays.LEGACY_STREAM
    assert cuda_arrays.resolve_stream(StreamLike(7), [np.ones(2)]) == 7


class DLPackOnly:
    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_host_dlpack_arrays_through_the_strided_memory_view():
    view = np.arange(60, dtype=np.float32).reshape(5, 12)[1:, 2:5]
    info = cuda_arrays.describe(DLPackOnly(view))
    assert info.shape == (4, 3) and info.strides == (12, 1) and info.dtype == "float32"
    assert info.device == "cpu" and info.pointer == view.ctypes.data
    assert info.library == "test_runtime"


def test_version_2_interfaces_are_restated_as_version_3():
    class Interface:
        __cuda_array_interface__ = {
            "shape": (2,),
            "typestr": "<f8",
            "data": (64, False),
            "version": 2,
        }

    shim = cuda_arrays._as_version_3(Interface())
    assert shim.__cuda_array_interface__["version"] == 3
    assert "stream" not in shim.__cuda_array_interface__  # nothing to wait for
    current = Interface()
    current.__cuda_array_interface__ = {**Interface.__cuda_array_interface__, "version": 3}
    assert cuda_arrays._as_version_3(current) is current


def test_torch_cpu_tensors_are_host_arrays_for_the_cuda_reader():
    torch = pytest.importorskip("torch")
    t = torch.arange(6, dtype=torch.float64).reshape(2, 3).t()
    info = cuda_arrays.describe(t)
    assert info.device == "cpu" and info.strides == (1, 3) and info.pointer == t.data_ptr()
    with pytest.raises(ArgumentError, match="detach"):
        cuda_arrays.describe(torch.ones(2, requires_grad=True))
