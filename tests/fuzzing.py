"""Fuzzing harness shared by tests/test_fuzz.py and scripts/fuzz.py.

Two sources of inputs:

* :func:`mutate` — a mutation fuzzer over the examples (``.ein``, ``.tensor``,
  ``.mapped``): byte and token mutations, deep nesting, long sums, huge
  numbers, odd unicode;
* :func:`program_text` — a grammar-based generator of ``.ein`` programs (a
  hypothesis strategy in tests/test_fuzz.py draws its choices).

:func:`run_case` runs one input in-process through load → build → check (the
``einkern check`` command) and ``emit --backend cpu`` / ``cuda`` (which need no
compiler run).  The property: each step either succeeds or raises an
:class:`einkern.errors.EinkernError` (the CLI: exit code 0 or 2); anything else
is a crash.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = (
    sorted((ROOT / "examples").glob("*.ein"))
    + sorted((ROOT / "examples").glob("*.tensor"))
    + sorted((ROOT / "examples").glob("*.mapped"))
    + sorted((ROOT / "examples").glob("*.c"))
)

#: Characters a mutation may insert: ASCII punctuation, digits, odd unicode
#: (accented and fullwidth letters, other digits, invisible and RTL marks, NUL).
ODD = (
    "é",
    "Ａ",
    "ｉ",
    "²",
    "٣",
    "\u00a0",
    "\u200b",
    "\u202e",
    "\ufeff",
    "\x00",
    "\t",
    "😀",
    "ß",
    "İ",
    "µ",
    "\r",
    "\\",
    '"',
    "'",
    "`",
    "$",
    "@",
    "!",
    "?",
    "%",
    "^",
    "&",
    "|",
    "~",
    "{",
    "}",
    "<",
    ">",
    ".",
    ":",
    ";",
    ",",
    "[",
    "]",
    "(",
    ")",
    "+",
    "-",
    "*",
    "/",
    "=",
    "#",
    "\n",
    " ",
    "0",
    "1",
    "9",
    "_",
    "e",
    "E",
    "i",
)
HUGE = (
    "0",
    "-1",
    "1" + "0" * 400,
    "9" * 5000,
    "9223372036854775808",
    "9223372036854775807",
    "4294967296",
    "1e400",
    "1e-400",
    "2**63",
    "1.5",
    "65536",
    "3037000500",
    "nan",
    "inf",
    "0x10",
    "1_000",
)
KEYWORDS = (
    "and",
    "or",
    "mod",
    "floor",
    "exists",
    "int",
    "double",
    "for",
    "return",
    "void",
    "S0",
    "x_i",
    "n_m",
    "T_A",
    "b_",
    "nbatch",
    "sum",
    "sqrt",
    "program",
    "dims",
    "tensor",
    "scalar",
    "dtype",
    "layout",
    "input",
    "variables:",
    "operations:",
    "define:",
    "__global__",
    "threadIdx",
)


@dataclass(frozen=True)
class Outcome:
    """What one input did: ``error`` is None on success, else the error class name
    of the first step that refused it; ``seconds`` the processor time all steps took
    (this process's, so that a busy machine or parallel test workers do not count)."""

    error: str | None
    seconds: float


class Crash(Exception):
    """An input made einkern raise something other than an EinkernError."""


def _suffix(text: str) -> str:
    from einkern.lang.loader import detect_format

    return {"tensor": ".tensor", "mapped": ".mapped", "ein": ".ein"}[detect_format(text)]


def run_case(
    text: str, suffix: str | None = None, *, emit: bool = True, workdir: str | None = None
) -> Outcome:
    """Run ``text`` (a program in the format of ``suffix``, else detected) through
    ``einkern check`` and, when ``emit``, ``einkern emit`` for both backends; raise
    :class:`Crash` (with the original exception as its cause) on anything but
    success or an EinkernError."""
    from einkern.cli import main

    directory = workdir or tempfile.gettempdir()
    path = os.path.join(directory, f"fuzz-{os.getpid()}{suffix or _suffix(text)}")
    Path(path).write_text(text, encoding="utf-8", errors="surrogatepass")
    start = time.process_time()
    commands = [["check", path]]
    if emit:
        commands += [["emit", path, "--backend", "cpu"], ["emit", path, "--backend", "cuda"]]
    error = None
    for command in commands:
        sink = io.StringIO()
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                code = main(command)
        except BaseException as exc:  # noqa: BLE001 - the property under test
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise Crash(
                f"{' '.join(command[:1] + command[2:])}: {type(exc).__name__}: {str(exc)[:300]}"
            ) from exc
        if code == 2:
            error = sink.getvalue().splitlines()[0][:200] if sink.getvalue() else "error"
            break
        if code != 0:
            raise Crash(f"{command[0]} exited with {code}: {sink.getvalue()[-300:]}")
    return Outcome(error, time.process_time() - start)


# ---- mutation fuzzer ----------------------------------------------------------


def _tokens(text: str) -> list[str]:
    """Rough tokens: runs of word characters, and single other characters."""
    out: list[str] = []
    word = ""
    for char in text:
        if char.isalnum() or char == "_":
            word += char
            continue
        if word:
            out.append(word)
            word = ""
        out.append(char)
    if word:
        out.append(word)
    return out


def _mutate_once(text: str, rng: random.Random) -> str:
    kind = rng.randrange(14)
    n = len(text)
    at = rng.randrange(n + 1)
    if kind == 0 and n:  # delete a span
        return text[:at] + text[at + rng.randrange(1, 12) :]
    if kind == 1:  # insert odd characters
        return text[:at] + "".join(rng.choice(ODD) for _ in range(rng.randrange(1, 4))) + text[at:]
    if kind == 2 and n:  # replace a character
        return text[:at] + rng.choice(ODD) + text[at + 1 :]
    lines = text.split("\n")
    line = rng.randrange(len(lines))
    if kind == 3:  # duplicate or drop a line
        if rng.random() < 0.5:
            lines.insert(line, lines[line])
        else:
            del lines[line]
        return "\n".join(lines)
    tokens = _tokens(text)
    if not tokens:
        return text + rng.choice(ODD)
    spot = rng.randrange(len(tokens))
    if kind == 4:  # replace a number (or anything) with a huge or odd one
        numbers = [i for i, t in enumerate(tokens) if t[:1].isdigit()] or [spot]
        tokens[rng.choice(numbers)] = rng.choice(HUGE)
    elif kind == 5:  # rename a name to an odd or reserved one
        names = [i for i, t in enumerate(tokens) if t[:1].isalpha()] or [spot]
        tokens[rng.choice(names)] = rng.choice(KEYWORDS + ("é", "ｉ", "a" * 300, "_", "Ａ"))
    elif kind == 6:  # swap two tokens
        other = rng.randrange(len(tokens))
        tokens[spot], tokens[other] = tokens[other], tokens[spot]
    elif kind == 7:  # deep nesting around a token
        depth = rng.choice((10, 63, 64, 65, 100, 250, 1000))
        opener = rng.choice(("(", "-", "sqrt(", "+", "max(1, "))
        closer = ")" if opener.endswith("(") or opener.endswith(", ") else ""
        tokens[spot] = opener * depth + tokens[spot] + closer * depth
    elif kind == 8:  # a long flat sum or product
        word = tokens[spot]
        count = rng.choice((50, 199, 200, 201, 500, 1000))
        op = rng.choice((" + ", " * ", " - ", " / "))
        tokens[spot] = op.join([word] * count)
    elif kind == 9:  # duplicate a token
        tokens.insert(spot, tokens[spot])
    elif kind == 10:  # delete a token
        del tokens[spot]
    elif kind == 11:  # many indices or dimensions
        tokens[spot] = tokens[spot] + ", ".join([""] + [rng.choice("ijkn")] * rng.randrange(1, 40))
    elif kind == 12:  # a token from elsewhere
        tokens[spot] = rng.choice(tokens)
    else:  # a line from another example
        other = rng.choice(EXAMPLES).read_text(encoding="utf-8").split("\n")
        lines.insert(line, rng.choice(other))
        return "\n".join(lines)
    return "".join(tokens)


def mutate(seed: int) -> tuple[str, str]:
    """A mutated example, deterministically from ``seed``: (text, suffix)."""
    rng = random.Random(seed)
    example = EXAMPLES[rng.randrange(len(EXAMPLES))]
    text = example.read_text(encoding="utf-8")
    for _ in range(rng.choice((1, 1, 1, 2, 3, 5))):
        text = _mutate_once(text, rng)
    return text, example.suffix


LIBRARY = ROOT / "src" / "einkern" / "lib" / "elementary.ein"


def mutate_library(seed: int) -> str:
    """The built-in library of elementary functions, mutated (deterministic in ``seed``)."""
    rng = random.Random(seed)
    text = LIBRARY.read_text(encoding="utf-8")
    for _ in range(rng.choice((1, 1, 2, 3))):
        text = _mutate_once(text, rng)
    return text


def run_library(text: str) -> str | None:
    """Parse a library and expand a mapped function over it: None on success, else
    the EinkernError's message; :class:`Crash` on anything else."""
    from einkern.errors import EinkernError
    from einkern.lang import parse_library, parse_mapped

    mapped = (ROOT / "examples" / "fousek_function1.mapped").read_text(encoding="utf-8")
    try:
        library = parse_library(text)
        parse_mapped(mapped, "f.mapped", library=library, batch=4)
    except EinkernError as error:
        return error.message
    except Exception as exc:  # noqa: BLE001 - the property under test
        raise Crash(f"library: {type(exc).__name__}: {str(exc)[:300]}") from exc
    return None


# ---- grammar-based generator ------------------------------------------------------

FUNCTIONS = {
    "sqrt": 1,
    "exp": 1,
    "log": 1,
    "abs": 1,
    "sin": 1,
    "cos": 1,
    "tanh": 1,
    "max": 2,
    "min": 2,
    "pow": 2,
}


def program_text(choose) -> str:
    """A .ein program built from ``choose(options)`` decisions (``choose`` picks one
    element of a sequence: ``random.Random.choice`` or a hypothesis draw)."""
    extents = [f"n{i}" for i in range(choose((1, 2, 3)))]
    lines = []
    if choose((True, False)):
        lines.append(f"dtype {choose(('float32', 'float64', 'bfloat16', 'float16'))}")
    if choose((True, False)):
        lines.append(f"layout {choose(('row', 'column'))}")
    lines.append("dims " + ", ".join(f"{e} = {choose((1, 2, 3, 5))}" for e in extents))
    tensors: dict[str, list[str]] = {}
    for number in range(choose((1, 2, 3, 4))):
        shape = [choose(extents) for _ in range(choose((0, 1, 2, 3)))]
        tensors[f"T{number}"] = shape
        attributes = choose(
            ("", " float32", " column", " float64 row", " bfloat16", " float16 column")
        )
        lines.append(f"tensor T{number}[{', '.join(shape)}]{attributes}")
    scalars = [f"s{i}" for i in range(choose((0, 1, 2)))]
    for scalar in scalars:
        lines.append(f"scalar {scalar} = {choose(('1.5', '-2', '0.25', '3'))}")
    indices = ("i", "j", "k", "l")

    def access() -> str:
        name = choose(sorted(tensors))
        return f"{name}[{', '.join(choose(indices) for _ in tensors[name])}]"

    def expr(depth: int) -> str:
        kind = choose(
            ("access", "access", "number", "scalar", "binary", "binary", "unary", "call", "paren")
            if depth < 4
            else ("access", "number")
        )
        if kind == "number":
            return choose(("1", "2.5", "0.5", "1e-3", "3"))
        if kind == "scalar" and scalars:
            return choose(scalars)
        if kind == "binary":
            return f"{expr(depth + 1)} {choose('+-*/')} {expr(depth + 1)}"
        if kind == "unary":
            return f"-{expr(depth + 1)}"
        if kind == "call":
            func = choose(sorted(FUNCTIONS))
            return f"{func}({', '.join(expr(depth + 1) for _ in range(FUNCTIONS[func]))})"
        if kind == "paren":
            return f"({expr(depth + 1)})"
        return access()

    for _ in range(choose((1, 2, 3))):
        name = choose(sorted(tensors))
        target = f"{name}[{', '.join(indices[: len(tensors[name])])}]"
        lines.append(f"{target} {choose(('=', '+=', '-='))} {expr(0)}")
    return "\n".join(lines) + "\n"
