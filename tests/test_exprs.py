"""The kernel-IR expression constructors: a thread's share ``threadIdx + c``
divided by a divisor of ``c`` keeps the whole offset out of the quotient and
remainder, which C evaluates to the same values for every thread; nothing
else is rewritten (a negative offset, one that the divisor does not divide,
an operand not known to be non-negative)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from einkern.gpu import exprs as E
from einkern.gpu import kir


def evaluate(e: kir.Expr, thread: int, variables: dict[str, int]) -> int:
    """``e`` as C evaluates it (truncating division) for ``threadIdx.x = thread``."""
    if isinstance(e, kir.Int):
        return e.value
    if isinstance(e, kir.ThreadIdx):
        return thread
    if isinstance(e, kir.Var):
        return variables[e.name]
    assert isinstance(e, kir.Op)
    a, b = evaluate(e.left, thread, variables), evaluate(e.right, thread, variables)
    if e.op == "/":
        return abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
    if e.op == "%":
        return a - b * evaluate(kir.Op("/", kir.Int(a), kir.Int(b)), thread, variables)
    return {"+": a + b, "-": a - b, "*": a * b}[e.op]


@given(
    st.integers(0, 1023),
    st.sampled_from([1, 2, 4, 16, 20, 32, 128]),
    st.integers(0, 8),
    st.integers(-40, 40),
)
def test_quotients_of_shares_keep_their_values(thread, divisor, multiple, var):
    share = E.add(kir.ThreadIdx(), E.const(multiple * 256))
    scaled = E.add(E.mul(kir.ThreadIdx(), E.const(3)), E.const(multiple * 256))
    signed = E.add(kir.Var("v"), E.const(multiple * 256))  # v may be negative
    for e in (share, scaled, signed):
        for made, op in ((E.div(e, divisor), "/"), (E.mod(e, divisor), "%")):
            plain = kir.Op(op, e, kir.Int(divisor)) if divisor > 1 else made
            assert evaluate(made, thread, {"v": var}) == evaluate(plain, thread, {"v": var})


def test_only_known_non_negative_shares_are_split():
    t = kir.ThreadIdx()
    assert E.div(E.add(t, E.const(256)), 16) == E.add(E.div(t, 16), E.const(16))
    assert E.mod(E.add(t, E.const(256)), 16) == E.mod(t, 16)
    kept = [
        E.add(kir.Var("kk"), E.const(32)),  # a loop variable: sign not known
        E.add(t, E.const(24)),  # 24 is not a multiple of 16
        E.sub(t, E.const(32)),  # may be negative
    ]
    for e in kept:
        assert E.div(e, 16) == kir.Op("/", e, kir.Int(16))
        assert E.mod(e, 16) == kir.Op("%", e, kir.Int(16))
