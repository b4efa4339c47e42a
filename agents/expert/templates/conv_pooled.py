"""A convolution summed (or averaged) over all its positions after a pointwise chain that keeps it from being a
box sum (conv_sum takes the linear chains): level 2 task 67's conv, GELU, global average pool. The conv's output
(2.1 GB at 67's sizes) is never written: its sums come out of the wgmma conv's epilogue.

A block's tile (BM pixels by every channel) spans at most two images (an image has BM pixels or more): per
channel each thread sums its rows by image (the tile's first, or the next), the lanes of a warp that share
the channel by three shuffles (xor 4, 8, 16), the warps through shared memory; the block writes its two
sums a channel to `P[tile][slot][channel]`. A second kernel, `egg_conv_pool`, a thread per (image, channel),
adds its image's tiles' sums in tile order (deterministic, as split-K's) and applies the chain after the sum."""
from __future__ import annotations

import math
from dataclasses import dataclass

from agents.expert.codegen import CTYPE, Emitter
from agents.expert.opgraph import REMAPS, Node, OpGraph, Unsupported
from agents.expert.templates import conv, conv_short
from agents.expert.templates.conv import ConvPlan, plan_of
from agents.expert.templates.conv_rows import MAX_CHANNELS, conv_value, only_conv_and, thread_rows

POOL_BLOCK = 256


@dataclass
class ConvPooledPlan:
    conv: ConvPlan
    reduce: Node  # the sum over every spatial dim of the conv's shape

    @property
    def osp(self) -> int:
        return math.prod(self.conv.out_sp)


def find(g: OpGraph) -> Node | None:
    """The conv whose output (after pointwise steps) a sum over all its spatial dims reduces, if that is all."""
    cs = [n for n in g.nodes if n.kind == "conv"]
    rs = [n for n in g.nodes if n.kind == "reduce"]
    if len(cs) != 1 or len(rs) != 1:
        return None
    cv, r = cs[0], rs[0]
    nd = len(cv.shape) - 2
    ok = r.op == "sum" and tuple(r.dims) == tuple(range(2, 2 + nd)) and tuple(r.args[0].shape) == tuple(cv.shape)
    return cv if ok else None


def plan_conv_pooled(g: OpGraph, BM: int = 128) -> ConvPooledPlan:
    cv = only_conv_and(g, find(g), "sum over its positions")
    r = next(n for n in g.nodes if n.kind == "reduce")
    n_full, n_red = math.prod(cv.shape), cv.shape[0] * cv.shape[1]
    for n in g.nodes:
        if n.kind == "pw" and (n.op in REMAPS or math.prod(n.shape) not in (n_full, n_red)
                               or n.op != "view" and math.prod(n.shape) == n_full and tuple(n.shape) != tuple(cv.shape)):
            raise Unsupported(f"{n.op} of shape {tuple(n.shape)} around the conv's sum")
    if math.prod(g.output.shape) != n_red:
        raise Unsupported("an output other than one value an (image, channel)")
    p = plan_of(cv)
    if p.groups != 1 or p.OC > MAX_CHANNELS or p.phased:
        raise Unsupported(f"a conv of {p.groups} group(s), {p.OC} channels{', by phase' if p.phased else ''}: "
                          f"one group of <= {MAX_CHANNELS}, its tiles in pixel order")
    if conv.default_layout(p) != "nhwc":
        raise Unsupported("a conv the channels-last implicit GEMM does not take first")
    if math.prod(p.out_sp) < BM:
        raise Unsupported(f"images of fewer than {BM} pixels (a tile would span more than two)")
    return ConvPooledPlan(p, r)


def tiles(plan: ConvPooledPlan, k) -> int:
    return -(-plan.conv.M // k.BM)


def partials_node(plan: ConvPooledPlan, k) -> Node:
    """The blocks' sums: (tiles, 2 images, channels) flat."""
    return Node(f"{plan.conv.conv.name}_pooled", "input", shape=(tiles(plan, k) * 2 * plan.conv.OC,), dtype="float32")


def epilogue(g: OpGraph, plan: ConvPooledPlan, k) -> str:
    """The wgmma conv's end: the tile's sums by (image slot, channel) into P (the kernel's `out`)."""
    p, NI, W, T = plan.conv, k.BN // 8, k.BM // 16, k.threads(True)
    osp, OC = plan.osp, p.OC
    rows = "wg * 64 + wq * 16"

    lines = ["    cp_async_wait<0>();", f"    __shared__ float pool_red[{W}][2][{k.BN}];",
             f"    const long long img_a = m0 / {osp}LL;  // the tile's first image (slot 0); the next is slot 1",
             *thread_rows(p, rows),
             f"    #pragma unroll\n    for (int ni = 0; ni < {NI}; ++ni)",
             "        #pragma unroll\n        for (int e = 0; e < 2; ++e) {",
             "            const long long oc = ni * 8 + 2 * t + e;",
             "            float s0 = 0.0f, s1 = 0.0f;"]
    for h in range(2):
        em = Emitter(lambda t, i: f"to_f({t.name}[{i}])", lambda n, h=h: conv_value(p, h) if n is p.conv else None,
                     prefix=f"c{h}_")
        v = em.value(plan.reduce.args[0], "oi")
        lines += [f"            if (live_{h} && oc < {OC}LL) {{",
                  f"                const long long oi = (img_{h} * {OC}LL + oc) * {osp}LL + pix_{h};",
                  *("                " + ln for ln in em.lines),
                  f"                if (img_{h} == img_a) s0 += {v}; else s1 += {v};", "            }"]
    lines += ["            #pragma unroll",
              "            for (int l = 4; l < 32; l <<= 1) {  // the warp's 8 lanes of this column (g), 16 rows",
              "                s0 += __shfl_xor_sync(0xffffffffu, s0, l);",
              "                s1 += __shfl_xor_sync(0xffffffffu, s1, l);", "            }",
              "            if (g == 0) { pool_red[tid >> 5][0][ni * 8 + 2 * t + e] = s0; "
              "pool_red[tid >> 5][1][ni * 8 + 2 * t + e] = s1; }",
              "        }",
              "    __syncthreads();",
              f"    for (int c = tid; c < {2 * OC}; c += {T}) {{  // the warps' sums in warp order",
              f"        const int slot = c / {OC}, ch = c % {OC};",
              "        float s = 0.0f;",
              f"        for (int w = 0; w < {W}; ++w) s += pool_red[w][slot][ch];",
              f"        out[((long long)blockIdx.x * 2 + slot) * {OC}LL + ch] = s;",
              "    }", "}", ""]
    return "\n".join(lines)


def whole_epilogue(g: OpGraph, plan: ConvPooledPlan, k, MI: int, NI: int, TMW: int, TNW: int) -> str:
    """The whole-K conv's (conv_short: mma.sync, a persistent block) end of a tile: its sums by (image slot,
    channel) into P, as `epilogue` does for the wgmma tile. A warp holds TMW rows by TNW channels: each thread sums
    its rows, the 8 lanes of a column by shuffles, the WM warps of a column block in shared memory, in warp order.
    The next tile writes `pool_red` only after the loop's barriers: every thread has read this tile's by then."""
    p, osp, OC, T = plan.conv, plan.osp, plan.conv.OC, k.threads(True)
    em = Emitter(lambda t, i: f"to_f({t.name}[{i}])", lambda n: conv_short.conv_value(p) if n is p.conv else None,
                 prefix="c_")
    v = em.value(plan.reduce.args[0], "oi")
    return "\n".join(
        [f"        __shared__ float pool_red[{k.WM}][2][{k.BN}];",
         f"        const long long img_a = m0 / {osp}LL;  // the tile's first image (slot 0); the next is slot 1",
         *conv_short.column_pass(p, MI, NI, TMW, TNW, ["s0", "s1"],
                                 [*em.lines, f"if (img == img_a) s0 += {v}; else s1 += {v};"], "pool_red"),
         "        __syncthreads();",
         f"        for (int c = tid; c < {2 * k.BN}; c += {T}) {{  // the column blocks' warps in warp order",
         f"            const int slot = c / {k.BN}, ch = c % {k.BN};",
         "            float s = 0.0f;",
         f"            for (int w = 0; w < {k.WM}; ++w) s += pool_red[w][slot][ch];",
         f"            if (n0 + ch < {OC}) out[((long long)tile * 2 + slot) * {OC}LL + n0 + ch] = s;",
         "        }", ""])


def render(g: OpGraph, plan: ConvPooledPlan, k, split: int) -> str:
    """`egg_conv` (the channels-last conv, writing P: the wgmma ring's tile over every channel, or the whole-K
    persistent kernel) and `egg_conv_pool` (P's sums, the chain after)."""
    p = plan.conv
    if math.prod(p.out_sp) < k.BM:
        raise Unsupported(f"images of fewer than {k.BM} pixels")
    args = "float* __restrict__ out, " + conv.kernel_args(g, p).split(", ", 1)[1]
    if k.whole:
        src = conv_short.render(g, p, k, split, args=args,
                                epilogue=lambda MI, NI, TMW, TNW: whole_epilogue(g, plan, k, MI, NI, TMW, TNW))
        return src + pool_source(g, plan, k)
    if not k.wgmma or k.BN < p.OC:
        raise Unsupported("the conv's sums need the warpgroup MMA's tile over every channel")
    src = conv._render(g, p, k, split, "nhwc", args=args, epilogue=epilogue(g, plan, k))
    return src + pool_source(g, plan, k)


def pool_source(g: OpGraph, plan: ConvPooledPlan, k) -> str:
    """`egg_conv_pool(out, P, <the conv's arguments>)`: a thread per (image, channel) adds the sums of the tiles
    its image's pixels lie in, in tile order, then the chain after the sum."""
    p, osp, BM, OC = plan.conv, plan.osp, k.BM, plan.conv.OC
    em = Emitter(lambda t, i: f"to_f({t.name}[{i}])", lambda n: "acc_v" if n is plan.reduce else None, prefix="e")
    v = em.value(g.output, "i")
    args = conv.kernel_args(g, p).split(", ", 1)
    return f"""
extern "C" __global__ void __launch_bounds__({POOL_BLOCK}) egg_conv_pool({args[0]}, const float* __restrict__ P, {args[1]}) {{
    for (long long i = (long long)blockIdx.x * {POOL_BLOCK} + threadIdx.x; i < {p.N * OC}LL; i += (long long)gridDim.x * {POOL_BLOCK}) {{
        const long long img = i / {OC}LL, ch = i % {OC}LL;
        const long long t0 = img * {osp}LL / {BM}LL, t1 = ((img + 1) * {osp}LL - 1) / {BM}LL;
        float acc_v = 0.0f;
        for (long long tl = t0; tl <= t1; ++tl)
            acc_v += P[(tl * 2 + (tl * {BM}LL / {osp}LL == img ? 0 : 1)) * {OC}LL + ch];
{em.take("        ")}
        out[i] = from_f<{CTYPE[g.output.dtype]}>({v});
    }}
}}
"""


def pool_grid(plan: ConvPooledPlan, sms: int) -> tuple[int]:
    return (max(1, min(-(-plan.conv.N * plan.conv.OC // POOL_BLOCK), 16 * sms)),)


def static_bytes(plan: ConvPooledPlan, k) -> int:
    """The epilogue's `pool_red`: two sums a column for each warp (a warp row of them on the whole-K kernel)."""
    return (k.WM if k.whole else k.BM // 16) * 2 * k.BN * 4


def after(plan: ConvPooledPlan, k, tensors: list, sms: int, tpsm: int) -> tuple[Node, list]:
    """The conv kernel writes the tiles' sums; `egg_conv_pool` (reading them and the conv's tensors) the output."""
    part = partials_node(plan, k)
    return part, [("egg_conv_pool", pool_grid(plan, sms), (POOL_BLOCK,), [part] + tensors, None)]


def summary(plan: ConvPooledPlan, k) -> str:
    return (f", its sum over the {plan.osp} positions in the epilogue (by image, a tile's rows by shuffles and its warps "
            f"in shared memory: {tiles(plan, k)} tiles' sums), then a kernel adding them in tile order with the chain "
            f"after the sum; the conv's output never written" + ("" if k.whole else f", {k.stages}-stage cp.async ring"))


def how(plan: ConvPooledPlan) -> str:
    return (f"its sum over the {plan.osp} positions taken in the epilogue (a tile's sums by image), then a kernel adding "
            f"the tiles' sums with the chain after: the conv's output never written")
