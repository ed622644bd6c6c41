"""C for the CPU emulation of a :class:`~einkern.gpu.kir.Kernel` (MCUDA style).

The generated library exports ``einkern_run(void **buffers, const double *scalars)``
(the CPU backend's entry point, so its cache and loader serve it unchanged):
``buffers`` holds the kernel's global arrays in parameter order, then the error
record (``long long``: count, allocation-failure flag, then ``MAX_ERRORS``
records of ``site, index, block, thread, kind``); ``scalars`` the scalar
parameters in order.

Execution model:

* the block loop is an OpenMP ``for`` (blocks are independent); every OpenMP
  thread owns one copy of the shared arrays and of the thread variables
  (``T ekx_tv_NAME[threads * count]``), poisoned at the start of every block:
  NaN for floating types, ``POISON_INT``/``POISON_LONG`` for integers;
  uninitialised Declares get the same poison;
* code between two barriers runs as one *thread loop* ``for (ekx_thread ...)``:
  consecutive :class:`~kir.PerThread` sections not separated by a barrier are
  fused into the same thread loop, so a missing barrier gives a wrong result;
* a :class:`~kir.Uniform` loop without a barrier (none reachable: zero-trip
  inner loops do not count) runs whole inside the thread loop, per thread;
* a Uniform loop with barriers is *rotated*: the code of iteration ``s`` after
  its last barrier (the tail) runs in the same thread loop as the code of
  iteration ``s+1`` before its first barrier (the head), and the pending code
  before the loop joins the head of the first iteration; the tail of the last
  iteration stays pending and joins the code after the loop.  Each iteration's
  first thread loop therefore starts with ``if (k == start) {before the loop}
  else {tail of iteration k - step}``; a missing end-of-loop barrier thus lets
  fast threads overwrite shared memory that slow threads still read, as on a GPU;
* an :class:`~kir.Mma` ends the pending thread loop (as a barrier does) and runs
  as a loop over the block's warps: each warp's 32 fragments of A, B and C are
  gathered from the lanes' thread variables through the instruction's fragment
  layout tables (``einkern.gpu.mma``, checked on the hardware; bf16/f16
  fragments are words of two 16-bit values, unpacked low half first), the
  product is computed (exact products, the sum in double, rounded once to a
  float64 accumulator, truncated to a float32 one as the tensor cores do) and D
  is scattered back: a kernel that loads fragments by a wrong layout
  computes a wrong product here, as on a GPU.  The step synchronises the whole
  block, which the instruction does not: a barrier missing only where an MMA
  lies between the read and the overwrite of shared memory is not caught;
* a :class:`~kir.ShuffleSum` ends the pending thread loop too and runs as a
  loop over the block's warps: for each offset, every lane's partner value is
  gathered first, then added (as the shuffle exchanges before it adds); a
  partner lane outside the block reads the poison value;
* a :class:`~kir.CopyAsync` reads its global element when issued but writes
  shared memory only when a :class:`~kir.CopyWait` lets its group complete
  (per emulated thread, in commit order), so a missing wait leaves the shared
  element poisoned, as a copy still in flight would;
* TMA bulk tensor copies and their mbarriers (:class:`~kir.BarrierInit`,
  :class:`~kir.BarrierArm`, :class:`~kir.TensorCopy`, :class:`~kir.BarrierWait`)
  are emulated by :mod:`.emulator_tma`: a copy poisons its destination box when
  issued and lands when the first wait for its mbarrier's phase completes it;
  hangs, transaction bytes that do not match, copies never waited for,
  mbarriers used uninitialised and arrivals beyond an mbarrier's count are
  recorded (the kinds after the third of :data:`KINDS`);
* every Load/Store/VectorLoad goes through ``ekx_at_T``/``ekx_vload_T``, which
  check the index against the array's size (misalignment too, for vector
  loads); a bad access is recorded and redirected to a per-thread sink holding
  the poison value, never performed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..semantics import TO_FLOAT, storage_helpers
from . import emulator_tma, emulator_wgmma, kir
from .ctext import (
    C_LITERAL_MACROS,
    ENTRY_POINT,
    PREFIX,
    SUFFIX,
    ArrayInfo,
    CText,
    check_load_matrix,
    check_shuffle,
    helper_functions,
    indent,
    mma_words,
    uses_storage,
    vector_type,
)
from .kir import ELEMENT_BYTES
from .mma import SHAPES

#: Warpgroup MMA sections: per-thread code here (:mod:`.emulator_wgmma`).
WARPGROUP_SECTIONS = kir.WarpGroupMma | kir.WarpGroupFence | kir.WarpGroupCommit | kir.WarpGroupWait

POISON_INT = -0x5EADBEEF  # poison of int shared memory / thread variables
POISON_LONG = -0x5EADBEEF5EADBEEF  # poison of long long ones
MAX_ERRORS = 32  # bad accesses recorded per kernel run (all are counted)
RECORD = 5  # longs per recorded error
KINDS = (
    "out of bounds",
    "misaligned",
    "too many asynchronous copies in flight",
    *emulator_tma.KINDS,  # from emulator_tma.FIRST_KIND on
    *emulator_wgmma.KINDS,  # from emulator_wgmma.FIRST_KIND on
)
assert KINDS.index(emulator_tma.KINDS[0]) == emulator_tma.FIRST_KIND
assert KINDS.index(emulator_wgmma.KINDS[0]) == emulator_wgmma.FIRST_KIND
POISON = {
    "float": "EKX_NAN_F",
    "double": "EKX_NAN_D",
    "int": "EKX_POISON_I",
    "long long": "EKX_POISON_LL",
    "ek_bf16": "((ek_bf16)0x7fc0)",  # NaN
    "ek_f16": "((ek_f16)0x7e00)",  # NaN
    "unsigned": "0xffffffffu",  # two 16-bit NaNs (bf16 and f16)
    kir.MBARRIER: "0xffffffffffffffffULL",  # unused: emulator_tma keeps their state
}
#: Suffixes of the access functions of the 16-bit storage types (defined after their
#: typedefs, only in emulations that have such arrays).
STORAGE_SUFFIX = {"ek_bf16": "bf", "ek_f16": "h"}


def _access_functions(suffixes: dict[str, str] = SUFFIX) -> str:
    out = []
    for ctype, s in suffixes.items():
        out.append(f"""\
static inline {ctype} *ekx_at_{s}({ctype} *base, long long index, long long size, int site,
                                 ekx_ctx *c)
{{
    if (index >= 0 && index < size)
        return base + index;
    ekx_record(c, site, index, 0);
    c->sink_{s} = {POISON[ctype]};
    return &c->sink_{s};
}}
static inline void ekx_vload_{s}({ctype} *dst, const {ctype} *base, long long index, int width,
                                 long long size, int site, ekx_ctx *c)
{{
    if (index >= 0 && index <= size - width && index % width == 0) {{
        for (int i = 0; i < width; ++i)
            dst[i] = base[index + i];
        return;
    }}
    ekx_record(c, site, index, index >= 0 && index <= size - width ? 1 : 0);
    for (int i = 0; i < width; ++i)
        dst[i] = {POISON[ctype]};
}}
""")
    return "".join(out)


C_PRELUDE = f"""\
#include <math.h>
#include <stdlib.h>
#include <string.h>
{C_LITERAL_MACROS}#define EKX_POISON_I ({POISON_INT})
#define EKX_POISON_LL ({POISON_LONG}LL)
#define EKX_MAX_ERRORS {MAX_ERRORS}
typedef struct {{
    long long *errors;
    long long block, thread;
    float sink_f;
    double sink_d;
    int sink_i;
    long long sink_ll;
    unsigned short sink_bf, sink_h;
    /* asynchronous copies in flight, per emulated thread (cp.async) */
    char **q_dst;
    double *q_val;
    int *q_size, *q_group, *q_count, *q_open;
    int q_cap;
}} ekx_ctx;
static void ekx_record(ekx_ctx *c, int site, long long index, int kind)
{{
    long long n;
    #pragma omp atomic capture
    n = c->errors[0]++;
    if (n < EKX_MAX_ERRORS) {{
        long long *e = c->errors + 2 + {RECORD} * n;
        e[0] = site;
        e[1] = index;
        e[2] = c->block;
        e[3] = c->thread;
        e[4] = kind;
    }}
}}
{_access_functions()}{helper_functions("static inline")}
static inline float ek_tf32(float x)
{{
    /* PTX cvt.rna.tf32.f32: to nearest, ties away from zero, 10 mantissa bits */
    union {{ float f; unsigned u; }} v;
    v.f = x;
    if ((v.u & 0x7f800000u) != 0x7f800000u)
        v.u = (v.u + 0x1000u) & 0xffffe000u;
    return v.f;
}}
static inline float ekx_tf32_truncated(float x)
{{
    /* a 32-bit word read as tf32 by the tensor cores: the low 13 bits ignored */
    union {{ float f; unsigned u; }} v;
    v.f = x;
    v.u &= 0xffffe000u;
    return v.f;
}}
static inline float ekx_toward_zero(double s)
{{
    /* a tensor core's float32 accumulation: the exact sum truncated */
    float f = (float)s;
    if (fabs((double)f) > fabs(s))
        f = nextafterf(f, 0.0f);
    return f;
}}
static inline float ek_tf32_rest(float x)
{{
    /* what the tensor cores ignore of x, rounded to tf32 */
    return ek_tf32(x - ekx_tf32_truncated(x));
}}
static void ekx_async_push(ekx_ctx *c, long long t, void *dst, double value, int size)
{{
    int *n = &c->q_count[t];
    if (*n >= c->q_cap) {{
        ekx_record(c, -1, *n, 2);
        return;
    }}
    long long k = t * c->q_cap + *n;
    c->q_dst[k] = (char *)dst;
    c->q_val[k] = value;
    c->q_size[k] = size;
    c->q_group[k] = c->q_open[t];
    ++*n;
}}
static void ekx_async_wait(ekx_ctx *c, long long t, int pending)
{{
    long long base = t * c->q_cap;
    int keep = 0;
    for (int i = 0; i < c->q_count[t]; ++i) {{
        long long k = base + i;
        if (c->q_group[k] < c->q_open[t] - pending) {{
            if (c->q_size[k] == 8)
                *(double *)c->q_dst[k] = c->q_val[k];
            else if (c->q_size[k] == 2)
                *(unsigned short *)c->q_dst[k] = (unsigned short)c->q_val[k];
            else
                *(float *)c->q_dst[k] = (float)c->q_val[k];
        }} else {{
            long long to = base + keep++;
            c->q_dst[to] = c->q_dst[k];
            c->q_val[to] = c->q_val[k];
            c->q_size[to] = c->q_size[k];
            c->q_group[to] = c->q_group[k];
        }}
    }}
    c->q_count[t] = keep;
}}
"""


@dataclass(frozen=True)
class Site:
    """One access in the emulation source (numbered in printing order)."""

    array: str
    space: str  # "global" | "shared" | "thread"
    access: str  # "load" | "store" | "vector load" | "vector copy" | "ldmatrix row"
    size: int


@dataclass(frozen=True)
class EmulationSource:
    """The C text of one kernel's emulation and what its entry point expects."""

    kernel: kir.Kernel
    text: str
    sites: tuple[Site, ...]
    arrays: tuple[kir.Param, ...]  # buffers[0..n), then the error record
    scalars: tuple[kir.Param, ...]


#: The storage type of the values a packed (16-bit) MMA input holds.
PACKED_STORAGE = {"bf16": "ek_bf16", "f16": "ek_f16"}


def _suffix(ctype: str) -> str:
    return STORAGE_SUFFIX[ctype] if ctype in STORAGE_SUFFIX else SUFFIX[ctype]


def _trips(u: kir.Uniform) -> int:
    if u.step <= 0:
        raise ValueError(f"uniform loop {u.var}: step must be positive")
    return max(0, -(-(u.stop - u.start) // u.step))


def has_barrier(sections: Sequence[kir.Section]) -> bool:
    """True when running ``sections`` executes at least one barrier (or a
    warp-collective :class:`~kir.Mma` or :class:`~kir.ShuffleSum`, which split
    thread loops the same way)."""
    return any(
        isinstance(s, kir.Barrier | kir.Mma | kir.ShuffleSum | kir.LoadMatrix)
        or (isinstance(s, kir.Uniform) and _trips(s) > 0 and has_barrier(s.body))
        for s in sections
    )


class EmulationText(CText):
    """C spelling for the emulation, and the thread-loop schedule of the sections."""

    def __init__(self, kernel: kir.Kernel):
        super().__init__(kernel)
        self.sites: list[Site] = []
        self.thread_scalars = {v.name for v in kernel.thread_vars if not v.count}
        self.mma_operands = emulator_wgmma.shared_operands(kernel)

    def stmt(self, s: kir.Stmt, env: dict[str, str]) -> list[str]:
        """A store into a warpgroup MMA's shared operand marks the thread's writes
        unfenced (:func:`.emulator_wgmma.unfenced`)."""
        lines = super().stmt(s, env)
        if isinstance(s, kir.Store) and s.array in self.mma_operands:
            lines.append(emulator_wgmma.unfenced(True))
        return lines

    # -- spelling --------------------------------------------------------------

    def var(self, name: str, env) -> str:
        super().var(name, env)
        return f"{PREFIX}tv_{name}[{PREFIX}thread]" if name in self.thread_scalars else name

    def block_index(self, axis: str) -> str:
        return f"{PREFIX}block" if axis == "x" else f"(({self.index_type})0)"  # 1-D grid

    def thread_index(self) -> str:
        return f"{PREFIX}thread"

    def _site(self, info: ArrayInfo, access: str) -> tuple[int, str]:
        self.sites.append(Site(info.name, info.space, access, info.size))
        if info.space == "thread":
            return len(self.sites) - 1, f"({PREFIX}tv_{info.name} + {PREFIX}thread * {info.size})"
        return len(self.sites) - 1, info.name

    def element(self, info: ArrayInfo, index: str, access: str) -> str:
        site, base = self._site(info, access)
        return (
            f"(*{PREFIX}at_{_suffix(info.ctype)}({base}, {index}, {info.size}LL, {site}, "
            f"{PREFIX}c))"
        )

    def atomic_add(self, element: str, value: str, ctype: str) -> list[str]:
        # blocks run on several OpenMP threads: the update must be atomic here too
        return [
            "{",
            f"    {ctype} *const {PREFIX}atomic = &{element};",
            "    #pragma omp atomic",
            f"    *{PREFIX}atomic += {value};",
            "}",
        ]

    def lane(self, vector: str, lane: int) -> str:
        return f"{vector}[{lane}]"

    def vector_load(self, stmt: kir.VectorLoad, info: ArrayInfo, index: str) -> list[str]:
        _, element = vector_type(stmt)
        site, base = self._site(info, "vector load")
        return [
            f"{element} {stmt.name}[{stmt.width}];",
            f"{PREFIX}vload_{SUFFIX[element]}({stmt.name}, {base}, {index}, {stmt.width}, "
            f"{info.size}LL, {site}, {PREFIX}c);",
        ]

    def uninitialised(self, stmt: kir.Declare) -> str:
        return f"{stmt.ctype} {stmt.name} = {POISON[stmt.ctype]};"

    def copy_async(self, s: kir.CopyAsync, env) -> list[str]:
        """Each element queued on its own (bounds-checked); a vector's indices are
        checked for alignment to its width (``misaligned``, recorded)."""
        shared, source = self.array(s.shared), self.array(s.array)
        it = self.index_type
        size = ELEMENT_BYTES[shared.ctype]
        si, gi, e = (f"{PREFIX}{n}" for n in ("si", "gi", "e"))
        target = self.element(shared, f"{si} + {e}", "store")
        value = self.element(source, f"{gi} + {e}", "load")
        lines = [
            "{",
            f"    const int {PREFIX}in = {self.expr(s.inside, env)};",
            f"    const {it} {si} = {self.expr(s.shared_index, env, it)};",
            f"    const {it} {gi} = {PREFIX}in ? ({self.expr(s.index, env, it)}) : 0;",
        ]
        if s.width > 1:
            for index, info in ((si, shared), (gi, source)):
                site, _ = self._site(info, "vector copy")
                lines.append(
                    f"    if ({index} % {s.width}) ekx_record({PREFIX}c, {site}, {index}, 1);"
                )
        return [
            *lines,
            f"    for (int {e} = 0; {e} < {s.width}; ++{e})",
            f"        {PREFIX}async_push({PREFIX}c, {PREFIX}thread, &{target}, "
            f"{PREFIX}in ? (double){value} : 0.0, {size});",
            "}",
        ]

    def copy_commit(self) -> list[str]:
        return [f"++{PREFIX}c->q_open[{PREFIX}thread];"]

    def copy_wait(self, pending: int) -> list[str]:
        return [f"{PREFIX}async_wait({PREFIX}c, {PREFIX}thread, {pending});"]

    # -- schedule --------------------------------------------------------------

    def thread_loop(self, pending: list[str]) -> list[str]:
        if not pending:
            return []
        t = f"{PREFIX}thread"
        return [
            f"for ({self.index_type} {t} = 0; {t} < {self.kernel.threads}; ++{t}) {{",
            f"    {PREFIX}c->thread = {t};",
            *indent(pending),
            "}",
        ]

    def per_thread(self, sections: Sequence[kir.Section], env: dict[str, str]) -> list[str]:
        """Barrier-free sections as code of one thread."""
        lines: list[str] = []
        for s in sections:
            if isinstance(s, kir.PerThread):
                lines += self.block(s.body, env)
            elif isinstance(s, WARPGROUP_SECTIONS):
                lines += self.warpgroup(s, env)
            elif isinstance(s, kir.Uniform) and _trips(s) > 0:
                v, it = self.local(s.var), self.index_type
                lines.append(f"for ({it} {v} = {s.start}; {v} < {s.stop}; {v} += {s.step}) {{")
                lines += indent(self.per_thread(s.body, {**env, v: it}))
                lines.append("}")
            elif not isinstance(s, kir.Uniform):
                raise TypeError(f"unexpected section {s!r} in barrier-free code")
        return lines

    def emit(
        self, sections: Sequence[kir.Section], env: dict[str, str], pending: list[str]
    ) -> tuple[list[str], list[str]]:
        """(block-level code, per-thread code still pending after ``sections``)."""
        code: list[str] = []
        for s in sections:
            if isinstance(s, kir.Barrier):
                code += self.thread_loop(pending)
                pending = []
            elif isinstance(s, kir.Mma):
                code += self.thread_loop(pending)
                pending = []
                code += self.mma(s)
            elif isinstance(s, kir.ShuffleSum):
                code += self.thread_loop(pending)
                pending = []
                code += self.shuffle(s)
            elif isinstance(s, kir.LoadMatrix):
                code += self.thread_loop(pending)
                pending = []
                code += self.load_matrix(s, env)
            elif isinstance(s, kir.PerThread) or not has_barrier([s]):
                pending = pending + self.per_thread([s], env)
            elif isinstance(s, kir.Uniform):
                step_code, pending = self._rotated(s, env, pending)
                code += step_code
            else:
                raise TypeError(f"unknown kernel section {s!r}")
        return code, pending

    def warpgroup(self, section, env: dict[str, str]) -> list[str]:
        """A warpgroup MMA section (:mod:`.emulator_wgmma`): queued, committed,
        completed by the wait; the fence orders nothing the emulation reorders."""
        if isinstance(section, kir.WarpGroupMma):
            return emulator_wgmma.issue(self, section, env)
        if isinstance(section, kir.WarpGroupCommit):
            return emulator_wgmma.commit()
        if isinstance(section, kir.WarpGroupWait):
            return emulator_wgmma.wait(self, section.pending)
        return []

    def proxy_fence(self) -> list[str]:
        # shared memory has one view here; the thread's stores are fenced
        return [emulator_wgmma.unfenced(False)] if self.mma_operands else []

    # -- TMA bulk copies and mbarriers (:mod:`.emulator_tma`) --------------------

    def barrier_init(self, s: kir.BarrierInit, env) -> list[str]:
        return emulator_tma.init(self, s, env)

    def barrier_arm(self, s: kir.BarrierArm, env) -> list[str]:
        return emulator_tma.arm(self, s, env)

    def barrier_wait(self, s: kir.BarrierWait, env) -> list[str]:
        return emulator_tma.wait(self, s, env)

    def tensor_copy(self, s: kir.TensorCopy, tmap: kir.TensorMap, env) -> list[str]:
        if tmap.ctype not in POISON or tmap.ctype in ("unsigned", kir.MBARRIER):
            raise ValueError(f"bulk tensor copies of {tmap.ctype} elements are not emulated")
        return emulator_tma.issue(self, s, tmap, env, POISON[tmap.ctype])

    def mma(self, section: kir.Mma) -> list[str]:
        """The warp loop executing one :class:`~kir.Mma` (see the module docstring)."""
        shape = SHAPES[section.shape]
        if self.kernel.threads % 32:
            raise ValueError(f"an MMA needs whole warps, not {self.kernel.threads} threads")
        counts = {v.name: max(1, v.count) for v in self.kernel.thread_vars}
        w, lane, i, t = (f"{PREFIX}{n}" for n in ("warp", "lane", "i", "t"))
        m, n, k = shape.m, shape.n, shape.k

        words = mma_words(self.kernel, section)

        def slot(f: kir.Fragment) -> str:  # register i of lane t's fragment
            if f.slots:  # explicit registers: a conditional chain on i
                at = str(f.slots[-1])
                for j in range(len(f.slots) - 2, -1, -1):
                    at = f"({i} == {j} ? {f.slots[j]} : {at})"
                return f"{PREFIX}tv_{f.var}[{t} * {counts[f.var]} + {at}]"
            return f"{PREFIX}tv_{f.var}[{t} * {counts[f.var]} + {f.first} + {i}]"

        def half(f: kir.Fragment) -> str:  # element i of a fragment of packed words
            word = f"{PREFIX}tv_{f.var}[{t} * {counts[f.var]} + {f.first} + ({i} >> 1)]"
            return f"(unsigned short)({word} >> (16 * ({i} & 1)))"

        acc = "double" if shape.accumulator == "f64" else "float"
        lines = [
            f"for (int {w} = 0; {w} < {self.kernel.threads // 32}; ++{w}) {{",
            f"    double {PREFIX}ma[{m}][{k}], {PREFIX}mb[{k}][{n}], {PREFIX}mc[{m}][{n}];",
            f"    for (int {lane} = 0; {lane} < 32; ++{lane}) {{",
            f"        const long long {t} = {w} * 32LL + {lane};",
        ]
        for name, fragment, layout in (
            ("ma", section.a, shape.a),
            ("mb", section.b, shape.b),
            ("mc", section.c, shape.c),
        ):
            table = _table_name(shape.name, name[1])
            value = slot(fragment)
            if name != "mc" and fragment.var in words:  # ldmatrix words: 16-bit values
                value = f"{TO_FLOAT[PACKED_STORAGE[shape.input_type]]}({half(fragment)})"
            elif name != "mc" and shape.input_type == "tf32":
                value = f"ek_tf32({value})"
            lines += [
                f"        for (int {i} = 0; {i} < {layout.count}; ++{i})",
                f"            {PREFIX}{name}[{table}[{lane}][{i}][0]][{table}[{lane}][{i}][1]]"
                f" = (double){value};",
            ]
        r, c, kk, sum_ = (f"{PREFIX}{x}" for x in ("r", "c", "k", "sum"))
        table = _table_name(shape.name, "c")
        # fp64 MMAs round to nearest; float32 sums of the tensor cores truncate
        narrow = "(double)" if acc == "double" else "ekx_toward_zero"
        lines += [
            "    }",
            f"    for (int {lane} = 0; {lane} < 32; ++{lane}) {{",
            f"        const long long {t} = {w} * 32LL + {lane};",
            f"        for (int {i} = 0; {i} < {shape.c.count}; ++{i}) {{",
            f"            const int {r} = {table}[{lane}][{i}][0], {c} = {table}[{lane}][{i}][1];",
            f"            double {sum_} = {PREFIX}mc[{r}][{c}];",
            f"            for (int {kk} = 0; {kk} < {k}; ++{kk})",
            f"                {sum_} += {PREFIX}ma[{r}][{kk}] * {PREFIX}mb[{kk}][{c}];",
            f"            {slot(section.d)} = {narrow}({sum_});",
            "        }",
            "    }",
            "}",
        ]
        return lines

    def load_matrix(self, section: kir.LoadMatrix, env: dict[str, str]) -> list[str]:
        """The warp loop executing one :class:`~kir.LoadMatrix`: the row indices of
        the lanes that give them (evaluated as those lanes), checked for 16-byte
        alignment, then every lane's words gathered from them (bounds-checked)."""
        check_load_matrix(self.kernel, section)
        shared = self.array(section.shared)
        counts = {v.name: max(1, v.count) for v in self.kernel.thread_vars}
        w, lane, j, h, rows, src, at = (
            f"{PREFIX}{n}" for n in ("warp", "lane", "j", "h", "rows", "src", "at")
        )
        thread = f"{PREFIX}thread"
        it = self.index_type
        index = self.expr(section.index, env, it)  # as lane ``thread`` computes it
        site, _ = self._site(shared, "ldmatrix row")
        if section.trans:  # element t/4 of rows 2(t%4), 2(t%4)+1
            source, offset = f"8 * {j} + 2 * ({lane} % 4) + {h}", f"{lane} / 4"
        else:  # elements 2(t%4), 2(t%4)+1 of row t/4
            source, offset = f"8 * {j} + {lane} / 4", f"2 * ({lane} % 4) + {h}"
        value = self.element(shared, f"{rows}[{src}] + {offset}", "load")
        var, first = section.d.var, section.d.first
        d = f"{PREFIX}tv_{var}[{thread} * {counts[var]} + {first} + {j}]"
        return [
            f"for (int {w} = 0; {w} < {self.kernel.threads // 32}; ++{w}) {{",
            f"    {it} {rows}[32];",
            f"    for (int {lane} = 0; {lane} < {8 * section.count}; ++{lane}) {{",
            f"        const {it} {thread} = {w} * 32 + {lane};",
            f"        {PREFIX}c->thread = {thread};",
            f"        {rows}[{lane}] = {index};",
            f"        if ({rows}[{lane}] % 8) ekx_record({PREFIX}c, {site}, {rows}[{lane}], 1);",
            "    }",
            f"    for (int {lane} = 0; {lane} < 32; ++{lane}) {{",
            f"        const {it} {thread} = {w} * 32 + {lane};",
            f"        {PREFIX}c->thread = {thread};",
            f"        for (int {j} = 0; {j} < {section.count}; ++{j}) {{",
            f"            unsigned {at} = 0;",
            f"            for (int {h} = 0; {h} < 2; ++{h}) {{",
            f"                const int {src} = {source};",
            f"                {at} |= (unsigned){value} << (16 * {h});",
            "            }",
            f"            {d} = {at};",
            "        }",
            "    }",
            "}",
        ]

    def shuffle(self, section: kir.ShuffleSum) -> list[str]:
        """The warp loop executing one :class:`~kir.ShuffleSum` (module docstring)."""
        check_shuffle(self.kernel, section)
        ctype = {v.name: v.ctype for v in self.kernel.thread_vars}[section.var]
        count = {v.name: v.count for v in self.kernel.thread_vars}[section.var]
        threads = self.kernel.threads
        w, lane, i, t, u = (f"{PREFIX}{n}" for n in ("warp", "lane", "i", "t", "u"))
        got, values = f"{PREFIX}got", f"{PREFIX}tv_{section.var}"
        lines = [f"for (long long {w} = 0; {w} < {-(-threads // 32)}; ++{w}) {{"]
        for offset in section.offsets:
            lines += [
                "    {",
                f"        {ctype} {got}[32][{section.count}];",
                f"        for (int {lane} = 0; {lane} < 32; ++{lane}) {{",
                f"            const long long {t} = {w} * 32 + {lane}, {u} = {t} ^ {offset};",
                f"            for (int {i} = 0; {i} < {section.count}; ++{i})",
                f"                {got}[{lane}][{i}] = {u} < {threads} ? "
                f"{values}[{u} * {count} + {i}] : {POISON[ctype]};",
                "        }",
                f"        for (int {lane} = 0; {lane} < 32; ++{lane}) {{",
                f"            const long long {t} = {w} * 32 + {lane};",
                f"            if ({t} >= {threads}) continue;",
                f"            for (int {i} = 0; {i} < {section.count}; ++{i})",
                f"                {values}[{t} * {count} + {i}] += {got}[{lane}][{i}];",
                "        }",
                "    }",
            ]
        return [*lines, "}"]

    def _rotated(
        self, u: kir.Uniform, env: dict[str, str], pending: list[str]
    ) -> tuple[list[str], list[str]]:
        v, it = self.local(u.var), self.index_type
        inner = {**env, v: it}
        _, tail = self.emit(u.body, inner, [])  # the code after the body's last barrier
        carry: list[str] = []
        if pending:
            carry = [f"if ({v} == {u.start}) {{", *indent(pending), "}"]
        if tail:
            previous = [
                f"const {it} {PREFIX}previous = {v} - {u.step};",
                "{",
                f"    const {it} {v} = {PREFIX}previous;",
                *indent(tail),
                "}",
            ]
            if carry:
                carry[-1] = "} else {"
                carry += [*indent(previous), "}"]
            else:
                carry = [f"if ({v} != {u.start}) {{", *indent(previous), "}"]
        body, _ = self.emit(u.body, inner, carry)
        code = [
            f"for ({it} {v} = {u.start}; {v} < {u.stop}; {v} += {u.step}) {{",
            *indent(body),
            "}",
        ]
        last = u.start + (_trips(u) - 1) * u.step
        after = ["{", f"    const {it} {v} = {last};", *indent(tail), "}"] if tail else []
        return code, after


def _table_name(shape: str, operand: str) -> str:
    return f"{PREFIX}mma_{shape}_{operand}"


def _mma_sections(sections: Sequence[kir.Section]) -> list[kir.Mma]:
    found: list[kir.Mma] = []
    for s in sections:
        if isinstance(s, kir.Mma):
            found.append(s)
        elif isinstance(s, kir.Uniform):
            found += _mma_sections(s.body)
    return found


def mma_prelude(kernel: kir.Kernel) -> str:
    """The fragment layout tables of the MMA shapes ``kernel`` uses."""
    shapes = sorted({s.shape for s in _mma_sections(kernel.body)})
    lines = []
    for name in shapes:
        shape = SHAPES[name]
        for operand, layout in (("a", shape.a), ("b", shape.b), ("c", shape.c)):
            lines.append(layout.c_array(_table_name(name, operand)))
    return "\n".join(lines) + ("\n" if lines else "")


def _copies(kernel: kir.Kernel) -> int:
    """CopyAsync statements in the kernel's text."""

    def stmts(body) -> int:
        count = 0
        for s in body:
            if isinstance(s, kir.CopyAsync):
                count += s.width
            elif isinstance(s, kir.For):
                count += stmts(s.body)
            elif isinstance(s, kir.If):
                count += stmts(s.body) + stmts(s.orelse)
        return count

    def sections(body) -> int:
        count = 0
        for s in body:
            if isinstance(s, kir.PerThread):
                count += stmts(s.body)
            elif isinstance(s, kir.Uniform):
                count += sections(s.body)
        return count

    return sections(kernel.body)


def _queue(kernel: kir.Kernel) -> tuple[list[str], list[str], list[str]]:
    """The asynchronous-copy queues (allocation, per-block reset, frees): room for
    every copy statement of the kernel issued four times per thread."""
    copies = _copies(kernel)
    if not copies:
        return [], [], []
    cap, n, c = max(16, 4 * copies), kernel.threads, f"{PREFIX}c"
    fields = [("q_dst", "char *", n * cap), ("q_val", "double", n * cap)]
    fields += [("q_size", "int", n * cap), ("q_group", "int", n * cap)]
    fields += [("q_count", "int", n), ("q_open", "int", n)]
    allocate = [f"{c}->q_cap = {cap};"]
    allocate += [f"{c}->{f} = ({t} *)malloc(sizeof({t}) * {size});" for f, t, size in fields]
    allocate.append(
        f"const int {PREFIX}qok = {' && '.join(f'{c}->{f} != NULL' for f, _, _ in fields)};"
    )
    i = f"{PREFIX}i"
    reset = [f"for (int {i} = 0; {i} < {n}; ++{i}) {c}->q_count[{i}] = {c}->q_open[{i}] = 0;"]
    return allocate, reset, [f"free({c}->{f});" for f, _, _ in fields]


def _declarations(kernel: kir.Kernel) -> tuple[list[str], list[str], list[str]]:
    """(allocations per OpenMP thread, poisoning per block, frees)."""
    memory = [(a.name, a.ctype, max(1, a.size)) for a in kernel.shared]
    memory += [
        (f"{PREFIX}tv_{v.name}", v.ctype, kernel.threads * max(1, v.count))
        for v in kernel.thread_vars
    ]
    allocate = [f"{t} *const {name} = ({t} *)malloc(sizeof({t}) * {n});" for name, t, n in memory]
    ok = " && ".join(["1", *(f"{name} != NULL" for name, _, _ in memory)])
    allocate.append(f"const int {PREFIX}ok = {ok};")
    i = f"{PREFIX}i"
    poison = [
        f"for (long long {i} = 0; {i} < {n}; ++{i}) {name}[{i}] = {POISON[t]};"
        for name, t, n in memory
    ]
    return allocate, poison, [f"free({name});" for name, _, _ in memory]


def emulation_source(kernel: kir.Kernel) -> EmulationSource:
    """The emulation C of ``kernel`` with its access sites and buffer order."""
    printer = EmulationText(kernel)
    code, pending = printer.emit(kernel.body, dict(printer.types), [])
    code += printer.thread_loop(pending)
    arrays = tuple(p for p in kernel.params if p.is_array)
    scalars = tuple(p for p in kernel.params if not p.is_array)
    head = [
        f"{p.ctype} *const {p.name} = ({p.ctype} *){PREFIX}buffers[{n}];"
        for n, p in enumerate(arrays)
    ]
    head += [
        f"const {p.ctype} {p.name} = ({p.ctype}){PREFIX}scalars[{n}];"
        for n, p in enumerate(scalars)
    ]
    allocate, poison, free = _declarations(kernel)
    q_allocate, q_reset, q_free = _queue(kernel)
    b, it = f"{PREFIX}block", kernel.index_type
    blocks = [
        "#pragma omp for schedule(static)",
        f"for ({it} {b} = 0; {b} < {kernel.blocks}; ++{b}) {{",
        f"    if (!{PREFIX}ok{' || !' + PREFIX + 'qok' if q_allocate else ''}) continue;",
        f"    {PREFIX}c->block = {b};",
        *indent(
            [
                *emulator_wgmma.queue_declarations(kernel),
                *emulator_tma.declarations(kernel),
                *poison,
                *q_reset,
                *code,
                *emulator_tma.block_end(printer),
            ]
        ),
        "}",
    ]
    parallel = [
        f"{PREFIX}ctx {PREFIX}context = {{{PREFIX}errors, 0, 0, 0.0f, 0.0, 0, 0}};",
        f"{PREFIX}ctx *const {PREFIX}c = &{PREFIX}context;",
        *allocate,
        *q_allocate,
        f"if (!{PREFIX}ok{' || !' + PREFIX + 'qok' if q_allocate else ''}) {{",
        "    #pragma omp atomic write",
        f"    {PREFIX}errors[1] = 1;",
        "}",
        *blocks,
        *free,
        *q_free,
    ]
    body = [
        f"long long *const {PREFIX}errors = (long long *){PREFIX}buffers[{len(arrays)}];",
        *head,
        f"(void){PREFIX}scalars;",
        "#pragma omp parallel",
        "{",
        *indent(parallel),
        "}",
    ]
    comment = [
        f"// einkern CPU emulation (MCUDA style) of CUDA kernel {kernel.name}: "
        f"{kernel.blocks} blocks x {kernel.threads} threads"
    ]
    text = "\n".join(
        [
            *comment,
            C_PRELUDE,
            storage_helpers("static inline") + _access_functions(STORAGE_SUFFIX)
            if uses_storage(kernel)
            or any(SHAPES[m.shape].packed > 1 for m in _mma_sections(kernel.body))
            or emulator_wgmma.sites(kernel)
            else "",
            mma_prelude(kernel),
            f"void {ENTRY_POINT}(void **{PREFIX}buffers, const double *{PREFIX}scalars)",
            "{",
            *indent(body),
            "}",
            "",
        ]
    )
    return EmulationSource(kernel, text, tuple(printer.sites), arrays, scalars)


def print_emulation_c(kernel: kir.Kernel) -> str:
    """The emulation C source of ``kernel`` (see the module docstring)."""
    return emulation_source(kernel).text
