"""The CPU backend's expression printer: :class:`~einkern.gpu.ctext.CText`, the
printer base the CUDA and emulation printers share, with the CPU's spelling.

A statement's right-hand side is turned into kernel-IR expressions
(:func:`index`, and :mod:`.codegen` for the rest) and printed here, so literals,
operators, parentheses, the NaN-propagating ``max``/``min`` and function names
follow the same policies in every generated C.  The CPU spelling: tensors are
``t_NAME`` pointers, indexed flat; a tensor narrower than the statement's compute
type is widened where it is read (``(double)t_A[...]``, a 16-bit one through its
``ek_*_to_float`` helper), so every read takes the
compute type; loop variables (``i_INDEX``, tile starts ``b_INDEX``) are 64-bit.
"""

from __future__ import annotations

from collections.abc import Iterable

from ...gpu import exprs as E
from ...gpu import kir
from ...gpu.ctext import ArrayInfo, CText, mangle
from ...ir.nodes import Access, Problem, Statement
from ...semantics import C_TYPE, STORAGE_C_TYPES

INDEX_TYPE = "long long"  # int64_t


class CpuText(CText):
    """Prints one statement's expressions, computed in ``ctype``."""

    def __init__(
        self,
        problem: Problem,
        statement: Statement,
        ctype: str,
        scalars: Iterable[str],
        buffers: Iterable[tuple[str, int]] = (),
    ):
        program = problem.program
        params = [
            kir.Param(
                mangle("t", name),
                C_TYPE[program.tensor(name).dtype],
                True,
                problem.numel(name),
                name != statement.output.tensor,
            )
            for name in statement.tensors()
        ]
        params += [kir.Param(mangle("s", name), ctype, False) for name in scalars]
        loops = [
            kir.ThreadVar(mangle(prefix, index), INDEX_TYPE)
            for index in dict.fromkeys(statement.indices)
            for prefix in ("i", "b")
        ]
        shared = tuple(kir.SharedArray(name, ctype, size) for name, size in buffers)
        kernel = kir.Kernel(
            f"statement_{id(statement)}",
            tuple(params),
            1,
            1,
            tuple(loops),
            shared,
            (),
            index_type=INDEX_TYPE,
        )
        super().__init__(kernel)
        self.ctype = ctype
        self.widened = ctype  # 16-bit reads widen to the compute type
        self.env: dict[str, str] = dict(self.types)

    # -- spelling hooks ----------------------------------------------------------

    def element(self, info: ArrayInfo, index: str, access: str) -> str:
        text = f"{info.name}[{index}]"
        if access == "load" and info.ctype != self.ctype and info.ctype not in STORAGE_C_TYPES:
            return f"({self.ctype}){text}"  # widened exactly to the compute type
        return text  # 16-bit elements: widened by CText.loaded

    def infer(self, e: kir.Expr, env) -> str | None:
        if isinstance(e, kir.Load):
            self.array(e.array)
            return self.ctype  # every read is widened to the compute type
        return super().infer(e, env)

    # -- the backend's entry points -------------------------------------------------

    def declare(self, name: str, ctype: str | None = None) -> str:
        """A new accumulator of the compute type (or of ``ctype``: a wider one)."""
        self.local(name)
        self.env[name] = ctype or self.ctype
        return name

    def text(self, e: kir.Expr) -> str:
        """C text of a value of the statement (typed as the compute type)."""
        return self.expr(e, self.env, self.ctype)

    def target(self, array: str, offset: kir.Expr) -> str:
        """The lvalue of an element (no widening)."""
        info = self.array(array)
        return self.element(info, self.expr(offset, self.env, INDEX_TYPE), "store")


def index(problem: Problem, access: Access) -> kir.Expr:
    """Linear element offset of an access: ``Σ i_INDEX · stride`` over the dimensions
    of more than one element."""
    terms: list[tuple[kir.Expr, int]] = [
        (kir.Var(mangle("i", name)), stride)
        for name, size, stride in zip(
            access.indices,
            problem.shape(access.tensor),
            problem.strides(access.tensor),
            strict=True,
        )
        if size != 1  # the index is always 0 there
    ]
    return E.linear(terms)


def load(problem: Problem, access: Access) -> kir.Expr:
    return kir.Load(mangle("t", access.tensor), index(problem, access))
