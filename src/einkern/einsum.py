"""``einkern.einsum``: NumPy-style subscripts compiled (and cached) to a kernel."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from .arrays import ArrayInfo, strides_match
from .backends import get_backend
from .backends.binding import article, type_name
from .errors import ArgumentError, DtypeError, LayoutError, ParseError
from .ir.nodes import Access, Binary, Expr, Extent, Program, Statement, Sum, Tensor
from .source import Source, Span


def _parse_spec(spec: str, count: int) -> tuple[list[str], str]:
    source = Source("<einsum>", spec)
    text = spec.replace(" ", "")
    if "->" in text:
        lhs, out = text.split("->", 1)
    else:
        lhs, out = text, None
    terms = lhs.split(",")
    if len(terms) != count:
        raise ArgumentError(
            f"subscripts {spec!r} name {len(terms)} operand(s) but {count} array(s) were given"
        )
    for position, char in enumerate(text):
        if not (char.isalpha() or char in ",->"):
            raise ParseError(
                f"unexpected character {char!r} in einsum subscripts",
                Span(source, position, position + 1),
                hint="use letters for indices, ',' between operands and '->' before the output "
                "(ellipsis '...' is not supported)",
            )
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
