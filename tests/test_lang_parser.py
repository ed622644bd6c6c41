"""The .ein front-end: declarations, statements, precedence, spans and errors."""

from __future__ import annotations

import dataclasses
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from einkern.errors import (
    DtypeError,
    DuplicateDeclarationError,
    EinkernError,
    ExtentError,
    LayoutError,
    ParseError,
    UnknownNameError,
    UsageError,
)
from einkern.lang import (
    builtin_library,
    detect_format,
    load_program_node,
    parse_library,
    parse_mapped,
    parse_program,
    parse_tensor_file,
)
from einkern.lang.ast import AccessNode, BinaryNode, CallNode, NameNode, NumberNode, UnaryNode

FULL = """\
# comment to end of line
program local_grad3                 # optional name
dims p = 12, nelt = 1000, n         # extents
dim q
dtype float64
layout column
tensor u[nelt, p, p, p], D[p, p]
tensor x[n] float32 row
tensor y[n] column float64
tensor s[]
tensor M[3, 3]
scalar alpha = 1.5, beta
param gamma = -2 float32
C[i,j] = alpha * A[i,k] * B[k,j] + beta * C[i,j]
t3[h3,h2,h1,p6,p5,p4] -= t2[h7,p4,p5,h1] * v2[h3,h2,p6,h7]
s[b] = sqrt(v[b,i] * v[b,i]); x[i] += 2
"""


def plain(node):
    """The node as nested tuples, without spans."""
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return (type(node).__name__,) + tuple(
            plain(getattr(node, f.name))
            for f in dataclasses.fields(node)
            if f.name not in ("span", "source") and not f.name.endswith("_span")
        )
    if isinstance(node, tuple):
        return tuple(plain(item) for item in node)
    return node


def show(expr) -> str:
    """A fully parenthesised rendering of an expression."""
    if isinstance(expr, NumberNode):
        return repr(expr.value)
    if isinstance(expr, NameNode):
        return expr.name
    if isinstance(expr, AccessNode):
        return f"{expr.tensor.name}[{','.join(i.name for i in expr.indices)}]"
    if isinstance(expr, UnaryNode):
        return f"({expr.op}{show(expr.operand)})"
    if isinstance(expr, BinaryNode):
        return f"({show(expr.left)} {expr.op} {show(expr.right)})"
    assert isinstance(expr, CallNode)
    return f"{expr.func.name}({', '.join(show(a) for a in expr.args)})"


def rhs(text: str) -> str:
    return show(parse_program(f"C[i] = {text}").statements[0].rhs)


# ---- declarations ---------------------------------------------------------------


def test_declarations():
    prog = parse_program(FULL)
    assert prog.name == "local_grad3"
    assert prog.default_dtype == "float64" and prog.default_layout == "column"
    assert prog.default_layout_span.line == 6
    assert [(e.name.name, e.value) for e in prog.extents] == [
        ("p", 12),
        ("nelt", 1000),
        ("n", None),
        ("q", None),
    ]
    tensors = {t.name.name: t for t in prog.tensors}
    assert [d.name for d in tensors["u"].shape] == ["nelt", "p", "p", "p"]
    assert (tensors["u"].dtype, tensors["u"].layout) == (None, None)
    assert (tensors["x"].dtype, tensors["x"].layout) == ("float32", "row")
    assert (tensors["y"].dtype, tensors["y"].layout) == ("float64", "column")
    assert tensors["s"].shape == ()
    assert [(d.name, d.value) for d in tensors["M"].shape] == [(None, 3), (None, 3)]
    assert [(s.name.name, s.value, s.dtype) for s in prog.scalars] == [
        ("alpha", 1.5, None),
        ("beta", None, None),
        ("gamma", -2.0, "float32"),
    ]


def test_defaults_and_program_name():
    prog = parse_program("tensor A[]\nA[] = 1")
    assert (prog.name, prog.default_dtype, prog.default_layout) == ("program", "float64", "row")
    assert prog.default_dtype_span is None
    assert parse_program("A[] = 1", "dir/my-prog.ein").name == "my_prog"


def test_statements_forms():
    prog = parse_program(FULL)
    ops = [s.op for s in prog.statements]
    assert ops == ["=", "-=", "=", "+="]
    first = prog.statements[0]
    assert show(first.rhs) == "(((alpha * A[i,k]) * B[k,j]) + (beta * C[i,j]))"
    assert first.target.tensor.name == "C"
    assert [i.name for i in first.target.indices] == ["i", "j"]
    assert show(prog.statements[2].rhs) == "sqrt((v[b,i] * v[b,i]))"
    assert prog.statements[3].target.tensor.name == "x"


def test_rank_zero_access_and_calls():
    prog = parse_program("s[] = max(a[], 2.5e-1) + f()")
    assert show(prog.statements[0].target) == "s[]"
    assert show(prog.statements[0].rhs) == "(max(a[], 0.25) + f())"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("a - b - c", "((a - b) - c)"),
        ("a / b * c", "((a / b) * c)"),
        ("a + b * c", "(a + (b * c))"),
        ("(a + b) * c", "((a + b) * c)"),
        ("-a * b", "((-a) * b)"),
        ("a * -b", "(a * (-b))"),
        ("- - a", "(-(-a))"),
        ("+a", "(+a)"),
        ("1 + 2e3 + .5 + 1.", "(((1.0 + 2000.0) + 0.5) + 1.0)"),
        ("f(a + b, -c)", "f((a + b), (-c))"),
    ],
)
def test_precedence_and_associativity(text, expected):
    assert rhs(text) == expected


def test_spans():
    prog = parse_program("tensor A[n]\ndims n\nC[i] = A[i] *  B[i]\n")
    stmt = prog.statements[0]
    assert (stmt.span.line, stmt.span.column) == (3, 1)
    right = stmt.rhs.right
    assert (right.span.line, right.span.column) == (3, 16)
    assert right.span.source.text[right.span.start : right.span.end] == "B[i]"
    assert (stmt.rhs.span.start, stmt.rhs.span.end) == (stmt.rhs.left.span.start, right.span.end)
    paren = parse_program("C[i] = -(a + b)").statements[0].rhs
    assert paren.span.source.text[paren.span.start : paren.span.end] == "-(a + b)"


def test_line_continuation():
    text = "C[i,\n  j] = A[i, j] *\n  B[j] +\n  f(x,\n y)\nD[i] =\n 1"
    prog = parse_program(text)
    assert len(prog.statements) == 2
    assert show(prog.statements[0].rhs) == "((A[i,j] * B[j]) + f(x, y))"


def test_keywords_only_at_line_start():
    prog = parse_program("tensor dims[n]\ndims n\ndims[i] = tensor[i] * scalar")
    assert prog.tensors[0].name.name == "dims"
    assert show(prog.statements[0].rhs) == "(tensor[i] * scalar)"


# ---- errors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, error, line, column, words",
    [
        ("C[i,j = A[i,j]", ParseError, 1, 2, "expected ']' to close the index list"),
        ("C[i] = A[i] @ B", ParseError, 1, 13, "unexpected character '@'"),
        ("C[i] = A[i] *", ParseError, 1, 14, "expected an expression after '*'"),
        ("C[i] = A[i] * )", ParseError, 1, 15, "expected an expression after '*'"),
        ("C[i] *= A[i]", ParseError, 1, 6, "unknown assignment operator '*='"),
        ("C[i] = A[i] B[i]", ParseError, 1, 13, "unexpected 'B'"),
        ("C[i] = (A[i] + 1", ParseError, 1, 8, "expected ')' to close the parenthesis"),
        ("C[i] = A[i] ** 2", ParseError, 1, 13, "no power operator"),
        ("C[0] = A[i]", ParseError, 1, 3, "indices must be names"),
        ("x = 3", ParseError, 1, 1, "tensor access"),
        ("tensr A[n]", ParseError, 1, 1, "unknown declaration 'tensr'"),
        ("tensor A(n)", ParseError, 1, 9, "expected '['"),
        ("dims n = 4\n\ndims n = 5", DuplicateDeclarationError, 3, 6, "line 1"),
        ("dims n\ntensor n[n]", DuplicateDeclarationError, 2, 8, "line 1"),
        ("tensor A[]\nscalar A", DuplicateDeclarationError, 2, 8, "already declared as a tensor"),
        ("dtype float32\ndtype float64", DuplicateDeclarationError, 2, 7, "line 1"),
        ("dims n = 0", ExtentError, 1, 10, "positive integer"),
        ("dims n = 2.5", ExtentError, 1, 10, "positive integer"),
        ("dims n = -3", ExtentError, 1, 10, "positive integer"),
        ("tensor A[0]", ExtentError, 1, 10, "positive integer"),
        ("dtype float8", DtypeError, 1, 7, "unknown dtype 'float8'"),
        ("dims n\ntensor A[n] int32", DtypeError, 2, 13, "unknown dtype 'int32'"),
        ("scalar a double", DtypeError, 1, 10, "unknown dtype 'double'"),
        ("layout diagonal", LayoutError, 1, 8, "unknown layout 'diagonal'"),
        ("dims n\ntensor A[n] colmn", LayoutError, 2, 13, "unknown layout 'colmn'"),
        ("tensor A[m]", UnknownNameError, 1, 10, "unknown extent 'm'"),
        ("scalar a\ntensor A[a]", UnknownNameError, 2, 10, "unknown extent 'a'"),
    ],
)
def test_errors(text, error, line, column, words):
    with pytest.raises(error) as info:
        parse_program(text, "bad.ein")
    exc = info.value
    assert words in exc.message
    assert (exc.span.line, exc.span.column) == (line, column)
    assert exc.hint
    rendered = str(exc)
    assert rendered.startswith(f"bad.ein:{line}:{column}:")
    assert f"{line:>4} | " in rendered and "^" in rendered


def test_extent_may_be_declared_after_use():
    prog = parse_program("tensor A[n]\nA[i] = 1\ndims n = 3")
    assert prog.extents[0].value == 3


def test_hint_suggests_close_keyword_and_extent():
    with pytest.raises(UnknownNameError) as info:
        parse_program("dims nelt\ntensor u[nlet]")
    assert "nelt" in info.value.hint
    with pytest.raises(DtypeError) as info2:
        parse_program("dtype double")
    assert "float64" in info2.value.hint


# ---- whitespace and comments do not matter ------------------------------------------

_LINES = [
    "dims n = 4, m",
    "tensor A[n, m], B[m] float32",
    "scalar alpha = 2",
    "C[i] = alpha * A[i, k] * B[k] - (B[i] + 1) / 2",
    "C[i] += sqrt(A[i, j] * A[i, j])",
]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["", " ", "  ", "\t"]),
            st.sampled_from(["", "  # note", "# x = y[", "\n", "\n\n  # c\n"]),
        ),
        min_size=len(_LINES),
        max_size=len(_LINES),
    ),
    st.sampled_from([" ", "", "\t "]),
)
def test_whitespace_and_comments_do_not_change_the_ast(decor, gap):
    base = parse_program("\n".join(_LINES))
    lines = []
    for line, (indent, trailer) in zip(_LINES, decor, strict=True):
        spaced = line.replace(", ", "," + gap).replace(" * ", gap + "*" + gap)
        lines.append(indent + spaced + trailer)
    assert plain(parse_program("\n".join(lines))) == plain(base)


_names = st.sampled_from(["a", "b", "x1"])
_atoms = st.one_of(
    _names,
    st.sampled_from(["A[i]", "B[i,j]", "s[]", "2", "0.5"]),
)


def _exprs():
    return st.recursive(
        _atoms,
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from(["+", "-", "*", "/"]), inner).map(
                lambda t: f"({t[0]} {t[1]} {t[2]})"
            ),
            inner.map(lambda e: f"(-{e})"),
            st.tuples(inner, inner).map(lambda t: f"max({t[0]}, {t[1]})"),
        ),
        max_leaves=8,
    )


@settings(max_examples=80, deadline=None)
@given(_exprs())
def test_fully_parenthesised_round_trip(text):
    once = rhs(text)
    assert rhs(once) == once


# ---- loading ------------------------------------------------------------------------


def test_load_program_node_text_and_files(tmp_path):
    assert load_program_node("tensor A[]\nA[] = 1").name == "program"
    path = tmp_path / "prog.ein"
    path.write_text("dims n\ntensor A[n]\nA[i] = 2\n")
    for given_path in (path, str(path)):
        prog = load_program_node(given_path)
        assert prog.name == "prog" and prog.source.name == str(path)
    other = tmp_path / "weird.txt"
    other.write_text("f\nvariables:\n  A: (3)\noperations:\n  A: (i) = A: (i)\n")
    assert load_program_node(os.fspath(other)).name == "f"
    with pytest.raises(UsageError, match="no such file"):
        load_program_node(tmp_path / "missing.ein")
    with pytest.raises(UsageError, match="no such file"):
        load_program_node("missing.ein")


def test_detect_format():
    assert detect_format("x\nvariables:\n operations:\n") == "tensor"
    assert detect_format("MATRIX3x3 A;\ninput A;\nreturn A;") == "mapped"
    assert detect_format("C[i] = A[i]") == "ein"


def test_all_errors_are_einkern_errors():
    with pytest.raises(EinkernError):
        parse_program("C[i] = $")


_PIECES = list("abAB_01 \n[](),;:=+-*/.#{}") + [
    "dims ",
    "tensor ",
    "scalar ",
    "dtype ",
    "layout ",
    "program ",
    "variables:\n",
    "operations:\n",
    "define:\n",
    "input ",
    "return ",
    "MATRIX3x3 ",
    "mmul33",
    "order2",
    "type ",
    "function ",
    "->",
    "out[i]",
    "//",
    "/*",
    "float32 ",
    "row ",
    "1e5",
    "-3",
]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=30).map("".join))
def test_garbage_raises_only_einkern_errors(text):
    readers = (
        parse_program,
        parse_tensor_file,
        parse_mapped,
        lambda t: parse_library(t, base=builtin_library()),
    )
    for read in readers:
        try:
            read(text)
        except EinkernError as exc:
            assert str(exc)
