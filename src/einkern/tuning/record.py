"""A tuning record: one measured (or failed) variant of one problem, and its forms
as a database row and as a portable JSON object (the wisdom-file entry)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .canonical import ProblemIdentity

#: Columns of the ``records`` table, in order.
COLUMNS = (
    "key",
    "family",
    "backend",
    "device",
    "version",
    "statement",
    "tensors",
    "extents",
    "dtypes",
    "layouts",
    "strides",
    "alignment",
    "config",
    "is_default",
    "status",
    "reason",
    "median",
    "times",
    "error",
    "resources",
    "timestamp",
)


@dataclass(frozen=True)
class TuningRecord:
    """One measured (or failed) variant of one problem."""

    identity: ProblemIdentity
    config_key: str  # canonical JSON of the configuration's JSON form
    default: bool  # the target's default configuration
    status: str  # "ok" or a failure kind
    reason: str = ""
    median: float | None = None
    times: tuple[float, ...] = ()
    error: float | None = None
    resources: tuple[tuple[str, Any], ...] = ()
    timestamp: float = 0.0

    @property
    def config(self) -> dict[str, Any]:
        """The configuration's JSON form (the target's ``config_type.from_json``
        makes its typed record of it)."""
        return json.loads(self.config_key)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> dict[str, Any]:
        """A portable dict (the wisdom-file form)."""
        i = self.identity
        return {
            "backend": i.backend,
            "device": dict(i.device),
            "version": i.version,
            "statement": i.statement,
            "tensors": list(i.tensors),
            "extents": [list(p) for p in i.extents],
            "dtypes": list(i.dtypes),
            "layouts": list(i.layouts),
            "strides": [list(s) for s in i.strides],
            "alignment": i.alignment,
            "config": json.loads(self.config_key),
            "default": self.default,
            "status": self.status,
            "reason": self.reason,
            "median": self.median,
            "times": list(self.times),
            "error": self.error,
            "resources": dict(self.resources),
            "timestamp": self.timestamp,
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> TuningRecord:
        """Inverse of :meth:`to_json` (raises KeyError/TypeError/ValueError if malformed)."""
        identity = ProblemIdentity(
            backend=str(data["backend"]),
            device=tuple(sorted((str(k), str(v)) for k, v in dict(data["device"]).items())),
            version=str(data["version"]),
            statement=str(data["statement"]),
            tensors=tuple(map(str, data["tensors"])),
            extents=tuple((str(n), int(v)) for n, v in data["extents"]),
            dtypes=tuple(map(str, data["dtypes"])),
            layouts=tuple(map(str, data["layouts"])),
            strides=tuple(tuple(int(x) for x in s) for s in data["strides"]),
            alignment=int(data["alignment"]),
        )
        config = data["config"]
        if not isinstance(config, dict):
            raise TypeError("config must be an object")
        median = data.get("median")
        error = data.get("error")
        return TuningRecord(
            identity=identity,
            config_key=json.dumps(config, sort_keys=True, separators=(",", ":")),
            default=bool(data.get("default", False)),
            status=str(data["status"]),
            reason=str(data.get("reason", "")),
            median=None if median is None else float(median),
            times=tuple(float(t) for t in data.get("times", ())),
            error=None if error is None else float(error),
            resources=tuple(sorted(dict(data.get("resources", {})).items())),
            timestamp=float(data.get("timestamp", 0.0)),
        )


def to_row(record: TuningRecord) -> tuple[Any, ...]:
    """The record as a row of the ``records`` table (:data:`COLUMNS` order)."""
    i = record.identity
    return (
        i.key,
        i.family,
        i.backend,
        i.device_text,
        i.version,
        i.statement,
        json.dumps(list(i.tensors)),
        json.dumps([list(p) for p in i.extents]),
        json.dumps(list(i.dtypes)),
        json.dumps(list(i.layouts)),
        json.dumps([list(s) for s in i.strides]),
        i.alignment,
        record.config_key,
        int(record.default),
        record.status,
        record.reason,
        record.median,
        json.dumps(list(record.times)),
        record.error,
        json.dumps(dict(record.resources), sort_keys=True),
        record.timestamp,
    )


def from_row(row: Sequence[Any]) -> TuningRecord:
    """Inverse of :func:`to_row`."""
    values = dict(zip(COLUMNS, row, strict=True))
    identity = ProblemIdentity(
        backend=values["backend"],
        device=tuple(sorted(json.loads(values["device"]).items())),
        version=values["version"],
        statement=values["statement"],
        tensors=tuple(json.loads(values["tensors"])),
        extents=tuple((n, v) for n, v in json.loads(values["extents"])),
        dtypes=tuple(json.loads(values["dtypes"])),
        layouts=tuple(json.loads(values["layouts"])),
        strides=tuple(tuple(s) for s in json.loads(values["strides"])),
        alignment=values["alignment"],
    )
    return TuningRecord(
        identity=identity,
        config_key=values["config"],
        default=bool(values["is_default"]),
        status=values["status"],
        reason=values["reason"],
        median=values["median"],
        times=tuple(json.loads(values["times"])),
        error=values["error"],
        resources=tuple(sorted(json.loads(values["resources"]).items())),
        timestamp=values["timestamp"],
    )
