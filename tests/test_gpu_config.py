"""Typed CUDA configurations, the decision's rule table, and the device limits
that the mapping check reads."""

from __future__ import annotations

from dataclasses import replace

import einkern
from einkern.gpu.decision import decide
from einkern.gpu.device import H100
from einkern.gpu.lower import check_mapping
from einkern.ir.task import statement_task


def test_check_mapping_takes_its_limits_from_the_device():
    """Threads per block, resident blocks and threads per SM, and the register tile
    cap come from the DeviceLimits object, not from constants."""
    problem = einkern.make_problem(einkern.load("examples/gemm.ein"), {"m": 64, "n": 64, "k": 64})
    task = statement_task(problem, 0)
    mapping = decide(task)
    assert check_mapping(task, mapping, limits=H100) == []
    small = replace(H100, max_threads_per_block=mapping.threads // 2)
    assert any(f"limit {mapping.threads // 2}" in p for p in check_mapping(task, mapping,
                                                                          limits=small))
    few_blocks = replace(H100, max_blocks_per_sm=1)
    found = check_mapping(task, replace(mapping, min_blocks=2), limits=few_blocks)
    assert any("0 to 1 blocks per SM" in p for p in found)
    narrow = replace(H100, max_threads_per_sm=mapping.threads)
    found = check_mapping(task, replace(mapping, min_blocks=2), limits=narrow)
    assert any(f"exceed {mapping.threads} threads per SM" in p for p in found)
    capped = replace(H100, max_register_tile=mapping.register_tile - 1)
    found = check_mapping(task, mapping, limits=capped)
    assert any(f"(max {mapping.register_tile - 1})" in p for p in found)
