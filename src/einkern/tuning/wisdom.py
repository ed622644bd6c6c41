"""Wisdom files: the tuning database's records as portable JSON.

``einkern db export`` writes one and ``einkern db import`` merges one into a
database.  The file is ``{"format": "einkern-wisdom", "version": 1, "records":
[record JSON, ...]}``; a reader accepts every version up to its own.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..errors import UsageError
from .record import TuningRecord

WISDOM_FORMAT = "einkern-wisdom"
WISDOM_VERSION = 1


def write_wisdom(path: str, records: Sequence[TuningRecord]) -> None:
    """Write ``records`` to the wisdom file ``path`` (``-``: standard output),
    atomically (a temporary file renamed into place)."""
    text = json.dumps({"format": WISDOM_FORMAT, "version": WISDOM_VERSION,
                       "records": [record.to_json() for record in records]}, indent=1)
    if path == "-":
        sys.stdout.write(text + "\n")
        return
    target = Path(path)
    try:
        descriptor, temporary = tempfile.mkstemp(dir=target.parent or ".",
                                                 prefix=f".{target.name}.", suffix=".tmp")
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text + "\n")
        os.replace(temporary, target)
    except OSError as error:
        raise UsageError(f"cannot write {path}: {error}") from error


def read_wisdom(path: str) -> list[TuningRecord]:
    """The records of the wisdom file ``path`` (``-``: standard input); a
    :class:`~einkern.errors.UsageError` names what is wrong with a bad file."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        data = json.loads(text)
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error}") from error
    except ValueError as error:
        raise UsageError(f"{path} is not JSON: {error}") from error
    if not isinstance(data, dict) or data.get("format") != WISDOM_FORMAT:
        raise UsageError(f"{path} is not an einkern wisdom file")
    if not isinstance(data.get("version"), int) or data["version"] > WISDOM_VERSION:
        raise UsageError(f"{path} has wisdom format version {data.get('version')!r}; "
                         f"this einkern reads up to {WISDOM_VERSION}")
    records = []
    for number, item in enumerate(data.get("records", [])):
        try:
            records.append(TuningRecord.from_json(item))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise UsageError(f"{path}: record {number} is malformed ({error!r})") from error
    return records
