"""Device limits used by the decision algorithm, the search space and the cost
model: pure data.  The planner never queries a device; the runtime does
(:func:`einkern.backends.cuda.limits.device_limits`: GPU 0's limits, or
:data:`H100` when no GPU is usable) and passes them down.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceLimits:
    name: str
    arch: str  # e.g. "sm_90"
    sm_count: int
    max_threads_per_block: int
    max_threads_per_sm: int
    registers_per_sm: int
    max_registers_per_thread: int
    shared_per_block: int  # without opt-in
    shared_per_block_optin: int
    shared_per_sm: int
    l2_bytes: int
    warp_size: int = 32
    max_blocks_per_sm: int = 32  # resident blocks per SM (sm_80 and later)
    #: Outputs one thread may accumulate in registers (einkern's cap: each output
    #: holds one accumulator register, and a thread has at most 255).
    max_register_tile: int = 256
    # Throughputs for the analytic model (measured figures replace them in benchmarks).
    dram_bandwidth: float = 3.0e12  # bytes/s, read + write
    fp32_flops: float = 60e12  # FMA counted as two flops, no tensor cores
    fp64_flops: float = 30e12
    clock_hz: float = 1.75e9
    #: DRAM latency under load: with the bandwidth, the bytes an SM must keep in
    #: flight to stream at full speed (Little's law; H100 about 600 ns).
    dram_latency: float = 600e-9
    #: An SM takes in at most one thread block per this many seconds, whatever the
    #: block does (H100: einkern's transpose of 2 × 2 … 9 × 31-element tiles,
    #: 0.24 to 8.4 million blocks, ran at 0.60 ns a block over its 132 SMs, within
    #: 4 % across sizes and types; docs/rewrites.md, "Transposes").
    block_seconds: float = 79e-9


H100 = DeviceLimits(
    name="NVIDIA H100 80GB HBM3 (assumed)",
    arch="sm_90",
    sm_count=132,
    max_threads_per_block=1024,
    max_threads_per_sm=2048,
    registers_per_sm=65536,
    max_registers_per_thread=255,
    shared_per_block=48 * 1024,
    shared_per_block_optin=227 * 1024,
    shared_per_sm=228 * 1024,
    l2_bytes=50 * 1024 * 1024,
)
