"""Rivera's tensor file format: the seed's Figures 2.5a and 3.1, options, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from einkern.errors import (
    DtypeError,
    DuplicateDeclarationError,
    ExtentError,
    LayoutError,
    ParseError,
    UnknownNameError,
)
from einkern.lang import load_program_node, parse_tensor_file
from einkern.lang.ast import AccessNode, BinaryNode

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def access(node: AccessNode) -> tuple[str, tuple[str, ...]]:
    return node.tensor.name, tuple(i.name for i in node.indices)


def factors(expr) -> list[tuple[str, tuple[str, ...]]]:
    if isinstance(expr, BinaryNode):
        assert expr.op == "*"
        return factors(expr.left) + factors(expr.right)
    return [access(expr)]


def test_local_grad3_figure_2_5a():
    prog = load_program_node(EXAMPLES / "local_grad3.tensor")
    assert prog.name == "local_grad3"
    assert prog.default_layout == "column" and prog.default_dtype == "float64"
    assert [(e.name.name, e.value) for e in prog.extents] == [
        ("lx", 10),
        ("ly", 10),
        ("lz", 10),
        ("nelt", 1000),
    ]
    shapes = {t.name.name: tuple(d.name for d in t.shape) for t in prog.tensors}
    assert shapes == {
        "u": ("nelt", "lx", "ly", "lz"),
        "D": ("lx", "ly"),
        "Dt": ("lx", "ly"),
        "ur": ("nelt", "lx", "ly", "lz"),
        "us": ("nelt", "lx", "ly", "lz"),
        "ut": ("nelt", "lx", "ly", "lz"),
    }
    got = [(access(s.target), s.op, factors(s.rhs)) for s in prog.statements]
    assert got == [
        (("ur", ("e", "i", "j", "k")), "+=", [("D", ("k", "m")), ("u", ("e", "i", "m", "j"))]),
        (("us", ("e", "i", "j", "k")), "+=", [("u", ("e", "i", "k", "m")), ("Dt", ("m", "j"))]),
        (("ut", ("e", "j", "i", "k")), "+=", [("u", ("e", "m", "k", "j")), ("Dt", ("m", "j"))]),
    ]
    # the wrapped statement spans two lines and starts at its output
    first = prog.statements[0]
    assert (first.span.line, first.span.column) == (17, 1)
    assert (first.rhs.right.span.line, first.rhs.right.span.column) == (18, 5)


def test_sd_t_d1_1_figure_3_1():
    prog = load_program_node(str(EXAMPLES / "sd_t_d1_1.tensor"))
    assert prog.name == "sd_t_d1_1" and prog.default_layout == "column"
    assert len(prog.extents) == 7 and all(e.value == 16 for e in prog.extents)
    (stmt,) = prog.statements
    assert stmt.op == "-="
    assert access(stmt.target) == ("t3", ("h3", "h2", "h1", "p6", "p5", "p4"))
    assert factors(stmt.rhs) == [("t2", ("h7", "p4", "p5", "h1")), ("v2", ("h3", "h2", "p6", "h7"))]


def test_options_order_and_types():
    text = """\
function f   # comment
access: multidimensional
pattern: contiguous
type: float
define:
  n = 4
variables:
  A: order2
  B: (n, 3)
  s: ()
operations:
  B: (i, j) = A: (i, j)
  s() += A(i, j) * B(i, j) * B: (i, j)
"""
    prog = parse_tensor_file(text, "f.tensor")
    assert prog.name == "f" and prog.default_dtype == "float32" and prog.default_layout == "row"
    assert [(e.name.name, e.value) for e in prog.extents] == [
        ("n", 4),
        ("A_d0", None),
        ("A_d1", None),
    ]
    shapes = {t.name.name: [(d.name, d.value) for d in t.shape] for t in prog.tensors}
    assert shapes == {"A": [("A_d0", None), ("A_d1", None)], "B": [("n", None), (None, 3)], "s": []}
    assert len(factors(prog.statements[1].rhs)) == 3
    assert prog.statements[1].target.indices == ()


@pytest.mark.parametrize(
    "text, error, line, column, words",
    [
        ("memory: row\n", ParseError, 1, 1, "function name"),
        ("f\nmemory: diagonal\n", LayoutError, 2, 9, "unknown layout"),
        ("f\naccess: sideways\n", ParseError, 2, 9, "unknown access"),
        ("f\npattern: random\n", ParseError, 2, 10, "unknown pattern"),
        ("f\ntype: half\n", DtypeError, 2, 7, "unknown type"),
        ("f\ndefines:\n", ParseError, 2, 1, "section header"),
        ("f\ndefine:\n n = 0\n", ExtentError, 3, 6, "positive integer"),
        ("f\ndefine:\n n = x\n", ExtentError, 3, 6, "positive integer"),
        ("f\ndefine:\n n = 2\n n = 3\n", DuplicateDeclarationError, 4, 2, "line 3"),
        ("f\nvariables:\n A: (m)\n", UnknownNameError, 3, 6, "unknown extent 'm'"),
        ("f\nvariables:\n A: [3]\n", ParseError, 3, 5, "expected '('"),
        ("f\nvariables:\n A: (3\n", ParseError, 3, 5, "expected ')'"),
        ("f\noperations:\n A: (i) ** B: (i)\n", ParseError, 3, 9, "expected an assignment"),
        ("f\noperations:\n A: (i) += B: (i) + C: (i)\n", ParseError, 3, 19, "expected '*'"),
        ("f\noperations:\n A: (i) += B: (i) *\n", ParseError, 4, 1, "variable name"),
    ],
)
def test_errors(text, error, line, column, words):
    with pytest.raises(error) as info:
        parse_tensor_file(text, "bad.tensor")
    exc = info.value
    assert words in exc.message
    assert (exc.span.line, exc.span.column) == (line, column)
    assert exc.hint and "^" in str(exc) and str(exc).startswith("bad.tensor:")
