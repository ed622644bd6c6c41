"""Front-ends: program text in any supported format → :class:`~einkern.lang.ast.ProgramNode`.

* :func:`parse_program` — the native ``.ein`` format;
* :func:`parse_tensor_file` — Rivera's tensor file format;
* :func:`parse_mapped` — Fousek's mapped functions over a library of
  elementary functions (:class:`Library`, :func:`builtin_library`);
* :func:`load_program_node` — any of them, from a path or a text.

The syntax of each is described in docs/language.md.
"""

from .ast import ProgramNode
from .library import FunctionDef, Library, TypeDef, builtin_library, load_library, parse_library
from .loader import detect_format, load_program_node
from .mapped import parse_mapped
from .parser import parse_program
from .tensorfile import parse_tensor_file

__all__ = [
    "FunctionDef",
    "Library",
    "ProgramNode",
    "TypeDef",
    "builtin_library",
    "detect_format",
    "load_library",
    "load_program_node",
    "parse_library",
    "parse_mapped",
    "parse_program",
    "parse_tensor_file",
]
