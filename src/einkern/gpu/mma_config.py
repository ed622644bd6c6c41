"""The tile shape of a tensor-core kernel (:class:`MmaConfig`): the value that
:class:`~einkern.gpu.mapping.Mapping` (strategy ``"mma"``) and
:class:`~einkern.gpu.config.CudaConfig` carry, and that
:mod:`einkern.gpu.mma_lower` turns into a kernel."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from .mma import SHAPES

#: The mapping strategy of tensor-core kernels.
STRATEGY = "mma"


@dataclass(frozen=True)
class MmaConfig:
    """A block computes a ``BM × BN`` output tile: ``warps_m × warps_n`` warps, each
    a ``tiles_m × tiles_n`` grid of instruction tiles; K steps by ``k_step``
    (see :mod:`einkern.gpu.mma_lower`); blocks are ordered by ``group_m``."""

    shape: str = "m16n8k4_f64"
    warps_m: int = 4
    warps_n: int = 4
    tiles_m: int = 2
    tiles_n: int = 4
    k_step: int = 16
    padding: int = -1  # extra elements per shared row; -1: conflict-free for 8-byte fragments
    stages: int = 1  # shared buffers per tile (1 or 2 via registers; 2-4 asynchronous)
    #: global → shared: "registers" (prefetched), "async" (cp.async) or "tma" (bulk
    #: tensor copies on mbarriers: warpgroup shapes only)
    copy: str = "registers"
    #: tf32 shapes only: each operand split into a tf32 high and low part and three
    #: MMAs (lo·hi + hi·lo + hi·hi): fp32-level accuracy (3xTF32).
    split: bool = False
    #: how the accumulators reach the output: "direct" (each lane stores its own
    #: elements, two adjacent ones per row) or "shared" (through a shared-memory
    #: tile, one instruction-tile row of every warp at a time, stored by all
    #: threads along the output's contiguous index)
    epilogue: str = "direct"
    #: product families only (:mod:`einkern.gpu.mma_family`): the block's box of
    #: the output, elements per output index (absent: 1); empty for one contraction
    box: tuple[tuple[str, int], ...] = ()
    #: block order: consecutive blocks walk down ``group_m`` M tiles, then to the
    #: next N tile, so the blocks resident at once share A and B panels in L2
    #: (1: M tile fastest over the whole of M, the order before this field)
    group_m: int = 1
    #: block order across batches: consecutive blocks walk the batch first (the
    #: same M and N tile of neighbouring batches resident together), so that an
    #: operand or output whose contiguous index is a batch index has its 32-byte
    #: sectors used by blocks that run at the same time (False: the batch slowest)
    batch_inner: bool = False
    #: product families only: terms that can share one accumulator layout (their
    #: lanes own the same box elements) accumulate in the same registers and are
    #: relaid into the box once per group (:mod:`einkern.gpu.mma_family_groups`)
    group_terms: bool = False

    def block_tile(self) -> tuple[int, int]:
        shape = SHAPES[self.shape]
        return self.warps_m * self.tiles_m * shape.m, self.warps_n * self.tiles_n * shape.n

    @property
    def itemsize(self) -> int:
        """Bytes of an element staged in shared memory: 8 for f64 inputs, 4 for tf32,
        2 for bf16/f16."""
        return {"f64": 8, "tf32": 4}.get(SHAPES[self.shape].input_type, 2)

    @property
    def accumulator_size(self) -> int:
        """Bytes of an accumulator element: 8 (f64) or 4 (f32)."""
        return 8 if SHAPES[self.shape].accumulator == "f64" else 4

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    def describe(self) -> str:
        if self.box:
            return self.describe_family()
        bm, bn = self.block_tile()
        copy = {"async": "cp.async", "tma": "TMA"}.get(self.copy, "register-prefetched")
        return (
            f"{self.shape} tensor cores, block tile {bm}x{bn}, {self.warps_m}x{self.warps_n} "
            f"warps of {self.tiles_m}x{self.tiles_n} instruction tiles, k-step {self.k_step}, "
            f"{self.stages} stage(s) {copy}"
            + (", 3xTF32" if self.split else "")
            + (", shared-memory epilogue" if self.epilogue == "shared" else "")
            + (f", blocks in groups of {self.group_m} M tiles" if self.group_m > 1 else "")
            + (", batch fastest across blocks" if self.batch_inner else "")
        )

    def describe_family(self) -> str:
        """:meth:`describe` of a product-family kernel (``box`` set)."""
        box = "x".join(f"{e}{n}" for n, e in self.box if e > 1) or "1"
        return (
            f"{self.shape} tensor cores on a product family, output box {box} in shared "
            f"memory, {self.warps_m}x{self.warps_n} warps, k-step {self.k_step}, "
            f"{self.stages} cp.async stage(s), "
            + (
                "terms sharing an accumulator layout relaid into the box once per group"
                if self.group_terms
                else "each term's products relaid into the box"
            )
        )

    def values(self) -> dict[str, Any]:
        """The named values (``box`` as pairs, absent when empty: the JSON form of
        configurations from before product families is unchanged)."""
        data = asdict(self)
        if self.box:
            data["box"] = [list(pair) for pair in self.box]
        else:
            del data["box"]
        if self.group_m == 1:
            del data["group_m"]
        if not self.batch_inner:
            del data["batch_inner"]
        if not self.group_terms:
            del data["group_terms"]
        return data

    @classmethod
    def from_values(cls, data: Mapping[str, Any]) -> MmaConfig:
        """The config of these named values (TypeError/ValueError when malformed)."""
        if not isinstance(data, Mapping):
            raise TypeError(f"mma must be an object of {', '.join(f.name for f in fields(cls))}")
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown mma parameters {unknown}")
        values = dict(data)
        if "box" in values:
            box = values["box"]
            if not isinstance(box, list | tuple) or not all(
                isinstance(p, list | tuple)
                and len(p) == 2
                and isinstance(p[0], str)
                and isinstance(p[1], int)
                and not isinstance(p[1], bool)
                and p[1] >= 1
                for p in box
            ):
                raise TypeError(f"mma box {box!r} (pairs of an index name and a positive extent)")
            values["box"] = tuple((str(n), int(e)) for n, e in box)
        config = cls(**values)
        for f in fields(cls):
            if f.name == "box":
                continue
            value = getattr(config, f.name)
            wanted = {
                "shape": str,
                "copy": str,
                "epilogue": str,
                "split": bool,
                "batch_inner": bool,
                "group_terms": bool,
            }.get(f.name, int)
            if not isinstance(value, wanted) or (wanted is int and isinstance(value, bool)):
                raise TypeError(f"mma {f.name} {value!r} ({wanted.__name__})")
        if config.group_m < 1:
            raise ValueError(f"mma group_m {config.group_m} (a positive number of M tiles)")
        if config.shape not in SHAPES:
            raise ValueError(f"unknown MMA shape {config.shape!r} (one of {', '.join(SHAPES)})")
        return config

    def to_json(self) -> str:
        return json.dumps(self.values(), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> MmaConfig:
        return MmaConfig.from_values(json.loads(text))
