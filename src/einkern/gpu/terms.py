"""The analytic model's terms (:class:`Terms`): the bounds of one mapping in
seconds, shared by the SIMT model (:mod:`einkern.gpu.model`) and the tensor-core
model (:mod:`einkern.gpu.mma_model`)."""

from __future__ import annotations

from dataclasses import dataclass

#: The model's terms, in the order :class:`Terms` and
#: :class:`~einkern.gpu.model.Calibration` hold them.
TERMS = ("dram", "l2", "lsu", "arithmetic", "latency")


@dataclass(frozen=True)
class Terms:
    """The model's bounds for one mapping, in seconds (see :mod:`einkern.gpu.model`),
    and the efficiency the throughput bounds are already divided by."""

    dram: float
    l2: float
    lsu: float
    arithmetic: float
    latency: float
    efficiency: float = 1.0
    factor: float = 1.0  # measured effects applied after combining (preload)

    def values(self) -> tuple[float, ...]:
        return tuple(getattr(self, name) for name in TERMS)

    def dominant(self) -> str:
        return max(TERMS, key=lambda name: getattr(self, name))

    def to_json(self) -> dict[str, float]:
        return {
            **{name: getattr(self, name) for name in TERMS},
            "efficiency": self.efficiency,
            "factor": self.factor,
        }


#: L2 → SM bandwidth, as a multiple of the DRAM bandwidth (H100: sd_t_d1_1 at T = 16
#: runs in 0.108 ms while its blocks read 4× the DRAM floor's bytes from L2).
L2_OVER_DRAM = 4.0
