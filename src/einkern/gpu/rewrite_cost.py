"""The CUDA cost of a rewritten program's statements, for the rewrite plan
(:mod:`einkern.ir.rewrite_plan`): each statement's kernel under its default
mapping (the decision algorithm's), its time predicted by :mod:`.model` (a
transpose's by :func:`.transpose.predicted_transpose_time`), plus
:data:`KERNEL_SECONDS` per kernel, plus for a tensor-core kernel the sectors it
shares across batches (:func:`.mma_model.batch_sector_seconds`: what TTGT's
GEMM, with the batch outermost, does not pay, and the panels its batch order
re-reads: :func:`.block_order.batch_reread_seconds`), its copies once more
(:func:`.mma_model.exposed_copy_seconds`) and its output where every lane of a
warp's store writes a line of its own
(:func:`.mma_model.scattered_store_seconds`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import EinkernError
from ..ir.nodes import Problem
from ..ir.task import Task, statement_task
from .block_order import batch_reread_seconds
from .decision import decide
from .device import H100, DeviceLimits
from .mapping import Mapping
from .mma_model import (
    F64_SMALL_LIMIT,
    batch_sector_seconds,
    exposed_copy_seconds,
    mma_blocks,
    scattered_store_seconds,
    small_f64,
)
from .model import predicted_time
from .transpose import STRATEGY as TRANSPOSE
from .transpose import predicted_transpose_time

#: Each kernel's launch and drain beside its predicted run time: a rewrite's two to
#: five kernels pay it several times, which decides small problems (a 512³ DGEMM
#: split in two, a 30 µs contraction in three by TTGT: docs/rewrites.md).
KERNEL_SECONDS = 2e-6


@dataclass
class CudaRewriteModel:
    """:class:`~einkern.ir.rewrite_plan.CostModel` of the CUDA backend on ``limits``."""

    limits: DeviceLimits = H100
    _mappings: dict[tuple[Problem, int], Mapping] = field(default_factory=dict, repr=False)

    @property
    def sm_count(self) -> int:
        return self.limits.sm_count

    def mapping(self, problem: Problem, position: int) -> Mapping:
        key = (problem, position)
        if key not in self._mappings:
            self._mappings[key] = decide(statement_task(problem, position), self.limits)
        return self._mappings[key]

    def time(self, problem: Problem, positions: range) -> float:
        total = KERNEL_SECONDS * len(positions)
        for position in positions:
            try:
                mapping = self.mapping(problem, position)
            except EinkernError:
                return math.inf
            task = statement_task(problem, position)
            if mapping.strategy == TRANSPOSE:  # the general model takes it for uncoalesced
                total += predicted_transpose_time(task, self.limits)
            else:
                total += predicted_time(task, mapping, self.limits)
            total += sum(self._extra(task, mapping))
        return total

    def _extra(self, task: Task, mapping: Mapping) -> tuple[float, float, float, float]:
        """A tensor-core kernel's :func:`.mma_model.batch_sector_seconds` with the
        panels its batch order re-reads (:func:`.block_order.batch_reread_seconds`),
        :func:`.mma_model.exposed_copy_seconds` and
        :func:`.mma_model.scattered_store_seconds` (0 for other kernels and
        product families)."""
        if mapping.mma is None or mapping.mma.box:
            return 0.0, 0.0, 0.0, 0.0
        return (
            batch_sector_seconds(task, mapping.mma, self.limits),
            batch_reread_seconds(task, mapping.mma, self.limits),
            exposed_copy_seconds(task, mapping.mma, self.limits),
            scattered_store_seconds(task, mapping.mma, self.limits),
        )

    def tensor_cores(self, problem: Problem, position: int) -> bool:
        """Whether the default kernel of statement ``position`` is a tensor-core
        kernel other than a product family (False when no mapping fits)."""
        try:
            mapping = self.mapping(problem, position)
        except EinkernError:
            return False
        return mapping.mma is not None and not mapping.mma.box

    def details(self, problem: Problem, position: int) -> str:
        """What a tensor-core kernel's time includes beyond its own model: the
        sectors it shares across batches, when it does, and its copies."""
        try:
            mapping = self.mapping(problem, position)
        except EinkernError:
            return ""
        sectors, rereads, copies, stores = self._extra(statement_task(problem, position), mapping)
        parts = []
        if sectors:
            parts.append(
                f"{sectors * 1e6:.3g} us of it for sectors shared across batches: a batch "
                "index is a tensor's contiguous index"
            )
        if rereads:
            parts.append(
                f"{rereads * 1e6:.3g} us of it for operand panels re-read: the batch is "
                "fastest across blocks"
            )
        if copies:
            parts.append(f"{copies * 1e6:.3g} us of it for its tile copies beside the MMAs")
        if stores:
            parts.append(
                f"{stores * 1e6:.3g} us of it for its output stores: every lane of a warp "
                "writes a 128-byte line of its own"
            )
        return "; ".join(parts)

    def blocks(self, problem: Problem, position: int) -> int:
        """Blocks of the default kernel (a huge number when no mapping fits: the
        plan then never splits the statement).  For a small fp64 tile
        (:data:`.mma_model.F64_SMALL_TILES`), the blocks of the 64 × 64 tile: the
        split-K counts this sets fill the GPU with the partial sums' kernels,
        which are offered the small tiles only while they leave SMs idle
        (``dncf,nic->idf``: 17 slices for 16 blocks, 0.92x the time of 10 for the
        32 × 32 tile's 64; docs/tensor_cores.md "Small tiles for small problems")."""
        statement = problem.program.statements[position]
        try:
            mapping = self.mapping(problem, position)
        except EinkernError:
            return 2**62
        if mapping.mma is not None and not mapping.mma.box:  # one block per GEMM tile
            tile = F64_SMALL_LIMIT if small_f64(mapping.mma) else mapping.mma
            return mma_blocks(statement_task(problem, position), tile)
        return mapping.blocks(problem, statement)
