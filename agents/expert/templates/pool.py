"""Max and average pooling, 1d/2d/3d, with stride, padding, dilation (max), ceil_mode (through the
output shape torch.export reports), count_include_pad and divisor_override (avg), and the pointwise
chain before and after the pool fused.

A thread per output element walks its window; neighbouring threads own neighbouring outputs, so
their windows overlap and the loads hit L1/L2 rather than DRAM. With `vec` > 1 a thread owns that many
consecutive outputs along the last pooled dim: the union of their windows along it is loaded once into
registers (stride 1, kernel 8: 11 loads for 4 outputs, not 32) and the index arithmetic is done once.
The window bounds follow PyTorch's own kernels (avg: the divisor counts padding up to the padded edge
when count_include_pad)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from agents.expert.codegen import CTYPE, PRELUDE, Emitter, per_output_grid, per_output_head
from agents.expert.opgraph import Node, OpGraph, Unsupported, check_elementwise_after


@dataclass
class PoolPlan:
    pool: Node
    nd: int
    lead: int  # batch x channels (everything before the pooled dims)
    inp: tuple  # pooled dims of the input
    out: tuple  # of the output


@dataclass
class PoolKnobs:
    block: int = 256
    waves: int = 8  # grid = min(needed, SMs x blocks per SM x waves); 0: a thread per output, no loop
    vec: int = 1  # consecutive outputs a thread along the last pooled dim (their windows' inputs in registers)
    ostage: bool = False  # vec > 1: the block's outputs gathered in shared memory and stored by consecutive threads
    # (a thread's own `vec` outputs, stored by it, leave each warp store 16 bytes apart a lane: 4x the store requests)
    rows: int = 1  # 2-d/3-d: consecutive outputs a thread along the next-to-last pooled dim too; each input row under
    # their windows is loaded once and folded into every output row whose window holds it (kernel 4, stride 1: 7 input
    # rows for 4 output rows, not 16)
    cols: bool = False  # 2-d/3-d: a block an output row; its threads reduce input columns over the windows' other dims
    # (16 bytes at a time where the input allows, every load a warp's contiguous 512 bytes) into shared memory, then
    # each output folds its window along the last dim from there

    @classmethod
    def of(cls, params: dict) -> PoolKnobs:
        return cls(block=params["block"], waves=params.get("waves", 8), vec=params.get("vec", 1),
                   ostage=params.get("ostage", False), rows=params.get("rows", 1), cols=params.get("cols", False))


MAX_WINDOW_REGS = 48  # the longest run of inputs a thread holds for its outputs' windows
MAX_STAGE_FLOATS = 8192  # staged outputs a block (32 KB of static shared memory)
MAX_COLS = 12288  # an output row's input columns in shared memory (48 KB, static)


def window_span(p: PoolPlan, vec: int) -> int:
    """Inputs along the last pooled dim that `vec` consecutive outputs' windows cover."""
    a = p.pool.attrs
    return (vec - 1) * a["stride"][-1] + (a["kernel"][-1] - 1) * a["dilation"][-1] + 1


def rows_span(p: PoolPlan, rows: int) -> int:
    """Input rows (along the next-to-last pooled dim) that `rows` consecutive output rows' windows cover."""
    a = p.pool.attrs
    return (rows - 1) * a["stride"][-2] + (a["kernel"][-2] - 1) * a["dilation"][-2] + 1


def default_rows(p: PoolPlan) -> int:
    """Output rows a thread where that at least halves the input rows loaded (level 1 task 42, kernel 4 stride 1: 11
    for 8; H100, 2026-12-07: 2.775 ms at 1, 1.844 at 4, 1.754 at 8); 1 where windows barely overlap along that dim
    (43, 45, 46) or the pool is 1-d."""
    if p.nd < 2:
        return 1
    K = p.pool.attrs["kernel"][-2]
    return next((r for r in (8, 4, 2) if p.out[-2] >= r and rows_span(p, r) <= 0.5 * r * K), 1)


def stage_ok(p: PoolPlan, k: PoolKnobs) -> bool:
    """Whether the block's outputs are one contiguous run small enough for shared memory: with rows > 1, only where
    the block holds whole groups of output rows (its size a multiple of a group's threads)."""
    cw = -(-p.out[-1] // k.vec)
    return k.vec > 1 and k.vec * k.rows * k.block <= MAX_STAGE_FLOATS and (k.rows == 1 or k.block % cw == 0)


def fit_stage(p: PoolPlan, params: dict) -> dict:
    """`params` without staged outputs where its block's no longer fit or are not one run (stage_ok)."""
    return {**params, "ostage": False} if params.get("ostage") and not stage_ok(p, PoolKnobs.of(params)) else params


def loads16(g: OpGraph, p: PoolPlan, vec: int) -> bool:
    """Whether `vec` outputs' windows are read 16 bytes at a time: a float32 input read as it is (no chain before
    the pool), rows a multiple of 4 long and every thread's first input at the same offset within 16 bytes."""
    src, a = p.pool.args[0], p.pool.attrs
    return (vec > 1 and any(src is t for t in g.inputs) and src.dtype == "float32" and p.inp[-1] % 4 == 0
            and (vec * a["stride"][-1]) % 4 == 0)


def default_vec(g: OpGraph, p: PoolPlan) -> int:
    """The widest `vec` whose windows' union fits the registers and either is read 16 bytes at a time by threads
    16 bytes apart (a warp's load one contiguous 512 bytes) or saves at least a quarter of the loads. Otherwise
    (stride >= the window: level 1 task 45; dilated or strided windows that barely overlap: 41, 43, measured
    slower at 4 with 4-byte loads) the spread threads only cost coalescing: a thread per output reads neighbours."""
    K, S = p.pool.attrs["kernel"][-1], p.pool.attrs["stride"][-1]
    # 8 for a 1-d pool read 16 bytes at a time whose windows' union saves a quarter of the loads (H100, 2026-12-07:
    # task 41, kernel 8 dilated 3, 2.735 -> 2.457 ms; 44 equal; unmeasured on 2-d/3-d pools, so not there)
    if p.nd == 1 and loads16(g, p, 8) and p.out[-1] >= 8 and window_span(p, 8) <= min(MAX_WINDOW_REGS, 0.75 * 8 * K):
        return 8
    return next((v for v in (4, 2) if window_span(p, v) <= MAX_WINDOW_REGS and p.out[-1] >= v
                 and (window_span(p, v) <= 0.75 * v * K or (loads16(g, p, v) and v * S == 4))), 1)


def cols_used(p: PoolPlan) -> int:
    """Input columns (along the last pooled dim, from 0) that some output's window reads."""
    a = p.pool.attrs
    return min(p.inp[-1], (p.out[-1] - 1) * a["stride"][-1] - a["padding"][-1] + (a["kernel"][-1] - 1) * a["dilation"][-1] + 1)


def cols_vec(g: OpGraph, p: PoolPlan) -> int:
    """The column width a thread of the `cols` mapping loads at once: 4 from a float32 input read as it is with rows a
    multiple of 4 long (16-byte aligned), else 1."""
    src = p.pool.args[0]
    return 4 if any(src is t for t in g.inputs) and src.dtype == "float32" and p.inp[-1] % 4 == 0 else 1


def cols_ok(p: PoolPlan) -> bool:
    return p.nd >= 2 and cols_used(p) <= MAX_COLS


def cols_block(g: OpGraph, p: PoolPlan) -> int:
    """A thread a column group where that fits 1024 threads (KernelBench 45: 2046 columns, 512 threads of 4)."""
    n = -(-cols_used(p) // cols_vec(g, p))
    return next((b for b in (128, 256, 512, 1024) if b >= n), 1024)


def default_cols(g: OpGraph, p: PoolPlan) -> bool:
    """The `cols` mapping first where neither outputs a thread along the last dim nor rows of them pay (windows that
    do not overlap: level 1 task 45, kernel = stride 11, a thread an output at 83% of the copy floor, its warps' loads
    44 bytes apart a lane)."""
    return cols_ok(p) and default_vec(g, p) == 1 and default_rows(p) == 1


def plan_pool(g: OpGraph) -> PoolPlan:
    pools = [n for n in g.nodes if n.kind == "pool"]
    check_elementwise_after(g, pools, "pooling")
    if len(pools) != 1:
        raise Unsupported(f"{len(pools)} poolings in one task")
    if any(n.kind in ("reduce", "gemm", "scan") for n in g.nodes):
        raise Unsupported("a pooling beside a reduction, matmul or scan")
    p = pools[0]
    if math.prod(g.output.shape) != math.prod(p.shape):  # a reshape after it (a squeeze) stores the same way
        raise Unsupported(f"output shape {g.output.shape} is not the pooled shape {p.shape}")
    nd = len(p.attrs["kernel"])
    src = tuple(p.args[0].shape)
    return PoolPlan(p, nd, math.prod(src[:-nd]), src[-nd:], tuple(p.shape)[-nd:])


def _avg_window(s: str, e: str, o: str, K: int, S: int, P: int, IN: int) -> tuple[str, str]:
    """An avg window along one dim, as PyTorch bounds it: [s, e) up to the padded edge (the count with padding),
    then the statement clipping it to the input (the count without)."""
    return (f"long long {s} = {o} * {S}LL - {P}LL, {e} = {s} + {K}LL < {IN + P}LL ? {s} + {K}LL : {IN + P}LL;",
            f"{s} = {s} > 0 ? {s} : 0; {e} = {e} < {IN}LL ? {e} : {IN}LL;")


def _avg_counts(p: PoolPlan, j: int, nm: str, ind: str) -> list[str]:
    """An avg window's bounds along pooled dim j (`s{nm}`, `e{nm}`, clipped to the input) and its counts, with
    padding and without, multiplied into `p_full` and `p_clip`."""
    a = p.pool.attrs
    padded, clipped = _avg_window(f"s{nm}", f"e{nm}", f"o{nm}", a["kernel"][j], a["stride"][j], a["padding"][j], p.inp[j])
    return [f"{ind}{padded}", f"{ind}p_full *= e{nm} - s{nm};", f"{ind}{clipped}", f"{ind}p_clip *= e{nm} > s{nm} ? e{nm} - s{nm} : 0;"]


def _window_loops(p: PoolPlan, names: list[str], lines: list[str], ind: str) -> tuple[list[str], list[str], str]:
    """The loops over the window along the pooled dims `names` (the first len(names)): max skips positions
    outside the input, avg walks the clipped range and appends its divisor factors to `lines`. Returns the
    loop heads, their closing braces and the input's linear index over those dims."""
    a, mx = p.pool.attrs, p.pool.attrs["kind"] == "max"
    loops, closes = [], []
    for j, nm in enumerate(names):
        K, S, P, D, IN = a["kernel"][j], a["stride"][j], a["padding"][j], a["dilation"][j], p.inp[j]
        if mx:
            loops.append(f"{ind}for (int k{nm} = 0; k{nm} < {K}; ++k{nm}) {{\n"
                         f"{ind}    const long long i{nm} = o{nm} * {S}LL - {P}LL + (long long)k{nm} * {D}LL;\n"
                         f"{ind}    if (i{nm} < 0 || i{nm} >= {IN}LL) continue;")
        else:
            lines += _avg_counts(p, j, nm, ind)
            loops.append(f"{ind}for (long long i{nm} = s{nm}; i{nm} < e{nm}; ++i{nm}) {{")
        closes.append(f"{ind}}}")
    lin = "p_nc"
    for nm, size in zip(names, p.inp):
        lin = f"({lin} * {size}LL + i{nm})"
    return loops, closes, lin


def _chains(g: OpGraph, p: PoolPlan):
    """The kernel's arguments, and the pointwise chains before the pool (on input element `i`) and after it
    (on output `o_lin`, the pooled value `s_val`): their emitters and values."""
    out = g.output
    args = ", ".join([f"{CTYPE[out.dtype]}* __restrict__ out"] +
                     [f"const {CTYPE[t.dtype]}* __restrict__ {t.name}" for t in g.inputs + g.params])
    pre = Emitter(lambda t, idx: f"to_f({t.name}[{idx}])", prefix="a")
    v_in = pre.value(p.pool.args[0], "i")
    post = Emitter(lambda t, idx: f"to_f({t.name}[{idx}])", lambda n: "s_val" if n is p.pool else None, prefix="o")
    return args, pre, v_in, post, post.value(out, "o_lin")


def render(g: OpGraph, p: PoolPlan, k: PoolKnobs) -> str:
    if k.cols:
        return _render_cols(g, p, k)
    if k.vec > 1 or k.rows > 1:
        return _render_vec(g, p, k)
    if k.ostage:
        raise Unsupported("outputs staged in shared memory need several outputs a thread")
    a, out = p.pool.attrs, g.output
    nd, mx = p.nd, a["kind"] == "max"
    args, pre, v_in, post, v_out = _chains(g, p)
    n_out = p.lead * math.prod(p.out)
    names = ["p_d", "p_h", "p_w"][3 - nd:]
    lines = ["        long long p_r = o_lin;"]
    for nm, size in reversed(list(zip(names, p.out))):
        lines.append(f"        const long long o{nm} = p_r % {size}LL; p_r /= {size}LL;")
    lines.append("        const long long p_nc = p_r;")
    ind = "        "
    if not mx:
        lines.append(f"{ind}long long p_full = 1, p_clip = 1;")
    loops, closes, lin = _window_loops(p, names, lines, ind)
    step = ("s_acc = egg_max(v, s_acc);" if mx else "s_acc += v;")  # a NaN kept
    inner = (f"{ind}    const long long i = {lin};\n{pre.take(ind + '    ')}\n"
             f"{ind}    const float v = {v_in};\n{ind}    {step}")
    if mx:
        fin = "const float s_val = s_acc;"
    elif a["divisor"]:
        fin = f"const float s_val = s_acc / {float(a['divisor'])!r}f;"
    else:
        fin = f"const float s_val = s_acc / (float)({'p_full' if a['count_include_pad'] else 'p_clip'});"
    body = "\n".join(lines + [f"{ind}float s_acc = {'-INFINITY' if mx else '0.0f'};"] + loops + [inner] + closes[::-1]
                     + [f"{ind}{fin}", post.take(ind), f"{ind}out[o_lin] = from_f<{CTYPE[out.dtype]}>({v_out});"])
    head = per_output_head(n_out, k.waves)
    return f"""{PRELUDE}
extern "C" __global__ void __launch_bounds__({k.block}) egg_pool({args}) {{
{head}
{body}
    }}
}}
"""


def _value(p: PoolPlan, acc: str, full: str, clip: str, ind: str) -> list[str]:
    """`s_val`, output o_w's pooled value from its accumulator: max as it is, avg over the divisor, or over its
    window's count along the last dim (from o_w) times the other dims' (`full` with padding, `clip` without)."""
    a = p.pool.attrs
    if a["kind"] == "max":
        return [f"{ind}const float s_val = {acc};"]
    if a["divisor"]:
        return [f"{ind}const float s_val = {acc} / {float(a['divisor'])!r}f;"]
    padded, clipped = _avg_window("sw", "ew", "o_w", a["kernel"][-1], a["stride"][-1], a["padding"][-1], p.inp[-1])
    return [f"{ind}{padded}", f"{ind}const long long fw = ew - sw;", f"{ind}{clipped}",
            f"{ind}const long long cw = ew > sw ? ew - sw : 0;",
            f"{ind}const float s_val = {acc} / (float)({full + ' * fw' if a['count_include_pad'] else clip + ' * cw'});"]


def _render_vec(g: OpGraph, p: PoolPlan, k: PoolKnobs) -> str:
    """`k.vec` consecutive outputs along the last pooled dim a thread: for each window position of the
    other pooled dims, the inputs under all their windows along the last dim are loaded once into
    registers (padding: -inf for max, 0 for avg), then each output folds its own. With `k.rows` > 1 a thread
    also owns that many consecutive outputs along the next-to-last pooled dim: each input row under their
    windows is loaded once, folded along the last dim, and the fold given to every output row holding it."""
    a, out = p.pool.attrs, g.output
    nd, mx, V, R = p.nd, a["kind"] == "max", k.vec, k.rows
    if window_span(p, V) > MAX_WINDOW_REGS:
        raise Unsupported(f"{V} outputs' windows span {window_span(p, V)} inputs (at most {MAX_WINDOW_REGS} in registers)")
    if R > 1 and nd < 2:
        raise Unsupported("rows of outputs a thread need a 2-d or 3-d pool")
    if k.ostage and not stage_ok(p, k):
        raise Unsupported(f"{V * R * k.block} staged outputs a block (at most {MAX_STAGE_FLOATS}), or a block of {k.block} "
                          f"threads not whole groups of {R} output rows")
    args, pre, v_in, post, v_out = _chains(g, p)
    names = ["p_d", "p_h", "p_w"][3 - nd:]
    lead = names[:-1] if R == 1 else names[:-2]  # the dims whose window positions are walked by loops
    OW, CW = p.out[-1], -(-p.out[-1] // V)
    OH, CH = p.out[-2] if nd > 1 else 1, -(-p.out[-2] // R) if nd > 1 else 1
    n_thr = p.lead * math.prod(p.out[:-1]) * CW if R == 1 else p.lead * math.prod(p.out[:-2]) * CH * CW
    KW, SW, PW, DW, IW = a["kernel"][-1], a["stride"][-1], a["padding"][-1], a["dilation"][-1], p.inp[-1]
    NIN = window_span(p, V)
    ind = "        "
    lines = ["        long long p_r = t;", f"        const long long ow0 = (p_r % {CW}LL) * {V}LL; p_r /= {CW}LL;"]
    if R > 1:
        lines.append(f"        const long long oh0 = (p_r % {CH}LL) * {R}LL; p_r /= {CH}LL;")
    for nm, size in reversed(list(zip(lead, p.out))):
        lines.append(f"        const long long o{nm} = p_r % {size}LL; p_r /= {size}LL;")
    init = '-INFINITY' if mx else '0.0f'
    lines += ["        const long long p_nc = p_r;", f"        const long long iw0 = ow0 * {SW}LL - {PW}LL;"]
    if R == 1:
        lines += [f"        float s_acc[{V}];", "        #pragma unroll", f"        for (int jj = 0; jj < {V}; ++jj) s_acc[jj] = {init};"]
    else:
        lines += [f"        float s_acc[{R}][{V}];", "        #pragma unroll", f"        for (int r = 0; r < {R}; ++r) {{",
                  "            #pragma unroll", f"            for (int jj = 0; jj < {V}; ++jj) s_acc[r][jj] = {init};", "        }"]
    if not mx:
        lines.append(f"{ind}long long p_full = 1, p_clip = 1;")
    loops, closes, lin = _window_loops(p, lead, lines, ind)
    if R > 1:  # the input rows under the thread's output rows' windows, each once (unrolled: which output rows take
        # a row is known at compile time); rows in the padding hold nothing for max or avg
        KH, SH, PH, DH, IH = a["kernel"][-2], a["stride"][-2], a["padding"][-2], a["dilation"][-2], p.inp[-2]
        loops.append(f"{ind}#pragma unroll\n{ind}for (int mh = 0; mh < {rows_span(p, R)}; ++mh) {{\n"
                     f"{ind}    const long long ip_h = oh0 * {SH}LL - {PH}LL + mh;\n"
                     f"{ind}    if (ip_h < 0 || ip_h >= {IH}LL) continue;")
        closes.append(f"{ind}}}")
        lin = f"({lin} * {IH}LL + ip_h)"
    step = ("s_acc[jj] = egg_max(v, s_acc[jj]);" if mx else "s_acc[jj] += v;")  # a NaN kept
    pad = "-INFINITY" if mx else "0.0f"
    if loads16(g, p, V):  # from the 16-byte boundary below the first input (the same offset in every thread)
        off = -PW % 4
        n4 = -(-(off + NIN) // 4)
        x = p.pool.args[0].name
        fill = (f"{ind}    float xin[{4 * n4}];\n"
                f"{ind}    #pragma unroll\n{ind}    for (int q = 0; q < {n4}; ++q) {{\n"
                f"{ind}        const long long iw = iw0 - {off}LL + 4LL * q;\n"
                # a piece starts on a multiple of 4 and rows are whole pieces: all inside the row or all padding, so
                # each load is one predicated instruction and a thread's loads can go out back to back (with a scalar
                # path for pieces across the edge beside them task 44 ran 0.77 -> 0.56x compile on the H100)
                f"{ind}        float4 v4 = make_float4({pad}, {pad}, {pad}, {pad});\n"
                f"{ind}        if (iw >= 0 && iw < {IW}LL) v4 = *reinterpret_cast<const float4*>({x} + i_row + iw);\n"
                f"{ind}        xin[4 * q] = v4.x; xin[4 * q + 1] = v4.y; xin[4 * q + 2] = v4.z; xin[4 * q + 3] = v4.w;\n"
                f"{ind}    }}\n")
    else:
        off = 0
        fill = (f"{ind}    float xin[{NIN}];\n"
                f"{ind}    #pragma unroll\n{ind}    for (int m = 0; m < {NIN}; ++m) {{\n"
                f"{ind}        const long long iw = iw0 + m;\n"
                f"{ind}        float v = {pad};\n"
                f"{ind}        if (iw >= 0 && iw < {IW}LL) {{\n{ind}            const long long i = i_row + iw;\n"
                f"{pre.take(ind + '            ')}\n{ind}            v = {v_in};\n{ind}        }}\n"
                f"{ind}        xin[m] = v;\n{ind}    }}\n")
    fold = (f"{ind}    #pragma unroll\n{ind}    for (int jj = 0; jj < {V}; ++jj) {{\n"
            f"{ind}        #pragma unroll\n{ind}        for (int kw = 0; kw < {KW}; ++kw) {{\n"
            f"{ind}            const float v = xin[{off} + jj * {SW} + kw * {DW}];\n{ind}            {{step}}\n{ind}        }}\n{ind}    }}")
    if R == 1:
        inner = f"{ind}    const long long i_row = {lin} * {IW}LL;\n{fill}" + fold.replace("{step}", step)
    else:  # the row folded along the last dim, then given to the output rows whose windows hold it
        inner = (f"{ind}    const long long i_row = {lin} * {IW}LL;\n{fill}{ind}    float s_row[{V}];\n"
                 f"{ind}    #pragma unroll\n{ind}    for (int jj = 0; jj < {V}; ++jj) s_row[jj] = {init};\n"
                 + fold.replace("{step}", step.replace("s_acc[jj]", "s_row[jj]")) + "\n"
                 f"{ind}    #pragma unroll\n{ind}    for (int r = 0; r < {R}; ++r) {{\n"
                 f"{ind}        const int kh = mh - r * {SH};  // this row's place in output row r's window\n"
                 f"{ind}        if (kh < 0 || kh % {DH} != 0 || kh / {DH} >= {KH}) continue;\n"
                 f"{ind}        #pragma unroll\n{ind}        for (int jj = 0; jj < {V}; ++jj) {{\n"
                 f"{ind}            const float v = s_row[jj];\n{ind}            {step.replace('s_acc[jj]', 's_acc[r][jj]')}\n"
                 f"{ind}        }}\n{ind}    }}")
    o_lin = "p_nc"
    for nm, size in zip(names[:-1], p.out[:-1]):
        o_lin = f"({o_lin} * {size}LL + o{nm})"
    si = ind if R == 1 else ind + "    "  # the store loop's indent (inside the loop over output rows)
    acc, full, clip = ("s_acc[jj]", "p_full", "p_clip") if R == 1 else ("s_acc[r][jj]", "q_full", "q_clip")
    store = [f"{si}#pragma unroll", f"{si}for (int jj = 0; jj < {V}; ++jj) {{",
             f"{si}    const long long o_w = ow0 + jj;", f"{si}    if (o_w >= {OW}LL) break;",
             f"{si}    const long long o_lin = {o_lin} * {OW}LL + o_w;"]
    store += _value(p, acc, full, clip, si + "    ")
    # a thread's outputs go where they are, or (`ostage`) into the block's run of them in shared memory (consecutive
    # threads' outputs are consecutive in the output), stored from there by consecutive threads
    put = f"sout[o_lin - ob] = {v_out};" if k.ostage else f"out[o_lin] = from_f<{CTYPE[out.dtype]}>({v_out});"
    store += [post.take(si + "    "), f"{si}    {put}", f"{si}}}"]
    if R > 1:  # the loop over the thread's output rows around it, with each row's share of an avg's divisor
        head = [f"{ind}#pragma unroll", f"{ind}for (int r = 0; r < {R}; ++r) {{", f"{ind}    const long long op_h = oh0 + r;",
                f"{ind}    if (op_h >= {OH}LL) break;"]
        if not mx and not a["divisor"]:
            padded, clipped = _avg_window("sh", "eh", "op_h", KH, SH, PH, IH)
            head += [f"{ind}    {padded}", f"{ind}    const long long q_full = p_full * (eh - sh);", f"{ind}    {clipped}",
                     f"{ind}    const long long q_clip = p_clip * (eh > sh ? eh - sh : 0);"]
        store = head + store + [f"{ind}}}"]
    body = "\n".join(lines + loops + [inner] + closes[::-1] + store)
    if k.ostage:
        if R == 1:
            run = (f"        const long long ob = (t0 / {CW}LL) * {OW}LL + (t0 % {CW}LL) * {V}LL;\n"
                   f"        const long long cnt = (tl / {CW}LL) * {OW}LL + min((tl % {CW}LL) * {V}LL + {V}LL, {OW}LL) - ob;")
        else:  # the block holds whole groups of output rows (stage_ok): from its first group's first row to its last's last
            run = (f"        const long long g0 = t0 / {CW}LL, gl = tl / {CW}LL;\n"
                   f"        const long long ob = (g0 / {CH}LL) * {OH * OW}LL + (g0 % {CH}LL) * {R * OW}LL;\n"
                   f"        const long long cnt = (gl / {CH}LL) * {OH * OW}LL + min((gl % {CH}LL) * {R}LL + {R}LL, {OH}LL) * {OW}LL - ob;")
        loop = f"""    __shared__ float sout[{V * R * k.block}];
    for (long long t0 = (long long)blockIdx.x * blockDim.x; t0 < {n_thr}LL; t0 += (long long)gridDim.x * blockDim.x) {{
        // the block's outputs: from its first thread's first to its last live thread's last, one contiguous run
        const long long tl = min(t0 + (long long)blockDim.x, {n_thr}LL) - 1;
{run}
        const long long t = t0 + threadIdx.x;
        if (t < {n_thr}LL) {{
{body}
        }}
        __syncthreads();
        for (long long q = threadIdx.x; q < cnt; q += blockDim.x) out[ob + q] = from_f<{CTYPE[out.dtype]}>(sout[q]);
        __syncthreads();  // sout free for the next step
    }}"""
    else:
        loop = f"{per_output_head(n_thr, k.waves, 't')}\n{body}\n    }}"
    return f"""{PRELUDE}
extern "C" __global__ void __launch_bounds__({k.block}) egg_pool({args}) {{
{loop}
}}
"""


def _render_cols(g: OpGraph, p: PoolPlan, k: PoolKnobs) -> str:
    """A block an output row (all pooled dims but the last, and the batch and channels): its threads reduce the input
    columns the row's windows read over the windows' other dims (a thread `cols_vec` adjacent columns, so each load
    instruction of a warp reads contiguous memory), into shared memory; then a thread an output folds its window along
    the last dim from there. Each input element is read once where windows do not overlap along the other dims."""
    if not cols_ok(p):
        raise Unsupported(f"a {p.nd}-d pool with {cols_used(p)} input columns an output row (at most {MAX_COLS}, 2-d/3-d)")
    if k.vec > 1 or k.rows > 1 or k.ostage:
        raise Unsupported("the cols mapping takes no vec, rows or ostage")
    a, out = p.pool.attrs, g.output
    nd, mx = p.nd, a["kind"] == "max"
    args, pre, v_in, post, v_out = _chains(g, p)
    names = ["p_d", "p_h", "p_w"][3 - nd:]
    lead = names[:-1]
    CV, NC = cols_vec(g, p), cols_used(p)
    NCP = -(-NC // CV) * CV  # within the row: its length is a multiple of CV where CV is 4
    n_rows = p.lead * math.prod(p.out[:-1])
    KW, SW, PW, DW, IW, OW = a["kernel"][-1], a["stride"][-1], a["padding"][-1], a["dilation"][-1], p.inp[-1], p.out[-1]
    init = "-INFINITY" if mx else "0.0f"
    ind = "        "
    lines = ["        long long p_r = row;"]
    for nm, size in reversed(list(zip(lead, p.out))):
        lines.append(f"        const long long o{nm} = p_r % {size}LL; p_r /= {size}LL;")
    lines.append("        const long long p_nc = p_r;")
    if not mx and not a["divisor"]:
        lines.append(f"{ind}long long p_full = 1, p_clip = 1;")
        for j, nm in enumerate(lead):
            lines += _avg_counts(p, j, nm, ind)
    # the window's positions along the other dims, unrolled (avg's dilation is 1); along the innermost of them the
    # loads are predicated into registers first (outside the input: the fold's identity), so they go out back to back
    loops, closes, ci = [], [], ind + "    "
    for j, nm in enumerate(lead[:-1]):
        K, S, P, D, IN = a["kernel"][j], a["stride"][j], a["padding"][j], a["dilation"][j], p.inp[j]
        loops.append(f"{ci}#pragma unroll\n{ci}for (int k{nm} = 0; k{nm} < {K}; ++k{nm}) {{\n"
                     f"{ci}    const long long i{nm} = o{nm} * {S}LL - {P}LL + (long long)k{nm} * {D}LL;\n"
                     f"{ci}    if (i{nm} < 0 || i{nm} >= {IN}LL) continue;")
        closes.append(f"{ci}}}")
        ci += "    "
    nm, j = lead[-1], len(lead) - 1
    K, S, P, D, IN = a["kernel"][j], a["stride"][j], a["padding"][j], a["dilation"][j], p.inp[j]
    lin = "p_nc"
    for nm2, size in zip(lead, p.inp):
        lin = f"({lin} * {size}LL + i{nm2})"
    step = "c_acc[q] = egg_max(v, c_acc[q]);" if mx else "c_acc[q] += v;"  # a NaN kept
    head = (f"{ci}float xin[{K}][{CV}];\n{ci}#pragma unroll\n{ci}for (int k{nm} = 0; k{nm} < {K}; ++k{nm}) {{\n"
            f"{ci}    const long long i{nm} = o{nm} * {S}LL - {P}LL + (long long)k{nm} * {D}LL;\n")
    if CV == 4:
        x = p.pool.args[0].name
        take = (f"{head}{ci}    float4 v4 = make_float4({init}, {init}, {init}, {init});\n"
                f"{ci}    if (i{nm} >= 0 && i{nm} < {IN}LL) v4 = *reinterpret_cast<const float4*>({x} + {lin} * {IW}LL + c);\n"
                f"{ci}    xin[k{nm}][0] = v4.x; xin[k{nm}][1] = v4.y; xin[k{nm}][2] = v4.z; xin[k{nm}][3] = v4.w;\n{ci}}}\n")
    else:
        take = (f"{head}{ci}    float v = {init};\n{ci}    if (i{nm} >= 0 && i{nm} < {IN}LL) {{\n"
                f"{ci}        const long long i = {lin} * {IW}LL + c;\n{pre.take(ci + '        ')}\n{ci}        v = {v_in};\n"
                f"{ci}    }}\n{ci}    xin[k{nm}][0] = v;\n{ci}}}\n")
    take += (f"{ci}#pragma unroll\n{ci}for (int k{nm} = 0; k{nm} < {K}; ++k{nm}) {{\n{ci}    #pragma unroll\n"
             f"{ci}    for (int q = 0; q < {CV}; ++q) {{ const float v = xin[k{nm}][q]; {step} }}\n{ci}}}")
    phase1 = "\n".join([f"{ind}for (int c = threadIdx.x * {CV}; c < {NCP}; c += blockDim.x * {CV}) {{",
                         f"{ind}    float c_acc[{CV}];", f"{ind}    #pragma unroll",
                         f"{ind}    for (int q = 0; q < {CV}; ++q) c_acc[q] = {init};"]
                        + loops + [take] + closes[::-1]
                        + [f"{ind}    #pragma unroll", f"{ind}    for (int q = 0; q < {CV}; ++q) scol[c + q] = c_acc[q];", f"{ind}}}"])
    o_lin = "p_nc"
    for nm, size in zip(lead, p.out[:-1]):
        o_lin = f"({o_lin} * {size}LL + o{nm})"
    fold = [f"{ind}for (int o_w = threadIdx.x; o_w < {OW}; o_w += blockDim.x) {{", f"{ind}    float s_acc = {init};",
            f"{ind}    #pragma unroll", f"{ind}    for (int kw = 0; kw < {KW}; ++kw) {{",
            f"{ind}        const int iw = o_w * {SW} - {PW} + kw * {DW};",
            f"{ind}        if (iw >= 0 && iw < {NC}) {{ const float v = scol[iw]; "
            + ("s_acc = egg_max(v, s_acc); }" if mx else "s_acc += v; }"), f"{ind}    }}",
            f"{ind}    const long long o_lin = {o_lin} * {OW}LL + o_w;"]
    fold += _value(p, "s_acc", "p_full", "p_clip", ind + "    ")
    fold += [post.take(ind + "    "), f"{ind}    out[o_lin] = from_f<{CTYPE[out.dtype]}>({v_out});", f"{ind}}}"]
    return f"""{PRELUDE}
extern "C" __global__ void __launch_bounds__({k.block}) egg_pool({args}) {{
    __shared__ __align__(16) float scol[{NCP}];
    for (long long row = blockIdx.x; row < {n_rows}LL; row += gridDim.x) {{
{chr(10).join(lines)}
{phase1}
        __syncthreads();
{chr(10).join(fold)}
        __syncthreads();  // scol free for the next row
    }}
}}
"""


def grid(p: PoolPlan, k: PoolKnobs, sms: int, max_threads_per_sm: int) -> int:
    if k.cols:  # a block an output row
        n = p.lead * math.prod(p.out[:-1])
        return int(min(n, sms * max(1, max_threads_per_sm // k.block) * max(k.waves, 1))) if k.waves else int(n)
    n = (p.lead * math.prod(p.out[:-1]) * -(-p.out[-1] // k.vec) if k.rows == 1  # threads: vec outputs a thread along the last dim
         else p.lead * math.prod(p.out[:-2]) * -(-p.out[-2] // k.rows) * -(-p.out[-1] // k.vec))  # rows x vec
    return per_output_grid(n, k.block, k.waves, sms, max_threads_per_sm)
