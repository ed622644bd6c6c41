"""The CUDA configuration: the handful of named choices the decision algorithm
makes and the tuner searches, turned into a :class:`~einkern.gpu.mapping.Mapping`
by :func:`einkern.gpu.space.config_to_mapping`.

Two frozen records, :class:`CudaConfig` and its :class:`StagingConfig`, with a
stable JSON form: the form tuning databases and mapping files have always held
(``staging`` as ``[stage, k_step, prefetch, padding, layout]``, ``block`` and
``regs`` as lists), so that every configuration recorded before these records
existed loads, and keeps its database key (the canonical text of this form).

Fields (see :mod:`einkern.gpu.space` for what each does to the kernel):

* ``x``/``y``: the output indices distributed over threads (``y`` may be ``""``);
* ``block``: threads along x and y (0: the whole extent of the index);
* ``regs``: register-tile elements per thread along x, y and a register-only z;
* ``assign``: ``cyclic``, ``mixed``, ``adjacent`` or ``chunked``;
* ``staging``: what goes through shared memory, per k-step (:class:`StagingConfig`);
* ``unroll``: 1, or -1 (the k-step loop fully unrolled);
* ``boundary``: ``exact``, ``guard``, ``redirect`` or ``pad``;
* ``spread`` and ``preload``: knobs only some statements have (None: not a
  parameter of this statement's space, and absent from the JSON form);
* ``gett`` (:class:`GettTiling`, None: absent): the general contraction tiling,
  several output indices per thread dimension (index *groups*) and k-steps over
  several reduction indices.  When it is set it decides the threads, block and
  register tiles: ``x`` is then its first threaded index and ``y``, ``block``,
  ``regs``, ``staging.k_step`` and ``spread`` take their neutral values (they are
  normalised so, so that one tiling has one JSON form);
* ``split`` (None: absent): threads per output element along the main
  reduction's longest index, their partial sums combined in shared memory
  (long reductions onto small outputs);
* ``lanes`` (None: absent; needs ``split``): ``[run, accumulators]``: the
  reduction threads are threadIdx.x's fastest digits, along the stride-1 index
  of the main product's largest input when that is a reduction index, each
  summing runs of ``run`` adjacent terms (vector loads) into ``accumulators``
  independent accumulators; warp shuffles combine their partial sums
  (:mod:`einkern.gpu.reduction_lanes`);
* ``mma`` (:class:`~einkern.gpu.mma_config.MmaConfig`, None: absent): a
  tensor-core kernel of the statement's GEMM form; the other fields then take
  their neutral values (``x``/``y`` empty, no staging, boundary ``guard``: the
  kernel predicates its edges).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from .mapping import MappingError
from .mma_config import MmaConfig

STAGES = ("none", "A", "B", "all")
LAYOUTS = ("natural", "compute")
ASSIGNMENTS = ("cyclic", "mixed", "adjacent", "chunked")
BOUNDARIES = ("exact", "guard", "redirect", "pad")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


#: ``StagingConfig.padding`` chosen per tile to avoid bank conflicts.
AUTO_PADDING = -1


@dataclass(frozen=True)
class StagingConfig:
    """Shared-memory staging of the main reduction's inputs.

    ``stage``: ``none``, ``A``/``B`` (the first or second operand of the main
    product) or ``all`` (every input of the main reduction); ``k_step``: reduction
    elements staged at a time (MAGMA's nb); ``prefetch``: the next chunk loaded into
    registers while the current one is used; ``padding``: extra elements on the
    innermost shared dimension (bank conflicts), or :data:`AUTO_PADDING` (-1):
    the padding, on whichever dimension, that makes the tile's stores and reads
    the fewest wavefronts (:mod:`einkern.gpu.shared_banks`); ``layout``: ``natural`` (the
    input's memory order) or ``compute`` (the threaded indices innermost)."""

    stage: str = "none"
    k_step: int = 1
    prefetch: bool = False
    padding: int = 0
    layout: str = "natural"

    def __post_init__(self) -> None:
        _require(self.stage in STAGES, f"staging stage {self.stage!r} (use {', '.join(STAGES)})")
        _require(
            _is_int(self.k_step) and self.k_step >= 1,
            f"staging k_step {self.k_step!r} (a positive integer)",
        )
        _require(isinstance(self.prefetch, bool), f"staging prefetch {self.prefetch!r} (a bool)")
        _require(
            _is_int(self.padding) and self.padding >= AUTO_PADDING,
            f"staging padding {self.padding!r} (an integer >= 0, or -1: automatic)",
        )
        _require(
            self.layout in LAYOUTS, f"staging layout {self.layout!r} (use {', '.join(LAYOUTS)})"
        )

    @property
    def staged(self) -> bool:
        return self.stage != "none"

    def to_json(self) -> list[Any]:
        """``[stage, k_step, prefetch, padding, layout]`` (the stored form)."""
        return [self.stage, self.k_step, self.prefetch, self.padding, self.layout]

    @classmethod
    def from_json(cls, data: Any) -> StagingConfig:
        """Inverse of :meth:`to_json` (ValueError/TypeError when malformed)."""
        if not isinstance(data, list | tuple) or len(data) != 5:
            raise TypeError(
                f"staging must be [stage, k_step, prefetch, padding, layout], got {data!r}"
            )
        return cls(*data)


#: No staging: every input read through the caches.
NO_STAGING = StagingConfig()


@dataclass(frozen=True)
class GettTiling:
    """The tiles of a general contraction mapping (GETT): index groups.

    ``tiles``: ``(index, threads, regs)`` per tiled output index, in the order the
    block's threads are numbered (the first varies fastest: the output's
    contiguous index, for coalesced stores); the block tile along the index is
    ``threads × regs``, and an index with one thread is register-only.  Several
    indices of the M (or N) group together make its block tile, so that small
    extents (16–24) still give wide tiles.  ``k``: ``(index, step)`` per
    reduction index, the elements of each staged per chunk (indices not listed
    step by 1), so that one chunk may span several contracted indices."""

    tiles: tuple[tuple[str, int, int], ...]
    k: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        _require(
            isinstance(self.tiles, tuple)
            and len(self.tiles) > 0
            and all(
                isinstance(t, tuple)
                and len(t) == 3
                and isinstance(t[0], str)
                and t[0]
                and _is_int(t[1])
                and _is_int(t[2])
                and t[1] >= 1
                and t[2] >= 1
                for t in self.tiles
            ),
            f"gett tiles must be [index, threads, regs] triples, got {self.tiles!r}",
        )
        _require(
            isinstance(self.k, tuple)
            and all(
                isinstance(s, tuple)
                and len(s) == 2
                and isinstance(s[0], str)
                and _is_int(s[1])
                and s[1] >= 1
                for s in self.k
            ),
            f"gett k must be [index, step] pairs, got {self.k!r}",
        )
        names = [t[0] for t in self.tiles] + [s[0] for s in self.k]
        _require(len(set(names)) == len(names), f"gett names an index twice: {names}")

    @property
    def first(self) -> str:
        """The first threaded index (the configuration's ``x``)."""
        return next((t[0] for t in self.tiles if t[1] > 1), self.tiles[0][0])

    @property
    def threads(self) -> int:
        return math.prod(t[1] for t in self.tiles)

    @property
    def register_tile(self) -> int:
        return math.prod(t[2] for t in self.tiles)

    def to_json(self) -> dict[str, Any]:
        """``{"tiles": [[index, threads, regs], ...], "k": [[index, step], ...]}``."""
        return {"tiles": [list(t) for t in self.tiles], "k": [list(s) for s in self.k]}

    @classmethod
    def from_json(cls, data: Any) -> GettTiling:
        """Inverse of :meth:`to_json` (ValueError/TypeError when malformed)."""
        if isinstance(data, GettTiling):
            return data
        if not isinstance(data, Mapping) or set(data) - {"tiles", "k"}:
            raise TypeError(f"gett must be {{tiles, k}}, got {data!r}")
        tiles = tuple(tuple(t) for t in data.get("tiles", ()))
        steps = tuple(tuple(s) for s in data.get("k", ()))
        return cls(tiles, steps)  # type: ignore[arg-type]

    def describe(self) -> str:
        tiles = " ".join(f"{i}:{t}x{r}" for i, t, r in self.tiles)
        steps = " ".join(f"{i}:{s}" for i, s in self.k)
        return f"tiles {tiles}" + (f", k-steps {steps}" if steps else "")


@dataclass(frozen=True)
class CudaConfig:
    """One point of a statement's mapping space (see the module docstring)."""

    x: str
    y: str = ""
    block: tuple[int, int] = (1, 1)
    regs: tuple[int, int, int] = (1, 1, 1)
    assign: str = "cyclic"
    staging: StagingConfig = NO_STAGING
    unroll: int = 1
    boundary: str = "exact"
    spread: int | None = None
    preload: bool | None = None
    gett: GettTiling | None = None
    split: int | None = None
    lanes: tuple[int, int] | None = None
    #: A tensor-core kernel of this tile shape (the other fields take their
    #: neutral values); absent from the JSON form when None.
    mma: MmaConfig | None = None

    def __post_init__(self) -> None:
        if self.mma is not None:
            _require(isinstance(self.mma, MmaConfig), f"mma {self.mma!r}")
            # the tile shape decides everything: the other fields take neutral
            # values, so that one tensor-core kernel has one configuration
            neutral = {
                "x": "",
                "y": "",
                "block": (1, 1),
                "regs": (1, 1, 1),
                "assign": "cyclic",
                "staging": NO_STAGING,
                "unroll": 1,
                "boundary": "guard",
                "spread": None,
                "preload": None,
                "gett": None,
                "split": None,
                "lanes": None,
            }
            for name, value in neutral.items():
                object.__setattr__(self, name, value)
        if self.gett is not None:
            _require(isinstance(self.gett, GettTiling), f"gett {self.gett!r}")
            self._normalise_gett()
        _require(
            isinstance(self.x, str) and isinstance(self.y, str),
            f"x and y are index names, got {self.x!r} and {self.y!r}",
        )
        for name, count in (("block", 2), ("regs", 3)):
            value = getattr(self, name)
            _require(
                isinstance(value, tuple)
                and len(value) == count
                and all(_is_int(v) and v >= 0 for v in value),
                f"{name} must be {count} integers >= 0, got {value!r}",
            )
        _require(
            self.assign in ASSIGNMENTS, f"assign {self.assign!r} (use {', '.join(ASSIGNMENTS)})"
        )
        _require(isinstance(self.staging, StagingConfig), f"staging {self.staging!r}")
        _require(
            _is_int(self.unroll) and self.unroll in (1, -1), f"unroll {self.unroll!r} (1 or -1)"
        )
        _require(
            self.boundary in BOUNDARIES, f"boundary {self.boundary!r} (use {', '.join(BOUNDARIES)})"
        )
        _require(
            self.spread is None or (_is_int(self.spread) and self.spread >= 0),
            f"spread {self.spread!r} (an integer >= 0)",
        )
        _require(
            self.preload is None or isinstance(self.preload, bool),
            f"preload {self.preload!r} (a bool)",
        )
        _require(
            self.split is None or (_is_int(self.split) and self.split >= 2),
            f"split {self.split!r} (threads per output along the reduction, >= 2)",
        )
        _require(
            self.lanes is None
            or (
                isinstance(self.lanes, tuple)
                and len(self.lanes) == 2
                and all(_is_int(v) and v >= 1 for v in self.lanes)
            ),
            f"lanes {self.lanes!r} (run and accumulators, integers >= 1)",
        )

    def _normalise_gett(self) -> None:
        """With a GETT tiling, the fields it decides take their neutral values."""
        assert self.gett is not None
        neutral = {
            "x": self.gett.first,
            "y": "",
            "block": (1, 1),
            "regs": (1, 1, 1),
            "staging": replace(self.staging, k_step=1)
            if isinstance(self.staging, StagingConfig)
            else self.staging,
            "spread": None if self.spread is None else 0,
        }
        for name, value in neutral.items():
            object.__setattr__(self, name, value)

    # -- named values (what the tuner's search space lists) -------------------

    def values(self) -> dict[str, Any]:
        """Each parameter's value by name; ``spread``/``preload`` only when set."""
        found = {f.name: getattr(self, f.name) for f in fields(self)}
        return {name: value for name, value in found.items() if value is not None}

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> CudaConfig:
        """The configuration of these named values (as :meth:`values` gives them;
        ValueError/TypeError/KeyError when they do not make one)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown configuration parameters {unknown}")
        given = dict(values)
        for name in ("block", "regs", "lanes"):
            if isinstance(given.get(name), list):
                given[name] = tuple(given[name])
        if given.get("gett") is not None:
            given["gett"] = GettTiling.from_json(given["gett"])
        if given.get("mma") is not None and not isinstance(given["mma"], MmaConfig):
            given["mma"] = MmaConfig.from_values(given["mma"])
        return cls(**given)

    # -- the stored form ---------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The stable JSON form (see the module docstring)."""
        data = self.values()
        data["block"] = list(self.block)
        data["regs"] = list(self.regs)
        data["staging"] = self.staging.to_json()
        if self.gett is not None:
            data["gett"] = self.gett.to_json()
        if self.lanes is not None:
            data["lanes"] = list(self.lanes)
        if self.mma is not None:
            data["mma"] = self.mma.values()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CudaConfig:
        """Inverse of :meth:`to_json`: a configuration as databases and mapping files
        hold it (ValueError/TypeError/KeyError when malformed)."""
        if not isinstance(data, Mapping):
            raise TypeError("a configuration is a JSON object")
        values = dict(data)
        if "x" not in values:
            raise KeyError("x")
        if "staging" in values:
            values["staging"] = StagingConfig.from_json(values["staging"])
        if values.get("gett") is not None:
            values["gett"] = GettTiling.from_json(values["gett"])
        return cls.from_values(values)  # mma: parsed there


#: The configuration of a rank-0 output: one thread computes it.
SCALAR_CONFIG = CudaConfig(x="")


def parse_config(data: Any, source: str = "configuration") -> CudaConfig:
    """:meth:`CudaConfig.from_json` for input from a user (a mapping file, the
    ``mappings=`` argument): a malformed one is a :class:`MappingError` naming
    ``source``."""
    try:
        return CudaConfig.from_json(data)
    except (KeyError, TypeError, ValueError) as error:
        detail = f"missing {error}" if isinstance(error, KeyError) else str(error)
        raise MappingError(
            f"{source}: not a mapping configuration ({detail})",
            hint="see `einkern emit PROGRAM --explain`",
        ) from None
