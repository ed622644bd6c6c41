"""TMA tensor maps for a call: the 128-byte ``CUtensorMap`` of each
:class:`~einkern.gpu.kir.TensorMap` a kernel takes, encoded by the driver's
``cuTensorMapEncodeTiled`` from the address of the array it describes.

A map holds the global address, so it is encoded again whenever an array moves;
the encodings of recent (map, address) pairs are kept (:func:`encoded`), so a
call on the same arrays costs a dictionary lookup.  ``cuda.core`` has a tensor-map
type of its own, but it is built from a strided view of a typed array (no bf16
without ``ml_dtypes``) and its constructor is not settled across the 1.2
releases; the driver call is the stable interface, and the bytes go to
:func:`.driver.launch` as parameters."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Mapping, Sequence

from ...errors import BackendError
from ...gpu import kir
from ...gpu.tma_text import map_buffers
from . import driver

#: The driver's data type of each element type a map may have.
DATA_TYPE = {
    "ek_bf16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16",
    "ek_f16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16",
    "float": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32",
    "double": "CU_TENSOR_MAP_DATA_TYPE_FLOAT64",
}
SWIZZLE = {0: "CU_TENSOR_MAP_SWIZZLE_NONE", 128: "CU_TENSOR_MAP_SWIZZLE_128B"}


@functools.lru_cache(maxsize=256)
def encoded(tmap: kir.TensorMap, pointer: int) -> bytes:
    """The ``CUtensorMap`` of ``tmap`` over the array at device address ``pointer``
    (16-byte aligned): zeros past the extents, L2 promotion of 256 bytes."""
    if pointer % 16:
        raise BackendError(f"tensor map {tmap.name}: address {pointer:#x} is not 16-byte aligned")
    cuda = driver._cuda()
    size = kir.ELEMENT_BYTES[tmap.ctype]
    err, value = cuda.cuTensorMapEncodeTiled(
        getattr(cuda.CUtensorMapDataType, DATA_TYPE[tmap.ctype]),
        cuda.cuuint32_t(len(tmap.dims)),
        pointer,
        [cuda.cuuint64_t(d.extent) for d in tmap.dims],
        [cuda.cuuint64_t(d.stride * size) for d in tmap.dims[1:]],
        [cuda.cuuint32_t(d.box) for d in tmap.dims],
        [cuda.cuuint32_t(1) for _ in tmap.dims],
        cuda.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(cuda.CUtensorMapSwizzle, SWIZZLE[tmap.swizzle]),
        cuda.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cuda.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    driver.check((err,), f"cuTensorMapEncodeTiled({tmap.name})")
    return ctypes.string_at(value.getPtr(), 128)


def map_arguments(
    maps: tuple[tuple[str, kir.TensorMap], ...], pointers: Mapping[str, int]
) -> list[bytes]:
    """The encoded maps of a launch, each over its buffer's address in ``pointers``."""
    return [encoded(tmap, pointers[buffer]) for buffer, tmap in maps]


def kernel_map_arguments(kernel: kir.Kernel, pointers: Sequence[int]) -> list[bytes]:
    """The encoded maps of ``kernel`` given the addresses of its array parameters
    in order (a kernel launched directly, without a launch specification)."""
    arrays = [p.name for p in kernel.params if p.is_array]
    return map_arguments(
        map_buffers(kernel, tuple(arrays)), dict(zip(arrays, pointers, strict=True))
    )
