"""Mapped functions (Fousek's Listings 4.1 and 5.1) and libraries of elementary functions."""

from __future__ import annotations

import pytest

from einkern.errors import (
    DuplicateDeclarationError,
    ExtentError,
    IndexBindingError,
    ParseError,
    RankError,
    SemanticError,
    UnknownNameError,
)
from einkern.lang import (
    builtin_library,
    load_library,
    load_program_node,
    parse_library,
    parse_mapped,
)
from einkern.lang.ast import AccessNode, BinaryNode, CallNode, UnaryNode

LISTING_4_1 = """\
MATRIX3x3 A, B, M1;
MATRIX5x5 D, E, F, M2, M3;
VECTOR3 c, v1;
SCALAR s1;

input A, B, c, D, E;

M1 = mmul33(A, B);           // M1 = A · B
v1 = mvmul33(M1, c);        // v1 = M1 · c
s1 = venorm3(v1);           // s1 = ||v1||2
M2 = mmul55(D, E);         // M2 = D · E
M3 = madd55(M2, D);         // M3 = M2 + D
F = smmul55(M3, s1);        // F = M3 · s1

return F;
"""

LISTING_5_1 = """\
MATRIX5x5 A, B, C, D, M1, M2, M3, M4, F;

input A, B, C, D;
M1 = mmul55(A, B);
M2 = mmul55(A, C);
M3 = mmul55(A, D);
M4 = madd55(M1,M2);
F = madd55(M4, M3);
return F;
"""


def show(expr) -> str:
    if isinstance(expr, AccessNode):
        return f"{expr.tensor.name}[{','.join(i.name for i in expr.indices)}]"
    if isinstance(expr, BinaryNode):
        return f"({show(expr.left)} {expr.op} {show(expr.right)})"
    if isinstance(expr, UnaryNode):
        return f"({expr.op}{show(expr.operand)})"
    if isinstance(expr, CallNode):
        return f"{expr.func.name}({', '.join(map(show, expr.args))})"
    return repr(expr.value)


def accesses(expr):
    if isinstance(expr, AccessNode):
        return [expr]
    if isinstance(expr, BinaryNode):
        return accesses(expr.left) + accesses(expr.right)
    if isinstance(expr, UnaryNode):
        return accesses(expr.operand)
    if isinstance(expr, CallNode):
        return [a for arg in expr.args for a in accesses(arg)]
    return []


def test_listing_4_1():
    prog = parse_mapped(LISTING_4_1, "listing41.mapped")
    assert prog.name == "listing41"
    assert [(e.name.name, e.value) for e in prog.extents] == [("nbatch", 31744)]
    shapes = {t.name.name: [(d.name, d.value) for d in t.shape] for t in prog.tensors}
    assert shapes["A"] == [("nbatch", None), (None, 3), (None, 3)]
    assert shapes["c"] == [("nbatch", None), (None, 3)]
    assert shapes["s1"] == [("nbatch", None)]
    assert len(shapes) == 11
    got = [f"{show(s.target)} {s.op} {show(s.rhs)}" for s in prog.statements]
    assert got == [
        "M1[b_,i,j] = (A[b_,i,k] * B[b_,k,j])",
        "v1[b_,i] = (M1[b_,i,j] * c[b_,j])",
        "s1[b_] = sqrt((v1[b_,i] * v1[b_,i]))",
        "M2[b_,i,j] = (D[b_,i,k] * E[b_,k,j])",
        "M3[b_,i,j] = (M2[b_,i,j] + D[b_,i,j])",
        "F[b_,i,j] = (M3[b_,i,j] * s1[b_])",
    ]
    for line, statement in enumerate(prog.statements, start=8):
        assert statement.span.line == line and statement.span.column == 1
        for acc in (statement.target, *accesses(statement.rhs)):
            assert acc.indices[0].name == "b_"
    # parameters point at the arguments, the target at the assigned variable
    first = prog.statements[0]
    assert (first.rhs.right.tensor.span.line, first.rhs.right.tensor.span.column) == (8, 16)
    assert first.target.tensor.span.column == 1
    assert first.rhs.span.source.text[first.rhs.span.start : first.rhs.span.end] == "mmul33(A, B)"


def test_listing_5_1_with_batch():
    prog = parse_mapped(LISTING_5_1, batch=128)
    assert prog.name == "mapped"
    assert prog.extents[0].value == 128
    assert len(prog.statements) == 5
    assert [s.target.tensor.name for s in prog.statements] == ["M1", "M2", "M3", "M4", "F"]
    assert all(s.target.indices[0].name == "b_" for s in prog.statements)


def test_only_the_returned_variable_is_an_output():
    # the other assigned variables are the function's locals: temporaries the
    # caller neither passes nor receives (a fused kernel may keep them on chip)
    from einkern.ir.build import build_program

    program = build_program(parse_mapped(LISTING_4_1, "listing41.mapped"))
    assert program.outputs == ("F",)
    assert program.temporaries == ("M1", "M2", "M3", "v1", "s1")
    assert program.inputs == ("A", "B", "D", "E", "c")
    program = build_program(parse_mapped(LISTING_5_1))
    assert program.outputs == ("F",) and program.temporaries == ("M1", "M2", "M3", "M4")


def test_load_program_node_sniffs_mapped(tmp_path):
    assert len(load_program_node(LISTING_5_1).statements) == 5
    path = tmp_path / "f.mf"
    path.write_text(LISTING_5_1)
    assert load_program_node(path).name == "f"


def test_builtin_library_contents():
    lib = builtin_library()
    wanted = [
        "mmul33",
        "mmul55",
        "mvmul33",
        "mvmul55",
        "madd33",
        "madd55",
        "msub33",
        "msub55",
        "smmul33",
        "smmul55",
        "vadd3",
        "vadd5",
        "venorm3",
        "venorm5",
        "vnorm3",
        "vnorm5",
        "vdot3",
        "vdot5",
        "mtrans33",
        "mtrans55",
    ]
    for name in wanted:
        assert lib.function(name) is not None, name
    assert lib.function("mtrans33").signature() == "mtrans33(A: MATRIX3x3) -> MATRIX3x3"
    assert lib.type("SCALAR").shape == ()


USER_LIBRARY = """\
type MATRIX3x3 = [3, 3]        # repeating a built-in type with the same sizes is fine
type VECTOR4 = [4]
function axpy4(a: SCALAR, x: VECTOR4, y: VECTOR4) -> VECTOR4 {
  out[b_] = a[] * x[b_]
  out[b_] += y[b_]
}
function rowsum3(M: MATRIX3x3) -> VECTOR3 { out[x] = M[x, y] }
"""


def test_user_library_renames_clashing_indices(tmp_path):
    path = tmp_path / "mine.ein"
    path.write_text(USER_LIBRARY)
    lib = load_library(path)
    assert lib.function("mmul33") is not None and lib.function("axpy4") is not None
    text = """\
SCALAR a; VECTOR4 x, y, z
MATRIX3x3 x2; VECTOR3 r
input a, x, y, x2
z = axpy4(a, x, y)
r = rowsum3(x2)
return z
"""
    prog = parse_mapped(text, library=lib)
    got = [f"{show(s.target)} {s.op} {show(s.rhs)}" for s in prog.statements]
    assert got == [
        "z[b_,b__1] = (a[b_] * x[b_,b__1])",
        "z[b_,b__1] += y[b_,b__1]",
        "r[b_,x_1] = x2[b_,x_1,y_1]",
    ]
    assert all(s.span.line == 4 for s in prog.statements[:2])


def test_library_without_builtin():
    lib = parse_library("type V = [2]\nfunction neg(v: V) -> V { out[i] = -v[i] }")
    assert [f.name.name for f in lib.functions] == ["neg"]
    prog = parse_mapped("V a, b; input a; b = neg(a); return b;", library=lib)
    assert show(prog.statements[0].rhs) == "(-a[b_,i])"


@pytest.mark.parametrize(
    "text, error, line, column, words",
    [
        ("MATRIX4x4 A;\ninput A;\nreturn A;", UnknownNameError, 1, 1, "unknown type 'MATRIX4x4'"),
        (
            "MATRIX3x3 A, B;\ninput A;\nB = mmul44(A, A);\nreturn B;",
            UnknownNameError,
            3,
            5,
            "no elementary function 'mmul44'; known: ",
        ),
        (
            "MATRIX3x3 A, B;\ninput A;\nB = mmul33(A);\nreturn B;",
            SemanticError,
            3,
            5,
            "takes 2 arguments, got 1",
        ),
        (
            "MATRIX3x3 A, B;\nMATRIX5x5 D;\ninput A, D;\nB = mmul33(A, D);\nreturn B;",
            SemanticError,
            4,
            15,
            "argument 2 of mmul33 must be a MATRIX3x3",
        ),
        (
            "MATRIX3x3 A;\nVECTOR3 B;\ninput A;\nB = mmul33(A, A);\nreturn B;",
            SemanticError,
            4,
            1,
            "returns a MATRIX3x3",
        ),
        (
            "MATRIX3x3 A, B, C;\ninput A;\nC = mmul33(A, B);\nreturn C;",
            SemanticError,
            3,
            15,
            "used before it is assigned",
        ),
        ("MATRIX3x3 A;\ninput A;\nreturn X;", UnknownNameError, 3, 8, "not declared"),
        ("MATRIX3x3 A, B;\ninput A;\nreturn B;", SemanticError, 3, 8, "before it is assigned"),
        ("MATRIX3x3 A;\ninput A;\n", ParseError, 3, 1, "no return statement"),
        ("MATRIX3x3 A, A;", DuplicateDeclarationError, 1, 14, "declared twice"),
        (
            "MATRIX3x3 A, B;\ninput A;\nB = mtrans33(A);\nB = mtrans33(A);\nreturn B;",
            SemanticError,
            4,
            1,
            "assigned twice",
        ),
        (
            "MATRIX3x3 A;\ninput A;\nA = mtrans33(A);\nreturn A;",
            SemanticError,
            3,
            1,
            "cannot assign the input",
        ),
        ("MATRIX3x3 A;\ninput A;\nreturn A;\nA = A;", ParseError, 4, 1, "follow the return"),
        (
            "MATRIX3x3 A, B;\ninput A;\nB = mtrans33(mtrans33(A));\nreturn B;",
            ParseError,
            3,
            14,
            "variable as argument",
        ),
        ("MATRIX3x3 A, B;\ninput A;\nB = A;\nreturn B;", ParseError, 3, 5, "expected a call"),
        (
            "MATRIX3x3 A, B;\ninput A;\nB = mtrans33(A;\nreturn B;",
            ParseError,
            3,
            13,
            "expected ')'",
        ),
    ],
)
def test_mapped_errors(text, error, line, column, words):
    with pytest.raises(error) as info:
        parse_mapped(text, "bad.mapped")
    exc = info.value
    assert words in exc.message
    assert (exc.span.line, exc.span.column) == (line, column)
    assert exc.hint and "^" in str(exc) and str(exc).startswith(f"bad.mapped:{line}:")


def test_unknown_function_hint_names_the_library():
    with pytest.raises(UnknownNameError) as info:
        parse_mapped("MATRIX3x3 A, B;\ninput A;\nB = mmul3(A, A);\nreturn B;")
    assert "mmul33" in info.value.message and "library" in info.value.hint
    assert "mmul33" in info.value.hint  # did you mean


def test_bad_batch():
    with pytest.raises(ExtentError):
        parse_mapped(LISTING_5_1, batch=0)


@pytest.mark.parametrize(
    "text, error, words",
    [
        ("type V = [2]\nfunction f(v: V) -> V { w[i] = v[i] }", SemanticError, "assigns only"),
        ("type V = [2]\nfunction f(v: V) -> V { out[i] += v[i] }", SemanticError, "first"),
        ("type V = [2]\nfunction f(v: V) -> V { out[i] = v[i, j] }", RankError, "rank 1"),
        (
            "type V = [2]\nfunction f(v: V) -> V { out[i] = q[i] }",
            UnknownNameError,
            "not a parameter",
        ),
        (
            "type V = [2]\nfunction f(v: V) -> W { out[i] = v[i] }",
            UnknownNameError,
            "unknown type 'W'",
        ),
        (
            "type V = [2]\ntype W = [3]\nfunction f(v: V, w: W) -> V { out[i] = v[i] * w[i] }",
            IndexBindingError,
            "index 'i'",
        ),
        (
            "type V = [2]\nfunction f(v: V) -> V { out[i] = cbrt(v[i]) }",
            UnknownNameError,
            "unknown function 'cbrt'",
        ),
        ("type V = [2]\nfunction f(v: V) -> V { out[i] = v }", UnknownNameError, "bare name"),
        (
            "type V = [2]\nfunction f(v: V, v: V) -> V { out[i] = v[i] }",
            DuplicateDeclarationError,
            "twice",
        ),
        ("type V = [2]\nfunction f(v: V) -> V { out[i] = v[i]", ParseError, "expected '}'"),
        ("type V = [2]\ntype V = [3]", DuplicateDeclarationError, "already defined"),
        (
            "function mmul33(v: SCALAR) -> SCALAR { out[] = v[] }",
            DuplicateDeclarationError,
            "already defined",
        ),
    ],
)
def test_library_errors(text, error, words):
    with pytest.raises(error) as info:
        parse_library(text, "lib.ein", base=builtin_library())
    assert words in info.value.message
    assert info.value.span is not None and "^" in str(info.value)


def test_expansions_build():
    build = pytest.importorskip("einkern.ir.build")
    for text in (LISTING_4_1, LISTING_5_1):
        program = build.build_program(parse_mapped(text))
        assert len(program.statements) == len(parse_mapped(text).statements)
