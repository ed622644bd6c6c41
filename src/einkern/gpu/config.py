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
  parameter of this statement's space, and absent from the JSON form).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from .mapping import MappingError

STAGES = ("none", "A", "B", "all")
LAYOUTS = ("natural", "compute")
ASSIGNMENTS = ("cyclic", "mixed", "adjacent", "chunked")
BOUNDARIES = ("exact", "guard", "redirect", "pad")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


@dataclass(frozen=True)
class StagingConfig:
    """Shared-memory staging of the main reduction's inputs.

    ``stage``: ``none``, ``A``/``B`` (the first or second operand of the main
    product) or ``all`` (every input of the main reduction); ``k_step``: reduction
    elements staged at a time (MAGMA's nb); ``prefetch``: the next chunk loaded into
    registers while the current one is used; ``padding``: extra elements on the
    innermost shared dimension (bank conflicts); ``layout``: ``natural`` (the
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
            _is_int(self.padding) and self.padding >= 0,
            f"staging padding {self.padding!r} (an integer >= 0)",
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

    def __post_init__(self) -> None:
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
        for name in ("block", "regs"):
            if isinstance(given.get(name), list):
                given[name] = tuple(given[name])
        return cls(**given)

    # -- the stored form ---------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The stable JSON form (see the module docstring)."""
        data = self.values()
        data["block"] = list(self.block)
        data["regs"] = list(self.regs)
        data["staging"] = self.staging.to_json()
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
        return cls.from_values(values)


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
