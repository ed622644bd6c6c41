"""Device limits used by the decision algorithm and the search space.

When a GPU is present they come from the driver; otherwise (CI, ``emit`` on a
laptop) from a table of known devices, H100 by default.
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


def current_limits() -> DeviceLimits:
    """Limits of GPU 0 when one is usable, else the H100 table entry."""
    try:
        from ..backends import get_backend

        backend = get_backend("cuda")
        if backend.available():
            props = backend.device_properties()  # type: ignore[attr-defined]
            return DeviceLimits(
                name=props.name,
                arch=props.arch,
                sm_count=props.multiprocessors,
                max_threads_per_block=props.max_threads_per_block,
                max_threads_per_sm=props.max_threads_per_multiprocessor,
                registers_per_sm=props.registers_per_multiprocessor,
                max_registers_per_thread=255,
                shared_per_block=props.shared_memory_per_block,
                shared_per_block_optin=props.shared_memory_per_block_optin,
                shared_per_sm=props.shared_memory_per_multiprocessor,
                l2_bytes=props.l2_cache_bytes,
            )
    except Exception:  # noqa: BLE001 - no driver, no GPU: use the table
        pass
    return H100
