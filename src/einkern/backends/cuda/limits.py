"""The runtime's view of the GPU for planning: :class:`~einkern.gpu.device.DeviceLimits`
of GPU 0 read from the driver, or the planner's H100 table entry when no GPU is
usable (CI, ``emit`` on a laptop).  The GPU planner never queries the device
itself: the runtime passes these limits down."""

from __future__ import annotations

import functools

from ...gpu.device import H100, DeviceLimits


def limits_of(props) -> DeviceLimits:
    """:class:`DeviceLimits` from the driver's :class:`~.driver.DeviceProperties`."""
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


@functools.cache
def device_limits() -> DeviceLimits:
    """Limits of GPU 0 when one is usable, else the H100 table entry (read once)."""
    try:
        from . import driver

        if driver.device_count() > 0:
            return limits_of(driver.device_properties(0))
    except Exception:  # noqa: BLE001 - no cuda-bindings, no driver, no GPU: use the table
        pass
    return H100
