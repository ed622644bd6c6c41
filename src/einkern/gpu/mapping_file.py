"""Mapping files: a statement's CUDA mapping, or several, as JSON on disk.

A file holds either one mapping (for statement 0) or ``{"N": mapping, ...}`` per
statement number; each mapping is a full :class:`~einkern.gpu.mapping.Mapping`
(it has ``"parallel"``) or a tuning configuration, turned into a mapping by
:func:`~einkern.gpu.space.config_to_mapping`.  ``einkern emit --explain``
prints one per statement.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import UsageError
from ..ir.nodes import Problem
from .mapping import Mapping, MappingError
from .space import config_to_mapping


def read_mapping_file(path: str | os.PathLike[str], problem: Problem) -> dict[int, Mapping]:
    """The mappings of ``path`` for ``problem``, by statement number.

    A missing file is a :class:`~einkern.errors.UsageError`; a file that is not
    a mapping file, or names a statement the program lacks, a
    :class:`~einkern.gpu.mapping.MappingError`."""
    name = os.fspath(path)
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"no such mapping file: {name}")
    try:
        data = json.loads(file.read_text())
    except json.JSONDecodeError as error:
        raise MappingError(f"{name}: not JSON ({error})") from None
    if not isinstance(data, dict):
        raise MappingError(f"{name}: expected a JSON object")
    per_statement = data if all(k.isdigit() for k in data) else {"0": data}
    result = {}
    for key, value in per_statement.items():
        position = int(key)
        if position >= len(problem.program.statements):
            raise MappingError(f"{name}: the program has no statement {position}")
        if "parallel" in value:
            result[position] = Mapping.from_json(json.dumps(value))
        else:
            try:
                result[position] = config_to_mapping(problem, position, value)
            except (KeyError, TypeError, ValueError) as error:
                raise MappingError(f"{name}: not a mapping configuration ({error})",
                                   hint="see `einkern emit PROGRAM --explain`") from None
    return result
