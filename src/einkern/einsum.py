"""``einkern.einsum``: NumPy-style subscripts compiled (and cached) to a kernel."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from .arrays import ArrayInfo, strides_match
from .backends import get_backend
from .backends.binding import article, type_name
from .errors import ArgumentError, DtypeError, LayoutError, ParseError
from .ir.nodes import Access, Binary, Expr, Extent, Program, Statement, Sum, Tensor
from .lang.limits import MAX_EXPRESSION_DEPTH
from .source import Source, Span

_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _parse_spec(spec: str, count: int) -> tuple[list[str], str]:
    """The operands' subscripts and the output's, checked (located errors)."""
    source = Source("<einsum>", spec)

    def error(message: str, position: int, width: int = 1, hint: str | None = None):
        return ParseError(message, Span(source, position, position + width), hint=hint)

    for position, char in enumerate(spec):
        if not (char in _LETTERS or char in ",-> "):
            raise error(
                f"unexpected character {char!r} in einsum subscripts", position,
                hint="use ASCII letters for indices, ',' between operands and '->' before "
                "the output (ellipsis '...' is not supported)")
    arrows = [i for i in range(len(spec)) if spec.startswith("->", i)]
    for position, char in enumerate(spec):
        if (char == "-" and position not in arrows) or (
                char == ">" and position - 1 not in arrows):
            raise error(f"stray {char!r} in einsum subscripts", position,
                        hint="the output is introduced by '->'")
    if len(arrows) > 1:
        raise error("more than one '->' in einsum subscripts", arrows[1], 2,
                    hint="write operands, then '->' and the output once, e.g. 'ij,jk->ik'")
    if count > MAX_EXPRESSION_DEPTH:
        raise ArgumentError(f"einsum takes at most {MAX_EXPRESSION_DEPTH} operands, got {count}",
                            hint="contract the operands in several calls")
    text = spec.replace(" ", "")
    lhs, out = text.split("->", 1) if arrows else (text, None)
    terms = lhs.split(",")
    if len(terms) != count:
        raise ArgumentError(
            f"subscripts {spec!r} name {len(terms)} operand(s) but {count} array(s) were given"
        )
    if out is not None and "," in out:
        raise error("the output of einsum subscripts is one list of indices, without ','",
                    arrows[0] + 2 + spec[arrows[0] + 2:].index(","),
                    hint="separate operands with ',' before '->' only")
    if out is None:
        letters = "".join(terms)
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    for char in out:
        if char not in lhs:
            raise ArgumentError(f"output index {char!r} appears in no operand of {spec!r}")
        if out.count(char) > 1:
            raise ArgumentError(f"output index {char!r} repeated in {spec!r}")
    return terms, out


@lru_cache(maxsize=256)
def _kernel(
    spec: str,
    shapes: tuple[tuple[int, ...], ...],
    dtype: str,
    layouts: tuple[str, ...],
    backend: str,
):
    from .api import Kernel
    from .ir.bind import make_problem

    terms, out = _parse_spec(spec, len(shapes))
    sizes: dict[str, int] = {}
    for term, shape in zip(terms, shapes, strict=True):
        if len(term) != len(shape):
            raise ArgumentError(
                f"operand with subscripts {term!r} has {len(shape)} dimension(s)"
            )
        for char, size in zip(term, shape, strict=True):
            if sizes.setdefault(char, size) != size:
                raise ArgumentError(
                    f"index {char!r} has size {sizes[char]} in one operand and {size} in another"
                )
    extents = tuple(Extent(f"n_{c}", sizes[c]) for c in sorted(sizes))
    tensors = tuple(
        Tensor(f"x{i}", tuple(f"n_{c}" for c in term), dtype, layout)
        for i, (term, layout) in enumerate(zip(terms, layouts, strict=True))
    )
    output = Tensor("out", tuple(f"n_{c}" for c in out), dtype, "row")
    body: Expr = Access(tensors[0].name, tuple(terms[0]))
    for tensor, term in zip(tensors[1:], terms[1:], strict=True):
        body = Binary("*", body, Access(tensor.name, tuple(term)))
    summed = tuple(dict.fromkeys(c for c in "".join(terms) if c not in out))
    rhs = Sum(summed, body) if summed else body
    statement = Statement(
        Access("out", tuple(out)), "=", rhs, tuple((c, f"n_{c}") for c in sizes)
    )
    program = Program("einsum", extents, (*tensors, output), (), (statement,))
    return Kernel(make_problem(program), get_backend(backend))


def _layout(info: ArrayInfo) -> str:
    if strides_match(info, "row"):
        return "row"
    if strides_match(info, "column"):
        return "column"
    raise LayoutError(
        f"operand with strides {info.strides} (in elements) is neither a dense row-major "
        "nor a dense column-major array",
        hint="pass a contiguous copy (np.ascontiguousarray)",
    )


def einsum(spec: str, *operands: Any, backend: str = "auto") -> Any:
    """Evaluate ``spec`` (``"ik,kj->ij"``, NumPy's rules without ellipsis) on the
    operands with a compiled einkern kernel; kernels are cached per subscripts,
    shapes, dtype, layouts and backend.  Returns a new row-major array of the
    operands' kind (NumPy, or the GPU library's for GPU operands)."""
    chosen = get_backend(backend)
    infos = []
    for operand in operands:
        info = chosen.describe(operand)
        if info is None:
            raise ArgumentError(
                f"the {chosen.name} backend cannot use {article(type_name(operand))} as an "
                "einsum operand",
                hint="pass NumPy arrays"
                + (" or GPU arrays (torch, CuPy, JAX)" if chosen.name == "cuda" else ""),
            )
        infos.append(info)
    dtypes = {info.dtype for info in infos}
    if not dtypes <= {"float32", "float64"}:
        raise DtypeError(
            f"einsum supports float32 and float64 operands, got {', '.join(sorted(dtypes))}",
            hint="convert the operands with .astype('float64')",
        )
    if len(dtypes) > 1:
        raise DtypeError(
            "einsum operands mix float32 and float64", hint="convert them to one dtype"
        )
    kernel = _kernel(
        spec,
        tuple(info.shape for info in infos),
        dtypes.pop(),
        tuple(_layout(info) for info in infos),
        chosen.name,
    )
    return kernel(*operands)
