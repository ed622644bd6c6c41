"""Which rewrites a program gets: the planning step between problem and backend.

:func:`plan` walks the statements from last to first (so that earlier positions
stay valid) and for each:

1. ``split_products`` when a product of three or more tensors does at most half
   the arithmetic pairwise, with intermediates within the memory limit (by flop
   count: the same on every backend; :class:`~.rewrite.ProductSplit`);
2. with a cost model (the CUDA backend's), each statement that results is
   compared with its ``ttgt`` and ``split_k`` candidates: the candidate whose
   kernels' predicted times sum lowest is taken when it beats the statement's
   own predicted time by :data:`MARGIN` (the model is rough; a rewrite adds
   launches and traffic it must clearly repay).  ``split_k`` wants these slice
   counts (:func:`split_slices`): when the statement's default mapping has fewer
   blocks than the GPU has SMs, ``S = ceil(2 · SMs / blocks)`` (two waves of
   blocks), at most one per 128 terms of its sum (all of the sum's indices
   counted: ``dncf,nic->idf`` sums 131 × 83 terms); and when its blocks make
   fewer than :data:`DEEP_WAVES` waves, also :data:`DEEP_SLICES` and the
   counts of :data:`DEEP_LADDER`, at most one per :data:`DEEP_SLICE` terms (a
   long sum onto few blocks: the slices' own kernel may take wider tiles).
   :func:`~.rewrite_k.split_choices` turns each into an index of the sum and a
   count that divides its extent, or padding.  ``relayout`` copies one operand
   into the order its tiles read best (:mod:`.rewrite_layout`); it is offered
   only where the statement's kernel is a tensor-core kernel
   (:meth:`CostModel.tensor_cores`): the SIMT kernels stage each operand along
   its own contiguous index already, and their model misjudged the copy (H100:
   of 11 float32 contractions it would have rewritten, 5 ran 0.1-0.64x as
   fast; docs/rewrites.md).  The copy's reader may run on either: on the
   relaid operand the decision often finds a SIMT point faster than the
   tensor-core kernel (of 10 such reader kernels measured, the model put 8
   within 0.7-1.45x of their time).

Every choice, taken or not, leaves a line in :attr:`RewritePlan.notes`.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from .nodes import Problem
from .rewrite import Rewrite, RewriteError, split_products
from .rewrite_k import longest_index, split_choices, split_k, split_k_target, split_outer
from .rewrite_layout import OPERANDS, relayout
from .rewrite_ttgt import ttgt
from .task import statement_task

#: The rewrites there are, by name.
REWRITES = ("split_products", "split_k", "ttgt", "relayout")
#: A candidate must be predicted this much faster than the statement (ratio):
#: a rewrite adds launches and traffic it must clearly repay.  0.85 since the
#: twenty-seventh session (0.6 before, when the split plans' predictions were
#: uncalibrated): on the 20 contractions of seeds 2 and 43 whose best candidate
#: fell between the two, taking it was 1.40x faster on geometric mean on an H100
#: (docs/rewrites.md); split plans now measure 1.25x their prediction, the
#: unrewritten kernels 1.38x.
MARGIN = 0.85
#: Fewest summed terms per split-K slice.
MIN_SLICE = 128
#: The deep split-K candidate: for a statement whose blocks make fewer than
#: DEEP_WAVES waves on the GPU, up to DEEP_SLICES slices of at least DEEP_SLICE
#: terms each (docs/rewrites.md: measured on the contractions suite's seed 2,
#: where 24 slices beat 3 and 8 on every long sum onto few blocks).
DEEP_WAVES = 8
DEEP_SLICES = 24
DEEP_SLICE = 1024
#: Larger deep counts, tried beside DEEP_SLICES: a sum onto very few outputs
#: wants hundreds of slices, and the split kernel's blocks (of its own, often
#: wider, tiles) are not the direct kernel's (docs/rewrites.md).
DEEP_LADDER = (96, 384)


class CostModel(Protocol):
    """What the plan needs from a backend's model."""

    @property
    def sm_count(self) -> int:
        """Streaming multiprocessors of the GPU modelled."""
        ...

    def time(self, problem: Problem, positions: range) -> float:
        """Predicted seconds of the kernels of statements ``positions``."""
        ...

    def blocks(self, problem: Problem, position: int) -> int:
        """Thread blocks of statement ``position``'s default kernel."""
        ...

    def tensor_cores(self, problem: Problem, position: int) -> bool:
        """Whether statement ``position``'s default kernel runs on the tensor cores
        (a product family's does not count: it stages boxes of its own)."""
        ...

    def details(self, problem: Problem, position: int) -> str:
        """What the predicted time of statement ``position`` includes beyond its
        kernel's own model, in words for the plan's notes ("" when nothing)."""
        ...


@dataclass(frozen=True)
class RewritePlan:
    """``problem`` is what the backend compiles: ``original`` after ``rewrites``
    (in the order applied); ``notes`` say why for every candidate."""

    original: Problem
    problem: Problem
    rewrites: tuple[Rewrite, ...]
    notes: tuple[str, ...]

    def explain(self) -> list[str]:
        if not self.notes:
            return ["rewrites: none apply"]
        return [f"rewrite: {note}" for note in self.notes]


def unchanged(problem: Problem, why: str | None = None) -> RewritePlan:
    """The plan that rewrites nothing."""
    return RewritePlan(problem, problem, (), () if why is None else (why,))


def plan(
    problem: Problem,
    model: CostModel | None = None,
    allowed: Collection[str] = REWRITES,
    memory_limit: int | None = None,
) -> RewritePlan:
    """The rewrites of ``problem`` that pay (module docstring); only those named in
    ``allowed``; ``memory_limit`` (elements) bounds split_products' intermediates."""
    current = problem
    rewrites: list[Rewrite] = []
    notes: list[str] = []
    if memory_limit is None:  # split_products' default, of the program as given
        memory_limit = 4 * max(problem.numel(t.name) for t in problem.program.tensors)
    for position in reversed(range(len(problem.program.statements))):
        count = 1
        if "split_products" in allowed:
            try:
                done = split_products(current, position, memory_limit=memory_limit)
            except RewriteError:
                pass
            else:
                current, count = done.problem, done.count
                rewrites.append(done)
                notes.append(f"S{position}: split_products: {done.reason}")
        if model is None:
            continue
        for at in reversed(range(position, position + count)):
            label = f"S{position}" if count == 1 else f"S{position} (step {at - position})"
            chosen = _best(current, at, model, allowed, label, notes)
            if chosen is not None:
                current = chosen.problem
                rewrites.append(chosen)
    return RewritePlan(problem, current, tuple(rewrites), tuple(notes))


def _candidates(
    problem: Problem, position: int, model: CostModel, allowed: Collection[str]
) -> tuple[list[Rewrite], list[str]]:
    found: list[Rewrite] = []
    skipped: list[str] = []
    if "ttgt" in allowed:
        try:
            found.append(ttgt(problem, position))
        except RewriteError as error:
            skipped.append(f"ttgt: {error.message}")
    if "relayout" in allowed:
        found.extend(_relayouts(problem, position, model, skipped))
    if "split_k" in allowed:
        statement = problem.program.statements[position]
        index = longest_index(problem, statement)
        terms = 0 if index is None else summed_terms(problem, position, index)
        # the cheap reasons first: the blocks need the statement's mapping decided
        blocks = model.blocks(problem, position) if terms >= 2 * MIN_SLICE else 0
        if index is None:
            skipped.append("split_k: no sum to split")
        elif terms < 2 * MIN_SLICE:
            skipped.append(f"split_k: the sum over {index} ({terms} terms) is too short to split")
        elif not (counts := split_slices(blocks, model.sm_count, terms)):
            waves = DEEP_WAVES * model.sm_count
            skipped.append(
                f"split_k: {blocks} blocks already make {DEEP_WAVES} waves on {model.sm_count} SMs"
                if blocks >= waves
                else f"split_k: {blocks} blocks fill {model.sm_count} SMs, and the sum over "
                f"{index} ({terms} terms) is too short for slices of {DEEP_SLICE} terms"
            )
        else:
            chosen = dict.fromkeys(o for c in counts for o in split_choices(problem, statement, c))
            for where, slices in chosen:
                try:
                    found.append(split_k(problem, position, slices, where))
                except RewriteError as error:
                    skipped.append(f"split_k: {error.message}")
            try:
                found.append(split_outer(problem, position))
            except RewriteError as error:
                skipped.append(f"split_k: {error.message}")
    return found, skipped


def _relayouts(
    problem: Problem, position: int, model: CostModel, skipped: list[str]
) -> list[Rewrite]:
    """The ``relayout`` candidates of statement ``position`` (module docstring)."""
    copies: list[Rewrite] = []
    refused: dict[str, None] = {}  # the same reason once, whichever operand gave it
    for operand in OPERANDS:
        try:
            copies.append(relayout(problem, position, operand))
        except RewriteError as error:
            refused[f"relayout: {error.message}"] = None
    skipped.extend(refused)
    if not copies:
        return []
    if not model.tensor_cores(problem, position):
        skipped.append("relayout: the statement's kernel is not a tensor-core kernel")
        return []
    return copies


def split_slices(blocks: int, sm_count: int, terms: int) -> tuple[int, ...]:
    """The split-K slice counts worth predicting for a sum of ``terms`` terms under
    a mapping of ``blocks`` blocks: two waves' worth when the blocks leave SMs idle;
    when the blocks make fewer than :data:`DEEP_WAVES` waves, :data:`DEEP_SLICES`
    and the counts of :data:`DEEP_LADDER`, with slices of at least
    :data:`DEEP_SLICE` terms (module docstring); each at least 2, distinct.
    :func:`~.rewrite_k.split_choices` then picks indices and counts near each."""
    counts: list[int] = []
    if blocks < sm_count:
        fill = min(math.ceil(2 * sm_count / max(blocks, 1)), terms // MIN_SLICE)
        if fill >= 2:
            counts.append(fill)
    if blocks < DEEP_WAVES * sm_count:
        most = terms // DEEP_SLICE
        for wanted in (DEEP_SLICES, *DEEP_LADDER):
            deep = min(wanted, most)
            if deep >= 2 and deep not in counts:
                counts.append(deep)
    return tuple(counts)


def summed_terms(problem: Problem, position: int, index: str) -> int:
    """Terms of the outer sum of statement ``position`` that sums over ``index``
    (the product of its indices' extents): a slice of a split over ``index`` sums
    this many over the slice count, whatever the index's own extent."""
    statement = problem.program.statements[position]
    node, _ = split_k_target(statement, index)
    return math.prod(problem.index_size(statement, i) for i in node.indices)


def _best(
    problem: Problem,
    position: int,
    model: CostModel,
    allowed: Collection[str],
    label: str,
    notes: list[str],
) -> Rewrite | None:
    # judged on the statement alone (its tensors, scalars and extents): a rewrite of
    # the whole program per candidate made planning quadratic in the statements
    alone = statement_task(problem, position).view
    candidates, skipped = _candidates(alone, 0, model, allowed)
    if not candidates:
        if skipped:
            notes.append(f"{label}: direct: no candidate ({'; '.join(skipped)})")
        return None
    direct = model.time(alone, range(1))
    details = model.details(alone, 0)
    details = f" ({details})" if details else ""
    timed = [(model.time(c.problem, range(c.count)), c) for c in candidates]
    seconds, best = min(timed, key=lambda pair: pair[0])
    others = ", ".join(f"{c.label} {t * 1e6:.3g} us" for t, c in timed)
    if seconds < MARGIN * direct:
        notes.append(
            f"{label}: {best.label}: predicted {seconds * 1e6:.3g} us against "
            f"{direct * 1e6:.3g} us direct{details} ({others}): {best.reason}"
        )
        # the same rewrite of the whole program (its temporaries named apart there):
        # the candidate of that name and reason (split_k may offer two slice counts)
        found, _ = _candidates(problem, position, model, (best.name,))
        same = [c for c in found if c.reason == best.reason] or found[:1]
        if same:
            return same[0]
        notes[-1] = f"{label}: direct: {best.name} applies to the statement alone only"
        return None
    notes.append(
        f"{label}: direct: predicted {direct * 1e6:.3g} us{details}, no rewrite "
        f"{MARGIN:.0%} of that or less ({others})" + (f"; {'; '.join(skipped)}" if skipped else "")
    )
    return None
