"""Small constructors for kernel-IR expressions with constant folding, so that the
generated index arithmetic stays readable (no ``x * 1 + 0``)."""

from __future__ import annotations

from . import kir


def const(value: int) -> kir.Int:
    return kir.Int(int(value))


def add(a: kir.Expr, b: kir.Expr) -> kir.Expr:
    if isinstance(a, kir.Int) and isinstance(b, kir.Int):
        return kir.Int(a.value + b.value)
    if isinstance(a, kir.Int) and a.value == 0:
        return b
    if isinstance(b, kir.Int) and b.value == 0:
        return a
    return kir.Op("+", a, b)


def sub(a: kir.Expr, b: kir.Expr) -> kir.Expr:
    if isinstance(a, kir.Int) and isinstance(b, kir.Int):
        return kir.Int(a.value - b.value)
    if isinstance(b, kir.Int) and b.value == 0:
        return a
    return kir.Op("-", a, b)


def mul(a: kir.Expr, b: kir.Expr) -> kir.Expr:
    if isinstance(a, kir.Int) and isinstance(b, kir.Int):
        return kir.Int(a.value * b.value)
    for x, y in ((a, b), (b, a)):
        if isinstance(x, kir.Int):
            if x.value == 0:
                return kir.Int(0)
            if x.value == 1:
                return y
    return kir.Op("*", a, b)


def nonnegative(a: kir.Expr) -> bool:
    """Whether ``a`` is known to be at least zero: thread and block indices,
    constants at least zero, and sums, products, quotients and remainders of such
    (by positive constants for the last two)."""
    if isinstance(a, kir.ThreadIdx | kir.BlockIdx):
        return True
    if isinstance(a, kir.Int):
        return a.value >= 0
    if isinstance(a, kir.Op) and a.op in ("+", "*"):
        return nonnegative(a.left) and nonnegative(a.right)
    if isinstance(a, kir.Op) and a.op in ("/", "%"):
        return nonnegative(a.left) and isinstance(a.right, kir.Int) and a.right.value > 0
    return False


def _whole_offset(a: kir.Expr, b: int) -> tuple[kir.Expr, int] | None:
    """``(x, c)`` where ``a`` is ``x + c`` with ``x`` known non-negative and ``c``
    a non-negative multiple of ``b`` (then ``a / b = x / b + c / b`` and
    ``a % b = x % b``: the form a thread's share ``threadIdx + j·threads`` takes)."""
    if isinstance(a, kir.Op) and a.op == "+" and isinstance(a.right, kir.Int):
        if a.right.value >= 0 and a.right.value % b == 0 and nonnegative(a.left):
            return a.left, a.right.value
    return None


def div(a: kir.Expr, b: int) -> kir.Expr:
    if b == 1:
        return a
    if isinstance(a, kir.Int):
        return kir.Int(a.value // b)
    split = _whole_offset(a, b)
    if split is not None:
        return add(div(split[0], b), const(split[1] // b))
    return kir.Op("/", a, kir.Int(b))


def mod(a: kir.Expr, b: int) -> kir.Expr:
    if b == 1:
        return kir.Int(0)
    if isinstance(a, kir.Int):
        return kir.Int(a.value % b)
    split = _whole_offset(a, b)
    if split is not None:
        return mod(split[0], b)
    return kir.Op("%", a, kir.Int(b))


def less(a: kir.Expr, b: kir.Expr) -> kir.Expr:
    return kir.Op("<", a, b)


def conj(conditions: list[kir.Expr]) -> kir.Expr | None:
    result: kir.Expr | None = None
    for condition in conditions:
        result = condition if result is None else kir.Op("&&", result, condition)
    return result


def minimum(a: kir.Expr, b: kir.Expr) -> kir.Expr:
    if isinstance(a, kir.Int) and isinstance(b, kir.Int):
        return kir.Int(min(a.value, b.value))
    return kir.Op("min", a, b)


def linear(terms: list[tuple[kir.Expr, int]]) -> kir.Expr:
    """``Σ coordinate·stride``."""
    result: kir.Expr = kir.Int(0)
    for coordinate, stride in terms:
        result = add(result, mul(coordinate, const(stride)))
    return result


def thread_shares(total: int, threads: int):
    """For each round ``j`` in which ``threads`` threads cover ``total`` elements,
    ``(j, e, guard)``: the thread's element ``e = threadIdx + j·threads`` and the
    condition ``e < total`` (None where every thread's element exists)."""
    for j in range(-(-total // threads)):
        e = add(kir.ThreadIdx(), const(j * threads))
        yield j, e, (less(e, const(total)) if (j + 1) * threads > total else None)
